// Single-file (LDM layout) Stable Diffusion checkpoints (core/models/sd/SingleFileCheckpoint.h):
//  - tests/data/singlefile/{sd1,sd2}.safetensors, made by tools/reference/make_single_file.py from
//    the diffusers folders beside them, load to bit-identical tensors (every name, shape and
//    float) as the folders do, with the folders' configurations (the config folder);
//  - family detection and the configurations derived from the tensors for each family: the
//    published SD 1.5 / SD 2.1 configurations and parameter counts from full-size headers (sparse
//    files: the header is read, the data never), and small models of the families' fixed values
//    loaded end to end (also through loadSdModel);
//  - every bad file refused naming the file and the tensor.
#include <QtTest>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "ModelTestSupport.h"
#include "SingleFileTestSupport.h"
#include "core/base/Sha256.h"
#include "core/formats/Safetensors.h"
#include "core/models/clip/ClipTextGraph.h"
#include "core/models/sd/SdModel.h"
#include "core/models/sd/SingleFileCheckpoint.h"

using namespace tessera;
using model_test::errorOf;
using model_test::readBytes;
using namespace single_file_test;
namespace fs = std::filesystem;

namespace {

const std::string kData = std::string(TESSERA_TEST_DATA) + "/singlefile";

// Enums with a tessera::toString (SdFamily, PredictionType), compared by name.
#define COMPARE_NAMES(a, b) QCOMPARE(std::string(toString(a)), std::string(toString(b)))

// Every tensor of a safetensors file, raw.
TensorBytes readAll(const std::string& path) {
    const SafetensorsFile file(path);
    TensorBytes out;
    for (const auto& info : file.tensors()) {
        out[info.name] = {info.dtype, info.shape, file.readBytes(info)};
    }
    return out;
}

SingleFileOptions withConfigs(const std::string& layout, FileDigest digest = FileDigest::Skip) {
    SingleFileOptions options;
    options.digest = digest;
    options.configFolder = kData + "/" + layout;
    return options;
}

// Bit-identical maps: the same names, shapes and float bits.
void compareTensors(const std::map<std::string, HostTensor>& got, const std::map<std::string, HostTensor>& want,
                    const char* what) {
    QVERIFY2(got.size() == want.size(),
             qPrintable(QStringLiteral("%1: %2 tensors, folder %3").arg(what).arg(got.size()).arg(want.size())));
    for (const auto& [name, t] : want) {
        const auto it = got.find(name);
        QVERIFY2(it != got.end(), qPrintable(QString::fromStdString(std::string(what) + ": no " + name)));
        QVERIFY2(it->second.shape == t.shape,
                 qPrintable(QString::fromStdString(std::string(what) + ": shape of " + name)));
        QVERIFY2(it->second.data.size() == t.data.size() &&
                     std::memcmp(it->second.data.data(), t.data.data(), t.data.size() * sizeof(float)) == 0,
                 qPrintable(QString::fromStdString(std::string(what) + ": values of " + name)));
    }
}

void compareUNetConfigs(const UNetCondConfig& a, const UNetCondConfig& b) {
    QCOMPARE(a.blockOutChannels, b.blockOutChannels);
    QVERIFY(a.downBlocks == b.downBlocks);
    QVERIFY(a.upBlocks == b.upBlocks);
    QCOMPARE(a.layersPerBlock, b.layersPerBlock);
    QCOMPARE(a.inChannels, b.inChannels);
    QCOMPARE(a.outChannels, b.outChannels);
    QCOMPARE(a.crossAttentionDim, b.crossAttentionDim);
    QCOMPARE(a.attentionHeads, b.attentionHeads);
    QCOMPARE(a.transformerLayers, b.transformerLayers);
    QCOMPARE(a.useLinearProjection, b.useLinearProjection);
    QCOMPARE(a.upcastAttention, b.upcastAttention);
    QCOMPARE(a.normNumGroups, b.normNumGroups);
    QCOMPARE(a.sampleSize, b.sampleSize);
    QCOMPARE(a.timeEmbedDim(), b.timeEmbedDim());
}

// The published configurations, as the hub's config.json files give them.
UNetCondConfig hubUNet(SdFamily family) {
    nlohmann::json j = {{"block_out_channels", {320, 640, 1280, 1280}}, {"layers_per_block", 2}};
    if (family == SdFamily::SD1) {
        j.update({{"sample_size", 64}, {"cross_attention_dim", 768}, {"attention_head_dim", 8}});
    } else {
        j.update({{"sample_size", 96},
                  {"cross_attention_dim", 1024},
                  {"attention_head_dim", {5, 10, 20, 20}},
                  {"use_linear_projection", true},
                  {"upcast_attention", true}});
    }
    return unetCondConfigFromJson(j);
}

VaeConfig hubVae(SdFamily family) {
    const std::vector<std::string> down(4, "DownEncoderBlock2D"), up(4, "UpDecoderBlock2D");
    return vaeConfigFromJson({{"block_out_channels", {128, 256, 512, 512}},
                              {"layers_per_block", 2},
                              {"down_block_types", down},
                              {"up_block_types", up},
                              {"latent_channels", 4},
                              {"sample_size", family == SdFamily::SD1 ? 512 : 768}});
}

ClipTextConfig hubText(SdFamily family) {
    if (family == SdFamily::SD1)
        return clipTextConfigFromJson({{"hidden_size", 768},
                                       {"intermediate_size", 3072},
                                       {"num_hidden_layers", 12},
                                       {"num_attention_heads", 12},
                                       {"projection_dim", 768},
                                       {"vocab_size", 49408}});
    return clipTextConfigFromJson({{"hidden_size", 1024},
                                   {"intermediate_size", 4096},
                                   {"num_hidden_layers", 23},
                                   {"num_attention_heads", 16},
                                   {"hidden_act", "gelu"},
                                   {"vocab_size", 49408}});
}

}  // namespace

