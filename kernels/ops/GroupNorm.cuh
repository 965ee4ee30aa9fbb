// GroupNorm over NHWC activations with float32 statistics, optionally fused with a
// per-(sample, channel) addition before normalising (conv bias + time embedding), a FiLM
// scale/shift after it (resnet_time_scale_shift "scale_shift") and SiLU.
//   v = x + preAdd[b, c]
//   y = (v - mean_bg) * rstd_bg * gamma[c] + beta[c]
//   y = y * (1 + scale[b, c]) + shift[b, c]       (when scale != nullptr)
//   y = silu(y)                                    (when silu)
// Statistics are reduced deterministically (fixed order, no atomics) with Chan's pairwise
// (count, mean, M2) merge. When a (sample, slab of groups) fits in one block's registers the
// whole norm is one launch that reads x once; otherwise per-chunk partials in float32, a
// finalize in float64 and an apply (x read twice). No allocation or host synchronisation:
// launchGroupNorm is capturable in a CUDA graph.
#pragma once

#include <cstddef>

#include <cuda_runtime.h>

#include "kernels/device/DType.h"

namespace tessera {

struct GroupNormParams {
    DType dtype = DType::F32;
    const void* x = nullptr;  // [batch, pixels, channels]
    void* y = nullptr;        // same shape; may not alias x
    int batch = 0, pixels = 0, channels = 0, groups = 0;
    float eps = 1e-5f;
    const float* gamma = nullptr;
    const float* beta = nullptr;
    const float* preAdd = nullptr;
    long long preAddBatchStride = 0;  // floats between samples (0 = shared)
    const float* scale = nullptr;
    const float* shift = nullptr;
    long long filmBatchStride = 0;
    bool silu = false;
    int chunks = 1;            // pixel chunks per sample for the partial sums (streaming scheme)
    float* scratch = nullptr;  // groupNormScratchFloats(batch, chunks, groups) floats
};

// Pixel chunks per sample so that batch * chunks fills the device a few times over.
int groupNormChunks(int pixels, int batch, int multiprocessors);
std::size_t groupNormScratchFloats(int batch, int chunks, int groups);
// Throws std::invalid_argument when channels/groups cannot be handled (named in the message).
void launchGroupNorm(const GroupNormParams&, cudaStream_t);

}  // namespace tessera
