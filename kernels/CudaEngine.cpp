#include "kernels/CudaEngine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <sstream>
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
#include "core/NonFiniteError.h"
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
#include "kernels/GraphCache.h"
#include "kernels/NonFinite.cuh"
#include "kernels/TileGather.cuh"
#include "kernels/TileScatter.cuh"

#ifndef TESSERA_VERSION
#define TESSERA_VERSION "unknown"
#endif

namespace tessera {

namespace {

using Clock = std::chrono::steady_clock;

// Auto lanes from the tile pixels of one forward (batch x tile area): small forwards are
// short kernels that leave most SMs idle, so several run at once. Each lane is a copy of the
// activations and workspaces, so auto stays at the counts whose peak device memory measured
// no higher than PyTorch's (torch.compile + graph) for the same work on an H100: 4 lanes for
// forwards under 16 Ki pixels (64x64 x 1..3), 2 otherwise. More lanes are faster still on
// small forwards (64x64 x 1: 8 lanes 3.6 s vs 4 lanes 4.8 s per 1024x1024 image) at more
// memory; ask for them with lanes. docs/PERFORMANCE.md has the sweep.
int autoLanes(long long forwardPixels) { return forwardPixels < 16384 ? 4 : 2; }

double msSince(Clock::time_point start) { return std::chrono::duration<double, std::milli>(Clock::now() - start).count(); }
double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

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

// What decides the sizes of the run arena; equal plans reuse the arena (same pointers, so
// captured graphs stay valid across runs).
struct ArenaPlan {
    int channels = 0, height = 0, width = 0;
    int tileH = 0, tileW = 0, maps = 0, tiles = 0;
    int stepsCapacity = 0;
    bool operator==(const ArenaPlan&) const = default;
};

// The run's device memory: canvas, accumulators, constant tables and the step state,
// carved out of one allocation that lives across runs of the same plan.
class RunArena {
public:
    std::size_t x = 0, acc = 0, accEps = 0, preview = 0, seam = 0, seamSq = 0, norm = 0, maps = 0;
    std::size_t tileX = 0, tileY = 0, tileMap = 0, coeff = 0, init = 0, state = 0;
    std::size_t nonFinite = 0;   // the first (step, slot) with a NaN or infinity (kernels/NonFinite.cuh)

    // Returns true when the arena was (re)allocated.
    bool ensure(const ArenaPlan& plan) {
        if (buffer_.data() && plan_ && *plan_ == plan) return false;
        buffer_.reset();   // free first: peak memory and a flat footprint across size changes
        plan_.reset();
        bytes_ = 0;
        const std::size_t canvas = static_cast<std::size_t>(plan.channels) * plan.height * plan.width;
        x = reserve<float>(canvas);
        acc = reserve<float>(canvas);
        accEps = reserve<float>(canvas);
        preview = reserve<float>(canvas);
        init = reserve<float>(canvas);
        seam = reserve<double>(canvas);
        seamSq = reserve<double>(canvas);
        norm = reserve<float>(static_cast<std::size_t>(plan.height) * plan.width);
        maps = reserve<float>(static_cast<std::size_t>(plan.maps) * plan.tileH * plan.tileW);
        tileX = reserve<int>(static_cast<std::size_t>(plan.tiles));
        tileY = reserve<int>(static_cast<std::size_t>(plan.tiles));
        tileMap = reserve<int>(static_cast<std::size_t>(plan.tiles));
        coeff = reserve<StepCoefficients>(static_cast<std::size_t>(plan.stepsCapacity));
        state = reserve<StepState>(1);
        nonFinite = reserve<unsigned long long>(1);
        buffer_ = DeviceBuffer(bytes_);
        plan_ = plan;
        return true;
    }
    template <typename T> T* at(std::size_t off) const { return reinterpret_cast<T*>(buffer_.as<char>() + off); }
    const void* base() const { return buffer_.data(); }
    std::size_t bytes() const { return bytes_; }

private:
    template <typename T> std::size_t reserve(std::size_t count) {
        const std::size_t off = (bytes_ + 255) / 256 * 256;
        bytes_ = off + count * sizeof(T);
        return off;
    }
    std::optional<ArenaPlan> plan_;
    std::size_t bytes_ = 0;
    DeviceBuffer buffer_;
};

std::string hexPointer(const void* p) {
    char text[32];
    std::snprintf(text, sizeof text, "%p", p);
    return text;
}

// The tiles of one batch and the bounding box of their rectangles.
struct BatchSpan {
    int first = 0, count = 0;
    int y0 = 0, y1 = 0, x0 = 0, x1 = 0;
    std::vector<int> tileIds;
};

// Where the device's non-finite word (kernels/NonFinite.cuh) says a NaN or infinity first appeared.
NonFiniteSite nonFiniteSite(unsigned long long key, const RunConfig& config, const Scheduler& scheduler,
                            const std::vector<BatchSpan>& spans) {
    NonFiniteSite site;
    site.step = static_cast<int>(key >> 32);
    site.steps = config.steps;
    site.timestep = scheduler.timesteps().at(static_cast<std::size_t>(site.step));
    site.batches = static_cast<int>(spans.size());
    site.precision = config.precision;
    const auto slot = static_cast<unsigned>(key & 0xFFFFFFFFu);
    if (slot != kNonFiniteLatents) {
        const BatchSpan& b = spans.at(slot);
        site.batch = static_cast<int>(slot);
        site.firstTile = b.first;
        site.tileCount = b.count;
    }
    return site;
}

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
        int batch = 0, tileH = 0, tileW = 0, lanes = 1;
        bool operator==(const Shape&) const = default;
    };
    std::optional<Shape> prepared;
    std::uint64_t planEpoch = 0;   // counts backend (re)plans: graphs bake in the plan's memory

