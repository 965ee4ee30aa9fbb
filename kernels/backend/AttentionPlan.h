// AttentionPlan: how the CUDA backend computes one attention's scores within a memory budget
// (kernels/backend/CudaAttention.cpp lowers every Attention op with one). A pass holds float32 score
// blocks [queryBlock, keys] for several matrices at once (the heads of one image, or several
// images when there is one head), and their softmax probabilities in the activation type
// beside them; passes go over images, groups of heads and blocks of query rows, so the
// scores never need queries x keys x heads x images floats (a VAE mid block at 2048 x 2048
// pixels: 65,536 x 65,536 per image, 16 GiB). Plain C++ (no CUDA), tested without a device.
#pragma once

#include <cstddef>
#include <string>

namespace tessera {

struct AttentionPlan {
    int imagesPerPass = 1;       // > 1 only with one head (one strided GEMM over images)
    int headsPerPass = 1;        // heads whose scores one pass holds
    int queryBlock = 0;          // query rows per pass; all queries when a whole matrix fits
    std::size_t scoreBytes = 0;  // float32 scores of one pass
    std::size_t probBytes = 0;   // probabilities of one pass, in the activation type

    // Score GEMMs (each followed by a softmax and a P V GEMM) for one forward of `batch`
    // images of `heads` heads and `queries` query rows.
    long long passes(int batch, int heads, long long queries) const;
    bool blocked(long long queries) const { return queryBlock < queries; }
    // "query block 192 of 16384, 1 head x 1 image per pass, scores 12.0 MiB + probabilities 6.0 MiB"
    std::string describe(long long queries) const;
};

// The plan for at most `maxBatch` images of `heads` heads, each `queries` x `keys` scores,
// probabilities of `probElementBytes` each: whole matrices (as many images, or heads, per pass
// as fit) when one matrix's float32 scores fit `budgetBytes`, else one head of one image per
// pass in blocks of query rows that fit it (multiples of 64 rows from 64 up, whole GEMM tiles;
// at least one row whatever the budget). Throws std::invalid_argument for a size below 1.
AttentionPlan planAttention(int maxBatch, int heads, long long queries, long long keys, std::size_t probElementBytes,
                            std::size_t budgetBytes);

}  // namespace tessera
