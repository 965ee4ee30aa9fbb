// UNetModel and UNetConfig (diffusers UNet2DModel): config defaults and rejections,
// the exact tensor list of google/ddpm-cifar10-32, parameter counts, and loading model
// folders written here — valid (F32/F16/BF16, legacy names, sharded) and broken (missing,
// mis-shaped, NaN, wrong dtype), each broken one named in the message.
#include <QtTest/QtTest>

#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/Sha256.h"
#include "core/formats/Safetensors.h"
#include "core/formats/SchedulerConfig.h"
#include "core/models/unet/UNetConfig.h"
#include "core/models/unet/UNetModel.h"
#include "tests/core/ModelTestSupport.h"

using namespace tessera;
using namespace model_test;
using Shape = std::vector<std::int64_t>;

namespace {

// google/ddpm-cifar10-32 config.json as published.
const char* kCifarConfig = R"({
  "_class_name": "UNet2DModel",
  "_diffusers_version": "0.0.4",
  "act_fn": "silu",
  "attention_head_dim": null,
  "block_out_channels": [128, 256, 256, 256],
  "center_input_sample": false,
  "down_block_types": ["DownBlock2D", "AttnDownBlock2D", "DownBlock2D", "DownBlock2D"],
  "downsample_padding": 0,
  "flip_sin_to_cos": false,
  "freq_shift": 1,
  "in_channels": 3,
  "layers_per_block": 2,
  "mid_block_scale_factor": 1,
  "norm_eps": 1e-06,
  "norm_num_groups": 32,
  "out_channels": 3,
  "sample_size": 32,
  "time_embedding_type": "positional",
  "up_block_types": ["UpBlock2D", "UpBlock2D", "AttnUpBlock2D", "UpBlock2D"]
})";

nlohmann::json config256() {
    nlohmann::json j = nlohmann::json::parse(kCifarConfig);
    j["block_out_channels"] = {128, 128, 256, 256, 512, 512};
    j["down_block_types"] = {"DownBlock2D", "DownBlock2D",     "DownBlock2D",
                             "DownBlock2D", "AttnDownBlock2D", "DownBlock2D"};
    j["up_block_types"] = {"UpBlock2D", "AttnUpBlock2D", "UpBlock2D", "UpBlock2D", "UpBlock2D", "UpBlock2D"};
    j["sample_size"] = 256;
    return j;
}

// Small enough to write and load in milliseconds, with attention in down, mid and up blocks
// and conv shortcuts.
nlohmann::json tinyConfigJson() {
    return nlohmann::json::parse(R"({
      "_class_name": "UNet2DModel",
      "block_out_channels": [32, 64],
      "down_block_types": ["DownBlock2D", "AttnDownBlock2D"],
      "up_block_types": ["AttnUpBlock2D", "UpBlock2D"],
      "layers_per_block": 1,
      "norm_num_groups": 8,
      "attention_head_dim": null,
      "sample_size": 16,
      "norm_eps": 1e-6,
      "freq_shift": 1,
      "flip_sin_to_cos": false,
      "downsample_padding": 0
    })");
}

std::string shapeText(const Shape& s) { return shapeToString(s); }

}  // namespace

class TestUNetModel : public QObject {
    Q_OBJECT

private:
    QTemporaryDir tmp_;
    int folders_ = 0;

    // A fresh model folder holding config.json and the given tensors.
    std::string writeModel(const std::map<std::string, SafetensorsTensorData>& tensors,
                           const nlohmann::json& config = tinyConfigJson()) {
        const QString dir = tmp_.filePath(QStringLiteral("model%1").arg(++folders_));
        QDir().mkpath(dir);
        const std::string d = dir.toStdString();
        writeText(d + "/config.json", config.dump(2));
        writeSafetensors(d + "/diffusion_pytorch_model.safetensors", tensors, {{"format", "pt"}});
        return d;
    }

    static UNetConfig tinyConfig() { return unetConfigFromJson(tinyConfigJson()); }
    static std::map<std::string, HostTensor> tinyWeights(std::uint64_t seed = 7) {
        return UNetModel::random(tinyConfig(), seed).tensors();
    }

private slots:
    void initTestCase() { QVERIFY(tmp_.isValid()); }

    // --- config.json -----------------------------------------------------------------

