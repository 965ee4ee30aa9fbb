#include "core/ClipTextModel.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "core/BoundedInput.h"
#include "core/ClipTextGraph.h"
#include "core/CpuBackend.h"
#include "core/RunConfig.h"
#include "core/ModelWeights.h"

namespace tessera {

namespace fs = std::filesystem;
using Shape = std::vector<std::int64_t>;

namespace {

// transformers >= 5.6 may drop the "text_model." prefix (spec §3.5); text_projection has none.
std::string flattenedName(const std::string& canonical) {
    const std::size_t prefix = std::strlen(kClipTextPrefix);
    return canonical.compare(0, prefix, kClipTextPrefix) == 0 ? canonical.substr(prefix) : std::string();
}

// Saved by transformers < 4.31 as a persistent buffer; not a parameter (spec §3.2).
bool isPositionIds(const std::string& name) {
    return name == std::string(kClipTextPrefix) + "embeddings.position_ids" || name == "embeddings.position_ids";
}

}  // namespace

ClipTextModel ClipTextModel::load(const fs::path& dir, LoadMeter* meter) {
    checkModelFolder(dir.string());
    ClipTextModel m;
    m.config_ = readClipTextConfig(dir);
    WeightFileLayout layout = transformersWeightFiles();
    layout.alias = flattenedName;
    ModelWeights w = ModelWeights::load(dir.string(), expectedTensors(m.config_), layout, meter);
    m.tensors_ = std::move(w.tensors);
    for (std::string& name : w.extra)
        if (!isPositionIds(name)) m.extra_.push_back(std::move(name));
    return m;
}

ClipTextModel ClipTextModel::fromTensors(ClipTextConfig config, std::map<std::string, HostTensor> tensors,
                                         WeightsDigest digest) {
    ClipTextModel m;
    m.config_ = config;
    ModelWeights w = ModelWeights::fromTensors(std::move(tensors), expectedTensors(config),
                                               LegacyAttentionNames::NotAccepted, digest);
    m.tensors_ = std::move(w.tensors);
    m.extra_ = std::move(w.extra);
    return m;
}

TensorList ClipTextModel::expectedTensors(const ClipTextConfig& config) {
    TensorList list = buildClipTextGraph(config, config.numHiddenLayers).parameterList();
    if (config.withProjection)
        list.emplace_back(kClipTextProjection, std::vector<std::int64_t>{config.projectionDim, config.hiddenSize});
    return list;
}

std::int64_t ClipTextModel::parameterCount() const {
    std::int64_t count = 0;
    for (const auto& [name, shape] : expectedTensors(config_)) {
        std::int64_t n = 1;
        for (const std::int64_t d : shape) n *= d;
        count += n;
    }
    return count;
}

ClipTextOutputs ClipTextModel::encode(std::span<const std::int32_t> ids, int batch, int layersToRun,
                                      ClipHiddenStates hiddenStates) const {
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
    const std::size_t taps = hiddenStates == ClipHiddenStates::All           ? static_cast<std::size_t>(layers) + 1
                             : hiddenStates == ClipHiddenStates::Penultimate ? 1
                                                                            : 0;
    out.hiddenStates.assign(taps, std::vector<float>(rows * d));
    std::vector<float*> outputs{out.lastHiddenState.data(), out.pooled.data()};
    for (auto& h : out.hiddenStates) outputs.push_back(h.data());
    backend.run({input.data()}, batch, outputs);
    if (config_.withProjection) out.textEmbeds = project(out.pooled, batch);
    return out;
}

// text_embeds = pooled W^T (W [P, D], no bias), accumulated in double.
std::vector<float> ClipTextModel::project(const std::vector<float>& pooled, int batch) const {
    const HostTensor& w = tensors_.at(kClipTextProjection);
    const std::size_t p = static_cast<std::size_t>(config_.projectionDim), d = static_cast<std::size_t>(config_.hiddenSize);
    std::vector<float> out(static_cast<std::size_t>(batch) * p);
    for (std::size_t b = 0; b < static_cast<std::size_t>(batch); ++b)
        for (std::size_t o = 0; o < p; ++o) {
            double sum = 0;
            for (std::size_t i = 0; i < d; ++i) sum += double(w.data[o * d + i]) * double(pooled[b * d + i]);
            out[b * p + o] = static_cast<float>(sum);
        }
    return out;
}

PromptConditioning encodePrompts(const ClipTextModel& model, const ClipTokenizer& tokenizer,
                                 const std::vector<std::string>& prompts, const PromptConditioningOptions& options) {
    const int layers = model.config().numHiddenLayers;
    const bool penultimate = options.layer == PromptLayer::Penultimate;
    if (penultimate && options.clipSkip != 1)
        throw ValidationError("clip skip", "clip skip: " + std::to_string(options.clipSkip) +
                                               " is not allowed here; this encoder's output is its penultimate layer "
                                               "(SDXL), so only 1");
    if (options.clipSkip < 1 || options.clipSkip > layers)
        throw ValidationError("clip skip", "clip skip: " + std::to_string(options.clipSkip) +
                                               " is not allowed; this text encoder has " + std::to_string(layers) +
                                               " layers, so 1 (the last layer) to " + std::to_string(layers));
    if (prompts.empty() || options.minChunks < 1 || options.minChunks > clip_text_limits::kMaxChunks)
        throw std::invalid_argument("encodePrompts: " + std::to_string(prompts.size()) + " prompts, minChunks " +
                                    std::to_string(options.minChunks) + " (1.." +
                                    std::to_string(clip_text_limits::kMaxChunks) + ")");
    std::vector<std::vector<PromptChunk>> chunked;
    std::size_t count = static_cast<std::size_t>(options.minChunks);
    for (const std::string& prompt : prompts) {
        chunked.push_back(chunkPrompt(tokenizer, prompt, options.chunking).chunks);
        if (chunked.back().size() > static_cast<std::size_t>(clip_text_limits::kMaxChunks))
            throw ValidationError("prompt", "prompt: " + std::to_string(chunked.back().size()) +
                                                " chunks of 75 tokens; at most " +
                                                std::to_string(clip_text_limits::kMaxChunks) + " are allowed (" +
                                                std::to_string(clip_text_limits::kMaxChunks * 75) + " tokens)");
        count = std::max(count, chunked.back().size());
    }
    const PromptChunk empty = chunkPrompt(tokenizer, "", options.chunking).chunks.front();

    const int batch = static_cast<int>(prompts.size());
    const std::size_t d = static_cast<std::size_t>(model.config().hiddenSize), t = kClipTextTokens;
    PromptConditioning c;
    c.chunks = static_cast<int>(count);
    c.channels = model.config().hiddenSize;
    c.values.resize(prompts.size() * count * t * d);
    // Chunk i of every prompt is one batch, as A1111's forward() encodes it: one emphasis mean
    // over the whole batch. Prompts with fewer chunks take empty-prompt ones.
    for (std::size_t i = 0; i < count; ++i) {
        std::vector<std::int32_t> ids;
        std::vector<float> weights;
        for (const auto& chunks : chunked) {
            const PromptChunk& chunk = i < chunks.size() ? chunks[i] : empty;
            ids.insert(ids.end(), chunk.ids.begin(), chunk.ids.end());
            weights.insert(weights.end(), chunk.weights.begin(), chunk.weights.end());
        }
        ClipTextOutputs out = penultimate ? model.encode(ids, batch, layers, ClipHiddenStates::Penultimate)
                                          : model.encode(ids, batch, layers - (options.clipSkip - 1));
        // A1111 keeps the pooled output of the first chunk, taken before emphasis.
        if (i == 0) {
            c.pooled = out.textEmbeds.empty() ? std::move(out.pooled) : std::move(out.textEmbeds);
            c.pooledWidth = static_cast<int>(c.pooled.size() / prompts.size());
        }
        std::vector<float>& z = penultimate ? out.hiddenStates.front() : out.lastHiddenState;
        applyEmphasis(z, weights, batch, kClipTextTokens, c.channels, options.emphasis);
        for (std::size_t b = 0; b < prompts.size(); ++b)
            std::copy(z.begin() + static_cast<std::ptrdiff_t>(b * t * d), z.begin() + static_cast<std::ptrdiff_t>((b + 1) * t * d),
                      c.values.begin() + static_cast<std::ptrdiff_t>((b * count + i) * t * d));
    }
    return c;
}

PromptConditioning encodePrompt(const ClipTextModel& model, const ClipTokenizer& tokenizer, std::string_view prompt,
                                const PromptConditioningOptions& options) {
    return encodePrompts(model, tokenizer, {std::string(prompt)}, options);
}

}  // namespace tessera
