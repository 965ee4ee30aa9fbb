// CudaTileDevice: the tiled loop's device on an NVIDIA GPU (core/sampling/TileDevice.h). The canvas and
// its accumulators live in device memory (kernels/engine/RunArena.h); tiles are gathered into the
// backend's NHWC input, the scheduler update is fused into the window-weighted scatter (fusion
// "sample") or applied after the normalise (fusion "noise"), and noise is Philox drawn on the
// device. The per-step kernels read the step index and seed from a StepState in device memory
// (set by a one-thread kernel in beginStep in every mode), so one captured graph serves every
// step and every seed. Timings come from CUDA events (per tile batch and per step), with NVTX
// ranges run / step / tile batch for Nsight. Asynchronous: a step's tile batches, its
// non-finite site and its timings are known at endStep.
//
// CUDA graphs (RunConfig::graphs), all from one LRU graph cache (kernels/engine/GraphCache.h) that
// lives in the device across runs, with the run arena (same sizes: same pointers):
//   off  - every call launches its kernels from the host;
//   tile - evaluate() replays the UNet forward of the batch from a captured graph, one per
//          (batch size, lane), acquired in beginStep (out of the step's device timings);
//   step - runStep() captures the loop's whole step body (every batch's gather / forward /
//          non-finite check / scatter between event-record nodes, the fuse and the canvas
//          check) once per StepVariant (normal, preview, last; keeping the x0 canvas or not) and
//          replays it.
// graphWarmup steps run eagerly before the first capture of a run (cached graphs are replayed at
// once). A capture that fails turns graphs off for the rest of the run; the RunRecord
// (graphs.fallbackReason, messages) and the observer say why. Same kernels, same arguments, same
// order in every mode: the images are bit-identical.
//
// Lanes (RunConfig::lanes; 0 = auto: 4 below 16 Ki tile pixels per forward, else 2): batch j is
// gathered and evaluated on lane j % lanes, i.e. its own stream and its own copy of the backend's
// activations and workspaces (CudaBackend::prepare(..., lanes)), and checked and scattered on the
// backend's stream in batch order; lanes wait on events (forkLanes: the step's start; beginBatch:
// the scatter that last read their buffers; joinBatch: the main stream waits for the forward), so
// several small forwards overlap on the GPU while the accumulation order, and every bit of the
// image, stays that of one lane. Step graphs then fork and join. A plan prepared with more lanes
// serves runs with fewer; auto halves the lanes when a plan does not fit.
//
// Non-finite values: each tile batch's output and the canvas after each step's update are checked
// on the device (kernels/ops/NonFinite.cuh), which keeps the first (step, tile batch) holding a NaN or
// an infinity in one word of the run arena; endStep copies it back with the step's own wait.
//
// The tile function is the CudaBackend's UNet: map passes (another canvas size or channel count)
// and guided passes are refused in beginRun until the backend lowers a VAE and a conditioned UNet.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/formats/TuningCache.h"
#include "core/sampling/TileDevice.h"
#include "kernels/backend/CudaBackend.h"
#include "kernels/device/DeviceResources.h"
#include "kernels/engine/GraphCache.h"
#include "kernels/engine/RunArena.h"
#include "kernels/ops/TileScatter.cuh"
#include "kernels/ops/TiledCanvas.cuh"

namespace tessera {

class CpuBackend;  // core/cpu/CpuBackend.h

class CudaTileDevice final : public TileDevice {
public:
    explicit CudaTileDevice(int device);
    ~CudaTileDevice() override;
    CudaTileDevice(const CudaTileDevice&) = delete;
    CudaTileDevice& operator=(const CudaTileDevice&) = delete;

    // The backend of the last run (nullptr before the first prepare).
    const CudaBackend* backend() const { return backend_.get(); }

    // TileDevice's overrides, declared as in CpuTileDevice.h: one interface, two devices.
    // Prepares the backend once per (model, precision, batch, tile shape, lanes); an out-of-memory
    // plan throws CudaOutOfMemory (its message names the needed and free MiB; largestBatch()).
    DevicePlan prepare(const DevicePrepare& request, RunRecord& record) override;
    void beginRun(const TiledPass& pass, RunRecord& record, std::function<void(const std::string&)> say) override;
    void startCanvas(const CanvasStart& start) override;
    // Host step noise (TiledPass::hostStepNoise): scaled by the step's sigma and copied to the
    // device in beginStep, added to the canvas after the fuse (the kernels see sigma 0).
    void setStepNoise(const std::vector<float>* z) override { stepNoiseGiven_ = z; }
    // torch.randn on this GPU (kernels/ops/TorchCudaRandn.cuh), read back to the host.
    NormalGeneratorFactory torchCudaGenerators() override;

    void beginStep(int step, const StepVariant& variant) override;
    bool runStep(const StepVariant& variant, const std::function<bool(bool capturing)>& body) override;
    StepReport endStep() override;
    bool synchronous() const override { return false; }

