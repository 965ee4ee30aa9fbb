#include "core/ClipTextModel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <stdexcept>

#include "core/BoundedInput.h"
#include "core/ClipTextGraph.h"
#include "core/CpuBackend.h"
#include "core/Safetensors.h"

namespace tessera {

namespace fs = std::filesystem;
using Shape = std::vector<std::int64_t>;

namespace {

std::string inQuotes(const std::string& s) { return "'" + excerpt(s) + "'"; }

// transformers >= 5.6 may drop the "text_model." prefix (spec §3.5).
std::string flattenedName(const std::string& canonical) {
    return canonical.substr(std::strlen(kClipTextPrefix));
}

// Saved by transformers < 4.31 as a persistent buffer; not a parameter (spec §3.2).
bool isPositionIds(const std::string& name) {
    return name == std::string(kClipTextPrefix) + "embeddings.position_ids" || name == "embeddings.position_ids";
}

// Throws ModelError naming `where` and the tensor for a NaN or an infinity.
void checkFinite(const std::string& where, const std::string& name, const std::vector<float>& data) {
    const auto bad = std::find_if(data.begin(), data.end(), [](float x) { return !std::isfinite(x); });
    if (bad != data.end())
        throw ModelError(where + ": tensor " + inQuotes(name) + " holds a non-finite value (" +
                         (std::isnan(*bad) ? "NaN" : "Inf") + ") at element " + std::to_string(bad - data.begin()));
}

// The weights file of a text_encoder/ folder: model.safetensors, else the fp16 variant.
fs::path weightsFile(const fs::path& dir) {
    for (const char* name : {"model.safetensors", "model.fp16.safetensors"}) {
        std::error_code ec;
        if (fs::exists(dir / name, ec)) return dir / name;
    }
    std::error_code ec;
    if (fs::exists(dir / "pytorch_model.bin", ec))
        throw ModelError("'" + excerpt((dir / "pytorch_model.bin").string(), 200) +
                         "': PyTorch pickle weights are not read (unpickling can run code); convert them to "
                         "safetensors (transformers: save_pretrained(..., safe_serialization=True))");
    if (fs::exists(dir / "model.safetensors.index.json", ec))
        throw ModelError("'" + excerpt((dir / "model.safetensors.index.json").string(), 200) +
                         "': sharded text encoder weights are not supported; save them as one model.safetensors");
    throw ModelError("'" + excerpt((dir / "model.safetensors").string(), 200) + "': not found");
}

// Every parameter of the full graph from `file`: names and shapes checked before any data is read.
std::map<std::string, HostTensor> bindFile(const ClipTextConfig& config, const SafetensorsFile& file,
                                           std::vector<std::string>& extra) {
    const ModelGraph graph = buildClipTextGraph(config, config.numHiddenLayers);
    std::vector<std::string> stored;
    for (const auto& [name, shape] : graph.parameterList()) {
        const SafetensorsTensorInfo* info = file.find(name);
        if (info == nullptr) info = file.find(flattenedName(name));
        if (info == nullptr)
            throw ModelError(file.path() + ": missing tensor " + inQuotes(name) + " (or " +
                             inQuotes(flattenedName(name)) + "), expected shape " + shapeToString(shape));
        if (info->shape != shape)
            throw ModelError(file.path() + ": tensor " + inQuotes(info->name) + ": expected " + shapeToString(shape) +
                             ", found " + shapeToString(info->shape));
        stored.push_back(info->name);
    }
    const std::set<std::string> used(stored.begin(), stored.end());
    for (const auto& info : file.tensors())
        if (used.count(info.name) == 0 && !isPositionIds(info.name)) extra.push_back(info.name);
    std::map<std::string, HostTensor> tensors;
    std::size_t i = 0;
    for (const auto& [name, shape] : graph.parameterList()) {
        HostTensor t{shape, {}};
        try {
            t.data = file.readFloat32(stored[i++]);
        } catch (const SafetensorsError& e) {
            throw ModelError(e.what());
        }
        checkFinite(file.path(), stored[i - 1], t.data);
        tensors.emplace(name, std::move(t));
    }
    return tensors;
}

}  // namespace

ClipTextModel ClipTextModel::load(const fs::path& dir) {
    ClipTextModel m;
    m.config_ = readClipTextConfig(dir);
    const fs::path path = weightsFile(dir);
    try {
        const SafetensorsFile file(path.string());
        m.tensors_ = bindFile(m.config_, file, m.extra_);
    } catch (const SafetensorsError& e) {
        throw ModelError(e.what());
    }
    return m;
}

ClipTextModel ClipTextModel::fromTensors(ClipTextConfig config, std::map<std::string, HostTensor> tensors) {
    ClipTextModel m;
    m.config_ = config;
    const ModelGraph graph = buildClipTextGraph(config, config.numHiddenLayers);
    for (const auto& [name, shape] : graph.parameterList()) {
        const auto it = tensors.find(name);
        if (it == tensors.end()) throw ModelError("in-memory text encoder: missing tensor " + inQuotes(name));
        if (it->second.shape != shape || static_cast<std::int64_t>(it->second.data.size()) != it->second.numel())
            throw ModelError("in-memory text encoder: tensor " + inQuotes(name) + ": expected " + shapeToString(shape) +
                             ", found " + shapeToString(it->second.shape) + " holding " +
                             std::to_string(it->second.data.size()) + " values");
        checkFinite("in-memory text encoder", name, it->second.data);
        m.tensors_.emplace(name, std::move(it->second));
        tensors.erase(it);
    }
    for (const auto& [name, t] : tensors) m.extra_.push_back(name);
    return m;
}

std::int64_t ClipTextModel::parameterCount() const {
    return buildClipTextGraph(config_, config_.numHiddenLayers).parameterCount();
}

ClipTextOutputs ClipTextModel::encode(std::span<const std::int32_t> ids, int batch, int layersToRun,
                                      bool hiddenStates) const {
    if (batch < 1 || ids.size() != static_cast<std::size_t>(batch) * kClipTextTokens)
        throw std::invalid_argument("input ids: " + std::to_string(ids.size()) + " ids for a batch of " +
                                    std::to_string(batch) + " rows of " + std::to_string(kClipTextTokens));
    std::vector<float> input(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= config_.vocabSize)
            throw std::invalid_argument("input ids: row " + std::to_string(i / kClipTextTokens) + " position " +
                                        std::to_string(i % kClipTextTokens) + " holds id " + std::to_string(ids[i]) +
                                        "; this text encoder's vocabulary has ids 0 to " +
                                        std::to_string(config_.vocabSize - 1));
        input[i] = static_cast<float>(ids[i]);
    }
    const int layers = layersToRun == 0 ? config_.numHiddenLayers : layersToRun;
    const ModelGraph graph = fuseForExecution(buildClipTextGraph(config_, layers, hiddenStates));
    CpuBackend backend;
    backend.prepareGraph(graph, tensors_, batch, 1, 1);

