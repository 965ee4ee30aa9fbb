// The epilogue of a convolution or GEMM over NHWC rows:
//   y[p, c] = (accumulate ? y[p, c] : 0) + scale * (bias[c] + residual[p, c])
// It adds the bias, the residual connection and the output rescale after the library call
// (which wrote y with alpha = scale, beta = 0), or writes the initial value that a library
// call then accumulates onto (accumulate = false, beta = 1; TESSERA_CUDA_BETA=1).
#pragma once

#include <cuda_runtime.h>

#include "kernels/device/DType.h"

namespace tessera {

// residual may be nullptr (bias only) and may alias y only element for element.
void launchBiasResidual(DType, void* y, bool accumulate, const float* bias, const void* residual, long long rows,
                        int channels, float scale, cudaStream_t);
// The same with the residual added unscaled after the scaled bias:
//   y[p, c] = (accumulate ? y[p, c] : 0) + scale * bias[c] + residual[p, c]
// (a convolution whose output is rescaled, then added to a skip connection: ESRGAN's x5 * 0.2 + x).
void launchBiasThenResidual(DType, void* y, bool accumulate, const float* bias, const void* residual, long long rows,
                            int channels, float scale, cudaStream_t);

}  // namespace tessera
