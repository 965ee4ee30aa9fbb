// Seeded random inputs the CUDA suites feed both engines (std::mt19937: the same values on every
// platform and run). Header-only (not a suite: no tst_ prefix).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace tessera::testing {

// n values uniform in [0, 1) (images in A1111's [0, 1] range).
inline std::vector<float> uniform(std::size_t n, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(0.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

// n values normal with mean 0 and standard deviation `scale` (noise, latents).
inline std::vector<float> normal(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

}  // namespace tessera::testing