class TestSingleFile : public QObject {
    Q_OBJECT

    QTemporaryDir dir_;
    std::string tmp(const char* name) const { return dir_.filePath(name).toStdString(); }

    // The sd1 fixture with `change` applied, written to a temporary file.
    std::string variant(const char* name, const std::function<void(TensorBytes&)>& change,
                        const char* layout = "sd1") const {
        TensorBytes tensors = readAll(kData + "/" + layout + ".safetensors");
        change(tensors);
        const std::string path = tmp(name);
        writeSafetensors(path, tensors);
        return path;
    }
    // The sd1 fixture with an unused 16 GiB tensor at its end that is a sparse hole: hashing the
    // file takes seconds, so the digest thread is still running when the tensors are converted.
    std::string withSparseTail(const std::string& path) const {
        constexpr std::uint64_t kTail = std::uint64_t{16} << 30;
        TensorBytes tensors = readAll(kData + "/sd1.safetensors");
        tensors["zz.unused_tail"] = {SafetensorsDtype::U8, {8}, std::vector<std::byte>(8)};
        writeSafetensors(path, tensors);
        const std::string bytes = readBytes(path);
        std::uint64_t length = 0;
        std::memcpy(&length, bytes.data(), 8);
        nlohmann::json header = nlohmann::json::parse(bytes.substr(8, static_cast<std::size_t>(length)));
        auto& tail = header.at("zz.unused_tail");
        const std::uint64_t begin = tail.at("data_offsets")[0].get<std::uint64_t>();
        tail["shape"] = {16, kTail / 16};  // each dimension within the format's bound
        tail["data_offsets"] = {begin, begin + kTail};
        std::string text = header.dump();
        text.append((8 - text.size() % 8) % 8, ' ');
        std::string file(8, '\0');
        const std::uint64_t newLength = text.size();
        std::memcpy(file.data(), &newLength, 8);
        file += text + bytes.substr(static_cast<std::size_t>(8 + length), static_cast<std::size_t>(begin));
        model_test::writeText(path, file);
        fs::resize_file(path, file.size() + kTail);
        return path;
    }
    std::string loadError(const std::string& path, const char* layout = "sd1") const {
        return errorOf([&] { (void)loadSingleFileCheckpoint(path, withConfigs(layout)); });
    }

private slots:
    void initTestCase() { QVERIFY(dir_.isValid()); }

    void roundTripIsBitIdentical_data() {
        QTest::addColumn<QString>("layout");
        QTest::newRow("sd1") << "sd1";
        QTest::newRow("sd2") << "sd2";
    }
    void roundTripIsBitIdentical() {
        QFETCH(QString, layout);
        const std::string l = layout.toStdString(), folder = kData + "/" + l;
        const SdModel model = loadSingleFileCheckpoint(folder + ".safetensors", withConfigs(l));
        COMPARE_NAMES(model.family, l == "sd1" ? SdFamily::SD1 : SdFamily::SD2);
        const UNetCondModel unet = UNetCondModel::load(folder + "/unet");
        const VaeModel vae = VaeModel::load(folder + "/vae");
        const ClipTextModel text = ClipTextModel::load(folder + "/text_encoder");
        // The folders are complete diffusers folders: nothing in them is left over.
        QVERIFY(unet.extraTensors().empty() && vae.extraTensors().empty() && text.extraTensors().empty());
        compareTensors(model.unet->tensors(), unet.tensors(), "unet");
        compareTensors(model.vae->tensors(), vae.tensors(), "vae");
        compareTensors(model.textEncoder->tensors(), text.tensors(), "text encoder");
        compareUNetConfigs(model.unet->config(), unet.config());
        QCOMPARE(toJson(model.vae->config()), toJson(vae.config()));
        QCOMPARE(toJson(model.textEncoder->config()), toJson(text.config()));
        QVERIFY(model.unet->extraTensors().empty());
        QCOMPARE(model.name, l);
        QCOMPARE(model.source, folder + ".safetensors");
        QVERIFY(model.sha256.empty());  // skipped
        QVERIFY(model.loadSeconds > 0 && model.hostPeakMiB > 0);
        COMPARE_NAMES(model.scheduler.predictionType,
                      l == "sd1" ? PredictionType::Epsilon : PredictionType::VPrediction);
    }

