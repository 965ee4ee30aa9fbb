// CpuEngine: the CPU engine. The one tiled loop (core/sampling/TiledLoop.h, docs/ENGINE_SEMANTICS.md)
// on a CpuTileDevice over any Backend (the CPU reference backend, or a device backend that
// takes host buffers). Config in, RunResult out, observer callbacks on the calling thread. Qt-free.
#pragma once

#include <memory>

#include "core/cpu/CpuTileDevice.h"
#include "core/graph/Backend.h"
#include "core/run/Engine.h"
#include "core/sampling/TiledLoop.h"

namespace tessera {

class UNetModel;

class CpuEngine : public Engine {
public:
    // Takes ownership of the backend; throws std::invalid_argument for a null one.
    explicit CpuEngine(std::unique_ptr<Backend> backend);
    ~CpuEngine() override;
    CpuEngine(const CpuEngine&) = delete;
    CpuEngine& operator=(const CpuEngine&) = delete;

    // Runs one generation: TiledLoop::run on the CPU device. The backend is prepared once per
    // (model, batch, tile shape). Cancellation is checked between tile batches (each batch's
    // onTileBatch comes as it finishes, so a cancel asked for there stops the next batch); a NaN
    // or infinity stops the run with NonFiniteError (precision fp32) before that batch's scatter.
    RunResult run(const RunConfig& config, RunObserver& observer) override;

    // As TiledLoop::setInitImage: image-to-image start image in model space (C x H x W of the run).
    void setInitImage(ImageTensor image) override { loop_.setInitImage(std::move(image)); }
    void setControlImages(std::vector<ImageTensor> images) override { loop_.setControlImages(std::move(images)); }
    bool hasInitImage() const { return loop_.hasInitImage(); }

    // Pins an in-memory model (tests, random-weight benchmarks); config.model is then ignored.
    // nullptr returns to loading config.model.
    void setModel(std::shared_ptr<const UNetModel> model) override { loop_.setModel(std::move(model)); }
    void setSdModel(std::shared_ptr<const SdModel> model) override { loop_.setSdModel(std::move(model)); }
    // As TiledLoop::setFluxModel and setFluxConditioning (FLUX.1 runs on the CPU engine).
    void setFluxModel(std::shared_ptr<const FluxModel> model) { loop_.setFluxModel(std::move(model)); }
    void setFluxConditioning(std::optional<FluxConditioning> c) { loop_.setFluxConditioning(std::move(c)); }
    // As TiledLoop::setStartNoise and setStartLatents (reference comparisons).
    void setStartNoise(ImageTensor z) { loop_.setStartNoise(std::move(z)); }
    void setStartLatents(ImageTensor z) { loop_.setStartLatents(std::move(z)); }

    // The model used by the last run (or pinned), nullptr before the first run.
    std::shared_ptr<const UNetModel> model() const { return loop_.model(); }
    const Backend& backend() const { return *backend_; }

private:
    std::unique_ptr<Backend> backend_;
    CpuTileDevice device_;
    TiledLoop loop_;
};

}  // namespace tessera
