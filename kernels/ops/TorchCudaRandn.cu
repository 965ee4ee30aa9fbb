#include "kernels/ops/TorchCudaRandn.cuh"

#include <curand_kernel.h>

#include <limits>
#include <stdexcept>
#include <string>

#include "core/sampling/TorchCudaRandnLaunch.h"
#include "kernels/device/CudaCheck.h"

namespace tessera {
namespace {

// distribution_elementwise_grid_stride_kernel with curand_normal4 and normal_kernel's transform
// (rand * std + mean in float; std 1, mean 0). torch computes the indices in int, for tensors that
// 32-bit indexing covers; they are 64-bit here so that counts near 2^31 do not overflow.
__global__ void __launch_bounds__(kTorchCudaRandnBlock)
    torchCudaRandn(float* __restrict__ out, int count, unsigned long long seed, unsigned long long offset) {
    const long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    curandStatePhilox4_32_10_t state;
    curand_init(seed, static_cast<unsigned long long>(idx), offset, &state);
    const long long threads = static_cast<long long>(blockDim.x) * gridDim.x;
    const long long rounded = ((count - 1) / (threads * 4) + 1) * threads * 4;
    for (long long base = idx; base < rounded; base += threads * 4) {
        const float4 r = curand_normal4(&state);
        const float v[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const long long li = base + threads * c;
            if (li < count) out[li] = v[c] * 1.0f + 0.0f;
        }
    }
}

}  // namespace

std::uint64_t torchCudaThreadCapOf(int device) {
    int multiprocessors = 0, threadsPerMultiprocessor = 0;
    TESSERA_CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
    TESSERA_CHECK(cudaDeviceGetAttribute(&threadsPerMultiprocessor, cudaDevAttrMaxThreadsPerMultiProcessor, device));
    return torchCudaThreadCap(multiprocessors, threadsPerMultiprocessor);
}

void launchTorchCudaRandn(TorchCudaGenerator& generator, float* out, long long count, std::uint64_t threadCap,
                          cudaStream_t stream) {
    if (count < 0 || count > std::numeric_limits<int>::max())
        throw std::invalid_argument("torch CUDA randn: " + std::to_string(count) +
                                    " elements (one launch covers 0 to 2^31 - 1)");
    if (count == 0) return;
    const TorchCudaRandnLaunch launch = torchCudaRandnLaunch(static_cast<std::uint64_t>(count), threadCap);
    torchCudaRandn<<<static_cast<unsigned>(launch.blocks), kTorchCudaRandnBlock, 0, stream>>>(
        out, static_cast<int>(count), generator.seed, generator.philoxOffset);
    TESSERA_CHECK_LAUNCH();
    generator.philoxOffset += launch.offsetIncrement;
}

void launchTorchCudaRandn(TorchCudaGenerator& generator, float* out, long long count, cudaStream_t stream) {
    int device = 0;
    TESSERA_CHECK(cudaGetDevice(&device));
    launchTorchCudaRandn(generator, out, count, torchCudaThreadCapOf(device), stream);
}

}  // namespace tessera
