// Nearest-neighbour upsampling of NHWC: out[b, y, x, c] = in[b, y/2, x/2, c] (x2), or by any
// integer factor f: in[b, y/f, x/f, c] (F.interpolate(scale_factor=f, mode="nearest")).
#pragma once

#include <cuda_runtime.h>

#include "kernels/device/DType.h"

namespace tessera {

void launchUpsampleNearest2x(DType, const void* in, void* out, int batch, int height, int width, int channels,
                             cudaStream_t);
void launchUpsampleNearest(DType, const void* in, void* out, int batch, int height, int width, int channels, int factor,
                           cudaStream_t);

}  // namespace tessera
