// The interface of a seeded normal-noise stream with torch.Generator semantics: each randn call
// continues the stream where the previous one stopped, so an image's generator gives its
// initial noise first and its ancestral step noise after (A1111 modules/rng.py ImageRNG).
// Implemented by TorchCpuGenerator (torch's CPU generator), NvPhiloxGenerator (A1111's "NV"
// emulation of torch's CUDA generator) and, on the CUDA engine, a device generator running
// torch's curand layout (kernels/ops/TorchCudaRandn.cuh).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

namespace tessera {

class NormalGenerator {
public:
    NormalGenerator() = default;
    NormalGenerator(const NormalGenerator&) = default;
    NormalGenerator& operator=(const NormalGenerator&) = default;
    NormalGenerator(NormalGenerator&&) = default;
    NormalGenerator& operator=(NormalGenerator&&) = default;
    virtual ~NormalGenerator() = default;

    // torch.randn(count, dtype=float32, generator=this): writes out[0 .. count). One call is one
    // torch call (the split of a tensor into calls changes the values).
    virtual void randn(float* out, std::size_t count) = 0;
};

// Makes a freshly seeded generator (torch.Generator(device).manual_seed(seed)).
using NormalGeneratorFactory = std::function<std::unique_ptr<NormalGenerator>(std::uint64_t seed)>;

}  // namespace tessera
