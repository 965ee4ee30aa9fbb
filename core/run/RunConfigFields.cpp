#include "core/run/RunConfigFields.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/base/BoundedInput.h"
#include "core/base/FormatNumber.h"
#include "core/run/SamplerNames.h"

namespace tessera {

namespace {

using Json = nlohmann::json;

// ---------------------------------------------------------------------------
// JSON reading: each reader names the key in its error.

// A JSON value as a short excerpt for messages: a 50 MB string or array is not echoed whole,
// and text that is not valid UTF-8 is shown escaped rather than making dump() throw.
std::string jsonExcerpt(const nlohmann::json& value) {
    if (value.is_string()) return "\"" + excerpt(value.get_ref<const std::string&>()) + "\"";
    return excerpt(value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

[[noreturn]] void wrongType(const std::string& key, const nlohmann::json& value, const std::string& expected) {
    throw ValidationError(key, key + ": expected " + expected + ", got " + jsonExcerpt(value));
}

// "allowed 1 to 1000": the range intSettingRange gives `field`, else a 32-bit integer's.
std::string allowedInts(std::string_view field, const RunConfig* config) {
    const std::optional<IntLimit> range = config ? intSettingRange(field, *config) : std::nullopt;
    const IntLimit r =
        range.value_or(IntLimit{std::numeric_limits<int>::min(), std::numeric_limits<int>::max(), "a 32-bit integer"});
    return "allowed " + std::to_string(r.lo) + " to " + std::to_string(r.hi);
}

// A whole number no int holds: quoted as written, with the range the setting allows (validate()
// cannot see it: the value would wrap).
[[noreturn]] void intOutOfRange(const std::string& key, const std::string& written, const RunConfig* config) {
    throw ValidationError(key, key + ": " + written + " is out of range; " + allowedInts(key, config));
}

int readInt(const nlohmann::json& value, const std::string& key, const RunConfig* config = nullptr) {
    if (value.is_number_integer()) {
        if (value.is_number_unsigned()) {
            const auto u = value.get<std::uint64_t>();
            if (u > static_cast<std::uint64_t>(std::numeric_limits<int>::max()))
                intOutOfRange(key, value.dump(), config);
            return static_cast<int>(u);
        }
        const auto v = value.get<std::int64_t>();
        if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
            intOutOfRange(key, value.dump(), config);
        return static_cast<int>(v);
    }
    if (value.is_number_float()) {
        const double d = value.get<double>();
        if (std::isfinite(d) && d == std::floor(d)) {
            if (std::abs(d) >= 1e9) intOutOfRange(key, value.dump(), config);
            return static_cast<int>(d);
        }
    }
    wrongType(key, value, "a whole number");
}

double readReal(const nlohmann::json& value, const std::string& key) {
    if (!value.is_number()) wrongType(key, value, "a number");
    return value.get<double>();
}

// A number kept as a 32-bit float: refused, quoted as written, where the float would not hold it
// (1e-300 would read as 0, 1e300 as infinity); `allowed` says what the setting takes.
float readFloat(const nlohmann::json& value, const std::string& key, const std::string& allowed) {
    const double d = readReal(value, key);
    const double magnitude = std::abs(d);
    if (magnitude > std::numeric_limits<float>::max() ||
        (magnitude != 0 && magnitude < std::numeric_limits<float>::min()))
        throw ValidationError(key, key + ": " + value.dump() + " is out of range; allowed " + allowed + " (at least " +
                                       formatNumber(std::numeric_limits<float>::min()) +
                                       ", the smallest a 32-bit float holds in full)");
    return static_cast<float>(d);
}

bool readBool(const nlohmann::json& value, const std::string& key) {
    if (!value.is_boolean()) wrongType(key, value, "true or false");
    return value.get<bool>();
}

std::string readString(const nlohmann::json& value, const std::string& key) {
    if (!value.is_string()) wrongType(key, value, "a string");
    return value.get<std::string>();
}

// A seed is any uint64; a decimal string is accepted too because JSON tools that hold numbers
// as doubles cannot carry 64-bit seeds exactly.
std::uint64_t readSeed(const nlohmann::json& value) {
    if (value.is_number_unsigned()) return value.get<std::uint64_t>();
    if (value.is_number_integer() && value.get<std::int64_t>() >= 0)
        return static_cast<std::uint64_t>(value.get<std::int64_t>());
    if (value.is_string()) {
        const auto text = value.get<std::string>();
        std::uint64_t seed = 0;
        const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), seed);
        if (!text.empty() && ec == std::errc() && ptr == text.data() + text.size()) return seed;
    }
    wrongType("seed", value, "a whole number from 0 to 18446744073709551615");
}

bool parseDouble(const std::string& text, double& out) {
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return !text.empty() && ec == std::errc() && ptr == text.data() + text.size() && std::isfinite(out);
}

// overlap: a whole number = pixels; a number below 1 = a fraction of the tile; "25%" = a percentage;
// a string holding either of the first two is read the same way.
void readOverlap(const nlohmann::json& value, RunConfig& config) {
    const std::string expected = "pixels (16), a fraction below 1 (0.25) or a percentage (\"25%\")";
    auto setPixels = [&](double px) {
        if (px != std::floor(px) || std::abs(px) > 1e9) wrongType("overlap", value, expected);
        config.overlapPx = static_cast<int>(px);
        config.overlapFraction.reset();
    };
    if (value.is_number_integer()) {
        config.overlapPx = readInt(value, "overlap", &config);
        config.overlapFraction.reset();
        return;
    }
    if (value.is_number_float()) {
        const double d = value.get<double>();
        if (!std::isfinite(d)) wrongType("overlap", value, expected);
        if (d < 1.0)
            config.overlapFraction = d;  // negative fractions are left for validate() to name
        else
            setPixels(d);
        return;
    }
    if (value.is_string()) {
        std::string text = value.get<std::string>();
        double number = 0;
        if (!text.empty() && text.back() == '%') {
            if (!parseDouble(text.substr(0, text.size() - 1), number)) wrongType("overlap", value, expected);
            config.overlapFraction = number / 100.0;
            return;
        }
        if (!parseDouble(text, number)) wrongType("overlap", value, expected);
        if (text.find_first_of(".eE") != std::string::npos && number < 1.0)
            config.overlapFraction = number;
        else
            setPixels(number);
        return;
    }
    wrongType("overlap", value, expected);
}

[[noreturn]] void unknownKey(const std::string& key, const std::vector<std::string_view>& known) {
    std::string list;
    for (std::size_t i = 0; i < known.size(); ++i) {
        if (i > 0) list += ", ";
        list += known[i];
    }
    throw ValidationError(excerpt(key), excerpt(key) + ": unknown key; known keys are " + list);
}

const std::vector<std::string_view> kSchedulerOptionKeys{
    "num_train_timesteps", "beta_start",      "beta_end",          "beta_schedule",    "timestep_spacing",
    "steps_offset",        "clip_sample",     "clip_sample_range", "set_alpha_to_one", "eta",
    "variance_type",       "prediction_type", "use_karras_sigmas"};

SchedulerOptions schedulerOptionsFromJson(const nlohmann::json& j, SchedulerOptions o) {
    if (!j.is_object()) wrongType("scheduler_options", j, "an object");
    for (const auto& [key, value] : j.items()) {
        if (key == "num_train_timesteps")
            o.numTrainTimesteps = readInt(value, key);
        else if (key == "beta_start")
            o.betaStart = readFloat(value, key, "above 0 and below 1");
        else if (key == "beta_end")
            o.betaEnd = readFloat(value, key, "above beta_start and below 1");
        else if (key == "beta_schedule")
            o.betaSchedule = parseBetaSchedule(readString(value, key), key);
        else if (key == "timestep_spacing")
            o.timestepSpacing = parseTimestepSpacing(readString(value, key), key);
        else if (key == "steps_offset")
            o.stepsOffset = readInt(value, key);
        else if (key == "clip_sample")
            o.clipSample = readBool(value, key);
        else if (key == "clip_sample_range")
            o.clipSampleRange = readFloat(value, key, "above 0");
        else if (key == "set_alpha_to_one")
            o.setAlphaToOne = readBool(value, key);
        else if (key == "eta")
            o.eta = readFloat(value, key, "0 to 1");
        else if (key == "variance_type")
            o.varianceType = parseVarianceType(readString(value, key), key);
        else if (key == "prediction_type")
            o.predictionType = parsePredictionType(readString(value, key), key);
        else if (key == "use_karras_sigmas")
            o.karrasSigmas = readBool(value, key);
        else
            unknownKey("scheduler_options." + key, kSchedulerOptionKeys);
    }
    return o;
}

// A float stored in JSON as the double whose shortest text equals the float's shortest text,
// so 1e-4f is written as 0.0001 rather than 9.99999974737875e-05 (and still reads back exactly).
double tidyDouble(float value) {
    if (!std::isfinite(value)) return static_cast<double>(value);
    return std::strtod(formatNumber(value).c_str(), nullptr);
}

// ---------------------------------------------------------------------------
// CLI text: each parser names the field in its error, quoting a short excerpt of the text.

[[noreturn]] void fail(const std::string& field, const std::string& message) {
    throw ValidationError(field, field + ": " + message);
}

int parseIntText(const std::string& field, const std::string& text, const RunConfig& config) {
    constexpr long long lo = -1000000000LL, hi = 1000000000LL;
    long long value = 0;
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (text.empty() || ec == std::errc::invalid_argument || ptr != end)
        fail(field, inQuotes(text) + " is not a whole number");
    if (ec == std::errc::result_out_of_range || value < lo || value > hi)
        fail(field, inQuotes(text) + " is out of range; " + allowedInts(field, &config));
    return static_cast<int>(value);
}

double parseRealText(const std::string& field, const std::string& text) {
    double value = 0;
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(value))
        fail(field, inQuotes(text) + " is not a number");
    return value;
}

std::uint64_t parseSeedText(const std::string& text) {
    std::uint64_t value = 0;
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (text.empty() || ec != std::errc() || ptr != end)
        fail("seed", inQuotes(text) + " is not a whole number from 0 to 18446744073709551615");
    return value;
}

// "16" = pixels; "25%" or "0.25" = a fraction of the tile.
void parseOverlapText(RunConfig& config, const std::string& text) {
    if (!text.empty() && text.back() == '%') {
        const double percent = parseRealText("overlap", text.substr(0, text.size() - 1));
        if (percent < 0 || percent >= 100)
            fail("overlap", inQuotes(text) + " is not allowed; a percentage must be 0% to below 100%");
        config.overlapFraction = percent / 100.0;
    } else if (text.find_first_of(".eE") != std::string::npos) {
        const double fraction = parseRealText("overlap", text);
        if (fraction < 0 || fraction >= 1)
            fail("overlap",
                 inQuotes(text) + " is not allowed; give pixels (16), a percentage (25%) or a fraction below 1 (0.25)");
        config.overlapFraction = fraction;
    } else {
        config.overlapPx = parseIntText("overlap", text, config);
        config.overlapFraction.reset();
    }
}

// A1111's names: "Euler a", "DPM++ 2M Karras", "DPM++ 2M", "Euler", "DDIM".
void parseSamplerText(RunConfig& config, const std::string& text) {
    const auto found = samplerFromDisplayName(text, "");
    if (!found)
        fail("sampler", inQuotes(text) +
                            " is not a sampler Tessera has; use Euler, Euler a, DPM++ 2M, "
                            "DPM++ 2M Karras, DPM++ 2M SDE, DPM++ 2M SDE Karras, DDIM or DDPM");
    config.scheduler = found->first;
    config.schedulerOptions.karrasSigmas = found->second;
}

// --lora FILE[:TE[:UNET]]: a path or name, then up to two multipliers, A1111's <lora:name:te:unet>
// (extensions-builtin/Lora/extra_networks_lora.py: unet defaults to te, te to 1). A trailing ":x"
// that is no number belongs to the file's name.
LoraSetting parseLoraText(const std::string& text) {
    LoraSetting lora;
    std::string file = text;
    std::vector<double> multipliers;
    while (multipliers.size() < 2) {
        const auto colon = file.rfind(':');
        double value = 0;
        if (colon == std::string::npos || colon == 0 || !parseDouble(file.substr(colon + 1), value)) break;
        multipliers.insert(multipliers.begin(), value);
        file.resize(colon);
    }
    if (file.empty()) fail("lora", inQuotes(text) + " names no LoRA; give FILE, FILE:WEIGHT or FILE:TE:UNET");
    lora.file = file;
    if (!multipliers.empty()) lora.teMultiplier = lora.unetMultiplier = multipliers[0];
    if (multipliers.size() > 1) lora.unetMultiplier = multipliers[1];
    return lora;
}

Json lorasJson(const std::vector<LoraSetting>& loras) {
    Json list = Json::array();
    for (const LoraSetting& l : loras)
        list.push_back({{"file", l.file}, {"te", l.teMultiplier}, {"unet", l.unetMultiplier}});
    return list;
}

// [{"file": "name or path", "te": 1, "unet": 1}, ...]; te defaults to 1, unet to te.
std::vector<LoraSetting> lorasFromJson(const Json& value) {
    if (!value.is_array()) wrongType("loras", value, "an array of {\"file\", \"te\", \"unet\"} objects");
    std::vector<LoraSetting> loras;
    for (const Json& item : value) {
        if (!item.is_object()) wrongType("loras", item, "an object {\"file\", \"te\", \"unet\"}");
        LoraSetting lora;
        bool unetGiven = false;
        for (const auto& [key, v] : item.items()) {
            if (key == "file") {
                lora.file = readString(v, "loras.file");
            } else if (key == "te") {
                lora.teMultiplier = readReal(v, "loras.te");
            } else if (key == "unet") {
                lora.unetMultiplier = readReal(v, "loras.unet");
                unetGiven = true;
            } else {
                unknownKey("loras." + key, {"file", "te", "unet"});
            }
        }
        if (!unetGiven) lora.unetMultiplier = lora.teMultiplier;
        loras.push_back(std::move(lora));
    }
    return loras;
}

Json controlNetsJson(const std::vector<ControlNetUnit>& units) {
    Json list = Json::array();
    for (const ControlNetUnit& u : units)
        list.push_back({{"model", u.model},
                        {"image", u.image},
                        {"weight", u.weight},
                        {"start", u.start},
                        {"end", u.end},
                        {"mode", toString(u.mode)},
                        {"preprocessor", u.preprocessor},
                        {"down_sampling", u.downSampling},
                        {"colorfix_variation", u.colorfixVariation},
                        {"colorfix_sharpness", u.colorfixSharpness}});
    return list;
}

// [{"model", "image", "weight", "start", "end", "mode", "preprocessor", "down_sampling",
// "colorfix_variation", "colorfix_sharpness"}, ...];
// a missing key keeps ControlNetUnit's default.
std::vector<ControlNetUnit> controlNetsFromJson(const Json& value) {
    static const std::vector<std::string_view> keys{"model",
                                                    "image",
                                                    "weight",
                                                    "start",
                                                    "end",
                                                    "mode",
                                                    "preprocessor",
                                                    "down_sampling",
                                                    "colorfix_variation",
                                                    "colorfix_sharpness"};
    if (!value.is_array())
        wrongType("controlnets", value, "an array of {\"model\", \"image\", \"weight\", ...} objects");
    std::vector<ControlNetUnit> units;
    for (const Json& item : value) {
        if (!item.is_object()) wrongType("controlnets", item, "an object {\"model\", \"image\", \"weight\", ...}");
        ControlNetUnit u;
        for (const auto& [key, v] : item.items()) {
            if (key == "model") {
                u.model = readString(v, "controlnets.model");
            } else if (key == "image") {
                u.image = readString(v, "controlnets.image");
            } else if (key == "weight") {
                u.weight = readReal(v, "controlnets.weight");
            } else if (key == "start") {
                u.start = readReal(v, "controlnets.start");
            } else if (key == "end") {
                u.end = readReal(v, "controlnets.end");
            } else if (key == "mode") {
                const std::optional<ControlMode> mode = controlModeFromString(readString(v, "controlnets.mode"));
                if (!mode) wrongType("controlnets.mode", v, "balanced, prompt or controlnet");
                u.mode = *mode;
            } else if (key == "preprocessor") {
                u.preprocessor = readString(v, "controlnets.preprocessor");
            } else if (key == "down_sampling") {
                u.downSampling = readReal(v, "controlnets.down_sampling");
            } else if (key == "colorfix_variation") {
                u.colorfixVariation = readReal(v, "controlnets.colorfix_variation");
            } else if (key == "colorfix_sharpness") {
                u.colorfixSharpness = readReal(v, "controlnets.colorfix_sharpness");
            } else {
                unknownKey("controlnets." + key, keys);
            }
        }
        units.push_back(std::move(u));
    }
    return units;
}

Json schedulerOptionsJson(const SchedulerOptions& o) {
    return {
        {"num_train_timesteps", o.numTrainTimesteps},
        {"beta_start", tidyDouble(o.betaStart)},
        {"beta_end", tidyDouble(o.betaEnd)},
        {"beta_schedule", toString(o.betaSchedule)},
        {"timestep_spacing", toString(o.timestepSpacing)},
        {"steps_offset", o.stepsOffset},
        {"clip_sample", o.clipSample},
        {"clip_sample_range", tidyDouble(o.clipSampleRange)},
        {"set_alpha_to_one", o.setAlphaToOne},
        {"eta", tidyDouble(o.eta)},
        {"variance_type", toString(o.varianceType)},
        {"prediction_type", toString(o.predictionType)},
        {"use_karras_sigmas", o.karrasSigmas},
    };
}

// ---------------------------------------------------------------------------
// Row builders: one per kind of value, so each row says only what is its own.

struct Names {
    std::string_view name, flag, valueName, help, uiLabel, example;
};

// The JSON key is the name unless a row says otherwise.
RunConfigField row(const Names& n) {
    return RunConfigField{n.name, n.name, n.flag, n.valueName, n.help, n.uiLabel, n.example, {}, {}, {}, {}, {}};
}

RunConfigField intRow(const Names& n, int RunConfig::*m, std::optional<IntLimit> range = std::nullopt) {
    RunConfigField f = row(n);
    const std::string key(n.name);
    f.write = [m](const RunConfig& c) { return Json(c.*m); };
    f.read = [m, key](RunConfig& c, const Json& v) { c.*m = readInt(v, key, &c); };
    f.parse = [m, key](RunConfig& c, const std::string& t) { c.*m = parseIntText(key, t, c); };
    f.range = range;
    return f;
}

// A count whose 0 means "auto": the word itself is read too, on the command line and in JSON.
RunConfigField autoIntRow(const Names& n, int RunConfig::*m, IntLimit range) {
    RunConfigField f = intRow(n, m, range);
    const std::string key(n.name);
    f.read = [m, key](RunConfig& c, const Json& v) {
        c.*m = v.is_string() && v.get_ref<const std::string&>() == "auto" ? 0 : readInt(v, key, &c);
    };
    f.parse = [m, key](RunConfig& c, const std::string& t) { c.*m = t == "auto" ? 0 : parseIntText(key, t, c); };
    return f;
}

RunConfigField realRow(const Names& n, double RunConfig::*m) {
    RunConfigField f = row(n);
    const std::string key(n.name);
    f.write = [m](const RunConfig& c) { return Json(c.*m); };
    f.read = [m, key](RunConfig& c, const Json& v) { c.*m = readReal(v, key); };
    f.parse = [m, key](RunConfig& c, const std::string& t) { c.*m = parseRealText(key, t); };
    return f;
}

// `path`: the CLI refuses an unusable path at once (checkPathText), as validateAll would.
RunConfigField textRow(const Names& n, std::string RunConfig::*m, TextLimit limit, bool path) {
    RunConfigField f = row(n);
    const std::string key(n.name);
    f.write = [m](const RunConfig& c) { return Json(c.*m); };
    f.read = [m, key](RunConfig& c, const Json& v) { c.*m = readString(v, key); };
    f.parse = [m, key, path, what = limit.what](RunConfig& c, const std::string& t) {
        if (path) checkPathText(key, t, what);
        c.*m = t;
    };
    f.text = limit;
    return f;
}

template <typename E>
RunConfigField choiceRow(const Names& n, E RunConfig::*m, E (*parse)(std::string_view, std::string_view)) {
    RunConfigField f = row(n);
    const std::string key(n.name);
    f.write = [m](const RunConfig& c) { return Json(toString(c.*m)); };
    f.read = [m, key, parse](RunConfig& c, const Json& v) { c.*m = parse(readString(v, key), key); };
    f.parse = [m, key, parse](RunConfig& c, const std::string& t) { c.*m = parse(t, key); };
    return f;
}

IntLimit limit(int lo, int hi, std::string_view what) { return IntLimit{lo, hi, what}; }

}  // namespace

