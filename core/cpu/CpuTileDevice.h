// CpuTileDevice: the tiled loop's device on the host (core/sampling/TileDevice.h). Canvas, noise and
// accumulators are float32 host vectors; every call finishes before it returns (synchronous),
// in the order the loop issues it, so the image depends only on that order. The tile function
// is a Backend's forward (the sampler: the CPU reference backend, or a device backend that
// takes host buffers) or any host function over NCHW tiles (a map pass). Qt-free.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/graph/Backend.h"
#include "core/sampling/TileDevice.h"

namespace tessera {

class CpuBackend;
namespace cpu {
class WorkerPool;
}

// out = f(in, timesteps) for `count` tiles: in is float32 NCHW [count, inChannels, tileH, tileW],
// out [count, outChannels, outTileH, outTileW] (the pass's output tile size), timesteps `count` floats.
using HostTileFunction = std::function<void(const float* in, const float* timesteps, int count, float* out, Branch)>;

// The record's hint where a CPU run's tile batch leaves most of its threads sharing a few tiles
// layer by layer (op by op, or many helpers per tile): `tiles` tiles in batches of batchSize on
// `threads` threads. "" where the batch keeps at least half the threads on tiles of their own,
// for fewer than 4 threads, or where one call takes every tile.
std::string tileBatchHint(int batchSize, int tiles, int threads);

// Not final: tests derive from it to read the canvas between steps.
class CpuTileDevice : public TileDevice {
public:
    // The sampler's device: backend.forward is the tile function (a UNet takes no conditioning,
    // so both branches evaluate it alike); prepare() prepares the backend once per shape.
    explicit CpuTileDevice(Backend& backend);
    // A map pass's device: `function` is the tile function; nothing to prepare.
    explicit CpuTileDevice(HostTileFunction function);
    ~CpuTileDevice() override;

    // TileDevice's overrides, declared as in CudaTileDevice.h: one interface, two devices.
    DevicePlan prepare(const DevicePrepare& request, RunRecord& record) override;
    void beginRun(const TiledPass& pass, RunRecord& record, std::function<void(const std::string&)> say) override;
    void startCanvas(const CanvasStart& start) override;
    void setStepNoise(const std::vector<float>* z) override { stepNoiseGiven_ = z; }

    void beginStep(int step, const StepVariant& variant) override;
    bool runStep(const StepVariant& variant, const std::function<bool(bool capturing)>& body) override;
    StepReport endStep() override;
    bool synchronous() const override { return true; }

    void gather(const TileBatch& batch) override;
    void evaluate(const TileBatch& batch, Branch branch) override;
    void combineGuidance(const TileBatch& batch, float scale) override;
    bool checkOutput(const TileBatch& batch) override;
    void scatter(const TileBatch& batch, const StepVariant& variant) override;
    void fuse(const StepVariant& variant) override;
    bool checkCanvas() override;

    std::vector<float> readPreview(bool x0) override;
    std::vector<float> readCanvas() override;
    SeamSums readSeams() override;
    void finishRun(RunRecord&) override {}
    Backend& wholeGraphBackend(const RunConfig& config) override;
    // The host memory the process may still allocate (float32 activations).
    std::optional<VaeMemoryBudget> vaeMemoryBudget(const RunConfig& config) override;
    // wholeGraphBackend's CPU backend (made on all hardware threads where no whole-graph pass
    // has asked for it yet; the bits do not depend on the thread count), never the tile
    // function's: preparing that one for the text would drop the UNet's prepared shape.
    Backend& textBackend() override;

private:
    std::vector<float>& output() { return pass_->inPlace ? x_ : y_; }
    // The threads (RunConfig::threads) of the backend's pool, or of the device's own.
    void setThreads(int threads);
    // The host work (gather, scatter, fuse, noise, checks) runs on the CPU backend's pool (the
    // cores have one owner), else on the device's own.
    cpu::WorkerPool& pool();
    std::size_t outTileElems() const;

    Backend* backend_ = nullptr;
    CpuBackend* cpuBackend_ = nullptr;          // backend_ when it is the CPU reference backend
    std::unique_ptr<cpu::WorkerPool> ownPool_;  // the host work's pool otherwise
    HostTileFunction function_;
    // What the backend was last prepared for; prepared again only when this changes.
    struct PreparedShape {
        std::uint64_t modelGeneration = 0;
        int batch = 0, tileH = 0, tileW = 0;
        bool operator==(const PreparedShape&) const = default;
    };
    std::optional<PreparedShape> prepared_;
    // The text conditioning of the run, one [tokens, dim] row per tile of a batch (conditioned
    // models only): the third input of the graph, for each branch.
    std::vector<float> contextCond_, contextUncond_;
    std::unique_ptr<CpuBackend> whole_;  // wholeGraphBackend's and textBackend's

    const TiledPass* pass_ = nullptr;
    StepCoefficients K_;
    bool stepNoise_ = false;
    // The host's z for the next step (TiledPass::hostStepNoise).
    const std::vector<float>* stepNoiseGiven_ = nullptr;
    bool hasX0Prev_ = false;           // a step has run since startCanvas (TileDevice.h: x0 canvas)
    std::vector<float> x_, y_, z_;     // input canvas, output canvas (map pass), noise
    std::vector<float> acc_, accEps_;  // sum of w * x'_t (sample fusion), of w * eps (noise fusion, previews)
    SeamSums seams_;                   // the last step's seam statistics
    std::vector<float> tileIn_, tileOut_, tileUncond_, tileT_;
    std::vector<float> x0_;  // the x0 canvas: previews, DPM++ 2M's previous x0
    // The history canvases of a pass that keeps them (TiledPass::keepsHistory; LMS), else empty.
    std::array<std::vector<float>, kStepHistory> history_;
    // ControlNets (TiledPass::controls): the step index, each ControlNet's hint crops of the
    // batch and its FiLM scale vectors.
    int step_ = 0;
    int graphTileScale_ = 1;
    std::vector<std::vector<float>> hintIn_, controlFilm_;
};

}  // namespace tessera
