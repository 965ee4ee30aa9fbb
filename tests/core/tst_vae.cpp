// AutoencoderKL (diffusers models/autoencoders/autoencoder_kl.py): config defaults and rejections, the graphs'
// tensor list (SD's 248 tensors / 83,653,863 parameters; every fixture file's list), shapes and
// FLOPs, loading VAE folders written here (F32/F16/BF16, legacy attention names, a pipeline
// folder) and broken ones (missing, mis-shaped, NaN tensors named with their file), input
// checks, and decode / encode on the CPU backend against diffusers' own outputs
// (tests/data/vae, written by tools/reference/make_vae_fixtures.py).
#include <QtTest/QtTest>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/Sha256.h"
#include "core/cpu/CpuBackend.h"
#include "core/formats/Safetensors.h"
#include "core/models/vae/VaeConfig.h"
#include "core/models/vae/VaeGraph.h"
#include "core/models/vae/VaeModel.h"
#include "tests/core/ModelTestSupport.h"

using namespace tessera;
using namespace model_test;
using Shape = std::vector<std::int64_t>;

namespace {

const std::string kFixtures = TESSERA_TEST_DATA "/vae";
const char* kCases[] = {"kl2", "kl4", "kl_plain"};

// stabilityai/sd-vae-ft-mse / runwayml SD 1.5 vae/config.json.
const char* kSdConfig = R"({
  "_class_name": "AutoencoderKL",
  "_diffusers_version": "0.4.2",
  "act_fn": "silu",
  "block_out_channels": [128, 256, 512, 512],
  "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D"],
  "in_channels": 3,
  "latent_channels": 4,
  "layers_per_block": 2,
  "norm_num_groups": 32,
  "out_channels": 3,
  "sample_size": 512,
  "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D"]
})";

// Two levels, every feature, small enough to write and run in milliseconds.
nlohmann::json tinyConfigJson() {
    return nlohmann::json::parse(R"({
      "_class_name": "AutoencoderKL",
      "block_out_channels": [8, 16],
      "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D"],
      "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D"],
      "layers_per_block": 1,
      "norm_num_groups": 4,
      "latent_channels": 4
    })");
}

VaeConfig tinyConfig() { return vaeConfigFromJson(tinyConfigJson()); }

// Deterministic weights of roughly PyTorch's default scale (uniform +-1/sqrt(fan_in); norms
// 1 +- 0.1 and +-0.1).
std::map<std::string, HostTensor> randomWeights(const VaeConfig& config, std::uint32_t seed = 11) {
    std::map<std::string, HostTensor> weights;
    std::uint32_t state = seed;
    auto uniform = [&state] {  // in [-1, 1)
        state = state * 1664525u + 1013904223u;
        return static_cast<float>(state >> 8) * (2.0f / 16777216.0f) - 1.0f;
    };
    for (const auto& [name, shape] : VaeModel::expectedTensors(config)) {
        HostTensor t{shape, {}};
        t.data.resize(static_cast<std::size_t>(t.numel()));
        const bool norm = name.find("norm") != std::string::npos;
        const bool gamma = norm && name.ends_with(".weight");
        const std::int64_t fanIn = shape.size() > 1 ? t.numel() / shape[0] : 16;
        const float scale = norm ? 0.1f : 1.0f / std::sqrt(static_cast<float>(fanIn));
        for (float& x : t.data) x = (gamma ? 1.0f : 0.0f) + scale * uniform();
        weights.emplace(name, std::move(t));
    }
    return weights;
}

HostTensor randomTensor(Shape shape, std::uint32_t seed) {
    HostTensor t{std::move(shape), {}};
    t.data.resize(static_cast<std::size_t>(t.numel()));
    std::uint32_t state = seed;
    for (float& x : t.data) {
        state = state * 1664525u + 1013904223u;
        x = static_cast<float>(state >> 8) * (2.0f / 16777216.0f) - 1.0f;
    }
    return t;
}

std::set<std::string> nameShapes(const TensorList& list) {
    std::set<std::string> out;
    for (const auto& [name, shape] : list) out.insert(name + " " + shapeToString(shape));
    return out;
}

HostTensor readTensor(const SafetensorsFile& file, const std::string& name) {
    const SafetensorsTensorInfo* info = file.find(name);
    if (info == nullptr) throw std::runtime_error(file.path() + ": no tensor " + name);
    return HostTensor{info->shape, file.readFloat32(*info)};
}

// max |got - want| / max |want|: the relative error of a whole output.
double relativeError(const HostTensor& got, const HostTensor& want) {
    double diff = 0.0, scale = 0.0;
    for (std::size_t i = 0; i < want.data.size(); ++i) {
        diff = std::max(diff, std::abs(static_cast<double>(got.data[i]) - want.data[i]));
        scale = std::max(scale, std::abs(static_cast<double>(want.data[i])));
    }
    return diff / std::max(scale, 1e-30);
}

bool fixturesPresent() { return std::ifstream(kFixtures + "/cases.json").good(); }

}  // namespace

class TestVae : public QObject {
    Q_OBJECT

private:
    QTemporaryDir tmp_;
    int folders_ = 0;

