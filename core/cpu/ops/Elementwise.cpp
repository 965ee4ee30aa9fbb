// The CPU backend's elementwise operations (core/cpu/CpuOps.h): copy, affine, SiLU, GELU,
// QuickGELU, LeakyReLU, PReLU, sigmoid, products, broadcast add and FiLM scale-shift, each in
// chunks of kElementwiseChunk floats (per plane where a value depends on the channel).
#include <algorithm>
#include <cmath>

#include "core/cpu/CpuOps.h"
#include "core/cpu/ops/Activation.h"

namespace tessera {
namespace cpu {

namespace {

constexpr std::int64_t kElementwiseChunk = 1 << 14;  // floats per task of an elementwise loop

// body(i) for i in [0, n), in chunks of kElementwiseChunk on the pool.
template <class F>
void elementwise(WorkerPool& pool, std::int64_t n, F&& body) {
    pool.parallelRange(n, kElementwiseChunk, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) body(i);
    });
}

}  // namespace

void copyFloats(WorkerPool& pool, std::int64_t n, const float* x, float* y) {
    pool.parallelRange(n, kElementwiseChunk,
                       [&](std::int64_t begin, std::int64_t end) { std::copy(x + begin, x + end, y + begin); });
}

void affine(WorkerPool& pool, std::int64_t n, const float* x, float scale, float shift, float* y) {
    elementwise(pool, n, [&](std::int64_t i) { y[i] = x[i] * scale + shift; });
}

void silu(WorkerPool& pool, std::int64_t n, const float* x, float* y) {
    elementwise(pool, n, [&](std::int64_t i) { y[i] = siluValue(x[i]); });
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

void gelu(WorkerPool& pool, std::int64_t n, const float* x, bool tanhApproximation, float* y) {
    elementwise(pool, n, [&](std::int64_t i) { y[i] = tanhApproximation ? geluTanhValue(x[i]) : geluValue(x[i]); });
}

void quickGelu(WorkerPool& pool, std::int64_t n, const float* x, float* y) {
    elementwise(pool, n, [&](std::int64_t i) { y[i] = x[i] / (1.0f + std::exp(-1.702f * x[i])); });
}

void leakyRelu(WorkerPool& pool, std::int64_t n, const float* x, float slope, float* y) {
    elementwise(pool, n, [&](std::int64_t i) { y[i] = leakyReluValue(x[i], slope); });
}

void sigmoid(WorkerPool& pool, std::int64_t n, const float* x, float* y) {
    elementwise(pool, n, [&](std::int64_t i) { y[i] = 1.0f / (1.0f + std::exp(-x[i])); });
}

void mul(WorkerPool& pool, std::int64_t n, const float* a, const float* b, float* y) {
    elementwise(pool, n, [&](std::int64_t i) { y[i] = a[i] * b[i]; });
}

void prelu(WorkerPool& pool, int batch, int channels, std::int64_t pixels, const float* x, const float* weight,
           float* y) {
    pool.parallelFor(std::int64_t(batch) * channels, [&](std::int64_t plane) {
        const float w = weight[plane % channels];
        for (std::int64_t p = plane * pixels; p < (plane + 1) * pixels; ++p) y[p] = leakyReluValue(x[p], w);
    });
}

}  // namespace cpu
}  // namespace tessera
