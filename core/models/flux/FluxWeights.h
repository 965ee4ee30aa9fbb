// The FLUX transformer's weights under BFL's names (flux1-dev.safetensors: what FluxGraph declares)
// from the names other files use: diffusers' FluxTransformer2DModel (separate q, k, v and MLP input
// projections, norm_out's halves in the other order) and ComfyUI's all-in-one prefix. Qt-free.
#pragma once

#include <map>
#include <string>

#include "core/formats/ModelWeights.h"
#include "core/models/flux/FluxConfig.h"

namespace tessera {

// The prefix ComfyUI's all-in-one checkpoints put before BFL's names.
inline constexpr const char* kFluxComfyPrefix = "model.diffusion_model.";

// (name, shape) of every tensor a diffusers FluxTransformer2DModel of `config` holds.
TensorList fluxDiffusersTensors(const FluxConfig& config);

// BFL-named tensors from diffusers-named ones, as diffusers' loaders/single_file_utils.py
// convert_flux_transformer_checkpoint_to_diffusers maps them, in reverse: q, k, v rows
// concatenated (and the MLP input's after them in single blocks), norm_out.linear's [scale;
// shift] swapped into LastLayer's [shift; scale]. Consumes `tensors`; throws ModelError naming
// a missing tensor.
std::map<std::string, HostTensor> fluxTensorsFromDiffusers(const FluxConfig& config,
                                                           std::map<std::string, HostTensor> tensors);

}  // namespace tessera