    const std::size_t rows = static_cast<std::size_t>(batch) * kClipTextTokens;
    const std::size_t d = static_cast<std::size_t>(config_.hiddenSize);
    ClipTextOutputs out;
    out.lastHiddenState.assign(rows * d, 0.0f);
    out.pooled.assign(static_cast<std::size_t>(batch) * d, 0.0f);
    if (hiddenStates) out.hiddenStates.assign(static_cast<std::size_t>(layers) + 1, std::vector<float>(rows * d));
    std::vector<float*> outputs{out.lastHiddenState.data(), out.pooled.data()};
    for (auto& h : out.hiddenStates) outputs.push_back(h.data());
    backend.run({input.data()}, batch, outputs);
    return out;
}

PromptConditioning encodePrompt(const ClipTextModel& model, const ClipTokenizer& tokenizer, std::string_view prompt,
                                const PromptConditioningOptions& options) {
    const int layers = model.config().numHiddenLayers;
    if (options.clipSkip < 1 || options.clipSkip > layers)
        throw ValidationError("clip skip", "clip skip: " + std::to_string(options.clipSkip) +
                                               " is not allowed; this text encoder has " + std::to_string(layers) +
                                               " layers, so 1 (the last layer) to " + std::to_string(layers));
    if (options.minChunks < 1 || options.minChunks > clip_text_limits::kMaxChunks)
        throw std::invalid_argument("minChunks: " + std::to_string(options.minChunks) + " is outside 1.." +
                                    std::to_string(clip_text_limits::kMaxChunks));
    std::vector<PromptChunk> chunks = chunkPrompt(tokenizer, prompt, options.chunking).chunks;
    if (chunks.size() > static_cast<std::size_t>(clip_text_limits::kMaxChunks))
        throw ValidationError("prompt", "prompt: " + std::to_string(chunks.size()) + " chunks of 75 tokens; at most " +
                                            std::to_string(clip_text_limits::kMaxChunks) + " are allowed (" +
                                            std::to_string(clip_text_limits::kMaxChunks * 75) + " tokens)");
    if (chunks.size() < static_cast<std::size_t>(options.minChunks)) {
        const PromptChunk empty = chunkPrompt(tokenizer, "", options.chunking).chunks.front();
        chunks.resize(static_cast<std::size_t>(options.minChunks), empty);
    }

    PromptConditioning c;
    c.chunks = static_cast<int>(chunks.size());
    c.channels = model.config().hiddenSize;
    const std::size_t chunkFloats = static_cast<std::size_t>(kClipTextTokens) * static_cast<std::size_t>(c.channels);
    c.values.reserve(chunks.size() * chunkFloats);
    for (const PromptChunk& chunk : chunks) {
        // One chunk per call: A1111 encodes and normalises each chunk on its own.
        std::vector<float> z =
            model.encode(chunk.ids, 1, layers - (options.clipSkip - 1)).lastHiddenState;
        applyEmphasis(z, chunk.weights, 1, kClipTextTokens, c.channels, options.emphasis);
        c.values.insert(c.values.end(), z.begin(), z.end());
    }
    return c;
}

PromptConditioning encodePrompts(const ClipTextModel& model, const ClipTokenizer& tokenizer,
                                 const std::vector<std::string>& prompts, const PromptConditioningOptions& options) {
    PromptConditioningOptions each = options;
    for (const std::string& prompt : prompts)
        each.minChunks = std::max(each.minChunks, static_cast<int>(chunkPrompt(tokenizer, prompt, options.chunking).chunks.size()));
    PromptConditioning all;
    for (const std::string& prompt : prompts) {
        PromptConditioning one = encodePrompt(model, tokenizer, prompt, each);
        all.chunks = one.chunks;
        all.channels = one.channels;
        all.values.insert(all.values.end(), one.values.begin(), one.values.end());
    }
    return all;
}

}  // namespace tessera
