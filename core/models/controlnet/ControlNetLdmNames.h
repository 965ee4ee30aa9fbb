// Where each ControlNetModel tensor, named as diffusers names it, is held in an original ControlNet
// file (ControlNet-v1-1's cldm/cldm.py ControlNet, keys under "control_model." in its .pth files):
// diffusers' loaders/single_file_utils.py convert_controlnet_checkpoint read backwards. The UNet
// encoder copy's names are the UNet's (core/models/sd/LdmNames.h unetLdmName, label_emb included);
// the hint encoder, the zero convolutions and the mid block's are ControlNet's own. Qt-free.
#pragma once

#include <string>

#include "core/models/controlnet/ControlNetConfig.h"

namespace tessera {

// A ControlNetModel tensor's LDM name, without the "control_model." prefix:
//   controlnet_cond_embedding.conv_in / blocks.k / conv_out -> input_hint_block.0 / 2k + 2 / 4n - 2
//     (n = conditioning_embedding_out_channels entries: 14 for the usual 4)
//   controlnet_down_blocks.k -> zero_convs.k.0, controlnet_mid_block -> middle_block_out.0
//   the rest as unetLdmName ("down_blocks.1.resnets.0.conv1.weight" -> "input_blocks.4.0.in_layers.2.weight").
// Empty when the name has no counterpart.
std::string controlNetLdmName(const std::string& name, const ControlNetConfig& config);

}  // namespace tessera
