#include "core/CpuBackend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <stdexcept>

#include <cblas.h>

#include "core/UNetGraph.h"
#include "core/UNetModel.h"

namespace tessera {
namespace cpu {

namespace {

inline float siluValue(float v) { return v / (1.0f + std::exp(-v)); }

constexpr std::int64_t kElementwiseChunk = 1 << 14;  // floats per task of an elementwise loop

// Column and score buffers are processed in bands so their size stays bounded for large
// tiles; the bands are big enough that the GEMMs stay efficient.
constexpr std::int64_t kMaxColFloats = 16 << 20;    // 64 MiB of im2col columns
constexpr std::int64_t kMaxScoreFloats = 4 << 20;   // 16 MiB of attention scores

}  // namespace

// ---------------------------------------------------------------- WorkerPool

WorkerPool::WorkerPool(int threads) {
    if (threads <= 0) threads = std::max(1u, std::thread::hardware_concurrency());
    workers_.reserve(static_cast<std::size_t>(threads - 1));
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { workerLoop(i); });
}

WorkerPool::~WorkerPool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
}

void WorkerPool::runShare(int index, int parts) {
    const std::int64_t begin = n_ * index / parts, end = n_ * (index + 1) / parts;
    for (std::int64_t i = begin; i < end; ++i) task_(ctx_, i);
}

void WorkerPool::run(std::int64_t n, Task task, void* ctx) {
    if (n <= 0) return;
    if (workers_.empty() || n == 1) {
        for (std::int64_t i = 0; i < n; ++i) task(ctx, i);
        return;
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        task_ = task;
        ctx_ = ctx;
        n_ = n;
        pending_ = static_cast<int>(workers_.size());
        ++generation_;
    }
    wake_.notify_all();
    runShare(0, threads());
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
}

void WorkerPool::workerLoop(int index) {
    std::uint64_t seen = 0;
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(mutex_);
            wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
        }
        runShare(index, threads());
        std::lock_guard<std::mutex> lock(mutex_);
        if (--pending_ == 0) done_.notify_one();
    }
}

// ---------------------------------------------------------------- convolution

ConvShape ConvShape::same(int cin, int cout, int h, int w, int kernel) {
    ConvShape s;
    s.cin = cin;
    s.cout = cout;
    s.h = h;
    s.w = w;
    s.kernel = kernel;
    s.stride = 1;
    s.padTop = s.padLeft = kernel / 2;
    s.hout = h;
    s.wout = w;
    return s;
}

ConvShape ConvShape::downsample(int channels, int h, int w, int padding) {
    ConvShape s;
    s.cin = s.cout = channels;
    s.h = h;
    s.w = w;
    s.kernel = 3;
    s.stride = 2;
    s.padTop = s.padLeft = padding;
    // padding 0: TF "SAME" on even input, one zero row/column after the data only.
    const int extra = padding == 0 ? 1 : 2 * padding;
    s.hout = (h + extra - 3) / 2 + 1;
    s.wout = (w + extra - 3) / 2 + 1;
    return s;
}

namespace {
bool isPointwise(const ConvShape& s) { return s.kernel == 1 && s.stride == 1 && s.padTop == 0 && s.padLeft == 0; }
}  // namespace

int convBandRows(const ConvShape& s, std::int64_t maxColFloats) {
    if (isPointwise(s)) return s.hout;
    const std::int64_t perRow = s.colRows() * s.wout;
    return static_cast<int>(std::clamp<std::int64_t>(maxColFloats / std::max<std::int64_t>(perRow, 1), 1, s.hout));
}

std::size_t convScratchFloats(const ConvShape& s, int bandRows) {
    if (isPointwise(s)) return 0;
    return static_cast<std::size_t>(s.colRows() * bandRows * s.wout);
}

void conv2d(WorkerPool& pool, const ConvShape& s, const float* x, const float* weight, const float* bias,
            const float* residual, float outScale, float* y, float* col, int bandRows) {
    const std::int64_t outPixels = std::int64_t(s.hout) * s.wout;
    // y starts as (bias + residual) * scale and the GEMM accumulates scale * W col onto it.
    pool.parallelFor(s.cout, [&](std::int64_t o) {
        float* yo = y + o * outPixels;
        const float b = bias ? bias[o] : 0.0f;
        if (residual) {
            const float* r = residual + o * outPixels;
            for (std::int64_t p = 0; p < outPixels; ++p) yo[p] = (b + r[p]) * outScale;
        } else {
            std::fill(yo, yo + outPixels, b * outScale);
        }
    });
    if (isPointwise(s)) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.cout, static_cast<int>(outPixels), s.cin, outScale,
                    weight, s.cin, x, static_cast<int>(outPixels), 1.0f, y, static_cast<int>(outPixels));
        return;
    }
    const int k = s.kernel, K = static_cast<int>(s.colRows());
    const std::int64_t inPlane = std::int64_t(s.h) * s.w;
    for (int y0 = 0; y0 < s.hout; y0 += bandRows) {
        const int rows = std::min(bandRows, s.hout - y0);
        const std::int64_t N = std::int64_t(rows) * s.wout;
        // Row r of the column matrix is (input channel, ky, kx), matching the weight layout [O, I, kh, kw].
        pool.parallelFor(K, [&](std::int64_t r) {
            const int ci = static_cast<int>(r / (k * k)), ky = static_cast<int>(r / k % k), kx = static_cast<int>(r % k);
            const float* plane = x + ci * inPlane;
            float* dst = col + r * N;
            for (int oy = y0; oy < y0 + rows; ++oy, dst += s.wout) {
                const int iy = oy * s.stride + ky - s.padTop;
                if (iy < 0 || iy >= s.h) {
                    std::fill(dst, dst + s.wout, 0.0f);
                    continue;
                }
                const float* src = plane + std::int64_t(iy) * s.w;
                if (s.stride == 1) {
                    const int shift = kx - s.padLeft;  // ix = ox + shift
                    const int lo = std::clamp(-shift, 0, s.wout), hi = std::clamp(s.w - shift, lo, s.wout);
                    std::fill(dst, dst + lo, 0.0f);
                    std::memcpy(dst + lo, src + lo + shift, sizeof(float) * static_cast<std::size_t>(hi - lo));
                    std::fill(dst + hi, dst + s.wout, 0.0f);
                } else {
                    for (int ox = 0; ox < s.wout; ++ox) {
                        const int ix = ox * s.stride + kx - s.padLeft;
                        dst[ox] = ix >= 0 && ix < s.w ? src[ix] : 0.0f;
                    }
                }
            }
        });
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.cout, static_cast<int>(N), K, outScale, weight, K,
                    col, static_cast<int>(N), 1.0f, y + std::int64_t(y0) * s.wout, static_cast<int>(outPixels));
    }
}

