// The slerp's result is float products and a float sum as torch computes them: no contraction
// into fused multiply-adds (GCC contracts by default where the target has FMA).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "core/sampling/A1111ImageRng.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

namespace tessera {
namespace {

// Python's a // 2 for any sign.
int floorHalf(int a) { return a >= 0 ? a / 2 : -((1 - a) / 2); }

std::size_t elements(int channels, int height, int width) {
    return static_cast<std::size_t>(channels) * static_cast<std::size_t>(height) * static_cast<std::size_t>(width);
}

}  // namespace

std::vector<std::uint64_t> a1111ImageSeeds(std::uint64_t seed, double subseedStrength, int first, int count) {
    std::vector<std::uint64_t> seeds;
    seeds.reserve(static_cast<std::size_t>(std::max(count, 0)));
    for (int i = 0; i < count; ++i)
        seeds.push_back(subseedStrength == 0.0 ? seed + static_cast<std::uint64_t>(first + i) : seed);
    return seeds;
}

std::vector<std::uint64_t> a1111ImageSubseeds(std::uint64_t subseed, int first, int count) {
    std::vector<std::uint64_t> subseeds;
    subseeds.reserve(static_cast<std::size_t>(std::max(count, 0)));
    for (int i = 0; i < count; ++i) subseeds.push_back(subseed + static_cast<std::uint64_t>(first + i));
    return subseeds;
}

void a1111Slerp(double val, const float* low, const float* high, float* out, int channels, int height, int width) {
    const auto columns = static_cast<std::size_t>(channels) * static_cast<std::size_t>(width);
    const auto at = [height, width](int c, int y, int x) {
        return (static_cast<std::size_t>(c) * static_cast<std::size_t>(height) + static_cast<std::size_t>(y)) *
                   static_cast<std::size_t>(width) +
               static_cast<std::size_t>(x);
    };
    // torch.norm(t, dim=1) per (channel, column), then the dot product of the normalised columns.
    std::vector<double> lowNorm(columns, 0.0), highNorm(columns, 0.0), dot(columns, 0.0);
    for (int c = 0; c < channels; ++c)
        for (int y = 0; y < height; ++y)
            for (int x = 0; x < width; ++x) {
                const std::size_t col =
                    static_cast<std::size_t>(c) * static_cast<std::size_t>(width) + static_cast<std::size_t>(x);
                const double l = low[at(c, y, x)], h = high[at(c, y, x)];
                lowNorm[col] += l * l;
                highNorm[col] += h * h;
                dot[col] += l * h;
            }
    double meanDot = 0.0;
    for (std::size_t col = 0; col < columns; ++col) {
        dot[col] /= std::sqrt(lowNorm[col]) * std::sqrt(highNorm[col]);
        meanDot += dot[col];
    }
    meanDot /= static_cast<double>(columns);

    if (meanDot > 0.9995) {
        // Nearly parallel: the linear blend, with val on low as rng.py writes it. torch rounds the
        // Python scalars to float.
        const auto wLow = static_cast<float>(val);
        const auto wHigh = static_cast<float>(1.0 - val);
        const std::size_t n = elements(channels, height, width);
        for (std::size_t i = 0; i < n; ++i) {
            const float a = low[i] * wLow;
            const float b = high[i] * wHigh;
            out[i] = a + b;
        }
        return;
    }
    std::vector<float> wLow(columns), wHigh(columns);
    for (std::size_t col = 0; col < columns; ++col) {
        const double omega = std::acos(dot[col]);
        const double so = std::sin(omega);
        wLow[col] = static_cast<float>(std::sin((1.0 - val) * omega) / so);
        wHigh[col] = static_cast<float>(std::sin(val * omega) / so);
    }
    for (int c = 0; c < channels; ++c)
        for (int y = 0; y < height; ++y)
            for (int x = 0; x < width; ++x) {
                const std::size_t col =
                    static_cast<std::size_t>(c) * static_cast<std::size_t>(width) + static_cast<std::size_t>(x);
                const std::size_t i = at(c, y, x);
                const float a = wLow[col] * low[i];
                const float b = wHigh[col] * high[i];
                out[i] = a + b;
            }
}

void a1111PasteCentred(const float* noise, int noiseHeight, int noiseWidth, float* x, int channels, int height,
                       int width) {
    const int dx = floorHalf(width - noiseWidth);
    const int dy = floorHalf(height - noiseHeight);
    const int w = dx >= 0 ? noiseWidth : noiseWidth + 2 * dx;
    const int h = dy >= 0 ? noiseHeight : noiseHeight + 2 * dy;
    const int tx = std::max(dx, 0), ty = std::max(dy, 0);
    const int sx = std::max(-dx, 0), sy = std::max(-dy, 0);
    for (int c = 0; c < channels; ++c)
        for (int y = 0; y < h; ++y) {
            const float* src = noise +
                               (static_cast<std::size_t>(c) * static_cast<std::size_t>(noiseHeight) +
                                static_cast<std::size_t>(sy + y)) *
                                   static_cast<std::size_t>(noiseWidth) +
                               sx;
            float* dst =
                x +
                (static_cast<std::size_t>(c) * static_cast<std::size_t>(height) + static_cast<std::size_t>(ty + y)) *
                    static_cast<std::size_t>(width) +
                tx;
            std::copy(src, src + w, dst);
        }
}

A1111ImageRng::A1111ImageRng(int channels, int height, int width, A1111NoiseOptions options,
                             NormalGeneratorFactory generators)
    : channels_(channels),
      height_(height),
      width_(width),
      options_(std::move(options)),
      makeGenerator_(std::move(generators)) {
    if (options_.seeds.empty()) throw std::invalid_argument("A1111 noise: no seeds (one per image is needed)");
    if (channels <= 0 || height <= 0 || width <= 0)
        throw std::invalid_argument("A1111 noise: the latent's channels, height and width must be positive");
    if (!makeGenerator_) throw std::invalid_argument("A1111 noise: no generator for the RNG source");
    const int scale = std::max(options_.seedResizeScale, 1);
    if (options_.seedResizeFromHeight > 0 && options_.seedResizeFromWidth > 0 &&
        (options_.seedResizeFromHeight < scale || options_.seedResizeFromWidth < scale))
        throw std::invalid_argument("A1111 noise: the seed-resize size is under one latent pixel");
    for (const std::uint64_t seed : options_.seeds) generators_.push_back(makeGenerator_(seed));
}

std::size_t A1111ImageRng::imageElements() const { return elements(channels_, height_, width_); }

void A1111ImageRng::first(float* out) {
    const bool resizeAsked = options_.seedResizeFromHeight > 0 && options_.seedResizeFromWidth > 0;
    const int scale = std::max(options_.seedResizeScale, 1);
    const int noiseHeight = resizeAsked ? options_.seedResizeFromHeight / scale : height_;
    const int noiseWidth = resizeAsked ? options_.seedResizeFromWidth / scale : width_;
    const bool resized = noiseHeight != height_ || noiseWidth != width_;
    const std::size_t noiseCount = elements(channels_, noiseHeight, noiseWidth);
    const bool variation = options_.subseedStrength != 0.0;

    std::vector<float> noise(noiseCount), subnoise(variation ? noiseCount : 0);
    for (std::size_t i = 0; i < options_.seeds.size(); ++i) {
        const std::uint64_t seed = options_.seeds[i];
        if (variation) {
            const std::uint64_t subseed = i < options_.subseeds.size() ? options_.subseeds[i] : 0;
            makeGenerator_(subseed)->randn(subnoise.data(), noiseCount);
        }
        if (resized)
            makeGenerator_(seed)->randn(noise.data(), noiseCount);
        else
            generators_[i]->randn(noise.data(), noiseCount);
        if (variation)
            a1111Slerp(options_.subseedStrength, noise.data(), subnoise.data(), noise.data(), channels_, noiseHeight,
                       noiseWidth);
        float* image = out + i * imageElements();
        if (resized) {
            generators_[i]->randn(image, imageElements());
            a1111PasteCentred(noise.data(), noiseHeight, noiseWidth, image, channels_, height_, width_);
        } else {
            std::copy(noise.begin(), noise.end(), image);
        }
    }
    if (options_.etaNoiseSeedDelta != 0)
        for (std::size_t i = 0; i < options_.seeds.size(); ++i)
            generators_[i] = makeGenerator_(options_.seeds[i] + static_cast<std::uint64_t>(options_.etaNoiseSeedDelta));
}

void A1111ImageRng::next(float* out) {
    if (isFirst_) {
        isFirst_ = false;
        first(out);
        return;
    }
    for (std::size_t i = 0; i < generators_.size(); ++i)
        generators_[i]->randn(out + i * imageElements(), imageElements());
}

std::vector<float> A1111ImageRng::next() {
    std::vector<float> out(static_cast<std::size_t>(batch()) * imageElements());
    next(out.data());
    return out;
}

}  // namespace tessera
