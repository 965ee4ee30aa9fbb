#include "kernels/ops/Guidance.cuh"

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

template <typename T>
__global__ void guidanceCombine(T* out, long long half, float scale) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < half;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const float c = toFloat(out[i]), u = toFloat(out[half + i]);
        out[i] = fromFloat<T>(u + scale * (c - u));
    }
}

}  // namespace

void launchGuidanceCombine(DType dtype, void* output, long long half, float scale, cudaStream_t stream) {
    if (half <= 0) return;
    TESSERA_DISPATCH_DTYPE(
        dtype, guidanceCombine<T><<<gridFor(half, 256), 256, 0, stream>>>(static_cast<T*>(output), half, scale));
    TESSERA_CHECK_LAUNCH();
}

}  // namespace tessera
