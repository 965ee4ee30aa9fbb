// Denoiser: the tile function of a sampling pass as a device receives it: the model's execution
// graph and weights, the latent channels it maps, and for text-conditioned models the run's
// conditioning (the encoded prompt and negative prompt; SDXL's per-tile text-time vector), fixed
// for the whole run so that tile and step graphs captured once stay valid. Built by the one
// tiled loop (core/sampling/TiledLoop.h) from a UNet2DModel or from a Stable Diffusion model's
// UNet2DConditionModel. Qt-free.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/formats/ModelWeights.h"
#include "core/graph/ModelGraph.h"

namespace tessera {

enum class Branch { Conditional, Unconditional };  // an unguided pass evaluates Conditional only

// Where a tile of a Stable Diffusion run lies, in image pixels (SDXL's size conditioning reads it).
struct TileSite {
    int x = 0, y = 0, width = 0, height = 0;  // the tile's top-left corner and size
    int imageWidth = 0, imageHeight = 0;      // the whole image
};

// A tile's added conditioning for one branch: a vector of Denoiser::addedCondDim floats.
using AddedConditioning = std::function<std::vector<float>(const TileSite&, Branch)>;

struct Denoiser {
    // Inputs: "sample" [B, channels, h, w], "timestep" [B, 1], when conditioned
    // "encoder_hidden_states" [B, contextTokens, contextDim] and, with added conditioning,
    // "text_embeds_time" [B, addedCondDim] (in that order); output [B, channels, h, w].
    std::shared_ptr<const ModelGraph> graph;
    const std::map<std::string, HostTensor>* weights = nullptr;
    std::shared_ptr<const void> owner;  // keeps `weights` alive
    int channels = 3;
    int downsample = 1;  // tile sides must be multiples of it

    // Text conditioning, one row of [contextTokens, contextDim] per branch.
    int contextTokens = 0, contextDim = 0;
    std::vector<float> cond, uncond;
    bool conditioned() const { return contextTokens > 0; }

    // SDXL's per-tile vector (the graph's fourth input, "text_embeds_time"): the loop asks
    // addedCond once per tile and branch of a pass (TiledPass::addedCond holds the answers);
    // 0 / empty for models without one.
    int addedCondDim = 0;
    AddedConditioning addedCond;
    bool hasAddedCond() const { return addedCondDim > 0; }
    std::string kind() const { return conditioned() ? "unet2d-condition" : "unet2d"; }
};

}  // namespace tessera
