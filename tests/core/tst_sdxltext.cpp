// SDXL base loading and text conditioning (diffusers pipeline_stable_diffusion_xl.py encode_prompt
// and _get_add_time_ids; A1111 modules/sd_models_xl.py; the SGM single-file layout):
//  - tests/data/sdxltext (tools/reference/make_sdxl_text_fixtures.py: transformers / diffusers on a
//    tiny SDXL pipeline): both tokenizers' ids exactly, each encoder's hidden_states[-2] and the
//    pooled projection, StableDiffusionXLPipeline.encode_prompt, and the UNet's add_embedding input
//    for two size settings, within 1e-4 relative;
//  - tests/data/singlefile/sdxl{,.safetensors} (tools/reference/make_single_file.py --layout sdxl):
//    the SGM single file loads to bit-identical tensors as the folder;
//  - refiners refused, text_encoder_2 required and named, random:sdxl at the published shapes,
//    empty negative prompt -> zeros, pooled text from the first of several chunks, emphasis per
//    encoder.
// Parts that need the UNet's text-time embedding (UNetCondConfig's addition_embed_type) skip,
// saying so, where this build's UNet has none.
#include <QtTest/QtTest>

#include <QTemporaryDir>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "SingleFileTestSupport.h"
#include "TokenizerTestSupport.h"
#include "core/base/BoundedInput.h"
#include "core/cpu/CpuBackend.h"
#include "core/formats/Safetensors.h"
#include "core/models/clip/ClipTextGraph.h"
#include "core/models/clip/ClipTextModel.h"
#include "core/models/sd/SdModel.h"
#include "core/models/sd/SdPipeline.h"
#include "core/models/sd/SingleFileCheckpoint.h"
#include "core/models/sd/UNetCondConfig.h"
#include "core/models/sd/UNetCondModel.h"
#include "core/models/vae/VaeModel.h"
#include "core/text/PromptParser.h"
#include "tests/core/ErrorText.h"
#include "tests/core/NumericCompare.h"

using namespace tessera;
using tessera::testing::errorOf;
using Ids = std::vector<std::int32_t>;
namespace fs = std::filesystem;

namespace {

const std::string kGz = TESSERA_SOURCE_DIR "/resources/clip/bpe_simple_vocab_16e6.txt.gz";
const std::string kFixtures = TESSERA_TEST_DATA "/sdxltext";
const std::string kPipeline = kFixtures + "/pipeline";
const std::string kSingleFolder = TESSERA_TEST_DATA "/singlefile/sdxl";
const std::string kSingleFile = TESSERA_TEST_DATA "/singlefile/sdxl.safetensors";
constexpr int kT = kClipTextTokens;

// Whether this build's UNet2DConditionModel reads SDXL's text-time embedding.
bool unetHasTextTime() {
    try {
        unetCondConfigFromJson({{"addition_embed_type", "text_time"},
                                {"addition_time_embed_dim", 4},
                                {"projection_class_embeddings_input_dim", 30}});
        return true;
    } catch (const std::exception&) {
        return false;
    }
}

#define REQUIRE_TEXT_TIME()                                                                                            \
    do {                                                                                                               \
        if (!unetHasTextTime()) QSKIP("this build's UNetCondConfig has no text-time embedding (addition_embed_type)"); \
    } while (0)

#define REQUIRE_FIXTURES()                                                                              \
    do {                                                                                                \
        if (!fs::exists(kFixtures + "/cases.json"))                                                     \
            QSKIP("tests/data/sdxltext is not there yet (tools/reference/make_sdxl_text_fixtures.py)"); \
    } while (0)

nlohmann::json cases() { return readBoundedJson(kFixtures + "/cases.json", "test"); }

std::shared_ptr<const ClipTokenizer> tokenizer(const std::string& pad, bool split) {
    ClipTokenizerOptions o;
    o.padToken = pad;
    o.splitPadToken = split;
    return std::make_shared<const ClipTokenizer>(ClipTokenizer::fromMergesGz(kGz, o));
}

// The rows [first, first + count) of a [rows, width] tensor.
std::vector<float> rowsOf(const std::vector<float>& v, std::size_t width, std::size_t first, std::size_t count) {
    return {v.begin() + static_cast<std::ptrdiff_t>(first * width),
            v.begin() + static_cast<std::ptrdiff_t>((first + count) * width)};
}

// Per token row, channels [from, from + width) of a [rows, channels] tensor.
std::vector<float> channelsOf(const std::vector<float>& v, std::size_t channels, std::size_t from, std::size_t width) {
    std::vector<float> out;
    for (std::size_t r = 0; r < v.size() / channels; ++r)
        out.insert(out.end(), v.begin() + static_cast<std::ptrdiff_t>(r * channels + from),
                   v.begin() + static_cast<std::ptrdiff_t>(r * channels + from + width));
    return out;
}

bool allZero(const std::vector<float>& v) {
    return std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; });
}

ClipTextConfig tinyClip(int hidden, int heads, int layers, ClipActivation act, int projection) {
    ClipTextConfig c;
    c.hiddenSize = hidden;
    c.intermediateSize = 2 * hidden;
    c.numAttentionHeads = heads;
    c.numHiddenLayers = layers;
    c.hiddenAct = act;
    c.projectionDim = projection;
    c.withProjection = projection > 0;
    c.eosTokenId = 49407;
    return c;
}

