// Counter-based RNG: Philox4x32-10 (Salmon et al., SC'11, the Random123 definition)
// and Box-Muller, keyed so that noise depends only on (seed, draw, canvas pixel).
// Same seed -> same noise on the CPU and the GPU, for any tile batch and tiling.
//
// Keying (the contract every backend and tools/reference/ follow):
//   key     = (lo32(seed), hi32(seed))
//   counter = (lo32(index), hi32(index), draw, 0x7E55E7A0)
//   index   = canvas element (c * H + y) * W + x in NCHW order of the whole image
//   draw    = 0 for the initial x_T, k + 1 for the noise added by step k (0-based step index),
//             0x80000000 + 0 for the image-to-image forward noising,
//             0x80000000 + 1 for the shifted tiles' offsets (core/sampling/TilePlan.h tileShifts; index = step).
//   u1 = (r0 + 1) * 2^-32 in (0, 1],  u2 = r1 * 2^-32 in [0, 1)
//   z  = sqrt(-2 ln u1) * cos(2 pi u2)   (computed in float64 on the CPU, float32 on the GPU)
#pragma once

#include <cmath>
#include <cstdint>

#include "core/base/HostDevice.h"

namespace tessera {

struct Philox4x32 {
    std::uint32_t v[4];
};

TESSERA_HD Philox4x32 philox4x32_10(Philox4x32 ctr, std::uint32_t k0, std::uint32_t k1) {
    constexpr std::uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
    constexpr std::uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
    for (int round = 0; round < 10; ++round) {
        const std::uint64_t p0 = static_cast<std::uint64_t>(M0) * ctr.v[0];
        const std::uint64_t p1 = static_cast<std::uint64_t>(M1) * ctr.v[2];
        const std::uint32_t hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
        const std::uint32_t hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
        ctr = Philox4x32{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
        k0 += W0;
        k1 += W1;
    }
    return ctr;
}

constexpr std::uint32_t kPhiloxTag = 0x7E55E7A0u;
constexpr std::uint32_t kInitNoiseDraw = 0x80000000u;

TESSERA_HD Philox4x32 philoxBits(std::uint64_t seed, std::uint32_t draw, std::uint64_t index) {
    Philox4x32 c{{static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32), draw, kPhiloxTag}};
    return philox4x32_10(c, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}

// One standard normal sample for (seed, draw, index).
TESSERA_HD float philoxNormal(std::uint64_t seed, std::uint32_t draw, std::uint64_t index) {
    const Philox4x32 r = philoxBits(seed, draw, index);
#if defined(__CUDA_ARCH__)
    const float u1 = (static_cast<float>(r.v[0]) + 1.0f) * 2.3283064365386963e-10f;
    const float u2 = static_cast<float>(r.v[1]) * 2.3283064365386963e-10f;
    return sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
#else
    const double u1 = (static_cast<double>(r.v[0]) + 1.0) * 2.3283064365386963e-10;
    const double u2 = static_cast<double>(r.v[1]) * 2.3283064365386963e-10;
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
#endif
}

}  // namespace tessera
