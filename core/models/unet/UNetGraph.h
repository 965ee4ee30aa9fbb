// The UNet2DModel family (diffusers models/unets/unet_2d.py, unet_2d_blocks.py) as a ModelGraph:
// the one place where its structure (block order, skip stack, concat order, which norms exist, head
// counts, paddings) is written. Qt-free.
#pragma once

#include "core/graph/ModelGraph.h"
#include "core/models/unet/UNetConfig.h"

namespace tessera {

// Primitive ops in diffusers' execution order. Inputs: "sample" [B, in_channels, H, W] and
// "timestep" [B, 1]; output [B, out_channels, H, W]. Parameters are declared in the order of
// diffusers' state dict (tests/data/ddpm_cifar10_32_keys.txt). act(emb), the SiLU of the time
// embedding that every resnet applies before its projection, is one shared value.
// Throws std::invalid_argument naming the config key that cannot be built
// ("norm_num_groups: 32 does not divide 48 channels of down_blocks.0.resnets.0.norm1").
ModelGraph buildUNet2DGraph(const UNetConfig&);

// fuseForExecution(buildUNet2DGraph(config)): what the backends run.
ModelGraph unet2DExecutionGraph(const UNetConfig&);

}  // namespace tessera
