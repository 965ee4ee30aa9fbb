// UNetModel: diffusers UNet2DModel parameters, named and shaped as the module attributes of
// models/unets/unet_2d.py name them, loaded from safetensors and checked against the config.
#include "core/models/unet/UNetModel.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/base/BoundedInput.h"
#include "core/base/Sha256.h"
#include "core/formats/PipelinePart.h"
#include "core/formats/SchedulerConfig.h"
#include "core/models/unet/UNetGraph.h"

namespace tessera {

namespace fs = std::filesystem;
using Shape = std::vector<std::int64_t>;

// ---------------------------------------------------------------------------

std::vector<std::pair<std::string, Shape>> UNetModel::expectedTensors(const UNetConfig& config) {
    try {
        return buildUNet2DGraph(config).parameterList();
    } catch (const std::invalid_argument& e) {  // a config the graph cannot be built from: invalid input
        throw ModelError(std::string("config.json: ") + e.what());
    }
}

ModelFolderConfig readModelFolderConfig(const std::string& dir) {
    // A Stable Diffusion pipeline's unet/, vae/, ... folder is refused saying what to give instead.
    checkModelFolder(dir);
    if (const std::optional<PipelinePart> part = pipelinePartOf(dir))
        throw ModelError(describePipelinePart(dir, *part));
    // A pipeline folder keeps the UNet in unet/ and the scheduler in scheduler/.
    ModelFolderConfig folder;
    folder.unetDir = componentFolder(dir, "unet", "a model folder");
    const fs::path root(dir);
    const bool pipeline = fs::path(folder.unetDir) != root;
    const fs::path configPath = fs::path(folder.unetDir) / "config.json";
    const std::string shownConfig = shownPath(configPath);
    const nlohmann::json configJson = readModelJson(configPath);
    if (configJson.is_object() && configJson.contains("_class_name") && configJson["_class_name"].is_string() &&
        configJson["_class_name"].get<std::string>() != "UNet2DModel")
        throw ModelError(shownConfig + ": _class_name is " + inQuotes(configJson["_class_name"].get<std::string>()) +
                         "; a model folder holds a UNet2DModel (Stable Diffusion models are pipeline folders "
                         "with model_index.json, or single-file .safetensors checkpoints)");
    try {
        folder.config = unetConfigFromJson(configJson);
    } catch (const std::exception& e) {
        throw ModelError(shownConfig + ": " + withoutPrefix(e.what(), "config.json: "));
    }

    const fs::path schedulerPath = (pipeline ? root / "scheduler" : root) / "scheduler_config.json";
    if (folderEntryPresent(schedulerPath)) {
        const nlohmann::json schedulerJson = readModelJson(schedulerPath);
        try {
            folder.scheduler = schedulerOptionsFromJson(schedulerJson, &folder.schedulerClass);
        } catch (const std::exception& e) {
            throw ModelError(shownPath(schedulerPath) + ": " + withoutPrefix(e.what(), "scheduler_config.json: "));
        }
    }
    return folder;
}

UNetModel UNetModel::load(const std::string& dir) {
    ModelFolderConfig folder = readModelFolderConfig(dir);
    UNetModel model;
    model.dir_ = dir;
    model.config_ = std::move(folder.config);
    model.scheduler_ = folder.scheduler;
    model.schedulerClass_ = std::move(folder.schedulerClass);

    model.weights_ = ModelWeights::load(folder.unetDir, expectedTensors(model.config_), LegacyAttentionNames::Accepted);
    return model;
}

UNetModel UNetModel::fromTensors(UNetConfig config, std::map<std::string, HostTensor> tensors,
                                 SchedulerOptions scheduler) {
    UNetModel model;
    model.config_ = std::move(config);
    model.scheduler_ = scheduler;
    model.weights_ =
        ModelWeights::fromTensors(std::move(tensors), expectedTensors(model.config_), LegacyAttentionNames::Accepted);
    return model;
}

UNetModel UNetModel::random(const UNetConfig& config, std::uint64_t seed) {
    UNetModel model;
    model.config_ = config;
    model.origin_ = "random";
    model.weights_.tensors = randomTensors(expectedTensors(config), seed);
    const std::string identity = "tessera-random-weights-v1:" + std::to_string(seed) + ":" + toJson(config).dump();
    model.weights_.sha256 = sha256Hex(identity.data(), identity.size());
    return model;
}

std::string UNetModel::name() const {
    if (dir_.empty()) return origin_;
    fs::path path(dir_);
    if (!path.has_filename()) path = path.parent_path();  // "models/cat/" -> "cat"
    return path.filename().string();
}

const HostTensor& UNetModel::tensor(const std::string& tensorName) const {
    const auto it = weights_.tensors.find(tensorName);
    if (it == weights_.tensors.end()) throw ModelError(name() + ": no tensor " + inQuotes(tensorName));
    return it->second;
}

std::int64_t UNetModel::parameterCount() const { return buildUNet2DGraph(config_).parameterCount(); }

double UNetModel::flopsPerEvaluation(int h, int w) const {
    // Pixel counts are int64: sides up to 2^20 keep every product of them far from overflow.
    constexpr int kMaxSide = 1 << 20;
    if (h <= 0 || w <= 0 || h > kMaxSide || w > kMaxSide)
        throw ValidationError("tile", "tile: " + std::to_string(h) + " x " + std::to_string(w) +
                                          " px cannot be counted; each side must be from 1 to " +
                                          std::to_string(kMaxSide));
    return buildUNet2DGraph(config_).flops(h, w);
}

std::string UNetModel::weightsSha256() const { return weights_.sha256; }

}  // namespace tessera
