// `tessera-cli bench --shape vae`: the Stable Diffusion VAE (AutoencoderKL of SD 1.x/2.x/XL,
// random weights) decoding a size x size image (or, with --encode, encoding one) on the CUDA
// device as a render job runs it: the tile device's VAE backend and memory budget
// (kernels/engine/CudaVaeDevice.h), the pass through core's VAE API (runVaePass), timed on the
// backend's stream (kernels/engine/DeviceClock.h) with the device's peak memory sampled
// (kernels/engine/DeviceMemoryProbe.h). Its options are its own (bench --shape vae --help). Qt-free.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace tessera {

// True when the words after "bench" ask for --shape vae.
bool asksForVaeBench(const std::vector<std::string>& args);

// Parses the words after "bench" as the VAE bench's options and runs it: the CSV row and a
// summary to `out`. Returns the exit status: 0; 1 when the pass or the CSV failed; 2 for
// invalid options or a build or machine without a CUDA device (the reason on `err`).
int runVaeBenchCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace tessera
