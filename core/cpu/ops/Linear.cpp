// The CPU backend's projections (core/cpu/CpuOps.h): linear layers on vectors and on token rows,
// and GEGLU (diffusers models/activations.py GEGLU: the projection and its gate in one task).
#include <algorithm>

#include "core/cpu/ops/Activation.h"
#include "core/cpu/ops/Gemm.h"

namespace tessera {
namespace cpu {

void linear(int batch, int in, int out, const float* x, const float* weight, const float* bias, bool silu, float* y) {
    // One GEMM per row: OpenBLAS takes a different kernel path for the N tail than for a full
    // panel, so one GEMM over the batch makes a row's result depend on the batch size (a tile
    // batch of 4 then differs in the last bit from batch 1). Rows here are few (time embeddings).
    for (int b = 0; b < batch; ++b)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, 1, out, in, 1.0f, x + std::int64_t(b) * in, in, weight, in,
                    0.0f, y + std::int64_t(b) * out, out);
    for (int b = 0; b < batch; ++b)
        for (int o = 0; o < out; ++o) {
            float& v = y[std::int64_t(b) * out + o];
            v += bias ? bias[o] : 0.0f;
            if (silu) v = siluValue(v);
        }
}

void tokenLinear(WorkerPool& pool, int images, int rows, int in, int out, const float* x, const float* weight,
                 const float* bias, const float* residual, float* y) {
    linearRows(pool, images, rows, in, out, x, std::int64_t(rows) * in, weight, bias, residual, 1.0f, y,
               std::int64_t(rows) * out);
}

int gegluTaskRows(int rows, int in, int out) {
    // As gemmBlocks' rows (all 2 out columns in one block: the gate needs both halves of a row),
    // within one worker's scratch.
    const std::int64_t perRow = std::max<std::int64_t>(2 * std::int64_t(out) * in, 1);
    const std::int64_t byWork = std::max<std::int64_t>(16, floorPow2(kGemmTaskFma / perRow));
    const std::int64_t byScratch = std::max<std::int64_t>(1, kWorkerFloats / std::max(2 * out, 1));
    return static_cast<int>(std::clamp<std::int64_t>(std::min(byWork, byScratch), 1, std::max(rows, 1)));
}

std::size_t gegluWorkerFloats(int rows, int in, int out) {
    return static_cast<std::size_t>(std::int64_t(gegluTaskRows(rows, in, out)) * 2 * out);
}

void geglu(WorkerPool& pool, int images, int rows, int in, int out, const float* x, const float* weight,
           const float* bias, float* y) {
    const int block = gegluTaskRows(rows, in, out), blocks = (rows + block - 1) / block;
    pool.parallelFor(std::int64_t(images) * blocks, [&](std::int64_t task, int worker) {
        const std::int64_t image = task / blocks;
        const int r0 = static_cast<int>(task % blocks) * block, n = std::min(block, rows - r0);
        float* p = pool.scratch(worker);
        // p = x W^T + b for rows [r0, r0 + n), as tokenLinear: bias first, the GEMM adds onto it.
        for (int r = 0; r < n; ++r)
            for (int o = 0; o < 2 * out; ++o) p[std::int64_t(r) * 2 * out + o] = bias ? bias[o] : 0.0f;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, 2 * out, in, 1.0f,
                    x + (image * rows + r0) * std::int64_t(in), in, weight, in, 1.0f, p, 2 * out);
        for (int r = 0; r < n; ++r) {
            const float* pr = p + std::int64_t(r) * 2 * out;
            float* yr = y + (image * rows + r0 + r) * std::int64_t(out);
            for (int o = 0; o < out; ++o) yr[o] = pr[o] * geluValue(pr[out + o]);
        }
    });
}

}  // namespace cpu
}  // namespace tessera
