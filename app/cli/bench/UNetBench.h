// `tessera-cli bench --shape sd15|sd21|sdxl`: Stable Diffusion 1.5 / 2.1 / XL base's
// UNet2DConditionModel (random weights at the real shapes) on the CUDA backend alone: per
// (precision x graphs x batch) the forward of one tile batch (doubled with guidance, --cfg not 1)
// timed with CUDA events, and from it the UNet's share of one step of the tiled job (--size,
// --tile, --overlap in pixels; latents are 1/8): UNet evaluations/s, seconds per step, TFLOP/s and
// fraction of peak, device MiB in use. The CSV columns (sdBenchCsvHeader) are
// bench/pytorch/torch_sd_unet.py's. Qt-free.
#pragma once

#include <ostream>
#include <string>

#include "app/cli/bench/BenchOptions.h"
#include "core/formats/ModelWeights.h"

namespace tessera {

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

// The SD rows' CSV header (no newline): bench/pytorch/torch_sd_unet.py prints the same columns.
std::string sdBenchCsvHeader();

// Random weights in host memory (float32) and the backend's packed copy: refused
// (ValidationError "shape") before anything is drawn when the host cannot hold them.
void checkSdHostMemory(const BenchOptions& options, const UNetCondConfig& config);
// The same for any model's tensors (FLUX.1's transformer).
void checkHostMemoryFor(const BenchOptions& options, const TensorList& tensors);

// Every (precision x graphs x batch) row, then the CSV and the table; with --profile the per-op
// profiles instead. Throws ValidationError for a CSV that cannot be written. Returns the exit
// status: 0, or 1 when a row failed.
int runSdUNetBench(const BenchOptions& options, std::ostream& out, std::ostream& err);

}  // namespace tessera
