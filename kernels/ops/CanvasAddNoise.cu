#include "kernels/ops/CanvasAddNoise.cuh"

#include "kernels/device/CudaCheck.h"

namespace tessera {
namespace {

__global__ void canvasAddNoise(float* __restrict__ x, const float* __restrict__ noise, std::size_t count) {
    const std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride)
        x[i] += noise[i];
}

}  // namespace

void launchCanvasAddNoise(float* x, const float* noise, std::size_t count, cudaStream_t stream) {
    if (count == 0) return;
    constexpr unsigned kBlock = 256;
    const std::size_t blocks = (count + kBlock - 1) / kBlock;
    canvasAddNoise<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), kBlock, 0, stream>>>(x, noise, count);
    TESSERA_CHECK_LAUNCH();
}

}  // namespace tessera
