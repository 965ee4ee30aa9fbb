// RunConfig: everything that defines one tiled generation, and its validation.
// Qt-free. Every rejection names the field, the value and what is allowed.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/base/ValidationError.h"
#include "core/run/ControlNetUnit.h"

namespace tessera {

// EulerAncestral ("euler_a", A1111 "Euler a") and DPMPP2M ("dpmpp_2m", A1111 "DPM++ 2M"; with
// scheduler_options.use_karras_sigmas its "Karras" schedule type) follow diffusers'
// EulerAncestralDiscreteScheduler and DPMSolverMultistepScheduler; DPMPP2MSDE ("dpmpp_2m_sde",
// A1111 "DPM++ 2M SDE") is the latter with algorithm_type "sde-dpmsolver++"; Heun ("heun"), LMS
// ("lms"), DPM2 ("dpm2") and DPMPPSDE ("dpmpp_sde") are HeunDiscreteScheduler, LMSDiscreteScheduler,
// KDPM2DiscreteScheduler and DPMSolverSDEScheduler.
enum class SchedulerKind { DDPM, DDIM, Euler, EulerAncestral, DPMPP2M, DPMPP2MSDE, Heun, LMS, DPM2, DPMPPSDE, UniPC };
enum class BetaSchedule { Linear, ScaledLinear, SquaredCosCapV2 };
enum class TimestepSpacing { Leading, Trailing, Linspace };
enum class VarianceType { FixedSmall, FixedLarge };
enum class PredictionType { Epsilon, Sample, VPrediction };
enum class BlendWindowKind { None, Linear, Hann, Gaussian };
// Sample: MultiDiffusion, average the per-tile x(t-1).
// Noise: Mixture of Diffusers, average the per-tile noise prediction, then one scheduler step.
enum class FusionRule { Sample, Noise };
// Where the tiles sit from step to step: Off, the plan's places every step; Random, SpotDiffusion's
// shifted windows (Frolov et al. 2024, "SpotDiffusion: A Fast Approach For Seamless Panorama
// Generation Over Time"; ComfyUI-TiledDiffusion's SpotDiffusion method): each step the plan is laid
// over the canvas rolled by a random offset, so the borders between tiles move every step and a
// plan without overlap leaves no seam in place long enough to show, at far fewer tiles a step.
enum class TileShift { Off, Random };
enum class GraphMode { Off, Tile, Step };
enum class Precision { FP32, FP16, BF16 };
enum class BackendKind { Auto, CPU, CUDA };
// SDXL's micro-conditioning per tile (diffusers StableDiffusionXLPipeline._get_add_time_ids): Image
// = every tile gets the whole image's size and crop (0, 0), as A1111's Tiled Diffusion passes it;
// Tile = original size the image, crop the tile's offset, target size the tile's.
enum class SdxlSizeConditioning { Image, Tile };
// The VAE's decode and encode (Stable Diffusion models): tiled with whole-image GroupNorm
// statistics (core/models/vae/TiledVae.h), untiled, or untiled where it fits the memory the run may use.
enum class VaeTiling { Auto, On, Off };
// Where a run's noise (its start latent and the noise of ancestral steps) comes from
// (core/sampling/LatentNoise.h): Tessera's counter-based Philox, keyed by canvas element (the same
// bits on every GPU and on the CPU, drawn on the device, independent of the tile plan), or torch's
// generators as A1111's "Random number generator source" setting picks them: CPU (torch's CPU
// generator, mt19937; also ComfyUI's start noise), GPU (torch's CUDA generator; A1111's default)
// and NV (A1111's CPU emulation of the CUDA generator, modules/rng_philox.py), or ComfyUI's
// (its start noise from torch's CPU generator, its ancestral noise from the device's generator
// seeded with the seed: comfy/sample.py prepare_noise, comfy/k_diffusion/sampling.py default_noise_sampler).
enum class RngSource { Tessera, CPU, GPU, NV, ComfyUI };

// Names used in JSON, on the CLI and in the GUI ("ddim", "hann", "step", "fp16"...): one
// toString and one parseX per enum, alike on purpose (each a lookup in its own name table).
std::string_view toString(SchedulerKind);
std::string_view toString(BetaSchedule);
std::string_view toString(TimestepSpacing);
std::string_view toString(VarianceType);
std::string_view toString(PredictionType);
std::string_view toString(BlendWindowKind);
std::string_view toString(FusionRule);
std::string_view toString(TileShift);
std::string_view toString(GraphMode);
std::string_view toString(Precision);
std::string_view toString(BackendKind);
std::string_view toString(SdxlSizeConditioning);
std::string_view toString(VaeTiling);
std::string_view toString(RngSource);
// parseX throws ValidationError(field, "... 'x' is not one of a, b, c") on an unknown name.
SchedulerKind parseScheduler(std::string_view, std::string_view field = "scheduler");
BetaSchedule parseBetaSchedule(std::string_view, std::string_view field = "beta_schedule");
TimestepSpacing parseTimestepSpacing(std::string_view, std::string_view field = "timestep_spacing");
VarianceType parseVarianceType(std::string_view, std::string_view field = "variance_type");
PredictionType parsePredictionType(std::string_view, std::string_view field = "prediction_type");
BlendWindowKind parseBlendWindow(std::string_view, std::string_view field = "window");
FusionRule parseFusionRule(std::string_view, std::string_view field = "fusion");
TileShift parseTileShift(std::string_view, std::string_view field = "tile_shift");
GraphMode parseGraphMode(std::string_view, std::string_view field = "graphs");
Precision parsePrecision(std::string_view, std::string_view field = "precision");
BackendKind parseBackend(std::string_view, std::string_view field = "backend");
SdxlSizeConditioning parseSdxlSizeConditioning(std::string_view, std::string_view field = "sdxl_size_conditioning");
VaeTiling parseVaeTiling(std::string_view, std::string_view field = "vae_tiling");
RngSource parseRngSource(std::string_view, std::string_view field = "noise_source");

// Scheduler options, with diffusers' names and defaults (the schedulers' __init__).
struct SchedulerOptions {
    int numTrainTimesteps = 1000;
    float betaStart = 1e-4f;
    float betaEnd = 0.02f;
    BetaSchedule betaSchedule = BetaSchedule::Linear;
    TimestepSpacing timestepSpacing = TimestepSpacing::Leading;
    int stepsOffset = 0;
    bool clipSample = true;
    float clipSampleRange = 1.0f;
    bool setAlphaToOne = true;                             // DDIM
    float eta = 0.0f;                                      // DDIM
    VarianceType varianceType = VarianceType::FixedSmall;  // DDPM
    PredictionType predictionType = PredictionType::Epsilon;
    bool karrasSigmas = true;  // Euler
};

// Most tile batches in flight at once (RunConfig::lanes, CudaBackend lanes).
inline constexpr int kMaxLanes = 8;
// Most CPU threads a run may ask for (RunConfig::threads): beyond any machine Tessera runs on.
inline constexpr int kMaxThreads = 1024;
// The auto tile batch (RunConfig::tileBatch 0) puts at most this many tiles in one UNet call.
inline constexpr int kAutoTileBatchMost = 32;

// The auto tile batch: the tiles spread evenly over the fewest UNet calls of at most `most`
// tiles (25 tiles: one call of 25; 441: 14 calls of at most 32). A larger call keeps the GPU's
// (and the CPU engine's threads') work in fewer, fuller launches; the cap bounds activations.
int autoTileBatch(int tiles, int most = kAutoTileBatchMost);
// The tiles per UNet call of a run over `tiles` tiles: the asked-for batch (at most all the
// tiles), or autoTileBatch where it is 0.
int resolveTileBatch(int tileBatch, int tiles);

// A LoRA / LyCORIS a run merges besides those its prompt's <lora:...> tags name (tessera-cli's
// --lora, A1111's "Append LoRA to prompt" setting sd_lora): the file (a path, or a NAME looked up in a
// models folder's Lora/, LyCORIS/ and loras/: core/run/LoraModelFile.h) and A1111's te and unet
// multipliers.
struct LoraSetting {
    std::string file;
    double teMultiplier = 1.0;
    double unetMultiplier = 1.0;
    bool operator==(const LoraSetting&) const = default;
};
// The most LoRAs a run's settings name (far beyond the handful users stack).
inline constexpr std::size_t kMaxLoras = 64;
// The most text encoder files a run names (FLUX.1 reads two: CLIP-L and T5).
inline constexpr std::size_t kMaxTextEncoders = 4;

struct RunConfig {
    int width = 256;
    int height = 256;
    std::uint64_t seed = 0;
    // Noise (RngSource). The A1111 settings below act on the A1111 sources (cpu, gpu, nv), as
    // A1111's modules/rng.py ImageRNG applies them; a run with Tessera's noise ignores them (its
    // record says so).
    RngSource noiseSource = RngSource::Tessera;
    std::uint64_t variationSeed = 0;     // A1111 "Variation seed" (subseed)
    double variationStrength = 0.0;      // A1111 "Variation strength" (subseed_strength), 0 to 1; 0 = off
    int seedResizeFromWidth = 0;         // A1111 "Resize seed from width/height" in image pixels;
    int seedResizeFromHeight = 0;        //   0 x 0 = off
    std::int64_t etaNoiseSeedDelta = 0;  // A1111 "Eta noise seed delta" (ENSD)
    int steps = 20;
    SchedulerKind scheduler = SchedulerKind::DDIM;
    SchedulerOptions schedulerOptions;

