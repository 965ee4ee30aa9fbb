#include "core/models/flux/FluxModel.h"

#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/base/Sha256.h"
#include "core/base/ValidationError.h"
#include "core/models/flux/FluxGraph.h"
#include "core/models/flux/FluxWeights.h"
#include "core/models/sd/SdModel.h"     // bundledTokenizer: FLUX.1's CLIP-L tokenizer is SD 1.x's
#include "core/models/sd/SdPipeline.h"  // upsampleNearest
#include "core/run/ModelName.h"

namespace tessera {

namespace fs = std::filesystem;

namespace {

// The class name in a JSON file, or "" when it is missing, unreadable or not an object.
std::string className(const fs::path& file) {
    std::error_code ec;
    if (!fs::is_regular_file(file, ec)) return {};
    try {
        const nlohmann::json j = readModelJson(file);
        return j.is_object() && j.contains("_class_name") && j["_class_name"].is_string()
                   ? j["_class_name"].get<std::string>()
                   : std::string();
    } catch (const std::exception&) {
        return {};
    }
}

void checkVae(const FluxConfig& config, const VaeModel& vae, const std::string& where) {
    if (vae.config().latentChannels * 4 != config.inChannels)
        throw ModelError(where + ": the VAE has " + std::to_string(vae.config().latentChannels) +
                         " latent channels; the transformer reads " + std::to_string(config.latentChannels()) +
                         " (a FLUX.1 VAE, ae.safetensors, has 16; an SD VAE has 4)");
    if (vae.config().scaleFactor() != FluxModel::kVaeScale)
        throw ModelError(where + ": the VAE scales by " + std::to_string(vae.config().scaleFactor()) +
                         "; FLUX's works in 8-pixel cells");
}

void requireMultiple(const std::string& field, int value, const char* what) {
    const int f = FluxModel::kPixelUnit;
    if (value % f == 0) return;
    const int below = value / f * f, above = below + f;
    throw ValidationError(field, field + ": " + std::to_string(value) + " is not a multiple of 16; " + what +
                                     " of a FLUX.1 run must be (a token is 2 x 2 latent pixels of 8): use " +
                                     (below > 0 ? std::to_string(below) + " or " : std::string()) +
                                     std::to_string(above));
}

}  // namespace

bool isRandomFluxName(const std::string& name) {
    return name == std::string(kRandomModelPrefix) + "flux-dev" ||
           name == std::string(kRandomModelPrefix) + "flux-schnell";
}

RandomFluxShapes randomFluxShapes(const std::string& name) {
    if (!isRandomFluxName(name))
        throw ValidationError(
            "model", "model: '" + name + "' is not a random FLUX.1 model; random:flux-dev and random:flux-schnell are");
    RandomFluxShapes s;
    s.name = name;
    s.transformer.guidanceEmbeds = name.ends_with("flux-dev");  // FluxConfig's defaults are FLUX.1's
    s.vae = randomSdModelConfigs("random:sd15").vae;            // the SD VAE's blocks, widths and depths
    s.vae.latentChannels = 16;
    s.vae.sampleSize = 1024;
    s.vae.scalingFactor = 0.3611f;
    s.vae.shiftFactor = 0.1159f;
    s.vae.useQuantConv = false;
    s.vae.usePostQuantConv = false;
    s.clip = randomSdModelConfigs("random:sd15").textEncoder;  // CLIP ViT-L/14's text encoder
    s.t5.dModel = 4096;                                        // google/t5-v1_1-xxl's encoder
    s.t5.dFf = 10240;
    s.t5.numLayers = 24;
    s.t5.numHeads = 64;
    return s;
}

std::uint64_t randomFluxBytes(const RandomFluxShapes& s) {
    return float32Bytes(fluxParameters(s.transformer)) + float32Bytes(VaeModel::expectedTensors(s.vae)) +
           float32Bytes(ClipTextModel::expectedTensors(s.clip)) + float32Bytes(T5Model::expectedTensors(s.t5));
}

std::shared_ptr<const FluxModel> randomFluxModel(const RandomFluxShapes& s, std::uint64_t seed, LoadMeter* meter) {
    auto phase = [meter](const char* name, const TensorList& list, std::uint64_t at) {
        if (meter) meter->beginPhase(name, float32Bytes(list));
        auto tensors = randomTensors(list, at, meter);
        if (meter) meter->endPhase();
        return tensors;
    };
    const TensorList vaeList = VaeModel::expectedTensors(s.vae);
    auto vae = std::make_shared<const VaeModel>(
        VaeModel::fromTensors(s.vae, phase("random weights for the VAE", vaeList, seed + 1), WeightsDigest::Skip));
    auto flux = std::const_pointer_cast<FluxModel>(
        makeFluxModel(s.transformer, phase("random weights for the transformer", fluxParameters(s.transformer), seed),
                      std::move(vae), s.name));
    const TensorList clipList = ClipTextModel::expectedTensors(s.clip), t5List = T5Model::expectedTensors(s.t5);
    auto clip = std::make_shared<const ClipTextModel>(ClipTextModel::fromTensors(
        s.clip, phase("random weights for CLIP-L", clipList, seed + 2), WeightsDigest::Skip));
    auto t5 = std::make_shared<const T5Model>(
        T5Model::fromTensors(s.t5, phase("random weights for T5-XXL", t5List, seed + 3), WeightsDigest::Skip));
    flux->clip = std::move(clip);
    flux->clipTokenizer = bundledTokenizer(SdFamily::SD1);
    flux->t5 = std::move(t5);
    flux->sha256 = sha256Hex(s.name.data(), s.name.size());
    if (meter) meter->finish();
    return flux;
}

std::vector<std::int32_t> foldedT5Ids(const ClipTokenizer& clip, const std::string& prompt, int maxLength,
                                      int vocabulary) {
    const int pieces = std::max(1, vocabulary - T5Tokenizer::kExtraIds - 3);
    std::vector<std::int32_t> ids;
    for (const std::int32_t id : clip.encode(prompt)) {
        if (static_cast<int>(ids.size()) + 1 >= maxLength) break;
        ids.push_back(3 + id % pieces);
    }
    ids.push_back(T5Tokenizer::kEosId);
    ids.resize(static_cast<std::size_t>(maxLength), T5Tokenizer::kPadId);
    return ids;
}

bool isFluxModelPath(const std::string& path) {
    if (isRandomFluxName(path)) return true;
    std::error_code ec;
    const fs::path p(path);
    if (path.empty() || !fs::is_directory(p, ec)) return false;
    if (className(p / "model_index.json").rfind("Flux", 0) == 0) return true;
    return className(p / "transformer" / "config.json") == "FluxTransformer2DModel" ||
           className(p / "config.json") == "FluxTransformer2DModel";
}

std::shared_ptr<const FluxModel> makeFluxModel(FluxConfig config, std::map<std::string, HostTensor> tensors,
                                               std::shared_ptr<const VaeModel> vae, std::string name) {
    if (!vae) throw ModelError(name + ": no VAE (a FLUX.1 run decodes with its 16-channel VAE)");
    checkVae(config, *vae, name);
    auto model = std::make_shared<FluxModel>();
    model->config = config;
    model->tensors = std::move(tensors);
    model->vae = std::move(vae);
    model->name = std::move(name);
    return model;
}

std::shared_ptr<const FluxModel> loadFluxModel(const std::string& path, LoadMeter* meter) {
    if (isRandomFluxName(path)) return randomFluxModel(randomFluxShapes(path), 0, meter);
    const std::string dir = componentFolder(path, "transformer", "a FLUX.1 pipeline folder");
    const fs::path configFile = fs::path(dir) / "config.json";
    FluxConfig config;
    try {
        config = parseFluxConfig(readModelJson(configFile));
    } catch (const ModelError&) {
        throw;
    } catch (const std::exception& e) {
        throw ModelError(configFile.string() + ": " + withoutPrefix(e.what(), "config.json: "));
    }
    ModelWeights weights =
        ModelWeights::load(dir, fluxDiffusersTensors(config), LegacyAttentionNames::NotAccepted, meter);
    const std::string sha = weights.sha256;
    // A transformer folder alone has no VAE; a pipeline folder keeps it in vae/.
    if (fs::path(dir) == fs::path(path))
        throw ModelError(path +
                         ": a FLUX.1 transformer folder alone; give the pipeline folder that holds it beside "
                         "vae/ (the 16-channel VAE a run decodes with)");
    auto vae = std::make_shared<const VaeModel>(VaeModel::load(path, meter));
    auto model = makeFluxModel(config, fluxTensorsFromDiffusers(config, std::move(weights.tensors)), std::move(vae),
                               fs::path(path).filename().string());
    auto owned = std::const_pointer_cast<FluxModel>(model);
    owned->sha256 = sha;
    // diffusers' FluxPipeline components: text_encoder/ (CLIPTextModel), text_encoder_2/
    // (T5EncoderModel), tokenizer_2/spiece.model; the CLIP tokenizer is CLIP-L's (bundled).
    const fs::path root(path);
    std::error_code ec;
    std::shared_ptr<const ClipTextModel> clip;
    std::shared_ptr<const T5Model> t5;
    std::shared_ptr<const T5Tokenizer> t5Tokenizer;
    if (fs::is_directory(root / "text_encoder", ec))
        clip = std::make_shared<const ClipTextModel>(ClipTextModel::load(root / "text_encoder", meter));
    if (fs::is_directory(root / "text_encoder_2", ec)) {
        t5 = std::make_shared<const T5Model>(T5Model::load(root / "text_encoder_2", meter));
        const fs::path spiece = root / "tokenizer_2" / "spiece.model";
        if (!fs::exists(spiece, ec))
            throw ModelError(spiece.string() +
                             ": not found; the T5 encoder's SentencePiece model is needed to "
                             "tokenize prompts (diffusers keeps it in tokenizer_2/)");
        t5Tokenizer = std::make_shared<const T5Tokenizer>(spiece);
    }
    setFluxTextEncoders(*owned, clip, clip ? bundledTokenizer(SdFamily::SD1) : nullptr, t5, t5Tokenizer, path);
    return model;
}

void setFluxTextEncoders(FluxModel& model, std::shared_ptr<const ClipTextModel> clip,
                         std::shared_ptr<const ClipTokenizer> clipTokenizer, std::shared_ptr<const T5Model> t5,
                         std::shared_ptr<const T5Tokenizer> t5Tokenizer, const std::string& where) {
    if (!clip && !t5) return;
    if (!clip || !clipTokenizer)
        throw ModelError(where +
                         ": no CLIP-L text encoder (text_encoder/, clip_l.safetensors) beside T5; FLUX.1 "
                         "reads CLIP's pooled output");
    if (!t5 || !t5Tokenizer)
        throw ModelError(where +
                         ": no T5 text encoder (text_encoder_2/ with tokenizer_2/spiece.model, "
                         "t5xxl_fp16.safetensors) beside CLIP-L; FLUX.1 reads T5-XXL's token states");
    if (t5->config().dModel != model.config.jointAttentionDim)
        throw ModelError(where + ": the T5 encoder is " + std::to_string(t5->config().dModel) +
                         " wide; the transformer reads " + std::to_string(model.config.jointAttentionDim) +
                         " (FLUX.1 takes T5 v1.1 XXL: 4096)");
    if (clip->config().hiddenSize != model.config.pooledProjectionDim)
        throw ModelError(where + ": the CLIP text encoder is " + std::to_string(clip->config().hiddenSize) +
                         " wide; the transformer reads a pooled output of " +
                         std::to_string(model.config.pooledProjectionDim) + " (FLUX.1 takes CLIP-L: 768)");
    if (t5Tokenizer->vocabSize() > t5->config().vocabSize)
        throw ModelError(where + ": the T5 tokenizer has " + std::to_string(t5Tokenizer->vocabSize()) +
                         " ids; the encoder's table " + std::to_string(t5->config().vocabSize));
    model.clip = std::move(clip);
    model.clipTokenizer = std::move(clipTokenizer);
    model.t5 = std::move(t5);
    model.t5Tokenizer = std::move(t5Tokenizer);
}

FluxConditioning encodeFluxPrompt(const FluxModel& model, Backend& backend, const std::string& prompt, float guidance) {
    if (!model.hasTextEncoders())
        throw ValidationError("model", "model: " + model.name +
                                           " has no text encoders (CLIP-L and T5-XXL); give a FLUX.1 folder with "
                                           "text_encoder/ and text_encoder_2/");
    FluxConditioning c;
    std::vector<std::int32_t> clipIds = model.clipTokenizer->encode(prompt);
    if (clipIds.size() > 75) clipIds.resize(75);  // diffusers' CLIPTokenizer(truncation=True, max_length=77)
    const auto framed = model.clipTokenizer->frame(clipIds);
    c.pooled = model.clip->encode(backend, framed, 1).pooled;
    const std::vector<std::int32_t> t5Ids =
        model.t5Tokenizer ? model.t5Tokenizer->encode(prompt, model.textTokens())
                          : foldedT5Ids(*model.clipTokenizer, prompt, model.textTokens(), model.t5->config().vocabSize);
    c.text = model.t5->encode(backend, t5Ids, 1);
    c.tokens = model.textTokens();
    c.guidance = guidance;
    return c;
}

RunConfig checkFluxRun(const RunConfig& config, const FluxModel& model) {
    ModelLimits limits;
    limits.downsampleFactor = FluxModel::kPixelUnit;
    limits.inChannels = 3;
    validate(config, limits);
    requireMultiple("width", config.width, "the width");
    requireMultiple("height", config.height, "the height");
    requireMultiple("tile", config.tile, "the tile");
    requireMultiple("overlap", config.overlapPixels(), "the tile overlap");
    (void)model;
    RunConfig canvas = config;
    const int f = FluxModel::kVaeScale;
    canvas.width = config.width / f;
    canvas.height = config.height / f;
    canvas.tile = config.tile / f;
    canvas.overlapPx = config.overlapPixels() / f;
    canvas.overlapFraction.reset();
    return canvas;
}

void checkFluxConditioning(const FluxConditioning& c, const FluxConfig& config) {
    if (c.tokens < 1 || c.text.size() != static_cast<std::size_t>(c.tokens) * config.jointAttentionDim)
        throw ValidationError("prompt", "prompt: the text encoding holds " + std::to_string(c.text.size()) +
                                            " values for " + std::to_string(c.tokens) +
                                            " tokens; the transformer reads " +
                                            std::to_string(config.jointAttentionDim) + " per token (T5's width)");
    if (c.pooled.size() != static_cast<std::size_t>(config.pooledProjectionDim))
        throw ValidationError("prompt", "prompt: the pooled text holds " + std::to_string(c.pooled.size()) +
                                            " values; the transformer reads " +
                                            std::to_string(config.pooledProjectionDim) + " (CLIP-L's pooled output)");
    if (!(c.guidance >= 0.0f && c.guidance <= 100.0f))
        throw ValidationError("guidance", "guidance: " + std::to_string(c.guidance) +
                                              " is outside 0..100 (FLUX.1-dev is trained around 1 to 10; 3.5 is "
                                              "the default)");
}

HostTensor fluxLatentsForDecoder(const VaeConfig& vae, HostTensor latents) {
    const float sf = vae.scalingFactor, shift = vae.shiftFactor.value_or(0.0f);
    for (float& v : latents.data) v = v / sf + shift;
    return latents;
}

HostTensor fluxLatentsFromEncoder(const VaeConfig& vae, HostTensor z) {
    const float sf = vae.scalingFactor, shift = vae.shiftFactor.value_or(0.0f);
    for (float& v : z.data) v = (v - shift) * sf;
    return z;
}

namespace {

// Row c: latent channel c's R, G, B.
constexpr float kFluxLatentRgb[16][3] = {
    {-0.0346f, 0.0244f, 0.0681f},  {0.0034f, 0.0210f, 0.0687f},    {0.0275f, -0.0668f, -0.0433f},
    {-0.0174f, 0.0160f, 0.0617f},  {0.0859f, 0.0721f, 0.0329f},    {0.0004f, 0.0383f, 0.0115f},
    {0.0405f, 0.0861f, 0.0915f},   {-0.0236f, -0.0185f, -0.0259f}, {-0.0245f, 0.0250f, 0.1180f},
    {0.1008f, 0.0755f, -0.0421f},  {-0.0515f, 0.0201f, 0.0011f},   {0.0428f, -0.0012f, -0.0036f},
    {0.0817f, 0.0765f, 0.0749f},   {-0.1264f, -0.0522f, -0.1103f}, {-0.0280f, -0.0881f, -0.0499f},
    {-0.1262f, -0.0982f, -0.0778f}};
constexpr float kFluxLatentRgbBias[3] = {-0.0329f, -0.0718f, -0.0851f};

}  // namespace

ImageTensor fluxLatentPreview(const ImageTensor& latents) {
    const std::size_t plane = static_cast<std::size_t>(latents.height) * latents.width;
    ImageTensor rgb{3, latents.height, latents.width, std::vector<float>(3 * plane)};
    for (std::size_t o = 0; o < 3; ++o)
        std::fill_n(rgb.data.begin() + static_cast<std::ptrdiff_t>(o * plane), plane, kFluxLatentRgbBias[o]);
    const int channels = std::min(latents.channels, 16);
    for (int c = 0; c < channels; ++c)
        for (std::size_t o = 0; o < 3; ++o) {
            const float k = kFluxLatentRgb[c][o];
            const float* src = latents.data.data() + static_cast<std::size_t>(c) * plane;
            for (std::size_t p = 0; p < plane; ++p) rgb.data[o * plane + p] += k * src[p];
        }
    return upsampleNearest(rgb, FluxModel::kVaeScale);
}

}  // namespace tessera
