#include "core/sampling/TiledLoop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <thread>
#include <utility>

#include <unistd.h>

#include "core/base/CanvasShift.h"
#include "core/base/FormatNumber.h"
#include "core/models/flux/FluxFiles.h"
#include "core/models/flux/FluxGraph.h"
#include "core/models/flux/FluxTextFiles.h"
#include "core/models/sd/SdPipeline.h"
#include "core/models/sd/UNetCondGraph.h"
#include "core/models/unet/UNetGraph.h"
#include "core/models/unet/UNetModel.h"
#include "core/models/vae/TiledVae.h"
#include "core/models/vae/VaeModel.h"
#include "core/run/NonFiniteError.h"
#include "core/run/RunRecordIO.h"  // newRunId
#include "core/run/TextEncoderFile.h"
#include "core/run/VaeFile.h"
#include "core/sampling/BlendWindow.h"
#include "core/sampling/ImageOps.h"
#include "core/sampling/LatentNoise.h"
#include "core/sampling/Philox.h"
#include "core/sampling/Scheduler.h"
#include "core/sampling/SeamScore.h"
#include "core/sampling/TilePlan.h"

#ifndef TESSERA_VERSION
#define TESSERA_VERSION "unknown"
#endif

namespace tessera {

namespace {

using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point start) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

std::string hostName() {
    char name[256] = {};
    if (gethostname(name, sizeof name - 1) != 0) return {};
    return name;
}

// Image-to-image "preserve colour": give each channel of `image` the mean and standard
// deviation it has in `reference`, so the result keeps the start image's palette.
void matchColour(ImageTensor& image, const ImageTensor& reference) {
    const std::size_t plane = static_cast<std::size_t>(image.height) * image.width;
    for (int c = 0; c < image.channels; ++c) {
        auto stats = [&](const std::vector<float>& data) {
            double sum = 0, sumSq = 0;
            for (std::size_t p = 0; p < plane; ++p) {
                const double v = data[c * plane + p];
                sum += v;
                sumSq += v * v;
            }
            const double mean = sum / plane;
            return std::pair<double, double>{mean, std::sqrt(std::max(0.0, sumSq / plane - mean * mean))};
        };
        const auto [mean, sd] = stats(image.data);
        const auto [refMean, refSd] = stats(reference.data);
        const double gain = sd > 1e-8 ? refSd / sd : 1.0;
        for (std::size_t p = 0; p < plane; ++p) {
            float& v = image.data[c * plane + p];
            v = static_cast<float>((v - mean) * gain + refMean);
        }
    }
}

// Per pixel, the largest over channels of the weighted standard deviation of the tiles' last-step values.
ImageTensor seamMapFrom(int channels, int height, int width, const SeamSums& s) {
    const std::size_t plane = static_cast<std::size_t>(height) * width;
    ImageTensor map{1, height, width, std::vector<float>(plane, 0.0f)};
    for (int c = 0; c < channels; ++c)
        for (std::size_t pix = 0; pix < plane; ++pix) {
            const std::size_t p = c * plane + pix;
            const double var = s.sumSq[p] - s.sum[p] * s.sum[p];
            const float sd = static_cast<float>(std::sqrt(std::max(0.0, var)));
            map.data[pix] = std::max(map.data[pix], sd);
        }
    return map;
}

// The record's configuration says what ran, not what was asked (a CUDA request that ran on the
// CPU is listed as "cpu", and fp32 where the CPU computes fp32 for an fp16 request): the backend
// the device reported and the precision it computes in; a note says what was asked instead.
void recordWhatRan(RunRecord& record, const DevicePlan& plan) {
    RunConfig& c = record.config;
    if (plan.precision != c.precision) {
        record.messages.push_back("precision: " + std::string(toString(plan.precision)) + " (the " +
                                  record.environment.backend + " backend computes in " +
                                  std::string(toString(plan.precision)) + "; " + std::string(toString(c.precision)) +
                                  " was asked)");
        c.precision = plan.precision;
    }
    const BackendKind ran = record.environment.backend == "cuda" ? BackendKind::CUDA : BackendKind::CPU;
    c.backend = ran;
}

// What the record says about the finished image: its hash and how visible the tile borders are
// (`config` in image pixels): where the last step's tiles met (`lastShift`, image pixels: the
// plan's borders rolled with shifted tiles).
void describeImage(RunResult& result, const RunConfig& config, CanvasShift lastShift) {
    RunRecord& record = result.record;
    record.imageSha256 = imageSha256(toRgb8(result.image));
    if (record.status != RunStatus::Finished) return;
    const SeamScore seams = seamScore(result.image, TilePlan::fromConfig(config), lastShift);
    record.seamScore = seams.score;
    record.seamWorst = seams.worst;
}

// What the record says about the run before it starts: the configuration as run (the model's
// schedule, the overlap in pixels), the model, the host and the tiling. The device adds its own.
void describeRun(RunRecord& record, const RunConfig& config, const SchedulerOptions& options,
                 const std::string& modelName, const std::string& modelHash, const TilePlan& plan,
                 const std::vector<float>& timesteps) {
    record.config = config;
    record.config.overlapPx = config.overlapPixels();
    record.config.schedulerOptions = options;
    record.modelName = modelName;
    record.modelHash = modelHash;
    record.environment.tesseraVersion = TESSERA_VERSION;
    record.environment.host = hostName();
    record.environment.threads = static_cast<int>(std::thread::hardware_concurrency());
    record.tileCount = plan.count();
    record.tileW = plan.tileW();
    record.tileH = plan.tileH();
    record.timesteps = timesteps;
}

// Tile batches of `batchSize` in id order, on lanes round robin, bounded in `outPlan`'s pixels.
std::vector<TileBatch> tileBatches(const TilePlan& outPlan, int batchSize, int lanes) {
    std::vector<TileBatch> batches;
    const int tiles = outPlan.count();
    for (int first = 0, j = 0; first < tiles; first += batchSize, ++j) {
        TileBatch b;
        b.index = j;
        b.first = first;
        b.count = std::min(batchSize, tiles - first);
        b.lane = j % lanes;
        b.y0 = outPlan.height();
        b.x0 = outPlan.width();
        for (int t = 0; t < b.count; ++t) {
            const TileRect& r = outPlan.tile(first + t);
            b.tileIds.push_back(r.id);
            b.y0 = std::min(b.y0, r.y);
            b.x0 = std::min(b.x0, r.x);
            b.y1 = std::max(b.y1, r.y + outPlan.tileH());
            b.x1 = std::max(b.x1, r.x + outPlan.tileW());
        }
        batches.push_back(std::move(b));
    }
    return batches;
}

// x_T from Philox draw 0 (times the initial sigma), or for image-to-image the start image noised
// to the level of the first step run. `startStep` becomes that step's index in the scheduler's
// evaluations (numSteps() when there is nothing to denoise); `firstRun` is the first step run
// (firstStepRun, or firstFlowStepRun for flow matching).
CanvasStart canvasStart(int firstRun, const Scheduler& scheduler, const ImageTensor* init, int& startStep) {
    CanvasStart start;
    startStep = 0;
    if (!init) {
        start.kind = CanvasStart::Kind::Noise;
        start.draw = 0;
        start.sigma = scheduler.initNoiseSigma();
        return start;
    }
    startStep = std::min(firstRun * scheduler.evaluationsPerStep(), scheduler.numSteps());
    start.image = &init->data;
    if (startStep >= scheduler.numSteps()) {
        start.kind = CanvasStart::Kind::Image;  // strength 0: nothing to denoise
        return start;
    }
    // diffusers' add_noise at the begin index, in the state the scheduler steps: VP for
    // DDPM/DDIM/DPM++ 2M, z + sigma n for Euler and Euler a (Scheduler::addNoise).
    const Scheduler::AddNoise noise = scheduler.addNoise(startStep);
    start.kind = CanvasStart::Kind::NoisedImage;
    start.draw = kInitNoiseDraw;
    start.a = noise.image;
    start.b = noise.noise;
    start.scale = 1.0f;
    return start;
}

// A seed-resize size (RunConfig::seedResizeFromWidth/Height, image pixels) must cover at least one
// canvas pixel (pixelScale image pixels per canvas pixel).
void checkSeedResize(const RunConfig& config, int pixelScale) {
    const int w = config.seedResizeFromWidth, h = config.seedResizeFromHeight;
    const int scale = std::max(pixelScale, 1);
    if (config.noiseSource == RngSource::Tessera || config.noiseSource == RngSource::ComfyUI || (w == 0 && h == 0) ||
        (w >= scale && h >= scale))
        return;
    throw ValidationError("seed_resize_from", "seed_resize_from: " + std::to_string(w) + "x" + std::to_string(h) +
                                                  " is under one latent pixel; this model's latents are " +
                                                  std::to_string(scale) + " image pixels wide");
}

// The noise of a run whose RunConfig::noiseSource is one of torch's generators: the whole canvas's
// noise, drawn on the host as an untiled run draws it (A1111 modules/rng.py ImageRNG), so a tile plan
// never changes it; nullptr for Tessera's Philox noise, which the device draws. Notes go to `messages`.
std::unique_ptr<LatentNoise> runNoise(const RunConfig& config, int channels, int height, int width, int pixelScale,
                                      TileDevice& device, std::vector<std::string>& messages) {
    if (config.noiseSource == RngSource::Tessera || config.noiseSource == RngSource::ComfyUI) {
        std::string ignored;
        const auto note = [&ignored](bool given, const char* field) {
            if (given) ignored += (ignored.empty() ? "" : ", ") + std::string(field);
        };
        note(config.variationStrength != 0.0, "variation_strength");
        note(config.seedResizeFromWidth != 0 || config.seedResizeFromHeight != 0, "seed_resize_from");
        note(config.etaNoiseSeedDelta != 0, "eta_noise_seed_delta");
        if (!ignored.empty())
            messages.push_back(ignored + ": ignored with noise_source " + std::string(toString(config.noiseSource)) +
                               " (A1111's seed settings act on the cpu, gpu and nv sources)");
        if (config.noiseSource == RngSource::Tessera) return nullptr;
    }
    checkSeedResize(config, pixelScale);
    NormalGeneratorFactory gpu;
    std::string how;
    switch (config.noiseSource) {
        case RngSource::CPU:
            how = "torch's CPU generator (A1111's \"CPU\" RNG)";
            break;
        case RngSource::NV:
            how = "A1111's \"NV\" RNG (its emulation of torch's CUDA generator)";
            break;
        case RngSource::GPU:
            gpu = device.torchCudaGenerators();
            how =
                gpu ? "torch's CUDA generator on this GPU (A1111's \"GPU\" RNG; its layout follows the GPU's SM count)"
                    : "A1111's \"NV\" emulation of torch's CUDA generator: this engine has no GPU, so A1111's "
                      "\"GPU\" noise is matched within about 3e-6, not bit for bit";
            break;
        case RngSource::ComfyUI:
            gpu = device.torchCudaGenerators();
            how = std::string("ComfyUI's: the start from torch's CPU generator, the ancestral steps' from ") +
                  (gpu ? "torch's CUDA generator on this GPU seeded with the seed"
                       : "A1111's \"NV\" emulation of torch's CUDA generator seeded with the seed (this engine has "
                         "no GPU: within about 3e-6, not bit for bit)");
            break;
        case RngSource::Tessera:
            break;
    }
    messages.push_back("noise: " + std::string(toString(config.noiseSource)) + ", " + how +
                       ", drawn for the whole canvas");
    const LatentShape shape{1, channels, height, width};
    return std::make_unique<LatentNoise>(runNoiseSettings(config, pixelScale), shape, std::move(gpu));
}

// The start canvas of a run with host noise: x_T = z * sigma, or the start image noised with z,
// z the noise's first draw (A1111's ImageRNG.first); a start image left as it is draws nothing.
// `canvas` holds the result, which the start then names as its image.
void startFromHostNoise(LatentNoise& noise, CanvasStart& start, std::vector<float>& canvas) {
    if (start.kind == CanvasStart::Kind::Image) return;
    std::vector<float> z(noise.shape().elements());
    noise.initial(z.data());
    canvas.resize(z.size());
    if (start.kind == CanvasStart::Kind::Noise) {
        for (std::size_t i = 0; i < z.size(); ++i) canvas[i] = z[i] * start.sigma;
    } else {
        const std::vector<float>& image = *start.image;
        if (image.size() != z.size()) throw std::logic_error("TiledLoop: the start image is not the canvas's size");
        for (std::size_t i = 0; i < z.size(); ++i) canvas[i] = (start.a * image[i] + start.b * z[i]) * start.scale;
    }
    start.kind = CanvasStart::Kind::Image;
    start.image = &canvas;
}

// The step loop of one pass: each step issued as TileDevice calls, its events, previews and
// memory samples reported, cancellation and non-finite values handled.
class PassRunner {
public:
    PassRunner(TileDevice& device, const TiledPass& pass, RunRecord& record, RunObserver& observer,
               const CancelCheck& cancelled, Clock::time_point runStart, PreviewMap preview = {})
        : device_(device),
          pass_(pass),
          record_(record),
          observer_(observer),
          cancelled_(cancelled),
          runStart_(runStart),
          preview_(std::move(preview)),
          hostMs_(pass.batches.size(), 0.0) {}

