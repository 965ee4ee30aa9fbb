// rng_philox.py's u and v must be a rounded product plus a rounded sum, as numpy computes them:
// no contraction into fused multiply-adds (GCC contracts by default where the target has FMA).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "core/sampling/NvPhiloxGenerator.h"

#include <cmath>

#include "core/sampling/Philox.h"

namespace tessera {
namespace {

// rng_philox.py two_pow32_inv and two_pow32_inv_2pi: decimal constants rounded to float32 (the
// first is exactly 2^-32; the second's product is formed in double before the rounding).
constexpr float kTwoPow32Inv = static_cast<float>(2.3283064e-10);
constexpr float kTwoPow32Inv2Pi = static_cast<float>(2.3283064e-10 * 6.2831855);

// rng_philox.py box_muller: the float32 scales and their float32 halves widened to double.
float boxMullerFirst(std::uint32_t x, std::uint32_t y) {
    const double u =
        static_cast<double>(x) * static_cast<double>(kTwoPow32Inv) + static_cast<double>(kTwoPow32Inv / 2.0f);
    const double v =
        static_cast<double>(y) * static_cast<double>(kTwoPow32Inv2Pi) + static_cast<double>(kTwoPow32Inv2Pi / 2.0f);
    const double s = std::sqrt(-2.0 * std::log(u));
    return static_cast<float>(s * std::sin(v));
}

}  // namespace

void NvPhiloxGenerator::randn(float* out, std::size_t count) {
    const auto k0 = static_cast<std::uint32_t>(seed_);
    const auto k1 = static_cast<std::uint32_t>(seed_ >> 32);
    for (std::size_t i = 0; i < count; ++i) {
        // rng_philox.py Generator.randn: counter[0] = call, counter[2] = element (uint32).
        const Philox4x32 r = philox4x32_10(Philox4x32{{calls_, 0u, static_cast<std::uint32_t>(i), 0u}}, k0, k1);
        out[i] = boxMullerFirst(r.v[0], r.v[1]);
    }
    ++calls_;
}

std::vector<float> NvPhiloxGenerator::randn(std::size_t count) {
    std::vector<float> out(count);
    randn(out.data(), count);
    return out;
}

}  // namespace tessera
