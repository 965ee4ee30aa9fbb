// ModelGraph: a model written once, as typed operations over typed values. A model family's
// builder (core/models/unet/UNetGraph.h: diffusers' UNet2DModel) makes it from the config in primitive
// ops; fuseForExecution() rewrites it into the form the backends run (the CPU reference,
// core/cpu/CpuBackend.h, and the CUDA backend, kernels/backend/CudaBackend.h, lower the same graph).
// Parameter lists, parameter counts and FLOPs are read from it. Qt-free.
// docs/ENGINE_GRAPH.md says where each responsibility lives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tessera {

// What a value holds, for a batch of B tiles of H x W.
enum class ValueKind {
    FeatureMap,  // [B, channels, H / divisor, W / divisor]
    Vector,      // [B, channels]: timesteps, time embeddings
    Tokens,      // [B, tokens, channels], channels contiguous: a fixed token count (77 text
                 // tokens: GraphValue::tokens) or one token per pixel of a feature map of the
                 // tile / divisor (tokens 0; token index y * W + x), or both, joined: the fixed
                 // tokens first, then the tile's (a DiT's text and image tokens in one sequence:
                 // tokens > 0 and divisor >= 1)
};

// Operations. Every one is implemented by every backend (tests/cuda/tst_backendops.cpp runs
// each on the CUDA backend against the CPU reference). `input` is the first operand, `input2`
// the second; parameters are listed in the order given here (PyTorch shapes).
enum class OpKind {
    Affine,             // input * scale + shift, elementwise
    SiLU,               // input * sigmoid(input), elementwise
    Add,                // input + input2: the same shape, or a feature map plus a vector [B, C]
                        // added to every pixel
    ScaleShift,         // FiLM: input * (1 + v[:, :C]) + v[:, C:], input a feature map of C
                        // channels, v = input2 a vector [B, 2C]
    TimestepEmbedding,  // vector [B, 1] -> [B, channels]: the sinusoid of diffusers
                        // models/embeddings.py get_timestep_embedding
    Linear,             // vector [B, in] -> [B, channels], or tokens [B, N, in] -> [B, N, channels] per
                        // token: input W^T + b (weight [channels, in], bias [channels])
    Conv,               // feature map: kernel x kernel, stride 1 or 2, zero padding padBegin rows/columns
                        // at the top/left and padEnd at the bottom/right; + bias (weight [channels, in, k, k],
                        // bias [channels])
    GroupNorm,          // feature map: `groups` groups, statistics over (channels of the group, pixels),
                        // then * gamma + beta (weight [C], bias [C])
    Attention,          // multi-head attention, heads of d = I / heads channels (channel h*d + i of Q, K,
                        // V is head h's i-th; I = innerChannels, or C when 0): to_out(softmax(s Q K^T
                        // [+ causal mask] [+ position bias]) V), s = scoreScale or 1/sqrt(d) when 0,
                        // the softmax in float32. Q = to_q(input); K, V = to_k/to_v(input2 if given,
                        // else input). input: a feature map (each pixel a token of C features; no
                        // input2) or tokens [B, N, C]; input2: tokens [B, M, Ckv] (cross-attention:
                        // the context). Parameters: to_q.weight [I, C], to_q.bias [I], to_k.weight
                        // [I, Ckv], to_k.bias, to_v.weight [I, Ckv], to_v.bias, to_out.0.weight [C, I],
                        // to_out.0.bias [C], then the position-bias table [buckets, heads]; the three
                        // q/k/v biases only when qkvBias, to_out's only when bias, the table only when
                        // buckets > 0. causal (tokens, no input2): query i sees keys 0..i only (CLIP).
                        // buckets > 0 (tokens, no input2, not causal): T5's bidirectional relative
                        // position bias, score[h, i, j] += table[bucket(j - i), h] with
                        // core/graph/RelativePositionBucket.h (buckets, maxDistance). I != C only
                        // over tokens.
    Concat,             // feature maps [input, input2] along channels
    Upsample,           // feature map, nearest neighbour by the integer `factor` (2 unless set):
                        // out[y][x] = in[y / factor][x / factor] (PyTorch's F.interpolate mode="nearest")
    ToTokens,           // feature map [B, C, H, W] -> tokens [B, H*W, C] (tokens follow the tile)
    ToFeatureMap,       // tokens that follow the tile [B, H*W, C] -> feature map [B, C, H, W]
    LayerNorm,          // tokens: per token, statistics over its C channels (mean, biased
                        // variance), then * gamma + beta (weight [C], bias [C]), eps
    GEGLU,              // tokens [B, N, C] -> [B, N, channels]: p = input W^T + b (weight [2 * channels, C],
                        // bias [2 * channels]); out = p[:, :channels] * gelu(p[:, channels:]), exact GELU
    GELU,               // elementwise 0.5 x (1 + erf(x / sqrt 2)); geluTanh: PyTorch's approximate="tanh"
    QuickGELU,          // elementwise x * sigmoid(1.702 x) (CLIP)
    TokenEmbedding,     // ids (tokens [B, N, 1] of a fixed count, the ids as floats) -> tokens [B, N, channels]:
                        // table[id] + positions[n] (token table [V, channels], position table [P, channels],
                        // P >= N; CLIP), or table[id] alone without positionTable (T5); an id that is
                        // not an integer in [0, V) is an error at run time
    EosPool,            // tokens [B, N, C], input2 = their ids [B, N, 1] -> vector [B, C]: each row's token at
                        // the first position holding id `token`, position 0 if none; token -1: at the first
                        // largest id (transformers' CLIPTextTransformer pooling)
    LeakyReLU,          // elementwise x >= 0 ? x : slope * x (PyTorch's nn.LeakyReLU(negative_slope))
    PReLU,              // feature map: x >= 0 ? x : w[c] * x per channel (nn.PReLU(num_parameters=C): weight [C])
    PixelShuffle,       // feature map [C * r^2, H, W] -> [C, H * r, W * r], r = factor (the divisor / r):
                        // out[c][y * r + i][x * r + j] = in[c * r^2 + i * r + j][y][x] (nn.PixelShuffle)
    PixelUnshuffle,     // its inverse [C, H * r, W * r] -> [C * r^2, H, W], r = factor (the divisor * r)
                        // (F.pixel_unshuffle)
    Sigmoid,            // elementwise 1 / (1 + exp(-x))
    Mul,                // input * input2, elementwise, two values of one shape
    RMSNorm,            // tokens: per token x / sqrt(mean(x^2) + eps) * w (weight [C]): no mean subtraction,
                        // no bias (transformers models/t5/modeling_t5.py T5LayerNorm)
    ColorFix,           // sd-webui-controlnet's tile_colorfix (scripts/hook.py, "Post-processing for color
                        // fix"): input = the UNet's output eps [B, C, h, w], input2 = its input x_t (same
                        // shape), hintLatent = the hint's VAE latent (same shape), timesteps = the UNet's
                        // timestep [B, 1], condMark = a FiLM row [B, 2] (v[0] + 1: 1 on conditional rows,
                        // 0 on unconditional ones). t = round(timestep); x0 = a_t x_t - b_t eps;
                        // x0' = x0 - blur(x0) + blur(hintLatent); sharpness >= 0 ("+sharp", d =
                        // sharpness): x0' = m x0' + (1 - m) (d blur(x0') + (1 - d) x0'); out =
                        // w (a_t x_t - x0') / b_t + (1 - w) eps, w = scale. blur: replicate padding by
                        // `radius`, then the mean of the (2 radius + 1)^2 box. Parameter: the DDPM table
                        // [2, T]: a_t = sqrt(1 / alphas_cumprod[t]), b_t = sqrt(1 / alphas_cumprod[t] - 1)
    ChannelSlice,       // vector [B, C] or tokens [B, N, C] -> channels [offset, offset + channels) of each row
    AdaLayerNorm,       // tokens x [B, N, C], input2 = a vector m [B, K]: per token LayerNorm without
                        // affine (mean, biased variance, eps), then * (1 + m[scaleAt .. scaleAt + C)) +
                        // m[shiftAt .. shiftAt + C) (FLUX's modulation: BFL flux modules/layers.py
                        // Modulation, diffusers AdaLayerNormZero / AdaLayerNormContinuous)
    GatedAdd,           // tokens x + m[gateAt .. gateAt + C) * y: input x, input2 y (x's shape), `gate` = the
                        // vector m [B, K] (FLUX's gated residuals)
    QkNormRope,         // tokens [B, N, 3 D] holding q | k | v, each `heads` heads of d = D / heads (head-major):
                        // q and k of each head RMS-normalised over d (x / sqrt(mean(x^2) + eps) * w; weights
                        // query_norm [d], key_norm [d]), then rotated by FLUX's RoPE (BFL flux math.py rope,
                        // apply_rope): axis a in 0..2 owns ropeAxes[a] channels of the head, pair (2k, 2k + 1)
                        // of it turns by p_a * ropeTheta^(-2k / ropeAxes[a]); positions (0, 0, 0) for the
                        // fixed tokens, (0, row, column) of the tile's token grid for the tile's; v unchanged
    PackedAttention,    // tokens [B, N, 3 D] holding q | k | v (as QkNormRope) -> [B, N, D]: per head
                        // softmax(Q K^T / sqrt(d)) V, no mask, no projections, the softmax in float32
    TokenConcat,        // tokens of a fixed count (input), then tokens that follow the tile (input2), the same
                        // channels -> one joined sequence
    TokenSplit,         // a joined sequence -> its fixed tokens (tail false) or its tile's tokens (tail true)
};
const char* toString(OpKind);

