// `tessera-cli bench`: six benchmarks behind one command, each in app/cli/bench/:
//   --shape cifar|church, --model DIR   whole tiled DDIM runs of a UNet2DModel (TiledRunBench.h)
//   --shape sd15|sd21|sdxl              a Stable Diffusion UNet's forwards, CUDA only (UNetBench.h)
//   ... --job                           whole Stable Diffusion text-to-image jobs (JobBench.h)
//   ... --profile                       one forward's GPU time per op, CUDA only (ProfileBench.h)
//   --shape vae                         the SD VAE's decode or encode, CUDA only (VaeBench.h)
//   --shape upscale                     an upscale model over an image, CUDA or CPU (UpscaleBench.h)
// The options (app/cli/bench/BenchOptions.h) are parsed once; every benchmark writes CSV (its
// columns shared with the PyTorch scripts in bench/pytorch/ where they overlap) and a printed
// table. Qt-free.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "app/cli/bench/BenchOptions.h"
#include "app/cli/bench/BenchTable.h"
#include "app/cli/bench/TiledRunBench.h"
#include "app/cli/bench/UNetBench.h"

namespace tessera {

// Runs the benchmark the words after "bench" ask for. Progress and notes go to `err`, the table
// to `out`. Returns the exit status: 0, 1 when a row failed (the row is still written, with the
// error in its note), 2 for invalid input.
int runBenchCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace tessera
