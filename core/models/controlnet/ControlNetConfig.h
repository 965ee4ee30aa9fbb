// ControlNetModel (diffusers models/controlnets/controlnet.py; the original is ControlNet-v1-1's
// cldm/cldm.py ControlNet) configuration: a copy of a UNet2DConditionModel's encoder half (conv_in,
// time and SDXL text-time embedding, down blocks, mid block), a small hint encoder
// (ControlNetConditioningEmbedding) and one 1x1 "zero" convolution per skip tensor. Read from a
// diffusers config.json with ControlNetModel.__init__'s defaults for missing keys. Qt-free.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/models/sd/SdModel.h"
#include "core/models/sd/UNetCondConfig.h"

namespace tessera {

// The values Tessera accepts beyond the UNet's bounds (which apply too), each with what
// published ControlNets use.
namespace controlnet_bounds {
// conditioning_channels: the hint image's channels, 3 (RGB) in every published ControlNet.
inline constexpr int kMaxConditioningChannels = 64;
// conditioning_embedding_out_channels: 4 entries (16, 32, 96, 256), so 3 stride-2 convolutions: a
// hint 8x the latent.
inline constexpr int kMaxEmbeddingLevels = 6;
inline constexpr int kMaxEmbeddingChannels = 4096;
}  // namespace controlnet_bounds

// mid_block_type: UNetMidBlock2DCrossAttn (resnet, transformer, resnet) or UNetMidBlock2D built
// with num_layers=0 (one resnet, no attention).
enum class ControlNetMidBlock { CrossAttn, Resnet };

struct ControlNetConfig {
    // The UNet encoder copy, in UNet2DConditionModel's fields (ControlNetModel.__init__ passes the
    // same values to get_down_block and the mid block). ControlNetModel has no up blocks, output
    // head, conv kernel sizes or time_embedding_dim: those fields keep their defaults (the up-block
    // list mirrors the down blocks) and are never built.
    UNetCondConfig unet;
    ControlNetMidBlock midBlock = ControlNetMidBlock::CrossAttn;
    int conditioningChannels = 3;  // the hint image's channels
    // ControlNetConditioningEmbedding's widths: conv_in to the first, then per step a stride-1 and a
    // stride-2 convolution, conv_out to block_out_channels[0].
    std::vector<int> conditioningEmbeddingOutChannels{16, 32, 96, 256};
    bool bgr = false;  // controlnet_conditioning_channel_order "bgr": the hint's channels reversed first
    // global_pool_conditions (shuffle models): every residual is replaced by its spatial mean
    // (ControlNetModel.forward step 6).
    bool globalPoolConditions = false;

    // Down residuals: 1 (conv_in + hint) + per level its layers and, but for the last, its
    // downsampler; 12 for SD 1.x/2.x, 9 for SDXL. The mid residual comes after them.
    int downResiduals() const;
    // The hint is this many times the latent's height and width: 2^(embedding widths - 1), 8.
    int hintFactor() const { return 1 << (static_cast<int>(conditioningEmbeddingOutChannels.size()) - 1); }
    // Channels of residual k (0 .. downResiduals(); the last is the mid residual's) and its
    // resolution level (the latent divided by 2^level).
    int residualChannels(int k) const;
    int residualLevel(int k) const;
};

// Parses a ControlNetModel config.json. The UNet keys are read and range-checked by
// unetCondConfigFromJson (so its messages apply: "config.json: <key> = <excerpt>: <what is
// allowed>"); ControlNet's own keys here: conditioning_channels, conditioning_embedding_out_channels,
// controlnet_conditioning_channel_order ("rgb" / "bgr"), global_pool_conditions, mid_block_type
// ("UNetMidBlock2DCrossAttn" / "UNetMidBlock2D"), num_attention_heads (the head counts when given,
// as diffusers' `num_attention_heads or attention_head_dim`). encoder_hid_dim(_type) is accepted
// and unused: ControlNetModel.forward never applies encoder_hid_proj. Unknown keys are ignored with
// one spdlog warning. Throws std::runtime_error for anything else it cannot run.
ControlNetConfig controlNetConfigFromJson(const nlohmann::json&);

// The Stable Diffusion family a ControlNet belongs to (the UNet it must be used with): SDXL with
// the text-time embedding, SD 2.x with a 1024-wide text context (OpenCLIP ViT-H), SD 1.x with a
// 768-wide one; other widths (test models) by the projection kind (Linear: SD 2.x). `reason` says
// which it was.
SdFamily controlNetFamily(const ControlNetConfig&, std::string* reason = nullptr);

// Why the residuals of this ControlNet cannot be added to `unet`'s skips (different input
// channels, widths, layers per level, text context or text-time embedding), naming both values;
// empty when they can.
std::string controlNetUNetMismatch(const ControlNetConfig&, const UNetCondConfig& unet);

// diffusers' guess-mode weights (ControlNetModel.forward, guess_mode without global pooling:
// torch.logspace(-1, 0, N + 1)): residual k of N down residuals gets 10^(k/N - 1), the mid
// residual 1, as float32 values (torch.logspace's default dtype).
std::vector<float> guessModeScales(int downResiduals);

}  // namespace tessera
