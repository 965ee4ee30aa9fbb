#include "core/models/sd/SdModel.h"

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/base/BoundedInput.h"
#include "core/base/Sha256.h"
#include "core/formats/ModelWeights.h"
#include "core/formats/SchedulerConfig.h"
#include "core/models/clip/ClipTextGraph.h"
#include "core/models/sd/SingleFileCheckpoint.h"
#include "core/models/sd/UNetCondConfig.h"
#include "core/models/unet/UNetConfig.h"

namespace tessera {

namespace fs = std::filesystem;

namespace {

std::mutex gVocabularyMutex;
std::string gVocabulary;

// SDXL base's size ids: original (h, w), crop (top, left), target (h, w) (diffusers
// pipeline_stable_diffusion_xl.py _get_add_time_ids).
constexpr int kSdxlTimeIds = 6;
// SDXL's VAE latent scale (its vae/config.json; SD 1.x/2.x: 0.18215).
constexpr float kSdxlScalingFactor = 0.13025f;

// The text encoders of the families (their hub configs; OpenCLIP's ViT-H-14 and ViT-bigG-14):
// width, MLP width, layers, heads, activation, projection (CLIPTextModelWithProjection when
// `projected`).
struct ClipShape {
    int hidden, intermediate, layers, heads;
    ClipActivation act;
    int projection;
    bool projected;
};
constexpr ClipShape kClipL{768, 3072, 12, 12, ClipActivation::QuickGelu, 768, false};
constexpr ClipShape kOpenClipH{1024, 4096, 23, 16, ClipActivation::Gelu, 512, false};  // 23 of OpenCLIP's 24
constexpr ClipShape kOpenClipBigG{1280, 5120, 32, 20, ClipActivation::Gelu, 1280, true};

ClipTextConfig clipConfig(const ClipShape& s) {
    ClipTextConfig c;
    c.hiddenSize = s.hidden;
    c.intermediateSize = s.intermediate;
    c.numHiddenLayers = s.layers;
    c.numAttentionHeads = s.heads;
    c.hiddenAct = s.act;
    c.projectionDim = s.projection;
    c.withProjection = s.projected;
    return c;
}

// Peak resident set of this process (VmHWM), MiB; 0 where unknown.
double peakResidentMiB() {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line))
        if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
    return 0;
}

// A component entry of model_index.json: [library, class name] (diffusers
// DiffusionPipeline.save_pretrained), or [null, null] for a component the pipeline leaves out.
bool listed(const nlohmann::json& index, const char* component) {
    return index.contains(component) && index[component].is_array() && index[component].size() == 2 &&
           index[component][1].is_string();
}

