// Attention on the CPU (core/cpu/CpuOps.h): over the pixels of a feature map (diffusers
// models/attention_processor.py, AttnProcessor on a spatial input) and over token sequences
// (self- and cross-attention, causal for CLIP), scores and softmax per block of query rows.
#include <algorithm>
#include <cmath>
#include <limits>

#include <vector>

#include "core/cpu/ops/Gemm.h"
#include "core/graph/RelativePositionBucket.h"

namespace tessera {
namespace cpu {

namespace {

// Query rows of one attention task at most: several tasks per head even for small images.
constexpr int kAttentionRows = 32;

}  // namespace

int attentionQueryBlock(std::int64_t pixels, std::int64_t maxScoreFloats) {
    return static_cast<int>(std::clamp<std::int64_t>(maxScoreFloats / std::max<std::int64_t>(pixels, 1), 1, pixels));
}

int attentionTaskRows(int queries, std::int64_t keys, std::int64_t maxScoreFloats) {
    return std::clamp(std::min(attentionQueryBlock(keys, maxScoreFloats), kAttentionRows), 1, std::max(queries, 1));
}

std::size_t attentionScratchFloats(int channels, std::int64_t pixels) {
    return static_cast<std::size_t>(4 * std::int64_t(channels) * pixels);
}

namespace {

// softmax over row[0, visible) in place (max-subtracted, the sum in double); row[visible, keys) = 0.
void softmaxRow(float* row, int visible, int keys) {
    float m = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < visible; ++j) m = std::max(m, row[j]);
    double sum = 0.0;
    for (int j = 0; j < visible; ++j) {
        row[j] = std::exp(row[j] - m);
        sum += row[j];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int j = 0; j < visible; ++j) row[j] *= inv;
    std::fill(row + visible, row + keys, 0.0f);
}

// Q, K, V and the heads' output O of each image, one image after another in `base`: channel-major
// [C, tokens] (feature maps) or token-major [tokens, C] (token sequences).
struct AttentionCore {
    int queries = 0, keys = 0, channels = 0, heads = 1, queryBlock = 1;
    bool causal = false, tokenMajor = false;
    float scale = 0.0f;  // 0: 1/sqrt(d)
    // Token-major only: the bias of head h for key j and query i at
    // offsetBias[h * offsets + j - i + queries - 1] (T5's relative positions), or null.
    const float* offsetBias = nullptr;
    int offsets = 0;
    float* base = nullptr;
    std::int64_t qFloats() const { return std::int64_t(queries) * channels; }
    std::int64_t kFloats() const { return std::int64_t(keys) * channels; }
    std::int64_t imageFloats() const { return 2 * (qFloats() + kFloats()); }
    float* q(int image) const { return base + image * imageFloats(); }
    float* k(int image) const { return q(image) + qFloats(); }
    float* v(int image) const { return k(image) + kFloats(); }
    float* o(int image) const { return v(image) + kFloats(); }
};

// O = softmax(Q K^T / sqrt(d)) V per head, one task per (image, head, block of query rows), the
// block's scores in the worker's scratch (queryBlock * keys floats).
void attendHeads(WorkerPool& pool, int images, const AttentionCore& a) {
    const int C = a.channels, d = C / a.heads, M = a.keys, N = a.queries;
    const int blocks = (N + a.queryBlock - 1) / a.queryBlock;
    const float scale = a.scale > 0.0f ? a.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
    pool.parallelFor(std::int64_t(images) * a.heads * blocks, [&](std::int64_t task, int worker) {
        const int image = static_cast<int>(task / (std::int64_t(a.heads) * blocks));
        const int h = static_cast<int>(task / blocks % a.heads), i0 = static_cast<int>(task % blocks) * a.queryBlock;
        const int rows = std::min(a.queryBlock, N - i0);
        const float *q = a.q(image), *k = a.k(image), *v = a.v(image);
        float* o = a.o(image);
        float* scores = pool.scratch(worker);
        if (a.tokenMajor)  // scores[i, j] = scale * sum_c Q[i0 + i, h d + c] K[j, h d + c]
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, M, d, scale, q + std::int64_t(i0) * C + h * d, C,
                        k + h * d, C, 0.0f, scores, M);
        else  // scores[i, j] = scale * sum_c Q[h d + c, i0 + i] K[h d + c, j]
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rows, M, d, scale, q + std::int64_t(h) * d * N + i0, N,
                        k + std::int64_t(h) * d * M, M, 0.0f, scores, M);
        if (a.offsetBias)
            for (int i = 0; i < rows; ++i) {
                const float* bias = a.offsetBias + std::int64_t(h) * a.offsets + (N - 1 - (i0 + i));
                float* row = scores + std::int64_t(i) * M;
                for (int j = 0; j < M; ++j) row[j] += bias[j];
            }
        for (int i = 0; i < rows; ++i)
            softmaxRow(scores + std::int64_t(i) * M, a.causal ? std::min(M, i0 + i + 1) : M, M);
        if (a.tokenMajor)  // O[i0 + i, h d + c] = sum_j A[i, j] V[j, h d + c]
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, M, 1.0f, scores, M, v + h * d, C, 0.0f,
                        o + std::int64_t(i0) * C + h * d, C);
        else  // O[h d + c, i0 + i] = sum_j V[h d + c, j] A[i, j]
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d, rows, M, 1.0f, v + std::int64_t(h) * d * M, M,
                        scores, M, 0.0f, o + std::int64_t(h) * d * N + i0, N);
    });
}

