// UNet2DConditionModel (SD 1.x / 2.x): config parsing and its range checks, the graph's
// tensor list (the published SD 1.5 / 2.1 parameter counts, diffusers' names and shapes,
// per-level heads), the CPU forward (fused = primitive, batch-independent bits), loading a
// unet folder (bad tensors refused naming the file and the tensor) and the forward against
// diffusers' own outputs (tests/data/unetcond, tools/reference/make_unetcond_fixtures.py).
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "core/cpu/CpuBackend.h"
#include "core/formats/Safetensors.h"
#include "core/graph/ModelGraph.h"
#include "core/models/sd/UNetCondConfig.h"
#include "core/models/sd/UNetCondGraph.h"
#include "core/models/sd/UNetCondModel.h"
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

const char* kSd15 = R"({"_class_name": "UNet2DConditionModel", "_diffusers_version": "0.6.0", "act_fn": "silu",
  "attention_head_dim": 8, "block_out_channels": [320, 640, 1280, 1280], "center_input_sample": false,
  "cross_attention_dim": 768, "down_block_types": ["CrossAttnDownBlock2D", "CrossAttnDownBlock2D",
  "CrossAttnDownBlock2D", "DownBlock2D"], "downsample_padding": 1, "flip_sin_to_cos": true, "freq_shift": 0,
  "in_channels": 4, "layers_per_block": 2, "mid_block_scale_factor": 1, "norm_eps": 1e-05, "norm_num_groups": 32,
  "out_channels": 4, "sample_size": 64, "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D",
  "CrossAttnUpBlock2D"]})";

const char* kSd21 = R"({"_class_name": "UNet2DConditionModel", "_diffusers_version": "0.10.0.dev0", "act_fn": "silu",
  "attention_head_dim": [5, 10, 20, 20], "block_out_channels": [320, 640, 1280, 1280], "center_input_sample": false,
  "class_embed_type": null, "cross_attention_dim": 1024, "down_block_types": ["CrossAttnDownBlock2D",
  "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"], "downsample_padding": 1,
  "dual_cross_attention": false, "flip_sin_to_cos": true, "freq_shift": 0, "in_channels": 4, "layers_per_block": 2,
  "mid_block_scale_factor": 1, "mid_block_type": "UNetMidBlock2DCrossAttn", "norm_eps": 1e-05, "norm_num_groups": 32,
  "num_class_embeds": null, "only_cross_attention": false, "out_channels": 4, "resnet_time_scale_shift": "default",
  "sample_size": 96, "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"],
  "upcast_attention": true, "use_linear_projection": true})";

// The fixtures' SD2-like shape, small: Linear projections, heads [2, 4], context 24 wide.
nlohmann::json tinyConfig() {
    return nlohmann::json::parse(R"({"_class_name": "UNet2DConditionModel", "block_out_channels": [16, 32],
      "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"], "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D"],
      "layers_per_block": 1, "norm_num_groups": 8, "cross_attention_dim": 24, "attention_head_dim": [2, 4],
      "use_linear_projection": true, "upcast_attention": true, "sample_size": 16})");
}

const std::string kFixtures = std::string(TESSERA_TEST_DATA) + "/unetcond";

// A unet folder of `model`'s weights in `dtype`, with `edit` applied to the tensors first.
void writeFolder(const fs::path& dir, const nlohmann::json& config, const UNetCondModel& model,
                 const std::function<void(std::map<std::string, SafetensorsTensorData>&)>& edit = {}) {
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << config.dump(2);
    std::map<std::string, SafetensorsTensorData> tensors;
    for (const auto& [name, t] : model.tensors())
        tensors[name] =
            SafetensorsTensorData{SafetensorsDtype::F16, t.shape, encodeFloats(SafetensorsDtype::F16, t.data)};
    if (edit) edit(tensors);
    writeSafetensors((dir / "diffusion_pytorch_model.safetensors").string(), tensors, {{"format", "pt"}});
}

