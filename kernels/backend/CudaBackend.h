// CudaBackend: lowers a ModelGraph (core/graph/ModelGraph.h; for the UNet, the fused graph of
// core/models/unet/UNetGraph.h) onto an NVIDIA GPU. NHWC activations in float32, float16 or bfloat16 with
// float32 accumulation, vectors in float32; convolutions through cuDNN (algorithms benchmarked
// once in prepare), GroupNorm(+pre-add, +FiLM, +SiLU), attention softmax and elementwise ops as
// own kernels, linear layers through cuBLAS. fp16/bf16 attention runs fused where it is faster
// (kernels/ops/FlashAttention.cuh: scores never in memory; TESSERA_CUDA_FLASH); otherwise its
// scores are float32 blocks within a budget (kernels/backend/AttentionPlan.h; TESSERA_CUDA_ATTENTION_MIB,
// default 256), so an attention of any size fits; token ids (CLIP) stay float32. prepare() plans every buffer from tensor
// lifetimes into one device arena (weights + activations + workspace); nothing allocates after
// it. The lowering choices (which ops share a launch, where biases go) are listed in
// docs/ENGINE_GRAPH.md; which file holds which part of the backend, in docs/CUDA_BACKEND.md.
//
// This header includes no CUDA header, so Qt-side code can hold a CudaBackend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/graph/Backend.h"
#include "core/run/RunConfig.h"
#include "core/run/RunRecord.h"

struct CUstream_st;

namespace tessera {

class TuningCache;  // core/formats/TuningCache.h

// True when a CUDA device can be used; otherwise `why` (if given) says why
// ("no CUDA device: <cudaGetErrorString>").
bool cudaDeviceAvailable(std::string* why = nullptr);

// prepare() could not fit the plan into device memory.
class CudaOutOfMemory : public std::runtime_error {
public:
    CudaOutOfMemory(const std::string& message, int largestBatch)
        : std::runtime_error(message), largestBatch_(largestBatch) {}
    int largestBatch() const noexcept { return largestBatch_; }  // 0 when not even one tile fits

private:
    int largestBatch_;
};

struct CudaMemoryPlan {
    std::size_t weightsBytes = 0;
    std::size_t activationsBytes = 0;          // planned (shared) activation region
    std::size_t unsharedActivationsBytes = 0;  // what one buffer per tensor would need
    std::size_t workspaceBytes = 0;            // cuDNN + cuBLAS workspace
    std::size_t totalBytes = 0;                // the one arena
    int tensors = 0;
    int lanes = 1;  // copies of activations + workspace in the arena
};

class CudaBackend final : public Backend {
public:
    // Throws (std::runtime_error / CudaError) when the device cannot be used, std::invalid_argument
    // naming the variable for an environment setting it cannot take (TESSERA_CUDA_ATTENTION_MIB,
    // TESSERA_CUDA_FLASH).
    explicit CudaBackend(Precision precision = Precision::FP16, int device = 0);
    ~CudaBackend() override;
    CudaBackend(const CudaBackend&) = delete;
    CudaBackend& operator=(const CudaBackend&) = delete;

    BackendInfo info() const override;
    // Throws CudaOutOfMemory (the message names the needed and free MiB; largestBatch()) when the plan
    // does not fit, std::invalid_argument for shapes the graph cannot take. The weights are
    // uploaded here (not read afterwards).
    void prepareGraph(const ModelGraph& graph, const TensorMap& weights, int batch, int tileH, int tileW) override;
    // With `lanes` copies of the activation region and workspaces (the weights shared), so
    // that up to `lanes` forwards can run at once on different streams (1..kMaxLanes, core/run/RunConfig.h).
    void prepareGraph(const ModelGraph& graph, const TensorMap& weights, int batch, int tileH, int tileW, int lanes);
    // Host float32 in and out (copies through the device); synchronises.
    void run(const std::vector<const float*>& inputs, int batch, const std::vector<float*>& outputs) override;
    void prepare(const UNetModel& model, int batch, int tileH, int tileW) override;
    void forward(const float* x, const float* timesteps, int batch, float* out) override;
    // A tiled pass's canvases in this device's memory (kernels/backend/CudaCanvasStore.h) when they fit
    // its free memory with room for the segments' plans; else nullptr (host canvases).
    std::unique_ptr<TiledCanvasStore> makeCanvasStore(std::uint64_t canvasBytes) override;
    // The memory plan prepareGraph(graph, weights, batch, tileH, tileW) would make, without device
    // memory: lowering and buffer placement only (weightsBytes, activationsBytes,
    // unsharedActivationsBytes, tensors; workspaceBytes is cuBLAS' alone: prepare sizes cuDNN's to
    // the algorithms it chooses, within half of what is free after the rest; totalBytes the sum
    // without it). Forgets the prepared plan (prepare again before running). For graphs without
    // attention (an attention's path is timed while lowering).
    CudaMemoryPlan planGraph(const ModelGraph& graph, const TensorMap& weights, int batch, int tileH, int tileW);
    int lanes() const;                // prepared lanes (0 before prepare)
    const ModelGraph& graph() const;  // the prepared graph

