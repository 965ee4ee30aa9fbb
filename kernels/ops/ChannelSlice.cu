#include "kernels/ops/ChannelSlice.cuh"

#include <algorithm>
#include <cstdint>

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

// x and y may be the same slice (in place).
template <typename T, int VEC>
__global__ void sliceBiasActivation(const T* x, int xPitch, T* y, int pitch, long long totalVecs, int channels,
                                    const float* __restrict__ bias, bool leaky, float slope) {
    const int vecsPerRow = channels / VEC;
    for (long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; idx < totalVecs;
         idx += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long row = idx / vecsPerRow;
        const int c0 = static_cast<int>(idx % vecsPerRow) * VEC;
        T* p = y + row * pitch + c0;
        float v[VEC];
        loadVec<T, VEC>(x + row * xPitch + c0, v);
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
            float r = v[i] + (bias ? bias[c0 + i] : 0.0f);
            if (leaky && r < 0.0f) r *= slope;
            v[i] = r;
        }
        storeVec<T, VEC>(p, v);
    }
}

template <typename T, int VEC>
__global__ void copySlice(const T* __restrict__ src, int srcPitch, T* __restrict__ dst, int dstPitch,
                          long long totalVecs, int channels) {
    const int vecsPerRow = channels / VEC;
    for (long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; idx < totalVecs;
         idx += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long row = idx / vecsPerRow;
        const int c0 = static_cast<int>(idx % vecsPerRow) * VEC;
        float v[VEC];
        loadVec<T, VEC>(src + row * srcPitch + c0, v);
        storeVec<T, VEC>(dst + row * dstPitch + c0, v);
    }
}

// The widest vector that divides the channels, the pitch and the slice's start (its address).
int sliceVector(DType dtype, int channels, int pitch, const void* p) {
    const auto offset = static_cast<int>(reinterpret_cast<std::uintptr_t>(p) / dtypeSize(dtype) % 8);
    return vectorWidthFor(channels, pitch, offset == 0 ? 8 : offset);
}

}  // namespace

void launchSliceBiasActivationTo(DType dtype, const void* x, int xPitch, void* y, int yPitch, long long rows,
                                 int channels, const float* bias, bool leaky, float slope, cudaStream_t stream) {
    const int vec = std::min(sliceVector(dtype, channels, xPitch, x), sliceVector(dtype, channels, yPitch, y));
    const long long totalVecs = rows * (channels / vec);
    TESSERA_DISPATCH_DTYPE(dtype, TESSERA_DISPATCH_VEC(vec, {
                               sliceBiasActivation<T, VEC><<<gridFor(totalVecs, 256), 256, 0, stream>>>(
                                   static_cast<const T*>(x), xPitch, static_cast<T*>(y), yPitch, totalVecs, channels,
                                   bias, leaky, slope);
                               TESSERA_CHECK_LAUNCH();
                           }))
}

void launchSliceBiasActivation(DType dtype, void* y, int pitch, long long rows, int channels, const float* bias,
                               bool leaky, float slope, cudaStream_t stream) {
    launchSliceBiasActivationTo(dtype, y, pitch, y, pitch, rows, channels, bias, leaky, slope, stream);
}

void launchCopySlice(DType dtype, const void* src, int srcPitch, void* dst, int dstPitch, long long rows, int channels,
                     cudaStream_t stream) {
    const int vec = std::min(sliceVector(dtype, channels, srcPitch, src), sliceVector(dtype, channels, dstPitch, dst));
    const long long totalVecs = rows * (channels / vec);
    TESSERA_DISPATCH_DTYPE(dtype, TESSERA_DISPATCH_VEC(vec, {
                               copySlice<T, VEC><<<gridFor(totalVecs, 256), 256, 0, stream>>>(
                                   static_cast<const T*>(src), srcPitch, static_cast<T*>(dst), dstPitch, totalVecs,
                                   channels);
                               TESSERA_CHECK_LAUNCH();
                           }))
}

}  // namespace tessera
