// Range-checked readers of diffusers config.json values, shared by the model families'
// config readers (core/models/unet/UNetConfig.cpp: UNet2DModel, core/models/sd/UNetCondConfig.cpp:
// UNet2DConditionModel, core/models/vae/VaeConfig.cpp: AutoencoderKL).
// Every rejection is a std::runtime_error "config.json: <key> = <short escaped excerpt>: <why>",
// naming what is allowed. Qt-free.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tessera::config_json {

[[noreturn]] void reject(const std::string& key, const nlohmann::json& value, const std::string& why);

// An allowed range of an integer key and why it is that.
struct IntRange {
    std::int64_t min, max;
    const char* why;
};

// How many resolution levels a family allows, and what its published models have (for the
// message: "published UNets have 3 to 7").
struct LevelLimit {
    int max;
    const char* published;
};

int readInt(const nlohmann::json& value, const std::string& key, const IntRange& range);
// null -> nullopt, else readInt.
std::optional<int> readOptionalInt(const nlohmann::json& value, const std::string& key, const IntRange& range);
bool readBool(const nlohmann::json& value, const std::string& key);
// A finite number in [min, max].
double readNumber(const nlohmann::json& value, const std::string& key, double min, double max, const char* why);
std::string readString(const nlohmann::json& value, const std::string& key);
// A non-empty array of at most limit.max entries (one per resolution level) of `what`.
void requireLevelArray(const nlohmann::json& value, const std::string& key, const char* what, const LevelLimit& limit);
// diffusers' get_down_block/get_up_block strip a "UNetRes" prefix before matching.
std::string stripUNetRes(std::string name);
// A level array of block names, each (after stripUNetRes) one of `allowed`: each entry's index
// in `allowed`, in order ("'X' is not supported (A or B)" otherwise).
std::vector<std::size_t> readBlockNames(const nlohmann::json& value, const std::string& key, const LevelLimit& limit,
                                        const std::vector<const char*>& allowed);
// readBlockNames with each name's block type: {{"DownBlock2D", Down}, {"AttnDownBlock2D", AttnDown}}.
template <typename Block>
std::vector<Block> readBlocks(const nlohmann::json& value, const std::string& key, const LevelLimit& limit,
                              std::initializer_list<std::pair<const char*, Block>> names) {
    std::vector<const char*> allowed;
    for (const auto& name : names) allowed.push_back(name.first);
    std::vector<Block> blocks;
    for (const std::size_t i : readBlockNames(value, key, limit, allowed)) blocks.push_back(names.begin()[i].second);
    return blocks;
}
// block_out_channels: a level array of channel counts, each in `range`.
std::vector<int> readChannelList(const nlohmann::json& value, const std::string& key, const LevelLimit& limit,
                                 const IntRange& range);
// act_fn: diffusers' families here only run SiLU ("swish" is its other name).
void requireSilu(const nlohmann::json& value, const std::string& key);
// The config must be a JSON object ("config.json: expected a JSON object, found array").
void requireObject(const nlohmann::json& config);

// Checks between keys, each rejecting with the key and value named.
// `config`'s value for `key`, or null when it is not given (for messages).
nlohmann::json given(const nlohmann::json& config, const char* key);
// A per-level list (`count` entries, e.g. down_block_types) has one entry per block_out_channels entry.
void requireLevelCount(const nlohmann::json& config, const char* key, std::size_t count, std::size_t levels);
// norm_num_groups divides every block width (each GroupNorm normalises a sum of them).
void requireGroupsDivide(int groups, const std::vector<int>& blockOutChannels);
// The sinusoidal time embedding divides by (block_out_channels[0] / 2 - freq_shift).
void requireFreqShiftBelowHalf(int freqShift, int firstChannels);
// sample_size must survive every downsampling (`factor` = 2^(levels-1)).
void requireSampleSizeDivisible(const nlohmann::json& value, int height, int width, int factor);
// One summarised warning for the keys a reader ignores, as diffusers does.
void warnUnknownKeys(const std::vector<std::string>& keys);
// The key names listed in `_use_default_values` (diffusers resets them to the __init__
// default, so readers skip them); rejects a value that is not an array of strings.
std::set<std::string> forcedDefaults(const nlohmann::json& config);
// A float as the shortest decimal that reads back to it (1e-6f as 1e-06, not 9.99e-07), for
// writing configs.
double shortestDecimal(float value);

}  // namespace tessera::config_json
