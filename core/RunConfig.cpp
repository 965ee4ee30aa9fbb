#include "core/RunConfig.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/BoundedInput.h"
#include "core/FormatNumber.h"
#include "core/Infotext.h"

namespace tessera {

namespace {

// ---------------------------------------------------------------------------
// Enum names: one table per enum, used both ways so names cannot drift apart.

template <typename E, std::size_t N>
using NameTable = std::array<std::pair<E, std::string_view>, N>;

constexpr NameTable<SchedulerKind, 5> kSchedulerNames{{{SchedulerKind::DDPM, "ddpm"},
                                                       {SchedulerKind::DDIM, "ddim"},
                                                       {SchedulerKind::Euler, "euler"},
                                                       {SchedulerKind::EulerAncestral, "euler_a"},
                                                       {SchedulerKind::DPMPP2M, "dpmpp_2m"}}};
constexpr NameTable<BetaSchedule, 3> kBetaScheduleNames{{{BetaSchedule::Linear, "linear"},
                                                         {BetaSchedule::ScaledLinear, "scaled_linear"},
                                                         {BetaSchedule::SquaredCosCapV2, "squaredcos_cap_v2"}}};
constexpr NameTable<TimestepSpacing, 3> kSpacingNames{{{TimestepSpacing::Leading, "leading"},
                                                       {TimestepSpacing::Trailing, "trailing"},
                                                       {TimestepSpacing::Linspace, "linspace"}}};
constexpr NameTable<VarianceType, 2> kVarianceNames{{{VarianceType::FixedSmall, "fixed_small"},
                                                     {VarianceType::FixedLarge, "fixed_large"}}};
constexpr NameTable<PredictionType, 3> kPredictionNames{{{PredictionType::Epsilon, "epsilon"},
                                                         {PredictionType::Sample, "sample"},
                                                         {PredictionType::VPrediction, "v_prediction"}}};
constexpr NameTable<BlendWindowKind, 4> kWindowNames{{{BlendWindowKind::None, "none"},
                                                      {BlendWindowKind::Linear, "linear"},
                                                      {BlendWindowKind::Hann, "hann"},
                                                      {BlendWindowKind::Gaussian, "gaussian"}}};
constexpr NameTable<FusionRule, 2> kFusionNames{{{FusionRule::Sample, "sample"}, {FusionRule::Noise, "noise"}}};
constexpr NameTable<GraphMode, 3> kGraphNames{
    {{GraphMode::Off, "off"}, {GraphMode::Tile, "tile"}, {GraphMode::Step, "step"}}};
constexpr NameTable<Precision, 3> kPrecisionNames{
    {{Precision::FP32, "fp32"}, {Precision::FP16, "fp16"}, {Precision::BF16, "bf16"}}};
constexpr NameTable<BackendKind, 3> kBackendNames{
    {{BackendKind::Auto, "auto"}, {BackendKind::CPU, "cpu"}, {BackendKind::CUDA, "cuda"}}};
constexpr NameTable<SdxlSizeConditioning, 2> kSdxlSizeNames{
    {{SdxlSizeConditioning::Image, "image"}, {SdxlSizeConditioning::Tile, "tile"}}};
constexpr NameTable<VaeTiling, 3> kVaeTilingNames{
    {{VaeTiling::Auto, "auto"}, {VaeTiling::On, "on"}, {VaeTiling::Off, "off"}}};

template <typename E, std::size_t N>
std::string_view nameOf(const NameTable<E, N>& table, E value) {
    for (const auto& [e, name] : table)
        if (e == value) return name;
    return "unknown";
}

bool equalsIgnoringCase(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
           });
}

