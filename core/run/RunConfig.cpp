#include "core/run/RunConfig.h"

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

#include "core/base/BoundedInput.h"
#include "core/base/FormatNumber.h"
#include "core/run/RunConfigFields.h"

namespace tessera {

namespace {

// ---------------------------------------------------------------------------
// Enum names: one table per enum, used both ways so names cannot drift apart.

template <typename E, std::size_t N>
using NameTable = std::array<std::pair<E, std::string_view>, N>;

constexpr NameTable<SchedulerKind, 11> kSchedulerNames{{{SchedulerKind::DDPM, "ddpm"},
                                                        {SchedulerKind::DDIM, "ddim"},
                                                        {SchedulerKind::Euler, "euler"},
                                                        {SchedulerKind::EulerAncestral, "euler_a"},
                                                        {SchedulerKind::DPMPP2M, "dpmpp_2m"},
                                                        {SchedulerKind::DPMPP2MSDE, "dpmpp_2m_sde"},
                                                        {SchedulerKind::Heun, "heun"},
                                                        {SchedulerKind::LMS, "lms"},
                                                        {SchedulerKind::DPM2, "dpm2"},
                                                        {SchedulerKind::DPMPPSDE, "dpmpp_sde"},
                                                        {SchedulerKind::UniPC, "unipc"}}};
constexpr NameTable<BetaSchedule, 3> kBetaScheduleNames{{{BetaSchedule::Linear, "linear"},
                                                         {BetaSchedule::ScaledLinear, "scaled_linear"},
                                                         {BetaSchedule::SquaredCosCapV2, "squaredcos_cap_v2"}}};
constexpr NameTable<TimestepSpacing, 3> kSpacingNames{{{TimestepSpacing::Leading, "leading"},
                                                       {TimestepSpacing::Trailing, "trailing"},
                                                       {TimestepSpacing::Linspace, "linspace"}}};
constexpr NameTable<VarianceType, 2> kVarianceNames{
    {{VarianceType::FixedSmall, "fixed_small"}, {VarianceType::FixedLarge, "fixed_large"}}};
constexpr NameTable<PredictionType, 3> kPredictionNames{{{PredictionType::Epsilon, "epsilon"},
                                                         {PredictionType::Sample, "sample"},
                                                         {PredictionType::VPrediction, "v_prediction"}}};
constexpr NameTable<BlendWindowKind, 4> kWindowNames{{{BlendWindowKind::None, "none"},
                                                      {BlendWindowKind::Linear, "linear"},
                                                      {BlendWindowKind::Hann, "hann"},
                                                      {BlendWindowKind::Gaussian, "gaussian"}}};
constexpr NameTable<FusionRule, 2> kFusionNames{{{FusionRule::Sample, "sample"}, {FusionRule::Noise, "noise"}}};
constexpr NameTable<TileShift, 2> kTileShiftNames{{{TileShift::Off, "off"}, {TileShift::Random, "random"}}};
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
constexpr NameTable<RngSource, 5> kRngSourceNames{{{RngSource::Tessera, "tessera"},
                                                   {RngSource::CPU, "cpu"},
                                                   {RngSource::GPU, "gpu"},
                                                   {RngSource::NV, "nv"},
                                                   {RngSource::ComfyUI, "comfyui"}}};

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
    throw ValidationError(std::string(field), std::string(field) + ": " + inQuotes(text) + " is not one of " + allowed);
}

// ---------------------------------------------------------------------------
// Number formatting for messages and the parameters line: shortest text that reads back exactly.

// formatNumber (core/base/FormatNumber.h): plain notation in the everyday range, shortest digits either way.

// "56 or 64" (or just "8" when there is no smaller multiple).
std::string nearestMultiples(int value, int factor) {
    const int below = (value / factor) * factor;
    const int above = below + factor;
    if (below <= 0) return std::to_string(above);
    return std::to_string(below) + " or " + std::to_string(above);
}

// ---------------------------------------------------------------------------
// Validation

constexpr int kMaxImageSide = kMaxImageSidePx;
constexpr int kMaxTile = kMaxTilePx;
constexpr std::int64_t kMaxTiles = 65536;  // e.g. 16384x16384 with tile 64, overlap 0

class Problems {
public:
    void add(const std::string& field, const std::string& message) { list.emplace_back(field, field + ": " + message); }
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
                                ", so no tile the model accepts can cover it; use " + nearestMultiples(value, factor) +
                                " (or any size from " + std::to_string(config.tile) + " up)");
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
                                 " (the model halves the tile " + std::to_string(factor) + "x over its levels); use " +
                                 nearestMultiples(config.tile, factor));
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
        return inQuotes(value) + " is not allowed; " + what + " may be at most " + std::to_string(maxBytes) +
               " bytes long";
    if (value.find('\0') != std::string_view::npos)
        return inQuotes(value) + " is not allowed; " + what + " may not contain a NUL character";
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
        problems.add("eta", formatNumber(o.eta) +
                                " is not allowed; eta must be 0 or more and at most 1 (DDIM's "
                                "noise weight: 0 deterministic, 1 as much noise as DDPM)");
    if ((config.scheduler == SchedulerKind::Euler || config.scheduler == SchedulerKind::EulerAncestral ||
         config.scheduler == SchedulerKind::DPM2 || config.scheduler == SchedulerKind::DPMPPSDE) &&
        o.predictionType == PredictionType::Sample)
        problems.add("prediction_type", "'sample' is not allowed with the " + std::string(toString(config.scheduler)) +
                                            " scheduler; use epsilon or v_prediction, or the ddpm, ddim or dpmpp_2m "
                                            "scheduler");
}

