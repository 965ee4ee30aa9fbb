// TiledLoop: the one tiled loop of both engines (docs/ENGINE_LOOP.md, docs/ENGINE_SEMANTICS.md).
// It owns everything an engine does that is not device work: the run's set-up (the model,
// validation, the scheduler, the tile plan and blend weights, the record), the step loop
// (variants, tile batches, cancellation between batches, the non-finite stop, observer events,
// previews, memory samples) and the result (seam map, preserve-colour, image hash). Each step is
// issued as calls on a TileDevice (core/sampling/TileDevice.h): the CPU engine (core/cpu/CpuEngine.h)
// hands it a CpuTileDevice, the CUDA engine (kernels/engine/CudaEngine.h) its CudaTileDevice.
// The same loop tiles any function over any canvas (map()). Qt-free; callbacks run on the
// calling thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/models/flux/FluxModel.h"
#include "core/models/sd/SdModel.h"
#include "core/run/Engine.h"
#include "core/sampling/ControlNetRun.h"
#include "core/sampling/Denoiser.h"
#include "core/sampling/FlowMatchScheduler.h"
#include "core/sampling/TileDevice.h"

namespace tessera {

class UNetModel;

// A preview of the canvas as the user sees it (latents to RGB); empty: the canvas itself.
using PreviewMap = std::function<ImageTensor(const ImageTensor&)>;

// True when the run should stop (checked between tile batches and before each step).
using CancelCheck = std::function<bool()>;

// SDXL's size ids for a tile (the micro-conditioning of Podell et al. 2023, "SDXL", section 2.2;
// diffusers pipeline_stable_diffusion_xl.py _get_add_time_ids), in pixels: (original height,
// original width, crop top, crop left, target height, target width). Image: the whole image's size
// twice and crop (0, 0) for every tile, as A1111's Tiled Diffusion passes them (and diffusers for an
// untiled image). Tile: original = the whole image, crop = the tile's offset, target = the tile's
// size: the ids SDXL was trained with for a crop of a larger image.
std::vector<float> sdxlTimeIds(const TileSite& site, SdxlSizeConditioning mode);

// A Stable Diffusion XL run's added conditioning: for a tile and branch, textTimeEmbeds(unet, the
// branch's pooled text, sdxlTimeIds(site, mode)). Throws ValidationError("model") when the pooled
// text does not fit the UNet's add_embedding (none given: a text encoder without a pooled output);
// the function throws std::logic_error when asked for the unconditional branch without pooledUncond.
AddedConditioning sdxlAddedConditioning(const UNetCondConfig& unet, SdxlSizeConditioning mode,
                                        std::vector<float> pooledCond, std::vector<float> pooledUncond);

// The VAE's precision for a run asking `requested`: float32 where the VAE config says force_upcast
// and the run asks fp16 for an SDXL model (its decoder's activations overflow fp16: diffusers
// pipeline_stable_diffusion_xl.py upcast_vae); else `requested`. SD 1.x / 2.x VAEs keep the run's precision (diffusers' SD pipelines never
// read force_upcast). `why`, when given, is set to the record's message ("vae: fp32 (force_upcast)")
// or cleared.
Precision sdVaePrecision(const SdModel& model, Precision requested, std::string* why = nullptr);

// A map pass: a tile function over a whole canvas, blended like a sampling step.
struct MapSpec {
    int tile = 64, overlap = 16;  // in input-canvas pixels, as RunConfig's tile / overlap
    BlendWindowKind window = BlendWindowKind::Hann;
    int batch = 1;  // tiles per evaluation
    // The output canvas is upscale / downscale times the input's size (a VAE decoder 8 / 1, an
    // encoder 1 / 8); the input's size, the tile and the overlap must be multiples of downscale.
    int upscale = 1, downscale = 1;
    int outChannels = 0;               // the function's output channels
    std::optional<Guidance> guidance;  // evaluate twice and blend (classifier-free guidance)
};

class TiledLoop {
public:
    // One generation on `device` (ENGINE_SEMANTICS.md). Loads config.model (a folder; the loaded
    // model is kept while the path stays the same) unless a model was pinned with setModel,
    // validates the config against the model's limits (ValidationError naming the field), lets
    // the device prepare, and samples. Cancellation is checked before each step and between
    // tile batches: the result then holds the canvas after the last whole step and
    // record.status == RunStatus::Cancelled. A NaN or infinity in a tile batch's output, or in the
    // latents after a step's update, stops the run with NonFiniteError (step, tile batch,
    // record status "failed"). Other failures throw (ModelError, std::runtime_error, the device's).
    RunResult run(const RunConfig& config, RunObserver& observer, TileDevice& device, const CancelCheck& cancelled);

