// Fused attention (FlashAttention-2 style): O = softmax(Q K^T * scale [+ causal mask]) V for
// fp16/bf16 activations in one kernel. The scores never reach global memory: each CTA holds 64
// or 128 query rows of one (image, head) (FlashAttentionArgs::blockQueries), streams the keys and values through shared memory in
// blocks (cp.async, double-buffered) and keeps a running row maximum and sum in float32
// (online softmax); products on tensor cores (mma.sync m16n8k16, float32 accumulation). The
// probabilities are rounded to the activation type before P V, as the blocked path rounds them.
//
// Operands are the backend's row-strided layouts: row r of image b holds head h's d channels
// from column h * d (Q, K, V may be views into one interleaved QKV buffer). Head dims that are
// multiples of 8 up to kFlashMaxHeadDim; inside, d is padded with zeros to a multiple of 16
// (40, SD 1.x's, is computed exactly: two k16 steps and one k8 step).
// Wider heads (the single-head 256/512-channel attention of the pixel models and the VAE) stay
// on the blocked path: their Q, K and V blocks would not fit shared memory at two CTAs per SM.
#pragma once

#include <cuda_runtime.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "kernels/device/DType.h"

namespace tessera {

inline constexpr int kFlashMaxHeadDim = 160;

struct FlashAttentionArgs {
    DType dtype = DType::F16;
    // Element strides: rows `*Row` elements apart, images `*Image` apart; head h at column h * headDim.
    const void* q = nullptr;
    long long qRow = 0, qImage = 0;
    const void* k = nullptr;
    long long kRow = 0, kImage = 0;
    const void* v = nullptr;
    long long vRow = 0, vImage = 0;
    void* o = nullptr;
    long long oRow = 0, oImage = 0;
    int batch = 0, heads = 0, queries = 0, keys = 0, headDim = 0;
    float scale = 1.0f;   // applied to Q K^T (1 / sqrt(headDim) for the models' attention)
    bool causal = false;  // query i sees keys 0..i only
    // Query rows per CTA: 64, or 128 where flashTilings offers it (each K/V block read from L2
    // then serves twice the queries); 0 means 64. 128 rows in 4 warps gives each warp two m16
    // tiles (each fragment read from shared memory feeds two products, at twice the
    // registers), in 8 warps one. Which is fastest depends on the shape; the backend times
    // every offered tiling at prepare.
    int blockQueries = 0;
    int warps = 0;  // 4 or 8 (128 rows only); 0 means 4
};

struct FlashTiling {
    int blockQueries = 64;
    int warps = 4;
};

// Why the fused kernel cannot compute an attention of this type, head dim and layout ("" when
// it can). `elementOffsets` are every row stride, image stride and base offset (in elements)
// of the operands: each must be a multiple of 8 so that rows are 16-byte aligned (the base
// pointers themselves are checked at launch). Host-only; no device is touched.
std::string flashAttentionRefusal(DType dtype, int headDim, int batch, int heads,
                                  std::initializer_list<long long> elementOffsets);

// The tilings the kernel offers at this head dim: 64 rows in 4 warps; up to a computed head dim
// of 80 (the registers of two m16 tiles per warp) also 128 rows in 4 warps and in 8 warps.
std::vector<FlashTiling> flashTilings(int headDim);

// "head dim 24 in 32, 128 queries x 64 keys per block, 8 warps": how the kernel tiles this head
// dim (as launched: 128 rows where not offered run as 64).
std::string flashAttentionTiling(int headDim, FlashTiling tiling = {});

// Enqueues the kernel on `stream`. Throws std::invalid_argument when flashAttentionRefusal
// refuses the arguments, a base pointer is not 16-byte aligned or a size is below 1; CudaError
// for a failed launch.
void launchFlashAttention(const FlashAttentionArgs& args, cudaStream_t stream);

}  // namespace tessera