// The text encoder files: a bounded list of non-empty paths or names.
void checkTextEncoders(Problems& problems, const RunConfig& config) {
    if (config.textEncoders.size() > kMaxTextEncoders)
        problems.add("text_encoder", std::to_string(config.textEncoders.size()) +
                                         " text encoder files are not allowed; at most " +
                                         std::to_string(kMaxTextEncoders) + " (FLUX.1 reads CLIP-L and T5)");
    for (const std::string& file : config.textEncoders) {
        if (file.empty()) problems.add("text_encoder", "an empty text encoder path or name is not allowed");
        checkText(problems, "text_encoder", file, input_limits::kPathChars, "a text encoder path or name");
    }
}

// The LoRAs besides the prompt's tags: a bounded list of named files with finite multipliers (a
// JSON reader or a front end may hand over anything).
void checkLoras(Problems& problems, const RunConfig& config) {
    if (config.loras.size() > kMaxLoras)
        problems.add("lora", std::to_string(config.loras.size()) + " LoRAs are not allowed; at most " +
                                 std::to_string(kMaxLoras) + " may be given");
    for (const LoraSetting& lora : config.loras) {
        if (lora.file.empty()) problems.add("lora", "a LoRA without a file or name is not allowed");
        checkText(problems, "lora", lora.file, input_limits::kPathChars, "a LoRA path or name");
        if (!std::isfinite(lora.teMultiplier) || !std::isfinite(lora.unetMultiplier))
            problems.add("lora", inQuotes(lora.file) + ": its multipliers (" + formatNumber(lora.teMultiplier) + ", " +
                                     formatNumber(lora.unetMultiplier) + ") must be finite numbers");
    }
}

// The ControlNets: a bounded list with A1111's ranges: weight 0 to 2, 0 <= start < end <= 1, a
// known preprocessor, a down sampling rate of 1 to 8, a colour-fix variation of 3 to 32 (whole) and
// sharpness of 0 to 2. A unit without a model (--control-* before
// any --controlnet) is refused where the models are found (core/run/ControlNetModelFile.h).
void checkControlNets(Problems& problems, const RunConfig& config) {
    if (config.controlNets.size() > kMaxControlNets)
        problems.add("controlnet", std::to_string(config.controlNets.size()) +
                                       " ControlNets are not allowed; at most " + std::to_string(kMaxControlNets) +
                                       " may be given");
    for (std::size_t i = 0; i < config.controlNets.size(); ++i) {
        const ControlNetUnit& u = config.controlNets[i];
        const std::string which = "ControlNet " + std::to_string(i);
        checkText(problems, "controlnet", u.model, input_limits::kPathChars, "a ControlNet path or name");
        checkText(problems, "control_image", u.image, input_limits::kPathChars, "a control image path");
        if (!(u.weight >= 0.0 && u.weight <= 2.0))
            problems.add("control_weight", which + ": weight " + formatNumber(u.weight) + " is not allowed; 0 to 2");
        if (!(u.start >= 0.0 && u.start < u.end && u.end <= 1.0))
            problems.add("control_start", which + ": start " + formatNumber(u.start) + " and end " +
                                              formatNumber(u.end) +
                                              " are not allowed; 0 <= start < end <= 1 (fractions of the steps)");
        bool known = false;
        for (const char* p : kControlPreprocessors) known = known || u.preprocessor == p;
        if (!known)
            problems.add("control_preprocessor", which + ": " + inQuotes(u.preprocessor) +
                                                     " is not a preprocessor Tessera has; none, tile_resample, "
                                                     "tile_colorfix or tile_colorfix+sharp");
        if (!(u.downSampling >= 1.0 && u.downSampling <= 8.0))
            problems.add("control_preprocessor",
                         which + ": down sampling rate " + formatNumber(u.downSampling) + " is not allowed; 1 to 8");
        if (!(u.colorfixVariation >= kColorFixVariationMin && u.colorfixVariation <= kColorFixVariationMax &&
              u.colorfixVariation == std::floor(u.colorfixVariation)))
            problems.add("control_preprocessor", which + ": colour-fix variation " + formatNumber(u.colorfixVariation) +
                                                     " is not allowed; a whole number of 3 to 32 (latent pixels)");
        if (!(u.colorfixSharpness >= 0.0 && u.colorfixSharpness <= kColorFixSharpnessMax))
            problems.add("control_preprocessor", which + ": colour-fix sharpness " + formatNumber(u.colorfixSharpness) +
                                                     " is not allowed; 0 to 2");
    }
}