    // A fresh VAE folder (or a pipeline folder holding vae/ when `pipeline`).
    std::string writeVae(const std::map<std::string, SafetensorsTensorData>& tensors,
                         const nlohmann::json& config = tinyConfigJson(), bool pipeline = false) {
        const std::string root = tmp_.filePath(QStringLiteral("vae%1").arg(++folders_)).toStdString();
        const std::string dir = pipeline ? root + "/vae" : root;
        QDir().mkpath(QString::fromStdString(dir));
        writeText(dir + "/config.json", config.dump(2));
        writeSafetensors(dir + "/diffusion_pytorch_model.safetensors", tensors, {{"format", "pt"}});
        return root;
    }

private slots:
    void initTestCase() { QVERIFY(tmp_.isValid()); }

    // --- config.json -----------------------------------------------------------------

    void configDefaultsMatchDiffusers() {
        const VaeConfig c = vaeConfigFromJson(nlohmann::json::object());
        QCOMPARE(c.inChannels, 3);
        QCOMPARE(c.outChannels, 3);
        QCOMPARE(c.blockOutChannels, std::vector<int>{64});
        QCOMPARE(c.layersPerBlock, 1);
        QCOMPARE(c.latentChannels, 4);
        QCOMPARE(c.normNumGroups, 32);
        QCOMPARE(c.sampleSize, 32);
        QCOMPARE(c.scalingFactor, 0.18215f);
        QVERIFY(!c.shiftFactor && !c.latentsMean && !c.latentsStd);
        QVERIFY(c.forceUpcast && c.useQuantConv && c.usePostQuantConv && c.midBlockAddAttention);
        QCOMPARE(c.scaleFactor(), 1);
    }

    void sdConfigParsed() {
        const VaeConfig c = vaeConfigFromJson(nlohmann::json::parse(kSdConfig));
        QCOMPARE(c.blockOutChannels, (std::vector<int>{128, 256, 512, 512}));
        QCOMPARE(c.layersPerBlock, 2);
        QCOMPARE(c.sampleSize, 512);
        QCOMPARE(c.scaleFactor(), 8);
        QCOMPARE(c.forceUpcast, true);  // absent: true
        nlohmann::json sdxl = nlohmann::json::parse(kSdConfig);
        sdxl["scaling_factor"] = 0.13025;
        sdxl["force_upcast"] = false;
        sdxl["shift_factor"] = nullptr;
        sdxl["sample_size"] = {1024, 1024};
        sdxl["latents_mean"] = {0.1, 0.2, 0.3, 0.4};
        sdxl["latents_std"] = {1.0, 2.0, 3.0, 4.0};
        sdxl["_use_default_values"] = {"mid_block_add_attention"};
        sdxl["mid_block_add_attention"] = false;  // listed in _use_default_values: ignored
        sdxl["some_future_key"] = 1;              // unknown: warned, ignored
        const VaeConfig x = vaeConfigFromJson(sdxl);
        QCOMPARE(x.scalingFactor, 0.13025f);
        QCOMPARE(x.forceUpcast, false);
        QVERIFY(!x.shiftFactor);
        QCOMPARE(x.sampleSize, 1024);
        QCOMPARE(*x.latentsMean, (std::vector<float>{0.1f, 0.2f, 0.3f, 0.4f}));
        QCOMPARE(x.latentsStd->size(), std::size_t{4});
        QCOMPARE(x.midBlockAddAttention, true);
        // toJson round trip.
        QCOMPARE(toJson(vaeConfigFromJson(toJson(x))), toJson(x));
        QCOMPARE(toJson(x).at("scaling_factor").get<double>(), 0.13025);
        nlohmann::json shifted = tinyConfigJson();
        shifted["shift_factor"] = 0.1159;
        QCOMPARE(*vaeConfigFromJson(shifted).shiftFactor, 0.1159f);
        // diffusers' Encoder/Decoder build their blocks with get_down_block/get_up_block, which
        // strip a "UNetRes" prefix, as the UNets' readers do.
        nlohmann::json prefixed = tinyConfigJson();
        prefixed["down_block_types"] = {"UNetResDownEncoderBlock2D", "DownEncoderBlock2D"};
        prefixed["up_block_types"] = {"UpDecoderBlock2D", "UNetResUpDecoderBlock2D"};
        QCOMPARE(vaeConfigFromJson(prefixed).levels(), 2);
    }

