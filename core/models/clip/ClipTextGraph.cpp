#include "core/models/clip/ClipTextGraph.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "core/graph/GraphBuilder.h"

namespace tessera {

namespace {

using Shape = std::vector<std::int64_t>;

class ClipTextBuilder {
public:
    explicit ClipTextBuilder(const ClipTextConfig& c) : c_(c), d_(c.hiddenSize) {}

    ModelGraph build(int layersToRun, ClipHiddenStates hiddenStates) {
        const int ids = g_.addTokenInput("input_ids", kClipTextTokens, 1);
        const std::string emb = std::string(kClipTextPrefix) + "embeddings";
        GraphOp e;
        e.kind = OpKind::TokenEmbedding;
        e.name = emb;
        e.input = ids;
        e.channels = d_;
        e.params = {param(emb + ".token_embedding.weight", {c_.vocabSize, d_}),
                    param(emb + ".position_embedding.weight", {c_.maxPositionEmbeddings, d_})};
        int h = g_.addOp(e, "hidden_states.0");
        std::vector<int> taps{h};
        for (int l = 0; l < layersToRun; ++l) {
            h = encoderLayer(std::string(kClipTextPrefix) + "encoder.layers." + std::to_string(l), h,
                             "hidden_states." + std::to_string(l + 1));
            taps.push_back(h);
        }
        const int last = layerNorm(std::string(kClipTextPrefix) + "final_layer_norm", h, "last_hidden_state");
        GraphOp pool;
        pool.kind = OpKind::EosPool;
        pool.name = "pooler";
        pool.input = last;
        pool.input2 = ids;
        pool.token = c_.poolsAtArgmax() ? -1 : c_.eosTokenId;
        const int pooled = g_.addOp(pool, "pooler_output");
        g_.markOutput(last);
        g_.markOutput(pooled);
        if (hiddenStates == ClipHiddenStates::All)
            for (int v : taps) g_.markOutput(v);
        if (hiddenStates == ClipHiddenStates::Penultimate) g_.markOutput(taps[taps.size() - 2]);
        return std::move(g_);
    }

private:
    int param(const std::string& name, Shape shape) { return g_.addParam(name, std::move(shape)); }

    // weight [out, in] then bias [out]: their ids.
    std::vector<int> linearParams(const std::string& prefix, int in, int out) {
        return {param(prefix + ".weight", {out, in}), param(prefix + ".bias", {out})};
    }

    int layerNorm(const std::string& prefix, int x, const std::string& valueName = {}) {
        GraphOp op = newOp(OpKind::LayerNorm, prefix, x);
        op.eps = c_.layerNormEps;
        op.params = {param(prefix + ".weight", {d_}), param(prefix + ".bias", {d_})};
        return g_.addOp(op, valueName);
    }

    int linear(const std::string& prefix, int x, std::vector<int> params, int out) {
        GraphOp op = newOp(OpKind::Linear, prefix, x);
        op.channels = out;
        op.params = std::move(params);
        return g_.addOp(op);
    }

    int add(int a, int b, const std::string& name, const std::string& valueName = {}) {
        return g_.addOp(newOp(OpKind::Add, name, a, b), valueName);
    }

    // CLIPEncoderLayer (transformers models/clip/modeling_clip.py), parameters declared in its
    // state-dict order: self_attn.{k,v,q,out}_proj, layer_norm1, mlp.fc1, mlp.fc2, layer_norm2.
    int encoderLayer(const std::string& prefix, int h, const std::string& valueName) {
        const std::string attn = prefix + ".self_attn";
        const std::vector<int> k = linearParams(attn + ".k_proj", d_, d_);
        const std::vector<int> v = linearParams(attn + ".v_proj", d_, d_);
        const std::vector<int> q = linearParams(attn + ".q_proj", d_, d_);
        const std::vector<int> o = linearParams(attn + ".out_proj", d_, d_);
        const int x = layerNorm(prefix + ".layer_norm1", h);
        GraphOp a;
        a.kind = OpKind::Attention;
        a.name = attn;
        a.input = x;
        a.heads = c_.numAttentionHeads;
        a.causal = true;
        a.params = {q[0], q[1], k[0], k[1], v[0], v[1], o[0], o[1]};
        const int h1 = add(h, g_.addOp(a), prefix + ".attn_residual");

        const std::string mlp = prefix + ".mlp";
        const std::vector<int> fc1 = linearParams(mlp + ".fc1", d_, c_.intermediateSize);
        const std::vector<int> fc2 = linearParams(mlp + ".fc2", c_.intermediateSize, d_);
        const int y = layerNorm(prefix + ".layer_norm2", h1);
        GraphOp act;
        act.kind = c_.hiddenAct == ClipActivation::QuickGelu ? OpKind::QuickGELU : OpKind::GELU;
        act.geluTanh = c_.hiddenAct == ClipActivation::GeluTanh;
        act.name = mlp + ".act";
        act.input = linear(mlp + ".fc1", y, fc1, c_.intermediateSize);
        const int f = linear(mlp + ".fc2", g_.addOp(act), fc2, d_);
        return add(h1, f, prefix + ".mlp_residual", valueName);
    }

    const ClipTextConfig& c_;
    const int d_;
    ModelGraph g_;
};

}  // namespace

ModelGraph buildClipTextGraph(const ClipTextConfig& config, int layersToRun, ClipHiddenStates hiddenStates) {
    if (layersToRun < 1 || layersToRun > config.numHiddenLayers)
        throw std::invalid_argument("clip skip: the text encoder has " + std::to_string(config.numHiddenLayers) +
                                    " layers; running " + std::to_string(layersToRun) +
                                    " of them is not possible (1 to " + std::to_string(config.numHiddenLayers) + ")");
    if (config.maxPositionEmbeddings < kClipTextTokens)
        throw std::invalid_argument("max_position_embeddings: " + std::to_string(config.maxPositionEmbeddings) +
                                    " positions are fewer than the " + std::to_string(kClipTextTokens) +
                                    " tokens SD's prompts are framed to");
    return ClipTextBuilder(config).build(layersToRun, hiddenStates);
}

}  // namespace tessera
