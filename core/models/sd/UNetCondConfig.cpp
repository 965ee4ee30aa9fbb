// diffusers UNet2DConditionModel config.json reader (diffusers models/unets/unet_2d_condition.py).
// The defaults in UNetCondConfig's member initialisers are UNet2DConditionModel.__init__'s.
#include "core/models/sd/UNetCondConfig.h"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "core/base/BoundedInput.h"
#include "core/formats/ConfigJson.h"
#include "core/graph/TimestepEmbedding.h"
#include "core/models/unet/UNetSharedKeys.h"

namespace tessera {

namespace {

using namespace config_json;
namespace bounds = unet_config_bounds;
namespace cond = unet_cond_bounds;

// One range per key with what SD's UNets use: a table shaped like every config reader's.
constexpr IntRange kLayersPerBlock{1, bounds::kMaxLayersPerBlock, "2 in SD 1.x, 2.x and SDXL"};
constexpr IntRange kSampleSize{1, bounds::kMaxSampleSize, "64 to 128 for SD latents"};
constexpr IntRange kGroups{1, bounds::kMaxBlockChannels, "32 in SD; it must divide the channels"};
constexpr IntRange kCrossAttentionDim{1, cond::kMaxCrossAttentionDim, "768 in SD 1.x, 1024 in SD 2.x, 2048 in SDXL"};
constexpr IntRange kHeads{1, cond::kMaxHeads,
                          "the number of heads per level (diffusers' name for it): 8 in SD 1.x, 5 to 20 in SD 2.x"};
constexpr IntRange kTransformerLayers{1, cond::kMaxTransformerLayers, "1 in SD 1.x/2.x, up to 10 in SDXL"};
constexpr IntRange kKernel{1, 7, "3 in SD; an odd size"};
constexpr IntRange kAdditionTimeEmbedDim{2, cond::kMaxAdditionTimeEmbedDim,
                                         "256 in SDXL: the width of each size id's sinusoid"};
constexpr IntRange kProjectionInputDim{1, cond::kMaxProjectionInputDim,
                                       "2816 in SDXL base (1280 pooled text + 6 x 256)"};
constexpr LevelLimit kLevels{bounds::kMaxLevels, "published UNets have 3 to 7"};

// The keys read alike with UNet2DModel's (its reader gives ddpm's ranges in the same fields).
constexpr UNetSharedKeys kSharedKeys{
    .sampleChannels = {1, bounds::kMaxSampleChannels, "4 for SD latents, 9 for inpainting UNets"},
    .blockChannels = {1, bounds::kMaxBlockChannels, "SD uses 320 to 1280 per level"},
    .freqShift = {0, 1, "SD uses 0"},
    .downsamplePadding = {0, 1, "SD uses 1; others change the resolution"},
    .levels = kLevels,
    .midBlockType = "UNetMidBlock2DCrossAttn",
    .midBlockScaleWhy = "1 in SD; the mid block's resnet outputs are divided by it",
    .normEpsWhy = "1e-5 in SD",
};

// SDXL base's size ids: original (h, w), crop (top, left), target (h, w).
constexpr int kSdxlTimeIds = 6;

// Keys that must keep the one value Tessera runs (diffusers' default), with why.
struct FixedKey {
    const char* key;
    std::vector<nlohmann::json> allowed;
    const char* why;
};

const std::vector<FixedKey>& fixedKeys() {
    static const std::vector<FixedKey> keys{
        {"time_embedding_type", {"positional"}, "only \"positional\" time embeddings are supported"},
        {"act_fn", {"silu", "swish"}, "only \"silu\" is supported"},
        {"class_embed_type", {nullptr}, "class embeddings are not supported"},
        {"num_class_embeds", {nullptr}, "class embeddings are not supported"},
        {"class_embeddings_concat", {false}, "class embeddings are not supported"},
        {"time_cond_proj_dim", {nullptr}, "a guidance embedding (LCM UNets) is not supported"},
        {"time_embedding_act_fn", {nullptr}, "only null (no activation after the time MLP) is supported"},
        {"timestep_post_act", {nullptr}, "only null is supported"},
        {"encoder_hid_dim", {nullptr}, "a projection of encoder_hidden_states is not supported"},
        {"encoder_hid_dim_type", {nullptr}, "a projection of encoder_hidden_states is not supported"},
        {"only_cross_attention", {false}, "only false is supported (SD's blocks have self- and cross-attention)"},
        {"mid_block_only_cross_attention", {nullptr, false}, "only null or false is supported"},
        {"dual_cross_attention", {false}, "only false is supported"},
        {"resnet_time_scale_shift", {"default"}, "only \"default\" (additive time embedding) is supported"},
        {"resnet_skip_time_act", {false}, "only false is supported"},
        {"resnet_out_scale_factor", {1, 1.0}, "only 1 is supported"},
        {"attention_type", {"default"}, "only \"default\" is supported (\"gated\" is GLIGEN)"},
        {"cross_attention_norm", {nullptr}, "only null is supported"},
        {"reverse_transformer_layers_per_block", {nullptr}, "only null is supported (symmetric UNets)"},
        {"num_attention_heads",
         {nullptr},
         "must be null; diffusers takes the head counts from attention_head_dim (and rejects this key)"},
    };
    return keys;
}

// Keys read elsewhere, or harmless: only used by embeddings the fixed keys above keep off.
const std::set<std::string, std::less<>> kIgnoredKeys{"addition_embed_type_num_heads", "dropout"};

// An integer, or a per-level list of integers (expanded to the level count later).
std::vector<int> readIntOrList(const nlohmann::json& value, const std::string& key, const IntRange& range) {
    if (!value.is_array()) return {readInt(value, key, range)};
    requireLevelArray(value, key, "integers (one per level)", kLevels);
    std::vector<int> list;
    for (const auto& item : value) list.push_back(readInt(item, key, range));
    return list;
}

// Reads one key of UNet2DConditionModel.__init__ into `c`; false for a key this reader does not
// know.
bool readKey(UNetCondConfig& c, const std::string& key, const nlohmann::json& value) {
    if (kSharedKeys.read(c, key, value)) return true;
    if (key == "sample_size") {
        if (value.is_array() && value.size() == 2)
            c.sampleSize = readInt(value[0], key, kSampleSize);
        else
            c.sampleSize = readOptionalInt(value, key, kSampleSize).value_or(0);
    } else if (key == "down_block_types")
        c.downBlocks = readBlocks<CondDownBlock>(
            value, key, kLevels,
            {{"DownBlock2D", CondDownBlock::Down}, {"CrossAttnDownBlock2D", CondDownBlock::CrossAttnDown}});
    else if (key == "up_block_types")
        c.upBlocks = readBlocks<CondUpBlock>(
            value, key, kLevels, {{"UpBlock2D", CondUpBlock::Up}, {"CrossAttnUpBlock2D", CondUpBlock::CrossAttnUp}});
    else if (key == "layers_per_block") {
        if (value.is_array()) reject(key, value, "a per-block list is not supported; expected one integer");
        c.layersPerBlock = readInt(value, key, kLayersPerBlock);
    } else if (key == "norm_num_groups") {
        if (value.is_null()) reject(key, value, "null (no output norm) is not supported; expected an integer");
        c.normNumGroups = readInt(value, key, kGroups);
    } else if (key == "cross_attention_dim") {
        if (value.is_array()) reject(key, value, "a per-block list is not supported; expected one integer");
        c.crossAttentionDim = readInt(value, key, kCrossAttentionDim);
    } else if (key == "attention_head_dim")
        c.attentionHeads = readIntOrList(value, key, kHeads);
    else if (key == "transformer_layers_per_block")
        c.transformerLayers = readIntOrList(value, key, kTransformerLayers);
    else if (key == "use_linear_projection")
        c.useLinearProjection = readBool(value, key);
    else if (key == "upcast_attention")
        c.upcastAttention = !value.is_null() && readBool(value, key);
    else if (key == "addition_embed_type") {
        if (value.is_null())
            c.additionEmbedType.clear();
        else if (readString(value, key) == "text_time")
            c.additionEmbedType = "text_time";
        else
            reject(key, value,
                   "only null or \"text_time\" (SDXL) is supported; \"text\", \"text_image\", \"image\" "
                   "and \"image_hint\" (Kandinsky) are not");
    } else if (key == "addition_time_embed_dim") {
        // diffusers' default is null; only "text_time" reads it, and checkTextTime requires it then.
        if (const std::optional<int> dim = readOptionalInt(value, key, kAdditionTimeEmbedDim))
            c.additionTimeEmbedDim = *dim;
    } else if (key == "projection_class_embeddings_input_dim")
        c.projectionClassEmbeddingsInputDim = readOptionalInt(value, key, kProjectionInputDim);
    else if (key == "conv_in_kernel" || key == "conv_out_kernel") {
        const int k = readInt(value, key, kKernel);
        if (k % 2 == 0) reject(key, value, "expected an odd kernel size (3 in SD)");
        (key == "conv_in_kernel" ? c.convInKernel : c.convOutKernel) = k;
    } else {
        return false;
    }
    return true;
}

// A per-level list: one entry means every level; otherwise exactly one per level.
void expandPerLevel(std::vector<int>& list, int levels, const char* key) {
    if (list.size() == 1) list.assign(static_cast<std::size_t>(levels), list.front());
    if (static_cast<int>(list.size()) != levels)
        reject(key, list,
               "has " + std::to_string(list.size()) + " entries but block_out_channels has " + std::to_string(levels));
}

// "text_time" needs both widths; diffusers builds add_embedding from them, and the pooled text
// must keep at least one channel beside SDXL's six sinusoids.
void checkTextTime(UNetCondConfig& c, const nlohmann::json& j) {
    if (!c.hasTextTime()) return;
    const char* dimKey = "addition_time_embed_dim";
    if (!j.contains(dimKey) || j.at(dimKey).is_null() || forcedDefaults(j).count(dimKey) != 0)
        reject(dimKey, j.value(dimKey, nlohmann::json()),
               "addition_embed_type \"text_time\" needs the width of each size id's sinusoid (256 in SDXL)");
    if (c.additionTimeEmbedDim % 2 != 0)
        reject("addition_time_embed_dim", c.additionTimeEmbedDim, "must be even (cos and sin halves; 256 in SDXL)");
    if (!c.projectionClassEmbeddingsInputDim)
        reject("projection_class_embeddings_input_dim",
               j.value("projection_class_embeddings_input_dim", nlohmann::json()),
               "addition_embed_type \"text_time\" needs add_embedding's input width (2816 in SDXL base)");
    const int ids = kSdxlTimeIds * c.additionTimeEmbedDim;
    if (*c.projectionClassEmbeddingsInputDim <= ids)
        reject("projection_class_embeddings_input_dim", *c.projectionClassEmbeddingsInputDim,
               "must exceed 6 x addition_time_embed_dim = " + std::to_string(ids) +
                   " (the pooled text comes first: 2816 = 1280 + 6 x 256 in SDXL base)");
}

// Checks between keys (diffusers raises on these when building the model).
void checkCrossKeys(UNetCondConfig& c, const nlohmann::json& j) {
    const int levels = c.levels();
    requireLevelCount(j, "down_block_types", c.downBlocks.size(), c.blockOutChannels.size());
    requireLevelCount(j, "up_block_types", c.upBlocks.size(), c.blockOutChannels.size());
    // A default list of 4 entries applies to any level count when not given.
    if (!j.contains("attention_head_dim") && c.attentionHeads.size() == 4) c.attentionHeads.resize(1);
    if (!j.contains("transformer_layers_per_block") && c.transformerLayers.size() == 4) c.transformerLayers.resize(1);
    expandPerLevel(c.attentionHeads, levels, "attention_head_dim");
    expandPerLevel(c.transformerLayers, levels, "transformer_layers_per_block");
    requireGroupsDivide(c.normNumGroups, c.blockOutChannels);
    for (int i = 0; i < levels; ++i) {
        const auto at = static_cast<std::size_t>(i);
        const bool attends = c.downBlocks[at] == CondDownBlock::CrossAttnDown ||
                             c.upBlocks[static_cast<std::size_t>(levels - 1 - i)] == CondUpBlock::CrossAttnUp ||
                             (i == levels - 1 && c.hasMidBlock);
        const int channels = c.blockOutChannels[at];
        if (attends && channels % c.attentionHeads[at] != 0)
            reject("attention_head_dim", given(j, "attention_head_dim"),
                   std::to_string(c.attentionHeads[at]) + " heads (the entry for level " + std::to_string(i) +
                       ") do not divide its " + std::to_string(channels) + " channels");
    }
    requireFreqShiftBelowHalf(c.freqShift, c.blockOutChannels.front());
    if (c.sampleSize > 0)
        requireSampleSizeDivisible(given(j, "sample_size"), c.sampleSize, c.sampleSize, c.downsampleFactor());
    checkTextTime(c, j);
}

}  // namespace

UNetCondConfig unetCondConfigFromJson(const nlohmann::json& j) {
    requireObject(j);
    UNetCondConfig c;
    std::vector<std::string> unknown;
    const std::set<std::string> defaults = forcedDefaults(j);
    for (const auto& [key, value] : j.items()) {
        if (key.empty() || key.front() == '_' || defaults.count(key) != 0) continue;
        if (readKey(c, key, value)) continue;
        if (key == "dropout") {
            (void)readNumber(value, key, 0.0, 1.0, "a probability; identity at inference");
            continue;
        }
        if (kIgnoredKeys.count(key) != 0) continue;
        const auto& fixed = fixedKeys();
        const std::string& name = key;  // clang 14 cannot capture a structured binding
        const auto it = std::find_if(fixed.begin(), fixed.end(), [&name](const FixedKey& f) { return name == f.key; });
        if (it == fixed.end()) {
            unknown.push_back(key);
            continue;
        }
        if (std::find(it->allowed.begin(), it->allowed.end(), value) == it->allowed.end()) reject(key, value, it->why);
    }
    checkCrossKeys(c, j);
    warnUnknownKeys(unknown);
    return c;
}

UNetCondConfig sdxlBaseUNetConfig() {
    UNetCondConfig c;
    c.sampleSize = 128;
    c.downBlocks = {CondDownBlock::Down, CondDownBlock::CrossAttnDown, CondDownBlock::CrossAttnDown};
    c.upBlocks = {CondUpBlock::CrossAttnUp, CondUpBlock::CrossAttnUp, CondUpBlock::Up};
    c.blockOutChannels = {320, 640, 1280};
    c.crossAttentionDim = 2048;
    c.attentionHeads = {5, 10, 20};
    c.transformerLayers = {1, 2, 10};
    c.useLinearProjection = true;
    c.additionEmbedType = "text_time";
    c.additionTimeEmbedDim = 256;
    c.projectionClassEmbeddingsInputDim = 2816;
    return c;
}

std::vector<float> textTimeEmbeds(const UNetCondConfig& c, const std::vector<float>& textEmbeds,
                                  const std::vector<float>& timeIds) {
    if (!c.hasTextTime())
        throw std::invalid_argument(
            "text_embeds_time: the UNet has no text-time embedding (addition_embed_type is not "
            "\"text_time\")");
    const int D = c.additionTimeEmbedDim;
    const std::size_t width = textEmbeds.size() + timeIds.size() * static_cast<std::size_t>(D);
    if (D <= 0 || width != static_cast<std::size_t>(c.textTimeDim()))
        throw std::invalid_argument("text_embeds_time: " + std::to_string(textEmbeds.size()) +
                                    " pooled text values + " + std::to_string(timeIds.size()) + " ids x " +
                                    std::to_string(D) + " = " + std::to_string(width) +
                                    "; projection_class_embeddings_input_dim is " + std::to_string(c.textTimeDim()));
    std::vector<float> out(textEmbeds);
    out.resize(width);
    timestepEmbedding(timeIds.data(), static_cast<int>(timeIds.size()), D, c.freqShift, c.flipSinToCos,
                      out.data() + textEmbeds.size());
    return out;
}

}  // namespace tessera