// A1111's noise settings (RunConfig::noiseSource): a variation strength of 0 to 1 (A1111's slider)
// and a seed-resize size given in full or not at all.
void checkNoise(Problems& problems, const RunConfig& config) {
    const double strength = config.variationStrength;
    if (!(strength >= 0.0 && strength <= 1.0))
        problems.add("variation_strength",
                     formatNumber(strength) + " is not allowed; the variation strength must be 0 to 1 (0 = off)");
    const int w = config.seedResizeFromWidth, h = config.seedResizeFromHeight;
    const auto side = [](int v) { return v >= 1 && v <= kMaxImageSide; };
    if (!(w == 0 && h == 0) && !(side(w) && side(h)))
        problems.add("seed_resize_from", std::to_string(w) + "x" + std::to_string(h) +
                                             " is not allowed; give both sides, 1 to " + std::to_string(kMaxImageSide) +
                                             " pixels each, or 0x0 for off");
}

}  // namespace

// ---------------------------------------------------------------------------

int autoTileBatch(int tiles, int most) {
    if (tiles < 1) return 1;
    most = std::max(1, most);
    const int calls = (tiles + most - 1) / most;
    return (tiles + calls - 1) / calls;
}

int resolveTileBatch(int tileBatch, int tiles) {
    if (tileBatch <= 0) return autoTileBatch(tiles);
    return std::max(1, std::min(tileBatch, tiles));
}

// One line per enum, alike on purpose: each looks its value up in its own name table.
std::string_view toString(SchedulerKind v) { return nameOf(kSchedulerNames, v); }
std::string_view toString(BetaSchedule v) { return nameOf(kBetaScheduleNames, v); }
std::string_view toString(TimestepSpacing v) { return nameOf(kSpacingNames, v); }
std::string_view toString(VarianceType v) { return nameOf(kVarianceNames, v); }
std::string_view toString(PredictionType v) { return nameOf(kPredictionNames, v); }
std::string_view toString(BlendWindowKind v) { return nameOf(kWindowNames, v); }
std::string_view toString(FusionRule v) { return nameOf(kFusionNames, v); }
std::string_view toString(TileShift v) { return nameOf(kTileShiftNames, v); }
std::string_view toString(GraphMode v) { return nameOf(kGraphNames, v); }
std::string_view toString(Precision v) { return nameOf(kPrecisionNames, v); }
std::string_view toString(BackendKind v) { return nameOf(kBackendNames, v); }
std::string_view toString(SdxlSizeConditioning v) { return nameOf(kSdxlSizeNames, v); }
std::string_view toString(VaeTiling v) { return nameOf(kVaeTilingNames, v); }
std::string_view toString(RngSource v) { return nameOf(kRngSourceNames, v); }

