#include "core/SdModel.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>

#include <unistd.h>

#include "core/BoundedInput.h"
#include "core/ClipTextGraph.h"
#include "core/ModelConfig.h"
#include "core/ModelWeights.h"
#include "core/Sha256.h"
#include "core/SingleFileCheckpoint.h"

namespace tessera {

namespace fs = std::filesystem;

namespace {

std::mutex gVocabularyMutex;
std::string gVocabulary;

std::string quoted(const std::string& s) { return "'" + excerpt(s) + "'"; }

// Peak resident set of this process (VmHWM), MiB; 0 where unknown.
double peakResidentMiB() {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line))
        if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
    return 0;
}

bool hasExtension(const std::string& path, std::initializer_list<const char*> extensions) {
    std::string ext = fs::path(path).extension().string();
    for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (const char* e : extensions)
        if (ext == e) return true;
    return false;
}

// model_index.json's pipeline classes: SD 1.x / 2.x text-to-image and image-to-image pipelines
// share the components; SDXL's are recognised and refused (its own issue).
void checkPipelineIndex(const nlohmann::json& index, const std::string& shown) {
    if (!index.is_object()) throw ModelError(shown + ": must be a JSON object (a diffusers model_index.json)");
    const std::string cls = index.contains("_class_name") && index["_class_name"].is_string()
                                ? index["_class_name"].get<std::string>()
                                : std::string();
    if (cls.find("XL") != std::string::npos)
        throw ModelError(shown + ": " + quoted(cls) +
                         " is an SDXL pipeline; SDXL is not supported yet (Stable Diffusion 1.x and 2.x are)");
    if (!cls.empty() && cls.rfind("StableDiffusion", 0) != 0)
        throw ModelError(shown + ": _class_name " + quoted(cls) +
                         " is not a Stable Diffusion pipeline; Tessera runs StableDiffusionPipeline folders (SD 1.x, "
                         "2.x) and UNet2DModel folders");
    for (const char* component : {"unet", "vae", "text_encoder"}) {
        const bool listed = index.contains(component) && index[component].is_array() && index[component].size() == 2 &&
                            index[component][1].is_string();
        if (!listed)
            throw ModelError(shown + ": no " + component + " component listed; a Stable Diffusion pipeline folder lists "
                             "unet, vae, text_encoder, tokenizer and scheduler");
    }
    const std::string encoder = index["text_encoder"][1].get<std::string>();
    if (encoder != "CLIPTextModel")
        throw ModelError(shown + ": text_encoder is " + quoted(encoder) + "; Tessera runs CLIPTextModel text encoders");
}

std::string requireComponent(const fs::path& root, const char* component) {
    const fs::path dir = root / component;
    if (!fs::is_directory(dir))
        throw ModelError(shownPath(dir) + ": not found; model_index.json lists " + component +
                         " and a pipeline folder holds it as a subfolder");
    return dir.string();
}