// Every key of model_index.json this reader uses has the type diffusers writes, or the file is
// refused naming the key, the value and the type expected: a wrong type is never read as absent.
void checkIndexTypes(const nlohmann::json& index, const std::string& shown) {
    const auto wrongType = [&shown](const std::string& key, const nlohmann::json& value, const char* expected) {
        throw ModelError(shown + ": " + key + " = " + excerptJson(value) + ": expected " + expected);
    };
    if (const auto it = index.find("_class_name"); it != index.end() && !it->is_string())
        wrongType("_class_name", *it, "a string (the pipeline class, e.g. \"StableDiffusionPipeline\")");
    for (const char* key : {"requires_aesthetics_score", "force_zeros_for_empty_prompt"})
        if (const auto it = index.find(key); it != index.end() && !it->is_boolean())
            wrongType(key, *it, "true or false");
    for (const char* component :
         {"unet", "vae", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2", "scheduler"}) {
        const auto it = index.find(component);
        if (it == index.end()) continue;
        const nlohmann::json& entry = *it;
        const bool pair = entry.is_array() && entry.size() == 2;
        const bool named = pair && (entry[0].is_string() || entry[0].is_null()) && entry[1].is_string();
        const bool omitted = pair && entry[0].is_null() && entry[1].is_null();
        if (!named && !omitted)
            wrongType(component, entry,
                      "[library, class name] as diffusers writes it (e.g. [\"diffusers\", \"AutoencoderKL\"]), "
                      "or [null, null]");
    }
}

// What model_index.json says about the pipeline (diffusers DiffusionPipeline.save_pretrained).
struct PipelineIndex {
    bool sdxl = false;
    bool forceZerosForEmptyPrompt = true;
};

// An SDXL refiner folder (StableDiffusionXLImg2ImgPipeline with requires_aesthetics_score, and
// only the second text encoder) is recognised and refused.
void refuseRefiner(const nlohmann::json& index, const std::string& shown) {
    const bool aesthetic = index.contains("requires_aesthetics_score") && index["requires_aesthetics_score"] == true;
    const bool bigGOnly = listed(index, "text_encoder_2") && !listed(index, "text_encoder");
    if (!aesthetic && !bigGOnly) return;
    throw ModelError(shown + ": an SDXL refiner pipeline (" +
                     (aesthetic ? std::string("requires_aesthetics_score is true")
                                : std::string("text_encoder_2 without text_encoder")) +
                     "): refiners condition on the second text encoder alone and an aesthetic score; they are not "
                     "supported yet (SDXL base pipelines are)");
}

// model_index.json's pipeline classes: SD 1.x / 2.x / XL text-to-image and image-to-image
// pipelines; an SDXL refiner is recognised and refused.
PipelineIndex checkPipelineIndex(const nlohmann::json& index, const std::string& shown) {
    if (!index.is_object()) throw ModelError(shown + ": must be a JSON object (a diffusers model_index.json)");
    checkIndexTypes(index, shown);
    const std::string cls = index.value("_class_name", std::string());
    if (!cls.empty() && cls.rfind("StableDiffusion", 0) != 0)
        throw ModelError(shown + ": _class_name " + inQuotes(cls) +
                         " is not a Stable Diffusion pipeline; Tessera runs StableDiffusionPipeline (SD 1.x, 2.x) and "
                         "StableDiffusionXLPipeline (SDXL base) folders, and UNet2DModel folders");
    PipelineIndex p;
    p.sdxl = cls.rfind("StableDiffusionXL", 0) == 0 || (cls.empty() && listed(index, "text_encoder_2"));
    if (p.sdxl) refuseRefiner(index, shown);
    const std::vector<const char*> components =
        p.sdxl ? std::vector<const char*>{"unet", "vae", "text_encoder", "text_encoder_2"}
               : std::vector<const char*>{"unet", "vae", "text_encoder"};
    for (const char* component : components)
        if (!listed(index, component))
            throw ModelError(shown + ": no " + component + " component listed; " +
                             (p.sdxl ? "an SDXL pipeline folder lists unet, vae, text_encoder, text_encoder_2, "
                                       "tokenizer, tokenizer_2 and scheduler"
                                     : "a Stable Diffusion pipeline folder lists unet, vae, text_encoder, tokenizer "
                                       "and scheduler"));
    const std::string encoder = index["text_encoder"][1].get<std::string>();
    if (encoder != "CLIPTextModel")
        throw ModelError(shown + ": text_encoder is " + inQuotes(encoder) +
                         "; Tessera runs CLIPTextModel text encoders");
    if (p.sdxl) {
        const std::string encoder2 = index["text_encoder_2"][1].get<std::string>();
        if (encoder2 != "CLIPTextModelWithProjection")
            throw ModelError(shown + ": text_encoder_2 is " + inQuotes(encoder2) +
                             "; SDXL's second text encoder is a CLIPTextModelWithProjection (its projection gives the "
                             "pooled text)");
        p.forceZerosForEmptyPrompt = index.value("force_zeros_for_empty_prompt", true);
    }
    return p;
}

// Whether a pipeline's component folder is there: a folder (a symbolic link to one is fine:
// diffusers follows them), or nothing. Anything else is refused naming the folder: a
// symbolic-link loop, a link to nothing, a file, a path that cannot be read.
bool componentPresent(const fs::path& dir) {
    std::error_code ec;
    const fs::file_status status = fs::status(dir, ec);
    if (ec.value() == ELOOP)
        throw ModelError(shownPath(dir) +
                         ": is a symbolic-link loop (too many levels of symbolic links); a pipeline's component "
                         "must be a folder or a link to one");
    if (status.type() == fs::file_type::not_found) {
        std::error_code linkEc;
        if (fs::is_symlink(fs::symlink_status(dir, linkEc)))
            throw ModelError(shownPath(dir) + ": is a symbolic link to something that does not exist");
        return false;
    }
    if (ec) throw ModelError(shownPath(dir) + ": cannot be read: " + ec.message());
    if (!fs::is_directory(status))
        throw ModelError(shownPath(dir) + ": is not a folder; a pipeline folder holds each component as a subfolder");
    return true;
}

std::string requireComponent(const fs::path& root, const char* component) {
    const fs::path dir = root / component;
    if (!componentPresent(dir))
        throw ModelError(shownPath(dir) + ": not found; model_index.json lists " + component +
                         " and a pipeline folder holds it as a subfolder");
    return dir.string();
}

// scheduler/scheduler_config.json over SD's defaults, with the repairs StableDiffusionPipeline
// makes at construction (steps_offset forced to 1, clip_sample forced off; diffusers
// pipeline_stable_diffusion.py StableDiffusionPipeline.__init__).
SchedulerOptions readSdScheduler(const fs::path& root, std::string& className) {
    nlohmann::json merged = {{"num_train_timesteps", 1000},
                             {"beta_start", 0.00085},
                             {"beta_end", 0.012},
                             {"beta_schedule", "scaled_linear"},
                             {"timestep_spacing", "leading"},
                             {"steps_offset", 1},
                             {"clip_sample", false},
                             {"set_alpha_to_one", false},
                             {"prediction_type", "epsilon"},
                             {"use_karras_sigmas", false}};
    const fs::path path = root / "scheduler" / "scheduler_config.json";
    if (componentPresent(root / "scheduler") && folderEntryPresent(path)) {
        const nlohmann::json file = readModelJson(path);
        if (!file.is_object()) throw ModelError(shownPath(path) + ": must be a JSON object");
        for (const auto& [key, value] : file.items()) merged[key] = value;
    }
    SchedulerOptions options;
    try {
        options = schedulerOptionsFromJson(merged, &className);
    } catch (const std::exception& e) {
        throw ModelError(shownPath(path) + ": " + withoutPrefix(e.what(), "scheduler_config.json: "));
    }
    options.stepsOffset = 1;
    options.clipSample = false;
    return options;
}

void checkTextContext(const UNetCondModel& unet, const ClipTextModel& encoder, const std::string& shown) {
    const int context = unet.config().crossAttentionDim;
    if (context != encoder.config().hiddenSize)
        throw ModelError(shown + ": the UNet's cross_attention_dim " + std::to_string(context) +
                         " does not match the text encoder's hidden_size " +
                         std::to_string(encoder.config().hiddenSize) + "; the components are from different models");
}

// The empty string when the UNet's add_embedding takes `pooledWidth` pooled values and six size
// ids (SDXL's text-time embedding), else what is wrong.
std::string textTimeMismatch(const UNetCondConfig& unet, int pooledWidth) {
    if (!unet.hasTextTime())
        return "the UNet has no text-time embedding (its addition_embed_type is not \"text_time\")";
    const int expected = pooledWidth + kSdxlTimeIds * unet.additionTimeEmbedDim;
    const int input = unet.projectionClassEmbeddingsInputDim.value_or(0);
    if (input == expected) return {};
    return "the UNet's add_embedding takes " + std::to_string(input) +
           " values (projection_class_embeddings_"
           "input_dim), not the second text encoder's " +
           std::to_string(pooledWidth) + " pooled values and " + std::to_string(kSdxlTimeIds) + " size ids of " +
           std::to_string(unet.additionTimeEmbedDim) + " (" + std::to_string(expected) +
           "); an SDXL refiner takes 5 ids (not supported yet)";
}

}  // namespace

