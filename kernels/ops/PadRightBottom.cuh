// Zero padding of one column on the right and one row at the bottom of NHWC
// ([b, H, W, C] -> [b, H+1, W+1, C]): Downsample2D with downsample_padding = 0 (the TF
// "SAME" stride-2 convolution), which cuDNN's symmetric padding cannot express.
#pragma once

#include <cuda_runtime.h>

#include "kernels/device/DType.h"

namespace tessera {

void launchPadRightBottom(DType, const void* in, void* out, int batch, int height, int width, int channels,
                          cudaStream_t);

}  // namespace tessera