    void forkLanes() override;
    void beginBatch(const TileBatch& batch) override;
    void gather(const TileBatch& batch) override;
    void evaluate(const TileBatch& batch, Branch branch) override;
    void combineGuidance(const TileBatch& batch, float scale) override;
    void joinBatch(const TileBatch& batch) override;
    bool checkOutput(const TileBatch& batch) override;
    void scatter(const TileBatch& batch, const StepVariant& variant) override;
    void endBatch(const TileBatch& batch) override;
    void fuse(const StepVariant& variant) override;
    bool checkCanvas() override;
    void abandonStep() override;

    std::vector<float> readPreview(bool x0) override;
    std::vector<float> readCanvas() override;
    SeamSums readSeams() override;
    void finishRun(RunRecord& record) override;
    // A CudaBackend of its own at the run's precision (the VAE), on this device.
    Backend& wholeGraphBackend(const RunConfig& config) override;
    // Free device memory (cudaMemGetInfo) less kVaeReserveBytes, at 2 bytes a value (4 in fp32),
    // tensors limited to cuDNN's 2^31 - 1 elements; capped by setVaeMemoryLimit. Where less than
    // kVaeReserveBytes + kVaeTightBytes is free and the sampler's plan is held, that plan (the
    // UNet's weights, activations and graphs) is given back first: the decode of an image that
    // sampled must not fail for memory the sampler no longer uses; the next run prepares again.
    std::optional<VaeMemoryBudget> vaeMemoryBudget(const RunConfig& config) override;
    // The stream wholeGraphBackend's work is ordered on (timing events); nullptr before the first call.
    cudaStream_t wholeGraphStream() const;
    // A float32 CPU backend of its own on all hardware threads: the text encoders run on the
    // host in float32 on both engines, so the conditioning is the CPU engine's to the bit.
    Backend& textBackend() override;
    // Caps vaeMemoryBudget at `bytes` (tests, benchmarks: force a tiled pass); nullopt: no cap.
    void setVaeMemoryLimit(std::optional<std::uint64_t> bytes) { vaeLimit_ = bytes; }
    // What vaeMemoryBudget keeps back from the free memory: the VAE's weights (fp16 SD: 160 MiB),
    // cuDNN's and cuBLAS' workspaces and the allocator's slack.
    static constexpr std::uint64_t kVaeReserveBytes = 3ull << 29;  // 1.5 GiB
    static constexpr std::uint64_t kVaeTightBytes = 2ull << 30;    // 2 GiB

private:
    // Rows of one forward for a batch of `count` tiles: doubled when guided (conditional rows,
    // then unconditional ones).
    int forwardRows(int count) const { return guided_ ? 2 * count : count; }
    void uploadContext(const Denoiser& model, int batch);
    void placeContext(const TileBatch& batch, cudaStream_t stream);
    void uploadAddedCond(const TiledPass& pass);
    void placeAddedCond(const TileBatch& batch, cudaStream_t stream);
    cudaStream_t stream() const;
    cudaStream_t laneStream(int lane) const;
    std::size_t canvasSize() const;
    ScatterTargets targets(const StepVariant& variant) const;
    void ensureArena(const ArenaPlan& plan);
    std::size_t arenaGrowth(const DevicePrepare& request) const;
    void uploadTables(const TiledPass& pass);
    void uploadStepNoise(int step);
    // Graph keys: the family holds everything that fixes a graph's nodes and launch shapes, the
    // pointers what it bakes in (kernels/engine/GraphCache.h).
    std::string lanePointers(int lane) const;
    GraphKey tileKey(int count, int lane) const;
    GraphKey stepKey(const StepVariant& variant) const;
    void noteUse(const std::string& key, const GraphCache::Acquired& acquired);
    void acquireTileGraphs();
    void fallBack(const std::string& why);
    // NVTX ranges open across calls: 1 run, 2 step, 3 tile batch (closing a level closes those inside).
    void openRange(int level, const std::string& name);
    void closeRanges(int level);