// Names are matched ignoring case: "DDIM" typed on a command line means ddim.
template <typename E, std::size_t N>
E parseName(const NameTable<E, N>& table, std::string_view text, std::string_view field) {
    for (const auto& [e, name] : table)
        if (equalsIgnoringCase(name, text)) return e;
    std::string allowed;
    for (std::size_t i = 0; i < N; ++i) {
        if (i > 0) allowed += (i + 1 == N) ? " or " : ", ";
        allowed += table[i].second;
    }
    throw ValidationError(std::string(field),
                          std::string(field) + ": '" + excerpt(text) + "' is not one of " + allowed);
}

// ---------------------------------------------------------------------------
// Number formatting for messages and the parameters line: shortest text that reads back exactly.

// formatNumber (core/FormatNumber.h): plain notation in the everyday range, shortest digits either way.

// A float stored in JSON as the double whose shortest text equals the float's shortest text,
// so 1e-4f is written as 0.0001 rather than 9.99999974737875e-05 (and still reads back exactly).
double tidyDouble(float value) {
    if (!std::isfinite(value)) return static_cast<double>(value);
    return std::strtod(formatNumber(value).c_str(), nullptr);
}

// "56 or 64" (or just "8" when there is no smaller multiple).
std::string nearestMultiples(int value, int factor) {
    const int below = (value / factor) * factor;
    const int above = below + factor;
    if (below <= 0) return std::to_string(above);
    return std::to_string(below) + " or " + std::to_string(above);
}

// ---------------------------------------------------------------------------
// Validation

constexpr int kMaxImageSide = 16384;
constexpr int kMaxTile = 4096;
constexpr int kMaxTileBatch = 1024;
constexpr int kMaxGraphWarmup = 100;
constexpr int kMaxGraphCache = 1024;
constexpr std::int64_t kMaxTiles = 65536;   // e.g. 16384x16384 with tile 64, overlap 0

class Problems {
public:
    void add(const std::string& field, const std::string& message) {
        list.emplace_back(field, field + ": " + message);
    }
    std::vector<ValidationError> list;
};

void checkImageSide(Problems& problems, const std::string& field, int value, const RunConfig& config,
                    const ModelLimits& limits) {
    if (value < 1 || value > kMaxImageSide) {
        problems.add(field, std::to_string(value) + " is not allowed; the " + field + " must be 1 to " +
                                std::to_string(kMaxImageSide) + " pixels");
        return;
    }
    // A side at least as long as the tile is covered by whole tiles, snapped inside the image.
    // A shorter side is covered by one tile of exactly that length, which the UNet accepts only
    // when it is a multiple of its downsampling factor.
    const int factor = std::max(1, limits.downsampleFactor);
    if (config.tile > 0 && value < config.tile && value % factor != 0) {
        problems.add(field, std::to_string(value) + " is smaller than the tile (" + std::to_string(config.tile) +
                                ") and not a multiple of " + std::to_string(factor) +
                                ", so no tile the model accepts can cover it; use " +
                                nearestMultiples(value, factor) + " (or any size from " +
                                std::to_string(config.tile) + " up)");
    }
}

void checkIntRange(Problems& problems, const std::string& field, int value, int lo, int hi, const std::string& what) {
    if (value < lo || value > hi)
        problems.add(field, std::to_string(value) + " is not allowed; " + what + " must be " + std::to_string(lo) +
                                " to " + std::to_string(hi));
}

void checkTile(Problems& problems, const RunConfig& config, const ModelLimits& limits) {
    const int factor = std::max(1, limits.downsampleFactor);
    const std::string value = std::to_string(config.tile);
    if (config.tile <= 0) {
        problems.add("tile", value + " is not allowed; the tile size must be a positive multiple of " +
                                 std::to_string(factor) + " (e.g. " + std::to_string(std::max(64, factor)) + ")");
    } else if (config.tile > kMaxTile) {
        problems.add("tile", value + " is too large; the tile size must be at most " + std::to_string(kMaxTile));
    } else if (config.tile % factor != 0) {
        problems.add("tile", value + " is not a multiple of " + std::to_string(factor) +
                                 " (the model halves the tile " + std::to_string(factor) +
                                 "x over its levels); use " + nearestMultiples(config.tile, factor));
    }
}

