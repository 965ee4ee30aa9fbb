#include "core/formats/ConfigJson.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string_view>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "core/base/BoundedInput.h"

namespace tessera::config_json {

void reject(const std::string& key, const nlohmann::json& value, const std::string& why) {
    throw std::runtime_error("config.json: " + key + " = " + excerptJson(value) + ": " + why);
}

int readInt(const nlohmann::json& value, const std::string& key, const IntRange& range) {
    // A wrong type (a string, a float such as 77.0) and a value out of range both name the range.
    const std::string expected = "expected an integer from " + std::to_string(range.min) + " to " +
                                 std::to_string(range.max) + " (" + range.why + ")";
    if (!value.is_number_integer()) reject(key, value, expected);
    // Above INT64_MAX is outside every range: clamp so the comparison below stays exact.
    constexpr auto kLargest = std::numeric_limits<std::int64_t>::max();
    const bool huge = value.is_number_unsigned() && value.get<std::uint64_t>() > static_cast<std::uint64_t>(kLargest);
    const std::int64_t v = huge ? kLargest : value.get<std::int64_t>();
    if (v < range.min || v > range.max) reject(key, value, expected);
    return static_cast<int>(v);
}

std::optional<int> readOptionalInt(const nlohmann::json& value, const std::string& key, const IntRange& range) {
    if (value.is_null()) return std::nullopt;
    return readInt(value, key, range);
}

bool readBool(const nlohmann::json& value, const std::string& key) {
    if (!value.is_boolean()) reject(key, value, "expected true or false");
    return value.get<bool>();
}

double readNumber(const nlohmann::json& value, const std::string& key, double min, double max, const char* why) {
    const std::string expected =
        "expected a number from " + nlohmann::json(min).dump() + " to " + nlohmann::json(max).dump() + " (" + why + ")";
    if (!value.is_number()) reject(key, value, expected);
    const double v = value.get<double>();
    if (!std::isfinite(v) || v < min || v > max) reject(key, value, expected);
    return v;
}

std::string readString(const nlohmann::json& value, const std::string& key) {
    if (!value.is_string()) reject(key, value, "expected a string");
    return value.get<std::string>();
}

void requireLevelArray(const nlohmann::json& value, const std::string& key, const char* what, const LevelLimit& limit) {
    if (!value.is_array() || value.empty()) reject(key, value, std::string("expected a non-empty array of ") + what);
    if (value.size() > static_cast<std::size_t>(limit.max))
        reject(key, value,
               "has " + std::to_string(value.size()) + " entries; at most " + std::to_string(limit.max) +
                   " levels are allowed (" + limit.published + ")");
}

std::string stripUNetRes(std::string name) {
    constexpr std::string_view prefix = "UNetRes";
    if (name.rfind(prefix, 0) == 0) name.erase(0, prefix.size());
    return name;
}

std::vector<std::size_t> readBlockNames(const nlohmann::json& value, const std::string& key, const LevelLimit& limit,
                                        const std::vector<const char*>& allowed) {
    requireLevelArray(value, key, "block names", limit);
    std::string names;
    for (const char* name : allowed) names += (names.empty() ? "" : " or ") + std::string(name);
    if (allowed.size() == 1) names = "only " + names;
    std::vector<std::size_t> blocks;
    for (const auto& item : value) {
        const std::string name = stripUNetRes(readString(item, key));
        const auto it = std::find_if(allowed.begin(), allowed.end(), [&name](const char* a) { return name == a; });
        if (it == allowed.end()) reject(key, value, inQuotes(name) + " is not supported (" + names + ")");
        blocks.push_back(static_cast<std::size_t>(it - allowed.begin()));
    }
    return blocks;
}

std::vector<int> readChannelList(const nlohmann::json& value, const std::string& key, const LevelLimit& limit,
                                 const IntRange& range) {
    requireLevelArray(value, key, "channel counts", limit);
    std::vector<int> channels;
    for (const auto& item : value) channels.push_back(readInt(item, key, range));
    return channels;
}

void requireSilu(const nlohmann::json& value, const std::string& key) {
    const std::string act = readString(value, key);
    if (act != "silu" && act != "swish") reject(key, value, "only \"silu\" (or \"swish\") is supported");
}

void requireObject(const nlohmann::json& config) {
    if (!config.is_object())
        throw std::runtime_error("config.json: expected a JSON object, found " + std::string(config.type_name()));
}

nlohmann::json given(const nlohmann::json& config, const char* key) {
    return config.contains(key) ? config.at(key) : nlohmann::json();
}

void requireLevelCount(const nlohmann::json& config, const char* key, std::size_t count, std::size_t levels) {
    if (count != levels)
        reject(key, given(config, key),
               "has " + std::to_string(count) + " entries but block_out_channels has " + std::to_string(levels));
}

void requireGroupsDivide(int groups, const std::vector<int>& blockOutChannels) {
    for (const int channels : blockOutChannels)
        if (channels % groups != 0)
            reject("norm_num_groups", groups, "does not divide block_out_channels entry " + std::to_string(channels));
}

void requireFreqShiftBelowHalf(int freqShift, int firstChannels) {
    if (freqShift > 0 && firstChannels / 2 <= freqShift)
        reject("freq_shift", freqShift,
               "must be less than block_out_channels[0] / 2 = " + std::to_string(firstChannels / 2));
}

void requireSampleSizeDivisible(const nlohmann::json& value, int height, int width, int factor) {
    if (height % factor != 0 || width % factor != 0)
        reject("sample_size", value, "must be divisible by " + std::to_string(factor) + " (2^(levels-1))");
}

void warnUnknownKeys(const std::vector<std::string>& keys) {
    if (!keys.empty())
        spdlog::warn("config.json: ignoring {} unknown key{}: {}", keys.size(), keys.size() == 1 ? "" : "s",
                     excerptList(keys));
}

std::set<std::string> forcedDefaults(const nlohmann::json& j) {
    std::set<std::string> keys;
    const auto it = j.find("_use_default_values");
    if (it == j.end() || it->is_null()) return keys;
    if (!it->is_array()) reject("_use_default_values", *it, "expected an array of key names");
    for (const auto& item : *it) keys.insert(readString(item, "_use_default_values"));
    return keys;
}

double shortestDecimal(float value) {
    std::array<char, 64> buffer{};
    const auto result = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value);
    return std::strtod(std::string(buffer.data(), result.ptr).c_str(), nullptr);
}

}  // namespace tessera::config_json