    Precision precision() const;
    CudaMemoryPlan memoryPlan() const;
    std::string planSummary() const;  // layers, chosen cuDNN algorithms, buffer counts

    // The last prepare's Attention ops, in plan order: the path each takes (fp16/bf16: the fused
    // kernel of kernels/ops/FlashAttention.cuh, or the blocked plan of kernels/backend/AttentionPlan.h; fp32:
    // always blocked), why ("timed", "tuning cache", "TESSERA_CUDA_FLASH=0"/"=1", or why the fused
    // kernel does not apply), and where prepare timed both paths (TESSERA_CUDA_FLASH=auto, no
    // cached choice) their GPU time for softmax(Q K^T) V alone (no projections) at the prepared
    // batch, median of 10 on scratch operands.
    struct AttentionPath {
        std::string op;
        bool fused = false;
        std::string reason;
        int blockQueries = 0, warps = 0;      // fused: the kernel's query rows and warps per CTA
        double fusedMs = -1, blockedMs = -1;  // -1: not timed; fusedMs is the fastest fused tiling
        std::string tilingTimes;              // timed: each fused tiling's ms ("64/4w 0.1234 ms, ...")
        double flops = 0;                     // of softmax(Q K^T) V: 4 x batch x heads x queries x keys x d
        // cuDNN's fused attention (kernels/backend/CudnnSdpa.h, TESSERA_CUDA_SDPA) at the prepared batch:
        // its plan when taken ("" = not: the path above runs every batch), why taken or not
        // ("timed", "tuning cache", "TESSERA_CUDA_SDPA=0"/"=1", or cuDNN's refusal), and where
        // prepare timed it, its time beside the path above's at the same call (ms).
        std::string cudnn;
        std::string cudnnReason;
        double cudnnMs = -1, ownMs = -1;
    };
    std::vector<AttentionPath> attentionPaths() const;

    // Device-side interface for the CUDA engine (for the graph's first feature-map input,
    // first vector input and first output); all work is ordered on stream().
    CUstream_st* stream() const;
    // Per lane (0..lanes()-1):
    void* deviceInput(int lane = 0) const;  // NHWC [batch, tileH, tileW, inputChannelsPadded()], activation type
    const void* deviceOutput(
        int lane = 0) const;                     // NHWC [batch, tileH, tileW, outputChannelsPadded()], activation type
    float* deviceTimesteps(int lane = 0) const;  // [batch] float32
    // The first token-sequence input ([batch, tokens, C], activation type, C unpadded: the text
    // context of a conditioned UNet); nullptr when the graph has none.
    void* deviceTokens(int lane = 0) const;
    // The vector input named `name` ([batch, C] float32, e.g. SDXL's "text_embeds_time"); nullptr
    // when the prepared graph has no such input.
    float* deviceVector(const std::string& name, int lane = 0) const;
    // A lane's buffer of the prepared graph's input / output k (graph order), written and read
    // in place of run()'s host copies (the device canvas store): feature maps NHWC [batch, h, w,
    // channels rounded up to 8] and token sequences [batch, rows, C] in the activation type,
    // vectors [batch, C] float32; nullptr for an input read as token ids only. Then enqueue().
    void* deviceGraphInput(std::size_t k, int lane = 0) const;
    const void* deviceGraphOutput(std::size_t k, int lane = 0) const;
    int inputChannelsPadded() const;
    int outputChannelsPadded() const;
    // The float32 NCHW staging buffer of the prepared graph's feature-map input / output k (graph
    // order; lane 0, [batch, C, h, w] at the prepared batch) that run() copies the host's buffers
    // through; nullptr for a vector. A caller with copies of its own (pinned memory, ordered on
    // stream()) fills the inputs', calls enqueueStaged and reads the outputs'.
    float* stagedInput(std::size_t k) const;
    const float* stagedOutput(std::size_t k) const;
    // run() between its host copies, on stream() and without synchronising: the staged inputs into
    // the activations, the forward of the first `batch` tiles (enqueue(batch): the captured graph
    // when graphs are on), the outputs into their staging. Vector inputs are not staged (set them
    // through deviceVector).
    void enqueueStaged(int batch);
    // Enqueues the UNet for the first `batch` tiles of deviceInput(); does not synchronise.
    // While stream() is being captured by the caller (step graphs), the kernels are enqueued
    // directly (no nested tile graph), so they become nodes of the caller's graph.
    void enqueue(int batch);
    // The same for lane `lane`'s buffers, enqueued on `stream` (nullptr: stream()). Other
    // lanes' work may run concurrently; ordering between lanes is the caller's (events).
    // The backend's own graphs (setGraphs) serve lane 0 on stream() only.
    void enqueue(int batch, int lane, CUstream_st* stream);