// ---------------------------------------------------------------- GroupNorm, linear, embedding, upsample

void groupNorm(WorkerPool& pool, int batch, int channels, std::int64_t pixels, int groups, float eps, const float* x,
               const float* gamma, const float* beta, const float* preAdd, const float* scaleShift, bool silu,
               float* y) {
    const int perGroup = channels / groups;
    pool.parallelFor(std::int64_t(batch) * groups, [&](std::int64_t task) {
        const int b = static_cast<int>(task / groups), g = static_cast<int>(task % groups);
        const int c0 = g * perGroup;
        const std::int64_t base = (std::int64_t(b) * channels + c0) * pixels;
        // Two passes in double: the mean, then the biased variance about it.
        double sum = 0.0;
        for (int c = 0; c < perGroup; ++c) {
            const double add = preAdd ? preAdd[b * channels + c0 + c] : 0.0;
            const float* xc = x + base + c * pixels;
            double s = 0.0;
            for (std::int64_t p = 0; p < pixels; ++p) s += xc[p];
            sum += s + add * static_cast<double>(pixels);
        }
        const double count = static_cast<double>(perGroup) * static_cast<double>(pixels);
        const double mean = sum / count;
        double sq = 0.0;
        for (int c = 0; c < perGroup; ++c) {
            const float add = preAdd ? preAdd[b * channels + c0 + c] : 0.0f;
            const float* xc = x + base + c * pixels;
            for (std::int64_t p = 0; p < pixels; ++p) {
                const double d = static_cast<double>(xc[p] + add) - mean;
                sq += d * d;
            }
        }
        const double invStd = 1.0 / std::sqrt(sq / count + static_cast<double>(eps));
        for (int c = 0; c < perGroup; ++c) {
            const int ch = c0 + c;
            const float add = preAdd ? preAdd[b * channels + ch] : 0.0f;
            const double a = invStd * gamma[ch];
            const double shiftD = beta[ch] - mean * a;
            const float filmScale = scaleShift ? 1.0f + scaleShift[std::int64_t(b) * 2 * channels + ch] : 1.0f;
            const float filmShift = scaleShift ? scaleShift[std::int64_t(b) * 2 * channels + channels + ch] : 0.0f;
            const float* xc = x + base + c * pixels;
            float* yc = y + base + c * pixels;
            for (std::int64_t p = 0; p < pixels; ++p) {
                float v = static_cast<float>(static_cast<double>(xc[p] + add) * a + shiftD);
                if (scaleShift) v = v * filmScale + filmShift;
                yc[p] = silu ? siluValue(v) : v;
            }
        }
    });
}

void affine(WorkerPool& pool, std::int64_t n, const float* x, float scale, float shift, float* y) {
    pool.parallelFor((n + kElementwiseChunk - 1) / kElementwiseChunk, [&](std::int64_t chunk) {
        const std::int64_t end = std::min(n, (chunk + 1) * kElementwiseChunk);
        for (std::int64_t i = chunk * kElementwiseChunk; i < end; ++i) y[i] = x[i] * scale + shift;
    });
}

void silu(WorkerPool& pool, std::int64_t n, const float* x, float* y) {
    pool.parallelFor((n + kElementwiseChunk - 1) / kElementwiseChunk, [&](std::int64_t chunk) {
        const std::int64_t end = std::min(n, (chunk + 1) * kElementwiseChunk);
        for (std::int64_t i = chunk * kElementwiseChunk; i < end; ++i) y[i] = siluValue(x[i]);
    });
}

void add(WorkerPool& pool, int batch, int channels, std::int64_t pixels, const float* a, const float* b, bool bPerPlane,
         float* y) {
    pool.parallelFor(std::int64_t(batch) * channels, [&](std::int64_t plane) {
        const std::int64_t base = plane * pixels;
        if (bPerPlane) {
            const float v = b[plane];
            for (std::int64_t p = 0; p < pixels; ++p) y[base + p] = a[base + p] + v;
        } else {
            for (std::int64_t p = base; p < base + pixels; ++p) y[p] = a[p] + b[p];
        }
    });
}

