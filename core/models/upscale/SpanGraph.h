// SPAN (spandrel architectures/SPAN/__arch/span.py; "Swift Parameter-free Attention Network for
// Efficient Super-Resolution") as a ModelGraph in its eval form, its hyperparameters from a file's
// keys and shapes, and its weights: each Conv3XC is the single 3x3 convolution spandrel's
// Conv3XC.update_params makes of its sk and conv.0/1/2 layers on every eval forward (so a stored
// eval_conv, stale or absent, does not matter), computed here in double. Parameters are named
// "<module>.eval_conv.weight/bias" for those, the file's names for the rest, and
// "normalize.weight/bias" for the input normalisation (x - rgb_mean) * 255, which runs as a 1x1
// convolution (diagonal 255, bias -255 * mean) so that zero padding stays where PyTorch has it.
// Qt-free.
#pragma once

#include <vector>

#include "core/graph/Backend.h"
#include "core/graph/ModelGraph.h"
#include "core/models/upscale/StateDict.h"
#include "core/models/upscale/UpscaleConfig.h"

namespace tessera {

// spandrel's SPAN key set without the eval_conv keys (files without them load too).
bool hasSpanKeys(const StateDict& dict);

// Input channels and features from conv_1.sk, (scale, output channels) from upsampler.0 as
// spandrel's get_scale_and_output_channels, norm from the absence of "no_norm". Throws ModelError
// for keys that give no usable configuration (a normalised input of other than 3 channels: the
// mean is an RGB one).
UpscaleConfig inferSpanConfig(const StateDict& dict);

// image -> [normalize] -> conv_1 -> block_1..6 (SPAB: c1, SiLU, c2, SiLU, c3;
// (c3 + x) * (sigmoid(c3) - 0.5)) -> conv_2 -> conv_cat([conv_1, conv_2, block_1, block_6's
// SiLU(c1)]) -> upsampler.0 -> pixel_shuffle(scale).
ModelGraph buildSpanGraph(const UpscaleConfig&);

// The file's keys checked (each Conv3XC's sk, conv.0, conv.1, conv.2 required, eval_conv allowed,
// conv_cat, upsampler.0, no_norm as the config says), then the graph's weights: the fused
// Conv3XCs, conv_cat, upsampler.0 and the normalisation.
TensorMap readSpanWeights(const UpscaleConfig& config, const StateDict& dict, const ModelGraph& graph);

// Conv3XC.update_params: the 3x3 weight [co, ci, 3, 3] and bias [co] equal to
// conv.2(conv.1(conv.0(x))) + sk(x) in eval form, from w1 [2ci, ci], b1, w2 [2co, 2ci, 3, 3], b2,
// w3 [co, 2co], b3, ws [co, ci], bs (row-major, 1x1 kernels as matrices). In double.
struct FusedConv {
    std::vector<float> weight, bias;
};
FusedConv fuseConv3XC(int ci, int co, const std::vector<float>& w1, const std::vector<float>& b1,
                      const std::vector<float>& w2, const std::vector<float>& b2, const std::vector<float>& w3,
                      const std::vector<float>& b3, const std::vector<float>& ws, const std::vector<float>& bs);

}  // namespace tessera