// An SDXL model of random tiny text encoders over the real vocabulary (no UNet: text only).
SdModel tinyTextModel() {
    SdModel m;
    m.family = SdFamily::SDXL;
    const ClipTextConfig a = tinyClip(8, 2, 2, ClipActivation::QuickGelu, 0);
    const ClipTextConfig b = tinyClip(12, 3, 3, ClipActivation::Gelu, 5);
    m.textEncoder = std::make_shared<const ClipTextModel>(
        ClipTextModel::fromTensors(a, randomTensors(ClipTextModel::expectedTensors(a), 11)));
    m.textEncoder2 = std::make_shared<const ClipTextModel>(
        ClipTextModel::fromTensors(b, randomTensors(ClipTextModel::expectedTensors(b), 12)));
    m.tokenizer = bundledTokenizer(SdFamily::SDXL, 1);
    m.tokenizer2 = bundledTokenizer(SdFamily::SDXL, 2);
    return m;
}

RunConfig textConfig(const std::string& prompt, const std::string& negative, double cfg = 5.0) {
    RunConfig c;
    c.prompt = prompt;
    c.negativePrompt = negative;
    c.cfgScale = cfg;
    return c;
}

// The fixture pipeline's text parts, with transformers' tokenizers (tokenizer_2 splits "!").
SdModel fixtureTextModel() {
    SdModel m;
    m.family = SdFamily::SDXL;
    m.textEncoder = std::make_shared<const ClipTextModel>(ClipTextModel::load(kPipeline + "/text_encoder"));
    m.textEncoder2 = std::make_shared<const ClipTextModel>(ClipTextModel::load(kPipeline + "/text_encoder_2"));
    m.tokenizer = tokenizer("<|endoftext|>", true);
    m.tokenizer2 = tokenizer("!", true);
    return m;
}

// A diffusers folder copy of `from` with tokenizer/ and tokenizer_2/ written from the bundled
// vocabulary plus the fixture's own tokenizer JSON files (their pad tokens).
void addTokenizerFolders(const std::string& root) {
    const std::string merges = tokenizer_test::unpackedMerges(kGz);
    const auto tok = tokenizer("<|endoftext|>", true);
    for (const char* sub : {"tokenizer", "tokenizer_2"}) {
        const fs::path dir = fs::path(root) / sub;
        fs::create_directories(dir);
        fs::copy(fs::path(kFixtures) / "tokenizer_files" / sub, dir,
                 fs::copy_options::recursive | fs::copy_options::overwrite_existing);
        tokenizer_test::writeFolder(dir.string(), *tok, merges);
    }
}

void writeText(const fs::path& path, const std::string& text) {
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
}

template <class Map>
void compareTensors(const Map& got, const Map& want, const QString& what) {
    QCOMPARE(got.size(), want.size());
    for (const auto& [name, t] : want) {
        const auto it = got.find(name);
        QVERIFY2(it != got.end(), qPrintable(what + ": no " + QString::fromStdString(name)));
        QVERIFY2(it->second.shape == t.shape && it->second.data == t.data,
                 qPrintable(what + ": " + QString::fromStdString(name) + " differs"));
    }
}

}  // namespace

class TestSdxlText : public QObject {
    Q_OBJECT

    CpuBackend cpu_;  // the text encoders' backend, as an engine's TileDevice::textBackend

private slots:
    void initTestCase() { setBundledClipVocabulary(kGz); }

    // --- the text encoders' new outputs ------------------------------------------------------

    void projectionAndPenultimateOutputs() {
        const SdModel m = tinyTextModel();
        const ClipTextModel& enc = *m.textEncoder2;
        QCOMPARE(ClipTextModel::expectedTensors(enc.config()).back().first, std::string(kClipTextProjection));
        QCOMPARE(ClipTextModel::expectedTensors(enc.config()).back().second, (std::vector<std::int64_t>{5, 12}));
        const PromptChunk chunk = chunkPrompt(*m.tokenizer2, "a cat on a mat").chunks.front();
        const Ids ids(chunk.ids.begin(), chunk.ids.end());
        const ClipTextOutputs all = enc.encode(cpu_, ids, 1, 0, ClipHiddenStates::All);
        const ClipTextOutputs pen = enc.encode(cpu_, ids, 1, 0, ClipHiddenStates::Penultimate);
        QCOMPARE(pen.hiddenStates.size(), std::size_t{1});
        QCOMPARE(pen.hiddenStates[0], all.hiddenStates[2]);  // 3 layers: hidden_states[-2] = layer 2's output
        // text_embeds = text_projection.weight [5, 12] x pooled.
        const HostTensor& w = enc.tensors().at(kClipTextProjection);
        std::vector<double> expected(5, 0.0);
        for (int o = 0; o < 5; ++o)
            for (int i = 0; i < 12; ++i) expected[o] += double(w.data[o * 12 + i]) * double(pen.pooled[i]);
        EXPECT_CLOSE("text_embeds", pen.textEmbeds, expected);
        QVERIFY(m.textEncoder->encode(cpu_, ids, 1).textEmbeds.empty());
        QCOMPARE(enc.parameterCount(), m.textEncoder2->parameterCount());
        // A WithProjection folder without its projection is refused naming the tensor.
        const QTemporaryDir tmp;
        const fs::path dir = fs::path(tmp.path().toStdString()) / "text_encoder_2";
        std::map<std::string, SafetensorsTensorData> tensors;
        for (const auto& [name, t] : enc.tensors())
            if (name != kClipTextProjection)
                tensors[name] = {SafetensorsDtype::F32, t.shape, encodeFloats(SafetensorsDtype::F32, t.data)};
        fs::create_directories(dir);
        writeSafetensors((dir / "model.safetensors").string(), tensors);
        writeText(dir / "config.json", toJson(enc.config()).dump());
        EXPECT_MESSAGE(errorOf([&] { ClipTextModel::load(dir); }), "text_projection.weight");
    }