    // Live across runs, so that graphs captured in one run are replayed by the next: the backend,
    // the arena (same plan, same pointers), the timing events (handles baked into step graphs;
    // only ever added to) and the graph cache itself. Declared after the backend: destroyed before it.
    int device_ = 0;
    std::unique_ptr<CudaBackend> backend_;
    // The tuning cache of the last prepare (RunConfig::tuningCache resolved), read fresh for
    // every prepare so that choices other processes stored since are used.
    std::unique_ptr<TuningCache> tuning_;
    struct Shape {
        std::uint64_t generation = 0;
        const ModelGraph* graph = nullptr;  // held by preparedGraph_
        Precision precision = Precision::FP16;
        int batch = 0, tileH = 0, tileW = 0, lanes = 1;
        bool guided = false;
        bool operator==(const Shape&) const = default;
    };
    std::shared_ptr<const ModelGraph> preparedGraph_;
    // Text conditioning (conditioned UNets): `batch` conditional rows then `batch` unconditional
    // ones of [tokens, dim] in the activation type, copied into the forward's token input.
    bool guided_ = false;
    std::size_t contextRowBytes_ = 0;
    int contextBatch_ = 0;
    DeviceBuffer context_;
    // SDXL's per-tile text_embeds_time (TiledPass::addedCond): [tiles][dim] conditional rows, then
    // (guided) as many unconditional ones, float32 (vectors stay float32), copied into the
    // forward's vector input per batch like the context; its pointer is part of step graph keys.
    int addedDim_ = 0, addedTiles_ = 0;
    DeviceBuffer addedTable_;
    // wholeGraphBackend's: a CudaBackend whose prepares take their timed choices from the run's
    // tuning cache file and store them there, so the VAE decodes to the same bits in every process.
    class TunedBackend;
    std::unique_ptr<TunedBackend> whole_;
    std::unique_ptr<CpuBackend> text_;  // textBackend's
    std::optional<std::uint64_t> vaeLimit_;
    std::optional<Shape> prepared_;
    // The last auto tile batch lowered to fit: the shape it was asked for (lanes 0) and what
    // fitted, so that the next run of that shape starts there instead of failing again.
    std::optional<std::pair<Shape, int>> autoFit_;
    std::uint64_t planEpoch_ = 0;  // counts backend (re)plans: graphs bake in the plan's memory
    RunArena arena_;
    std::vector<CudaEvent> batchEvents_;  // two per batch: start (lane stream), end (after the scatter)
    CudaEvent stepBegin_, stepEnd_;
    PinnedBuffer nonFiniteHost_;  // the arena's non-finite word, copied back after each step
    // Host step noise (TiledPass::hostStepNoise): sigma * z of the step on the device (zero for a
    // step without noise), its pinned staging copy, and the host's z given for the next step.
    DeviceBuffer stepNoise_;
    PinnedBuffer stepNoiseHost_;
    const std::vector<float>* stepNoiseGiven_ = nullptr;
    // Lanes (when more than one): one stream per lane for gathers and forwards, the backend's
    // stream for checks, scatters and fuses, and the dependency events between them (no timing):
    // the step's start, and per batch its forward's end and its scatter's end.
    std::vector<CudaStream> laneStreams_;
    CudaEvent lanesGo_;
    std::vector<CudaEvent> forwardDone_, scatterDone_;
    GraphCache graphs_{16};

    // This run.
    const TiledPass* pass_ = nullptr;
    std::function<void(const std::string&)> say_;
    GraphCacheCounters countersBefore_;
    GraphMode mode_ = GraphMode::Off;
    int graphWarmup_ = 0, lanes_ = 1;
    std::string planFamily_, fallbackReason_;
    int stepsCapacity_ = 0;
    CanvasGeometry geo_, stepGeo_;  // stepGeo_: seed 0 (the step kernels read it from the StepState)
    TileTensor inIo_, outIo_;
    float* x_ = nullptr;
    float* history_ = nullptr;  // the arena's history canvases (TiledPass::keepsHistory), else nullptr
    const StepCoefficients* coeff_ = nullptr;
    StepState* state_ = nullptr;
    unsigned long long* nonFinite_ = nullptr;
    bool capturing_ = false;  // the step body is being recorded into a step graph
    bool hasX0Prev_ = false;  // a step has begun since startCanvas (core/sampling/TileDevice.h: the x0 canvas)
    int stepsDone_ = 0;       // steps run so far in this run: the warm-up before the first capture
    bool stepCaptured_ = false, stepReplayed_ = false;
    double peak_ = -1;
    // The graphs this run launched, for record.graphs.used.
    std::vector<std::string> usedOrder_;
    std::map<std::string, GraphEntryStats> usedGraphs_;
    // Tile mode: this step's forward graphs, keyed by (batch size, lane): each lane's graph bakes
    // in that lane's buffers. Captured on the backend's stream, launched on the lane's.
    struct TileGraph {
        cudaGraphExec_t exec = nullptr;
        std::string key;
    };
    std::map<std::pair<int, int>, TileGraph> tileGraphs_;
    int nvtxDepth_ = 0;
    // ControlNets (TiledPass::controls): the graph's tile is the latent tile times this; the run's
    // hint canvases and scale tables on the device (each unit's start in floats), the tables' steps.
    int graphTileScale_ = 1;
    DeviceBuffer controlHints_, controlScales_;
    std::vector<std::size_t> controlHintOffsets_, controlScaleOffsets_;
    int controlSteps_ = 0;
    void uploadControls(const TiledPass& pass);
    void placeControls(const TileBatch& b, cudaStream_t ls);
};

}  // namespace tessera
