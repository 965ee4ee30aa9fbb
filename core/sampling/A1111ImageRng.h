// A1111's per-image noise (AUTOMATIC1111/stable-diffusion-webui modules/rng.py ImageRNG, with
// the seeds of modules/processing.py process_images_inner): one generator per image, variation
// seeds blended in by slerp, "seed resize from" pasting noise drawn at another size into the
// centre, and the eta-noise-seed-delta (ENSD) reseed for the ancestral steps.
//
// next(), first call (ImageRNG.first), for each image with seed s:
//   1. with a variation strength != 0: subnoise = the first draw of a fresh generator seeded with
//      the image's variation seed, at the noise shape;
//   2. noise = the first draw of the image's generator (seeded s), at the latent shape; with seed
//      resize the noise shape is [C, resizeH / 8, resizeW / 8] (seedResizeScale) and noise comes from a fresh
//      generator seeded s instead;
//   3. with variation: noise = a1111Slerp(strength, noise, subnoise);
//   4. with seed resize: the image's generator draws the latent-shaped x (its first draw) and the
//      noise is pasted into x's centre (a1111PasteCentred);
//   5. after all images, a non-zero ENSD replaces every image's generator by one seeded s + ENSD.
// Later calls (ancestral noise, A1111 sd_samplers_common.py TorchHijack.randn_like): one draw
// per image from its generator. The generator kind is the RNG source: TorchCpuGenerator for
// "CPU", NvPhiloxGenerator for "NV" and, on the CPU engine, for "GPU" as well (the device
// generator of kernels/ops/TorchCudaRandn.cuh on the CUDA engine).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/sampling/NormalGenerator.h"

namespace tessera {

struct A1111NoiseOptions {
    std::vector<std::uint64_t> seeds;     // one per image of the batch (a1111ImageSeeds)
    std::vector<std::uint64_t> subseeds;  // variation seeds (a1111ImageSubseeds); missing ones are 0
    double subseedStrength = 0.0;         // "Variation strength"; 0 = off
    int seedResizeFromWidth = 0;          // "Resize seed from width/height" in pixels; 0 = off
    int seedResizeFromHeight = 0;
    // Image pixels per latent pixel: the resized noise is [C, resizeH / scale, resizeW / scale]
    // (A1111 divides by its latent factor 8; a model sampled in image space has 1).
    int seedResizeScale = 8;
    std::int64_t etaNoiseSeedDelta = 0;  // ENSD
};

// processing.py process_images_inner: image x of the job (0-based over n_iter x batch_size) has
// seed + x when the variation strength is 0, else seed, and variation seed subseed + x. `first`
// is the job index of the batch's first image.
std::vector<std::uint64_t> a1111ImageSeeds(std::uint64_t seed, double subseedStrength, int first, int count);
std::vector<std::uint64_t> a1111ImageSubseeds(std::uint64_t subseed, int first, int count);

class A1111ImageRng {
public:
    // channels x height x width: one image's latent. generators: the RNG source's generator.
    // Throws std::invalid_argument for an empty seed list, a non-positive dimension or a missing
    // factory.
    A1111ImageRng(int channels, int height, int width, A1111NoiseOptions options, NormalGeneratorFactory generators);

    int batch() const { return static_cast<int>(options_.seeds.size()); }
    std::size_t imageElements() const;

    // ImageRNG.next(): out receives batch() x channels x height x width floats, the initial latents
    // on the first call and one ancestral step's noise on each later one.
    void next(float* out);
    std::vector<float> next();

private:
    void first(float* out);

    int channels_, height_, width_;
    A1111NoiseOptions options_;
    NormalGeneratorFactory makeGenerator_;
    std::vector<std::unique_ptr<NormalGenerator>> generators_;
    bool isFirst_ = true;
};

// rng.py slerp(val, low, high) over [channels, height, width] tensors: norms and dot products run
// over the height axis (torch dim 1), one interpolation angle per (channel, column). When the mean
// dot product exceeds 0.9995 the result is low * val + high * (1 - val), weights as A1111 writes
// them. Products and sums of the result are float as torch computes them; the norms, angles and
// weights are computed in double (torch's float reductions and Sleef trigonometry are not
// reproduced bit for bit: the result agrees to a few float ulps).
void a1111Slerp(double val, const float* low, const float* high, float* out, int channels, int height, int width);

// The seed-resize paste of ImageRNG.first: `noise` (channels x noiseHeight x noiseWidth) is
// centred on `x` (channels x height x width): offsets (height - noiseHeight) // 2 and
// (width - noiseWidth) // 2 (floor division), a negative offset cropping the noise on both sides.
void a1111PasteCentred(const float* noise, int noiseHeight, int noiseWidth, float* x, int channels, int height,
                       int width);

}  // namespace tessera
