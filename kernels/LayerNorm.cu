#include "kernels/LayerNorm.cuh"

#include "kernels/CudaCheck.h"
#include "kernels/DeviceTypes.cuh"

namespace tessera {
namespace {

constexpr int kThreads = 256;

// One block per row; two passes over the row (mean, then the centred sum of squares).
template <typename T>
__global__ void __launch_bounds__(kThreads) layerNorm(const T* x, T* y, const float* __restrict__ gamma,
                                                      const float* __restrict__ beta, int channels, float eps) {
    __shared__ float shared[kThreads / 32 + 1];
    const long long row = blockIdx.x;
    const T* in = x + row * channels;
    T* out = y + row * channels;
    float sum = 0.0f;
    for (int c = threadIdx.x; c < channels; c += kThreads) sum += toFloat(in[c]);
    const float mean = blockReduce<kThreads, false>(sum, shared) / channels;
    float sq = 0.0f;
    for (int c = threadIdx.x; c < channels; c += kThreads) {
        const float d = toFloat(in[c]) - mean;
        sq += d * d;
    }
    const float inv = rsqrtf(blockReduce<kThreads, false>(sq, shared) / channels + eps);
    for (int c = threadIdx.x; c < channels; c += kThreads)
        out[c] = fromFloat<T>((toFloat(in[c]) - mean) * inv * gamma[c] + beta[c]);
}

}  // namespace

void launchLayerNorm(DType t, const void* x, void* y, const float* gamma, const float* beta, long long rows, int channels,
                     float eps, cudaStream_t stream) {
    if (rows <= 0) return;
    TESSERA_DISPATCH_DTYPE(t, {
        layerNorm<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y),
                                                                          gamma, beta, channels, eps);
        TESSERA_CHECK_LAUNCH();
    })
}

}  // namespace tessera
