// `tessera-cli bench --shape upscale`: an upscale model (by default an ESRGAN of 4x-UltraSharp's
// shape: 64 features, 23 blocks, random weights; or --upscale-model FILE) upscaling a W x H image
// through the tiled upscaler (core/sampling/UpscaleTiler.h) on the CUDA engine
// (kernels/engine/CudaUpscaler.h) or, with --engine cpu, the CPU engine (core/cpu/CpuUpscaler.h):
// per tile size, --warmup untimed images (the first one plans and prepares), then --repeats timed
// ones (wall time per image, host copies, blending and the output image included); median, min and
// max seconds per image, tiles/s, TFLOP/s of the executed forwards (ModelGraph::flops at the tile,
// times the tiles) and their fraction of the GPU's peak, the device memory in use at its peak
// (kernels/engine/DeviceMemoryProbe.h). Columns shared with bench/pytorch/upscale_spandrel.py. Its
// options are its own (bench --shape upscale --help). Qt-free.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace tessera {

// True when the words after "bench" ask for --shape upscale.
bool asksForUpscaleBench(const std::vector<std::string>& args);

// Parses the words after "bench" as the upscale bench's options and runs it: the table, then the
// CSV rows, to `out`. Returns the exit status: 0; 1 when a row failed (kept, with its error) or the
// CSV could not be written; 2 for invalid options, an unreadable model, or --engine cuda in a build
// or on a machine without a CUDA device (the reason on `err`).
int runUpscaleBenchCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace tessera