    void inspectCountsAndHashes() {
        const std::string path = kData + "/sd2.safetensors";
        const SingleFileCheckpointInfo info =
            inspectSingleFileCheckpoint(path, withConfigs("sd2", FileDigest::Compute));
        const std::string bytes = readBytes(path);
        QCOMPARE(info.sha256, sha256Hex(bytes.data(), bytes.size()));
        QCOMPARE(info.fileBytes, static_cast<std::uint64_t>(bytes.size()));
        COMPARE_NAMES(info.family, SdFamily::SD2);
        const SdModel model = loadSingleFileCheckpoint(path, withConfigs("sd2", FileDigest::Compute));
        QCOMPARE(model.sha256, info.sha256);
        QCOMPARE(model.modelHash(), info.sha256.substr(0, 10));
        QCOMPARE(info.unetPart.parameters, model.unet->parameterCount());
        QCOMPARE(info.vaePart.parameters, model.vae->parameterCount());
        QCOMPARE(info.textEncoderPart.parameters, model.textEncoder->parameterCount());
        QCOMPARE(info.unetPart.tensors, model.unet->tensors().size());
        // q, k and v of a layer are one fused tensor in the file.
        QCOMPARE(info.textEncoderPart.tensors, model.textEncoder->tensors().size() - 4 * 2);
        QCOMPARE(describeDtypes(info.unetPart.storedDtypes), std::string("F16"));
        QCOMPARE(describeDtypes(info.vaePart.storedDtypes), std::string("F32"));
        QCOMPARE(describeDtypes({{"F16", 1130}, {"F32", 12}}), std::string("F16 (1130 tensors), F32 (12)"));
        // What the script adds besides the models: all ignored, none of it read as a model.
        const std::string ignored = describeIgnored(info.ignored);
        EXPECT_MESSAGE(ignored, "model_ema (8)");
        EXPECT_MESSAGE(ignored, "betas (1)");
        const auto has = [&](const std::string& name) {
            return std::find(info.ignored.begin(), info.ignored.end(), name) != info.ignored.end();
        };
        QVERIFY(has("cond_stage_model.model.text_projection"));
        QVERIFY(has("cond_stage_model.model.transformer.resblocks.2.attn.in_proj_weight"));  // the dropped block
        QVERIFY(has("cond_stage_model.model.logit_scale"));
        QVERIFY(!has("cond_stage_model.model.transformer.resblocks.1.attn.in_proj_weight"));
        const SingleFileCheckpointInfo sd1 =
            inspectSingleFileCheckpoint(kData + "/sd1.safetensors", withConfigs("sd1"));
        QVERIFY(sd1.sha256.empty());
        QVERIFY(std::find(sd1.ignored.begin(), sd1.ignored.end(),
                          "cond_stage_model.transformer.text_model.embeddings.position_ids") != sd1.ignored.end());
    }

    // The script stores the UNet and text encoder as F16; F32 and BF16 files read the same way.
    void upcastsEveryFloatType() {
        const SdModel f16 = loadSingleFileCheckpoint(kData + "/sd1.safetensors", withConfigs("sd1"));
        for (const SafetensorsDtype dtype : {SafetensorsDtype::F32, SafetensorsDtype::BF16}) {
            const std::string path = variant("dtype.safetensors", [&](TensorBytes& t) {
                const SafetensorsFile source(kData + "/sd1.safetensors");
                for (auto& [name, data] : t)
                    if (data.dtype == SafetensorsDtype::F16 || data.dtype == SafetensorsDtype::F32)
                        data = {dtype, data.shape, encodeFloats(dtype, source.readFloat32(name))};
            });
            const SdModel model = loadSingleFileCheckpoint(path, withConfigs("sd1"));
            for (const auto& [name, t] : f16.unet->tensors())
                for (std::size_t i = 0; i < t.data.size(); ++i)
                    QCOMPARE(model.unet->tensors().at(name).data[i], model_test::storedAs(dtype, t.data[i]));
        }
    }