    // --- fixtures by transformers / diffusers ------------------------------------------------

    void tokenizerIdsMatchTransformers() {
        REQUIRE_FIXTURES();
        const nlohmann::json c = cases();
        const SdModel m = fixtureTextModel();
        std::size_t k = 0;
        for (const auto& prompt : c.at("prompts")) {
            const nlohmann::json& want = c.at("ids").at(k++);
            const std::string text = prompt.get<std::string>();
            for (const auto& [tag, tok] : {std::pair{"1", m.tokenizer}, std::pair{"2", m.tokenizer2}}) {
                const Ids content = tok->encode(text);
                QCOMPARE(content, want.at(std::string("content") + tag).get<Ids>());
                const auto framed = tok->frame(content);
                QCOMPARE(Ids(framed.begin(), framed.end()), want.at(std::string("framed") + tag).get<Ids>());
            }
        }
        // The long prompt is over 75 tokens for both (A1111 makes two chunks of it).
        QVERIFY(c.at("ids").at(2).at("content2").size() > 75);
        // A folder's tokenizer_2 as save_pretrained wrote it: the pad token "!" (id 0) from its JSON.
        const QTemporaryDir tmp;
        addTokenizerFolders(tmp.path().toStdString());
        const ClipTokenizer folder2 = ClipTokenizer::fromDiffusersFolder(tmp.path().toStdString() + "/tokenizer_2");
        QCOMPARE(folder2.padId(), 0);
        QCOMPARE(folder2.encode(c.at("prompts").at(1).get<std::string>()), c.at("ids").at(1).at("content2").get<Ids>());
        QCOMPARE(ClipTokenizer::fromDiffusersFolder(tmp.path().toStdString() + "/tokenizer").padId(), 49407);
    }

    void encodersMatchTransformers() {
        REQUIRE_FIXTURES();
        const nlohmann::json c = cases();
        const SdModel m = fixtureTextModel();
        const SafetensorsFile want(kFixtures + "/prompts.safetensors");
        for (std::size_t k = 0; k < c.at("prompts").size(); ++k) {
            const std::string p = "p" + std::to_string(k);
            const nlohmann::json& ids = c.at("ids").at(k);
            const ClipTextOutputs a =
                m.textEncoder->encode(cpu_, ids.at("framed1").get<Ids>(), 1, 0, ClipHiddenStates::Penultimate);
            const ClipTextOutputs b =
                m.textEncoder2->encode(cpu_, ids.at("framed2").get<Ids>(), 1, 0, ClipHiddenStates::Penultimate);
            EXPECT_CLOSE(p + ".hidden1", a.hiddenStates[0], want.readFloat32(p + ".hidden1"));
            EXPECT_CLOSE(p + ".hidden2", b.hiddenStates[0], want.readFloat32(p + ".hidden2"));
            EXPECT_CLOSE(p + ".text_embeds", b.textEmbeds, want.readFloat32(p + ".text_embeds"));
        }
    }

    // encode_prompt: prompt_embeds = both penultimate layers side by side, the pooled projection,
    // the negative zeroed (force_zeros_for_empty_prompt) or encoded. A long prompt: the first 77
    // rows and the pooled text are diffusers' (its truncation = A1111's first chunk).
    void encodePromptMatchesDiffusers() {
        REQUIRE_FIXTURES();
        const nlohmann::json c = cases();
        SdModel m = fixtureTextModel();
        const SafetensorsFile want(kFixtures + "/encode.safetensors");
        const std::size_t width = 3 + 6;
        // Named apart, not as a structured binding: clang 14 cannot capture a binding in a lambda.
        for (const auto& item : c.at("cases").items()) {
            const std::string& name = item.key();
            const nlohmann::json& spec = item.value();
            const auto text = [&](const char* key) {
                return spec.at(key).is_null() ? std::string()
                                              : c.at("prompts").at(spec.at(key).get<std::size_t>()).get<std::string>();
            };
            const std::string prompt = text("prompt"), negative = text("negative_prompt");
            m.forceZerosForEmptyPrompt = spec.at("force_zeros_for_empty_prompt").get<bool>();
            const SdConditioning got = encodeSdPrompts(m, cpu_, textConfig(prompt, negative));
            QCOMPARE(got.channels, static_cast<int>(width));
            EXPECT_CLOSE(name + " prompt_embeds", rowsOf(got.cond, width, 0, kT),
                         want.readFloat32(name + ".prompt_embeds"));
            EXPECT_CLOSE(name + " pooled", got.pooledCond, want.readFloat32(name + ".pooled_prompt_embeds"));
            const std::vector<float> wantUncond = want.readFloat32(name + ".negative_prompt_embeds");
            const std::vector<float> wantPooled = want.readFloat32(name + ".negative_pooled_prompt_embeds");
            if (allZero(wantUncond)) {
                QVERIFY2(allZero(got.uncond) && got.uncond.size() == got.cond.size(), name.c_str());
                QVERIFY2(allZero(got.pooledUncond) && got.pooledUncond.size() == wantPooled.size(), name.c_str());
            } else {
                EXPECT_CLOSE(name + " negative_prompt_embeds", got.uncond, wantUncond);
                EXPECT_CLOSE(name + " negative pooled", got.pooledUncond, wantPooled);
            }
        }
    }

