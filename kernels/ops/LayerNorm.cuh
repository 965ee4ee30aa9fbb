// LayerNorm over token rows [rows, channels] (ModelGraph OpKind::LayerNorm): per row the mean
// and biased variance in float32 (deterministic warp or block reductions), then * gamma + beta.
// Rows of whole 16-byte vectors up to 2,048 channels (every SD and CLIP width) run one warp per
// row with the row in registers: one read and one write of the tensor.
#pragma once

#include <cuda_runtime.h>

#include "kernels/device/DType.h"

namespace tessera {

// y may alias x. gamma, beta: float32 [channels].
void launchLayerNorm(DType, const void* x, void* y, const float* gamma, const float* beta, long long rows, int channels,
                     float eps, cudaStream_t);

}  // namespace tessera
