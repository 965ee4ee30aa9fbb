// UNetModel: diffusers UNet2DModel parameters, named and shaped as in shared/spec/unet2d.md §3,
// loaded from safetensors (§4) and checked against the config (§1).
#include "core/UNetModel.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "core/Safetensors.h"
#include "core/Sha256.h"
#include "core/UNetGraph.h"

namespace tessera {

namespace fs = std::filesystem;
using Shape = std::vector<std::int64_t>;

namespace {

// ---------------------------------------------------------------------------
// Names

// diffusers <= 0.15 attention parameter names (spec §3); empty when `canonical` has none.
std::string legacyName(const std::string& canonical) {
    if (canonical.find("attentions.") == std::string::npos) return {};
    static constexpr std::pair<std::string_view, std::string_view> kRenames[] = {
        {".to_q.", ".query."}, {".to_k.", ".key."}, {".to_v.", ".value."}, {".to_out.0.", ".proj_attn."}};
    for (const auto& [now, old] : kRenames) {
        const auto at = canonical.rfind(now);
        if (at != std::string::npos) return canonical.substr(0, at) + std::string(old) + canonical.substr(at + now.size());
    }
    return {};
}

std::string inQuotes(const std::string& s) { return "'" + s + "'"; }

// ---------------------------------------------------------------------------
// Where tensors come from: safetensors files or an in-memory map.

class TensorSource {
public:
    virtual ~TensorSource() = default;
    virtual std::vector<std::string> names() const = 0;
    virtual const Shape* shapeOf(const std::string& name) const = 0;  // nullptr when absent
    virtual std::vector<float> take(const std::string& name) = 0;     // throws ModelError
    virtual std::string where(const std::string& name) const = 0;     // file for messages
};

class FileSource final : public TensorSource {
public:
    // `indexPath` names the sharded index in "missing tensor" messages; empty for one file.
    FileSource(std::vector<SafetensorsFile> files, std::string indexPath)
        : files_(std::move(files)), indexPath_(std::move(indexPath)) {
        for (std::size_t f = 0; f < files_.size(); ++f) {
            for (const auto& info : files_[f].tensors()) {
                const auto [it, inserted] = entries_.emplace(info.name, Entry{f, &info});
                if (!inserted)
                    throw ModelError(files_[f].path() + ": tensor " + inQuotes(info.name) + " is also in " +
                                     files_[it->second.file].path());
            }
        }
    }
    std::vector<std::string> names() const override {
        std::vector<std::string> list;
        for (const auto& [name, entry] : entries_) list.push_back(name);
        return list;
    }
    const Shape* shapeOf(const std::string& name) const override {
        const auto it = entries_.find(name);
        return it == entries_.end() ? nullptr : &it->second.info->shape;
    }
    std::vector<float> take(const std::string& name) override {
        const Entry& e = entries_.at(name);
        try {
            return files_[e.file].readFloat32(*e.info);
        } catch (const SafetensorsError& error) {
            throw ModelError(error.what());
        }
    }
    std::string where(const std::string& name) const override {
        const auto it = entries_.find(name);
        if (it != entries_.end()) return files_[it->second.file].path();
        return indexPath_.empty() ? files_.front().path() : indexPath_;
    }
    const std::vector<SafetensorsFile>& files() const { return files_; }

private:
    struct Entry {
        std::size_t file;
        const SafetensorsTensorInfo* info;
    };
    std::vector<SafetensorsFile> files_;
    std::string indexPath_;
    std::map<std::string, Entry> entries_;
};

class MemorySource final : public TensorSource {
public:
    explicit MemorySource(std::map<std::string, HostTensor> tensors) : tensors_(std::move(tensors)) {}
    std::vector<std::string> names() const override {
        std::vector<std::string> list;
        for (const auto& [name, t] : tensors_) list.push_back(name);
        return list;
    }
    const Shape* shapeOf(const std::string& name) const override {
        const auto it = tensors_.find(name);
        return it == tensors_.end() ? nullptr : &it->second.shape;
    }
    std::vector<float> take(const std::string& name) override {
        HostTensor& t = tensors_.at(name);
        if (static_cast<std::int64_t>(t.data.size()) != t.numel())
            throw ModelError("in-memory tensor " + inQuotes(name) + ": " + std::to_string(t.data.size()) +
                             " values for shape " + shapeToString(t.shape));
        return std::move(t.data);
    }
    std::string where(const std::string&) const override { return "in-memory model"; }

private:
    std::map<std::string, HostTensor> tensors_;
};

struct Bound {
    std::map<std::string, HostTensor> tensors;
    std::vector<std::string> extra;
};

// Finds every tensor the config needs (canonical or legacy name), checks all shapes before
// reading any data, then reads, upcasts and checks the values for NaN/Inf.
Bound bindTensors(const ModelConfig& config, TensorSource& source) {
    const auto expected = UNetModel::expectedTensors(config);
    std::vector<std::string> storedNames;
    storedNames.reserve(expected.size());
    for (const auto& [name, shape] : expected) {
        std::string stored = name;
        const Shape* found = source.shapeOf(name);
        const std::string legacy = legacyName(name);
        if (found == nullptr && !legacy.empty()) {
            found = source.shapeOf(legacy);
            stored = legacy;
        }
        if (found == nullptr)
            throw ModelError(source.where(name) + ": missing tensor " + inQuotes(name) +
                             (legacy.empty() ? std::string() : " (or legacy " + inQuotes(legacy) + ")") +
                             ", expected shape " + shapeToString(shape));
        if (*found != shape)
            throw ModelError(source.where(stored) + ": tensor " + inQuotes(name) +
                             (stored != name ? " (stored as " + inQuotes(stored) + ")" : std::string()) +
                             ": expected " + shapeToString(shape) + ", found " + shapeToString(*found));
        storedNames.push_back(std::move(stored));
    }

    Bound bound;
    const std::set<std::string> used(storedNames.begin(), storedNames.end());
    for (auto& name : source.names())
        if (used.count(name) == 0) bound.extra.push_back(name);

    for (std::size_t i = 0; i < expected.size(); ++i) {
        const auto& [name, shape] = expected[i];
        const std::string& stored = storedNames[i];
        const std::string where = source.where(stored);
        HostTensor t;
        t.shape = shape;
        t.data = source.take(stored);
        const auto bad = std::find_if(t.data.begin(), t.data.end(), [](float x) { return !std::isfinite(x); });
        if (bad != t.data.end())
            throw ModelError(where + ": tensor " + inQuotes(name) + " holds a non-finite value (" +
                             (std::isnan(*bad) ? "NaN" : "Inf") + ") at element " +
                             std::to_string(bad - t.data.begin()));
        bound.tensors.emplace(name, std::move(t));
    }
    return bound;
}

std::string readTextFile(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw ModelError(path.string() + ": cannot read");
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

nlohmann::json readJsonFile(const fs::path& path) {
    try {
        return nlohmann::json::parse(readTextFile(path));
    } catch (const nlohmann::json::exception& e) {
        throw ModelError(path.string() + ": not valid JSON: " + e.what());
    }
}

// The config readers prefix messages with the bare file name; the loader has the full path.
std::string withoutPrefix(const std::string& message, std::string_view prefix) {
    return message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message;
}

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

std::int64_t HostTensor::numel() const {
    std::int64_t n = 1;
    for (const auto d : shape) n *= d;
    return n;
}

std::vector<std::pair<std::string, Shape>> UNetModel::expectedTensors(const ModelConfig& config) {
    try {
        return buildUNet2DGraph(config).parameterList();
    } catch (const std::invalid_argument& e) {  // a config the graph cannot be built from: invalid input
        throw ModelError(std::string("config.json: ") + e.what());
    }
}

UNetModel UNetModel::load(const std::string& dir) {
    const fs::path root(dir);
    std::error_code ec;
    if (!fs::is_directory(root, ec)) throw ModelError(dir + ": not a model folder (no such directory)");
    // A pipeline folder keeps the UNet in unet/ and the scheduler in scheduler/.
    fs::path unetDir = root;
    fs::path schedulerDir = root;
    if (!fs::exists(root / "config.json", ec) && fs::exists(root / "unet" / "config.json", ec)) {
        unetDir = root / "unet";
        schedulerDir = root / "scheduler";
    }

    UNetModel model;
    model.dir_ = dir;

    const fs::path configPath = unetDir / "config.json";
    if (!fs::exists(configPath, ec))
        throw ModelError(configPath.string() +
                         ": not found; a model folder holds config.json and diffusion_pytorch_model.safetensors");
    const nlohmann::json configJson = readJsonFile(configPath);
    if (configJson.is_object() && configJson.contains("_class_name") && configJson["_class_name"].is_string() &&
        configJson["_class_name"].get<std::string>() != "UNet2DModel")
        throw ModelError(configPath.string() + ": _class_name is '" + configJson["_class_name"].get<std::string>() +
                         "'; Tessera loads UNet2DModel checkpoints");
    try {
        model.config_ = modelConfigFromJson(configJson);
    } catch (const std::exception& e) {
        throw ModelError(configPath.string() + ": " + withoutPrefix(e.what(), "config.json: "));
    }

    const fs::path schedulerPath = schedulerDir / "scheduler_config.json";
    if (fs::exists(schedulerPath, ec)) {
        try {
            model.scheduler_ = schedulerOptionsFromJson(readJsonFile(schedulerPath), &model.schedulerClass_);
        } catch (const ModelError&) {
            throw;
        } catch (const std::exception& e) {
            throw ModelError(schedulerPath.string() + ": " + withoutPrefix(e.what(), "scheduler_config.json: "));
        }
    }

    const fs::path single = unetDir / "diffusion_pytorch_model.safetensors";
    const fs::path index = unetDir / "diffusion_pytorch_model.safetensors.index.json";
    std::vector<SafetensorsFile> files;
    std::string indexPath;
    try {
        if (fs::exists(single, ec)) {
            files.emplace_back(single.string());
        } else if (fs::exists(index, ec)) {
            indexPath = index.string();
            const nlohmann::json indexJson = readJsonFile(index);
            if (!indexJson.is_object() || !indexJson.contains("weight_map") || !indexJson["weight_map"].is_object())
                throw ModelError(indexPath + ": no \"weight_map\" object");
            std::vector<std::string> shards;
            for (const auto& [name, shard] : indexJson["weight_map"].items()) {
                if (!shard.is_string() || shard.get<std::string>().find_first_of("/\\") != std::string::npos ||
                    shard.get<std::string>().empty() || shard.get<std::string>().front() == '.')
                    throw ModelError(indexPath + ": tensor " + inQuotes(name) + " maps to " + shard.dump() +
                                     ", not a file name in the model folder");
                if (std::find(shards.begin(), shards.end(), shard.get<std::string>()) == shards.end())
                    shards.push_back(shard.get<std::string>());
            }
            std::sort(shards.begin(), shards.end());
            for (const auto& shard : shards) files.emplace_back((unetDir / shard).string());
            for (const auto& [name, shard] : indexJson["weight_map"].items()) {
                const auto at = std::find(shards.begin(), shards.end(), shard.get<std::string>()) - shards.begin();
                if (!files[static_cast<std::size_t>(at)].has(name))
                    throw ModelError(indexPath + ": tensor " + inQuotes(name) + " is listed in shard " +
                                     shard.get<std::string>() + " but that file does not hold it");
            }
        } else if (fs::exists(unetDir / "diffusion_pytorch_model.bin", ec)) {
            throw ModelError((unetDir / "diffusion_pytorch_model.bin").string() +
                             ": PyTorch pickle weights are not read; convert them to safetensors "
                             "(diffusers: save_pretrained(..., safe_serialization=True))");
        } else {
            throw ModelError(single.string() + ": not found");
        }
    } catch (const SafetensorsError& e) {
        throw ModelError(e.what());
    }

    FileSource source(std::move(files), indexPath);
    Bound bound = bindTensors(model.config_, source);
    model.tensors_ = std::move(bound.tensors);
    model.extra_ = std::move(bound.extra);
    for (const auto& name : model.extra_)
        spdlog::warn("{}: tensor '{}' is not used by this config", source.where(name), name);

    if (source.files().size() == 1) {
        const auto bytes = source.files().front().fileBytes();
        model.sha256_ = sha256Hex(bytes.data(), bytes.size());
    } else {
        Sha256 hash;
        for (const auto& file : source.files()) {
            const auto bytes = file.fileBytes();
            hash.update(bytes.data(), bytes.size());
        }
        model.sha256_ = hash.hexDigest();
    }
    return model;
}

UNetModel UNetModel::fromTensors(ModelConfig config, std::map<std::string, HostTensor> tensors,
                                 SchedulerOptions scheduler) {
    UNetModel model;
    model.config_ = std::move(config);
    model.scheduler_ = scheduler;
    MemorySource source(std::move(tensors));
    Bound bound = bindTensors(model.config_, source);
    model.tensors_ = std::move(bound.tensors);
    model.extra_ = std::move(bound.extra);

    // Names, shapes and values, in name order: equal weights give equal hashes.
    Sha256 hash;
    for (const auto& [name, t] : model.tensors_) {
        hash.update(name.data(), name.size());
        hash.update("\0", 1);
        hash.update(t.shape.data(), t.shape.size() * sizeof(std::int64_t));
        hash.update(t.data.data(), t.data.size() * sizeof(float));
    }
    model.sha256_ = hash.hexDigest();
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

double UNetModel::flopsPerEvaluation(int h, int w) const { return buildUNet2DGraph(config_).flops(h, w); }

std::string UNetModel::weightsSha256() const { return sha256_; }

}  // namespace tessera
