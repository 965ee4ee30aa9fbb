#include "core/models/t5/T5Graph.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "core/graph/GraphBuilder.h"

namespace tessera {

namespace {

using Shape = std::vector<std::int64_t>;

class T5EncoderBuilder {
public:
    explicit T5EncoderBuilder(const T5Config& c) : c_(c), d_(c.dModel) {}

    ModelGraph build(int tokens, bool hiddenStates) {
        const int ids = g_.addTokenInput("input_ids", tokens, 1);
        GraphOp e = newOp(OpKind::TokenEmbedding, "shared", ids);
        e.channels = d_;
        e.positionTable = false;
        e.params = {param(kT5SharedEmbedding, {c_.vocabSize, d_})};
        int h = g_.addOp(e, "hidden_states.0");
        std::vector<int> taps{h};
        const std::string encoder = kT5EncoderPrefix;
        for (int l = 0; l < c_.numLayers; ++l) {
            h = block(encoder + "block." + std::to_string(l), l, h, "hidden_states." + std::to_string(l + 1));
            taps.push_back(h);
        }
        const int last = rmsNorm(encoder + "final_layer_norm", h, "last_hidden_state");
        g_.markOutput(last);
        if (hiddenStates)
            for (std::size_t k = 0; k + 1 < taps.size(); ++k) g_.markOutput(taps[k]);
        return std::move(g_);
    }

private:
    int param(const std::string& name, Shape shape) { return g_.addParam(name, std::move(shape)); }

    int rmsNorm(const std::string& prefix, int x, const std::string& valueName = {}) {
        GraphOp op = newOp(OpKind::RMSNorm, prefix, x);
        op.eps = c_.layerNormEpsilon;
        op.params = {param(prefix + ".weight", {d_})};
        return g_.addOp(op, valueName);
    }

    // A Linear without bias (T5 v1.1 has none) of the weight `weight` [out, in].
    int linear(const std::string& name, int x, int weight, int out) {
        GraphOp op = newOp(OpKind::Linear, name, x);
        op.channels = out;
        op.bias = false;
        op.params = {weight};
        return g_.addOp(op);
    }

    // T5Block: T5LayerSelfAttention (layer.0) then T5LayerFF (layer.1), parameters in state-dict
    // order: SelfAttention.{q,k,v,o}, block 0's relative_attention_bias, layer_norm; then
    // DenseReluDense.{wi_0,wi_1,wo}, layer_norm.
    int block(const std::string& prefix, int index, int h, const std::string& valueName) {
        const std::string attn = prefix + ".layer.0.SelfAttention";
        const int inner = c_.innerDim();
        const int q = param(attn + ".q.weight", {inner, d_});
        const int k = param(attn + ".k.weight", {inner, d_});
        const int v = param(attn + ".v.weight", {inner, d_});
        const int o = param(attn + ".o.weight", {d_, inner});
        if (index == 0)
            relativeBias_ =
                param(attn + ".relative_attention_bias.weight", {c_.relativeAttentionNumBuckets, c_.numHeads});
        const int n = rmsNorm(prefix + ".layer.0.layer_norm", h);
        GraphOp a = newOp(OpKind::Attention, attn, n);
        a.heads = c_.numHeads;
        a.innerChannels = inner;
        a.qkvBias = false;
        a.bias = false;
        a.scoreScale = 1.0f;  // Mesh TensorFlow's convention: the init folds 1/sqrt(d_kv) into q
        a.buckets = c_.relativeAttentionNumBuckets;
        a.maxDistance = c_.relativeAttentionMaxDistance;
        a.params = {q, k, v, o, relativeBias_};
        const int h1 = g_.addOp(newOp(OpKind::Add, prefix + ".layer.0.residual", h, g_.addOp(a)));

        const std::string ff = prefix + ".layer.1.DenseReluDense";
        const int wi0 = param(ff + ".wi_0.weight", {c_.dFf, d_});
        const int wi1 = param(ff + ".wi_1.weight", {c_.dFf, d_});
        const int wo = param(ff + ".wo.weight", {d_, c_.dFf});
        const int n2 = rmsNorm(prefix + ".layer.1.layer_norm", h1);
        GraphOp act = newOp(OpKind::GELU, ff + ".act", linear(ff + ".wi_0", n2, wi0, c_.dFf));
        act.geluTanh = true;  // "gated-gelu" is gelu_new, the tanh approximation
        const int up = linear(ff + ".wi_1", n2, wi1, c_.dFf);
        const int product = g_.addOp(newOp(OpKind::Mul, ff + ".gate", g_.addOp(act), up));
        const int f = linear(ff + ".wo", product, wo, d_);
        return g_.addOp(newOp(OpKind::Add, prefix + ".layer.1.residual", h1, f), valueName);
    }

    const T5Config& c_;
    const int d_;
    int relativeBias_ = -1;
    ModelGraph g_;
};

}  // namespace

ModelGraph buildT5EncoderGraph(const T5Config& config, int tokens, bool hiddenStates) {
    if (tokens < 1 || tokens > kT5MaxTokens)
        throw std::invalid_argument("T5 sequence length: " + std::to_string(tokens) +
                                    " tokens; the encoder takes 1 to " + std::to_string(kT5MaxTokens) +
                                    " (FLUX.1 pads prompts to 512 or 256)");
    return T5EncoderBuilder(config).build(tokens, hiddenStates);
}

}  // namespace tessera
