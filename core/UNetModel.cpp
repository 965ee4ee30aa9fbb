// UNetModel: diffusers UNet2DModel parameters, named and shaped as in shared/spec/unet2d.md §3,
// loaded from safetensors (§4) and checked against the config (§1).
#include "core/UNetModel.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/BoundedInput.h"
#include "core/Sha256.h"
#include "core/UNetGraph.h"

namespace tessera {

namespace fs = std::filesystem;
using Shape = std::vector<std::int64_t>;

namespace {

// Names can come from a file: shown as a short escaped excerpt.
std::string inQuotes(const std::string& s) { return "'" + excerpt(s) + "'"; }

std::uint64_t splitmix64(std::uint64_t& state) {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

std::uint64_t fnv1a(std::string_view text) {
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (const char ch : text) {
        h ^= static_cast<unsigned char>(ch);
        h *= 0x100000001b3ull;
    }
    return h;
}

// Uniform in [-1, 1), from the top 24 bits (exact in float, the same on every platform).
float symmetricUniform(std::uint64_t& state) {
    const auto bits = static_cast<std::uint32_t>(splitmix64(state) >> 40);
    return static_cast<float>(bits) * (2.0f / 16777216.0f) - 1.0f;
}

}  // namespace

// ---------------------------------------------------------------------------

std::vector<std::pair<std::string, Shape>> UNetModel::expectedTensors(const ModelConfig& config) {
    try {
        return buildUNet2DGraph(config).parameterList();
    } catch (const std::invalid_argument& e) {  // a config the graph cannot be built from: invalid input
        throw ModelError(std::string("config.json: ") + e.what());
    }
}

ModelFolderConfig readModelFolderConfig(const std::string& dir) {
    checkModelFolder(dir);
    // A pipeline folder keeps the UNet in unet/ and the scheduler in scheduler/.
    const fs::path root(dir);
    const bool pipeline = !folderEntryPresent(root / "config.json") && folderEntryPresent(root / "unet" / "config.json");
    ModelFolderConfig folder;
    folder.unetDir = (pipeline ? root / "unet" : root).string();
    const fs::path configPath = fs::path(folder.unetDir) / "config.json";
    const std::string shownConfig = shownPath(configPath);
    if (!folderEntryPresent(configPath))
        throw ModelError(shownConfig + ": not found; a model folder holds config.json and "
                                       "diffusion_pytorch_model.safetensors");
    const nlohmann::json configJson = readModelJson(configPath);
    if (configJson.is_object() && configJson.contains("_class_name") && configJson["_class_name"].is_string() &&
        configJson["_class_name"].get<std::string>() != "UNet2DModel")
        throw ModelError(shownConfig + ": _class_name is " + inQuotes(configJson["_class_name"].get<std::string>()) +
                         "; Tessera loads UNet2DModel checkpoints");
    try {
        folder.config = modelConfigFromJson(configJson);
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

    ModelWeights weights = ModelWeights::load(folder.unetDir, expectedTensors(model.config_));
    model.tensors_ = std::move(weights.tensors);
    model.extra_ = std::move(weights.extra);
    model.sha256_ = std::move(weights.sha256);
    return model;
}

UNetModel UNetModel::fromTensors(ModelConfig config, std::map<std::string, HostTensor> tensors,
                                 SchedulerOptions scheduler) {
    UNetModel model;
    model.config_ = std::move(config);
    model.scheduler_ = scheduler;
    ModelWeights weights = ModelWeights::fromTensors(std::move(tensors), expectedTensors(model.config_));
    model.tensors_ = std::move(weights.tensors);
    model.extra_ = std::move(weights.extra);
    model.sha256_ = std::move(weights.sha256);
    return model;
}

UNetModel UNetModel::random(const ModelConfig& config, std::uint64_t seed) {
    UNetModel model;
    model.config_ = config;
    model.origin_ = "random";
    // PyTorch's default init: conv/linear weights and biases U(±1/sqrt(fan_in)) (kaiming_uniform
    // with a = sqrt(5)). GroupNorm would be exactly 1/0; a small perturbation keeps the affine
    // part exercised by backend comparisons. Each tensor has its own stream keyed by its name,
    // so adding a layer does not change the others.
    std::int64_t fanIn = 1;
    for (const auto& [name, shape] : expectedTensors(config)) {
        HostTensor t;
        t.shape = shape;
        t.data.resize(static_cast<std::size_t>(t.numel()));
        std::uint64_t state = seed ^ fnv1a(name);
        (void)splitmix64(state);
        const auto lastDot = name.rfind('.');
        const std::string module = name.substr(0, lastDot);
        const bool isWeight = name.compare(lastDot, std::string::npos, ".weight") == 0;
        const bool isNorm = module.substr(module.rfind('.') + 1).find("norm") != std::string::npos;
        if (isNorm) {
            const float base = isWeight ? 1.0f : 0.0f;
            for (auto& x : t.data) x = base + 0.05f * symmetricUniform(state);
        } else {
            if (isWeight) {  // biases follow their weight in the list and share its fan-in
                fanIn = 1;
                for (std::size_t d = 1; d < shape.size(); ++d) fanIn *= shape[d];
            }
            const float bound = 1.0f / std::sqrt(static_cast<float>(std::max<std::int64_t>(fanIn, 1)));
            for (auto& x : t.data) x = bound * symmetricUniform(state);
        }
        model.tensors_.emplace(name, std::move(t));
    }
    const std::string identity = "tessera-random-weights-v1:" + std::to_string(seed) + ":" + toJson(config).dump();
    model.sha256_ = sha256Hex(identity.data(), identity.size());
    return model;
}

std::string UNetModel::name() const {
    if (dir_.empty()) return origin_;
    fs::path path(dir_);
    if (!path.has_filename()) path = path.parent_path();  // "models/cat/" -> "cat"
    return path.filename().string();
}

const HostTensor& UNetModel::tensor(const std::string& tensorName) const {
    const auto it = tensors_.find(tensorName);
    if (it == tensors_.end()) throw ModelError(name() + ": no tensor " + inQuotes(tensorName));
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

std::string UNetModel::weightsSha256() const { return sha256_; }

}  // namespace tessera