// Channel-major projections of `images` images: dst [C, N] = (W src + bias + residual) * outScale,
// src [C, N] at srcStride floats apart, dst (and residual) at dstStride.
void projectChannels(WorkerPool& pool, int images, int C, int N, const float* w, const float* bias, const float* src,
                     std::int64_t srcStride, const float* residual, float outScale, float* dst,
                     std::int64_t dstStride) {
    // Filled field by field like other parameter blocks: alike in shape only.
    Gemm g;
    g.m = C;
    g.n = N;
    g.k = C;
    g.alpha = outScale;
    g.a = w;
    g.lda = C;
    g.b = src;
    g.ldb = N;
    g.bStride = srcStride;
    g.c = dst;
    g.ldc = N;
    g.cStride = dstStride;
    gemmImages(pool, images, g, [&](int image, int c0, int c1, int p0, int p1) {
        for (int c = c0; c < c1; ++c) {
            float* row = dst + image * dstStride + std::int64_t(c) * N;
            const float* r = residual ? residual + image * dstStride + std::int64_t(c) * N : nullptr;
            const float b = bias ? bias[c] : 0.0f;
            for (int p = p0; p < p1; ++p) row[p] = (b + (r ? r[p] : 0.0f)) * outScale;
        }
    });
}

}  // namespace

void attention(WorkerPool& pool, int images, int channels, std::int64_t pixels, int heads, const AttentionWeights& wt,
               const float* x, const float* residual, float outScale, float* y, float* scratch, int scratchImages,
               int queryBlock) {
    const int C = channels, N = static_cast<int>(pixels);
    const std::int64_t CN = std::int64_t(C) * N;
    AttentionCore a;
    a.queries = a.keys = N;
    a.channels = C;
    a.heads = heads;
    a.queryBlock = queryBlock;
    a.base = scratch;
    scratchImages = std::max(scratchImages, 1);
    for (int first = 0; first < images; first += scratchImages) {
        const int count = std::min(scratchImages, images - first);
        const float* xs = x + first * CN;
        // Tokens are the pixels; all matrices stay channel-major [C, N] like the activations.
        projectChannels(pool, count, C, N, wt.wq, wt.bq, xs, CN, nullptr, 1.0f, a.q(0), a.imageFloats());
        projectChannels(pool, count, C, N, wt.wk, wt.bk, xs, CN, nullptr, 1.0f, a.k(0), a.imageFloats());
        projectChannels(pool, count, C, N, wt.wv, wt.bv, xs, CN, nullptr, 1.0f, a.v(0), a.imageFloats());
        attendHeads(pool, count, a);
        projectChannels(pool, count, C, N, wt.wo, wt.bo, a.o(0), a.imageFloats(),
                        residual ? residual + first * CN : nullptr, outScale, y + first * CN, CN);
    }
}

