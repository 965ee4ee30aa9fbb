#include "kernels/ops/Concat.cuh"

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

template <typename T, int VEC>
__global__ void concatChannels(const T* __restrict__ a, int ca, const T* __restrict__ b, int cb, T* __restrict__ out,
                               long long totalVecs) {
    const int va = ca / VEC, vb = cb / VEC, vr = va + vb;
    for (long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; idx < totalVecs;
         idx += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long pixel = idx / vr;
        const int k = static_cast<int>(idx % vr);
        const T* src = k < va ? a + (pixel * va + k) * VEC : b + (pixel * vb + (k - va)) * VEC;
        *reinterpret_cast<Vec<T, VEC>*>(out + idx * VEC) = *reinterpret_cast<const Vec<T, VEC>*>(src);
    }
}

}  // namespace

void launchConcatChannels(DType dtype, const void* a, int channelsA, const void* b, int channelsB, void* out,
                          long long pixels, cudaStream_t stream) {
    const int vec = vectorWidthFor(channelsA, channelsB);
    const long long totalVecs = pixels * ((channelsA + channelsB) / vec);
    TESSERA_DISPATCH_DTYPE(dtype, TESSERA_DISPATCH_VEC(vec, {
                               concatChannels<T, VEC><<<gridFor(totalVecs, 256), 256, 0, stream>>>(
                                   static_cast<const T*>(a), channelsA, static_cast<const T*>(b), channelsB,
                                   static_cast<T*>(out), totalVecs);
                               TESSERA_CHECK_LAUNCH();
                           }))
}

}  // namespace tessera