    // The reader's extension the loader uses: a row range of a tensor (fused q/k/v), read as often
    // as asked.
    void safetensorsRanges() {
        std::vector<float> values(3 * 5000);
        for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f - 100.0f;
        for (const SafetensorsDtype dtype : {SafetensorsDtype::F32, SafetensorsDtype::F16, SafetensorsDtype::BF16}) {
            const std::string path = tmp("ranges.safetensors");
            writeSafetensors(path, {{"fused", {dtype, {3, 5000}, encodeFloats(dtype, values)}}});
            const SafetensorsFile file(path);
            const SafetensorsTensorInfo& info = *file.find("fused");
            const std::vector<float> whole = file.readFloat32(info);
            for (std::size_t part = 0; part < 3; ++part) {
                const std::vector<float> rows = file.readFloat32(info, part * 5000, 5000);
                QVERIFY(std::equal(rows.begin(), rows.end(), whole.begin() + static_cast<std::ptrdiff_t>(part * 5000)));
            }
            for (std::size_t i = 0; i < whole.size(); ++i) QCOMPARE(whole[i], model_test::storedAs(dtype, values[i]));
            QVERIFY(file.readFloat32(info) == whole);
            QVERIFY(file.readBytes(info) == encodeFloats(dtype, values));
            const std::string m = [&] {
                try {
                    (void)file.readFloat32(info, 10001, 5000);
                } catch (const SafetensorsError& e) {
                    return std::string(e.what());
                }
                return std::string("<no error>");
            }();
            EXPECT_MESSAGE(m, "'fused': elements 10001..15001 are outside its 15000");
        }
    }

    // A checkpoint truncated by another process while it loads (while the tensors are converted, or
    // while the digest thread hashes the rest of the file) is refused with a message, never a crash.
    void fileTruncatedWhileLoading_data() {
        QTest::addColumn<QString>("phase");
        QTest::newRow("converting") << "reading the UNet";
        QTest::newRow("hashing") << "hashing the file";
    }
    void fileTruncatedWhileLoading() {
        QFETCH(QString, phase);
        const std::string path = withSparseTail(tmp("shrinks.safetensors"));
        QCOMPARE(SafetensorsFile(path).tensors().back().name, std::string("zz.unused_tail"));  // the hole is last
        SingleFileOptions options = withConfigs("sd1", FileDigest::Compute);
        bool truncated = false;
        options.progress = [&](const LoadProgress& p) {
            if (truncated || p.phase != phase.toStdString()) return;
            // To 4 KiB: whatever either thread reads next is gone.
            QCOMPARE(::truncate(path.c_str(), 4096), 0);
            truncated = true;
        };
        QElapsedTimer timer;
        timer.start();
        const std::string m = errorOf([&] { (void)loadSingleFileCheckpoint(path, options); });
        QVERIFY(truncated);
        EXPECT_MESSAGE(m, "shrinks.safetensors");
        EXPECT_MESSAGE(m, "changed while it was being read");
        EXPECT_MESSAGE(m, "bytes when opened and is 4096 bytes now");
        EXPECT_MESSAGE(m, "do not modify the file while Tessera loads it");
        // The digest thread stops at its next chunk: it does not read the rest of the tail.
        QVERIFY2(timer.elapsed() < 5000, qPrintable(QString::number(timer.elapsed()) + " ms"));
    }

