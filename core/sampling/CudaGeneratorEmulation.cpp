#include "core/sampling/CudaGeneratorEmulation.h"

#include <cmath>

#include "core/sampling/Philox.h"
#include "core/sampling/TorchCudaRandnLaunch.h"

namespace tessera {
namespace {

// curand_globals.h CURAND_2POW32_INV and CURAND_2POW32_INV_2PI (a float product).
constexpr float kTwoPow32Inv = 2.3283064e-10f;
constexpr float kTwoPow32Inv2Pi = 2.3283064e-10f * 6.2831855f;

// One curand_normal4 from the 4 words of a Philox block: Box-Muller on (r0, r1) gives .x (sine)
// and .y (cosine), on (r2, r3) .z and .w. u and v are fused multiply-adds of the words rounded to
// float, as nvcc compiles them.
float normal4Component(const Philox4x32& r, unsigned component) {
    const unsigned pair = component / 2;
    const float u = std::fma(static_cast<float>(r.v[2 * pair]), kTwoPow32Inv, kTwoPow32Inv / 2.0f);
    const float v = std::fma(static_cast<float>(r.v[2 * pair + 1]), kTwoPow32Inv2Pi, kTwoPow32Inv2Pi / 2.0f);
    const double s = std::sqrt(-2.0 * std::log(static_cast<double>(u)));
    const double angle = static_cast<double>(v);
    return static_cast<float>(s * (component % 2 == 0 ? std::sin(angle) : std::cos(angle)));
}

}  // namespace

void CudaGeneratorEmulation::randn(float* out, std::size_t count) {
    if (count == 0) return;  // torch launches nothing and keeps the offset
    const TorchCudaRandnLaunch launch = torchCudaRandnLaunch(count, threadCap_);
    const std::uint64_t threads = launch.threads;
    const auto k0 = static_cast<std::uint32_t>(seed_);
    const auto k1 = static_cast<std::uint32_t>(seed_ >> 32);
    for (std::size_t i = 0; i < count; ++i) {
        const std::uint64_t thread = i % threads;
        const std::uint64_t slot = i / threads;  // 4 components per grid-stride iteration
        // curand_init(seed, thread, offset): the counter's low 64 bits are offset / 4 plus the
        // blocks drawn so far, the high 64 bits the subsequence.
        const std::uint64_t block = offset_ / 4 + slot / 4;
        const Philox4x32 r =
            philox4x32_10(Philox4x32{{static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(block >> 32),
                                      static_cast<std::uint32_t>(thread), static_cast<std::uint32_t>(thread >> 32)}},
                          k0, k1);
        out[i] = normal4Component(r, static_cast<unsigned>(slot % 4));
    }
    offset_ += launch.offsetIncrement;
}

std::vector<float> CudaGeneratorEmulation::randn(std::size_t count) {
    std::vector<float> out(count);
    randn(out.data(), count);
    return out;
}

}  // namespace tessera
