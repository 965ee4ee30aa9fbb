// Range-checked readers of diffusers config.json values, shared by the model families'
// config readers (core/ModelConfig.cpp: UNet2DModel, core/VaeConfig.cpp: AutoencoderKL).
// Every rejection is a std::runtime_error "config.json: <key> = <short escaped excerpt>: <why>",
// naming what is allowed. Qt-free.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace tessera::config_json {

[[noreturn]] void reject(const std::string& key, const nlohmann::json& value, const std::string& why);

// An allowed range of an integer key and why it is that.
struct IntRange {
    std::int64_t min, max;
    const char* why;
};

int readInt(const nlohmann::json& value, const std::string& key, const IntRange& range);
// null -> nullopt, else readInt.
std::optional<int> readOptionalInt(const nlohmann::json& value, const std::string& key, const IntRange& range);
bool readBool(const nlohmann::json& value, const std::string& key);
// A finite number in [min, max].
double readNumber(const nlohmann::json& value, const std::string& key, double min, double max, const char* why);
std::string readString(const nlohmann::json& value, const std::string& key);
// The key names listed in `_use_default_values` (diffusers resets them to the __init__
// default, so readers skip them); rejects a value that is not an array of strings.
std::set<std::string> forcedDefaults(const nlohmann::json& config);
// A float as the shortest decimal that reads back to it (1e-6f as 1e-06, not 9.99e-07), for
// writing configs.
double shortestDecimal(float value);

}  // namespace tessera::config_json
