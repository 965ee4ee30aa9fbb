// Conversions between the host-facing float32 NCHW layout and the backend's NHWC
// activations (channels zero-padded to a multiple that keeps cuDNN on tensor-core paths), one
// operation in its two directions.
#pragma once

#include <cuda_runtime.h>

#include "kernels/device/DType.h"

namespace tessera {

// dst[b, y, x, c] = c < channels ? scale * src[b, c, y, x] : 0, for c < paddedChannels.
void launchNchwToNhwc(const float* src, DType, void* dst, int batch, int channels, int height, int width,
                      int paddedChannels, float scale, cudaStream_t);
// dst[b, c, y, x] = src[b, y, x, c] for c < channels.
void launchNhwcToNchw(DType, const void* src, float* dst, int batch, int channels, int height, int width,
                      int paddedChannels, cudaStream_t);

}  // namespace tessera
