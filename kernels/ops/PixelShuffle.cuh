// PyTorch's pixel_shuffle and pixel_unshuffle (nn.PixelShuffle, F.pixel_unshuffle) over NHWC
// tensors whose channels may be stored padded (a multiple of 8 for cuDNN): padding channels of the
// output are written as zeros, those of the input never read.
//   shuffle:   out[b, y r + i, x r + j, c] = in[b, y, x, c r^2 + i r + j]   (in h x w, out h r x w r)
//   unshuffle: out[b, y, x, c r^2 + i r + j] = in[b, y r + i, x r + j, c]   (in h r x w r, out h x w)
#pragma once

#include <cuda_runtime.h>

#include "kernels/device/DType.h"

namespace tessera {

// channels: the shuffled (fine) map's logical channels; the coarse map has channels * r^2.
// fineStored / coarseStored: the channels each is stored with (>= logical). h x w: the coarse size.
void launchPixelShuffle(DType, const void* coarse, int coarseStored, void* fine, int fineStored, int batch, int h,
                        int w, int channels, int factor, cudaStream_t);
void launchPixelUnshuffle(DType, const void* fine, int fineStored, void* coarse, int coarseStored, int batch, int h,
                          int w, int channels, int factor, cudaStream_t);

}  // namespace tessera
