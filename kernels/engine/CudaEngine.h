// CudaEngine: the CUDA engine. The one tiled loop (core/sampling/TiledLoop.h, docs/ENGINE_LOOP.md,
// docs/ENGINE_SEMANTICS.md) on a CudaTileDevice (kernels/engine/CudaTileDevice.h): the canvas and its
// accumulators in device memory, the scheduler update fused into the window-weighted scatter,
// Philox noise drawn on the device, CUDA events per tile batch and per step, CUDA graphs
// (RunConfig::graphs: off / tile / step, one LRU graph cache kept across runs), lanes
// (RunConfig::lanes: several tile batches in flight on their own streams, scattered in batch
// order, so the image is the same bits as with one lane) and the non-finite watch on the device.
//
// Observer calls: onTileBatch events of a step are delivered when that step has finished on
// the device (their gpuMs is known then), just before its onStep.
//
// This header includes no CUDA header.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/models/flux/FluxModel.h"
#include "core/run/Engine.h"
#include "kernels/backend/CudaBackend.h"  // cudaDeviceAvailable, CudaOutOfMemory

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

    // TiledLoop::run on the CUDA device. The backend is prepared once per (model, precision,
    // batch, tile shape, lanes); an out-of-memory plan throws CudaOutOfMemory (the message names
    // the needed and free MiB; largestBatch()); a NaN or infinity in a tile batch's output or in the latents throws
    // NonFiniteError (precision the run's), read back once per step.
    RunResult run(const RunConfig& config, RunObserver& observer) override;

    // As CpuEngine: pin an in-memory model (config.model is then ignored); nullptr unpins.
    void setModel(std::shared_ptr<const UNetModel> model) override;
    void setSdModel(std::shared_ptr<const SdModel> model) override;
    // As TiledLoop::setStartNoise (reference comparisons).
    void setStartNoise(ImageTensor z);
    // As TiledLoop::setFluxModel and setFluxConditioning (FLUX.1 runs).
    void setFluxModel(std::shared_ptr<const FluxModel> model);
    void setFluxConditioning(std::optional<FluxConditioning> conditioning);
    // As CpuEngine: start image in model space (C x H x W of the run); empty clears it.
    void setInitImage(ImageTensor image) override;
    void setControlImages(std::vector<ImageTensor> images) override;

    // The backend of the last run (nullptr before the first run).
    const CudaBackend* backend() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

std::unique_ptr<Engine> makeCudaEngine(int device = 0);

}  // namespace tessera
