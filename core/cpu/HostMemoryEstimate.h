// HostMemoryEstimate: the host memory a run will need at its peak, worked out from the run's
// configuration and the model's config alone (nothing is allocated or loaded), and the check
// of it against what the machine has. Front ends call it after validate() and before any
// work: the CLI before it creates an engine or decodes a start image, the window before it
// starts a run. Qt-free.
//
// What is counted, per phase of a run (the peak is the largest phase):
//   start image  the file, its decoded pixels, the resize buffer and the model-space tensor;
//   sampling     model weights (float32), the CPU engine's UNet activations for one tile batch
//                (TilePlan + UNetGraph shapes, buffers reused after their last reader as
//                CpuBackend plans them) and its canvas buffers (latents, noise, accumulators),
//                seam statistics, the final image, blend weights, the run record;
//   output       the final image, the 8-bit image and its PNG encoding, the manifest and CSV.
// The CUDA engine keeps canvas and activations on the GPU: only what it copies back to the
// host is counted. Its device memory is planned (and refused) by the engine at prepare.
// Stable Diffusion runs (estimateSdHostMemory) count the same at the latent canvas's size, the
// UNet, VAE and text encoders' float32 weights (every engine keeps the loaded model on the
// host), the doubled tile batch of guidance, the decoded image and, on the CPU, the VAE's pass
// over the whole image (whole, or the least a tiled pass keeps: its whole-image canvases).
// "Available" is what the machine and the process's own limits leave (core/base/HostMemory.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/FormatNumber.h"
#include "core/base/HostMemory.h"
#include "core/models/sd/SdModel.h"
#include "core/models/unet/UNetConfig.h"
#include "core/run/RunConfig.h"

namespace tessera {

enum class MemoryPhase { StartImage = 1, Sampling = 2, Output = 4 };
std::string_view toString(MemoryPhase);

// Each part of the estimate, so callers that keep some of them (compare keeps every side's
// images and records) can count those again.
enum class MemoryPart {
    Process,
    Weights,
    Activations,
    TileBuffers,
    Canvas,
    Seams,
    FinalImage,
    Blend,
    Record,
    OutputText,
    Png,
    StartImageFile,
    StartImageResize,
    StartImage
};

struct MemoryItem {
    MemoryPart part = MemoryPart::Process;
    std::string what;   // "canvas: latents, noise and two accumulators (4 x 3x256x256 float32)"
    std::string field;  // the setting that makes it smaller: "width", "batch", "steps", "init", "model"; "" none
    std::uint64_t bytes = 0;
    unsigned phases = 0;  // MemoryPhase bits it is held in
    bool heldIn(MemoryPhase phase) const { return (phases & static_cast<unsigned>(phase)) != 0; }
};

// A start image as its header describes it (before decoding).
struct StartImageSize {
    int width = 0, height = 0;
    std::uint64_t fileBytes = 0;
};

struct HostMemoryEstimate {
    std::vector<MemoryItem> items;
    std::uint64_t bytesOf(MemoryPart part) const;  // 0 when the part is not there
    std::uint64_t bytesIn(MemoryPhase phase) const;
    MemoryPhase peakPhase() const;
    std::uint64_t peakBytes() const { return bytesIn(peakPhase()); }
};

// `backend` is the engine that will run (CPU or CUDA; Auto is taken as CPU, the larger host
// need). Expects a configuration that passed validate() against `model`'s limits.
HostMemoryEstimate estimateHostMemory(const RunConfig& config, const UNetConfig& model, BackendKind backend,
                                      const std::optional<StartImageSize>& startImage = std::nullopt);

// The CPU engine's UNet activation buffers and scratch for `batch` tiles of tileH x tileW on
// `threads` threads, in bytes, from the graph's shapes alone (at least what CpuBackend::prepare
// allocates to run op by op: the least a run needs. Its whole forwards, one image per thread,
// may hold more, and only within half of availableHostMemory() at prepare: CpuBackend.h).
std::uint64_t cpuActivationBytes(const UNetConfig& model, int batch, int tileH, int tileW, int threads = 1);

// Throws ValidationError when the estimate's peak exceeds `available`. Its field is the setting
// whose parts weigh most at the peak ("width", "batch", "steps", "init", "model"); the message
// gives the need, what is available and from where, the largest parts, and what to lower, to
// what where it can say (the largest size, batch or step count that fits).
void checkHostMemory(const RunConfig& config, const UNetConfig& model, BackendKind backend,
                     const std::optional<StartImageSize>& startImage, const HostMemory& available);
// The same for an estimate a caller put together (several runs' parts), without the numbers.
void checkHostMemory(const HostMemoryEstimate& estimate, const HostMemory& available);

// A Stable Diffusion run (image sizes in pixels, as the user gives them) on `backend` for a
// model of `model`'s configurations (nullptr where they could not be read: the model's weights
// and activations are then left out, and its load, which follows, says what is wrong). Expects
// a configuration that passed validate() and checkSdCells().
HostMemoryEstimate estimateSdHostMemory(const RunConfig& config, const SdModelConfigs* model, BackendKind backend,
                                        const std::optional<StartImageSize>& startImage = std::nullopt);
// checkHostMemory for a Stable Diffusion run: the same message, with the largest width x height
// (multiples of 8), batch or step count that fits where one does.
void checkSdHostMemory(const RunConfig& config, const SdModelConfigs* model, BackendKind backend,
                       const std::optional<StartImageSize>& startImage, const HostMemory& available);

}  // namespace tessera
