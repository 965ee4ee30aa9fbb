// ControlNetModel (SD 1.x / 2.x / XL): config parsing and refusals, the published configs' tensor
// counts (diffusers' ControlNetModel: 361,279,120 / 364,228,240 / 1,251,014,160 parameters), the
// residual layout, the LDM name map, configurations read from shapes (both namings, every family),
// single files refused by kind, loaded with their mapping round-tripped, the scaling inputs, the
// CPU forward (fused = primitive, batch-independent), and diffusers' own residuals on random
// weights (tests/data/controlnet, tools/reference/make_controlnet_fixtures.py).
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "core/formats/Safetensors.h"
#include "core/graph/ModelGraph.h"
#include "core/models/controlnet/ControlNetConfig.h"
#include "core/models/controlnet/ControlNetFileLayout.h"
#include "core/models/controlnet/ControlNetGraph.h"
#include "core/models/controlnet/ControlNetLdmNames.h"
#include "core/models/controlnet/ControlNetModel.h"
#include "core/models/sd/UNetCondConfig.h"
#include "tests/core/GraphTestSupport.h"

using namespace tessera;
using graphtest::inputsFor;
using graphtest::opNamed;
using graphtest::randomVector;
using graphtest::runCpu;
namespace fs = std::filesystem;

namespace {

const std::string kFixtures = std::string(TESSERA_TEST_DATA) + "/controlnet";

// lllyasviel/control_v11f1e_sd15_tile's config.json (diffusers' ControlNetModel defaults).
const char* kSd15Tile = R"({"_class_name": "ControlNetModel", "_diffusers_version": "0.16.0.dev0",
  "act_fn": "silu", "attention_head_dim": 8, "block_out_channels": [320, 640, 1280, 1280],
  "class_embed_type": null, "conditioning_embedding_out_channels": [16, 32, 96, 256],
  "controlnet_conditioning_channel_order": "rgb", "cross_attention_dim": 768,
  "down_block_types": ["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
  "downsample_padding": 1, "flip_sin_to_cos": true, "freq_shift": 0, "global_pool_conditions": false,
  "in_channels": 4, "layers_per_block": 2, "mid_block_scale_factor": 1, "norm_eps": 1e-05, "norm_num_groups": 32,
  "num_class_embeds": null, "only_cross_attention": false, "projection_class_embeddings_input_dim": null,
  "resnet_time_scale_shift": "default", "upcast_attention": false, "use_linear_projection": false})";

nlohmann::json sd21Json() {
    nlohmann::json j = nlohmann::json::parse(kSd15Tile);
    j["attention_head_dim"] = {5, 10, 20, 20};
    j["cross_attention_dim"] = 1024;
    j["use_linear_projection"] = true;
    return j;
}

// As xinsir's and diffusers' SDXL ControlNets.
nlohmann::json sdxlJson() {
    nlohmann::json j = nlohmann::json::parse(kSd15Tile);
    j["block_out_channels"] = {320, 640, 1280};
    j["down_block_types"] = {"DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"};
    j["attention_head_dim"] = {5, 10, 20};
    j["transformer_layers_per_block"] = {1, 2, 10};
    j["cross_attention_dim"] = 2048;
    j["use_linear_projection"] = true;
    j["addition_embed_type"] = "text_time";
    j["addition_time_embed_dim"] = 256;
    j["projection_class_embeddings_input_dim"] = 2816;
    return j;
}

// Small and SD 1.x-shaped where shapes cannot tell (32 groups, 8 heads): readable from shapes alone.
nlohmann::json tinySd1Json() {
    return nlohmann::json::parse(R"({"_class_name": "ControlNetModel", "block_out_channels": [32, 64],
      "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"], "layers_per_block": 2, "norm_num_groups": 32,
      "cross_attention_dim": 24, "attention_head_dim": 8, "conditioning_embedding_out_channels": [4, 8, 8]})");
}

// Odd and small: three levels, Linear projections, per-level heads and depths.
nlohmann::json tinyOddJson() {
    return nlohmann::json::parse(R"({"_class_name": "ControlNetModel", "block_out_channels": [8, 16, 16],
      "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"], "layers_per_block": 1,
      "norm_num_groups": 4, "cross_attention_dim": 12, "attention_head_dim": [1, 2, 4],
      "transformer_layers_per_block": [1, 1, 2], "use_linear_projection": true,
      "conditioning_embedding_out_channels": [4, 8]})");
}

double relativeL2(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return INFINITY;
    double num = 0, den = 0;
    for (std::size_t i = 0; i < b.size(); ++i) {
        num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        den += double(b[i]) * b[i];
    }
    return std::sqrt(num / std::max(den, 1e-300));
}

TensorShapes shapesOf(const TensorList& list, const std::function<std::string(const std::string&)>& rename) {
    TensorShapes shapes;
    for (const auto& [name, shape] : list) shapes.emplace(rename(name), shape);
    return shapes;
}

// The fields a configuration read from shapes must reproduce.
void compareConfigs(const ControlNetConfig& a, const ControlNetConfig& b) {
    QCOMPARE(a.unet.inChannels, b.unet.inChannels);
    QCOMPARE(a.unet.blockOutChannels, b.unet.blockOutChannels);
    QVERIFY(a.unet.downBlocks == b.unet.downBlocks);
    QCOMPARE(a.unet.layersPerBlock, b.unet.layersPerBlock);
    QCOMPARE(a.unet.crossAttentionDim, b.unet.crossAttentionDim);
    QCOMPARE(a.unet.useLinearProjection, b.unet.useLinearProjection);
    QCOMPARE(a.unet.normNumGroups, b.unet.normNumGroups);
    QCOMPARE(a.unet.textTimeDim(), b.unet.textTimeDim());
    QVERIFY(a.midBlock == b.midBlock);
    QCOMPARE(a.conditioningChannels, b.conditioningChannels);
    QCOMPARE(a.conditioningEmbeddingOutChannels, b.conditioningEmbeddingOutChannels);
    for (int i = 0; i < a.unet.levels(); ++i) {
        const auto at = static_cast<std::size_t>(i);
        const bool attends = a.unet.downBlocks[at] == CondDownBlock::CrossAttnDown ||
                             (i + 1 == a.unet.levels() && a.midBlock == ControlNetMidBlock::CrossAttn);
        if (!attends) continue;  // never read
        QCOMPARE(a.unet.attentionHeads[at], b.unet.attentionHeads[at]);
        QCOMPARE(a.unet.transformerLayers[at], b.unet.transformerLayers[at]);
    }
}

