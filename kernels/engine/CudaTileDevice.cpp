#include "kernels/engine/CudaTileDevice.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include <nvtx3/nvToolsExt.h>

#include "core/cpu/CpuBackend.h"
#include "core/cpu/HostMemoryEstimate.h"  // formatBytes
#include "core/graph/ModelGraph.h"
#include "core/models/unet/UNetModel.h"
#include "core/run/RunRecord.h"
#include "core/sampling/BlendWindow.h"
#include "core/sampling/TilePlan.h"
#include "kernels/backend/CudaCanvasStore.h"
#include "kernels/device/CudaCheck.h"
#include "kernels/device/NvtxRange.h"
#include "kernels/ops/CanvasAddNoise.cuh"
#include "kernels/ops/CanvasFuse.cuh"
#include "kernels/ops/CanvasInit.cuh"
#include "kernels/ops/ControlInputs.cuh"
#include "kernels/ops/Guidance.cuh"
#include "kernels/ops/LayoutConvert.cuh"
#include "kernels/ops/NonFinite.cuh"
#include "kernels/ops/StepState.cuh"
#include "kernels/ops/TileGather.cuh"
#include "kernels/ops/TorchCudaRandn.cuh"

namespace tessera {

namespace {

// Auto lanes from the tile pixels of one forward (batch x tile area): small forwards are
// short kernels that leave most SMs idle, so several run at once. Each lane is a copy of the
// activations and workspaces, so auto stays at the counts whose peak device memory measured
// no higher than PyTorch's (torch.compile + graph) for the same work on an H100: 4 lanes for
// forwards under 16 Ki pixels (64x64 x 1..3), 2 otherwise. More lanes are faster still on
// small forwards (64x64 x 1: 8 lanes 3.6 s vs 4 lanes 4.8 s per 1024x1024 image) at more
// memory; ask for them with lanes. docs/PERFORMANCE.md has the sweep.
int autoLanes(long long forwardPixels) { return forwardPixels < 16384 ? 4 : 2; }

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

// The run arena of a canvas; the coefficient table is sized in powers of two so that runs of
// different step counts share it.
// (Filled field by field like other parameter blocks: alike in shape only.)
ArenaPlan arenaPlanFor(int channels, int height, int width, int tileH, int tileW, int maps, int tiles, int steps,
                       bool history) {
    ArenaPlan plan;
    plan.history = history;
    plan.channels = channels;
    plan.height = height;
    plan.width = width;
    plan.tileH = tileH;
    plan.tileW = tileW;
    plan.maps = maps;
    plan.tiles = tiles;
    plan.stepsCapacity = 64;
    while (plan.stepsCapacity < steps) plan.stepsCapacity *= 2;
    return plan;
}

DType dtypeOf(Precision p) {
    return p == Precision::FP32 ? DType::F32 : (p == Precision::FP16 ? DType::F16 : DType::BF16);
}

double deviceUsedMiB() {
    std::size_t freeBytes = 0, total = 0;
    if (cudaMemGetInfo(&freeBytes, &total) != cudaSuccess) return -1;
    return mib(static_cast<double>(total - freeBytes));
}

std::string hexPointer(const void* p) {
    char text[32];
    std::snprintf(text, sizeof text, "%p", p);
    return text;
}

std::string driverVersions() {
    int runtime = 0, driver = 0;
    (void)cudaRuntimeGetVersion(&runtime);
    (void)cudaDriverGetVersion(&driver);
    return "CUDA runtime " + std::to_string(runtime) + ", driver " + std::to_string(driver) + ", cuDNN " +
           std::to_string(cudnnGetVersion());
}

// Sets a flag for the lifetime of a scope (exceptions included).
class FlagScope {
public:
    explicit FlagScope(bool& flag) : flag_(flag) { flag_ = true; }
    ~FlagScope() { flag_ = false; }
    FlagScope(const FlagScope&) = delete;
    FlagScope& operator=(const FlagScope&) = delete;

private:
    bool& flag_;
};

}  // namespace

CudaTileDevice::CudaTileDevice(int device) : device_(device) {}

CudaTileDevice::~CudaTileDevice() { closeRanges(1); }

cudaStream_t CudaTileDevice::stream() const { return backend_->stream(); }

cudaStream_t CudaTileDevice::laneStream(int lane) const {
    return lanes_ == 1 ? stream() : laneStreams_[static_cast<std::size_t>(lane)].get();
}

std::size_t CudaTileDevice::canvasSize() const {
    return static_cast<std::size_t>(pass_->inChannels) * pass_->height * pass_->width;
}

void CudaTileDevice::openRange(int level, const std::string& name) {
    closeRanges(level);
    while (nvtxDepth_ < level - 1) {  // a level skipped (e.g. a step without its run): keep the depths aligned
        nvtxRangePushA("");
        ++nvtxDepth_;
    }
    nvtxRangePushA(name.c_str());
    nvtxDepth_ = level;
}

void CudaTileDevice::closeRanges(int level) {
    for (; nvtxDepth_ >= level && nvtxDepth_ > 0; --nvtxDepth_) nvtxRangePop();
}

DevicePlan CudaTileDevice::prepare(const DevicePrepare& request, RunRecord& record) {
    openRange(1, "run");
    TESSERA_CHECK(cudaSetDevice(device_));
    countersBefore_ = graphs_.counters();
    const RunConfig& config = request.config;
    if (!backend_ || backend_->precision() != config.precision) {
        if (backend_) graphs_.clear(backend_->stream());  // they bake in the old backend's memory
        prepared_.reset();
        backend_.reset();
        backend_ = std::make_unique<CudaBackend>(config.precision, device_);
        ++planEpoch_;
    }
    CudaBackend& backend = *backend_;
    const BackendInfo info = backend.info();
    record.environment.backend = info.name;
    record.environment.device = info.device;
    record.environment.driver = driverVersions();
    // Graphs are the device's: "tile" captures the forward itself (around backend.enqueue, with
    // the backend's own graphs off) so that both modes share one cache and one set of
    // statistics; "step" captures whole steps.
    backend.setGraphs(false);
    mode_ = config.graphs;
    graphWarmup_ = config.graphWarmup;
    // ControlNets: the graph's tile is the latent tile times this (their hints' inputs); each batch's
    // hint crops and scale rows are filled on the device (placeControls), graphs and lanes as any run.
    graphTileScale_ = request.graphTileScale;
    fallbackReason_.clear();

    // Lanes: tile batches in flight at once, each with its own copy of the activations.
    int batch = request.batchSize, batches = request.batches;
    const int imagesPerTile = request.guided ? 2 : 1;
    const Shape autoKey{
        request.modelGeneration, request.model.graph.get(), config.precision, batch, request.tileH, request.tileW, 0,
        request.guided};
    if (request.batchAuto && autoFit_ && autoFit_->first == autoKey) {
        batch = autoFit_->second;
        batches = (request.tiles + batch - 1) / batch;
    }
    const bool lanesAuto = config.lanes == 0;
    int lanes = lanesAuto ? autoLanes(static_cast<long long>(batch) * request.tileH * request.tileW) : config.lanes;
    lanes = std::max(1, std::min(lanes, batches));
    const Denoiser& model = request.model;
    Shape shape{
        request.modelGeneration, model.graph.get(), config.precision, batch, request.tileH, request.tileW, lanes,
        request.guided};
    // A plan with more lanes serves fewer (same algorithms, so the bits of a 1-lane run do
    // not depend on the lanes of the run before it); only more lanes re-plan.
    Shape fewer = shape;
    if (prepared_) fewer.lanes = prepared_->lanes;
    if (!prepared_ || !(*prepared_ == fewer) || prepared_->lanes < lanes) {
        graphs_.clear(backend.stream());
        prepared_.reset();
        openRange(2, "prepare");
        tuning_ = std::make_unique<TuningCache>(TuningCache::resolvePath(config.tuningCache));
        backend.setTuningCache(tuning_.get());
        backend.setTileTerms(imagesPerTile, request.pixelScale);
        backend.setReservedBytes(arenaGrowth(request));
        for (;;) {
            try {
                backend.prepareGraph(*model.graph, *model.weights, imagesPerTile * batch,
                                     request.tileH * graphTileScale_, request.tileW * graphTileScale_, lanes);
                break;
            } catch (const CudaOutOfMemory& e) {
                // Auto halves the lanes until the plan fits; asked-for lanes are the user's.
                if (lanesAuto && lanes > 1) {
                    record.messages.push_back("lanes: " + std::to_string(lanes) + " lanes do not fit (" + e.what() +
                                              "); trying " + std::to_string(lanes / 2));
                    lanes /= 2;
                    shape.lanes = lanes;
                    continue;
                }
                // An auto tile batch comes down to what fits (the tiles again spread evenly);
                // an asked-for one is the user's.
                const int fits = std::min(e.largestBatch(), batch - 1);
                if (!request.batchAuto || fits < 1) throw;
                const int lowered = autoTileBatch(request.tiles, fits);
                const TileBatchLowering lowering{batch, lowered, e.what()};
                record.messages.push_back(describe(lowering));
                if (record.tileBatch) record.tileBatch->lowered.push_back(lowering);
                batch = lowered;
                batches = (request.tiles + batch - 1) / batch;
                shape.batch = batch;
                autoFit_.emplace(autoKey, batch);
            }
        }
        backend.setTuningCache(nullptr);
        tuning_->save();  // a failure is a warning (below), never the run's end
        for (const std::string& w : backend.tuningWarnings()) record.messages.push_back(w);
        for (const std::string& w : tuning_->warnings()) record.messages.push_back(w);
        closeRanges(2);
        prepared_ = shape;
        preparedGraph_ = model.graph;
        ++planEpoch_;
    }
    guided_ = request.guided;
    uploadContext(model, batch);
    // The choices of the plan in use (this prepare's, or the one it reuses).
    record.tuning = backend.tuningInfo();
    record.tuning.cachePath = tuning_ ? tuning_->path() : std::string();
    while (lanes > 1 && static_cast<int>(laneStreams_.size()) < lanes) laneStreams_.push_back(makeStream(false));
    if (!lanesGo_) lanesGo_ = makeEvent(false);
    while (forwardDone_.size() < static_cast<std::size_t>(batches)) {
        forwardDone_.push_back(makeEvent(false));
        scatterDone_.push_back(makeEvent(false));
    }
    lanes_ = lanes;
    record.graphs.lanes = lanes;
    graphs_.setCapacity(config.graphCacheSize, backend.stream());
    std::ostringstream family;
    family << "model " << request.modelGeneration << " plan " << planEpoch_ << " " << toString(config.precision)
           << " tile " << request.tileW << "x" << request.tileH << " batch " << batch << " lanes " << lanes;
    planFamily_ = family.str();
    return DevicePlan{lanes, config.precision, batch == request.batchSize ? 0 : batch};
}

// The run arena's growth for this request's canvas: what beginRun will allocate beyond the arena
// it holds (freed before the new one is allocated). Counted when the UNet's plan is fitted, so
// that an auto tile batch lowered to fit the plan leaves room for the canvas.
std::size_t CudaTileDevice::arenaGrowth(const DevicePrepare& request) const {
    if (request.canvasChannels <= 0) return 0;
    const std::size_t need = RunArena::bytesFor(
        arenaPlanFor(request.canvasChannels, request.canvasHeight, request.canvasWidth, request.tileH, request.tileW,
                     request.weightMaps, request.tiles, request.steps, request.config.scheduler == SchedulerKind::LMS));
    return need > arena_.bytes() ? need - arena_.bytes() : 0;
}

void CudaTileDevice::ensureArena(const ArenaPlan& plan) {
    try {
        TESSERA_CHECK(cudaStreamSynchronize(stream()));  // the previous run's work is done with the old arena
        arena_.ensure(plan);
    } catch (const CudaError& e) {
        if (!e.outOfMemory()) throw;
        (void)cudaGetLastError();
        std::size_t freeBytes = 0, total = 0;
        (void)cudaMemGetInfo(&freeBytes, &total);
        throw CudaOutOfMemory(
            "not enough GPU memory for the " + std::to_string(plan.width) + "x" + std::to_string(plan.height) +
                " canvas: needs " + std::to_string(static_cast<long long>(mib(static_cast<double>(arena_.bytes())))) +
                " MiB beyond the UNet's plan, " +
                std::to_string(static_cast<long long>(mib(static_cast<double>(freeBytes)))) + " MiB free",
            0);
    }
}

void CudaTileDevice::uploadTables(const TiledPass& pass) {
    const BlendWeights& weights = *pass.weights;
    const std::size_t tileArea = static_cast<std::size_t>(pass.plan->tileH()) * pass.plan->tileW();
    std::vector<float> maps;
    for (int m = 0; m < weights.mapCount(); ++m) maps.insert(maps.end(), weights.map(m), weights.map(m) + tileArea);
    std::vector<int> tx, ty, tm;
    for (const TileRect& r : pass.plan->tiles()) {
        tx.push_back(r.x);
        ty.push_back(r.y);
        tm.push_back(weights.mapIndexOfTile(r.id));
    }
    cudaStream_t s = stream();
    auto up = [&](std::size_t off, const void* src, std::size_t bytes) {
        TESSERA_CHECK(cudaMemcpyAsync(arena_.at<char>(off), src, bytes, cudaMemcpyHostToDevice, s));
    };
    up(arena_.norm, weights.normalizer().data(), weights.normalizer().size() * sizeof(float));
    up(arena_.maps, maps.data(), maps.size() * sizeof(float));
    up(arena_.tileX, tx.data(), tx.size() * sizeof(int));
    up(arena_.tileY, ty.data(), ty.size() * sizeof(int));
    up(arena_.tileMap, tm.data(), tm.size() * sizeof(int));
    // Host step noise is added after the fuse (addStepNoise): the kernels see sigma 0 and draw none.
    std::vector<StepCoefficients> coefficients = pass.coefficients;
    if (pass.hostStepNoise)
        for (StepCoefficients& k : coefficients) k.sigma = 0.0f;
    up(arena_.coeff, coefficients.data(), coefficients.size() * sizeof(StepCoefficients));
    if (pass.start.kind != CanvasStart::Kind::Noise)
        up(arena_.init, pass.start.image->data(), canvasSize() * sizeof(float));
    // Zeroed every run: a cancelled run leaves them dirty.
    TESSERA_CHECK(cudaMemsetAsync(arena_.at<char>(arena_.acc), 0, canvasSize() * sizeof(float), s));
    TESSERA_CHECK(cudaMemsetAsync(arena_.at<char>(arena_.accEps), 0, canvasSize() * sizeof(float), s));
    TESSERA_CHECK(cudaMemsetAsync(arena_.at<char>(arena_.seam), 0, canvasSize() * sizeof(double), s));
    TESSERA_CHECK(cudaMemsetAsync(arena_.at<char>(arena_.seamSq), 0, canvasSize() * sizeof(double), s));
    TESSERA_CHECK(cudaMemsetAsync(arena_.at<char>(arena_.nonFinite), 0xFF, sizeof(unsigned long long), s));
    TESSERA_CHECK(cudaStreamSynchronize(s));  // the host vectors die at this scope's end
}

void CudaTileDevice::beginRun(const TiledPass& pass, RunRecord& record, std::function<void(const std::string&)> say) {
    if (!pass.inPlace || pass.outHeight != pass.height || pass.outWidth != pass.width ||
        pass.inChannels != pass.outChannels)
        throw std::invalid_argument(
            "CUDA device: its tile function is the UNet over the latents; map passes "
            "(another canvas size or channel count) need a lowered VAE");
    if (pass.guidance.has_value() != guided_)
        throw std::invalid_argument(std::string("CUDA device: the pass ") + (guided_ ? "has no" : "asks for") +
                                    " guidance but the prepared plan " + (guided_ ? "doubles" : "does not double") +
                                    " its tile batches (guidance needs a text-conditioned UNet prepared for it)");
    if (!prepared_ || pass.lanes != lanes_ || pass.batchSize != prepared_->batch)
        throw std::logic_error("CudaTileDevice::beginRun: the pass does not match the prepared plan");
    pass_ = &pass;
    say_ = std::move(say);
    const int C = pass.inChannels, H = pass.height, W = pass.width;
    const int tileH = pass.plan->tileH(), tileW = pass.plan->tileW();
    const int batches = static_cast<int>(pass.batches.size());

    // Run arena: canvas, accumulators, constant tables, step state; kept while the plan's
    // sizes stay the same. The coefficient table is sized in powers of two so that runs of
    // different step counts share it.
    const ArenaPlan arenaPlan = arenaPlanFor(C, H, W, tileH, tileW, pass.weights->mapCount(), pass.tileCount(),
                                             pass.steps(), pass.keepsHistory());
    stepsCapacity_ = arenaPlan.stepsCapacity;
    ensureArena(arenaPlan);
    history_ = arenaPlan.history ? arena_.at<float>(arena_.history) : nullptr;  // in the arena just ensured
    uploadTables(pass);
    uploadAddedCond(pass);
    uploadControls(pass);
    if (pass.hostStepNoise && stepNoise_.bytes() != canvasSize() * sizeof(float)) {
        stepNoise_ = DeviceBuffer(canvasSize() * sizeof(float));
        stepNoiseHost_ = PinnedBuffer(canvasSize() * sizeof(float));
    }
    stepNoiseGiven_ = nullptr;

    geo_ = CanvasGeometry{};
    geo_.channels = C;
    geo_.height = H;
    geo_.width = W;
    geo_.tileH = tileH;
    geo_.tileW = tileW;
    geo_.tileX = arena_.at<int>(arena_.tileX);
    geo_.tileY = arena_.at<int>(arena_.tileY);
    geo_.tileMap = arena_.at<int>(arena_.tileMap);
    geo_.weightMaps = arena_.at<float>(arena_.maps);
    geo_.normalizer = arena_.at<float>(arena_.norm);
    geo_.seed = pass.seed;
    // The per-step kernels read the seed from the StepState; their geometry argument carries
    // none, so that a captured step graph serves every seed with the same arguments.
    stepGeo_ = geo_;
    stepGeo_.seed = 0;
    const TileTensor io{dtypeOf(prepared_->precision), 0};
    inIo_ = outIo_ = io;
    inIo_.paddedChannels = backend_->inputChannelsPadded();
    outIo_.paddedChannels = backend_->outputChannelsPadded();
    x_ = arena_.at<float>(arena_.x);
    coeff_ = arena_.at<StepCoefficients>(arena_.coeff);
    state_ = arena_.at<StepState>(arena_.state);
    nonFinite_ = arena_.at<unsigned long long>(arena_.nonFinite);
    if (!nonFiniteHost_.data()) nonFiniteHost_ = PinnedBuffer(sizeof(unsigned long long));

    const CudaMemoryPlan bplan = backend_->memoryPlan();
    record.memoryPlan.weightsMiB = mib(static_cast<double>(bplan.weightsBytes));
    record.memoryPlan.activationsMiB = mib(static_cast<double>(bplan.activationsBytes) * bplan.lanes);
    record.memoryPlan.workspaceMiB = mib(static_cast<double>(bplan.workspaceBytes) * bplan.lanes);
    record.memoryPlan.canvasMiB = mib(static_cast<double>(arena_.bytes()));
    record.memoryPlan.totalMiB = mib(static_cast<double>(bplan.totalBytes + arena_.bytes()));

    // Two timing events per batch (grown, never replaced: step graphs bake the handles in).
    while (batchEvents_.size() < static_cast<std::size_t>(2 * batches)) batchEvents_.push_back(makeEvent());
    if (!stepBegin_) stepBegin_ = makeEvent();
    if (!stepEnd_) stepEnd_ = makeEvent();
    usedOrder_.clear();
    usedGraphs_.clear();
    tileGraphs_.clear();
    stepsDone_ = 0;
    capturing_ = false;
}

void CudaTileDevice::startCanvas(const CanvasStart& start) {
    const float* init = arena_.at<float>(arena_.init);
    switch (start.kind) {
        case CanvasStart::Kind::Noise:
            launchCanvasInit(geo_, x_, nullptr, start.draw, start.sigma, 0, 0, 0, stream());
            break;
        case CanvasStart::Kind::NoisedImage:
            launchCanvasInit(geo_, x_, init, start.draw, 1.0f, start.a, start.b, start.scale, stream());
            break;
        case CanvasStart::Kind::Image:
            TESSERA_CHECK(cudaMemcpyAsync(x_, init, canvasSize() * sizeof(float), cudaMemcpyDeviceToDevice, stream()));
            break;
    }
    if (history_)  // zero before the first step after the canvas starts (TiledPass::keepsHistory)
        TESSERA_CHECK(cudaMemsetAsync(history_, 0, kStepHistory * canvasSize() * sizeof(float), stream()));
    peak_ = deviceUsedMiB();
    hasX0Prev_ = false;
}

// ---------------------------------------------------------------------------------------------
// Graphs

std::string CudaTileDevice::lanePointers(int lane) const {
    return hexPointer(backend_->deviceInput(lane)) + " " + hexPointer(backend_->deviceOutput(lane)) + " " +
           hexPointer(backend_->deviceTimesteps(lane));
}

GraphKey CudaTileDevice::tileKey(int count, int lane) const {
    return GraphKey{
        "tile forward x" + std::to_string(forwardRows(count)) + " lane " + std::to_string(lane) + " " + planFamily_,
        lanePointers(lane)};
}

GraphKey CudaTileDevice::stepKey(const StepVariant& variant) const {
    const TiledPass& p = *pass_;
    std::ostringstream f;
    f << "step " << variant.name() << (variant.keepX0 ? " keeps-x0" : "") << (variant.history ? " history" : "") << " "
      << p.width << "x" << p.height << "x" << p.inChannels << " overlap " << p.plan->overlap() << " window "
      << toString(p.window) << " maps " << p.weights->mapCount() << " fusion " << toString(p.fusion) << " tiles "
      << p.tileCount() << " batches " << p.batches.size() << " steps<=" << stepsCapacity_ << " " << planFamily_
      << (p.hostStepNoise ? " host-noise" : "");
    std::string pointers = hexPointer(arena_.base()) + " " + hexPointer(addedTable_.data()) + " " +
                           hexPointer(controlHints_.data()) + " " + hexPointer(controlScales_.data());
    if (p.hostStepNoise) pointers += " " + hexPointer(stepNoise_.data());
    for (int l = 0; l < lanes_; ++l) pointers += " " + lanePointers(l);
    for (std::size_t i = 0; i < 2 * p.batches.size(); ++i) pointers += " " + hexPointer(batchEvents_[i].get());
    return GraphKey{f.str(), pointers};
}

void CudaTileDevice::noteUse(const std::string& key, const GraphCache::Acquired& a) {
    auto it = usedGraphs_.find(key);
    if (it == usedGraphs_.end()) {
        usedOrder_.push_back(key);
        it = usedGraphs_.emplace(key, *a.stats).first;
        it->second.launches = 0;
        it->second.captured = false;
    }
    if (!a.hit) {
        const int launches = it->second.launches;
        it->second = *a.stats;  // the new capture's numbers
        it->second.launches = launches;
        it->second.captured = true;
    }
}

void CudaTileDevice::fallBack(const std::string& why) {
    // A capture that failed after forking onto the lane streams can leave them in an
    // invalidated capture: replace any such stream (new streams, same lanes).
    for (CudaStream& ls : laneStreams_) {
        cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
        const cudaError_t query = cudaStreamIsCapturing(ls.get(), &status);
        if (query != cudaSuccess || status != cudaStreamCaptureStatusNone) {
            (void)cudaGetLastError();
            ls = makeStream(false);
        }
    }
    (void)cudaGetLastError();
    mode_ = GraphMode::Off;
    fallbackReason_ = why;
    say_("graphs: " + why + "; ran with graphs off");
}

// Tile mode: the forwards of this step's batch sizes as cached graphs, acquired (and on a miss
// captured) before the step's first event so that capture time stays out of the step's device
// timings. Warm-up steps and a failed capture leave it empty.
void CudaTileDevice::acquireTileGraphs() {
    tileGraphs_.clear();
    std::vector<std::string> keep;  // this step's graphs: not to be evicted by the next
    for (const TileBatch& b : pass_->batches) {
        if (tileGraphs_.count({b.count, b.lane})) continue;
        const GraphKey key = tileKey(b.count, b.lane);
        if (!graphs_.contains(key) && stepsDone_ < graphWarmup_) continue;
        try {
            const GraphCache::Acquired a = graphs_.acquire(
                key, stream(), [&] { backend_->enqueue(forwardRows(b.count), b.lane, stream()); }, keep);
            keep.push_back(key.text());
            noteUse(key.text(), a);
            (a.hit ? stepReplayed_ : stepCaptured_) = true;
            tileGraphs_[{b.count, b.lane}] = TileGraph{a.exec, key.text()};
        } catch (const GraphCaptureFailed& e) {
            fallBack(e.what());
            tileGraphs_.clear();
            return;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// One step

void CudaTileDevice::beginStep(int step, const StepVariant&) {
    openRange(2, "step " + std::to_string(step));
    if (controlSteps_ > 0 && step >= controlSteps_)
        throw std::logic_error("CudaTileDevice: step " + std::to_string(step) + " past the ControlNets' scale tables");
    stepCaptured_ = stepReplayed_ = false;
    launchSetStepState(state_, pass_->seed, step, hasX0Prev_, pass_->shift(step), stream());
    if (pass_->hostStepNoise) uploadStepNoise(step);
    hasX0Prev_ = true;  // from the next step on, the x0 canvas holds this step's x0 (when the pass keeps it)
    if (mode_ == GraphMode::Tile) acquireTileGraphs();
}

bool CudaTileDevice::runStep(const StepVariant& variant, const std::function<bool(bool)>& body) {
    cudaGraphExec_t stepGraph = nullptr;
    std::string stepGraphKey;
    if (mode_ == GraphMode::Step) {
        const GraphKey key = stepKey(variant);
        if (graphs_.contains(key) || stepsDone_ >= graphWarmup_) {
            try {
                FlagScope capturing(capturing_);
                const GraphCache::Acquired a = graphs_.acquire(key, stream(), [&] { (void)body(true); });
                stepGraphKey = key.text();
                noteUse(stepGraphKey, a);
                stepGraph = a.exec;
                (a.hit ? stepReplayed_ : stepCaptured_) = true;
            } catch (const GraphCaptureFailed& e) {
                fallBack(e.what());
            }
        }
    }
    TESSERA_CHECK(cudaEventRecord(stepBegin_.get(), stream()));
    if (stepGraph) {
        TESSERA_CHECK(cudaGraphLaunch(stepGraph, stream()));
        usedGraphs_[stepGraphKey].launches += 1;
    } else if (!body(false)) {
        TESSERA_CHECK(cudaStreamSynchronize(stream()));
        closeRanges(2);
        return false;
    }
    TESSERA_CHECK(cudaEventRecord(stepEnd_.get(), stream()));
    return true;
}

StepReport CudaTileDevice::endStep() {
    // The non-finite word, read back with the step's own wait (after the graph launch in step mode).
    TESSERA_CHECK(cudaMemcpyAsync(nonFiniteHost_.data(), nonFinite_, sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                                  stream()));
    TESSERA_CHECK(cudaStreamSynchronize(stream()));
    StepReport report;
    closeRanges(2);
    if (const unsigned long long found = *nonFiniteHost_.as<unsigned long long>(); found != kNonFiniteClean) {
        const auto slot = static_cast<unsigned>(found & 0xFFFFFFFFu);
        const int batch = slot == kNonFiniteLatents ? -1 : static_cast<int>(slot);
        report.nonFinite = NonFiniteAt{static_cast<int>(found >> 32), batch};
        return report;
    }
    ++stepsDone_;
    const double used = deviceUsedMiB();
    peak_ = std::max(peak_, used);
    for (std::size_t j = 0; j < pass_->batches.size(); ++j) {
        float ms = 0;
        TESSERA_CHECK(cudaEventElapsedTime(&ms, batchEvents_[2 * j].get(), batchEvents_[2 * j + 1].get()));
        report.batches.push_back(BatchReport{ms, used});
    }
    float stepMs = 0;
    TESSERA_CHECK(cudaEventElapsedTime(&stepMs, stepBegin_.get(), stepEnd_.get()));
    report.gpuMs = stepMs;
    report.graph = stepCaptured_ ? "capture" : (stepReplayed_ ? "replay" : "eager");
    report.usedMiB = used;
    report.arenaMiB = mib(static_cast<double>(backend_->memoryPlan().totalBytes + arena_.bytes()));
    return report;
}

// ---------------------------------------------------------------------------------------------
// The step body's calls. While capturing_, the timing events become event-record nodes of the
// step graph and the forward's kernels become nodes (no nested tile graph).

void CudaTileDevice::forkLanes() {
    if (lanes_ == 1) return;
    TESSERA_CHECK(cudaEventRecord(lanesGo_.get(), stream()));
    for (int l = 0; l < lanes_; ++l) TESSERA_CHECK(cudaStreamWaitEvent(laneStream(l), lanesGo_.get(), 0));
}

void CudaTileDevice::beginBatch(const TileBatch& b) {
    openRange(3, "tile batch " + std::to_string(b.index));
    const unsigned flags = capturing_ ? cudaEventRecordExternal : cudaEventRecordDefault;
    const cudaStream_t ls = laneStream(b.lane);
    // The lane's buffers are free once the scatter of the batch it ran before has read them.
    if (lanes_ > 1 && b.index >= lanes_)
        TESSERA_CHECK(cudaStreamWaitEvent(ls, scatterDone_[static_cast<std::size_t>(b.index - lanes_)].get(), 0));
    TESSERA_CHECK(cudaEventRecordWithFlags(batchEvents_[static_cast<std::size_t>(2 * b.index)].get(), ls, flags));
}

void CudaTileDevice::gather(const TileBatch& b) {
    launchTileGather(stepGeo_, x_, coeff_, state_, b.first, b.count, inIo_, backend_->deviceInput(b.lane),
                     backend_->deviceTimesteps(b.lane), laneStream(b.lane));
}

void CudaTileDevice::uploadContext(const Denoiser& model, int batch) {
    contextRowBytes_ = 0;
    contextBatch_ = batch;
    if (!model.conditioned()) return;
    const std::size_t rowElements = static_cast<std::size_t>(model.contextTokens) * model.contextDim;
    if (model.cond.size() != rowElements || (guided_ && model.uncond.size() != rowElements))
        throw std::logic_error("CudaTileDevice: the conditioning does not match its token shape");
    if (!backend_->deviceTokens(0))
        throw std::logic_error("CudaTileDevice: a conditioned model whose graph has no token input");
    contextRowBytes_ = rowElements * dtypeSize(dtypeOf(backend_->precision()));
    const std::size_t rows = static_cast<std::size_t>(guided_ ? 2 * batch : batch);
    if (context_.bytes() < rows * contextRowBytes_) context_ = DeviceBuffer(rows * contextRowBytes_);
    // Rows [0, batch): the prompt; [batch, 2 batch): the negative prompt. Converted on the device.
    std::vector<float> host;
    host.reserve(rows * rowElements);
    for (std::size_t r = 0; r < rows; ++r) {
        const std::vector<float>& row = r < static_cast<std::size_t>(batch) ? model.cond : model.uncond;
        host.insert(host.end(), row.begin(), row.end());
    }
    DeviceBuffer staging(host.size() * sizeof(float));
    cudaStream_t s = stream();
    TESSERA_CHECK(cudaMemcpyAsync(staging.data(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice, s));
    launchNchwToNhwc(staging.as<float>(), dtypeOf(backend_->precision()), context_.data(), 1, 1,
                     static_cast<int>(host.size()), 1, 1, 1.0f, s);
    TESSERA_CHECK(cudaStreamSynchronize(s));  // staging and host die here
}

// The forward's token input for this batch: its tiles' conditional rows, then (guided) as many
// unconditional rows; the input rows and timesteps duplicated into the second half.
void CudaTileDevice::placeContext(const TileBatch& b, cudaStream_t ls) {
    if (contextRowBytes_ == 0) return;
    char* tokens = static_cast<char*>(backend_->deviceTokens(b.lane));
    const char* store = context_.as<char>();
    const std::size_t n = static_cast<std::size_t>(b.count);
    TESSERA_CHECK(cudaMemcpyAsync(tokens, store, n * contextRowBytes_, cudaMemcpyDeviceToDevice, ls));
    placeAddedCond(b, ls);
    if (!guided_) return;
    TESSERA_CHECK(cudaMemcpyAsync(tokens + n * contextRowBytes_, store + contextBatch_ * contextRowBytes_,
                                  n * contextRowBytes_, cudaMemcpyDeviceToDevice, ls));
    const std::size_t tileBytes =
        static_cast<std::size_t>(geo_.tileH) * geo_.tileW * inIo_.paddedChannels * dtypeSize(inIo_.dtype);
    char* input = static_cast<char*>(backend_->deviceInput(b.lane));
    TESSERA_CHECK(cudaMemcpyAsync(input + n * tileBytes, input, n * tileBytes, cudaMemcpyDeviceToDevice, ls));
    float* t = backend_->deviceTimesteps(b.lane);
    TESSERA_CHECK(cudaMemcpyAsync(t + n, t, n * sizeof(float), cudaMemcpyDeviceToDevice, ls));
}

void CudaTileDevice::uploadAddedCond(const TiledPass& pass) {
    addedDim_ = pass.addedCondDim;
    addedTiles_ = pass.tileCount();
    float* input = backend_->deviceVector("text_embeds_time");
    if ((addedDim_ > 0) != (input != nullptr))
        throw std::logic_error(std::string("CudaTileDevice: the pass ") + (addedDim_ > 0 ? "has" : "has no") +
                               " per-tile text_embeds_time but the UNet's graph " + (input ? "takes" : "has no") +
                               " such input");
    if (addedDim_ == 0) return;
    const std::size_t rows = static_cast<std::size_t>(addedTiles_), dim = static_cast<std::size_t>(addedDim_);
    if (pass.addedCond.size() != rows * dim || (guided_ && pass.addedUncond.size() != rows * dim))
        throw std::logic_error("CudaTileDevice: the pass's added conditioning is not one row per tile and branch");
    const std::size_t half = rows * dim * sizeof(float);
    if (addedTable_.bytes() < 2 * half) addedTable_ = DeviceBuffer(2 * half);
    cudaStream_t s = stream();
    TESSERA_CHECK(cudaMemcpyAsync(addedTable_.data(), pass.addedCond.data(), half, cudaMemcpyHostToDevice, s));
    if (guided_)
        TESSERA_CHECK(
            cudaMemcpyAsync(addedTable_.as<char>() + half, pass.addedUncond.data(), half, cudaMemcpyHostToDevice, s));
    TESSERA_CHECK(cudaStreamSynchronize(s));  // the pass's host vectors may change after beginRun
}

// The forward's text_embeds_time rows for this batch: its tiles' conditional rows, then (guided)
// their unconditional rows, D2D from the table (so captured step graphs read this run's table).
void CudaTileDevice::placeAddedCond(const TileBatch& b, cudaStream_t ls) {
    if (addedDim_ == 0) return;
    char* rows = reinterpret_cast<char*>(backend_->deviceVector("text_embeds_time", b.lane));
    const std::size_t rowBytes = static_cast<std::size_t>(addedDim_) * sizeof(float);
    const std::size_t n = static_cast<std::size_t>(b.count), first = static_cast<std::size_t>(b.first);
    const char* table = addedTable_.as<char>();
    TESSERA_CHECK(cudaMemcpyAsync(rows, table + first * rowBytes, n * rowBytes, cudaMemcpyDeviceToDevice, ls));
    if (!guided_) return;
    const std::size_t uncond = static_cast<std::size_t>(addedTiles_) * rowBytes;
    TESSERA_CHECK(cudaMemcpyAsync(rows + n * rowBytes, table + uncond + first * rowBytes, n * rowBytes,
                                  cudaMemcpyDeviceToDevice, ls));
}

void CudaTileDevice::evaluate(const TileBatch& b, Branch branch) {
    if (branch == Branch::Unconditional) return;  // a guided forward ran both halves as one batch
    const cudaStream_t ls = laneStream(b.lane);
    placeContext(b, ls);
    placeControls(b, ls);
    const auto tileGraph = capturing_ ? tileGraphs_.end() : tileGraphs_.find({b.count, b.lane});
    if (tileGraph != tileGraphs_.end()) {
        TESSERA_CHECK(cudaGraphLaunch(tileGraph->second.exec, ls));
        usedGraphs_[tileGraph->second.key].launches += 1;
    } else {
        backend_->enqueue(forwardRows(b.count), b.lane, ls);  // while capturing: the forward's kernels become nodes
    }
}

void CudaTileDevice::combineGuidance(const TileBatch& b, float scale) {
    const long long half = static_cast<long long>(b.count) * geo_.tileH * geo_.tileW * outIo_.paddedChannels;
    launchGuidanceCombine(outIo_.dtype, const_cast<void*>(backend_->deviceOutput(b.lane)), half, scale,
                          laneStream(b.lane));
}

// The run's ControlNet tables: every hint canvas (float32, as the pass holds them) and per unit its
// scales per step index, conditional then unconditional. Grown, never shrunk: captured step graphs
// read them by address (stepKey holds it).
void CudaTileDevice::uploadControls(const TiledPass& pass) {
    controlHintOffsets_.clear();
    controlScaleOffsets_.clear();
    controlSteps_ = 0;
    if (pass.controls.empty()) return;
    std::size_t hintFloats = 0, scaleFloats = 0;
    for (const PassControl& c : pass.controls) {
        if (c.condScale.size() != c.uncondScale.size())
            throw std::logic_error("CudaTileDevice: a ControlNet's branch scales differ in length");
        if (controlSteps_ != 0 && c.condScale.size() != static_cast<std::size_t>(controlSteps_))
            throw std::logic_error("CudaTileDevice: the ControlNets' scale tables differ in length");
        controlSteps_ = static_cast<int>(c.condScale.size());
        const std::size_t expected =
            static_cast<std::size_t>(c.channels) * pass.height * c.factor * pass.width * c.factor;
        if (!c.hint || c.hint->size() != expected)
            throw std::logic_error("CudaTileDevice: a ControlNet's hint canvas does not match the pass");
        controlHintOffsets_.push_back(hintFloats);
        controlScaleOffsets_.push_back(scaleFloats);
        hintFloats += (expected + 63) / 64 * 64;  // 256-byte aligned starts
        scaleFloats += 2 * c.condScale.size();
    }
    if (controlHints_.bytes() < hintFloats * sizeof(float)) controlHints_ = DeviceBuffer(hintFloats * sizeof(float));
    if (controlScales_.bytes() < scaleFloats * sizeof(float))
        controlScales_ = DeviceBuffer(scaleFloats * sizeof(float));
    std::vector<float> scales(scaleFloats);
    cudaStream_t s = stream();
    for (std::size_t u = 0; u < pass.controls.size(); ++u) {
        const PassControl& c = pass.controls[u];
        TESSERA_CHECK(cudaMemcpyAsync(controlHints_.as<float>() + controlHintOffsets_[u], c.hint->data(),
                                      c.hint->size() * sizeof(float), cudaMemcpyHostToDevice, s));
        std::copy(c.condScale.begin(), c.condScale.end(),
                  scales.begin() + static_cast<std::ptrdiff_t>(controlScaleOffsets_[u]));
        std::copy(c.uncondScale.begin(), c.uncondScale.end(),
                  scales.begin() + static_cast<std::ptrdiff_t>(controlScaleOffsets_[u] + c.condScale.size()));
    }
    TESSERA_CHECK(cudaMemcpyAsync(controlScales_.data(), scales.data(), scales.size() * sizeof(float),
                                  cudaMemcpyHostToDevice, s));
    TESSERA_CHECK(cudaStreamSynchronize(s));  // the host tables die here; the pass's hints may change after beginRun
}

// Each ControlNet's inputs for this batch, after the UNet's (graph input order): its hint crops
// (the hint canvas at each tile's position times the factor; the unconditional rows the same) in
// the activations' NHWC layout, and its FiLM scale rows of the step (conditional rows s - 1, then
// unconditional ones; 0 in the shift half). Device to device from the run's tables, so a captured
// step graph replays them for every step and each lane fills its own buffers.
void CudaTileDevice::placeControls(const TileBatch& b, cudaStream_t ls) {
    if (pass_->controls.empty()) return;
    const ModelGraph& graph = *preparedGraph_;
    std::size_t input = graph.inputs().size();
    for (const PassControl& c : pass_->controls) input -= 1 + c.scaleWidths.size();
    const int n = b.count, rows = guided_ ? 2 * n : n;
    for (std::size_t u = 0; u < pass_->controls.size(); ++u) {
        const PassControl& c = pass_->controls[u];
        const int f = c.factor, th = pass_->plan->tileH() * f, tw = pass_->plan->tileW() * f;
        launchControlHintCrop(controlHints_.as<float>() + controlHintOffsets_[u], c.channels, pass_->height * f,
                              pass_->width * f, f, geo_.tileX, geo_.tileY, state_, b.first, n, rows, th, tw,
                              (c.channels + 7) / 8 * 8, dtypeOf(backend_->precision()),
                              backend_->deviceGraphInput(input, b.lane), ls);
        ++input;
        for (const int C : c.scaleWidths) {
            launchControlScaleRows(controlScales_.as<float>() + controlScaleOffsets_[u], controlSteps_, state_, n, rows,
                                   C, static_cast<float*>(backend_->deviceGraphInput(input, b.lane)), ls);
            ++input;
        }
    }
}

class CudaTileDevice::TunedBackend final : public Backend {
public:
    TunedBackend(Precision precision, int device) : precision_(precision), device_(device) {
        slots_[0].backend = std::make_unique<CudaBackend>(precision, device);
    }
    Precision precision() const { return precision_; }
    void setCachePath(std::string path) { path_ = std::move(path); }

    BackendInfo info() const override { return current().info(); }
    cudaStream_t stream() const { return current().stream(); }
    // A prepare of the same graph, weights, shape and cache file as one of the last two (the next
    // decode of a queue at one size; an image-to-image job's encode and decode in turn) keeps that
    // plan: no re-lowering, no weight upload, no cuDNN plan building. The other plan is let go
    // when keeping it would leave less than half the device free.
    void prepareGraph(const ModelGraph& graph, const TensorMap& weights, int batch, int tileH, int tileW) override {
        std::string key = planKey(graph, weights, batch, tileH, tileW);
        for (std::size_t i = 0; i < slots_.size(); ++i)
            if (!key.empty() && slots_[i].backend && key == slots_[i].key && (stores_ == 0 || i == current_)) {
                current_ = i;
                return;
            }
        const NvtxRange range("whole-graph prepare (tuning cache)");
        // A live canvas store runs on the current slot's backend: its segments are planned there.
        const std::size_t other = current_,
                          slot = stores_ > 0 || slots_[current_].key.empty() ? current_ : 1 - current_;
        Slot& s = slots_[slot];
        s.key.clear();
        if (!s.backend) s.backend = std::make_unique<CudaBackend>(precision_, device_);
        current_ = slot;
        TuningCache cache(path_);  // read fresh: other processes may have stored choices since
        s.backend->setTuningCache(&cache);
        try {
            s.backend->prepareGraph(graph, weights, batch, tileH, tileW);
        } catch (...) {
            s.backend->setTuningCache(nullptr);
            throw;
        }
        s.backend->setTuningCache(nullptr);
        cache.save();
        s.key = std::move(key);
        if (other != slot && slots_[other].backend) {
            std::size_t free = 0, total = 0;
            TESSERA_CHECK(cudaMemGetInfo(&free, &total));
            if (free < total / 2) {
                TESSERA_CHECK(cudaStreamSynchronize(slots_[other].backend->stream()));
                slots_[other] = Slot{};
            }
        }
    }
    void run(const std::vector<const float*>& inputs, int batch, const std::vector<float*>& outputs) override {
        const NvtxRange range("whole-graph run (host copies in and out)");
        current().run(inputs, batch, outputs);
    }
    void prepare(const UNetModel& model, int batch, int tileH, int tileW) override {
        slots_[current_].key.clear();
        current().prepare(model, batch, tileH, tileW);
    }
    void forward(const float* x, const float* timesteps, int batch, float* out) override {
        current().forward(x, timesteps, batch, out);
    }
    // Device canvases for tiled passes, their segments prepared through this (the tuning cache)
    // on the current slot's backend, which stays current while the store lives.
    std::unique_ptr<TiledCanvasStore> makeCanvasStore(std::uint64_t canvasBytes) override {
        return std::make_unique<PinnedStore>(makeCudaCanvasStore(*this, current(), canvasBytes), stores_);
    }

private:
    // Everything a plan depends on: the cache file, the shape, every op and its fusions, and
    // each parameter's tensor (address, size and three sampled values, so that another model
    // loaded at the same addresses does not match). Empty when a parameter is missing.
    std::string planKey(const ModelGraph& graph, const TensorMap& weights, int batch, int tileH, int tileW) const {
        std::ostringstream k;
        k << std::hexfloat << path_ << '|' << batch << 'x' << tileH << 'x' << tileW << '|' << graph.values().size();
        for (int v : graph.inputs()) k << ",in" << v;
        for (int v : graph.outputs()) k << ",out" << v;
        for (const GraphOp& op : graph.ops()) {
            k << '\n'
              << op.name << ' ' << graph.describe(op) << ' ' << op.input << ' ' << op.input2 << ' ' << op.output << ' '
              << op.eps << ' ' << op.silu << ' ' << op.preAdd << ' ' << op.scaleShift << ' ' << op.residual << ' '
              << op.outputScale << ' ' << op.stride << ' ' << op.padBegin << ' ' << op.padEnd;
            for (int p : op.params) k << ' ' << p;
        }
        for (const GraphParam& p : graph.params()) {
            const auto it = weights.find(p.name);
            if (it == weights.end()) return {};
            const std::vector<float>& d = it->second.data;
            k << '\n' << p.name << '@' << static_cast<const void*>(d.data()) << ':' << d.size();
            if (!d.empty()) k << ':' << d.front() << ':' << d[d.size() / 2] << ':' << d.back();
        }
        return k.str();
    }

    struct Slot {
        std::unique_ptr<CudaBackend> backend;
        std::string key;  // empty: no plan kept
    };
    // A canvas store that holds its backend's slot current while it lives.
    class PinnedStore final : public TiledCanvasStore {
    public:
        PinnedStore(std::unique_ptr<TiledCanvasStore> store, int& live) : store_(std::move(store)), live_(live) {
            ++live_;
        }
        ~PinnedStore() override { --live_; }
        PinnedStore(const PinnedStore&) = delete;
        PinnedStore& operator=(const PinnedStore&) = delete;
        std::string where() const override { return store_->where(); }
        void allocate(int value, int channels, int h, int w, int scale) override {
            store_->allocate(value, channels, h, w, scale);
        }
        void release(int value) override { store_->release(value); }
        void write(int value, const float* nchw) override { store_->write(value, nchw); }
        std::vector<float> read(int value) override { return store_->read(value); }
        std::vector<std::pair<double, double>> groupMoments(int value, int groups, int x0, int y0, int w,
                                                            int h) override {
            return store_->groupMoments(value, groups, x0, y0, w, h);
        }
        void prepare(const ModelGraph& graph, const TensorMap& weights, int batch, int tileH, int tileW) override {
            store_->prepare(graph, weights, batch, tileH, tileW);
        }
        void run(const std::vector<StoreInput>& inputs, const std::vector<int>& outputs, const GraphTileGrid& grid,
                 int first, int count) override {
            store_->run(inputs, outputs, grid, first, count);
        }
        std::uint64_t peakBytes() const override { return store_->peakBytes(); }

    private:
        std::unique_ptr<TiledCanvasStore> store_;
        int& live_;
    };
    CudaBackend& current() const { return *slots_[current_].backend; }

    Precision precision_;
    int device_;
    std::string path_;
    std::array<Slot, 2> slots_;
    std::size_t current_ = 0;
    int stores_ = 0;  // live canvas stores (PinnedStore)
};

Backend& CudaTileDevice::wholeGraphBackend(const RunConfig& config) {
    if (!whole_ || whole_->precision() != config.precision)
        whole_ = std::make_unique<TunedBackend>(config.precision, device_);
    whole_->setCachePath(TuningCache::resolvePath(config.tuningCache));
    return *whole_;
}

cudaStream_t CudaTileDevice::wholeGraphStream() const { return whole_ ? whole_->stream() : nullptr; }

Backend& CudaTileDevice::textBackend() {
    if (!text_) text_ = std::make_unique<CpuBackend>();
    return *text_;
}

std::optional<VaeMemoryBudget> CudaTileDevice::vaeMemoryBudget(const RunConfig& config) {
    TESSERA_CHECK(cudaSetDevice(device_));
    std::size_t freeBytes = 0, totalBytes = 0;
    TESSERA_CHECK(cudaMemGetInfo(&freeBytes, &totalBytes));
    std::string released;
    if (freeBytes < kVaeReserveBytes + kVaeTightBytes && backend_) {
        const std::size_t before = freeBytes;
        graphs_.clear(backend_->stream());  // they bake in the plan's memory
        TESSERA_CHECK(cudaStreamSynchronize(backend_->stream()));
        prepared_.reset();
        preparedGraph_.reset();
        backend_.reset();
        ++planEpoch_;
        TESSERA_CHECK(cudaMemGetInfo(&freeBytes, &totalBytes));
        released = ", after giving back the sampler's plan (" +
                   formatBytes(freeBytes > before ? freeBytes - before : 0) + "; the next run prepares it again)";
    }
    VaeMemoryBudget budget;
    budget.bytes = freeBytes > kVaeReserveBytes ? freeBytes - kVaeReserveBytes : 0;
    budget.bytesPerValue = config.precision == Precision::FP32 ? 4 : 2;
    budget.sharedWithHost = false;
    budget.maxTensorElements = (std::int64_t{1} << 31) - 1;
    budget.source = "device free memory " + formatBytes(freeBytes) + " less a " + formatBytes(kVaeReserveBytes) +
                    " reserve" + released;
    if (vaeLimit_ && *vaeLimit_ < budget.bytes) {
        budget.bytes = *vaeLimit_;
        budget.source += ", limited to " + formatBytes(*vaeLimit_);
    }
    return budget;
}

void CudaTileDevice::joinBatch(const TileBatch& b) {
    if (lanes_ == 1) return;
    const CudaEvent& done = forwardDone_[static_cast<std::size_t>(b.index)];
    TESSERA_CHECK(cudaEventRecord(done.get(), laneStream(b.lane)));
    TESSERA_CHECK(cudaStreamWaitEvent(stream(), done.get(), 0));
}

bool CudaTileDevice::checkOutput(const TileBatch& b) {
    const long long elements = static_cast<long long>(b.count) * geo_.tileH * geo_.tileW * outIo_.paddedChannels;
    launchNonFiniteCheck(outIo_.dtype, backend_->deviceOutput(b.lane), elements, geo_.channels, outIo_.paddedChannels,
                         state_, static_cast<unsigned>(b.index), nonFinite_, stream());
    return false;
}

ScatterTargets CudaTileDevice::targets(const StepVariant& variant) const {
    ScatterTargets t;
    t.acc = arena_.at<float>(arena_.acc);
    t.accEps = variant.blendsNoise() ? arena_.at<float>(arena_.accEps) : nullptr;
    t.x0Prev = variant.keepX0 ? arena_.at<float>(arena_.preview) : nullptr;
    if (variant.seams) {
        t.seamSum = arena_.at<double>(arena_.seam);
        t.seamSumSq = arena_.at<double>(arena_.seamSq);
    }
    return t;
}

void CudaTileDevice::scatter(const TileBatch& b, const StepVariant& variant) {
    launchTileScatter(stepGeo_, x_, coeff_, state_, variant.sampleFusion, b.first, b.count, b.y0, b.y1, b.x0, b.x1,
                      outIo_, backend_->deviceOutput(b.lane), targets(variant), stream());
}

void CudaTileDevice::endBatch(const TileBatch& b) {
    const unsigned flags = capturing_ ? cudaEventRecordExternal : cudaEventRecordDefault;
    const CudaEvent& end = batchEvents_[static_cast<std::size_t>(2 * b.index + 1)];
    TESSERA_CHECK(cudaEventRecordWithFlags(end.get(), stream(), flags));
    if (lanes_ > 1) TESSERA_CHECK(cudaEventRecord(scatterDone_[static_cast<std::size_t>(b.index)].get(), stream()));
    closeRanges(3);
}

void CudaTileDevice::fuse(const StepVariant& variant) {
    float* x0 = variant.writesX0() ? arena_.at<float>(arena_.preview) : nullptr;
    launchCanvasFuse(stepGeo_, x_, arena_.at<float>(arena_.acc), targets(variant).accEps, x0,
                     variant.history ? history_ : nullptr, coeff_, state_, variant.sampleFusion, stream());
    if (pass_->hostStepNoise) launchCanvasAddNoise(x_, stepNoise_.as<float>(), canvasSize(), stream());
}

// sigma * z of the step into the device's noise canvas (zeros for a step without noise). Called
// in beginStep, outside any capture; the staging buffer is free again because endStep waited
// for the previous step's copy.
void CudaTileDevice::uploadStepNoise(int step) {
    const float sigma = pass_->coefficients.at(static_cast<std::size_t>(step)).sigma;
    const std::size_t n = canvasSize();
    const std::vector<float>* z = stepNoiseGiven_;
    stepNoiseGiven_ = nullptr;
    if (sigma == 0.0f) {
        TESSERA_CHECK(cudaMemsetAsync(stepNoise_.data(), 0, n * sizeof(float), stream()));
        return;
    }
    if (!z || z->size() != n)
        throw std::logic_error("CudaTileDevice: a step with noise has no host noise of the canvas's size");
    float* host = stepNoiseHost_.as<float>();
    for (std::size_t i = 0; i < n; ++i) host[i] = sigma * (*z)[i];
    TESSERA_CHECK(cudaMemcpyAsync(stepNoise_.data(), host, n * sizeof(float), cudaMemcpyHostToDevice, stream()));
}

namespace {

// torch.Generator("cuda").manual_seed(seed) on one GPU: each randn runs torch's curand layout on
// the device (kernels/ops/TorchCudaRandn.cuh) and is read back (the host composes A1111's noise).
class TorchCudaDeviceGenerator final : public NormalGenerator {
public:
    TorchCudaDeviceGenerator(std::uint64_t seed, int device) : device_(device) { generator_.seed = seed; }
    void randn(float* out, std::size_t count) override {
        if (count == 0) return;
        TESSERA_CHECK(cudaSetDevice(device_));
        if (buffer_.bytes() < count * sizeof(float)) buffer_ = DeviceBuffer(count * sizeof(float));
        launchTorchCudaRandn(generator_, buffer_.as<float>(), static_cast<long long>(count),
                             torchCudaThreadCapOf(device_), nullptr);
        TESSERA_CHECK(cudaMemcpy(out, buffer_.data(), count * sizeof(float), cudaMemcpyDeviceToHost));
    }

private:
    int device_;
    TorchCudaGenerator generator_;
    DeviceBuffer buffer_;
};

}  // namespace

NormalGeneratorFactory CudaTileDevice::torchCudaGenerators() {
    const int device = device_;
    return [device](std::uint64_t seed) -> std::unique_ptr<NormalGenerator> {
        return std::make_unique<TorchCudaDeviceGenerator>(seed, device);
    };
}

bool CudaTileDevice::checkCanvas() {
    launchNonFiniteCheck(DType::F32, x_, static_cast<long long>(canvasSize()), 1, 1, state_, kNonFiniteLatents,
                         nonFinite_, stream());
    return false;
}

void CudaTileDevice::abandonStep() {
    closeRanges(3);
    for (int l = 0; l < lanes_; ++l) TESSERA_CHECK(cudaStreamSynchronize(laneStream(l)));
}

// ---------------------------------------------------------------------------------------------
// Results

std::vector<float> CudaTileDevice::readPreview(bool x0) {
    std::vector<float> image(canvasSize());
    const float* source = x0 ? arena_.at<float>(arena_.preview) : x_;
    TESSERA_CHECK(
        cudaMemcpyAsync(image.data(), source, image.size() * sizeof(float), cudaMemcpyDeviceToHost, stream()));
    TESSERA_CHECK(cudaStreamSynchronize(stream()));
    return image;
}

std::vector<float> CudaTileDevice::readCanvas() { return readPreview(false); }

SeamSums CudaTileDevice::readSeams() {
    SeamSums s{std::vector<double>(canvasSize()), std::vector<double>(canvasSize())};
    TESSERA_CHECK(cudaMemcpyAsync(s.sum.data(), arena_.at<double>(arena_.seam), s.sum.size() * sizeof(double),
                                  cudaMemcpyDeviceToHost, stream()));
    TESSERA_CHECK(cudaMemcpyAsync(s.sumSq.data(), arena_.at<double>(arena_.seamSq), s.sumSq.size() * sizeof(double),
                                  cudaMemcpyDeviceToHost, stream()));
    TESSERA_CHECK(cudaStreamSynchronize(stream()));
    return s;
}

void CudaTileDevice::finishRun(RunRecord& record) {
    closeRanges(1);
    const GraphCacheCounters& c = graphs_.counters();
    const GraphCacheCounters& b = countersBefore_;
    GraphStats& g = record.graphs;
    g.mode = std::string(toString(mode_));
    g.fallbackReason = fallbackReason_;
    g.captures = static_cast<int>(c.captures - b.captures);
    g.hits = static_cast<int>(c.hits - b.hits);
    g.misses = static_cast<int>(c.misses - b.misses);
    g.evictions = static_cast<int>(c.evictions - b.evictions);
    g.updates = static_cast<int>(c.updates - b.updates);
    g.instantiations = static_cast<int>(c.instantiations - b.instantiations);
    g.invalidations = static_cast<int>(c.invalidations - b.invalidations);
    g.failures = static_cast<int>(c.failures - b.failures);
    g.captureMs = c.captureMs - b.captureMs;
    g.instantiateMs = c.instantiateMs - b.instantiateMs;
    g.updateMs = c.updateMs - b.updateMs;
    g.graphMemMiB = graphs_.deviceMiB();
    g.cacheCapacity = graphs_.capacity();
    g.cacheEntries = graphs_.size();
    g.used.clear();
    g.nodes = 0;
    for (const std::string& key : usedOrder_) {
        g.used.push_back(usedGraphs_[key]);
        g.nodes = std::max(g.nodes, usedGraphs_[key].nodes);
    }
    record.peakDeviceMiB = peak_;
}

}  // namespace tessera