    void configRejections_data() {
        QTest::addColumn<QString>("patch");  // merged into tinyConfigJson()
        QTest::addColumn<QString>("part1");
        QTest::addColumn<QString>("part2");
        auto row = [](const char* name, const char* patch, const char* a, const char* b) {
            QTest::newRow(name) << QString(patch) << QString(a) << QString(b);
        };
        row("act_fn", R"({"act_fn": "relu"})", "act_fn = \"relu\"", "only \"silu\"");
        row("down block type", R"({"down_block_types": ["DownBlock2D", "DownEncoderBlock2D"]})",
            "'DownBlock2D' is not supported", "only DownEncoderBlock2D");
        row("up block type", R"({"up_block_types": ["UpDecoderBlock2D", "AttnUpDecoderBlock2D"]})",
            "'AttnUpDecoderBlock2D' is not supported", "only UpDecoderBlock2D");
        row("down count", R"({"down_block_types": ["DownEncoderBlock2D"]})", "down_block_types",
            "has 1 entries but block_out_channels has 2");
        row("up count", R"({"up_block_types": ["UpDecoderBlock2D","UpDecoderBlock2D","UpDecoderBlock2D"]})",
            "up_block_types", "has 3 entries but block_out_channels has 2");
        row("no levels", R"({"block_out_channels": []})", "block_out_channels", "non-empty array");
        row("too many levels", R"({"block_out_channels": [8,8,8,8,8,8,8,8,8]})", "has 9 entries", "at most 8 levels");
        row("zero width", R"({"block_out_channels": [0, 16]})", "block_out_channels = 0", "from 1 to 4096");
        row("huge width", R"({"block_out_channels": [8, 18446744073709551615]})", "block_out_channels",
            "from 1 to 4096");
        row("groups", R"({"norm_num_groups": 3})", "norm_num_groups = 3", "does not divide block_out_channels entry 8");
        row("layers", R"({"layers_per_block": 0})", "layers_per_block = 0", "from 1 to 8");
        row("latent", R"({"latent_channels": 65})", "latent_channels = 65", "from 1 to 64");
        row("in_channels", R"({"in_channels": "3"})", "in_channels = \"3\"", "expected an integer");
        row("scaling zero", R"({"scaling_factor": 0})", "scaling_factor = 0", "expected a number from 1e-06");
        row("scaling text", R"({"scaling_factor": "0.18"})", "scaling_factor", "expected a number");
        row("shift", R"({"shift_factor": [1]})", "shift_factor", "expected a number");
        row("force_upcast", R"({"force_upcast": 1})", "force_upcast = 1", "expected true or false");
        row("quant conv", R"({"use_quant_conv": "yes"})", "use_quant_conv", "expected true or false");
        row("sample_size", R"({"sample_size": "big"})", "sample_size", "expected an integer or [height, width]");
        row("sample_size range", R"({"sample_size": 100000})", "sample_size = 100000", "from 1 to 8192");
        row("latents_mean length", R"({"latents_mean": [0.1, 0.2]})", "latents_mean",
            "has 2 entries; expected latent_channels = 4");
        row("latents_std zero", R"({"latents_std": [1, 0, 1, 1]})", "latents_std", "no entry may be 0");
        row("use defaults", R"({"_use_default_values": "all"})", "_use_default_values", "expected an array");
    }

    void configRejections() {
        QFETCH(QString, patch);
        QFETCH(QString, part1);
        QFETCH(QString, part2);
        nlohmann::json j = tinyConfigJson();
        j.merge_patch(nlohmann::json::parse(patch.toStdString()));
        const std::string m = configErrorOf([&] { (void)vaeConfigFromJson(j); });
        EXPECT_MESSAGE(m, "config.json: ");
        EXPECT_MESSAGE(m, part1.toStdString());
        EXPECT_MESSAGE(m, part2.toStdString());
        EXPECT_MESSAGE(configErrorOf([] { (void)vaeConfigFromJson(nlohmann::json::array()); }),
                       "expected a JSON object");
    }

    // --- the graphs ----------------------------------------------------------------------

    void sdTensorList() {
        const VaeConfig c = vaeConfigFromJson(nlohmann::json::parse(kSdConfig));
        const TensorList list = VaeModel::expectedTensors(c);
        QCOMPARE(list.size(), std::size_t{248});  // SD's VAE: 248 tensors
        const std::set<std::string> set = nameShapes(list);
        QCOMPARE(set.size(), list.size());  // no name twice
        for (const char* entry :
             {"encoder.conv_in.weight [128, 3, 3, 3]",
              "encoder.down_blocks.1.resnets.0.conv_shortcut.weight [256, 128, 1, 1]",
              "encoder.down_blocks.2.downsamplers.0.conv.weight [512, 512, 3, 3]",
              "encoder.mid_block.attentions.0.to_q.weight [512, 512]",
              "encoder.mid_block.attentions.0.group_norm.bias [512]", "encoder.conv_out.weight [8, 512, 3, 3]",
              "quant_conv.weight [8, 8, 1, 1]", "post_quant_conv.weight [4, 4, 1, 1]",
              "decoder.conv_in.weight [512, 4, 3, 3]", "decoder.mid_block.attentions.0.to_out.0.bias [512]",
              "decoder.up_blocks.0.resnets.0.conv1.weight [512, 512, 3, 3]",
              "decoder.up_blocks.2.resnets.0.conv_shortcut.weight [256, 512, 1, 1]",
              "decoder.up_blocks.3.resnets.2.norm2.weight [128]", "decoder.up_blocks.2.upsamplers.0.conv.bias [256]",
              "decoder.conv_norm_out.weight [128]", "decoder.conv_out.weight [3, 128, 3, 3]"})
            QVERIFY2(set.count(entry) == 1, entry);
        int shortcuts = 0, downsamplers = 0, upsamplers = 0;
        for (const auto& [name, shape] : list) {
            shortcuts += name.ends_with("conv_shortcut.weight");
            downsamplers += name.ends_with("downsamplers.0.conv.weight");
            upsamplers += name.ends_with("upsamplers.0.conv.weight") && name.find("down") == std::string::npos;
        }
        QCOMPARE(shortcuts, 4);  // encoder down 1, 2; decoder up 2, 3
        QCOMPARE(downsamplers, 3);
        QCOMPARE(upsamplers, 3);
        QVERIFY(!set.count("decoder.up_blocks.3.upsamplers.0.conv.weight [128, 128, 3, 3]"));
        // 83,653,863: the published SD VAE's parameter count.
        QCOMPARE(
            VaeModel::fromTensors(tinyConfig(), randomWeights(tinyConfig())).parameterCount(),
            buildVaeEncoderGraph(tinyConfig()).parameterCount() + buildVaeDecoderGraph(tinyConfig()).parameterCount());
        QCOMPARE(buildVaeEncoderGraph(c).parameterCount() + buildVaeDecoderGraph(c).parameterCount(),
                 std::int64_t{83'653'863});

        // Optional parts: the mid-block attentions (10 tensors each) and the quant convs (2 each).
        nlohmann::json j = nlohmann::json::parse(kSdConfig);
        j["mid_block_add_attention"] = false;
        j["use_quant_conv"] = false;
        const TensorList plain = VaeModel::expectedTensors(vaeConfigFromJson(j));
        QCOMPARE(plain.size(), std::size_t{248 - 20 - 2});
        for (const auto& [name, shape] : plain)
            QVERIFY2(name.find("attentions") == std::string::npos && !name.starts_with("quant_conv"), name.c_str());
        j["use_post_quant_conv"] = false;
        QCOMPARE(VaeModel::expectedTensors(vaeConfigFromJson(j)).size(), std::size_t{248 - 20 - 4});
    }