    // A pass with hostStepNoise: each step whose coefficients have sigma != 0 takes the next draw
    // of `noise` (A1111's ImageRNG.next per noisy step, as k-diffusion's ancestral samplers ask it).
    void setHostNoise(LatentNoise* noise) { hostNoise_ = noise; }
    // Image pixels per canvas pixel: the tile batch events' shifts are in image pixels.
    void setPixelScale(int scale) { pixelScale_ = scale; }

    // Steps [startStep, steps); false when cancelled.
    bool run(int startStep) {
        for (int k = startStep; k < pass_.steps(); ++k)
            if (!step(k)) return false;
        return true;
    }

private:
    int pixelScale_ = 1;
    float timestep(int k) const { return pass_.coefficients[static_cast<std::size_t>(k)].timestep; }

    bool step(int k) {
        if (cancelled_()) return false;
        const auto stepStart = Clock::now();
        const StepVariant variant = pass_.variant(k);
        std::fill(hostMs_.begin(), hostMs_.end(), 0.0);
        if (pass_.hostStepNoise) giveStepNoise(k);
        device_.beginStep(k, variant);
        if (!device_.runStep(variant, [&](bool capturing) { return body(k, variant, capturing); })) return false;
        const double enqueueMs = msSince(stepStart);
        const StepReport report = device_.endStep();
        if (report.nonFinite) throw nonFinite(report.nonFinite->step, report.nonFinite->batch);
        if (!device_.synchronous())
            for (const TileBatch& b : pass_.batches)
                reportBatch(k, b, report.batches.at(static_cast<std::size_t>(b.index)));

        StepEvent event;
        event.step = k;
        event.steps = pass_.steps();
        event.timestep = timestep(k);
        event.timing.step = k;
        event.timing.timestep = event.timestep;
        event.timing.gpuMs = report.gpuMs;
        event.timing.hostEnqueueMs = enqueueMs;
        event.timing.wallMs = device_.synchronous() ? enqueueMs : msSince(stepStart);
        event.timing.captured = report.graph == "capture";
        event.timing.graph = report.graph;
        record_.steps.push_back(event.timing);
        record_.stepsRun = static_cast<int>(record_.steps.size());
        observer_.onStep(event);

        const MemorySample memory{msSince(runStart_), report.usedMiB, report.arenaMiB};
        record_.memory.push_back(memory);
        observer_.onMemory(memory);

        if (variant.preview || (k == pass_.steps() - 1 && pass_.previewEvery > 0)) {
            PreviewEvent preview;
            preview.step = k;
            preview.image =
                ImageTensor{pass_.outChannels, pass_.outHeight, pass_.outWidth, device_.readPreview(variant.preview)};
            if (preview_) preview.image = preview_(preview.image);
            observer_.onPreview(preview);
        }
        return true;
    }

