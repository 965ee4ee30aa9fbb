// CpuBackend: the float32 reference evaluation of a ModelGraph on the host (for the UNet, the
// graph of core/models/unet/UNetGraph.h after fuseForExecution). Convolutions are im2col + OpenBLAS sgemm,
// GroupNorm statistics in double, attention as GEMMs with a max-subtracted float softmax. Qt-free.
//
// Threads: one worker pool owns the cores. OpenBLAS computes on the calling thread only (more
// OpenBLAS threads would make the bits depend on the thread count, and would fight the pool);
// every GEMM is cut into blocks of C whose shape depends on the GEMM's shape alone (never on the
// thread count or the tile batch), and the pool runs the blocks of all tiles of a batch at once,
// one single-threaded sgemm per block. Every output element is computed by exactly one task in a
// fixed order, so results do not depend on the thread count, and a tile's result does not
// depend on the other tiles of its batch.
//
// Two ways to spread a call's images over the threads (cpu::splitImages, the one rule): op by
// op (every thread on each op, a barrier after each: the only way for one image), or whole
// forwards (a lane per thread runs the whole graph for one image at a time on its own
// activations, no barrier between ops: what scales past a few threads, as a forward has
// hundreds of small ops). A thread with no image left helps a lane that still has one, taking
// tasks of that lane's ops, so the last partial round of a call (13 images on 16 threads)
// keeps every thread at work. An image's ops are the same code on the same shapes every way (a
// whole forward runs them on a one-thread pool, helped or not), so the bits are the same.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "core/graph/Backend.h"
#include "core/graph/ModelGraph.h"

namespace tessera {

// OpenBLAS reads OPENBLAS_CORETYPE only when it loads, and under some hypervisors it takes an
// AVX2 or AVX-512 CPU it does not recognise for an SSE3 one (seen on a GPU machine's 16-core
// "Intel(R) Xeon(R) Processor": Prescott kernels, 2.5x slower). The OPENBLAS_CORETYPE that gives
// such a CPU its own kernels: "SkylakeX" (AVX-512) or "Haswell" (AVX2 and FMA) when `loaded`
// (openblas_get_corename) is a pre-AVX2 core; empty where nothing needs changing.
std::string openblasCoreTypeFor(std::string_view loaded, bool avx2Fma, bool avx512);
// Call first thing in main(), before any thread starts: where openblasCoreTypeFor names a core
// type and neither OPENBLAS_CORETYPE nor kOpenblasRestartVariable is set, sets both and starts
// this program again in place (execv of /proc/self/exe with the same arguments). Returns where
// nothing needs changing or the exec failed. The CPU backend's device line says what was done.
void restartWithOpenblasKernelsForThisCpu(char** argv);
// Set by that restart to the core OpenBLAS had loaded before (and a guard against restarting twice).
inline constexpr const char* kOpenblasRestartVariable = "TESSERA_OPENBLAS_RESTARTED_FROM";


namespace cpu {

// All hardware threads (at least 1): the thread count 0 stands for.
int hardwareThreads();
// threads, or hardwareThreads() for threads <= 0.
int resolveThreads(int threads);

// A fixed set of worker threads running parallelFor. The calling thread takes part (worker 0),
// so a pool of 1 runs everything inline. Not reentrant: call parallelFor from one thread at a
// time, never from inside a body.
class WorkerPool {
public:
    explicit WorkerPool(int threads);  // threads <= 0: hardwareThreads()
    ~WorkerPool();
    WorkerPool(const WorkerPool&) = delete;
    WorkerPool& operator=(const WorkerPool&) = delete;

    int threads() const { return static_cast<int>(workers_.size()) + 1; }
    // Calls body(i), or body(i, worker) with worker in [0, threads()), once for every i in
    // [0, n), on whichever thread is free next (no fixed order); blocks until all are done.
    // A body must not throw and must not write what another index writes.
    template <class F>
    void parallelFor(std::int64_t n, F&& body) {
        using Body = std::remove_reference_t<F>;
        run(
            n,
            [](void* ctx, std::int64_t i, int worker) {
                Body& f = *static_cast<Body*>(ctx);
                if constexpr (std::is_invocable_v<Body&, std::int64_t, int>)
                    f(i, worker);
                else
                    f(i);
            },
            const_cast<void*>(static_cast<const void*>(std::addressof(body))));
    }

    // body(begin, end) for the pieces [i * grain, min(n, (i + 1) * grain)) of [0, n), as parallelFor.
    template <class F>
    void parallelRange(std::int64_t n, std::int64_t grain, F&& body) {
        parallelFor((n + grain - 1) / grain,
                    [&](std::int64_t i) { body(i * grain, std::min(n, (i + 1) * grain)); });
    }

    // Each worker's own scratch of at least `floats` floats (grown here, never shrunk; call it
    // outside parallelFor, then read scratch(worker) inside a body).
    void reserveScratch(std::size_t floats);
    float* scratch(int worker) {
        const auto w = static_cast<std::size_t>(worker);
        return w < scratch_.size() ? scratch_[w].data() : helperScratch_[w - scratch_.size()];
    }
    std::size_t scratchFloats() const;  // of all workers

