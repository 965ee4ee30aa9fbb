// CLIP's pooling (ModelGraph OpKind::EosPool): y[b] = x[b, pos] as float32, pos = the first
// position of row b whose id is `token`, position 0 if none; for token -1 the first largest id
// (transformers' argmax). Ids are float32 [batch, tokens].
#pragma once

#include <cuda_runtime.h>

#include "kernels/device/DType.h"

namespace tessera {

// x [batch, tokens, channels] in the activation type `t`; y [batch, channels] float32.
void launchEosPool(DType t, const void* x, const float* ids, float* y, int batch, int tokens, int channels, int token,
                   cudaStream_t);

}  // namespace tessera