    // The step's work, as device calls (TileDevice.h's order). Host-side parts (cancellation,
    // timings, reports) only when not capturing.
    bool body(int k, const StepVariant& variant, bool capturing) {
        device_.forkLanes();
        for (const TileBatch& b : pass_.batches) {
            if (!capturing && cancelled_()) {
                device_.abandonStep();
                return false;
            }
            const auto batchStart = Clock::now();
            device_.beginBatch(b);
            device_.gather(b);
            device_.evaluate(b, Branch::Conditional);
            if (pass_.guidance) {
                device_.evaluate(b, Branch::Unconditional);
                device_.combineGuidance(b, pass_.guidance->scale);
            }
            device_.joinBatch(b);
            if (device_.checkOutput(b) && !capturing) throw nonFinite(k, b.index);
            device_.scatter(b, variant);
            device_.endBatch(b);
            if (capturing) continue;
            hostMs_[static_cast<std::size_t>(b.index)] = msSince(batchStart);
            if (device_.synchronous()) reportBatch(k, b, BatchReport{});
        }
        device_.fuse(variant);
        if (device_.checkCanvas() && !capturing) throw nonFinite(k, -1);
        return true;
    }

    void giveStepNoise(int k) {
        if (!hostNoise_) throw std::logic_error("TiledLoop: a pass with host step noise has no noise source");
        const bool noisy = pass_.coefficients.at(static_cast<std::size_t>(k)).sigma != 0.0f;
        if (noisy) {
            z_.resize(hostNoise_->shape().elements());
            hostNoise_->step(z_.data());
        }
        device_.setStepNoise(noisy ? &z_ : nullptr);
    }

    void reportBatch(int k, const TileBatch& b, const BatchReport& report) {
        TileBatchEvent event;
        event.step = k;
        event.steps = pass_.steps();
        event.batchIndex = b.index;
        event.batches = static_cast<int>(pass_.batches.size());
        event.tileIds = b.tileIds;
        const CanvasShift shift = pass_.shift(k);
        event.shift = CanvasShift{shift.dy * pixelScale_, shift.dx * pixelScale_};
        event.timing.step = k;
        event.timing.timestep = timestep(k);
        event.timing.batchIndex = b.index;
        event.timing.tileIds = b.tileIds;
        event.timing.gpuMs = report.gpuMs;
        event.timing.hostMs = hostMs_[static_cast<std::size_t>(b.index)];
        event.timing.deviceMiB = report.deviceMiB;
        record_.batches.push_back(event.timing);
        observer_.onTileBatch(event);
    }

    // The run stops where a NaN or an infinity first appeared: the record says failed, and why.
    NonFiniteError nonFinite(int k, int batch) {
        record_.totalMs = msSince(runStart_);
        record_.stepsRun = static_cast<int>(record_.steps.size());
        device_.finishRun(record_);
        NonFiniteSite site;
        site.step = k;
        site.steps = pass_.steps();
        site.timestep = timestep(k);
        site.batch = batch;
        site.batches = static_cast<int>(pass_.batches.size());
        site.precision = pass_.precision;
        if (batch >= 0) {
            const TileBatch& b = pass_.batches.at(static_cast<std::size_t>(batch));
            site.firstTile = b.first;
            site.tileCount = b.count;
        }
        return NonFiniteError(site, record_);
    }

    TileDevice& device_;
    const TiledPass& pass_;
    RunRecord& record_;
    RunObserver& observer_;
    const CancelCheck& cancelled_;
    const Clock::time_point runStart_;
    const PreviewMap preview_;
    std::vector<double> hostMs_;  // per batch, this step's host time (0 when captured or replayed)
    LatentNoise* hostNoise_ = nullptr;
    std::vector<float> z_;  // the step's host noise
};

// Denoiser::addedCond of every tile of `plan` (canvas pixels times `scale` = image pixels), in id
// order, for the conditional branch and (guided) the unconditional one.
void tabulateAddedCond(TiledPass& pass, const Denoiser& denoiser, const TilePlan& plan, int scale, int imageWidth,
                       int imageHeight) {
    const int dim = denoiser.addedCondDim;
    pass.addedCondDim = dim;
    pass.addedCond.clear();
    pass.addedUncond.clear();
    auto append = [dim](std::vector<float>& table, const std::vector<float>& row, const char* branch) {
        if (static_cast<int>(row.size()) != dim)
            throw std::logic_error(std::string("TiledLoop: the ") + branch + " added conditioning of a tile has " +
                                   std::to_string(row.size()) + " values; the UNet takes " + std::to_string(dim));
        table.insert(table.end(), row.begin(), row.end());
    };
    for (const TileRect& r : plan.tiles()) {
        const TileSite site{r.x * scale, r.y * scale, r.w * scale, r.h * scale, imageWidth, imageHeight};
        append(pass.addedCond, denoiser.addedCond(site, Branch::Conditional), "conditional");
        if (pass.guidance) append(pass.addedUncond, denoiser.addedCond(site, Branch::Unconditional), "unconditional");
    }
}

// An SDXL run's per-tile text_embeds_time: the caller's function (`replaced`), else the prompts'
// pooled text with config.sdxlSizeConditioning's ids; the record says which.
void addSdxlConditioning(Denoiser& denoiser, const SdModel& sd, const RunConfig& config, SdConditioning& conditioning,
                         const AddedConditioning& replaced) {
    const UNetCondConfig& unet = sd.unet->config();
    denoiser.addedCondDim = unet.textTimeDim();
    denoiser.addedCond =
        replaced ? replaced
                 : sdxlAddedConditioning(unet, config.sdxlSizeConditioning, std::move(conditioning.pooledCond),
                                         std::move(conditioning.pooledUncond));
    std::string how = replaced ? "replaced by the caller's per-tile vectors"
                      : config.sdxlSizeConditioning == SdxlSizeConditioning::Image
                          ? "every tile: original and target size " + std::to_string(config.width) + "x" +
                                std::to_string(config.height) + ", crop 0,0"
                          : "original size the image's, crop the tile's offset, target size the tile's";
    conditioning.messages.push_back("sdxl: size conditioning " + std::string(toString(config.sdxlSizeConditioning)) +
                                    " (" + how + ")");
}

// Messages during a run go to the record and to the observer at once.
std::function<void(const std::string&)> sayTo(RunRecord& record, RunObserver& observer) {
    return [&record, &observer](const std::string& message) {
        record.messages.push_back(message);
        observer.onMessage(message);
    };
}

}  // namespace