void checkOverlap(Problems& problems, const RunConfig& config) {
    if (config.overlapFraction) {
        const double f = *config.overlapFraction;
        if (!(f >= 0.0 && f < 1.0)) {
            problems.add("overlap", formatNumber(f) +
                                        " (a fraction of the tile) is not allowed; a fraction must be 0 to below 1 "
                                        "(e.g. 0.25 or 25%)");
            return;
        }
    }
    const int px = config.overlapPixels();
    if (px < 0) {
        problems.add("overlap", std::to_string(px) + " is not allowed; the overlap must be 0 or more pixels");
    } else if (config.tile > 0 && px >= config.tile) {
        problems.add("overlap", std::to_string(px) + " is not allowed; the overlap must be 0 to " +
                                    std::to_string(config.tile - 1) + " pixels (below the tile, " +
                                    std::to_string(config.tile) + ")");
    } else if (config.tile > 0 && config.width > 0 && config.height > 0) {
        // A huge overlap on a large image gives millions of tiles: hours per step and host
        // tables of that size. Refuse before anything is planned (TilePlan's axis rule:
        // about ceil((length - overlap) / stride) positions per axis).
        const auto axis = [&](int length) -> std::int64_t {
            const int effective = std::min(config.tile, length);
            const int stride = config.tile - px;
            if (length <= effective) return 1;
            return 1 + (static_cast<std::int64_t>(length - effective) + stride - 1) / stride;
        };
        const std::int64_t tiles = axis(config.width) * axis(config.height);
        if (tiles > kMaxTiles)
            problems.add("overlap", "tile " + std::to_string(config.tile) + " with overlap " + std::to_string(px) +
                                        " px gives " + std::to_string(tiles) + " tiles on " +
                                        std::to_string(config.width) + "x" + std::to_string(config.height) +
                                        "; at most " + std::to_string(kMaxTiles) +
                                        " are allowed: use a larger tile or a smaller overlap");
    }
}

// Paths and the label: bounded (a path longer than PATH_MAX cannot be opened; a label is one
// line of the history) and free of NUL characters, which would cut a path short in the OS.
std::string textProblem(std::string_view value, std::size_t maxBytes, const std::string& what) {
    if (value.size() > maxBytes)
        return "'" + excerpt(value) + "' is not allowed; " + what + " may be at most " + std::to_string(maxBytes) +
               " bytes long";
    if (value.find('\0') != std::string_view::npos)
        return "'" + excerpt(value) + "' is not allowed; " + what + " may not contain a NUL character";
    return {};
}

void checkText(Problems& problems, const std::string& field, std::string_view value, std::size_t maxBytes,
               const std::string& what) {
    if (std::string problem = textProblem(value, maxBytes, what); !problem.empty()) problems.add(field, problem);
}

void checkScheduler(Problems& problems, const RunConfig& config) {
    const SchedulerOptions& o = config.schedulerOptions;
    if (o.numTrainTimesteps < 1)
        problems.add("num_train_timesteps",
                     std::to_string(o.numTrainTimesteps) + " is not allowed; it must be at least 1");
    if (!(o.betaStart > 0.0f))
        problems.add("beta_start", formatNumber(o.betaStart) + " is not allowed; beta_start must be above 0");
    if (!(o.betaEnd > o.betaStart && o.betaEnd < 1.0f))
        problems.add("beta_end", formatNumber(o.betaEnd) + " is not allowed; beta_end must be above beta_start (" +
                                     formatNumber(o.betaStart) + ") and below 1");
    if (o.stepsOffset < 0)
        problems.add("steps_offset", std::to_string(o.stepsOffset) + " is not allowed; it must be 0 or more");
    if (o.clipSample && !(o.clipSampleRange > 0.0f))
        problems.add("clip_sample_range",
                     formatNumber(o.clipSampleRange) + " is not allowed; it must be above 0 when clip_sample is on");
    if (!(o.eta >= 0.0f && o.eta <= 1.0f))
        problems.add("eta", formatNumber(o.eta) + " is not allowed; eta must be 0 or more and at most 1 (DDIM's "
                                                  "noise weight: 0 deterministic, 1 as much noise as DDPM)");
    if ((config.scheduler == SchedulerKind::Euler || config.scheduler == SchedulerKind::EulerAncestral) &&
        o.predictionType == PredictionType::Sample)
        problems.add("prediction_type", "'sample' is not allowed with the " + std::string(toString(config.scheduler)) +
                                            " scheduler; use epsilon or v_prediction, or the ddpm, ddim or dpmpp_2m "
                                            "scheduler");
}

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

