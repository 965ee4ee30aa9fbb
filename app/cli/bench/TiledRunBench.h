// `tessera-cli bench --shape cifar|church` or `--model DIR`: whole tiled DDIM generations of a
// UNet2DModel through the Engine, a matrix of (precision x graph mode x lanes x tile batch). Each
// row: a warm-up run on a fresh engine (prepare, algorithm search, graph capture), then
// --repeats measured runs on it; per row the median seconds per image, tile evaluations per
// second, achieved TFLOP/s and its fraction of the GPU's dense fp16/bf16 tensor peak, peak device
// MiB, host enqueue ms per step and the first (warm-up) run apart. The model is a folder or a
// random-weight network of a diffusers google/ddpm shape, so the benchmark needs no download.
// Qt-free.
#pragma once

#include <ostream>
#include <string>

#include "app/cli/bench/BenchOptions.h"

namespace tessera {

// The CSV header line (no newline); the first 16 names are bench/pytorch/torch_tiled_ddim.py's.
std::string benchCsvHeader();

// Checks every row's settings, the backend and the host memory before any work, loads or draws
// the model, then runs the matrix (or, with --profile, the per-op profiles); the CSV and the
// table to `out`, progress and notes to `err`. Returns the exit status: 0, 1 when a row failed
// (kept in the table with the error as its note), 2 for invalid input.
int runTiledRunBench(const BenchOptions& options, std::ostream& out, std::ostream& err);

}  // namespace tessera
