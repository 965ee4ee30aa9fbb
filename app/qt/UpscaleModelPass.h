// UpscaleModelPass: an upscale model's pass over a start image as the window's worker runs it
// (app/qt/RunWorker.h): tessera-cli's steps (app/cli/UpscaleModelRun.h StartImageUpscale: the
// model found, hashed and read, its device chosen, the pass checked before any work, then run in
// tiles), with two things a window needs and the CLI does not: the tiles done as they finish,
// and a stop between tile batches. Both come from the device the tiler runs on, wrapped, so the
// pixels are the CLI's. Qt-free.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>

#include "app/cli/UpscaleModelRun.h"
#include "core/run/RunConfig.h"
#include "core/run/RunRecord.h"

namespace tessera {

// The pass was stopped between two tile batches; what() says after how many tiles.
class UpscaleCancelled : public std::runtime_error {
public:
    UpscaleCancelled(int tilesDone, int tiles);
    int tilesDone() const { return tilesDone_; }
    int tiles() const { return tiles_; }

private:
    int tilesDone_, tiles_;
};

class UpscaleModelPass {
public:
    // Asked between tile batches on the running thread: true stops the pass (UpscaleCancelled).
    using Cancelled = std::function<bool()>;
    // Called on the running thread after each tile batch the device finished: tiles done of all.
    using Progress = std::function<void(int tilesDone, int tiles)>;

    // Finds and reads config.upscaleModel (a path, or a name looked up in the models folders of
    // the run: cliUpscaleModelsFolders), takes the device of config.backend and checks the pass
    // over an image of inW x inH wanted at targetW x targetH (checkUpscaleModelRun). Throws
    // ValidationError as StartImageUpscale does: on "upscale_model" for a file that cannot be
    // used (naming it and why: not found, not a model Tessera runs, naming its family), on
    // "upscale" for a target beyond the model's scale, on "tile"/"init" for sizes and memory.
    // The device's note (a fallback) goes to *note when not null ("" when none).
    UpscaleModelPass(const RunConfig& config, int inW, int inH, int targetW, int targetH, std::string* note);

    // Runs the model over `image` (inW x inH): its output, the image times the model's scale,
    // not resized. Calls `progress` after each tile batch; stops with UpscaleCancelled between
    // batches when `cancelled` says so (no batch is left running on the device then).
    Rgb8Image run(const Rgb8Image& image, const Cancelled& cancelled, const Progress& progress);

    // The record's upscale_model section: the file, the device and plan once constructed, the
    // time once run.
    const UpscaleModelRecord& record() const { return run_.record; }
    UpscaleModelRecord& record() { return run_.record; }
    const UpscaleDeviceChoice& device() const { return device_; }
    // Tiles the pass runs over the image (the plan's).
    int tiles() const { return run_.record.tiles; }

private:
    UpscaleModelRun run_;
    UpscaleDeviceChoice device_;
    UpscaleTiling tiling_;
};

}  // namespace tessera
