// torch.randn on a CUDA generator, emulated on the CPU for a given GPU size: the Philox stream
// and torch's element layout exactly (core/sampling/TorchCudaRandnLaunch.h: thread, component,
// offset), the Box-Muller transform as curand writes it (NVIDIA curand_normal.h
// _curand_box_muller, curand_box_muller4) but with double log, sine and cosine in place of the
// device's logf and __sincosf, whose exact results are not specified. Values agree with the device
// within 2.5e-6 (an H200, up to [4,256,320]), about one in five bit-identical. For tensors of at
// most T elements this is A1111's NV source up to the float rounding of u and v
// (NvPhiloxGenerator is that source exactly).
// The reference the CUDA kernel is checked against where no recorded device output exists.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/sampling/NormalGenerator.h"

namespace tessera {

class CudaGeneratorEmulation final : public NormalGenerator {
public:
    // threadCap: the emulated GPU's torchCudaThreadCap (core/sampling/TorchCudaRandnLaunch.h).
    CudaGeneratorEmulation(std::uint64_t seed, std::uint64_t threadCap) : seed_(seed), threadCap_(threadCap) {}

    void randn(float* out, std::size_t count) override;
    std::vector<float> randn(std::size_t count);

    std::uint64_t seed() const { return seed_; }
    std::uint64_t threadCap() const { return threadCap_; }
    // The generator's Philox offset (torch's philox_offset_per_thread): 0 after seeding, then the
    // sum of the calls' increments.
    std::uint64_t philoxOffset() const { return offset_; }

private:
    std::uint64_t seed_;
    std::uint64_t threadCap_;
    std::uint64_t offset_ = 0;
};

}  // namespace tessera
