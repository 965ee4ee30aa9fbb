// `tessera-cli bench --shape sd15|sd21|sdxl --job`: whole text-to-image jobs through the Engine
// (random weights for the text encoders, UNet and VAE): prompt and negative prompt, DPM++ 2M
// Karras, noise-prediction blending, the VAE decode. Per (precision x graphs x batch) row a
// warm-up job on a fresh engine, then --repeats jobs on it, each timed on the host clock from
// run to decoded image, with the record's phases (text encode, sampling, VAE decode) apart;
// columns as bench/pytorch/torch_sd_tiled.py prints them. Qt-free.
#pragma once

#include <ostream>
#include <string>

#include "app/cli/bench/BenchOptions.h"

namespace tessera {

// The job rows' CSV header (no newline).
std::string sdJobCsvHeader();

// Every row, then the CSV (also to `out`). Throws ValidationError for a CSV that cannot be
// written. Returns the exit status: 0, or 1 when a row failed.
int runSdJobBench(const BenchOptions& options, std::ostream& out, std::ostream& err);

}  // namespace tessera
