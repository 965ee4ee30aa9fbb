#include "kernels/BiasResidual.cuh"

#include "kernels/CudaCheck.h"
#include "kernels/DeviceTypes.cuh"

namespace tessera {
namespace {

template <typename T, int VEC>
__global__ void biasResidual(T* __restrict__ y, const float* __restrict__ bias, const T* __restrict__ residual,
                             long long totalVecs, int channels, float scale) {
    const int vecsPerRow = channels / VEC;
    for (long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; idx < totalVecs;
         idx += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int c0 = static_cast<int>(idx % vecsPerRow) * VEC;
        float v[VEC];
        if (residual) {
            loadVec<T, VEC>(residual + idx * VEC, v);
        } else {
#pragma unroll
            for (int i = 0; i < VEC; ++i) v[i] = 0.0f;
        }
#pragma unroll
        for (int i = 0; i < VEC; ++i) v[i] = scale * (bias[c0 + i] + v[i]);
        storeVec<T, VEC>(y + idx * VEC, v);
    }
}

}  // namespace

void launchBiasResidual(DType dtype, void* y, const float* bias, const void* residual, long long rows, int channels,
                        float scale, cudaStream_t stream) {
    const int vec = vectorWidthFor(channels);
    const long long totalVecs = rows * (channels / vec);
    TESSERA_DISPATCH_DTYPE(dtype, TESSERA_DISPATCH_VEC(vec, {
        biasResidual<T, VEC><<<gridFor(totalVecs, 256), 256, 0, stream>>>(
            static_cast<T*>(y), bias, static_cast<const T*>(residual), totalVecs, channels, scale);
        TESSERA_CHECK_LAUNCH();
    }))
}

}  // namespace tessera
