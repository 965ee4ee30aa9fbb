#include "kernels/ops/PadRightBottom.cuh"

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

template <typename T, int VEC>
__global__ void padRightBottom(const T* __restrict__ in, T* __restrict__ out, int height, int width, int vecs,
                               long long totalVecs) {
    const int outW = width + 1, outH = height + 1;
    for (long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; idx < totalVecs;
         idx += static_cast<long long>(gridDim.x) * blockDim.x) {
        const auto [b, y, x, k] = nhwcVecIndex(idx, vecs, outW, outH);
        Vec<T, VEC> v;
        if (x < width && y < height) {
            v = *reinterpret_cast<const Vec<T, VEC>*>(in + (((b * height + y) * width + x) * vecs + k) * VEC);
        } else {
#pragma unroll
            for (int i = 0; i < VEC; ++i) v.v[i] = fromFloat<T>(0.0f);
        }
        *reinterpret_cast<Vec<T, VEC>*>(out + idx * VEC) = v;
    }
}

}  // namespace

void launchPadRightBottom(DType dtype, const void* in, void* out, int batch, int height, int width, int channels,
                          cudaStream_t stream) {
    const int vec = vectorWidthFor(channels);
    const int vecs = channels / vec;
    const long long totalVecs = static_cast<long long>(batch) * (height + 1) * (width + 1) * vecs;
    TESSERA_DISPATCH_DTYPE(dtype, TESSERA_DISPATCH_VEC(vec, {
                               padRightBottom<T, VEC><<<gridFor(totalVecs, 256), 256, 0, stream>>>(
                                   static_cast<const T*>(in), static_cast<T*>(out), height, width, vecs, totalVecs);
                               TESSERA_CHECK_LAUNCH();
                           }))
}

}  // namespace tessera
