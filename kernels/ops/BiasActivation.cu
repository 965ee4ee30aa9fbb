#include "kernels/ops/BiasActivation.cuh"

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

__global__ void biasActivation(float* __restrict__ y, const float* __restrict__ bias, int rows, int cols, bool silu,
                               float* __restrict__ siluOut) {
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= rows * cols) return;
    float v = y[idx] + bias[idx % cols];
    if (silu) v = tessera::silu(v);
    y[idx] = v;
    if (siluOut) siluOut[idx] = tessera::silu(v);
}

}  // namespace

void launchBiasActivationF32(float* y, const float* bias, int rows, int cols, bool silu, float* siluOut,
                             cudaStream_t stream) {
    biasActivation<<<gridFor(rows * cols, 256), 256, 0, stream>>>(y, bias, rows, cols, silu, siluOut);
    TESSERA_CHECK_LAUNCH();
}

}  // namespace tessera