// Tensors of `model` as a file holds them (F32, exact), renamed, plus `extra`.
void writeFile(const fs::path& path, const ControlNetModel& model,
               const std::function<std::string(const std::string&)>& rename,
               const std::map<std::string, std::vector<std::int64_t>>& extra = {}) {
    std::map<std::string, SafetensorsTensorData> tensors;
    for (const auto& [name, t] : model.tensors())
        tensors[rename(name)] = {SafetensorsDtype::F32, t.shape, encodeFloats(SafetensorsDtype::F32, t.data)};
    for (const auto& [name, shape] : extra) {
        std::int64_t n = 1;
        for (const auto d : shape) n *= d;
        tensors[name] = {SafetensorsDtype::F32, shape,
                         encodeFloats(SafetensorsDtype::F32, std::vector<float>(static_cast<std::size_t>(n), 0.5f))};
    }
    writeSafetensors(path.string(), tensors, {{"format", "pt"}});
}

void writeFolder(const fs::path& dir, const nlohmann::json& config, const ControlNetModel& model) {
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << config.dump(2);
    writeFile(dir / "diffusion_pytorch_model.safetensors", model, [](const std::string& n) { return n; });
}

QString refusal(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return QString::fromUtf8(e.what());
    }
    return QStringLiteral("(accepted)");
}

// What one ControlNet call gives: the hint graph on the hint, then the trunk.
struct Residuals {
    std::vector<float> hint;
    std::vector<std::vector<float>> outputs;  // down residuals, then the mid one
};

// `inputs`: sample, timestep, encoder_hidden_states (and text_embeds_time), in the trunk's order.
Residuals runControlNet(const ControlNetModel& model, const std::vector<float>& hint, int batch, int h, int w,
                        std::vector<std::vector<float>> inputs, const std::vector<float>& rowScales,
                        const ControlNetGraphOptions& options) {
    const ControlNetConfig& c = model.config();
    const int f = c.hintFactor();
    Residuals r;
    r.hint = runCpu(controlNetHintExecutionGraph(c), model.tensors(), batch, f * h, f * w, {hint})[0];
    const ModelGraph trunk = controlNetExecutionGraph(c, options);
    inputs.push_back(r.hint);
    for (auto& s : conditioningScaleInputs(trunk, rowScales)) inputs.push_back(std::move(s));
    r.outputs = runCpu(trunk, model.tensors(), batch, h, w, inputs);
    return r;
}

}  // namespace

