#include "kernels/ops/ControlInputs.cuh"

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

template <typename T>
__global__ void hintCrop(const float* __restrict__ hint, int channels, int hintH, int hintW, int factor,
                         const int* __restrict__ tileX, const int* __restrict__ tileY,
                         const StepState* __restrict__ state, int first, int count, int tileH, int tileW, int padded,
                         T* __restrict__ dst, long long total) {
    const int shiftY = state ? state->shiftY * factor : 0, shiftX = state ? state->shiftX * factor : 0;
    for (long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int c = static_cast<int>(idx % padded);
        const long long pixel = idx / padded;
        const int x = static_cast<int>(pixel % tileW);
        const int y = static_cast<int>((pixel / tileW) % tileH);
        const int r = static_cast<int>(pixel / (static_cast<long long>(tileW) * tileH));
        const int tile = first + r % count;
        float v = 0.0f;
        if (c < channels) {
            const long long hy = rolledSource(tileY[tile] * factor + y, shiftY, hintH);
            const long long hx = rolledSource(tileX[tile] * factor + x, shiftX, hintW);
            v = hint[(static_cast<long long>(c) * hintH + hy) * hintW + hx];
        }
        dst[idx] = fromFloat<T>(v);
    }
}

__global__ void scaleRows(const float* __restrict__ scales, int steps, const StepState* __restrict__ state, int count,
                          int width, float* __restrict__ dst, long long total) {
    const int k = state->step;
    for (long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int j = static_cast<int>(idx % (2 * width));
        const int r = static_cast<int>(idx / (2 * width));
        const float s = r < count ? scales[k] : scales[steps + k];
        dst[idx] = j < width ? s - 1.0f : 0.0f;
    }
}

}  // namespace

void launchControlHintCrop(const float* hint, int channels, int hintH, int hintW, int factor, const int* tileX,
                           const int* tileY, const StepState* state, int first, int count, int rows, int tileH,
                           int tileW, int paddedChannels, DType dtype, void* dst, cudaStream_t stream) {
    const long long total = static_cast<long long>(rows) * tileH * tileW * paddedChannels;
    TESSERA_DISPATCH_DTYPE(dtype, {
        hintCrop<T><<<gridFor(total, 256), 256, 0, stream>>>(hint, channels, hintH, hintW, factor, tileX, tileY, state,
                                                             first, count, tileH, tileW, paddedChannels,
                                                             static_cast<T*>(dst), total);
        TESSERA_CHECK_LAUNCH();
    })
}

void launchControlScaleRows(const float* scales, int steps, const StepState* state, int count, int rows, int width,
                            float* dst, cudaStream_t stream) {
    const long long total = static_cast<long long>(rows) * 2 * width;
    scaleRows<<<gridFor(total, 256), 256, 0, stream>>>(scales, steps, state, count, width, dst, total);
    TESSERA_CHECK_LAUNCH();
}

}  // namespace tessera
