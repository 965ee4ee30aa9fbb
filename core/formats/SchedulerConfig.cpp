// diffusers scheduler_config.json reader (diffusers' SchedulerMixin.from_config: the class's
// __init__ defaults overridden by the file's keys). Values Tessera cannot run are rejected naming
// the key, before anything is sized from them.
#include "core/formats/SchedulerConfig.h"

#include <cmath>
#include <cstdint>
#include <set>
#include <stdexcept>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "core/base/BoundedInput.h"
#include "core/formats/ConfigJson.h"

namespace tessera {

using namespace config_json;

SchedulerOptions schedulerOptionsFromJson(const nlohmann::json& j, std::string* className) {
    if (!j.is_object())
        throw std::runtime_error("scheduler_config.json: expected a JSON object, found " + std::string(j.type_name()));
    auto fail = [](const std::string& key, const nlohmann::json& value, const std::string& why) {
        throw std::runtime_error("scheduler_config.json: " + key + " = " + excerptJson(value) + ": " + why);
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
        if (key == "num_train_timesteps")
            o.numTrainTimesteps = integer(key, value, 1);
        else if (key == "beta_start")
            o.betaStart = static_cast<float>(number(key, value));
        else if (key == "beta_end")
            o.betaEnd = static_cast<float>(number(key, value));
        else if (key == "beta_schedule")
            o.betaSchedule = parseBetaSchedule(text(key, value), key);
        else if (key == "timestep_spacing")
            o.timestepSpacing = parseTimestepSpacing(text(key, value), key);
        else if (key == "steps_offset")
            o.stepsOffset = integer(key, value, 0);
        else if (key == "clip_sample")
            o.clipSample = boolean(key, value);
        else if (key == "clip_sample_range")
            o.clipSampleRange = static_cast<float>(number(key, value));
        else if (key == "set_alpha_to_one")
            o.setAlphaToOne = boolean(key, value);
        else if (key == "variance_type") {
            // fixed_small_log is the same σ as fixed_small (diffusers scheduling_ddpm.py
            // _get_variance).
            const std::string v = text(key, value);
            o.varianceType = parseVarianceType(v == "fixed_small_log" ? "fixed_small" : v, key);
        } else if (key == "prediction_type")
            o.predictionType = parsePredictionType(text(key, value), key);
        else if (key == "use_karras_sigmas")
            o.karrasSigmas = boolean(key, value);
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
