// `tessera-cli bench`: runs a matrix of (batch x precision x graph mode) tiled DDIM
// generations on one model and image shape, and reports per row seconds per image, tile
// evaluations per second, achieved TFLOP/s and its fraction of the GPU's dense fp16/bf16
// tensor peak, peak device MiB, host enqueue ms per step and the first (warm-up) run apart.
// Writes CSV (column names shared with bench/torch_tiled_ddim.py where they overlap) and a
// printed table. The model is a folder (--model) or a random-weight network of a diffusers
// google/ddpm shape (--shape cifar|church), so benchmarks need no download. Qt-free.
//
// --shape sd15|sd21|sdxl: Stable Diffusion 1.5 / 2.1 / XL base's UNet2DConditionModel (random weights at the
// real shapes) on the CUDA backend alone: per (precision x graphs x batch) the forward of one
// tile batch (doubled with guidance, --cfg not 1) timed with CUDA events, and from it the UNet's
// share of one step of the tiled job (--size, --tile, --overlap in pixels; latents are 1/8):
// UNet evaluations/s, seconds per step, TFLOP/s and fraction of peak, device MiB in use. The
// CSV columns (sdBenchCsvHeader) are kernels/bench/torch_sd_unet.py's.
#pragma once

#include <iosfwd>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/models/unet/UNetConfig.h"
#include "core/run/RunConfig.h"
#include "core/models/sd/UNetCondConfig.h"

namespace tessera {

struct BenchOptions {
    std::string shape;                 // "cifar" / "church" / "sd15" / "sd21" / "sdxl"; empty when --model is given
    std::string model;                 // model folder; empty when --shape is given
    int width = 1024, height = 1024;
    int tile = 64;
    int overlap = 16;                  // pixels
    std::vector<int> batches{1, 8, 32};
    std::vector<Precision> precisions{Precision::FP16};
    std::vector<GraphMode> graphs{GraphMode::Off};
    std::vector<int> lanes{0};         // CUDA lanes (tile batches in flight); 0 = auto
    int steps = 20;
    int repeats = 3;                   // measured runs per row; the median is reported
    int warmupSteps = 3;               // steps of the warm-up run (0 = as many as --steps)
    BackendKind backend = BackendKind::Auto;
    std::uint64_t seed = 0;            // noise seed, and the random weights' seed
    std::optional<double> peakTflops;  // overrides the table of known GPUs
    std::string csvPath;               // empty: CSV only on stdout's table
    std::string tuningCache;           // RunConfig::tuningCache ("" = the default file, "off", a path)
    double cfg = 7.0;                  // sd15/sd21/sdxl: guidance scale; not 1: two UNet evaluations per tile
    std::set<std::string> given;       // the options given, by field name ("tile", "batch", ...)
    bool profile = false;              // --profile: per-op GPU time of one forward per precision x batch
    bool job = false;                  // --job (sd15/sd21/sdxl): whole text-to-image jobs, text to decoded image
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

// Stable Diffusion 1.5 (heads 8, context 768, conv projections), 2.1 (heads 5, 10, 20, 20,
// context 1024, linear projections, upcast attention) and XL base (sdxlBaseUNetConfig)
// UNet2DConditionModel configs (spec sd-models.md §1.1; 859,520,964, 865,910,724 and
// 2,567,463,684 parameters). Throws ValidationError("shape") for another name.
UNetCondConfig benchSdShapeConfig(std::string_view shape);

// The UNet's share of one step of a tiled job, from forward times: `tiles` tiles in calls of
// `batch` tiles (the last call holds the remainder, timed apart), each tile one UNet evaluation,
// two with guidance (conditional and unconditional halves in one doubled batch). Times in ms
// per call (GPU; host enqueue); gflopPerEval is one evaluation of one sample.
struct UNetStepTiming {
    int forwardsPerStep = 0;
    int evaluationsPerStep = 0;
    double secondsPerStep = 0, unetEvalsPerS = 0, tflops = 0, hostEnqueueMsPerStep = 0;
};
UNetStepTiming unetStepTiming(int tiles, int batch, bool guidance, double fullMs, double remainderMs, double fullHostMs,
                              double remainderHostMs, double gflopPerEval);

// The SD rows' CSV header (no newline): kernels/bench/torch_sd_unet.py prints the same columns.
std::string sdBenchCsvHeader();

// Dense fp16/bf16 tensor-core peak in TFLOP/s for a GPU name (e.g. "NVIDIA H100 80GB HBM3"
// -> 989), or nullopt when the name is not one we know.
std::optional<double> denseTensorPeakTflops(std::string_view deviceName);

// The CSV header line (no newline); the first 15 names are bench/torch_tiled_ddim.py's.
std::string benchCsvHeader();

// Runs the whole matrix. Progress and notes go to `err`, the table to `out`.
// Returns the exit status: 0, 1 when a row failed (the row is still written, with the
// error in its note), 2 for invalid input.
int runBenchCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace tessera