struct GraphValue {
    std::string name;  // "down_blocks.1.attentions.0", "time_embedding.act"
    ValueKind kind = ValueKind::FeatureMap;
    int channels = 0;
    int divisor = 1;  // FeatureMap, Tokens following the tile: spatial size = tile / divisor; else 0
    int tokens = 0;   // Tokens of a fixed count (77 text tokens); 0 otherwise
};

struct GraphParam {
    std::string name;                 // diffusers parameter name: "conv_in.weight"
    std::vector<std::int64_t> shape;  // PyTorch layout
};

struct GraphOp {
    OpKind kind = OpKind::Conv;
    std::string name;  // module path ("down_blocks.0.resnets.1.conv1"); unique in a graph
    int input = -1;    // value ids
    int input2 = -1;   // Add, ScaleShift, Concat; Attention: the context (optional)
    int output = -1;
    std::vector<int> params;                               // parameter ids, in the order OpKind states
    int channels = 0;                                      // output channels: TimestepEmbedding, Linear, Conv, GEGLU
    int kernel = 1, stride = 1, padBegin = 0, padEnd = 0;  // Conv
    int groups = 0;                                        // GroupNorm
    float eps = 1e-5f;                                     // GroupNorm, LayerNorm, RMSNorm
    int heads = 1;                                         // Attention
    bool qkvBias = true;               // Attention: to_q/to_k/to_v have biases (SD's transformer blocks: none)
    bool bias = true;                  // Linear: has a bias; Attention: to_out has one (T5: neither)
    bool causal = false;               // Attention over tokens without context: causal mask
    int innerChannels = 0;             // Attention over tokens: Q/K/V width heads * d; 0: the input's C
    float scoreScale = 0.0f;           // Attention: the scores' factor; 0: 1/sqrt(d) (T5: 1)
    int buckets = 0, maxDistance = 0;  // Attention: T5's relative position bias; buckets 0: none
    bool positionTable = true;         // TokenEmbedding: adds a position table (CLIP; T5 has none)
    bool geluTanh = false;             // GELU: tanh approximation
    int token = -1;                    // EosPool: the id pooled at; -1: the largest id
    float scale = 1.0f, shift = 0.0f;  // Affine; ColorFix: scale = the weight w in [0, 1]
    float slope = 0.01f;               // LeakyReLU (and a Conv's fused one): negative slope, PyTorch's default
    int factor = 2;                    // Upsample, PixelShuffle, PixelUnshuffle
    int freqShift = 0;                 // TimestepEmbedding
    bool flipSinToCos = false;
    int radius = 0;                                      // ColorFix: the box blur's radius k (Variation)
    float sharpness = -1.0f;                             // ColorFix: +sharp's detail weight d; < 0: no sharpening
    int hintLatent = -1, timesteps = -1, condMark = -1;  // ColorFix's operands besides input and input2
    int offset = 0;                                      // ChannelSlice: the first channel taken
    int shiftAt = 0, scaleAt = 0, gateAt = 0;            // AdaLayerNorm, GatedAdd: offsets into the vector
    int gate = -1;                                       // GatedAdd: the vector operand
    int ropeAxes[3] = {0, 0, 0};                         // QkNormRope: channels per position axis
    float ropeTheta = 10000.0f;
    bool tail = false;  // TokenSplit: the tile's tokens (else the fixed ones)