void expectModelError(const std::string& dir, const QStringList& parts) {
    try {
        (void)UNetCondModel::load(dir);
        QFAIL(qPrintable("loaded: " + parts.join(", ")));
    } catch (const ModelError& e) {
        for (const QString& part : parts) QVERIFY2(QString(e.what()).contains(part), e.what());
    }
}

}  // namespace

class TestUNetCond : public QObject {
    Q_OBJECT

private slots:
    // The published configs: their well-known parameter counts and 686 tensors each.
    void publishedConfigs_data() {
        QTest::addColumn<QString>("json");
        QTest::addColumn<qint64>("parameters");
        QTest::addColumn<bool>("linear");
        QTest::addColumn<QList<int>>("heads");
        QTest::newRow("SD 1.5") << QString(kSd15) << qint64(859'520'964) << false << QList<int>{8, 8, 8, 8};
        QTest::newRow("SD 2.1") << QString(kSd21) << qint64(865'910'724) << true << QList<int>{5, 10, 20, 20};
    }
    void publishedConfigs() {
        QFETCH(QString, json);
        QFETCH(qint64, parameters);
        QFETCH(bool, linear);
        QFETCH(QList<int>, heads);
        const UNetCondConfig c = unetCondConfigFromJson(nlohmann::json::parse(json.toStdString()));
        QCOMPARE(c.attentionHeads, std::vector<int>(heads.begin(), heads.end()));
        QCOMPARE(c.transformerLayers, (std::vector<int>{1, 1, 1, 1}));
        QCOMPARE(c.useLinearProjection, linear);
        const ModelGraph g = buildUNet2DConditionGraph(c);
        QCOMPARE(g.parameterCount(), std::int64_t{parameters});
        QCOMPARE(g.parameterList().size(), std::size_t{686});
        QCOMPARE(g.downsampleFactor(), 8);
        // attention_head_dim is heads per block; up blocks take the list reversed; the mid block the last entry
        QCOMPARE(opNamed(g, "down_blocks.0.attentions.0.transformer_blocks.0.attn1")->heads, heads[0]);
        QCOMPARE(opNamed(g, "mid_block.attentions.0.transformer_blocks.0.attn2")->heads, heads[3]);
        QCOMPARE(opNamed(g, "up_blocks.1.attentions.2.transformer_blocks.0.attn2")->heads, heads[2]);
        QCOMPARE(opNamed(g, "up_blocks.3.attentions.0.transformer_blocks.0.attn1")->heads, heads[0]);
        const auto list = g.parameterList();
        const std::map<std::string, std::vector<std::int64_t>> shapes(list.begin(), list.end());
        const std::int64_t X = c.crossAttentionDim;
        QCOMPARE(shapes.at("down_blocks.1.attentions.0.transformer_blocks.0.attn2.to_k.weight"),
                 (std::vector<std::int64_t>{640, X}));
        QCOMPARE(shapes.at("down_blocks.1.attentions.0.transformer_blocks.0.ff.net.0.proj.weight"),
                 (std::vector<std::int64_t>{5120, 640}));
        QCOMPARE(shapes.at("down_blocks.1.attentions.0.transformer_blocks.0.ff.net.2.weight"),
                 (std::vector<std::int64_t>{640, 2560}));
        QCOMPARE(shapes.at("up_blocks.1.resnets.2.conv_shortcut.weight"),
                 (std::vector<std::int64_t>{1280, 1920, 1, 1}));
        const std::vector<std::int64_t> projIn =
            linear ? std::vector<std::int64_t>{1280, 1280} : std::vector<std::int64_t>{1280, 1280, 1, 1};
        QCOMPARE(shapes.at("mid_block.attentions.0.proj_in.weight"), projIn);
        QVERIFY(!shapes.count("down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.bias"));
        int shortcuts = 0;
        for (const auto& [name, shape] : list) shortcuts += name.ends_with("conv_shortcut.weight");
        QCOMPARE(shortcuts, 14);  // 2 down + 12 up
        // Tokens at 512 x 512 (latent 64): 4096 at the first level
        const ModelGraph f = unet2DConditionExecutionGraph(c);
        const GraphOp* attn = opNamed(f, "down_blocks.0.attentions.0.transformer_blocks.0.attn1");
        QCOMPARE(f.rows(attn->input, 64, 64), std::int64_t{4096});
        QCOMPARE(f.rows(opNamed(f, "mid_block.attentions.0.transformer_blocks.0.attn2")->input2, 64, 64),
                 std::int64_t{77});
    }

