// Classifier-free guidance on a doubled tile batch: the forward's output holds the conditional
// rows [0, n) and then the unconditional rows [n, 2n); the first half becomes
// u + scale * (c - u), computed in float32 and stored in the activation type.
#pragma once

#include <cuda_runtime.h>

#include "kernels/device/DType.h"

namespace tessera {

// `half`: the elements of the n conditional rows.
void launchGuidanceCombine(DType dtype, void* output, long long half, float scale, cudaStream_t stream);

}  // namespace tessera