void checkSdxlComponents(const UNetCondConfig& unet, const ClipTextConfig& text, const ClipTextConfig& text2,
                         const std::string& shown) {
    if (!text2.withProjection)
        throw ModelError(shown +
                         ": text_encoder_2's config is a CLIPTextModel; SDXL's second text encoder is a "
                         "CLIPTextModelWithProjection (architectures), whose text_projection gives the pooled text");
    const int context = text.hiddenSize + text2.hiddenSize;
    if (unet.crossAttentionDim != context)
        throw ModelError(shown + ": the UNet's cross_attention_dim " + std::to_string(unet.crossAttentionDim) +
                         " is not the text encoders' hidden sizes " + std::to_string(text.hiddenSize) + " + " +
                         std::to_string(text2.hiddenSize) + " = " + std::to_string(context) +
                         "; the components are from different models");
    const std::string problem = textTimeMismatch(unet, text2.projectionDim);
    if (!problem.empty()) throw ModelError(shown + ": " + problem);
}

namespace {

// The pipeline's tokenizer (tokenizer/ or tokenizer_2/), or the bundled vocabulary without one.
// A folder's is refused unless every id it can give is one of the text encoder's (`textDir`'s
// config.json, read before any weights): a tokenizer of another model is named here, not by the
// first prompt. The bundled vocabulary is not held to it: small test encoders (vocab_size 64)
// load without a tokenizer/ and are run only on their tensors.
std::shared_ptr<const ClipTokenizer> pipelineTokenizer(const fs::path& root, const char* component, SdFamily family,
                                                       int encoder, const std::string& textDir,
                                                       const ClipTextConfig& text) {
    const fs::path dir = root / component;
    if (!componentPresent(dir)) return bundledTokenizer(family, encoder);
    std::shared_ptr<const ClipTokenizer> tokenizer;
    try {
        tokenizer = std::make_shared<const ClipTokenizer>(ClipTokenizer::fromDiffusersFolder(dir));
    } catch (const InputFileError& e) {
        throw ModelError(e.what());
    }
    const std::size_t ids = tokenizer->vocabSize();
    if (ids > static_cast<std::size_t>(text.vocabSize))
        throw ModelError(shownPath(dir) + ": its vocabulary (vocab.json) gives token ids up to " +
                         std::to_string(ids - 1) + ", but the text encoder in " + shownPath(textDir) +
                         " has vocab_size " + std::to_string(text.vocabSize) + " (ids 0 to " +
                         std::to_string(text.vocabSize - 1) +
                         ", its config.json): the tokenizer and the text encoder are from different models");
    return tokenizer;
}

// A component's share of a folder's load: the tensor bytes of its weight files, from their
// headers. 0 where they cannot be read: the component's load, which follows, says why (after
// its config.json, as without progress).
std::uint64_t componentBytes(const std::string& dir, const WeightFileLayout& layout) {
    try {
        return ModelWeights::storedBytes(dir, layout);
    } catch (const ModelError&) {
        return 0;
    }
}

// `load()` as one phase of `meter`, counted whole at its end (tensors the model does not use too).
template <typename Load>
auto inPhase(LoadMeter& meter, std::string phase, std::uint64_t bytes, const Load& load) {
    meter.beginPhase(std::move(phase), bytes);
    auto loaded = load();
    meter.endPhase();
    return loaded;
}

SdModel loadFolder(const std::string& dir, const LoadProgressCallback& progress) {
    const fs::path root(dir);
    const fs::path indexPath = root / "model_index.json";
    const std::string shown = shownPath(indexPath);
    const PipelineIndex index = checkPipelineIndex(readModelJson(indexPath), shown);

    // Every component's folder, the text encoders' configs, the tokenizers and the scheduler
    // before any weights are read: what does not fit together is refused at once.
    const std::string unetDir = requireComponent(root, "unet"), vaeDir = requireComponent(root, "vae");
    const std::string textDir = requireComponent(root, "text_encoder");
    const std::string text2Dir = index.sdxl ? requireComponent(root, "text_encoder_2") : std::string();
    const ClipTextConfig textConfig = readClipTextConfig(textDir);
    const std::optional<ClipTextConfig> text2Config =
        index.sdxl ? std::optional<ClipTextConfig>(readClipTextConfig(text2Dir)) : std::nullopt;
    SdModel model;
    model.family = index.sdxl ? SdFamily::SDXL : familyOfTextEncoder(textConfig);
    model.tokenizer = pipelineTokenizer(root, "tokenizer", model.family, 1, textDir, textConfig);
    if (text2Config) model.tokenizer2 = pipelineTokenizer(root, "tokenizer_2", model.family, 2, text2Dir, *text2Config);
    model.scheduler = readSdScheduler(root, model.schedulerClass);

    const std::uint64_t unetBytes = componentBytes(unetDir, {}), vaeBytes = componentBytes(vaeDir, {});
    const std::uint64_t textBytes = componentBytes(textDir, transformersWeightFiles());
    const std::uint64_t text2Bytes = index.sdxl ? componentBytes(text2Dir, transformersWeightFiles()) : 0;
    LoadMeter meter(progress, unetBytes + vaeBytes + textBytes + text2Bytes);
    model.unet = inPhase(meter, "reading the UNet", unetBytes,
                         [&] { return std::make_shared<const UNetCondModel>(UNetCondModel::load(unetDir, &meter)); });
    model.vae = inPhase(meter, "reading the VAE", vaeBytes,
                        [&] { return std::make_shared<const VaeModel>(VaeModel::load(vaeDir, &meter)); });
    model.textEncoder = inPhase(meter, "reading the text encoder", textBytes, [&] {
        return std::make_shared<const ClipTextModel>(ClipTextModel::load(textDir, &meter));
    });
    if (index.sdxl)
        model.textEncoder2 = inPhase(meter, "reading the second text encoder", text2Bytes, [&] {
            return std::make_shared<const ClipTextModel>(ClipTextModel::load(text2Dir, &meter));
        });
    if (index.sdxl) {
        checkSdxlComponents(model.unet->config(), model.textEncoder->config(), model.textEncoder2->config(), shown);
        model.forceZerosForEmptyPrompt = index.forceZerosForEmptyPrompt;
    } else {
        checkTextContext(*model.unet, *model.textEncoder, shown);
    }
    if (model.unet->config().inChannels != model.vae->config().latentChannels)
        throw ModelError(shown + ": the UNet takes " + std::to_string(model.unet->config().inChannels) +
                         " channels but the VAE's latents have " + std::to_string(model.vae->config().latentChannels));
    Sha256 digest;
    for (const std::string& part :
         {model.unet->weightsSha256(), model.vae->weightsSha256(), std::string(toString(model.family))})
        digest.update(part.data(), part.size());
    model.sha256 = digest.hexDigest();
    meter.finish();
    return model;
}

}  // namespace

