// FLUX's modulated LayerNorm over token rows (ModelGraph OpKind::AdaLayerNorm): per row the mean
// and biased variance in float32 (block reductions, the row read from L2 for each pass), then
// (x - mean) / sqrt(var + eps) * (1 + m[scaleAt + c]) + m[shiftAt + c] with m the row's image's
// float32 modulation vector.
#pragma once

#include <cuda_runtime.h>

#include "kernels/device/DType.h"

namespace tessera {

struct AdaLayerNormArgs {
    DType dtype = DType::F16;
    const void* x = nullptr;
    void* y = nullptr;           // may alias x
    const float* mod = nullptr;  // [images, modStride]
    int modStride = 0, shiftAt = 0, scaleAt = 0;
    long long rows = 0;
    long long rowsPerImage = 1;
    int channels = 0;
    float eps = 1e-6f;
};

void launchAdaLayerNorm(const AdaLayerNormArgs&, cudaStream_t);

}  // namespace tessera
