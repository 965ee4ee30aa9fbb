#include "core/models/clip/ClipTextModel.h"

#include <algorithm>
#include <cstring>
#include <list>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "core/base/BoundedInput.h"
#include "core/formats/ModelWeights.h"
#include "core/graph/Backend.h"
#include "core/models/clip/ClipTextGraph.h"
#include "core/run/RunConfig.h"

namespace tessera {

namespace fs = std::filesystem;
using Shape = std::vector<std::int64_t>;

namespace {

// transformers >= 5.6 may drop the "text_model." prefix; text_projection has none.
std::string flattenedName(const std::string& canonical) {
    const std::size_t prefix = std::strlen(kClipTextPrefix);
    return canonical.compare(0, prefix, kClipTextPrefix) == 0 ? canonical.substr(prefix) : std::string();
}

// Saved by transformers < 4.31 as a persistent buffer (models/clip/modeling_clip.py,
// CLIPTextEmbeddings); not a parameter.
bool isPositionIds(const std::string& name) {
    return name == std::string(kClipTextPrefix) + "embeddings.position_ids" || name == "embeddings.position_ids";
}

}  // namespace

// The rows encode() has run, by (layers, hidden states, ids), least recently used last.
struct ClipTextModel::RowMemo {
    struct Row {
        std::vector<float> last, pooled, embeds;
        std::vector<std::vector<float>> hidden;
        std::size_t bytes() const {
            std::size_t n = last.size() + pooled.size() + embeds.size();
            for (const auto& h : hidden) n += h.size();
            return n * sizeof(float);
        }
    };
    using Entry = std::pair<std::string, std::shared_ptr<const Row>>;

    std::mutex mutex;
    std::list<Entry> lru;  // most recently used first
    std::unordered_map<std::string, std::list<Entry>::iterator> index;
    std::size_t bytes = 0, limit = kRowMemoBytes;
    std::uint64_t encoded = 0, remembered = 0;