    void configRejections_data() {
        QTest::addColumn<QString>("patch");  // merged into tinyConfig()
        QTest::addColumn<QString>("message");
        QTest::newRow("heads list length")
            << R"({"attention_head_dim": [2, 4, 8]})"
            << "attention_head_dim = [2,4,8]: has 3 entries but block_out_channels has 2";
        QTest::newRow("heads do not divide") << R"({"attention_head_dim": [3, 4]})"
                                             << "3 heads (the entry for level 0) do not divide its 16 channels";
        QTest::newRow("heads range") << R"({"attention_head_dim": 0})"
                                     << "attention_head_dim = 0: expected an integer from 1 to 256";
        QTest::newRow("Kandinsky image") << R"({"addition_embed_type": "image"})"
                                         << "addition_embed_type = \"image\": only null or \"text_time\" (SDXL)";
        QTest::newRow("num_attention_heads") << R"({"num_attention_heads": 8})"
                                             << "num_attention_heads = 8: must be null";
        QTest::newRow("layers list") << R"({"layers_per_block": [1, 1]})"
                                     << "layers_per_block = [1,1]: a per-block list";
        QTest::newRow("cross dim range") << R"({"cross_attention_dim": 9000})"
                                         << "cross_attention_dim = 9000: expected an integer from 1 to 8192";
        QTest::newRow("cross dim list") << R"({"cross_attention_dim": [24, 24]})"
                                        << "cross_attention_dim = [24,24]: a per-block list";
        QTest::newRow("block type")
            << R"({"down_block_types": ["SimpleCrossAttnDownBlock2D", "DownBlock2D"]})"
            << "'SimpleCrossAttnDownBlock2D' is not supported (DownBlock2D or CrossAttnDownBlock2D)";
        QTest::newRow("up block count")
            << R"({"up_block_types": ["UpBlock2D"]})"
            << "up_block_types = [\"UpBlock2D\"]: has 1 entries but block_out_channels has 2";
        QTest::newRow("mid block") << R"({"mid_block_type": "UNetMidBlock2DSimpleCrossAttn"})"
                                   << "only \"UNetMidBlock2DCrossAttn\" or null";
        QTest::newRow("groups") << R"({"norm_num_groups": 5})"
                                << "norm_num_groups = 5: does not divide block_out_channels entry 16";
        QTest::newRow("sample size") << R"({"sample_size": 15})"
                                     << "sample_size = 15: must be divisible by 2";
        QTest::newRow("scale shift") << R"({"resnet_time_scale_shift": "scale_shift"})"
                                     << "only \"default\"";
        QTest::newRow("LCM") << R"({"time_cond_proj_dim": 256})"
                             << "time_cond_proj_dim = 256: a guidance embedding";
        QTest::newRow("depth range") << R"({"transformer_layers_per_block": 33})"
                                     << "transformer_layers_per_block = 33: expected an integer from 1 to 32";
        QTest::newRow("not a bool") << R"({"use_linear_projection": "yes"})"
                                    << "use_linear_projection = \"yes\": expected true or false";
        QTest::newRow("even kernel") << R"({"conv_in_kernel": 4})"
                                     << "conv_in_kernel = 4: expected an odd kernel size";
    }
    void configRejections() {
        QFETCH(QString, patch);
        QFETCH(QString, message);
        nlohmann::json j = tinyConfig();
        j.merge_patch(nlohmann::json::parse(patch.toStdString()));
        try {
            (void)unetCondConfigFromJson(j);
            QFAIL("accepted");
        } catch (const std::runtime_error& e) {
            QVERIFY2(QString(e.what()).startsWith("config.json: "), e.what());
            QVERIFY2(QString(e.what()).contains(message), e.what());
        }
    }

