// Row-wise softmax of float32 attention scores, written in the activation type for the
// P·V product. Max-subtracted, float32 throughout; deterministic block reductions.
#pragma once

#include <cuda_runtime.h>

#include "kernels/device/DType.h"

namespace tessera {

void launchSoftmaxRows(DType outType, const float* scores, void* probs, long long rows, int cols, cudaStream_t);

}  // namespace tessera