std::vector<float> sdxlTimeIds(const TileSite& site, SdxlSizeConditioning mode) {
    const auto f = [](int v) { return static_cast<float>(v); };
    const float H = f(site.imageHeight), W = f(site.imageWidth);
    if (mode == SdxlSizeConditioning::Image) return {H, W, 0.0f, 0.0f, H, W};
    return {H, W, f(site.y), f(site.x), f(site.height), f(site.width)};
}

AddedConditioning sdxlAddedConditioning(const UNetCondConfig& unet, SdxlSizeConditioning mode,
                                        std::vector<float> pooledCond, std::vector<float> pooledUncond) {
    if (!unet.hasTextTime()) throw std::logic_error("sdxlAddedConditioning: the UNet has no text-time embedding");
    const std::size_t pooled = static_cast<std::size_t>(unet.textTimeDim() - 6 * unet.additionTimeEmbedDim);
    auto check = [pooled](const std::vector<float>& p) {
        if (p.size() != pooled)
            throw ValidationError("model", "model: the UNet's add_embedding takes " + std::to_string(pooled) +
                                               " pooled text values beside 6 size ids; the text encoder gave " +
                                               std::to_string(p.size()) +
                                               (p.empty() ? " (it has no pooled, projected output)" : ""));
    };
    check(pooledCond);
    if (!pooledUncond.empty()) check(pooledUncond);
    return [unet, mode, cond = std::move(pooledCond), uncond = std::move(pooledUncond)](const TileSite& site,
                                                                                        Branch branch) {
        if (branch == Branch::Unconditional && uncond.empty())
            throw std::logic_error("sdxlAddedConditioning: no pooled text for the unconditional branch");
        return textTimeEmbeds(unet, branch == Branch::Conditional ? cond : uncond, sdxlTimeIds(site, mode));
    };
}

Precision sdVaePrecision(const SdModel& model, Precision requested, std::string* why) {
    const bool sdxl = model.family == SdFamily::SDXL || model.unet->config().hasTextTime();
    const bool upcast = sdxl && model.vae->config().forceUpcast && requested == Precision::FP16;
    if (why) *why = upcast ? "vae: fp32 (force_upcast; the run asked fp16, whose range the SDXL VAE overflows)" : "";
    return upcast ? Precision::FP32 : requested;
}

void TiledLoop::setModel(std::shared_ptr<const UNetModel> model) {
    model_ = std::move(model);
    modelPinned_ = model_ != nullptr;
    modelPath_.clear();
    sd_.reset();
    sdPinned_ = false;
    flux_.reset();
    fluxPinned_ = false;
    ++modelGeneration_;
}

void TiledLoop::setFluxModel(std::shared_ptr<const FluxModel> model) {
    flux_ = std::move(model);
    fluxPinned_ = flux_ != nullptr;
    fluxPath_.clear();
    sd_.reset();
    sdPinned_ = false;
    model_.reset();
    modelPinned_ = false;
    ++modelGeneration_;
}

bool TiledLoop::usesFluxModel(const RunConfig& config) const {
    if (fluxPinned_) return true;
    if (sdPinned_ || modelPinned_) return false;
    return isFluxModelPath(config.model) || isFluxSingleFile(config.model);
}

void TiledLoop::setSdModel(std::shared_ptr<const SdModel> model) {
    flux_.reset();
    fluxPinned_ = false;
    sd_ = std::move(model);
    sdPinned_ = sd_ != nullptr;
    sdPath_.clear();
    model_.reset();
    modelPinned_ = false;
    ++modelGeneration_;
}

std::shared_ptr<const UNetModel> TiledLoop::modelFor(const RunConfig& config) {
    if (modelPinned_) return model_;
    if (config.model.empty())
        throw ValidationError("model", "model: no model folder given; the engine needs the folder's absolute path");
    if (!model_ || modelPath_ != config.model) {
        model_ = std::make_shared<const UNetModel>(UNetModel::load(config.model));
        modelPath_ = config.model;
        ++modelGeneration_;
    }
    return model_;
}

std::shared_ptr<const SdModel> TiledLoop::sdModelFor(const RunConfig& config, RunObserver& observer,
                                                     const CancelCheck& cancelled) {
    if (sdPinned_) return sd_;
    if (!sd_ || sdPath_ != config.model) {
        sd_.reset();
        sdPath_.clear();
        sd_ = std::make_shared<const SdModel>(loadSdModel(config.model, [&](const LoadProgress& p) {
            observer.onLoadProgress(p);
            // Stop (Ctrl-C, the window's Stop) between tensors rather than after a load of
            // several GB; the next run loads again.
            if (cancelled && cancelled()) throw LoadCancelled(p);
        }));
        sdPath_ = config.model;
        ++modelGeneration_;
    }
    return sd_;
}

bool TiledLoop::usesSdModel(const RunConfig& config) const {
    if (sdPinned_) return true;
    if (modelPinned_) return false;
    return isSdModelPath(config.model);
}

void TiledLoop::checkInit(int channels, int height, int width) const {
    if (hasInitImage()) {
        if (init_.channels != channels || init_.height != height || init_.width != width ||
            init_.data.size() != static_cast<std::size_t>(channels) * height * width)
            throw ValidationError("init", "init: the start image is " + std::to_string(init_.channels) + "x" +
                                              std::to_string(init_.height) + "x" + std::to_string(init_.width) +
                                              " (CxHxW); the run needs " + std::to_string(channels) + "x" +
                                              std::to_string(height) + "x" + std::to_string(width));
    }
}

void TiledLoop::checkRun(const RunConfig& config, const UNetModel& model) const {
    const UNetConfig& modelConfig = model.config();
    validate(config, modelConfig.limits(model.schedulerOptions().numTrainTimesteps));
    if (modelConfig.outChannels != modelConfig.inChannels)
        throw ValidationError("model", "model: " + std::to_string(modelConfig.outChannels) + " output channels for " +
                                           std::to_string(modelConfig.inChannels) +
                                           " input channels; sampling needs them equal");
    if (!config.prompt.empty() || !config.negativePrompt.empty())
        throw ValidationError("prompt", "prompt: '" + model.name() +
                                            "' is an unconditional UNet2DModel and takes no prompt; give a Stable "
                                            "Diffusion model (a pipeline folder or a .safetensors checkpoint)");
    checkInit(modelConfig.inChannels, config.height, config.width);
    if (!hasInitImage() && !config.initImage.empty())
        throw ValidationError("init", "init: '" + config.initImage +
                                          "' was not loaded; the front end must decode it and call setInitImage");
}

RunResult TiledLoop::run(const RunConfig& config, RunObserver& observer, TileDevice& device,
                         const CancelCheck& cancelled) {
    if (usesFluxModel(config)) return runFlux(config, observer, device, cancelled);
    if (usesSdModel(config)) return runSd(config, observer, device, cancelled);
    if (!controls_.empty() || !config.controlNets.empty())
        throw ValidationError("controlnet",
                              "controlnet: ControlNets steer Stable Diffusion UNets; this model is an "
                              "unconditional UNet2DModel");
    const auto prepareStart = Clock::now();
    const std::shared_ptr<const UNetModel> model = modelFor(config);
    checkRun(config, *model);
    // The kept tile function is another model's (a Stable Diffusion run came between two runs of
    // this one, which stayed loaded): a new generation, so that neither it nor the device's
    // prepared graph and canvases are reused.
    if (denoiser_ && denoiser_->owner.get() != static_cast<const void*>(model.get())) ++modelGeneration_;
    if (!denoiser_ || denoiserGeneration_ != modelGeneration_) {
        auto denoiser = std::make_shared<Denoiser>();
        denoiser->graph = std::make_shared<const ModelGraph>(unet2DExecutionGraph(model->config()));
        denoiser->weights = &model->tensors();
        denoiser->owner = model;
        denoiser->channels = model->config().inChannels;
        denoiser->downsample = model->config().downsampleFactor();
        denoiser_ = std::move(denoiser);
        denoiserGeneration_ = modelGeneration_;
    }
    SamplingJob job{config, config, *denoiser_, model->schedulerOptions()};
    job.modelName = model->name();
    job.modelHash = model->weightsSha256();
    job.init = hasInitImage() ? &init_ : nullptr;
    RunResult result = sample(job, observer, device, cancelled, prepareStart);
    if (job.init && config.preserveColor && result.record.status == RunStatus::Finished)
        matchColour(result.image, init_);
    describeImage(result, config, lastTileShift_);
    return result;
}

