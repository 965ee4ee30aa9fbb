#include "core/models/clip/TextualInversionEncoding.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "core/base/ValidationError.h"
#include "core/graph/Backend.h"
#include "core/models/clip/ClipTextGraph.h"

namespace tessera {

namespace {

constexpr std::size_t kTokens = kClipTextTokens;

// `graph` again with the token-embedding op's output made an input: every other op, parameter and
// output kept, in order.
ModelGraph withEmbeddingsInput(const ModelGraph& graph) {
    ModelGraph out;
    std::map<int, int> value, param;
    const auto paramId = [&](int id) {
        const auto it = param.find(id);
        if (it != param.end()) return it->second;
        const GraphParam& p = graph.param(id);
        return param[id] = out.addParam(p.name, p.shape);
    };
    for (const int input : graph.inputs()) value[input] = out.addInputValue(graph.value(input));
    for (const GraphOp& op : graph.ops()) {
        if (op.kind == OpKind::TokenEmbedding) {
            value[op.output] = out.addInputValue(graph.value(op.output));
            continue;
        }
        GraphOp copy = op;
        copy.input = op.input < 0 ? -1 : value.at(op.input);
        copy.input2 = op.input2 < 0 ? -1 : value.at(op.input2);
        copy.output = -1;
        for (int& p : copy.params) p = paramId(p);
        value[op.output] = out.addOp(copy, graph.value(op.output).name);
    }
    for (const int output : graph.outputs()) out.markOutput(value.at(output));
    return out;
}

// The checks encodeEachPrompt makes of the options, with its words.
void checkOptions(const ClipTextModel& model, const std::vector<std::string>& prompts,
                  const PromptConditioningOptions& options) {
    const int layers = model.config().numHiddenLayers;
    if (options.layer == PromptLayer::Penultimate && options.clipSkip != 1)
        throw ValidationError("clip skip", "clip skip: " + std::to_string(options.clipSkip) +
                                               " is not allowed here; this encoder's output is its penultimate layer "
                                               "(SDXL), so only 1");
    if (options.clipSkip < 1 || options.clipSkip > layers)
        throw ValidationError("clip skip", "clip skip: " + std::to_string(options.clipSkip) +
                                               " is not allowed; this text encoder has " + std::to_string(layers) +
                                               " layers, so 1 (the last layer) to " + std::to_string(layers));
    if (prompts.empty() || options.minChunks < 1 || options.minChunks > clip_text_limits::kMaxChunks)
        throw std::invalid_argument("encodeEachPromptWithEmbeddings: " + std::to_string(prompts.size()) +
                                    " prompts, minChunks " + std::to_string(options.minChunks));
}

// Each fix's embedding has vectors of this encoder's width.
void checkWidths(const EmbeddingDatabase& db, const std::vector<std::vector<PromptChunk>>& texts,
                 const ClipTextModel& model, const std::string& key) {
    const int width = model.config().hiddenSize;
    const std::string encoder = key.empty() ? "the text encoder" : "the " + key + " text encoder";
    for (const auto& chunks : texts)
        for (const PromptChunk& chunk : chunks)
            for (const PromptChunkFix& fix : chunk.fixes) {
                const TextualInversion& e = db.embeddings()[fix.embedding];
                const EmbeddingVectors* v = e.vectorsFor(key);
                std::string found;
                if (!v) {
                    found = e.byEncoder.count("clip_l") ? "SDXL's clip_l and clip_g vectors"
                                                        : "one tensor of vectors of width " +
                                                              std::to_string(e.byEncoder.begin()->second.width) +
                                                              " (an SD 1.x / 2.x embedding), no " + key + " vectors";
                } else if (v->width != width) {
                    found = "vectors of width " + std::to_string(v->width);
                } else {
                    continue;
                }
                throw ValidationError("prompt",
                                      "prompt: the embedding '" + e.name + "' (" + e.path + ") holds " + found + "; " +
                                          encoder + " of this model takes " + std::to_string(width) +
                                          (key.empty() ? "" : " (SDXL embeddings hold clip_l and clip_g)") +
                                          ". A1111 leaves such an embedding out and reads its name as words: take the "
                                          "name out of the prompt, or move the file out of the embeddings folders");
            }
}

// Token plus position embeddings of one chunk, each fix's vectors over its slots (as many as fit
// the 77: EmbeddingsWithFixes' emb_len = min(77 - offset - 1, n)).
void inputEmbeddings(const ClipTextModel& model, const EmbeddingDatabase& db, const std::string& key,
                     const PromptChunk& chunk, float* out) {
    const std::size_t d = static_cast<std::size_t>(model.config().hiddenSize);
    const HostTensor& table = model.tensors().at(std::string(kClipTextPrefix) + "embeddings.token_embedding.weight");
    const HostTensor& positions =
        model.tensors().at(std::string(kClipTextPrefix) + "embeddings.position_embedding.weight");
    std::vector<const float*> rows(kTokens);
    for (std::size_t n = 0; n < kTokens; ++n) rows[n] = table.data.data() + static_cast<std::size_t>(chunk.ids[n]) * d;
    for (const PromptChunkFix& fix : chunk.fixes) {
        const TextualInversion& e = db.embeddings()[fix.embedding];
        const EmbeddingVectors& v = *e.vectorsFor(key);
        const std::size_t first = static_cast<std::size_t>(fix.offset) + 1;
        const std::size_t count = std::min(kTokens - std::min(first, kTokens), static_cast<std::size_t>(e.vectors));
        for (std::size_t i = 0; i < count; ++i) rows[first + i] = v.values.data() + i * d;
    }
    for (std::size_t n = 0; n < kTokens; ++n)
        for (std::size_t c = 0; c < d; ++c) out[n * d + c] = rows[n][c] + positions.data[n * d + c];
}

// text_embeds = pooled W^T, as ClipTextModel::encode projects (double accumulation, same order).
std::vector<float> project(const ClipTextModel& model, const std::vector<float>& pooled, std::size_t rows) {
    const HostTensor& w = model.tensors().at(kClipTextProjection);
    const std::size_t p = static_cast<std::size_t>(model.config().projectionDim),
                      d = static_cast<std::size_t>(model.config().hiddenSize);
    std::vector<float> out(rows * p);
    for (std::size_t b = 0; b < rows; ++b)
        for (std::size_t o = 0; o < p; ++o) {
            double sum = 0;
            for (std::size_t i = 0; i < d; ++i) sum += double(w.data[o * d + i]) * double(pooled[b * d + i]);
            out[b * p + o] = static_cast<float>(sum);
        }
    return out;
}

// One row's conditioning (before emphasis) and pooled text.
struct RowResult {
    std::vector<float> z, pooled;
};

// The rows without embeddings through ClipTextModel::encode (its row memo), as encodeEachPrompt.
std::vector<RowResult> encodePlainRows(const ClipTextModel& model, Backend& backend,
                                       const std::vector<const PromptChunk*>& chunks,
                                       const PromptConditioningOptions& options) {
    std::vector<RowResult> out(chunks.size());
    if (chunks.empty()) return out;
    std::vector<std::int32_t> ids;
    for (const PromptChunk* c : chunks) ids.insert(ids.end(), c->ids.begin(), c->ids.end());
    const int layers = model.config().numHiddenLayers, batch = static_cast<int>(chunks.size());
    const bool penultimate = options.layer == PromptLayer::Penultimate;
    ClipTextOutputs o = penultimate ? model.encode(backend, ids, batch, layers, ClipHiddenStates::Penultimate)
                                    : model.encode(backend, ids, batch, layers - (options.clipSkip - 1));
    const std::vector<float>& z = penultimate ? o.hiddenStates.front() : o.lastHiddenState;
    const std::vector<float>& pooled = o.textEmbeds.empty() ? o.pooled : o.textEmbeds;
    const std::size_t zn = z.size() / chunks.size(), pn = pooled.size() / chunks.size();
    for (std::size_t r = 0; r < chunks.size(); ++r) {
        out[r].z.assign(z.begin() + static_cast<std::ptrdiff_t>(r * zn),
                        z.begin() + static_cast<std::ptrdiff_t>((r + 1) * zn));
        out[r].pooled.assign(pooled.begin() + static_cast<std::ptrdiff_t>(r * pn),
                             pooled.begin() + static_cast<std::ptrdiff_t>((r + 1) * pn));
    }
    return out;
}

// The rows with embeddings through the graph from input embeddings, in one batch.
std::vector<RowResult> encodeEmbeddedRows(const ClipTextModel& model, Backend& backend, const EmbeddingDatabase& db,
                                          const std::string& key, const std::vector<const PromptChunk*>& chunks,
                                          const PromptConditioningOptions& options) {
    std::vector<RowResult> out(chunks.size());
    if (chunks.empty()) return out;
    const ClipTextConfig& config = model.config();
    const bool penultimate = options.layer == PromptLayer::Penultimate;
    const int layers = penultimate ? config.numHiddenLayers : config.numHiddenLayers - (options.clipSkip - 1);
    const ClipHiddenStates hidden = penultimate ? ClipHiddenStates::Penultimate : ClipHiddenStates::None;
    const ModelGraph graph = fuseForExecution(buildClipTextGraphFromEmbeddings(config, layers, hidden));
    const std::size_t rows = chunks.size(), d = static_cast<std::size_t>(config.hiddenSize);
    std::vector<float> ids(rows * kTokens), embeds(rows * kTokens * d);
    for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t n = 0; n < kTokens; ++n) ids[r * kTokens + n] = static_cast<float>(chunks[r]->ids[n]);
        inputEmbeddings(model, db, key, *chunks[r], embeds.data() + r * kTokens * d);
    }
    const int batch = static_cast<int>(rows);
    backend.prepareGraph(graph, model.tensors(), batch, 1, 1);
    std::vector<float> last(rows * kTokens * d), pooled(rows * d), tap(penultimate ? rows * kTokens * d : 0);
    std::vector<float*> outputs{last.data(), pooled.data()};
    if (penultimate) outputs.push_back(tap.data());
    backend.run({ids.data(), embeds.data()}, batch, outputs);
    const std::vector<float>& z = penultimate ? tap : last;
    const std::vector<float> projected = config.withProjection ? project(model, pooled, rows) : pooled;
    const std::size_t pn = projected.size() / rows;
    for (std::size_t r = 0; r < rows; ++r) {
        out[r].z.assign(z.begin() + static_cast<std::ptrdiff_t>(r * kTokens * d),
                        z.begin() + static_cast<std::ptrdiff_t>((r + 1) * kTokens * d));
        out[r].pooled.assign(projected.begin() + static_cast<std::ptrdiff_t>(r * pn),
                             projected.begin() + static_cast<std::ptrdiff_t>((r + 1) * pn));
    }
    return out;
}

}  // namespace