namespace {

struct FamilyNames {
    SdFamily family;
    std::string_view name, label;
};
constexpr FamilyNames kFamilyNames[] = {{SdFamily::SD1, "sd1", "Stable Diffusion 1.x"},
                                        {SdFamily::SD2, "sd2", "Stable Diffusion 2.x"},
                                        {SdFamily::SDXL, "sdxl", "Stable Diffusion XL"}};

const FamilyNames& namesOf(SdFamily family) {
    for (const FamilyNames& names : kFamilyNames)
        if (names.family == family) return names;
    return kFamilyNames[0];
}

}  // namespace

std::string_view toString(SdFamily family) { return namesOf(family).name; }

std::string_view familyLabel(SdFamily family) { return namesOf(family).label; }

std::int64_t SdModel::parameterCount() const {
    return unet->parameterCount() + vae->parameterCount() + textEncoder->parameterCount() +
           (textEncoder2 ? textEncoder2->parameterCount() : 0);
}

// SD 1.x's text encoder is OpenAI's CLIP ViT-L (quick_gelu, 768 wide); SD 2.x's OpenCLIP
// ViT-H (gelu, 1024 wide), whose tokenizer pads with "!" (diffusers#4153). Told from the text
// encoder's config alone, so that the tokenizer is known before any weights are read;
// checkTextContext then holds the UNet to the same width.
SdFamily familyOfTextEncoder(const ClipTextConfig& encoder) {
    return encoder.hiddenAct == ClipActivation::QuickGelu && encoder.hiddenSize < 1024 ? SdFamily::SD1 : SdFamily::SD2;
}

