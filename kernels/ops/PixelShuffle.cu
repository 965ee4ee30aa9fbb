#include "kernels/ops/PixelShuffle.cuh"

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

// One output element per iteration (these layout ops run once per image, at the ends of a model).
template <typename T>
__global__ void pixelShuffle(const T* __restrict__ coarse, int coarseStored, T* __restrict__ fine, int fineStored,
                             int h, int w, int channels, int r, long long total) {
    const int fw = w * r, fh = h * r;
    for (long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int c = static_cast<int>(idx % fineStored);
        long long pixel = idx / fineStored;
        const int x = static_cast<int>(pixel % fw);
        pixel /= fw;
        const int y = static_cast<int>(pixel % fh);
        const long long b = pixel / fh;
        T v = fromFloat<T>(0.0f);
        if (c < channels) {
            const int k = c * r * r + (y % r) * r + x % r;
            v = coarse[((b * h + y / r) * w + x / r) * coarseStored + k];
        }
        fine[idx] = v;
    }
}

template <typename T>
__global__ void pixelUnshuffle(const T* __restrict__ fine, int fineStored, T* __restrict__ coarse, int coarseStored,
                               int h, int w, int channels, int r, long long total) {
    const int fw = w * r, fh = h * r;
    for (long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int k = static_cast<int>(idx % coarseStored);
        long long pixel = idx / coarseStored;
        const int x = static_cast<int>(pixel % w);
        pixel /= w;
        const int y = static_cast<int>(pixel % h);
        const long long b = pixel / h;
        T v = fromFloat<T>(0.0f);
        if (k < channels * r * r) {
            const int c = k / (r * r), i = k / r % r, j = k % r;
            v = fine[((b * fh + y * r + i) * fw + x * r + j) * fineStored + c];
        }
        coarse[idx] = v;
    }
}

}  // namespace

void launchPixelShuffle(DType dtype, const void* coarse, int coarseStored, void* fine, int fineStored, int batch, int h,
                        int w, int channels, int factor, cudaStream_t stream) {
    const long long total = static_cast<long long>(batch) * h * factor * w * factor * fineStored;
    if (total <= 0) return;
    TESSERA_DISPATCH_DTYPE(dtype, {
        pixelShuffle<T><<<gridFor(total, 256), 256, 0, stream>>>(static_cast<const T*>(coarse), coarseStored,
                                                                 static_cast<T*>(fine), fineStored, h, w, channels,
                                                                 factor, total);
        TESSERA_CHECK_LAUNCH();
    })
}

void launchPixelUnshuffle(DType dtype, const void* fine, int fineStored, void* coarse, int coarseStored, int batch,
                          int h, int w, int channels, int factor, cudaStream_t stream) {
    const long long total = static_cast<long long>(batch) * h * w * coarseStored;
    if (total <= 0) return;
    TESSERA_DISPATCH_DTYPE(dtype, {
        pixelUnshuffle<T><<<gridFor(total, 256), 256, 0, stream>>>(static_cast<const T*>(fine), fineStored,
                                                                   static_cast<T*>(coarse), coarseStored, h, w,
                                                                   channels, factor, total);
        TESSERA_CHECK_LAUNCH();
    })
}

}  // namespace tessera
