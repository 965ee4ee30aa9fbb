// The CPU backend's layout operations (core/cpu/CpuOps.h): nearest upsampling, pixel shuffle and
// unshuffle, and feature maps to token rows and back.
#include "core/cpu/CpuOps.h"

namespace tessera {
namespace cpu {

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

void upsampleNearest(WorkerPool& pool, std::int64_t planes, int h, int w, int factor, const float* x, float* y) {
    const std::int64_t wOut = std::int64_t(w) * factor, hOut = std::int64_t(h) * factor;
    pool.parallelFor(planes, [&](std::int64_t p) {
        const float* src = x + p * h * w;
        float* dst = y + p * hOut * wOut;
        for (std::int64_t oy = 0; oy < hOut; ++oy) {
            const float* row = src + oy / factor * w;
            float* o = dst + oy * wOut;
            for (std::int64_t ox = 0; ox < wOut; ++ox) o[ox] = row[ox / factor];
        }
    });
}

void pixelShuffle(WorkerPool& pool, int batch, int channels, int h, int w, int factor, const float* x, float* y) {
    const int r = factor;
    const std::int64_t plane = std::int64_t(h) * w, wOut = std::int64_t(w) * r;
    // One task per output plane; each output row oy * r + i reads input plane c * r^2 + i * r + j
    // at column ox for its columns ox * r + j.
    pool.parallelFor(std::int64_t(batch) * channels, [&](std::int64_t bc) {
        const float* src = x + bc * r * r * plane;
        float* dst = y + bc * r * r * plane;
        for (int oy = 0; oy < h; ++oy)
            for (int i = 0; i < r; ++i) {
                float* o = dst + (std::int64_t(oy) * r + i) * wOut;
                for (int j = 0; j < r; ++j) {
                    const float* in = src + (std::int64_t(i) * r + j) * plane + std::int64_t(oy) * w;
                    for (int ox = 0; ox < w; ++ox) o[std::int64_t(ox) * r + j] = in[ox];
                }
            }
    });
}

void pixelUnshuffle(WorkerPool& pool, int batch, int channels, int h, int w, int factor, const float* x, float* y) {
    const int r = factor;
    const std::int64_t plane = std::int64_t(h) * w, wIn = std::int64_t(w) * r;
    pool.parallelFor(std::int64_t(batch) * channels, [&](std::int64_t bc) {
        const float* src = x + bc * r * r * plane;
        float* dst = y + bc * r * r * plane;
        for (int i = 0; i < r; ++i)
            for (int j = 0; j < r; ++j) {
                float* o = dst + (std::int64_t(i) * r + j) * plane;
                for (int oy = 0; oy < h; ++oy) {
                    const float* in = src + (std::int64_t(oy) * r + i) * wIn + j;
                    for (int ox = 0; ox < w; ++ox) o[std::int64_t(oy) * w + ox] = in[std::int64_t(ox) * r];
                }
            }
    });
}

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

}  // namespace cpu
}  // namespace tessera