    void graphShapes() {
        const VaeConfig c = vaeConfigFromJson(nlohmann::json::parse(kSdConfig));
        const ModelGraph dec = buildVaeDecoderGraph(c), enc = buildVaeEncoderGraph(c);
        QCOMPARE(dec.inputs().size(), std::size_t{1});
        QCOMPARE(dec.outputs().size(), std::size_t{1});
        // Sizes are given as the image's: the latent is the value of divisor 8.
        QCOMPARE(dec.value(dec.inputs()[0]).divisor, 8);
        QCOMPARE(dec.value(dec.outputs()[0]).divisor, 1);
        QCOMPARE(dec.shape(dec.inputs()[0], 2, 64, 80), (Shape{2, 4, 8, 10}));
        QCOMPARE(dec.shape(dec.outputs()[0], 2, 64, 80), (Shape{2, 3, 64, 80}));
        QCOMPARE(enc.shape(enc.inputs()[0], 1, 64, 80), (Shape{1, 3, 64, 80}));
        QCOMPARE(enc.shape(enc.outputs()[0], 1, 64, 80), (Shape{1, 8, 8, 10}));
        QCOMPARE(dec.downsampleFactor(), 8);
        QCOMPARE(enc.downsampleFactor(), 8);
        EXPECT_MESSAGE(configErrorOf([&] { dec.checkTileSize(60, 80); }),
                       "tile height 60 is not a positive multiple of 8");
        // The fused graphs keep inputs, outputs and parameters.
        const ModelGraph fused = vaeDecoderExecutionGraph(c);
        QVERIFY(fused.ops().size() < dec.ops().size());
        QCOMPARE(fused.parameterList(), dec.parameterList());
        QCOMPARE(fused.shape(fused.outputs()[0], 1, 64, 80), (Shape{1, 3, 64, 80}));
        // A config the graph cannot be built from names the key.
        VaeConfig bad = c;
        bad.normNumGroups = 48;
        EXPECT_MESSAGE(
            errorOf([&] { (void)VaeModel::expectedTensors(bad); }),
            "config.json: norm_num_groups: 48 does not divide 128 channels of encoder.down_blocks.0.resnets.0.norm1");
        bad = c;
        bad.blockOutChannels.clear();
        EXPECT_MESSAGE(errorOf([&] { (void)VaeModel::expectedTensors(bad); }), "block_out_channels: 0 levels");
    }

    // One level (scale factor 1), so every conv runs at H x W pixels: conv_in 4->8, the mid
    // block's 4 convs 8->8, the up block's 2 resnets (4 convs), conv_out 8->3, all 3x3; the
    // 1x1 post_quant_conv 4->4; attention: 4 projections C x C per pixel and QK^T, AV.
    void flopsCounted() {
        nlohmann::json j = tinyConfigJson();
        j["block_out_channels"] = {8};
        j["down_block_types"] = {"DownEncoderBlock2D"};
        j["up_block_types"] = {"UpDecoderBlock2D"};
        const VaeConfig c = vaeConfigFromJson(j);
        const VaeModel vae = VaeModel::fromTensors(c, randomWeights(c));
        const double P = 12.0 * 20.0, C = 8.0;
        const double convs = 2.0 * P * (4 * 8 * 9 + 8 * (8 * 8 * 9) + 8 * 3 * 9 + 4 * 4);
        const double attention = 4 * 2.0 * C * C * P + 2 * 2.0 * P * P * C;
        QCOMPARE(vae.decoderFlops(12, 20), convs + attention);
        // Encoder: conv_in 3->8, one resnet (2 convs), mid block (4 convs), conv_out 8->8, quant_conv 8->8.
        QCOMPARE(vae.encoderFlops(12, 20), 2.0 * P * (3 * 8 * 9 + 6 * (8 * 8 * 9) + 8 * 8 * 9 + 8 * 8) + attention);
        // SD at 512 x 512: 1.257 T multiply-adds in the decoder (the published ~1.24-1.27 T),
        // 0.558 T in the encoder (counted layer by layer outside this code base).
        const VaeConfig sd = vaeConfigFromJson(nlohmann::json::parse(kSdConfig));
        const double decoder = buildVaeDecoderGraph(sd).flops(512, 512),
                     encoder = buildVaeEncoderGraph(sd).flops(512, 512);
        QVERIFY2(std::abs(decoder / 2.514518933504e12 - 1.0) < 1e-9, qPrintable(QString::number(decoder)));
        QVERIFY2(std::abs(encoder / 1.116658466816e12 - 1.0) < 1e-9, qPrintable(QString::number(encoder)));
        // Doubling both sides: convs x4, the attention's N^2 part x16.
        QVERIFY(buildVaeDecoderGraph(sd).flops(1024, 1024) > 4.0 * decoder);
        const VaeModel two = VaeModel::fromTensors(tinyConfig(), randomWeights(tinyConfig()));
        EXPECT_MESSAGE(configErrorOf([&] { (void)two.decoderFlops(13, 20); }),
                       "tile height 13 is not a positive multiple of 2");
    }