namespace {

// encodeSdPrompts, timed, with how many of its encoder rows ran (the others were remembered from
// earlier runs by the text encoders' row memo, or repeated within the batch).
SdConditioning encodeTimed(const SdModel& sd, Backend& textBackend, const RunConfig& config, TextEncodeRecord& text) {
    std::vector<const ClipTextModel*> encoders{sd.textEncoder.get()};
    if (sd.textEncoder2) encoders.push_back(sd.textEncoder2.get());
    auto rowCounts = [&] {
        std::pair<std::uint64_t, std::uint64_t> n{0, 0};
        for (const ClipTextModel* e : encoders) {
            const ClipTextModel::RowMemoStats s = e->rowMemoStats();
            n.first += s.rowsEncoded;
            n.second += s.rowsRemembered;
        }
        return n;
    };
    const auto before = rowCounts();
    const auto start = Clock::now();
    SdConditioning conditioning = encodeSdPrompts(sd, textBackend, config);
    text.ms = msSince(start);
    const auto after = rowCounts();
    text.rowsRun = after.first - before.first;
    text.rowsRemembered = after.second - before.second;
    text.textualInversionHashes = conditioning.textualInversionHashes;
    // encodeSdPrompts's first message says what the encoders did ("text: 1 chunk(s) of 75 tokens,
    // ..."); the record's words for the encode's cost follow it.
    if (!conditioning.messages.empty()) conditioning.messages.front() += "; " + describe(text);
    return conditioning;
}

HostTensor hostImage(const ImageTensor& image) {
    return HostTensor{{1, image.channels, image.height, image.width}, image.data};
}

ImageTensor imageOf(const HostTensor& t) {
    if (t.shape.size() != 4 || t.shape[0] != 1) throw std::logic_error("TiledLoop: expected one NCHW image");
    return ImageTensor{static_cast<int>(t.shape[1]), static_cast<int>(t.shape[2]), static_cast<int>(t.shape[3]),
                       t.data};
}

// SdPipeline's decodeLatents and encodeImage (the latents' scaling around the VAE's pass), with
// the pass kept as the record's data (its time is the caller's to set).
ImageTensor decodeRecorded(const SdModel& sd, Backend& backend, const ImageTensor& latents,
                           const VaePassOptions& options, VaePassRecord& pass) {
    const HostTensor z = unscaleLatents(sd.vae->config(), hostImage(latents));
    return imageOf(runVaePass(backend, *sd.vae, z, true, options.tiling, options.budget, pass));
}

ImageTensor encodeRecorded(const SdModel& sd, Backend& backend, const ImageTensor& image, const VaePassOptions& options,
                           VaePassRecord& pass) {
    const HostTensor moments =
        runVaePass(backend, *sd.vae, hostImage(image), false, options.tiling, options.budget, pass);
    return imageOf(scaleLatents(sd.vae->config(), posteriorMean(moments)));
}

}  // namespace

RunResult TiledLoop::runSd(const RunConfig& config, RunObserver& observer, TileDevice& device,
                           const CancelCheck& cancelled) {
    const auto prepareStart = Clock::now();
    const std::shared_ptr<const SdModel> sd = sdModelFor(config, observer, cancelled);
    {  // tile_colorfix's model needs (eps prediction, a VAE), before any work
        std::vector<std::string> preprocessors;
        for (const ControlNetRunUnit& u : controls_) preprocessors.push_back(u.preprocessor);
        if (controls_.empty())
            for (const ControlNetUnit& u : config.controlNets) preprocessors.push_back(u.preprocessor);
        checkColorFixModel(preprocessors, sd->scheduler.predictionType, sd->vae != nullptr);
    }
    const RunConfig canvas = checkSdRun(config, *sd);  // the latent canvas's sizes
    checkSeedResize(config, sd->vaeScale());
    checkInit(3, config.height, config.width);
    if (!hasInitImage() && !config.initImage.empty())
        throw ValidationError("init", "init: '" + config.initImage +
                                          "' was not loaded; the front end must decode it and call setInitImage");

    // The text conditioning, computed once per run and fixed for every tile and step.
    TextEncodeRecord text;
    SdConditioning conditioning = encodeTimed(*sd, device.textBackend(), config, text);
    if (denoiser_ && denoiser_->owner.get() != static_cast<const void*>(sd.get())) ++modelGeneration_;  // as in run()
    if (!denoiser_ || denoiserGeneration_ != modelGeneration_ || denoiser_->contextTokens != conditioning.tokens) {
        auto denoiser = std::make_shared<Denoiser>();
        denoiser->graph =
            std::make_shared<const ModelGraph>(unet2DConditionExecutionGraph(sd->unet->config(), conditioning.tokens));
        denoiser->weights = &sd->unet->tensors();
        denoiser->owner = sd;
        denoiser->channels = sd->latentChannels();
        denoiser->downsample = sd->unet->config().downsampleFactor();
        denoiser->contextTokens = conditioning.tokens;
        denoiser->contextDim = conditioning.channels;
        denoiser_ = std::move(denoiser);
        denoiserGeneration_ = modelGeneration_;
    }
    auto denoiser = std::make_shared<Denoiser>(*denoiser_);  // this run's conditioning, same graph
    denoiser->cond = std::move(conditioning.cond);
    denoiser->uncond = std::move(conditioning.uncond);
    if (sd->unet->config().hasTextTime()) addSdxlConditioning(*denoiser, *sd, config, conditioning, addedCond_);
    // ControlNets: the UNet and every ControlNet as one graph; a new graph for the device.
    std::shared_ptr<const Denoiser> tileFunction = denoiser;
    int graphTileScale = 1;
    runControls_ = !controls_.empty() ? controls_ : loadControlNetUnits(config, controlImages_, controlModels_);
    if (!runControls_.empty()) {
        controlHints_ = controlHints(runControls_, hasInitImage() ? &init_ : nullptr, config.height, config.width);
        // Kept while the model generation holds: the same UNet and ControlNets bind the same
        // graph and merged weights, and the device its prepared plan. A new one is a new model.
        tileFunction = controlledDenoiser(*denoiser, *sd->unet, sd->family, runControls_, &graphTileScale,
                                          &controlledModel_, modelGeneration_);
        if (!controlledModel_.hit) {
            ++modelGeneration_;
            denoiserGeneration_ = modelGeneration_;  // the UNet's own graph stays as it is
            controlledModel_.key = controlledModelKey(*denoiser, *sd->unet, runControls_, modelGeneration_);
        } else {
            conditioning.messages.push_back(
                "controlnet: the UNet and ControlNets' graph and merged weights kept from the last run");
        }
    } else if (lastControlled_) {
        ++modelGeneration_;
        controlledModel_ = ControlledModelCache{};  // its merged weights are not kept past their use
    }
    lastControlled_ = !runControls_.empty();
    // The VAE's precision (SDXL: float32 where its config says force_upcast).
    RunConfig vaeConfig = config;
    std::string vaeWhy;
    vaeConfig.precision = sdVaePrecision(*sd, config.precision, &vaeWhy);
    if (!vaeWhy.empty()) conditioning.messages.push_back(vaeWhy);

    SamplingJob job{config, canvas, *tileFunction, sd->scheduler};
    job.graphTileScale = graphTileScale;
    if (!runControls_.empty()) {
        job.controls = &runControls_;
        job.hints = &controlHints_;
    }
    job.modelName = sd->name;
    job.modelHash = sd->sha256;
    job.messages = std::move(conditioning.messages);
    job.textEncode = text;
    job.preview = [sd](const ImageTensor& latents) { return latentPreview(*sd, latents); };
    job.pixelScale = sd->vaeScale();
    ImageTensor initLatents;
    if (hasInitImage()) {
        // The phase's time includes making the VAE's backend and its budget (the CUDA device may
        // give the sampler's plan back for it).
        const auto encodeStart = Clock::now();
        VaePassRecord encode;
        initLatents = encodeRecorded(*sd, device.wholeGraphBackend(vaeConfig), init_,
                                     VaePassOptions{config.vaeTiling, device.vaeMemoryBudget(vaeConfig)}, encode);
        encode.ms = msSince(encodeStart);
        job.init = &initLatents;
        job.messages.push_back("init: encoded by the VAE to its latent mean (no posterior sample)");
        job.messages.push_back(describeVaeEncode(encode));
        job.vaeEncode = std::move(encode);
    }
    // tile_colorfix: each such unit's hint encoded once for the whole canvas (its latent mean); the
    // tiles read crops of it (controlHints_ after the hints, passControls).
    for (const ImageTensor& image : colorFixImages(runControls_, controlHints_, config.height, config.width)) {
        VaePassRecord encode;
        controlHints_.push_back(encodeRecorded(*sd, device.wholeGraphBackend(vaeConfig), image,
                                               VaePassOptions{config.vaeTiling, device.vaeMemoryBudget(vaeConfig)},
                                               encode)
                                    .data);
        job.messages.push_back(
            "tile_colorfix: the control image encoded by the VAE to its latent mean, once for "
            "the canvas");
    }
    RunResult result = sample(job, observer, device, cancelled, prepareStart);
    RunRecord& record = result.record;
    if (record.status == RunStatus::Finished) {
        const auto decodeStart = Clock::now();
        VaePassRecord decode;
        result.latents = result.image;
        result.image = decodeRecorded(*sd, device.wholeGraphBackend(vaeConfig), result.latents,
                                      VaePassOptions{config.vaeTiling, device.vaeMemoryBudget(vaeConfig)}, decode);
        decode.ms = msSince(decodeStart);
        record.messages.push_back(describeVaeDecode(decode));
        record.totalMs += decode.ms;
        record.vaeDecode = std::move(decode);
        if (!result.seamMap.data.empty()) result.seamMap = upsampleNearest(result.seamMap, sd->vaeScale());
        if (hasInitImage() && config.preserveColor) matchColour(result.image, init_);
    } else {
        result.image = latentPreview(*sd, result.image);
    }
    describeImage(result, config, lastTileShift_);
    return result;
}

