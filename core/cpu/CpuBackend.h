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
//
// The operations are in core/cpu/CpuOps.h (core/cpu/ops/, a file per family), the threads in
// core/cpu/WorkerPool.h, the OpenBLAS kernel choice in core/cpu/OpenblasKernels.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/cpu/CpuOps.h"
#include "core/cpu/OpenblasKernels.h"
#include "core/cpu/WorkerPool.h"
#include "core/graph/Backend.h"
#include "core/graph/ModelGraph.h"

namespace tessera {

namespace cpu {

// How a call's `images` images are spread over `threads` threads: the first wholeForwards
// images as whole forwards on `lanes` threads (each lane takes the next image not yet taken),
// the other opByOp images op by op on every thread. Several images on several threads: all whole
// forwards, on min(threads, images) lanes (the threads beyond help them); one image, or one
// thread, op by op.
struct ImageSplit {
    int wholeForwards = 0, lanes = 0, opByOp = 0;
};
ImageSplit splitImages(int images, int threads);

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
    // The activation buffers (and shared scratch) prepare() allocates to run `graph` op by op on
    // `batch` images of tileH x tileW, in floats, planned without allocating (the workers' own
    // scratch is scratchNeeded().perWorker each). Throws std::invalid_argument for a bad tile.
    static std::size_t activationFloats(const ModelGraph& graph, int batch, int tileH, int tileW);

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
        int queryBlock = 1;       // Attention: query rows per task
        std::vector<float> rope;  // QkNormRope: cos and sin of each token's pairs at this tile size
    };
    // The activations of `batch` images: buffers reused after each value's last reader, and the
    // scratch all workers share (attention's Q, K, V, O of the images attended at once).
    struct Workspace {
        int batch = 0;
        std::vector<std::size_t> sizes;  // of each buffer, in floats
        std::size_t sharedFloats = 0;
        std::vector<int> bufferOf;                // value -> buffer index
        std::vector<int> scratchImages;           // per op: Attention's images attended at once
        std::vector<std::vector<float>> buffers;  // sizes, once allocated
        std::vector<float> shared;
        void allocate();
        float* data(int value);
        std::size_t floats() const;  // what allocate() holds
    };
    // A thread's own one-thread pool (its worker scratch) and activations for whole forwards.
    struct Lane {
        std::unique_ptr<cpu::WorkerPool> pool;
        Workspace space;
    };
    // Per-op weights and plans.
    std::vector<OpWeights> bindWeights(const ModelGraph& graph, const TensorMap& weights, int tileH, int tileW);
    // The plan of `graph`'s activations for `batch` images of tileH x tileW (not allocated).
    static Workspace planWorkspace(const ModelGraph& graph, int batch, int tileH, int tileW);
    // The op-by-op workspace and the lanes for the current thread count (prepared_ graph).
    void planParallelism();
    std::int64_t pixels(int value) const;
    // Images [first, first + count) of a call through the whole graph on `pool` in `space`.
    void runImages(cpu::WorkerPool& pool, Workspace& space, const std::vector<const float*>& inputs, int first,
                   int count, const std::vector<float*>& outputs);
    void runOp(cpu::WorkerPool& pool, Workspace& space, std::size_t index, int batch);
    // FLUX's transformer ops (ChannelSlice over tokens, AdaLayerNorm, GatedAdd, QkNormRope,
    // PackedAttention, TokenConcat, TokenSplit), as runOp runs the others.
    void runTransformerOp(cpu::WorkerPool& pool, Workspace& space, std::size_t index, int batch);

    std::unique_ptr<cpu::WorkerPool> pool_;
    std::string cpuName_;
    std::string blasKernels_;  // "OpenBLAS Haswell", with a warning when older than the CPU
    bool prepared_ = false;
    ModelGraph graph_;
    int batch_ = 0, tileH_ = 0, tileW_ = 0;
    std::size_t workerFloats_ = 0;  // each worker's scratch, as prepare() planned it
    bool profiling_ = false;
    bool wholeForwards_ = true;
    std::optional<std::uint64_t> wholeForwardMemory_;
    std::string note_;                               // parallelismNote()
    std::vector<double> opMs_;                       // per op, sized in prepare()
    std::vector<OpWeights> weights_;                 // per op
    Workspace batched_;                              // op by op: the images a call runs that way
    std::vector<Lane> lanes_;                        // whole forwards: one per thread or image
    std::vector<std::vector<float>> helperScratch_;  // the threads beyond the lanes: their scratch
};

}  // namespace tessera