    void configDefaultsAndLists() {
        nlohmann::json j = tinyConfig();
        j["transformer_layers_per_block"] = nlohmann::json::array({1, 2});
        j["some_future_key"] = 3;  // ignored with a warning
        j["_use_default_values"] = nlohmann::json::array({"upcast_attention"});
        const UNetCondConfig c = unetCondConfigFromJson(j);
        QCOMPARE(c.transformerLayers, (std::vector<int>{1, 2}));
        QCOMPARE(c.attentionHeads, (std::vector<int>{2, 4}));
        QVERIFY(!c.upcastAttention);  // reset to the default by _use_default_values
        QCOMPARE(c.crossAttentionDim, 24);
        QCOMPARE(c.timeEmbedDim(), 64);
        const ModelGraph g = buildUNet2DConditionGraph(c);
        QVERIFY(opNamed(g, "mid_block.attentions.0.transformer_blocks.1.attn1"));     // depth 2 at the last level
        QVERIFY(!opNamed(g, "up_blocks.1.attentions.0.transformer_blocks.1.attn1"));  // depth 1 at level 0
        QVERIFY(opNamed(g, "up_blocks.1.attentions.1.transformer_blocks.0.attn2"));
        // A default (4-entry) list applies to any level count when the key is absent.
        nlohmann::json d = tinyConfig();
        d.erase("attention_head_dim");
        QCOMPARE(unetCondConfigFromJson(d).attentionHeads, (std::vector<int>{8, 8}));
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, (void)buildUNet2DConditionGraph(c, 0));
    }

    // The fused graph computes what the primitive one does; a tile batch gives each image the
    // bits it gets alone; the context reaches the output (cross-attention is wired).
    void cpuForward_data() {
        QTest::addColumn<bool>("linear");
        QTest::newRow("SD 2.x-like (Linear projections)") << true;
        QTest::newRow("SD 1.x-like (1x1 conv projections)") << false;
    }
    void cpuForward() {
        QFETCH(bool, linear);
        nlohmann::json j = tinyConfig();
        j["use_linear_projection"] = linear;
        const UNetCondConfig c = unetCondConfigFromJson(j);
        const UNetCondModel model = UNetCondModel::random(c, 3);
        const ModelGraph prim = buildUNet2DConditionGraph(c, 7);
        const ModelGraph fused = fuseForExecution(prim);
        const int batch = 2, h = 8, w = 12;
        const QString m =
            fusedForwardMismatch(prim, fused, model.tensors(), batch, h, w, inputsFor(prim, batch, h, w, 5), 2);
        QVERIFY2(m.isEmpty(), qPrintable(m));
    }

    void loadsFolders() {
        QTemporaryDir tmp;
        const fs::path root(tmp.path().toStdString());
        const nlohmann::json config = tinyConfig();
        const UNetCondConfig c = unetCondConfigFromJson(config);
        const UNetCondModel source = UNetCondModel::random(c, 9);
        writeFolder(root / "pipe" / "unet", config, source);
        const UNetCondModel model = UNetCondModel::load((root / "pipe").string());  // a pipeline folder
        QCOMPARE(model.directory(), (root / "pipe" / "unet").string());
        QCOMPARE(model.tensors().size(), source.tensors().size());
        QCOMPARE(model.parameterCount(), source.parameterCount());
        const HostTensor& t = model.tensors().at("down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k.weight");
        QCOMPARE(t.shape, (std::vector<std::int64_t>{16, 24}));
        const std::vector<float>& s =
            source.tensors().at("down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k.weight").data;
        for (std::size_t i = 0; i < s.size(); ++i)
            QVERIFY(std::abs(t.data[i] - s[i]) <= 1e-3f * std::abs(s[i]));  // F16
        QVERIFY(model.extraTensors().empty());
        QCOMPARE(model.weightsSha256().size(), std::size_t{64});
    }

    void refusesBadFolders() {
        QTemporaryDir tmp;
        const fs::path root(tmp.path().toStdString());
        const nlohmann::json config = tinyConfig();
        const UNetCondModel source = UNetCondModel::random(unetCondConfigFromJson(config), 9);
        const std::string k = "down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k.weight";
        const std::string file = "diffusion_pytorch_model.safetensors";
        writeFolder(root / "missing", config, source, [&](auto& t) { t.erase(k); });
        expectModelError((root / "missing").string(),
                         {QString::fromStdString(file), "missing tensor '" + QString::fromStdString(k) + "'",
                          "expected shape [16, 24]"});
        writeFolder(root / "shape", config, source, [&](auto& t) {
            t[k] = SafetensorsTensorData{
                SafetensorsDtype::F32, {16, 16}, encodeFloats(SafetensorsDtype::F32, std::vector<float>(256))};
        });
        expectModelError((root / "shape").string(), {QString::fromStdString(file), QString::fromStdString(k),
                                                     "expected [16, 24], found [16, 16]"});
        writeFolder(root / "nan", config, source, [&](auto& t) {
            std::vector<float> v(16 * 24, 0.5f);
            v[7] = NAN;
            t[k] = SafetensorsTensorData{SafetensorsDtype::F32, {16, 24}, encodeFloats(SafetensorsDtype::F32, v)};
        });
        expectModelError((root / "nan").string(),
                         {QString::fromStdString(file), QString::fromStdString(k), "NaN", "element 7"});
        nlohmann::json wrongClass = config;
        wrongClass["_class_name"] = "UNet2DModel";
        writeFolder(root / "class", wrongClass, source);
        expectModelError((root / "class").string(),
                         {"config.json", "_class_name is \"UNet2DModel\"", "expected \"UNet2DConditionModel\""});
        nlohmann::json badHeads = config;
        badHeads["attention_head_dim"] = nlohmann::json::array({3, 4});
        writeFolder(root / "heads", badHeads, source);
        expectModelError((root / "heads").string(), {"config.json", "attention_head_dim = [3,4]"});
        expectModelError((root / "nowhere").string(), {"no such folder"});
    }

    // diffusers' UNet2DConditionModel outputs (float64 forward of the F16-stored weights).
    void forwardMatchesDiffusers_data() {
        QTest::addColumn<QString>("unetCase");
        QTest::addColumn<QString>("input");
        if (!fs::exists(kFixtures + "/cases.json")) {  // fails below, naming what is missing
            QTest::newRow("fixtures") << QString() << QString();
            return;
        }
        const nlohmann::json cases = nlohmann::json::parse(std::ifstream(kFixtures + "/cases.json"));
        for (const auto& [name, c] : cases.at("cases").items())
            for (const auto& [input, info] : c.at("inputs").items())
                QTest::newRow((name + "/" + input).c_str())
                    << QString::fromStdString(name) << QString::fromStdString(input);
    }
    void forwardMatchesDiffusers() {
        QVERIFY2(fs::exists(kFixtures + "/cases.json"),
                 "tests/data/unetcond/cases.json is missing "
                 "(tools/reference/make_unetcond_fixtures.py makes it)");
        QFETCH(QString, unetCase);
        QFETCH(QString, input);
        const nlohmann::json cases = nlohmann::json::parse(std::ifstream(kFixtures + "/cases.json"));
        const std::string dir = kFixtures + "/" + unetCase.toStdString();
        const UNetCondModel model = UNetCondModel::load(dir + "/unet");
        // The graph's parameters are exactly the file's tensors.
        SafetensorsFile weights(dir + "/unet/diffusion_pytorch_model.safetensors");
        std::set<std::string> inFile, inGraph;
        for (const auto& info : weights.tensors()) inFile.insert(info.name);
        for (const auto& [name, shape] : UNetCondModel::expectedTensors(model.config())) inGraph.insert(name);
        QVERIFY(inFile == inGraph);
        const nlohmann::json& info = cases.at("cases").at(unetCase.toStdString());
        QCOMPARE(inGraph.size(), info.at("tensors").get<std::size_t>());
        QCOMPARE(model.parameterCount(), info.at("parameters").get<std::int64_t>());
        QVERIFY(model.extraTensors().empty());

        SafetensorsFile io(dir + "/forward_" + input.toStdString() + ".safetensors");
        QVERIFY(io.has("sample") && io.has("encoder_hidden_states") && io.has("timestep") && io.has("output"));
        const auto sample = io.readFloat32("sample");
        const auto& shape = io.find("sample")->shape;
        const int batch = static_cast<int>(shape[0]), h = static_cast<int>(shape[2]), w = static_cast<int>(shape[3]);
        const auto context = io.readFloat32("encoder_hidden_states");
        const int tokens = static_cast<int>(io.find("encoder_hidden_states")->shape[1]);
        ModelGraph g = buildUNet2DConditionGraph(model.config(), tokens);
        if (h % g.downsampleFactor() != 0 || w % g.downsampleFactor() != 0) {
            // diffusers' forward_upsample_size path: Tessera's tiles are multiples of the factor.
            QVERIFY_THROWS_EXCEPTION(std::invalid_argument, g.checkTileSize(h, w));
            return;
        }
        // Intermediates diffusers' hooks recorded, by the graph value that holds them.
        const std::map<std::string, std::string> hookValue{
            {"hook.time_embedding", "time_embedding.linear_2"},
            {"hook.conv_in", "conv_in"},
            {"hook.down_blocks.0.attentions.0", "down_blocks.0.attentions.0"},
            {"hook.mid_block", "mid_block.resnets.1"},
            {"hook.up_blocks.0", "up_blocks.0.upsamplers.0"},
            {"hook.conv_norm_out", "conv_norm_out"}};
        std::vector<std::string> hooks;
        for (const auto& [hook, value] : hookValue)
            if (io.has(hook))
                for (std::size_t v = 0; v < g.values().size(); ++v)
                    if (g.values()[v].name == value) {
                        g.markOutput(static_cast<int>(v));
                        hooks.push_back(hook);
                    }
        const auto out = runCpu(g, model.tensors(), batch, h, w, {sample, io.readFloat32("timestep"), context});
        for (std::size_t k = 0; k < hooks.size(); ++k) {
            const double rel = relativeL2(out[k + 1], io.readFloat32(hooks[k]));
            qInfo("%s: relative L2 %.2e", hooks[k].c_str(), rel);
            QVERIFY2(rel < 1e-5, hooks[k].c_str());
        }
        const auto ref = io.readFloat32("output");
        double worst = 0, scale = 0;
        for (std::size_t i = 0; i < ref.size(); ++i) {
            worst = std::max(worst, std::abs(double(out[0][i]) - ref[i]));
            scale = std::max(scale, std::abs(double(ref[i])));
        }
        qInfo("max |diff| %.3e, max |ref| %.3f", worst, scale);
        QVERIFY2(worst <= 1e-4 * scale, qPrintable(QString("max |diff| %1 > 1e-4 x %2").arg(worst).arg(scale)));
    }
};

QTEST_GUILESS_MAIN(TestUNetCond)
#include "tst_unetcond.moc"
