// The UNet2DConditionModel family (Stable Diffusion 1.x / 2.x / XL; diffusers
// models/unets/unet_2d_condition.py) as a ModelGraph: block composition, skip stack,
// Transformer2DModel with its BasicTransformerBlocks (self-attention, cross-attention on the text
// context, GEGLU feed-forward), both projection kinds and the per-level head counts. Qt-free.
#pragma once

#include <string>
#include <vector>

#include "core/graph/GraphBuilder.h"
#include "core/graph/ModelGraph.h"
#include "core/models/sd/UNetCondConfig.h"

namespace tessera {

// What UNet2DConditionModel and ControlNetModel build alike (diffusers
// models/controlnets/controlnet.py ControlNetModel.__init__ calls the same get_down_block and
// UNetMidBlock2DCrossAttn as the UNet): the inputs and the time (and SDXL text-time) embedding,
// conv_in, the down blocks with their skips, the mid block. A family's builder derives from it
// and adds its own ends (the UNet's up blocks and output head, ControlNet's hint and zero
// convolutions).
class UNetCondEncoderBuilder : protected GraphBuilder {
protected:
    // `c` must outlive the builder.
    UNetCondEncoderBuilder(const UNetCondConfig& c, int contextTokens) : c_(c), contextTokens_(contextTokens) {}

    // The config's per-level lists, widths and the context size, with the up-block list when
    // `upBlocks`; std::invalid_argument naming the config key.
    void checkConfig(bool upBlocks) const;
    // Inputs "sample", "timestep", "encoder_hidden_states" (and, with "text_time",
    // "text_embeds_time"), conv_in declared first as in the state dict, the time embedding
    // (act(emb), which every resnet reads), then conv_in applied: its output.
    int stem();
    // The down blocks from `h`: each resnet(+transformer) output and each downsampler output
    // appended to `skips` (UNet2DConditionModel.forward's down_block_res_samples after
    // conv_in's); the last output.
    int downBlocks(int h, std::vector<int>& skips);
    // UNetMidBlock2DCrossAttn (resnet, transformer, resnet); without `attention` diffusers'
    // UNetMidBlock2D(num_layers=0): one resnet.
    int midBlock(int h, bool attention);

    // A ResnetBlock2D reading the time embedding; a Transformer2DModel of `depth` blocks.
    int resnet(const std::string& prefix, int x, int cout, float outputScaleFactor = 1.0f) {
        ResnetOptions o;
        o.groups = c_.normNumGroups;
        o.eps = c_.normEps;
        o.outputScaleFactor = outputScaleFactor;
        return GraphBuilder::resnet(prefix, x, cout, embAct_, o);
    }
    int transformer(const std::string& prefix, int x, int heads, int depth);

    const UNetCondConfig& c_;
    const int contextTokens_;

private:
    int basicBlock(const std::string& prefix, int x, int heads);
    int attention(const std::string& prefix, int x, int context, int heads);
    int tokenOp(OpKind kind, const std::string& name, int x, int channels = 0);

    int context_ = -1;  // encoder_hidden_states
    int embAct_ = -1;   // act(emb), read by every resnet's projection
};

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
