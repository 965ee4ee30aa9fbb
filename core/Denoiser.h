// Denoiser: the tile function of a sampling pass as a device receives it: the model's execution
// graph and weights, the latent channels it maps, and for text-conditioned models the run's
// conditioning (the encoded prompt and negative prompt), fixed for the whole run so that tile and
// step graphs captured once stay valid. Built by the one tiled loop (core/TiledLoop.h) from a
// UNet2DModel or from a Stable Diffusion model's UNet2DConditionModel. Qt-free.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/ModelGraph.h"
#include "core/ModelWeights.h"

namespace tessera {

struct Denoiser {
    // Inputs: "sample" [B, channels, h, w], "timestep" [B, 1] and, when conditioned,
    // "encoder_hidden_states" [B, contextTokens, contextDim]; output [B, channels, h, w].
    std::shared_ptr<const ModelGraph> graph;
    const std::map<std::string, HostTensor>* weights = nullptr;
    std::shared_ptr<const void> owner;   // keeps `weights` alive
    int channels = 3;
    int downsample = 1;                  // tile sides must be multiples of it

    // Text conditioning, one row of [contextTokens, contextDim] per branch.
    int contextTokens = 0, contextDim = 0;
    std::vector<float> cond, uncond;
    bool conditioned() const { return contextTokens > 0; }
    std::string kind() const { return conditioned() ? "unet2d-condition" : "unet2d"; }
};

}  // namespace tessera
