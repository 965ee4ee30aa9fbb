// FLUX's QK RMSNorm and RoPE over a packed q | k | v token row (ModelGraph OpKind::QkNormRope):
// one warp per (row, head), q and k each normalised over the head's d channels in float32
// (x / sqrt(mean(x^2) + eps) * w), then each pair (2i, 2i + 1) turned by the row's angle
// (cos, sin from `table`, float32 [rowsPerImage, d / 2, 2], the same for every image); v copied.
#pragma once

#include <cuda_runtime.h>

#include "kernels/device/DType.h"

namespace tessera {

struct QkNormRopeArgs {
    DType dtype = DType::F16;
    const void* x = nullptr;  // [rows, 3 heads d], rows xPitch elements apart (0: packed)
    long long xPitch = 0;
    void* y = nullptr;  // the same shape; must not alias x
    const float* qWeight = nullptr;
    const float* kWeight = nullptr;  // [d] each
    const float* table = nullptr;
    long long rows = 0, rowsPerImage = 1;
    int heads = 0, headDim = 0;
    float eps = 1e-6f;
};

void launchQkNormRope(const QkNormRopeArgs&, cudaStream_t);

}  // namespace tessera