    int tile = 64;                          // tile edge in pixels (tiles are square unless the image is smaller)
    int overlapPx = 16;                     // used when overlapFraction is not set
    std::optional<double> overlapFraction;  // 0 <= f < 1, of the tile; wins over overlapPx when set
    BlendWindowKind window = BlendWindowKind::Hann;
    FusionRule fusion = FusionRule::Sample;
    TileShift tileShift = TileShift::Off;  // sampling passes only (the VAE's tiles never move)
    int tileBatch = 0;                     // tiles evaluated per UNet call (0 = auto: resolveTileBatch)
    GraphMode graphs = GraphMode::Off;
    int graphWarmup = 2;
    int graphCacheSize = 16;
    int lanes = 0;  // tile batches in flight at once (CUDA engine; 0 = auto, 1..kMaxLanes)
    Precision precision = Precision::FP16;
    BackendKind backend = BackendKind::Auto;
    int threads = 0;       // CPU engine: threads that compute (0 = all cores); the image does not depend on it
    std::string model;     // model folder; empty = the default model
    int previewEvery = 1;  // observer preview every N steps (0 = never)

    // Image-to-image (SDEdit): empty = from noise.
    std::string initImage;
    double strength = 0.5;
    bool preserveColor = false;

    std::string label;  // free text shown in the run history