void scaleShift(WorkerPool& pool, int batch, int channels, std::int64_t pixels, const float* x, const float* v,
                float* y) {
    pool.parallelFor(std::int64_t(batch) * channels, [&](std::int64_t plane) {
        const std::int64_t b = plane / channels, c = plane % channels;
        const float scale = 1.0f + v[b * 2 * channels + c], shift = v[b * 2 * channels + channels + c];
        for (std::int64_t p = plane * pixels; p < (plane + 1) * pixels; ++p) y[p] = x[p] * scale + shift;
    });
}

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

void timestepEmbedding(const float* timesteps, int batch, int dim, int freqShift, bool flipSinToCos, float* out) {
    const int half = dim / 2;
    // diffusers: exponent = -ln(10000) * arange(half) (float32), / (half - shift), exp; the
    // Python double ln(10000) enters the float32 product as a float32 scalar.
    const float negLog = static_cast<float>(-std::log(10000.0));
    const float divisor = static_cast<float>(half - freqShift);
    for (int b = 0; b < batch; ++b) {
        const float t = timesteps[b];
        float* e = out + std::int64_t(b) * dim;
        for (int i = 0; i < half; ++i) {
            const float exponent = (negLog * static_cast<float>(i)) / divisor;
            const float arg = t * std::exp(exponent);
            const float sn = std::sin(arg), cs = std::cos(arg);
            e[i] = flipSinToCos ? cs : sn;
            e[half + i] = flipSinToCos ? sn : cs;
        }
        if (dim % 2 == 1) e[dim - 1] = 0.0f;
    }
}

void upsampleNearest2x(WorkerPool& pool, std::int64_t planes, int h, int w, const float* x, float* y) {
    const int w2 = 2 * w;
    pool.parallelFor(planes, [&](std::int64_t p) {
        const float* src = x + p * h * w;
        float* dst = y + p * 4 * h * w;
        for (int oy = 0; oy < 2 * h; ++oy) {
            const float* row = src + std::int64_t(oy / 2) * w;
            float* o = dst + std::int64_t(oy) * w2;
            for (int ox = 0; ox < w2; ++ox) o[ox] = row[ox / 2];
        }
    });
}
// ---------------------------------------------------------------- attention

int attentionQueryBlock(std::int64_t pixels, std::int64_t maxScoreFloats) {
    return static_cast<int>(std::clamp<std::int64_t>(maxScoreFloats / std::max<std::int64_t>(pixels, 1), 1, pixels));
}

std::size_t attentionScratchFloats(int channels, std::int64_t pixels, int queryBlock) {
    return static_cast<std::size_t>(4 * std::int64_t(channels) * pixels + std::int64_t(queryBlock) * pixels);
}

void attention(WorkerPool& pool, int channels, std::int64_t pixels, int heads, const AttentionWeights& wt,
               const float* x, const float* residual, float outScale, float* y, float* scratch, int queryBlock) {
    const int C = channels, N = static_cast<int>(pixels), d = C / heads;
    const std::int64_t CN = std::int64_t(C) * N;
    float* q = scratch;
    float* k = q + CN;
    float* v = k + CN;
    float* o = v + CN;
    float* scores = o + CN;
    // Tokens are the pixels; all matrices stay channel-major [C, N] like the activations.
    auto project = [&](const float* w, const float* b, float* dst) {
        pool.parallelFor(C, [&](std::int64_t c) { std::fill(dst + c * N, dst + (c + 1) * N, b ? b[c] : 0.0f); });
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, C, N, C, 1.0f, w, C, x, N, 1.0f, dst, N);
    };
    project(wt.wq, wt.bq, q);
    project(wt.wk, wt.bk, k);
    project(wt.wv, wt.bv, v);
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
    for (int h = 0; h < heads; ++h) {
        const std::int64_t off = std::int64_t(h) * d * N;
        for (int i0 = 0; i0 < N; i0 += queryBlock) {
            const int rows = std::min(queryBlock, N - i0);
            // scores[i, j] = scale * sum_c Q[c, i0 + i] K[c, j]
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rows, N, d, scale, q + off + i0, N, k + off, N, 0.0f,
                        scores, N);
            pool.parallelFor(rows, [&](std::int64_t i) {
                float* s = scores + i * N;
                float m = -std::numeric_limits<float>::infinity();
                for (int j = 0; j < N; ++j) m = std::max(m, s[j]);
                double sum = 0.0;
                for (int j = 0; j < N; ++j) {
                    s[j] = std::exp(s[j] - m);
                    sum += s[j];
                }
                const float inv = static_cast<float>(1.0 / sum);
                for (int j = 0; j < N; ++j) s[j] *= inv;
            });
            // O[c, i0 + i] = sum_j V[c, j] A[i, j]
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d, rows, N, 1.0f, v + off, N, scores, N, 0.0f,
                        o + off + i0, N);
        }
    }
    pool.parallelFor(C, [&](std::int64_t c) {
        const float b = wt.bo[c];
        for (std::int64_t p = 0; p < N; ++p) y[c * N + p] = (b + (residual ? residual[c * N + p] : 0.0f)) * outScale;
    });
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, C, N, C, outScale, wt.wo, C, o, N, 1.0f, y, N);
}

// ---------------------------------------------------------------- token sequences