    // Live across runs, so that graphs captured in one run are replayed by the next:
    // the arena (same plan, same pointers), the timing events (handles baked into step
    // graphs; only ever added to) and the graph cache itself. Declared after the backend:
    // destroyed before it.
    RunArena arena;
    std::vector<CudaEvent> batchEvents;
    CudaEvent stepBegin, stepEnd;
    PinnedBuffer nonFiniteHost;   // the arena's non-finite word, copied back after each step
    // Lanes (when more than one): one stream per lane for gathers and forwards, the backend's
    // stream for scatters and fuses, and the dependency events between them (no timing): the
    // step's start, and per batch its forward's end and its scatter's end.
    std::vector<CudaStream> laneStreams;
    CudaEvent lanesGo;
    std::vector<CudaEvent> forwardDone, scatterDone;
    GraphCache graphs{16};

    // Drops every cached graph (they bake in the backend's memory) before a re-plan.
    void dropGraphs() {
        if (backend) graphs.clear(backend->stream());
    }

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
    const GraphCacheCounters countersBefore = s.graphs.counters();

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
        s.dropGraphs();
        s.prepared.reset();
        s.backend.reset();
        s.backend = std::make_unique<CudaBackend>(config.precision, s.device);
        ++s.planEpoch;
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
    // Graphs are the engine's: "tile" captures the forward itself (around backend.enqueue,
    // with the backend's own graphs off) so that both modes share one cache and one set of
    // statistics; "step" captures whole steps.
    backend.setGraphs(false);
    GraphMode mode = config.graphs;
    if (config.preserveColor && !imageToImage) record.messages.push_back("preserve_color: ignored without an init image");

