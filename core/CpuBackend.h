// CpuBackend: the float32 reference evaluation of a ModelGraph on the host (for the UNet, the
// graph of core/UNetGraph.h after fuseForExecution). Convolutions are im2col + OpenBLAS sgemm
// per image, GroupNorm statistics in double, attention as GEMMs with a max-subtracted float
// softmax. Qt-free.
//
// Threads: OpenBLAS threads run the GEMMs; a small worker pool runs im2col, GroupNorm,
// softmax and elementwise loops. Every output element is computed by exactly one thread in a
// fixed order, so results do not depend on the thread count.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/Backend.h"
#include "core/ModelGraph.h"

namespace tessera {

namespace cpu {

// A fixed set of worker threads running parallelFor. The calling thread takes part, so a
// pool of 1 runs everything inline. Not reentrant: call parallelFor from one thread at a time.
class WorkerPool {
public:
    explicit WorkerPool(int threads);  // threads <= 0: std::thread::hardware_concurrency()
    ~WorkerPool();
    WorkerPool(const WorkerPool&) = delete;
    WorkerPool& operator=(const WorkerPool&) = delete;

    int threads() const { return static_cast<int>(workers_.size()) + 1; }
    // Calls body(i) for i in [0, n); contiguous index ranges per thread; blocks until done.
    template <class F>
    void parallelFor(std::int64_t n, F&& body) {
        run(n, [](void* ctx, std::int64_t i) { (*static_cast<F*>(ctx))(i); }, &body);
    }

private:
    using Task = void (*)(void*, std::int64_t);
    void run(std::int64_t n, Task task, void* ctx);
    void workerLoop(int index);
    void runShare(int index, int parts);

    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable wake_, done_;
    std::uint64_t generation_ = 0;
    int pending_ = 0;
    bool stop_ = false;
    Task task_ = nullptr;
    void* ctx_ = nullptr;
    std::int64_t n_ = 0;
};

// The primitives CpuBackend composes; float32 NCHW, exposed for the unit tests.

struct ConvShape {
    int cin = 0, cout = 0, h = 0, w = 0;  // input
    int kernel = 3, stride = 1;
    int padTop = 1, padLeft = 1;          // zeros beyond the input on the other sides as needed
    int hout = 0, wout = 0;
    // kernel x kernel, stride 1, symmetric padding kernel/2.
    static ConvShape same(int cin, int cout, int h, int w, int kernel);
    // 3x3 stride 2 (§2.7): padding 0 pads one row/column at the bottom/right, padding p
    // pads p on every side.
    static ConvShape downsample(int channels, int h, int w, int padding);
    std::int64_t colRows() const { return std::int64_t(cin) * kernel * kernel; }
};

// Output rows per im2col band so that the column buffer stays below maxColFloats.
int convBandRows(const ConvShape&, std::int64_t maxColFloats);
std::size_t convScratchFloats(const ConvShape&, int bandRows);

// y = (conv(x) + bias + residual) * outScale for one image. residual may be null; y must not
// alias x. col: convScratchFloats() floats (unused for 1x1 stride-1 convolutions).
void conv2d(WorkerPool&, const ConvShape&, const float* x, const float* weight, const float* bias,
            const float* residual, float outScale, float* y, float* col, int bandRows);

// Elementwise over n floats: y = x * scale + shift; y = silu(x). y may alias x.
void affine(WorkerPool&, std::int64_t n, const float* x, float scale, float shift, float* y);
void silu(WorkerPool&, std::int64_t n, const float* x, float* y);
// y = a + b over [batch, channels, pixels]; b is [batch, channels] (one value per plane) when
// bPerPlane, else of a's shape. y may alias a.
void add(WorkerPool&, int batch, int channels, std::int64_t pixels, const float* a, const float* b, bool bPerPlane,
         float* y);
// FiLM: y[b, c, p] = x[b, c, p] * (1 + v[b, c]) + v[b, channels + c], v [batch, 2*channels].
void scaleShift(WorkerPool&, int batch, int channels, std::int64_t pixels, const float* x, const float* v, float* y);

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

// §2.2 sinusoid, float32 in diffusers' order of operations; out [batch, dim].
void timestepEmbedding(const float* timesteps, int batch, int dim, int freqShift, bool flipSinToCos, float* out);

// Nearest x2 over `planes` planes of h x w.
void upsampleNearest2x(WorkerPool&, std::int64_t planes, int h, int w, const float* x, float* y);

struct AttentionWeights {
    const float *wq = nullptr, *bq = nullptr, *wk = nullptr, *bk = nullptr;
    const float *wv = nullptr, *bv = nullptr, *wo = nullptr, *bo = nullptr;
};
// Query rows per score block so the score buffer stays below maxScoreFloats.
int attentionQueryBlock(std::int64_t pixels, std::int64_t maxScoreFloats);
std::size_t attentionScratchFloats(int channels, std::int64_t pixels, int queryBlock);
// Token sequences (core/ModelGraph.h ValueKind::Tokens) are [batch, tokens, channels] rows.

// y[b, p, c] = x[b, c, p]: the pixels of a feature map as tokens. y must not alias x.
void toTokens(WorkerPool&, int batch, int channels, std::int64_t pixels, const float* x, float* y);
// y[b, c, p] = x[b, p, c] + residual[b, c, p] (residual NCHW or null). y must not alias x.
void toFeatureMap(WorkerPool&, int batch, int channels, std::int64_t pixels, const float* x, const float* residual,
                  float* y);
// LayerNorm of each of `rows` rows of `channels` floats, statistics (mean, biased variance) in
// double: y = (x - mean) / sqrt(var + eps) * gamma + beta. y may alias x.
void layerNorm(WorkerPool&, std::int64_t rows, int channels, float eps, const float* x, const float* gamma,
               const float* beta, float* y);
// One image's tokens: y [rows, out] = x [rows, in] W^T + bias (+ residual [rows, out], or null),
// one GEMM (its result does not depend on the tile batch). y must not alias x.
void tokenLinear(WorkerPool&, int rows, int in, int out, const float* x, const float* weight, const float* bias,
                 const float* residual, float* y);
// Elementwise over n floats; y may alias x. gelu: exact (erf), or PyTorch's tanh approximation.
void gelu(WorkerPool&, std::int64_t n, const float* x, bool tanhApproximation, float* y);
void quickGelu(WorkerPool&, std::int64_t n, const float* x, float* y);
// Throws std::out_of_range naming the row, position and value of the first of batch * tokens ids
// (held as floats) that is not an integer in [0, vocab). Every backend's TokenEmbedding checks
// its ids with this before any work, so they refuse the same ids with the same words.
void checkTokenIds(int batch, int tokens, std::int64_t vocab, const float* ids);
// CLIP's embeddings: y [rows, channels] = table[ids[r]] + positions[r % tokens] for rows =
// batch * tokens ids held as floats. Throws std::out_of_range naming the row, position and
// value for an id that is not an integer in [0, vocab) (nothing is written then).
void tokenEmbedding(WorkerPool&, int batch, int tokens, int channels, std::int64_t vocab, const float* ids,
                    const float* table, const float* positions, float* y);
// y [batch, channels] = x [batch, tokens, channels] at each row's first position whose id is
// `token` (position 0 if none), or for token -1 at its first largest id.
void eosPool(int batch, int tokens, int channels, const float* x, const float* ids, int token, float* y);
// GEGLU for one image: p = x W^T + b (W [2 out, in]); y [rows, out] = p[:, :out] * gelu(p[:, out:]).
// scratch: gegluScratchFloats(rows, out). y must not alias x.
std::size_t gegluScratchFloats(int rows, int out);
void geglu(WorkerPool&, int rows, int in, int out, const float* x, const float* weight, const float* bias, float* y,
           float* scratch);

// Attention over tokens for one image: queries from x [tokens, channels], keys and values from
// context [contextTokens, contextChannels] (x itself when context is null: then contextTokens =
// tokens, contextChannels = channels). Weights as AttentionWeights (q/k/v biases may be null;
// wk, wv [channels, contextChannels]). Scores Q K^T / sqrt(d) and the softmax in float32;
// causal: query i sees keys 0..i.
struct TokenAttentionShape {
    int tokens = 0, channels = 0, contextTokens = 0, contextChannels = 0, heads = 1;
    bool causal = false;
};
std::size_t tokenAttentionScratchFloats(const TokenAttentionShape&, int queryBlock);
// y = (to_out(attention) + residual) * outScale; residual [tokens, channels] or null; y must not
// alias x or context.
void tokenAttention(WorkerPool&, const TokenAttentionShape&, const AttentionWeights&, const float* x,
                    const float* context, const float* residual, float outScale, float* y, float* scratch,
                    int queryBlock);

// §2.6 for one image x [channels, pixels] (the pixels are the tokens; x already normalised):
// y = (to_out(softmax(Q K^T / sqrt(d)) V) + residual) * outScale, heads of d = channels / heads
// channels; residual [channels, pixels] or null. y must not alias x.
void attention(WorkerPool&, int channels, std::int64_t pixels, int heads, const AttentionWeights&, const float* x,
               const float* residual, float outScale, float* y, float* scratch, int queryBlock);

}  // namespace cpu

class CpuBackend : public Backend {
public:
    // threads <= 0: all hardware threads. Sets OpenBLAS's thread count to the same number
    // (a process-wide setting) in prepare().
    explicit CpuBackend(int threads = 0);
    ~CpuBackend() override;

