// GELU-family activations (ModelGraph OpKind::GELU, QuickGELU) and GEGLU's gating
// (OpKind::GEGLU after its projection GEMM). float32 arithmetic, storage in the activation type.
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
// y[r, i] = (proj[r, i] + bias[i]) * gelu(proj[r, inner + i] + bias[inner + i]) (exact GELU),
// in float32 from the stored projection: proj [rows, 2 * inner], bias [2 * inner] float32 or
// null, y [rows, inner] (not aliasing proj).
void launchGegluGate(DType, const void* proj, const float* bias, void* y, long long rows, int inner, cudaStream_t);

}  // namespace tessera
