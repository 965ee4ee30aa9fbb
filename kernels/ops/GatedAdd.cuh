// FLUX's gated residual over token rows (ModelGraph OpKind::GatedAdd): y = x + g * a, g the row's
// image's float32 gate m[gateAt + c], arithmetic in float32.
#pragma once

#include <cuda_runtime.h>

#include "kernels/device/DType.h"

namespace tessera {

struct GatedAddArgs {
    DType dtype = DType::F16;
    const void* x = nullptr;
    const void* addend = nullptr;
    void* y = nullptr;            // may alias x or addend
    const float* gate = nullptr;  // [images, gateStride]
    int gateStride = 0, gateAt = 0;
    long long rows = 0, rowsPerImage = 1;
    int channels = 0;
};

void launchGatedAdd(const GatedAddArgs&, cudaStream_t);

}  // namespace tessera