namespace {

constexpr int kMaxTileBatch = 1024;
constexpr int kMaxGraphWarmup = 100;
constexpr int kMaxGraphCache = 1024;

using C = RunConfig;

// Size, seed, steps and the scheduler.
void addSamplingFields(std::vector<RunConfigField>& f) {
    f.push_back(
        intRow({"width", "width", "PX", "image width in pixels (default {default})", "Size", "320"}, &C::width));
    f.push_back(
        intRow({"height", "height", "PX", "image height in pixels (default {default})", "Size", "192"}, &C::height));
    {
        RunConfigField seed =
            row({"seed", "seed", "N", "noise seed (default {default})", "Seed", "18446744073709551615"});
        seed.write = [](const C& c) { return Json(c.seed); };
        seed.read = [](C& c, const Json& v) { c.seed = readSeed(v); };
        seed.parse = [](C& c, const std::string& t) { c.seed = parseSeedText(t); };
        f.push_back(std::move(seed));
    }
    f.push_back(intRow({"steps", "steps", "N", "sampling steps (default {default})", "Steps", "7"}, &C::steps));
    f.push_back(choiceRow<SchedulerKind>(
        {"scheduler", "scheduler", "NAME", "ddpm, ddim, euler, euler_a, dpmpp_2m or dpmpp_2m_sde (default {default})",
         "Sampler", "euler_a"},
        &C::scheduler, parseScheduler));
    {
        RunConfigField sampler = row({"scheduler", "sampler", "NAME",
                                      "the sampler as A1111 names it: \"Euler a\", \"DPM++ 2M Karras\", Euler,\n"
                                      "\"DPM++ 2M\", DDIM (sets --scheduler and the Karras schedule)",
                                      "Sampler", "DPM++ 2M"});
        sampler.jsonKey = "";
        sampler.parse = parseSamplerText;
        f.push_back(std::move(sampler));
    }
    {
        RunConfigField eta = row({"eta", "eta", "X", "DDIM eta (default {default})", "", "0.5"});
        eta.jsonKey = "";  // scheduler_options.eta
        eta.write = [](const C& c) { return Json(tidyDouble(c.schedulerOptions.eta)); };
        eta.parse = [](C& c, const std::string& t) {
            c.schedulerOptions.eta = static_cast<float>(parseRealText("eta", t));
        };
        f.push_back(std::move(eta));
    }
    {
        RunConfigField spacing = row({"timestep_spacing", "timestep-spacing", "S",
                                      "leading, trailing or linspace (default {default})", "", "trailing"});
        spacing.jsonKey = "";  // scheduler_options.timestep_spacing
        spacing.write = [](const C& c) { return Json(toString(c.schedulerOptions.timestepSpacing)); };
        spacing.parse = [](C& c, const std::string& t) {
            c.schedulerOptions.timestepSpacing = parseTimestepSpacing(t, "timestep_spacing");
        };
        f.push_back(std::move(spacing));
    }
    {
        RunConfigField options = row({"scheduler_options", "", "", "", "", ""});
        options.write = [](const C& c) { return schedulerOptionsJson(c.schedulerOptions); };
        options.read = [](C& c, const Json& v) {
            c.schedulerOptions = schedulerOptionsFromJson(v, c.schedulerOptions);
        };
        f.push_back(std::move(options));
    }
}

// Tiling, CUDA graphs, precision, backend, threads.
void addTilingFields(std::vector<RunConfigField>& f) {
    f.push_back(intRow({"tile", "tile", "PX", "tile edge in pixels (default {default})", "Tile", "96"}, &C::tile));
    {
        RunConfigField overlap =
            row({"overlap", "overlap", "PX|NN%",
                 "tile overlap in pixels, or a percentage of the tile (default {default})", "Overlap", "25%"});
        // A fraction is written as a JSON float (0.25, or 0.0), which reads back as a fraction;
        // pixels as a JSON integer.
        overlap.write = [](const C& c) { return c.overlapFraction ? Json(*c.overlapFraction) : Json(c.overlapPx); };
        overlap.read = [](C& c, const Json& v) { readOverlap(v, c); };
        overlap.parse = parseOverlapText;
        f.push_back(std::move(overlap));
    }
    f.push_back(choiceRow<BlendWindowKind>(
        {"window", "window", "NAME", "blend window: none, linear, hann or gaussian (default {default})", "Blend window",
         "gaussian"},
        &C::window, parseBlendWindow));
    f.push_back(choiceRow<FusionRule>(
        {"fusion", "fusion", "NAME", "sample (MultiDiffusion) or noise (Mixture of Diffusers) (default {default})",
         "Fusion", "noise"},
        &C::fusion, parseFusionRule));
    f.push_back(choiceRow<TileShift>({"tile_shift", "tile-shift", "NAME",
                                      "off, or random: the tiles laid over the canvas rolled by a random offset\n"
                                      "each step (SpotDiffusion), so the borders move; with overlap 0, fewer tiles\n"
                                      "a step and no blending (default {default}; changes the image)",
                                      "Tile shift", "random"},
                                     &C::tileShift, parseTileShift));
    f.push_back(autoIntRow({"batch", "batch", "N",
                            "tiles per UNet call (0 or auto: every tile spread evenly over the fewest\n"
                            "calls of at most 32, fewer where the GPU's memory is short; default auto)",
                            "Tile batch", "4"},
                           &C::tileBatch, limit(0, kMaxTileBatch, "the tile batch (0 = auto)")));
    f.push_back(choiceRow<GraphMode>(
        {"graphs", "graphs", "MODE", "CUDA graphs: off, tile or step (default {default})", "Mode", "step"}, &C::graphs,
        parseGraphMode));
    f.push_back(intRow({"graph_warmup", "graph-warmup", "N",
                        "warm-up launches before graph capture (default {default})", "Warm-up", "5"},
                       &C::graphWarmup, limit(0, kMaxGraphWarmup, "the graph warm-up count")));
    f.push_back(intRow({"graph_cache", "graph-cache", "N", "graphs kept per run (default {default})", "", "8"},
                       &C::graphCacheSize, limit(1, kMaxGraphCache, "the graph cache size")));
    f.push_back(autoIntRow({"lanes", "lanes", "N",
                            "CUDA: tile batches in flight at once, each on its own stream with its\n"
                            "own activations (0 = auto, 1..8; default {default})",
                            "Lanes", "2"},
                           &C::lanes, limit(0, kMaxLanes, "the lane count (0 = auto)")));
    f.push_back(choiceRow<Precision>(
        {"precision", "precision", "NAME", "fp32, fp16 or bf16 (default {default}; the CPU always computes fp32)",
         "Precision", "bf16"},
        &C::precision, parsePrecision));
    f.push_back(choiceRow<BackendKind>(
        {"backend", "backend", "NAME", "auto (CUDA when built and a device is usable, else cpu), cpu or cuda",
         "Precision", "cpu"},
        &C::backend, parseBackend));
    f.push_back(intRow({"threads", "threads", "N",
                        "CPU engine: threads that compute, 1..1024 (default {default} = all cores);\n"
                        "the image is the same bits for any count",
                        "Threads", "3"},
                       &C::threads, limit(0, kMaxThreads, "the CPU thread count (0 = all cores)")));
}

// The unit a --control-* option sets: the last --controlnet's (one without a model where none was
// given yet: validate() then names the missing --controlnet).
ControlNetUnit& lastControlNet(C& c) {
    if (c.controlNets.empty()) c.controlNets.emplace_back();
    return c.controlNets.back();
}

double controlNumber(const std::string& field, const std::string& text) {
    double value = 0;
    if (!parseDouble(text, value)) fail(field, inQuotes(text) + " is not a number");
    return value;
}

// --controlnet and the --control-* options that follow it (repeatable: one unit each).
void addControlNetFields(std::vector<RunConfigField>& f) {
    RunConfigField net = row({"controlnet", "controlnet", "FILE|NAME",
                              "Stable Diffusion: a ControlNet evaluated with the UNet on every tile batch:\n"
                              "a diffusers folder, a .safetensors or .pth file (read without running it), or\n"
                              "a NAME looked up in ControlNet/ and controlnet/ of $TESSERA_MODELS and of the\n"
                              "models folder holding --model's folder; repeatable, the --control-* options\n"
                              "after it apply to it",
                              "", "control_v11f1e_sd15_tile"});
    net.jsonKey = "controlnets";
    net.write = [](const C& c) { return controlNetsJson(c.controlNets); };
    net.read = [](C& c, const Json& v) { c.controlNets = controlNetsFromJson(v); };
    net.parse = [](C& c, const std::string& t) {
        checkPathText("controlnet", t, "a ControlNet path or name");
        ControlNetUnit u;
        u.model = t;
        c.controlNets.push_back(std::move(u));
    };
    f.push_back(std::move(net));
    auto sub = [&f](const Names& help, std::function<void(ControlNetUnit&, const std::string&)> set) {
        RunConfigField r = row(help);
        r.jsonKey = "";  // inside "controlnets"
        r.write = [](const C&) { return Json(); };
        r.parse = [set = std::move(set)](C& c, const std::string& t) { set(lastControlNet(c), t); };
        f.push_back(std::move(r));
    };
    sub({"control_image", "control-image", "FILE|init",
         "the ControlNet's control image, the run's size (default init: the start\n"
         "image after the upscale model and resize)",
         "", "hint.png"},
        [](ControlNetUnit& u, const std::string& t) {
            checkPathText("control_image", t, "a control image path");
            u.image = t == "init" ? std::string() : t;
        });
    sub({"control_weight", "control-weight", "X", "the ControlNet's weight, 0 to 2 (default 1)", "", "0.6"},
        [](ControlNetUnit& u, const std::string& t) { u.weight = controlNumber("control_weight", t); });
    sub({"control_start", "control-start", "X", "the fraction of the steps where it starts (default 0)", "", "0.1"},
        [](ControlNetUnit& u, const std::string& t) { u.start = controlNumber("control_start", t); });
    sub({"control_end", "control-end", "X", "the fraction of the steps where it ends (default 1)", "", "0.9"},
        [](ControlNetUnit& u, const std::string& t) { u.end = controlNumber("control_end", t); });
    sub({"control_mode", "control-mode", "balanced|prompt|controlnet",
         "A1111's control mode: Balanced (default), My prompt is more important,\n"
         "ControlNet is more important",
         "", "prompt"},
        [](ControlNetUnit& u, const std::string& t) {
            const std::optional<ControlMode> mode = controlModeFromString(t);
            if (!mode) fail("control_mode", inQuotes(t) + " is not a control mode; balanced, prompt or controlnet");
            u.mode = *mode;
        });
    sub({"control_preprocessor", "control-preprocessor", "NAME[:A[:B]]",
         "none (default), tile_resample[:down sampling rate 1 to 8],\n"
         "tile_colorfix[:variation 3 to 32, default 8],\n"
         "tile_colorfix+sharp[:variation[:sharpness 0 to 2, default 1]]",
         "", "tile_resample:2"},
        [](ControlNetUnit& u, const std::string& t) {
            const auto colon = t.find(':');
            u.preprocessor = t.substr(0, colon);
            if (colon == std::string::npos) return;
            const std::string rest = t.substr(colon + 1);
            if (!isColorFixPreprocessor(u.preprocessor)) {
                u.downSampling = controlNumber("control_preprocessor", rest);
                return;
            }
            const auto second = rest.find(':');
            u.colorfixVariation = controlNumber("control_preprocessor", rest.substr(0, second));
            if (second != std::string::npos)
                u.colorfixSharpness = controlNumber("control_preprocessor", rest.substr(second + 1));
        });
}

// The model, previews, the start image, the text conditioning, the VAE and the rest.
void addInputFields(std::vector<RunConfigField>& f) {
    f.push_back(textRow({"model", "model", "PATH",
                         "a Stable Diffusion 1.x/2.x/XL checkpoint (.safetensors file, .ckpt read\n"
                         "without running it, or diffusers pipeline folder), or a diffusers\n"
                         "UNet2DModel folder (default: the bundled unconditional model)",
                         "Model", "models/sd15"},
                        &C::model, {input_limits::kPathChars, "a model folder path"}, true));
    f.push_back(
        intRow({"preview_every", "preview-every", "N", "preview every N steps, 0 = never (default {default})", "", "0"},
               &C::previewEvery));
    f.push_back(textRow({"init", "init", "FILE", "start from this PNG or JPEG, resized to the run (image-to-image)",
                         "Image", "start.png"},
                        &C::initImage, {input_limits::kPathChars, "an init image path"}, true));
    f.push_back(realRow(
        {"strength", "strength", "X", "image-to-image strength, 0 to 1 (default {default})", "Strength", "0.75"},
        &C::strength));
    {
        RunConfigField preserve =
            row({"preserve_color", "preserve-color", "", "keep the init image's colours", "", ""});
        preserve.write = [](const C& c) { return Json(c.preserveColor); };
        preserve.read = [](C& c, const Json& v) { c.preserveColor = readBool(v, "preserve_color"); };
        preserve.parse = [](C& c, const std::string&) { c.preserveColor = true; };
        f.push_back(std::move(preserve));
    }
    f.push_back(realRow(
        {"upscale", "upscale", "X", "image-to-image: the canvas is the init image times X (1 to 16)", "Scale", "2"},
        &C::upscale));
    f.push_back(textRow({"upscale_model", "upscale-model", "FILE|NAME",
                         "image-to-image: an upscale model (ESRGAN, Real-ESRGAN Compact, SPAN)\n"
                         "run on the init image before the canvas resize: a .safetensors or .pth\n"
                         "file, or a name looked up in ESRGAN/ and upscale_models/ of\n"
                         "$TESSERA_MODELS and of the models folder holding --model's folder",
                         "", "4x-UltraSharp"},
                        &C::upscaleModel, {input_limits::kPathChars, "an upscale model path or name"}, true));
    f.push_back(
        textRow({"prompt", "prompt", "TEXT", "Stable Diffusion: the prompt (A1111 emphasis (word:1.2), [word], BREAK)",
                 "Prompt", "a (red:1.2) fox"},
                &C::prompt, {kMaxPromptBytes, "the prompt"}, false));
    f.push_back(textRow({"negative_prompt", "negative-prompt", "TEXT", "Stable Diffusion: what to steer away from",
                         "Negative", "blurry"},
                        &C::negativePrompt, {kMaxPromptBytes, "the negative prompt"}, false));
    f.push_back(realRow({"cfg", "cfg", "X", "classifier-free guidance scale, 0 to 100 (default {default}; 1 = off)",
                         "CFG scale", "4.5"},
                        &C::cfgScale));
    f.push_back(realRow({"guidance", "guidance", "X",
                         "FLUX.1-dev: the guidance scale the model takes as an input, 0 to 100 (default\n"
                         "{default}; one evaluation per step: --cfg is not used); schnell ignores it",
                         "Distilled CFG Scale", "4.5"},
                        &C::guidance));
    f.push_back(intRow({"clip_skip", "clip-skip", "N", "text layer counted from the last, as A1111 (default {default})",
                        "Clip skip", "2"},
                       &C::clipSkip, limit(1, kMaxClipSkip, "clip skip (1 = the model's usual text layer, as A1111)")));
    {
        RunConfigField loras = row({"lora", "lora", "FILE[:W]",
                                    "Stable Diffusion: merge a LoRA / LyCORIS at weight W (default 1; FILE:TE:UNET\n"
                                    "for the text encoder and UNet apart), as if <lora:NAME:W> ended the\n"
                                    "prompt: a .safetensors, .pt or .ckpt file, or a NAME looked up in Lora/,\n"
                                    "LyCORIS/ and loras/ of $TESSERA_MODELS and of the models folder holding\n"
                                    "--model's folder; repeatable. <lora:NAME:W> tags in the prompt are\n"
                                    "merged as A1111 merges them",
                                    "", "detail-tweaker:0.5"});
        loras.jsonKey = "loras";
        loras.write = [](const C& c) { return lorasJson(c.loras); };
        loras.read = [](C& c, const Json& v) { c.loras = lorasFromJson(v); };
        loras.parse = [](C& c, const std::string& t) {
            checkPathText("lora", t, "a LoRA path or name");
            c.loras.push_back(parseLoraText(t));
        };
        f.push_back(std::move(loras));
    }
    addControlNetFields(f);
    f.push_back(
        choiceRow<SdxlSizeConditioning>({"sdxl_size_conditioning", "sdxl-size-conditioning", "image|tile",
                                         "SDXL: the size ids each tile's conditioning carries: the\n"
                                         "whole image's, crop 0,0 ({default}, A1111's Tiled Diffusion; default) or\n"
                                         "crop = the tile's offset, target = the tile's size (tile)",
                                         "", "tile"},
                                        &C::sdxlSizeConditioning, parseSdxlSizeConditioning));
    f.push_back(textRow({"vae", "vae", "FILE|NAME",
                         "Stable Diffusion: a separate VAE for the decode and encode (latent\n"
                         "scaling stays the model's): a .safetensors, .pt or .ckpt file in LDM or\n"
                         "diffusers names, a diffusers AutoencoderKL folder, or a name looked up in\n"
                         "VAE/ and vae/ of $TESSERA_MODELS and of the models folder holding --model's\n"
                         "folder (default: the model's own VAE)",
                         "", "vae-ft-mse-840000-ema-pruned.safetensors"},
                        &C::vae, {input_limits::kPathChars, "a VAE path or name"}, true));
    {
        RunConfigField encoders = row({"text_encoder", "text-encoder", "FILE|NAME",
                                       "FLUX.1 single files: a text encoder file (clip_l.safetensors, a T5-XXL\n"
                                       "file with its spiece.model beside it), or a NAME looked up in\n"
                                       "text_encoders/ and clip/ of $TESSERA_MODELS and of the models folder\n"
                                       "holding --model's file; repeatable (CLIP-L and T5)",
                                       "", "t5xxl_fp16.safetensors"});
        encoders.jsonKey = "text_encoders";
        encoders.write = [](const C& c) { return Json(c.textEncoders); };
        encoders.read = [](C& c, const Json& v) {
            if (!v.is_array()) wrongType("text_encoders", v, "an array of file paths or names");
            c.textEncoders.clear();
            for (const Json& item : v) c.textEncoders.push_back(readString(item, "text_encoders"));
        };
        encoders.parse = [](C& c, const std::string& t) {
            checkPathText("text_encoder", t, "a text encoder path or name");
            c.textEncoders.push_back(t);
        };
        f.push_back(std::move(encoders));
    }
    f.push_back(textRow({"embeddings_dir", "embeddings-dir", "DIR",
                         "Stable Diffusion: a folder of textual-inversion embeddings (.safetensors,\n"
                         "A1111's .pt, diffusers' .bin), named in a prompt by their file names; looked\n"
                         "in after embeddings/ in and beside $TESSERA_MODELS and the models folder\n"
                         "holding --model's folder (A1111's --embeddings-dir)",
                         "", "~/sd/embeddings"},
                        &C::embeddingsDir, {input_limits::kPathChars, "an embeddings folder"}, true));
    f.push_back(choiceRow<VaeTiling>({"vae_tiling", "vae-tiling", "MODE",
                                      "Stable Diffusion: the VAE decode/encode tiled with whole-image\n"
                                      "GroupNorm statistics (on), whole (off), or whole where it fits the\n"
                                      "memory the run may use, else tiled ({default}, the default)",
                                      "", "on"},
                                     &C::vaeTiling, parseVaeTiling));
    f.push_back(textRow({"label", "label", "TEXT", "free text stored with the run", "", "first try"}, &C::label,
                        {kMaxLabelBytes, "the label"}, false));
    {
        RunConfigField cache =
            textRow({"tuning_cache", "tuning-cache", "FILE|off",
                     "CUDA: file of timed algorithm choices reused by later runs, so that\n"
                     "a new process makes the same choices and the same image (default\n"
                     "$XDG_CACHE_HOME/tessera/tuning.json or ~/.cache/tessera/tuning.json;\n"
                     "$TESSERA_TUNING_CACHE overrides it); off times every prepare again",
                     "", "off"},
                    &C::tuningCache, {input_limits::kPathChars, "the tuning cache path (or off)"}, true);
        cache.parse = [path = cache.parse](C& c, const std::string& t) {
            if (t.empty()) fail("tuning_cache", "a file path or off is needed");
            path(c, t);
        };
        f.push_back(std::move(cache));
    }
}

// A1111's variation seed (uint64, as the seed: a number or a decimal string), named `key`.
std::uint64_t readSeedNamed(const nlohmann::json& value, const std::string& key) {
    try {
        return readSeed(value);
    } catch (const ValidationError&) {
        wrongType(key, value, "a whole number from 0 to 18446744073709551615");
    }
}

std::uint64_t parseSeedTextNamed(const std::string& key, const std::string& text) {
    std::uint64_t value = 0;
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (text.empty() || ec != std::errc() || ptr != end)
        fail(key, inQuotes(text) + " is not a whole number from 0 to 18446744073709551615");
    return value;
}

// ENSD: any 64-bit signed whole number (A1111 adds it to the seed).
std::int64_t parseEnsdText(const std::string& text) {
    std::int64_t value = 0;
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (text.empty() || ec != std::errc() || ptr != end)
        fail("eta_noise_seed_delta", inQuotes(text) +
                                         " is not a whole number from -9223372036854775808 to "
                                         "9223372036854775807");
    return value;
}

std::int64_t readEnsd(const nlohmann::json& value) {
    if (value.is_number_unsigned() &&
        value.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        throw ValidationError("eta_noise_seed_delta", "eta_noise_seed_delta: " + value.dump() +
                                                          " is out of range; allowed -9223372036854775808 to "
                                                          "9223372036854775807");
    if (value.is_number_integer()) return value.get<std::int64_t>();
    if (value.is_string()) return parseEnsdText(value.get<std::string>());
    wrongType("eta_noise_seed_delta", value, "a whole number");
}

// "WxH" in pixels ("640x512"); "", "off" and "0x0" turn it off. Sizes are checked by validate().
void parseSeedResizeText(RunConfig& c, const std::string& text) {
    if (text.empty() || text == "off") {
        c.seedResizeFromWidth = c.seedResizeFromHeight = 0;
        return;
    }
    const auto x = text.find_first_of("xX");
    int w = 0, h = 0;
    const char* begin = text.data();
    const char* end = begin + text.size();
    const bool good = x != std::string::npos && x > 0 && x + 1 < text.size() &&
                      std::from_chars(begin, begin + x, w).ptr == begin + x &&
                      std::from_chars(begin + x + 1, end, h).ptr == end;
    if (!good)
        fail("seed_resize_from", inQuotes(text) + " is not a size; give WIDTHxHEIGHT in pixels (640x512) or off");
    c.seedResizeFromWidth = w;
    c.seedResizeFromHeight = h;
}

// The noise source and A1111's seed settings.
void addNoiseFields(std::vector<RunConfigField>& f) {
    f.push_back(choiceRow<RngSource>({"noise_source", "noise-source", "NAME",
                                      "the noise: tessera (Philox, the same bits on every GPU and the CPU;\n"
                                      "default), cpu (torch's CPU generator: A1111's \"CPU\", ComfyUI's start\n"
                                      "noise), gpu (torch's CUDA generator: A1111's default), nv (A1111's\n"
                                      "\"NV\") or comfyui (ComfyUI's: cpu start noise, ancestral noise from the\n"
                                      "device's generator)",
                                      "", "cpu"},
                                     &C::noiseSource, parseRngSource));
    {
        RunConfigField seed =
            row({"variation_seed", "variation-seed", "N",
                 "A1111's variation seed, blended in by --variation-strength (cpu, gpu, nv)", "", "555"});
        seed.write = [](const C& c) { return Json(c.variationSeed); };
        seed.read = [](C& c, const Json& v) { c.variationSeed = readSeedNamed(v, "variation_seed"); };
        seed.parse = [](C& c, const std::string& t) { c.variationSeed = parseSeedTextNamed("variation_seed", t); };
        f.push_back(std::move(seed));
    }
    f.push_back(realRow({"variation_strength", "variation-strength", "X",
                         "A1111's variation strength, 0 to 1 (default {default} = off; cpu, gpu, nv)", "", "0.3"},
                        &C::variationStrength));
    {
        RunConfigField resize = row({"seed_resize_from", "seed-resize-from", "WxH",
                                     "A1111's \"resize seed from\": the noise of a WxH image, centred\n"
                                     "(cpu, gpu, nv; off by default)",
                                     "", "640x512"});
        resize.write = [](const C& c) {
            return c.seedResizeFromWidth == 0 && c.seedResizeFromHeight == 0
                       ? Json("")
                       : Json(std::to_string(c.seedResizeFromWidth) + "x" + std::to_string(c.seedResizeFromHeight));
        };
        resize.read = [](C& c, const Json& v) { parseSeedResizeText(c, readString(v, "seed_resize_from")); };
        resize.parse = parseSeedResizeText;
        f.push_back(std::move(resize));
    }
    {
        RunConfigField ensd = row({"eta_noise_seed_delta", "eta-noise-seed-delta", "N",
                                   "A1111's ENSD: ancestral steps draw from seed + N (default {default};\n"
                                   "cpu, gpu, nv)",
                                   "", "31337"});
        ensd.write = [](const C& c) { return Json(c.etaNoiseSeedDelta); };
        ensd.read = [](C& c, const Json& v) { c.etaNoiseSeedDelta = readEnsd(v); };
        ensd.parse = [](C& c, const std::string& t) { c.etaNoiseSeedDelta = parseEnsdText(t); };
        f.push_back(std::move(ensd));
    }
}

std::vector<RunConfigField> makeFields() {
    std::vector<RunConfigField> f;
    addSamplingFields(f);
    addNoiseFields(f);
    addTilingFields(f);
    addInputFields(f);
    return f;
}

}  // namespace

std::optional<IntLimit> intSettingRange(std::string_view field, const RunConfig& config) {
    if (field == "width" || field == "height") return IntLimit{1, kMaxImageSidePx, "the image side in pixels"};
    if (field == "steps")
        return IntLimit{1, std::max(1, config.schedulerOptions.numTrainTimesteps),
                        "the step count (at most the training timesteps)"};
    if (field == "tile") return IntLimit{1, kMaxTilePx, "the tile edge in pixels"};
    if (field == "overlap") return IntLimit{0, kMaxTilePx - 1, "the overlap in pixels (below the tile)"};
    const RunConfigField* row = findRunConfigField(field);
    return row ? row->range : std::nullopt;
}

const std::vector<RunConfigField>& runConfigFields() {
    static const std::vector<RunConfigField> fields = makeFields();
    return fields;
}

const RunConfigField* findRunConfigField(std::string_view nameKeyOrFlag) {
    for (const RunConfigField& field : runConfigFields())
        if (field.name == nameKeyOrFlag || field.jsonKey == nameKeyOrFlag || field.flag == nameKeyOrFlag) return &field;
    return nullptr;
}

std::vector<std::string_view> runConfigJsonKeys() {
    std::vector<std::string_view> keys;
    for (const RunConfigField& field : runConfigFields())
        if (!field.jsonKey.empty()) keys.push_back(field.jsonKey);
    return keys;
}

namespace {

// "sampler": A1111's name ("DPM++ 2M Karras"), read as --sampler reads it into scheduler and
// scheduler_options.use_karras_sigmas; never written (a config writes those two). Refused next
// to either of them: the two spellings could disagree.
void readSamplerAlias(RunConfig& c, const nlohmann::json& j) {
    const std::string name = readString(j.at("sampler"), "sampler");
    const bool karrasGiven = j.contains("scheduler_options") && j.at("scheduler_options").is_object() &&
                             j.at("scheduler_options").contains("use_karras_sigmas");
    if (j.contains("scheduler") || karrasGiven)
        fail("sampler", std::string("\"sampler\" and ") +
                            (j.contains("scheduler") ? "\"scheduler\"" : "\"scheduler_options.use_karras_sigmas\"") +
                            " both given; give A1111's sampler name (\"DPM++ 2M Karras\") or scheduler and "
                            "scheduler_options.use_karras_sigmas, not both");
    parseSamplerText(c, name);
}

}  // namespace

std::string defaultText(const RunConfigField& field) {
    if (!field.write) return {};
    const Json value = field.write(RunConfig{});
    if (value.is_string()) return value.get<std::string>();
    if (value.is_number_float()) return formatNumber(value.get<double>());
    if (value.is_number()) return value.dump();
    return {};
}

std::string usageEntry(std::string_view flagAndValue, std::string_view help) {
    constexpr std::size_t kColumn = 23;  // after the two leading spaces
    std::string head(flagAndValue);
    head += head.size() < kColumn ? std::string(kColumn - head.size(), ' ') : std::string("  ");
    std::string text = "  " + head;
    std::size_t start = 0;
    while (true) {
        const std::size_t end = help.find('\n', start);
        text += std::string(help.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start)) +
                "\n";
        if (end == std::string_view::npos) break;
        text += std::string(kColumn + 2, ' ');
        start = end + 1;
    }
    return text;
}