// scheduler/scheduler_config.json over SD's defaults, with the repairs StableDiffusionPipeline
// makes at construction (steps_offset forced to 1, clip_sample forced off; sd-pipeline.md §3.1).
SchedulerOptions readSdScheduler(const fs::path& root, std::string& className) {
    nlohmann::json merged = {{"num_train_timesteps", 1000}, {"beta_start", 0.00085}, {"beta_end", 0.012},
                             {"beta_schedule", "scaled_linear"}, {"timestep_spacing", "leading"},
                             {"steps_offset", 1}, {"clip_sample", false}, {"set_alpha_to_one", false},
                             {"prediction_type", "epsilon"}, {"use_karras_sigmas", false}};
    const fs::path path = root / "scheduler" / "scheduler_config.json";
    if (folderEntryPresent(path)) {
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

SdFamily familyOf(const UNetCondModel& unet, const ClipTextModel& encoder, const std::string& shown) {
    const int context = unet.config().crossAttentionDim;
    if (context != encoder.config().hiddenSize)
        throw ModelError(shown + ": the UNet's cross_attention_dim " + std::to_string(context) +
                         " does not match the text encoder's hidden_size " +
                         std::to_string(encoder.config().hiddenSize) + "; the components are from different models");
    // SD 1.x's text encoder is OpenAI's CLIP ViT-L (quick_gelu, 768 wide); SD 2.x's OpenCLIP
    // ViT-H (gelu, 1024 wide), whose tokenizer pads with "!" (sd-pipeline.md §1.9).
    return encoder.config().hiddenAct == ClipActivation::QuickGelu && context < 1024 ? SdFamily::SD1 : SdFamily::SD2;
}

SdModel loadFolder(const std::string& dir) {
    const fs::path root(dir);
    const fs::path indexPath = root / "model_index.json";
    const std::string shown = shownPath(indexPath);
    checkPipelineIndex(readModelJson(indexPath), shown);

    SdModel model;
    model.unet = std::make_shared<const UNetCondModel>(UNetCondModel::load(requireComponent(root, "unet")));
    model.vae = std::make_shared<const VaeModel>(VaeModel::load(requireComponent(root, "vae")));
    model.textEncoder =
        std::make_shared<const ClipTextModel>(ClipTextModel::load(requireComponent(root, "text_encoder")));
    model.family = familyOf(*model.unet, *model.textEncoder, shown);
    if (model.unet->config().inChannels != model.vae->config().latentChannels)
        throw ModelError(shown + ": the UNet takes " + std::to_string(model.unet->config().inChannels) +
                         " channels but the VAE's latents have " + std::to_string(model.vae->config().latentChannels));
    const fs::path tokenizerDir = root / "tokenizer";
    if (fs::is_directory(tokenizerDir)) {
        try {
            model.tokenizer = std::make_shared<const ClipTokenizer>(ClipTokenizer::fromDiffusersFolder(tokenizerDir));
        } catch (const InputFileError& e) {
            throw ModelError(e.what());
        }
    } else {
        model.tokenizer = bundledTokenizer(model.family);
    }
    model.scheduler = readSdScheduler(root, model.schedulerClass);
    Sha256 digest;
    for (const std::string& part :
         {model.unet->weightsSha256(), model.vae->weightsSha256(), std::string(toString(model.family))})
        digest.update(part.data(), part.size());
    model.sha256 = digest.hexDigest();
    return model;
}

}  // namespace

std::string_view toString(SdFamily family) {
    switch (family) {
    case SdFamily::SD1: return "sd1";
    case SdFamily::SD2: return "sd2";
    case SdFamily::SDXL: return "sdxl";
    }
    return "sd1";
}

std::int64_t SdModel::parameterCount() const {
    return unet->parameterCount() + vae->parameterCount() + textEncoder->parameterCount();
}

SdModel randomSdModel(const std::string& name, std::uint64_t seed) {
    const std::string shape = name.rfind(kRandomModelPrefix, 0) == 0 ? name.substr(7) : name;
    if (shape != "sd15" && shape != "sd21")
        throw ValidationError("model", "model: " + quoted(name) + " is not a random model; random:sd15 and random:sd21 are");
    const bool sd2 = shape == "sd21";
    UNetCondConfig unet;   // the defaults are SD 1.x's blocks, widths and depths
    unet.sampleSize = sd2 ? 96 : 64;
    unet.crossAttentionDim = sd2 ? 1024 : 768;
    unet.attentionHeads = sd2 ? std::vector<int>{5, 10, 20, 20} : std::vector<int>{8, 8, 8, 8};
    unet.useLinearProjection = sd2;
    unet.upcastAttention = sd2;
    VaeConfig vae;
    vae.blockOutChannels = {128, 256, 512, 512};
    vae.layersPerBlock = 2;
    vae.sampleSize = sd2 ? 768 : 512;
    ClipTextConfig text;
    text.hiddenSize = sd2 ? 1024 : 768;
    text.intermediateSize = sd2 ? 4096 : 3072;
    text.projectionDim = sd2 ? 512 : 768;
    text.numHiddenLayers = sd2 ? 23 : 12;
    text.numAttentionHeads = sd2 ? 16 : 12;
    text.hiddenAct = sd2 ? ClipActivation::Gelu : ClipActivation::QuickGelu;

    SdModel model;
    model.family = sd2 ? SdFamily::SD2 : SdFamily::SD1;
    model.unet = std::make_shared<const UNetCondModel>(UNetCondModel::random(unet, seed));
    model.vae = std::make_shared<const VaeModel>(
        VaeModel::fromTensors(vae, randomTensors(VaeModel::expectedTensors(vae), seed + 1)));
    model.textEncoder = std::make_shared<const ClipTextModel>(
        ClipTextModel::fromTensors(text, randomTensors(buildClipTextGraph(text, text.numHiddenLayers).parameterList(), seed + 2)));
    model.tokenizer = bundledTokenizer(model.family);
    model.scheduler = sdSchedulerDefaults(sd2 ? PredictionType::VPrediction : PredictionType::Epsilon);
    model.schedulerClass = sd2 ? "DDIMScheduler" : "PNDMScheduler";
    model.name = std::string(kRandomModelPrefix) + shape;
    model.sha256 = sha256Hex(model.name.data(), model.name.size());
    return model;
}

bool isSdModelPath(const std::string& path) {
    if (path.rfind(kRandomModelPrefix, 0) == 0) return true;
    if (path.empty() || path.size() > input_limits::kPathChars) return false;
    std::error_code ec;
    if (fs::is_directory(path, ec)) return fs::exists(fs::path(path) / "model_index.json", ec);
    return hasExtension(path, {".safetensors", ".ckpt", ".pt", ".pth", ".bin"});
}

SdModel loadSdModel(const std::string& path) {
    const auto start = std::chrono::steady_clock::now();
    checkPathText("model", path, "a model folder or checkpoint file");
    SdModel model;
    std::error_code ec;
    if (path.rfind(kRandomModelPrefix, 0) == 0) {
        model = randomSdModel(path);
        model.loadSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        model.hostPeakMiB = peakResidentMiB();
        return model;
    }
    if (fs::is_directory(path, ec)) {
        model = loadFolder(path);
    } else if (!fs::exists(path, ec)) {
        throw ModelError(shownPath(path) + ": not found; give a Stable Diffusion pipeline folder (with "
                         "model_index.json) or a .safetensors checkpoint");
    } else {
        // Pickles (by name or by their bytes) are refused there, unread.
        model = loadSingleFileCheckpoint(path);
        model.tokenizer = bundledTokenizer(model.family);
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

std::shared_ptr<const ClipTokenizer> bundledTokenizer(SdFamily family) {
    const std::string path = bundledClipVocabulary();
    if (path.empty())
        throw ModelError("tokenizer: the model has no tokenizer/ folder and the bundled CLIP vocabulary "
                         "(resources/clip/bpe_simple_vocab_16e6.txt.gz) was not found");
    ClipTokenizerOptions options;
    if (family != SdFamily::SD1) {
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
