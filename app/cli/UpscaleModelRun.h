// UpscaleModelRun: an upscale model (core/models/upscale/UpscaleModel.h) as tessera-cli uses it:
// found from a run's upscale_model (core/run/UpscaleModelFile.h), hashed and read, checked against
// the image it will upscale before any work, and run over it in tiles (core/sampling/UpscaleTiler.h)
// on the device EngineFactory gives (createUpscaleDevice). `tessera-cli upscale` runs it alone
// (app/cli/UpscaleCommand.h); `render --init --upscale-model` runs it on the start image before the
// resize to the canvas (StartImageUpscale). Qt-free: the window's worker can use it as the CLI does.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "app/cli/EngineFactory.h"
#include "core/cpu/HostMemoryEstimate.h"
#include "core/models/upscale/UpscaleModel.h"
#include "core/run/RunRecord.h"
#include "core/sampling/ImageOps.h"
#include "core/sampling/UpscaleTiler.h"

namespace tessera {

// The largest upscale model file read: the largest models users have (DAT, HAT) are a few hundred
// MB; 2 GiB leaves a wide margin.
inline constexpr std::uint64_t kMaxUpscaleModelBytes = std::uint64_t{2} << 30;

struct UpscaleModelRun {
    std::string path;  // the file found
    UpscaleModel model;
    // What the run record says of it: the file's part (file, name, sha256, architecture, scale,
    // pickle) once read; the device, plan and sizes once checked; the time once run.
    UpscaleModelRecord record;
};

// What a run's settings ask of the upscale model's device (threads, precision, tuning cache).
UpscaleDeviceRequest upscaleDeviceRequest(const RunConfig& config);

// The models folders tessera-cli looks a model file's NAME up in, for every kind (upscale models,
// VAEs: core/run/ModelFileLookup.h modelsFolders): $TESSERA_MODELS, then the folder holding the
// folder of `runModel` (--model).
std::vector<std::string> cliModelsFolders(const std::string& runModel);
// cliModelsFolders, for an upscale model's name.
std::vector<std::string> cliUpscaleModelsFolders(const std::string& runModel);

// Finds `given` (findUpscaleModel), hashes the file and reads the model: a safetensors file, or a
// PyTorch checkpoint (.pth/.pt/.ckpt, or a zip or pickle by its first bytes) through the restricted
// reader (core/formats/TorchCheckpoint.h: nothing executed; record.pickle says so). Throws
// ValidationError on field "upscale_model" naming the file for one that cannot be used: not found,
// not a regular file, over kMaxUpscaleModelBytes, a checkpoint the reader refuses (naming what it
// refused), no upscale model Tessera runs (naming the family it is, or the keys that matched none),
// or a model for other than 3-channel images.
UpscaleModelRun loadUpscaleModelRun(const std::string& given, const std::vector<std::string>& modelsFolders);

// Every check before the model runs over an image of inW x inH wanted at targetW x targetH, cheapest
// first: the target within the model's output (an output is shrunk to the target, never enlarged:
// ValidationError on "upscale" naming the largest factor the model gives); the output within
// kMaxImageSidePx per side (on "init"); the tiler's plan within its memory budget (on "tile"); the
// plan, the input and the output images together within the host memory available (on "init").
// Fills run.record's device, plan and sizes.
void checkUpscaleModelRun(UpscaleModelRun& run, int inW, int inH, int targetW, int targetH,
                          const UpscaleDeviceChoice& device, const UpscaleTiling& tiling);

// Runs the model over `image` in tiles: its output (the image times the model's scale) as 8-bit
// RGB, each value round(255 v) of the output clamped to [0, 1]. Fills run.record's time.
Rgb8Image runUpscaleModel(UpscaleModelRun& run, const Rgb8Image& image, const UpscaleDeviceChoice& device,
                          const UpscaleTiling& tiling);

// The resize of a model's output to the asked size: "" (none), "area average" where no axis
// grows, "Catmull-Rom" where one does (the filters of InitImage.h resampleToModelSpace).
std::string resizeFilterName(int fromW, int fromH, int toW, int toH);

// `render --init --upscale-model`: the model's pass over the start image, checked with the run's
// other checks and run when the engine is ready.
class StartImageUpscale {
public:
    // Finds and reads config.upscaleModel and checks its pass (checkUpscaleModelRun) over the start
    // image `start` for a canvas of config.width x config.height. ValidationError on
    // "upscale_model" when there is no start image (and loadUpscaleModelRun's refusals). The
    // device's note goes to `notes`.
    StartImageUpscale(const RunConfig& config, const std::optional<StartImageSize>& start, std::ostream& notes);

    // Decodes the start image, runs the model and resizes its output to the canvas in model space
    // with `channels` channels (resampleToModelSpace): what Engine::setInitImage takes. A damaged
    // start image is a ValidationError on "init". Says on `notes` what ran.
    ImageTensor startImage(const RunConfig& config, int channels, std::ostream& notes);
    // A finished run's record gets the pass (upscaleModel) and its line among the messages.
    void addTo(RunRecord& record) const;

private:
    UpscaleModelRun run_;
    UpscaleDeviceChoice device_;
    UpscaleTiling tiling_;
};

}  // namespace tessera
