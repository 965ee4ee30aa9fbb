// LdmNames: where each tensor of a Stable Diffusion model, named as diffusers and transformers
// name it, is held in an original (LDM / SGM) checkpoint: diffusers' loaders/single_file_utils.py
// convert_ldm_unet_checkpoint, convert_ldm_vae_checkpoint and convert_open_clip_checkpoint read
// backwards (DIFFUSERS_TO_LDM_MAPPING). CLIP ViT-L keeps transformers' names and needs no map.
// Internal to the single-file loader (SingleFileCheckpoint.h). Qt-free.
#pragma once

#include <string>

#include "core/models/sd/UNetCondConfig.h"
#include "core/models/vae/VaeConfig.h"

namespace tessera::single_file {

// Where a model tensor is held, by its name under the model's prefix in the file.
struct LdmTensor {
    std::string name;         // empty when the file has no counterpart
    int part = 0, parts = 1;  // row block `part` of `parts` (OpenCLIP's fused q/k/v in_proj)
    bool transpose = false;   // stored as the transpose of a 2-D model tensor (OpenCLIP's text_projection)
};

// A UNet2DConditionModel tensor's LDM name ("down_blocks.1.resnets.0.conv1.weight" ->
// "input_blocks.4.0.in_layers.2.weight"); empty when none.
std::string unetLdmName(const std::string& name, const UNetCondConfig& config);

// An AutoencoderKL tensor's LDM name ("decoder.up_blocks.0.resnets.0.conv1.weight" ->
// "decoder.up.3.block.0.conv1.weight"); empty when none.
std::string vaeLdmName(const std::string& name, const VaeConfig& config);

// The OpenCLIP tensor (and q/k/v part) holding a CLIPTextModel(WithProjection) tensor
// ("text_model.encoder.layers.0.self_attn.k_proj.weight" -> part 1 of 3 of
// "transformer.resblocks.0.attn.in_proj_weight").
LdmTensor openClipTensor(const std::string& name);

// `head` + `piece`, or empty when the piece is (a name with no counterpart).
std::string joined(const std::string& head, const std::string& piece);

}  // namespace tessera::single_file
