// diffusers AutoencoderKL config.json reader (diffusers models/autoencoders/autoencoder_kl.py). The
// defaults in VaeConfig's member initialisers are AutoencoderKL.__init__'s; keys starting with '_'
// are bookkeeping and ignored, as are those listed in _use_default_values.
#include "core/models/vae/VaeConfig.h"

#include <set>
#include <stdexcept>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "core/base/BoundedInput.h"
#include "core/formats/ConfigJson.h"
#include "core/models/unet/UNetConfig.h"

namespace tessera {

namespace {

namespace bounds = vae_config_bounds;
using namespace config_json;

// One range per key with what SD's VAEs use: a table shaped like every config reader's.
constexpr IntRange kImageChannels{1, bounds::kMaxImageChannels, "3 for RGB images"};
constexpr IntRange kLatentChannels{1, bounds::kMaxLatentChannels, "4 in SD 1.x/2.x/XL, 16 in newer latent spaces"};
constexpr IntRange kBlockChannels{1, bounds::kMaxBlockChannels, "SD's VAE uses 128 to 512 per level"};
constexpr IntRange kLayersPerBlock{1, bounds::kMaxLayersPerBlock, "2 in SD (the decoder has one more)"};
constexpr IntRange kGroups{1, bounds::kMaxBlockChannels, "32 in SD; it must divide every block width"};
constexpr IntRange kSampleSize{1, bounds::kMaxSampleSize, "512 to 1024 pixels in SD; used only for tiling"};
constexpr LevelLimit kLevels{bounds::kMaxLevels, "SD's VAE has 4"};

// Keys of AutoencoderKL.__init__.
const std::set<std::string, std::less<>> kVaeKeys{"in_channels",    "out_channels",        "down_block_types",
                                                  "up_block_types", "block_out_channels",  "layers_per_block",
                                                  "act_fn",         "latent_channels",     "norm_num_groups",
                                                  "sample_size",    "scaling_factor",      "shift_factor",
                                                  "latents_mean",   "latents_std",         "force_upcast",
                                                  "use_quant_conv", "use_post_quant_conv", "mid_block_add_attention"};

// The number of block names, each of which must be `allowed`.
std::size_t readBlockTypes(const nlohmann::json& value, const std::string& key, const char* allowed) {
    return readBlockNames(value, key, kLevels, {allowed}).size();
}

std::optional<std::vector<float>> readLatentStats(const nlohmann::json& value, const std::string& key) {
    if (value.is_null()) return std::nullopt;
    if (!value.is_array() || value.empty() || value.size() > static_cast<std::size_t>(bounds::kMaxLatentChannels))
        reject(key, value, "expected null or an array of one number per latent channel");
    std::vector<float> v;
    for (const auto& item : value)
        v.push_back(static_cast<float>(readNumber(item, key, -1e6, 1e6, "a per-channel latent statistic")));
    return v;
}

// Reads one known key into `c`; block type counts go to `down`/`up`.
void readKey(VaeConfig& c, std::size_t& down, std::size_t& up, const std::string& key, const nlohmann::json& value) {
    if (key == "in_channels")
        c.inChannels = readInt(value, key, kImageChannels);
    else if (key == "out_channels")
        c.outChannels = readInt(value, key, kImageChannels);
    else if (key == "down_block_types")
        down = readBlockTypes(value, key, "DownEncoderBlock2D");
    else if (key == "up_block_types")
        up = readBlockTypes(value, key, "UpDecoderBlock2D");
    else if (key == "block_out_channels")
        c.blockOutChannels = readChannelList(value, key, kLevels, kBlockChannels);
    else if (key == "layers_per_block")
        c.layersPerBlock = readInt(value, key, kLayersPerBlock);
    else if (key == "act_fn")
        requireSilu(value, key);
    else if (key == "latent_channels")
        c.latentChannels = readInt(value, key, kLatentChannels);
    else if (key == "norm_num_groups")
        c.normNumGroups = readInt(value, key, kGroups);
    else if (key == "sample_size") {
        if (value.is_array() && value.size() == 2)
            c.sampleSize = readInt(value[0], key, kSampleSize);
        else if (value.is_number_integer())
            c.sampleSize = readInt(value, key, kSampleSize);
        else
            reject(key, value, "expected an integer or [height, width]");
    } else if (key == "scaling_factor")
        c.scalingFactor = static_cast<float>(
            readNumber(value, key, 1e-6, 1e6, "0.18215 in SD 1.x/2.x, 0.13025 in SDXL; latents are multiplied by it"));
    else if (key == "shift_factor") {
        if (value.is_null())
            c.shiftFactor.reset();
        else
            c.shiftFactor =
                static_cast<float>(readNumber(value, key, -1e6, 1e6, "null in SD; subtracted from latents"));
    } else if (key == "latents_mean")
        c.latentsMean = readLatentStats(value, key);
    else if (key == "latents_std")
        c.latentsStd = readLatentStats(value, key);
    else if (key == "force_upcast")
        c.forceUpcast = readBool(value, key);
    else if (key == "use_quant_conv")
        c.useQuantConv = readBool(value, key);
    else if (key == "use_post_quant_conv")
        c.usePostQuantConv = readBool(value, key);
    else if (key == "mid_block_add_attention")
        c.midBlockAddAttention = readBool(value, key);
}

// diffusers builds one block per block_out_channels entry and zips the type lists with it;
// a mismatch would build a different model.
void checkCrossKeys(const VaeConfig& c, std::size_t down, std::size_t up, const nlohmann::json& j) {
    requireLevelCount(j, "down_block_types", down, c.blockOutChannels.size());
    requireLevelCount(j, "up_block_types", up, c.blockOutChannels.size());
    requireGroupsDivide(c.normNumGroups, c.blockOutChannels);
    for (const auto& [key, stats] :
         {std::pair{"latents_mean", &c.latentsMean}, std::pair{"latents_std", &c.latentsStd}})
        if (*stats && (*stats)->size() != static_cast<std::size_t>(c.latentChannels))
            reject(key, given(j, key),
                   "has " + std::to_string((*stats)->size()) +
                       " entries; expected latent_channels = " + std::to_string(c.latentChannels));
    if (c.latentsStd)
        for (const float s : *c.latentsStd)
            if (s == 0.0f)
                reject("latents_std", given(j, "latents_std"), "latents are divided by it; no entry may be 0");
}

}  // namespace

VaeConfig vaeConfigFromJson(const nlohmann::json& j) {
    requireObject(j);
    VaeConfig c;
    std::size_t down = 1, up = 1;  // the defaults: one block of each
    std::vector<std::string> unknown;
    const std::set<std::string> defaults = forcedDefaults(j);
    for (const auto& [key, value] : j.items()) {
        if (key.empty() || key.front() == '_' || defaults.count(key) != 0) continue;
        if (kVaeKeys.count(key) == 0)
            unknown.push_back(key);
        else
            readKey(c, down, up, key, value);
    }
    checkCrossKeys(c, down, up, j);
    warnUnknownKeys(unknown);
    return c;
}

nlohmann::json toJson(const VaeConfig& c) {
    auto optionalList = [](const std::optional<std::vector<float>>& v) {
        return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
    };
    return nlohmann::json{
        {"_class_name", "AutoencoderKL"},
        {"in_channels", c.inChannels},
        {"out_channels", c.outChannels},
        {"down_block_types", std::vector<std::string>(c.blockOutChannels.size(), "DownEncoderBlock2D")},
        {"up_block_types", std::vector<std::string>(c.blockOutChannels.size(), "UpDecoderBlock2D")},
        {"block_out_channels", c.blockOutChannels},
        {"layers_per_block", c.layersPerBlock},
        {"act_fn", "silu"},
        {"latent_channels", c.latentChannels},
        {"norm_num_groups", c.normNumGroups},
        {"sample_size", c.sampleSize},
        {"scaling_factor", shortestDecimal(c.scalingFactor)},
        {"shift_factor", c.shiftFactor ? nlohmann::json(shortestDecimal(*c.shiftFactor)) : nlohmann::json(nullptr)},
        {"latents_mean", optionalList(c.latentsMean)},
        {"latents_std", optionalList(c.latentsStd)},
        {"force_upcast", c.forceUpcast},
        {"use_quant_conv", c.useQuantConv},
        {"use_post_quant_conv", c.usePostQuantConv},
        {"mid_block_add_attention", c.midBlockAddAttention},
    };
}

}  // namespace tessera
