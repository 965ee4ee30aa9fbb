#include "kernels/ops/LayoutConvert.cuh"

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

template <typename T>
__global__ void nchwToNhwc(const float* __restrict__ src, T* __restrict__ dst, int channels, int height, int width,
                           int padded, float scale, long long total) {
    for (long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int c = static_cast<int>(idx % padded);
        const long long pixel = idx / padded;
        const long long hw = static_cast<long long>(height) * width;
        const long long b = pixel / hw, yx = pixel % hw;
        const float v = c < channels ? scale * src[(b * channels + c) * hw + yx] : 0.0f;
        dst[idx] = fromFloat<T>(v);
    }
}

template <typename T>
__global__ void nhwcToNchw(const T* __restrict__ src, float* __restrict__ dst, int channels, int height, int width,
                           int padded, long long total) {
    for (long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long hw = static_cast<long long>(height) * width;
        const long long yx = idx % hw;
        const int c = static_cast<int>((idx / hw) % channels);
        const long long b = idx / (hw * channels);
        dst[idx] = toFloat(src[(b * hw + yx) * padded + c]);
    }
}

}  // namespace

void launchNchwToNhwc(const float* src, DType dtype, void* dst, int batch, int channels, int height, int width,
                      int paddedChannels, float scale, cudaStream_t stream) {
    const long long total = static_cast<long long>(batch) * height * width * paddedChannels;
    TESSERA_DISPATCH_DTYPE(dtype, {
        nchwToNhwc<T><<<gridFor(total, 256), 256, 0, stream>>>(src, static_cast<T*>(dst), channels, height, width,
                                                               paddedChannels, scale, total);
        TESSERA_CHECK_LAUNCH();
    })
}

void launchNhwcToNchw(DType dtype, const void* src, float* dst, int batch, int channels, int height, int width,
                      int paddedChannels, cudaStream_t stream) {
    const long long total = static_cast<long long>(batch) * height * width * channels;
    TESSERA_DISPATCH_DTYPE(dtype, {
        nhwcToNchw<T><<<gridFor(total, 256), 256, 0, stream>>>(static_cast<const T*>(src), dst, channels, height, width,
                                                               paddedChannels, total);
        TESSERA_CHECK_LAUNCH();
    })
}

}  // namespace tessera