int readInt(const nlohmann::json& value, const std::string& key) {
    if (value.is_number_integer()) {
        if (value.is_number_unsigned()) {
            const auto u = value.get<std::uint64_t>();
            if (u > static_cast<std::uint64_t>(std::numeric_limits<int>::max())) wrongType(key, value, "a whole number");
            return static_cast<int>(u);
        }
        const auto v = value.get<std::int64_t>();
        if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
            wrongType(key, value, "a whole number");
        return static_cast<int>(v);
    }
    if (value.is_number_float()) {
        const double d = value.get<double>();
        if (std::isfinite(d) && d == std::floor(d) && std::abs(d) < 1e9) return static_cast<int>(d);
    }
    wrongType(key, value, "a whole number");
}

double readReal(const nlohmann::json& value, const std::string& key) {
    if (!value.is_number()) wrongType(key, value, "a number");
    return value.get<double>();
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
        config.overlapPx = readInt(value, "overlap");
        config.overlapFraction.reset();
        return;
    }
    if (value.is_number_float()) {
        const double d = value.get<double>();
        if (!std::isfinite(d)) wrongType("overlap", value, expected);
        if (d < 1.0) config.overlapFraction = d;  // negative fractions are left for validate() to name
        else setPixels(d);
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
        if (text.find_first_of(".eE") != std::string::npos && number < 1.0) config.overlapFraction = number;
        else setPixels(number);
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
    "num_train_timesteps", "beta_start",       "beta_end", "beta_schedule", "timestep_spacing",
    "steps_offset",        "clip_sample",      "clip_sample_range", "set_alpha_to_one", "eta",
    "variance_type",       "prediction_type",  "use_karras_sigmas"};

const std::vector<std::string_view> kRunConfigKeys{
    "width",  "height",       "seed",        "steps",     "scheduler", "scheduler_options", "tile",
    "overlap", "window",      "fusion",      "batch",     "graphs",    "graph_warmup",      "graph_cache",
    "lanes",  "precision",    "backend",     "model",     "preview_every", "init",          "strength",
    "preserve_color", "label", "tuning_cache", "prompt", "negative_prompt", "cfg", "clip_skip", "upscale",
    "sdxl_size_conditioning", "vae_tiling", "threads"};

SchedulerOptions schedulerOptionsFromJson(const nlohmann::json& j, SchedulerOptions o) {
    if (!j.is_object()) wrongType("scheduler_options", j, "an object");
    for (const auto& [key, value] : j.items()) {
        if (key == "num_train_timesteps") o.numTrainTimesteps = readInt(value, key);
        else if (key == "beta_start") o.betaStart = static_cast<float>(readReal(value, key));
        else if (key == "beta_end") o.betaEnd = static_cast<float>(readReal(value, key));
        else if (key == "beta_schedule") o.betaSchedule = parseBetaSchedule(readString(value, key), key);
        else if (key == "timestep_spacing") o.timestepSpacing = parseTimestepSpacing(readString(value, key), key);
        else if (key == "steps_offset") o.stepsOffset = readInt(value, key);
        else if (key == "clip_sample") o.clipSample = readBool(value, key);
        else if (key == "clip_sample_range") o.clipSampleRange = static_cast<float>(readReal(value, key));
        else if (key == "set_alpha_to_one") o.setAlphaToOne = readBool(value, key);
        else if (key == "eta") o.eta = static_cast<float>(readReal(value, key));
        else if (key == "variance_type") o.varianceType = parseVarianceType(readString(value, key), key);
        else if (key == "prediction_type") o.predictionType = parsePredictionType(readString(value, key), key);
        else if (key == "use_karras_sigmas") o.karrasSigmas = readBool(value, key);
        else unknownKey("scheduler_options." + key, kSchedulerOptionKeys);
    }
    return o;
}

}  // namespace

