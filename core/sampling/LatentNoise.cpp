#include "core/sampling/LatentNoise.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/sampling/NvPhiloxGenerator.h"
#include "core/sampling/Philox.h"

namespace tessera {
namespace {

struct SourceName {
    NoiseSource source;
    std::string_view name;
};
constexpr SourceName kSourceNames[] = {{NoiseSource::Tessera, "tessera"},
                                       {NoiseSource::A1111Gpu, "a1111-gpu"},
                                       {NoiseSource::A1111Cpu, "a1111-cpu"},
                                       {NoiseSource::A1111Nv, "a1111-nv"},
                                       {NoiseSource::ComfyUI, "comfyui"}};

std::unique_ptr<NormalGenerator> makeNv(std::uint64_t seed) { return std::make_unique<NvPhiloxGenerator>(seed); }
std::unique_ptr<NormalGenerator> makeCpu(std::uint64_t seed) { return std::make_unique<TorchCpuGenerator>(seed); }

// Tessera's Philox noise of one image: element i = philoxNormal(seed, draw, i).
void tesseraNoise(std::uint64_t seed, std::uint32_t draw, float* out, std::size_t count) {
    for (std::size_t i = 0; i < count; ++i) out[i] = philoxNormal(seed, draw, i);
}

}  // namespace

std::string_view noiseSourceName(NoiseSource source) {
    for (const SourceName& s : kSourceNames)
        if (s.source == source) return s.name;
    return "tessera";
}

std::optional<NoiseSource> parseNoiseSource(std::string_view name) {
    for (const SourceName& s : kSourceNames)
        if (s.name == name) return s.source;
    return std::nullopt;
}

void comfyPrepareNoise(std::uint64_t seed, const LatentShape& shape, const std::vector<int>& batchIndex, float* out,
                       TorchCpuTransform transform) {
    TorchCpuGenerator generator(seed, transform);  // torch.manual_seed(seed)
    if (batchIndex.empty()) {
        generator.randn(out, shape.elements());
        return;
    }
    if (batchIndex.size() != static_cast<std::size_t>(shape.batch))
        throw std::invalid_argument("ComfyUI noise: batch_index has " + std::to_string(batchIndex.size()) +
                                    " entries for a batch of " + std::to_string(shape.batch));
    if (*std::min_element(batchIndex.begin(), batchIndex.end()) < 0)
        throw std::invalid_argument("ComfyUI noise: batch_index entries must not be negative");
    const int last = *std::max_element(batchIndex.begin(), batchIndex.end());
    const std::size_t image = shape.imageElements();
    std::vector<float> draw(image);
    for (int i = 0; i <= last; ++i) {
        generator.randn(draw.data(), image);
        for (std::size_t b = 0; b < batchIndex.size(); ++b)
            if (batchIndex[b] == i) std::copy(draw.begin(), draw.end(), out + b * image);
    }
}

LatentNoise::LatentNoise(NoiseSettings settings, LatentShape shape, NormalGeneratorFactory gpuGenerators)
    : settings_(std::move(settings)), shape_(shape), gpuGenerators_(std::move(gpuGenerators)) {
    if (shape_.batch <= 0 || shape_.channels <= 0 || shape_.height <= 0 || shape_.width <= 0)
        throw std::invalid_argument("noise: the latent's batch, channels, height and width must be positive");
    if (!gpuGenerators_) gpuGenerators_ = makeNv;
    NormalGeneratorFactory a1111Generators;
    switch (settings_.source) {
        case NoiseSource::A1111Gpu:
            a1111Generators = gpuGenerators_;
            break;
        case NoiseSource::A1111Cpu:
            a1111Generators = makeCpu;
            break;
        case NoiseSource::A1111Nv:
            a1111Generators = makeNv;
            break;
        case NoiseSource::Tessera:
        case NoiseSource::ComfyUI:
            break;
    }
    if (a1111Generators) {
        A1111NoiseOptions options;
        options.seeds = a1111ImageSeeds(settings_.seed, settings_.subseedStrength, settings_.firstImage, shape_.batch);
        options.subseeds = a1111ImageSubseeds(settings_.subseed, settings_.firstImage, shape_.batch);
        options.subseedStrength = settings_.subseedStrength;
        options.seedResizeFromWidth = settings_.seedResizeFromWidth;
        options.seedResizeFromHeight = settings_.seedResizeFromHeight;
        options.seedResizeScale = settings_.seedResizeScale;
        options.etaNoiseSeedDelta = settings_.etaNoiseSeedDelta;
        a1111_ = std::make_unique<A1111ImageRng>(shape_.channels, shape_.height, shape_.width, std::move(options),
                                                 std::move(a1111Generators));
    }
    if (settings_.source == NoiseSource::ComfyUI && !settings_.batchIndex.empty() &&
        settings_.batchIndex.size() != static_cast<std::size_t>(shape_.batch))
        throw std::invalid_argument("ComfyUI noise: batch_index has " + std::to_string(settings_.batchIndex.size()) +
                                    " entries for a batch of " + std::to_string(shape_.batch));
}

void LatentNoise::initial(float* out) {
    switch (settings_.source) {
        case NoiseSource::Tessera:
            for (int b = 0; b < shape_.batch; ++b)
                tesseraNoise(settings_.seed + static_cast<std::uint64_t>(b), 0,
                             out + static_cast<std::size_t>(b) * shape_.imageElements(), shape_.imageElements());
            tesseraDraw_ = 1;
            return;
        case NoiseSource::ComfyUI:
            comfyPrepareNoise(settings_.seed, shape_, settings_.batchIndex, out);
            return;
        case NoiseSource::A1111Gpu:
        case NoiseSource::A1111Cpu:
        case NoiseSource::A1111Nv:
            a1111_->next(out);
            return;
    }
}

void LatentNoise::step(float* out) {
    switch (settings_.source) {
        case NoiseSource::Tessera:
            if (tesseraDraw_ == 0) tesseraDraw_ = 1;
            for (int b = 0; b < shape_.batch; ++b)
                tesseraNoise(settings_.seed + static_cast<std::uint64_t>(b), tesseraDraw_,
                             out + static_cast<std::size_t>(b) * shape_.imageElements(), shape_.imageElements());
            ++tesseraDraw_;
            return;
        case NoiseSource::ComfyUI:
            if (!comfySteps_) comfySteps_ = gpuGenerators_(settings_.seed);
            comfySteps_->randn(out, shape_.elements());
            return;
        case NoiseSource::A1111Gpu:
        case NoiseSource::A1111Cpu:
        case NoiseSource::A1111Nv:
            a1111_->next(out);
            return;
    }
}

NoiseSource noiseSourceOf(RngSource source) {
    switch (source) {
        case RngSource::CPU:
            return NoiseSource::A1111Cpu;
        case RngSource::GPU:
            return NoiseSource::A1111Gpu;
        case RngSource::NV:
            return NoiseSource::A1111Nv;
        case RngSource::ComfyUI:
            return NoiseSource::ComfyUI;
        case RngSource::Tessera:
            break;
    }
    return NoiseSource::Tessera;
}

NoiseSettings runNoiseSettings(const RunConfig& config, int pixelScale) {
    NoiseSettings settings;
    settings.source = noiseSourceOf(config.noiseSource);
    settings.seed = config.seed;
    settings.subseed = config.variationSeed;
    settings.subseedStrength = config.variationStrength;
    settings.seedResizeFromWidth = config.seedResizeFromWidth;
    settings.seedResizeFromHeight = config.seedResizeFromHeight;
    settings.seedResizeScale = std::max(pixelScale, 1);
    settings.etaNoiseSeedDelta = config.etaNoiseSeedDelta;
    return settings;
}

void fillInitialNoise(NoiseSource source, std::uint64_t seed, const LatentShape& shape, float* out) {
    NoiseSettings settings;
    settings.source = source;
    settings.seed = seed;
    LatentNoise(std::move(settings), shape).initial(out);
}

}  // namespace tessera
