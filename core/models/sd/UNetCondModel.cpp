#include "core/models/sd/UNetCondModel.h"

#include <filesystem>
#include <stdexcept>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/base/BoundedInput.h"
#include "core/base/Sha256.h"
#include "core/models/sd/UNetCondGraph.h"

namespace tessera {

namespace {

constexpr const char* kClassName = "UNet2DConditionModel";
// The config readers prefix messages with the bare file name; the loader names the file.
constexpr std::string_view kConfigPrefix = "config.json: ";

}  // namespace

std::vector<std::pair<std::string, std::vector<std::int64_t>>> UNetCondModel::expectedTensors(const UNetCondConfig& c) {
    try {
        return buildUNet2DConditionGraph(c).parameterList();
    } catch (const std::invalid_argument& e) {  // a config the graph cannot be built from: invalid input
        throw ModelError(std::string("config.json: ") + e.what());
    }
}

UNetCondModel UNetCondModel::load(const std::string& dir, LoadMeter* meter) {
    UNetCondModel model;
    model.dir_ = componentFolder(dir, "unet", "a model folder");
    const std::string configPath = (std::filesystem::path(model.dir_) / "config.json").string();
    const std::string shown = shownPath(configPath);
    const nlohmann::json json = readModelJson(configPath);
    if (json.is_object() && json.contains("_class_name") &&
        !(json["_class_name"].is_string() && json["_class_name"].get<std::string>() == kClassName))
        throw ModelError(shown + ": _class_name is " + excerptJson(json["_class_name"]) + "; expected \"" + kClassName +
                         "\" (a Stable Diffusion 1.x / 2.x / XL unet folder)");
    try {
        model.config_ = unetCondConfigFromJson(json);
    } catch (const std::runtime_error& e) {
        throw ModelError(shown + ": " + withoutPrefix(e.what(), kConfigPrefix));
    }
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> expected;
    try {
        expected = expectedTensors(model.config_);
    } catch (const ModelError& e) {
        throw ModelError(shown + ": " + withoutPrefix(e.what(), kConfigPrefix));
    }
    model.weights_ = ModelWeights::load(model.dir_, expected, LegacyAttentionNames::NotAccepted, meter);
    return model;
}

UNetCondModel UNetCondModel::fromTensors(UNetCondConfig config, std::map<std::string, HostTensor> tensors,
                                         WeightsDigest digest) {
    UNetCondModel model;
    model.config_ = std::move(config);
    model.weights_ = ModelWeights::fromTensors(std::move(tensors), expectedTensors(model.config_),
                                               LegacyAttentionNames::NotAccepted, digest);
    return model;
}

UNetCondModel UNetCondModel::random(const UNetCondConfig& config, std::uint64_t seed, LoadMeter* meter) {
    UNetCondModel model;
    model.config_ = config;
    const auto expected = expectedTensors(config);
    model.weights_.tensors = randomTensors(expected, seed, meter);
    // The seed and the tensor list determine the values.
    Sha256 hash;
    const std::string identity = "tessera-random-unetcond-v1:" + std::to_string(seed);
    hash.update(identity.data(), identity.size());
    for (const auto& [name, shape] : expected) {
        hash.update(name.data(), name.size() + 1);  // with its terminating NUL
        hash.update(shape.data(), shape.size() * sizeof(std::int64_t));
    }
    model.weights_.sha256 = hash.hexDigest();
    return model;
}

void UNetCondModel::setWeightsVariant(const std::string& variant) const {
    if (variant.empty()) {
        changedSha256_.clear();
        return;
    }
    const std::string identity = weights_.sha256 + "+" + variant;
    changedSha256_ = sha256Hex(identity.data(), identity.size());
}

std::int64_t UNetCondModel::parameterCount() const { return buildUNet2DConditionGraph(config_).parameterCount(); }

}  // namespace tessera
