#include "kernels/ops/AdaLayerNorm.cuh"

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void adaLayerNorm(const T* __restrict__ x, T* y, const float* __restrict__ mod, int modStride, int shiftAt,
                             int scaleAt, long long rowsPerImage, int C, float eps) {
    __shared__ float shared[kThreads / 32 + 1];
    const long long row = blockIdx.x;
    const T* in = x + row * C;
    float sum = 0.0f;
    for (int c = threadIdx.x; c < C; c += kThreads) sum += toFloat(in[c]);
    const float mean = blockReduce<kThreads, false>(sum, shared) / C;
    float sq = 0.0f;
    for (int c = threadIdx.x; c < C; c += kThreads) {
        const float d = toFloat(in[c]) - mean;
        sq += d * d;
    }
    const float inv = rsqrtf(blockReduce<kThreads, false>(sq, shared) / C + eps);
    const float* m = mod + (row / rowsPerImage) * modStride;
    T* out = y + row * C;
    for (int c = threadIdx.x; c < C; c += kThreads)
        out[c] = fromFloat<T>((toFloat(in[c]) - mean) * inv * (1.0f + m[scaleAt + c]) + m[shiftAt + c]);
}

}  // namespace

void launchAdaLayerNorm(const AdaLayerNormArgs& a, cudaStream_t stream) {
    if (a.rows <= 0) return;
    TESSERA_DISPATCH_DTYPE(a.dtype, {
        adaLayerNorm<T><<<static_cast<unsigned>(a.rows), kThreads, 0, stream>>>(
            static_cast<const T*>(a.x), static_cast<T*>(a.y), a.mod, a.modStride, a.shiftAt, a.scaleAt, a.rowsPerImage,
            a.channels, a.eps);
        TESSERA_CHECK_LAUNCH();
    })
}

}  // namespace tessera
