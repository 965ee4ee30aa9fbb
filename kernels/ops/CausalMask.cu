#include "kernels/ops/CausalMask.cuh"

#include <math_constants.h>

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

__global__ void causalMask(float* scores, long long total, int queries, int keys, int firstQuery) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int key = static_cast<int>(i % keys);
        const int query = firstQuery + static_cast<int>(i / keys % queries);
        if (key > query) scores[i] = -CUDART_INF_F;
    }
}

}  // namespace

void launchCausalMask(float* scores, long long matrices, int queries, int keys, int firstQuery, cudaStream_t stream) {
    const long long total = matrices * queries * keys;
    if (total <= 0) return;
    causalMask<<<gridFor(total, 256), 256, 0, stream>>>(scores, total, queries, keys, firstQuery);
    TESSERA_CHECK_LAUNCH();
}

}  // namespace tessera
