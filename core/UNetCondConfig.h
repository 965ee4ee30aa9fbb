// UNet2DConditionModel (Stable Diffusion 1.x / 2.x) configuration, read from a diffusers
// unet/config.json with UNet2DConditionModel.__init__'s defaults for missing keys
// (shared/spec/sd-models.md §1.1). A struct of its own rather than more ModelConfig fields:
// the block kinds, the per-level head and depth lists and the cross-attention width are this
// family's; SDXL's keys (addition_embed_type "text_time", projection_class_embeddings_input_dim,
// per-level transformer depths) extend it next. Qt-free.
#pragma once

#include <optional>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/ModelConfig.h"

namespace tessera {

namespace unet_cond_bounds {
// cross_attention_dim: SD 1.x 768, SD 2.x 1024, SDXL 2048.
inline constexpr int kMaxCrossAttentionDim = 8192;
// Heads per transformer: SD 1.x 8, SD 2.x / SDXL up to 20.
inline constexpr int kMaxHeads = 256;
// Transformer blocks per Transformer2DModel: 1 in SD, up to 10 in SDXL.
inline constexpr int kMaxTransformerLayers = 32;
// The text context's token count: 77 per prompt chunk; long prompts concatenate chunks.
inline constexpr int kMaxContextTokens = 77 * 16;
}  // namespace unet_cond_bounds

enum class CondDownBlock { Down, CrossAttnDown };  // DownBlock2D, CrossAttnDownBlock2D
enum class CondUpBlock { Up, CrossAttnUp };        // UpBlock2D, CrossAttnUpBlock2D

struct UNetCondConfig {
    int sampleSize = 0;  // 0 = not given
    int inChannels = 4;
    int outChannels = 4;
    bool centerInputSample = false;
    bool flipSinToCos = true;
    int freqShift = 0;
    std::vector<CondDownBlock> downBlocks{CondDownBlock::CrossAttnDown, CondDownBlock::CrossAttnDown,
                                          CondDownBlock::CrossAttnDown, CondDownBlock::Down};
    std::vector<CondUpBlock> upBlocks{CondUpBlock::Up, CondUpBlock::CrossAttnUp, CondUpBlock::CrossAttnUp,
                                      CondUpBlock::CrossAttnUp};
    bool hasMidBlock = true;  // UNetMidBlock2DCrossAttn; mid_block_type null: none
    std::vector<int> blockOutChannels{320, 640, 1280, 1280};
    int layersPerBlock = 2;
    int downsamplePadding = 1;
    float midBlockScaleFactor = 1.0f;  // the mid block's resnets divide their output by it
    int normNumGroups = 32;            // resnets, the transformers' GroupNorm, conv_norm_out
    float normEps = 1e-5f;             // resnets and conv_norm_out (the transformers' GroupNorm: 1e-6)
    int crossAttentionDim = 1280;      // X: the width of encoder_hidden_states
    // Per level (length levels()); the mid block uses the last entry, up block i entry levels()-1-i.
    // attention_head_dim is the number of heads (spec §1.2); head width = channels / heads.
    std::vector<int> attentionHeads{8, 8, 8, 8};
    std::vector<int> transformerLayers{1, 1, 1, 1};
    bool useLinearProjection = false;  // proj_in/proj_out Linear (SD 2.x) or 1x1 conv (SD 1.x)
    bool upcastAttention = false;      // SD 2.1: scores and softmax in float32 (the CPU always is)
    std::optional<int> timeEmbeddingDim;  // null -> 4 * block_out_channels[0]
    int convInKernel = 3;
    int convOutKernel = 3;

    int levels() const { return static_cast<int>(blockOutChannels.size()); }
    int downsampleFactor() const { return 1 << (levels() - 1); }
    int timeEmbedDim() const { return timeEmbeddingDim.value_or(4 * blockOutChannels.at(0)); }
    ModelLimits limits(int numTrainTimesteps = 1000) const {
        return ModelLimits{downsampleFactor(), numTrainTimesteps, inChannels};
    }
};

// Parses unet/config.json. Values Tessera cannot run (class or addition embeddings, LCM's
// time_cond_proj_dim, dual or only-cross attention, scale_shift resnets, per-block lists of
// layers_per_block or cross_attention_dim, ...) and values outside the bounds above or in
// ModelConfig.h throw std::runtime_error "config.json: <key> = <excerpt>: <what is allowed>".
// Unknown keys are ignored with one spdlog warning. Callers read the file through BoundedInput.
UNetCondConfig unetCondConfigFromJson(const nlohmann::json&);

}  // namespace tessera
