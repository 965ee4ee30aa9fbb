#include "kernels/ops/Upsample.cuh"

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

template <typename T, int VEC>
__global__ void upsampleNearest2x(const T* __restrict__ in, T* __restrict__ out, int height, int width, int vecs,
                                  long long totalVecs) {
    const int outW = width * 2, outH = height * 2;
    for (long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; idx < totalVecs;
         idx += static_cast<long long>(gridDim.x) * blockDim.x) {
        const auto [b, y, x, k] = nhwcVecIndex(idx, vecs, outW, outH);
        const long long src = ((b * height + y / 2) * width + x / 2) * vecs + k;
        *reinterpret_cast<Vec<T, VEC>*>(out + idx * VEC) = *reinterpret_cast<const Vec<T, VEC>*>(in + src * VEC);
    }
}

template <typename T, int VEC>
__global__ void upsampleNearest(const T* __restrict__ in, T* __restrict__ out, int height, int width, int factor,
                                int vecs, long long totalVecs) {
    const int outW = width * factor, outH = height * factor;
    for (long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; idx < totalVecs;
         idx += static_cast<long long>(gridDim.x) * blockDim.x) {
        const auto [b, y, x, k] = nhwcVecIndex(idx, vecs, outW, outH);
        const long long src = ((b * height + y / factor) * width + x / factor) * vecs + k;
        *reinterpret_cast<Vec<T, VEC>*>(out + idx * VEC) = *reinterpret_cast<const Vec<T, VEC>*>(in + src * VEC);
    }
}

}  // namespace

void launchUpsampleNearest(DType dtype, const void* in, void* out, int batch, int height, int width, int channels,
                           int factor, cudaStream_t stream) {
    if (factor == 2) {
        launchUpsampleNearest2x(dtype, in, out, batch, height, width, channels, stream);
        return;
    }
    const int vec = vectorWidthFor(channels);
    const int vecs = channels / vec;
    const long long totalVecs = static_cast<long long>(batch) * height * factor * width * factor * vecs;
    TESSERA_DISPATCH_DTYPE(dtype, TESSERA_DISPATCH_VEC(vec, {
                               upsampleNearest<T, VEC><<<gridFor(totalVecs, 256), 256, 0, stream>>>(
                                   static_cast<const T*>(in), static_cast<T*>(out), height, width, factor, vecs,
                                   totalVecs);
                               TESSERA_CHECK_LAUNCH();
                           }))
}

void launchUpsampleNearest2x(DType dtype, const void* in, void* out, int batch, int height, int width, int channels,
                             cudaStream_t stream) {
    const int vec = vectorWidthFor(channels);
    const int vecs = channels / vec;
    const long long totalVecs = static_cast<long long>(batch) * height * 2 * width * 2 * vecs;
    TESSERA_DISPATCH_DTYPE(dtype, TESSERA_DISPATCH_VEC(vec, {
                               upsampleNearest2x<T, VEC><<<gridFor(totalVecs, 256), 256, 0, stream>>>(
                                   static_cast<const T*>(in), static_cast<T*>(out), height, width, vecs, totalVecs);
                               TESSERA_CHECK_LAUNCH();
                           }))
}

}  // namespace tessera