class TestControlNet : public QObject {
    Q_OBJECT

private slots:
    // diffusers' ControlNetModel for these configs: its parameter and tensor counts.
    void publishedConfigs_data() {
        QTest::addColumn<QString>("json");
        QTest::addColumn<qint64>("parameters");
        QTest::addColumn<int>("tensors");
        QTest::addColumn<int>("residuals");
        QTest::addColumn<int>("family");
        QTest::newRow("SD 1.5 tile") << QString(kSd15Tile) << qint64(361'279'120) << 340 << 12 << int(SdFamily::SD1);
        QTest::newRow("SD 2.1") << QString::fromStdString(sd21Json().dump()) << qint64(364'228'240) << 340 << 12
                                << int(SdFamily::SD2);
        QTest::newRow("SDXL") << QString::fromStdString(sdxlJson().dump()) << qint64(1'251'014'160) << 844 << 9
                              << int(SdFamily::SDXL);
    }
    void publishedConfigs() {
        QFETCH(QString, json);
        QFETCH(qint64, parameters);
        QFETCH(int, tensors);
        QFETCH(int, residuals);
        QFETCH(int, family);
        const ControlNetConfig c = controlNetConfigFromJson(nlohmann::json::parse(json.toStdString()));
        QCOMPARE(c.downResiduals(), residuals);
        QCOMPARE(c.hintFactor(), 8);
        QCOMPARE(int(controlNetFamily(c)), family);
        const TensorList list = ControlNetModel::expectedTensors(c);
        QCOMPARE(int(list.size()), tensors);
        std::int64_t n = 0;
        std::set<std::string> names;
        for (const auto& [name, shape] : list) {
            names.insert(name);
            std::int64_t numel = 1;
            for (const auto d : shape) numel *= d;
            n += numel;
        }
        QCOMPARE(n, std::int64_t{parameters});
        QCOMPARE(int(names.size()), tensors);  // hint and trunk graphs declare disjoint names
        const std::map<std::string, std::vector<std::int64_t>> shapes(list.begin(), list.end());
        QCOMPARE(shapes.at("controlnet_cond_embedding.conv_out.weight"),
                 (std::vector<std::int64_t>{320, c.conditioningEmbeddingOutChannels.back(), 3, 3}));
        QCOMPARE(shapes.at("controlnet_down_blocks." + std::to_string(residuals - 1) + ".weight"),
                 (std::vector<std::int64_t>{1280, 1280, 1, 1}));
        QVERIFY(!shapes.count("controlnet_down_blocks." + std::to_string(residuals) + ".weight"));
        QCOMPARE(shapes.at("controlnet_mid_block.weight"), (std::vector<std::int64_t>{1280, 1280, 1, 1}));

        // Residual k's width and resolution, as the graph's outputs hold them (SD 1.5: spec table).
        const ModelGraph g = controlNetExecutionGraph(c);
        QCOMPARE(int(g.outputs().size()), residuals + 1);
        for (int k = 0; k <= residuals; ++k) {
            const GraphValue& v = g.value(g.outputs()[static_cast<std::size_t>(k)]);
            QCOMPARE(v.channels, c.residualChannels(k));
            QCOMPARE(v.divisor, 1 << c.residualLevel(k));
            QCOMPARE(v.name, k < residuals ? "down_block_res_samples." + std::to_string(k) : "mid_block_res_sample");
        }
        if (residuals == 12) {
            const std::vector<int> levels{0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 3};
            for (int k = 0; k <= 12; ++k) QCOMPARE(c.residualLevel(k), levels[static_cast<std::size_t>(k)]);
            QCOMPARE(c.residualChannels(3), 320);
            QCOMPARE(c.residualChannels(4), 640);
        }
        const ModelGraph hint = controlNetHintExecutionGraph(c);
        QCOMPARE(hint.downsampleFactor(), 8);
        QCOMPARE(hint.value(hint.outputs()[0]).channels, 320);
        std::vector<std::string> inputs;
        for (const int v : g.inputs()) inputs.push_back(g.value(v).name);
        std::vector<std::string> want{"sample", "timestep", "encoder_hidden_states"};
        if (family == int(SdFamily::SDXL)) want.push_back("text_embeds_time");
        for (const char* s : {"controlnet_cond_embedding", "conditioning_scale.320", "conditioning_scale.640",
                              "conditioning_scale.1280"})
            want.emplace_back(s);
        QCOMPARE(inputs, want);
    }

    void configRejections_data() {
        QTest::addColumn<QString>("patch");  // merged into tinyOddJson()
        QTest::addColumn<QString>("message");
        QTest::newRow("channel order")
            << R"({"controlnet_conditioning_channel_order": "rbg"})"
            << "controlnet_conditioning_channel_order = \"rbg\": expected \"rgb\" or \"bgr\"";
        QTest::newRow("mid block") << R"({"mid_block_type": "UNetMidBlock2DSimpleCrossAttn"})"
                                   << "expected \"UNetMidBlock2DCrossAttn\" or \"UNetMidBlock2D\"";
        QTest::newRow("no mid block") << R"({"mid_block_type": null})"
                                      << "mid_block_type = null";
        QTest::newRow("hint widths null") << R"({"conditioning_embedding_out_channels": null})"
                                          << "expected a list of widths";
        QTest::newRow("hint widths empty") << R"({"conditioning_embedding_out_channels": []})"
                                           << "conditioning_embedding_out_channels = []";
        QTest::newRow("hint channels") << R"({"conditioning_channels": 0})"
                                       << "conditioning_channels = 0: expected an integer from 1 to 64";
        QTest::newRow("class embedding") << R"({"class_embed_type": "timestep"})"
                                         << "class_embed_type = \"timestep\": class embeddings are not supported";
        QTest::newRow("text embedding") << R"({"addition_embed_type": "text"})"
                                        << "addition_embed_type = \"text\": only null or \"text_time\"";
        QTest::newRow("heads do not divide") << R"({"num_attention_heads": [1, 3, 4]})"
                                             << "3 heads (the entry for level 1) do not divide its 16 channels";
        QTest::newRow("levels") << R"({"down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D"]})"
                                << "down_block_types = [\"DownBlock2D\",\"CrossAttnDownBlock2D\"]: has 2 entries but "
                                   "block_out_channels has 3";
        QTest::newRow("groups") << R"({"norm_num_groups": 3})"
                                << "norm_num_groups = 3: does not divide block_out_channels entry 8";
        QTest::newRow("scale shift") << R"({"resnet_time_scale_shift": "scale_shift"})"
                                     << "only \"default\"";
        QTest::newRow("pooling") << R"({"global_pool_conditions": "yes"})"
                                 << "global_pool_conditions = \"yes\": expected true or false";
    }
    void configRejections() {
        QFETCH(QString, patch);
        QFETCH(QString, message);
        nlohmann::json j = tinyOddJson();
        j.merge_patch(nlohmann::json::parse(patch.toStdString()));
        if (patch.contains("null")) {  // merge_patch removes a key set to null
            const nlohmann::json p = nlohmann::json::parse(patch.toStdString());
            for (const auto& [key, value] : p.items()) j[key] = value;
        }
        const QString what = refusal([&] { (void)controlNetConfigFromJson(j); });
        QVERIFY2(what.startsWith("config.json: "), qPrintable(what));
        QVERIFY2(what.contains(message), qPrintable(what));
    }

    void configKeys() {
        nlohmann::json j = tinyOddJson();
        j["num_attention_heads"] = {2, 4, 8};           // diffusers: num_attention_heads or attention_head_dim
        j["transformer_layers_per_block"] = {0, 1, 2};  // 0 at a level without attention (SDXL small/mid)
        j["mid_block_type"] = "UNetMidBlock2D";
        j["controlnet_conditioning_channel_order"] = "bgr";
        j["global_pool_conditions"] = true;
        j["encoder_hid_dim"] = 64;  // built, never applied by ControlNetModel.forward
        j["conditioning_channels"] = 1;
        j["sample_size"] = 32;  // not a ControlNetModel key: ignored with a warning
        const ControlNetConfig c = controlNetConfigFromJson(j);
        QCOMPARE(c.unet.attentionHeads, (std::vector<int>{2, 4, 8}));
        QCOMPARE(c.unet.transformerLayers, (std::vector<int>{1, 1, 2}));
        QVERIFY(c.midBlock == ControlNetMidBlock::Resnet);
        QVERIFY(c.bgr && c.globalPoolConditions);
        QCOMPARE(c.conditioningChannels, 1);
        QCOMPARE(c.downResiduals(), 6);  // 1 + 3 x 1 + 2
        QCOMPARE(c.hintFactor(), 2);
        const ModelGraph g = buildControlNetGraph(c);
        QVERIFY(opNamed(g, "mid_block.resnets.0.conv1"));
        QVERIFY(!opNamed(g, "mid_block.resnets.1.conv1"));
        QVERIFY(!opNamed(g, "mid_block.attentions.0.proj_in"));
        QVERIFY(opNamed(g, "down_blocks.2.attentions.0.transformer_blocks.1.attn1"));
        QVERIFY(!opNamed(g, "down_blocks.0.attentions.0.proj_in"));
        QCOMPARE(opNamed(g, "down_blocks.2.attentions.0.transformer_blocks.0.attn2")->heads, 8);
        // the defaults are ControlNetModel.__init__'s
        const ControlNetConfig d = controlNetConfigFromJson(nlohmann::json::object());
        QCOMPARE(d.unet.blockOutChannels, (std::vector<int>{320, 640, 1280, 1280}));
        QCOMPARE(d.conditioningEmbeddingOutChannels, (std::vector<int>{16, 32, 96, 256}));
        QCOMPARE(d.unet.crossAttentionDim, 1280);
        QVERIFY(!d.bgr && !d.globalPoolConditions && d.midBlock == ControlNetMidBlock::CrossAttn);
        std::string reason;
        QVERIFY(controlNetFamily(d, &reason) == SdFamily::SD1);  // 1280 wide, 1x1 convolutions
        QVERIFY2(reason.find("1280") != std::string::npos, reason.c_str());
    }

    void unetMismatch() {
        const ControlNetConfig sd15 = controlNetConfigFromJson(nlohmann::json::parse(kSd15Tile));
        UNetCondConfig unet;  // UNet2DConditionModel's defaults: SD 1.x's layout, 1280-wide text
        unet.crossAttentionDim = 768;
        QCOMPARE(controlNetUNetMismatch(sd15, unet), std::string());
        const std::string xl = controlNetUNetMismatch(sd15, sdxlBaseUNetConfig());
        QVERIFY2(xl.find("block_out_channels [320, 640, 1280, 1280] differ from the UNet's [320, 640, 1280]") !=
                     std::string::npos,
                 xl.c_str());
        unet.crossAttentionDim = 1024;
        QVERIFY(controlNetUNetMismatch(sd15, unet).find("cross_attention_dim (text width) 768") != std::string::npos);
        const ControlNetConfig x = controlNetConfigFromJson(sdxlJson());
        QCOMPARE(controlNetUNetMismatch(x, sdxlBaseUNetConfig()), std::string());
    }

    // diffusers' torch.logspace(-1, 0, N + 1).
    void guessModeScales_() {
        const std::vector<float> sd = guessModeScales(12);
        const std::vector<float> want{0.1000f, 0.1212f, 0.1468f, 0.1778f, 0.2154f, 0.2610f, 0.3162f,
                                      0.3831f, 0.4642f, 0.5623f, 0.6813f, 0.8254f, 1.0f};
        QCOMPARE(sd.size(), want.size());
        for (std::size_t k = 0; k < want.size(); ++k) QVERIFY(std::abs(sd[k] - want[k]) < 5e-5f);
        QCOMPARE(sd.back(), 1.0f);
        QCOMPARE(sd.front(), 0.1f);
        const std::vector<float> xl = guessModeScales(9);
        QCOMPARE(xl.size(), std::size_t{10});
        QVERIFY(std::abs(xl[4] - 0.2783f) < 5e-5f);
        QVERIFY(std::abs(xl[8] - 0.7743f) < 5e-5f);
    }

    // ControlNet-v1-1's names (convert_controlnet_checkpoint read backwards), every one distinct.
    void ldmNames() {
        const ControlNetConfig c = controlNetConfigFromJson(nlohmann::json::parse(kSd15Tile));
        const std::map<std::string, std::string> expected{
            {"controlnet_cond_embedding.conv_in.weight", "input_hint_block.0.weight"},
            {"controlnet_cond_embedding.blocks.0.bias", "input_hint_block.2.bias"},
            {"controlnet_cond_embedding.blocks.5.weight", "input_hint_block.12.weight"},
            {"controlnet_cond_embedding.conv_out.weight", "input_hint_block.14.weight"},
            {"controlnet_down_blocks.0.weight", "zero_convs.0.0.weight"},
            {"controlnet_down_blocks.11.bias", "zero_convs.11.0.bias"},
            {"controlnet_mid_block.weight", "middle_block_out.0.weight"},
            {"conv_in.weight", "input_blocks.0.0.weight"},
            {"time_embedding.linear_2.bias", "time_embed.2.bias"},
            {"down_blocks.1.resnets.0.conv1.weight", "input_blocks.4.0.in_layers.2.weight"},
            {"down_blocks.1.resnets.0.conv_shortcut.weight", "input_blocks.4.0.skip_connection.weight"},
            {"down_blocks.2.attentions.1.transformer_blocks.0.attn2.to_k.weight",
             "input_blocks.8.1.transformer_blocks.0.attn2.to_k.weight"},
            {"down_blocks.2.downsamplers.0.conv.weight", "input_blocks.9.0.op.weight"},
            {"down_blocks.3.resnets.1.time_emb_proj.weight", "input_blocks.11.0.emb_layers.1.weight"},
            {"mid_block.resnets.1.norm2.weight", "middle_block.2.out_layers.0.weight"},
            {"mid_block.attentions.0.proj_in.weight", "middle_block.1.proj_in.weight"},
        };
        for (const auto& [name, ldm] : expected) QCOMPARE(controlNetLdmName(name, c), ldm);
        const ControlNetConfig x = controlNetConfigFromJson(sdxlJson());
        QCOMPARE(controlNetLdmName("add_embedding.linear_1.weight", x), std::string("label_emb.0.0.weight"));
        QCOMPARE(controlNetLdmName("controlnet_cond_embedding.blocks.6.weight", c), std::string());  // 6 blocks
        QCOMPARE(controlNetLdmName("up_blocks.0.resnets.0.conv1.weight", c).substr(0, 14),
                 std::string("output_blocks."));  // the UNet's map; ControlNets have no up blocks
        for (const nlohmann::json& j : {nlohmann::json::parse(kSd15Tile), sd21Json(), sdxlJson(), tinyOddJson()}) {
            const ControlNetConfig cfg = controlNetConfigFromJson(j);
            std::set<std::string> seen;
            for (const auto& [name, shape] : ControlNetModel::expectedTensors(cfg)) {
                const std::string ldm = controlNetLdmName(name, cfg);
                QVERIFY2(!ldm.empty(), name.c_str());
                QVERIFY2(seen.insert(ldm).second, ldm.c_str());
            }
        }
    }

    // The configuration the shapes give is the one the tensors came from, in LDM names (with and
    // without control_model.) and diffusers' names, for every family's published layout and the
    // SDXL small variant (no attention, a one-resnet mid block).
    void configFromShapes_data() {
        QTest::addColumn<QString>("json");
        QTest::addColumn<int>("family");
        QTest::newRow("SD 1.5") << QString(kSd15Tile) << int(SdFamily::SD1);
        QTest::newRow("SD 2.1") << QString::fromStdString(sd21Json().dump()) << int(SdFamily::SD2);
        QTest::newRow("SDXL") << QString::fromStdString(sdxlJson().dump()) << int(SdFamily::SDXL);
        nlohmann::json small = sdxlJson();
        small["down_block_types"] = {"DownBlock2D", "DownBlock2D", "DownBlock2D"};
        small["mid_block_type"] = "UNetMidBlock2D";
        QTest::newRow("SDXL small") << QString::fromStdString(small.dump()) << int(SdFamily::SDXL);
        nlohmann::json mid = sdxlJson();
        mid["down_block_types"] = {"DownBlock2D", "DownBlock2D", "CrossAttnDownBlock2D"};
        mid["transformer_layers_per_block"] = {0, 0, 1};
        QTest::newRow("SDXL mid") << QString::fromStdString(mid.dump()) << int(SdFamily::SDXL);
        QTest::newRow("tiny SD 1.x") << QString::fromStdString(tinySd1Json().dump()) << int(SdFamily::SD1);
    }
    void configFromShapes() {
        QFETCH(QString, json);
        QFETCH(int, family);
        const ControlNetConfig c = controlNetConfigFromJson(nlohmann::json::parse(json.toStdString()));
        const TensorList list = ControlNetModel::expectedTensors(c);
        for (const std::string prefix : {"control_model.", ""}) {
            for (const bool ldm : {true, false}) {
                const TensorShapes shapes =
                    shapesOf(list, [&](const std::string& n) { return prefix + (ldm ? controlNetLdmName(n, c) : n); });
                const ControlNetFileLayout layout = detectControlNetLayout(shapes, "'f'");
                QVERIFY(layout.names == (ldm ? ControlNetNames::Ldm : ControlNetNames::Diffusers));
                QCOMPARE(layout.prefix, prefix);
                SdFamily found = SdFamily::SD1;
                std::string reason;
                const ControlNetConfig read = controlNetConfigFromShapes(shapes, layout, "'f'", &found, &reason);
                compareConfigs(read, c);
                QCOMPARE(int(found), family);
                QVERIFY(!reason.empty());
                QVERIFY(ControlNetModel::expectedTensors(read) == list);
            }
        }
    }

    // Files that are not a ControlNet Tessera runs: refused by what they are.
    void refusesOtherFiles_data() {
        QTest::addColumn<QStringList>("names");
        QTest::addColumn<QString>("message");
        QTest::newRow("control-lora") << QStringList{"lora_controlnet", "input_hint_block.0.weight"}
                                      << "a Control-LoRA (it has 'lora_controlnet')";
        QTest::newRow("difference") << QStringList{"difference", "control_model.input_hint_block.0.weight"}
                                    << "a difference ControlNet (it has 'difference')";
        QTest::newRow("union") << QStringList{"task_embedding", "controlnet_cond_embedding.conv_in.weight"}
                               << "a ControlNet++ union model (it has 'task_embedding')";
        QTest::newRow("SD3") << QStringList{"controlnet_blocks.0.weight", "pos_embed.proj.weight"}
                             << "a ControlNet for SD3 or FLUX (it has 'controlnet_blocks.0.weight')";
        QTest::newRow("SD checkpoint") << QStringList{"model.diffusion_model.input_blocks.0.0.weight"}
                                       << "a diffusion model's weights (it has "
                                          "'model.diffusion_model.input_blocks.0.0.weight') without a ControlNet's";
        QTest::newRow("other") << QStringList{"a.weight", "b.weight"}
                               << "not a ControlNet: no 'control_model.input_hint_block.0.weight', "
                                  "'input_hint_block.0.weight' or 'controlnet_cond_embedding.conv_in.weight'; it "
                                  "holds 'a.weight', 'b.weight'";
    }
    void refusesOtherFiles() {
        QFETCH(QStringList, names);
        QFETCH(QString, message);
        TensorShapes shapes;
        for (const QString& n : names) shapes.emplace(n.toStdString(), std::vector<std::int64_t>{1});
        const QString what = refusal([&] { (void)detectControlNetLayout(shapes, "'x.safetensors'"); });
        QVERIFY2(what.startsWith("'x.safetensors': "), qPrintable(what));
        QVERIFY2(what.contains(message), qPrintable(what));
        QVERIFY2(what.contains("Tessera runs ControlNets for Stable Diffusion 1.x, 2.x and XL"), qPrintable(what));
    }

    // A small SD 1.x-shaped ControlNet written as ControlNet 1.1 files are (LDM names under
    // control_model., beside a whole SD model as 1.0 files hold it), as an extracted file and in
    // diffusers' names: each reads back to the same configuration and bits; then broken files.
    void singleFiles() {
        QTemporaryDir tmp;
        const fs::path root(tmp.path().toStdString());
        const ControlNetConfig c = controlNetConfigFromJson(tinySd1Json());
        const ControlNetModel source = ControlNetModel::random(c, 21);
        const auto ldm = [&](const std::string& n) { return "control_model." + controlNetLdmName(n, c); };
        writeFile(root / "control_v11.safetensors", source, ldm,
                  {{"model.diffusion_model.input_blocks.0.0.weight", {32, 4, 3, 3}},
                   {"first_stage_model.encoder.conv_in.weight", {8, 3, 3, 3}}});
        writeFile(root / "extracted.safetensors", source,
                  [&](const std::string& n) { return controlNetLdmName(n, c); });
        writeFile(root / "diffusers.safetensors", source, [](const std::string& n) { return n; });
        for (const char* file : {"control_v11.safetensors", "extracted.safetensors", "diffusers.safetensors"}) {
            const ControlNetModel m = ControlNetModel::load((root / file).string());
            compareConfigs(m.config(), c);
            QCOMPARE(m.tensors().size(), source.tensors().size());
            for (const auto& [name, t] : source.tensors()) QVERIFY2(m.tensors().at(name).data == t.data, name.c_str());
            QVERIFY(m.source().singleFile);
            QVERIFY(m.source().family == SdFamily::SD1);
            QCOMPARE(m.weightsSha256().size(), std::size_t{64});
            QCOMPARE(m.parameterCount(), source.parameterCount());
        }
        const ControlNetModel v11 = ControlNetModel::load((root / "control_v11.safetensors").string());
        QCOMPARE(v11.source().layout.prefix, std::string("control_model."));
        QCOMPARE(v11.source().ignored, (std::vector<std::string>{"first_stage_model.encoder.conv_in.weight",
                                                                 "model.diffusion_model.input_blocks.0.0.weight"}));

        // A tensor of the wrong shape, a missing one, one the configuration has no place for.
        const std::string zero = "controlnet_down_blocks.1.weight";
        writeFile(root / "shape.safetensors", source,
                  [&](const std::string& n) { return n == zero ? std::string("unused") : ldm(n); },
                  {{"control_model.zero_convs.1.0.weight", {32, 32, 3, 3}}});
        QString what = refusal([&] { (void)ControlNetModel::load((root / "shape.safetensors").string()); });
        QVERIFY2(what.contains("shape.safetensors") &&
                     what.contains("'control_model.zero_convs.1.0.weight' (the ControlNet's "
                                   "'controlnet_down_blocks.1.weight'): expected [32, 32, 1, 1], found [32, 32, 3, 3]"),
                 qPrintable(what));
        writeFile(root / "missing.safetensors", source,
                  [&](const std::string& n) { return n == zero ? std::string("unused") : ldm(n); });
        what = refusal([&] { (void)ControlNetModel::load((root / "missing.safetensors").string()); });
        QVERIFY2(what.contains("missing tensor 'control_model.zero_convs.1.0.weight'"), qPrintable(what));
        writeFile(root / "extra.safetensors", source, ldm, {{"control_model.zero_convs.9.0.weight", {64, 64, 1, 1}}});
        what = refusal([&] { (void)ControlNetModel::load((root / "extra.safetensors").string()); });
        QVERIFY2(what.contains("'control_model.zero_convs.9.0.weight' [64, 64, 1, 1] belongs to no part of the "
                               "ControlNet"),
                 qPrintable(what));
        // The family's heads do not fit: say so, and how to give the configuration.
        nlohmann::json odd = tinySd1Json();
        odd["block_out_channels"] = {32, 40};
        odd["norm_num_groups"] = 4;
        const ControlNetConfig oddConfig = controlNetConfigFromJson(odd);
        const ControlNetModel oddModel = ControlNetModel::random(oddConfig, 3);
        writeFile(root / "odd.safetensors", oddModel,
                  [&](const std::string& n) { return controlNetLdmName(n, oddConfig); });
        what = refusal([&] { (void)ControlNetModel::load((root / "odd.safetensors").string()); });
        QVERIFY2(what.contains("the configuration of a Stable Diffusion 1.x ControlNet (GroupNorm groups 32, 8 "
                               "attention heads, sizes from the tensors) does not fit this file: norm_num_groups = 32: "
                               "does not divide block_out_channels entry 40") &&
                     what.contains("Give its config.json"),
                 qPrintable(what));
        fs::create_directories(root / "oddconfig");
        std::ofstream(root / "oddconfig" / "config.json") << odd.dump();
        ControlNetLoadOptions withConfig;
        withConfig.configFolder = (root / "oddconfig").string();
        withConfig.digest = FileDigest::Skip;
        const ControlNetModel read = ControlNetModel::load((root / "odd.safetensors").string(), withConfig);
        QVERIFY(read.weightsSha256().empty());
        QCOMPARE(read.config().unet.normNumGroups, 4);
        QVERIFY(read.source().configSource.find("oddconfig") != std::string::npos);
        what = refusal([&] { (void)ControlNetModel::load((root / "nowhere.pth").string()); });
        QVERIFY2(what.contains("nowhere.pth"), qPrintable(what));
    }

    void folders() {
        QTemporaryDir tmp;
        const fs::path root(tmp.path().toStdString());
        const nlohmann::json config = tinyOddJson();
        const ControlNetModel source = ControlNetModel::random(controlNetConfigFromJson(config), 5);
        writeFolder(root / "pipe" / "controlnet", config, source);
        const ControlNetModel m = ControlNetModel::load((root / "pipe").string());  // a pipeline folder
        QCOMPARE(m.source().path, (root / "pipe" / "controlnet").string());
        QVERIFY(!m.source().singleFile);
        QVERIFY(m.source().family == SdFamily::SD2);  // Linear projections, 12-wide text
        for (const auto& [name, t] : source.tensors()) QVERIFY(m.tensors().at(name).data == t.data);
        nlohmann::json other = config;
        other["_class_name"] = "ControlNetUnionModel";
        writeFolder(root / "union", other, source);
        QString what = refusal([&] { (void)ControlNetModel::load((root / "union").string()); });
        QVERIFY2(what.contains("_class_name is \"ControlNetUnionModel\"; expected \"ControlNetModel\" (ControlNet++ "
                               "union models are not supported)"),
                 qPrintable(what));
        other = config;
        other["conditioning_embedding_out_channels"] = {4, 8, 16};
        writeFolder(root / "widths", other, source);
        what = refusal([&] { (void)ControlNetModel::load((root / "widths").string()); });
        QVERIFY2(what.contains("missing tensor 'controlnet_cond_embedding.blocks.2.weight'"), qPrintable(what));

        // "bgr": the hint encoder takes RGB hints, its weights flipped; the same sums as flipping the hint.
        other = config;
        other["controlnet_conditioning_channel_order"] = "bgr";
        writeFolder(root / "bgr", other, source);
        const ControlNetModel bgr = ControlNetModel::load((root / "bgr").string());
        const int batch = 2, H = 8, W = 12;
        const auto hint = randomVector(std::size_t(batch) * 3 * H * W, 8);
        auto flipped = hint;
        for (int b = 0; b < batch; ++b)
            for (int ch = 0; ch < 3; ++ch)
                std::copy_n(hint.begin() + (b * 3 + ch) * H * W, H * W, flipped.begin() + (b * 3 + 2 - ch) * H * W);
        const ModelGraph g = controlNetHintExecutionGraph(bgr.config());
        const auto a = runCpu(g, bgr.tensors(), batch, H, W, {hint})[0];
        const auto b = runCpu(g, m.tensors(), batch, H, W, {flipped})[0];
        QVERIFY2(relativeL2(a, b) < 1e-6, qPrintable(QString::number(relativeL2(a, b))));
        QVERIFY(relativeL2(runCpu(g, m.tensors(), batch, H, W, {hint})[0], b) > 1e-3);
    }

    // The fused graphs compute what the primitive ones do; a row gets the bits it gets alone; the
    // scale inputs scale rows exactly; residual scales multiply each residual.
    void cpuForward() {
        const ControlNetConfig c = controlNetConfigFromJson(tinyOddJson());
        const ControlNetModel model = ControlNetModel::random(c, 11);
        const int batch = 2, h = 8, w = 12, f = c.hintFactor();
        const auto hint = randomVector(std::size_t(batch) * 3 * f * h * f * w, 4);
        const auto hintPrim = runCpu(buildControlNetHintGraph(c), model.tensors(), batch, f * h, f * w, {hint})[0];
        const auto hintFused = runCpu(controlNetHintExecutionGraph(c), model.tensors(), batch, f * h, f * w, {hint})[0];
        QVERIFY(relativeL2(hintFused, hintPrim) < 1e-6);
        const ModelGraph prim = buildControlNetGraph(c, {7, {}});
        const ModelGraph fused = controlNetExecutionGraph(c, {7, {}});
        QCOMPARE(fused.flops(h, w), prim.flops(h, w));
        std::vector<std::vector<float>> in = inputsFor(prim, batch, h, w, 5);
        in.resize(4);  // sample, timestep, context, hint embedding: then the scales
        in[3] = hintFused;
        for (auto& s : conditioningScaleInputs(prim, {1.0f, 1.0f})) in.push_back(std::move(s));
        const auto a = runCpu(prim, model.tensors(), batch, h, w, in);
        const auto b = runCpu(fused, model.tensors(), batch, h, w, in);
        QCOMPARE(int(b.size()), c.downResiduals() + 1);
        for (std::size_t k = 0; k < a.size(); ++k)
            QVERIFY2(relativeL2(b[k], a[k]) < 1e-5, qPrintable(QString::number(k)));
        std::vector<std::vector<float>> first;
        for (const auto& x : in)
            first.emplace_back(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(x.size() / batch));
        const auto alone = runCpu(fused, model.tensors(), 1, h, w, first);
        for (std::size_t k = 0; k < b.size(); ++k) QVERIFY(std::equal(alone[k].begin(), alone[k].end(), b[k].begin()));

        // Row scales 0.5 and 0: exactly half of row 0's values, row 1 all zero.
        std::vector<std::vector<float>> scaled(in.begin(), in.begin() + 4);
        for (auto& film : conditioningScaleInputs(fused, {0.5f, 0.0f})) scaled.push_back(std::move(film));
        const auto s = runCpu(fused, model.tensors(), batch, h, w, scaled);
        for (std::size_t k = 0; k < b.size(); ++k) {
            std::vector<float> want(b[k]);
            const std::size_t half = want.size() / 2;
            for (std::size_t i = 0; i < want.size(); ++i) want[i] = i < half ? 0.5f * want[i] : 0.0f;
            QVERIFY2(s[k] == want, qPrintable(QString::number(k)));
        }
        // Guess mode's weights on top of the row scale.
        const std::vector<float> weights = guessModeScales(c.downResiduals());
        const auto gm = runCpu(controlNetExecutionGraph(c, {7, weights}), model.tensors(), batch, h, w, in);
        for (std::size_t k = 0; k < b.size(); ++k) {
            std::vector<float> want(b[k]);
            for (float& v : want) v *= weights[k];
            QVERIFY2(relativeL2(gm[k], want) < 1e-6, qPrintable(QString::number(k)));
        }
        // The hint and the text reach the residuals.
        auto other = in;
        for (float& v : other[3]) v = -v;
        QVERIFY(relativeL2(runCpu(fused, model.tensors(), batch, h, w, other).back(), b.back()) > 1e-3);
        other = in;
        for (float& v : other[2]) v = -v;
        QVERIFY(relativeL2(runCpu(fused, model.tensors(), batch, h, w, other).back(), b.back()) > 1e-3);
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, (void)buildControlNetGraph(c, {77, {1.0f, 2.0f}}));
        const std::vector<float> mean = meanOverPixels({1, 2, 3, 4, 10, 20, 30, 40}, 1, 2);
        QCOMPARE(mean, (std::vector<float>{2.5f, 25.0f}));
    }

