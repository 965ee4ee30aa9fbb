#include "kernels/ops/BiasResidual.cuh"

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

// No __restrict__ on y/residual: the epilogue may run in place.
template <typename T, int VEC, bool ResidualAfter>
__global__ void biasResidual(T* y, bool accumulate, const float* __restrict__ bias, const T* residual,
                             long long totalVecs, int channels, float scale) {
    const int vecsPerRow = channels / VEC;
    for (long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; idx < totalVecs;
         idx += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int c0 = static_cast<int>(idx % vecsPerRow) * VEC;
        float r[VEC], acc[VEC];
        if (residual) {
            loadVec<T, VEC>(residual + idx * VEC, r);
        } else {
#pragma unroll
            for (int i = 0; i < VEC; ++i) r[i] = 0.0f;
        }
        if (accumulate) {
            loadVec<T, VEC>(y + idx * VEC, acc);
        } else {
#pragma unroll
            for (int i = 0; i < VEC; ++i) acc[i] = 0.0f;
        }
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
            if constexpr (ResidualAfter)
                acc[i] += scale * bias[c0 + i] + r[i];
            else
                acc[i] += scale * (bias[c0 + i] + r[i]);
        }
        storeVec<T, VEC>(y + idx * VEC, acc);
    }
}

template <bool ResidualAfter>
void launch(DType dtype, void* y, bool accumulate, const float* bias, const void* residual, long long rows,
            int channels, float scale, cudaStream_t stream) {
    const int vec = vectorWidthFor(channels);
    const long long totalVecs = rows * (channels / vec);
    TESSERA_DISPATCH_DTYPE(dtype, TESSERA_DISPATCH_VEC(vec, {
                               biasResidual<T, VEC, ResidualAfter><<<gridFor(totalVecs, 256), 256, 0, stream>>>(
                                   static_cast<T*>(y), accumulate, bias, static_cast<const T*>(residual), totalVecs,
                                   channels, scale);
                               TESSERA_CHECK_LAUNCH();
                           }))
}

}  // namespace

void launchBiasResidual(DType dtype, void* y, bool accumulate, const float* bias, const void* residual, long long rows,
                        int channels, float scale, cudaStream_t stream) {
    launch<false>(dtype, y, accumulate, bias, residual, rows, channels, scale, stream);
}

void launchBiasThenResidual(DType dtype, void* y, bool accumulate, const float* bias, const void* residual,
                            long long rows, int channels, float scale, cudaStream_t stream) {
    launch<true>(dtype, y, accumulate, bias, residual, rows, channels, scale, stream);
}

}  // namespace tessera