    static std::string key(int layers, ClipHiddenStates hidden, const std::int32_t* ids) {
        std::string k(sizeof(std::int32_t) * (2 + kClipTextTokens), '\0');
        const std::int32_t head[2] = {layers, static_cast<std::int32_t>(hidden)};
        std::memcpy(k.data(), head, sizeof head);
        std::memcpy(k.data() + sizeof head, ids, sizeof(std::int32_t) * kClipTextTokens);
        return k;
    }
    // The row under `k`, now the most recent; null when not held.
    std::shared_ptr<const Row> find(const std::string& k) {
        const auto it = index.find(k);
        if (it == index.end()) return nullptr;
        lru.splice(lru.begin(), lru, it->second);
        return it->second->second;
    }
    void insert(const std::string& k, std::shared_ptr<const Row> row) {
        if (limit == 0 || index.count(k)) return;
        bytes += row->bytes();
        lru.emplace_front(k, std::move(row));
        index[k] = lru.begin();
        trim();
    }
    // Drops the least recently used rows past the limit; the newest stays even when it alone is
    // over it (a limit of 0 keeps nothing).
    void trim() {
        while (!lru.empty() && bytes > limit && (limit == 0 || lru.size() > 1)) {
            bytes -= lru.back().second->bytes();
            index.erase(lru.back().first);
            lru.pop_back();
        }
    }
};

ClipTextModel::RowMemoStats ClipTextModel::rowMemoStats() const {
    RowMemoStats s;
    if (!memo_) return s;
    std::lock_guard lock(memo_->mutex);
    s.rows = memo_->lru.size();
    s.bytes = memo_->bytes;
    s.rowsEncoded = memo_->encoded;
    s.rowsRemembered = memo_->remembered;
    return s;
}

void ClipTextModel::forgetEncodedRows() const {
    auto fresh = std::make_shared<RowMemo>();
    if (memo_) {
        // The bound and the counts carry over: the counts say what this model ran since it was made.
        std::lock_guard lock(memo_->mutex);
        fresh->limit = memo_->limit;
        fresh->encoded = memo_->encoded;
        fresh->remembered = memo_->remembered;
    }
    memo_ = std::move(fresh);
}

void ClipTextModel::setRowMemoBytes(std::size_t bytes) {
    if (!memo_) return;
    std::lock_guard lock(memo_->mutex);
    memo_->limit = bytes;
    memo_->trim();
}

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
    m.memo_ = std::make_shared<RowMemo>();
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
    m.memo_ = std::make_shared<RowMemo>();
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

ClipTextOutputs ClipTextModel::encode(Backend& backend, std::span<const std::int32_t> ids, int batch, int layersToRun,
                                      ClipHiddenStates hiddenStates) const {
    if (batch < 1 || ids.size() != static_cast<std::size_t>(batch) * kClipTextTokens)
        throw std::invalid_argument("input ids: " + std::to_string(ids.size()) + " ids for a batch of " +
                                    std::to_string(batch) + " rows of " + std::to_string(kClipTextTokens));
    for (std::size_t i = 0; i < ids.size(); ++i)
        if (ids[i] < 0 || ids[i] >= config_.vocabSize)
            throw std::invalid_argument("input ids: row " + std::to_string(i / kClipTextTokens) + " position " +
                                        std::to_string(i % kClipTextTokens) + " holds id " + std::to_string(ids[i]) +
                                        "; this text encoder's vocabulary has ids 0 to " +
                                        std::to_string(config_.vocabSize - 1));
    const int layers = layersToRun == 0 ? config_.numHiddenLayers : layersToRun;
    const ModelGraph graph = fuseForExecution(buildClipTextGraph(config_, layers, hiddenStates));
    const std::size_t t = kClipTextTokens, d = static_cast<std::size_t>(config_.hiddenSize);
    const std::size_t taps = hiddenStates == ClipHiddenStates::All           ? static_cast<std::size_t>(layers) + 1
                             : hiddenStates == ClipHiddenStates::Penultimate ? 1
                                                                             : 0;

    // Each row from the memo, or run: the distinct rows not held, in one batch.
    std::vector<std::shared_ptr<const RowMemo::Row>> rows(static_cast<std::size_t>(batch));
    std::vector<std::string> keys(rows.size());
    std::vector<std::size_t> toRun;  // the first row of each distinct id sequence not held
    std::unordered_map<std::string, std::size_t> firstOf;
    {
        std::unique_lock<std::mutex> lock;
        if (memo_) lock = std::unique_lock(memo_->mutex);
        for (std::size_t b = 0; b < rows.size(); ++b) {
            keys[b] = RowMemo::key(layers, hiddenStates, ids.data() + b * t);
            if (memo_) rows[b] = memo_->find(keys[b]);
            if (!rows[b] && firstOf.emplace(keys[b], b).second) toRun.push_back(b);
        }
    }
    if (!toRun.empty()) {
        const int runBatch = static_cast<int>(toRun.size());
        std::vector<float> input(toRun.size() * t);
        for (std::size_t r = 0; r < toRun.size(); ++r)
            for (std::size_t i = 0; i < t; ++i) input[r * t + i] = static_cast<float>(ids[toRun[r] * t + i]);
        backend.prepareGraph(graph, tensors_, runBatch, 1, 1);
        std::vector<float> last(toRun.size() * t * d), pooled(toRun.size() * d);
        std::vector<std::vector<float>> hidden(taps, std::vector<float>(toRun.size() * t * d));
        std::vector<float*> outputs{last.data(), pooled.data()};
        for (auto& h : hidden) outputs.push_back(h.data());
        backend.run({input.data()}, runBatch, outputs);
        const std::vector<float> embeds = config_.withProjection ? project(pooled, runBatch) : std::vector<float>{};
        const std::size_t p = static_cast<std::size_t>(config_.projectionDim);
        auto slice = [](const std::vector<float>& v, std::size_t r, std::size_t n) {
            return std::vector<float>(v.begin() + static_cast<std::ptrdiff_t>(r * n),
                                      v.begin() + static_cast<std::ptrdiff_t>((r + 1) * n));
        };
        std::unique_lock<std::mutex> lock;
        if (memo_) lock = std::unique_lock(memo_->mutex);
        for (std::size_t r = 0; r < toRun.size(); ++r) {
            auto row = std::make_shared<RowMemo::Row>();
            row->last = slice(last, r, t * d);
            row->pooled = slice(pooled, r, d);
            if (!embeds.empty()) row->embeds = slice(embeds, r, p);
            for (const auto& h : hidden) row->hidden.push_back(slice(h, r, t * d));
            rows[toRun[r]] = row;
            if (memo_) memo_->insert(keys[toRun[r]], std::move(row));
        }
        for (std::size_t b = 0; b < rows.size(); ++b)
            if (!rows[b]) rows[b] = rows[firstOf.at(keys[b])];
        if (memo_) {
            memo_->encoded += toRun.size();
            memo_->remembered += rows.size() - toRun.size();
        }
    } else if (memo_) {
        std::lock_guard lock(memo_->mutex);
        memo_->remembered += rows.size();
    }

    ClipTextOutputs out;
    out.hiddenStates.assign(taps, {});
    for (const auto& row : rows) {
        out.lastHiddenState.insert(out.lastHiddenState.end(), row->last.begin(), row->last.end());
        out.pooled.insert(out.pooled.end(), row->pooled.begin(), row->pooled.end());
        out.textEmbeds.insert(out.textEmbeds.end(), row->embeds.begin(), row->embeds.end());
        for (std::size_t h = 0; h < taps; ++h)
            out.hiddenStates[h].insert(out.hiddenStates[h].end(), row->hidden[h].begin(), row->hidden[h].end());
    }
    return out;
}

// text_embeds = pooled W^T (W [P, D], no bias), accumulated in double.
std::vector<float> ClipTextModel::project(const std::vector<float>& pooled, int batch) const {
    const HostTensor& w = tensors_.at(kClipTextProjection);
    const std::size_t p = static_cast<std::size_t>(config_.projectionDim),
                      d = static_cast<std::size_t>(config_.hiddenSize);
    std::vector<float> out(static_cast<std::size_t>(batch) * p);
    for (std::size_t b = 0; b < static_cast<std::size_t>(batch); ++b)
        for (std::size_t o = 0; o < p; ++o) {
            double sum = 0;
            for (std::size_t i = 0; i < d; ++i) sum += double(w.data[o * d + i]) * double(pooled[b * d + i]);
            out[b * p + o] = static_cast<float>(sum);
        }
    return out;
}

namespace {

// Every text's 77-id chunks (at least options.minChunks each, the shorter padded with the empty
// prompt's chunk), after the checks encodePrompts and encodeEachPrompt share.
struct ChunkedTexts {
    std::vector<std::vector<PromptChunk>> chunks;  // per text, `count` each
    std::size_t count = 0;
};

ChunkedTexts chunkTexts(const ClipTextModel& model, const ClipTokenizer& tokenizer,
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
    ChunkedTexts c;
    c.count = static_cast<std::size_t>(options.minChunks);
    for (const std::string& prompt : prompts) {
        c.chunks.push_back(chunkPrompt(tokenizer, prompt, options.chunking).chunks);
        if (c.chunks.back().size() > static_cast<std::size_t>(clip_text_limits::kMaxChunks))
            throw ValidationError("prompt", "prompt: " + std::to_string(c.chunks.back().size()) +
                                                " chunks of 75 tokens; at most " +
                                                std::to_string(clip_text_limits::kMaxChunks) + " are allowed (" +
                                                std::to_string(clip_text_limits::kMaxChunks * 75) + " tokens)");
        c.count = std::max(c.count, c.chunks.back().size());
    }
    const PromptChunk empty = chunkPrompt(tokenizer, "", options.chunking).chunks.front();
    for (auto& chunks : c.chunks) chunks.resize(c.count, empty);
    return c;
}

// `batch` rows of ids through the layers the options ask for.
ClipTextOutputs encodeRows(const ClipTextModel& model, Backend& backend, const std::vector<std::int32_t>& ids,
                           int batch, const PromptConditioningOptions& options) {
    const int layers = model.config().numHiddenLayers;
    return options.layer == PromptLayer::Penultimate
               ? model.encode(backend, ids, batch, layers, ClipHiddenStates::Penultimate)
               : model.encode(backend, ids, batch, layers - (options.clipSkip - 1));
}

// The conditioning rows of encodeRows' outputs (before emphasis).
std::vector<float>& conditioningRows(ClipTextOutputs& out, const PromptConditioningOptions& options) {
    return options.layer == PromptLayer::Penultimate ? out.hiddenStates.front() : out.lastHiddenState;
}

}  // namespace

PromptConditioning encodePrompts(const ClipTextModel& model, Backend& backend, const ClipTokenizer& tokenizer,
                                 const std::vector<std::string>& prompts, const PromptConditioningOptions& options) {
    const ChunkedTexts chunked = chunkTexts(model, tokenizer, prompts, options);
    const std::size_t count = chunked.count;
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
        for (const auto& chunks : chunked.chunks) {
            ids.insert(ids.end(), chunks[i].ids.begin(), chunks[i].ids.end());
            weights.insert(weights.end(), chunks[i].weights.begin(), chunks[i].weights.end());
        }
        ClipTextOutputs out = encodeRows(model, backend, ids, batch, options);
        // A1111 keeps the pooled output of the first chunk, taken before emphasis.
        if (i == 0) {
            c.pooled = out.textEmbeds.empty() ? std::move(out.pooled) : std::move(out.textEmbeds);
            c.pooledWidth = static_cast<int>(c.pooled.size() / prompts.size());
        }
        std::vector<float>& z = conditioningRows(out, options);
        applyEmphasis(z, weights, batch, kClipTextTokens, c.channels, options.emphasis);
        for (std::size_t b = 0; b < prompts.size(); ++b)
            std::copy(z.begin() + static_cast<std::ptrdiff_t>(b * t * d),
                      z.begin() + static_cast<std::ptrdiff_t>((b + 1) * t * d),
                      c.values.begin() + static_cast<std::ptrdiff_t>((b * count + i) * t * d));
    }
    return c;
}