    // Tiles the device's function over `input` (C x H x W): tiles of spec.tile with spec.overlap
    // cut from the input, evaluated spec.batch at a time, their outputs (spec.outChannels x
    // tile*r x tile*r, r = upscale / downscale) window-weighted (overlap*r) and normalised into the
    // output canvas (outChannels x H*r x W*r) as one sampling step with identityStep() does.
    // Returns nothing when cancelled; throws ValidationError for a bad spec, NonFiniteError
    // (step 1/1) for a NaN or infinity. The observer sees the pass's tile batches and one step.
    static std::optional<ImageTensor> map(TileDevice& device, const ImageTensor& input, const MapSpec& spec,
                                          RunObserver& observer, const CancelCheck& cancelled);

    // Pins an in-memory model (config.model is then ignored); nullptr returns to loading config.model.
    void setModel(std::shared_ptr<const UNetModel> model);
    // Pins an in-memory Stable Diffusion model (random-weight benchmarks, tests); nullptr unpins.
    void setSdModel(std::shared_ptr<const SdModel> model);
    // Image-to-image (SDEdit) start image in model space, C x H x W of the run (checked in run(),
    // field "init"); an empty tensor clears it. Sampling then starts at step index
    // b = steps - int(steps * strength) from x = a * init + c * z(kInitNoiseDraw), {a, c} =
    // Scheduler::addNoise(b) (diffusers' add_noise per scheduler); config.preserveColor then
    // matches each channel's mean and standard deviation to the start image's.
    void setInitImage(ImageTensor image) { init_ = std::move(image); }
    bool hasInitImage() const { return !init_.data.empty(); }
    // Reference comparisons: a text-to-image run starts from x_T = z * the scheduler's initial
    // sigma (z: C x h x w of the sampler's canvas, the latent one for Stable Diffusion) instead of
    // Philox draw 0. Checked in run() (field "init"); an empty tensor clears it.
    void setStartNoise(ImageTensor z) { startNoise_ = std::move(z); }
    // Reference comparisons: an image-to-image run starts its first executed step from these
    // latents (C x h x w of the canvas) instead of a * init + c * z. An empty tensor clears it.
    void setStartLatents(ImageTensor z) { startLatents_ = std::move(z); }
    // Replaces the per-tile added conditioning of SDXL runs (reference comparisons, tests, front
    // ends with their own micro-conditioning); an empty function returns to sdxlAddedConditioning
    // over the prompts' pooled text and config.sdxlSizeConditioning.
    void setAddedConditioning(AddedConditioning f) { addedCond_ = std::move(f); }
    // ControlNets for the next Stable Diffusion runs (core/sampling/ControlNetRun.h), evaluated with
    // the UNet on every tile batch; an empty list runs without. Checked in run() (fields
    // "controlnet", "control_image").
    void setControlNets(std::vector<ControlNetRunUnit> units) { controls_ = std::move(units); }
    // The decoded control images of config.controlNets (unit i's at i; empty where the unit takes
    // the start image), C x H x W of the run in [0, 1]; used when no units are pinned.
    void setControlImages(std::vector<ImageTensor> images) { controlImages_ = std::move(images); }
    // Pins an in-memory FLUX.1 model (config.model is then ignored); nullptr unpins. A FLUX run
    // (a pinned model, or config.model a FluxPipeline folder: core/models/flux/FluxModel.h) samples
    // with flow matching's Euler (core/sampling/FlowMatchScheduler.h), one evaluation per step
    // with dev's guidance embedded (config.cfgScale is not used), dev's shift from the tile's
    // token count: every tile is an image of the tile's size to the transformer (its own
    // position grid), so the schedule FLUX.1 pairs with that size is the one it sees.
    void setFluxModel(std::shared_ptr<const FluxModel> model);
    // The text of the next FLUX runs (the T5 and CLIP encodings and the guidance scale), checked
    // against the model in run(); nullopt clears it.
    void setFluxConditioning(std::optional<FluxConditioning> conditioning) {
        fluxConditioning_ = std::move(conditioning);
    }
    // The model of the last run (or pinned), nullptr before the first run.
    std::shared_ptr<const UNetModel> model() const { return model_; }

private:
    // One sampling pass over a canvas: `config` as the user gave it (the record's), `canvas` the
    // sizes the sampler works in (the latent canvas of a Stable Diffusion run; else config).
    struct SamplingJob {
        const RunConfig& config;
        const RunConfig& canvas;
        const Denoiser& denoiser;
        SchedulerOptions schedule;  // the model's
        std::string modelName, modelHash;
        std::vector<std::string> messages;
        std::optional<TextEncodeRecord> textEncode;  // the record's phases before sampling
        std::optional<VaePassRecord> vaeEncode;
        const ImageTensor* init = nullptr;  // in canvas space
        PreviewMap preview;
        int pixelScale = 1;      // image pixels per canvas pixel (the VAE's 8 for Stable Diffusion)
        int graphTileScale = 1;  // DevicePrepare::graphTileScale
        const std::vector<ControlNetRunUnit>* controls = nullptr;  // with their hint canvases
        const std::vector<std::vector<float>>* hints = nullptr;
        std::optional<FlowMatchOptions> flow;  // FLUX: flow matching (its imageSeqLen set from the tile)
    };
    RunResult sample(const SamplingJob& job, RunObserver& observer, TileDevice& device, const CancelCheck& cancelled,
                     std::chrono::steady_clock::time_point prepareStart);
    RunResult runSd(const RunConfig& config, RunObserver& observer, TileDevice& device, const CancelCheck& cancelled);
    RunResult runFlux(const RunConfig& asked, RunObserver& observer, TileDevice& device, const CancelCheck& cancelled);
    bool usesFluxModel(const RunConfig& config) const;
    std::shared_ptr<const UNetModel> modelFor(const RunConfig& config);
    // The run's SD model: the pinned one, the cached one, or loaded (reported to `observer`;
    // throws LoadCancelled between tensors once `cancelled` says so).
    std::shared_ptr<const SdModel> sdModelFor(const RunConfig& config, RunObserver& observer,
                                              const CancelCheck& cancelled);
    bool usesSdModel(const RunConfig& config) const;
    void checkRun(const RunConfig& config, const UNetModel& model) const;
    void checkInit(int channels, int height, int width) const;