    // Fusions, set by fuseForExecution() (builders leave them alone):
    bool silu = false;         // Linear, GroupNorm: SiLU on the result
    int preAdd = -1;           // GroupNorm: vector [B, C] added to every pixel before the statistics
    int scaleShift = -1;       // GroupNorm: vector [B, 2C], FiLM after the norm (before the SiLU)
    int residual = -1;         // Conv, Attention, ToFeatureMap, Linear over tokens: a value of the
                               // output's shape added after the bias
    float outputScale = 1.0f;  // Conv, Attention: y = (result + residual) * outputScale
    bool leakyRelu = false;    // Conv: LeakyReLU(slope) on y, after the residual and the scale

    // Every value the op reads (input, input2, preAdd, scaleShift, residual, hintLatent, timesteps,
    // condMark, gate; those present).
    std::vector<int> operands() const;
};

class ModelGraph {
public:
    // Feature maps, vectors, and tokens that follow the tile (divisor >= 1 for both).
    int addInput(std::string name, ValueKind kind, int channels, int divisor = 1);
    // Tokens of a fixed count [B, tokens, channels] (the 77 text tokens of a prompt).
    int addTokenInput(std::string name, int tokens, int channels);
    // An input shaped like `v` (its name, kind, channels, divisor or fixed token count).
    int addInputValue(const GraphValue& v);
    int addParam(std::string name, std::vector<std::int64_t> shape);
    // Appends `op` (its operands and parameters already in the graph), infers its output value
    // (named valueName, or the op's name) and returns that value's id. Throws std::logic_error
    // when operands, attributes or parameter shapes do not fit the kind (a builder bug).
    int addOp(GraphOp op, std::string valueName = {});
    void markOutput(int value);