    // Helpers: threads from outside the pool that take part in its calls for a while. Helper
    // `slot` runs its tasks as worker threads() + slot, with the scratch helperScratch[slot]
    // (each at least what reserveScratch asked; set while no call runs, kept by the caller).
    void setHelperScratch(std::vector<float*> helperScratch);
    int helperSlots() const { return static_cast<int>(helperScratch_.size()); }
    // Takes tasks of this pool's calls as helper `slot` (no other helper in that slot at the same
    // time) until `busy` reads false. While a helper is here, calls of a one-thread pool are
    // shared out instead of run inline; the results are the same, as a task's result does not
    // depend on which worker runs it.
    void helpWhile(int slot, const std::atomic<bool>& busy);

private:
    using Task = void (*)(void*, std::int64_t, int);
    void run(std::int64_t n, Task task, void* ctx);
    void workerLoop(int worker);
    void claimTasks(std::uint32_t generation, int worker);

    std::vector<std::thread> workers_;
    std::vector<std::vector<float>> scratch_;
    std::vector<float*> helperScratch_;
    std::atomic<int> helpers_{0};  // threads in helpWhile now
    std::mutex mutex_;
    std::condition_variable wake_, done_;
    bool stop_ = false;  // under mutex_
    // generation << 32 | the next index to hand out (WorkerPool::claimTasks in the .cpp says how a
    // late worker is kept from taking an index of a later call).
    std::atomic<std::uint64_t> state_{0};
    std::atomic<std::int64_t> n_{0}, finished_{0};
    std::atomic<Task> task_{nullptr};
    std::atomic<void*> ctx_{nullptr};
};

// How a call's `images` images are spread over `threads` threads: the first wholeForwards
// images as whole forwards on `lanes` threads (each lane takes the next image not yet taken),
// the other opByOp images op by op on every thread. Several images on several threads: all whole
// forwards, on min(threads, images) lanes (the threads beyond help them); one image, or one
// thread, op by op.
struct ImageSplit {
    int wholeForwards = 0, lanes = 0, opByOp = 0;
};
ImageSplit splitImages(int images, int threads);

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
// image's result does not depend on `images` or on the thread count.
void conv2d(WorkerPool&, const ConvShape&, int images, const float* x, const float* weight, const float* bias,
            const float* residual, float outScale, float* y);
// One image; reserves the pool's worker scratch it needs.
void conv2d(WorkerPool&, const ConvShape&, const float* x, const float* weight, const float* bias,
            const float* residual, float outScale, float* y);

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

struct AttentionWeights {
    const float *wq = nullptr, *bq = nullptr, *wk = nullptr, *bk = nullptr;
    const float *wv = nullptr, *bv = nullptr, *wo = nullptr, *bo = nullptr;
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
// batch * tokens ids held as floats. Throws std::out_of_range naming the row, position and
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
// wk, wv [channels, contextChannels]). Scores Q K^T / sqrt(d) and the softmax in float32;
// causal: query i sees keys 0..i.
struct TokenAttentionShape {
    int tokens = 0, channels = 0, contextTokens = 0, contextChannels = 0, heads = 1;
    bool causal = false;
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

// §2.6 for `images` images x [channels, pixels] (the pixels are the tokens; x already normalised):
// y = (to_out(softmax(Q K^T / sqrt(d)) V) + residual) * outScale, heads of d = channels / heads
// channels; residual [channels, pixels] or null. y must not alias x. scratch and queryBlock as
// tokenAttention's (attentionScratchFloats() per image).
void attention(WorkerPool&, int images, int channels, std::int64_t pixels, int heads, const AttentionWeights&,
               const float* x, const float* residual, float outScale, float* y, float* scratch, int scratchImages,
               int queryBlock);
// One image; reserves the pool's worker scratch for its score rows.
void attention(WorkerPool&, int channels, std::int64_t pixels, int heads, const AttentionWeights&, const float* x,
               const float* residual, float outScale, float* y, float* scratch, int queryBlock);

}  // namespace cpu

class CpuBackend : public Backend {
public:
    // threads <= 0: all hardware threads (cpu::hardwareThreads()). OpenBLAS is set to compute
    // on the calling thread (a process-wide setting) in prepare(): the pool owns the cores.
    explicit CpuBackend(int threads = 0);
    ~CpuBackend() override;

