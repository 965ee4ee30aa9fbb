// CudaSettings: every environment setting that changes the CUDA backend's numerical path or
// its timed choices, read once (when a backend is made) and recorded in each RunRecord
// (tuning.settings). Diagnostics:
//  TESSERA_CUDNN_FIND=0             cuDNN heuristics instead of benchmarks for legacy algorithms
//  TESSERA_CUDNN_API=legacy         the legacy cuDNN path everywhere (no graph-API plans)
//  TESSERA_CUDNN_FUSE=0             conv epilogues never fused into a cuDNN plan
//  TESSERA_CUDNN_RUNTIME_FUSION=1   fused plans may use engines compiled at prepare (NVRTC)
//  TESSERA_CUDA_DENSE=1             densely connected blocks' concatenations kept in one buffer that
//                                   each convolution reads a prefix of and writes a slice of, instead of
//                                   copied: no copies, but cuDNN 9.14's graph plans for channel slices
//                                   ran ESRGAN's convolutions 1.8x slower on an H200 (docs/UPSCALE.md),
//                                   so the copies are the default
//  TESSERA_CUDA_BETA=1              accumulate onto a bias-initialised output (beta = 1)
//  TESSERA_CUBLASLT=0               fp16/bf16 token linears as a cuBLAS GEMM and a bias(+residual)
//                                   pass, not one cuBLASLt matmul with the bias epilogue (residual as C)
//  TESSERA_CUDA_SYNC=op             synchronise after every layer
//  TESSERA_CUDA_STREAM=nonblocking  the stream does not order against the legacy default stream
//  TESSERA_CUDA_ATTENTION_MIB=N     float32 attention scores of one pass within N MiB (default 256):
//                                   larger score matrices are computed in blocks of query rows
//                                   (kernels/backend/AttentionPlan.h); a whole number from 1 to 1048576
//  TESSERA_CUDA_FLASH=0|1|128|128w8|auto
//                                   fp16/bf16 attention: 0 the blocked path above everywhere; 1 the
//                                   fused kernel (kernels/ops/FlashAttention.cuh) wherever it applies,
//                                   64 query rows per block; 128 / 128w8 the same with 128 rows in
//                                   4 / 8 warps where the head dim offers it (else 64); auto
//                                   (default) the fastest path and tiling per shape, timed at
//                                   prepare and kept in the tuning cache
//  TESSERA_CUDA_SDPA=0|1|auto       fp16/bf16 attention at the prepared tile batch: 0 never cuDNN's
//                                   fused attention (kernels/backend/CudnnSdpa.h); 1 cuDNN's wherever it
//                                   offers a plan; auto (default) cuDNN's where it times faster
//                                   than the path above, kept in the tuning cache; with
//                                   TESSERA_CUDA_FLASH forced (not auto), auto means 0
#pragma once

#include <cstddef>
#include <map>
#include <string>

namespace tessera {

inline constexpr std::size_t kAttentionScoreMiB = 256;  // float32 scores of one attention pass (AttentionPlan)
inline constexpr std::size_t kMaxAttentionScoreMiB = 1u << 20;

enum class FlashMode { Auto, Off, On };

struct CudaSettings {
    std::map<std::string, std::string> values;  // name -> value ("" = not set)
    bool heuristicsOnly = false, legacyOnly = false, fuse = true, runtimeFusion = false;
    bool denseViews = false;  // dense blocks in one buffer (CudaLowering.cpp findDenseGroups)
    bool betaAccumulate = false, syncEveryOp = false, nonblockingStream = false;
    bool lt = true;  // token linears through cuBLASLt's bias epilogue (fp16/bf16)
    std::size_t attentionBudgetBytes = kAttentionScoreMiB << 20;
    FlashMode flash = FlashMode::Auto;
    int flashBlockQueries = 64, flashWarps = 4;  // the fused kernel's tiling when flash is On
    FlashMode sdpa = FlashMode::Auto;            // cuDNN's fused attention: Off never, On always

    // Throws std::invalid_argument naming the variable for a value it cannot take.
    static CudaSettings fromEnvironment();
};

}  // namespace tessera
