// The Stable Diffusion XL UNet (diffusers UNet2DConditionModel with addition_embed_type
// "text_time"): config parsing of the text-time keys and their rejections, the SDXL base graph
// (diffusers' parameter count, depths 1/2/10 per level, the add_embedding), the text_embeds_time
// vector, the CPU forward against diffusers' own outputs (tests/data/sdxlunet,
// tools/reference/make_sdxl_unet_fixtures.py), the per-tile added conditioning through the one
// tiled loop (StableDiffusionXLPipeline._get_add_time_ids: image and tile size ids, both branches
// of guidance) and the SDXL VAE's float32 upcast.
#include <QtTest>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "core/cpu/CpuBackend.h"
#include "core/cpu/CpuTileDevice.h"
#include "core/formats/Safetensors.h"
#include "core/graph/ModelGraph.h"
#include "core/models/sd/SdModel.h"
#include "core/models/sd/SdPipeline.h"
#include "core/models/sd/UNetCondConfig.h"
#include "core/models/sd/UNetCondGraph.h"
#include "core/models/sd/UNetCondModel.h"
#include "core/sampling/Scheduler.h"
#include "core/sampling/StepUpdate.h"
#include "core/sampling/TiledLoop.h"
#include "tests/core/GraphTestSupport.h"
#include "tests/core/NumericCompare.h"

using namespace tessera;
using graphtest::fusedForwardMismatch;
using graphtest::inputsFor;
using graphtest::opNamed;
using graphtest::randomVector;
using graphtest::runCpu;
namespace fs = std::filesystem;

namespace {

// stabilityai/stable-diffusion-xl-base-1.0 unet/config.json (the keys diffusers writes, with the
// published values).
const char* kSdxlBase = R"({"_class_name": "UNet2DConditionModel", "_diffusers_version": "0.19.0.dev0",
  "act_fn": "silu", "addition_embed_type": "text_time", "addition_embed_type_num_heads": 64,
  "addition_time_embed_dim": 256, "attention_head_dim": [5, 10, 20], "block_out_channels": [320, 640, 1280],
  "center_input_sample": false, "class_embed_type": null, "class_embeddings_concat": false, "conv_in_kernel": 3,
  "conv_out_kernel": 3, "cross_attention_dim": 2048, "cross_attention_norm": null,
  "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"], "downsample_padding": 1,
  "dual_cross_attention": false, "encoder_hid_dim": null, "encoder_hid_dim_type": null, "flip_sin_to_cos": true,
  "freq_shift": 0, "in_channels": 4, "layers_per_block": 2, "mid_block_only_cross_attention": null,
  "mid_block_scale_factor": 1, "mid_block_type": "UNetMidBlock2DCrossAttn", "norm_eps": 1e-05,
  "norm_num_groups": 32, "num_attention_heads": null, "num_class_embeds": null, "only_cross_attention": false,
  "out_channels": 4, "projection_class_embeddings_input_dim": 2816, "resnet_out_scale_factor": 1.0,
  "resnet_skip_time_act": false, "resnet_time_scale_shift": "default", "sample_size": 128,
  "time_cond_proj_dim": null, "time_embedding_act_fn": null, "time_embedding_dim": null,
  "time_embedding_type": "positional", "timestep_post_act": null, "transformer_layers_per_block": [1, 2, 10],
  "up_block_types": ["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"], "upcast_attention": null,
  "use_linear_projection": true})";

// The fixtures' shape (make_sdxl_unet_fixtures.py CONFIG) with the given context width.
nlohmann::json tinyConfig(int crossAttentionDim = 80) {
    nlohmann::json j = nlohmann::json::parse(R"({"_class_name": "UNet2DConditionModel", "sample_size": 16,
      "block_out_channels": [8, 16, 16], "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D",
      "CrossAttnDownBlock2D"], "up_block_types": ["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"],
      "layers_per_block": 2, "transformer_layers_per_block": [1, 2, 2], "attention_head_dim": [2, 4, 4],
      "use_linear_projection": true, "addition_embed_type": "text_time", "addition_time_embed_dim": 8,
      "projection_class_embeddings_input_dim": 96, "norm_num_groups": 8})");
    j["cross_attention_dim"] = crossAttentionDim;
    return j;
}
constexpr int kPooled = 48;  // 96 - 6 x 8

const std::string kFixtures = std::string(TESSERA_TEST_DATA) + "/sdxlunet";
const std::string kSdPipeline = std::string(TESSERA_TEST_DATA) + "/sdpipeline/sd1";
const std::string kVocabulary = std::string(TESSERA_SOURCE_DIR) + "/resources/clip/bpe_simple_vocab_16e6.txt.gz";