std::vector<PromptConditioning> encodeEachPrompt(const ClipTextModel& model, Backend& backend,
                                                 const ClipTokenizer& tokenizer,
                                                 const std::vector<std::string>& prompts,
                                                 const PromptConditioningOptions& options) {
    const ChunkedTexts chunked = chunkTexts(model, tokenizer, prompts, options);
    const std::size_t count = chunked.count, rows = prompts.size() * count;
    const std::size_t d = static_cast<std::size_t>(model.config().hiddenSize), t = kClipTextTokens;
    // Row (text, chunk) = text * count + chunk: every chunk of every text in one encoder batch.
    std::vector<std::int32_t> ids;
    ids.reserve(rows * t);
    for (const auto& chunks : chunked.chunks)
        for (const PromptChunk& chunk : chunks) ids.insert(ids.end(), chunk.ids.begin(), chunk.ids.end());
    ClipTextOutputs out = encodeRows(model, backend, ids, static_cast<int>(rows), options);
    std::vector<float>& z = conditioningRows(out, options);
    const std::vector<float>& pooled = out.textEmbeds.empty() ? out.pooled : out.textEmbeds;
    const std::size_t pooledWidth = pooled.size() / rows;
    std::vector<PromptConditioning> result(prompts.size());
    for (std::size_t p = 0; p < prompts.size(); ++p) {
        PromptConditioning& c = result[p];
        c.chunks = static_cast<int>(count);
        c.channels = model.config().hiddenSize;
        // Each text's own first chunk, before emphasis (as encodePrompt on that text alone).
        c.pooledWidth = static_cast<int>(pooledWidth);
        c.pooled.assign(pooled.begin() + static_cast<std::ptrdiff_t>(p * count * pooledWidth),
                        pooled.begin() + static_cast<std::ptrdiff_t>((p * count + 1) * pooledWidth));
        c.values.assign(z.begin() + static_cast<std::ptrdiff_t>(p * count * t * d),
                        z.begin() + static_cast<std::ptrdiff_t>((p + 1) * count * t * d));
        // Emphasis per chunk on its own row: the mean of a batch of one, as encodePrompt takes it.
        for (std::size_t i = 0; i < count; ++i)
            applyEmphasis(std::span<float>(c.values).subspan(i * t * d, t * d), chunked.chunks[p][i].weights, 1,
                          kClipTextTokens, c.channels, options.emphasis);
    }
    return result;
}

PromptConditioning encodePrompt(const ClipTextModel& model, Backend& backend, const ClipTokenizer& tokenizer,
                                std::string_view prompt, const PromptConditioningOptions& options) {
    return encodePrompts(model, backend, tokenizer, {std::string(prompt)}, options);
}

}  // namespace tessera
