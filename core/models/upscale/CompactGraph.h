// Real-ESRGAN Compact (SRVGGNetCompact: Real-ESRGAN realesrgan/archs/srvgg_arch.py; spandrel
// architectures/Compact) as a ModelGraph, its hyperparameters from a file's keys and shapes, and its
// weights read strictly. Parameters carry the file's names (body.N.weight / .bias). Qt-free.
#pragma once

#include "core/graph/Backend.h"
#include "core/graph/ModelGraph.h"
#include "core/models/upscale/StateDict.h"
#include "core/models/upscale/UpscaleConfig.h"

namespace tessera {

// spandrel's Compact key set: body.0.weight and body.1.weight (a PReLU: the released models'
// act_type 'prelu').
bool hasCompactKeys(const StateDict& dict);

// num_conv from the length of `body`, features and input channels from body.0, (scale, output
// channels) from the last conv's bias as spandrel's get_scale_and_output_channels finds them.
// Throws ModelError for keys that give no usable configuration.
UpscaleConfig inferCompactConfig(const StateDict& dict);

// image [B, in, H/s, W/s] -> [B, out, H, W]: conv body.0, PReLU body.1, num_conv x (conv, PReLU),
// conv to out * s^2, pixel_shuffle(s), + the input upsampled nearest by s (the model learns the
// residual: SRVGGNetCompact.forward).
ModelGraph buildCompactGraph(const UpscaleConfig&);

// Every parameter read after checking the file holds exactly them (StateDictCheck).
TensorMap readCompactWeights(const UpscaleConfig& config, const StateDict& dict, const ModelGraph& graph);

// spandrel util get_scale_and_output_channels: the first c of (inChannels, 3, 4, 1) that divides
// `channels` with a square quotient: (sqrt(channels / c), c); (0, 0) when none does.
std::pair<int, int> scaleAndOutputChannels(std::int64_t channels, int inChannels);

}  // namespace tessera
