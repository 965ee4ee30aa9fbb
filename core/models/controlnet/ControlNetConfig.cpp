// diffusers ControlNetModel config.json reader (diffusers models/controlnets/controlnet.py
// ControlNetModel.__init__): ControlNet's own keys here, the UNet encoder's through the
// UNet2DConditionModel reader, so both families range-check a key alike.
#include "core/models/controlnet/ControlNetConfig.h"

#include <cmath>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/formats/ConfigJson.h"

namespace tessera {

namespace {

using namespace config_json;
namespace bounds = controlnet_bounds;

constexpr IntRange kConditioningChannels{1, bounds::kMaxConditioningChannels,
                                         "3 (an RGB hint) in published ControlNets"};
constexpr IntRange kEmbeddingChannels{1, bounds::kMaxEmbeddingChannels, "16, 32, 96, 256 in published ControlNets"};
constexpr LevelLimit kEmbeddingLevels{bounds::kMaxEmbeddingLevels, "published ControlNets have 4"};

// ControlNetModel.__init__'s keys that UNet2DConditionModel.__init__ has too, read by its reader.
const std::set<std::string, std::less<>> kUNetKeys{"in_channels",
                                                   "flip_sin_to_cos",
                                                   "freq_shift",
                                                   "down_block_types",
                                                   "only_cross_attention",
                                                   "block_out_channels",
                                                   "layers_per_block",
                                                   "downsample_padding",
                                                   "mid_block_scale_factor",
                                                   "act_fn",
                                                   "norm_num_groups",
                                                   "norm_eps",
                                                   "cross_attention_dim",
                                                   "transformer_layers_per_block",
                                                   "attention_head_dim",
                                                   "use_linear_projection",
                                                   "class_embed_type",
                                                   "addition_embed_type",
                                                   "addition_time_embed_dim",
                                                   "num_class_embeds",
                                                   "upcast_attention",
                                                   "resnet_time_scale_shift",
                                                   "projection_class_embeddings_input_dim",
                                                   "addition_embed_type_num_heads"};

// The UNet reader builds up blocks too: a mirror of the down blocks, which checks nothing more.
void mirrorUpBlocks(nlohmann::json& unet) {
    const auto down = unet.find("down_block_types");
    if (down == unet.end() || !down->is_array()) return;  // absent: both keep their defaults
    nlohmann::json up = nlohmann::json::array();
    for (auto it = down->rbegin(); it != down->rend(); ++it) {
        if (!it->is_string()) return;  // the reader rejects the down list
        const std::string name = stripUNetRes(it->get<std::string>());
        up.push_back(name == "CrossAttnDownBlock2D" ? "CrossAttnUpBlock2D" : "UpBlock2D");
    }
    unet["up_block_types"] = up;
}

// SDXL's mid and small ControlNets give levels without attention 0 transformer layers; diffusers
// builds no transformer there and never reads the entry. The UNet reader asks 1 or more.
void fillUnusedDepths(nlohmann::json& unet) {
    const auto down = unet.find("down_block_types");
    const auto depth = unet.find("transformer_layers_per_block");
    if (down == unet.end() || depth == unet.end() || !down->is_array() || !depth->is_array() ||
        down->size() != depth->size())
        return;
    for (std::size_t i = 0; i < down->size(); ++i)
        if ((*depth)[i] == 0 && (*down)[i].is_string() && stripUNetRes((*down)[i].get<std::string>()) == "DownBlock2D")
            (*depth)[i] = 1;
}

// Reads one of ControlNet's own keys into `c`; false for another key.
bool readControlNetKey(ControlNetConfig& c, const std::string& key, const nlohmann::json& value) {
    if (key == "conditioning_channels") {
        c.conditioningChannels = readInt(value, key, kConditioningChannels);
    } else if (key == "conditioning_embedding_out_channels") {
        if (value.is_null()) reject(key, value, "expected a list of widths (16, 32, 96, 256 by default)");
        c.conditioningEmbeddingOutChannels = readChannelList(value, key, kEmbeddingLevels, kEmbeddingChannels);
    } else if (key == "controlnet_conditioning_channel_order") {
        const std::string order = readString(value, key);
        if (order != "rgb" && order != "bgr") reject(key, value, "expected \"rgb\" or \"bgr\"");
        c.bgr = order == "bgr";
    } else if (key == "global_pool_conditions") {
        c.globalPoolConditions = readBool(value, key);
    } else if (key == "mid_block_type") {
        const std::string type = value.is_string() ? value.get<std::string>() : std::string();
        if (type == "UNetMidBlock2DCrossAttn")
            c.midBlock = ControlNetMidBlock::CrossAttn;
        else if (type == "UNetMidBlock2D")
            c.midBlock = ControlNetMidBlock::Resnet;
        else
            reject(key, value,
                   "expected \"UNetMidBlock2DCrossAttn\" or \"UNetMidBlock2D\" (ControlNetModel has no other)");
    } else {
        return false;
    }
    return true;
}

}  // namespace

int ControlNetConfig::downResiduals() const { return 1 + unet.levels() * unet.layersPerBlock + unet.levels() - 1; }

int ControlNetConfig::residualLevel(int k) const {
    const int n = unet.layersPerBlock, L = unet.levels();
    if (k <= 0) return 0;
    if (k >= downResiduals()) return L - 1;
    // After conv_in's, each level holds n layer skips then (but the last) its downsampler's.
    const int level = (k - 1) / (n + 1), slot = (k - 1) % (n + 1);
    return slot < n ? level : level + 1;
}

int ControlNetConfig::residualChannels(int k) const {
    const int n = unet.layersPerBlock;
    if (k <= 0) return unet.blockOutChannels.front();
    if (k >= downResiduals()) return unet.blockOutChannels.back();
    return unet.blockOutChannels.at(static_cast<std::size_t>((k - 1) / (n + 1)));  // a downsampler keeps its width
}

ControlNetConfig controlNetConfigFromJson(const nlohmann::json& j) {
    requireObject(j);
    ControlNetConfig c;
    nlohmann::json unet = nlohmann::json::object();
    std::vector<std::string> unknown;
    nlohmann::json heads;  // num_attention_heads, when given
    const std::set<std::string> defaults = forcedDefaults(j);
    for (const auto& [key, value] : j.items()) {
        if (key.empty() || key.front() == '_' || defaults.count(key) != 0) continue;
        if (readControlNetKey(c, key, value)) continue;
        if (key == "num_attention_heads") {
            heads = value;
        } else if (key == "encoder_hid_dim" || key == "encoder_hid_dim_type") {
            continue;  // encoder_hid_proj is built but never applied (ControlNetModel.forward)
        } else if (kUNetKeys.count(key) != 0) {
            unet[key] = value;
        } else {
            unknown.push_back(key);
        }
    }
    if (!heads.is_null()) unet["attention_head_dim"] = heads;
    mirrorUpBlocks(unet);
    fillUnusedDepths(unet);
    // The UNet reader checks the mid block's heads only where it has attention.
    if (c.midBlock == ControlNetMidBlock::Resnet) unet["mid_block_type"] = nullptr;
    c.unet = unetCondConfigFromJson(unet);
    c.unet.hasMidBlock = true;
    warnUnknownKeys(unknown);
    return c;
}

SdFamily controlNetFamily(const ControlNetConfig& c, std::string* reason) {
    auto because = [reason](std::string why) {
        if (reason != nullptr) *reason = std::move(why);
    };
    const int X = c.unet.crossAttentionDim;
    if (c.unet.hasTextTime()) {
        because("it has SDXL's text-time embedding (add_embedding)");
        return SdFamily::SDXL;
    }
    if (X == 1024 || X == 768) {
        because("its cross-attention reads " + std::to_string(X) + "-wide text (" +
                (X == 1024 ? "OpenCLIP ViT-H, SD 2.x" : "CLIP ViT-L, SD 1.x") + ")");
        return X == 1024 ? SdFamily::SD2 : SdFamily::SD1;
    }
    because("its text context is " + std::to_string(X) + " wide (neither SD 1.x's 768 nor SD 2.x's 1024); " +
            (c.unet.useLinearProjection ? "Linear" : "1x1-convolution") + " projections as in SD " +
            (c.unet.useLinearProjection ? "2.x" : "1.x"));
    return c.unet.useLinearProjection ? SdFamily::SD2 : SdFamily::SD1;
}

std::string controlNetUNetMismatch(const ControlNetConfig& cn, const UNetCondConfig& unet) {
    const UNetCondConfig& c = cn.unet;
    auto list = [](const std::vector<int>& v) {
        std::string s = "[";
        for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
        return s + "]";
    };
    auto differ = [](const char* what, const std::string& mine, const std::string& theirs) {
        return std::string("the ControlNet's ") + what + " " + mine + " differ from the UNet's " + theirs;
    };
    if (c.inChannels != unet.inChannels)
        return differ("in_channels", std::to_string(c.inChannels), std::to_string(unet.inChannels));
    if (c.blockOutChannels != unet.blockOutChannels)
        return differ("block_out_channels", list(c.blockOutChannels), list(unet.blockOutChannels));
    if (c.layersPerBlock != unet.layersPerBlock)
        return differ("layers_per_block", std::to_string(c.layersPerBlock), std::to_string(unet.layersPerBlock));
    if (c.crossAttentionDim != unet.crossAttentionDim)
        return differ("cross_attention_dim (text width)", std::to_string(c.crossAttentionDim),
                      std::to_string(unet.crossAttentionDim));
    if (c.textTimeDim() != unet.textTimeDim())
        return differ("text-time embedding input width (projection_class_embeddings_input_dim; 0: none)",
                      std::to_string(c.textTimeDim()), std::to_string(unet.textTimeDim()));
    if (!unet.hasMidBlock) return "the UNet has no mid block to take the ControlNet's mid residual";
    return {};
}

std::vector<float> guessModeScales(int downResiduals) {
    if (downResiduals < 1) throw std::invalid_argument("guessModeScales: no down residuals");
    std::vector<float> scales;
    for (int k = 0; k <= downResiduals; ++k)
        scales.push_back(static_cast<float>(std::pow(10.0, static_cast<double>(k) / downResiduals - 1.0)));
    return scales;
}

}  // namespace tessera