    // The threads that compute (0: all hardware threads); the image does not depend on it.
    // Takes effect at once (between runs; keeps what prepare() set up, planning the whole
    // forwards' activations again for the new count).
    void setThreads(int threads);
    // Whether calls of several images may run whole forwards (cpu::splitImages; on by
    // default); off: always op by op. The image does not depend on it. Takes effect at once.
    void setWholeForwards(bool allowed);
    // The host memory, in bytes, whole forwards' activations (every lane's own, and the helping
    // threads' scratch) may take where they need more than op by op alone; nullopt (the
    // default): half of what availableHostMemory() reports at prepare. Over it, calls run op by
    // op and parallelismNote() says why.
    void setWholeForwardMemory(std::optional<std::uint64_t> bytes);
    // How the prepared batch runs, for the record: "13 images in parallel, whole forwards",
    // "op by op" (one image, one thread), with the reason where whole forwards were refused.
    std::string parallelism() const;
    // Why calls run op by op although they could run whole forwards ("" when they do not).
    const std::string& parallelismNote() const { return note_; }
    // Threads with their own activations for whole forwards after prepare() (0: op by op only).
    int wholeForwardLanes() const { return static_cast<int>(lanes_.size()); }
    int threads() const { return pool_->threads(); }
    // The pool the backend computes on, for host work around its runs (one owner of the cores).
    cpu::WorkerPool& pool() { return *pool_; }

    BackendInfo info() const override;
    // Throws std::invalid_argument for a bad shape, ModelError for a missing/mis-shaped weight.
    void prepareGraph(const ModelGraph& graph, const TensorMap& weights, int batch, int tileH, int tileW) override;
    void run(const std::vector<const float*>& inputs, int batch, const std::vector<float*>& outputs) override;
    void prepare(const UNetModel& model, int batch, int tileH, int tileW) override;
    void forward(const float* x, const float* timesteps, int batch, float* out) override;

    // The scratch prepare() allocates for `graph` at this batch and tile size, in floats: shared
    // (attention's Q, K, V, O of the images attended at once) and each worker's own (im2col
    // columns of a block, a block of attention scores, GEGLU's projected rows).
    struct Scratch {
        std::size_t shared = 0, perWorker = 0;
    };
    static Scratch scratchNeeded(const ModelGraph& graph, int batch, int tileH, int tileW);

    const ModelGraph& graph() const { return graph_; }
    // Floats held by activation buffers and scratch after prepare() (for memory reports).
    std::size_t preparedFloats() const;
    // When on, run() runs op by op and records the wall time of each op (index = graph().ops()
    // index) of the latest call, for "where did the time go" reports. Off by default.
    void setProfiling(bool on);
    const std::vector<double>& opMilliseconds() const { return opMs_; }

private:
    struct OpWeights {
        std::vector<const float*> params;  // the op's parameters' data, in op.params order
        cpu::AttentionWeights attn;
        cpu::ConvShape conv;
        int queryBlock = 1;     // Attention: query rows per task
    };
    // The activations of `batch` images: buffers reused after each value's last reader, and the
    // scratch all workers share (attention's Q, K, V, O of the images attended at once).
    struct Workspace {
        int batch = 0;
        std::vector<std::size_t> sizes;   // of each buffer, in floats
        std::size_t sharedFloats = 0;
        std::vector<int> bufferOf;        // value -> buffer index
        std::vector<int> scratchImages;   // per op: Attention's images attended at once
        std::vector<std::vector<float>> buffers;  // sizes, once allocated
        std::vector<float> shared;
        void allocate();
        float* data(int value);
        std::size_t floats() const;       // what allocate() holds
    };
    // A thread's own one-thread pool (its worker scratch) and activations for whole forwards.
    struct Lane {
        std::unique_ptr<cpu::WorkerPool> pool;
        Workspace space;
    };
    // Per-op weights and plans.
    std::vector<OpWeights> bindWeights(const ModelGraph& graph, const TensorMap& weights, int tileH, int tileW);
    // The plan of graph_'s activations for `batch` images (not allocated).
    Workspace planWorkspace(int batch) const;
    // The op-by-op workspace and the lanes for the current thread count (prepared_ graph).
    void planParallelism();
    std::int64_t pixels(int value) const;
    // Images [first, first + count) of a call through the whole graph on `pool` in `space`.
    void runImages(cpu::WorkerPool& pool, Workspace& space, const std::vector<const float*>& inputs, int first,
                   int count, const std::vector<float*>& outputs);
    void runOp(cpu::WorkerPool& pool, Workspace& space, std::size_t index, int batch);

    std::unique_ptr<cpu::WorkerPool> pool_;
    std::string cpuName_;
    std::string blasKernels_;  // "OpenBLAS Haswell", with a warning when older than the CPU
    bool prepared_ = false;
    ModelGraph graph_;
    int batch_ = 0, tileH_ = 0, tileW_ = 0;
    std::size_t workerFloats_ = 0;           // each worker's scratch, as prepare() planned it
    bool profiling_ = false;
    bool wholeForwards_ = true;
    std::optional<std::uint64_t> wholeForwardMemory_;
    std::string note_;                       // parallelismNote()
    std::vector<double> opMs_;  // per op, sized in prepare()
    std::vector<OpWeights> weights_;         // per op
    Workspace batched_;                      // op by op: the images a call runs that way
    std::vector<Lane> lanes_;                // whole forwards: one per thread or image
    std::vector<std::vector<float>> helperScratch_;  // the threads beyond the lanes: their scratch
};

}  // namespace tessera
