#include "kernels/CudaEngine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include <nvtx3/nvToolsExt.h>
#include <unistd.h>

#include "core/BlendWindow.h"
#include "core/ImageOps.h"
#include "core/Philox.h"
#include "core/RunRecordIO.h"
#include "core/Scheduler.h"
#include "core/StepUpdate.h"
#include "core/TilePlan.h"
#include "core/UNetModel.h"
#include "kernels/CanvasUpdate.cuh"
#include "kernels/CudaBackend.h"
#include "kernels/CudaCheck.h"
#include "kernels/DeviceResources.h"
#include "kernels/TileGather.cuh"
#include "kernels/TileScatter.cuh"

#ifndef TESSERA_VERSION
#define TESSERA_VERSION "unknown"
#endif

namespace tessera {

namespace {

using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point start) { return std::chrono::duration<double, std::milli>(Clock::now() - start).count(); }
double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

std::string isoUtcNow() {
    const std::time_t now = std::time(nullptr);
    std::tm utc{};
    gmtime_r(&now, &utc);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
    return text;
}

std::string hostName() {
    char name[256] = {};
    if (gethostname(name, sizeof name - 1) != 0) return {};
    return name;
}

// NVTX range for Nsight Systems; a no-op without a tool attached.
class NvtxRange {
public:
    explicit NvtxRange(const std::string& name) { nvtxRangePushA(name.c_str()); }
    ~NvtxRange() { nvtxRangePop(); }
    NvtxRange(const NvtxRange&) = delete;
    NvtxRange& operator=(const NvtxRange&) = delete;
};

DType dtypeOf(Precision p) { return p == Precision::FP32 ? DType::F32 : (p == Precision::FP16 ? DType::F16 : DType::BF16); }

double deviceUsedMiB() {
    std::size_t freeBytes = 0, total = 0;
    if (cudaMemGetInfo(&freeBytes, &total) != cudaSuccess) return -1;
    return mib(static_cast<double>(total - freeBytes));
}

// Per-run device memory: canvas, accumulators and the run's constant tables, carved out of
// one allocation.
class RunArena {
public:
    template <typename T> std::size_t reserve(std::size_t count) {
        const std::size_t off = (bytes_ + 255) / 256 * 256;
        bytes_ = off + count * sizeof(T);
        return off;
    }
    void allocate() { buffer_ = DeviceBuffer(bytes_); }
    template <typename T> T* at(std::size_t off) const { return reinterpret_cast<T*>(buffer_.as<char>() + off); }
    std::size_t bytes() const { return bytes_; }

private:
    std::size_t bytes_ = 0;
    DeviceBuffer buffer_;
};

}  // namespace

struct CudaEngine::Impl {
    int device = 0;
    std::shared_ptr<const UNetModel> model;
    std::string modelPath;
    bool pinned = false;
    std::uint64_t generation = 0;
    ImageTensor init;
    std::unique_ptr<CudaBackend> backend;
    struct Shape {
        std::uint64_t generation = 0;
        Precision precision = Precision::FP16;
        int batch = 0, tileH = 0, tileW = 0;
        bool operator==(const Shape&) const = default;
    };
    std::optional<Shape> prepared;

    std::shared_ptr<const UNetModel> modelFor(const RunConfig& config) {
        if (pinned) return model;
        if (config.model.empty())
            throw ValidationError("model", "model: no model folder given; the engine needs the folder's absolute path");
        if (!model || modelPath != config.model) {
            model = std::make_shared<const UNetModel>(UNetModel::load(config.model));
            modelPath = config.model;
            ++generation;
        }
        return model;
    }
};

CudaEngine::CudaEngine(int device) : impl_(std::make_unique<Impl>()) {
    std::string why;
    if (!cudaDeviceAvailable(&why)) throw std::runtime_error(why);
    int count = 0;
    TESSERA_CHECK(cudaGetDeviceCount(&count));
    if (device < 0 || device >= count)
        throw std::runtime_error("CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(count) +
                                 " present)");
    impl_->device = device;
}

CudaEngine::~CudaEngine() = default;