void toTokens(WorkerPool& pool, int batch, int channels, std::int64_t pixels, const float* x, float* y) {
    pool.parallelFor(std::int64_t(batch) * pixels, [&](std::int64_t row) {
        const std::int64_t b = row / pixels, p = row % pixels;
        const float* src = x + b * channels * pixels + p;
        float* dst = y + row * channels;
        for (int c = 0; c < channels; ++c) dst[c] = src[c * pixels];
    });
}

void toFeatureMap(WorkerPool& pool, int batch, int channels, std::int64_t pixels, const float* x, const float* residual,
                  float* y) {
    pool.parallelFor(std::int64_t(batch) * channels, [&](std::int64_t plane) {
        const std::int64_t b = plane / channels, c = plane % channels;
        const float* src = x + b * pixels * channels + c;
        float* dst = y + plane * pixels;
        const float* r = residual ? residual + plane * pixels : nullptr;
        for (std::int64_t p = 0; p < pixels; ++p) dst[p] = src[p * channels] + (r ? r[p] : 0.0f);
    });
}

void layerNorm(WorkerPool& pool, std::int64_t rows, int channels, float eps, const float* x, const float* gamma,
               const float* beta, float* y) {
    pool.parallelFor(rows, [&](std::int64_t row) {
        const float* v = x + row * channels;
        double sum = 0, sq = 0;
        for (int c = 0; c < channels; ++c) sum += v[c];
        const double mean = sum / channels;
        for (int c = 0; c < channels; ++c) sq += (v[c] - mean) * (v[c] - mean);
        const double inv = 1.0 / std::sqrt(sq / channels + double(eps));
        float* out = y + row * channels;
        for (int c = 0; c < channels; ++c)
            out[c] = static_cast<float>((v[c] - mean) * inv) * gamma[c] + beta[c];
    });
}

void tokenLinear(WorkerPool& pool, int rows, int in, int out, const float* x, const float* weight, const float* bias,
                 const float* residual, float* y) {
    // y starts as bias + residual and the GEMM accumulates x W^T onto it.
    pool.parallelFor(rows, [&](std::int64_t r) {
        float* yr = y + r * out;
        const float* res = residual ? residual + r * out : nullptr;
        for (int o = 0; o < out; ++o) yr[o] = (bias ? bias[o] : 0.0f) + (res ? res[o] : 0.0f);
    });
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out, in, 1.0f, x, in, weight, in, 1.0f, y, out);
}

namespace {
inline float geluValue(float v) { return 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f)); }
inline float geluTanhValue(float v) {
    const float k = 0.79788456080286536f;  // sqrt(2 / pi)
    return 0.5f * v * (1.0f + std::tanh(k * (v + 0.044715f * v * v * v)));
}
}  // namespace

void gelu(WorkerPool& pool, std::int64_t n, const float* x, bool tanhApproximation, float* y) {
    const std::int64_t chunks = (n + kElementwiseChunk - 1) / kElementwiseChunk;
    pool.parallelFor(chunks, [&](std::int64_t k) {
        const std::int64_t end = std::min(n, (k + 1) * kElementwiseChunk);
        for (std::int64_t i = k * kElementwiseChunk; i < end; ++i)
            y[i] = tanhApproximation ? geluTanhValue(x[i]) : geluValue(x[i]);
    });
}

void quickGelu(WorkerPool& pool, std::int64_t n, const float* x, float* y) {
    const std::int64_t chunks = (n + kElementwiseChunk - 1) / kElementwiseChunk;
    pool.parallelFor(chunks, [&](std::int64_t k) {
        const std::int64_t end = std::min(n, (k + 1) * kElementwiseChunk);
        for (std::int64_t i = k * kElementwiseChunk; i < end; ++i) y[i] = x[i] / (1.0f + std::exp(-1.702f * x[i]));
    });
}

void checkTokenIds(int batch, int tokens, std::int64_t vocab, const float* ids) {
    const std::int64_t rows = std::int64_t(batch) * tokens;
    for (std::int64_t r = 0; r < rows; ++r)
        if (!(ids[r] >= 0.0f && ids[r] < static_cast<float>(vocab)) || ids[r] != std::floor(ids[r]))
            throw std::out_of_range("token embedding: row " + std::to_string(r / tokens) + " position " +
                                    std::to_string(r % tokens) + " holds id " + std::to_string(ids[r]) +
                                    ", not an integer from 0 to " + std::to_string(vocab - 1));
}

void tokenEmbedding(WorkerPool& pool, int batch, int tokens, int channels, std::int64_t vocab, const float* ids,
                    const float* table, const float* positions, float* y) {
    const std::int64_t rows = std::int64_t(batch) * tokens;
    checkTokenIds(batch, tokens, vocab, ids);
    pool.parallelFor(rows, [&](std::int64_t r) {
        const float* t = table + static_cast<std::int64_t>(ids[r]) * channels;
        const float* p = positions + (r % tokens) * channels;
        float* out = y + r * channels;
        for (int c = 0; c < channels; ++c) out[c] = t[c] + p[c];
    });
}

