// The starting noise x_T of a latent and the noise of each ancestral step, from one of the seed
// conventions users bring from other programs, so that a seed gives the image it gives there:
//   Tessera   Philox noise keyed by (seed, draw, element) (core/sampling/Philox.h): draw 0 for
//             x_T, draw k + 1 for the k-th step() call; image b of a batch uses seed + b.
//   A1111Gpu  A1111's default "GPU" RNG (modules/rng.py, randn_source "GPU"): torch's CUDA
//             generator per image (A1111ImageRng). On the CPU engine it is NV's emulation
//             (NvPhiloxGenerator), within about 3e-6 of the device values; the CUDA engine
//             passes its device generator (kernels/ops/TorchCudaRandn.cuh) as gpuGenerators.
//   A1111Cpu  A1111's "CPU" RNG: torch's CPU generator per image (TorchCpuGenerator), exact.
//   A1111Nv   A1111's "NV" RNG: rng_philox.py's generator per image (NvPhiloxGenerator), exact.
//   ComfyUI   ComfyUI (comfy/sample.py prepare_noise): x_T is one torch CPU randn over the whole
//             [B, C, H, W] latent seeded with the seed (exact); its ancestral noise
//             (comfy/k_diffusion/sampling.py default_noise_sampler) is one randn of the whole
//             batch per step from a generator on the model's device seeded with the seed: the
//             GPU's generator (gpuGenerators; NV's emulation of it on the CPU engine). A
//             CPU-only ComfyUI seeds a CPU generator with seed + 1 instead.
// The noise is unscaled (standard normal); the scheduler scales x_T (k-diffusion: by sigma_max).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "core/run/RunConfig.h"
#include "core/sampling/A1111ImageRng.h"
#include "core/sampling/NormalGenerator.h"
#include "core/sampling/TorchCpuGenerator.h"

namespace tessera {

enum class NoiseSource { Tessera, A1111Gpu, A1111Cpu, A1111Nv, ComfyUI };

// "tessera", "a1111-gpu", "a1111-cpu", "a1111-nv", "comfyui"; parse takes the same names.
std::string_view noiseSourceName(NoiseSource source);
std::optional<NoiseSource> parseNoiseSource(std::string_view name);

// A [batch, channels, height, width] float32 latent (height and width in latent pixels).
struct LatentShape {
    int batch = 1, channels = 4, height = 0, width = 0;
    std::size_t imageElements() const {
        return static_cast<std::size_t>(channels) * static_cast<std::size_t>(height) * static_cast<std::size_t>(width);
    }
    std::size_t elements() const { return static_cast<std::size_t>(batch) * imageElements(); }
};

struct NoiseSettings {
    NoiseSource source = NoiseSource::Tessera;
    std::uint64_t seed = 0;
    // A1111 sources (A1111ImageRng): the job index of this batch's first image (seeds seed + index
    // without variation), the variation seed and strength, "resize seed from" in pixels (0 = off)
    // and ENSD.
    int firstImage = 0;
    std::uint64_t subseed = 0;
    double subseedStrength = 0.0;
    int seedResizeFromWidth = 0, seedResizeFromHeight = 0;
    int seedResizeScale = 8;  // image pixels per latent pixel (A1111NoiseOptions::seedResizeScale)
    std::int64_t etaNoiseSeedDelta = 0;
    // ComfyUI: the latent's batch_index (latents picked from a larger batch); empty = 0 .. B - 1.
    std::vector<int> batchIndex;
};

// ComfyUI prepare_noise: without batchIndex one torch.randn of the whole [B, C, H, W] on a CPU
// generator seeded `seed`; with it, draws of [1, C, H, W] one after the other from that
// generator up to the largest index, image b receiving draw batchIndex[b] (indices may repeat;
// their count is the batch). Throws std::invalid_argument for a negative index or a batchIndex
// whose size is not shape.batch.
void comfyPrepareNoise(std::uint64_t seed, const LatentShape& shape, const std::vector<int>& batchIndex, float* out,
                       TorchCpuTransform transform = TorchCpuTransform::Avx2);

// One run's noise. Not thread-safe; keep it for the whole run (the A1111 and ComfyUI generators
// carry their state from x_T to the steps).
class LatentNoise {
public:
    // gpuGenerators: the device generator for A1111Gpu and ComfyUI's steps; empty = the CPU
    // engine's NV emulation. Throws std::invalid_argument for an empty shape or bad settings.
    LatentNoise(NoiseSettings settings, LatentShape shape, NormalGeneratorFactory gpuGenerators = {});

    const LatentShape& shape() const { return shape_; }

    // x_T: shape().elements() floats. Call once, before step().
    void initial(float* out);
    // The next ancestral step's noise: shape().elements() floats.
    void step(float* out);

private:
    NoiseSettings settings_;
    LatentShape shape_;
    NormalGeneratorFactory gpuGenerators_;
    std::unique_ptr<A1111ImageRng> a1111_;
    std::unique_ptr<NormalGenerator> comfySteps_;
    std::uint32_t tesseraDraw_ = 0;
};

// A run's noise source: Tessera, A1111Cpu, A1111Gpu or A1111Nv.
NoiseSource noiseSourceOf(RngSource source);

// The noise of a run (one image: the job's first): config's source, seed, variation seed and
// strength, seed resize (in image pixels; pixelScale image pixels per canvas pixel, 8 for Stable
// Diffusion's latents) and ENSD.
NoiseSettings runNoiseSettings(const RunConfig& config, int pixelScale);

// The initial noise of `source` for `seed` over a [B, C, H, W] latent (B = 1: one [C, H, W]
// image), with the default settings otherwise: LatentNoise(...).initial(out).
void fillInitialNoise(NoiseSource source, std::uint64_t seed, const LatentShape& shape, float* out);

}  // namespace tessera