    // CUDA graphs: with graphs on, enqueue() replays one captured graph of the whole forward
    // per batch size (captured on first use; prepare() drops them). A failed capture turns
    // graphs off for this plan; graphStats().fallbackReason says why. Same kernels, same
    // memory, so results are bit-identical either way.
    void setGraphs(bool enabled);
    GraphStats graphStats() const;

    // Tuning: the choices prepare makes by timing (each conv shape's legacy cuDNN algorithm;
    // fp16/bf16: graph-API plan or legacy, epilogue fused or apart) are looked up in `cache`
    // first and used when cuDNN accepts them (else timed again, replaced, with a warning), and
    // timed ones are stored in it; the caller saves it (TuningCache::save). nullptr (the
    // default): every prepare times, as without a cache. Not owned; it must outlive prepare.
    void setTuningCache(TuningCache* cache);
    // How the user counts what prepare is given: UNet images per tile (2 under classifier-free
    // guidance) and image pixels per tile pixel (8 for SD latents). An out-of-memory plan then
    // names the tile batch and tile size as the user set them.
    void setTileTerms(int imagesPerTile, int pixelScale);
    // Device memory the caller will allocate after the plan (the tile device's canvas): a prepare
    // fits its plan into what is free less this, so that an auto tile batch lowered to fit leaves
    // room for it.
    void setReservedBytes(std::size_t bytes);
    // The last prepare's hits, misses (timed choices), refused cached choices, the digest of
    // every choice the plan uses, and the numerics-changing settings (cachePath left empty).
    TuningInfo tuningInfo() const;
    std::vector<std::string> tuningWarnings() const;  // the last prepare's refused cached choices

    // Diagnostics: GPU time of every op of the forward (CUDA events around each op; with
    // inGraph, event-record nodes inside one captured graph of the forward, free of host
    // launch latency), median of `repeats` forwards of the first `batch` tiles, plan order.
    struct OpTime {
        std::string name;
        double ms = 0;
    };
    std::vector<OpTime> profileOps(int batch, int repeats, bool inGraph = true);

    // Benchmarks: `repeats` whole forwards of the first `batch` tiles as enqueue() runs them (the
    // captured graph when graphs are on) on the device inputs as they are, after `warmup`
    // untimed ones, each waited for. Per forward its GPU time (CUDA events around it) and the
    // host time of the enqueue call, in ms; then the device memory in use (total - free, every
    // process's, MiB). Throws std::invalid_argument for warmup < 0 or repeats < 1.
    struct ForwardTimes {
        std::vector<double> gpuMs, hostEnqueueMs;
        double deviceUsedMiB = -1;
    };
    ForwardTimes timeForwards(int batch, int warmup, int repeats);

    // Diagnostics: runs forward layer by layer, synchronising after each, and returns every
    // layer's output (NHWC with `channels` stored channels, as float32; empty for layers without
    // one) for the first `batch` tiles. `value` names the graph value the output holds once the
    // layer has run (empty for a partial result: a convolution before its epilogue), so traces
    // compare with the CPU backend's values of the same graph.
    struct LayerTrace {
        std::string name;
        std::string value;
        int channels = 0;
        std::vector<float> values;
    };
    std::vector<LayerTrace> traceForward(const float* x, const float* timesteps, int batch);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tessera
