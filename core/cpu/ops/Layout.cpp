// The CPU backend's layout operations (core/cpu/CpuOps.h): nearest 2x upsampling, and feature
// maps to token rows and back.
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