    void addEmbedsMatchTheUNet() {
        REQUIRE_FIXTURES();
        const nlohmann::json c = cases();
        const SafetensorsFile want(kFixtures + "/time_ids.safetensors");
        const std::vector<float> pooled =
            SafetensorsFile(kFixtures + "/encode.safetensors").readFloat32("short_zero.pooled_prompt_embeds");
        const UNetCondConfig unet = unetCondConfigFromJson(readBoundedJson(kPipeline + "/unet/config.json", "test"));
        for (const auto& [name, s] : c.at("time_settings").items()) {
            const auto o = s.at("original_size").get<std::vector<int>>(),
                       k = s.at("crops_coords_top_left").get<std::vector<int>>(),
                       t = s.at("target_size").get<std::vector<int>>();
            const std::vector<float> ids{float(o[0]), float(o[1]), float(k[0]), float(k[1]), float(t[0]), float(t[1])};
            QCOMPARE(want.readFloat32(name + ".add_time_ids"), ids);
            std::vector<float> rows = textTimeEmbeds(unet, std::vector<float>(pooled.size(), 0.0f), ids);
            const std::vector<float> cond = textTimeEmbeds(unet, pooled, ids);
            rows.insert(rows.end(), cond.begin(), cond.end());
            EXPECT_CLOSE(name + " add_embeds", rows, want.readFloat32(name + ".add_embeds"));
        }
    }

    void fixtureFolderLoads() {
        REQUIRE_FIXTURES();
        REQUIRE_TEXT_TIME();
        const SdModel m = loadSdModel(kPipeline);
        QCOMPARE(std::string(toString(m.family)), std::string("sdxl"));
        QVERIFY(m.textEncoder2 && m.textEncoder2->config().withProjection);
        QCOMPARE(m.tokenizer->padId(), 49407);
        QCOMPARE(m.tokenizer2->padId(), 0);  // no tokenizer_2/: the bundled vocabulary, pad "!"
        QVERIFY(m.forceZerosForEmptyPrompt);
        QCOMPARE(m.schedulerClass, std::string("EulerDiscreteScheduler"));
        QCOMPARE(m.vae->config().scalingFactor, 0.13025f);
        // With tokenizer folders, tokenizer_2's pad token comes from its own files.
        const QTemporaryDir tmp;
        fs::copy(kPipeline, tmp.path().toStdString(), fs::copy_options::recursive);
        addTokenizerFolders(tmp.path().toStdString());
        const SdModel withTokenizers = loadSdModel(tmp.path().toStdString());
        QCOMPARE(withTokenizers.tokenizer2->padId(), 0);
        QCOMPARE(withTokenizers.tokenizer2->encode("!"), (Ids{0}));  // transformers reads "!" as its pad token
        QCOMPARE(withTokenizers.tokenizer->encode("!"), (Ids{256}));
    }

    // --- the single file -----------------------------------------------------------------------

    void singleFileEqualsFolder() {
        REQUIRE_TEXT_TIME();
        SingleFileOptions options;
        options.digest = FileDigest::Skip;
        options.configFolder = kSingleFolder;
        const SingleFileCheckpointInfo info = inspectSingleFileCheckpoint(kSingleFile, options);
        QCOMPARE(std::string(toString(info.family)), std::string("sdxl"));
        QVERIFY(info.textEncoder2 && info.textEncoder2->withProjection);
        QVERIFY(info.textEncoder2Part.parameters > 0);
        QCOMPARE(info.ignored,
                 (std::vector<std::string>{"conditioner.embedders.0.transformer.text_model.embeddings.position_ids",
                                           "conditioner.embedders.1.model.logit_scale", "denoiser.sigmas"}));
        // The C++ mapping names exactly the file's tensors (shapes as stored: in_proj fused,
        // text_projection transposed).
        std::map<std::string, std::vector<std::int64_t>> expected, stored;
        for (auto& [name, shape] :
             singleFileTensors(SdFamily::SDXL, info.unet, info.vae, info.textEncoder, info.textEncoder2))
            expected[name] = shape;
        const SafetensorsFile file(kSingleFile);
        for (const auto& t : file.tensors())
            if (std::find(info.ignored.begin(), info.ignored.end(), t.name) == info.ignored.end())
                stored[t.name] = t.shape;
        QVERIFY(expected == stored);

        const SdModel single = loadSingleFileCheckpoint(kSingleFile, options);
        const SdModel folder = loadSdModel(kSingleFolder);
        QCOMPARE(std::string(toString(folder.family)), std::string("sdxl"));
        compareTensors(single.unet->tensors(), folder.unet->tensors(), "unet");
        compareTensors(single.vae->tensors(), folder.vae->tensors(), "vae");
        compareTensors(single.textEncoder->tensors(), folder.textEncoder->tensors(), "text_encoder");
        compareTensors(single.textEncoder2->tensors(), folder.textEncoder2->tensors(), "text_encoder_2");
        QVERIFY(single.textEncoder2->tensors().count(kClipTextProjection) == 1);
        QCOMPARE(single.schedulerClass, std::string("EulerDiscreteScheduler"));
        QCOMPARE(single.vae->config().scalingFactor, 0.13025f);
    }

