// The UNet2DConditionModel family (Stable Diffusion 1.x / 2.x / XL; diffusers
// models/unets/unet_2d_condition.py) as a ModelGraph: block composition, skip stack,
// Transformer2DModel with its BasicTransformerBlocks (self-attention, cross-attention on the text
// context, GEGLU feed-forward), both projection kinds and the per-level head counts. Qt-free.
#pragma once

#include "core/graph/ModelGraph.h"
#include "core/models/sd/UNetCondConfig.h"

namespace tessera {

// Primitive ops in diffusers' execution order. Inputs: "sample" [B, in_channels, H, W],
// "timestep" [B, 1], "encoder_hidden_states" [B, contextTokens, cross_attention_dim] (77
// per prompt chunk) and, with addition_embed_type "text_time" (SDXL), "text_embeds_time"
// [B, projection_class_embeddings_input_dim] (textTimeEmbeds); output [B, out_channels, H, W]. Parameters carry diffusers' names
// (declared in execution order; the state dict lists the up blocks before the mid block).
// Throws std::invalid_argument naming the config key that cannot be built.
ModelGraph buildUNet2DConditionGraph(const UNetCondConfig&, int contextTokens = 77);

// fuseForExecution(buildUNet2DConditionGraph(config, contextTokens)): what the backends run.
ModelGraph unet2DConditionExecutionGraph(const UNetCondConfig&, int contextTokens = 77);

}  // namespace tessera