    const std::vector<GraphValue>& values() const { return values_; }
    const std::vector<GraphOp>& ops() const { return ops_; }
    const std::vector<GraphParam>& params() const { return params_; }
    const std::vector<int>& inputs() const { return inputs_; }
    const std::vector<int>& outputs() const { return outputs_; }
    const GraphValue& value(int id) const { return values_.at(static_cast<std::size_t>(id)); }
    const GraphParam& param(int id) const { return params_.at(static_cast<std::size_t>(id)); }

    // Tiles must be multiples of the largest feature-map divisor; checkTileSize throws
    // std::invalid_argument otherwise ("tile height 36 is not a positive multiple of 8, the
    // model's downsampling factor").
    int downsampleFactor() const;
    void checkTileSize(int h, int w) const;
    // {batch, C, h/d, w/d}, {batch, C} for vectors, {batch, tokens(value, h, w), C} for tokens.
    std::vector<std::int64_t> shape(int value, int batch, int h, int w) const;
    // A tokens value's count: its fixed count, (h/d) * (w/d), or their sum for a joined sequence.
    // Pixels of a feature map, 1 for a vector.
    std::int64_t rows(int value, int h, int w) const;
    std::int64_t elements(int value, int batch, int h, int w) const;

    // Floating-point operations of one op for a single tile of h x w: multiply-adds x 2 of
    // convolutions, linear layers (per token over tokens), GEGLU's projection and attention
    // (the four projections, K and V over the context's tokens, Q K^T and A V).
    // Normalisation and elementwise ops count 0 (they are memory-bound).
    double flops(const GraphOp&, int h, int w) const;
    double flops(int h, int w) const;  // all ops
    std::int64_t parameterCount() const;
    // (name, shape) of every parameter, in declaration order (the builder declares them in
    // the order of the model's state dict).
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> parameterList() const;