    // Lanes: tile batches in flight at once, each with its own copy of the activations.
    const bool lanesAuto = config.lanes == 0;
    int lanes = lanesAuto ? autoLanes(static_cast<long long>(batchSize) * tileH * tileW) : config.lanes;
    lanes = std::max(1, std::min(lanes, batches));
    Impl::Shape shape{s.generation, config.precision, batchSize, tileH, tileW, lanes};
    // A plan with more lanes serves fewer (same algorithms, so the bits of a 1-lane run do
    // not depend on the lanes of the run before it); only more lanes re-plan.
    Impl::Shape fewer = shape;
    if (s.prepared) fewer.lanes = s.prepared->lanes;
    if (!s.prepared || !(*s.prepared == fewer) || s.prepared->lanes < lanes) {
        s.dropGraphs();
        s.prepared.reset();
        NvtxRange prepareRange("prepare");
        for (;;) {
            try {
                backend.prepare(*model, batchSize, tileH, tileW, lanes);
                break;
            } catch (const CudaOutOfMemory& e) {
                // Auto halves the lanes until the plan fits; asked-for lanes are the user's.
                if (!lanesAuto || lanes == 1) throw;
                record.messages.push_back("lanes: " + std::to_string(lanes) + " lanes do not fit (" + e.what() +
                                          "); trying " + std::to_string(lanes / 2));
                lanes /= 2;
                shape.lanes = lanes;
            }
        }
        s.prepared = shape;
        ++s.planEpoch;
    }
    while (lanes > 1 && static_cast<int>(s.laneStreams.size()) < lanes) s.laneStreams.push_back(makeStream(false));
    if (!s.lanesGo) s.lanesGo = makeEvent(false);
    while (s.forwardDone.size() < static_cast<std::size_t>(batches)) {
        s.forwardDone.push_back(makeEvent(false));
        s.scatterDone.push_back(makeEvent(false));
    }
    record.graphs.lanes = lanes;
    cudaStream_t stream = backend.stream();
    s.graphs.setCapacity(config.graphCacheSize, stream);

    // Run arena: canvas, accumulators, constant tables, step state; kept while the plan's
    // sizes stay the same. The coefficient table is sized in powers of two so that runs of
    // different step counts share it.
    ArenaPlan arenaPlan;
    arenaPlan.channels = C;
    arenaPlan.height = H;
    arenaPlan.width = W;
    arenaPlan.tileH = tileH;
    arenaPlan.tileW = tileW;
    arenaPlan.maps = weights.mapCount();
    arenaPlan.tiles = tileCount;
    arenaPlan.stepsCapacity = 64;
    while (arenaPlan.stepsCapacity < steps) arenaPlan.stepsCapacity *= 2;
    RunArena& arena = s.arena;
    try {
        TESSERA_CHECK(cudaStreamSynchronize(stream));   // the previous run's work is done with the old arena
        arena.ensure(arenaPlan);
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
        up(arena.norm, weights.normalizer().data(), weights.normalizer().size() * sizeof(float));
        up(arena.maps, maps.data(), maps.size() * sizeof(float));
        up(arena.tileX, tx.data(), tx.size() * sizeof(int));
        up(arena.tileY, ty.data(), ty.size() * sizeof(int));
        up(arena.tileMap, tm.data(), tm.size() * sizeof(int));
        up(arena.coeff, coeffs.data(), coeffs.size() * sizeof(StepCoefficients));
        if (imageToImage) up(arena.init, s.init.data.data(), canvasSize * sizeof(float));
        // Zeroed every run: a cancelled run leaves them dirty.
        TESSERA_CHECK(cudaMemsetAsync(arena.at<char>(arena.acc), 0, canvasSize * sizeof(float), stream));
        TESSERA_CHECK(cudaMemsetAsync(arena.at<char>(arena.accEps), 0, canvasSize * sizeof(float), stream));
        TESSERA_CHECK(cudaMemsetAsync(arena.at<char>(arena.seam), 0, canvasSize * sizeof(double), stream));
        TESSERA_CHECK(cudaMemsetAsync(arena.at<char>(arena.seamSq), 0, canvasSize * sizeof(double), stream));
        TESSERA_CHECK(cudaMemsetAsync(arena.at<char>(arena.nonFinite), 0xFF, sizeof(unsigned long long), stream));
        TESSERA_CHECK(cudaStreamSynchronize(stream));   // the host vectors die at this scope's end
    }
    CanvasGeometry geo;
    geo.channels = C;
    geo.height = H;
    geo.width = W;
    geo.tileH = tileH;
    geo.tileW = tileW;
    geo.tileX = arena.at<int>(arena.tileX);
    geo.tileY = arena.at<int>(arena.tileY);
    geo.tileMap = arena.at<int>(arena.tileMap);
    geo.weightMaps = arena.at<float>(arena.maps);
    geo.normalizer = arena.at<float>(arena.norm);
    geo.seed = config.seed;
    // The per-step kernels read the seed from the StepState; their geometry argument carries
    // none, so that a captured step graph serves every seed with the same arguments.
    CanvasGeometry stepGeo = geo;
    stepGeo.seed = 0;
    const TileTensor io{dtypeOf(config.precision), 0};
    TileTensor inIo = io, outIo = io;
    inIo.paddedChannels = backend.inputChannelsPadded();
    outIo.paddedChannels = backend.outputChannelsPadded();
    float* x = arena.at<float>(arena.x);
    const StepCoefficients* coeff = arena.at<StepCoefficients>(arena.coeff);
    StepState* state = arena.at<StepState>(arena.state);
    unsigned long long* nonFinite = arena.at<unsigned long long>(arena.nonFinite);
    if (!s.nonFiniteHost.data()) s.nonFiniteHost = PinnedBuffer(sizeof(unsigned long long));

