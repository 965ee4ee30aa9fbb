// Channel concatenation of two NHWC tensors with the same pixels: out = [a, b] per pixel
// (the up blocks' torch.cat([h, skip], dim=1): h first, skip second).
#pragma once

#include <cuda_runtime.h>

#include "kernels/device/DType.h"

namespace tessera {

void launchConcatChannels(DType, const void* a, int channelsA, const void* b, int channelsB, void* out,
                          long long pixels, cudaStream_t);

}  // namespace tessera