// ---------------------------------------------------------------------------

std::string_view toString(SchedulerKind v) { return nameOf(kSchedulerNames, v); }
std::string_view toString(BetaSchedule v) { return nameOf(kBetaScheduleNames, v); }
std::string_view toString(TimestepSpacing v) { return nameOf(kSpacingNames, v); }
std::string_view toString(VarianceType v) { return nameOf(kVarianceNames, v); }
std::string_view toString(PredictionType v) { return nameOf(kPredictionNames, v); }
std::string_view toString(BlendWindowKind v) { return nameOf(kWindowNames, v); }
std::string_view toString(FusionRule v) { return nameOf(kFusionNames, v); }
std::string_view toString(GraphMode v) { return nameOf(kGraphNames, v); }
std::string_view toString(Precision v) { return nameOf(kPrecisionNames, v); }
std::string_view toString(BackendKind v) { return nameOf(kBackendNames, v); }
std::string_view toString(SdxlSizeConditioning v) { return nameOf(kSdxlSizeNames, v); }
std::string_view toString(VaeTiling v) { return nameOf(kVaeTilingNames, v); }

SchedulerKind parseScheduler(std::string_view s, std::string_view f) { return parseName(kSchedulerNames, s, f); }
BetaSchedule parseBetaSchedule(std::string_view s, std::string_view f) { return parseName(kBetaScheduleNames, s, f); }
TimestepSpacing parseTimestepSpacing(std::string_view s, std::string_view f) { return parseName(kSpacingNames, s, f); }
VarianceType parseVarianceType(std::string_view s, std::string_view f) { return parseName(kVarianceNames, s, f); }
PredictionType parsePredictionType(std::string_view s, std::string_view f) { return parseName(kPredictionNames, s, f); }
BlendWindowKind parseBlendWindow(std::string_view s, std::string_view f) { return parseName(kWindowNames, s, f); }
FusionRule parseFusionRule(std::string_view s, std::string_view f) { return parseName(kFusionNames, s, f); }
GraphMode parseGraphMode(std::string_view s, std::string_view f) { return parseName(kGraphNames, s, f); }
Precision parsePrecision(std::string_view s, std::string_view f) { return parseName(kPrecisionNames, s, f); }
BackendKind parseBackend(std::string_view s, std::string_view f) { return parseName(kBackendNames, s, f); }
SdxlSizeConditioning parseSdxlSizeConditioning(std::string_view s, std::string_view f) {
    return parseName(kSdxlSizeNames, s, f);
}
VaeTiling parseVaeTiling(std::string_view s, std::string_view f) { return parseName(kVaeTilingNames, s, f); }

int RunConfig::overlapPixels() const {
    if (!overlapFraction) return overlapPx;
    const double px = std::round(*overlapFraction * static_cast<double>(tile));
    if (!std::isfinite(px)) return -1;  // NaN/inf fraction: validate() names it
    return static_cast<int>(std::clamp(px, -1e9, 1e9));
}