void SdModel::changeWeights(const std::string& variant, const std::function<void(const SdWeightsToChange&)>& change) {
    // A component another SdModel shares (a copy of this one) is copied, so that its weights stay.
    if (unet.use_count() > 1) unet = std::make_shared<const UNetCondModel>(*unet);
    if (textEncoder.use_count() > 1) textEncoder = std::make_shared<const ClipTextModel>(*textEncoder);
    if (textEncoder2 && textEncoder2.use_count() > 1)
        textEncoder2 = std::make_shared<const ClipTextModel>(*textEncoder2);
    const SdWeightsToChange weights{&unet->weightsToChange(), &textEncoder->weightsToChange(),
                                    textEncoder2 ? &textEncoder2->weightsToChange() : nullptr};
    // The encoders' row memos are keyed by token ids: rows encoded with other weights must go.
    const auto forgetRows = [this] {
        textEncoder->forgetEncodedRows();
        if (textEncoder2) textEncoder2->forgetEncodedRows();
    };
    try {
        change(weights);
    } catch (...) {
        forgetRows();
        throw;
    }
    forgetRows();
    unet->setWeightsVariant(variant);
    weightsVariant_ = variant;
}

SdModelConfigs randomSdModelConfigs(const std::string& name) {
    const std::string shape = name.rfind(kRandomModelPrefix, 0) == 0 ? name.substr(7) : name;
    if (shape != "sd15" && shape != "sd21" && shape != "sdxl")
        throw ValidationError("model", "model: " + inQuotes(name) +
                                           " is not a random model; random:sd15, random:sd21 and random:sdxl are");
    SdModelConfigs c;
    c.family = shape == "sd15" ? SdFamily::SD1 : shape == "sd21" ? SdFamily::SD2 : SdFamily::SDXL;
    const bool sd2 = c.family == SdFamily::SD2, xl = c.family == SdFamily::SDXL;
    if (xl) {
        c.unet = sdxlBaseUNetConfig();
    } else {  // the defaults are SD 1.x's blocks, widths and depths
        c.unet.sampleSize = sd2 ? 96 : 64;
        c.unet.crossAttentionDim = sd2 ? 1024 : 768;
        c.unet.attentionHeads = sd2 ? std::vector<int>{5, 10, 20, 20} : std::vector<int>{8, 8, 8, 8};
        c.unet.useLinearProjection = sd2;
        c.unet.upcastAttention = sd2;
    }
    c.vae.blockOutChannels = {128, 256, 512, 512};
    c.vae.layersPerBlock = 2;
    c.vae.sampleSize = xl ? 1024 : sd2 ? 768 : 512;
    if (xl) c.vae.scalingFactor = kSdxlScalingFactor;
    c.textEncoder = clipConfig(sd2 ? kOpenClipH : kClipL);
    if (xl) c.textEncoder2 = clipConfig(kOpenClipBigG);
    c.prediction = sd2 ? PredictionType::VPrediction : PredictionType::Epsilon;
    c.schedulerClass = xl ? "EulerDiscreteScheduler" : sd2 ? "DDIMScheduler" : "PNDMScheduler";
    return c;
}

