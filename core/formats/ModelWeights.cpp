// ModelWeights: diffusers weight files (safetensors, sharded or not, and diffusers' fp16 variants:
// diffusers utils/constants.py and modeling_utils.py load_state_dict) bound by name against a
// model's tensor list.
#include "core/formats/ModelWeights.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <set>
#include <span>
#include <thread>

#include <spdlog/spdlog.h>

#include "core/base/Sha256.h"
#include "core/formats/Safetensors.h"

namespace tessera {

namespace fs = std::filesystem;
using Shape = std::vector<std::int64_t>;

std::string withoutPrefix(const std::string& message, std::string_view prefix) {
    return message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message;
}

bool folderEntryPresent(const fs::path& path) {
    std::error_code ec;
    return fs::symlink_status(path, ec).type() != fs::file_type::not_found && !ec;
}

nlohmann::json readModelJson(const fs::path& path) {
    try {
        return readBoundedJson(path, "model");
    } catch (const InputFileError& e) {
        throw ModelError(withoutPrefix(e.what(), "model: "));
    }
}

void checkModelFolder(const std::string& dir) {
    const std::string shown = shownPath(dir);
    if (dir.empty()) throw ModelError("no model folder given");
    if (dir.size() > input_limits::kPathChars)
        throw ModelError(shown + ": the path is " + std::to_string(dir.size()) + " characters long; at most " +
                         std::to_string(input_limits::kPathChars) + " are allowed");
    std::error_code ec;
    const fs::file_status status = fs::status(dir, ec);
    if (ec.value() == ELOOP) throw ModelError(shown + ": too many levels of symbolic links (a link loop?)");
    if (ec.value() == ENAMETOOLONG) throw ModelError(shown + ": a path component is too long");
    if (status.type() == fs::file_type::not_found) throw ModelError(shown + ": not a model folder (no such folder)");
    if (ec) throw ModelError(shown + ": cannot be read: " + ec.message());
    if (!fs::is_directory(status))
        throw ModelError(shown +
                         ": not a folder; a model folder holds config.json and "
                         "diffusion_pytorch_model.safetensors");
}

std::string componentFolder(const std::string& dir, const char* component, const char* what) {
    checkModelFolder(dir);
    const fs::path root(dir);
    const bool pipeline =
        !folderEntryPresent(root / "config.json") && folderEntryPresent(root / component / "config.json");
    const fs::path folder = pipeline ? root / component : root;
    const fs::path configPath = folder / "config.json";
    if (!folderEntryPresent(configPath))
        throw ModelError(shownPath(configPath) + ": not found; " + what +
                         " holds config.json and diffusion_pytorch_model.safetensors");
    return folder.string();
}

namespace {

// ---------------------------------------------------------------------------
// Names

// diffusers <= 0.15 attention parameter names (diffusers modeling_utils.py
// _fix_state_dict_keys_on_load); empty when `canonical` has none.
std::string legacyName(const std::string& canonical) {
    if (canonical.find("attentions.") == std::string::npos) return {};
    static constexpr std::pair<std::string_view, std::string_view> kRenames[] = {
        {".to_q.", ".query."}, {".to_k.", ".key."}, {".to_v.", ".value."}, {".to_out.0.", ".proj_attn."}};
    for (const auto& [now, old] : kRenames) {
        const auto at = canonical.rfind(now);
        if (at != std::string::npos)
            return canonical.substr(0, at) + std::string(old) + canonical.substr(at + now.size());
    }
    return {};
}

using input_limits::kNameChars;

// The names of a map's entries, in its order.
template <typename Map>
std::vector<std::string> keysOf(const Map& map) {
    std::vector<std::string> keys;
    keys.reserve(map.size());
    for (const auto& entry : map) keys.push_back(entry.first);
    return keys;
}

// ---------------------------------------------------------------------------
// Where tensors come from: safetensors files or an in-memory map.

class TensorSource {
public:
    virtual ~TensorSource() = default;
    virtual std::vector<std::string> names() const = 0;
    virtual const Shape* shapeOf(const std::string& name) const = 0;           // nullptr when absent
    virtual std::vector<float> take(const std::string& name) = 0;              // throws ModelError
    virtual std::string where(const std::string& name) const = 0;              // file for messages
    virtual std::uint64_t storedBytes(const std::string&) const { return 0; }  // as stored, for progress
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
    std::vector<std::string> names() const override { return keysOf(entries_); }
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
    std::uint64_t storedBytes(const std::string& name) const override { return entries_.at(name).info->byteSize(); }
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
    std::vector<std::string> names() const override { return keysOf(tensors_); }
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

// Finds every tensor the config needs (canonical, alias or, where accepted, legacy name),
// checks all shapes before reading any data, then reads, upcasts and checks the values for NaN/Inf.
ModelWeights bindTensors(const TensorList& expected, TensorSource& source, const WeightFileLayout& layout,
                         LoadMeter* meter = nullptr) {
    std::vector<std::string> storedNames;
    storedNames.reserve(expected.size());
    for (const auto& [name, shape] : expected) {
        std::string stored = name;
        const Shape* found = source.shapeOf(name);
        const std::string legacy = layout.alias                                           ? layout.alias(name)
                                   : layout.legacyNames == LegacyAttentionNames::Accepted ? legacyName(name)
                                                                                          : std::string();
        if (found == nullptr && !legacy.empty()) {
            found = source.shapeOf(legacy);
            stored = legacy;
        }
        if (found == nullptr)
            throw ModelError(source.where(name) + ": missing tensor " + inQuotes(name, kNameChars) +
                             (legacy.empty() ? std::string()
                                             : std::string(layout.alias ? " (or " : " (or legacy ") +
                                                   inQuotes(legacy, kNameChars) + ")") +
                             ", expected shape " + shapeToString(shape));
        if (*found != shape)
            throw ModelError(source.where(stored) + ": tensor " + inQuotes(name, kNameChars) +
                             (stored != name ? " (stored as " + inQuotes(stored, kNameChars) + ")" : std::string()) +
                             ": expected " + shapeToString(shape) + ", found " + shapeToString(*found));
        storedNames.push_back(std::move(stored));
    }

    ModelWeights bound;
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
        if (meter != nullptr) meter->advance(source.storedBytes(stored));
        const auto bad = std::find_if(t.data.begin(), t.data.end(), [](float x) { return !std::isfinite(x); });
        if (bad != t.data.end())
            throw ModelError(where + ": tensor " + inQuotes(name, kNameChars) + " holds a non-finite value (" +
                             (std::isnan(*bad) ? "NaN" : "Inf") + ") at element " +
                             std::to_string(bad - t.data.begin()));
        bound.tensors.emplace(name, std::move(t));
    }
    return bound;
}

// Sharded weights: the index's weight_map names each tensor's shard file in the folder.
std::vector<SafetensorsFile> openShards(const fs::path& modelDir, const fs::path& index) {
    // Sharded diffusers checkpoints have a handful of shards (5 GB each by default).
    constexpr std::size_t kMaxShards = 1024;
    const std::string indexPath = shownPath(index);
    const nlohmann::json indexJson = readModelJson(index);
    if (!indexJson.is_object() || !indexJson.contains("weight_map") || !indexJson["weight_map"].is_object())
        throw ModelError(indexPath + ": no \"weight_map\" object");
    const nlohmann::json& weightMap = indexJson["weight_map"];
    if (weightMap.size() > SafetensorsFile::kMaxTensors)
        throw ModelError(indexPath + ": weight_map lists " + std::to_string(weightMap.size()) + " tensors; at most " +
                         std::to_string(SafetensorsFile::kMaxTensors) + " are allowed");
    std::map<std::string, std::size_t> shards;  // file name -> index into the sorted list
    for (const auto& [name, shard] : weightMap.items()) {
        if (!shard.is_string() || shard.get<std::string>().find_first_of("/\\") != std::string::npos ||
            shard.get<std::string>().empty() || shard.get<std::string>().front() == '.')
            throw ModelError(indexPath + ": tensor " + inQuotes(name) + " maps to " + excerptJson(shard) +
                             ", not a file name in the model folder");
        shards.emplace(shard.get<std::string>(), 0);
        if (shards.size() > kMaxShards)
            throw ModelError(indexPath + ": more than " + std::to_string(kMaxShards) + " shard files");
    }
    std::vector<SafetensorsFile> files;
    for (auto& [shard, at] : shards) {
        at = files.size();
        files.emplace_back((modelDir / shard).string());
    }
    for (const auto& [name, shard] : weightMap.items())
        if (!files[shards.at(shard.get<std::string>())].has(name))
            throw ModelError(indexPath + ": tensor " + inQuotes(name) + " is listed in shard " +
                             excerpt(shard.get<std::string>()) + " but that file does not hold it");
    return files;
}

// The weight files of a model folder: one safetensors file or the shards of an index, the
// full-precision names first, then diffusers' "fp16" variant (diffusers utils/hub_utils.py
// _add_variant: the variant goes before the extension, or before ".json" of the index; older
// writers put it before ".index").
std::vector<SafetensorsFile> openWeights(const fs::path& modelDir, const WeightFileLayout& layout,
                                         std::string& indexPath) {
    struct Candidate {
        std::string name;
        bool index;
    };
    const std::string& stem = layout.stem;
    const std::vector<Candidate> candidates = {
        {stem + ".safetensors", false},
        {stem + ".safetensors.index.json", true},
        {stem + ".fp16.safetensors", false},
        {stem + ".safetensors.index.fp16.json", true},
        {stem + ".safetensors.fp16.index.json", true},
    };
    try {
        for (const Candidate& candidate : candidates) {
            const fs::path path = modelDir / candidate.name;
            if (!folderEntryPresent(path)) continue;
            if (candidate.index) {
                indexPath = path.string();
                return openShards(modelDir, path);
            }
            std::vector<SafetensorsFile> files;
            files.emplace_back(path.string());
            return files;
        }
    } catch (const SafetensorsError& e) {
        throw ModelError(e.what());
    }
    const fs::path pickle = modelDir / layout.pickle;
    if (folderEntryPresent(pickle))
        throw ModelError(excerpt(pickle.string(), 200) +
                         ": PyTorch pickle weights are not read; convert them to safetensors "
                         "(diffusers: save_pretrained(..., safe_serialization=True))");
    throw ModelError(excerpt((modelDir / candidates[0].name).string(), 200) +
                     ": not found (nor its sharded index, nor the fp16 variants " + candidates[2].name + " and " +
                     candidates[3].name + ")");
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

std::int64_t HostTensor::numel() const {
    std::int64_t n = 1;
    for (const auto d : shape) n *= d;
    return n;
}

WeightFileLayout transformersWeightFiles() {
    WeightFileLayout layout;
    layout.stem = "model";
    layout.pickle = "pytorch_model.bin";
    return layout;
}

ModelWeights ModelWeights::load(const std::string& folder, const TensorList& expected, LegacyAttentionNames legacyNames,
                                LoadMeter* meter) {
    WeightFileLayout layout;
    layout.legacyNames = legacyNames;
    return load(folder, expected, layout, meter);
}

std::uint64_t ModelWeights::storedBytes(const std::string& folder, const WeightFileLayout& layout) {
    std::string indexPath;
    std::uint64_t bytes = 0;
    for (const SafetensorsFile& file : openWeights(folder, layout, indexPath))
        for (const SafetensorsTensorInfo& info : file.tensors()) bytes += info.byteSize();
    return bytes;
}

namespace {

ModelWeights bindFiles(FileSource& source, const TensorList& expected, const WeightFileLayout& layout,
                       LoadMeter* meter) {
    ModelWeights weights = bindTensors(expected, source, layout, meter);
    // One line however many there are (a file can hold thousands the model does not use).
    if (!weights.extra.empty())
        spdlog::warn("{}: {} tensor{} not used by this config: {}", excerpt(source.where(weights.extra.front()), 200),
                     weights.extra.size(), weights.extra.size() == 1 ? " is" : "s are", excerptList(weights.extra));
    Sha256 hash;
    try {
        for (const auto& file : source.files())
            (void)file.readFileInChunks([&](std::span<const std::byte> chunk) {
                hash.update(chunk.data(), chunk.size());
                return true;
            });
    } catch (const SafetensorsError& e) {
        throw ModelError(e.what());
    }
    weights.sha256 = hash.hexDigest();
    return weights;
}

}  // namespace

ModelWeights ModelWeights::load(const std::string& folder, const TensorList& expected, const WeightFileLayout& layout,
                                LoadMeter* meter) {
    std::string indexPath;
    FileSource source(openWeights(folder, layout, indexPath), indexPath);
    return bindFiles(source, expected, layout, meter);
}

ModelWeights ModelWeights::loadFile(const std::string& path, const TensorList& expected, const WeightFileLayout& layout,
                                    LoadMeter* meter) {
    std::vector<SafetensorsFile> files;
    try {
        files.emplace_back(path);
    } catch (const SafetensorsError& e) {
        throw ModelError(e.what());
    }
    FileSource source(std::move(files), {});
    return bindFiles(source, expected, layout, meter);
}

ModelWeights ModelWeights::fromTensors(std::map<std::string, HostTensor> tensors, const TensorList& expected,
                                       LegacyAttentionNames legacyNames, WeightsDigest digest) {
    MemorySource source(std::move(tensors));
    WeightFileLayout layout;
    layout.legacyNames = legacyNames;
    ModelWeights weights = bindTensors(expected, source, layout);
    if (digest == WeightsDigest::Skip) return weights;
    // Names, shapes and values, in name order: equal weights give equal hashes.
    Sha256 hash;
    for (const auto& [name, t] : weights.tensors) {
        hash.update(name.data(), name.size());
        hash.update("\0", 1);
        hash.update(t.shape.data(), t.shape.size() * sizeof(std::int64_t));
        hash.update(t.data.data(), t.data.size() * sizeof(float));
    }
    weights.sha256 = hash.hexDigest();
    return weights;
}

std::uint64_t float32Bytes(const TensorList& expected) {
    std::uint64_t bytes = 0;
    for (const auto& [name, shape] : expected) {
        std::uint64_t numel = 1;
        for (const std::int64_t d : shape) numel *= static_cast<std::uint64_t>(d);
        bytes += numel * sizeof(float);
    }
    return bytes;
}

std::map<std::string, HostTensor> randomTensors(const TensorList& expected, std::uint64_t seed, LoadMeter* meter) {
    // PyTorch's default init: conv/linear weights and biases U(±1/sqrt(fan_in)) (kaiming_uniform
    // with a = sqrt(5)). GroupNorm would be exactly 1/0; a small perturbation keeps the affine
    // part exercised by backend comparisons. Each tensor has its own stream keyed by its name,
    // so adding a layer does not change the others, and tensors can be drawn on several threads
    // with the same values (random:flux-dev draws 67 GB).
    struct Draw {
        const std::string* name;
        const std::vector<std::int64_t>* shape;
        bool norm = false, weight = false;
        std::int64_t fanIn = 1;
    };
    std::vector<Draw> draws;
    draws.reserve(expected.size());
    std::int64_t fanIn = 1;
    std::uint64_t elements = 0;
    for (const auto& [name, shape] : expected) {
        Draw d{&name, &shape};
        const auto lastDot = name.rfind('.');
        const std::string module = name.substr(0, lastDot);
        d.weight = name.compare(lastDot, std::string::npos, ".weight") == 0;
        d.norm = module.substr(module.rfind('.') + 1).find("norm") != std::string::npos;
        if (!d.norm && d.weight) {  // biases follow their weight in the list and share its fan-in
            fanIn = 1;
            for (std::size_t k = 1; k < shape.size(); ++k) fanIn *= shape[k];
        }
        d.fanIn = fanIn;
        std::uint64_t n = 1;
        for (const std::int64_t e : shape) n *= static_cast<std::uint64_t>(std::max<std::int64_t>(e, 0));
        elements += n;
        draws.push_back(d);
    }
    auto draw = [seed](const Draw& d) {
        HostTensor t;
        t.shape = *d.shape;
        t.data.resize(static_cast<std::size_t>(t.numel()));
        std::uint64_t state = seed ^ fnv1a(*d.name);
        (void)splitmix64(state);
        if (d.norm) {
            const float base = d.weight ? 1.0f : 0.0f;
            for (auto& x : t.data) x = base + 0.05f * symmetricUniform(state);
        } else {
            const float bound = 1.0f / std::sqrt(static_cast<float>(std::max<std::int64_t>(d.fanIn, 1)));
            for (auto& x : t.data) x = bound * symmetricUniform(state);
        }
        return t;
    };
    // Large models on the machine's threads, a group of tensors at a time; the meter (one thread's)
    // advances between groups, on this thread.
    const unsigned threads =
        elements < (std::uint64_t{1} << 24) ? 1u : std::clamp(std::thread::hardware_concurrency(), 1u, 32u);
    std::map<std::string, HostTensor> tensors;
    std::vector<HostTensor> group(threads);
    for (std::size_t first = 0; first < draws.size(); first += threads) {
        const std::size_t count = std::min<std::size_t>(threads, draws.size() - first);
        if (count == 1) {
            group[0] = draw(draws[first]);
        } else {
            std::vector<std::thread> workers;
            workers.reserve(count);
            for (std::size_t k = 0; k < count; ++k) workers.emplace_back([&, k] { group[k] = draw(draws[first + k]); });
            for (std::thread& w : workers) w.join();
        }
        for (std::size_t k = 0; k < count; ++k) {
            if (meter != nullptr) meter->advance(group[k].data.size() * sizeof(float));
            tensors.emplace(*draws[first + k].name, std::move(group[k]));
        }
    }
    return tensors;
}

}  // namespace tessera
