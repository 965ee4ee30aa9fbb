#include "kernels/ops/Softmax.cuh"

#include <cfloat>

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kThreads)
    softmaxRows(const float* __restrict__ scores, T* __restrict__ probs, int cols) {
    __shared__ float shared[kThreads / 32 + 1];
    const long long row = blockIdx.x;
    const float* s = scores + row * cols;
    T* p = probs + row * cols;
    float m = -FLT_MAX;
    for (int c = threadIdx.x; c < cols; c += kThreads) m = fmaxf(m, s[c]);
    m = blockReduce<kThreads, true>(m, shared);
    float sum = 0.0f;
    for (int c = threadIdx.x; c < cols; c += kThreads) sum += expf(s[c] - m);
    sum = blockReduce<kThreads, false>(sum, shared);
    const float inv = 1.0f / sum;
    for (int c = threadIdx.x; c < cols; c += kThreads) p[c] = fromFloat<T>(expf(s[c] - m) * inv);
}

}  // namespace

void launchSoftmaxRows(DType outType, const float* scores, void* probs, long long rows, int cols, cudaStream_t stream) {
    TESSERA_DISPATCH_DTYPE(outType, {
        softmaxRows<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(scores, static_cast<T*>(probs), cols);
        TESSERA_CHECK_LAUNCH();
    })
}

}  // namespace tessera
