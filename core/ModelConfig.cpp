// diffusers config.json / scheduler_config.json readers (shared/spec/unet2d.md §1, §5).
//
// diffusers builds the model from UNet2DModel.__init__'s defaults overridden by the file's
// keys, so the defaults below (in ModelConfig's member initialisers) must match __init__.
// Keys starting with '_' are bookkeeping and ignored; unknown keys are ignored with a warning,
// as diffusers does. Values Tessera cannot run are rejected, naming the key.
#include "core/ModelConfig.h"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>
#include <stdexcept>
#include <string_view>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

namespace tessera {

namespace {

[[noreturn]] void reject(const std::string& key, const nlohmann::json& value, const std::string& why) {
    throw std::runtime_error("config.json: " + key + " = " + value.dump() + ": " + why);
}

int readInt(const nlohmann::json& value, const std::string& key, int minimum) {
    if (!value.is_number_integer()) reject(key, value, "expected an integer");
    const auto v = value.get<std::int64_t>();
    if (v < minimum || v > 1'000'000'000) reject(key, value, "expected an integer of at least " + std::to_string(minimum));
    return static_cast<int>(v);
}

std::optional<int> readOptionalInt(const nlohmann::json& value, const std::string& key, int minimum) {
    if (value.is_null()) return std::nullopt;
    return readInt(value, key, minimum);
}

bool readBool(const nlohmann::json& value, const std::string& key) {
    if (!value.is_boolean()) reject(key, value, "expected true or false");
    return value.get<bool>();
}

double readNumber(const nlohmann::json& value, const std::string& key) {
    if (!value.is_number()) reject(key, value, "expected a number");
    const double v = value.get<double>();
    if (!std::isfinite(v)) reject(key, value, "expected a finite number");
    return v;
}

std::string readString(const nlohmann::json& value, const std::string& key) {
    if (!value.is_string()) reject(key, value, "expected a string");
    return value.get<std::string>();
}

// diffusers' get_down_block/get_up_block strip this prefix before matching.
std::string stripUNetRes(std::string name) {
    constexpr std::string_view prefix = "UNetRes";
    if (name.rfind(prefix, 0) == 0) name.erase(0, prefix.size());
    return name;
}

std::vector<DownBlockType> readDownBlocks(const nlohmann::json& value, const std::string& key) {
    if (!value.is_array() || value.empty()) reject(key, value, "expected a non-empty array of block names");
    std::vector<DownBlockType> blocks;
    for (const auto& item : value) {
        const std::string name = stripUNetRes(readString(item, key));
        if (name == "DownBlock2D") blocks.push_back(DownBlockType::Down);
        else if (name == "AttnDownBlock2D") blocks.push_back(DownBlockType::AttnDown);
        else reject(key, value, "'" + item.get<std::string>() + "' is not supported (DownBlock2D or AttnDownBlock2D)");
    }
    return blocks;
}

std::vector<UpBlockType> readUpBlocks(const nlohmann::json& value, const std::string& key) {
    if (!value.is_array() || value.empty()) reject(key, value, "expected a non-empty array of block names");
    std::vector<UpBlockType> blocks;
    for (const auto& item : value) {
        const std::string name = stripUNetRes(readString(item, key));
        if (name == "UpBlock2D") blocks.push_back(UpBlockType::Up);
        else if (name == "AttnUpBlock2D") blocks.push_back(UpBlockType::AttnUp);
        else reject(key, value, "'" + item.get<std::string>() + "' is not supported (UpBlock2D or AttnUpBlock2D)");
    }
    return blocks;
}

// Keys of UNet2DModel.__init__ (spec §1 table).
const std::set<std::string, std::less<>> kModelKeys{
    "sample_size",       "in_channels",         "out_channels",         "center_input_sample",
    "time_embedding_type", "time_embedding_dim", "freq_shift",          "flip_sin_to_cos",
    "down_block_types",  "mid_block_type",      "up_block_types",       "block_out_channels",
    "layers_per_block",  "mid_block_scale_factor", "downsample_padding", "downsample_type",
    "upsample_type",     "dropout",             "act_fn",               "attention_head_dim",
    "norm_num_groups",   "attn_norm_num_groups", "norm_eps",            "resnet_time_scale_shift",
    "add_attention",     "class_embed_type",    "num_class_embeds",     "num_train_timesteps"};

// The names in `_use_default_values`: diffusers resets them to the __init__ default.
std::set<std::string> forcedDefaults(const nlohmann::json& j) {
    std::set<std::string> keys;
    const auto it = j.find("_use_default_values");
    if (it == j.end() || it->is_null()) return keys;
    if (!it->is_array()) reject("_use_default_values", *it, "expected an array of key names");
    for (const auto& item : *it) keys.insert(readString(item, "_use_default_values"));
    return keys;
}

// A float written as the shortest decimal that reads back to it (1e-6f as 1e-06, not 9.99e-07).
double tidy(float value) {
    std::array<char, 64> buffer{};
    const auto result = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value);
    return std::strtod(std::string(buffer.data(), result.ptr).c_str(), nullptr);
}

}  // namespace

ModelConfig modelConfigFromJson(const nlohmann::json& j) {
    if (!j.is_object()) throw std::runtime_error("config.json: expected a JSON object, found " + std::string(j.type_name()));
    ModelConfig c;
    const std::set<std::string> defaults = forcedDefaults(j);
    std::optional<std::pair<int, int>> sampleSize;
    std::string downsampleType = "conv";
    std::string upsampleType = "conv";

    for (const auto& [key, value] : j.items()) {
        if (key.empty() || key.front() == '_') continue;  // _class_name, _diffusers_version, ...
        if (defaults.count(key) != 0) continue;
        if (kModelKeys.count(key) == 0) {
            spdlog::warn("config.json: ignoring unknown key '{}'", key);
            continue;
        }
        if (key == "sample_size") {
            if (value.is_null()) sampleSize.reset();
            else if (value.is_number_integer()) {
                const int s = readInt(value, key, 1);
                sampleSize = std::pair{s, s};
            } else if (value.is_array() && value.size() == 2) {
                sampleSize = std::pair{readInt(value[0], key, 1), readInt(value[1], key, 1)};
            } else {
                reject(key, value, "expected null, an integer or [height, width]");
            }
        } else if (key == "in_channels") c.inChannels = readInt(value, key, 1);
        else if (key == "out_channels") c.outChannels = readInt(value, key, 1);
        else if (key == "center_input_sample") c.centerInputSample = readBool(value, key);
        else if (key == "time_embedding_type") {
            if (readString(value, key) != "positional")
                reject(key, value, "only \"positional\" time embeddings are supported");
        } else if (key == "time_embedding_dim") c.timeEmbeddingDim = readOptionalInt(value, key, 1);
        else if (key == "freq_shift") c.freqShift = readInt(value, key, -1'000'000);
        else if (key == "flip_sin_to_cos") c.flipSinToCos = readBool(value, key);
        else if (key == "down_block_types") c.downBlocks = readDownBlocks(value, key);
        else if (key == "up_block_types") c.upBlocks = readUpBlocks(value, key);
        else if (key == "mid_block_type") {
            if (value.is_null()) c.hasMidBlock = false;
            else if (readString(value, key) == "UNetMidBlock2D") c.hasMidBlock = true;
            else reject(key, value, "only \"UNetMidBlock2D\" or null is supported");
        } else if (key == "block_out_channels") {
            if (!value.is_array() || value.empty()) reject(key, value, "expected a non-empty array of channel counts");
            c.blockOutChannels.clear();
            for (const auto& item : value) c.blockOutChannels.push_back(readInt(item, key, 1));
        } else if (key == "layers_per_block") c.layersPerBlock = readInt(value, key, 1);
        else if (key == "mid_block_scale_factor") {
            const double v = readNumber(value, key);
            if (v == 0.0) reject(key, value, "must not be zero (outputs are divided by it)");
            c.midBlockScaleFactor = static_cast<float>(v);
        } else if (key == "downsample_padding") c.downsamplePadding = readInt(value, key, 0);
        else if (key == "downsample_type") downsampleType = readString(value, key);
        else if (key == "upsample_type") upsampleType = readString(value, key);
        else if (key == "dropout") (void)readNumber(value, key);  // identity at inference
        else if (key == "act_fn") {
            const std::string act = readString(value, key);
            if (act != "silu" && act != "swish") reject(key, value, "only \"silu\" (or \"swish\") is supported");
        } else if (key == "attention_head_dim") c.attentionHeadDim = readOptionalInt(value, key, 1);
        else if (key == "norm_num_groups") c.normNumGroups = readInt(value, key, 1);
        else if (key == "attn_norm_num_groups") c.attnNormNumGroups = readOptionalInt(value, key, 1);
        else if (key == "norm_eps") {
            const double v = readNumber(value, key);
            if (!(v > 0.0)) reject(key, value, "expected a positive number");
            c.normEps = static_cast<float>(v);
        } else if (key == "resnet_time_scale_shift") {
            const std::string shift = readString(value, key);
            if (shift == "default") c.resnetTimeScaleShift = TimeScaleShift::Default;
            else if (shift == "scale_shift") c.resnetTimeScaleShift = TimeScaleShift::ScaleShift;
            else reject(key, value, "expected \"default\" or \"scale_shift\"");
        } else if (key == "add_attention") c.addAttention = readBool(value, key);
        else if (key == "class_embed_type") {
            if (!value.is_null()) reject(key, value, "class-conditional models are not supported");
        } else if (key == "num_class_embeds") {
            if (!value.is_null()) reject(key, value, "class-conditional models are not supported");
        } else if (key == "num_train_timesteps") {
            if (!value.is_null()) (void)readInt(value, key, 1);  // only used by "learned" embeddings
        }
    }

    // Cross-key checks (diffusers raises on the first three when building the model).
    const int levels = c.levels();
    auto blocksJson = [&](const char* key) { return j.contains(key) ? j.at(key) : nlohmann::json(); };
    if (static_cast<int>(c.downBlocks.size()) != levels)
        reject("down_block_types", blocksJson("down_block_types"),
               "has " + std::to_string(c.downBlocks.size()) + " entries but block_out_channels has " +
                   std::to_string(levels));
    if (static_cast<int>(c.upBlocks.size()) != levels)
        reject("up_block_types", blocksJson("up_block_types"),
               "has " + std::to_string(c.upBlocks.size()) + " entries but block_out_channels has " +
                   std::to_string(levels));
    if (levels > 12) reject("block_out_channels", blocksJson("block_out_channels"), "more than 12 levels");
    bool downAttention = false;
    bool upAttention = false;
    for (const auto b : c.downBlocks) downAttention |= b == DownBlockType::AttnDown;
    for (const auto b : c.upBlocks) upAttention |= b == UpBlockType::AttnUp;
    if (downsampleType != "conv" && !(downsampleType == "resnet" && !downAttention))
        reject("downsample_type", downsampleType,
               downsampleType == "resnet" ? "resnet downsamplers are not supported" : "expected \"conv\"");
    if (upsampleType != "conv" && !(upsampleType == "resnet" && !upAttention))
        reject("upsample_type", upsampleType,
               upsampleType == "resnet" ? "resnet upsamplers are not supported" : "expected \"conv\"");
    // Every GroupNorm normalises a sum of block channel counts, so this covers them all.
    for (const int channels : c.blockOutChannels)
        if (channels % c.normNumGroups != 0)
            reject("norm_num_groups", c.normNumGroups,
                   "does not divide block_out_channels entry " + std::to_string(channels));
    if (c.attnNormNumGroups && c.hasMidBlock && c.addAttention &&
        c.blockOutChannels.back() % *c.attnNormNumGroups != 0)
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
    if (sampleSize) {
        const auto [h, w] = *sampleSize;
        if (h % c.downsampleFactor() != 0 || w % c.downsampleFactor() != 0)
            reject("sample_size", j.at("sample_size"),
                   "must be divisible by " + std::to_string(c.downsampleFactor()) + " (2^(levels-1))");
        if (h != w)
            spdlog::warn("config.json: sample_size [{}, {}] is not square; using the height {}", h, w, h);
        c.sampleSize = h;
    }
    return c;
}

nlohmann::json toJson(const ModelConfig& c) {
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
        {"mid_block_scale_factor", tidy(c.midBlockScaleFactor)},
        {"downsample_padding", c.downsamplePadding},
        {"act_fn", "silu"},
        {"attention_head_dim", optionalInt(c.attentionHeadDim)},
        {"norm_num_groups", c.normNumGroups},
        {"attn_norm_num_groups", optionalInt(c.attnNormNumGroups)},
        {"norm_eps", tidy(c.normEps)},
        {"resnet_time_scale_shift", c.resnetTimeScaleShift == TimeScaleShift::ScaleShift ? "scale_shift" : "default"},
        {"add_attention", c.addAttention},
    };
}