    // --- loading -------------------------------------------------------------------------

    void loadsF32F16BF16AndPipelineFolders() {
        const auto weights = randomWeights(tinyConfig());
        for (const auto dtype : {SafetensorsDtype::F32, SafetensorsDtype::F16, SafetensorsDtype::BF16}) {
            for (const bool pipeline : {false, true}) {
                const std::string dir = writeVae(encode(weights, dtype), tinyConfigJson(), pipeline);
                const VaeModel vae = VaeModel::load(dir);
                QCOMPARE(vae.directory(), dir);
                QCOMPARE(vae.tensors().size(), weights.size());
                QVERIFY(vae.extraTensors().empty());
                for (const auto& [name, t] : weights) {
                    std::vector<float> expected = t.data;
                    for (float& x : expected) x = storedAs(dtype, x);
                    QCOMPARE(vae.tensors().at(name).data, expected);
                }
                const std::string bytes =
                    readBytes(dir + (pipeline ? "/vae" : "") + "/diffusion_pytorch_model.safetensors");
                QCOMPARE(vae.weightsSha256(), sha256Hex(bytes.data(), bytes.size()));
            }
        }
    }

    // diffusers' fp16 variant names (utils/hub_utils.py _add_variant), used only when the full-precision files are absent.
    void loadsFp16VariantFiles() {
        const auto weights = randomWeights(tinyConfig());
        auto rename = [](const std::string& dir, const char* from, const char* to) {
            return QFile::rename(QString::fromStdString(dir + "/" + from), QString::fromStdString(dir + "/" + to));
        };
        const std::string single = writeVae(encode(weights, SafetensorsDtype::F16));
        QVERIFY(rename(single, "diffusion_pytorch_model.safetensors", "diffusion_pytorch_model.fp16.safetensors"));
        const VaeModel fp16 = VaeModel::load(single);
        QCOMPARE(fp16.tensors().at("decoder.conv_out.weight").data.front(),
                 storedAs(SafetensorsDtype::F16, weights.at("decoder.conv_out.weight").data.front()));
        QCOMPARE(fp16.weightsSha256(),
                 sha256Hex(readBytes(single + "/diffusion_pytorch_model.fp16.safetensors").data(),
                           readBytes(single + "/diffusion_pytorch_model.fp16.safetensors").size()));
        // Both present: the full-precision file.
        writeSafetensors(single + "/diffusion_pytorch_model.safetensors", encode(weights));
        QCOMPARE(VaeModel::load(single).tensors().at("decoder.conv_out.weight").data,
                 weights.at("decoder.conv_out.weight").data);

        // Sharded fp16, under both index spellings.
        for (const char* indexName : {"diffusion_pytorch_model.safetensors.index.fp16.json",
                                      "diffusion_pytorch_model.safetensors.fp16.index.json"}) {
            const std::string dir = writeVae(encode(weights, SafetensorsDtype::F16));
            QFile::remove(QString::fromStdString(dir + "/diffusion_pytorch_model.safetensors"));
            std::map<std::string, HostTensor> encoder, rest;
            nlohmann::json map = nlohmann::json::object();
            for (const auto& [name, t] : weights) {
                const bool first = name.starts_with("encoder.");
                (first ? encoder : rest).emplace(name, t);
                map[name] = first ? "diffusion_pytorch_model.fp16-00001-of-00002.safetensors"
                                  : "diffusion_pytorch_model.fp16-00002-of-00002.safetensors";
            }
            writeSafetensors(dir + "/diffusion_pytorch_model.fp16-00001-of-00002.safetensors",
                             encode(encoder, SafetensorsDtype::F16));
            writeSafetensors(dir + "/diffusion_pytorch_model.fp16-00002-of-00002.safetensors",
                             encode(rest, SafetensorsDtype::F16));
            writeText(dir + "/" + indexName,
                      nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump());
            const VaeModel sharded = VaeModel::load(dir);
            QCOMPARE(sharded.tensors().size(), weights.size());
            QCOMPARE(sharded.tensors().at("encoder.conv_in.bias").data, fp16.tensors().at("encoder.conv_in.bias").data);
            QCOMPARE(sharded.tensors().at("decoder.conv_in.bias").data, fp16.tensors().at("decoder.conv_in.bias").data);
        }

        const std::string none = writeVae(encode(weights));
        QFile::remove(QString::fromStdString(none + "/diffusion_pytorch_model.safetensors"));
        const std::string m = errorOf([&] { (void)VaeModel::load(none); });
        EXPECT_MESSAGE(m, none +
                              "/diffusion_pytorch_model.safetensors: not found (nor its sharded index, nor the fp16 "
                              "variants diffusion_pytorch_model.fp16.safetensors and "
                              "diffusion_pytorch_model.safetensors.index.fp16.json)");
    }

