// The options of `tessera-cli bench` (app/cli/BenchCommand.h) and what they ask for: the
// random-weight model shapes, the run of one row, and which benchmarks need the CUDA backend.
// Qt-free.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/models/flux/FluxConfig.h"
#include "core/models/sd/UNetCondConfig.h"
#include "core/models/unet/UNetConfig.h"
#include "core/run/RunConfig.h"

namespace tessera {

struct BenchOptions {
    std::string shape;  // "cifar" / "church" / "sd15" / "sd21" / "sdxl"; empty when --model is given
    std::string model;  // model folder; empty when --shape is given
    int width = 1024, height = 1024;
    int tile = 64;
    int overlap = 16;  // pixels
    std::vector<int> batches{1, 8, 32};
    std::vector<Precision> precisions{Precision::FP16};
    std::vector<GraphMode> graphs{GraphMode::Off};
    std::vector<int> lanes{0};  // CUDA lanes (tile batches in flight); 0 = auto
    int steps = 20;
    int repeats = 3;      // measured runs per row; the median is reported
    int warmupSteps = 3;  // steps of the warm-up run (0 = as many as --steps)
    BackendKind backend = BackendKind::Auto;
    std::uint64_t seed = 0;            // noise seed, and the random weights' seed
    std::optional<double> peakTflops;  // overrides the table of known GPUs
    std::string csvPath;               // empty: CSV only on stdout's table
    std::string tuningCache;           // RunConfig::tuningCache ("" = the default file, "off", a path)
    double cfg = 7.0;                  // sd15/sd21/sdxl: guidance scale; not 1: two UNet evaluations per tile
    std::set<std::string> given;       // the options given, by field name ("tile", "batch", ...)
    bool profile = false;              // --profile: per-op GPU time of one forward per precision x batch
    bool job = false;                  // --job (sd15/sd21/sdxl): whole text-to-image jobs, text to decoded image
    // --job --strength X: image-to-image jobs of an upscale (a synthetic start image) at that strength;
    // --controlnet (sd15) adds a random ControlNet whose control image is the start image (strength
    // 0.5 unless given). 0: text-to-image.
    bool controlNet = false;
    // --job --tile-shift random: SpotDiffusion's shifted tiles (RunConfig::tileShift), a note on each row.
    TileShift tileShift = TileShift::Off;
    double strength = 0;
    bool help = false;
};

// Parses the words after "bench". Throws ValidationError naming the option ("batch",
// "shape", ...) for a bad value, "option" for an unknown one.
BenchOptions parseBenchOptions(const std::vector<std::string>& args);
std::string benchUsage();

// The exact diffusers google/ddpm-cifar10-32 and google/ddpm-church-256 UNet2DModel configs
// (block_out_channels, block types, norm_eps 1e-6, freq_shift 1, flip_sin_to_cos false,
// downsample_padding 0, attention_head_dim null, 32 norm groups, 2 layers per block).
// Throws ValidationError("shape") for another name.
UNetConfig benchShapeConfig(std::string_view shape);

// True for "sd15", "sd21" and "sdxl", the shapes timed as a Stable Diffusion UNet.
bool isSdBenchShape(std::string_view shape);
// flux-dev, flux-schnell: FLUX.1's transformer at its real shapes (random weights).
bool isFluxBenchShape(std::string_view shape);
// Its config (FLUX.1-dev's for any other shape name).
FluxConfig benchFluxShapeConfig(std::string_view shape);

// Stable Diffusion 1.5 (heads 8, context 768, conv projections), 2.1 (heads 5, 10, 20, 20,
// context 1024, linear projections, upcast attention) and XL base (sdxlBaseUNetConfig)
// UNet2DConditionModel configs (the unet/config.json of runwayml/stable-diffusion-v1-5,
// stabilityai/stable-diffusion-2-1 and stabilityai/stable-diffusion-xl-base-1.0: 859,520,964,
// 865,910,724 and 2,567,463,684 parameters). Throws ValidationError("shape") for another name.
UNetCondConfig benchSdShapeConfig(std::string_view shape);

// The image, tiles, steps and tile batch of a row, previews off: what validate() and the host
// memory check read before any work.
RunConfig benchCanvasConfig(const BenchOptions& options, int batch);
// The run of one (precision, graphs, lanes, batch) row: benchCanvasConfig's with DDIM, the
// options' backend, seed and tuning cache, labelled "bench".
RunConfig benchRowConfig(const BenchOptions& options, Precision precision, GraphMode graphs, int lanes, int batch);

// The SD shapes and --profile run on the CUDA backend only; anything else is refused with the
// reason (ValidationError "backend").
void checkCudaBench(const BenchOptions& options);

// "2048" for a square image, else "2048x1024".
std::string benchSizeText(const BenchOptions& options);

// For a `catch (...)` around a bench's checks before its work: a ValidationError in flight is
// reported on `err` as "tessera-cli bench: <what>", a ModelError as "tessera-cli bench: model:
// <what>", and either gives kExitInvalid; anything else is thrown on.
int benchInputFailure(std::ostream& err);

}  // namespace tessera