    const CudaMemoryPlan bplan = backend.memoryPlan();
    record.memoryPlan.weightsMiB = mib(static_cast<double>(bplan.weightsBytes));
    record.memoryPlan.activationsMiB = mib(static_cast<double>(bplan.activationsBytes) * bplan.lanes);
    record.memoryPlan.workspaceMiB = mib(static_cast<double>(bplan.workspaceBytes) * bplan.lanes);
    record.memoryPlan.canvasMiB = mib(static_cast<double>(arena.bytes()));
    record.memoryPlan.totalMiB = mib(static_cast<double>(bplan.totalBytes + arena.bytes()));

    // Tile batches, and two timing events per batch (grown, never replaced: step graphs
    // bake the handles in).
    std::vector<BatchSpan> spans;
    for (int j = 0; j < batches; ++j) {
        BatchSpan b;
        b.first = j * batchSize;
        b.count = std::min(batchSize, tileCount - b.first);
        b.y0 = H;
        b.x0 = W;
        for (int t = 0; t < b.count; ++t) {
            const TileRect& r = plan.tile(b.first + t);
            b.tileIds.push_back(r.id);
            b.y0 = std::min(b.y0, r.y);
            b.x0 = std::min(b.x0, r.x);
            b.y1 = std::max(b.y1, r.y + tileH);
            b.x1 = std::max(b.x1, r.x + tileW);
        }
        spans.push_back(std::move(b));
    }
    while (s.batchEvents.size() < static_cast<std::size_t>(2 * batches)) s.batchEvents.push_back(makeEvent());
    if (!s.stepBegin) s.stepBegin = makeEvent();
    if (!s.stepEnd) s.stepEnd = makeEvent();

    // Graph keys. The family holds everything that fixes a graph's nodes and launch shapes,
    // the pointers what it bakes in; see kernels/GraphCache.h.
    std::string planFamily;
    {
        std::ostringstream f;
        f << "model " << s.generation << " plan " << s.planEpoch << " " << toString(config.precision) << " tile "
          << tileW << "x" << tileH << " batch " << batchSize << " lanes " << lanes;
        planFamily = f.str();
    }
    auto lanePointers = [&](int lane) {
        return hexPointer(backend.deviceInput(lane)) + " " + hexPointer(backend.deviceOutput(lane)) + " " +
               hexPointer(backend.deviceTimesteps(lane));
    };
    auto tileKey = [&](int count, int lane) {
        return GraphKey{"tile forward x" + std::to_string(count) + " lane " + std::to_string(lane) + " " + planFamily,
                        lanePointers(lane)};
    };
    auto laneOf = [&](int batch) { return batch % lanes; };
    auto laneStream = [&](int lane) -> cudaStream_t {
        return lanes == 1 ? stream : s.laneStreams[static_cast<std::size_t>(lane)].get();
    };
    const bool sampleFusion = config.fusion == FusionRule::Sample;
    auto stepKey = [&](const char* variant) {
        std::ostringstream f;
        f << "step " << variant << " " << W << "x" << H << "x" << C << " overlap " << plan.overlap() << " window "
          << toString(config.window) << " maps " << weights.mapCount() << " fusion " << toString(config.fusion) << " tiles "
          << tileCount << " batches " << batches << " steps<=" << arenaPlan.stepsCapacity << " " << planFamily;
        std::string pointers = hexPointer(arena.base());
        for (int l = 0; l < lanes; ++l) pointers += " " + lanePointers(l);
        for (int i = 0; i < 2 * batches; ++i) pointers += " " + hexPointer(s.batchEvents[static_cast<std::size_t>(i)].get());
        return GraphKey{f.str(), pointers};
    };

