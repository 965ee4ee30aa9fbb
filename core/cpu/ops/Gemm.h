// How the CPU operations cut a GEMM into tasks (core/cpu/ops/, not for use outside it): the
// blocks of C from the shape alone (cpu::gemmBlocks), one single-threaded sgemm per block.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>

#include <cblas.h>

#include "core/cpu/CpuOps.h"

namespace tessera {
namespace cpu {

// Multiply-adds of one GEMM task, about: a few hundred microseconds on one core, so a step has
// many tasks to share out, each large enough that OpenBLAS's packing stays a small part.
inline constexpr std::int64_t kGemmTaskFma = 1 << 22;

// The largest power of two not above v (1 for v < 2).
inline std::int64_t floorPow2(std::int64_t v) {
    std::int64_t p = 1;
    while (2 * p <= v) p *= 2;
    return p;
}

// One image's C [m, n] (row-major, ldc) = alpha * op(A) op(B) + beta * C; A, B and C advance by
// their image strides from one image to the next (0: shared by all images, e.g. the weights).
struct Gemm {
    CBLAS_TRANSPOSE transA = CblasNoTrans, transB = CblasNoTrans;
    int m = 0, n = 0, k = 0;
    float alpha = 1.0f, beta = 1.0f;
    const float* a = nullptr;
    int lda = 0;
    std::int64_t aStride = 0;
    const float* b = nullptr;
    int ldb = 0;
    std::int64_t bStride = 0;
    float* c = nullptr;
    int ldc = 0;
    std::int64_t cStride = 0;
};

// The GEMMs of `images` images as one set of tasks, one per (image, block of C): each block is
// first prepared by start(image, r0, r1, c0, c1) (C's rows [r0, r1) and columns [c0, c1)), then
// one single-threaded sgemm adds to it, then finish(image, r0, r1, c0, c1) may rewrite it (an
// activation). The blocks depend on the shape alone (gemmBlocks).
template <class Start, class Finish>
void gemmImages(WorkerPool& pool, int images, const Gemm& g, Start&& start, Finish&& finish) {
    const GemmBlocks bl = gemmBlocks(g.m, g.n, g.k);
    const std::int64_t perImage = std::int64_t(bl.mBlocks) * bl.nBlocks;
    pool.parallelFor(images * perImage, [&](std::int64_t task) {
        const int image = static_cast<int>(task / perImage);
        const int mb = static_cast<int>(task % perImage / bl.nBlocks), nb = static_cast<int>(task % bl.nBlocks);
        const int r0 = mb * bl.mc, r1 = std::min(g.m, r0 + bl.mc), c0 = nb * bl.nc, c1 = std::min(g.n, c0 + bl.nc);
        start(image, r0, r1, c0, c1);
        const float* a = g.a + image * g.aStride + (g.transA == CblasNoTrans ? std::int64_t(r0) * g.lda : r0);
        const float* b = g.b + image * g.bStride + (g.transB == CblasNoTrans ? c0 : std::int64_t(c0) * g.ldb);
        float* c = g.c + image * g.cStride + std::int64_t(r0) * g.ldc + c0;
        cblas_sgemm(CblasRowMajor, g.transA, g.transB, r1 - r0, c1 - c0, g.k, g.alpha, a, g.lda, b, g.ldb, g.beta, c,
                    g.ldc);
        finish(image, r0, r1, c0, c1);
    });
}

template <class Start>
void gemmImages(WorkerPool& pool, int images, const Gemm& g, Start&& start) {
    gemmImages(pool, images, g, std::forward<Start>(start), [](int, int, int, int, int) {});
}

// Rows of `images` images' token matrices: y [rows, out] = (x [rows, in] W^T + bias + residual)
// * outScale, as y = (bias + residual) * outScale, then the GEMM adds outScale * x W^T. x is
// xStride floats from one image to the next, y and residual yStride.
void linearRows(WorkerPool& pool, int images, int rows, int in, int out, const float* x, std::int64_t xStride,
                const float* weight, const float* bias, const float* residual, float outScale, float* y,
                std::int64_t yStride);

}  // namespace cpu
}  // namespace tessera