    // Real checkpoints at full size: only the header is read (the data is a sparse hole).
    void fullSizeHeadersGivePublishedConfigurations_data() {
        QTest::addColumn<int>("family");
        QTest::addColumn<qlonglong>("unetParameters");
        QTest::addColumn<qlonglong>("textParameters");
        QTest::newRow("sd1.5") << static_cast<int>(SdFamily::SD1) << 859'520'964LL << 123'060'480LL;
        QTest::newRow("sd2.1") << static_cast<int>(SdFamily::SD2) << 865'910'724LL << 340'387'840LL;
    }
    void fullSizeHeadersGivePublishedConfigurations() {
        QFETCH(int, family);
        QFETCH(qlonglong, unetParameters);
        QFETCH(qlonglong, textParameters);
        const auto f = static_cast<SdFamily>(family);
        TensorList tensors = singleFileTensors(f, hubUNet(f), hubVae(f), hubText(f));
        if (f == SdFamily::SD2) tensors = withDroppedOpenClipParts(tensors, 23, 1024);
        tensors.emplace_back("model_ema.decay", std::vector<std::int64_t>{});
        const std::string path = tmp("full.safetensors");
        writeHeaderOnly(path, tensors);
        const SingleFileCheckpointInfo info = inspectSingleFileCheckpoint(path, {FileDigest::Skip, {}});
        COMPARE_NAMES(info.family, f);
        compareUNetConfigs(info.unet, hubUNet(f));
        QCOMPARE(toJson(info.vae), toJson(hubVae(f)));
        QCOMPARE(info.textEncoder.numHiddenLayers, hubText(f).numHiddenLayers);
        QCOMPARE(info.textEncoder.numAttentionHeads, hubText(f).numAttentionHeads);
        QCOMPARE(info.textEncoder.hiddenSize, hubText(f).hiddenSize);
        QVERIFY(info.textEncoder.hiddenAct == hubText(f).hiddenAct);
        QCOMPARE(info.unetPart.parameters, static_cast<std::int64_t>(unetParameters));
        QCOMPARE(info.vaePart.parameters, std::int64_t{83'653'863});
        QCOMPARE(info.textEncoderPart.parameters, static_cast<std::int64_t>(textParameters));
        QCOMPARE(info.unetPart.tensors, std::size_t{686});
        QCOMPARE(info.vaePart.tensors, std::size_t{248});
        COMPARE_NAMES(info.prediction, f == SdFamily::SD1 ? PredictionType::Epsilon : PredictionType::VPrediction);
        QCOMPARE(info.schedulerClass, std::string(f == SdFamily::SD1 ? "PNDMScheduler" : "DDIMScheduler"));
        if (f == SdFamily::SD2) {
            EXPECT_MESSAGE(info.familyReason, "1024");
            EXPECT_MESSAGE(info.predictionReason, "cannot tell");
            QCOMPARE(info.ignored.size(), std::size_t{12 + 1 + 1});  // resblocks.23, text_projection, decay
        }
        fs::remove(path);
    }

    // Small models of each family's fixed values load end to end with derived configurations.
    void derivedConfigurationsLoad() {
        for (const SdFamily f : {SdFamily::SD1, SdFamily::SD2}) {
            const std::string path = writeSmall(dir_, f);
            const SdModel model = loadSingleFileCheckpoint(path);
            COMPARE_NAMES(model.family, f);
            compareUNetConfigs(model.unet->config(), smallModel(f).unet);
            QCOMPARE(model.unet->config().normNumGroups, 32);
            QCOMPARE(model.textEncoder->config().numHiddenLayers, 2);
            QCOMPARE(model.vae->config().scalingFactor, 0.18215f);
            QCOMPARE(model.unet->tensors().at("conv_in.weight").data.front(), 0.25f);
            const std::string bytes = readBytes(path);
            QCOMPARE(model.sha256, sha256Hex(bytes.data(), bytes.size()));
        }
        // Through loadSdModel: the bundled tokenizer of the family.
        setBundledClipVocabulary(std::string(TESSERA_SOURCE_DIR) + "/resources/clip/bpe_simple_vocab_16e6.txt.gz");
        const SdModel viaSd = loadSdModel(writeSmall(dir_, SdFamily::SD2));
        COMPARE_NAMES(viaSd.family, SdFamily::SD2);
        QVERIFY(viaSd.tokenizer != nullptr);
        QCOMPARE(viaSd.tokenizer->padId(), 0);  // SD 2.x pads with "!"
        QCOMPARE(viaSd.name, std::string("small2"));
        QVERIFY(isSdModelPath(kData + "/sd1.safetensors"));
    }

    // The tiny fixtures do not fit the families' fixed values: refused, saying what to do.
    void derivedConfigurationThatDoesNotFit() {
        const std::string m = errorOf([] { (void)loadSingleFileCheckpoint(kData + "/sd1.safetensors"); });
        EXPECT_MESSAGE(m, "sd1.safetensors");
        EXPECT_MESSAGE(m, "GroupNorm groups 32");
        EXPECT_MESSAGE(m, "config folder");
        EXPECT_MESSAGE(errorOf([] { (void)loadSdModel(kData + "/sd2.safetensors"); }), "Stable Diffusion 2.x");
    }

    // Pickles are read by the restricted reader (tests/core/tst_sdckpt.cpp loads real ones); bytes
    // it cannot read are refused with its words, whatever the file is called.
    void refusesBrokenPickles() {
        const auto writeRaw = [&](const char* name, const std::string& bytes) {
            std::ofstream(tmp(name), std::ios::binary) << bytes;
            return tmp(name);
        };
        const std::string ckpt = writeRaw("model.ckpt", "anything");
        const std::string zip = writeRaw("zip.safetensors", std::string("PK\x03\x04", 4) + std::string(100, 'x'));
        const std::string pickle =
            writeRaw("pickle.safetensors", std::string("\x80\x02}q\x00(X", 7) + std::string(100, 'y'));
        for (const std::string& path : {ckpt, zip, pickle}) {
            const std::string m = loadError(path);
            EXPECT_MESSAGE(m, fs::path(path).filename().string());
            EXPECT_MESSAGE(m, "read as a PyTorch checkpoint by the restricted reader, which runs nothing in the file");
        }
        EXPECT_MESSAGE(loadError(ckpt), "not a PyTorch checkpoint");
        EXPECT_MESSAGE(loadError(zip), "not a zip archive");
        EXPECT_MESSAGE(loadError(pickle), "legacy checkpoint magic number");
        const std::string absent = loadError(tmp("absent.pt"));
        EXPECT_MESSAGE(absent, "absent.pt");
        EXPECT_MESSAGE(absent, "cannot open");
    }

