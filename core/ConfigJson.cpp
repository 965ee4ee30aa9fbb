#include "core/ConfigJson.h"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/BoundedInput.h"

namespace tessera::config_json {

void reject(const std::string& key, const nlohmann::json& value, const std::string& why) {
    throw std::runtime_error("config.json: " + key + " = " + excerptJson(value) + ": " + why);
}

int readInt(const nlohmann::json& value, const std::string& key, const IntRange& range) {
    if (!value.is_number_integer()) reject(key, value, "expected an integer");
    // Above INT64_MAX is outside every range: clamp so the comparison below stays exact.
    constexpr auto kLargest = std::numeric_limits<std::int64_t>::max();
    const bool huge = value.is_number_unsigned() && value.get<std::uint64_t>() > static_cast<std::uint64_t>(kLargest);
    const std::int64_t v = huge ? kLargest : value.get<std::int64_t>();
    if (v < range.min || v > range.max)
        reject(key, value, "expected an integer from " + std::to_string(range.min) + " to " +
                               std::to_string(range.max) + " (" + range.why + ")");
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
    if (!value.is_number()) reject(key, value, "expected a number");
    const double v = value.get<double>();
    if (!std::isfinite(v) || v < min || v > max)
        reject(key, value, "expected a number from " + nlohmann::json(min).dump() + " to " +
                               nlohmann::json(max).dump() + " (" + why + ")");
    return v;
}

std::string readString(const nlohmann::json& value, const std::string& key) {
    if (!value.is_string()) reject(key, value, "expected a string");
    return value.get<std::string>();
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