namespace {

std::string joinLines(const std::vector<std::string>& lines) {
    std::string out;
    for (const std::string& l : lines) out += l + "\n";
    return out;
}

}  // namespace

RunResult TiledLoop::runFlux(const RunConfig& asked, RunObserver& observer, TileDevice& device,
                             const CancelCheck& cancelled) {
    const auto prepareStart = Clock::now();
    // What runs, as the record and the PNG parameters say it: flow matching's Euler, one
    // evaluation per step (FLUX.1 has no other sampler and no classifier-free guidance).
    RunConfig config = asked;
    config.scheduler = SchedulerKind::Euler;
    config.cfgScale = 1.0;
    if (!controls_.empty() || !config.controlNets.empty())
        throw ValidationError("controlnet",
                              "controlnet: FLUX.1 ControlNets are not supported; run without --controlnet");
    if (!asked.loras.empty() || asked.prompt.find("<lora:") != std::string::npos)
        throw ValidationError("lora",
                              "lora: FLUX.1 LoRAs are not supported yet; run without --lora and <lora:...> "
                              "tags");
    // A single transformer file comes with its VAE and text encoder files; a folder holds them.
    const bool singleFile = !fluxPinned_ && isFluxSingleFile(config.model);
    std::string key = config.model;
    if (singleFile) key += "\n" + config.vae + "\n" + joinLines(config.textEncoders);
    if (!fluxPinned_ && (!flux_ || fluxPath_ != key)) {
        if (singleFile) {
            const char* variable = std::getenv(kModelsFolderVariable);
            const std::vector<std::string> folders = modelsFolders(variable ? variable : "", config.model);
            const std::string vae = config.vae.empty() ? std::string() : findVaeFile(config.vae, folders).path;
            std::vector<std::string> encoders;
            for (const std::string& e : config.textEncoders) encoders.push_back(findTextEncoderFile(e, folders).path);
            flux_ = loadFluxFromFiles(config.model, vae, encoders);
        } else {
            flux_ = loadFluxModel(config.model);
        }
        fluxPath_ = key;
        ++modelGeneration_;
    }
    const std::shared_ptr<const FluxModel> flux = flux_;
    const FluxConfig& fc = flux->config;
    const RunConfig canvas = checkFluxRun(config, *flux);
    checkInit(3, config.height, config.width);
    if (!hasInitImage() && !config.initImage.empty())
        throw ValidationError("init", "init: '" + config.initImage +
                                          "' was not loaded; the front end must decode it and call setInitImage");
    if (!fluxConditioning_ && !flux->hasTextEncoders())
        throw ValidationError("prompt", "prompt: " + flux->name +
                                            " has no text encoders (CLIP-L and T5-XXL) and the run was given no "
                                            "text encoding; give a FLUX.1 folder with text_encoder/ and "
                                            "text_encoder_2/");
    TextEncodeRecord textRecord;
    std::vector<std::string> textMessages;
    FluxConditioning encoded;
    if (!fluxConditioning_) {
        const auto textStart = Clock::now();
        encoded = encodeFluxPrompt(*flux, device.textBackend(), config.prompt, static_cast<float>(config.guidance));
        textRecord.ms = msSince(textStart);
        textRecord.rowsRun = 2;
        textMessages.push_back("text: CLIP-L's pooled output and T5's " + std::to_string(encoded.tokens) +
                               " token states on the text backend (float32), " + formatNumber(textRecord.ms) + " ms");
    }
    if (!config.negativePrompt.empty())
        textMessages.push_back(
            "negative_prompt: not used: FLUX.1 is guidance-distilled (one evaluation per step, no unconditional "
            "branch)");
    const FluxConditioning& text = fluxConditioning_ ? *fluxConditioning_ : encoded;
    checkFluxConditioning(text, fc);

    if (denoiser_ && denoiser_->owner.get() != static_cast<const void*>(flux.get())) ++modelGeneration_;
    if (!denoiser_ || denoiserGeneration_ != modelGeneration_ || denoiser_->contextTokens != text.tokens) {
        auto d = std::make_shared<Denoiser>();
        d->graph = std::make_shared<const ModelGraph>(fuseForExecution(buildFluxGraph(fc, text.tokens)));
        d->weights = &flux->tensors;
        d->owner = flux;
        d->channels = fc.latentChannels();
        d->downsample = 2;
        d->contextTokens = text.tokens;
        d->contextDim = fc.jointAttentionDim;
        denoiser_ = std::move(d);
        denoiserGeneration_ = modelGeneration_;
    }
    auto denoiser = std::make_shared<Denoiser>(*denoiser_);
    denoiser->cond = text.text;
    std::vector<float> added = text.pooled;
    if (fc.guidanceEmbeds) added.push_back(text.guidance);
    denoiser->addedCondDim = static_cast<int>(added.size());
    denoiser->addedCond = [added](const TileSite&, Branch) { return added; };

    SamplingJob job{config, canvas, *denoiser, SchedulerOptions{}};
    FlowMatchOptions flow;
    flow.dynamicShift = fc.guidanceEmbeds;  // dev shifts by the token count; schnell runs unshifted
    job.flow = flow;
    job.modelName = flux->name;
    job.modelHash = flux->sha256;
    job.messages.push_back(
        fc.variant() + ": flow matching Euler, " +
        (fc.guidanceEmbeds ? "guidance " + formatNumber(text.guidance) + " embedded" : std::string("no guidance")) +
        " (one evaluation per step; cfg_scale is not used), shift " +
        (fc.guidanceEmbeds ? std::string("from the tile's tokens (each tile is an image of its size to the model)")
                           : std::string("none")) +
        ", position ids per tile");
    for (std::string& m : textMessages) job.messages.push_back(std::move(m));
    if (!fluxConditioning_) job.textEncode = textRecord;
    job.preview = fluxLatentPreview;
    job.pixelScale = FluxModel::kVaeScale;
    ImageTensor initLatents;
    const VaePassOptions vaeOptions{config.vaeTiling, device.vaeMemoryBudget(config)};
    if (hasInitImage()) {
        const auto encodeStart = Clock::now();
        VaePassRecord encode;
        const HostTensor moments = runVaePass(device.wholeGraphBackend(config), *flux->vae, hostImage(init_), false,
                                              vaeOptions.tiling, vaeOptions.budget, encode);
        initLatents = imageOf(fluxLatentsFromEncoder(flux->vae->config(), posteriorMean(moments)));
        encode.ms = msSince(encodeStart);
        job.init = &initLatents;
        job.messages.push_back("init: encoded by the VAE to its latent mean (no posterior sample), FLUX's shift");
        job.messages.push_back(describeVaeEncode(encode));
        job.vaeEncode = std::move(encode);
    }
    RunResult result = sample(job, observer, device, cancelled, prepareStart);
    RunRecord& record = result.record;
    if (record.status == RunStatus::Finished) {
        const auto decodeStart = Clock::now();
        VaePassRecord decode;
        result.latents = result.image;
        const HostTensor z = fluxLatentsForDecoder(flux->vae->config(), hostImage(result.latents));
        result.image = imageOf(runVaePass(device.wholeGraphBackend(config), *flux->vae, z, true, vaeOptions.tiling,
                                          vaeOptions.budget, decode));
        decode.ms = msSince(decodeStart);
        record.messages.push_back(describeVaeDecode(decode));
        record.totalMs += decode.ms;
        record.vaeDecode = std::move(decode);
        if (!result.seamMap.data.empty()) result.seamMap = upsampleNearest(result.seamMap, FluxModel::kVaeScale);
        if (hasInitImage() && config.preserveColor) matchColour(result.image, init_);
    } else {
        result.image = fluxLatentPreview(result.image);
    }
    describeImage(result, config, lastTileShift_);
    return result;
}

