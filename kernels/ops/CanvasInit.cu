#include "kernels/ops/CanvasInit.cuh"

#include "core/sampling/Philox.h"
#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

__global__ void canvasInit(std::uint64_t seed, long long total, float* __restrict__ x, const float* __restrict__ init,
                           unsigned draw, float sigma, float a, float b, float scale) {
    for (long long p = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; p < total;
         p += static_cast<long long>(gridDim.x) * blockDim.x) {
        const float z = philoxNormal(seed, draw, static_cast<std::uint64_t>(p));
        x[p] = init ? (a * init[p] + b * z) * scale : z * sigma;
    }
}

}  // namespace

void launchCanvasInit(const CanvasGeometry& g, float* x, const float* init, unsigned draw, float sigma, float a,
                      float b, float scale, cudaStream_t stream) {
    const long long total = static_cast<long long>(g.channels) * g.height * g.width;
    canvasInit<<<gridFor(total, 256), 256, 0, stream>>>(g.seed, total, x, init, draw, sigma, a, b, scale);
    TESSERA_CHECK_LAUNCH();
}

}  // namespace tessera