    void acceptsLegacyAttentionNamesAndExtraTensors() {
        auto weights = randomWeights(tinyConfig());
        std::map<std::string, HostTensor> legacy;
        for (const auto& [canonical, t] : weights) {
            std::string name = canonical;
            for (const auto& [now, old] : {std::pair{".to_q.", ".query."}, std::pair{".to_k.", ".key."},
                                           std::pair{".to_v.", ".value."}, std::pair{".to_out.0.", ".proj_attn."}})
                if (const auto at = name.find(now); at != std::string::npos) name.replace(at, std::strlen(now), old);
            legacy.emplace(name, t);
        }
        legacy.emplace("encoder.unused", HostTensor{{2}, {1.0f, 2.0f}});
        const VaeModel vae = VaeModel::load(writeVae(encode(legacy)));
        QCOMPARE(vae.tensors().at("decoder.mid_block.attentions.0.to_out.0.weight").data,
                 weights.at("decoder.mid_block.attentions.0.to_out.0.weight").data);
        QCOMPARE(vae.extraTensors(), std::vector<std::string>{"encoder.unused"});
    }

    void rejectsBrokenFolders() {
        const auto weights = randomWeights(tinyConfig());
        {
            auto missing = weights;
            missing.erase("decoder.up_blocks.1.resnets.1.conv2.bias");
            const std::string dir = writeVae(encode(missing));
            const std::string m = errorOf([&] { (void)VaeModel::load(dir); });
            QVERIFY2(!m.starts_with("<"), m.c_str());  // a ModelError: invalid input
            EXPECT_MESSAGE(m, dir + "/diffusion_pytorch_model.safetensors");
            EXPECT_MESSAGE(m, "missing tensor 'decoder.up_blocks.1.resnets.1.conv2.bias', expected shape [8]");
        }
        {
            auto wrong = weights;
            wrong["encoder.mid_block.attentions.0.to_k.weight"] = HostTensor{{16, 8}, std::vector<float>(128, 0.0f)};
            const std::string dir = writeVae(encode(wrong));
            const std::string m = errorOf([&] { (void)VaeModel::load(dir); });
            QVERIFY2(!m.starts_with("<"), m.c_str());  // a ModelError: invalid input
            EXPECT_MESSAGE(m, dir + "/diffusion_pytorch_model.safetensors");
            EXPECT_MESSAGE(m, "tensor 'encoder.mid_block.attentions.0.to_k.weight': expected [16, 16], found [16, 8]");
        }
        for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
            auto nan = weights;
            nan["post_quant_conv.weight"].data[5] = bad;
            const std::string dir = writeVae(encode(nan));
            const std::string m = errorOf([&] { (void)VaeModel::load(dir); });
            QVERIFY2(!m.starts_with("<"), m.c_str());  // a ModelError: invalid input
            EXPECT_MESSAGE(m, dir + "/diffusion_pytorch_model.safetensors");
            EXPECT_MESSAGE(m, "tensor 'post_quant_conv.weight' holds a non-finite value (" +
                                  std::string(std::isnan(bad) ? "NaN" : "Inf") + ") at element 5");
            EXPECT_MESSAGE(errorOf([&] { (void)VaeModel::fromTensors(tinyConfig(), nan); }),
                           "'post_quant_conv.weight' holds a non-finite value");
        }
        {
            nlohmann::json unet = tinyConfigJson();
            unet["_class_name"] = "UNet2DModel";
            const std::string dir = writeVae(encode(weights), unet);
            const std::string m = errorOf([&] { (void)VaeModel::load(dir); });
            QVERIFY2(!m.starts_with("<"), m.c_str());  // a ModelError: invalid input
            EXPECT_MESSAGE(m, dir + "/config.json");
            EXPECT_MESSAGE(m, "_class_name is 'UNet2DModel'; a VAE folder holds an AutoencoderKL");
        }
        {
            nlohmann::json badConfig = tinyConfigJson();
            badConfig["latent_channels"] = 0;
            const std::string dir = writeVae(encode(weights), badConfig);
            const std::string m = errorOf([&] { (void)VaeModel::load(dir); });
            QVERIFY2(!m.starts_with("<"), m.c_str());  // a ModelError: invalid input
            EXPECT_MESSAGE(m, dir + "/config.json': latent_channels = 0: expected an integer from 1 to 64");
        }
        {
            const std::string dir = writeVae(encode(weights));
            QFile::remove(QString::fromStdString(dir + "/config.json"));
            EXPECT_MESSAGE(errorOf([&] { (void)VaeModel::load(dir); }), "config.json': not found");
            EXPECT_MESSAGE(errorOf([&] { (void)VaeModel::load(dir + "/nope"); }), "no such folder");
        }
    }

    // --- running -------------------------------------------------------------------------

    void rejectsBadInputs() {
        const VaeConfig c = tinyConfig();
        const VaeModel vae = VaeModel::fromTensors(c, randomWeights(c));
        CpuBackend cpu(1);
        EXPECT_MESSAGE(configErrorOf([&] {
                           (void)vae.decode(cpu, randomTensor({1, 3, 4, 4}, 1));
                       }),
                       "latent: 3 channels; this VAE takes 4");
        EXPECT_MESSAGE(configErrorOf([&] {
                           (void)vae.decode(cpu, randomTensor({4, 4, 4}, 1));
                       }),
                       "latent: shape [4, 4, 4]; expected [batch, 4, height, width]");
        EXPECT_MESSAGE(configErrorOf([&] { (void)vae.decode(cpu, randomTensor({1, 4, 0, 4}, 1)); }), "latent: 0 x 4");
        EXPECT_MESSAGE(configErrorOf([&] {
                           (void)vae.decode(cpu, randomTensor({1, 4, 4, 9000}, 1));
                       }),
                       "latent: 4 x 9000; each side must be from 1 to 8192 (images up to 16384 px)");
        EXPECT_MESSAGE(configErrorOf([&] {
                           (void)vae.encode(cpu, randomTensor({1, 3, 6, 7}, 1));
                       }),
                       "image: 6 x 7; each side must be a multiple of 2 (the VAE's scale factor) from 2 to 16384");
        HostTensor shortData = randomTensor({1, 3, 4, 4}, 1);
        shortData.data.pop_back();
        EXPECT_MESSAGE(configErrorOf([&] { (void)vae.encode(cpu, shortData); }),
                       "image: 47 values for shape [1, 3, 4, 4]");
        EXPECT_MESSAGE(configErrorOf([&] {
                           (void)posteriorMean(randomTensor({1, 3, 2, 2}, 1));
                       }),
                       "moments: shape [1, 3, 2, 2]");
    }

    // Batch entries are independent and the batch does not change an entry's bits; mean and
    // logvar are the moments' halves, the logvar clamped to [-30, 20].
    void decodeEncodeBatchesAndPosterior() {
        const VaeConfig c = tinyConfig();
        const VaeModel vae = VaeModel::fromTensors(c, randomWeights(c));
        CpuBackend cpu(2);
        const HostTensor z = randomTensor({2, 4, 5, 7}, 3);
        const HostTensor image = vae.decode(cpu, z);
        QCOMPARE(image.shape, (Shape{2, 3, 10, 14}));
        const HostTensor second = vae.decode(cpu, HostTensor{{1, 4, 5, 7}, {z.data.begin() + 140, z.data.end()}});
        QVERIFY(std::equal(second.data.begin(), second.data.end(), image.data.begin() + 3 * 10 * 14));
        QVERIFY(image.data != std::vector<float>(image.data.size(), image.data[0]));

        const HostTensor moments = vae.encode(cpu, image);
        QCOMPARE(moments.shape, (Shape{2, 8, 5, 7}));
        HostTensor clamped = moments;
        clamped.data[4 * 35 + 1] = 50.0f;    // batch 0, logvar channel 0
        clamped.data[12 * 35 + 2] = -99.0f;  // batch 1, logvar channel 0
        const HostTensor mean = posteriorMean(clamped), logvar = posteriorLogvar(clamped);
        QCOMPARE(mean.shape, (Shape{2, 4, 5, 7}));
        QCOMPARE(logvar.shape, (Shape{2, 4, 5, 7}));
        QCOMPARE(mean.data[4 * 35], moments.data[8 * 35]);  // batch 1 channel 0
        QCOMPARE(logvar.data[1], 20.0f);
        QCOMPARE(logvar.data[4 * 35 + 2], -30.0f);
        QCOMPARE(logvar.data[3], moments.data[4 * 35 + 3]);
    }

    // The CPU backend's promise: the same bits on any thread count.
    void decodeBitsIndependentOfThreads() {
        const VaeConfig c = tinyConfig();
        const VaeModel vae = VaeModel::fromTensors(c, randomWeights(c));
        const HostTensor z = randomTensor({1, 4, 6, 5}, 9);
        CpuBackend one(1), three(3);
        QVERIFY(vae.decode(one, z).data == vae.decode(three, z).data);
        const HostTensor image = randomTensor({1, 3, 12, 10}, 10);
        QVERIFY(vae.encode(one, image).data == vae.encode(three, image).data);
    }

    void latentScaling() {
        VaeConfig c = vaeConfigFromJson(nlohmann::json::parse(kSdConfig));
        const HostTensor z{{1, 4, 1, 2}, {1.0f, -2.0f, 0.5f, 4.0f, 3.0f, 0.0f, -1.0f, 8.0f}};
        const HostTensor scaled = scaleLatents(c, z);
        QCOMPARE(scaled.shape, z.shape);
        QCOMPARE(scaled.data[0], 0.18215f);
        QCOMPARE(scaled.data[1], -2.0f * 0.18215f);
        const HostTensor back = unscaleLatents(c, scaled);
        QCOMPARE(back.data[7], 8.0f * 0.18215f / 0.18215f);
        for (std::size_t i = 0; i < z.data.size(); ++i) QVERIFY(std::abs(back.data[i] - z.data[i]) <= 1e-6f);
        // SDXL-style statistics per channel, used only when both are set.
        c.latentsMean = std::vector<float>{0.5f, 1.0f, 0.0f, -1.0f};
        QCOMPARE(scaleLatents(c, z).data, scaled.data);
        c.latentsStd = std::vector<float>{2.0f, 4.0f, 1.0f, 0.5f};
        const HostTensor s2 = scaleLatents(c, z);
        QCOMPARE(s2.data[0], (1.0f - 0.5f) * 0.18215f / 2.0f);  // channel 0
        QCOMPARE(s2.data[2], (0.5f - 1.0f) * 0.18215f / 4.0f);  // channel 1
        QCOMPARE(s2.data[7], (8.0f + 1.0f) * 0.18215f / 0.5f);  // channel 3
        const HostTensor u2 = unscaleLatents(c, s2);
        QCOMPARE(u2.data[2], s2.data[2] * 4.0f / 0.18215f + 1.0f);
        for (std::size_t i = 0; i < z.data.size(); ++i) QVERIFY(std::abs(u2.data[i] - z.data[i]) <= 1e-5f);
        EXPECT_MESSAGE(configErrorOf([&] {
                           (void)unscaleLatents(c, HostTensor{{1, 3, 1, 1}, {0, 0, 0}});
                       }),
                       "latents: shape [1, 3, 1, 1]; expected [batch, 4, height, width]");
    }

    // TESSERA_CPU_BENCH=1: an SD-shaped decoder (83.7 M parameters, random weights) at 256 x 256.
    void benchSdDecoder() {
        if (!qEnvironmentVariableIsSet("TESSERA_CPU_BENCH")) QSKIP("set TESSERA_CPU_BENCH=1 to measure");
        const VaeConfig c = vaeConfigFromJson(nlohmann::json::parse(kSdConfig));
        const VaeModel vae = VaeModel::fromTensors(c, randomWeights(c));
        CpuBackend cpu(0);
        const HostTensor z = randomTensor({1, 4, 32, 32}, 5);
        QElapsedTimer timer;
        timer.start();
        const HostTensor image = vae.decode(cpu, z);
        const double ms = static_cast<double>(timer.nsecsElapsed()) / 1e6;
        qInfo("SD VAE decode 256x256 on %s: %.0f ms (prepare + run), %.1f GFLOP/s, activations+scratch %.0f MiB",
              cpu.info().device.c_str(), ms, vae.decoderFlops(256, 256) / ms / 1e6,
              static_cast<double>(cpu.preparedFloats()) * 4.0 / 1048576.0);
        QCOMPARE(image.shape, (Shape{1, 3, 256, 256}));
    }

    // --- diffusers' outputs (tests/data/vae) -----------------------------------------------

    void fixtureTensorListsMatch_data() {
        QTest::addColumn<QString>("name");
        for (const char* name : kCases) QTest::newRow(name) << QString(name);
    }

    void fixtureTensorListsMatch() {
        QFETCH(QString, name);
        if (!fixturesPresent()) QSKIP("tests/data/vae not present yet (tools/reference/make_vae_fixtures.py)");
        const std::string dir = kFixtures + "/" + name.toStdString() + "/vae";
        const SafetensorsFile file(dir + "/diffusion_pytorch_model.safetensors");
        TensorList stored;
        for (const auto& info : file.tensors()) stored.emplace_back(info.name, info.shape);
        const VaeConfig config = readVaeConfig(dir);
        QCOMPARE(nameShapes(VaeModel::expectedTensors(config)), nameShapes(stored));
        std::ifstream in(kFixtures + "/cases.json");
        const nlohmann::json cases = nlohmann::json::parse(in).at("cases").at(name.toStdString());
        // Every key the script gave AutoencoderKL reads back (floats as float32).
        const nlohmann::json ours = toJson(config);
        for (const auto& [key, value] : cases.at("config").items()) {
            const nlohmann::json& got = ours.at(key);
            const bool same =
                value.is_number_float() ? static_cast<float>(got.get<double>()) == value.get<float>() : got == value;
            QVERIFY2(same, qPrintable(QString::fromStdString(key + ": " + got.dump() + " vs " + value.dump())));
        }
        const VaeModel vae = VaeModel::load(dir);
        QCOMPARE(vae.parameterCount(), cases.at("parameter_count").get<std::int64_t>());
        QCOMPARE(VaeModel::expectedTensors(config).size(), cases.at("tensor_count").get<std::size_t>());
    }

    void matchesDiffusers_data() { fixtureTensorListsMatch_data(); }

    void matchesDiffusers() {
        QFETCH(QString, name);
        if (!fixturesPresent()) QSKIP("tests/data/vae not present yet (tools/reference/make_vae_fixtures.py)");
        const std::string dir = kFixtures + "/" + name.toStdString();
        const VaeModel vae = VaeModel::load(dir + "/vae");
        const SafetensorsFile io(dir + "/io.safetensors");
        CpuBackend cpu(2);
        struct Check {
            const char* what;
            HostTensor got, want;
        };
        const HostTensor moments = vae.encode(cpu, readTensor(io, "encode_image"));
        const std::vector<Check> checks{
            {"decode_image", vae.decode(cpu, readTensor(io, "decode_latent")), readTensor(io, "decode_image")},
            {"encode_moments", moments, readTensor(io, "encode_moments")},
            {"encode_mean", posteriorMean(moments), readTensor(io, "encode_mean")},
            {"encode_logvar", posteriorLogvar(moments), readTensor(io, "encode_logvar")},
        };
        for (const Check& c : checks) {
            QVERIFY2(c.got.shape == c.want.shape, c.what);
            const double error = relativeError(c.got, c.want);
            qInfo("%s %s: max |diff| / max |reference| = %.3g", name.toUtf8().constData(), c.what, error);
            QVERIFY2(error <= 1e-4, qPrintable(QStringLiteral("%1: relative error %2").arg(c.what).arg(error)));
        }
    }
};

QTEST_GUILESS_MAIN(TestVae)
#include "tst_vae.moc"