    void configDefaultsMatchDiffusers() {
        const UNetConfig c = unetConfigFromJson(nlohmann::json::object());
        QCOMPARE(c.sampleSize, 0);
        QCOMPARE(c.inChannels, 3);
        QCOMPARE(c.outChannels, 3);
        QCOMPARE(c.centerInputSample, false);
        QVERIFY(!c.timeEmbeddingDim.has_value());
        QCOMPARE(c.freqShift, 0);
        QCOMPARE(c.flipSinToCos, true);
        QVERIFY((c.downBlocks == std::vector<DownBlockType>{DownBlockType::Down, DownBlockType::AttnDown,
                                                            DownBlockType::AttnDown, DownBlockType::AttnDown}));
        QVERIFY((c.upBlocks == std::vector<UpBlockType>{UpBlockType::AttnUp, UpBlockType::AttnUp, UpBlockType::AttnUp,
                                                        UpBlockType::Up}));
        QCOMPARE(c.blockOutChannels, (std::vector<int>{224, 448, 672, 896}));
        QCOMPARE(c.hasMidBlock, true);
        QCOMPARE(c.layersPerBlock, 2);
        QCOMPARE(c.midBlockScaleFactor, 1.0f);
        QCOMPARE(c.downsamplePadding, 1);
        QCOMPARE(c.attentionHeadDim.value_or(-1), 8);
        QCOMPARE(c.normNumGroups, 32);
        QVERIFY(!c.attnNormNumGroups.has_value());
        QCOMPARE(c.normEps, 1e-5f);
        QVERIFY(c.resnetTimeScaleShift == TimeScaleShift::Default);
        QCOMPARE(c.addAttention, true);
        QCOMPARE(c.timeEmbedDim(), 896);
    }

    void cifarConfigParsed() {
        const UNetConfig c = unetConfigFromJson(nlohmann::json::parse(kCifarConfig));
        QCOMPARE(c.sampleSize, 32);
        QCOMPARE(c.blockOutChannels, (std::vector<int>{128, 256, 256, 256}));
        QVERIFY(!c.attentionHeadDim.has_value());  // null: one head of width C
        QCOMPARE(c.headsFor(256), 1);
        QCOMPARE(c.freqShift, 1);
        QCOMPARE(c.flipSinToCos, false);
        QCOMPARE(c.downsamplePadding, 0);
        QCOMPARE(c.normEps, 1e-6f);
        QCOMPARE(c.timeEmbedDim(), 512);
        QCOMPARE(c.downsampleFactor(), 8);
        QVERIFY(c.downBlocks[1] == DownBlockType::AttnDown && c.downBlocks[0] == DownBlockType::Down);
        QVERIFY(c.upBlocks[2] == UpBlockType::AttnUp && c.upBlocks[3] == UpBlockType::Up);
        // Round trip through toJson.
        const UNetConfig back = unetConfigFromJson(toJson(c));
        QCOMPARE(toJson(back), toJson(c));
        QCOMPARE(toJson(c).at("norm_eps").get<double>(), 1e-6);
        QVERIFY(toJson(c).at("attention_head_dim").is_null());
    }

    void configSpecialKeys() {
        nlohmann::json j = nlohmann::json::parse(kCifarConfig);
        // UNetRes prefix stripped; '_' keys and unknown keys ignored; sample_size as [H, W].
        j["down_block_types"] = {"UNetResDownBlock2D", "UNetResAttnDownBlock2D", "DownBlock2D", "DownBlock2D"};
        j["_some_private_key"] = {1, 2, 3};
        j["resnet_skip_time_act"] = true;  // a UNet2DConditionModel key: ignored
        j["sample_size"] = {64, 64};
        UNetConfig c = unetConfigFromJson(j);
        QVERIFY(c.downBlocks[0] == DownBlockType::Down && c.downBlocks[1] == DownBlockType::AttnDown);
        QCOMPARE(c.sampleSize, 64);
        // _use_default_values forces the listed keys back to __init__ defaults.
        j["_use_default_values"] = {"norm_eps", "freq_shift"};
        c = unetConfigFromJson(j);
        QCOMPARE(c.normEps, 1e-5f);
        QCOMPARE(c.freqShift, 0);
        QCOMPARE(c.flipSinToCos, false);  // not listed: kept from the file
        // Explicit null mid block and time_embedding_dim.
        j["mid_block_type"] = nullptr;
        j["time_embedding_dim"] = 256;
        c = unetConfigFromJson(j);
        QCOMPARE(c.hasMidBlock, false);
        QCOMPARE(c.timeEmbedDim(), 256);
        // "resnet" downsampling is ignored by DownBlock2D (diffusers), so no attention -> accepted.
        nlohmann::json plain = j;
        plain["down_block_types"] = {"DownBlock2D", "DownBlock2D", "DownBlock2D", "DownBlock2D"};
        plain["downsample_type"] = "resnet";
        QCOMPARE(unetConfigFromJson(plain).downBlocks.size(), std::size_t{4});
    }