    void refusesOtherFamilies() {
        const auto file = [&](const char* name, TensorBytes tensors) {
            writeSafetensors(tmp(name), tensors);
            return loadError(tmp(name));
        };
        const auto zeros = [](std::vector<std::int64_t> shape) {
            std::int64_t n = 1;
            for (const auto d : shape) n *= d;
            return SafetensorsTensorData{SafetensorsDtype::F16, shape,
                                         std::vector<std::byte>(static_cast<std::size_t>(2 * n))};
        };
        const std::string convIn = "model.diffusion_model.input_blocks.0.0.weight";
        std::string m =
            file("xl.safetensors",
                 {{convIn, zeros({320, 4, 3, 3})},
                  {"conditioner.embedders.1.model.transformer.resblocks.9.mlp.c_proj.bias", zeros({1280})}});
        // SDXL base is read (tests/core/tst_sdxltext.cpp): this stub has none of its other parts.
        EXPECT_MESSAGE(m, "xl.safetensors");
        EXPECT_MESSAGE(m, "no VAE");
        m = file("refiner.safetensors",
                 {{convIn, zeros({384, 4, 3, 3})},
                  {"conditioner.embedders.0.model.transformer.resblocks.9.mlp.c_proj.bias", zeros({1280})}});
        EXPECT_MESSAGE(m, "SDXL refiner");
        m = file("inpaint.safetensors", {{convIn, zeros({320, 9, 3, 3})}});
        EXPECT_MESSAGE(m, "inpainting");
        EXPECT_MESSAGE(m, convIn);
        m = file("other.safetensors", {{"double_blocks.0.img_attn.norm.key_norm.scale", zeros({128})}});
        EXPECT_MESSAGE(m, "not a Stable Diffusion checkpoint in the original (LDM) layout");
        EXPECT_MESSAGE(m, convIn);
        EXPECT_MESSAGE(m, "double_blocks.0.img_attn.norm.key_norm.scale");
        // A diffusers UNet2DModel weights file.
        const std::string unet2d =
            std::string(TESSERA_TEST_DATA) + "/models/cifar_like/diffusion_pytorch_model.safetensors";
        m = loadError(unet2d);
        EXPECT_MESSAGE(m, "cifar_like/diffusion_pytorch_model.safetensors");
        EXPECT_MESSAGE(m, convIn);
        EXPECT_MESSAGE(m, "diffusers names");
    }

    void refusesMissingModels() {
        const auto without = [&](const char* name, const std::string& prefix, const char* layout = "sd1") {
            return variant(
                name,
                [&](TensorBytes& t) {
                    std::erase_if(t, [&](const auto& entry) { return entry.first.rfind(prefix, 0) == 0; });
                },
                layout);
        };
        std::string m = loadError(without("notext.safetensors", "cond_stage_model."));
        EXPECT_MESSAGE(m, "notext.safetensors");
        EXPECT_MESSAGE(m, "no text encoder");
        EXPECT_MESSAGE(m, "cond_stage_model.transformer.text_model.embeddings.position_embedding.weight");
        m = loadError(without("novae.safetensors", "first_stage_model."));
        EXPECT_MESSAGE(m, "no VAE");
        EXPECT_MESSAGE(m, "first_stage_model.encoder.conv_in.weight");
        m = loadError(without("nodecoder.safetensors", "first_stage_model.decoder.up.1.block.1."));
        EXPECT_MESSAGE(m,
                       "nodecoder.safetensors': missing tensor 'first_stage_model.decoder.up.1.block.1.norm1.weight'"
                       " (the VAE's 'decoder.up_blocks.0.resnets.1.norm1.weight'), expected shape [8]");
        m = loadError(
            without("noqkv.safetensors", "cond_stage_model.model.transformer.resblocks.1.attn.in_proj_bias", "sd2"),
            "sd2");
        EXPECT_MESSAGE(m,
                       "noqkv.safetensors': missing tensor "
                       "'cond_stage_model.model.transformer.resblocks.1.attn.in_proj_bias' (the text encoder's "
                       "'text_model.encoder.layers.1.self_attn.k_proj.bias'), expected shape [36]");
    }

