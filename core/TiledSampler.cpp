#include "core/TiledSampler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <stdexcept>
#include <thread>

#include <unistd.h>

#include "core/BlendWindow.h"
#include "core/ImageOps.h"
#include "core/NonFiniteError.h"
#include "core/Philox.h"
#include "core/RunRecordIO.h"  // newRunId
#include "core/Scheduler.h"
#include "core/StepUpdate.h"
#include "core/TilePlan.h"
#include "core/UNetModel.h"

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

// Resident set size of this process in MiB (Linux), 0 where unknown: the CPU's
// stand-in for device memory in MemorySample.
double residentMiB() {
    std::ifstream statm("/proc/self/statm");
    long pages = 0, resident = 0;
    if (!(statm >> pages >> resident)) return 0;
    return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

// The canvas, its noise and its geometry: z(draw, c, y, x) keyed by canvas element.
struct Canvas {
    int channels = 0, height = 0, width = 0;
    std::size_t plane() const { return static_cast<std::size_t>(height) * width; }
    std::size_t size() const { return plane() * channels; }
    std::size_t index(int c, int y, int x) const {
        return (static_cast<std::size_t>(c) * height + y) * width + x;
    }
};

void fillNoise(std::vector<float>& z, std::uint64_t seed, std::uint32_t draw) {
    for (std::size_t i = 0; i < z.size(); ++i) z[i] = philoxNormal(seed, draw, i);
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

// x_T from Philox draw 0 (times the initial sigma), or for image-to-image the start image noised
// to the level of the first step run. Returns that step's index (steps when there is nothing
// to denoise). z is scratch.
int startCanvas(const RunConfig& config, const Scheduler& scheduler, const ImageTensor* init, std::vector<float>& x,
                std::vector<float>& z) {
    const int steps = config.steps;
    fillNoise(z, config.seed, 0);
    const float initSigma = scheduler.initNoiseSigma();
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = z[i] * initSigma;
    if (!init) return 0;
    const int startStep = steps - static_cast<int>(steps * config.strength);
    if (startStep >= steps) {
        x = init->data;  // strength 0: nothing to denoise
        return startStep;
    }
    const double abar = scheduler.alphaCumprodForStep(startStep);
    const float a = static_cast<float>(std::sqrt(abar)), b = static_cast<float>(std::sqrt(1.0 - abar));
    // Euler's state is x / sqrt(abar) (sigma parameterisation); the others use x directly.
    const float scale = config.scheduler == SchedulerKind::Euler ? 1.0f / a : 1.0f;
    fillNoise(z, config.seed, kInitNoiseDraw);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = (a * init->data[i] + b * z[i]) * scale;
    return startStep;
}

// What the record says about the run before it starts: the configuration as run (the model's
// schedule, the overlap in pixels), the model, the environment and the tiling.
void describeRun(RunRecord& record, const RunConfig& config, const SchedulerOptions& options, const UNetModel& model,
                 const BackendInfo& backendInfo, const TilePlan& plan, const std::vector<float>& timesteps) {
    record.config = config;
    record.config.overlapPx = config.overlapPixels();
    record.config.schedulerOptions = options;
    record.modelName = model.name();
    record.modelHash = model.weightsSha256();
    record.environment.tesseraVersion = TESSERA_VERSION;
    record.environment.backend = backendInfo.name;
    record.environment.device = backendInfo.device;
    record.environment.host = hostName();
    record.environment.threads = static_cast<int>(std::thread::hardware_concurrency());
    record.tileCount = plan.count();
    record.tileW = plan.tileW();
    record.tileH = plan.tileH();
    record.timesteps = timesteps;
    record.graphs.mode = "off";
    if (config.graphs != GraphMode::Off)
        record.messages.push_back("graphs: the " + backendInfo.name + " backend has no CUDA graphs; ran with graphs off");
}

// The per-step accumulators over the canvas: sum of w * x'_t (sample fusion), sum of w * eps
// (noise fusion, previews) and, at the last step, the seam statistics.
struct Accumulators {
    std::vector<float> acc, accEps;
    std::vector<double> seamSum, seamSumSq;
};

// The canvas crops of tiles [first, first + count), scaled for the model's input, into tileIn.
void gatherTiles(const TilePlan& plan, const Canvas& canvas, const std::vector<float>& x, int first, int count,
                 float inputScale, float* tileIn) {
    const int tileH = plan.tileH(), tileW = plan.tileW();
    const std::size_t tileElems = static_cast<std::size_t>(canvas.channels) * tileH * tileW;
    for (int b = 0; b < count; ++b) {
        const TileRect& r = plan.tile(first + b);
        float* dst = tileIn + b * tileElems;
        for (int c = 0; c < canvas.channels; ++c)
            for (int i = 0; i < tileH; ++i) {
                const float* src = x.data() + canvas.index(c, r.y + i, r.x);
                float* row = dst + (static_cast<std::size_t>(c) * tileH + i) * tileW;
                for (int q = 0; q < tileW; ++q) row[q] = src[q] * inputScale;
            }
    }
}

// What one step scatters: its coefficients and noise, and which accumulators it feeds.
struct ScatterStep {
    const StepCoefficients& K;
    const std::vector<float>& x;
    const std::vector<float>& z;
    bool sampleFusion, stepNoise, wantEps, lastStep;
};

// Window-weighted scatter of each tile's contribution (x'_t or eps_t) of tiles [first, first + count).
void scatterTiles(const TilePlan& plan, const BlendWeights& weights, const Canvas& canvas, const ScatterStep& step,
                  int first, int count, const float* tileOut, Accumulators& a) {
    const int tileH = plan.tileH(), tileW = plan.tileW();
    const std::size_t tileElems = static_cast<std::size_t>(canvas.channels) * tileH * tileW;
    const std::vector<float>& normalizer = weights.normalizer();  // N(p), height x width
    for (int b = 0; b < count; ++b) {
        const TileRect& r = plan.tile(first + b);
        const float* eps = tileOut + b * tileElems;
        const float* tileWeight = weights.tileWeights(first + b);
        for (int c = 0; c < canvas.channels; ++c)
            for (int i = 0; i < tileH; ++i)
                for (int q = 0; q < tileW; ++q) {
                    const std::size_t p = canvas.index(c, r.y + i, r.x + q);
                    const std::size_t pix = static_cast<std::size_t>(r.y + i) * canvas.width + r.x + q;
                    const float e = eps[(static_cast<std::size_t>(c) * tileH + i) * tileW + q];
                    const float w = tileWeight[static_cast<std::size_t>(i) * tileW + q];
                    float v = e;
                    if (step.sampleFusion) {
                        v = applyStep(step.K, step.x[p], e, step.stepNoise ? step.z[p] : 0.0f);
                        a.acc[p] += w * v;
                    }
                    if (step.wantEps) a.accEps[p] += w * e;
                    if (step.lastStep && w != 0.0f) {
                        const double wn = static_cast<double>(w) / normalizer[pix];
                        a.seamSum[p] += wn * v;
                        a.seamSumSq[p] += wn * static_cast<double>(v) * v;
                    }
                }
    }
}

// The end of a step: normalise by N(p) = sum of the windows covering p (sample fusion), or one
// scheduler update with the normalised noise (noise fusion). Returns the blended x0 prediction
// when `preview` (far more legible than noisy x_t), else an empty vector.
std::vector<float> fuseStep(const Canvas& canvas, const std::vector<float>& normalizer, const ScatterStep& step,
                            bool preview, const Accumulators& a, std::vector<float>& x) {
    const StepCoefficients& K = step.K;
    const std::size_t plane = canvas.plane();
    std::vector<float> x0Preview;
    if (preview) {
        x0Preview.resize(canvas.size());
        for (std::size_t p = 0; p < canvas.size(); ++p) {
            const float e = a.accEps[p] / normalizer[p % plane];
            float x0 = K.ax * x[p] + K.ae * e;
            if (K.clip != 0.0f) x0 = std::clamp(x0, -K.clipRange, K.clipRange);
            x0Preview[p] = x0;
        }
    }
    if (step.sampleFusion) {
        for (std::size_t p = 0; p < canvas.size(); ++p) x[p] = a.acc[p] / normalizer[p % plane];
    } else {
        for (std::size_t p = 0; p < canvas.size(); ++p) {
            const float e = a.accEps[p] / normalizer[p % plane];
            x[p] = applyStep(K, x[p], e, step.stepNoise ? step.z[p] : 0.0f);
        }
    }
    return x0Preview;
}

// Per pixel, the largest over channels of the weighted standard deviation of the tiles' last-step values.
ImageTensor seamMapFrom(const Canvas& canvas, const Accumulators& a) {
    ImageTensor map{1, canvas.height, canvas.width, std::vector<float>(canvas.plane(), 0.0f)};
    for (int c = 0; c < canvas.channels; ++c)
        for (std::size_t pix = 0; pix < canvas.plane(); ++pix) {
            const std::size_t p = c * canvas.plane() + pix;
            const double var = a.seamSumSq[p] - a.seamSum[p] * a.seamSum[p];
            const float sd = static_cast<float>(std::sqrt(std::max(0.0, var)));
            map.data[pix] = std::max(map.data[pix], sd);
        }
    return map;
}

}  // namespace

TiledSampler::TiledSampler(std::unique_ptr<Backend> backend) : backend_(std::move(backend)) {
    if (!backend_) throw std::invalid_argument("TiledSampler: a backend is required");
}

TiledSampler::~TiledSampler() = default;

void TiledSampler::setInitImage(ImageTensor image) { initImage_ = std::move(image); }

void TiledSampler::setModel(std::shared_ptr<const UNetModel> model) {
    model_ = std::move(model);
    modelPinned_ = model_ != nullptr;
    modelPath_.clear();
    ++modelGeneration_;
}

std::shared_ptr<const UNetModel> TiledSampler::modelFor(const RunConfig& config) {
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

RunResult TiledSampler::run(const RunConfig& config, RunObserver& observer) {
    const auto prepareStart = Clock::now();
    RunResult result;
    RunRecord& record = result.record;
    record.runId = newRunId();
    record.startedAt = isoUtcNow();

    const std::shared_ptr<const UNetModel> model = modelFor(config);
    const ModelConfig& modelConfig = model->config();
    validate(config, modelConfig.limits(model->schedulerOptions().numTrainTimesteps));
    if (modelConfig.outChannels != modelConfig.inChannels)
        throw ValidationError("model", "model: " + std::to_string(modelConfig.outChannels) +
                                           " output channels for " + std::to_string(modelConfig.inChannels) +
                                           " input channels; sampling needs them equal");

    const Canvas canvas{modelConfig.inChannels, config.height, config.width};
    const bool imageToImage = hasInitImage();
    if (imageToImage) {
        if (initImage_.channels != canvas.channels || initImage_.height != canvas.height ||
            initImage_.width != canvas.width || initImage_.data.size() != canvas.size())
            throw ValidationError("init", "init: the start image is " + std::to_string(initImage_.channels) + "x" +
                                              std::to_string(initImage_.height) + "x" + std::to_string(initImage_.width) +
                                              " (CxHxW); the run needs " + std::to_string(canvas.channels) + "x" +
                                              std::to_string(canvas.height) + "x" + std::to_string(canvas.width));
    } else if (!config.initImage.empty()) {
        throw ValidationError("init", "init: '" + config.initImage +
                                          "' was not loaded; the front end must decode it and call setInitImage");
    }

    // The model's noise schedule (betas, clipping, variance) with the run's own sampling choices.
    SchedulerOptions options = model->schedulerOptions();
    options.eta = config.schedulerOptions.eta;
    options.timestepSpacing = config.schedulerOptions.timestepSpacing;
    auto scheduler = Scheduler::create(config.scheduler, options);
    scheduler->setTimesteps(config.steps);

    const TilePlan plan = TilePlan::fromConfig(config);
    const BlendWeights weights(plan, config.window, plan.overlap());
    const std::vector<float>& normalizer = weights.normalizer();  // N(p), height x width
    const int tileCount = plan.count();
    const int tileH = plan.tileH(), tileW = plan.tileW();
    const int batchSize = std::min(config.tileBatch, tileCount);
    const int batches = (tileCount + batchSize - 1) / batchSize;

    describeRun(record, config, options, *model, backend_->info(), plan, scheduler->timesteps());
    if (config.preserveColor && !imageToImage)
        record.messages.push_back("preserve_color: ignored without an init image");

    const PreparedShape shape{modelGeneration_, batchSize, tileH, tileW};
    if (!prepared_ || !(*prepared_ == shape)) {
        prepared_.reset();
        backend_->prepare(*model, batchSize, tileH, tileW);
        prepared_ = shape;
    }
    record.prepareMs = msSince(prepareStart);
    observer.onStarted(record);
    for (const auto& message : record.messages) observer.onMessage(message);

    const auto runStart = Clock::now();
    const std::size_t tileElems = static_cast<std::size_t>(canvas.channels) * tileH * tileW;
    std::vector<float> x(canvas.size()), z(canvas.size());
    Accumulators accumulators{std::vector<float>(canvas.size()), std::vector<float>(canvas.size()), {}, {}};
    std::vector<float>& acc = accumulators.acc;
    std::vector<float>& accEps = accumulators.accEps;
    std::vector<float> tileIn(tileElems * batchSize), tileOut(tileElems * batchSize), tileT(batchSize);

    // A NaN or an infinity stops the run where it first appears (a tile batch's UNet output, or
    // the latents after a step's update): the record says failed, and why.
    auto nonFinite = [&](int k, int batch, int first, int count) {
        record.totalMs = msSince(runStart);
        record.stepsRun = static_cast<int>(record.steps.size());
        const NonFiniteSite site{k, config.steps, scheduler->timesteps()[static_cast<std::size_t>(k)], batch, batches,
                                 first, count, Precision::FP32};
        return NonFiniteError(site, record);
    };

    const int steps = config.steps;
    const int startStep = startCanvas(config, *scheduler, imageToImage ? &initImage_ : nullptr, x, z);

    bool cancelled = false;
    for (int k = startStep; k < steps && !cancelled; ++k) {
        const auto stepStart = Clock::now();
        const StepCoefficients K = scheduler->coefficients(k);
        const bool lastStep = k == steps - 1;
        const bool preview = config.previewEvery > 0 && (k + 1) % config.previewEvery == 0 && !lastStep;
        const bool sampleFusion = config.fusion == FusionRule::Sample;
        const bool stepNoise = K.sigma != 0.0f;
        if (stepNoise) fillNoise(z, config.seed, static_cast<std::uint32_t>(k + 1));
        if (sampleFusion) std::fill(acc.begin(), acc.end(), 0.0f);
        if (!sampleFusion || preview) std::fill(accEps.begin(), accEps.end(), 0.0f);
        if (lastStep) {
            accumulators.seamSum.assign(canvas.size(), 0.0);
            accumulators.seamSumSq.assign(canvas.size(), 0.0);
        }
        std::fill(tileT.begin(), tileT.end(), K.timestep);
        const ScatterStep scatterStep{K, x, z, sampleFusion, stepNoise, !sampleFusion || preview, lastStep};

        for (int j = 0; j < batches; ++j) {
            if (cancelRequested()) {
                cancelled = true;
                break;
            }
            const auto batchStart = Clock::now();
            const int first = j * batchSize;
            const int count = std::min(batchSize, tileCount - first);
            TileBatchEvent event;
            event.step = k;
            event.steps = steps;
            event.batchIndex = j;
            event.batches = batches;
            for (int b = 0; b < count; ++b) event.tileIds.push_back(first + b);

            gatherTiles(plan, canvas, x, first, count, K.modelInputScale, tileIn.data());
            backend_->forward(tileIn.data(), tileT.data(), count, tileOut.data());
            if (!allFinite(tileOut.data(), tileElems * count)) throw nonFinite(k, j, first, count);
            scatterTiles(plan, weights, canvas, scatterStep, first, count, tileOut.data(), accumulators);

            event.timing.step = k;
            event.timing.timestep = K.timestep;
            event.timing.batchIndex = j;
            event.timing.tileIds = event.tileIds;
            event.timing.hostMs = msSince(batchStart);
            record.batches.push_back(event.timing);
            observer.onTileBatch(event);
        }
        if (cancelled) break;

        std::vector<float> x0Preview = fuseStep(canvas, normalizer, scatterStep, preview, accumulators, x);
        if (!allFinite(x.data(), x.size())) throw nonFinite(k, -1, 0, 0);

        StepEvent stepEvent;
        stepEvent.step = k;
        stepEvent.steps = steps;
        stepEvent.timestep = K.timestep;
        stepEvent.timing.step = k;
        stepEvent.timing.timestep = K.timestep;
        stepEvent.timing.hostEnqueueMs = msSince(stepStart);
        stepEvent.timing.wallMs = stepEvent.timing.hostEnqueueMs;
        record.steps.push_back(stepEvent.timing);
        record.stepsRun = static_cast<int>(record.steps.size());
        observer.onStep(stepEvent);

        const MemorySample memory{msSince(runStart), residentMiB(), 0.0};
        record.memory.push_back(memory);
        observer.onMemory(memory);

        if (preview || (lastStep && config.previewEvery > 0)) {
            PreviewEvent previewEvent;
            previewEvent.step = k;
            previewEvent.image = ImageTensor{canvas.channels, canvas.height, canvas.width,
                                             preview ? std::move(x0Preview) : x};
            observer.onPreview(previewEvent);
        }
    }

    record.totalMs = msSince(runStart);
    result.image = ImageTensor{canvas.channels, canvas.height, canvas.width, x};
    record.status = cancelled ? "cancelled" : "finished";
    if (!cancelled && !accumulators.seamSum.empty()) result.seamMap = seamMapFrom(canvas, accumulators);
    if (imageToImage && config.preserveColor && !cancelled) matchColour(result.image, initImage_);
    record.imageSha256 = imageSha256(toRgb8(result.image));
    return result;
}

}  // namespace tessera
