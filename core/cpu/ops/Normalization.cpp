// cpu::groupNorm, cpu::layerNorm and cpu::rmsNorm: statistics in double (core/cpu/CpuOps.h).
#include <cmath>

#include "core/cpu/CpuOps.h"
#include "core/cpu/ops/Activation.h"

namespace tessera {
namespace cpu {

namespace {

// Sums in double with four partial sums (independent additions, so they pipeline and
// vectorise); the order of the additions is fixed by the length alone.
double sumOf(const float* x, std::int64_t n) {
    double s[4] = {0, 0, 0, 0};
    std::int64_t p = 0;
    for (; p + 4 <= n; p += 4)
        for (int j = 0; j < 4; ++j) s[j] += x[p + j];
    for (; p < n; ++p) s[0] += x[p];
    return (s[0] + s[1]) + (s[2] + s[3]);
}

// Sum of (x[p] + add - mean)^2 in double, four partial sums as sumOf.
double squaredDeviations(const float* x, std::int64_t n, float add, double mean) {
    double s[4] = {0, 0, 0, 0};
    std::int64_t p = 0;
    for (; p + 4 <= n; p += 4)
        for (int j = 0; j < 4; ++j) {
            const double d = static_cast<double>(x[p + j] + add) - mean;
            s[j] += d * d;
        }
    for (; p < n; ++p) {
        const double d = static_cast<double>(x[p] + add) - mean;
        s[0] += d * d;
    }
    return (s[0] + s[1]) + (s[2] + s[3]);
}

}  // namespace

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
            sum += sumOf(x + base + c * pixels, pixels) + add * static_cast<double>(pixels);
        }
        const double count = static_cast<double>(perGroup) * static_cast<double>(pixels);
        const double mean = sum / count;
        double sq = 0.0;
        for (int c = 0; c < perGroup; ++c)
            sq += squaredDeviations(x + base + c * pixels, pixels, preAdd ? preAdd[b * channels + c0 + c] : 0.0f, mean);
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
        for (int c = 0; c < channels; ++c) out[c] = static_cast<float>((v[c] - mean) * inv) * gamma[c] + beta[c];
    });
}

void rmsNorm(WorkerPool& pool, std::int64_t rows, int channels, float eps, const float* x, const float* weight,
             float* y) {
    // transformers models/t5/modeling_t5.py T5LayerNorm: the mean square (no mean subtracted) in
    // float32 there, in double here; x * rsqrt(ms + eps), then * weight.
    pool.parallelFor(rows, [&](std::int64_t row) {
        const float* v = x + row * channels;
        double sq = 0;
        for (int c = 0; c < channels; ++c) sq += double(v[c]) * v[c];
        const double inv = 1.0 / std::sqrt(sq / channels + double(eps));
        float* out = y + row * channels;
        for (int c = 0; c < channels; ++c) out[c] = static_cast<float>(v[c] * inv) * weight[c];
    });
}

}  // namespace cpu
}  // namespace tessera
