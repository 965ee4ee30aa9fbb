#include "kernels/ops/GatedAdd.cuh"

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

template <typename T, int VEC>
__global__ void gatedAdd(const T* x, const T* a, T* y, const float* __restrict__ gate, int gateStride, int gateAt,
                         long long totalVecs, long long rowsPerImage, int C) {
    const int vecsPerRow = C / VEC;
    for (long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; idx < totalVecs;
         idx += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long r = idx / vecsPerRow;
        const int c0 = static_cast<int>(idx - r * vecsPerRow) * VEC;
        const float* g = gate + (r / rowsPerImage) * gateStride + gateAt + c0;
        float xv[VEC], av[VEC];
        loadVec<T, VEC>(x + r * C + c0, xv);
        loadVec<T, VEC>(a + r * C + c0, av);
#pragma unroll
        for (int i = 0; i < VEC; ++i) xv[i] += g[i] * av[i];
        storeVec<T, VEC>(y + r * C + c0, xv);
    }
}

}  // namespace

void launchGatedAdd(const GatedAddArgs& p, cudaStream_t stream) {
    if (p.rows <= 0) return;
    const int vec = vectorWidthFor(p.channels);
    const long long totalVecs = p.rows * (p.channels / vec);
    TESSERA_DISPATCH_DTYPE(p.dtype, TESSERA_DISPATCH_VEC(vec, {
                               gatedAdd<T, VEC><<<gridFor(totalVecs, 256), 256, 0, stream>>>(
                                   static_cast<const T*>(p.x), static_cast<const T*>(p.addend), static_cast<T*>(p.y),
                                   p.gate, p.gateStride, p.gateAt, totalVecs, p.rowsPerImage, p.channels);
                               TESSERA_CHECK_LAUNCH();
                           }))
}

}  // namespace tessera