void CudaEngine::setModel(std::shared_ptr<const UNetModel> model) {
    impl_->model = std::move(model);
    impl_->pinned = impl_->model != nullptr;
    impl_->modelPath.clear();
    ++impl_->generation;
}

void CudaEngine::setInitImage(ImageTensor image) { impl_->init = std::move(image); }

const CudaBackend* CudaEngine::backend() const { return impl_->backend.get(); }

RunResult CudaEngine::run(const RunConfig& config, RunObserver& observer) {
    Impl& s = *impl_;
    const auto prepareStart = Clock::now();
    NvtxRange runRange("run");
    TESSERA_CHECK(cudaSetDevice(s.device));
    RunResult result;
    RunRecord& record = result.record;
    record.runId = newRunId();
    record.startedAt = isoUtcNow();

    const std::shared_ptr<const UNetModel> model = s.modelFor(config);
    const ModelConfig& modelConfig = model->config();
    validate(config, modelConfig.limits(model->schedulerOptions().numTrainTimesteps));
    if (modelConfig.outChannels != modelConfig.inChannels)
        throw ValidationError("model", "model: " + std::to_string(modelConfig.outChannels) + " output channels for " +
                                           std::to_string(modelConfig.inChannels) +
                                           " input channels; sampling needs them equal");
    const int C = modelConfig.inChannels, H = config.height, W = config.width;
    const std::size_t canvasSize = static_cast<std::size_t>(C) * H * W;
    const bool imageToImage = !s.init.data.empty();
    if (imageToImage) {
        if (s.init.channels != C || s.init.height != H || s.init.width != W || s.init.data.size() != canvasSize)
            throw ValidationError("init", "init: the start image is " + std::to_string(s.init.channels) + "x" +
                                              std::to_string(s.init.height) + "x" + std::to_string(s.init.width) +
                                              " (CxHxW); the run needs " + std::to_string(C) + "x" + std::to_string(H) +
                                              "x" + std::to_string(W));
    } else if (!config.initImage.empty()) {
        throw ValidationError("init", "init: '" + config.initImage +
                                          "' was not loaded; the front end must decode it and call setInitImage");
    }

    SchedulerOptions options = model->schedulerOptions();
    options.eta = config.schedulerOptions.eta;
    options.timestepSpacing = config.schedulerOptions.timestepSpacing;
    auto scheduler = Scheduler::create(config.scheduler, options);
    scheduler->setTimesteps(config.steps);

    const TilePlan plan = TilePlan::fromConfig(config);
    const BlendWeights weights(plan, config.window, plan.overlap());
    const int tileCount = plan.count();
    const int tileH = plan.tileH(), tileW = plan.tileW();
    const int batchSize = std::min(config.tileBatch, tileCount);
    const int batches = (tileCount + batchSize - 1) / batchSize;
    const int steps = config.steps;

    if (!s.backend || s.backend->precision() != config.precision) {
        s.prepared.reset();
        s.backend.reset();
        s.backend = std::make_unique<CudaBackend>(config.precision, s.device);
    }
    CudaBackend& backend = *s.backend;
    const BackendInfo backendInfo = backend.info();

    record.config = config;
    record.config.overlapPx = config.overlapPixels();
    record.config.schedulerOptions = options;
    record.modelName = model->name();
    record.modelHash = model->weightsSha256();
    record.environment.tesseraVersion = TESSERA_VERSION;
    record.environment.backend = backendInfo.name;
    record.environment.device = backendInfo.device;
    {
        int runtime = 0, driver = 0;
        (void)cudaRuntimeGetVersion(&runtime);
        (void)cudaDriverGetVersion(&driver);
        record.environment.driver = "CUDA runtime " + std::to_string(runtime) + ", driver " + std::to_string(driver) +
                                    ", cuDNN " + std::to_string(cudnnGetVersion());
    }
    record.environment.host = hostName();
    record.environment.threads = static_cast<int>(std::thread::hardware_concurrency());
    record.tileCount = tileCount;
    record.tileW = tileW;
    record.tileH = tileH;
    record.timesteps = scheduler->timesteps();
    // Graphs: "tile" replays one captured UNet forward per tile batch; "step" (one graph per
    // step) is not implemented yet and runs as "tile".
    backend.setGraphs(config.graphs != GraphMode::Off);
    if (config.graphs == GraphMode::Step)
        record.messages.push_back("graphs: step graphs are not implemented yet; ran with tile graphs");
    if (config.preserveColor && !imageToImage) record.messages.push_back("preserve_color: ignored without an init image");

    const Impl::Shape shape{s.generation, config.precision, batchSize, tileH, tileW};
    if (!s.prepared || !(*s.prepared == shape)) {
        s.prepared.reset();
        NvtxRange prepareRange("prepare");
        backend.prepare(*model, batchSize, tileH, tileW);
        s.prepared = shape;
    }
    cudaStream_t stream = backend.stream();

    // Run arena: canvas, accumulators, constant tables.
    RunArena arena;
    const std::size_t xOff = arena.reserve<float>(canvasSize);
    const std::size_t accOff = arena.reserve<float>(canvasSize);
    const std::size_t accEpsOff = arena.reserve<float>(canvasSize);
    const std::size_t previewOff = arena.reserve<float>(canvasSize);
    const std::size_t seamOff = arena.reserve<double>(canvasSize);
    const std::size_t seamSqOff = arena.reserve<double>(canvasSize);
    const std::size_t normOff = arena.reserve<float>(static_cast<std::size_t>(H) * W);
    const std::size_t mapsOff = arena.reserve<float>(static_cast<std::size_t>(weights.mapCount()) * tileH * tileW);
    const std::size_t tileXOff = arena.reserve<int>(static_cast<std::size_t>(tileCount));
    const std::size_t tileYOff = arena.reserve<int>(static_cast<std::size_t>(tileCount));
    const std::size_t tileMapOff = arena.reserve<int>(static_cast<std::size_t>(tileCount));
    const std::size_t coeffOff = arena.reserve<StepCoefficients>(static_cast<std::size_t>(steps));
    const std::size_t initOff = imageToImage ? arena.reserve<float>(canvasSize) : 0;
    try {
        arena.allocate();
    } catch (const CudaError& e) {
        if (!e.outOfMemory()) throw;
        (void)cudaGetLastError();
        std::size_t freeBytes = 0, total = 0;
        (void)cudaMemGetInfo(&freeBytes, &total);
        throw CudaOutOfMemory("not enough GPU memory for the " + std::to_string(W) + "x" + std::to_string(H) +
                                  " canvas: needs " + std::to_string(static_cast<long long>(mib(static_cast<double>(arena.bytes())))) +
                                  " MiB beyond the UNet's plan, " +
                                  std::to_string(static_cast<long long>(mib(static_cast<double>(freeBytes)))) + " MiB free",
                              mib(static_cast<double>(arena.bytes())), mib(static_cast<double>(freeBytes)), 0);
    }
    {
        std::vector<float> maps;
        for (int m = 0; m < weights.mapCount(); ++m)
            maps.insert(maps.end(), weights.map(m), weights.map(m) + static_cast<std::size_t>(tileH) * tileW);
        std::vector<int> tx, ty, tm;
        for (const TileRect& r : plan.tiles()) {
            tx.push_back(r.x);
            ty.push_back(r.y);
            tm.push_back(weights.mapIndexOfTile(r.id));
        }
        std::vector<StepCoefficients> coeffs;
        for (int k = 0; k < steps; ++k) coeffs.push_back(scheduler->coefficients(k));
        auto up = [&](std::size_t off, const void* src, std::size_t bytes) {
            TESSERA_CHECK(cudaMemcpyAsync(arena.at<char>(off), src, bytes, cudaMemcpyHostToDevice, stream));
        };
        up(normOff, weights.normalizer().data(), weights.normalizer().size() * sizeof(float));
        up(mapsOff, maps.data(), maps.size() * sizeof(float));
        up(tileXOff, tx.data(), tx.size() * sizeof(int));
        up(tileYOff, ty.data(), ty.size() * sizeof(int));
        up(tileMapOff, tm.data(), tm.size() * sizeof(int));
        up(coeffOff, coeffs.data(), coeffs.size() * sizeof(StepCoefficients));
        if (imageToImage) up(initOff, s.init.data.data(), canvasSize * sizeof(float));
        TESSERA_CHECK(cudaMemsetAsync(arena.at<char>(accOff), 0, canvasSize * sizeof(float), stream));
        TESSERA_CHECK(cudaMemsetAsync(arena.at<char>(accEpsOff), 0, canvasSize * sizeof(float), stream));
        TESSERA_CHECK(cudaMemsetAsync(arena.at<char>(seamOff), 0, canvasSize * sizeof(double), stream));
        TESSERA_CHECK(cudaMemsetAsync(arena.at<char>(seamSqOff), 0, canvasSize * sizeof(double), stream));
        TESSERA_CHECK(cudaStreamSynchronize(stream));   // the host vectors die at this scope's end
    }
    CanvasGeometry geo;
    geo.channels = C;
    geo.height = H;
    geo.width = W;
    geo.tileH = tileH;
    geo.tileW = tileW;
    geo.tileX = arena.at<int>(tileXOff);
    geo.tileY = arena.at<int>(tileYOff);
    geo.tileMap = arena.at<int>(tileMapOff);
    geo.weightMaps = arena.at<float>(mapsOff);
    geo.normalizer = arena.at<float>(normOff);
    geo.seed = config.seed;
    const TileTensor io{dtypeOf(config.precision), 0};
    TileTensor inIo = io, outIo = io;
    inIo.paddedChannels = backend.inputChannelsPadded();
    outIo.paddedChannels = backend.outputChannelsPadded();
    float* x = arena.at<float>(xOff);
    const StepCoefficients* coeff = arena.at<StepCoefficients>(coeffOff);

    const CudaMemoryPlan bplan = backend.memoryPlan();
    record.memoryPlan.weightsMiB = mib(static_cast<double>(bplan.weightsBytes));
    record.memoryPlan.activationsMiB = mib(static_cast<double>(bplan.activationsBytes));
    record.memoryPlan.workspaceMiB = mib(static_cast<double>(bplan.workspaceBytes));
    record.memoryPlan.canvasMiB = mib(static_cast<double>(arena.bytes()));
    record.memoryPlan.totalMiB = mib(static_cast<double>(bplan.totalBytes + arena.bytes()));
    record.prepareMs = msSince(prepareStart);
    observer.onStarted(record);
    for (const auto& message : record.messages) observer.onMessage(message);

    const auto runStart = Clock::now();
    int startStep = 0;
    if (imageToImage) {
        startStep = steps - static_cast<int>(steps * config.strength);
        if (startStep >= steps) {
            TESSERA_CHECK(cudaMemcpyAsync(x, arena.at<float>(initOff), canvasSize * sizeof(float),
                                          cudaMemcpyDeviceToDevice, stream));
        } else {
            const double abar = scheduler->alphaCumprodForStep(startStep);
            const float a = static_cast<float>(std::sqrt(abar)), b = static_cast<float>(std::sqrt(1.0 - abar));
            const float scale = config.scheduler == SchedulerKind::Euler ? 1.0f / a : 1.0f;
            launchCanvasInit(geo, x, arena.at<float>(initOff), kInitNoiseDraw, 1.0f, a, b, scale, stream);
        }
    } else {
        launchCanvasInit(geo, x, nullptr, 0, scheduler->initNoiseSigma(), 0, 0, 0, stream);
    }

    // Two events per tile batch plus the step's own, reused every step.
    std::vector<CudaEvent> batchEvents;
    for (int i = 0; i < 2 * batches; ++i) batchEvents.push_back(makeEvent());
    CudaEvent stepBegin = makeEvent(), stepEnd = makeEvent();
    double peak = deviceUsedMiB();
    bool cancelled = false;
    const bool sampleFusion = config.fusion == FusionRule::Sample;

    for (int k = startStep; k < steps && !cancelled; ++k) {
        NvtxRange stepRange("step " + std::to_string(k));
        const auto stepStart = Clock::now();
        const float timestep = scheduler->timesteps()[static_cast<std::size_t>(k)];
        const bool lastStep = k == steps - 1;
        const bool preview = config.previewEvery > 0 && (k + 1) % config.previewEvery == 0 && !lastStep;
        ScatterTargets targets;
        targets.acc = arena.at<float>(accOff);
        targets.accEps = (!sampleFusion || preview) ? arena.at<float>(accEpsOff) : nullptr;
        if (lastStep) {
            targets.seamSum = arena.at<double>(seamOff);
            targets.seamSumSq = arena.at<double>(seamSqOff);
        }
        const StepCoefficients* K = coeff + k;
        TESSERA_CHECK(cudaEventRecord(stepBegin.get(), stream));
        std::vector<TileBatchEvent> events;
        for (int j = 0; j < batches; ++j) {
            if (cancelRequested()) {
                cancelled = true;
                break;
            }
            NvtxRange batchRange("tile batch " + std::to_string(j));
            const auto batchStart = Clock::now();
            const int first = j * batchSize;
            const int count = std::min(batchSize, tileCount - first);
            int y0 = H, y1 = 0, x0 = W, x1 = 0;
            TileBatchEvent event;
            event.step = k;
            event.steps = steps;
            event.batchIndex = j;
            event.batches = batches;
            for (int b = 0; b < count; ++b) {
                const TileRect& r = plan.tile(first + b);
                event.tileIds.push_back(r.id);
                y0 = std::min(y0, r.y);
                x0 = std::min(x0, r.x);
                y1 = std::max(y1, r.y + tileH);
                x1 = std::max(x1, r.x + tileW);
            }
            TESSERA_CHECK(cudaEventRecord(batchEvents[static_cast<std::size_t>(2 * j)].get(), stream));
            launchTileGather(geo, x, K, first, count, inIo, backend.deviceInput(), backend.deviceTimesteps(), stream);
            backend.enqueue(count);
            launchTileScatter(geo, x, K, k, sampleFusion, first, count, y0, y1, x0, x1, outIo, backend.deviceOutput(),
                              targets, stream);
            TESSERA_CHECK(cudaEventRecord(batchEvents[static_cast<std::size_t>(2 * j + 1)].get(), stream));
            event.timing.step = k;
            event.timing.timestep = timestep;
            event.timing.batchIndex = j;
            event.timing.tileIds = event.tileIds;
            event.timing.hostMs = msSince(batchStart);
            events.push_back(std::move(event));
        }
        if (cancelled) {
            TESSERA_CHECK(cudaStreamSynchronize(stream));
            break;
        }
        launchCanvasFuse(geo, x, arena.at<float>(accOff), targets.accEps, preview ? arena.at<float>(previewOff) : nullptr,
                         K, k, sampleFusion, stream);
        TESSERA_CHECK(cudaEventRecord(stepEnd.get(), stream));
        const double enqueueMs = msSince(stepStart);
        TESSERA_CHECK(cudaEventSynchronize(stepEnd.get()));
        const double used = deviceUsedMiB();
        peak = std::max(peak, used);

        for (std::size_t j = 0; j < events.size(); ++j) {
            float ms = 0;
            TESSERA_CHECK(cudaEventElapsedTime(&ms, batchEvents[2 * j].get(), batchEvents[2 * j + 1].get()));
            events[j].timing.gpuMs = ms;
            events[j].timing.deviceMiB = used;
            record.batches.push_back(events[j].timing);
            observer.onTileBatch(events[j]);
        }
        StepEvent stepEvent;
        stepEvent.step = k;
        stepEvent.steps = steps;
        stepEvent.timestep = timestep;
        stepEvent.timing.step = k;
        stepEvent.timing.timestep = timestep;
        float stepMs = 0;
        TESSERA_CHECK(cudaEventElapsedTime(&stepMs, stepBegin.get(), stepEnd.get()));
        stepEvent.timing.gpuMs = stepMs;
        stepEvent.timing.hostEnqueueMs = enqueueMs;
        stepEvent.timing.wallMs = msSince(stepStart);
        record.steps.push_back(stepEvent.timing);
        record.stepsRun = static_cast<int>(record.steps.size());
        observer.onStep(stepEvent);

        const MemorySample memory{msSince(runStart), used, mib(static_cast<double>(bplan.totalBytes + arena.bytes()))};
        record.memory.push_back(memory);
        observer.onMemory(memory);

        if (preview || (lastStep && config.previewEvery > 0)) {
            PreviewEvent previewEvent;
            previewEvent.step = k;
            previewEvent.image = ImageTensor{C, H, W, std::vector<float>(canvasSize)};
            TESSERA_CHECK(cudaMemcpyAsync(previewEvent.image.data.data(), preview ? arena.at<float>(previewOff) : x,
                                          canvasSize * sizeof(float), cudaMemcpyDeviceToHost, stream));
            TESSERA_CHECK(cudaStreamSynchronize(stream));
            observer.onPreview(previewEvent);
        }
    }

    record.totalMs = msSince(runStart);
    record.graphs = backend.graphStats();
    if (!record.graphs.fallbackReason.empty())
        record.messages.push_back("graphs: " + record.graphs.fallbackReason + "; ran with graphs off");
    record.peakDeviceMiB = peak;
    result.image = ImageTensor{C, H, W, std::vector<float>(canvasSize)};
    TESSERA_CHECK(cudaMemcpyAsync(result.image.data.data(), x, canvasSize * sizeof(float), cudaMemcpyDeviceToHost, stream));
    const bool haveSeams = !cancelled && startStep < steps;
    std::vector<double> seamSum, seamSumSq;
    if (haveSeams) {
        seamSum.resize(canvasSize);
        seamSumSq.resize(canvasSize);
        TESSERA_CHECK(cudaMemcpyAsync(seamSum.data(), arena.at<double>(seamOff), canvasSize * sizeof(double),
                                      cudaMemcpyDeviceToHost, stream));
        TESSERA_CHECK(cudaMemcpyAsync(seamSumSq.data(), arena.at<double>(seamSqOff), canvasSize * sizeof(double),
                                      cudaMemcpyDeviceToHost, stream));
    }
    TESSERA_CHECK(cudaStreamSynchronize(stream));
    record.status = cancelled ? "cancelled" : "finished";
    if (haveSeams) {
        const std::size_t plane = static_cast<std::size_t>(H) * W;
        result.seamMap = ImageTensor{1, H, W, std::vector<float>(plane, 0.0f)};
        for (int c = 0; c < C; ++c)
            for (std::size_t pix = 0; pix < plane; ++pix) {
                const std::size_t p = c * plane + pix;
                const double var = seamSumSq[p] - seamSum[p] * seamSum[p];
                result.seamMap.data[pix] = std::max(result.seamMap.data[pix], static_cast<float>(std::sqrt(std::max(0.0, var))));
            }
    }
    if (imageToImage && config.preserveColor && !cancelled) {
        // Same per-channel mean/std match as the CPU sampler (host side: once per run).
        const std::size_t plane = static_cast<std::size_t>(H) * W;
        for (int c = 0; c < C; ++c) {
            auto stats = [&](const std::vector<float>& d) {
                double sum = 0, sumSq = 0;
                for (std::size_t p = 0; p < plane; ++p) {
                    const double v = d[c * plane + p];
                    sum += v;
                    sumSq += v * v;
                }
                const double mean = sum / plane;
                return std::pair<double, double>{mean, std::sqrt(std::max(0.0, sumSq / plane - mean * mean))};
            };
            const auto [mean, sd] = stats(result.image.data);
            const auto [refMean, refSd] = stats(s.init.data);
            const double gain = sd > 1e-8 ? refSd / sd : 1.0;
            for (std::size_t p = 0; p < plane; ++p) {
                float& v = result.image.data[c * plane + p];
                v = static_cast<float>((v - mean) * gain + refMean);
            }
        }
    }
    record.imageSha256 = imageSha256(toRgb8(result.image));
    return result;
}

std::unique_ptr<Engine> makeCudaEngine(int device) { return std::make_unique<CudaEngine>(device); }

}  // namespace tessera