    void refusesBadTensors() {
        // A missing tensor of the UNet, named in both spellings.
        std::string m = loadError(variant("missing.safetensors", [](TensorBytes& t) {
            t.erase("model.diffusion_model.output_blocks.1.1.conv.weight");
        }));
        EXPECT_MESSAGE(m,
                       "missing.safetensors': missing tensor 'model.diffusion_model.output_blocks.1.1.conv.weight' "
                       "(the UNet's 'up_blocks.0.upsamplers.0.conv.weight')");
        // A shape mismatch.
        m = loadError(variant("shape.safetensors", [](TensorBytes& t) {
            auto& v = t.at("model.diffusion_model.middle_block.1.proj_in.weight");
            v.shape = {8, 8};  // 1x1 conv in SD1: [8, 8, 1, 1]
        }));
        EXPECT_MESSAGE(m,
                       "shape.safetensors': tensor 'model.diffusion_model.middle_block.1.proj_in.weight' (the UNet's "
                       "'mid_block.attentions.0.proj_in.weight'): expected [8, 8, 1, 1], found [8, 8]");
        // A NaN in the VAE's attention (a 1x1 conv in the file).
        m = loadError(variant("nan.safetensors", [](TensorBytes& t) {
            auto& v = t.at("first_stage_model.decoder.mid.attn_1.k.weight");
            const float nan = std::numeric_limits<float>::quiet_NaN();
            std::memcpy(v.bytes.data() + 4 * 5, &nan, 4);
        }));
        EXPECT_MESSAGE(m,
                       "nan.safetensors': tensor 'first_stage_model.decoder.mid.attn_1.k.weight' (the VAE's "
                       "'decoder.mid_block.attentions.0.to_k.weight') holds a non-finite value (NaN) at element 5");
        // Inf in the second block (v) of a fused OpenCLIP in_proj: the element counts in the file's tensor.
        m = loadError(variant(
                          "inf.safetensors",
                          [](TensorBytes& t) {
                              auto& v = t.at("cond_stage_model.model.transformer.resblocks.0.attn.in_proj_weight");
                              v = {SafetensorsDtype::F32, v.shape,
                                   encodeFloats(SafetensorsDtype::F32, std::vector<float>(36 * 12, 0.5f))};
                              const float inf = std::numeric_limits<float>::infinity();
                              std::memcpy(v.bytes.data() + 4 * (24 * 12 + 3), &inf, 4);
                          },
                          "sd2"),
                      "sd2");
        EXPECT_MESSAGE(m,
                       "'cond_stage_model.model.transformer.resblocks.0.attn.in_proj_weight' (the text encoder's "
                       "'text_model.encoder.layers.0.self_attn.v_proj.weight') holds a non-finite value (Inf) at "
                       "element 291");
        // A model tensor of an integer dtype.
        m = loadError(variant("dtype.safetensors", [](TensorBytes& t) {
            auto& v = t.at("first_stage_model.quant_conv.bias");
            v = {SafetensorsDtype::I32, v.shape, std::vector<std::byte>(v.bytes.size())};
        }));
        EXPECT_MESSAGE(m, "'first_stage_model.quant_conv.bias' (the VAE's 'quant_conv.bias') has dtype I32");
        // A UNet tensor its configuration has no place for.
        m = loadError(variant("stray.safetensors", [](TensorBytes& t) {
            t["model.diffusion_model.input_blocks.1.1.transformer_blocks.1.norm1.weight"] =
                t.at("model.diffusion_model.input_blocks.1.1.transformer_blocks.0.norm1.weight");
        }));
        EXPECT_MESSAGE(m,
                       "'model.diffusion_model.input_blocks.1.1.transformer_blocks.1.norm1.weight' [4] belongs to no "
                       "part of the UNet");
        // Truncated: the header promises more bytes than there are.
        const std::string bytes = readBytes(kData + "/sd1.safetensors");
        model_test::writeText(tmp("truncated.safetensors"), bytes.substr(0, bytes.size() - 100));
        m = loadError(tmp("truncated.safetensors"));
        EXPECT_MESSAGE(m, "truncated.safetensors");
        EXPECT_MESSAGE(m, "truncated");
        model_test::writeText(tmp("short.safetensors"), bytes.substr(0, 5));
        EXPECT_MESSAGE(loadError(tmp("short.safetensors")), "8-byte header length");
        // The models do not belong together.
        m = loadError(variant("mixed.safetensors", [](TensorBytes& t) {
            auto& v = t.at("cond_stage_model.transformer.text_model.embeddings.token_embedding.weight");
            v.shape = {32, 24};
        }));
        EXPECT_MESSAGE(m, "token_embedding");
    }

