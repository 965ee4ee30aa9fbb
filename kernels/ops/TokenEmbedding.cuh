// CLIP's embeddings (ModelGraph OpKind::TokenEmbedding): y[r] = table[ids[r]] + positions[r %
// tokens] for rows = batch * tokens, summed in float32 and stored once in the activation type.
// The ids are float32 (exact below 2^24: the activation types are not). The backend checks the
// ids on the host before a run (cpu::checkTokenIds); a row whose id is still not an integer in
// [0, vocab) (device-side inputs) is written as NaN, never read outside the table.
#pragma once

#include <cuda_runtime.h>

#include "kernels/device/DType.h"

namespace tessera {

// table [vocab, channels] and positions [>= tokens, channels] in the activation type `t`.
void launchTokenEmbedding(DType t, const float* ids, const void* table, const void* positions, void* y, long long rows,
                          int tokens, int channels, long long vocab, cudaStream_t);

}  // namespace tessera
