#include "core/models/controlnet/ControlNetModel.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <span>
#include <stdexcept>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/base/BoundedInput.h"
#include "core/base/Sha256.h"
#include "core/models/controlnet/ControlNetGraph.h"
#include "core/models/sd/SingleFilePlan.h"

namespace tessera {

namespace fs = std::filesystem;

namespace {

constexpr const char* kClassName = "ControlNetModel";
constexpr std::string_view kConfigPrefix = "config.json: ";

// The config.json of a ControlNet folder (or a config folder): _class_name checked, then parsed.
ControlNetConfig readConfig(const fs::path& configPath) {
    const std::string shown = shownPath(configPath);
    const nlohmann::json json = readModelJson(configPath);
    if (json.is_object() && json.contains("_class_name") &&
        !(json["_class_name"].is_string() && json["_class_name"].get<std::string>() == kClassName)) {
        const nlohmann::json& name = json["_class_name"];
        const bool union_ = name.is_string() && name.get<std::string>().starts_with("ControlNetUnion");
        throw ModelError(shown + ": _class_name is " + excerptJson(name) + "; expected \"" + kClassName + "\"" +
                         (union_ ? " (ControlNet++ union models are not supported)"
                                 : " (a ControlNet for Stable Diffusion 1.x, 2.x or XL)"));
    }
    try {
        return controlNetConfigFromJson(json);
    } catch (const std::runtime_error& e) {
        throw ModelError(shown + ": " + withoutPrefix(e.what(), kConfigPrefix));
    }
}

// The prefixes (after the layout's) whose unused tensors mean the configuration does not describe
// the file: every module of a ControlNet in that layout.
std::vector<std::string> structuralPrefixes(const ControlNetFileLayout& layout) {
    static const std::vector<const char*> ldm{"time_embed.",       "label_emb.",  "input_blocks.",
                                              "input_hint_block.", "zero_convs.", "middle_block."};
    static const std::vector<const char*> diffusers{
        "conv_in.",     "time_embedding.",         "add_embedding.", "controlnet_cond_embedding.",
        "down_blocks.", "controlnet_down_blocks.", "mid_block.",     "controlnet_mid_block."};
    std::vector<std::string> prefixes;
    for (const char* p : layout.names == ControlNetNames::Ldm ? ldm : diffusers) prefixes.push_back(layout.prefix + p);
    return prefixes;
}

std::string fileSha256(const TensorFile& file) {
    Sha256 hash;
    try {
        file.readFileInChunks([&hash](std::span<const std::byte> chunk) {
            hash.update(chunk.data(), chunk.size());
            return true;
        });
    } catch (const TensorFileError& e) {
        throw ModelError(e.what());
    }
    return hash.hexDigest();
}

}  // namespace

TensorList ControlNetModel::expectedTensors(const ControlNetConfig& config) {
    try {
        TensorList list = buildControlNetHintGraph(config).parameterList();
        for (auto& entry : buildControlNetGraph(config).parameterList()) list.push_back(std::move(entry));
        return list;
    } catch (const std::invalid_argument& e) {  // a config the graphs cannot be built from: invalid input
        throw ModelError(std::string(kConfigPrefix) + e.what());
    }
}

ControlNetModel ControlNetModel::load(const std::string& path, const ControlNetLoadOptions& options, LoadMeter* meter) {
    std::error_code ec;
    return fs::is_directory(path, ec) ? loadFolder(path, meter) : loadSingleFile(path, options, meter);
}

ControlNetModel ControlNetModel::loadFolder(const std::string& path, LoadMeter* meter) {
    ControlNetModel model;
    const std::string dir = componentFolder(path, "controlnet", "a ControlNet folder");
    const fs::path configPath = fs::path(dir) / "config.json";
    model.config_ = readConfig(configPath);
    TensorList expected;
    try {
        expected = expectedTensors(model.config_);
    } catch (const ModelError& e) {
        throw ModelError(shownPath(configPath) + ": " + withoutPrefix(e.what(), kConfigPrefix));
    }
    model.weights_ = ModelWeights::load(dir, expected, LegacyAttentionNames::NotAccepted, meter);
    model.source_.path = dir;
    model.source_.configSource = "config.json";
    model.source_.family = controlNetFamily(model.config_, &model.source_.familyReason);
    model.orderHintChannels();
    return model;
}

ControlNetModel ControlNetModel::loadSingleFile(const std::string& path, const ControlNetLoadOptions& options,
                                                LoadMeter* meter) {
    const std::string where = shownPath(path);
    std::optional<TensorFile> file;
    try {
        file.emplace(path);
    } catch (const TensorFileError& e) {
        throw ModelError(e.what());
    }
    const TensorShapes shapes = tensorShapes(*file);
    ControlNetModel model;
    ControlNetSource& source = model.source_;
    source.path = path;
    source.singleFile = true;
    source.reader = file->description();
    source.layout = detectControlNetLayout(shapes, where);
    if (options.configFolder.empty()) {
        model.config_ = controlNetConfigFromShapes(shapes, source.layout, where, &source.family, &source.familyReason);
        source.configSource = "sizes from the tensors, the rest as the " + std::string(familyLabel(source.family)) +
                              " UNet's configuration";
    } else {
        checkModelFolder(options.configFolder);
        model.config_ = readConfig(fs::path(options.configFolder) / "config.json");
        source.family = controlNetFamily(model.config_, &source.familyReason);
        source.configSource = "the config folder " + shownPath(options.configFolder);
    }
    TensorList expected;
    try {
        expected = expectedTensors(model.config_);
    } catch (const ModelError& e) {
        throw ModelError(where + ": " + withoutPrefix(e.what(), kConfigPrefix));
    }
    single_file::SingleFilePlan plan{"ControlNet", {}, structuralPrefixes(source.layout), {}};
    for (auto& [name, shape] : expected) {
        std::string stored = source.layout.storedName(name, model.config_);
        if (stored.empty()) throw std::logic_error("no LDM name for the ControlNet's " + name);
        plan.bindings.push_back({name, shape, std::move(stored)});
    }
    (void)single_file::checkPlan(*file, plan, where);
    source.ignored = single_file::unusedTensors(*file, {plan}, where);
    LoadMeter silent({}, single_file::planBytes(*file, plan));
    std::map<std::string, HostTensor> tensors =
        single_file::readPlan(*file, plan, where, meter != nullptr ? *meter : silent);
    model.weights_ =
        ModelWeights::fromTensors(std::move(tensors), expected, LegacyAttentionNames::NotAccepted, WeightsDigest::Skip);
    if (options.digest == FileDigest::Compute) model.weights_.sha256 = fileSha256(*file);
    model.orderHintChannels();
    return model;
}

ControlNetModel ControlNetModel::fromTensors(ControlNetConfig config, std::map<std::string, HostTensor> tensors,
                                             WeightsDigest digest) {
    ControlNetModel model;
    model.config_ = std::move(config);
    model.weights_ = ModelWeights::fromTensors(std::move(tensors), expectedTensors(model.config_),
                                               LegacyAttentionNames::NotAccepted, digest);
    model.source_.configSource = "in memory";
    model.source_.family = controlNetFamily(model.config_, &model.source_.familyReason);
    model.orderHintChannels();
    return model;
}

ControlNetModel ControlNetModel::random(const ControlNetConfig& config, std::uint64_t seed) {
    ControlNetModel model;
    model.config_ = config;
    const TensorList expected = expectedTensors(config);
    model.weights_.tensors = randomTensors(expected, seed);
    // The seed and the tensor list determine the values.
    Sha256 hash;
    const std::string identity = "tessera-random-controlnet-v1:" + std::to_string(seed);
    hash.update(identity.data(), identity.size());
    for (const auto& [name, shape] : expected) {
        hash.update(name.data(), name.size() + 1);  // with its terminating NUL
        hash.update(shape.data(), shape.size() * sizeof(std::int64_t));
    }
    model.weights_.sha256 = hash.hexDigest();
    model.source_.configSource = "random weights";
    model.source_.family = controlNetFamily(config, &model.source_.familyReason);
    return model;
}

void ControlNetModel::orderHintChannels() {
    if (!config_.bgr) return;
    HostTensor& w = weights_.tensors.at("controlnet_cond_embedding.conv_in.weight");  // [out, in, kh, kw]
    const auto out = static_cast<std::size_t>(w.shape.at(0)), in = static_cast<std::size_t>(w.shape.at(1));
    const std::size_t kernel = static_cast<std::size_t>(w.shape.at(2) * w.shape.at(3));
    for (std::size_t o = 0; o < out; ++o)
        for (std::size_t i = 0; i < in / 2; ++i) {
            float* a = w.data.data() + (o * in + i) * kernel;
            float* b = w.data.data() + (o * in + (in - 1 - i)) * kernel;
            std::swap_ranges(a, a + kernel, b);
        }
}

std::int64_t ControlNetModel::parameterCount() const {
    std::int64_t n = 0;
    for (const auto& [name, shape] : expectedTensors(config_)) {
        std::int64_t numel = 1;
        for (const std::int64_t d : shape) numel *= d;
        n += numel;
    }
    return n;
}

}  // namespace tessera
