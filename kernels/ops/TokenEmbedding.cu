#include "kernels/ops/TokenEmbedding.cuh"

#include <math_constants.h>

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

constexpr int kThreads = 256;

// One block per row (token).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    tokenEmbedding(const float* __restrict__ ids, const T* __restrict__ table, const T* __restrict__ positions,
                   T* __restrict__ y, int tokens, int channels, long long vocab) {
    const long long row = blockIdx.x;
    const float id = ids[row];
    const bool valid = id >= 0.0f && id < static_cast<float>(vocab) && id == floorf(id);
    const T* t = table + (valid ? static_cast<long long>(id) : 0) * channels;
    const T* p = positions + static_cast<long long>(row % tokens) * channels;
    T* out = y + row * channels;
    for (int c = threadIdx.x; c < channels; c += kThreads)
        out[c] = fromFloat<T>(valid ? toFloat(t[c]) + toFloat(p[c]) : CUDART_NAN_F);
}

}  // namespace

void launchTokenEmbedding(DType t, const float* ids, const void* table, const void* positions, void* y, long long rows,
                          int tokens, int channels, long long vocab, cudaStream_t stream) {
    if (rows <= 0) return;
    TESSERA_DISPATCH_DTYPE(t, {
        tokenEmbedding<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
            ids, static_cast<const T*>(table), static_cast<const T*>(positions), static_cast<T*>(y), tokens, channels,
            vocab);
        TESSERA_CHECK_LAUNCH();
    })
}

}  // namespace tessera