void eosPool(int batch, int tokens, int channels, const float* x, const float* ids, int token, float* y) {
    for (int b = 0; b < batch; ++b) {
        const float* row = ids + std::int64_t(b) * tokens;
        // std::max_element and std::find both return the first match, as torch's argmax does.
        const float* at = token < 0 ? std::max_element(row, row + tokens) : std::find(row, row + tokens, float(token));
        const std::int64_t pos = at == row + tokens ? 0 : at - row;
        const float* src = x + (std::int64_t(b) * tokens + pos) * channels;
        std::copy(src, src + channels, y + std::int64_t(b) * channels);
    }
}

std::size_t gegluScratchFloats(int rows, int out) { return static_cast<std::size_t>(std::int64_t(rows) * 2 * out); }

void geglu(WorkerPool& pool, int rows, int in, int out, const float* x, const float* weight, const float* bias, float* y,
           float* scratch) {
    tokenLinear(pool, rows, in, 2 * out, x, weight, bias, nullptr, scratch);
    pool.parallelFor(rows, [&](std::int64_t r) {
        const float* p = scratch + r * 2 * out;
        float* yr = y + r * out;
        for (int o = 0; o < out; ++o) yr[o] = p[o] * geluValue(p[out + o]);
    });
}

std::size_t tokenAttentionScratchFloats(const TokenAttentionShape& s, int queryBlock) {
    const std::int64_t C = s.channels;
    return static_cast<std::size_t>(2 * C * s.tokens + 2 * C * s.contextTokens +
                                    std::int64_t(queryBlock) * s.contextTokens);
}

void tokenAttention(WorkerPool& pool, const TokenAttentionShape& s, const AttentionWeights& wt, const float* x,
                    const float* context, const float* residual, float outScale, float* y, float* scratch,
                    int queryBlock) {
    const int N = s.tokens, C = s.channels, d = C / s.heads;
    const int M = context ? s.contextTokens : N, Ckv = context ? s.contextChannels : C;
    const float* kvSource = context ? context : x;
    float* q = scratch;
    float* k = q + std::int64_t(N) * C;
    float* v = k + std::int64_t(M) * C;
    float* o = v + std::int64_t(M) * C;
    float* scores = o + std::int64_t(N) * C;
    tokenLinear(pool, N, C, C, x, wt.wq, wt.bq, nullptr, q);
    tokenLinear(pool, M, Ckv, C, kvSource, wt.wk, wt.bk, nullptr, k);
    tokenLinear(pool, M, Ckv, C, kvSource, wt.wv, wt.bv, nullptr, v);
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
    for (int h = 0; h < s.heads; ++h) {
        for (int i0 = 0; i0 < N; i0 += queryBlock) {
            const int rows = std::min(queryBlock, N - i0);
            // scores[i, j] = scale * sum_c Q[i0 + i, h d + c] K[j, h d + c]
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, M, d, scale, q + std::int64_t(i0) * C + h * d, C,
                        k + h * d, C, 0.0f, scores, M);
            pool.parallelFor(rows, [&](std::int64_t i) {
                float* row = scores + i * M;
                const int keys = s.causal ? std::min<int>(M, i0 + static_cast<int>(i) + 1) : M;
                float m = -std::numeric_limits<float>::infinity();
                for (int j = 0; j < keys; ++j) m = std::max(m, row[j]);
                double sum = 0.0;
                for (int j = 0; j < keys; ++j) {
                    row[j] = std::exp(row[j] - m);
                    sum += row[j];
                }
                const float inv = static_cast<float>(1.0 / sum);
                for (int j = 0; j < keys; ++j) row[j] *= inv;
                std::fill(row + keys, row + M, 0.0f);
            });
            // O[i0 + i, h d + c] = sum_j A[i, j] V[j, h d + c]
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, M, 1.0f, scores, M, v + h * d, C, 0.0f,
                        o + std::int64_t(i0) * C + h * d, C);
        }
    }
    pool.parallelFor(N, [&](std::int64_t r) {
        for (int c = 0; c < C; ++c)
            y[r * C + c] = (wt.bo[c] + (residual ? residual[r * C + c] : 0.0f)) * outScale;
    });
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, C, C, outScale, o, C, wt.wo, C, 1.0f, y, C);
}

}  // namespace cpu

// ---------------------------------------------------------------- CpuBackend

namespace {

std::string cpuModelName() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("model name", 0) == 0) {
            const auto colon = line.find(':');
            if (colon != std::string::npos) {
                std::string name = line.substr(colon + 1);
                name.erase(0, name.find_first_not_of(" \t"));
                return name;
            }
        }
    }
    return "unknown CPU";
}

cpu::TokenAttentionShape tokenAttentionShape(const ModelGraph& g, const GraphOp& op, int tileH, int tileW) {
    cpu::TokenAttentionShape s;
    s.tokens = static_cast<int>(g.rows(op.input, tileH, tileW));
    s.channels = g.value(op.input).channels;
    const int kv = op.input2 >= 0 ? op.input2 : op.input;
    s.contextTokens = static_cast<int>(g.rows(kv, tileH, tileW));
    s.contextChannels = g.value(kv).channels;
    s.heads = op.heads;
    s.causal = op.causal;
    return s;
}

std::string shapeText(const std::vector<std::int64_t>& shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

}  // namespace

CpuBackend::CpuBackend(int threads) : pool_(threads), cpuName_(cpuModelName()) {}

CpuBackend::~CpuBackend() = default;

BackendInfo CpuBackend::info() const {
    return BackendInfo{"cpu", cpuName_ + " (" + std::to_string(pool_.threads()) + " threads)"};
}

