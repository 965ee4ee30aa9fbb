#include "kernels/ops/Gelu.cuh"

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

__device__ __forceinline__ float activate(GeluKind kind, float v) {
    switch (kind) {
        case GeluKind::Tanh:
            return 0.5f * v * (1.0f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
        case GeluKind::Quick:
            return v / (1.0f + expf(-1.702f * v));
        default:
            return geluExact(v);
    }
}

template <typename T>
__global__ void gelu(GeluKind kind, const T* x, T* y, long long n) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<long long>(gridDim.x) * blockDim.x)
        y[i] = fromFloat<T>(activate(kind, toFloat(x[i])));
}

}  // namespace

void launchGelu(DType t, GeluKind kind, const void* x, void* y, long long n, cudaStream_t stream) {
    if (n <= 0) return;
    TESSERA_DISPATCH_DTYPE(t, {
        gelu<T><<<gridFor(n, 256), 256, 0, stream>>>(kind, static_cast<const T*>(x), static_cast<T*>(y), n);
        TESSERA_CHECK_LAUNCH();
    })
}

}  // namespace tessera
