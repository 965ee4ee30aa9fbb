#include "kernels/ops/GegluGate.cuh"

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

// VEC outputs per thread: the value half and the gate half of the projection row, each plus
// its bias in float32 (the projection GEMM leaves the bias to this pass: one pass over the
// 2 x inner projection instead of a bias pass and a gate pass).
template <typename T, int VEC>
__global__ void gegluGate(const T* __restrict__ proj, const float* __restrict__ bias, T* __restrict__ y,
                          long long totalVecs, int inner) {
    const int vecsPerRow = inner / VEC;
    for (long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; idx < totalVecs;
         idx += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long r = idx / vecsPerRow;
        const int c0 = static_cast<int>(idx - r * vecsPerRow) * VEC;
        const T* p = proj + r * 2 * inner + c0;
        float value[VEC], gate[VEC];
        loadVec<T, VEC>(p, value);
        loadVec<T, VEC>(p + inner, gate);
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
            if (bias) {
                value[i] += bias[c0 + i];
                gate[i] += bias[inner + c0 + i];
            }
            value[i] *= geluExact(gate[i]);
        }
        storeVec<T, VEC>(y + r * inner + c0, value);
    }
}

}  // namespace

void launchGegluGate(DType t, const void* proj, const float* bias, void* y, long long rows, int inner,
                     cudaStream_t stream) {
    if (rows <= 0) return;
    const int vec = vectorWidthFor(inner);
    const long long totalVecs = rows * (inner / vec);
    TESSERA_DISPATCH_DTYPE(t, TESSERA_DISPATCH_VEC(vec, {
                               gegluGate<T, VEC><<<gridFor(totalVecs, 256), 256, 0, stream>>>(
                                   static_cast<const T*>(proj), bias, static_cast<T*>(y), totalVecs, inner);
                               TESSERA_CHECK_LAUNCH();
                           }))
}

}  // namespace tessera