// max |a - b| / max |b|.
double relativeMax(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return INFINITY;
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < b.size(); ++i) {
        diff = std::max(diff, std::abs(double(a[i]) - b[i]));
        scale = std::max(scale, std::abs(double(b[i])));
    }
    return diff / std::max(scale, 1e-300);
}

std::string configError(const nlohmann::json& j) {
    try {
        (void)unetCondConfigFromJson(j);
    } catch (const std::runtime_error& e) {
        return e.what();
    }
    return "<accepted>";
}

// A Backend that runs the CPU reference and keeps every call's inputs and outputs (the tiled
// loop's UNet evaluations, in the order the device issued them).
class RecordingBackend final : public Backend {
public:
    struct Call {
        int batch = 0;
        std::vector<std::vector<float>> inputs;
        std::vector<float> output;
    };
    std::vector<Call> calls;

    BackendInfo info() const override { return inner_.info(); }
    void prepareGraph(const ModelGraph& graph, const TensorMap& weights, int batch, int tileH, int tileW) override {
        graph_ = &graph;
        tileH_ = tileH;
        tileW_ = tileW;
        inner_.prepareGraph(graph, weights, batch, tileH, tileW);
    }
    void run(const std::vector<const float*>& inputs, int batch, const std::vector<float*>& outputs) override {
        inner_.run(inputs, batch, outputs);
        Call call;
        call.batch = batch;
        for (std::size_t k = 0; k < inputs.size(); ++k) {
            const auto n = static_cast<std::size_t>(graph_->elements(graph_->inputs()[k], batch, tileH_, tileW_));
            call.inputs.emplace_back(inputs[k], inputs[k] + n);
        }
        const auto n = static_cast<std::size_t>(graph_->elements(graph_->outputs()[0], batch, tileH_, tileW_));
        call.output.assign(outputs[0], outputs[0] + n);
        calls.push_back(std::move(call));
    }
    void prepare(const UNetModel&, int, int, int) override { throw std::logic_error("RecordingBackend: UNet2DModel"); }
    void forward(const float*, const float*, int, float*) override {
        throw std::logic_error("RecordingBackend: UNet2DModel");
    }

private:
    CpuBackend inner_{2};
    const ModelGraph* graph_ = nullptr;
    int tileH_ = 0, tileW_ = 0;
};

class Silent : public RunObserver {};

// The SD 1.x test pipeline (tests/data/sdpipeline/sd1: an 8-wide CLIP, a tiny VAE with
// force_upcast) with a tiny SDXL-shaped UNet of context width 8 in place of its own.
std::shared_ptr<SdModel> tinySdxlPipeline(std::uint64_t seed) {
    auto sd = std::make_shared<SdModel>(loadSdModel(kSdPipeline));
    const UNetCondConfig c = unetCondConfigFromJson(tinyConfig(8));
    sd->unet = std::make_shared<const UNetCondModel>(UNetCondModel::random(c, seed));
    return sd;
}

RunConfig tinySdxlRun(int width, int height, int tile) {
    RunConfig config;
    config.width = width;
    config.height = height;
    config.tile = tile;
    config.overlapPx = 32;
    config.steps = 2;
    config.scheduler = SchedulerKind::DDIM;
    config.prompt = "a lighthouse at dusk";
    config.negativePrompt = "fog";
    config.cfgScale = 5.0;
    config.precision = Precision::FP16;  // the CPU computes float32; the VAE rule reads what was asked
    config.backend = BackendKind::CPU;
    config.previewEvery = 0;
    return config;
}

}  // namespace

