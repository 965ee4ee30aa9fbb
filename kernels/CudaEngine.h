// CudaEngine: the tiled sampler of docs/ENGINE_SEMANTICS.md with everything on the GPU:
// the canvas and its accumulators live in device memory, tiles are gathered into the
// backend's NHWC input, the scheduler update is fused into the window-weighted scatter
// (fusion "sample") or applied after the normalise (fusion "noise"), and noise is Philox
// drawn on the device. Timings come from CUDA events (per tile batch and per step), with
// NVTX ranges run / step / tile batch for Nsight.
//
// Observer calls: onTileBatch events of a step are delivered when that step has finished on
// the device (their gpuMs is known then), just before its onStep.
//
// CUDA graphs (RunConfig::graphs), all from one LRU graph cache (kernels/GraphCache.h) that
// lives in the engine across runs, with the run arena (same sizes: same pointers):
//   off  - every kernel launched from the host;
//   tile - the UNet forward of each tile batch replayed from a captured graph;
//   step - the whole step (every batch's gather / forward / scatter between event-record
//          nodes, then the fuse) captured once per variant (normal, preview, last) and
//          replayed; the kernels read the step index and seed from device memory, set by a
//          one-thread kernel before each step in every mode.
// graphWarmup steps run eagerly before the first capture of a run (cached graphs are
// replayed at once). A capture that fails turns graphs off for the rest of the run; the
// RunRecord (graphs.fallbackReason, messages) and onMessage say why. Same kernels, same
// arguments, same order in every mode: the images are bit-identical.
//
// Lanes (RunConfig::lanes; 0 = auto: 4 below 16 Ki tile pixels per forward, else 2): batch j
// is gathered and evaluated on lane j % lanes, i.e. its own stream and its own copy of the
// backend's activations and workspaces (CudaBackend::prepare(..., lanes)), and scattered on
// the backend's stream in batch order; lanes wait on events (step start, the scatter that
// last read their buffers), so several small forwards overlap on the GPU while the
// accumulation order, and every bit of the image, stays that of one lane. Step graphs then
// fork and join; tile mode keeps one forward graph per (batch size, lane). A plan prepared
// with more lanes serves runs with fewer; auto halves the lanes when a plan does not fit.
// RunRecord::graphs.lanes says how many ran.
//
// Non-finite values: each tile batch's UNet output and the canvas after each step's update are
// checked on the device (kernels/NonFinite.cuh: same kernels in every graph mode, captured with
// the step in step mode), which keeps the first (step, tile batch) holding a NaN or an infinity
// in one word of the run arena; the host copies it back with the step's own wait and throws
// NonFiniteError (core/NonFiniteError.h: step, tile batch, precision advice, record "failed").
//
// This header includes no CUDA header.
#pragma once

#include <memory>
#include <string>

#include "core/Engine.h"
#include "kernels/CudaBackend.h"   // cudaDeviceAvailable, CudaOutOfMemory

namespace tessera {

class UNetModel;

class CudaEngine final : public Engine {
public:
    // Throws std::runtime_error ("no CUDA device: ...") when no device can be used; the app
    // then falls back to the CPU engine.
    explicit CudaEngine(int device = 0);
    ~CudaEngine() override;
    CudaEngine(const CudaEngine&) = delete;
    CudaEngine& operator=(const CudaEngine&) = delete;

    // As TiledSampler::run. The backend is prepared once per (model, precision, batch, tile
    // shape); an out-of-memory plan throws CudaOutOfMemory (needed/free MiB, largest batch);
    // a NaN or infinity in a tile batch's output or in the latents throws NonFiniteError.
    RunResult run(const RunConfig& config, RunObserver& observer) override;

    // As TiledSampler: pin an in-memory model (config.model is then ignored); nullptr unpins.
    void setModel(std::shared_ptr<const UNetModel> model) override;
    // As TiledSampler: start image in model space (C x H x W of the run); empty clears it.
    void setInitImage(ImageTensor image) override;

    // The backend of the last run (nullptr before the first run).
    const CudaBackend* backend() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

std::unique_ptr<Engine> makeCudaEngine(int device = 0);

}  // namespace tessera
