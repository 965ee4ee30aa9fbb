// A1111's "NV" RNG source (AUTOMATIC1111/stable-diffusion-webui modules/rng_philox.py
// Generator): a CPU imitation of torch.randn on a CUDA generator, bit for bit what that Python
// code returns.
//
// Call k (0-based) of randn on a generator seeded s gives element i the first Box-Muller output of
// one Philox4x32-10 block: key (lo32(s), hi32(s)), counter (k, 0, i, 0); words r0, r1 of the block
// make u = r0 2^-32 + 2^-33 and v = r1 2pi 2^-32 + pi 2^-32, element i = sqrt(-2 ln u) sin v.
// rng_philox.py holds the two scales as float32 numpy arrays but multiplies them with uint32
// arrays, which numpy promotes to float64: u, v, the log, the square root and the sine are double,
// and only the product is rounded to float32. Every element uses a new counter and every call
// advances the counter's first word by one, which is torch's CUDA layout when the tensor has at
// most as many elements as the GPU runs threads (kernels/ops/TorchCudaRandn.cuh); the device
// computes the same formula in float with __sincosf, so A1111 "GPU" noise and this differ by
// up to about 3e-6 (an H200 over [4,64,64] to [4,128,128]: 2.7e-6 at most, one value in six equal).
//
// The CPU engine uses this generator for A1111's "GPU" source too: the exact device noise needs
// curand on an NVIDIA GPU (kernels/ops/TorchCudaRandn.cuh).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/sampling/NormalGenerator.h"

namespace tessera {

class NvPhiloxGenerator final : public NormalGenerator {
public:
    explicit NvPhiloxGenerator(std::uint64_t seed) : seed_(seed) {}

    void randn(float* out, std::size_t count) override;
    std::vector<float> randn(std::size_t count);

    std::uint64_t seed() const { return seed_; }
    // Calls made so far: the counter word of the next call.
    std::uint32_t calls() const { return calls_; }

private:
    std::uint64_t seed_;
    std::uint32_t calls_ = 0;
};

}  // namespace tessera
