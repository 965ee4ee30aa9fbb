// Nearest-neighbour x2 upsampling of NHWC: out[b, y, x, c] = in[b, y/2, x/2, c].
#pragma once

#include <cuda_runtime.h>

#include "kernels/device/DType.h"

namespace tessera {

void launchUpsampleNearest2x(DType, const void* in, void* out, int batch, int height, int width, int channels,
                             cudaStream_t);

}  // namespace tessera
