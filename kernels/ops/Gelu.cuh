// GELU-family activations (ModelGraph OpKind::GELU, QuickGELU). float32 arithmetic, storage in
// the activation type; with 16-bit storage the tanh and quick forms use the fast exponential
// (its error is far below the output's rounding step), 16 bytes per load where aligned.
#pragma once

#include <cuda_runtime.h>

#include "kernels/device/DType.h"

namespace tessera {

enum class GeluKind {
    Exact,  // 0.5 x (1 + erf(x / sqrt 2))
    Tanh,   // PyTorch's approximate="tanh"
    Quick,  // x * sigmoid(1.702 x) (CLIP)
};

// y[i] = act(x[i]) for n elements; y may alias x.
void launchGelu(DType, GeluKind, const void* x, void* y, long long n, cudaStream_t);
// y[r, c] = act(x[r * xPitch + c]) for `rows` rows of `count` elements (a channel slice read in
// place: x points at its first channel), y packed.
void launchGeluRows(DType, GeluKind, const void* x, long long xPitch, void* y, long long rows, int count, cudaStream_t);

}  // namespace tessera