std::size_t CpuBackend::preparedFloats() const {
    std::size_t n = scratch_.size();
    for (const auto& b : buffers_) n += b.size();
    return n;
}

void CpuBackend::prepare(const UNetModel& model, int batch, int tileH, int tileW) {
    prepareGraph(unet2DExecutionGraph(model.config()), model.tensors(), batch, tileH, tileW);
}

void CpuBackend::forward(const float* x, const float* timesteps, int batch, float* out) {
    run({x, timesteps}, batch, {out});
}

std::vector<CpuBackend::OpWeights> CpuBackend::bindWeights(const ModelGraph& graph, const TensorMap& weights,
                                                           int tileH, int tileW, std::size_t* scratchFloats) {
    std::vector<OpWeights> bound(graph.ops().size());
    std::int64_t maxAttentionPixels = 1;
    for (std::size_t i = 0; i < graph.ops().size(); ++i) {
        const GraphOp& op = graph.ops()[i];
        OpWeights& w = bound[i];
        for (int id : op.params) {
            const GraphParam& p = graph.param(id);
            const auto it = weights.find(p.name);
            if (it == weights.end()) throw ModelError("weights: no tensor '" + p.name + "' (read by " + op.name + ")");
            if (it->second.shape != p.shape)
                throw ModelError(p.name + ": expected " + shapeText(p.shape) + ", found " + shapeText(it->second.shape));
            w.params.push_back(it->second.data.data());
        }
        const GraphValue& x = graph.value(op.input);
        const GraphValue& y = graph.value(op.output);
        if (op.kind == OpKind::Conv) {
            cpu::ConvShape& s = w.conv;
            s.cin = x.channels;
            s.cout = op.channels;
            s.h = tileH / x.divisor;
            s.w = tileW / x.divisor;
            s.kernel = op.kernel;
            s.stride = op.stride;
            s.padTop = s.padLeft = op.padBegin;
            s.hout = (s.h + op.padBegin + op.padEnd - op.kernel) / op.stride + 1;
            s.wout = (s.w + op.padBegin + op.padEnd - op.kernel) / op.stride + 1;
            if (s.hout != tileH / y.divisor || s.wout != tileW / y.divisor)
                throw std::logic_error("CpuBackend: " + op.name + " output size does not match the graph");
            w.bandRows = cpu::convBandRows(s, cpu::kMaxColFloats);
            *scratchFloats = std::max(*scratchFloats, cpu::convScratchFloats(s, w.bandRows));
        } else if (op.kind == OpKind::Attention) {
            cpu::AttentionWeights& a = w.attn;
            std::size_t k = 0;
            auto next = [&w, &k] { return w.params[k++]; };
            for (auto [weight, bias] : {std::pair{&a.wq, &a.bq}, {&a.wk, &a.bk}, {&a.wv, &a.bv}}) {
                *weight = next();
                if (op.qkvBias) *bias = next();
            }
            a.wo = next();
            a.bo = next();
            if (x.kind == ValueKind::Tokens) {
                const cpu::TokenAttentionShape s = tokenAttentionShape(graph, op, tileH, tileW);
                w.queryBlock = std::min(s.tokens, cpu::attentionQueryBlock(s.contextTokens, cpu::kMaxScoreFloats));
                *scratchFloats = std::max(*scratchFloats, cpu::tokenAttentionScratchFloats(s, w.queryBlock));
            } else {
                maxAttentionPixels = std::max(maxAttentionPixels, graph.rows(op.input, tileH, tileW));
            }
        } else if (op.kind == OpKind::GEGLU) {
            const auto rows = static_cast<int>(graph.rows(op.input, tileH, tileW));
            *scratchFloats = std::max(*scratchFloats, cpu::gegluScratchFloats(rows, op.channels));
        }
    }
    // One query block for all attention layers, sized for the largest; scratch for each layer.
    queryBlock_ = cpu::attentionQueryBlock(maxAttentionPixels, cpu::kMaxScoreFloats);
    for (const GraphOp& op : graph.ops())
        if (op.kind == OpKind::Attention && graph.value(op.input).kind == ValueKind::FeatureMap) {
            const GraphValue& x = graph.value(op.input);
            const std::int64_t pixels = std::int64_t(tileH / x.divisor) * (tileW / x.divisor);
            const int qb = static_cast<int>(std::min<std::int64_t>(queryBlock_, pixels));
            *scratchFloats = std::max(*scratchFloats, cpu::attentionScratchFloats(x.channels, pixels, qb));
        }
    return bound;
}