    void configRejectsUnsupportedValues_data() {
        QTest::addColumn<QString>("key");
        QTest::addColumn<QString>("value");  // JSON
        QTest::addColumn<QString>("expected");
        QTest::newRow("act_fn") << "act_fn"
                                << R"("gelu")"
                                << R"(act_fn = "gelu")";
        QTest::newRow("time embedding") << "time_embedding_type"
                                        << R"("fourier")"
                                        << "time_embedding_type";
        QTest::newRow("down block") << "down_block_types"
                                    << R"(["CrossAttnDownBlock2D","DownBlock2D","DownBlock2D","DownBlock2D"])"
                                    << "'CrossAttnDownBlock2D' is not supported";
        QTest::newRow("up block") << "up_block_types"
                                  << R"(["UpBlock2D","UpBlock2D","SkipUpBlock2D","UpBlock2D"])"
                                  << "up_block_types";
        QTest::newRow("block count") << "block_out_channels"
                                     << "[128, 256]"
                                     << "down_block_types";
        QTest::newRow("groups") << "norm_num_groups"
                                << "48"
                                << "norm_num_groups = 48";
        QTest::newRow("class embed") << "class_embed_type"
                                     << R"("timestep")"
                                     << "class_embed_type";
        QTest::newRow("num class") << "num_class_embeds"
                                   << "10"
                                   << "num_class_embeds";
        QTest::newRow("shift") << "resnet_time_scale_shift"
                               << R"("film")"
                               << "resnet_time_scale_shift";
        QTest::newRow("sample size") << "sample_size"
                                     << "36"
                                     << "sample_size = 36";
        QTest::newRow("sample size type") << "sample_size"
                                          << R"("32")"
                                          << "sample_size";
        QTest::newRow("channels type") << "in_channels"
                                       << "3.5"
                                       << "in_channels = 3.5";
        QTest::newRow("negative channels") << "out_channels"
                                           << "0"
                                           << "out_channels = 0";
        QTest::newRow("mid block") << "mid_block_type"
                                   << R"("UNetMidBlock2DCrossAttn")"
                                   << "mid_block_type";
        QTest::newRow("resnet downsample") << "downsample_type"
                                           << R"("resnet")"
                                           << "downsample_type";
        QTest::newRow("head dim") << "attention_head_dim"
                                  << "48"
                                  << "attention_head_dim = 48";
        QTest::newRow("eps") << "norm_eps"
                             << "-1"
                             << "norm_eps";
    }
    void configRejectsUnsupportedValues() {
        QFETCH(QString, key);
        QFETCH(QString, value);
        QFETCH(QString, expected);
        nlohmann::json j = nlohmann::json::parse(kCifarConfig);
        j[key.toStdString()] = nlohmann::json::parse(value.toStdString());
        const std::string m = configErrorOf([&] { (void)unetConfigFromJson(j); });
        EXPECT_MESSAGE(m, expected.toStdString());
        EXPECT_MESSAGE(m, "config.json");
    }

    void schedulerConfig() {
        std::string cls;
        const SchedulerOptions o = schedulerOptionsFromJson(nlohmann::json::parse(R"({
            "_class_name": "DDPMScheduler", "_diffusers_version": "0.1.1", "beta_end": 0.02,
            "beta_schedule": "linear", "beta_start": 0.0001, "clip_sample": true,
            "num_train_timesteps": 1000, "trained_betas": null, "variance_type": "fixed_large"})"),
                                                            &cls);
        QCOMPARE(cls, std::string("DDPMScheduler"));
        QVERIFY(o.varianceType == VarianceType::FixedLarge);
        QCOMPARE(o.numTrainTimesteps, 1000);
        QCOMPARE(o.betaStart, 1e-4f);
        QCOMPARE(o.betaEnd, 0.02f);
        QVERIFY(o.betaSchedule == BetaSchedule::Linear);