    std::shared_ptr<const FluxModel> flux_;
    std::string fluxPath_;
    bool fluxPinned_ = false;
    std::optional<FluxConditioning> fluxConditioning_;
    std::shared_ptr<const SdModel> sd_;
    std::string sdPath_;
    bool sdPinned_ = false;
    std::shared_ptr<const Denoiser> denoiser_;  // the graph of the current model (and context length)
    std::uint64_t denoiserGeneration_ = ~std::uint64_t{0};
    std::shared_ptr<const UNetModel> model_;
    std::string modelPath_;  // folder model_ was loaded from; empty when pinned
    bool modelPinned_ = false;
    std::uint64_t modelGeneration_ = 0;  // bumped whenever model_ changes
    ImageTensor init_;
    ImageTensor startNoise_;
    ImageTensor startLatents_;
    AddedConditioning addedCond_;
    std::vector<float> startImage_;  // startNoise_ * sigma for the run in progress
    std::vector<ControlNetRunUnit> controls_;
    std::vector<ImageTensor> controlImages_;
    std::vector<ControlNetRunUnit> runControls_;  // the run in progress's (pinned or from the config)
    std::vector<std::pair<std::string, std::shared_ptr<const ControlNetModel>>> controlModels_;  // by path
    std::vector<std::vector<float>> controlHints_;  // the run in progress's hint canvases
    CanvasShift lastTileShift_;             // the last sampled step's tile shift in image pixels (shifted tiles)
    bool lastControlled_ = false;           // the device holds a controlled graph
    ControlledModelCache controlledModel_;  // its graph and merged weights, kept across runs
};

}  // namespace tessera
