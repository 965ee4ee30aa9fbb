// The steps of torch's kernels that are not fused must round after the multiply (the fused ones
// are explicit std::fma): no contraction (GCC contracts by default where the target has FMA).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "core/sampling/TorchCpuGenerator.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <numbers>

namespace tessera {
namespace {

// Cephes single-precision constants (Stephen L. Moshier's Cephes Math Library, single/logf.c,
// single/sinf.c, single/cosf.c), as the AVX port used by torch declares them: double literals
// rounded to float, so they are converted the same way here.
constexpr float f32(double v) { return static_cast<float>(v); }

constexpr float kSqrtHalf = f32(0.707106781186547524);
// logf: log(1 + x) = x - x^2/2 + x^3 P(x) on [sqrt(1/2) - 1, sqrt(2) - 1], P highest degree first.
constexpr float kLogP[9] = {f32(7.0376836292E-2),  f32(-1.1514610310E-1), f32(1.1676998740E-1),
                            f32(-1.2420140846E-1), f32(1.4249322787E-1),  f32(-1.6668057665E-1),
                            f32(2.0000714765E-1),  f32(-2.4999993993E-1), f32(3.3333331174E-1)};
// ln 2 split into a part exact in a few bits and a correction.
constexpr float kLn2Lo = f32(-2.12194440e-4);
constexpr float kLn2Hi = f32(0.693359375);

constexpr float kFourOverPi = f32(1.27323954473516);
// pi/4 in three parts (Cody-Waite reduction), negated.
constexpr float kMinusPiOver4A = f32(-0.78515625);
constexpr float kMinusPiOver4B = f32(-2.4187564849853515625e-4);
constexpr float kMinusPiOver4C = f32(-3.77489497744594108e-8);
constexpr float kSinP[3] = {f32(-1.9515295891E-4), f32(8.3321608736E-3), f32(-1.6666654611E-1)};
constexpr float kCosP[3] = {f32(2.443315711809948E-005), f32(-1.388731625493765E-003), f32(4.166664568298827E-002)};

// Natural logarithm of x > 0 as torch's AVX2 kernel computes it (avx_mathfun.h log256_ps, a
// port of Cephes logf): x = m 2^e with m in [sqrt(1/2), sqrt(2)), log x = e ln 2 + log m.
// The fused steps are the multiply-adds that the x86-64 builds of torch contract (GCC,
// -mfma, -ffp-contract=fast): the Horner steps, (y x) z + e lnLo, y - z/2 and x + e lnHi.
float cephesLog(float x) {
    x = std::max(x, FLT_MIN);  // subnormals are cut off, as the port does
    const auto bits = std::bit_cast<std::uint32_t>(x);
    float e = static_cast<float>(static_cast<int>(bits >> 23) - 127) + 1.0f;
    const float m = std::bit_cast<float>((bits & ~0x7f800000u) | std::bit_cast<std::uint32_t>(0.5f));  // [0.5, 1)
    float r = m - 1.0f;
    if (m < kSqrtHalf) {
        e = e - 1.0f;
        r = r + m;  // 2m - 1
    }
    const float z = r * r;
    float y = kLogP[0];
    for (int k = 1; k < 9; ++k) y = std::fma(y, r, kLogP[k]);
    y = y * r;
    y = std::fma(y, z, e * kLn2Lo);
    y = std::fma(-z, 0.5f, y);
    r = r + y;
    return std::fma(e, kLn2Hi, r);
}

// sin and cos of x as torch's AVX2 kernel computes them (avx_mathfun.h sincos256_ps, a port
// of Cephes sinf/cosf): j = the even integer nearest above |x| 4/pi, |x| reduced by j pi/4 in
// three fused steps, then the sine or cosine polynomial on [-pi/4, pi/4] picked and signed by j.
// Accurate for |x| < 8192; the noise only needs [0, 2 pi).
void cephesSinCos(float x, float& sinOut, float& cosOut) {
    const bool negative = std::signbit(x);
    float a = std::fabs(x);
    const int j = (static_cast<int>(a * kFourOverPi) + 1) & ~1;
    const auto y = static_cast<float>(j);
    a = std::fma(y, kMinusPiOver4A, a);
    a = std::fma(y, kMinusPiOver4B, a);
    a = std::fma(y, kMinusPiOver4C, a);
    const float z = a * a;

    float c = std::fma(kCosP[0], z, kCosP[1]);
    c = std::fma(c, z, kCosP[2]);
    c = c * z;
    c = std::fma(c, z, -(z * 0.5f));
    c = c + 1.0f;

    float s = std::fma(kSinP[0], z, kSinP[1]);
    s = std::fma(s, z, kSinP[2]);
    s = s * z;
    s = std::fma(s, a, a);

    // The port selects between the polynomials with bit masks and adds the two masked values,
    // one of which is +0: that sum turns a -0 into +0, hence the + 0.0f.
    const bool sinFromSinPolynomial = (j & 2) == 0;
    float sinValue = (sinFromSinPolynomial ? s : c) + 0.0f;
    float cosValue = (sinFromSinPolynomial ? c : s) + 0.0f;
    if (negative != ((j & 4) != 0)) sinValue = -sinValue;
    if (((j - 2) & 4) == 0) cosValue = -cosValue;
    sinOut = sinValue;
    cosOut = cosValue;
}

// 2 pi as torch's kernels hold it: float(2 * pi) for the AVX2 kernel, a double product in the
// portable one.
constexpr float kTwoPiFloat = f32(2.0 * std::numbers::pi);
constexpr double kTwoPiDouble = 2.0 * std::numbers::pi;

// DistributionTemplates.h normal_fill_16_AVX2 (mean 0, std 1: the final fmadd(n, 1, 0) is n + 0).
void normalFill16Avx2(float* data) {
    for (int j = 0; j < 8; ++j) {
        const float u1 = 1.0f - data[j];  // [0, 1) -> (0, 1] for the log
        const float u2 = data[j + 8];
        const float radius = std::sqrt(-2.0f * cephesLog(u1));
        float s = 0.0f, c = 0.0f;
        cephesSinCos(kTwoPiFloat * u2, s, c);
        data[j] = radius * c + 0.0f;
        data[j + 8] = radius * s + 0.0f;
    }
}

// DistributionTemplates.h normal_fill_16<float> (mean 0, std 1): the C library's float functions,
// the angle rounded to float from a double product.
void normalFill16Scalar(float* data) {
    for (int j = 0; j < 8; ++j) {
        const float u1 = 1.0f - data[j];
        const float u2 = data[j + 8];
        const float radius = std::sqrt(-2.0f * std::log(u1));
        const auto theta = static_cast<float>(kTwoPiDouble * static_cast<double>(u2));
        data[j] = radius * std::cos(theta) * 1.0f + 0.0f;
        data[j + 8] = radius * std::sin(theta) * 1.0f + 0.0f;
    }
}

// TransformationHelper.h uniform_real for float: the low 24 bits of one engine output.
float uniformFloat(std::uint32_t bits) { return static_cast<float>(bits & 0xFFFFFFu) * (1.0f / 16777216.0f); }

// The same for double: the low 53 bits of a 64-bit draw.
double uniformDouble(std::uint64_t bits) {
    return static_cast<double>(bits & ((std::uint64_t{1} << 53) - 1)) * (1.0 / 9007199254740992.0);
}

}  // namespace

void torchNormalFill16(float* data, TorchCpuTransform transform) {
    if (transform == TorchCpuTransform::Avx2)
        normalFill16Avx2(data);
    else
        normalFill16Scalar(data);
}

TorchCpuGenerator::TorchCpuGenerator(std::uint64_t seed, TorchCpuTransform transform) : transform_(transform) {
    manualSeed(seed);
}

void TorchCpuGenerator::manualSeed(std::uint64_t seed) {
    // MT19937RNGEngine.h init_with_uint32 is the reference init_genrand: std::mt19937 seeded with
    // the same 32 bits gives the same stream.
    engine_.seed(static_cast<std::uint32_t>(seed & 0xFFFFFFFFu));
    nextDoubleNormal_.reset();
}

std::uint32_t TorchCpuGenerator::random() { return static_cast<std::uint32_t>(engine_()); }

std::uint64_t TorchCpuGenerator::random64() {
    const std::uint64_t hi = random();
    const std::uint64_t lo = random();
    return (hi << 32) | lo;
}

// DistributionsHelper.h normal_distribution<double> with mean 0, std 1 (torch 1.13 takes
// log(1 - u2); later versions log1p(-u2), the same double but for rare last-bit cases that the
// float result does not see).
double TorchCpuGenerator::normalDouble() {
    if (nextDoubleNormal_) {
        const double cached = *nextDoubleNormal_;
        nextDoubleNormal_.reset();
        return cached * 1.0 + 0.0;
    }
    const double u1 = uniformDouble(random64());
    const double u2 = uniformDouble(random64());
    const double r = std::sqrt(-2.0 * std::log(1.0 - u2));
    const double theta = kTwoPiDouble * u1;
    nextDoubleNormal_ = r * std::sin(theta);
    return r * std::cos(theta) * 1.0 + 0.0;
}

void TorchCpuGenerator::randn(float* out, std::size_t count) {
    if (count < 16) {
        // normal_kernel's serial path: one element at a time through normal_distribution<double>.
        for (std::size_t i = 0; i < count; ++i) out[i] = static_cast<float>(normalDouble());
        return;
    }
    for (std::size_t i = 0; i < count; ++i) out[i] = uniformFloat(random());
    for (std::size_t i = 0; i + 16 <= count; i += 16) torchNormalFill16(out + i, transform_);
    if (count % 16 != 0) {
        // The tail: 16 fresh uniforms over the last 16 slots, transformed again.
        float* tail = out + count - 16;
        for (std::size_t i = 0; i < 16; ++i) tail[i] = uniformFloat(random());
        torchNormalFill16(tail, transform_);
    }
}

std::vector<float> TorchCpuGenerator::randn(std::size_t count) {
    std::vector<float> out(count);
    randn(out.data(), count);
    return out;
}

}  // namespace tessera
