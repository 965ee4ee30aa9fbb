// The FLUX.1 transformer (black-forest-labs/flux src/flux/model.py Flux, modules/layers.py;
// diffusers models/transformers/transformer_flux.py FluxTransformer2DModel) as a ModelGraph over a
// tile of 16-channel latents, with parameters under BFL's names (flux1-dev.safetensors): the
// fused q | k | v and linear1 projections run as one GEMM each. Qt-free.
#pragma once

#include "core/graph/ModelGraph.h"
#include "core/models/flux/FluxConfig.h"

namespace tessera {

// Inputs, in the Denoiser's order (core/sampling/Denoiser.h):
//   "sample"                [B, C, h, w]   latents of the tile, C = in_channels / 4, h and w even
//   "timestep"              [B, 1]         1000 sigma (the model's timestep input times its 1000)
//   "encoder_hidden_states" [B, T, J]      the T5 encoder's output, T = textTokens, J = joint_attention_dim
//   "text_embeds_time"      [B, P (+ 1)]   CLIP's pooled output, then (dev) the guidance scale: the
//                                          Denoiser's per-tile added conditioning, under the name the
//                                          tile devices give that input in every family (SDXL's)
// Output "sample" [B, C, h, w]: the velocity. The tile's latents are packed into tokens of 2 x 2
// pixels (PixelUnshuffle then ToTokens: diffusers pipeline_flux.py _pack_latents' feature order
// c * 4 + dy * 2 + dx) at positions (0, row, column) of the tile's own grid: every tile is seen as
// an image of its size (the text's positions stay (0, 0, 0)), as ComfyUI's Flux.forward builds
// them per call and so ComfyUI-TiledDiffusion's tiles; RoPE depends on differences of positions
// alone, so only the text-to-image offsets differ from whole-canvas ids. Throws
// std::invalid_argument for textTokens outside 1..4096.
ModelGraph buildFluxGraph(const FluxConfig& config, int textTokens);

// The parameters a FLUX transformer of `config` holds (BFL names and shapes), in the graph's order.
std::vector<std::pair<std::string, std::vector<std::int64_t>>> fluxParameters(const FluxConfig& config);

}  // namespace tessera
