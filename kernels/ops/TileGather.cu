#include "kernels/ops/TileGather.cuh"

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

template <typename T>
__global__ void tileGather(CanvasGeometry g, const float* __restrict__ canvas,
                           const StepCoefficients* __restrict__ coeff, const StepState* __restrict__ state, int first,
                           int count, int padded, long long total, T* __restrict__ input,
                           float* __restrict__ timesteps) {
    const StepCoefficients* step = coeff + state->step;
    const float scale = step->modelInputScale;
    const int shiftY = state->shiftY, shiftX = state->shiftX;
    if (blockIdx.x == 0)
        for (int i = threadIdx.x; i < count; i += blockDim.x) timesteps[i] = step->timestep;
    for (long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int c = static_cast<int>(idx % padded);
        long long rest = idx / padded;
        const int lx = static_cast<int>(rest % g.tileW);
        rest /= g.tileW;
        const int ly = static_cast<int>(rest % g.tileH);
        const int b = static_cast<int>(rest / g.tileH);
        float v = 0.0f;
        if (c < g.channels) {
            const int t = first + b;
            const int y = rolledSource(g.tileY[t] + ly, shiftY, g.height);
            const int x = rolledSource(g.tileX[t] + lx, shiftX, g.width);
            const long long p = (static_cast<long long>(c) * g.height + y) * g.width + x;
            v = canvas[p] * scale;
        }
        input[idx] = fromFloat<T>(v);
    }
}

}  // namespace

void launchTileGather(const CanvasGeometry& g, const float* canvas, const StepCoefficients* coeff,
                      const StepState* state, int first, int count, const TileTensor& io, void* input, float* timesteps,
                      cudaStream_t stream) {
    const long long total = static_cast<long long>(count) * g.tileH * g.tileW * io.paddedChannels;
    TESSERA_DISPATCH_DTYPE(io.dtype, {
        tileGather<T><<<gridFor(total, 256), 256, 0, stream>>>(g, canvas, coeff, state, first, count, io.paddedChannels,
                                                               total, static_cast<T*>(input), timesteps);
        TESSERA_CHECK_LAUNCH();
    })
}

}  // namespace tessera
