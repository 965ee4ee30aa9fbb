// Readers of diffusers config.json values with range checks, shared by the model families'
// config parsers (core/ModelConfig.cpp, core/UNetCondConfig.cpp). Every rejection throws
// std::runtime_error "config.json: <key> = <short excerpt of the value>: <why, what is allowed>".
// Qt-free.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace tessera::config_json {

// An allowed range of an integer key and why it is that.
struct IntRange {
    std::int64_t min, max;
    const char* why;
};

[[noreturn]] void reject(const std::string& key, const nlohmann::json& value, const std::string& why);
int readInt(const nlohmann::json& value, const std::string& key, const IntRange& range);
std::optional<int> readOptionalInt(const nlohmann::json& value, const std::string& key, const IntRange& range);
bool readBool(const nlohmann::json& value, const std::string& key);
// A finite number in [min, max].
double readNumber(const nlohmann::json& value, const std::string& key, double min, double max, const char* why);
std::string readString(const nlohmann::json& value, const std::string& key);
// A non-empty array of at most model_config_bounds::kMaxLevels entries (one per resolution level).
void requireLevelArray(const nlohmann::json& value, const std::string& key, const char* what);
// diffusers' get_down_block/get_up_block strip a "UNetRes" prefix before matching.
std::string stripUNetRes(std::string name);
// The names in `_use_default_values`: diffusers resets them to the __init__ default.
std::set<std::string> forcedDefaults(const nlohmann::json& j);

}  // namespace tessera::config_json
