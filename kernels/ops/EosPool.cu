#include "kernels/ops/EosPool.cuh"

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

constexpr int kThreads = 256;

// One block per row of ids: one thread finds the position (a row is 77 ids), all copy.
template <typename T>
__global__ void __launch_bounds__(kThreads) eosPool(const T* __restrict__ x, const float* __restrict__ ids,
                                                    float* __restrict__ y, int tokens, int channels, int token) {
    __shared__ int position;
    const long long b = blockIdx.x;
    if (threadIdx.x == 0) {
        const float* row = ids + b * tokens;
        int at = 0;
        if (token < 0) {
            for (int i = 1; i < tokens; ++i)
                if (row[i] > row[at]) at = i;  // strictly larger: the first largest stays
        } else {
            const float wanted = static_cast<float>(token);
            for (int i = tokens - 1; i >= 0; --i)
                if (row[i] == wanted) at = i;  // the last assignment is the first match
        }
        position = at;
    }
    __syncthreads();
    const T* src = x + (b * tokens + position) * channels;
    for (int c = threadIdx.x; c < channels; c += kThreads) y[b * channels + c] = toFloat(src[c]);
}

}  // namespace

void launchEosPool(DType t, const void* x, const float* ids, float* y, int batch, int tokens, int channels, int token,
                   cudaStream_t stream) {
    if (batch <= 0) return;
    TESSERA_DISPATCH_DTYPE(t, {
        eosPool<T><<<static_cast<unsigned>(batch), kThreads, 0, stream>>>(static_cast<const T*>(x), ids, y, tokens,
                                                                          channels, token);
        TESSERA_CHECK_LAUNCH();
    })
}

}  // namespace tessera