    // The graphs this run launched, for record.graphs.used.
    std::vector<std::string> usedOrder;
    std::map<std::string, GraphEntryStats> usedGraphs;
    auto noteUse = [&](const std::string& key, const GraphCache::Acquired& a) {
        auto it = usedGraphs.find(key);
        if (it == usedGraphs.end()) {
            usedOrder.push_back(key);
            it = usedGraphs.emplace(key, *a.stats).first;
            it->second.launches = 0;
            it->second.captured = false;
        }
        if (!a.hit) {
            const int launches = it->second.launches;
            it->second = *a.stats;   // the new capture's numbers
            it->second.launches = launches;
            it->second.captured = true;
        }
    };
    auto noteLaunch = [&](const std::string& key) { usedGraphs[key].launches += 1; };
    auto fallBack = [&](const std::string& why) {
        // A capture that failed after forking onto the lane streams can leave them in an
        // invalidated capture: replace any such stream (new streams, same lanes).
        for (CudaStream& ls : s.laneStreams) {
            cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
            const cudaError_t query = cudaStreamIsCapturing(ls.get(), &status);
            if (query != cudaSuccess || status != cudaStreamCaptureStatusNone) {
                (void)cudaGetLastError();
                ls = makeStream(false);
            }
        }
        (void)cudaGetLastError();
        mode = GraphMode::Off;
        record.graphs.fallbackReason = why;
        const std::string message = "graphs: " + why + "; ran with graphs off";
        record.messages.push_back(message);
        observer.onMessage(message);
    };

    record.prepareMs = msSince(prepareStart);
    observer.onStarted(record);
    for (const auto& message : record.messages) observer.onMessage(message);

    const auto runStart = Clock::now();
    int startStep = 0;
    if (imageToImage) {
        startStep = steps - static_cast<int>(steps * config.strength);
        if (startStep >= steps) {
            TESSERA_CHECK(cudaMemcpyAsync(x, arena.at<float>(arena.init), canvasSize * sizeof(float),
                                          cudaMemcpyDeviceToDevice, stream));
        } else {
            const double abar = scheduler->alphaCumprodForStep(startStep);
            const float a = static_cast<float>(std::sqrt(abar)), b = static_cast<float>(std::sqrt(1.0 - abar));
            const float scale = config.scheduler == SchedulerKind::Euler ? 1.0f / a : 1.0f;
            launchCanvasInit(geo, x, arena.at<float>(arena.init), kInitNoiseDraw, 1.0f, a, b, scale, stream);
        }
    } else {
        launchCanvasInit(geo, x, nullptr, 0, scheduler->initNoiseSigma(), 0, 0, 0, stream);
    }

    double peak = deviceUsedMiB();
    bool cancelled = false;
    int stepsDone = 0;   // steps run so far in this run: the warm-up before the first capture
    std::vector<double> batchHostMs(static_cast<std::size_t>(batches), 0.0);
    bool stepCaptured = false, stepReplayed = false;

    // Tile mode: the forwards of this step's batch sizes as cached graphs, acquired (and
    // on a miss captured) before the step's first event so that capture time stays out of
    // the step's device timings. Warm-up steps and a failed capture leave it empty.
    struct TileGraph {
        cudaGraphExec_t exec = nullptr;
        std::string key;
    };
    // Keyed by (batch size, lane): each lane's graph bakes in that lane's buffers. Captured
    // on the backend's stream, launched on the lane's.
    std::map<std::pair<int, int>, TileGraph> tileGraphs;
    auto acquireTileGraphs = [&] {
        tileGraphs.clear();
        std::vector<std::string> keep;   // this step's graphs: not to be evicted by the next
        for (int j = 0; j < batches; ++j) {
            const BatchSpan& b = spans[static_cast<std::size_t>(j)];
            const int lane = laneOf(j);
            if (tileGraphs.count({b.count, lane})) continue;
            const GraphKey key = tileKey(b.count, lane);
            if (!s.graphs.contains(key) && stepsDone < config.graphWarmup) continue;
            try {
                const GraphCache::Acquired a =
                    s.graphs.acquire(key, stream, [&] { backend.enqueue(b.count, lane, stream); }, keep);
                keep.push_back(key.text());
                noteUse(key.text(), a);
                (a.hit ? stepReplayed : stepCaptured) = true;
                tileGraphs[{b.count, lane}] = TileGraph{a.exec, key.text()};
            } catch (const GraphCaptureFailed& e) {
                fallBack(e.what());
                tileGraphs.clear();
                return;
            }
        }
    };

