// The CPU backend's operations of FLUX's transformer (core/cpu/CpuOps.h): modulated LayerNorm,
// gated residuals, QK RMSNorm with RoPE, attention over a packed q | k | v, and the slicing and
// joining of token sequences.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/cpu/CpuOps.h"
#include "core/cpu/ops/Gemm.h"

namespace tessera {
namespace cpu {

void channelSlice(WorkerPool& pool, std::int64_t rows, int channels, int offset, int count, const float* x, float* y) {
    pool.parallelFor(rows, [&](std::int64_t r) {
        const float* src = x + r * channels + offset;
        std::copy(src, src + count, y + r * count);
    });
}

void concatRows(WorkerPool& pool, std::int64_t rows, int c1, int c2, const float* a, const float* b, float* y) {
    const int c = c1 + c2;
    pool.parallelFor(rows, [&](std::int64_t r) {
        std::copy(a + r * c1, a + (r + 1) * c1, y + r * c);
        std::copy(b + r * c2, b + (r + 1) * c2, y + r * c + c1);
    });
}

void tokenConcat(WorkerPool& pool, int batch, std::int64_t first, std::int64_t second, int channels, const float* a,
                 const float* b, float* y) {
    const std::int64_t total = first + second;
    pool.parallelFor(batch, [&](std::int64_t i) {
        std::copy(a + i * first * channels, a + (i + 1) * first * channels, y + i * total * channels);
        std::copy(b + i * second * channels, b + (i + 1) * second * channels, y + (i * total + first) * channels);
    });
}

void tokenSplit(WorkerPool& pool, int batch, std::int64_t first, std::int64_t second, int channels, bool tail,
                const float* x, float* y) {
    const std::int64_t total = first + second, part = tail ? second : first, skip = tail ? first : 0;
    pool.parallelFor(batch, [&](std::int64_t i) {
        const float* src = x + (i * total + skip) * channels;
        std::copy(src, src + part * channels, y + i * part * channels);
    });
}

void adaLayerNorm(WorkerPool& pool, int batch, std::int64_t tokens, int channels, float eps, const float* x,
                  const float* m, int vectorChannels, int shiftAt, int scaleAt, float* y) {
    pool.parallelFor(std::int64_t(batch) * tokens, [&](std::int64_t row) {
        const float* v = x + row * channels;
        const float* mod = m + (row / tokens) * vectorChannels;
        double sum = 0, sq = 0;
        for (int c = 0; c < channels; ++c) sum += v[c];
        const double mean = sum / channels;
        for (int c = 0; c < channels; ++c) sq += (v[c] - mean) * (v[c] - mean);
        const double inv = 1.0 / std::sqrt(sq / channels + double(eps));
        float* out = y + row * channels;
        for (int c = 0; c < channels; ++c)
            out[c] = static_cast<float>((v[c] - mean) * inv) * (1.0f + mod[scaleAt + c]) + mod[shiftAt + c];
    });
}

void gatedAdd(WorkerPool& pool, int batch, std::int64_t tokens, int channels, const float* x, const float* addend,
              const float* m, int vectorChannels, int gateAt, float* y) {
    pool.parallelFor(std::int64_t(batch) * tokens, [&](std::int64_t row) {
        const float* gate = m + (row / tokens) * vectorChannels + gateAt;
        const std::int64_t at = row * channels;
        for (int c = 0; c < channels; ++c) y[at + c] = x[at + c] + gate[c] * addend[at + c];
    });
}

std::vector<float> ropeTable(const RopeShape& s) {
    const int d = s.axes[0] + s.axes[1] + s.axes[2], pairs = d / 2;
    const std::int64_t tokens = s.fixedTokens + std::int64_t(s.gridH) * s.gridW;
    std::vector<float> table(static_cast<std::size_t>(tokens * pairs * 2));
    for (std::int64_t n = 0; n < tokens; ++n) {
        // Fixed (text) tokens sit at (0, 0, 0); the tile's at (0, row, column) of its grid.
        const std::int64_t i = n - s.fixedTokens;
        const std::int64_t row = i < 0 ? 0 : i / s.gridW, column = i < 0 ? 0 : i % s.gridW;  // whole grid cells
        const double pos[3] = {0.0, static_cast<double>(row), static_cast<double>(column)};
        int pair = 0;
        for (int a = 0; a < 3; ++a)
            for (int k = 0; k < s.axes[a] / 2; ++k, ++pair) {
                // diffusers models/embeddings.py get_1d_rotary_pos_embed (freqs_dtype float64): the
                // angle in double, cos and sin rounded to float32.
                const double angle = pos[a] / std::pow(double(s.theta), 2.0 * k / s.axes[a]);
                float* at = table.data() + (n * pairs + pair) * 2;
                at[0] = static_cast<float>(std::cos(angle));
                at[1] = static_cast<float>(std::sin(angle));
            }
    }
    return table;
}

void qkNormRope(WorkerPool& pool, int batch, std::int64_t tokens, int heads, int headDim, float eps, const float* x,
                const float* qWeight, const float* kWeight, const float* table, float* y) {
    const int D = heads * headDim, C = 3 * D, pairs = headDim / 2;
    pool.parallelFor(std::int64_t(batch) * tokens, [&](std::int64_t row) {
        const float* src = x + row * C;
        float* dst = y + row * C;
        const float* rot = table + (row % tokens) * pairs * 2;
        for (int part = 0; part < 2; ++part) {
            const float* w = part == 0 ? qWeight : kWeight;
            for (int h = 0; h < heads; ++h) {
                const float* v = src + part * D + h * headDim;
                float* out = dst + part * D + h * headDim;
                double sq = 0;
                for (int c = 0; c < headDim; ++c) sq += double(v[c]) * v[c];
                // diffusers models/normalization.py RMSNorm: x * rsqrt(mean(x^2) + eps) * weight.
                const double inv = 1.0 / std::sqrt(sq / headDim + double(eps));
                for (int k = 0; k < pairs; ++k) {
                    const float a = static_cast<float>(v[2 * k] * inv) * w[2 * k];
                    const float b = static_cast<float>(v[2 * k + 1] * inv) * w[2 * k + 1];
                    const float cs = rot[2 * k], sn = rot[2 * k + 1];
                    out[2 * k] = a * cs - b * sn;
                    out[2 * k + 1] = b * cs + a * sn;
                }
            }
        }
        std::copy(src + 2 * D, src + C, dst + 2 * D);
    });
}

int packedAttentionTaskRows(std::int64_t tokens) {
    return attentionTaskRows(static_cast<int>(tokens), tokens, kWorkerFloats);
}

void packedAttention(WorkerPool& pool, int batch, std::int64_t tokens, int heads, int headDim, const float* x,
                     float* y) {
    const int N = static_cast<int>(tokens), D = heads * headDim, C = 3 * D;
    const int rowsPerTask = packedAttentionTaskRows(tokens);
    const int blocks = (N + rowsPerTask - 1) / rowsPerTask;
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(headDim)));
    pool.parallelFor(std::int64_t(batch) * heads * blocks, [&](std::int64_t task, int worker) {
        const std::int64_t image = task / (std::int64_t(heads) * blocks);
        const int h = static_cast<int>(task / blocks % heads), i0 = static_cast<int>(task % blocks) * rowsPerTask;
        const int rows = std::min(rowsPerTask, N - i0);
        const float* base = x + image * N * C;
        float* scores = pool.scratch(worker);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, N, headDim, scale,
                    base + std::int64_t(i0) * C + h * headDim, C, base + D + h * headDim, C, 0.0f, scores, N);
        for (int i = 0; i < rows; ++i) {
            float* row = scores + std::int64_t(i) * N;
            float mx = -std::numeric_limits<float>::infinity();
            for (int j = 0; j < N; ++j) mx = std::max(mx, row[j]);
            double sum = 0.0;
            for (int j = 0; j < N; ++j) {
                row[j] = std::exp(row[j] - mx);
                sum += row[j];
            }
            const float inv = static_cast<float>(1.0 / sum);
            for (int j = 0; j < N; ++j) row[j] *= inv;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, headDim, N, 1.0f, scores, N,
                    base + 2 * D + h * headDim, C, 0.0f, y + (image * N + i0) * D + h * headDim, D);
    });
}

}  // namespace cpu
}  // namespace tessera