        const SchedulerOptions d = schedulerOptionsFromJson(
            nlohmann::json::parse(
                R"({"_class_name": "DDIMScheduler", "steps_offset": 1, "set_alpha_to_one": false, "unknown": 3,
                "variance_type": "fixed_large", "_use_default_values": ["variance_type"]})"),
            &cls);
        QCOMPARE(cls, std::string("DDIMScheduler"));
        QCOMPARE(d.stepsOffset, 1);
        QCOMPARE(d.setAlphaToOne, false);
        QVERIFY(d.varianceType == VarianceType::FixedSmall);

        const std::string m1 = configErrorOf(
            [] { (void)schedulerOptionsFromJson(nlohmann::json::parse(R"({"variance_type": "learned_range"})")); });
        EXPECT_MESSAGE(m1, "variance_type");
        EXPECT_MESSAGE(m1, "learned_range");
        const std::string m2 = configErrorOf(
            [] { (void)schedulerOptionsFromJson(nlohmann::json::parse(R"({"trained_betas": [0.1, 0.2]})")); });
        EXPECT_MESSAGE(m2, "trained_betas");
        const std::string m3 = configErrorOf(
            [] { (void)schedulerOptionsFromJson(nlohmann::json::parse(R"({"beta_schedule": "sigmoid"})")); });
        EXPECT_MESSAGE(m3, "beta_schedule");
    }

    // --- tensor list and sizes ---------------------------------------------------------

    void cifarTensorListEqualsSpec() {
        std::ifstream in(std::string(TESSERA_TEST_DATA) + "/ddpm_cifar10_32_keys.txt");
        QVERIFY(in.good());
        std::vector<std::string> lines;
        for (std::string line; std::getline(in, line);)
            if (!line.empty()) lines.push_back(line);
        QCOMPARE(lines.size(), std::size_t{328});

        const auto expected = UNetModel::expectedTensors(unetConfigFromJson(nlohmann::json::parse(kCifarConfig)));
        QCOMPARE(expected.size(), std::size_t{328});
        for (std::size_t i = 0; i < lines.size(); ++i)
            QCOMPARE(expected[i].first + " " + shapeText(expected[i].second), lines[i]);
        int shortcuts = 0;
        for (const auto& [name, shape] : expected) shortcuts += name.find("conv_shortcut") != std::string::npos;
        QCOMPARE(shortcuts, 26);  // 13 weights + 13 biases
    }

    void parameterCounts() {
        const UNetConfig cifar = unetConfigFromJson(nlohmann::json::parse(kCifarConfig));
        const UNetModel model = UNetModel::random(cifar, 1);
        QCOMPARE(model.parameterCount(), std::int64_t{35'746'307});
        QCOMPARE(model.tensors().size(), std::size_t{328});

        const auto big = UNetModel::expectedTensors(unetConfigFromJson(config256()));
        QCOMPARE(big.size(), std::size_t{450});
        std::int64_t params = 0;
        for (const auto& [name, shape] : big) {
            std::int64_t n = 1;
            for (auto d : shape) n *= d;
            params += n;
        }
        QCOMPARE(params, std::int64_t{113'673'219});
    }

    void variantsChangeTheTensorList() {
        nlohmann::json j = nlohmann::json::parse(kCifarConfig);
        j["resnet_time_scale_shift"] = "scale_shift";
        auto list = UNetModel::expectedTensors(unetConfigFromJson(j));
        auto find = [&](const std::string& name) {
            for (const auto& [n, s] : list)
                if (n == name) return s;
            return Shape{};
        };
        QCOMPARE(find("mid_block.resnets.0.time_emb_proj.weight"), (Shape{512, 512}));  // 2*Cout
        QCOMPARE(find("mid_block.attentions.0.group_norm.weight"), Shape{});            // no GN (UNetMidBlock2D)
        j["attn_norm_num_groups"] = 16;
        list = UNetModel::expectedTensors(unetConfigFromJson(j));
        QCOMPARE(find("mid_block.attentions.0.group_norm.weight"), (Shape{256}));
        j["mid_block_type"] = nullptr;
        list = UNetModel::expectedTensors(unetConfigFromJson(j));
        for (const auto& [n, s] : list) QVERIFY(n.rfind("mid_block.", 0) != 0);
    }

    // A config the graph cannot be built from is a model error (exit 2 in the CLI), before any
    // tensor is read; downsample_padding is range-checked when the config is read.
    void unbuildableConfigIsAModelError() {
        nlohmann::json config = tinyConfigJson();
        config["downsample_padding"] = 2;
        const std::string dir = writeModel(encode(tinyWeights()), config);
        try {
            (void)UNetModel::load(dir);
            QFAIL("downsample_padding 2 loaded");
        } catch (const ModelError& e) {
            EXPECT_MESSAGE(std::string(e.what()), "downsample_padding = 2: expected an integer from 0 to 1");
        }
        QVERIFY_THROWS_EXCEPTION(std::runtime_error,
                                 (void)unetConfigFromJson(config));  // read from memory: no file to name
    }

    void flopsCountConvsLinearsAndAttention() {
        // One level of 32 channels, no mid block, 8x8 tile: every term written out.
        nlohmann::json j = {{"block_out_channels", {32}},
                            {"down_block_types", {"DownBlock2D"}},
                            {"up_block_types", {"UpBlock2D"}},
                            {"layers_per_block", 1},
                            {"norm_num_groups", 8},
                            {"mid_block_type", nullptr},
                            {"attention_head_dim", nullptr}};
        const UNetConfig plain = unetConfigFromJson(j);
        const double px = 64, t = 128;
        const double expected = 2 * 32 * 3 * 9 * px                                 // conv_in
                                + 2 * t * 32 + 2 * t * t                            // time MLP
                                + 2 * 32 * 32 * 9 * px * 2 + 2 * 32 * t             // down resnet
                                + 2 * (2 * 32 * 64 * 9 * px + 2 * 32 * 32 * 9 * px  // 2 up resnets 64->32
                                       + 2 * 32 * t + 2 * 32 * 64 * px)             //   + shortcut
                                + 2 * 3 * 32 * 9 * px;                              // conv_out
        const UNetModel a = UNetModel::random(plain, 0);
        QCOMPARE(a.flopsPerEvaluation(8, 8), expected);
        j["down_block_types"] = {"AttnDownBlock2D"};
        const UNetModel b = UNetModel::random(unetConfigFromJson(j), 0);
        const double attention = 4 * 2 * px * 32 * 32 + 2 * 2 * px * px * 32;
        QCOMPARE(b.flopsPerEvaluation(8, 8), expected + attention);
        // Convolutions scale with area; cifar at 64x64 costs more than 4x 32x32 (attention is N^2).
        const UNetModel cifar = UNetModel::random(unetConfigFromJson(nlohmann::json::parse(kCifarConfig)), 0);
        const double f32 = cifar.flopsPerEvaluation(32, 32);
        // Published: 6.1 G MACs (Diff-Pruning, Fang et al. 2023), counting conv and linear layers
        // only. The attention matmuls at 16x16 (5 layers) and 4x4 (mid) add 2*N*N*C MACs each.
        const double matmulMacs = 5 * 2.0 * 256 * 256 * 256 + 2.0 * 16 * 16 * 256;
        const double convLinearMacs = f32 / 2 - matmulMacs;
        QVERIFY2(convLinearMacs > 6.0e9 && convLinearMacs < 6.1e9, qPrintable(QString::number(convLinearMacs)));
        QVERIFY(cifar.flopsPerEvaluation(64, 64) > 4 * f32);
    }

    void randomWeightsAreDeterministicWithPyTorchScales() {
        const UNetConfig c = tinyConfig();
        const UNetModel a = UNetModel::random(c, 5);
        const UNetModel b = UNetModel::random(c, 5);
        const UNetModel other = UNetModel::random(c, 6);
        QCOMPARE(a.name(), std::string("random"));
        QCOMPARE(a.tensor("conv_in.weight").data, b.tensor("conv_in.weight").data);
        QVERIFY(a.tensor("conv_in.weight").data != other.tensor("conv_in.weight").data);
        QCOMPARE(a.weightsSha256(), b.weightsSha256());
        QVERIFY(a.weightsSha256() != other.weightsSha256());
        QCOMPARE(a.weightsSha256().size(), std::size_t{64});

        auto maxAbs = [](const HostTensor& t) {
            float m = 0;
            for (float x : t.data) m = std::max(m, std::abs(x));
            return m;
        };
        // conv1 of up_blocks.0.resnets.0: fan_in = (64+64)*9.
        const float bound = 1.0f / std::sqrt(128.0f * 9.0f);
        const auto& w = a.tensor("up_blocks.0.resnets.0.conv1.weight");
        QVERIFY(maxAbs(w) <= bound && maxAbs(w) > 0.9f * bound);
        QVERIFY(maxAbs(a.tensor("up_blocks.0.resnets.0.conv1.bias")) <= bound);
        const auto& gamma = a.tensor("down_blocks.0.resnets.0.norm1.weight");
        for (float g : gamma.data) QVERIFY(g > 0.9f && g < 1.1f);
        QVERIFY(maxAbs(a.tensor("down_blocks.0.resnets.0.norm1.bias")) < 0.1f);
        const std::string m = errorOf([&] { (void)a.tensor("no.such.tensor"); });
        EXPECT_MESSAGE(m, "'no.such.tensor'");
    }

    // Large lists are drawn on several threads: the values are those of each tensor drawn alone
    // (its stream is keyed by its name), biases with their weight's fan-in.
    void randomTensorsAreTheSameOnThreads() {
        TensorList list;
        for (int k = 0; k < 18; ++k) {
            list.push_back({"blocks." + std::to_string(k) + ".linear.weight", {1024, 1024}});
            list.push_back({"blocks." + std::to_string(k) + ".linear.bias", {1024}});
        }
        list.push_back({"blocks.0.norm.weight", {1024}});
        const auto all = randomTensors(list, 11);  // 18.9 M values: the threaded path
        QCOMPARE(all.size(), list.size());
        for (const auto& [name, shape] : list) {
            TensorList alone{{name, shape}};
            if (name.ends_with(".bias"))
                alone.insert(alone.begin(), {name.substr(0, name.size() - 4) + "weight", {1024, 1024}});
            const auto one = randomTensors(alone, 11);
            QVERIFY2(one.at(name).data == all.at(name).data, name.c_str());
            QCOMPARE(one.at(name).shape, shape);
        }
        const float bound = 1.0f / std::sqrt(1024.0f);
        for (const float x : all.at("blocks.3.linear.bias").data) QVERIFY(std::abs(x) <= bound);
    }

    // --- loading folders -----------------------------------------------------------------

    void loadsF32F16BF16() {
        const auto weights = tinyWeights();
        for (const auto dtype : {SafetensorsDtype::F32, SafetensorsDtype::F16, SafetensorsDtype::BF16}) {
            const std::string dir = writeModel(encode(weights, dtype));
            const UNetModel model = UNetModel::load(dir);
            QCOMPARE(model.tensors().size(), weights.size());
            QVERIFY(model.extraTensors().empty());
            QCOMPARE(model.directory(), dir);
            QCOMPARE(model.name(), QFileInfo(QString::fromStdString(dir)).fileName().toStdString());
            QCOMPARE(model.config().blockOutChannels, (std::vector<int>{32, 64}));
            for (const auto& [name, t] : weights) {
                const HostTensor& loaded = model.tensor(name);
                QCOMPARE(loaded.shape, t.shape);
                std::vector<float> expected = t.data;
                for (float& x : expected) x = storedAs(dtype, x);
                QCOMPARE(loaded.data, expected);
            }
            const std::string bytes = readBytes(dir + "/diffusion_pytorch_model.safetensors");
            QCOMPARE(model.weightsSha256(), sha256Hex(bytes.data(), bytes.size()));
            // No scheduler_config.json: defaults.
            QCOMPARE(model.schedulerClass(), std::string("DDPMScheduler"));
            QVERIFY(model.schedulerOptions().varianceType == VarianceType::FixedSmall);
        }
    }

    void readsSchedulerConfig() {
        const std::string dir = writeModel(encode(tinyWeights()));
        writeText(dir + "/scheduler_config.json",
                  R"({"_class_name": "DDPMScheduler", "variance_type": "fixed_large", "num_train_timesteps": 1000})");
        const UNetModel model = UNetModel::load(dir);
        QVERIFY(model.schedulerOptions().varianceType == VarianceType::FixedLarge);
        writeText(dir + "/scheduler_config.json", R"({"variance_type": "learned"})");
        const std::string m = errorOf([&] { (void)UNetModel::load(dir); });
        EXPECT_MESSAGE(m, dir + "/scheduler_config.json");
        EXPECT_MESSAGE(m, "variance_type");
    }

    void acceptsLegacyAttentionNames() {
        auto weights = tinyWeights();
        std::map<std::string, HostTensor> legacy;
        int renamed = 0;
        for (const auto& [name, t] : weights) {
            std::string n = name;
            for (const auto& [now, old] :
                 std::vector<std::pair<std::string, std::string>>{{".to_q.", ".query."},
                                                                  {".to_k.", ".key."},
                                                                  {".to_v.", ".value."},
                                                                  {".to_out.0.", ".proj_attn."}}) {
                const auto at = n.find(now);
                if (at != std::string::npos) {
                    n.replace(at, now.size(), old);
                    ++renamed;
                }
            }
            legacy[n] = t;
        }
        QCOMPARE(renamed, 4 * 2 * 4);  // 4 attentions (down 1, mid 1, up 2) x 4 layers x weight+bias
        QVERIFY(legacy.count("mid_block.attentions.0.proj_attn.weight") == 1);
        const UNetModel model = UNetModel::load(writeModel(encode(legacy)));
        QVERIFY(model.extraTensors().empty());
        QCOMPARE(model.tensor("mid_block.attentions.0.to_out.0.weight").data,
                 weights.at("mid_block.attentions.0.to_out.0.weight").data);
        QCOMPARE(model.tensor("up_blocks.0.attentions.1.to_k.bias").data,
                 weights.at("up_blocks.0.attentions.1.to_k.bias").data);
        // Also through fromTensors.
        const UNetModel memory = UNetModel::fromTensors(tinyConfig(), legacy);
        QCOMPARE(memory.tensor("down_blocks.1.attentions.0.to_q.weight").data,
                 weights.at("down_blocks.1.attentions.0.to_q.weight").data);
        QCOMPARE(memory.name(), std::string("in-memory"));
    }

    void reportsExtraTensors() {
        auto tensors = encode(tinyWeights());
        tensors["ema.decay"] = {
            SafetensorsDtype::F32, {}, encodeFloats(SafetensorsDtype::F32, std::vector<float>{0.999f})};
        tensors["class_embedding.weight"] = {SafetensorsDtype::I64, {2}, std::vector<std::byte>(16)};
        const UNetModel model = UNetModel::load(writeModel(tensors));
        QCOMPARE(model.extraTensors(), (std::vector<std::string>{"class_embedding.weight", "ema.decay"}));
        QVERIFY(!model.has("ema.decay"));
    }

    void rejectsMissingTensor() {
        auto tensors = encode(tinyWeights());
        tensors.erase("up_blocks.0.attentions.1.to_k.weight");
        const std::string dir = writeModel(tensors);
        const std::string m = errorOf([&] { (void)UNetModel::load(dir); });
        EXPECT_MESSAGE(m, dir + "/diffusion_pytorch_model.safetensors");
        EXPECT_MESSAGE(m, "missing tensor 'up_blocks.0.attentions.1.to_k.weight'");
        EXPECT_MESSAGE(m, "legacy 'up_blocks.0.attentions.1.key.weight'");
        EXPECT_MESSAGE(m, "expected shape [64, 64]");
    }

    void rejectsWrongShape() {
        auto weights = tinyWeights();
        // Up block 1, resnet 0: 64 (from up block 0) + 32 (down block 0's downsampler) -> 32.
        weights["up_blocks.1.resnets.0.conv_shortcut.weight"].shape = {32, 80, 1, 1};
        weights["up_blocks.1.resnets.0.conv_shortcut.weight"].data.resize(32 * 80);
        const std::string dir = writeModel(encode(weights));
        const std::string m = errorOf([&] { (void)UNetModel::load(dir); });
        EXPECT_MESSAGE(m, dir + "/diffusion_pytorch_model.safetensors");
        EXPECT_MESSAGE(
            m, "tensor 'up_blocks.1.resnets.0.conv_shortcut.weight': expected [32, 96, 1, 1], found [32, 80, 1, 1]");

        // Through a legacy name the stored name is given too.
        auto legacy = encode(tinyWeights());
        auto node = legacy.extract("mid_block.attentions.0.to_q.weight");
        node.key() = "mid_block.attentions.0.query.weight";
        node.mapped().shape = {64, 1, 1, 64};  // an unsqueezed conv kernel
        legacy.insert(std::move(node));
        const std::string m2 = errorOf([&] { (void)UNetModel::load(writeModel(legacy)); });
        EXPECT_MESSAGE(m2,
                       "tensor 'mid_block.attentions.0.to_q.weight' (stored as 'mid_block.attentions.0.query.weight'): "
                       "expected [64, 64], found [64, 1, 1, 64]");
    }

    void rejectsNonFiniteWeights() {
        for (const float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
            auto weights = tinyWeights();
            weights["down_blocks.0.resnets.0.conv2.weight"].data[17] = bad;
            const std::string dir = writeModel(encode(weights));
            const std::string m = errorOf([&] { (void)UNetModel::load(dir); });
            EXPECT_MESSAGE(m, dir + "/diffusion_pytorch_model.safetensors");
            EXPECT_MESSAGE(m, "tensor 'down_blocks.0.resnets.0.conv2.weight' holds a non-finite value (" +
                                  std::string(std::isnan(bad) ? "NaN" : "Inf") + ") at element 17");
            const std::string m2 = errorOf([&] { (void)UNetModel::fromTensors(tinyConfig(), weights); });
            EXPECT_MESSAGE(m2, "'down_blocks.0.resnets.0.conv2.weight' holds a non-finite value");
        }
        // F16 overflow becomes Inf on disk and is caught the same way.
        auto weights = tinyWeights();
        weights["conv_out.bias"].data[1] = 1e6f;
        const std::string m =
            errorOf([&] { (void)UNetModel::load(writeModel(encode(weights, SafetensorsDtype::F16))); });
        EXPECT_MESSAGE(m, "tensor 'conv_out.bias' holds a non-finite value (Inf) at element 1");
    }

    void rejectsWrongDtype() {
        auto tensors = encode(tinyWeights());
        auto& t = tensors.at("time_embedding.linear_1.weight");
        t.dtype = SafetensorsDtype::I64;
        t.bytes.assign(static_cast<std::size_t>(128 * 32 * 8), std::byte{0});
        const std::string dir = writeModel(tensors);
        const std::string m = errorOf([&] { (void)UNetModel::load(dir); });
        EXPECT_MESSAGE(m, dir + "/diffusion_pytorch_model.safetensors");
        EXPECT_MESSAGE(m, "tensor 'time_embedding.linear_1.weight' has dtype I64");
    }

    void rejectsBrokenFolders() {
        const std::string none = tmp_.filePath(QStringLiteral("nothing-here")).toStdString();
        EXPECT_MESSAGE(errorOf([&] { (void)UNetModel::load(none); }), none);

        const std::string dir = writeModel(encode(tinyWeights()));
        QFile::remove(QString::fromStdString(dir + "/config.json"));
        const std::string m1 = errorOf([&] { (void)UNetModel::load(dir); });
        EXPECT_MESSAGE(m1, dir + "/config.json': not found");

        writeText(dir + "/config.json", "{ not json");
        EXPECT_MESSAGE(errorOf([&] { (void)UNetModel::load(dir); }), dir + "/config.json': not valid JSON");

        nlohmann::json bad = tinyConfigJson();
        bad["act_fn"] = "mish";
        writeText(dir + "/config.json", bad.dump());
        const std::string m2 = errorOf([&] { (void)UNetModel::load(dir); });
        EXPECT_MESSAGE(m2, dir + "/config.json': act_fn = \"mish\"");

        nlohmann::json other = tinyConfigJson();
        other["_class_name"] = "UNet2DConditionModel";
        writeText(dir + "/config.json", other.dump());
        EXPECT_MESSAGE(errorOf([&] { (void)UNetModel::load(dir); }), "_class_name is 'UNet2DConditionModel'");

        writeText(dir + "/config.json", tinyConfigJson().dump());
        QFile::remove(QString::fromStdString(dir + "/diffusion_pytorch_model.safetensors"));
        writeText(dir + "/diffusion_pytorch_model.bin", "PK");
        EXPECT_MESSAGE(errorOf([&] { (void)UNetModel::load(dir); }), "diffusion_pytorch_model.bin: PyTorch pickle");
        QFile::remove(QString::fromStdString(dir + "/diffusion_pytorch_model.bin"));
        EXPECT_MESSAGE(errorOf([&] { (void)UNetModel::load(dir); }), "diffusion_pytorch_model.safetensors: not found");

        // A damaged weights file surfaces as a ModelError naming the file.
        writeText(dir + "/diffusion_pytorch_model.safetensors", std::string("\x10\0\0\0\0\0\0\0{}", 10));
        const std::string m3 = errorOf([&] { (void)UNetModel::load(dir); });
        EXPECT_MESSAGE(m3, dir + "/diffusion_pytorch_model.safetensors: header length 16 runs past the end");
    }

    void loadsShardedCheckpoint() {
        const auto weights = tinyWeights();
        const std::string dir = writeModel(encode(weights));
        QFile::remove(QString::fromStdString(dir + "/diffusion_pytorch_model.safetensors"));
        std::map<std::string, SafetensorsTensorData> first, second;
        nlohmann::json map = nlohmann::json::object();
        for (auto& [name, data] : encode(weights)) {
            const bool early = name < "m";
            (early ? first : second)[name] = data;
            map[name] = early ? "diffusion_pytorch_model-00001-of-00002.safetensors"
                              : "diffusion_pytorch_model-00002-of-00002.safetensors";
        }
        writeSafetensors(dir + "/diffusion_pytorch_model-00001-of-00002.safetensors", first);
        writeSafetensors(dir + "/diffusion_pytorch_model-00002-of-00002.safetensors", second);
        writeText(dir + "/diffusion_pytorch_model.safetensors.index.json",
                  nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump());
        const UNetModel model = UNetModel::load(dir);
        QCOMPARE(model.tensor("up_blocks.1.resnets.1.conv2.weight").data,
                 weights.at("up_blocks.1.resnets.1.conv2.weight").data);
        QCOMPARE(model.tensor("conv_in.bias").data, weights.at("conv_in.bias").data);
        QCOMPARE(model.weightsSha256().size(), std::size_t{64});

        map["conv_in.bias"] = "diffusion_pytorch_model-00002-of-00002.safetensors";
        writeText(dir + "/diffusion_pytorch_model.safetensors.index.json", nlohmann::json{{"weight_map", map}}.dump());
        EXPECT_MESSAGE(errorOf([&] { (void)UNetModel::load(dir); }),
                       "tensor 'conv_in.bias' is listed in shard diffusion_pytorch_model-00002-of-00002.safetensors");
        map["conv_in.bias"] = "../elsewhere.safetensors";
        writeText(dir + "/diffusion_pytorch_model.safetensors.index.json", nlohmann::json{{"weight_map", map}}.dump());
        EXPECT_MESSAGE(errorOf([&] { (void)UNetModel::load(dir); }), "not a file name in the model folder");
    }

    void loadsPipelineLayout() {
        // A pipeline folder: unet/ and scheduler/ subfolders.
        const QString root = tmp_.filePath(QStringLiteral("pipeline"));
        QDir().mkpath(root + "/unet");
        QDir().mkpath(root + "/scheduler");
        const std::string r = root.toStdString();
        writeText(r + "/unet/config.json", tinyConfigJson().dump());
        writeSafetensors(r + "/unet/diffusion_pytorch_model.safetensors", encode(tinyWeights()));
        writeText(r + "/scheduler/scheduler_config.json", R"({"_class_name": "DDIMScheduler"})");
        const UNetModel model = UNetModel::load(r);
        QCOMPARE(model.schedulerClass(), std::string("DDIMScheduler"));
        QCOMPARE(model.name(), std::string("pipeline"));
        QCOMPARE(UNetModel::load(r + "/").name(), std::string("pipeline"));
    }

    void fromTensorsValidatesAndHashes() {
        auto weights = tinyWeights();
        const UNetModel a = UNetModel::fromTensors(tinyConfig(), weights);
        const UNetModel b = UNetModel::fromTensors(tinyConfig(), weights);
        QCOMPARE(a.weightsSha256(), b.weightsSha256());
        weights["conv_out.bias"].data[0] += 1.0f;
        QVERIFY(UNetModel::fromTensors(tinyConfig(), weights).weightsSha256() != a.weightsSha256());
        weights.erase("conv_norm_out.weight");
        const std::string m = errorOf([&] { (void)UNetModel::fromTensors(tinyConfig(), weights); });
        EXPECT_MESSAGE(m, "missing tensor 'conv_norm_out.weight', expected shape [32]");
        auto shortData = tinyWeights();
        shortData["conv_in.bias"].data.pop_back();
        EXPECT_MESSAGE(errorOf([&] { (void)UNetModel::fromTensors(tinyConfig(), shortData); }),
                       "'conv_in.bias': 31 values for shape [32]");
    }
};

QTEST_GUILESS_MAIN(TestUNetModel)
#include "tst_unetmodel.moc"