    // transformers' flattened CLIP names (no "text_model.") inside an SD 1.x checkpoint.
    void acceptsFlattenedClipNames() {
        const std::string path = variant("flat.safetensors", [](TensorBytes& t) {
            TensorBytes renamed;
            const std::string from = "cond_stage_model.transformer.text_model.";
            for (auto& [name, data] : t)
                renamed[name.rfind(from, 0) == 0 ? "cond_stage_model.transformer." + name.substr(from.size()) : name] =
                    data;
            t = std::move(renamed);
        });
        const SdModel flat = loadSingleFileCheckpoint(path, withConfigs("sd1"));
        const SdModel plain = loadSingleFileCheckpoint(kData + "/sd1.safetensors", withConfigs("sd1"));
        compareTensors(flat.textEncoder->tensors(), plain.textEncoder->tensors(), "flattened");
    }

    // diffusers' own converters on the same bytes (tools/reference/make_singlefile_fixtures.py,
    // run with diffusers): the folders are real diffusers folders, and the checkpoints convert back
    // to them exactly. With roundTripIsBitIdentical, Tessera's LDM names are diffusers'.
    void diffusersConvertersAgree() {
        const std::string casesPath = kData + "/diffusers/cases.json";
        if (!fs::exists(casesPath))
            QSKIP("tests/data/singlefile/diffusers is not there yet (tools/reference/make_singlefile_fixtures.py)");
        const nlohmann::json cases = nlohmann::json::parse(readBytes(casesPath));
        for (const std::string layout : {"sd1", "sd2"}) {
            const nlohmann::json& c = cases.at(layout);
            const std::string bytes = readBytes(kData + "/" + layout + ".safetensors");
            QCOMPARE(c.at("sha256").get<std::string>(), sha256Hex(bytes.data(), bytes.size()));
            for (const auto& [model, info] : c.at("folder_load").items())
                for (const auto& [key, names] : info.items())
                    QVERIFY2(names.empty(), qPrintable(QString::fromStdString(layout + " " + model + " " + key + ": " +
                                                                              names.dump())));
            for (const auto& [model, r] : c.at("conversion").items()) {
                const std::string where = layout + " " + model + ": ";
                QVERIFY2(r.at("compared").get<int>() > 0,
                         qPrintable(QString::fromStdString(where + "nothing compared")));
                QVERIFY2(r.at("missing").empty(), qPrintable(QString::fromStdString(where + r.at("missing").dump())));
                QVERIFY2(r.at("mismatched").empty(),
                         qPrintable(QString::fromStdString(where + r.at("mismatched").dump())));
                // What diffusers converts but the model has no place for: SD1's position_ids buffer, and
                // the OpenCLIP block a narrow model drops (diffusers drops only ViT-H's block 23 by name).
                for (const auto& name : r.at("unexpected")) {
                    const std::string n = name.get<std::string>();
                    const bool expected =
                        model == "text_encoder" &&
                        (layout == "sd1" ? n == "embeddings.position_ids" : n.rfind("encoder.layers.2.", 0) == 0);
                    QVERIFY2(expected, qPrintable(QString::fromStdString(where + "unexpected " + n)));
                }
            }
        }
    }

    // An SD 2.x-base checkpoint predicts noise: the config folder's scheduler says so.
    void configFolderPredictionType() {
        const fs::path folder = tmp("base");
        fs::create_directories(folder / "scheduler");
        for (const char* part : {"unet", "vae", "text_encoder"}) {
            fs::create_directories(folder / part);
            fs::copy_file(fs::path(kData) / "sd2" / part / "config.json", folder / part / "config.json");
        }
        model_test::writeText((folder / "scheduler" / "scheduler_config.json").string(),
                              R"({"_class_name": "DDIMScheduler", "prediction_type": "epsilon"})");
        SingleFileOptions options;
        options.digest = FileDigest::Skip;
        options.configFolder = folder.string();
        const SingleFileCheckpointInfo info = inspectSingleFileCheckpoint(kData + "/sd2.safetensors", options);
        COMPARE_NAMES(info.prediction, PredictionType::Epsilon);
        EXPECT_MESSAGE(info.predictionReason, "scheduler_config.json");
        model_test::writeText((folder / "scheduler" / "scheduler_config.json").string(),
                              R"({"prediction_type": "x0"})");
        EXPECT_MESSAGE(errorOf([&] { (void)inspectSingleFileCheckpoint(kData + "/sd2.safetensors", options); }),
                       "prediction_type");
        options.configFolder = tmp("nowhere");
        EXPECT_MESSAGE(errorOf([&] { (void)inspectSingleFileCheckpoint(kData + "/sd2.safetensors", options); }),
                       "nowhere");
    }
};

QTEST_GUILESS_MAIN(TestSingleFile)
#include "tst_singlefile.moc"