    // For each value, the index of the last op that reads it (-1 if none; ops().size() for
    // graph outputs, which live to the end).
    std::vector<int> lastUse() const;

    // Op `index` alone: its operands (in operands() order, each once) are the inputs, its
    // output the output, its parameters the only parameters. For per-op tests.
    ModelGraph extract(std::size_t index) const;
    // A short description for tables and test names: "conv 3x3/2 pad 0+1 128->128 @1/2 +residual".
    std::string describe(const GraphOp&) const;

private:
    int addValue(std::string name, ValueKind kind, int channels, int divisor, int tokens = 0);
    // checkOp: the op's operands and parameters as its kind requires (expectedParams, one case a
    // kind), then the second operand and fused epilogues it carries (checkFusions).
    void checkOp(const GraphOp&) const;
    const GraphValue& operandOf(const GraphOp& op, int id, const char* role) const;
    void checkParams(const GraphOp& op, const std::vector<std::vector<std::int64_t>>& shapes) const;
    std::vector<std::vector<std::int64_t>> expectedParams(const GraphOp& op, const GraphValue& x) const;
    std::vector<std::vector<std::int64_t>> attentionParams(const GraphOp& op, const GraphValue& x) const;
    std::vector<std::vector<std::int64_t>> tokenEmbeddingParams(const GraphOp& op, const GraphValue& x) const;
    void checkFusions(const GraphOp& op, const GraphValue& x) const;
    int inferOutput(const GraphOp&, std::string name);

    std::vector<GraphValue> values_;
    std::vector<GraphOp> ops_;
    std::vector<GraphParam> params_;
    std::vector<int> inputs_, outputs_;
};

// The graph rewrite that both backends run: chains whose intermediate value has exactly one
// reader (and is not a graph output) are merged into one op:
//   Linear -> SiLU                      => Linear{silu}
//   Add(x, vector) -> GroupNorm         => GroupNorm{preAdd = vector}
//   GroupNorm -> ScaleShift(v)          => GroupNorm{scaleShift = v}
//   GroupNorm -> SiLU                   => GroupNorm{silu}
//   Conv|Attention -> Add(other)        => Conv|Attention{residual = other}
//   ToFeatureMap -> Add(other)          => ToFeatureMap{residual = other}
//   Linear over tokens -> Add(other)    => Linear{residual = other}
//   Conv|Attention -> Affine(s, 0)      => Conv|Attention{outputScale = s}
//   Conv -> LeakyReLU                   => Conv{leakyRelu, slope} (nothing absorbed after it)
// applied repeatedly along a chain. The fused op takes the place of the chain's last op and its
// output value's name. Inputs, outputs and parameters are unchanged.
ModelGraph fuseForExecution(const ModelGraph&);

}  // namespace tessera