    // One denoising step: every tile batch (gather, forward, scatter, between two timing
    // events), then the fuse. The same kernels with the same arguments in every mode; while
    // `capturing`, the events become event-record nodes of the step graph. Returns false
    // when cancelled between batches (never while capturing).
    //
    // With lanes > 1, batch j's gather and forward run on lane j % lanes (its own stream and
    // buffers) and its scatter on the backend's stream in batch order (that stream then only
    // scatters and fuses), so the accumulation order, and with it every bit of the image, is
    // that of one lane. A lane starts the next
    // step's batches after the step state is set, and reuses its buffers for batch j + lanes
    // only after batch j's scatter has read them. Captured, this forks and joins the graph.
    auto enqueueStep = [&](const ScatterTargets& targets, float* previewOut, bool capturing) {
        const unsigned eventFlags = capturing ? cudaEventRecordExternal : cudaEventRecordDefault;
        if (lanes > 1) {
            TESSERA_CHECK(cudaEventRecord(s.lanesGo.get(), stream));
            for (int l = 0; l < lanes; ++l) TESSERA_CHECK(cudaStreamWaitEvent(laneStream(l), s.lanesGo.get(), 0));
        }
        for (int j = 0; j < batches; ++j) {
            if (!capturing && cancelRequested()) {
                for (int l = 0; l < lanes; ++l) TESSERA_CHECK(cudaStreamSynchronize(laneStream(l)));
                return false;
            }
            const BatchSpan& b = spans[static_cast<std::size_t>(j)];
            const int lane = laneOf(j);
            cudaStream_t ls = laneStream(lane);
            NvtxRange batchRange("tile batch " + std::to_string(j));
            const auto batchStart = Clock::now();
            if (lanes > 1 && j >= lanes)
                TESSERA_CHECK(cudaStreamWaitEvent(ls, s.scatterDone[static_cast<std::size_t>(j - lanes)].get(), 0));
            TESSERA_CHECK(cudaEventRecordWithFlags(s.batchEvents[static_cast<std::size_t>(2 * j)].get(), ls, eventFlags));
            launchTileGather(stepGeo, x, coeff, state, b.first, b.count, inIo, backend.deviceInput(lane),
                             backend.deviceTimesteps(lane), ls);
            const auto tileGraph = capturing ? tileGraphs.end() : tileGraphs.find({b.count, lane});
            if (tileGraph != tileGraphs.end()) {
                TESSERA_CHECK(cudaGraphLaunch(tileGraph->second.exec, ls));
                noteLaunch(tileGraph->second.key);
            } else {
                backend.enqueue(b.count, lane, ls);   // while capturing: the forward's kernels become nodes
            }
            if (lanes > 1) {
                TESSERA_CHECK(cudaEventRecord(s.forwardDone[static_cast<std::size_t>(j)].get(), ls));
                TESSERA_CHECK(cudaStreamWaitEvent(stream, s.forwardDone[static_cast<std::size_t>(j)].get(), 0));
            }
            launchNonFiniteCheck(outIo.dtype, backend.deviceOutput(lane),
                                 static_cast<long long>(b.count) * tileH * tileW * outIo.paddedChannels, C,
                                 outIo.paddedChannels, state, static_cast<unsigned>(j), nonFinite, stream);
            launchTileScatter(stepGeo, x, coeff, state, sampleFusion, b.first, b.count, b.y0, b.y1, b.x0, b.x1, outIo,
                              backend.deviceOutput(lane), targets, stream);
            TESSERA_CHECK(
                cudaEventRecordWithFlags(s.batchEvents[static_cast<std::size_t>(2 * j + 1)].get(), stream, eventFlags));
            if (lanes > 1) TESSERA_CHECK(cudaEventRecord(s.scatterDone[static_cast<std::size_t>(j)].get(), stream));
            batchHostMs[static_cast<std::size_t>(j)] = msSince(batchStart);
        }
        launchCanvasFuse(stepGeo, x, arena.at<float>(arena.acc), targets.accEps, previewOut, coeff, state, sampleFusion,
                         stream);
        launchNonFiniteCheck(DType::F32, x, static_cast<long long>(canvasSize), 1, 1, state, kNonFiniteLatents, nonFinite,
                             stream);
        return true;
    };