RunResult TiledLoop::sample(const SamplingJob& job, RunObserver& observer, TileDevice& device,
                            const CancelCheck& cancelled, Clock::time_point prepareStart) {
    const RunConfig& config = job.config;
    const RunConfig& canvas = job.canvas;
    RunResult result;
    RunRecord& record = result.record;
    record.runId = newRunId();
    record.startedAt = isoUtcNow();
    const bool imageToImage = job.init != nullptr;
    const int C = job.denoiser.channels;

    // The model's noise schedule (betas, clipping, variance) with the run's own sampling choices.
    SchedulerOptions options = job.schedule;
    options.eta = config.schedulerOptions.eta;
    options.timestepSpacing = config.schedulerOptions.timestepSpacing;
    if (job.denoiser.conditioned()) options.karrasSigmas = config.schedulerOptions.karrasSigmas;
    const TilePlan plan = TilePlan::fromConfig(canvas);
    std::unique_ptr<Scheduler> scheduler;
    if (job.flow) {
        FlowMatchOptions flow = *job.flow;
        flow.imageSeqLen = (plan.tileH() / 2) * (plan.tileW() / 2);
        scheduler = createFlowMatchScheduler(flow);
    } else {
        scheduler = Scheduler::create(config.scheduler, options);
    }
    scheduler->setTimesteps(config.steps);

    const BlendWeights weights(plan, config.window, plan.overlap());
    const bool batchAuto = config.tileBatch <= 0;
    int batchSize = resolveTileBatch(config.tileBatch, plan.count());
    TileBatchRecord& tileBatch = record.tileBatch.emplace();
    tileBatch.asked = config.tileBatch;
    tileBatch.tiles = plan.count();
    if (batchAuto) tileBatch.autoBatch = batchSize;
    std::optional<Guidance> guidance;
    if (job.denoiser.conditioned() && !job.flow && config.cfgScale != 1.0)
        guidance = Guidance{static_cast<float>(config.cfgScale)};

    if (job.controls)
        for (const ControlNetRunUnit& u : *job.controls) record.controlNetHashes.push_back(u.a1111Hash);
    record.flowMatching = job.flow.has_value();
    describeRun(record, config, options, job.modelName, job.modelHash, TilePlan::fromConfig(config),
                scheduler->timesteps());
    for (const std::string& message : job.messages) record.messages.push_back(message);
    record.textEncode = job.textEncode;
    record.vaeEncode = job.vaeEncode;
    if (config.preserveColor && !imageToImage)
        record.messages.push_back("preserve_color: ignored without an init image");
    const std::unique_ptr<LatentNoise> hostNoise =
        runNoise(config, C, canvas.height, canvas.width, job.pixelScale, device, record.messages);
    const DevicePlan devicePlan =
        device.prepare(DevicePrepare{job.denoiser, modelGeneration_, config, batchSize, plan.tileH(), plan.tileW(),
                                     (plan.count() + batchSize - 1) / batchSize, guidance.has_value(), plan.count(),
                                     batchAuto, job.pixelScale, C, canvas.height, canvas.width, weights.mapCount(),
                                     static_cast<int>(scheduler->timesteps().size()), job.graphTileScale},
                       record);
    if (devicePlan.batchSize > 0) batchSize = devicePlan.batchSize;  // auto, lowered to fit the device
    record.config.tileBatch = batchSize;                             // the record and the PNG's parameters say what ran
    tileBatch.ran = batchSize;
    if (batchAuto) record.messages.push_back(describeAutoTileBatch(tileBatch));
    recordWhatRan(record, devicePlan);

    TiledPass pass;
    pass.inChannels = pass.outChannels = C;
    pass.height = pass.outHeight = canvas.height;
    pass.width = pass.outWidth = canvas.width;
    pass.plan = pass.outPlan = &plan;
    pass.weights = &weights;
    pass.window = config.window;
    pass.fusion = config.fusion;
    pass.batchSize = batchSize;
    pass.lanes = devicePlan.lanes;
    pass.batches = tileBatches(plan, batchSize, devicePlan.lanes);
    // One step per model evaluation (Heun, DPM2, DPM++ SDE: 2 steps - 1), as diffusers' timesteps,
    // planned from the first step run (UniPC's warm-up; diffusers' set_begin_index).
    // FluxImg2ImgPipeline counts the steps left from steps x strength unrounded, the SD pipelines
    // from its integer part.
    const int firstRun = job.flow ? firstFlowStepRun(config, true) : firstStepRun(config, true);
    if (job.init) scheduler->setBeginIndex(std::min(firstRun * scheduler->evaluationsPerStep(), scheduler->numSteps()));
    for (int k = 0; k < scheduler->numSteps(); ++k) pass.coefficients.push_back(scheduler->coefficients(k));
    pass.seed = config.seed;
    lastTileShift_ = {};
    if (config.tileShift == TileShift::Random) {
        pass.shifts = tileShifts(config.seed, pass.steps(), plan);
        const CanvasShift last = pass.shifts.empty() ? CanvasShift{} : pass.shifts.back();
        lastTileShift_ = {last.dy * job.pixelScale, last.dx * job.pixelScale};
        record.messages.push_back(
            "tile_shift: random (SpotDiffusion): every step lays the " + std::to_string(plan.count()) +
            "-tile plan over the canvas rolled by its own random offset (up to a tile), so the tile borders move " +
            "from step to step" +
            (plan.rows() == 1 && plan.cols() == 1 ? std::string("; one tile covers the canvas: nothing moves")
                                                  : std::string()));
    }
    pass.previewEvery = config.previewEvery;
    pass.precision = devicePlan.precision;
    pass.guidance = guidance;
    if (job.denoiser.hasAddedCond())
        tabulateAddedCond(pass, job.denoiser, plan, job.pixelScale, config.width, config.height);
    int startStep = 0;
    pass.start = canvasStart(firstRun, *scheduler, job.init, startStep);
    if (hostNoise) {
        pass.hostStepNoise = true;
        startFromHostNoise(*hostNoise, pass.start, startImage_);
    }
    if (job.controls)
        pass.controls = passControls(*job.denoiser.graph, *job.controls, *job.hints, canvas.height, canvas.width,
                                     pass.steps(), startStep);
    if (!job.init && !startNoise_.data.empty()) {
        if (startNoise_.channels != C || startNoise_.height != canvas.height || startNoise_.width != canvas.width ||
            startNoise_.data.size() != static_cast<std::size_t>(C) * canvas.height * canvas.width)
            throw ValidationError("init", "init: the start noise is " + std::to_string(startNoise_.channels) + "x" +
                                              std::to_string(startNoise_.height) + "x" +
                                              std::to_string(startNoise_.width) + "; the run's canvas is " +
                                              std::to_string(C) + "x" + std::to_string(canvas.height) + "x" +
                                              std::to_string(canvas.width));
        startImage_ = startNoise_.data;
        for (float& v : startImage_) v *= scheduler->initNoiseSigma();
        pass.start.kind = CanvasStart::Kind::Image;
        pass.start.image = &startImage_;
    }
    if (job.init && !startLatents_.data.empty()) {  // reference comparisons: the first executed step's input
        if (startLatents_.data.size() != static_cast<std::size_t>(C) * canvas.height * canvas.width)
            throw ValidationError("init", "init: the start latents do not have the run's canvas size");
        startImage_ = startLatents_.data;
        pass.start.kind = CanvasStart::Kind::Image;
        pass.start.image = &startImage_;
    }
    device.beginRun(pass, record, sayTo(record, observer));
    record.prepareMs = msSince(prepareStart);
    observer.onStarted(record);
    for (const auto& message : record.messages) observer.onMessage(message);

    const auto runStart = Clock::now();
    device.startCanvas(pass.start);
    PassRunner runner(device, pass, record, observer, cancelled, runStart, job.preview);
    runner.setHostNoise(hostNoise.get());
    runner.setPixelScale(job.pixelScale);
    const bool finished = runner.run(startStep);

    record.totalMs = msSince(runStart);
    device.finishRun(record);
    result.image = ImageTensor{C, canvas.height, canvas.width, device.readCanvas()};
    record.status = finished ? RunStatus::Finished : RunStatus::Cancelled;
    if (finished && startStep < pass.steps())
        result.seamMap = seamMapFrom(C, canvas.height, canvas.width, device.readSeams());
    return result;
}

