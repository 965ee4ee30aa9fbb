// y[p, c] = scale * (bias[c] + residual[p, c]) over NHWC rows: the initial value that a
// convolution or GEMM then accumulates onto (beta = 1, alpha = scale), which fuses the
// bias, the residual connection and the output rescale into the layer itself.
#pragma once

#include <cuda_runtime.h>

#include "kernels/DType.h"

namespace tessera {

// residual may be nullptr (bias only). y may not alias residual unless identical rows.
void launchBiasResidual(DType, void* y, const float* bias, const void* residual, long long rows, int channels,
                        float scale, cudaStream_t);

}  // namespace tessera
