// TiledSampler: the CPU-driven tiled sampling loop of docs/ENGINE_SEMANTICS.md over any
// Backend (the CPU reference backend, or a device backend that takes host buffers).
// Config in, RunResult out, observer callbacks on the calling thread. Qt-free.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/Backend.h"
#include "core/Engine.h"

namespace tessera {

class UNetModel;

class TiledSampler : public Engine {
public:
    // Takes ownership of the backend; throws std::invalid_argument for a null one.
    explicit TiledSampler(std::unique_ptr<Backend> backend);
    ~TiledSampler() override;
    TiledSampler(const TiledSampler&) = delete;
    TiledSampler& operator=(const TiledSampler&) = delete;

    // Runs one generation (ENGINE_SEMANTICS.md). Loads config.model (a folder; the loaded
    // model is kept while the path stays the same) unless a model was pinned with setModel,
    // validates the config against the model's limits (ValidationError naming the field),
    // prepares the backend once per (batch, tile shape) and samples. Cancellation is checked
    // between tile batches: the result then holds the canvas after the last whole step and
    // record.status == "cancelled". A NaN or infinity in a tile batch's UNet output, or in the
    // latents after a step's update, stops the run with NonFiniteError (core/NonFiniteError.h:
    // step, tile batch, record status "failed"). Other failures throw (ModelError, std::runtime_error).
    RunResult run(const RunConfig& config, RunObserver& observer) override;

    // Image-to-image (SDEdit): the start image in model space, channels x height x width equal
    // to the model's input channels and the run's size (checked in run(), field "init").
    // Sampling then starts at step index steps - int(steps * strength) from
    // x = sqrt(abar_t) * init + sqrt(1 - abar_t) * z(kInitNoiseDraw) (Euler: divided by
    // sqrt(abar_t), its sigma parameterisation). config.preserveColor then matches each channel's
    // mean and standard deviation to the start image's. An empty tensor clears it.
    void setInitImage(ImageTensor image) override;
    bool hasInitImage() const { return !initImage_.data.empty(); }

    // Pins an in-memory model (tests, random-weight benchmarks); config.model is then ignored.
    // nullptr returns to loading config.model.
    void setModel(std::shared_ptr<const UNetModel> model) override;

    // The model used by the last run (or pinned), nullptr before the first run.
    std::shared_ptr<const UNetModel> model() const { return model_; }
    const Backend& backend() const { return *backend_; }

private:
    std::shared_ptr<const UNetModel> modelFor(const RunConfig& config);

    std::unique_ptr<Backend> backend_;
    std::shared_ptr<const UNetModel> model_;
    std::string modelPath_;          // folder model_ was loaded from; empty when pinned
    bool modelPinned_ = false;
    std::uint64_t modelGeneration_ = 0;  // bumped whenever model_ changes
    ImageTensor initImage_;
    // What the backend was last prepared for; prepare() again only when this changes.
    struct PreparedShape {
        std::uint64_t modelGeneration = 0;
        int batch = 0, tileH = 0, tileW = 0;
        bool operator==(const PreparedShape&) const = default;
    };
    std::optional<PreparedShape> prepared_;
};

}  // namespace tessera
