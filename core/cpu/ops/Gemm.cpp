#include "core/cpu/ops/Gemm.h"

namespace tessera {
namespace cpu {

GemmBlocks gemmBlocks(int m, int n, int k) {
    // Columns first (an im2col GEMM's B is packed once per block of rows, so cutting the rows
    // repacks it), at least 64 wide; rows only where a block of 64 columns is still too large.
    const std::int64_t perColumn = std::max<std::int64_t>(std::int64_t(m) * k, 1);
    GemmBlocks b;
    b.nc = static_cast<int>(std::min<std::int64_t>(n, std::max<std::int64_t>(64, floorPow2(kGemmTaskFma / perColumn))));
    b.mc = m;
    const std::int64_t perRow = std::max<std::int64_t>(std::int64_t(b.nc) * k, 1);
    if (std::int64_t(m) * perRow > 2 * kGemmTaskFma)
        b.mc =
            static_cast<int>(std::min<std::int64_t>(m, std::max<std::int64_t>(64, floorPow2(kGemmTaskFma / perRow))));
    b.mc = std::max(b.mc, 1);
    b.nc = std::max(b.nc, 1);
    b.mBlocks = (m + b.mc - 1) / b.mc;
    b.nBlocks = (n + b.nc - 1) / b.nc;
    return b;
}

void linearRows(WorkerPool& pool, int images, int rows, int in, int out, const float* x, std::int64_t xStride,
                const float* weight, const float* bias, const float* residual, float outScale, float* y,
                std::int64_t yStride) {
    // Filled field by field like other parameter blocks: alike in shape only.
    Gemm g;
    g.transB = CblasTrans;
    g.m = rows;
    g.n = out;
    g.k = in;
    g.alpha = outScale;
    g.a = x;
    g.lda = in;
    g.aStride = xStride;
    g.b = weight;
    g.ldb = in;
    g.c = y;
    g.ldc = out;
    g.cStride = yStride;
    gemmImages(pool, images, g, [&](int image, int r0, int r1, int c0, int c1) {
        for (int r = r0; r < r1; ++r) {
            float* yr = y + image * yStride + std::int64_t(r) * out;
            const float* res = residual ? residual + image * yStride + std::int64_t(r) * out : nullptr;
            for (int o = c0; o < c1; ++o) yr[o] = ((bias ? bias[o] : 0.0f) + (res ? res[o] : 0.0f)) * outScale;
        }
    });
}

}  // namespace cpu
}  // namespace tessera
