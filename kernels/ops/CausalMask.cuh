// The causal mask of self-attention over tokens (ModelGraph Attention with `causal`, CLIP):
// float32 scores of `matrices` [queries, keys] blocks get -inf where key > query, before the
// row softmax (kernels/ops/Softmax.cuh), which turns them into exact zeros. A block of query rows
// starts at query `firstQuery` (row r is query firstQuery + r).
#pragma once

#include <cuda_runtime.h>

namespace tessera {

void launchCausalMask(float* scores, long long matrices, int queries, int keys, int firstQuery, cudaStream_t);

}  // namespace tessera
