// `tessera-cli upscale --upscale-model FILE|NAME --init IMAGE [--upscale X] [--out DIR] [--tile PX]
// [--tile-overlap PX] [--backend NAME] [--threads N] [--label TEXT]`: an upscale model alone over an
// image, no diffusion model needed (A1111's extras tab, ComfyUI's ImageUpscaleWithModel). The model
// (app/cli/UpscaleModelRun.h) runs in tiles of --tile input pixels overlapping by --tile-overlap,
// feathered as ComfyUI blends them; its output is shrunk (area average) to X times the image where
// X is below the model's scale (default: the model's scale). Writes <out>/<run-id>.png, with its
// A1111 parameters ("Postprocess upscale by", "Postprocess upscaler") and the manifest as text
// chunks, and <run-id>.json (the manifest), all-or-nothing (core/run/OutputSet.h). Qt-free.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace tessera {

// The tile side and overlap of the upscale command, in input pixels (ComfyUI's
// ImageUpscaleWithModel: 512 and 32).
inline constexpr int kUpscaleTileDefault = 512, kUpscaleTileMin = 32, kUpscaleTileMax = 4096;
inline constexpr int kUpscaleOverlapDefault = 32;

// Runs the command on `args` (the words after "upscale"); the report goes to `out`, notes and
// errors to `err`. Returns the exit status: 0; 2 for invalid input (a bad or missing option, a
// model that is not found or cannot be used, a scale that does not give the asked factor, an
// image or output beyond the limits), every check made before any work; 1 for a failure while
// running or writing.
int runUpscaleCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace tessera