    // diffusers' ControlNetModel.forward (float64) on the fixtures' random weights, per residual.
    void forwardMatchesDiffusers_data() {
        QTest::addColumn<QString>("name");
        if (!fs::exists(kFixtures + "/cases.json")) {
            QTest::newRow("fixtures") << QString();
            return;
        }
        const nlohmann::json cases = nlohmann::json::parse(std::ifstream(kFixtures + "/cases.json"));
        for (const auto& [name, info] : cases.at("cases").items())
            QTest::newRow(name.c_str()) << QString::fromStdString(name);
    }
    void forwardMatchesDiffusers() {
        if (!fs::exists(kFixtures + "/cases.json"))
            QSKIP("tests/data/controlnet/cases.json is missing (tools/reference/make_controlnet_fixtures.py makes it)");
        QFETCH(QString, name);
        const nlohmann::json cases = nlohmann::json::parse(std::ifstream(kFixtures + "/cases.json"));
        const nlohmann::json& info = cases.at("cases").at(name.toStdString());
        ControlNetLoadOptions options;
        if (info.contains("config_folder"))
            options.configFolder = kFixtures + "/" + info.at("config_folder").get<std::string>();
        const std::string path =
            kFixtures + "/" + (info.contains("folder") ? info.at("folder") : info.at("file")).get<std::string>();
        const ControlNetModel model = ControlNetModel::load(path, options);
        const ControlNetConfig& c = model.config();
        QCOMPARE(model.parameterCount(), info.at("parameters").get<std::int64_t>());
        QCOMPARE(ControlNetModel::expectedTensors(c).size(), info.at("tensors").get<std::size_t>());
        QCOMPARE(model.source().singleFile, info.at("layout") == "ldm");
        if (model.source().singleFile) QVERIFY(model.source().layout.names == ControlNetNames::Ldm);
        if (name == "ldm") {
            QCOMPARE(model.source().layout.prefix, std::string("control_model."));
            QVERIFY2(model.source().reader.find("PyTorch checkpoint") != std::string::npos,
                     model.source().reader.c_str());
            QVERIFY(model.source().family == SdFamily::SD1);
        }

        SafetensorsFile io(kFixtures + "/" + info.at("forward").get<std::string>());
        const auto& shape = io.find("sample")->shape;
        const int batch = int(shape[0]), h = int(shape[2]), w = int(shape[3]);
        const int tokens = int(io.find("encoder_hidden_states")->shape[1]);
        std::vector<std::vector<float>> inputs{io.readFloat32("sample"), io.readFloat32("timestep"),
                                               io.readFloat32("encoder_hidden_states")};
        if (c.unet.hasTextTime()) {
            const auto text = io.readFloat32("text_embeds"), ids = io.readFloat32("time_ids");
            const std::size_t pooled = text.size() / batch, nIds = ids.size() / batch;
            std::vector<float> rows;
            for (int b = 0; b < batch; ++b) {
                const auto row = textTimeEmbeds(c.unet, {text.begin() + b * pooled, text.begin() + (b + 1) * pooled},
                                                {ids.begin() + b * nIds, ids.begin() + (b + 1) * nIds});
                rows.insert(rows.end(), row.begin(), row.end());
            }
            inputs.push_back(rows);
        }
        for (const auto& [set, how] : info.at("sets").items()) {
            const float scale = how.at("conditioning_scale").get<float>();
            ControlNetGraphOptions graphOptions{tokens, {}};
            if (how.at("guess_mode").get<bool>() && !c.globalPoolConditions)
                graphOptions.residualScales = guessModeScales(c.downResiduals());
            const Residuals r = runControlNet(model, io.readFloat32("controlnet_cond"), batch, h, w, inputs,
                                              std::vector<float>(static_cast<std::size_t>(batch), scale), graphOptions);
            const double hintError = relativeL2(r.hint, io.readFloat32("hint_embedding"));
            QVERIFY2(hintError <= 1e-5, qPrintable(QString("hint embedding: relative L2 %1").arg(hintError)));
            const int N = c.downResiduals();
            QCOMPARE(how.at("down").get<int>(), N);
            double worst = 0;
            for (int k = 0; k <= N; ++k) {
                const std::string key = k < N ? set + ".down." + std::to_string(k) : set + ".mid";
                std::vector<float> mine = r.outputs[static_cast<std::size_t>(k)];
                if (c.globalPoolConditions) mine = meanOverPixels(mine, batch, c.residualChannels(k));
                const double e = relativeL2(mine, io.readFloat32(key));
                worst = std::max(worst, e);
                QVERIFY2(e <= 1e-5, qPrintable(QString("%1: relative L2 %2").arg(QString::fromStdString(key)).arg(e)));
            }
            qInfo("%s/%s: %d residuals, worst relative L2 %.2e", qPrintable(name), set.c_str(), N + 1, worst);
        }
    }
};

QTEST_GUILESS_MAIN(TestControlNet)
#include "tst_controlnet.moc"
