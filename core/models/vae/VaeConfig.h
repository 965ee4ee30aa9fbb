// AutoencoderKL (the Stable Diffusion VAE) configuration, read from a diffusers config.json with
// AutoencoderKL.__init__'s defaults for missing keys (diffusers
// models/autoencoders/autoencoder_kl.py). Qt-free.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tessera {

// The values Tessera accepts, checked before anything is sized from a config. Apart from
// unet_config_bounds, and shaped like it, though some values agree: each table follows its own
// family's configs.
namespace vae_config_bounds {
// Resolution levels: 4 in SD 1.x/2.x/XL (scale factor 8); 8 keeps the factor at most 128.
inline constexpr int kMaxLevels = 8;
// Channels of one level: SD's VAE peaks at 512.
inline constexpr int kMaxBlockChannels = 4096;
// Resnets per encoder block (the decoder has one more): 2 in SD.
inline constexpr int kMaxLayersPerBlock = 8;
// Image channels in or out: 3 (RGB), 4 with alpha.
inline constexpr int kMaxImageChannels = 64;
// Latent channels: 4 in SD, 16 in newer latent spaces.
inline constexpr int kMaxLatentChannels = 64;
// sample_size (pixels; only for tiling): 512 (SD 1.x), 768 (SD 2), 1024 (SDXL).
inline constexpr int kMaxSampleSize = 8192;
}  // namespace vae_config_bounds

struct VaeConfig {
    int inChannels = 3;
    int outChannels = 3;
    std::vector<int> blockOutChannels{64};  // one DownEncoderBlock2D and one UpDecoderBlock2D per entry
    int layersPerBlock = 1;
    int latentChannels = 4;
    int normNumGroups = 32;
    int sampleSize = 32;  // a [h, w] sample_size is recorded by its height (as diffusers' tiling does)
    float scalingFactor = 0.18215f;
    std::optional<float> shiftFactor;               // null: not used by SD pipelines
    std::optional<std::vector<float>> latentsMean;  // null, or latent_channels values (Playground)
    std::optional<std::vector<float>> latentsStd;
    bool forceUpcast = true;  // recorded: run in float32 (or bf16) unless false (SDXL's VAE
                              // overflows in fp16: StableDiffusionXLPipeline upcasts it)
    bool useQuantConv = true;
    bool usePostQuantConv = true;
    bool midBlockAddAttention = true;

    // Every GroupNorm of AutoencoderKL has this eps (hard-coded in diffusers' Encoder/Decoder).
    static constexpr float kNormEps = 1e-6f;

    int levels() const { return static_cast<int>(blockOutChannels.size()); }
    // Pixels per latent along each axis: 2^(levels - 1), 8 for SD.
    int scaleFactor() const { return 1 << (levels() - 1); }
};

// Parses config.json. Unsupported values (block types other than DownEncoderBlock2D /
// UpDecoderBlock2D, act_fn other than silu, block counts that differ from block_out_channels,
// norm_num_groups not dividing every width) and values outside vae_config_bounds throw
// std::runtime_error "config.json: <key> = <excerpt>: <what is allowed>". Unknown keys are
// ignored with one spdlog warning. Callers parse the file through BoundedInput first.
VaeConfig vaeConfigFromJson(const nlohmann::json&);
nlohmann::json toJson(const VaeConfig&);

}  // namespace tessera
