#include "kernels/ops/FillUniform.cuh"

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

template <typename T>
__global__ void fillUniform(T* __restrict__ p, long long count, std::uint32_t seed, float amplitude) {
    for (long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; idx < count;
         idx += static_cast<long long>(gridDim.x) * blockDim.x) {
        std::uint32_t h = static_cast<std::uint32_t>(idx) * 0x9E3779B1u ^ seed ^ static_cast<std::uint32_t>(idx >> 32);
        h ^= h >> 16;
        h *= 0x85EBCA6Bu;
        h ^= h >> 13;
        h *= 0xC2B2AE35u;
        h ^= h >> 16;
        p[idx] = fromFloat<T>(amplitude * (static_cast<float>(h) * 4.656612873077393e-10f - 1.0f));
    }
}

}  // namespace

void launchFillUniform(DType dtype, void* p, long long count, std::uint32_t seed, float amplitude,
                       cudaStream_t stream) {
    TESSERA_DISPATCH_DTYPE(dtype, {
        fillUniform<T><<<gridFor(count, 256), 256, 0, stream>>>(static_cast<T*>(p), count, seed, amplitude);
        TESSERA_CHECK_LAUNCH();
    })
}

}  // namespace tessera