// Activation buffers reused after each value's last reader (greedy best fit, in op order).
void CpuBackend::planBuffers(const ModelGraph& graph, int batch, int tileH, int tileW) {
    const std::vector<int> last = graph.lastUse();
    const std::size_t valueCount = graph.values().size();
    std::vector<int> bufferOf(valueCount, -1);
    std::vector<std::size_t> sizes;
    std::vector<int> freeList;
    auto acquire = [&](int value) {
        const std::size_t need = static_cast<std::size_t>(graph.elements(value, batch, tileH, tileW));
        // Best fit: the smallest free buffer that holds `need`, else the largest free one (grown).
        int best = -1;
        for (std::size_t k = 0; k < freeList.size(); ++k) {
            if (best < 0) {
                best = static_cast<int>(k);
                continue;
            }
            const std::size_t have = sizes[static_cast<std::size_t>(freeList[k])];
            const std::size_t cur = sizes[static_cast<std::size_t>(freeList[static_cast<std::size_t>(best)])];
            const bool better = have >= need ? (cur < need || have < cur) : (cur < need && have > cur);
            if (better) best = static_cast<int>(k);
        }
        if (best >= 0) {
            const int id = freeList[static_cast<std::size_t>(best)];
            freeList.erase(freeList.begin() + best);
            sizes[static_cast<std::size_t>(id)] = std::max(sizes[static_cast<std::size_t>(id)], need);
            bufferOf[static_cast<std::size_t>(value)] = id;
        } else {
            sizes.push_back(need);
            bufferOf[static_cast<std::size_t>(value)] = static_cast<int>(sizes.size()) - 1;
        }
    };
    std::vector<char> released(valueCount, 0);
    auto release = [&](int value) {
        if (value < 0 || released[static_cast<std::size_t>(value)]) return;
        released[static_cast<std::size_t>(value)] = 1;
        freeList.push_back(bufferOf[static_cast<std::size_t>(value)]);
    };
    for (int v : graph.inputs()) acquire(v);
    for (std::size_t i = 0; i < graph.ops().size(); ++i) {
        const GraphOp& op = graph.ops()[i];
        acquire(op.output);
        for (int v : op.operands())
            if (last[static_cast<std::size_t>(v)] == static_cast<int>(i)) release(v);
        if (last[static_cast<std::size_t>(op.output)] < 0) release(op.output);
    }
    buffers_.assign(sizes.size(), {});
    for (std::size_t k = 0; k < sizes.size(); ++k) buffers_[k].assign(sizes[k], 0.0f);
    bufferOf_ = std::move(bufferOf);
}

void CpuBackend::prepareGraph(const ModelGraph& graph, const TensorMap& weights, int batch, int tileH, int tileW) {
    if (batch < 1) throw std::invalid_argument("batch: " + std::to_string(batch) + " must be at least 1");
    graph.checkTileSize(tileH, tileW);
    prepared_ = false;
    // OpenBLAS computes on one thread: with more, some of its kernels (seen on an AMD EPYC with
    // Debian's OpenBLAS 0.3.21) split the work so that the bits depend on the thread count,
    // and a run must give the same image on any machine and thread setting. The worker pool
    // parallelises everything around the GEMMs; spreading the GEMMs themselves over fixed
    // column chunks is the CPU speed issue's work.
    openblas_set_num_threads(1);
    std::size_t scratchFloats = 0;
    // Bind every weight once, checking shapes, so run() only follows pointers.
    weights_ = bindWeights(graph, weights, tileH, tileW, &scratchFloats);
    planBuffers(graph, batch, tileH, tileW);
    graph_ = graph;
    scratch_.assign(scratchFloats, 0.0f);
    opMs_.assign(graph_.ops().size(), 0.0);
    batch_ = batch;
    tileH_ = tileH;
    tileW_ = tileW;
    prepared_ = true;
}

float* CpuBackend::data(int value) {
    return value < 0 ? nullptr : buffers_[static_cast<std::size_t>(bufferOf_[static_cast<std::size_t>(value)])].data();
}

std::int64_t CpuBackend::pixels(int value) const { return graph_.rows(value, tileH_, tileW_); }

void CpuBackend::run(const std::vector<const float*>& inputs, int batch, const std::vector<float*>& outputs) {
    if (!prepared_) throw std::logic_error("CpuBackend::run called before prepare()");
    if (batch < 1 || batch > batch_)
        throw std::invalid_argument("batch: " + std::to_string(batch) + " is outside 1.." + std::to_string(batch_) +
                                    " (the prepared batch)");
    if (inputs.size() != graph_.inputs().size() || outputs.size() != graph_.outputs().size())
        throw std::invalid_argument("CpuBackend::run: " + std::to_string(inputs.size()) + " inputs and " +
                                    std::to_string(outputs.size()) + " outputs for a graph of " +
                                    std::to_string(graph_.inputs().size()) + " and " +
                                    std::to_string(graph_.outputs().size()));
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        const int v = graph_.inputs()[i];
        std::copy(inputs[i], inputs[i] + graph_.elements(v, batch, tileH_, tileW_), data(v));
    }
    for (std::size_t i = 0; i < graph_.ops().size(); ++i) {
        if (!profiling_) {
            runOp(i, batch);
            continue;
        }
        const auto start = std::chrono::steady_clock::now();
        runOp(i, batch);
        opMs_[i] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    }
    for (std::size_t i = 0; i < outputs.size(); ++i) {
        const int v = graph_.outputs()[i];
        const float* y = data(v);
        std::copy(y, y + graph_.elements(v, batch, tileH_, tileW_), outputs[i]);
    }
}

