#include "kernels/ops/NonFinite.cuh"

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

template <typename T>
__global__ void nonFiniteCheck(const T* __restrict__ data, long long elements, int channels, int stride,
                               const StepState* __restrict__ state, unsigned slot, unsigned long long* first) {
    int bad = 0;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < elements;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const bool real = channels == stride || static_cast<int>(i % stride) < channels;
        if (real && !isfinite(toFloat(data[i]))) bad = 1;
    }
    // Every thread of the block reaches this (the loop above has no early exit).
    if (__syncthreads_or(bad) && threadIdx.x == 0)
        atomicMin(first, (static_cast<unsigned long long>(static_cast<unsigned>(state->step)) << 32) | slot);
}

}  // namespace

void launchNonFiniteCheck(DType dtype, const void* data, long long elements, int channels, int stride,
                          const StepState* state, unsigned slot, unsigned long long* first, cudaStream_t stream) {
    if (elements <= 0) return;
    // At most 1024 blocks: the data is small (one tile batch's output, or the canvas), and fewer
    // blocks means fewer atomics when a whole tensor is NaN.
    TESSERA_DISPATCH_DTYPE(dtype, {
        nonFiniteCheck<T><<<gridFor(elements, 256, 1024), 256, 0, stream>>>(static_cast<const T*>(data), elements,
                                                                            channels, stride, state, slot, first);
        TESSERA_CHECK_LAUNCH();
    })
}

}  // namespace tessera
