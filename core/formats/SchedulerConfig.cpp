// diffusers scheduler_config.json reader (diffusers' SchedulerMixin.from_config: the class's
// __init__ defaults overridden by the file's keys). Values Tessera cannot run are rejected naming
// the key, before anything is sized from them.
#include "core/formats/SchedulerConfig.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <stdexcept>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "core/base/BoundedInput.h"
#include "core/base/FormatNumber.h"
#include "core/formats/ConfigJson.h"

namespace tessera {

using namespace config_json;

namespace {

// The schedule holds one entry per training timestep; diffusers models use 1000 (the sampler's
// own bound, core/sampling/Scheduler.h, is the same).
constexpr std::int64_t kMaxTrainTimesteps = 100000;

}  // namespace

SchedulerOptions schedulerOptionsFromJson(const nlohmann::json& j, std::string* className) {
    if (!j.is_object())
        throw std::runtime_error("scheduler_config.json: expected a JSON object, found " + std::string(j.type_name()));
    auto fail = [](const std::string& key, const nlohmann::json& value, const std::string& why) {
        throw std::runtime_error("scheduler_config.json: " + key + " = " + excerptJson(value) + ": " + why);
    };
    auto number = [&](const std::string& key, const nlohmann::json& value) {
        if (!value.is_number() || !std::isfinite(value.get<double>()) ||
            std::abs(value.get<double>()) > std::numeric_limits<float>::max())
            fail(key, value, "expected a number (one a 32-bit float holds)");
        return value.get<double>();
    };
    // A beta is the variance of the noise of one training timestep: above 0 (0 adds none) and
    // below 1 (1 destroys the signal), and large enough that a 32-bit float does not read it as 0.
    auto beta = [&](const std::string& key, const nlohmann::json& value, const char* published) {
        const std::string expected = std::string("expected a number above 0 and below 1 (") + published +
                                     "; at least " + formatNumber(std::numeric_limits<float>::min()) +
                                     ", the smallest a 32-bit float holds in full)";
        if (!value.is_number()) fail(key, value, expected);
        const double v = value.get<double>();
        if (!(v >= std::numeric_limits<float>::min() && v < 1.0)) fail(key, value, expected);
        return static_cast<float>(v);
    };
    // An integer in [minimum, maximum]; a wrong type or a value outside names the range.
    auto integer = [&](const std::string& key, const nlohmann::json& value, std::int64_t minimum, std::int64_t maximum,
                       const char* why) {
        const std::string expected =
            "expected an integer from " + std::to_string(minimum) + " to " + std::to_string(maximum) + " (" + why + ")";
        if (!value.is_number_integer() ||
            (value.is_number_unsigned() && value.get<std::uint64_t>() > static_cast<std::uint64_t>(maximum)))
            fail(key, value, expected);
        const std::int64_t v = value.get<std::int64_t>();
        if (v < minimum || v > maximum) fail(key, value, expected);
        return static_cast<int>(v);
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
            o.numTrainTimesteps =
                integer(key, value, 1, kMaxTrainTimesteps, "1000 in diffusers models; one table entry per timestep");
        else if (key == "beta_start")
            o.betaStart = beta(key, value, "diffusers models use 0.0001 to 0.00085");
        else if (key == "beta_end")
            o.betaEnd = beta(key, value, "diffusers models use 0.012 to 0.02");
        else if (key == "beta_schedule")
            o.betaSchedule = parseBetaSchedule(text(key, value), key);
        else if (key == "timestep_spacing")
            o.timestepSpacing = parseTimestepSpacing(text(key, value), key);
        else if (key == "steps_offset")
            o.stepsOffset = integer(key, value, 0, kMaxTrainTimesteps - 1, "0 or 1 in diffusers models");
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
    if (o.stepsOffset >= o.numTrainTimesteps)
        fail("steps_offset", o.stepsOffset,
             "expected an integer from 0 to num_train_timesteps - 1 (" + std::to_string(o.numTrainTimesteps - 1) +
                 "): the first timestep must be one of the schedule's");
    return o;
}

}  // namespace tessera