std::vector<ValidationError> validateAll(const RunConfig& config, const ModelLimits& limits) {
    Problems problems;
    checkImageSide(problems, "width", config.width, config, limits);
    checkImageSide(problems, "height", config.height, config, limits);
    checkTile(problems, config, limits);
    checkOverlap(problems, config);

    const int maxSteps =
        std::max(1, std::min(limits.numTrainTimesteps, config.schedulerOptions.numTrainTimesteps));
    checkIntRange(problems, "steps", config.steps, 1, maxSteps,
                  "the step count (at most the model's " + std::to_string(maxSteps) + " training timesteps)");
    checkIntRange(problems, "batch", config.tileBatch, 1, kMaxTileBatch, "the tile batch");
    checkIntRange(problems, "graph_warmup", config.graphWarmup, 0, kMaxGraphWarmup, "the graph warm-up count");
    checkIntRange(problems, "graph_cache", config.graphCacheSize, 1, kMaxGraphCache, "the graph cache size");
    checkIntRange(problems, "lanes", config.lanes, 0, kMaxLanes, "the lane count (0 = auto)");
    checkIntRange(problems, "threads", config.threads, 0, kMaxThreads, "the CPU thread count (0 = all cores)");
    if (config.previewEvery < 0)
        problems.add("preview_every", std::to_string(config.previewEvery) +
                                          " is not allowed; preview_every must be 0 (never) or more");
    if (!config.initImage.empty() && !(config.strength > 0.0 && config.strength <= 1.0))
        problems.add("strength", formatNumber(config.strength) +
                                     " is not allowed; with an init image the strength must be above 0 and at most 1");
    checkText(problems, "model", config.model, input_limits::kPathChars, "a model folder path");
    checkText(problems, "init", config.initImage, input_limits::kPathChars, "an init image path");
    checkText(problems, "label", config.label, kMaxLabelBytes, "the label");
    checkText(problems, "tuning_cache", config.tuningCache, input_limits::kPathChars,
              "the tuning cache path (or off)");
    checkText(problems, "prompt", config.prompt, kMaxPromptBytes, "the prompt");
    checkText(problems, "negative_prompt", config.negativePrompt, kMaxPromptBytes, "the negative prompt");
    if (!(config.cfgScale >= 0.0 && config.cfgScale <= kMaxCfgScale))
        problems.add("cfg", formatNumber(config.cfgScale) + " is not allowed; the guidance scale must be 0 to " +
                                formatNumber(kMaxCfgScale) + " (1 = no guidance, 7 is usual)");
    checkIntRange(problems, "clip_skip", config.clipSkip, 1, kMaxClipSkip,
                  "clip skip (1 = the model's usual text layer, as A1111)");
    if (!(config.upscale >= 1.0 && config.upscale <= kMaxUpscale))
        problems.add("upscale", formatNumber(config.upscale) + " is not allowed; the upscale factor must be 1 to " +
                                    formatNumber(kMaxUpscale));
    checkScheduler(problems, config);
    return std::move(problems.list);
}

void checkPathText(std::string_view field, std::string_view path, std::string_view what) {
    const std::string problem = textProblem(path, input_limits::kPathChars, std::string(what));
    if (!problem.empty()) throw ValidationError(std::string(field), std::string(field) + ": " + problem);
}

void validate(const RunConfig& config, const ModelLimits& limits) {
    auto problems = validateAll(config, limits);
    if (!problems.empty()) throw problems.front();
}

