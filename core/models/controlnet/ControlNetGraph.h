// ControlNetModel (diffusers models/controlnets/controlnet.py ControlNetModel.forward) as two
// ModelGraphs: the hint encoder (ControlNetConditioningEmbedding), which reads only the hint and so
// can run once per tile and be reused for every step and both guidance halves, and the trunk: the
// UNet encoder copy (built by the UNet's own builder, core/models/sd/UNetCondGraph.h), the hint
// embedding added to conv_in's output, and the zero convolutions, each residual scaled. The trunk
// works at the latent tile's size, like the UNet whose skips its residuals are added to; the hint
// graph at the hint's (ControlNetConfig::hintFactor() times larger). Qt-free.
#pragma once

#include <vector>

#include "core/graph/ModelGraph.h"
#include "core/models/controlnet/ControlNetConfig.h"

namespace tessera {

struct ControlNetGraphOptions {
    int contextTokens = 77;  // encoder_hidden_states' tokens (77 per prompt chunk)
    // A constant factor per residual (downResiduals() down ones, then the mid one) on top of the
    // row scale: guessModeScales() for diffusers' guess mode, A1111's soft weights, ... Empty: 1.
    std::vector<float> residualScales;
};

// The hint encoder. Input "controlnet_cond" [B, conditioning_channels, H, W], the hint image in
// RGB order (a "bgr" model's weights are flipped at load, ControlNetModel.h); output
// "controlnet_cond_embedding" [B, block_out_channels[0], H / f, W / f], f = hintFactor(): prepare
// it with the latent tile times f. conv_in + SiLU, per step a stride-1 and a stride-2 3x3
// convolution each + SiLU, conv_out (3x3, no activation); parameters
// "controlnet_cond_embedding.{conv_in,blocks.N,conv_out}.*". std::invalid_argument naming the key
// for a config it cannot build.
ModelGraph buildControlNetHintGraph(const ControlNetConfig&);
ModelGraph controlNetHintExecutionGraph(const ControlNetConfig&);  // fuseForExecution of it

// The trunk. Inputs, in order: "sample" [B, in_channels, h, w], "timestep" [B, 1],
// "encoder_hidden_states" [B, contextTokens, cross_attention_dim], with "text_time" (SDXL)
// "text_embeds_time" [B, projection_class_embeddings_input_dim] (textTimeEmbeds of the
// ControlNet's unet config), "controlnet_cond_embedding" [B, block_out_channels[0], h, w] (the
// hint graph's output), then one "conditioning_scale.<C>" [B, 2C] per distinct residual width C,
// in the order residuals first use them (conditioningScaleInputs fills them). Outputs: the down
// residuals "down_block_res_samples.<k>" k = 0 .. downResiduals() - 1 [B, C_k, h / 2^l_k, w / 2^l_k]
// (ControlNetConfig::residualChannels / residualLevel) and the mid residual
// "mid_block_res_sample", each zero_conv(skip) x residualScales[k] x the row's scale. The
// residuals are unpooled: with global_pool_conditions the caller replaces each by its spatial
// mean (meanOverPixels). Parameters carry diffusers' names.
ModelGraph buildControlNetGraph(const ControlNetConfig&, const ControlNetGraphOptions& = {});
ModelGraph controlNetExecutionGraph(const ControlNetConfig&, const ControlNetGraphOptions& = {});

// The "conditioning_scale.<C>" inputs of a trunk graph for per-row scales s_b (diffusers'
// conditioning_scale; 0 for a row that gets no control, e.g. the unconditional half when control
// is for the prompt only): each [B, 2C] holding s_b - 1 in its first C entries and 0 in the
// others (the graph multiplies by FiLM, x * (1 + v) + v', which then equals s_b x), in the graph's
// input order. std::invalid_argument when the graph has no such inputs.
std::vector<std::vector<float>> conditioningScaleInputs(const ModelGraph& trunk, const std::vector<float>& rowScales);

// The spatial mean of a residual [B, C, pixels] (float64 sums): [B, C], what a
// global_pool_conditions model adds to every pixel of the skip.
std::vector<float> meanOverPixels(const std::vector<float>& residual, int batch, int channels);

}  // namespace tessera