SchedulerKind parseScheduler(std::string_view s, std::string_view f) { return parseName(kSchedulerNames, s, f); }
BetaSchedule parseBetaSchedule(std::string_view s, std::string_view f) { return parseName(kBetaScheduleNames, s, f); }
TimestepSpacing parseTimestepSpacing(std::string_view s, std::string_view f) { return parseName(kSpacingNames, s, f); }
VarianceType parseVarianceType(std::string_view s, std::string_view f) { return parseName(kVarianceNames, s, f); }
PredictionType parsePredictionType(std::string_view s, std::string_view f) { return parseName(kPredictionNames, s, f); }
BlendWindowKind parseBlendWindow(std::string_view s, std::string_view f) { return parseName(kWindowNames, s, f); }
FusionRule parseFusionRule(std::string_view s, std::string_view f) { return parseName(kFusionNames, s, f); }
TileShift parseTileShift(std::string_view s, std::string_view f) { return parseName(kTileShiftNames, s, f); }
GraphMode parseGraphMode(std::string_view s, std::string_view f) { return parseName(kGraphNames, s, f); }
Precision parsePrecision(std::string_view s, std::string_view f) { return parseName(kPrecisionNames, s, f); }
BackendKind parseBackend(std::string_view s, std::string_view f) { return parseName(kBackendNames, s, f); }
SdxlSizeConditioning parseSdxlSizeConditioning(std::string_view s, std::string_view f) {
    return parseName(kSdxlSizeNames, s, f);
}
VaeTiling parseVaeTiling(std::string_view s, std::string_view f) { return parseName(kVaeTilingNames, s, f); }
RngSource parseRngSource(std::string_view s, std::string_view f) { return parseName(kRngSourceNames, s, f); }

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

    const int maxSteps = std::max(1, std::min(limits.numTrainTimesteps, config.schedulerOptions.numTrainTimesteps));
    checkIntRange(problems, "steps", config.steps, 1, maxSteps,
                  "the step count (at most the model's " + std::to_string(maxSteps) + " training timesteps)");
    // Integer ranges and text limits: the field table's (core/run/RunConfigFields.h).
    for (const RunConfigField& field : runConfigFields())
        if (field.range)
            checkIntRange(problems, std::string(field.name), field.write(config).get<int>(), field.range->lo,
                          field.range->hi, std::string(field.range->what));
    if (config.previewEvery < 0)
        problems.add("preview_every",
                     std::to_string(config.previewEvery) + " is not allowed; preview_every must be 0 (never) or more");
    if (!config.initImage.empty() && !(config.strength > 0.0 && config.strength <= 1.0))
        problems.add("strength", formatNumber(config.strength) +
                                     " is not allowed; with an init image the strength must be above 0 and at most 1");
    for (const RunConfigField& field : runConfigFields())
        if (field.text)
            checkText(problems, std::string(field.name), field.write(config).get_ref<const std::string&>(),
                      field.text->maxBytes, std::string(field.text->what));
    if (!(config.cfgScale >= 0.0 && config.cfgScale <= kMaxCfgScale))
        problems.add("cfg", formatNumber(config.cfgScale) + " is not allowed; the guidance scale must be 0 to " +
                                formatNumber(kMaxCfgScale) + " (1 = no guidance, 7 is usual)");
    if (!(config.guidance >= 0.0 && config.guidance <= kMaxCfgScale))
        problems.add("guidance", formatNumber(config.guidance) +
                                     " is not allowed; FLUX.1-dev's embedded guidance must be 0 to " +
                                     formatNumber(kMaxCfgScale) + " (3.5 is usual)");
    if (!(config.upscale >= 1.0 && config.upscale <= kMaxUpscale))
        problems.add("upscale", formatNumber(config.upscale) + " is not allowed; the upscale factor must be 1 to " +
                                    formatNumber(kMaxUpscale));
    checkScheduler(problems, config);
    checkTextEncoders(problems, config);
    checkLoras(problems, config);
    checkControlNets(problems, config);
    checkNoise(problems, config);
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

int firstStepRun(const RunConfig& config, bool fromImage) {
    return fromImage ? config.steps - static_cast<int>(config.steps * config.strength) : 0;
}

int firstFlowStepRun(const RunConfig& config, bool fromImage) {
    if (!fromImage) return 0;
    const double steps = config.steps;
    return static_cast<int>(std::max(steps - std::min(steps * config.strength, steps), 0.0));
}

int evaluationsPerStep(SchedulerKind kind) {
    return kind == SchedulerKind::Heun || kind == SchedulerKind::DPM2 || kind == SchedulerKind::DPMPPSDE ? 2 : 1;
}

int loopSteps(const RunConfig& config) {
    return evaluationsPerStep(config.scheduler) == 2 ? 2 * config.steps - 1 : config.steps;
}

int firstLoopStep(const RunConfig& config, bool fromImage) {
    return std::min(firstStepRun(config, fromImage) * evaluationsPerStep(config.scheduler), loopSteps(config));
}

}  // namespace tessera
