// Kernels over a channel slice of an NHWC buffer: `channels` channels of each row (pixel) of a
// buffer whose rows are `pitch` elements apart, the slice starting where the pointer points. A
// densely connected block (ESRGAN's ResidualDenseBlock_5C) keeps its growing concatenation in one
// such buffer: each convolution reads the first channels and writes its own slice after them, so
// no concatenation is ever copied (the lowering in kernels/backend/CudaLowering.cpp).
#pragma once

#include <cuda_runtime.h>

#include "kernels/device/DType.h"

namespace tessera {

// y[r, c] = act(y[r, c] + bias[c]) for the slice, in place; act: leaky ReLU with `slope` when
// `leaky`, else none. bias may be nullptr. The epilogue of a convolution that wrote the slice.
void launchSliceBiasActivation(DType, void* y, int pitch, long long rows, int channels, const float* bias, bool leaky,
                               float slope, cudaStream_t);

// The same from a packed or sliced x into another slice y (x is left as it was): a convolution's
// epilogue writing its activated output straight into the concatenation that reads it.
void launchSliceBiasActivationTo(DType, const void* x, int xPitch, void* y, int yPitch, long long rows, int channels,
                                 const float* bias, bool leaky, float slope, cudaStream_t);

// dst[r, c] = src[r, c] for `channels` channels of `rows` rows, each side at its own pitch.
void launchCopySlice(DType, const void* src, int srcPitch, void* dst, int dstPitch, long long rows, int channels,
                     cudaStream_t);

}  // namespace tessera
