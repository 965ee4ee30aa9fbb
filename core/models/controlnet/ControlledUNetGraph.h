// A UNet2DConditionModel and the ControlNets that steer it as ONE ModelGraph: per ControlNet its hint
// encoder, its UNet encoder copy and zero convolutions, their residuals summed over the ControlNets
// and added to the UNet's skips and mid-block output where the up blocks read them
// (diffusers models/unets/unet_2d_condition.py UNet2DConditionModel.forward with
// down_block_additional_residuals / mid_block_additional_residual; several ControlNets as
// models/controlnets/multicontrolnet.py MultiControlNetModel.forward sums them). One graph, so
// a tile batch runs the ControlNets and the UNet in one call, and graph modes and lanes need no
// other path. Qt-free.
//
// Sizes: the hint is hintFactor() (8) times the latent, and a graph has one tile whose values are
// tile / divisor; so the controlled graph's tile is the HINT's: prepare it with the latent tile
// times controlledTileScale(), and every UNet value's divisor is that many times the UNet
// graph's. Parameters: the UNet's under their own names, ControlNet i's under
// controlNetParamName(i, name); controlledUNetWeights assembles such a map.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/formats/ModelWeights.h"
#include "core/graph/Backend.h"
#include "core/graph/ModelGraph.h"
#include "core/models/controlnet/ControlNetConfig.h"

namespace tessera {

// sd-webui-controlnet's tile_colorfix / tile_colorfix+sharp of one unit (OpKind::ColorFix): the
// blur radius (Variation), the unit's weight clamped to [0, 1], and +sharp's detail weight
// (Sharpness * 0.01; < 0: plain tile_colorfix).
struct ColorFixSettings {
    int radius = 8;
    float weight = 1.0f;
    float sharpness = -1.0f;
};

// One ControlNet of a controlled UNet: its config and the constant factor per residual
// (ControlNetGraphOptions::residualScales: A1111's soft weights, diffusers' guess mode; empty: 1);
// colorFix: the UNet's output corrected after the UNet (colorFixLatentInput).
struct ControlledNet {
    ControlNetConfig config;
    std::vector<float> residualScales;
    std::optional<ColorFixSettings> colorFix = std::nullopt;
};

struct ControlledUNetOptions {
    int contextTokens = 77;
    // Also output every ControlNet's residuals (after the UNet's output: ControlNet 0's down
    // residuals and mid residual, then ControlNet 1's, ...), as its trunk graph would: for tests.
    bool exposeResiduals = false;
};

// "controlnet.<i>." + name.
std::string controlNetParamName(int index, const std::string& name);
// The graph input of ControlNet i's hint: "controlnet.<i>.controlnet_cond".
std::string controlNetHintInput(int index);

// A colour-fixed ControlNet i's inputs, after every ControlNet's: its hint's VAE latent
// "colorfix.<i>.latent" [B, out channels, latent tile] (the UNet's sample's shape) and its row
// mark "colorfix.<i>.cond_mark" [B, 2] (a FiLM row of width 1: 0 on conditional rows, -1 on
// unconditional ones); its parameter colorFixTableParam(i) [2, 1000], colorFixDdpmTable()'s values.
std::string colorFixLatentInput(int index);
std::string colorFixMarkInput(int index);
std::string colorFixTableParam(int index);
// SD's DDPM tables as sd-webui-controlnet registers them (scripts/hook.py register_schedule:
// betas = linspace(0.00085^0.5, 0.012^0.5, 1000, float64)^2, alphas_cumprod = cumprod(1 - betas) in
// float64): sqrt(1 / alphas_cumprod), then sqrt(1 / alphas_cumprod - 1), each rounded to float32.
std::vector<float> colorFixDdpmTable();

// The latent tile times this is the controlled graph's tile: the ControlNets' common hint factor.
// std::invalid_argument when they differ (or there are none).
int controlledTileScale(const std::vector<ControlledNet>& nets);

// Inputs, in order: the UNet's ("sample" [B, in, h, w] with h = tile / scale, "timestep",
// "encoder_hidden_states", with text_time "text_embeds_time"), then per ControlNet i its hint
// controlNetHintInput(i) [B, conditioning_channels, tile] and its "controlnet.<i>.conditioning_scale.<C>"
// FiLM vectors (conditioningScaleInputs's layout: s_b - 1 then 0) in the order its trunk graph
// declares them, then per colour-fixed ControlNet (in their order) its colorFixLatentInput and
// colorFixMarkInput. Output: the UNet's [B, out, h, w] (after every colour fix, in the
// ControlNets' order, as the extension's hook applies them) (then the residuals when exposed). Every
// ControlNet must fit the UNet (controlNetUNetMismatch); std::invalid_argument naming which one
// and why otherwise.
ModelGraph buildControlledUNetGraph(const UNetCondConfig& unet, const std::vector<ControlledNet>& nets,
                                    const ControlledUNetOptions& options = {});
ModelGraph controlledUNetExecutionGraph(const UNetCondConfig& unet, const std::vector<ControlledNet>& nets,
                                        const ControlledUNetOptions& options = {});

// The UNet with the residuals as inputs (UNet2DConditionModel.forward given
// down_block_additional_residuals and mid_block_additional_residual): the UNet's inputs, then
// "down_block_additional_residuals.<k>" in skip order and "mid_block_additional_residual", each
// shaped as the skip it is added to; the tile is the latent's. A reference for tests.
ModelGraph buildUNetWithResidualInputs(const UNetCondConfig& unet, int contextTokens = 77);

// The weights a controlled graph binds: `unet` under its own names and nets[i] under
// controlNetParamName(i, ...). Copies the tensors (the map owns its values).
TensorMap controlledUNetWeights(const TensorMap& unet, const std::vector<const TensorMap*>& nets);

}  // namespace tessera