std::string runConfigOptionsUsage() {
    std::string text;
    for (const RunConfigField& field : runConfigFields()) {
        if (field.flag.empty()) continue;
        std::string help(field.help);
        if (const auto at = help.find("{default}"); at != std::string::npos)
            help.replace(at, std::string_view("{default}").size(), defaultText(field));
        const std::string flag =
            "--" + std::string(field.flag) + (field.valueName.empty() ? "" : " ") + std::string(field.valueName);
        text += usageEntry(flag, help);
    }
    return text;
}

nlohmann::json toJson(const RunConfig& c) {
    Json j = Json::object();
    for (const RunConfigField& field : runConfigFields())
        if (!field.jsonKey.empty()) j[std::string(field.jsonKey)] = field.write(c);
    return j;
}

RunConfig runConfigFromJson(const nlohmann::json& j) {
    if (!j.is_object()) wrongType("config", j, "a JSON object");
    static const std::vector<std::string_view> known = [] {
        std::vector<std::string_view> keys = runConfigJsonKeys();
        keys.push_back("sampler");  // read, never written (readSamplerAlias)
        return keys;
    }();
    RunConfig c;
    const std::vector<RunConfigField>& fields = runConfigFields();
    for (const auto& item : j.items()) {
        // item.key(), not a structured binding: clang before 16 cannot capture one in a lambda.
        const std::string& key = item.key();
        if (key == "sampler") continue;  // after the rest (readSamplerAlias)
        const auto field = std::find_if(fields.begin(), fields.end(), [&](const RunConfigField& f) {
            return !f.jsonKey.empty() && f.jsonKey == key;  // a CLI-only row has no JSON key and no reader
        });
        if (field == fields.end()) unknownKey(key, known);
        field->read(c, item.value());
    }
    if (j.contains("sampler")) readSamplerAlias(c, j);
    return c;
}

}  // namespace tessera