    // SDXL base at full size (only the header is read; the data is a sparse hole): the
    // configurations and parameter counts the published checkpoint has
    // (stabilityai/stable-diffusion-xl-base-1.0's config.json files).
    void fullSizeSdxlHeader() {
        REQUIRE_TEXT_TIME();
        const SdModelConfigs c = randomSdModelConfigs("random:sdxl");
        TensorList tensors = singleFileTensors(SdFamily::SDXL, c.unet, c.vae, c.textEncoder, c.textEncoder2);
        for (const char* extra : {"conditioner.embedders.1.model.logit_scale", "denoiser.sigmas"})
            tensors.emplace_back(extra, std::vector<std::int64_t>{1});
        const QTemporaryDir tmp;
        const std::string path = tmp.filePath("sdxl_base.safetensors").toStdString();
        single_file_test::writeHeaderOnly(path, tensors);
        SingleFileOptions options;
        options.digest = FileDigest::Skip;
        const SingleFileCheckpointInfo info = inspectSingleFileCheckpoint(path, options);
        QCOMPARE(std::string(toString(info.family)), std::string("sdxl"));
        EXPECT_MESSAGE(info.familyReason, "as diffusers tests");
        QVERIFY(UNetCondModel::expectedTensors(info.unet) == UNetCondModel::expectedTensors(c.unet));
        QCOMPARE(info.unet.attentionHeads, (std::vector<int>{5, 10, 20}));
        QCOMPARE(info.unet.transformerLayers, (std::vector<int>{1, 2, 10}));
        QCOMPARE(info.unet.sampleSize, 128);
        QCOMPARE(toJson(info.vae), toJson(c.vae));
        QCOMPARE(info.textEncoder2->projectionDim, 1280);
        for (const auto& [got, want] :
             {std::pair{info.textEncoder, c.textEncoder}, std::pair{*info.textEncoder2, *c.textEncoder2}}) {
            QCOMPARE(got.hiddenSize, want.hiddenSize);
            QCOMPARE(got.numHiddenLayers, want.numHiddenLayers);
            QCOMPARE(got.numAttentionHeads, want.numAttentionHeads);
            QVERIFY(got.hiddenAct == want.hiddenAct && got.withProjection == want.withProjection);
        }
        QCOMPARE(info.unetPart.parameters, std::int64_t{2'567'463'684});
        QCOMPARE(info.unetPart.tensors, std::size_t{1680});
        QCOMPARE(info.vaePart.parameters, std::int64_t{83'653'863});
        QCOMPARE(info.textEncoderPart.parameters, std::int64_t{123'060'480});
        QCOMPARE(info.textEncoder2Part.parameters, std::int64_t{694'659'840});
        QCOMPARE(info.textEncoder2Part.tensors, std::size_t{517 - 32 * 4});  // q/k/v fused: 6 tensors read as 2
        QCOMPARE(info.schedulerClass, std::string("EulerDiscreteScheduler"));
        QCOMPARE(info.ignored.size(), std::size_t{2});
    }

    // A single file of SDXL's fixed values (64-wide heads, GroupNorm 32) at small sizes loads
    // with configurations derived from its tensors alone.
    void derivedSdxlConfigurations() {
        REQUIRE_TEXT_TIME();
        const QTemporaryDir tmp;
        nlohmann::json unetJson = {{"block_out_channels", {64, 128}},
                                   {"layers_per_block", 1},
                                   {"down_block_types", {"DownBlock2D", "CrossAttnDownBlock2D"}},
                                   {"up_block_types", {"CrossAttnUpBlock2D", "UpBlock2D"}},
                                   {"attention_head_dim", {1, 2}},
                                   {"transformer_layers_per_block", {1, 2}},
                                   {"cross_attention_dim", 192},
                                   {"use_linear_projection", true},
                                   {"sample_size", 128},
                                   {"addition_embed_type", "text_time"},
                                   {"addition_time_embed_dim", 8},
                                   {"projection_class_embeddings_input_dim", 32 + 48}};
        const UNetCondConfig unet = unetCondConfigFromJson(unetJson);
        VaeConfig vae;
        vae.blockOutChannels = {32, 64};
        ClipTextConfig a = tinyClip(64, 1, 2, ClipActivation::QuickGelu, 0),
                       b = tinyClip(128, 2, 2, ClipActivation::Gelu, 32);
        vae.normNumGroups = 32;
        a.vocabSize = b.vocabSize = 100;
        a.eosTokenId = b.eosTokenId = 2;
        std::map<std::string, SafetensorsTensorData> tensors;
        for (const auto& [name, shape] : singleFileTensors(SdFamily::SDXL, unet, vae, a, b)) {
            std::int64_t n = 1;
            for (const auto d : shape) n *= d;
            tensors[name] = {
                SafetensorsDtype::F16, shape,
                encodeFloats(SafetensorsDtype::F16, std::vector<float>(static_cast<std::size_t>(n), 0.125f))};
        }
        const std::string path = tmp.filePath("small_xl.safetensors").toStdString();
        writeSafetensors(path, tensors);
        SingleFileOptions options;
        options.digest = FileDigest::Skip;
        const SingleFileCheckpointInfo info = inspectSingleFileCheckpoint(path, options);
        QCOMPARE(info.unet.crossAttentionDim, 192);
        QCOMPARE(info.unet.transformerLayers, (std::vector<int>{1, 2}));
        QCOMPARE(info.unet.attentionHeads, (std::vector<int>{1, 2}));  // 64-wide heads
        // add_embedding takes the 32 pooled values and 6 ids of (80 - 32) / 6 = 8.
        QVERIFY(UNetCondModel::expectedTensors(info.unet) == UNetCondModel::expectedTensors(unet));
        QVERIFY(info.textEncoder.hiddenAct == ClipActivation::QuickGelu);
        QCOMPARE(info.textEncoder2->projectionDim, 32);
        QCOMPARE(info.textEncoder2->numHiddenLayers, 2);  // every block (SD 2.x drops its last)
        QCOMPARE(info.vae.scalingFactor, 0.13025f);
        const SdModel m = loadSingleFileCheckpoint(path, options);
        QCOMPARE(m.textEncoder2->tensors().at(kClipTextProjection).shape, (std::vector<std::int64_t>{32, 128}));
        // Through loadSdModel: the bundled tokenizers with SDXL's pads.
        const SdModel viaSd = loadSdModel(path);
        QCOMPARE(std::string(toString(viaSd.family)), std::string("sdxl"));
        QCOMPARE(viaSd.tokenizer->padId(), 49407);
        QCOMPARE(viaSd.tokenizer2->padId(), 0);
        QCOMPARE(viaSd.tokenizer2->encode("!"), (Ids{256}));  // open_clip (A1111) reads "!" as text
        // add_embedding of 5 ids (a refiner's) does not fit: named.
        tensors["model.diffusion_model.label_emb.0.0.weight"] = {
            SafetensorsDtype::F16,
            {256, 32 + 5 * 8},
            encodeFloats(SafetensorsDtype::F16, std::vector<float>(256 * 72, 0.125f))};
        writeSafetensors(path, tensors);
        EXPECT_MESSAGE(errorOf([&] { inspectSingleFileCheckpoint(path, options); }), "label_emb.0.0.weight");
    }

    void sdxlPartsMustFit() {
        UNetCondConfig unet;
        unet.crossAttentionDim = 20;
        const ClipTextConfig a = tinyClip(8, 2, 2, ClipActivation::QuickGelu, 0);
        EXPECT_MESSAGE(errorOf([&] { checkSdxlComponents(unet, a, tinyClip(12, 3, 2, ClipActivation::Gelu, 0), "x"); }),
                       "CLIPTextModelWithProjection");
        unet.crossAttentionDim = 21;
        EXPECT_MESSAGE(errorOf([&] { checkSdxlComponents(unet, a, tinyClip(12, 3, 2, ClipActivation::Gelu, 5), "x"); }),
                       "8 + 12 = 20");
        if (!unetHasTextTime()) return;
        unet = unetCondConfigFromJson({{"cross_attention_dim", 20},
                                       {"addition_embed_type", "text_time"},
                                       {"addition_time_embed_dim", 4},
                                       {"projection_class_embeddings_input_dim", 5 + 20}});
        EXPECT_MESSAGE(errorOf([&] { checkSdxlComponents(unet, a, tinyClip(12, 3, 2, ClipActivation::Gelu, 5), "x"); }),
                       "refiner");
    }

    // --- refused and missing parts -------------------------------------------------------------

    void refinersRefused() {
        const QTemporaryDir tmp;
        const fs::path root(tmp.path().toStdString());
        writeText(root / "r1/model_index.json",
                  R"({"_class_name": "StableDiffusionXLImg2ImgPipeline", "requires_aesthetics_score": true,
                      "unet": ["diffusers", "UNet2DConditionModel"], "vae": ["diffusers", "AutoencoderKL"],
                      "text_encoder": [null, null], "text_encoder_2": ["transformers", "CLIPTextModelWithProjection"]})");
        std::string m = errorOf([&] { loadSdModel((root / "r1").string()); });
        EXPECT_MESSAGE(m, "SDXL refiner");
        EXPECT_MESSAGE(m, "requires_aesthetics_score");
        writeText(root / "r2/model_index.json",
                  R"({"_class_name": "StableDiffusionXLImg2ImgPipeline", "unet": ["diffusers", "UNet2DConditionModel"],
                      "vae": ["diffusers", "AutoencoderKL"], "text_encoder_2": ["transformers", "CLIPTextModelWithProjection"]})");
        EXPECT_MESSAGE(errorOf([&] { loadSdModel((root / "r2").string()); }), "text_encoder_2 without text_encoder");
        // A refiner single file: OpenCLIP bigG as the first (only) embedder.
        const std::string file = (root / "refiner.safetensors").string();
        writeSafetensors(file, {{"conditioner.embedders.0.model.token_embedding.weight",
                                 {SafetensorsDtype::F16, {4, 2}, std::vector<std::byte>(16)}}});
        m = errorOf([&] { loadSdModel(file); });
        EXPECT_MESSAGE(m, "SDXL refiner");
        EXPECT_MESSAGE(m, "not supported yet");
    }