    // Text conditioning (Stable Diffusion models; an unconditional model refuses a prompt).
    // A1111's emphasis syntax and BREAK apply (core/text/PromptParser.h).
    std::string prompt;
    std::string negativePrompt;
    double cfgScale = 7.0;  // classifier-free guidance scale; 1 evaluates the conditional half only
    // FLUX.1-dev: the guidance scale the model takes as an input (guidance distillation: one
    // evaluation per step, cfgScale unused); schnell and the UNet families ignore it.
    double guidance = 3.5;
    int clipSkip = 1;  // A1111's "Clip skip": 1 = the family's usual layer, 2 = one earlier, ...
    // LoRAs merged after those the prompt's <lora:name:w> tags name, as if their tags followed the
    // prompt (promptWithLoraTags, core/run/LoraModelFile.h: the prompt an infotext writes).
    std::vector<LoraSetting> loras;
    // ControlNets (A1111's ControlNet units), each evaluated with the UNet on every tile batch and
    // its residuals added to the UNet's skips (core/sampling/ControlNetRun.h).
    std::vector<ControlNetUnit> controlNets;
    // SDXL UNets: the size and crop ids each tile's added conditioning carries (ignored by SD 1.x / 2.x).
    SdxlSizeConditioning sdxlSizeConditioning = SdxlSizeConditioning::Image;
    // Image-to-image: the canvas is the init image resized by this factor (width / height are
    // then the init image's size times upscale, rounded down to multiples of 8).
    double upscale = 1.0;
    // Image-to-image upscaling: a super-resolution model (ESRGAN, Real-ESRGAN Compact, SPAN) run on
    // the start image before it is resized to the canvas: a file path, used as given, or a name
    // looked up in a models folder's ESRGAN/ and upscale_models/ (core/run/UpscaleModelFile.h);
    // "" = the start image is only resized.
    std::string upscaleModel;
    // Stable Diffusion: a separate VAE replacing the model's own for the decode and the encode (the
    // latent scaling stays the model's, as A1111 keeps it): a .safetensors/.pt/.ckpt file or a
    // diffusers AutoencoderKL folder, used as given, or a name looked up in a models folder's VAE/
    // and vae/ (core/run/VaeFile.h); "" = the model's own VAE.
    std::string vae;
    // FLUX.1 single files: the text encoders' files (clip_l.safetensors; t5xxl_fp16.safetensors or
    // an fp8 T5, its spiece.model beside it), each a path or a name looked up in text_encoders/
    // and clip/ of the models folders; which is which is read from their tensors. Unused with a
    // diffusers folder as the model (its own text_encoder/ and text_encoder_2/).
    std::vector<std::string> textEncoders;
    // Stable Diffusion: a folder of textual-inversion embeddings a prompt names by their file names,
    // looked in after the models folders' embeddings/ (core/run/EmbeddingFile.h; A1111's
    // --embeddings-dir); "" = those alone.
    std::string embeddingsDir;
    VaeTiling vaeTiling = VaeTiling::Auto;  // the VAE's decode/encode: auto, on (tiled), off (whole)

