#include "kernels/ops/TimestepEmbedding.cuh"

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

__global__ void timestepEmbedding(const float* __restrict__ timesteps, float* __restrict__ out, int batch, int dim,
                                  int freqShift, bool flip) {
    const int half = dim / 2;
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= batch * dim) return;
    const int b = idx / dim, j = idx % dim;
    float v = 0.0f;
    if (j < 2 * half) {
        const int i = j % half;
        // As diffusers: (-ln(10000) * i) in float32, divided by (half - shift), then exp.
        const float exponent = (-9.210340371976184f * static_cast<float>(i)) / static_cast<float>(half - freqShift);
        const float arg = timesteps[b] * expf(exponent);
        const bool firstHalf = j < half;
        const bool useSin = flip ? !firstHalf : firstHalf;
        v = useSin ? sinf(arg) : cosf(arg);
    }
    out[idx] = v;
}

}  // namespace

void launchTimestepEmbedding(const float* timesteps, float* out, int batch, int dim, int freqShift, bool flipSinToCos,
                             cudaStream_t stream) {
    timestepEmbedding<<<gridFor(batch * dim, 128), 128, 0, stream>>>(timesteps, out, batch, dim, freqShift,
                                                                     flipSinToCos);
    TESSERA_CHECK_LAUNCH();
}

}  // namespace tessera