void CpuBackend::runOp(std::size_t index, int batch) {
    const GraphOp& op = graph_.ops()[index];
    const OpWeights& w = weights_[index];
    const float* in = data(op.input);
    float* y = data(op.output);
    const int channels = graph_.value(op.input).channels;
    const std::int64_t inPixels = pixels(op.input), outPixels = pixels(op.output);
    const std::int64_t count = std::int64_t(batch) * channels * inPixels;
    switch (op.kind) {
    case OpKind::Affine: cpu::affine(pool_, count, in, op.scale, op.shift, y); break;
    case OpKind::SiLU: cpu::silu(pool_, count, in, y); break;
    case OpKind::Add:
        cpu::add(pool_, batch, channels, inPixels, in, data(op.input2),
                 graph_.value(op.input2).kind == ValueKind::Vector && graph_.value(op.input).kind == ValueKind::FeatureMap,
                 y);
        break;
    case OpKind::ScaleShift: cpu::scaleShift(pool_, batch, channels, inPixels, in, data(op.input2), y); break;
    case OpKind::TimestepEmbedding:
        cpu::timestepEmbedding(in, batch, op.channels, op.freqShift, op.flipSinToCos, y);
        break;
    case OpKind::Linear:
        if (graph_.value(op.input).kind == ValueKind::Tokens) {
            const float* residual = data(op.residual);
            const std::int64_t inImage = channels * inPixels, outImage = std::int64_t(op.channels) * outPixels;
            for (int b = 0; b < batch; ++b)
                cpu::tokenLinear(pool_, static_cast<int>(inPixels), channels, op.channels, in + b * inImage,
                                 w.params[0], w.params[1], residual ? residual + b * outImage : nullptr,
                                 y + b * outImage);
        } else {
            cpu::linear(batch, channels, op.channels, in, w.params[0], w.params[1], op.silu, y);
        }
        break;
    case OpKind::Conv: {
        const std::int64_t inPlane = channels * inPixels, outPlane = std::int64_t(op.channels) * outPixels;
        const float* residual = data(op.residual);
        for (int b = 0; b < batch; ++b)
            cpu::conv2d(pool_, w.conv, in + b * inPlane, w.params[0], w.params[1],
                        residual ? residual + b * outPlane : nullptr, op.outputScale, y + b * outPlane, scratch_.data(),
                        w.bandRows);
        break;
    }
    case OpKind::GroupNorm:
        cpu::groupNorm(pool_, batch, channels, inPixels, op.groups, op.eps, in, w.params[0], w.params[1],
                       data(op.preAdd), data(op.scaleShift), op.silu, y);
        break;
    case OpKind::Attention: {
        const std::int64_t plane = channels * inPixels;
        if (graph_.value(op.input).kind == ValueKind::Tokens) {
            const cpu::TokenAttentionShape s = tokenAttentionShape(graph_, op, tileH_, tileW_);
            const float* context = data(op.input2);
            const float* residual = data(op.residual);
            const std::int64_t contextImage = std::int64_t(s.contextTokens) * s.contextChannels;
            for (int b = 0; b < batch; ++b)
                cpu::tokenAttention(pool_, s, w.attn, in + b * plane, context ? context + b * contextImage : nullptr,
                                    residual ? residual + b * plane : nullptr, op.outputScale, y + b * plane,
                                    scratch_.data(), w.queryBlock);
            break;
        }
        const int qb = std::min<int>(queryBlock_, static_cast<int>(inPixels));
        const float* residual = data(op.residual);
        for (int b = 0; b < batch; ++b)
            cpu::attention(pool_, channels, inPixels, op.heads, w.attn, in + b * plane,
                           residual ? residual + b * plane : nullptr, op.outputScale, y + b * plane, scratch_.data(), qb);
        break;
    }
    case OpKind::Concat: {
        const float* skip = data(op.input2);
        const int c1 = channels, c2 = graph_.value(op.input2).channels, cOut = c1 + c2;
        pool_.parallelFor(std::int64_t(batch) * cOut, [&](std::int64_t plane) {
            const std::int64_t b = plane / cOut, c = plane % cOut;
            const float* src = c < c1 ? in + (b * c1 + c) * inPixels : skip + (b * c2 + (c - c1)) * inPixels;
            std::copy(src, src + inPixels, y + plane * inPixels);
        });
        break;
    }
    case OpKind::Upsample: {
        const int d = graph_.value(op.input).divisor;
        cpu::upsampleNearest2x(pool_, std::int64_t(batch) * channels, tileH_ / d, tileW_ / d, in, y);
        break;
    }
    case OpKind::ToTokens: cpu::toTokens(pool_, batch, channels, inPixels, in, y); break;
    case OpKind::ToFeatureMap: cpu::toFeatureMap(pool_, batch, channels, inPixels, in, data(op.residual), y); break;
    case OpKind::LayerNorm:
        cpu::layerNorm(pool_, std::int64_t(batch) * inPixels, channels, op.eps, in, w.params[0], w.params[1], y);
        break;
    case OpKind::GEGLU: {
        const std::int64_t inImage = channels * inPixels, outImage = std::int64_t(op.channels) * outPixels;
        for (int b = 0; b < batch; ++b)
            cpu::geglu(pool_, static_cast<int>(inPixels), channels, op.channels, in + b * inImage, w.params[0],
                       w.params[1], y + b * outImage, scratch_.data());
        break;
    }
    case OpKind::GELU: cpu::gelu(pool_, count, in, op.geluTanh, y); break;
    case OpKind::QuickGELU: cpu::quickGelu(pool_, count, in, y); break;
    case OpKind::TokenEmbedding:
        cpu::tokenEmbedding(pool_, batch, static_cast<int>(inPixels), op.channels, graph_.param(op.params[0]).shape[0],
                            in, w.params[0], w.params[1], y);
        break;
    case OpKind::EosPool:
        cpu::eosPool(batch, static_cast<int>(inPixels), channels, in, data(op.input2), op.token, y);
        break;
    }
}

}  // namespace tessera
