// A deterministic fill that gives algorithm benchmarks and tests realistic (non-zero) data
// without a host upload.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/device/DType.h"

namespace tessera {

// p[i] = uniform in [-amplitude, amplitude) from a hash of (seed, i).
void launchFillUniform(DType, void* p, long long count, std::uint32_t seed, float amplitude, cudaStream_t);

}  // namespace tessera