    for (int k = startStep; k < steps; ++k) {
        if (cancelRequested()) {
            cancelled = true;
            break;
        }
        NvtxRange stepRange("step " + std::to_string(k));
        const auto stepStart = Clock::now();
        const float timestep = scheduler->timesteps()[static_cast<std::size_t>(k)];
        const bool lastStep = k == steps - 1;
        const bool preview = config.previewEvery > 0 && (k + 1) % config.previewEvery == 0 && !lastStep;
        ScatterTargets targets;
        targets.acc = arena.at<float>(arena.acc);
        targets.accEps = (!sampleFusion || preview) ? arena.at<float>(arena.accEps) : nullptr;
        if (lastStep) {
            targets.seamSum = arena.at<double>(arena.seam);
            targets.seamSumSq = arena.at<double>(arena.seamSq);
        }
        float* previewOut = preview ? arena.at<float>(arena.preview) : nullptr;
        stepCaptured = stepReplayed = false;
        std::fill(batchHostMs.begin(), batchHostMs.end(), 0.0);

        launchSetStepState(state, config.seed, k, stream);
        if (mode == GraphMode::Tile) acquireTileGraphs();
        cudaGraphExec_t stepGraph = nullptr;
        std::string stepGraphKey;
        if (mode == GraphMode::Step) {
            const GraphKey key = stepKey(lastStep ? "last" : (preview ? "preview" : "normal"));
            if (s.graphs.contains(key) || stepsDone >= config.graphWarmup) {
                try {
                    const GraphCache::Acquired a =
                        s.graphs.acquire(key, stream, [&] { (void)enqueueStep(targets, previewOut, true); });
                    stepGraphKey = key.text();
                    noteUse(stepGraphKey, a);
                    stepGraph = a.exec;
                    (a.hit ? stepReplayed : stepCaptured) = true;
                } catch (const GraphCaptureFailed& e) {
                    fallBack(e.what());
                }
            }
        }
        if (stepGraph) std::fill(batchHostMs.begin(), batchHostMs.end(), 0.0);   // nothing enqueued per batch
        TESSERA_CHECK(cudaEventRecord(s.stepBegin.get(), stream));
        if (stepGraph) {
            TESSERA_CHECK(cudaGraphLaunch(stepGraph, stream));
            noteLaunch(stepGraphKey);
        } else if (!enqueueStep(targets, previewOut, false)) {
            TESSERA_CHECK(cudaStreamSynchronize(stream));
            cancelled = true;
            break;
        }
        TESSERA_CHECK(cudaEventRecord(s.stepEnd.get(), stream));
        const double enqueueMs = msSince(stepStart);
        // The non-finite word, read back with the step's own wait (after the graph launch in step mode).
        TESSERA_CHECK(cudaMemcpyAsync(s.nonFiniteHost.data(), nonFinite, sizeof(unsigned long long),
                                      cudaMemcpyDeviceToHost, stream));
        TESSERA_CHECK(cudaStreamSynchronize(stream));
        if (const unsigned long long found = *s.nonFiniteHost.as<unsigned long long>(); found != kNonFiniteClean) {
            record.totalMs = msSince(runStart);
            record.stepsRun = static_cast<int>(record.steps.size());
            record.peakDeviceMiB = peak;
            throw NonFiniteError(nonFiniteSite(found, config, *scheduler, spans), record);
        }
        ++stepsDone;
        const double used = deviceUsedMiB();
        peak = std::max(peak, used);

        for (int j = 0; j < batches; ++j) {
            const BatchSpan& b = spans[static_cast<std::size_t>(j)];
            TileBatchEvent event;
            event.step = k;
            event.steps = steps;
            event.batchIndex = j;
            event.batches = batches;
            event.tileIds = b.tileIds;
            float ms = 0;
            TESSERA_CHECK(cudaEventElapsedTime(&ms, s.batchEvents[static_cast<std::size_t>(2 * j)].get(),
                                               s.batchEvents[static_cast<std::size_t>(2 * j + 1)].get()));
            event.timing.step = k;
            event.timing.timestep = timestep;
            event.timing.batchIndex = j;
            event.timing.tileIds = b.tileIds;
            event.timing.gpuMs = ms;
            event.timing.hostMs = batchHostMs[static_cast<std::size_t>(j)];
            event.timing.deviceMiB = used;
            record.batches.push_back(event.timing);
            observer.onTileBatch(event);
        }
        StepEvent stepEvent;
        stepEvent.step = k;
        stepEvent.steps = steps;
        stepEvent.timestep = timestep;
        stepEvent.timing.step = k;
        stepEvent.timing.timestep = timestep;
        float stepMs = 0;
        TESSERA_CHECK(cudaEventElapsedTime(&stepMs, s.stepBegin.get(), s.stepEnd.get()));
        stepEvent.timing.gpuMs = stepMs;
        stepEvent.timing.hostEnqueueMs = enqueueMs;
        stepEvent.timing.wallMs = msSince(stepStart);
        stepEvent.timing.captured = stepCaptured;
        stepEvent.timing.graph = stepCaptured ? "capture" : (stepReplayed ? "replay" : "eager");
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
            TESSERA_CHECK(cudaMemcpyAsync(previewEvent.image.data.data(), preview ? arena.at<float>(arena.preview) : x,
                                          canvasSize * sizeof(float), cudaMemcpyDeviceToHost, stream));
            TESSERA_CHECK(cudaStreamSynchronize(stream));
            observer.onPreview(previewEvent);
        }
    }

    record.totalMs = msSince(runStart);
    {
        const GraphCacheCounters& c = s.graphs.counters();
        GraphStats& g = record.graphs;
        g.mode = std::string(toString(mode));
        g.captures = static_cast<int>(c.captures - countersBefore.captures);
        g.hits = static_cast<int>(c.hits - countersBefore.hits);
        g.misses = static_cast<int>(c.misses - countersBefore.misses);
        g.evictions = static_cast<int>(c.evictions - countersBefore.evictions);
        g.updates = static_cast<int>(c.updates - countersBefore.updates);
        g.instantiations = static_cast<int>(c.instantiations - countersBefore.instantiations);
        g.invalidations = static_cast<int>(c.invalidations - countersBefore.invalidations);
        g.failures = static_cast<int>(c.failures - countersBefore.failures);
        g.captureMs = c.captureMs - countersBefore.captureMs;
        g.instantiateMs = c.instantiateMs - countersBefore.instantiateMs;
        g.updateMs = c.updateMs - countersBefore.updateMs;
        g.graphMemMiB = s.graphs.deviceMiB();
        g.cacheCapacity = s.graphs.capacity();
        g.cacheEntries = s.graphs.size();
        for (const std::string& key : usedOrder) {
            g.used.push_back(usedGraphs[key]);
            g.nodes = std::max(g.nodes, usedGraphs[key].nodes);
        }
    }
    record.peakDeviceMiB = peak;
    result.image = ImageTensor{C, H, W, std::vector<float>(canvasSize)};
    TESSERA_CHECK(cudaMemcpyAsync(result.image.data.data(), x, canvasSize * sizeof(float), cudaMemcpyDeviceToHost, stream));
    const bool haveSeams = !cancelled && startStep < steps;
    std::vector<double> seamSum, seamSumSq;
    if (haveSeams) {
        seamSum.resize(canvasSize);
        seamSumSq.resize(canvasSize);
        TESSERA_CHECK(cudaMemcpyAsync(seamSum.data(), arena.at<double>(arena.seam), canvasSize * sizeof(double),
                                      cudaMemcpyDeviceToHost, stream));
        TESSERA_CHECK(cudaMemcpyAsync(seamSumSq.data(), arena.at<double>(arena.seamSq), canvasSize * sizeof(double),
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