    // Where timed algorithm choices are kept (core/formats/TuningCache.h), so that another process
    // makes the same choices: "" = the user's cache folder ($TESSERA_TUNING_CACHE, else
    // $XDG_CACHE_HOME/tessera/tuning.json, else ~/.cache/tessera/tuning.json), "off" = none
    // (every prepare times again), else that file.
    std::string tuningCache;

    // Overlap in pixels after resolving the fraction (rounded to nearest pixel).
    int overlapPixels() const;
};

// What the model allows, for validation. downsampleFactor = 2^(levels-1).
struct ModelLimits {
    int downsampleFactor = 8;
    int numTrainTimesteps = 1000;
    int inChannels = 3;
};

// The label is free text shown as one line in the run history and stored in PNG text chunks;
// a thousand bytes is a paragraph, far beyond any useful label.
inline constexpr std::size_t kMaxLabelBytes = 1000;
// A prompt of 32 KiB is thousands of tokens (over 40 chunks of 75), far beyond what any user writes.
inline constexpr std::size_t kMaxPromptBytes = 32768;
inline constexpr double kMaxCfgScale = 100.0;
inline constexpr int kMaxClipSkip = 12;
inline constexpr double kMaxUpscale = 16.0;
// An image side and a tile edge validate() accepts, in pixels: 16384 px is a 268-megapixel
// canvas, beyond what any model here is run at; a 4096-px tile is 512 latent pixels, far past
// SDXL's 128.
inline constexpr int kMaxImageSidePx = 16384;
inline constexpr int kMaxTilePx = 4096;

// Throws ValidationError(field) for a path no run can use: longer than
// input_limits::kPathChars (core/base/BoundedInput.h, Linux's PATH_MAX) or holding a NUL character.
// `what` names it in the message ("the output folder"). The message quotes a short excerpt.
void checkPathText(std::string_view field, std::string_view path, std::string_view what);

// Throws ValidationError naming the first bad field. Messages look like:
//   "tile: 0 is not allowed; the tile size must be a positive multiple of 8 (e.g. 64)"
void validate(const RunConfig&, const ModelLimits& = {});
// Same, but returns every problem (for the GUI, which marks each field).
std::vector<ValidationError> validateAll(const RunConfig&, const ModelLimits& = {});

// The schedule index of the first step a run evaluates: 0 from noise; from a start image,
// steps - floor(steps * strength) (diffusers' img2img: strength 0.35 of 20 steps runs the last 7;
// strength 0 gives `steps`, nothing to denoise). The steps a run evaluates are steps minus this.
int firstStepRun(const RunConfig& config, bool fromImage);
// The same for flow matching (diffusers FluxImg2ImgPipeline.get_timesteps): t_start =
// int(max(steps - min(steps x strength, steps), 0)), the product not rounded down first (6 steps at
// strength 0.6 run 4, where the SD pipelines run 3).
int firstFlowStepRun(const RunConfig& config, bool fromImage);

// Model evaluations per sampling step (diffusers' scheduler.order): 2 for Heun, DPM2 and DPM++ SDE,
// else 1. Their n steps evaluate the model 2n - 1 times (the last step once), and the tiled loop
// counts one step per evaluation, as diffusers' scheduler.timesteps does.
int evaluationsPerStep(SchedulerKind kind);
// The steps the tiled loop counts for config.steps: steps, or 2 steps - 1.
int loopSteps(const RunConfig& config);
// The loop step a run begins at: firstStepRun times evaluationsPerStep (diffusers' img2img
// get_timesteps: timesteps[t_start * order:]).
int firstLoopStep(const RunConfig& config, bool fromImage);

// JSON with the CLI's field names: width, height, seed, steps, scheduler, scheduler_options{...},
// tile, overlap (int px or "25%" or fraction <1 as number), window, fusion, batch, graphs,
// graph_warmup, graph_cache, lanes, precision, backend, threads, model, preview_every, init,
// strength, preserve_color, label, tuning_cache, prompt, negative_prompt, cfg, clip_skip, upscale,
// upscale_model, vae, embeddings_dir, sdxl_size_conditioning, vae_tiling, loras ([{"file", "te", "unet"}]),
// noise_source, variation_seed, variation_strength, seed_resize_from ("WxH", "" = off),
// eta_noise_seed_delta. fromJson: unknown keys are an error naming the key;
// missing keys keep defaults.
nlohmann::json toJson(const RunConfig&);
RunConfig runConfigFromJson(const nlohmann::json&);

}  // namespace tessera