    BackendInfo info() const override;
    // Throws std::invalid_argument for a bad shape, ModelError for a missing/mis-shaped weight.
    void prepareGraph(const ModelGraph& graph, const TensorMap& weights, int batch, int tileH, int tileW) override;
    void run(const std::vector<const float*>& inputs, int batch, const std::vector<float*>& outputs) override;
    void prepare(const UNetModel& model, int batch, int tileH, int tileW) override;
    void forward(const float* x, const float* timesteps, int batch, float* out) override;

    const ModelGraph& graph() const { return graph_; }
    // Floats held by activation buffers and scratch after prepare() (for memory reports).
    std::size_t preparedFloats() const;
    // When on, run() records the wall time of each op (index = graph().ops() index) of the
    // latest call, for "where did the time go" reports. Off by default.
    void setProfiling(bool on) { profiling_ = on; }
    const std::vector<double>& opMilliseconds() const { return opMs_; }

private:
    struct OpWeights {
        std::vector<const float*> params;  // the op's parameters' data, in op.params order
        cpu::AttentionWeights attn;
        cpu::ConvShape conv;
        int bandRows = 1;
        int queryBlock = 1;  // Attention over tokens: query rows per score block
    };
    // Per-op weights and the largest scratch any op needs; sets queryBlock_.
    std::vector<OpWeights> bindWeights(const ModelGraph& graph, const TensorMap& weights, int tileH, int tileW,
                                       std::size_t* scratchFloats);
    void planBuffers(const ModelGraph& graph, int batch, int tileH, int tileW);
    float* data(int value);
    std::int64_t pixels(int value) const;
    void runOp(std::size_t index, int batch);

    cpu::WorkerPool pool_;
    std::string cpuName_;
    bool prepared_ = false;
    ModelGraph graph_;
    int batch_ = 0, tileH_ = 0, tileW_ = 0;
    int queryBlock_ = 1;
    bool profiling_ = false;
    std::vector<double> opMs_;  // per op, sized in prepare()
    std::vector<OpWeights> weights_;         // per op
    std::vector<std::vector<float>> buffers_;  // pooled activation storage
    std::vector<int> bufferOf_;              // value -> buffer index
    std::vector<float> scratch_;             // im2col columns / attention work space
};

}  // namespace tessera