SdModel randomSdModel(const std::string& name, std::uint64_t seed, const LoadProgressCallback& progress) {
    const SdModelConfigs c = randomSdModelConfigs(name);
    const TensorList unetList = UNetCondModel::expectedTensors(c.unet), vaeList = VaeModel::expectedTensors(c.vae);
    const TensorList textList = ClipTextModel::expectedTensors(c.textEncoder);
    const TensorList text2List = c.textEncoder2 ? ClipTextModel::expectedTensors(*c.textEncoder2) : TensorList{};
    LoadMeter meter(progress,
                    float32Bytes(unetList) + float32Bytes(vaeList) + float32Bytes(textList) + float32Bytes(text2List));
    auto text = [&meter](const ClipTextConfig& config, const TensorList& list, std::uint64_t s, const char* phase) {
        return inPhase(meter, phase, float32Bytes(list), [&] {
            return std::make_shared<const ClipTextModel>(
                ClipTextModel::fromTensors(config, randomTensors(list, s, &meter)));
        });
    };
    SdModel model;
    model.family = c.family;
    model.unet = inPhase(meter, "random weights for the UNet", float32Bytes(unetList), [&] {
        return std::make_shared<const UNetCondModel>(UNetCondModel::random(c.unet, seed, &meter));
    });
    model.vae = inPhase(meter, "random weights for the VAE", float32Bytes(vaeList), [&] {
        return std::make_shared<const VaeModel>(VaeModel::fromTensors(c.vae, randomTensors(vaeList, seed + 1, &meter)));
    });
    model.textEncoder = text(c.textEncoder, textList, seed + 2, "random weights for the text encoder");
    model.tokenizer = bundledTokenizer(model.family, 1);
    if (c.textEncoder2) {
        model.textEncoder2 = text(*c.textEncoder2, text2List, seed + 3, "random weights for the second text encoder");
        model.tokenizer2 = bundledTokenizer(model.family, 2);
    }
    meter.finish();
    model.scheduler = sdSchedulerDefaults(c.prediction);
    model.schedulerClass = c.schedulerClass;
    model.name = std::string(kRandomModelPrefix) + name.substr(name.rfind(':') + 1);
    model.sha256 = sha256Hex(model.name.data(), model.name.size());
    return model;
}