SchedulerOptions schedulerOptionsFromJson(const nlohmann::json& j, std::string* className) {
    if (!j.is_object())
        throw std::runtime_error("scheduler_config.json: expected a JSON object, found " + std::string(j.type_name()));
    auto fail = [](const std::string& key, const nlohmann::json& value, const std::string& why) {
        throw std::runtime_error("scheduler_config.json: " + key + " = " + value.dump() + ": " + why);
    };
    auto number = [&](const std::string& key, const nlohmann::json& value) {
        if (!value.is_number() || !std::isfinite(value.get<double>())) fail(key, value, "expected a number");
        return value.get<double>();
    };
    auto integer = [&](const std::string& key, const nlohmann::json& value, int minimum) {
        if (!value.is_number_integer() || value.get<std::int64_t>() < minimum ||
            value.get<std::int64_t>() > 1'000'000'000)
            fail(key, value, "expected an integer of at least " + std::to_string(minimum));
        return static_cast<int>(value.get<std::int64_t>());
    };
    auto boolean = [&](const std::string& key, const nlohmann::json& value) {
        if (!value.is_boolean()) fail(key, value, "expected true or false");
        return value.get<bool>();
    };
    auto text = [&](const std::string& key, const nlohmann::json& value) {
        if (!value.is_string()) fail(key, value, "expected a string");
        return value.get<std::string>();
    };

    std::set<std::string> defaults;
    if (const auto it = j.find("_use_default_values"); it != j.end() && it->is_array())
        for (const auto& item : *it)
            if (item.is_string()) defaults.insert(item.get<std::string>());

    SchedulerOptions o;
    if (className != nullptr) *className = "DDPMScheduler";
    for (const auto& [key, value] : j.items()) {
        if (key == "_class_name") {
            if (className != nullptr) *className = text(key, value);
            continue;
        }
        if (key.empty() || key.front() == '_' || defaults.count(key) != 0) continue;
        if (key == "num_train_timesteps") o.numTrainTimesteps = integer(key, value, 1);
        else if (key == "beta_start") o.betaStart = static_cast<float>(number(key, value));
        else if (key == "beta_end") o.betaEnd = static_cast<float>(number(key, value));
        else if (key == "beta_schedule") o.betaSchedule = parseBetaSchedule(text(key, value), key);
        else if (key == "timestep_spacing") o.timestepSpacing = parseTimestepSpacing(text(key, value), key);
        else if (key == "steps_offset") o.stepsOffset = integer(key, value, 0);
        else if (key == "clip_sample") o.clipSample = boolean(key, value);
        else if (key == "clip_sample_range") o.clipSampleRange = static_cast<float>(number(key, value));
        else if (key == "set_alpha_to_one") o.setAlphaToOne = boolean(key, value);
        else if (key == "variance_type") {
            // fixed_small_log is the same σ as fixed_small (spec §5.2).
            const std::string v = text(key, value);
            o.varianceType = parseVarianceType(v == "fixed_small_log" ? "fixed_small" : v, key);
        } else if (key == "prediction_type") o.predictionType = parsePredictionType(text(key, value), key);
        else if (key == "use_karras_sigmas") o.karrasSigmas = boolean(key, value);
        else if (key == "trained_betas") {
            if (!value.is_null()) fail(key, value, "trained betas are not supported");
        } else if (key == "thresholding" || key == "rescale_betas_zero_snr") {
            if (boolean(key, value)) fail(key, value, "not supported");
        }
        // Other keys (DDPM-only or DDIM-only options Tessera does not use) are ignored, as diffusers does.
    }
    return o;
}

}  // namespace tessera