ModelGraph buildClipTextGraphFromEmbeddings(const ClipTextConfig& config, int layersToRun,
                                            ClipHiddenStates hiddenStates) {
    return withEmbeddingsInput(buildClipTextGraph(config, layersToRun, hiddenStates));
}

EmbeddedPromptConditioning encodeEachPromptWithEmbeddings(const ClipTextModel& model, Backend& backend,
                                                          const ClipTokenizer& tokenizer,
                                                          const std::vector<std::string>& prompts,
                                                          const PromptConditioningOptions& options,
                                                          const std::string& encoderKey) {
    EmbeddedPromptConditioning result;
    result.used.resize(prompts.size());
    const EmbeddingDatabase* db = options.chunking.embeddings;
    checkOptions(model, prompts, options);
    std::vector<std::vector<PromptChunk>> texts;
    std::size_t count = static_cast<std::size_t>(options.minChunks);
    bool anyFix = false;
    for (const std::string& prompt : prompts) {
        texts.push_back(chunkPrompt(tokenizer, prompt, options.chunking).chunks);
        if (texts.back().size() > static_cast<std::size_t>(clip_text_limits::kMaxChunks))
            throw ValidationError("prompt", "prompt: " + std::to_string(texts.back().size()) +
                                                " chunks of 75 tokens; at most " +
                                                std::to_string(clip_text_limits::kMaxChunks) + " are allowed (" +
                                                std::to_string(clip_text_limits::kMaxChunks * 75) + " tokens)");
        count = std::max(count, texts.back().size());
        for (const PromptChunk& c : texts.back()) anyFix = anyFix || !c.fixes.empty();
    }
    if (!db || !anyFix) {
        result.texts = encodeEachPrompt(model, backend, tokenizer, prompts, options);
        return result;
    }
    checkWidths(*db, texts, model, encoderKey);
    PromptChunkOptions plain = options.chunking;
    plain.embeddings = nullptr;
    const PromptChunk empty = chunkPrompt(tokenizer, "", plain).chunks.front();
    for (auto& chunks : texts) chunks.resize(count, empty);

    // Rows (text, chunk) split by whether an embedding is in them; each kind in one batch.
    std::vector<const PromptChunk*> plainRows, embeddedRows;
    std::vector<std::pair<bool, std::size_t>> where;  // per row: (embedded, index in its kind)
    for (std::size_t p = 0; p < texts.size(); ++p)
        for (const PromptChunk& c : texts[p]) {
            auto& kind = c.fixes.empty() ? plainRows : embeddedRows;
            where.emplace_back(!c.fixes.empty(), kind.size());
            kind.push_back(&c);
            for (const PromptChunkFix& fix : c.fixes) {
                const TextualInversion* e = &db->embeddings()[fix.embedding];
                if (std::find(result.used[p].begin(), result.used[p].end(), e) == result.used[p].end())
                    result.used[p].push_back(e);
            }
        }
    const std::vector<RowResult> plainOut = encodePlainRows(model, backend, plainRows, options);
    const std::vector<RowResult> embeddedOut =
        encodeEmbeddedRows(model, backend, *db, encoderKey, embeddedRows, options);

    const std::size_t d = static_cast<std::size_t>(model.config().hiddenSize);
    for (std::size_t p = 0; p < texts.size(); ++p) {
        PromptConditioning c;
        c.chunks = static_cast<int>(count);
        c.channels = model.config().hiddenSize;
        c.values.reserve(count * kTokens * d);
        for (std::size_t i = 0; i < count; ++i) {
            const auto [embedded, index] = where[p * count + i];
            const RowResult& row = embedded ? embeddedOut[index] : plainOut[index];
            if (i == 0) {
                c.pooled = row.pooled;
                c.pooledWidth = static_cast<int>(row.pooled.size());
            }
            c.values.insert(c.values.end(), row.z.begin(), row.z.end());
            applyEmphasis(std::span<float>(c.values).subspan(i * kTokens * d, kTokens * d), texts[p][i].weights, 1,
                          kClipTextTokens, c.channels, options.emphasis);
        }
        result.texts.push_back(std::move(c));
    }
    return result;
}

}  // namespace tessera
