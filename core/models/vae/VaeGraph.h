// The AutoencoderKL family (diffusers models/autoencoders/vae.py Encoder, Decoder) as ModelGraphs:
// the one place where the VAE's encoder and decoder structure is written. Qt-free.
//
// Sizes follow ModelGraph's convention: a value's divisor is relative to the graph's finest
// resolution, the image. So both graphs are prepared and run at the IMAGE size H x W (a
// multiple of config.scaleFactor()), and the latent is the value of divisor scaleFactor():
//   encoder: image [B, in_channels, H, W] -> moments [B, 2 * latent_channels, H/f, W/f]
//   decoder: latent [B, latent_channels, H/f, W/f] -> image [B, out_channels, H, W]
// with f = 2^(levels - 1) (8 for SD). Parameters carry diffusers' names
// ("decoder.up_blocks.0.resnets.0.conv1.weight", "encoder.mid_block.attentions.0.to_q.weight",
// "quant_conv.weight"), declared in execution order.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/graph/ModelGraph.h"
#include "core/models/vae/VaeConfig.h"

namespace tessera {

// conv_in, down blocks (resnets without time embedding, stride-2 downsamplers padded one
// row/column at the bottom/right), mid block (resnet, one-head attention, resnet),
// conv_norm_out + SiLU, conv_out to 2 * latent_channels, then quant_conv (when configured).
// Input "image", output "moments": mean (channels 0 .. latent_channels - 1) then logvar,
// before the distribution's clamp. Throws std::invalid_argument naming the config key that
// cannot be built.
ModelGraph buildVaeEncoderGraph(const VaeConfig&);

// post_quant_conv (when configured), conv_in, mid block, up blocks (layers_per_block + 1
// resnets, nearest x2 + conv upsamplers), conv_norm_out + SiLU, conv_out. Input "latent"
// (already divided by scaling_factor), output "image" (about [-1, 1], not clamped).
ModelGraph buildVaeDecoderGraph(const VaeConfig&);

// fuseForExecution of the above: what the backends run.
ModelGraph vaeEncoderExecutionGraph(const VaeConfig&);
ModelGraph vaeDecoderExecutionGraph(const VaeConfig&);

// Every tensor of a diffusers AutoencoderKL file: the encoder's then the decoder's parameters.
std::vector<std::pair<std::string, std::vector<std::int64_t>>> vaeParameterList(const VaeConfig&);

}  // namespace tessera