nlohmann::json toJson(const RunConfig& c) {
    const SchedulerOptions& o = c.schedulerOptions;
    nlohmann::json options = {
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
    nlohmann::json j = {
        {"width", c.width},
        {"height", c.height},
        {"seed", c.seed},
        {"steps", c.steps},
        {"scheduler", toString(c.scheduler)},
        {"scheduler_options", std::move(options)},
        {"tile", c.tile},
        {"window", toString(c.window)},
        {"fusion", toString(c.fusion)},
        {"batch", c.tileBatch},
        {"graphs", toString(c.graphs)},
        {"graph_warmup", c.graphWarmup},
        {"graph_cache", c.graphCacheSize},
        {"lanes", c.lanes},
        {"precision", toString(c.precision)},
        {"backend", toString(c.backend)},
        {"threads", c.threads},
        {"model", c.model},
        {"preview_every", c.previewEvery},
        {"init", c.initImage},
        {"strength", c.strength},
        {"preserve_color", c.preserveColor},
        {"label", c.label},
        {"tuning_cache", c.tuningCache},
        {"prompt", c.prompt},
        {"negative_prompt", c.negativePrompt},
        {"cfg", c.cfgScale},
        {"clip_skip", c.clipSkip},
        {"upscale", c.upscale},
        {"sdxl_size_conditioning", toString(c.sdxlSizeConditioning)},
        {"vae_tiling", toString(c.vaeTiling)},
    };
    // A fraction is written as a JSON float (0.25, or 0.0), which reads back as a fraction;
    // pixels as a JSON integer.
    if (c.overlapFraction) j["overlap"] = *c.overlapFraction;
    else j["overlap"] = c.overlapPx;
    return j;
}

RunConfig runConfigFromJson(const nlohmann::json& j) {
    if (!j.is_object()) wrongType("config", j, "a JSON object");
    RunConfig c;
    for (const auto& [key, value] : j.items()) {
        if (key == "width") c.width = readInt(value, key);
        else if (key == "height") c.height = readInt(value, key);
        else if (key == "seed") c.seed = readSeed(value);
        else if (key == "steps") c.steps = readInt(value, key);
        else if (key == "scheduler") c.scheduler = parseScheduler(readString(value, key), key);
        else if (key == "scheduler_options") c.schedulerOptions = schedulerOptionsFromJson(value, c.schedulerOptions);
        else if (key == "tile") c.tile = readInt(value, key);
        else if (key == "overlap") readOverlap(value, c);
        else if (key == "window") c.window = parseBlendWindow(readString(value, key), key);
        else if (key == "fusion") c.fusion = parseFusionRule(readString(value, key), key);
        else if (key == "batch") c.tileBatch = readInt(value, key);
        else if (key == "graphs") c.graphs = parseGraphMode(readString(value, key), key);
        else if (key == "graph_warmup") c.graphWarmup = readInt(value, key);
        else if (key == "graph_cache") c.graphCacheSize = readInt(value, key);
        else if (key == "lanes") c.lanes = readInt(value, key);
        else if (key == "precision") c.precision = parsePrecision(readString(value, key), key);
        else if (key == "backend") c.backend = parseBackend(readString(value, key), key);
        else if (key == "threads") c.threads = readInt(value, key);
        else if (key == "model") c.model = readString(value, key);
        else if (key == "preview_every") c.previewEvery = readInt(value, key);
        else if (key == "init") c.initImage = readString(value, key);
        else if (key == "strength") c.strength = readReal(value, key);
        else if (key == "preserve_color") c.preserveColor = readBool(value, key);
        else if (key == "label") c.label = readString(value, key);
        else if (key == "tuning_cache") c.tuningCache = readString(value, key);
        else if (key == "prompt") c.prompt = readString(value, key);
        else if (key == "negative_prompt") c.negativePrompt = readString(value, key);
        else if (key == "cfg") c.cfgScale = readReal(value, key);
        else if (key == "clip_skip") c.clipSkip = readInt(value, key);
        else if (key == "upscale") c.upscale = readReal(value, key);
        else if (key == "sdxl_size_conditioning")
            c.sdxlSizeConditioning = parseSdxlSizeConditioning(readString(value, key), key);
        else if (key == "vae_tiling") c.vaeTiling = parseVaeTiling(readString(value, key), key);
        else unknownKey(key, kRunConfigKeys);
    }
    return c;
}

// Kept for callers that know only the configuration; a finished run writes
// infotext(record.config, infotextExtras(record)) (core/Infotext.h), with its model hash.
std::string parametersLine(const RunConfig& c) { return infotext(c, infotextExtras(c)); }

}  // namespace tessera