void attention(WorkerPool& pool, int channels, std::int64_t pixels, int heads, const AttentionWeights& wt,
               const float* x, const float* residual, float outScale, float* y, float* scratch, int queryBlock) {
    pool.reserveScratch(static_cast<std::size_t>(std::int64_t(queryBlock) * pixels));
    attention(pool, 1, channels, pixels, heads, wt, x, residual, outScale, y, scratch, 1, queryBlock);
}

std::size_t tokenAttentionScratchFloats(const TokenAttentionShape& s) {
    const std::int64_t C = s.innerChannels();
    return static_cast<std::size_t>(2 * C * s.tokens + 2 * C * s.contextTokens);
}

void tokenAttention(WorkerPool& pool, int images, const TokenAttentionShape& s, const AttentionWeights& wt,
                    const float* x, const float* context, const float* residual, float outScale, float* y,
                    float* scratch, int scratchImages, int queryBlock) {
    const int N = s.tokens, C = s.channels, I = s.innerChannels();
    const int M = context ? s.contextTokens : N, Ckv = context ? s.contextChannels : C;
    const std::int64_t xImage = std::int64_t(N) * C, kvImage = std::int64_t(M) * Ckv;
    // Set up and looped over like attention()'s core, but token-major with its own projections.
    AttentionCore a;
    a.queries = N;
    a.keys = M;
    a.channels = I;
    a.heads = s.heads;
    a.queryBlock = queryBlock;
    a.causal = s.causal;
    a.tokenMajor = true;
    a.scale = s.scale;
    a.base = scratch;
    // T5's bias depends on j - i alone: one row of N + M - 1 offsets per head, looked up from the
    // table once per call rather than per score.
    std::vector<float> offsetBias;
    if (s.buckets > 0 && wt.relativeBias) {
        a.offsets = N + M - 1;
        offsetBias.resize(static_cast<std::size_t>(s.heads) * static_cast<std::size_t>(a.offsets));
        for (int k = 0; k < a.offsets; ++k) {
            const int bucket = relativePositionBucket(k - (N - 1), s.buckets, s.maxDistance);
            for (int h = 0; h < s.heads; ++h)
                offsetBias[static_cast<std::size_t>(h) * static_cast<std::size_t>(a.offsets) +
                           static_cast<std::size_t>(k)] = wt.relativeBias[std::int64_t(bucket) * s.heads + h];
        }
        a.offsetBias = offsetBias.data();
    }
    scratchImages = std::max(scratchImages, 1);
    for (int first = 0; first < images; first += scratchImages) {
        const int count = std::min(scratchImages, images - first);
        const float* xs = x + first * xImage;
        const float* kv = context ? context + first * kvImage : xs;
        const std::int64_t stride = a.imageFloats();
        linearRows(pool, count, N, C, I, xs, xImage, wt.wq, wt.bq, nullptr, 1.0f, a.q(0), stride);
        linearRows(pool, count, M, Ckv, I, kv, kvImage, wt.wk, wt.bk, nullptr, 1.0f, a.k(0), stride);
        linearRows(pool, count, M, Ckv, I, kv, kvImage, wt.wv, wt.bv, nullptr, 1.0f, a.v(0), stride);
        attendHeads(pool, count, a);
        linearRows(pool, count, N, I, C, a.o(0), stride, wt.wo, wt.bo, residual ? residual + first * xImage : nullptr,
                   outScale, y + first * xImage, xImage);
    }
}

}  // namespace cpu
}  // namespace tessera
