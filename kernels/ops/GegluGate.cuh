// GEGLU's gating (ModelGraph OpKind::GEGLU after its projection GEMM; diffusers
// models/activations.py GEGLU): float32 arithmetic, storage in the activation type.
#pragma once

#include <cuda_runtime.h>

#include "kernels/device/DType.h"

namespace tessera {

// y[r, i] = (proj[r, i] + bias[i]) * gelu(proj[r, inner + i] + bias[inner + i]) (exact GELU),
// in float32 from the stored projection: proj [rows, 2 * inner], bias [2 * inner] float32 or
// null, y [rows, inner] (not aliasing proj).
void launchGegluGate(DType, const void* proj, const float* bias, void* y, long long rows, int inner, cudaStream_t);

}  // namespace tessera