    void missingTextEncoder2Refused() {
        const QTemporaryDir tmp;
        const fs::path root(tmp.path().toStdString());
        const std::string components =
            R"("unet": ["diffusers", "UNet2DConditionModel"], "vae": ["diffusers", "AutoencoderKL"],
               "text_encoder": ["transformers", "CLIPTextModel"])";
        writeText(root / "a/model_index.json", R"({"_class_name": "StableDiffusionXLPipeline", )" + components + "}");
        EXPECT_MESSAGE(errorOf([&] { loadSdModel((root / "a").string()); }), "no text_encoder_2 component listed");
        writeText(
            root / "b/model_index.json",
            R"({"_class_name": "StableDiffusionXLPipeline", "text_encoder_2": ["transformers", "CLIPTextModelWithProjection"], )" +
                components + "}");
        for (const char* sub : {"unet", "vae", "text_encoder"}) fs::create_directories(root / "b" / sub);
        std::string m = errorOf([&] { loadSdModel((root / "b").string()); });
        EXPECT_MESSAGE(m, "text_encoder_2': not found");
        writeText(
            root / "c/model_index.json",
            R"({"_class_name": "StableDiffusionXLPipeline", "text_encoder_2": ["transformers", "CLIPTextModel"], )" +
                components + "}");
        EXPECT_MESSAGE(errorOf([&] { loadSdModel((root / "c").string()); }), "CLIPTextModelWithProjection");
        writeText(
            root / "d/model_index.json",
            R"({"_class_name": "StableDiffusionXLPipeline", "force_zeros_for_empty_prompt": "yes", "text_encoder_2": ["transformers", "CLIPTextModelWithProjection"], )" +
                components + "}");
        EXPECT_MESSAGE(errorOf([&] { loadSdModel((root / "d").string()); }), "force_zeros_for_empty_prompt");
    }

    // --- random:sdxl ---------------------------------------------------------------------------

    void randomSdxlShapes() {
        QVERIFY(isSdModelPath("random:sdxl"));
        EXPECT_MESSAGE(errorOf([] { randomSdModelConfigs("random:sdx"); }), "random:sdxl");
        REQUIRE_TEXT_TIME();
        const SdModelConfigs c = randomSdModelConfigs("random:sdxl");
        QCOMPARE(std::string(toString(c.family)), std::string("sdxl"));
        QCOMPARE(c.textEncoder.hiddenSize, 768);
        QCOMPARE(c.textEncoder.numHiddenLayers, 12);
        QVERIFY(c.textEncoder.hiddenAct == ClipActivation::QuickGelu && !c.textEncoder.withProjection);
        QVERIFY(c.textEncoder2 && c.textEncoder2->withProjection && c.textEncoder2->hiddenAct == ClipActivation::Gelu);
        QCOMPARE(c.textEncoder2->hiddenSize, 1280);
        QCOMPARE(c.textEncoder2->numHiddenLayers, 32);
        QCOMPARE(c.textEncoder2->numAttentionHeads, 20);
        QCOMPARE(c.textEncoder2->projectionDim, 1280);
        auto count = [](const TensorList& list) {
            std::int64_t n = 0;
            for (const auto& [name, shape] : list) {
                std::int64_t k = 1;
                for (const auto d : shape) k *= d;
                n += k;
            }
            return n;
        };
        // The published checkpoint's counts: CLIP-L 123,060,480; bigG 694,659,840; UNet 2,567,463,684.
        QCOMPARE(count(ClipTextModel::expectedTensors(c.textEncoder)), std::int64_t{123060480});
        QCOMPARE(count(ClipTextModel::expectedTensors(*c.textEncoder2)), std::int64_t{694659840});
        QCOMPARE(count(UNetCondModel::expectedTensors(c.unet)), std::int64_t{2567463684});
        QCOMPARE(c.unet.crossAttentionDim, 2048);
        QCOMPARE(c.vae.scalingFactor, 0.13025f);
        QCOMPARE(c.schedulerClass, std::string("EulerDiscreteScheduler"));
        checkSdxlComponents(c.unet, c.textEncoder, *c.textEncoder2, "random:sdxl");
    }

    // --- conditioning ----------------------------------------------------------------------------

    void emptyNegativePromptIsZeros() {
        SdModel m = tinyTextModel();
        SdConditioning c = encodeSdPrompts(m, cpu_, textConfig("a cat", ""));
        QCOMPARE(c.channels, 8 + 12);
        QCOMPARE(c.tokens, kT);
        QCOMPARE(c.cond.size(), std::size_t(kT * 20));
        QCOMPARE(c.pooledCond.size(), std::size_t{5});
        QVERIFY(!allZero(c.cond) && !allZero(c.pooledCond));
        QCOMPARE(c.uncond.size(), c.cond.size());
        QVERIFY(allZero(c.uncond) && allZero(c.pooledUncond) && c.pooledUncond.size() == 5);
        // A non-empty negative prompt, or force_zeros_for_empty_prompt off, is encoded.
        const SdConditioning ugly = encodeSdPrompts(m, cpu_, textConfig("a cat", "ugly"));
        QVERIFY(!allZero(ugly.uncond) && !allZero(ugly.pooledUncond));
        m.forceZerosForEmptyPrompt = false;
        c = encodeSdPrompts(m, cpu_, textConfig("a cat", ""));
        QVERIFY(!allZero(c.uncond) && !allZero(c.pooledUncond));
        QCOMPARE(c.pooledUncond, encodeSdPrompts(m, cpu_, textConfig("", "", 1.0)).pooledCond);
        // No guidance: no unconditional half.
        c = encodeSdPrompts(m, cpu_, textConfig("a cat", "", 1.0));
        QVERIFY(c.uncond.empty() && c.pooledUncond.empty());
    }

    // A1111: each encoder chunks and weights on its own; the pooled text is the first chunk's,
    // before emphasis; the rows are the two encoders' side by side.
    void pooledFromTheFirstChunk() {
        const SdModel m = tinyTextModel();
        std::string prompt;
        for (int i = 0; i < 40; ++i) prompt += "red cat ";  // 80 tokens: two chunks
        prompt += "(blue:1.4) dog";
        const SdConditioning c = encodeSdPrompts(m, cpu_, textConfig(prompt, ""));
        QCOMPARE(c.tokens, 2 * kT);
        QCOMPARE(c.uncond.size(), c.cond.size());  // zeros as long as the prompt
        const PromptChunks chunks = chunkPrompt(*m.tokenizer2, prompt);
        QCOMPARE(chunks.chunks.size(), std::size_t{2});
        auto textEmbeds = [&](const PromptChunk& chunk) {
            return m.textEncoder2->encode(cpu_, Ids(chunk.ids.begin(), chunk.ids.end()), 1).textEmbeds;
        };
        QCOMPARE(c.pooledCond, textEmbeds(chunks.chunks[0]));
        QVERIFY(c.pooledCond != textEmbeds(chunks.chunks[1]));
        // Each encoder's part is its own A1111 conditioning (emphasis normalised per encoder).
        PromptConditioningOptions options;
        options.layer = PromptLayer::Penultimate;
        const PromptConditioning a = encodePrompt(*m.textEncoder, cpu_, *m.tokenizer, prompt, options);
        const PromptConditioning b = encodePrompt(*m.textEncoder2, cpu_, *m.tokenizer2, prompt, options);
        QCOMPARE(channelsOf(c.cond, 20, 0, 8), a.values);
        QCOMPARE(channelsOf(c.cond, 20, 8, 12), b.values);
        QCOMPARE(b.pooled, c.pooledCond);
        // Emphasis leaves the pooled text alone.
        QCOMPARE(encodeSdPrompts(m, cpu_, textConfig("(blue:1.4) dog", "")).pooledCond,
                 encodeSdPrompts(m, cpu_, textConfig("blue dog", "")).pooledCond);
        QVERIFY(encodeSdPrompts(m, cpu_, textConfig("(blue:1.4) dog", "")).cond !=
                encodeSdPrompts(m, cpu_, textConfig("blue dog", "")).cond);
    }

    void clipSkipIsNotApplied() {
        const SdModel m = tinyTextModel();
        RunConfig config = textConfig("a cat", "ugly");
        const SdConditioning one = encodeSdPrompts(m, cpu_, config);
        config.clipSkip = 2;
        const SdConditioning two = encodeSdPrompts(m, cpu_, config);
        QCOMPARE(two.cond, one.cond);
        QCOMPARE(two.pooledCond, one.pooledCond);
        QVERIFY(std::any_of(two.messages.begin(), two.messages.end(), [](const std::string& s) {
            return s.find("clip skip 2 not applied") != std::string::npos;
        }));
        // Penultimate is SDXL's; clip skip with it is refused where asked directly.
        PromptConditioningOptions options;
        options.layer = PromptLayer::Penultimate;
        options.clipSkip = 2;
        EXPECT_MESSAGE(errorOf([&] { encodePrompt(*m.textEncoder, cpu_, *m.tokenizer, "a", options); }), "[clip skip]");
    }

    // SDXL base's add_embedding input (UNetCondConfig textTimeEmbeds, the one function for it):
    // the pooled text first, then each size id's sinusoid, 1280 + 6 x 256 = 2816 values.
    void addEmbedsLayout() {
        const UNetCondConfig base = sdxlBaseUNetConfig();
        std::vector<float> pooled(1280);
        for (std::size_t i = 0; i < pooled.size(); ++i) pooled[i] = 0.001f * static_cast<float>(i);
        const std::vector<float> v = textTimeEmbeds(base, pooled, {1024, 768, 16, 8, 512, 640});
        QCOMPARE(v.size(), std::size_t{2816});
        QCOMPARE(std::vector<float>(v.begin(), v.begin() + 1280), pooled);
        // Each id's sinusoid: [cos(t f_0..127), sin(t f_0..127)], f_0 = 1.
        const float ids[6] = {1024, 768, 16, 8, 512, 640};
        for (int k = 0; k < 6; ++k) {
            QVERIFY(std::abs(v[1280 + 256 * k] - std::cos(ids[k])) < 1e-4f);
            QVERIFY(std::abs(v[1280 + 256 * k + 128] - std::sin(ids[k])) < 1e-4f);
        }
        EXPECT_MESSAGE(errorOf([&] { textTimeEmbeds(base, {}, {1, 1, 0, 0, 1, 1}); }), "pooled");
        EXPECT_MESSAGE(errorOf([&] { textTimeEmbeds(base, pooled, {1, 1, 0, 0, 1}); }), "2816");
    }
};

QTEST_APPLESS_MAIN(TestSdxlText)
#include "tst_sdxltext.moc"
