#include "kernels/Softmax.cuh"

#include <cfloat>

#include "kernels/CudaCheck.h"
#include "kernels/DeviceTypes.cuh"

namespace tessera {
namespace {

constexpr int kThreads = 256;

template <bool IsMax>
__device__ float blockReduce(float v, float* shared) {
    for (int o = 16; o > 0; o >>= 1) {
        const float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = IsMax ? fmaxf(v, w) : v + w;
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float r = shared[0];
        for (int w = 1; w < kThreads / 32; ++w) r = IsMax ? fmaxf(r, shared[w]) : r + shared[w];
        shared[kThreads / 32] = r;
    }
    __syncthreads();
    const float r = shared[kThreads / 32];
    __syncthreads();
    return r;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) softmaxRows(const float* __restrict__ scores, T* __restrict__ probs,
                                                       int cols) {
    __shared__ float shared[kThreads / 32 + 1];
    const long long row = blockIdx.x;
    const float* s = scores + row * cols;
    T* p = probs + row * cols;
    float m = -FLT_MAX;
    for (int c = threadIdx.x; c < cols; c += kThreads) m = fmaxf(m, s[c]);
    m = blockReduce<true>(m, shared);
    float sum = 0.0f;
    for (int c = threadIdx.x; c < cols; c += kThreads) sum += expf(s[c] - m);
    sum = blockReduce<false>(sum, shared);
    const float inv = 1.0f / sum;
    for (int c = threadIdx.x; c < cols; c += kThreads) p[c] = fromFloat<T>(expf(s[c] - m) * inv);
}

}  // namespace

void launchSoftmaxRows(DType outType, const float* scores, void* probs, long long rows, int cols,
                       cudaStream_t stream) {
    TESSERA_DISPATCH_DTYPE(outType, {
        softmaxRows<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(scores, static_cast<T*>(probs), cols);
        TESSERA_CHECK_LAUNCH();
    })
}

}  // namespace tessera
