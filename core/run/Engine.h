// Engine: config in, RunRecord + image out, observer callbacks with value structs, and a
// per-instance cancel flag. Implemented by the CPU tiled sampler (core/cpu/CpuEngine.h) and
// the CUDA engine (kernels/engine/CudaEngine.h). Qt-free; callbacks run on the engine's thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/base/CanvasShift.h"
#include "core/base/LoadProgress.h"
#include "core/run/RunConfig.h"
#include "core/run/RunRecord.h"

namespace tessera {

class UNetModel;
struct SdModel;

// Float32 NCHW image, values in model space ([-1, 1] nominal).
struct ImageTensor {
    int channels = 0, height = 0, width = 0;
    std::vector<float> data;
};

struct StepEvent {
    int step = 0, steps = 0;  // 0-based step index and total
    float timestep = 0;
    StepTiming timing;
};

struct TileBatchEvent {
    int step = 0, steps = 0;
    int batchIndex = 0, batches = 0;  // batch j of M within the step
    std::vector<int> tileIds;
    // Shifted tiles: the step's tiles lie over the image rolled by this (image pixels;
    // core/base/CanvasShift.h); none otherwise.
    CanvasShift shift;
    TileBatchTiming timing;
};

struct PreviewEvent {
    int step = 0;
    ImageTensor image;  // current estimate of the image (x0 prediction blended, or x_t)
};

class RunObserver {
public:
    virtual ~RunObserver() = default;
    // Reading the run's model (Stable Diffusion models: folders, single files, random:*), before
    // onStarted: once per phase and tensor, ending at done == total. Not called when the model is
    // kept from the last run or pinned.
    virtual void onLoadProgress(const LoadProgress&) {}
    virtual void onStarted(const RunRecord&) {}
    virtual void onTileBatch(const TileBatchEvent&) {}
    virtual void onStep(const StepEvent&) {}
    virtual void onPreview(const PreviewEvent&) {}
    virtual void onMemory(const MemorySample&) {}
    virtual void onMessage(const std::string&) {}
};

struct RunResult {
    RunRecord record;
    ImageTensor image;    // final image, model space
    ImageTensor seamMap;  // 1 x H x W per-pixel disagreement between overlapping tiles at the last step
    // Stable Diffusion runs that finished: the latent canvas after the last step, as the UNet
    // sees it (scaled; what the VAE decoded into `image`). Empty otherwise.
    ImageTensor latents;
};

class Engine {
public:
    virtual ~Engine() = default;
    // Runs to completion, cancellation (record.status = "cancelled") or failure (throws).
    virtual RunResult run(const RunConfig&, RunObserver&) = 0;
    // Image-to-image start image in model space (C x H x W of the next runs, values in
    // [-1, 1]); an empty tensor clears it. The front end decodes and resizes the file.
    virtual void setInitImage(ImageTensor image) = 0;
    // The decoded control images of RunConfig::controlNets for the next runs (unit i's at i, C x H x W
    // of the run in [0, 1]; empty where the unit takes the start image). The front end decodes them.
    virtual void setControlImages(std::vector<ImageTensor> images) = 0;
    // Pins an in-memory model (RunConfig::model is then ignored); nullptr unpins.
    virtual void setModel(std::shared_ptr<const UNetModel> model) = 0;
    // Pins an in-memory Stable Diffusion model (random-weight benchmarks, tests); nullptr unpins.
    virtual void setSdModel(std::shared_ptr<const SdModel> model) = 0;
    // Thread-safe; checked between tile batches.
    void requestCancel() { cancel_.store(true); }
    void resetCancel() { cancel_.store(false); }
    bool cancelRequested() const { return cancel_.load(); }

private:
    std::atomic<bool> cancel_{false};
};

}  // namespace tessera
