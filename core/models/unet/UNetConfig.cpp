// diffusers config.json / scheduler_config.json readers (diffusers models/unets/unet_2d.py
// UNet2DModel.__init__, configuration_utils.py extract_init_dict, the schedulers' __init__).
//
// diffusers builds the model from UNet2DModel.__init__'s defaults overridden by the file's
// keys, so the defaults below (in UNetConfig's member initialisers) must match __init__.
// Keys starting with '_' are bookkeeping and ignored; unknown keys are ignored with one
// summarised warning, as diffusers does. Values Tessera cannot run, or outside the ranges in
// UNetConfig.h, are rejected naming the key, before anything is sized from them.
#include "core/models/unet/UNetConfig.h"

#include <cmath>
#include <set>
#include <stdexcept>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "core/base/BoundedInput.h"
#include "core/formats/ConfigJson.h"
#include "core/models/unet/UNetSharedKeys.h"

namespace tessera {

namespace {

namespace bounds = unet_config_bounds;
using namespace config_json;

// One range per key with what published UNet2DModels use: a table shaped like every config reader's.
constexpr IntRange kLayersPerBlock{1, bounds::kMaxLayersPerBlock, "2 in ddpm and SD, up to 4 in larger UNets"};
constexpr IntRange kSampleSize{1, bounds::kMaxSampleSize, "32 to 256 in ddpm, 64 to 128 for SD latents"};
constexpr IntRange kGroups{1, bounds::kMaxBlockChannels, "32 in published UNets; it must divide the channels"};
constexpr IntRange kHeadDim{1, bounds::kMaxBlockChannels, "8 to 64 in published UNets; it must divide the channels"};
constexpr IntRange kTrainTimesteps{1, bounds::kMaxTrainTimesteps, "1000 in published UNets"};
constexpr LevelLimit kLevels{bounds::kMaxLevels, "published UNets have 3 to 7"};

// The keys read alike with UNet2DConditionModel's (its reader gives SD's ranges in the same fields).
constexpr UNetSharedKeys kSharedKeys{
    .sampleChannels = {1, bounds::kMaxSampleChannels,
                       "3 for pixel models, 4 for SD latents, up to 16 in newer latent spaces"},
    .blockChannels = {1, bounds::kMaxBlockChannels, "published UNets use 32 to 1280 per level"},
    .freqShift = {0, 1, "ddpm uses 1, SD 0"},
    .downsamplePadding = {0, 1, "ddpm uses 0 (one extra row/column), SD 1; others change the resolution"},
    .levels = kLevels,
    .midBlockType = "UNetMidBlock2D",
    .midBlockScaleWhy = "1 in ddpm and SD, sqrt(2) in score models; outputs are divided by it",
    .normEpsWhy = "1e-5 or 1e-6 in published UNets",
};

// Keys of UNet2DModel.__init__.
const std::set<std::string, std::less<>> kModelKeys{"sample_size",
                                                    "in_channels",
                                                    "out_channels",
                                                    "center_input_sample",
                                                    "time_embedding_type",
                                                    "time_embedding_dim",
                                                    "freq_shift",
                                                    "flip_sin_to_cos",
                                                    "down_block_types",
                                                    "mid_block_type",
                                                    "up_block_types",
                                                    "block_out_channels",
                                                    "layers_per_block",
                                                    "mid_block_scale_factor",
                                                    "downsample_padding",
                                                    "downsample_type",
                                                    "upsample_type",
                                                    "dropout",
                                                    "act_fn",
                                                    "attention_head_dim",
                                                    "norm_num_groups",
                                                    "attn_norm_num_groups",
                                                    "norm_eps",
                                                    "resnet_time_scale_shift",
                                                    "add_attention",
                                                    "class_embed_type",
                                                    "num_class_embeds",
                                                    "num_train_timesteps"};

// What the loop over the file's keys collects besides the config itself.
struct KeyState {
    std::optional<std::pair<int, int>> sampleSize;
    std::string downsampleType = "conv";
    std::string upsampleType = "conv";
    std::vector<std::string> unknownKeys;
};

// Reads one known key into `c`.
void readKey(UNetConfig& c, KeyState& s, const std::string& key, const nlohmann::json& value) {
    if (kSharedKeys.read(c, key, value)) return;
    if (key == "sample_size") {
        if (value.is_null())
            s.sampleSize.reset();
        else if (value.is_number_integer()) {
            const int size = readInt(value, key, kSampleSize);
            s.sampleSize = std::pair{size, size};
        } else if (value.is_array() && value.size() == 2) {
            s.sampleSize = std::pair{readInt(value[0], key, kSampleSize), readInt(value[1], key, kSampleSize)};
        } else {
            reject(key, value, "expected null, an integer or [height, width]");
        }
    } else if (key == "time_embedding_type") {
        if (readString(value, key) != "positional")
            reject(key, value, "only \"positional\" time embeddings are supported");
    } else if (key == "down_block_types")
        c.downBlocks = readBlocks<DownBlockType>(
            value, key, kLevels, {{"DownBlock2D", DownBlockType::Down}, {"AttnDownBlock2D", DownBlockType::AttnDown}});
    else if (key == "up_block_types")
        c.upBlocks = readBlocks<UpBlockType>(value, key, kLevels,
                                             {{"UpBlock2D", UpBlockType::Up}, {"AttnUpBlock2D", UpBlockType::AttnUp}});
    else if (key == "layers_per_block")
        c.layersPerBlock = readInt(value, key, kLayersPerBlock);
    else if (key == "downsample_type")
        s.downsampleType = readString(value, key);
    else if (key == "upsample_type")
        s.upsampleType = readString(value, key);
    else if (key == "dropout")
        (void)readNumber(value, key, 0.0, 1.0, "a probability; identity at inference");
    else if (key == "act_fn")
        requireSilu(value, key);
    else if (key == "attention_head_dim")
        c.attentionHeadDim = readOptionalInt(value, key, kHeadDim);
    else if (key == "norm_num_groups")
        c.normNumGroups = readInt(value, key, kGroups);
    else if (key == "attn_norm_num_groups")
        c.attnNormNumGroups = readOptionalInt(value, key, kGroups);
    else if (key == "resnet_time_scale_shift") {
        const std::string shift = readString(value, key);
        if (shift == "default")
            c.resnetTimeScaleShift = TimeScaleShift::Default;
        else if (shift == "scale_shift")
            c.resnetTimeScaleShift = TimeScaleShift::ScaleShift;
        else
            reject(key, value, "expected \"default\" or \"scale_shift\"");
    } else if (key == "add_attention")
        c.addAttention = readBool(value, key);
    else if (key == "class_embed_type" || key == "num_class_embeds") {
        if (!value.is_null()) reject(key, value, "class-conditional models are not supported");
    } else if (key == "num_train_timesteps") {
        if (!value.is_null()) (void)readInt(value, key, kTrainTimesteps);  // only used by "learned" embeddings
    }
}

// Checks between keys (diffusers raises on the block counts when building the model).
void checkCrossKeys(UNetConfig& c, const KeyState& s, const nlohmann::json& j) {
    const int levels = c.levels();
    requireLevelCount(j, "down_block_types", c.downBlocks.size(), c.blockOutChannels.size());
    requireLevelCount(j, "up_block_types", c.upBlocks.size(), c.blockOutChannels.size());
    bool downAttention = false;
    bool upAttention = false;
    for (const auto b : c.downBlocks) downAttention |= b == DownBlockType::AttnDown;
    for (const auto b : c.upBlocks) upAttention |= b == UpBlockType::AttnUp;
    if (s.downsampleType != "conv" && !(s.downsampleType == "resnet" && !downAttention))
        reject("downsample_type", s.downsampleType,
               s.downsampleType == "resnet" ? "resnet downsamplers are not supported" : "expected \"conv\"");
    if (s.upsampleType != "conv" && !(s.upsampleType == "resnet" && !upAttention))
        reject("upsample_type", s.upsampleType,
               s.upsampleType == "resnet" ? "resnet upsamplers are not supported" : "expected \"conv\"");
    requireGroupsDivide(c.normNumGroups, c.blockOutChannels);
    if (c.attnNormNumGroups && c.hasMidBlock && c.addAttention && c.blockOutChannels.back() % *c.attnNormNumGroups != 0)
        reject("attn_norm_num_groups", *c.attnNormNumGroups,
               "does not divide the mid-block channels " + std::to_string(c.blockOutChannels.back()));
    if (c.attentionHeadDim) {
        for (int i = 0; i < levels; ++i) {
            const bool attends = c.downBlocks[static_cast<std::size_t>(i)] == DownBlockType::AttnDown ||
                                 c.upBlocks[static_cast<std::size_t>(levels - 1 - i)] == UpBlockType::AttnUp ||
                                 (i == levels - 1 && c.hasMidBlock && c.addAttention);
            const int channels = c.blockOutChannels[static_cast<std::size_t>(i)];
            if (attends && channels % *c.attentionHeadDim != 0)
                reject("attention_head_dim", *c.attentionHeadDim,
                       "does not divide the attention channels " + std::to_string(channels));
        }
    }
    requireFreqShiftBelowHalf(c.freqShift, c.blockOutChannels.front());
    if (s.sampleSize) {
        const auto [h, w] = *s.sampleSize;
        requireSampleSizeDivisible(j.at("sample_size"), h, w, c.downsampleFactor());
        if (h != w) spdlog::warn("config.json: sample_size [{}, {}] is not square; using the height {}", h, w, h);
        c.sampleSize = h;
    }
}

}  // namespace

UNetConfig unetConfigFromJson(const nlohmann::json& j) {
    requireObject(j);
    UNetConfig c;
    KeyState state;
    const std::set<std::string> defaults = forcedDefaults(j);
    for (const auto& [key, value] : j.items()) {
        if (key.empty() || key.front() == '_') continue;  // _class_name, _diffusers_version, ...
        if (defaults.count(key) != 0) continue;
        if (kModelKeys.count(key) == 0)
            state.unknownKeys.push_back(key);
        else
            readKey(c, state, key, value);
    }
    checkCrossKeys(c, state, j);
    warnUnknownKeys(state.unknownKeys);
    return c;
}

nlohmann::json toJson(const UNetConfig& c) {
    nlohmann::json down = nlohmann::json::array();
    for (const auto b : c.downBlocks) down.push_back(b == DownBlockType::AttnDown ? "AttnDownBlock2D" : "DownBlock2D");
    nlohmann::json up = nlohmann::json::array();
    for (const auto b : c.upBlocks) up.push_back(b == UpBlockType::AttnUp ? "AttnUpBlock2D" : "UpBlock2D");
    auto optionalInt = [](const std::optional<int>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
    return nlohmann::json{
        {"_class_name", "UNet2DModel"},
        {"sample_size", c.sampleSize > 0 ? nlohmann::json(c.sampleSize) : nlohmann::json(nullptr)},
        {"in_channels", c.inChannels},
        {"out_channels", c.outChannels},
        {"center_input_sample", c.centerInputSample},
        {"time_embedding_type", "positional"},
        {"time_embedding_dim", optionalInt(c.timeEmbeddingDim)},
        {"freq_shift", c.freqShift},
        {"flip_sin_to_cos", c.flipSinToCos},
        {"down_block_types", down},
        {"mid_block_type", c.hasMidBlock ? nlohmann::json("UNetMidBlock2D") : nlohmann::json(nullptr)},
        {"up_block_types", up},
        {"block_out_channels", c.blockOutChannels},
        {"layers_per_block", c.layersPerBlock},
        {"mid_block_scale_factor", shortestDecimal(c.midBlockScaleFactor)},
        {"downsample_padding", c.downsamplePadding},
        {"act_fn", "silu"},
        {"attention_head_dim", optionalInt(c.attentionHeadDim)},
        {"norm_num_groups", c.normNumGroups},
        {"attn_norm_num_groups", optionalInt(c.attnNormNumGroups)},
        {"norm_eps", shortestDecimal(c.normEps)},
        {"resnet_time_scale_shift", c.resnetTimeScaleShift == TimeScaleShift::ScaleShift ? "scale_shift" : "default"},
        {"add_attention", c.addAttention},
    };
}

}  // namespace tessera
