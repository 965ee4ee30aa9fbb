// UNet2DModel configuration, read from a diffusers config.json with the library's
// defaults for missing keys (diffusers models/unets/unet_2d.py UNet2DModel.__init__). Qt-free.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/run/RunConfig.h"

namespace tessera {

// The config.json values Tessera accepts: what published UNets use (google/ddpm-*, and the
// Stable Diffusion family that comes next), with room to spare. unetConfigFromJson checks
// them before anything is sized from a config, so every count derived from one (tensor list,
// channel sums, 4 x channels time embedding) stays small and fits an int. Shaped like the other
// families' tables (vae_config_bounds, unet_cond_bounds) on purpose: each follows its own configs.
namespace unet_config_bounds {
// Resolution levels: SDXL has 3, SD 1.x/2.x 4, google/ddpm-*-256 6, ADM ImageNet-512 7.
inline constexpr int kMaxLevels = 8;
// Channels of one level: ddpm peaks at 512, SD and SDXL at 1280.
inline constexpr int kMaxBlockChannels = 4096;
// Resnets per down block: 2 in ddpm and SD, up to 4 in larger UNets.
inline constexpr int kMaxLayersPerBlock = 8;
// Image/latent channels in or out: 3 (pixels), 4 (SD latents), 6 (learned variance), 7 or 9
// (upscaler, inpainting), 16 (newer latent spaces).
inline constexpr int kMaxSampleChannels = 64;
// sample_size: 32-256 for ddpm pixel models, 64-128 for SD latents.
inline constexpr int kMaxSampleSize = 1024;
// time_embedding_dim: 4 x block_out_channels[0] by default.
inline constexpr int kMaxTimeEmbeddingDim = 4 * kMaxBlockChannels;
// num_train_timesteps: 1000 in every published UNet (4000 in improved DDPM).
inline constexpr int kMaxTrainTimesteps = 100'000;
}  // namespace unet_config_bounds

enum class DownBlockType { Down, AttnDown };
enum class UpBlockType { Up, AttnUp };
enum class TimeScaleShift { Default, ScaleShift };

struct UNetConfig {
    int sampleSize = 0;  // 0 = not given
    int inChannels = 3;
    int outChannels = 3;
    bool centerInputSample = false;
    std::optional<int> timeEmbeddingDim;  // null -> 4*C0
    int freqShift = 0;
    bool flipSinToCos = true;
    std::vector<DownBlockType> downBlocks{DownBlockType::Down, DownBlockType::AttnDown, DownBlockType::AttnDown,
                                          DownBlockType::AttnDown};
    std::vector<UpBlockType> upBlocks{UpBlockType::AttnUp, UpBlockType::AttnUp, UpBlockType::AttnUp, UpBlockType::Up};
    std::vector<int> blockOutChannels{224, 448, 672, 896};
    bool hasMidBlock = true;
    int layersPerBlock = 2;
    float midBlockScaleFactor = 1.0f;
    int downsamplePadding = 1;
    std::optional<int> attentionHeadDim = 8;  // null -> one head of width C
    int normNumGroups = 32;
    std::optional<int> attnNormNumGroups;
    float normEps = 1e-5f;
    TimeScaleShift resnetTimeScaleShift = TimeScaleShift::Default;
    bool addAttention = true;

    int levels() const { return static_cast<int>(blockOutChannels.size()); }
    int downsampleFactor() const { return 1 << (levels() - 1); }
    int timeEmbedDim() const { return timeEmbeddingDim.value_or(4 * blockOutChannels.at(0)); }
    // Heads of an attention layer with C channels.
    int headsFor(int channels) const { return attentionHeadDim ? channels / *attentionHeadDim : 1; }
    ModelLimits limits(int numTrainTimesteps = 1000) const {
        return ModelLimits{downsampleFactor(), numTrainTimesteps, inChannels};
    }
};

// Parses config.json text. Unsupported values (time_embedding_type other than
// "positional", class embeddings, unknown block types, act_fn other than silu,
// downsample_type/upsample_type "resnet") and values outside unet_config_bounds throw
// std::runtime_error naming the key, the allowed range and why. Unknown keys are ignored
// with one spdlog warning (their count and the first few names). Callers parse the file
// through BoundedInput (size and depth bounded) first.
UNetConfig unetConfigFromJson(const nlohmann::json&);
nlohmann::json toJson(const UNetConfig&);

}  // namespace tessera
