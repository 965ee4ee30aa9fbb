// UNet2DConditionModel (Stable Diffusion 1.x / 2.x / XL) configuration, read from a diffusers
// unet/config.json with UNet2DConditionModel.__init__'s defaults for missing keys (diffusers
// models/unets/unet_2d_condition.py). A struct of its own rather than more UNetConfig fields:
// the block kinds, the per-level head and depth lists, the cross-attention width and SDXL's
// text-time embedding (addition_embed_type "text_time") are this family's.
// Qt-free.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/models/unet/UNetConfig.h"

namespace tessera {

// The values Tessera accepts beyond unet_config_bounds (which apply too), each with what SD uses:
// a table shaped like every family's bounds on purpose.
namespace unet_cond_bounds {
// cross_attention_dim: SD 1.x 768, SD 2.x 1024, SDXL 2048.
inline constexpr int kMaxCrossAttentionDim = 8192;
// Heads per transformer: SD 1.x 8, SD 2.x / SDXL up to 20.
inline constexpr int kMaxHeads = 256;
// Transformer blocks per Transformer2DModel: 1 in SD, up to 10 in SDXL.
inline constexpr int kMaxTransformerLayers = 32;
// The text context's token count: 77 per prompt chunk; long prompts concatenate chunks.
inline constexpr int kMaxContextTokens = 77 * 16;
// addition_time_embed_dim: SDXL 256 per size id.
inline constexpr int kMaxAdditionTimeEmbedDim = 4096;
// projection_class_embeddings_input_dim: SDXL base 2816 (1280 + 6 x 256), refiner 2560.
inline constexpr int kMaxProjectionInputDim = 65536;
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
    // Per level (length levels()); the mid block uses the last entry, up block i entry
    // levels()-1-i. attention_head_dim is the number of heads (a naming kept for compatibility, as
    // UNet2DConditionModel.__init__ notes); head width = channels / heads.
    std::vector<int> attentionHeads{8, 8, 8, 8};
    std::vector<int> transformerLayers{1, 1, 1, 1};
    bool useLinearProjection = false;     // proj_in/proj_out Linear (SD 2.x) or 1x1 conv (SD 1.x)
    bool upcastAttention = false;         // SD 2.1: scores and softmax in float32 (the CPU always is)
    std::optional<int> timeEmbeddingDim;  // null -> 4 * block_out_channels[0]
    // SDXL (UNet2DConditionModel.get_aug_embed): "text_time" adds add_embedding(text_embeds ++
    // sinusoids of the size ids) to the time embedding; "" = none. The graph then takes the
    // 2816-wide vector (projectionClassEmbeddingsInputDim) as its input "text_embeds_time"
    // (textTimeEmbeds builds it).
    std::string additionEmbedType;
    int additionTimeEmbedDim = 256;                        // width of each size id's sinusoid
    std::optional<int> projectionClassEmbeddingsInputDim;  // add_embedding.linear_1's input width
    int convInKernel = 3;
    int convOutKernel = 3;

    int levels() const { return static_cast<int>(blockOutChannels.size()); }
    int downsampleFactor() const { return 1 << (levels() - 1); }
    int timeEmbedDim() const { return timeEmbeddingDim.value_or(4 * blockOutChannels.at(0)); }
    bool hasTextTime() const { return additionEmbedType == "text_time"; }
    // The width of the graph's "text_embeds_time" input; 0 without the text-time embedding.
    int textTimeDim() const { return hasTextTime() ? projectionClassEmbeddingsInputDim.value_or(0) : 0; }
    ModelLimits limits(int numTrainTimesteps = 1000) const {
        return ModelLimits{downsampleFactor(), numTrainTimesteps, inChannels};
    }
};

// Parses unet/config.json. Values Tessera cannot run (class embeddings, addition embeddings other
// than SDXL's "text_time", LCM's time_cond_proj_dim, dual or only-cross attention, scale_shift
// resnets, per-block lists of layers_per_block or cross_attention_dim, ...) and values outside the
// bounds above or in UNetConfig.h throw std::runtime_error "config.json: <key> = <excerpt>: <what
// is allowed>"; so does "text_time" without addition_time_embed_dim or with a
// projection_class_embeddings_input_dim of at most 6 sinusoids' width. Unknown keys are ignored
// with one spdlog warning. Callers read the file through BoundedInput.
UNetCondConfig unetCondConfigFromJson(const nlohmann::json&);

// Stable Diffusion XL base 1.0's UNet (its unet/config.json: 320/640/1280, depths 1/2/10, heads
// 5/10/20, context 2048, text_time with 256-wide sinusoids and a 2816-wide add_embedding input;
// 2,567,463,684 parameters): random:sdxl and `bench --shape sdxl`.
UNetCondConfig sdxlBaseUNetConfig();

// The "text_embeds_time" vector of one sample (diffusers get_aug_embed before add_embedding):
// textEmbeds (the pooled text, width projection - ids x additionTimeEmbedDim) followed by each
// time id's sinusoid Timesteps(additionTimeEmbedDim, flip_sin_to_cos, freq_shift) in id order,
// float32 as diffusers computes them. SDXL base's ids: (original height, original width, crop
// top, crop left, target height, target width) in pixels. Throws std::invalid_argument when the
// config has no text-time embedding or the widths do not add up to its input width.
std::vector<float> textTimeEmbeds(const UNetCondConfig&, const std::vector<float>& textEmbeds,
                                  const std::vector<float>& timeIds);

}  // namespace tessera