std::optional<ImageTensor> TiledLoop::map(TileDevice& device, const ImageTensor& input, const MapSpec& spec,
                                          RunObserver& observer, const CancelCheck& cancelled) {
    const std::size_t inputSize = static_cast<std::size_t>(std::max(input.channels, 0)) * input.height * input.width;
    if (input.channels < 1 || input.data.size() != inputSize)
        throw ValidationError("input", "input: the canvas's data does not match its shape " +
                                           std::to_string(input.channels) + "x" + std::to_string(input.height) + "x" +
                                           std::to_string(input.width));
    const int up = spec.upscale, down = spec.downscale;
    if (up < 1 || down < 1 || spec.outChannels < 1 || spec.batch < 1)
        throw ValidationError("map", "map: upscale, downscale, output channels and batch must be at least 1 (got " +
                                         std::to_string(up) + ", " + std::to_string(down) + ", " +
                                         std::to_string(spec.outChannels) + ", " + std::to_string(spec.batch) + ")");
    if (input.width % down || input.height % down || spec.tile % down || spec.overlap % down)
        throw ValidationError("map", "map: the canvas (" + std::to_string(input.width) + "x" +
                                         std::to_string(input.height) + "), the tile (" + std::to_string(spec.tile) +
                                         ") and the overlap (" + std::to_string(spec.overlap) +
                                         ") must be multiples of downscale " + std::to_string(down));
    const TilePlan plan = TilePlan::make(input.width, input.height, spec.tile, spec.overlap);
    const auto out = [up, down](int length) { return length / down * up; };
    const TilePlan outPlan = TilePlan::make(out(input.width), out(input.height), out(spec.tile), out(spec.overlap));
    // The plan rule is linear in its lengths, so the scaled plan is the plan scaled.
    for (const TileRect& r : plan.tiles())
        if (outPlan.count() != plan.count() || r.x % down || r.y % down || outPlan.tile(r.id).x != out(r.x) ||
            outPlan.tile(r.id).y != out(r.y))
            throw std::logic_error("TiledLoop::map: the scaled tile plan does not match the input's");
    const BlendWeights weights(outPlan, spec.window, out(spec.overlap));

    TiledPass pass;
    pass.inChannels = input.channels;
    pass.outChannels = spec.outChannels;
    pass.height = input.height;
    pass.width = input.width;
    pass.outHeight = outPlan.height();
    pass.outWidth = outPlan.width();
    pass.inPlace = false;
    pass.plan = &plan;
    pass.outPlan = &outPlan;
    pass.weights = &weights;
    pass.window = spec.window;
    pass.fusion = FusionRule::Sample;
    pass.batchSize = std::min(spec.batch, plan.count());
    pass.batches = tileBatches(outPlan, pass.batchSize, 1);
    pass.coefficients = {identityStep()};
    pass.seamMap = false;
    pass.guidance = spec.guidance;
    pass.start.kind = CanvasStart::Kind::Image;
    pass.start.image = &input.data;

    RunRecord record;
    device.beginRun(pass, record, sayTo(record, observer));
    const auto runStart = Clock::now();
    device.startCanvas(pass.start);
    if (!PassRunner(device, pass, record, observer, cancelled, runStart).run(0)) return std::nullopt;
    device.finishRun(record);
    return ImageTensor{spec.outChannels, pass.outHeight, pass.outWidth, device.readCanvas()};
}

}  // namespace tessera