class TestSdxlUNet : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() { setBundledClipVocabulary(kVocabulary); }

    // SDXL base: diffusers' 2,567,463,684 parameters in 1680 tensors, the depths
    // per level (down and mid as given, up reversed), heads, the add_embedding and its input.
    void sdxlBaseConfig() {
        const UNetCondConfig parsed = unetCondConfigFromJson(nlohmann::json::parse(kSdxlBase));
        const UNetCondConfig preset = sdxlBaseUNetConfig();
        QCOMPARE(parsed.additionEmbedType, std::string("text_time"));
        QCOMPARE(parsed.additionTimeEmbedDim, 256);
        QCOMPARE(parsed.projectionClassEmbeddingsInputDim, std::optional<int>(2816));
        QCOMPARE(parsed.transformerLayers, (std::vector<int>{1, 2, 10}));
        QCOMPARE(parsed.attentionHeads, (std::vector<int>{5, 10, 20}));
        QCOMPARE(parsed.textTimeDim(), 2816);
        const ModelGraph g = buildUNet2DConditionGraph(preset);
        QCOMPARE(g.parameterList(), buildUNet2DConditionGraph(parsed).parameterList());
        QCOMPARE(g.parameterCount(), std::int64_t{2'567'463'684});
        QCOMPARE(g.parameterList().size(), std::size_t{1680});
        const auto list = g.parameterList();
        const std::map<std::string, std::vector<std::int64_t>> shapes(list.begin(), list.end());
        QCOMPARE(shapes.at("add_embedding.linear_1.weight"), (std::vector<std::int64_t>{1280, 2816}));
        QCOMPARE(shapes.at("add_embedding.linear_2.weight"), (std::vector<std::int64_t>{1280, 1280}));
        QCOMPARE(shapes.at("down_blocks.1.attentions.0.transformer_blocks.0.attn2.to_k.weight"),
                 (std::vector<std::int64_t>{640, 2048}));
        int shortcuts = 0;
        for (const auto& [name, shape] : list) shortcuts += name.ends_with("conv_shortcut.weight");
        QCOMPARE(shortcuts, 11);  // 2 down + 9 up
        // Depth per level: down 1 (none at level 0), 2, 10; mid 10; up reversed: 10, 2, none.
        auto depth = [&](const std::string& attention) {
            int k = 0;
            while (opNamed(g, attention + ".transformer_blocks." + std::to_string(k) + ".attn1")) ++k;
            return k;
        };
        QCOMPARE(depth("down_blocks.0.attentions.0"), 0);
        QCOMPARE(depth("down_blocks.1.attentions.1"), 2);
        QCOMPARE(depth("down_blocks.2.attentions.0"), 10);
        QCOMPARE(depth("mid_block.attentions.0"), 10);
        QCOMPARE(depth("up_blocks.0.attentions.2"), 10);
        QCOMPARE(depth("up_blocks.1.attentions.0"), 2);
        QCOMPARE(depth("up_blocks.2.attentions.0"), 0);
        QCOMPARE(opNamed(g, "up_blocks.0.attentions.0.transformer_blocks.9.attn2")->heads, 20);
        QCOMPARE(opNamed(g, "up_blocks.1.attentions.2.transformer_blocks.1.attn1")->heads, 10);
        // Inputs: sample, timestep, the 77 x 2048 context and the 2816-wide text_embeds_time.
        QCOMPARE(g.inputs().size(), std::size_t{4});
        const GraphValue& v = g.value(g.inputs()[3]);
        QCOMPARE(v.name, std::string("text_embeds_time"));
        QVERIFY(v.kind == ValueKind::Vector);
        QCOMPARE(v.channels, 2816);
        QCOMPARE(g.value(g.inputs()[2]).channels, 2048);
        // At 1024 px (latent 128) attention runs on 4096 tokens (640) and 1024 (1280).
        const ModelGraph f = unet2DConditionExecutionGraph(preset);
        QCOMPARE(f.rows(opNamed(f, "down_blocks.1.attentions.0.transformer_blocks.0.attn1")->input, 128, 128),
                 std::int64_t{4096});
        QCOMPARE(f.rows(opNamed(f, "mid_block.attentions.0.transformer_blocks.0.attn1")->input, 128, 128),
                 std::int64_t{1024});
        QCOMPARE(f.downsampleFactor(), 4);
        // The add_embedding adds FLOPs (2 x (2816 + 1280) x 1280 per sample); the rest is the SD graph's rule.
        UNetCondConfig plain = preset;
        plain.additionEmbedType.clear();
        QCOMPARE(buildUNet2DConditionGraph(preset).flops(128, 128) - buildUNet2DConditionGraph(plain).flops(128, 128),
                 2.0 * (2816.0 + 1280.0) * 1280.0);
    }

    void textTimeRejections_data() {
        QTest::addColumn<QString>("patch");  // its keys set in tinyConfig()
        QTest::addColumn<QString>("message");
        QTest::newRow("Kandinsky text") << R"({"addition_embed_type": "text"})"
                                        << "addition_embed_type = \"text\": only null or \"text_time\" (SDXL)";
        QTest::newRow("not a string") << R"({"addition_embed_type": 3})"
                                      << "addition_embed_type = 3:";
        QTest::newRow("no time dim") << R"({"addition_time_embed_dim": null})"
                                     << "addition_time_embed_dim = null: addition_embed_type \"text_time\" needs";
        QTest::newRow("odd time dim") << R"({"addition_time_embed_dim": 7})"
                                      << "addition_time_embed_dim = 7: must be even";
        QTest::newRow("time dim range") << R"({"addition_time_embed_dim": 0})"
                                        << "addition_time_embed_dim = 0: expected an integer from 2 to 4096";
        QTest::newRow("no projection")
            << R"({"projection_class_embeddings_input_dim": null})"
            << "projection_class_embeddings_input_dim = null: addition_embed_type \"text_time\" needs";
        QTest::newRow("projection too small") << R"({"projection_class_embeddings_input_dim": 48})"
                                              << "projection_class_embeddings_input_dim = 48: must exceed 6 x "
                                                 "addition_time_embed_dim = 48";
        QTest::newRow("projection range")
            << R"({"projection_class_embeddings_input_dim": 70000})"
            << "projection_class_embeddings_input_dim = 70000: expected an integer from 1 to 65536";
        QTest::newRow("depth list length")
            << R"({"transformer_layers_per_block": [1, 2]})"
            << "transformer_layers_per_block = [1,2]: has 2 entries but block_out_channels has 3";
    }
    void textTimeRejections() {
        QFETCH(QString, patch);
        QFETCH(QString, message);
        nlohmann::json j = tinyConfig();
        const nlohmann::json changes = nlohmann::json::parse(patch.toStdString());
        for (const auto& [key, value] : changes.items()) j[key] = value;  // nulls kept (merge_patch drops them)
        const std::string error = configError(j);
        QVERIFY2(QString::fromStdString(error).startsWith("config.json: "), error.c_str());
        QVERIFY2(QString::fromStdString(error).contains(message), error.c_str());
    }

    void textTimeDefaults() {
        // Without the key the UNet has no text-time input; the SD 1.x / 2.x graph is unchanged.
        nlohmann::json plain = tinyConfig();
        plain.erase("addition_embed_type");
        const UNetCondConfig c = unetCondConfigFromJson(plain);
        QVERIFY(!c.hasTextTime());
        QCOMPARE(c.textTimeDim(), 0);
        QCOMPARE(buildUNet2DConditionGraph(c).inputs().size(), std::size_t{3});
        QVERIFY(!opNamed(buildUNet2DConditionGraph(c), "add_embedding.linear_1"));
        // diffusers writes null for a UNet without it; _use_default_values resets a key to null.
        plain["addition_embed_type"] = nullptr;
        plain["projection_class_embeddings_input_dim"] = nullptr;
        QVERIFY(!unetCondConfigFromJson(plain).hasTextTime());
        nlohmann::json reset = tinyConfig();
        reset["_use_default_values"] = nlohmann::json::array({"addition_time_embed_dim"});
        QVERIFY(QString::fromStdString(configError(reset)).contains("addition_time_embed_dim"));
    }

    // text_embeds_time = pooled ++ [cos(id f_i), sin(id f_i)] per id, f_i = 10000^(-i / (D/2)).
    void textTimeEmbedsValues() {
        const UNetCondConfig c = unetCondConfigFromJson(tinyConfig());
        const std::vector<float> pooled = randomVector(kPooled, 3);
        const std::vector<float> ids{1024, 768, 64, 32, 512, 1344};
        const std::vector<float> v = textTimeEmbeds(c, pooled, ids);
        QCOMPARE(v.size(), std::size_t{96});
        QVERIFY(std::equal(pooled.begin(), pooled.end(), v.begin()));
        for (std::size_t k = 0; k < ids.size(); ++k)
            for (int i = 0; i < 4; ++i) {
                const double arg = ids[k] * std::pow(10000.0, -i / 4.0);
                const float* e = v.data() + kPooled + 8 * k;
                QVERIFY2(std::abs(e[i] - std::cos(arg)) < 1e-3 && std::abs(e[4 + i] - std::sin(arg)) < 1e-3,
                         qPrintable(QString("id %1 frequency %2").arg(k).arg(i)));
            }
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, (void)textTimeEmbeds(c, randomVector(kPooled + 1, 3), ids));
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, (void)textTimeEmbeds(c, pooled, {1, 2, 3, 4, 5}));
        nlohmann::json plain = tinyConfig();
        plain.erase("addition_embed_type");
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument,
                                 (void)textTimeEmbeds(unetCondConfigFromJson(plain), pooled, ids));
    }

    // The fused graph computes what the primitive one does, a tile batch gives each sample the bits
    // it gets alone, and text_embeds_time reaches the output.
    void cpuForward() {
        const UNetCondConfig c = unetCondConfigFromJson(tinyConfig());
        const UNetCondModel model = UNetCondModel::random(c, 11);
        const ModelGraph prim = buildUNet2DConditionGraph(c, 7);
        const ModelGraph fused = fuseForExecution(prim);
        const int batch = 2, h = 8, w = 12;
        const QString m =
            fusedForwardMismatch(prim, fused, model.tensors(), batch, h, w, inputsFor(prim, batch, h, w, 5), 3);
        QVERIFY2(m.isEmpty(), qPrintable(m));
        // The model's parameters are the graph's; a folder without add_embedding is refused naming it.
        std::map<std::string, HostTensor> tensors = model.tensors();
        tensors.erase("add_embedding.linear_2.bias");
        try {
            (void)UNetCondModel::fromTensors(c, tensors, WeightsDigest::Skip);
            QFAIL("accepted without add_embedding.linear_2.bias");
        } catch (const ModelError& e) {
            QVERIFY2(QString(e.what()).contains("add_embedding.linear_2.bias"), e.what());
        }
    }

    // diffusers' UNet2DConditionModel (tiny SDXL shape) on the same F16 weights: the text_embeds_time
    // its add_time_proj made, its intermediates and its output (float64 forward).
    void forwardMatchesDiffusers_data() {
        QTest::addColumn<QString>("input");
        if (!fs::exists(kFixtures + "/cases.json")) {  // fails below, naming what is missing
            QTest::newRow("fixtures") << QString();
            return;
        }
        const nlohmann::json cases = nlohmann::json::parse(std::ifstream(kFixtures + "/cases.json"));
        for (const auto& [name, info] : cases.at("inputs").items())
            QTest::newRow(name.c_str()) << QString::fromStdString(name);
    }
    void forwardMatchesDiffusers() {
        QVERIFY2(fs::exists(kFixtures + "/cases.json"),
                 "tests/data/sdxlunet/cases.json is missing (tools/reference/make_sdxl_unet_fixtures.py makes it)");
        QFETCH(QString, input);
        const nlohmann::json cases = nlohmann::json::parse(std::ifstream(kFixtures + "/cases.json"));
        const UNetCondModel model = UNetCondModel::load(kFixtures + "/unet");
        QVERIFY(model.config().hasTextTime());
        SafetensorsFile weights(kFixtures + "/unet/diffusion_pytorch_model.safetensors");
        std::set<std::string> inFile, inGraph;
        for (const auto& info : weights.tensors()) inFile.insert(info.name);
        for (const auto& [name, shape] : UNetCondModel::expectedTensors(model.config())) inGraph.insert(name);
        QVERIFY(inFile == inGraph);
        QCOMPARE(inGraph.size(), cases.at("tensors").get<std::size_t>());
        QCOMPARE(model.parameterCount(), cases.at("parameters").get<std::int64_t>());

        SafetensorsFile io(kFixtures + "/forward_" + input.toStdString() + ".safetensors");
        const auto& shape = io.find("sample")->shape;
        const int batch = static_cast<int>(shape[0]), h = static_cast<int>(shape[2]), w = static_cast<int>(shape[3]);
        // text_embeds_time made here from text_embeds and time_ids, as diffusers made it.
        const auto pooled = io.readFloat32("text_embeds"), ids = io.readFloat32("time_ids");
        const auto reference = io.readFloat32("text_embeds_time");
        std::vector<float> vectors;
        const std::size_t P = pooled.size() / batch, I = ids.size() / batch;
        for (int b = 0; b < batch; ++b) {
            const std::vector<float> p(pooled.begin() + b * P, pooled.begin() + (b + 1) * P);
            const std::vector<float> t(ids.begin() + b * I, ids.begin() + (b + 1) * I);
            const std::vector<float> v = textTimeEmbeds(model.config(), p, t);
            vectors.insert(vectors.end(), v.begin(), v.end());
        }
        QVERIFY2(relativeMax(vectors, reference) < 1e-5, qPrintable(QString::number(relativeMax(vectors, reference))));

        const int tokens = static_cast<int>(io.find("encoder_hidden_states")->shape[1]);
        ModelGraph g = buildUNet2DConditionGraph(model.config(), tokens);
        const std::map<std::string, std::string> hookValue{
            {"hook.time_embedding", "time_embedding.linear_2"},
            {"hook.add_embedding", "add_embedding.linear_2"},
            {"hook.conv_in", "conv_in"},
            {"hook.down_blocks.1.attentions.0", "down_blocks.1.attentions.0"},
            {"hook.down_blocks.2", "down_blocks.2.attentions.1"},
            {"hook.mid_block", "mid_block.resnets.1"},
            {"hook.up_blocks.0", "up_blocks.0.upsamplers.0"},
            {"hook.up_blocks.1", "up_blocks.1.upsamplers.0"},
            {"hook.conv_norm_out", "conv_norm_out"}};
        std::vector<std::string> hooks;
        for (const auto& [hook, value] : hookValue)
            if (io.has(hook))
                for (std::size_t v = 0; v < g.values().size(); ++v)
                    if (g.values()[v].name == value) {
                        g.markOutput(static_cast<int>(v));
                        hooks.push_back(hook);
                    }
        QCOMPARE(hooks.size(), cases.at("inputs").at(input.toStdString()).at("hooks").size());
        const auto out = runCpu(
            g, model.tensors(), batch, h, w,
            {io.readFloat32("sample"), io.readFloat32("timestep"), io.readFloat32("encoder_hidden_states"), vectors});
        for (std::size_t k = 0; k < hooks.size(); ++k) {
            const double rel = relativeL2(out[k + 1], io.readFloat32(hooks[k]));
            qInfo("%s: relative L2 %.2e", hooks[k].c_str(), rel);
            QVERIFY2(rel < 1e-5, hooks[k].c_str());
        }
        const double rel = relativeMax(out[0], io.readFloat32("output"));
        qInfo("output: max |diff| / max |ref| %.3e", rel);
        QVERIFY2(rel <= 1e-4, qPrintable(QString::number(rel)));
    }

    // Size ids per tile (StableDiffusionXLPipeline._get_add_time_ids) and the pooled-width check.
    void sizeConditioning() {
        const TileSite site{256, 128, 512, 384, 1536, 1024};
        QCOMPARE(sdxlTimeIds(site, SdxlSizeConditioning::Image), (std::vector<float>{1024, 1536, 0, 0, 1024, 1536}));
        QCOMPARE(sdxlTimeIds(site, SdxlSizeConditioning::Tile), (std::vector<float>{1024, 1536, 128, 256, 384, 512}));
        const UNetCondConfig c = unetCondConfigFromJson(tinyConfig());
        const auto pooled = randomVector(kPooled, 1), negative = randomVector(kPooled, 2);
        const AddedConditioning f = sdxlAddedConditioning(c, SdxlSizeConditioning::Tile, pooled, negative);
        QCOMPARE(f(site, Branch::Conditional), textTimeEmbeds(c, pooled, {1024, 1536, 128, 256, 384, 512}));
        QCOMPARE(f(site, Branch::Unconditional), textTimeEmbeds(c, negative, {1024, 1536, 128, 256, 384, 512}));
        const AddedConditioning unguided = sdxlAddedConditioning(c, SdxlSizeConditioning::Image, pooled, {});
        QVERIFY_THROWS_EXCEPTION(std::logic_error, (void)unguided(site, Branch::Unconditional));
        for (const std::vector<float>& bad : {std::vector<float>{}, randomVector(kPooled - 1, 1)}) {
            try {
                (void)sdxlAddedConditioning(c, SdxlSizeConditioning::Image, bad, {});
                QFAIL("accepted a pooled text of the wrong width");
            } catch (const ValidationError& e) {
                QCOMPARE(e.field(), std::string("model"));
                QVERIFY2(
                    QString(e.what()).contains("takes 48 pooled text values beside 6 size ids; the text encoder gave " +
                                               QString::number(bad.size())),
                    e.what());
            }
        }
        QVERIFY(parseSdxlSizeConditioning("TILE") == SdxlSizeConditioning::Tile);
        try {
            (void)parseSdxlSizeConditioning("crop");
            QFAIL("accepted");
        } catch (const ValidationError& e) {
            QCOMPARE(e.field(), std::string("sdxl_size_conditioning"));
            QVERIFY2(QString(e.what()).contains("image or tile"), e.what());
        }
        RunConfig config;
        config.sdxlSizeConditioning = SdxlSizeConditioning::Tile;
        QVERIFY(runConfigFromJson(toJson(config)).sdxlSizeConditioning == SdxlSizeConditioning::Tile);
        QCOMPARE(toJson(RunConfig{})["sdxl_size_conditioning"], nlohmann::json("image"));
    }

    // One tile over the whole latent canvas, guided: the loop's run equals DDIM written out with
    // direct UNet calls that get text_embeds_time from the pooled text of their branch and the
    // whole image's size ids, then the VAE's decode.
    void oneTileEqualsDirectCalls() {
        const std::shared_ptr<SdModel> sd = tinySdxlPipeline(21);
        const RunConfig config = tinySdxlRun(96, 64, 96);  // latent 12 x 8: one tile
        const auto pooled = randomVector(kPooled, 4), negative = randomVector(kPooled, 5);
        const UNetCondConfig& unet = sd->unet->config();
        const std::vector<float> z = randomVector(4 * 8 * 12, 6);
        CpuBackend backend(2);
        CpuTileDevice device(backend);
        TiledLoop loop;
        loop.setSdModel(sd);
        loop.setStartNoise(ImageTensor{4, 8, 12, z});
        loop.setAddedConditioning(sdxlAddedConditioning(unet, config.sdxlSizeConditioning, pooled, negative));
        Silent observer;
        const RunResult result = loop.run(config, observer, device, [] { return false; });
        QCOMPARE(std::string(toString(result.record.status)), std::string("finished"));
        QCOMPARE(result.record.tileCount, 1);

        // The same by hand.
        const SdConditioning text = encodeSdPrompts(*sd, device.textBackend(), config);
        const std::vector<float> ids{64, 96, 0, 0, 64, 96};
        const std::vector<float> vc = textTimeEmbeds(unet, pooled, ids), vu = textTimeEmbeds(unet, negative, ids);
        const ModelGraph g = unet2DConditionExecutionGraph(unet, text.tokens);
        SchedulerOptions options = sd->scheduler;
        options.eta = config.schedulerOptions.eta;
        options.timestepSpacing = config.schedulerOptions.timestepSpacing;
        options.karrasSigmas = config.schedulerOptions.karrasSigmas;
        auto scheduler = Scheduler::create(config.scheduler, options);
        scheduler->setTimesteps(config.steps);
        std::vector<float> x = z;
        for (float& v : x) v *= scheduler->initNoiseSigma();
        for (int k = 0; k < config.steps; ++k) {
            const StepCoefficients K = withoutPreviousX0(scheduler->coefficients(k));
            std::vector<float> in = x;
            for (float& v : in) v *= K.modelInputScale;
            const std::vector<float> t{K.timestep};
            const auto c = runCpu(g, sd->unet->tensors(), 1, 8, 12, {in, t, text.cond, vc})[0];
            const auto u = runCpu(g, sd->unet->tensors(), 1, 8, 12, {in, t, text.uncond, vu})[0];
            for (std::size_t i = 0; i < x.size(); ++i) {
                const float eps = u[i] + static_cast<float>(config.cfgScale) * (c[i] - u[i]);
                x[i] = applyStep(K, x[i], eps, 0.0f, 0.0f);
            }
        }
        CpuBackend vae(2);
        const ImageTensor expected = decodeLatents(*sd, vae, ImageTensor{4, 8, 12, x});
        const double rel = relativeMax(result.image.data, expected.data);
        qInfo("loop vs direct calls: max |diff| / max |ref| %.2e", rel);
        QVERIFY2(rel < 1e-5, qPrintable(QString::number(rel)));
        // The vectors matter: the image made with the negative's pooled text for both branches differs.
        TiledLoop other;
        other.setSdModel(sd);
        other.setStartNoise(ImageTensor{4, 8, 12, z});
        other.setAddedConditioning(sdxlAddedConditioning(unet, config.sdxlSizeConditioning, negative, negative));
        const RunResult swapped = other.run(config, observer, device, [] { return false; });
        QVERIFY(relativeMax(swapped.image.data, result.image.data) > 1e-4);
    }

    // Two tiles, guided: every UNet call gets, per row, its tile's and branch's vector; "tile" mode
    // gives the two tiles different size ids, "image" mode the same (the whole image's).
    void tilesGetTheirVectors_data() {
        QTest::addColumn<int>("mode");
        QTest::addColumn<int>("tileBatch");
        QTest::newRow("tile, batch 2") << int(SdxlSizeConditioning::Tile) << 2;
        QTest::newRow("tile, batch 1") << int(SdxlSizeConditioning::Tile) << 1;
        QTest::newRow("image, batch 2") << int(SdxlSizeConditioning::Image) << 2;
    }
    void tilesGetTheirVectors() {
        QFETCH(int, mode);
        QFETCH(int, tileBatch);
        const auto sizeMode = static_cast<SdxlSizeConditioning>(mode);
        const std::shared_ptr<SdModel> sd = tinySdxlPipeline(22);
        RunConfig config = tinySdxlRun(160, 64, 96);  // latent 20 x 8, tiles of 12 x 8 at x = 0 and 8
        config.tileBatch = tileBatch;
        config.sdxlSizeConditioning = sizeMode;
        const auto pooled = randomVector(kPooled, 7), negative = randomVector(kPooled, 8);
        const UNetCondConfig& unet = sd->unet->config();
        RecordingBackend backend;
        CpuTileDevice device(backend);
        TiledLoop loop;
        loop.setSdModel(sd);
        loop.setAddedConditioning(sdxlAddedConditioning(unet, sizeMode, pooled, negative));
        Silent observer;
        const RunResult result = loop.run(config, observer, device, [] { return false; });
        QCOMPARE(result.record.tileCount, 2);
        const std::vector<float> tile0 = sdxlTimeIds(TileSite{0, 0, 96, 64, 160, 64}, sizeMode);
        const std::vector<float> tile1 = sdxlTimeIds(TileSite{64, 0, 96, 64, 160, 64}, sizeMode);
        QCOMPARE(tile1 == tile0, sizeMode == SdxlSizeConditioning::Image);
        const std::vector<std::vector<float>> ids{tile0, tile1};
        // Per step and batch: the conditional call, then the unconditional one (CpuTileDevice's order).
        const int batches = 2 / tileBatch;
        QCOMPARE(backend.calls.size(), static_cast<std::size_t>(config.steps * batches * 2));
        for (std::size_t n = 0; n < backend.calls.size(); ++n) {
            const RecordingBackend::Call& call = backend.calls[n];
            const bool conditional = n % 2 == 0;
            const int firstTile = static_cast<int>(n / 2) % batches * tileBatch;
            QCOMPARE(call.batch, tileBatch);
            QCOMPARE(call.inputs.size(), std::size_t{4});
            for (int row = 0; row < call.batch; ++row) {
                const std::vector<float> want = textTimeEmbeds(unet, conditional ? pooled : negative,
                                                               ids[static_cast<std::size_t>(firstTile + row)]);
                const std::vector<float> got(call.inputs[3].begin() + row * 96,
                                             call.inputs[3].begin() + (row + 1) * 96);
                QVERIFY2(got == want, qPrintable(QString("call %1 row %2").arg(n).arg(row)));
            }
        }
        const bool tileMessage =
            std::any_of(result.record.messages.begin(), result.record.messages.end(), [&](const std::string& m) {
                return m.starts_with("sdxl: size conditioning " + std::string(toString(sizeMode)));
            });
        QVERIFY(tileMessage);
    }

    // Without a caller's vectors the run takes the pooled text from the prompts' encoding: a text
    // encoder without a pooled output is refused naming the model before any step.
    void defaultNeedsPooledText() {
        const std::shared_ptr<SdModel> sd = tinySdxlPipeline(23);
        CpuBackend backend(2);
        CpuTileDevice device(backend);
        TiledLoop loop;
        loop.setSdModel(sd);
        Silent observer;
        try {
            (void)loop.run(tinySdxlRun(96, 64, 96), observer, device, [] { return false; });
            QFAIL("ran without pooled text");
        } catch (const ValidationError& e) {
            QCOMPARE(e.field(), std::string("model"));
            QVERIFY2(QString(e.what()).contains("the text encoder gave 0 (it has no pooled, projected output)"),
                     e.what());
        }
    }

    // SDXL's VAE decodes in float32 when its config says force_upcast and the run asks fp16 (the
    // record says so); bf16 and fp32 runs, force_upcast false and SD 1.x / 2.x VAEs keep theirs.
    void vaePrecision() {
        const std::shared_ptr<SdModel> sdxl = tinySdxlPipeline(24);
        QVERIFY(sdxl->vae->config().forceUpcast);
        std::string why;
        QVERIFY(sdVaePrecision(*sdxl, Precision::FP16, &why) == Precision::FP32);
        QVERIFY2(QString::fromStdString(why).startsWith("vae: fp32 (force_upcast"), why.c_str());
        QVERIFY(sdVaePrecision(*sdxl, Precision::BF16, &why) == Precision::BF16);
        QVERIFY(why.empty());
        QVERIFY(sdVaePrecision(*sdxl, Precision::FP32, &why) == Precision::FP32);
        const SdModel sd1 = loadSdModel(kSdPipeline);
        QVERIFY(sdVaePrecision(sd1, Precision::FP16, &why) == Precision::FP16);
        QVERIFY(why.empty());
        auto fixed = std::make_shared<SdModel>(*sdxl);
        VaeConfig vaeConfig = sdxl->vae->config();
        vaeConfig.forceUpcast = false;
        fixed->vae = std::make_shared<const VaeModel>(VaeModel::fromTensors(vaeConfig, sdxl->vae->tensors()));
        QVERIFY(sdVaePrecision(*fixed, Precision::FP16, &why) == Precision::FP16);

        // Recorded by a run (the CPU decodes in float32 whatever is asked).
        CpuBackend backend(2);
        CpuTileDevice device(backend);
        Silent observer;
        for (const auto& [model, recorded] : {std::pair{sdxl, true}, std::pair{fixed, false}}) {
            TiledLoop loop;
            loop.setSdModel(model);
            loop.setAddedConditioning(sdxlAddedConditioning(model->unet->config(), SdxlSizeConditioning::Image,
                                                            randomVector(kPooled, 9), randomVector(kPooled, 10)));
            RunConfig config = tinySdxlRun(96, 64, 96);
            config.steps = 1;
            const RunResult result = loop.run(config, observer, device, [] { return false; });
            const auto& m = result.record.messages;
            QCOMPARE(std::any_of(m.begin(), m.end(),
                                 [](const std::string& s) { return s.starts_with("vae: fp32 (force_upcast"); }),
                     recorded);
        }
    }
};

QTEST_GUILESS_MAIN(TestSdxlUNet)
#include "tst_sdxlunet.moc"
