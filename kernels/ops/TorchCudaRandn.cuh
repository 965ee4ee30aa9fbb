// torch.randn(count, dtype=float32, device="cuda", generator=g) bit for bit: A1111's default
// "GPU" RNG source and ComfyUI's ancestral noise on a GPU. curand's Philox4x32-10 device API
// (curand_init, curand_normal4) with torch's launch and element layout
// (core/sampling/TorchCudaRandnLaunch.h; pytorch aten/src/ATen/native/cuda/DistributionTemplates.h
// distribution_nullary_kernel). The values of a tensor of more than T elements depend on T, the
// GPU's thread cap: pass the cap of the GPU the noise should match, or take this device's.
// Capturable (no allocation, no synchronisation).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace tessera {

// torch.Generator("cuda").manual_seed(seed): the full 64-bit seed and the Philox offset, which
// every randn advances.
struct TorchCudaGenerator {
    std::uint64_t seed = 0;
    std::uint64_t philoxOffset = 0;
};

// Writes out[0 .. count) (device memory) on `stream` as torch does on a GPU whose thread cap is
// `threadCap` (torchCudaThreadCap), and advances generator.philoxOffset as torch does. count must
// be below 2^31 (torch splits larger tensors into several launches); count 0 does nothing.
// Throws std::invalid_argument for a larger count.
void launchTorchCudaRandn(TorchCudaGenerator& generator, float* out, long long count, std::uint64_t threadCap,
                          cudaStream_t stream);

// The same with the thread cap of the current device.
void launchTorchCudaRandn(TorchCudaGenerator& generator, float* out, long long count, cudaStream_t stream);

// multiProcessorCount * (maxThreadsPerMultiProcessor / 256) * 256 of `device`.
std::uint64_t torchCudaThreadCapOf(int device);

}  // namespace tessera
