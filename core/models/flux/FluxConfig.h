// The FLUX.1 transformer's configuration (black-forest-labs/flux src/flux/util.py configs["flux-dev"],
// configs["flux-schnell"]; diffusers models/transformers/transformer_flux.py FluxTransformer2DModel),
// read from a diffusers transformer/config.json or taken from a single file's tensor shapes. Qt-free.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tessera {

// The values Tessera accepts, checked before anything is sized from a config.
namespace flux_config_bounds {
// Heads and head width: FLUX.1 has 24 of 128.
inline constexpr int kMaxHeads = 256;
inline constexpr int kMaxHeadDim = 512;
// Blocks: FLUX.1 has 19 double-stream and 38 single-stream blocks.
inline constexpr int kMaxBlocks = 256;
// Text widths: T5-XXL's 4096 (joint_attention_dim), CLIP-L's pooled 768.
inline constexpr int kMaxTextDim = 16384;
// Latent features per token: 64 (16 channels x 2 x 2).
inline constexpr int kMaxInChannels = 1024;
}  // namespace flux_config_bounds

struct FluxConfig {
    int inChannels = 64;  // per token: latent channels x 2 x 2
    int outChannels = 64;
    int layers = 19;        // double-stream blocks
    int singleLayers = 38;  // single-stream blocks
    int headDim = 128;
    int heads = 24;
    int jointAttentionDim = 4096;   // the T5 encoder's width
    int pooledProjectionDim = 768;  // CLIP's pooled output
    bool guidanceEmbeds = true;     // dev: the guidance scale is an input; schnell: none
    std::array<int, 3> axesDimsRope{16, 56, 56};
    float mlpRatio = 4.0f;

    static constexpr float kNormEps = 1e-6f;  // every LayerNorm and the QK RMSNorms
    static constexpr float kRopeTheta = 10000.0f;
    static constexpr int kTimeChannels = 256;  // the sinusoid of the timestep and of the guidance

    int hidden() const { return heads * headDim; }
    int mlpHidden() const { return static_cast<int>(static_cast<float>(hidden()) * mlpRatio); }
    int latentChannels() const { return inChannels / 4; }
    // "flux-dev" (guidance embedding) or "flux-schnell" (none), for records and messages.
    std::string variant() const { return guidanceEmbeds ? "flux-dev" : "flux-schnell"; }
};

// Parses a diffusers FluxTransformer2DModel config.json (defaults: FluxTransformer2DModel.__init__).
// Throws std::runtime_error "config.json: <key> = <value>: <why>" for values outside
// flux_config_bounds, patch_size other than 1, in_channels not 4 x a channel count, rope axes
// that are odd or do not sum to attention_head_dim.
FluxConfig parseFluxConfig(const nlohmann::json& config);

// The config of a transformer stored under BFL's names (flux1-dev.safetensors,
// flux1-schnell.safetensors: keys without a prefix), from its tensors' shapes: block counts from
// the largest block index, widths from img_in / txt_in / vector_in, dev from guidance_in's
// presence, the head width from the QK norm's scale (the rope axes then as FLUX.1's: 16 for the
// first axis, the rest split evenly). Throws std::runtime_error naming the tensor that is
// missing or of an unexpected shape.
FluxConfig fluxConfigFromShapes(const std::map<std::string, std::vector<std::int64_t>>& shapes);

}  // namespace tessera
