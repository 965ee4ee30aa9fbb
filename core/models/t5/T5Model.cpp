#include "core/models/t5/T5Model.h"

#include <algorithm>
#include <stdexcept>

#include "core/base/BoundedInput.h"
#include "core/formats/Safetensors.h"
#include "core/graph/Backend.h"

namespace tessera {

namespace fs = std::filesystem;
using Shape = std::vector<std::int64_t>;

namespace {

std::string blockTensor(int block, const char* rest) {
    return std::string(kT5EncoderPrefix) + "block." + std::to_string(block) + "." + rest;
}

// The name a file stores the token table under, after `prefix`: shared.weight, or the tied
// encoder.embed_tokens.weight when the file lacks it.
std::string sharedName(const SafetensorsFile& file, const std::string& prefix) {
    return file.has(prefix + kT5SharedEmbedding) ? prefix + kT5SharedEmbedding : prefix + kT5EmbedTokensAlias;
}

// The tensor's shape, or a ModelError naming the file and what the shape would have told.
const Shape& shapeIn(const SafetensorsFile& file, const std::string& name, const std::string& why) {
    const SafetensorsTensorInfo* info = file.find(name);
    if (info == nullptr)
        throw ModelError(shownPath(file.path()) + ": missing tensor " + inQuotes(name, input_limits::kNameChars) +
                         " (" + why + ")");
    return info->shape;
}

int dimension(const SafetensorsFile& file, const std::string& name, const Shape& shape, std::size_t rank,
              std::size_t axis, std::int64_t max) {
    if (shape.size() != rank || shape[axis] < 1 || shape[axis] > max)
        throw ModelError(shownPath(file.path()) + ": tensor " + inQuotes(name, input_limits::kNameChars) +
                         " has shape " + shapeToString(shape) + "; a T5 v1.1 encoder's is " + std::to_string(rank) +
                         "-D with sizes up to " + std::to_string(max));
    return static_cast<int>(shape[axis]);
}

// The sizes a single file's shapes give (the file has no config.json).
T5Config inferConfig(const SafetensorsFile& file, const std::string& prefix) {
    namespace bounds = t5_config_bounds;
    T5Config c;
    const std::string shared = sharedName(file, prefix);
    const Shape& table = shapeIn(file, shared, "the token table gives vocab_size and d_model");
    c.vocabSize = dimension(file, shared, table, 2, 0, bounds::kMaxVocab);
    c.dModel = dimension(file, shared, table, 2, 1, bounds::kMaxModel);
    const std::string q = prefix + blockTensor(0, "layer.0.SelfAttention.q.weight");
    const int inner =
        dimension(file, q, shapeIn(file, q, "block 0's query gives heads x d_kv"), 2, 0, bounds::kMaxInner);
    const std::string bias = prefix + blockTensor(0, "layer.0.SelfAttention.relative_attention_bias.weight");
    const Shape& biasShape = shapeIn(file, bias, "block 0's position-bias table gives the buckets and heads");
    c.relativeAttentionNumBuckets = dimension(file, bias, biasShape, 2, 0, bounds::kMaxBuckets);
    c.numHeads = dimension(file, bias, biasShape, 2, 1, bounds::kMaxHeads);
    if (inner % c.numHeads != 0)
        throw ModelError(shownPath(file.path()) + ": tensor " + inQuotes(q, input_limits::kNameChars) + " has " +
                         std::to_string(inner) + " rows, not a multiple of the " + std::to_string(c.numHeads) +
                         " heads of " + inQuotes(bias, input_limits::kNameChars));
    c.dKv = inner / c.numHeads;
    const std::string wi0 = prefix + blockTensor(0, "layer.1.DenseReluDense.wi_0.weight");
    if (!file.has(wi0) && file.has(prefix + blockTensor(0, "layer.1.DenseReluDense.wi.weight")))
        throw ModelError(
            shownPath(file.path()) + ": " +
            inQuotes(prefix + blockTensor(0, "layer.1.DenseReluDense.wi.weight"), input_limits::kNameChars) +
            " is T5 1.0's feed-forward (relu, not gated); only T5 v1.1's gated-gelu (wi_0, wi_1) is "
            "supported");
    c.dFf = dimension(file, wi0, shapeIn(file, wi0, "block 0's gate gives d_ff"), 2, 0, bounds::kMaxFeedForward);
    c.numLayers = 0;
    while (c.numLayers < bounds::kMaxLayers &&
           file.has(prefix + blockTensor(c.numLayers, "layer.0.SelfAttention.q.weight")))
        ++c.numLayers;
    try {
        checkT5Config(c);
    } catch (const std::runtime_error& e) {
        throw ModelError(shownPath(file.path()) + ": " + withoutPrefix(e.what(), "config.json: ") +
                         " (read from the tensors' shapes)");
    }
    return c;
}

}  // namespace

T5Model T5Model::load(const fs::path& dir, LoadMeter* meter) {
    checkModelFolder(dir.string());
    T5Model m;
    m.config_ = readT5Config(dir);
    WeightFileLayout layout = transformersWeightFiles();
    layout.alias = [](const std::string& canonical) {
        return canonical == kT5SharedEmbedding ? std::string(kT5EmbedTokensAlias) : std::string();
    };
    ModelWeights w = ModelWeights::load(dir.string(), expectedTensors(m.config_), layout, meter);
    m.tensors_ = std::move(w.tensors);
    m.extra_ = std::move(w.extra);
    m.sha256_ = std::move(w.sha256);
    return m;
}

T5Model T5Model::loadSingleFile(const fs::path& path, LoadMeter* meter) {
    std::string prefix, shared;
    T5Config config;
    {
        std::unique_ptr<SafetensorsFile> file;
        try {
            file = std::make_unique<SafetensorsFile>(path.string());
        } catch (const SafetensorsError& e) {
            throw ModelError(e.what());
        }
        const std::string marker = std::string(kT5EncoderPrefix) + "final_layer_norm.weight";
        if (file->has(kT5ComfyPrefix + marker))
            prefix = kT5ComfyPrefix;
        else if (!file->has(marker))
            throw ModelError(shownPath(path) + ": no T5 encoder: neither " +
                             inQuotes(marker, input_limits::kNameChars) + " nor " +
                             inQuotes(kT5ComfyPrefix + marker, input_limits::kNameChars) + " is in the file");
        config = inferConfig(*file, prefix);
        shared = sharedName(*file, prefix);
    }
    // The stored name of each canonical one (empty: stored as it is).
    WeightFileLayout layout;
    layout.alias = [prefix, shared](const std::string& canonical) {
        if (canonical == kT5SharedEmbedding) return shared;
        return prefix.empty() ? std::string() : prefix + canonical;
    };
    T5Model m;
    m.config_ = config;
    ModelWeights w = ModelWeights::loadFile(path.string(), expectedTensors(config), layout, meter);
    m.tensors_ = std::move(w.tensors);
    m.extra_ = std::move(w.extra);
    m.sha256_ = std::move(w.sha256);
    return m;
}

T5Model T5Model::fromTensors(T5Config config, std::map<std::string, HostTensor> tensors, WeightsDigest digest) {
    checkT5Config(config);
    T5Model m;
    m.config_ = config;
    ModelWeights w = ModelWeights::fromTensors(std::move(tensors), expectedTensors(config),
                                               LegacyAttentionNames::NotAccepted, digest);
    m.tensors_ = std::move(w.tensors);
    m.extra_ = std::move(w.extra);
    m.sha256_ = std::move(w.sha256);
    return m;
}

TensorList T5Model::expectedTensors(const T5Config& config) { return buildT5EncoderGraph(config, 1).parameterList(); }

std::int64_t T5Model::parameterCount() const {
    std::int64_t count = 0;
    for (const auto& [name, shape] : expectedTensors(config_)) {
        std::int64_t n = 1;
        for (const std::int64_t d : shape) n *= d;
        count += n;
    }
    return count;
}

std::vector<float> T5Model::encode(Backend& backend, std::span<const std::int32_t> ids, int batch) const {
    return std::move(run(backend, ids, batch, false).front());
}

std::vector<std::vector<float>> T5Model::encodeWithHiddenStates(Backend& backend, std::span<const std::int32_t> ids,
                                                                int batch) const {
    return run(backend, ids, batch, true);
}

std::vector<std::vector<float>> T5Model::run(Backend& backend, std::span<const std::int32_t> ids, int batch,
                                             bool hiddenStates) const {
    if (batch < 1 || ids.empty() || ids.size() % static_cast<std::size_t>(batch) != 0 ||
        ids.size() / static_cast<std::size_t>(batch) > static_cast<std::size_t>(kT5MaxTokens))
        throw std::invalid_argument("T5 input ids: " + std::to_string(ids.size()) + " ids for a batch of " +
                                    std::to_string(batch) + " rows; each row must hold the same number of ids, 1 to " +
                                    std::to_string(kT5MaxTokens));
    const std::size_t tokens = ids.size() / static_cast<std::size_t>(batch);
    for (std::size_t i = 0; i < ids.size(); ++i)
        if (ids[i] < 0 || ids[i] >= config_.vocabSize)
            throw std::invalid_argument("T5 input ids: row " + std::to_string(i / tokens) + " position " +
                                        std::to_string(i % tokens) + " holds id " + std::to_string(ids[i]) +
                                        "; this encoder's vocabulary has ids 0 to " +
                                        std::to_string(config_.vocabSize - 1));
    const ModelGraph graph = fuseForExecution(buildT5EncoderGraph(config_, static_cast<int>(tokens), hiddenStates));
    std::vector<float> input(ids.begin(), ids.end());
    backend.prepareGraph(graph, tensors_, batch, 1, 1);
    std::vector<std::vector<float>> outputs(graph.outputs().size());
    std::vector<float*> pointers;
    for (std::size_t k = 0; k < outputs.size(); ++k) {
        outputs[k].resize(static_cast<std::size_t>(graph.elements(graph.outputs()[k], batch, 1, 1)));
        pointers.push_back(outputs[k].data());
    }
    backend.run({input.data()}, batch, pointers);
    return outputs;
}

}  // namespace tessera
