#include "core/graph/ModelGraph.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>
#include <stdexcept>

namespace tessera {

const char* toString(OpKind k) {
    switch (k) {
        case OpKind::Affine:
            return "affine";
        case OpKind::SiLU:
            return "silu";
        case OpKind::Add:
            return "add";
        case OpKind::ScaleShift:
            return "scale_shift";
        case OpKind::TimestepEmbedding:
            return "timestep_embedding";
        case OpKind::Linear:
            return "linear";
        case OpKind::Conv:
            return "conv";
        case OpKind::GroupNorm:
            return "group_norm";
        case OpKind::Attention:
            return "attention";
        case OpKind::Concat:
            return "concat";
        case OpKind::Upsample:
            return "upsample";
        case OpKind::ToTokens:
            return "to_tokens";
        case OpKind::ToFeatureMap:
            return "to_feature_map";
        case OpKind::LayerNorm:
            return "layer_norm";
        case OpKind::GEGLU:
            return "geglu";
        case OpKind::GELU:
            return "gelu";
        case OpKind::QuickGELU:
            return "quick_gelu";
        case OpKind::TokenEmbedding:
            return "token_embedding";
        case OpKind::EosPool:
            return "eos_pool";
        case OpKind::LeakyReLU:
            return "leaky_relu";
        case OpKind::PReLU:
            return "prelu";
        case OpKind::PixelShuffle:
            return "pixel_shuffle";
        case OpKind::PixelUnshuffle:
            return "pixel_unshuffle";
        case OpKind::Sigmoid:
            return "sigmoid";
        case OpKind::Mul:
            return "mul";
        case OpKind::RMSNorm:
            return "rms_norm";
        case OpKind::ColorFix:
            return "color_fix";
        case OpKind::ChannelSlice:
            return "channel_slice";
        case OpKind::AdaLayerNorm:
            return "ada_layer_norm";
        case OpKind::GatedAdd:
            return "gated_add";
        case OpKind::QkNormRope:
            return "qk_norm_rope";
        case OpKind::PackedAttention:
            return "packed_attention";
        case OpKind::TokenConcat:
            return "token_concat";
        case OpKind::TokenSplit:
            return "token_split";
    }
    return "?";
}

std::vector<int> GraphOp::operands() const {
    std::vector<int> ids;
    for (int v : {input, input2, preAdd, scaleShift, residual, hintLatent, timesteps, condMark, gate})
        if (v >= 0) ids.push_back(v);
    return ids;
}

namespace {

using Shape = std::vector<std::int64_t>;

std::string shapeText(const Shape& s) {
    std::string t = "[";
    for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
    return t + "]";
}

bool sameShape(const GraphValue& a, const GraphValue& b) {
    return a.kind == b.kind && a.channels == b.channels && a.divisor == b.divisor && a.tokens == b.tokens;
}

bool isMap(const GraphValue& v) { return v.kind == ValueKind::FeatureMap; }
bool isVector(const GraphValue& v) { return v.kind == ValueKind::Vector; }
bool isTokens(const GraphValue& v) { return v.kind == ValueKind::Tokens; }
// Feature maps, the tokens of one and sequences that join fixed tokens to them: their size follows the tile.
bool followsTile(const GraphValue& v) { return isMap(v) || (isTokens(v) && v.divisor > 0); }
bool isFixedTokens(const GraphValue& v) { return isTokens(v) && v.tokens > 0 && v.divisor == 0; }
bool isTileTokens(const GraphValue& v) { return isTokens(v) && v.tokens == 0 && v.divisor > 0; }
bool isJoinedTokens(const GraphValue& v) { return isTokens(v) && v.tokens > 0 && v.divisor > 0; }

}  // namespace

int ModelGraph::addValue(std::string name, ValueKind kind, int channels, int divisor, int tokens) {
    // Tokens with a count and no divisor are fixed; with both, a joined sequence.
    const bool counted = kind == ValueKind::Tokens && tokens > 0;
    values_.push_back(GraphValue{std::move(name), kind, channels,
                                 kind == ValueKind::Vector || (counted && divisor < 1) ? 0 : divisor,
                                 counted ? tokens : 0});
    return static_cast<int>(values_.size()) - 1;
}

int ModelGraph::addInput(std::string name, ValueKind kind, int channels, int divisor) {
    if (channels < 1 || (kind != ValueKind::Vector && divisor < 1))
        throw std::logic_error("ModelGraph: input '" + name + "' needs channels >= 1 and divisor >= 1");
    const int id = addValue(std::move(name), kind, channels, divisor);
    inputs_.push_back(id);
    return id;
}

int ModelGraph::addTokenInput(std::string name, int tokens, int channels) {
    if (channels < 1 || tokens < 1)
        throw std::logic_error("ModelGraph: input '" + name + "' needs channels >= 1 and tokens >= 1");
    const int id = addValue(std::move(name), ValueKind::Tokens, channels, 0, tokens);
    inputs_.push_back(id);
    return id;
}

int ModelGraph::addInputValue(const GraphValue& v) {
    if (isJoinedTokens(v)) {
        const int id = addValue(v.name, ValueKind::Tokens, v.channels, v.divisor, v.tokens);
        inputs_.push_back(id);
        return id;
    }
    return v.kind == ValueKind::Tokens && v.tokens > 0 ? addTokenInput(v.name, v.tokens, v.channels)
                                                       : addInput(v.name, v.kind, v.channels, v.divisor);
}

int ModelGraph::addParam(std::string name, std::vector<std::int64_t> shape) {
    params_.push_back(GraphParam{std::move(name), std::move(shape)});
    return static_cast<int>(params_.size()) - 1;
}

void ModelGraph::markOutput(int value) {
    if (value < 0 || value >= static_cast<int>(values_.size()))
        throw std::logic_error("ModelGraph: output " + std::to_string(value) + " is not a value of the graph");
    outputs_.push_back(value);
}

namespace {

[[noreturn]] void failOp(const GraphOp& op, const std::string& what) {
    throw std::logic_error("ModelGraph: op '" + op.name + "' (" + toString(op.kind) + "): " + what);
}

// A convolution keeps the size (stride 1) or halves it (stride 2), padding the bottom/right as
// much as the top/left or one more.
std::vector<Shape> convParams(const GraphOp& op, const GraphValue& x) {
    if (!isMap(x) || op.channels < 1 || op.kernel < 1) failOp(op, "needs a feature map, channels >= 1 and kernel >= 1");
    const int pad = op.padBegin + op.padEnd;
    const bool sizeKept = op.stride == 1 && pad == op.kernel - 1;
    const bool halved = op.stride == 2 && pad >= op.kernel - 2 && pad <= op.kernel - 1;
    if (!(sizeKept || halved) || op.padBegin < 0 || (op.padEnd != op.padBegin && op.padEnd != op.padBegin + 1))
        failOp(op, "stride " + std::to_string(op.stride) + ", padding " + std::to_string(op.padBegin) + "+" +
                       std::to_string(op.padEnd) + " for kernel " + std::to_string(op.kernel) +
                       " does not keep or halve the size (or pads the bottom/right less than, or 2+ more than, the "
                       "top/left)");
    return {{op.channels, x.channels, op.kernel, op.kernel}, {op.channels}};
}

// The operand contracts of FLUX's transformer ops (one function, so expectedParams stays one
// short case per kind); `operand` reads a value by id for its role.
std::vector<Shape> transformerParams(const GraphOp& op, const GraphValue& x,
                                     const std::function<const GraphValue&(int, const char*)>& operand) {
    const std::int64_t C = x.channels;
    switch (op.kind) {
        case OpKind::ChannelSlice:
            if ((!isVector(x) && !isTokens(x)) || op.offset < 0 || op.channels < 1 || op.offset + op.channels > C)
                failOp(op, "needs a vector or tokens and a channel range inside its " + std::to_string(C));
            return {};
        case OpKind::AdaLayerNorm: {
            const GraphValue& m = operand(op.input2, "input2");
            if (!isTokens(x) || !isVector(m) || !(op.eps > 0.0f) || op.shiftAt < 0 || op.scaleAt < 0 ||
                op.shiftAt + C > m.channels || op.scaleAt + C > m.channels)
                failOp(op, "needs tokens, eps > 0 and a vector holding the shift and scale at the offsets");
            return {};
        }
        case OpKind::GatedAdd: {
            const GraphValue& y = operand(op.input2, "input2");
            const GraphValue& m = operand(op.gate, "gate");
            if (!isTokens(x) || !sameShape(x, y) || !isVector(m) || op.gateAt < 0 || op.gateAt + C > m.channels)
                failOp(op, "needs two token values of one shape and a vector holding the gate at its offset");
            return {};
        }
        case OpKind::QkNormRope: {
            const std::int64_t D = C / 3, d = op.heads > 0 ? D / op.heads : 0;
            const int axes = op.ropeAxes[0] + op.ropeAxes[1] + op.ropeAxes[2];
            if (!isTokens(x) || C % 3 != 0 || op.heads < 1 || D % op.heads != 0 || axes != d || op.ropeAxes[0] % 2 ||
                op.ropeAxes[1] % 2 || op.ropeAxes[2] % 2 || op.ropeAxes[0] < 0 || op.ropeAxes[1] < 0 ||
                op.ropeAxes[2] < 0 || !(op.eps > 0.0f) || !(op.ropeTheta > 0.0f))
                failOp(op,
                       "needs tokens of q | k | v whose heads divide them, even position axes summing to the "
                       "head's channels, eps > 0 and theta > 0");
            return {{d}, {d}};
        }
        case OpKind::PackedAttention:
            if (!isTokens(x) || C % 3 != 0 || op.heads < 1 || (C / 3) % op.heads != 0)
                failOp(op, "needs tokens of q | k | v whose heads divide them");
            return {};
        case OpKind::TokenConcat: {
            const GraphValue& b = operand(op.input2, "input2");
            if (!isFixedTokens(x) || !isTileTokens(b) || b.channels != x.channels)
                failOp(op, "needs tokens of a fixed count, then tokens that follow the tile, of one width");
            return {};
        }
        case OpKind::TokenSplit:
            if (!isJoinedTokens(x)) failOp(op, "needs a joined token sequence");
            return {};
        default:
            break;
    }
    failOp(op, "is not a transformer op");
}

}  // namespace

void ModelGraph::checkOp(const GraphOp& op) const {
    const GraphValue& x = operandOf(op, op.input, "input");
    checkParams(op, expectedParams(op, x));
    checkFusions(op, x);
}

const GraphValue& ModelGraph::operandOf(const GraphOp& op, int id, const char* role) const {
    if (id < 0 || id >= static_cast<int>(values_.size()))
        failOp(op, std::string(role) + " is not a value of the graph");
    return values_[static_cast<std::size_t>(id)];
}

void ModelGraph::checkParams(const GraphOp& op, const std::vector<Shape>& shapes) const {
    if (op.params.size() != shapes.size())
        failOp(op, "takes " + std::to_string(shapes.size()) + " parameters, has " + std::to_string(op.params.size()));
    for (std::size_t i = 0; i < shapes.size(); ++i) {
        const int id = op.params[i];
        if (id < 0 || id >= static_cast<int>(params_.size()))
            failOp(op, "parameter " + std::to_string(id) + " is not declared");
        const GraphParam& p = params_[static_cast<std::size_t>(id)];
        if (p.shape != shapes[i])
            failOp(op, p.name + " has shape " + shapeText(p.shape) + ", expected " + shapeText(shapes[i]));
    }
}

// One short case per OpKind, so every kind's operand contract reads in one place beside toString
// and flops; the longer ones (Conv, Attention, TokenEmbedding) in their own functions.
std::vector<Shape> ModelGraph::expectedParams(const GraphOp& op, const GraphValue& x) const {
    const std::int64_t C = x.channels, out = op.channels;
    switch (op.kind) {
        case OpKind::Affine:
        case OpKind::SiLU:
        case OpKind::GELU:
        case OpKind::QuickGELU:
        case OpKind::LeakyReLU:
        case OpKind::Sigmoid:
            return {};
        case OpKind::PReLU:
            if (!isMap(x)) failOp(op, "needs a feature map");
            return {{C}};
        case OpKind::Mul: {
            const GraphValue& b = operandOf(op, op.input2, "input2");
            if (!sameShape(x, b)) failOp(op, "operands '" + x.name + "' and '" + b.name + "' differ in shape");
            return {};
        }
        case OpKind::PixelShuffle:
            if (!isMap(x) || op.factor < 1 || x.divisor % op.factor != 0 || x.channels % (op.factor * op.factor) != 0)
                failOp(op, "needs a feature map whose divisor the factor divides and whose channels factor^2 divides");
            return {};
        case OpKind::PixelUnshuffle:
            if (!isMap(x) || op.factor < 1) failOp(op, "needs a feature map and factor >= 1");
            return {};
        case OpKind::Add: {
            const GraphValue& b = operandOf(op, op.input2, "input2");
            if (!sameShape(x, b) && !(isMap(x) && isVector(b) && b.channels == x.channels))
                failOp(op, "operands '" + x.name + "' and '" + b.name + "' differ in shape");
            return {};
        }
        case OpKind::ScaleShift: {
            const GraphValue& v = operandOf(op, op.input2, "input2");
            if (!isMap(x) || !isVector(v) || v.channels != 2 * x.channels)
                failOp(op, "needs a feature map of C and a vector of 2C");
            return {};
        }
        case OpKind::TimestepEmbedding:
            if (!isVector(x) || x.channels != 1 || op.channels < 1)
                failOp(op, "needs a vector [B, 1] and channels >= 1");
            return {};
        case OpKind::Linear:
            if ((!isVector(x) && !isTokens(x)) || op.channels < 1)
                failOp(op, "needs a vector or tokens input and channels >= 1");
            if (!op.bias) return {{out, C}};
            return {{out, C}, {out}};
        case OpKind::Conv:
            return convParams(op, x);
        case OpKind::GroupNorm:
            if (!isMap(x) || op.groups < 1 || x.channels % op.groups != 0 || !(op.eps > 0.0f))
                failOp(op, "needs a feature map whose channels the groups divide, and eps > 0");
            return {{C}, {C}};
        case OpKind::Attention:
            return attentionParams(op, x);
        case OpKind::Concat: {
            const GraphValue& b = operandOf(op, op.input2, "input2");
            const bool maps = isMap(x) && isMap(b) && b.divisor == x.divisor;
            const bool tokens = isTokens(x) && isTokens(b) && b.divisor == x.divisor && b.tokens == x.tokens;
            if (!maps && !tokens) failOp(op, "needs two feature maps of one size or two token sequences of one length");
            return {};
        }
        case OpKind::Upsample:
            if (!isMap(x) || op.factor < 1 || x.divisor % op.factor != 0)
                failOp(op, op.factor == 2 ? std::string("needs a feature map of an even divisor")
                                          : "needs a feature map whose divisor the factor " +
                                                std::to_string(op.factor) + " divides");
            return {};
        case OpKind::ToTokens:
            if (!isMap(x)) failOp(op, "needs a feature map");
            return {};
        case OpKind::ToFeatureMap:
            if (!isTokens(x) || x.tokens != 0) failOp(op, "needs tokens that follow the tile (one per pixel)");
            return {};
        case OpKind::LayerNorm:
            if (!isTokens(x) || !(op.eps > 0.0f)) failOp(op, "needs tokens and eps > 0");
            return {{C}, {C}};
        case OpKind::RMSNorm:
            if (!isTokens(x) || !(op.eps > 0.0f)) failOp(op, "needs tokens and eps > 0");
            return {{C}};
        case OpKind::GEGLU:
            if (!isTokens(x) || op.channels < 1) failOp(op, "needs tokens and channels >= 1");
            return {{2 * out, C}, {2 * out}};
        case OpKind::TokenEmbedding:
            return tokenEmbeddingParams(op, x);
        case OpKind::ColorFix: {
            const GraphValue& xt = operandOf(op, op.input2, "input2");
            const GraphValue& z = operandOf(op, op.hintLatent, "hintLatent");
            const GraphValue& t = operandOf(op, op.timesteps, "timesteps");
            const GraphValue& m = operandOf(op, op.condMark, "condMark");
            if (!isMap(x) || !sameShape(x, xt) || !sameShape(x, z) || !isVector(t) || t.channels != 1 || !isVector(m) ||
                m.channels != 2 || op.radius < 0 || !(op.scale >= 0.0f && op.scale <= 1.0f) || op.params.size() != 1)
                failOp(op,
                       "needs eps, x_t and the hint latent of one feature-map shape, the timesteps [B, 1], the "
                       "mark [B, 2], radius >= 0, a weight in [0, 1] and the DDPM table");
            const int id = op.params.front();
            const std::int64_t T = id >= 0 && id < static_cast<int>(params_.size()) &&
                                           params_[static_cast<std::size_t>(id)].shape.size() == 2
                                       ? params_[static_cast<std::size_t>(id)].shape[1]
                                       : 0;
            if (T < 1) failOp(op, "needs a DDPM table [2, T]");
            return {{2, T}};
        }
        case OpKind::ChannelSlice:
        case OpKind::AdaLayerNorm:
        case OpKind::GatedAdd:
        case OpKind::QkNormRope:
        case OpKind::PackedAttention:
        case OpKind::TokenConcat:
        case OpKind::TokenSplit:
            return transformerParams(
                op, x, [&](int id, const char* role) -> const GraphValue& { return operandOf(op, id, role); });
        case OpKind::EosPool: {
            const GraphValue& ids = operandOf(op, op.input2, "input2");
            if (!isTokens(x) || x.tokens < 1 || !isTokens(ids) || ids.channels != 1 || ids.tokens != x.tokens ||
                op.token < -1)
                failOp(op, "needs tokens of a fixed count, their ids [B, N, 1] and token >= -1");
            return {};
        }
    }
    failOp(op, "is not a kind of op");
}

std::vector<Shape> ModelGraph::attentionParams(const GraphOp& op, const GraphValue& x) const {
    const std::int64_t C = x.channels;
    const std::int64_t inner = op.innerChannels > 0 ? op.innerChannels : C;
    if ((!isMap(x) && !isTokens(x)) || op.heads < 1 || op.innerChannels < 0 || inner % op.heads != 0)
        failOp(op, "needs a feature map or tokens whose channels (or inner channels) the heads divide");
    if (inner != C && !isTokens(x)) failOp(op, "inner channels other than the input's need tokens");
    if (op.scoreScale < 0.0f || !std::isfinite(op.scoreScale))
        failOp(op, "the score scale must be finite and >= 0 (0: 1/sqrt(d))");
    std::int64_t kv = C;
    if (op.input2 >= 0) {
        const GraphValue& context = operandOf(op, op.input2, "context");
        if (!isTokens(x) || !isTokens(context))
            failOp(op, "takes a context only for tokens, and the context must be tokens");
        kv = context.channels;
    }
    if (op.causal && (!isTokens(x) || op.input2 >= 0)) failOp(op, "a causal mask needs tokens and no context");
    if (op.buckets != 0 && (op.buckets < 4 || op.buckets % 2 != 0 || op.maxDistance <= op.buckets / 4 || !isTokens(x) ||
                            op.input2 >= 0 || op.causal))
        failOp(op,
               "a relative position bias needs tokens without context or causal mask, an even bucket count >= 4 "
               "and maxDistance above a quarter of it");
    std::vector<Shape> shapes{{inner, C}};
    if (op.qkvBias) shapes.push_back({inner});
    for (int k = 0; k < 2; ++k) {
        shapes.push_back({inner, kv});
        if (op.qkvBias) shapes.push_back({inner});
    }
    shapes.push_back({C, inner});
    if (op.bias) shapes.push_back({C});
    if (op.buckets > 0) shapes.push_back({op.buckets, op.heads});
    return shapes;
}

std::vector<Shape> ModelGraph::tokenEmbeddingParams(const GraphOp& op, const GraphValue& x) const {
    if (!isTokens(x) || x.tokens < 1 || x.channels != 1 || op.channels < 1)
        failOp(op, "needs ids as tokens [B, N, 1] of a fixed count and channels >= 1");
    // The tables' row counts (vocabulary, positions) are the parameters' own.
    auto rowsOf = [&](std::size_t i) -> std::int64_t {
        if (i >= op.params.size() || op.params[i] < 0 || op.params[i] >= static_cast<int>(params_.size())) return 0;
        const Shape& s = params_[static_cast<std::size_t>(op.params[i])].shape;
        return s.empty() ? 0 : s[0];
    };
    if (!op.positionTable) {
        if (rowsOf(0) < 1) failOp(op, "needs a token table");
        return {{rowsOf(0), op.channels}};
    }
    if (rowsOf(0) < 1 || rowsOf(1) < x.tokens)
        failOp(op, "needs a token table and a position table of at least " + std::to_string(x.tokens) + " rows");
    return {{rowsOf(0), op.channels}, {rowsOf(1), op.channels}};
}

// The second operand and the fused epilogues (SiLU, pre-add, FiLM, output scale, residual) only
// where fuseForExecution puts them and the backends run them.
void ModelGraph::checkFusions(const GraphOp& op, const GraphValue& x) const {
    if (op.input2 >= 0 && op.kind != OpKind::Add && op.kind != OpKind::ScaleShift && op.kind != OpKind::Concat &&
        op.kind != OpKind::EosPool && op.kind != OpKind::Attention && op.kind != OpKind::Mul &&
        op.kind != OpKind::ColorFix && op.kind != OpKind::AdaLayerNorm && op.kind != OpKind::GatedAdd &&
        op.kind != OpKind::TokenConcat)
        failOp(op, "takes no second operand");
    if (op.gate >= 0 && op.kind != OpKind::GatedAdd) failOp(op, "takes no gate");
    if ((op.hintLatent >= 0 || op.timesteps >= 0 || op.condMark >= 0) && op.kind != OpKind::ColorFix)
        failOp(op, "takes no hint latent, timesteps or mark");
    if (op.leakyRelu && op.kind != OpKind::Conv) failOp(op, "cannot carry a LeakyReLU");
    if (op.silu && !(op.kind == OpKind::Linear && isVector(x)) && op.kind != OpKind::GroupNorm)
        failOp(op, "cannot carry a SiLU");
    if ((op.preAdd >= 0 || op.scaleShift >= 0) && op.kind != OpKind::GroupNorm)
        failOp(op, "cannot carry a pre-add or FiLM");
    if (op.preAdd >= 0) {
        const GraphValue& v = operandOf(op, op.preAdd, "preAdd");
        if (!isVector(v) || v.channels != x.channels) failOp(op, "preAdd must be a vector of the input's channels");
    }
    if (op.scaleShift >= 0) {
        const GraphValue& v = operandOf(op, op.scaleShift, "scaleShift");
        if (!isVector(v) || v.channels != 2 * x.channels)
            failOp(op, "scaleShift must be a vector of twice the input's channels");
    }
    const bool epilogue = op.kind == OpKind::Conv || op.kind == OpKind::Attention;
    const bool residualOnly = op.kind == OpKind::ToFeatureMap || (op.kind == OpKind::Linear && isTokens(x));
    if (op.outputScale != 1.0f && !epilogue) failOp(op, "cannot carry an output scale");
    if (op.residual >= 0 && !epilogue && !residualOnly) failOp(op, "cannot carry a residual");
    if (op.residual >= 0) {
        const GraphValue& r = operandOf(op, op.residual, "residual");
        GraphValue expected = x;
        if (op.kind == OpKind::Conv)
            expected = GraphValue{"", ValueKind::FeatureMap, op.channels, x.divisor * op.stride, 0};
        if (op.kind == OpKind::Linear) expected.channels = op.channels;
        if (op.kind == OpKind::ToFeatureMap) expected.kind = ValueKind::FeatureMap;
        if (!sameShape(r, expected)) failOp(op, "residual '" + r.name + "' differs in shape");
    }
}

int ModelGraph::inferOutput(const GraphOp& op, std::string name) {
    const GraphValue x = values_[static_cast<std::size_t>(op.input)];
    switch (op.kind) {
        case OpKind::TimestepEmbedding:
            return addValue(std::move(name), ValueKind::Vector, op.channels, 0);
        case OpKind::Linear:
        case OpKind::GEGLU:
            return addValue(std::move(name), x.kind, op.channels, x.divisor, x.tokens);
        case OpKind::ToTokens:
            return addValue(std::move(name), ValueKind::Tokens, x.channels, x.divisor);
        case OpKind::ToFeatureMap:
            return addValue(std::move(name), ValueKind::FeatureMap, x.channels, x.divisor);
        case OpKind::Conv:
            return addValue(std::move(name), ValueKind::FeatureMap, op.channels, x.divisor * op.stride);
        case OpKind::Concat:
            return addValue(std::move(name), x.kind, x.channels + values_[static_cast<std::size_t>(op.input2)].channels,
                            x.divisor, x.tokens);
        case OpKind::ChannelSlice:
            return addValue(std::move(name), x.kind, op.channels, x.divisor, x.tokens);
        case OpKind::PackedAttention:
            return addValue(std::move(name), ValueKind::Tokens, x.channels / 3, x.divisor, x.tokens);
        case OpKind::TokenConcat:
            return addValue(std::move(name), ValueKind::Tokens, x.channels,
                            values_[static_cast<std::size_t>(op.input2)].divisor, x.tokens);
        case OpKind::TokenSplit:
            return op.tail ? addValue(std::move(name), ValueKind::Tokens, x.channels, x.divisor)
                           : addValue(std::move(name), ValueKind::Tokens, x.channels, 0, x.tokens);
        case OpKind::Upsample:
            return addValue(std::move(name), ValueKind::FeatureMap, x.channels, x.divisor / op.factor);
        case OpKind::PixelShuffle:
            return addValue(std::move(name), ValueKind::FeatureMap, x.channels / (op.factor * op.factor),
                            x.divisor / op.factor);
        case OpKind::PixelUnshuffle:
            return addValue(std::move(name), ValueKind::FeatureMap, x.channels * op.factor * op.factor,
                            x.divisor * op.factor);
        case OpKind::TokenEmbedding:
            return addValue(std::move(name), ValueKind::Tokens, op.channels, 0, x.tokens);
        case OpKind::EosPool:
            return addValue(std::move(name), ValueKind::Vector, x.channels, 0);
        default:
            return addValue(std::move(name), x.kind, x.channels, x.divisor, x.tokens);
    }
}

int ModelGraph::addOp(GraphOp op, std::string valueName) {
    checkOp(op);
    op.output = inferOutput(op, valueName.empty() ? op.name : std::move(valueName));
    ops_.push_back(std::move(op));
    return ops_.back().output;
}

int ModelGraph::downsampleFactor() const {
    int f = 1;
    for (const GraphValue& v : values_)
        if (followsTile(v)) f = std::max(f, v.divisor);
    return f;
}

void ModelGraph::checkTileSize(int h, int w) const {
    const int f = downsampleFactor();
    auto check = [f](const char* what, int v) {
        if (v <= 0 || v % f != 0)
            throw std::invalid_argument(std::string("tile ") + what + " " + std::to_string(v) +
                                        " is not a positive multiple of " + std::to_string(f) +
                                        ", the model's downsampling factor");
    };
    check("height", h);
    check("width", w);
}

std::vector<std::int64_t> ModelGraph::shape(int id, int batch, int h, int w) const {
    const GraphValue& v = value(id);
    if (isVector(v)) return {batch, v.channels};
    if (isTokens(v)) return {batch, rows(id, h, w), v.channels};
    return {batch, v.channels, h / v.divisor, w / v.divisor};
}

std::int64_t ModelGraph::rows(int id, int h, int w) const {
    const GraphValue& v = value(id);
    if (isVector(v)) return 1;
    if (isFixedTokens(v)) return v.tokens;
    return std::int64_t(v.tokens) + std::int64_t(h / v.divisor) * (w / v.divisor);
}

std::int64_t ModelGraph::elements(int id, int batch, int h, int w) const {
    std::int64_t n = 1;
    for (std::int64_t d : shape(id, batch, h, w)) n *= d;
    return n;
}

double ModelGraph::flops(const GraphOp& op, int h, int w) const {
    const GraphValue& x = value(op.input);
    const double outPixels = double(rows(op.output, h, w));
    switch (op.kind) {
        case OpKind::Conv:
            return 2.0 * op.channels * x.channels * op.kernel * op.kernel * outPixels;
        case OpKind::Linear:
            return 2.0 * x.channels * op.channels * outPixels;
        case OpKind::GEGLU:
            return 2.0 * x.channels * 2.0 * op.channels * outPixels;
        case OpKind::Attention: {
            const double C = x.channels, N = outPixels;
            const double I = op.innerChannels > 0 ? op.innerChannels : C;
            const double M = op.input2 >= 0 ? double(rows(op.input2, h, w)) : N;
            const double kv = op.input2 >= 0 ? double(value(op.input2).channels) : C;
            return 2.0 * 2.0 * C * I * N + 2.0 * 2.0 * kv * I * M + 2.0 * 2.0 * N * M * I;
        }
        case OpKind::PackedAttention:  // Q K^T and A V
            return 2.0 * 2.0 * outPixels * outPixels * (static_cast<double>(x.channels) / 3.0);
        default:
            return 0.0;
    }
}

double ModelGraph::flops(int h, int w) const {
    double total = 0;
    for (const GraphOp& op : ops_) total += flops(op, h, w);
    return total;
}

std::int64_t ModelGraph::parameterCount() const {
    std::int64_t n = 0;
    for (const GraphParam& p : params_) {
        std::int64_t e = 1;
        for (std::int64_t d : p.shape) e *= d;
        n += e;
    }
    return n;
}

std::vector<std::pair<std::string, std::vector<std::int64_t>>> ModelGraph::parameterList() const {
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> list;
    list.reserve(params_.size());
    for (const GraphParam& p : params_) list.emplace_back(p.name, p.shape);
    return list;
}

std::vector<int> ModelGraph::lastUse() const {
    std::vector<int> last(values_.size(), -1);
    for (std::size_t i = 0; i < ops_.size(); ++i)
        for (int v : ops_[i].operands()) last[static_cast<std::size_t>(v)] = static_cast<int>(i);
    for (int v : outputs_) last[static_cast<std::size_t>(v)] = static_cast<int>(ops_.size());
    return last;
}

ModelGraph ModelGraph::extract(std::size_t index) const {
    const GraphOp& src = ops_.at(index);
    ModelGraph g;
    GraphOp op = src;
    std::vector<std::pair<int, int>> mapped;  // old value id -> new
    auto remap = [&](int& id) {
        if (id < 0) return;
        for (const auto& [from, to] : mapped)
            if (from == id) {
                id = to;
                return;
            }
        const int fresh = g.addInputValue(value(id));
        mapped.emplace_back(id, fresh);
        id = fresh;
    };
    for (int* id : {&op.input, &op.input2, &op.preAdd, &op.scaleShift, &op.residual, &op.hintLatent, &op.timesteps,
                    &op.condMark, &op.gate})
        remap(*id);
    for (int& p : op.params) p = g.addParam(param(p).name, param(p).shape);
    g.markOutput(g.addOp(std::move(op), value(src.output).name));
    return g;
}

std::string ModelGraph::describe(const GraphOp& op) const {
    const GraphValue& x = value(op.input);
    const GraphValue& y = value(op.output);
    std::ostringstream s;
    s << toString(op.kind);
    switch (op.kind) {
        case OpKind::Conv:
            s << ' ' << op.kernel << 'x' << op.kernel << '/' << op.stride << " pad " << op.padBegin << '+' << op.padEnd
              << ' ' << x.channels << "->" << op.channels;
            break;
        case OpKind::Linear:
            s << ' ' << x.channels << "->" << op.channels;
            if (!op.bias) s << " nobias";
            break;
        case OpKind::GroupNorm:
            s << ' ' << op.groups << "g " << x.channels << "ch";
            break;
        case OpKind::Attention:
            s << ' ' << x.channels << "ch " << op.heads << 'h';
            if (op.input2 >= 0) s << " ctx " << value(op.input2).channels << "ch";
            if (op.innerChannels > 0 && op.innerChannels != x.channels) s << " inner " << op.innerChannels;
            if (!op.qkvBias) s << " nobias";
            if (!op.bias) s << " nooutbias";
            if (op.scoreScale > 0.0f) s << " scale " << op.scoreScale;
            if (op.causal) s << " causal";
            if (op.buckets > 0) s << " relbias " << op.buckets << '/' << op.maxDistance;
            break;
        case OpKind::LayerNorm:
        case OpKind::AdaLayerNorm:
        case OpKind::GatedAdd:
        case OpKind::RMSNorm:
            s << ' ' << x.channels << "ch";
            break;
        case OpKind::ChannelSlice:
            s << ' ' << op.offset << '+' << op.channels << " of " << x.channels;
            break;
        case OpKind::QkNormRope:
        case OpKind::PackedAttention:
            s << ' ' << x.channels / 3 << "ch " << op.heads << 'h';
            break;
        case OpKind::GEGLU:
            s << ' ' << x.channels << "->" << op.channels;
            break;
        case OpKind::GELU:
            s << (op.geluTanh ? " tanh " : " ") << x.channels << "ch";
            break;
        case OpKind::EosPool:
            s << ' ' << x.channels << "ch at " << (op.token < 0 ? "argmax" : "id " + std::to_string(op.token));
            break;
        case OpKind::Affine:
            s << ' ' << op.scale << "x" << (op.shift < 0 ? "" : "+") << op.shift << ' ' << x.channels << "ch";
            break;
        case OpKind::Concat:
            s << ' ' << x.channels << '+' << value(op.input2).channels;
            break;
        case OpKind::Add:
        case OpKind::ScaleShift:
            s << ' ' << x.channels << "ch" << (isVector(value(op.input2)) && isMap(x) ? " +vector" : "");
            break;
        case OpKind::Upsample:
            if (op.factor != 2) s << " x" << op.factor;
            s << ' ' << y.channels << "ch";
            break;
        case OpKind::PixelShuffle:
        case OpKind::PixelUnshuffle:
            s << " x" << op.factor << ' ' << x.channels << "->" << y.channels;
            break;
        case OpKind::LeakyReLU:
            s << ' ' << op.slope << ' ' << x.channels << "ch";
            break;
        case OpKind::ColorFix:
            s << " k" << op.radius << " w" << op.scale << ' ' << x.channels << "ch";
            if (op.sharpness >= 0.0f) s << " sharp " << op.sharpness;
            break;
        default:
            s << ' ' << y.channels << "ch";
            break;
    }
    if (followsTile(y)) s << " @1/" << y.divisor;
    if (isTokens(y))
        s << " tokens" << (y.tokens > 0 ? " " + std::to_string(y.tokens) + (y.divisor > 0 ? "+" : "") : std::string());
    if (op.preAdd >= 0) s << " +preadd";
    if (op.scaleShift >= 0) s << " +film";
    if (op.silu) s << " +silu";
    if (op.residual >= 0) s << " +residual";
    if (op.outputScale != 1.0f) s << " *" << op.outputScale;
    if (op.leakyRelu) s << " +lrelu " << op.slope;
    return s.str();
}

// ---------------------------------------------------------------- the fusion rewrite

namespace {

// Merges `next` (the only reader of cur's output) into `cur`; false when no rule applies.
bool absorb(GraphOp& cur, const GraphOp& next, const ModelGraph& g) {
    const int v = cur.output;
    const bool epilogue = cur.kind == OpKind::Conv || cur.kind == OpKind::Attention;
    const bool tokenLinear = cur.kind == OpKind::Linear && g.value(v).kind == ValueKind::Tokens;
    switch (next.kind) {
        case OpKind::SiLU:
            if ((cur.kind != OpKind::Linear && cur.kind != OpKind::GroupNorm) || tokenLinear || cur.silu) return false;
            cur.silu = true;
            break;
        case OpKind::ScaleShift:
            if (cur.kind != OpKind::GroupNorm || cur.silu || cur.scaleShift >= 0 || next.input != v) return false;
            cur.scaleShift = next.input2;
            break;
        case OpKind::GroupNorm: {
            // Add(x, vector) -> GroupNorm: the norm with the vector as its pre-add.
            const bool addVector = cur.kind == OpKind::Add && g.value(cur.input2).kind == ValueKind::Vector &&
                                   g.value(cur.input).kind == ValueKind::FeatureMap;
            if (!addVector || next.preAdd >= 0 || next.scaleShift >= 0 || next.silu) return false;
            GraphOp norm = next;
            norm.input = cur.input;
            norm.preAdd = cur.input2;
            cur = std::move(norm);
            return true;  // `next` already carries its own output
        }
        case OpKind::Add: {
            const bool residualOnly = cur.kind == OpKind::ToFeatureMap || tokenLinear;
            if ((!epilogue && !residualOnly) || cur.residual >= 0 || cur.outputScale != 1.0f || cur.leakyRelu)
                return false;
            const int other = next.input == v ? next.input2 : next.input;
            if (!sameShape(g.value(other), g.value(v))) return false;
            cur.residual = other;
            break;
        }
        case OpKind::Affine:
            if (!epilogue || cur.outputScale != 1.0f || next.shift != 0.0f || cur.leakyRelu) return false;
            cur.outputScale = next.scale;
            break;
        case OpKind::LeakyReLU:
            if (cur.kind != OpKind::Conv || cur.leakyRelu) return false;
            cur.leakyRelu = true;
            cur.slope = next.slope;
            break;
        default:
            return false;
    }
    cur.output = next.output;
    return true;
}

}  // namespace

ModelGraph fuseForExecution(const ModelGraph& g) {
    const std::vector<GraphOp>& ops = g.ops();
    const std::size_t n = ops.size();
    std::vector<int> uses(g.values().size(), 0), reader(g.values().size(), -1);
    for (std::size_t i = 0; i < n; ++i)
        for (int v : ops[i].operands()) {
            ++uses[static_cast<std::size_t>(v)];
            reader[static_cast<std::size_t>(v)] = static_cast<int>(i);
        }
    for (int v : g.outputs()) uses[static_cast<std::size_t>(v)] += 2;  // never merged away

    std::vector<char> absorbed(n, 0);
    std::vector<std::vector<GraphOp>> at(n);  // fused ops by the position of their chain's last op
    for (std::size_t i = 0; i < n; ++i) {
        if (absorbed[i]) continue;
        GraphOp cur = ops[i];
        std::size_t last = i;
        while (uses[static_cast<std::size_t>(cur.output)] == 1) {
            const auto j = static_cast<std::size_t>(reader[static_cast<std::size_t>(cur.output)]);
            if (absorbed[j] || !absorb(cur, ops[j], g)) break;
            absorbed[j] = 1;
            last = j;
        }
        at[last].push_back(std::move(cur));
    }

    ModelGraph f;
    std::vector<int> map(g.values().size(), -1);
    for (int v : g.inputs()) map[static_cast<std::size_t>(v)] = f.addInputValue(g.value(v));
    for (const GraphParam& p : g.params()) f.addParam(p.name, p.shape);
    for (auto& list : at)
        for (GraphOp& op : list) {
            const int out = op.output;
            for (int* id : {&op.input, &op.input2, &op.preAdd, &op.scaleShift, &op.residual, &op.hintLatent,
                            &op.timesteps, &op.condMark, &op.gate})
                if (*id >= 0) *id = map[static_cast<std::size_t>(*id)];
            map[static_cast<std::size_t>(out)] = f.addOp(std::move(op), g.value(out).name);
        }
    for (int v : g.outputs()) f.markOutput(map[static_cast<std::size_t>(v)]);
    return f;
}

}  // namespace tessera
