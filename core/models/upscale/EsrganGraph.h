// ESRGAN / RRDBNet (spandrel architectures/ESRGAN: __init__.py ESRGANArch, __arch/RRDB.py RRDBNet,
// __arch_helpers/block.py RRDB and ResidualDenseBlock_5C; BasicSR basicsr/archs/rrdbnet_arch.py) as
// a ModelGraph, its hyperparameters from a file's keys and shapes, and its weights read strictly.
// The graph's parameters carry BasicSR's names (conv_first, body.N.rdbK.convJ, conv_body,
// conv_upU, conv_hr, conv_last; body.N.rdbK.conv1x1 for ESRGAN+); esrganFileKey maps them to a
// file's own layout. Qt-free.
#pragma once

#include <string>

#include "core/graph/Backend.h"
#include "core/graph/ModelGraph.h"
#include "core/models/upscale/StateDict.h"
#include "core/models/upscale/UpscaleConfig.h"

namespace tessera {

// Whether `dict` has one of spandrel's ESRGAN key sets (the original layout, ESRGAN+, BasicSR's,
// BSRGAN / RealSR's).
bool hasEsrganKeys(const StateDict& dict);

// The layout, scale (2^upsamples, divided by the unshuffle), features, blocks, growth channels,
// channels, ESRGAN+ and pixel unshuffle (an input of 4 or 16 times the output channels: Real-ESRGAN's
// x2plus and x1) as spandrel's ESRGANArch.load infers them. Throws ModelError for a file whose keys
// give no usable configuration (naming the key).
UpscaleConfig inferEsrganConfig(const StateDict& dict);

// image [B, in, H/s, W/s] (s = scale) -> [B, out, H, W]: [pixel_unshuffle], conv_first, nb RRDBs,
// conv_body + the first conv's features, (nearest x2, conv_upU, LeakyReLU 0.2) per upsample,
// conv_hr, LeakyReLU 0.2, conv_last. Every LeakyReLU has slope 0.2 (block.py act("leakyrelu")).
ModelGraph buildEsrganGraph(const UpscaleConfig&);

// The key a file in config.layout stores the graph parameter `canonical` under ("" for the zero
// bias ESRGAN+'s conv1x1 lacks: nn.Conv2d(bias=False)).
std::string esrganFileKey(const UpscaleConfig& config, const std::string& canonical);

// Every parameter of `graph` read from `dict` under its file key, after checking that the file
// holds exactly those keys with those shapes (StateDictCheck). Throws ModelError.
TensorMap readEsrganWeights(const UpscaleConfig& config, const StateDict& dict, const ModelGraph& graph);

}  // namespace tessera
