// The CPU backend's operations (core/cpu/CpuBackend.h composes them; exposed for the unit tests):
// float32, feature maps NCHW, token sequences [batch, tokens, channels] rows. Each runs its tasks
// on a WorkerPool; every output element is computed by exactly one task in an order fixed by
// the shapes alone, so results do not depend on the thread count, and an image's result does not
// depend on the other images of its call. Defined in core/cpu/ops/, one file per family. Qt-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/cpu/WorkerPool.h"

namespace tessera {
namespace cpu {

// One worker's scratch for a block of attention scores or GEGLU's projected rows (1 MiB).
inline constexpr std::int64_t kWorkerFloats = 1 << 18;

struct ConvShape {
    int cin = 0, cout = 0, h = 0, w = 0;  // input
    int kernel = 3, stride = 1;
    int padTop = 1, padLeft = 1;  // zeros beyond the input on the other sides as needed
    int hout = 0, wout = 0;
    // kernel x kernel, stride 1, symmetric padding kernel/2.
    static ConvShape same(int cin, int cout, int h, int w, int kernel);
    // 3x3 stride 2 (diffusers models/downsampling.py, Downsample2D): padding 0 pads one
    // row/column at the bottom/right (its F.pad(x, (0, 1, 0, 1))), padding p pads p on every side.
    static ConvShape downsample(int channels, int h, int w, int padding);
    std::int64_t colRows() const { return std::int64_t(cin) * kernel * kernel; }
};

// How a GEMM C [m, n] += A [m, k] B [k, n] is cut into tasks: blocks of mc x nc of C, from the
// shape alone (never the thread count or the batch), so that each block is one single-threaded
// sgemm of a few million multiply-adds, cut along n (the pixels) before m.
struct GemmBlocks {
    int mc = 0, nc = 0, mBlocks = 0, nBlocks = 0;
};
GemmBlocks gemmBlocks(int m, int n, int k);

// One worker's scratch for conv2d: the im2col columns of one block of the output (0 for 1x1
// stride-1 convolutions, which read x itself).
std::size_t convWorkerFloats(const ConvShape&);
// y = (conv(x) + bias + residual) * outScale for `images` images (NCHW, one after another):
// one task per (image, block of the output), each with its own im2col columns in the pool's
// worker scratch (convWorkerFloats() floats). residual may be null; y must not alias x. An
// image's result does not depend on `images` or on the thread count. negativeSlope != 1: then
// LeakyReLU(negativeSlope) on y (slope 1 is the identity).
void conv2d(WorkerPool&, const ConvShape&, int images, const float* x, const float* weight, const float* bias,
            const float* residual, float outScale, float* y, float negativeSlope = 1.0f);
// One image; reserves the pool's worker scratch it needs.
void conv2d(WorkerPool&, const ConvShape&, const float* x, const float* weight, const float* bias,
            const float* residual, float outScale, float* y, float negativeSlope = 1.0f);

// y[0, n) = x[0, n) on the pool; y must not overlap x.
void copyFloats(WorkerPool&, std::int64_t n, const float* x, float* y);
// Elementwise over n floats: y = x * scale + shift; y = silu(x). y may alias x.
void affine(WorkerPool&, std::int64_t n, const float* x, float scale, float shift, float* y);
void silu(WorkerPool&, std::int64_t n, const float* x, float* y);
// y = a + b over [batch, channels, pixels]; b is [batch, channels] (one value per plane) when
// bPerPlane, else of a's shape. y may alias a.
void add(WorkerPool&, int batch, int channels, std::int64_t pixels, const float* a, const float* b, bool bPerPlane,
         float* y);
// FiLM: y[b, c, p] = x[b, c, p] * (1 + v[b, c]) + v[b, channels + c], v [batch, 2*channels].
void scaleShift(WorkerPool&, int batch, int channels, std::int64_t pixels, const float* x, const float* v, float* y);
// Elementwise over n floats: y = x >= 0 ? x : slope * x (PyTorch's LeakyReLU); y = sigmoid(x);
// y = a * b. y may alias x (a).
void leakyRelu(WorkerPool&, std::int64_t n, const float* x, float slope, float* y);
void sigmoid(WorkerPool&, std::int64_t n, const float* x, float* y);
void mul(WorkerPool&, std::int64_t n, const float* a, const float* b, float* y);
// PReLU over [batch, channels, pixels]: y = x >= 0 ? x : weight[c] * x. y may alias x.
void prelu(WorkerPool&, int batch, int channels, std::int64_t pixels, const float* x, const float* weight, float* y);

// GroupNorm over [batch, channels, pixels] with statistics (mean, biased variance) in double:
//   v = x + preAdd[b, c]  (preAdd [batch, channels] or null)
//   y = (v - mean) / sqrt(var + eps) * gamma[c] + beta[c]
//   y = y * (1 + scaleShift[b, c]) + scaleShift[b, channels + c]  (scaleShift [batch, 2*channels] or null)
//   y = silu(y) when silu.  y may alias x.
void groupNorm(WorkerPool&, int batch, int channels, std::int64_t pixels, int groups, float eps, const float* x,
               const float* gamma, const float* beta, const float* preAdd, const float* scaleShift, bool silu,
               float* y);

// y[b, :] = x[b, :] W^T + bias (W [out, in]), then SiLU when silu.
void linear(int batch, int in, int out, const float* x, const float* weight, const float* bias, bool silu, float* y);

// Nearest x2 over `planes` planes of h x w.
void upsampleNearest2x(WorkerPool&, std::int64_t planes, int h, int w, const float* x, float* y);
// Nearest by an integer factor: y[p][oy][ox] = x[p][oy / factor][ox / factor], planes of h x w in.
void upsampleNearest(WorkerPool&, std::int64_t planes, int h, int w, int factor, const float* x, float* y);
// PyTorch's pixel_shuffle for `batch` images of channels * r^2 planes of h x w (r = factor):
// y[b][c][oy * r + i][ox * r + j] = x[b][c * r^2 + i * r + j][oy][ox], y [batch, channels, h r, w r].
void pixelShuffle(WorkerPool&, int batch, int channels, int h, int w, int factor, const float* x, float* y);
// Its inverse (pixel_unshuffle): x [batch, channels, h r, w r] -> y [batch, channels * r^2, h, w].
void pixelUnshuffle(WorkerPool&, int batch, int channels, int h, int w, int factor, const float* x, float* y);

struct AttentionWeights {
    const float *wq = nullptr, *bq = nullptr, *wk = nullptr, *bk = nullptr;
    const float *wv = nullptr, *bv = nullptr, *wo = nullptr, *bo = nullptr;
    // T5's position-bias table [buckets, heads] (tokens only; TokenAttentionShape::buckets > 0).
    const float* relativeBias = nullptr;
};
// Query rows per score block so the score buffer stays below maxScoreFloats.
int attentionQueryBlock(std::int64_t pixels, std::int64_t maxScoreFloats);
// Query rows per attention task over `keys` keys: a block of scores fits in a worker's scratch
// of maxScoreFloats, and the queries of one head are cut into several tasks (a fixed rule of
// the shape, so the bits do not depend on the thread count).
int attentionTaskRows(int queries, std::int64_t keys, std::int64_t maxScoreFloats);
// Q, K, V and the heads' output of one image (the score rows live in the pool's worker scratch).
std::size_t attentionScratchFloats(int channels, std::int64_t pixels);
// Token sequences (core/graph/ModelGraph.h ValueKind::Tokens) are [batch, tokens, channels] rows.

// y[b, p, c] = x[b, c, p]: the pixels of a feature map as tokens. y must not alias x.
void toTokens(WorkerPool&, int batch, int channels, std::int64_t pixels, const float* x, float* y);
// y[b, c, p] = x[b, p, c] + residual[b, c, p] (residual NCHW or null). y must not alias x.
void toFeatureMap(WorkerPool&, int batch, int channels, std::int64_t pixels, const float* x, const float* residual,
                  float* y);
// LayerNorm of each of `rows` rows of `channels` floats, statistics (mean, biased variance) in
// double: y = (x - mean) / sqrt(var + eps) * gamma + beta. y may alias x.
void layerNorm(WorkerPool&, std::int64_t rows, int channels, float eps, const float* x, const float* gamma,
               const float* beta, float* y);
// T5's RMSNorm of each of `rows` rows, the mean square in double: y = x / sqrt(mean(x^2) + eps) *
// weight. y may alias x.
void rmsNorm(WorkerPool&, std::int64_t rows, int channels, float eps, const float* x, const float* weight, float* y);
// Each of `images` images' tokens: y [rows, out] = x [rows, in] W^T + bias (+ residual
// [rows, out], or null), the images' GEMM blocks as one set of tasks (an image's result does
// not depend on the tile batch). y must not alias x.
void tokenLinear(WorkerPool&, int images, int rows, int in, int out, const float* x, const float* weight,
                 const float* bias, const float* residual, float* y);
// Elementwise over n floats; y may alias x. gelu: exact (erf), or PyTorch's tanh approximation.
void gelu(WorkerPool&, std::int64_t n, const float* x, bool tanhApproximation, float* y);
void quickGelu(WorkerPool&, std::int64_t n, const float* x, float* y);
// Throws std::out_of_range naming the row, position and value of the first of batch * tokens ids
// (held as floats) that is not an integer in [0, vocab). Every backend's TokenEmbedding checks
// its ids with this before any work, so they refuse the same ids with the same words.
void checkTokenIds(int batch, int tokens, std::int64_t vocab, const float* ids);
// CLIP's embeddings: y [rows, channels] = table[ids[r]] + positions[r % tokens] for rows =
// batch * tokens ids held as floats; T5's (positions null): table[ids[r]] alone. Throws std::out_of_range naming the row, position and
// value for an id that is not an integer in [0, vocab) (nothing is written then).
void tokenEmbedding(WorkerPool&, int batch, int tokens, int channels, std::int64_t vocab, const float* ids,
                    const float* table, const float* positions, float* y);
// y [batch, channels] = x [batch, tokens, channels] at each row's first position whose id is
// `token` (position 0 if none), or for token -1 at its first largest id.
void eosPool(int batch, int tokens, int channels, const float* x, const float* ids, int token, float* y);
// GEGLU for `images` images of `rows` tokens: p = x W^T + b (W [2 out, in]); y [rows, out] =
// p[:, :out] * gelu(p[:, out:]). Each task projects gegluTaskRows() rows into its worker's
// scratch (gegluWorkerFloats() floats). y must not alias x.
int gegluTaskRows(int rows, int in, int out);
std::size_t gegluWorkerFloats(int rows, int in, int out);
void geglu(WorkerPool&, int images, int rows, int in, int out, const float* x, const float* weight, const float* bias,
           float* y);

// Attention over tokens for one image: queries from x [tokens, channels], keys and values from
// context [contextTokens, contextChannels] (x itself when context is null: then contextTokens =
// tokens, contextChannels = channels). Weights as AttentionWeights (q/k/v biases may be null;
// wk, wv [inner, contextChannels], wq [inner, channels], wo [channels, inner]). Scores
// scale * Q K^T (scale 0: 1/sqrt(d), d = inner / heads) and the softmax in float32; causal: query
// i sees keys 0..i; buckets > 0 (self-attention): + relativeBias[bucket(j - i), h] with
// core/graph/RelativePositionBucket.h (T5).
struct TokenAttentionShape {
    int tokens = 0, channels = 0, contextTokens = 0, contextChannels = 0, heads = 1;
    bool causal = false;
    int inner = 0;  // heads * d; 0: channels
    float scale = 0.0f;
    int buckets = 0, maxDistance = 0;
    int innerChannels() const { return inner > 0 ? inner : channels; }
};
// Q, K, V and the heads' output of one image.
std::size_t tokenAttentionScratchFloats(const TokenAttentionShape&);
// For `images` images (x, context, residual and y one image after another): y = (to_out(attention)
// + residual) * outScale; residual [tokens, channels] or null; y must not alias x or context.
// scratch: tokenAttentionScratchFloats() for each of scratchImages images (the images are
// attended scratchImages at a time); the score rows of a task (queryBlock rows) live in its
// worker's scratch, which must hold queryBlock * contextTokens floats.
void tokenAttention(WorkerPool&, int images, const TokenAttentionShape&, const AttentionWeights&, const float* x,
                    const float* context, const float* residual, float outScale, float* y, float* scratch,
                    int scratchImages, int queryBlock);

// Spatial self-attention (diffusers models/attention_processor.py, AttnProcessor on a feature map)
// for `images` images x [channels, pixels] (the pixels are the tokens; x already normalised):
// y = (to_out(softmax(Q K^T / sqrt(d)) V) + residual) * outScale, heads of d = channels / heads
// channels; residual [channels, pixels] or null. y must not alias x. scratch and queryBlock as
// tokenAttention's (attentionScratchFloats() per image).
void attention(WorkerPool&, int images, int channels, std::int64_t pixels, int heads, const AttentionWeights&,
               const float* x, const float* residual, float outScale, float* y, float* scratch, int scratchImages,
               int queryBlock);
// One image; reserves the pool's worker scratch for its score rows.
void attention(WorkerPool&, int channels, std::int64_t pixels, int heads, const AttentionWeights&, const float* x,
               const float* residual, float outScale, float* y, float* scratch, int queryBlock);

// sd-webui-controlnet's tile_colorfix correction (ModelGraph.h OpKind::ColorFix) over `batch` rows of
// [channels, h, w]: eps, xt and latent of that shape, timesteps [batch] (rounded half to even,
// clamped to the table), condMark [batch, 2] (v[0] + 1 the row's mark), table [2, tableSize]
// (sqrt(1 / alphas_cumprod), sqrt(1 / alphas_cumprod - 1)). In double per plane (one task a
// plane); y must not alias an input.
struct ColorFixShape {
    int batch = 0, channels = 0, h = 0, w = 0;
    int radius = 8;
    float weight = 1.0f;
    float sharpness = -1.0f;  // < 0: tile_colorfix; else +sharp's detail weight
    int tableSize = 1000;
};
int colorFixTimestep(float timestep, int tableSize);
void colorFix(WorkerPool&, const ColorFixShape&, const float* eps, const float* xt, const float* latent,
              const float* timesteps, const float* condMark, const float* table, float* y);

// FLUX's transformer (core/cpu/ops/Transformer.cpp; ModelGraph.h OpKinds of the same names).
// y [rows, count] = channels [offset, offset + count) of x [rows, channels].
void channelSlice(WorkerPool&, std::int64_t rows, int channels, int offset, int count, const float* x, float* y);
// y [rows, c1 + c2] = a [rows, c1] beside b [rows, c2].
void concatRows(WorkerPool&, std::int64_t rows, int c1, int c2, const float* a, const float* b, float* y);
// Per image: y [first + second, channels] = a [first, channels] then b [second, channels].
void tokenConcat(WorkerPool&, int batch, std::int64_t first, std::int64_t second, int channels, const float* a,
                 const float* b, float* y);
// Per image of first + second tokens: y = its first `first` (tail false) or last `second` tokens.
void tokenSplit(WorkerPool&, int batch, std::int64_t first, std::int64_t second, int channels, bool tail,
                const float* x, float* y);
// Per token of `tokens` per image: LayerNorm without affine (statistics in double), then
// * (1 + m[scaleAt + c]) + m[shiftAt + c] with m the image's row of vectorChannels. y may alias x.
void adaLayerNorm(WorkerPool&, int batch, std::int64_t tokens, int channels, float eps, const float* x, const float* m,
                  int vectorChannels, int shiftAt, int scaleAt, float* y);
// y = x + m[gateAt + c] * addend, m the image's row of vectorChannels. y may alias x.
void gatedAdd(WorkerPool&, int batch, std::int64_t tokens, int channels, const float* x, const float* addend,
              const float* m, int vectorChannels, int gateAt, float* y);
// FLUX's position grid: fixedTokens tokens at (0, 0, 0), then a gridH x gridW grid of tokens at
// (0, row, column); axes[a] channels of each head turn with axis a.
struct RopeShape {
    int fixedTokens = 0, gridH = 0, gridW = 0;
    int axes[3] = {0, 0, 0};
    float theta = 10000.0f;
};
// (cos, sin) of every token's pairs: [tokens, headDim / 2, 2].
std::vector<float> ropeTable(const RopeShape&);
// x [batch, tokens, 3 D] of q | k | v (D = heads * headDim): q and k RMS-normalised per head
// (statistics in double, weights [headDim]), then turned by `table` (ropeTable's); v copied.
// y must not alias x.
void qkNormRope(WorkerPool&, int batch, std::int64_t tokens, int heads, int headDim, float eps, const float* x,
                const float* qWeight, const float* kWeight, const float* table, float* y);
// Query rows per task of packedAttention; its worker scratch is that times `tokens` floats.
int packedAttentionTaskRows(std::int64_t tokens);
// y [batch, tokens, D] = per head softmax(Q K^T / sqrt(headDim)) V from x [batch, tokens, 3 D]
// (q | k | v), the softmax in float32 with its sum in double. y must not alias x.
void packedAttention(WorkerPool&, int batch, std::int64_t tokens, int heads, int headDim, const float* x, float* y);

}  // namespace cpu
}  // namespace tessera