SdModel loadSdModel(const std::string& path, const LoadProgressCallback& progress) {
    const auto start = std::chrono::steady_clock::now();
    checkPathText("model", path, "a model folder or checkpoint file");
    SdModel model;
    std::error_code ec;
    if (path.rfind(kRandomModelPrefix, 0) == 0) {
        model = randomSdModel(path, 0, progress);
        model.loadSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        model.hostPeakMiB = peakResidentMiB();
        return model;
    }
    const fs::file_status status = fs::status(path, ec);
    if (ec.value() == ELOOP)
        throw ModelError(shownPath(path) + ": is a symbolic-link loop (too many levels of symbolic links)");
    if (fs::is_directory(status)) {
        model = loadFolder(path, progress);
    } else if (status.type() == fs::file_type::not_found) {
        throw ModelError(shownPath(path) +
                         ": not found; give a Stable Diffusion pipeline folder (with "
                         "model_index.json) or a .safetensors checkpoint");
    } else {
        // Pickles (by name or by their bytes) are refused there, unread.
        SingleFileOptions options;
        options.progress = progress;
        model = loadSingleFileCheckpoint(path, options);
        model.tokenizer = bundledTokenizer(model.family, 1);
        if (model.family == SdFamily::SDXL) model.tokenizer2 = bundledTokenizer(model.family, 2);
    }
    model.source = path;
    std::string name = fs::path(path).filename().string();
    if (name.empty()) name = fs::path(path).parent_path().filename().string();
    if (!fs::is_directory(path, ec)) name = fs::path(path).stem().string();
    model.name = name;
    model.loadSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    model.hostPeakMiB = peakResidentMiB();
    return model;
}

void setBundledClipVocabulary(std::string gzPath) {
    std::lock_guard<std::mutex> lock(gVocabularyMutex);
    gVocabulary = std::move(gzPath);
}

std::string bundledClipVocabulary() {
    std::lock_guard<std::mutex> lock(gVocabularyMutex);
    return gVocabulary;
}

std::shared_ptr<const ClipTokenizer> bundledTokenizer(SdFamily family, int encoder) {
    const std::string path = bundledClipVocabulary();
    if (path.empty())
        throw ModelError(
            "tokenizer: the model has no tokenizer/ folder and the bundled CLIP vocabulary "
            "(resources/clip/bpe_simple_vocab_16e6.txt.gz) was not found");
    ClipTokenizerOptions options;
    if (family == SdFamily::SD2 || (family == SdFamily::SDXL && encoder == 2)) {
        // open_clip's tokenizer (SD 2.x): pads with id 0 ("!") and reads "!" in text as text.
        options.padToken = "!";
        options.splitPadToken = false;
    }
    try {
        return std::make_shared<const ClipTokenizer>(ClipTokenizer::fromMergesGz(path, options));
    } catch (const InputFileError& e) {
        throw ModelError(e.what());
    }
}

SchedulerOptions sdSchedulerDefaults(PredictionType prediction) {
    SchedulerOptions o;
    o.numTrainTimesteps = 1000;
    o.betaStart = 0.00085f;
    o.betaEnd = 0.012f;
    o.betaSchedule = BetaSchedule::ScaledLinear;
    o.timestepSpacing = TimestepSpacing::Leading;
    o.stepsOffset = 1;
    o.clipSample = false;
    o.setAlphaToOne = false;
    o.predictionType = prediction;
    o.karrasSigmas = false;
    return o;
}

}  // namespace tessera
