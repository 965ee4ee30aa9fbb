// torch's CPU generator and torch.randn(float32) on it, bit for bit: the noise of A1111's "CPU"
// RNG source (modules/rng.py create_generator with a CPU device) and of every ComfyUI initial
// latent (comfy/sample.py prepare_noise).
//
// Sources followed (pytorch/pytorch):
//   aten/src/ATen/CPUGeneratorImpl.cpp       set_current_seed, random, random64
//   aten/src/ATen/core/MT19937RNGEngine.h     mt19937 seeded with the seed's low 32 bits
//   aten/src/ATen/core/TransformationHelper.h uniform_real: (bits & (2^digits - 1)) * 2^-digits
//   aten/src/ATen/core/DistributionsHelper.h  normal_distribution<double> and its cached sample
//   aten/src/ATen/native/cpu/DistributionTemplates.h normal_kernel, normal_fill(_AVX2),
//                                             normal_fill_16(_AVX2)
//
// torch.randn of count elements on this generator:
//   count >= 16: count float uniforms are drawn into the output, every full block of 16 is turned
//     into normals in place (element j pairs with j + 8: radius from the first, angle from the
//     second), and when count % 16 != 0 the last 16 slots are drawn again and transformed again.
//   count < 16: one double Box-Muller pair per two elements; the second value of a pair is kept in
//     the generator and returned by the next element, in this call or a later one.
// The block transform exists twice in torch, and which one runs decides the bits:
//   Avx2:   torch's AVX2 kernel (x86-64 builds on a CPU with AVX2, also chosen on AVX-512 CPUs):
//           Cephes' single-precision log and sincos polynomials evaluated as the x86 builds
//           compile them, with fused multiply-adds where those builds fuse (explicit std::fma
//           here, so the result does not depend on this build's flags);
//   Scalar: torch's portable kernel (ATEN_CPU_CAPABILITY=default, CPUs without AVX2, ARM
//           builds): the C library's logf, cosf, sinf (bit-exact against glibc's).
// The default is Avx2: what A1111 and ComfyUI users on x86-64 get.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "core/sampling/NormalGenerator.h"

namespace tessera {

enum class TorchCpuTransform { Avx2, Scalar };

class TorchCpuGenerator final : public NormalGenerator {
public:
    // torch's default CPU seed (c10/core/GeneratorImpl.h default_rng_seed_val).
    static constexpr std::uint64_t kDefaultSeed = 67280421310721ull;

    explicit TorchCpuGenerator(std::uint64_t seed = kDefaultSeed,
                               TorchCpuTransform transform = TorchCpuTransform::Avx2);

    // generator.manual_seed(seed): restarts the stream and drops the cached normal sample. Only the
    // low 32 bits of the seed reach the engine (seeds s and s + k * 2^32 give the same noise).
    void manualSeed(std::uint64_t seed);

    // One 32-bit engine output, and two of them as (first << 32) | second (random64).
    std::uint32_t random();
    std::uint64_t random64();

    void randn(float* out, std::size_t count) override;
    std::vector<float> randn(std::size_t count);

    TorchCpuTransform transform() const { return transform_; }

private:
    double normalDouble();

    std::mt19937 engine_;
    std::optional<double> nextDoubleNormal_;
    TorchCpuTransform transform_;
};

// The two block transforms on their own: data[0..16) holds 16 uniforms in [0, 1); on return it
// holds 16 normals (data[j] = r_j cos t_j, data[j + 8] = r_j sin t_j).
void torchNormalFill16(float* data, TorchCpuTransform transform);

}  // namespace tessera
