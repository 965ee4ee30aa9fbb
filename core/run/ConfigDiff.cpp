#include "core/run/ConfigDiff.h"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "core/base/BoundedInput.h"

namespace tessera {

namespace {

std::map<std::string, nlohmann::json> flatten(const nlohmann::json& config) {
    std::map<std::string, nlohmann::json> leaves;
    for (const auto& [key, value] : config.items()) {
        if (value.is_object())
            for (const auto& [inner, innerValue] : value.items()) leaves[key + "." + inner] = innerValue;
        else
            leaves[key] = value;
    }
    return leaves;
}

std::string shown(const nlohmann::json& value) {
    if (value.is_string()) return value.get<std::string>().empty() ? "\"\"" : excerpt(value.get<std::string>());
    return excerpt(value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace

const std::vector<std::string>& workKeys() {
    static const std::vector<std::string> keys{"model", "width",    "height",  "steps", "scheduler",
                                               "init",  "strength", "upscale", "cfg"};
    return keys;
}

std::vector<SettingDifference> configDifferences(const RunConfig& a, const RunConfig& b) {
    const nlohmann::json jsonA = toJson(a), jsonB = toJson(b);
    const auto leavesA = flatten(jsonA), leavesB = flatten(jsonB);
    std::vector<SettingDifference> out;
    for (const auto& [key, valueA] : leavesA) {
        if (key.rfind("scheduler_options.", 0) == 0 && key != "scheduler_options.eta" &&
            key != "scheduler_options.timestep_spacing")
            continue;
        const auto other = leavesB.find(key);
        if (other == leavesB.end() || other->second == valueA) continue;
        const bool work = std::find(workKeys().begin(), workKeys().end(), key) != workKeys().end();
        out.push_back(SettingDifference{key, shown(valueA), shown(other->second), valueA, other->second, work});
    }
    return out;
}

std::string describeDifferences(const std::vector<SettingDifference>& differences, bool workOnly) {
    std::string text;
    for (const SettingDifference& d : differences) {
        if (workOnly && !d.changesWork) continue;
        text += (text.empty() ? "" : ", ") + d.key + " " + d.a + " -> " + d.b;
    }
    return text;
}

}  // namespace tessera
