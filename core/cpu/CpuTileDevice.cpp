#include "core/cpu/CpuTileDevice.h"

#include "core/cpu/CpuBackend.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <stdexcept>

#include <unistd.h>

#include "core/cpu/HostMemoryEstimate.h"
#include "core/run/NonFiniteError.h"
#include "core/run/RunRecord.h"
#include "core/sampling/BlendWindow.h"
#include "core/sampling/Philox.h"
#include "core/sampling/TilePlan.h"

namespace tessera {

namespace {

// Resident set size of this process in MiB (Linux), 0 where unknown: the CPU's
// stand-in for device memory in MemorySample.
double residentMiB() {
    std::ifstream statm("/proc/self/statm");
    long pages = 0, resident = 0;
    if (!(statm >> pages >> resident)) return 0;
    return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

// A canvas's geometry: element (c, y, x) of a float32 C x H x W tensor.
struct Canvas {
    int channels = 0, height = 0, width = 0;
    std::size_t plane() const { return static_cast<std::size_t>(height) * width; }
    std::size_t size() const { return plane() * channels; }
    std::size_t index(int c, int y, int x) const { return (static_cast<std::size_t>(c) * height + y) * width + x; }
};

Canvas inputCanvas(const TiledPass& pass) { return {pass.inChannels, pass.height, pass.width}; }
Canvas outputCanvas(const TiledPass& pass) { return {pass.outChannels, pass.outHeight, pass.outWidth}; }

// Host loops over a canvas run on the pool in pieces of this many elements (each element is
// written by one piece, so the results do not depend on the thread count).
constexpr std::int64_t kCanvasGrain = 1 << 14;

// body(i) for every i in [0, n), on the pool.
template <class F>
void forEachElement(cpu::WorkerPool& pool, std::size_t n, F&& body) {
    pool.parallelRange(static_cast<std::int64_t>(n), kCanvasGrain, [&](std::int64_t begin, std::int64_t end) {
        for (auto i = static_cast<std::size_t>(begin); i < static_cast<std::size_t>(end); ++i) body(i);
    });
}

// z(draw, i) keyed by canvas element.
void fillNoise(cpu::WorkerPool& pool, std::vector<float>& z, std::uint64_t seed, std::uint32_t draw) {
    forEachElement(pool, z.size(), [&](std::size_t i) { z[i] = philoxNormal(seed, draw, i); });
}

template <class T>
void fillParallel(cpu::WorkerPool& pool, std::vector<T>& v, T value) {
    forEachElement(pool, v.size(), [&](std::size_t i) { v[i] = value; });
}

bool allFiniteParallel(cpu::WorkerPool& pool, const float* data, std::size_t n) {
    std::atomic<bool> finite{true};
    pool.parallelRange(static_cast<std::int64_t>(n), kCanvasGrain, [&](std::int64_t begin, std::int64_t end) {
        if (!allFinite(data + begin, static_cast<std::size_t>(end - begin)))
            finite.store(false, std::memory_order_relaxed);
    });
    return finite.load();
}

// n values of canvas row `row` (width w) from plan column fx on, the row rolled by dx
// (core/base/CanvasShift.h): at most two runs, the second from the row's start.
template <class Op>
void rolledRow(const float* row, int w, int fx, int n, int dx, Op&& put) {
    const int c0 = rolledSource(fx, dx, w);
    const int first = std::min(n, w - c0);
    for (int q = 0; q < first; ++q) put(q, row[c0 + q]);
    for (int q = first; q < n; ++q) put(q, row[q - first]);
}

// The canvas crops of tiles [first, first + count), scaled for the model's input, into tileIn:
// one task per (tile, channel); the tiles over the canvas rolled by `shift`.
void gatherTiles(cpu::WorkerPool& pool, const TilePlan& plan, const Canvas& canvas, const std::vector<float>& x,
                 int first, int count, float inputScale, CanvasShift shift, float* tileIn) {
    const int tileH = plan.tileH(), tileW = plan.tileW();
    const std::size_t tileElems = static_cast<std::size_t>(canvas.channels) * tileH * tileW;
    pool.parallelFor(std::int64_t(count) * canvas.channels, [&](std::int64_t task) {
        const int b = static_cast<int>(task / canvas.channels), c = static_cast<int>(task % canvas.channels);
        const TileRect& r = plan.tile(first + b);
        float* dst = tileIn + b * tileElems;
        for (int i = 0; i < tileH; ++i) {
            const float* src = x.data() + canvas.index(c, rolledSource(r.y + i, shift.dy, canvas.height), 0);
            float* row = dst + (static_cast<std::size_t>(c) * tileH + i) * tileW;
            rolledRow(src, canvas.width, r.x, tileW, shift.dx, [&](int q, float v) { row[q] = v * inputScale; });
        }
    });
}

// A ControlNet's hint crops of tiles [first, first + count): the hint canvas (f times the input
// canvas) at each tile's position and size times f, rolled by the step's shift times f.
void gatherHints(cpu::WorkerPool& pool, const TilePlan& plan, int f, const Canvas& hint, const std::vector<float>& h,
                 int first, int count, CanvasShift shift, float* dst) {
    const int tileH = plan.tileH() * f, tileW = plan.tileW() * f;
    const std::size_t tileElems = static_cast<std::size_t>(hint.channels) * tileH * tileW;
    pool.parallelFor(std::int64_t(count) * hint.channels, [&](std::int64_t task) {
        const int b = static_cast<int>(task / hint.channels), c = static_cast<int>(task % hint.channels);
        const TileRect& r = plan.tile(first + b);
        for (int i = 0; i < tileH; ++i) {
            const float* src = h.data() + hint.index(c, rolledSource(r.y * f + i, shift.dy * f, hint.height), 0);
            float* row = dst + b * tileElems + (static_cast<std::size_t>(c) * tileH + i) * tileW;
            rolledRow(src, hint.width, r.x * f, tileW, shift.dx * f, [&](int q, float v) { row[q] = v; });
        }
    });
}

// What one step scatters: its coefficients, noise and previous x0 (nullptr when K.cprev == 0),
// and which accumulators it feeds.
struct ScatterStep {
    const StepCoefficients& K;
    const std::vector<float>& x;
    const std::vector<float>& z;
    const float* x0Prev;
    bool sampleFusion, stepNoise, wantEps, lastStep;
};

// The accumulators a scatter adds to: sum of w * x'_t (sample fusion), sum of w * eps (noise
// fusion, previews) and, at the last step, the seam statistics.
struct Accumulators {
    std::vector<float>& acc;
    std::vector<float>& accEps;
    SeamSums& seams;
};

// The step's scatter and fuse inputs; the previous x0 only where the step reads it.
ScatterStep stepOf(const StepCoefficients& K, const std::vector<float>& x, const std::vector<float>& z,
                   const std::vector<float>& x0, bool stepNoise, const StepVariant& variant) {
    if (K.cprev != 0.0f && x0.size() != x.size())
        throw std::logic_error("CpuTileDevice: the step reads the previous x0, but no step wrote it (keepX0 off)");
    return ScatterStep{K,
                       x,
                       z,
                       K.cprev != 0.0f ? x0.data() : nullptr,
                       variant.sampleFusion,
                       stepNoise,
                       variant.blendsNoise(),
                       variant.seams};
}

// Window-weighted scatter of each tile's contribution (x'_t or eps_t) of tiles [first, first + count)
// (within plan rows [y0, y1)). Tiles overlap, so the tasks are plan rows (one per channel and row:
// each is one canvas row, rolled by `shift`), each adding the tiles that cover it in tile order:
// every element sums in the same order as one thread would. The weights and the normalizer are the
// plan's, the canvases' elements those under the plan's pixels.
void scatterTiles(cpu::WorkerPool& pool, const TilePlan& plan, const BlendWeights& weights, const Canvas& canvas,
                  const ScatterStep& step, int first, int count, int y0, int y1, CanvasShift shift,
                  const float* tileOut, Accumulators a) {
    const int tileH = plan.tileH(), tileW = plan.tileW();
    const std::size_t tileElems = static_cast<std::size_t>(canvas.channels) * tileH * tileW;
    const std::vector<float>& normalizer = weights.normalizer();  // N(p), height x width
    const int rows = y1 - y0;
    pool.parallelFor(std::int64_t(canvas.channels) * rows, [&](std::int64_t task) {
        const int c = static_cast<int>(task / rows), y = y0 + static_cast<int>(task % rows);
        for (int b = 0; b < count; ++b) {
            const TileRect& r = plan.tile(first + b);
            const int i = y - r.y;
            if (i < 0 || i >= tileH) continue;
            const float* eps = tileOut + b * tileElems;
            const float* tileWeight = weights.tileWeights(first + b);
            const int canvasY = rolledSource(y, shift.dy, canvas.height);
            for (int q = 0; q < tileW; ++q) {
                const std::size_t p = canvas.index(c, canvasY, rolledSource(r.x + q, shift.dx, canvas.width));
                const std::size_t pix = static_cast<std::size_t>(y) * canvas.width + r.x + q;
                const float e = eps[(static_cast<std::size_t>(c) * tileH + i) * tileW + q];
                const float w = tileWeight[static_cast<std::size_t>(i) * tileW + q];
                float v = e;
                if (step.sampleFusion) {
                    v = applyStep(step.K, step.x[p], e, step.stepNoise ? step.z[p] : 0.0f,
                                  step.x0Prev ? step.x0Prev[p] : 0.0f);
                    a.acc[p] += w * v;
                }
                if (step.wantEps) a.accEps[p] += w * e;
                if (step.lastStep && w != 0.0f) {
                    const double wn = static_cast<double>(w) / normalizer[pix];
                    a.seams.sum[p] += wn * v;
                    a.seams.sumSq[p] += wn * static_cast<double>(v) * v;
                }
            }
        }
    });
}

// The end of a step: normalise by N(p) = sum of the windows covering p (sample fusion), or one
// scheduler update with the normalised noise (noise fusion, reading the previous x0 from x0
// before it is replaced). With `writeX0`, x0 becomes this step's blended x0 prediction (a
// preview far more legible than noisy x_t, and the next step's previous x0). A step that uses
// the history canvases (`history`, kStepHistory of them; TiledPass::keepsHistory) adds their
// weighted sum to the update, the same for every tile over p, and then folds x and the blended
// x0 into them. The normalizer is the plan's: each canvas pixel reads it at the plan pixel over it
// (the canvas rolled by `shift`).
void fuseStep(cpu::WorkerPool& pool, const Canvas& canvas, const std::vector<float>& normalizer, CanvasShift shift,
              const ScatterStep& step, bool writeX0, const std::vector<float>& acc, const std::vector<float>& accEps,
              std::vector<float>& x, std::vector<float>& x0, std::vector<float>* history) {
    const StepCoefficients& K = step.K;
    const std::size_t plane = canvas.plane();
    if (writeX0) x0.resize(canvas.size());
    const bool withHistory = history != nullptr && usesHistory(K);
    if (withHistory && !step.wantEps)
        throw std::logic_error("CpuTileDevice: a step with history needs the blended noise (StepVariant::history)");
    const bool shifted = shift != CanvasShift{};
    const auto planPixel = [&](std::size_t pix) {
        if (!shifted) return pix;
        const int py = static_cast<int>(pix / canvas.width), px = static_cast<int>(pix % canvas.width);
        return static_cast<std::size_t>(rolledPlace(py, shift.dy, canvas.height)) * canvas.width +
               rolledPlace(px, shift.dx, canvas.width);
    };
    forEachElement(pool, canvas.size(), [&](std::size_t p) {
        const float n = normalizer[planPixel(p % plane)];
        const float e = step.wantEps ? accEps[p] / n : 0.0f;
        const float xOld = x[p];
        if (step.sampleFusion)
            x[p] = acc[p] / n;
        else
            x[p] = applyStep(K, xOld, e, step.stepNoise ? step.z[p] : 0.0f, step.x0Prev ? step.x0Prev[p] : 0.0f);
        const float x0p = predictX0(K, xOld, e);
        if (withHistory) {
            float h[kStepHistory];
            for (std::size_t j = 0; j < kStepHistory; ++j) h[j] = history[j][p];
            x[p] += K.hw[0] * h[0] + K.hw[1] * h[1] + K.hw[2] * h[2];
            for (std::size_t j = 0; j < kStepHistory; ++j)
                history[j][p] = nextHistory(K, static_cast<int>(j), h[j], xOld, x0p);
        }
        if (writeX0) x0[p] = x0p;
    });
}

}  // namespace

CpuTileDevice::CpuTileDevice(Backend& backend) : backend_(&backend), cpuBackend_(dynamic_cast<CpuBackend*>(&backend)) {}

CpuTileDevice::CpuTileDevice(HostTileFunction function) : function_(std::move(function)) {
    if (!function_) throw std::invalid_argument("CpuTileDevice: a tile function is required");
}

CpuTileDevice::~CpuTileDevice() = default;

void CpuTileDevice::setThreads(int threads) {
    if (cpuBackend_) {
        cpuBackend_->setThreads(threads);
        return;
    }
    if (!ownPool_ || ownPool_->threads() != cpu::resolveThreads(threads))
        ownPool_ = std::make_unique<cpu::WorkerPool>(threads);
}

cpu::WorkerPool& CpuTileDevice::pool() {
    if (cpuBackend_) return cpuBackend_->pool();
    if (!ownPool_) ownPool_ = std::make_unique<cpu::WorkerPool>(0);
    return *ownPool_;
}

std::string tileBatchHint(int batchSize, int tiles, int threads) {
    if (threads < 4 || tiles <= batchSize || 2 * batchSize >= threads) return {};
    const int better = std::min(threads, tiles);
    const std::string one = batchSize == 1 ? "1 tile" : std::to_string(batchSize) + " tiles";
    return "threads: a tile batch of " + std::to_string(batchSize) + " gives the " + std::to_string(threads) +
           " threads " + one + " at a time to share layer by layer; a tile batch of " + std::to_string(better) +
           " would give each thread a tile of its own (the same image, usually faster, with more host memory)";
}

DevicePlan CpuTileDevice::prepare(const DevicePrepare& request, RunRecord& record) {
    setThreads(request.config.threads);
    const BackendInfo info = backend_ ? backend_->info() : BackendInfo{"cpu", "host tile function"};
    record.environment.backend = info.name;
    record.environment.device = info.device;
    record.environment.threads = pool().threads();
    record.graphs.mode = "off";
    if (request.config.graphs != GraphMode::Off)
        record.messages.push_back("graphs: the " + info.name + " backend has no CUDA graphs; ran with graphs off");
    if (backend_) {
        const Denoiser& model = request.model;
        const PreparedShape shape{request.modelGeneration, request.batchSize, request.tileH, request.tileW};
        graphTileScale_ = request.graphTileScale;
        if (!prepared_ || !(*prepared_ == shape)) {
            prepared_.reset();
            backend_->prepareGraph(*model.graph, *model.weights, request.batchSize, request.tileH * graphTileScale_,
                                   request.tileW * graphTileScale_);
            prepared_ = shape;
        }
        // Prepared: the CPU backend's device line now says how a tile batch runs over the threads.
        record.environment.device = backend_->info().device;
        if (cpuBackend_) {
            std::string hint = tileBatchHint(request.batchSize, request.tiles, pool().threads());
            if (!cpuBackend_->parallelismNote().empty())
                record.messages.push_back("threads: tile batches ran op by op: " + cpuBackend_->parallelismNote());
            else if (!hint.empty())
                record.messages.push_back(std::move(hint));
        }
        contextCond_.clear();
        contextUncond_.clear();
        for (int i = 0; model.conditioned() && i < request.batchSize; ++i) {
            contextCond_.insert(contextCond_.end(), model.cond.begin(), model.cond.end());
            contextUncond_.insert(contextUncond_.end(), model.uncond.begin(), model.uncond.end());
        }
    }
    return DevicePlan{1, Precision::FP32};
}

std::size_t CpuTileDevice::outTileElems() const {
    return static_cast<std::size_t>(pass_->outChannels) * pass_->outPlan->tileH() * pass_->outPlan->tileW();
}

void CpuTileDevice::beginRun(const TiledPass& pass, RunRecord&, std::function<void(const std::string&)>) {
    const std::size_t addedSize = static_cast<std::size_t>(pass.addedCondDim) * pass.tileCount();
    if (pass.addedCondDim > 0 &&
        (pass.addedCond.size() != addedSize || (pass.guidance && pass.addedUncond.size() != addedSize)))
        throw std::logic_error("CpuTileDevice: the pass's added conditioning is not one row per tile and branch");
    pass_ = &pass;
    const std::size_t inSize = inputCanvas(pass).size(), outSize = outputCanvas(pass).size();
    x_.assign(inSize, 0.0f);
    y_.assign(pass.inPlace ? 0 : outSize, 0.0f);
    z_.assign(inSize, 0.0f);
    acc_.assign(outSize, 0.0f);
    accEps_.assign(outSize, 0.0f);
    seams_ = {};
    x0_.clear();
    for (std::vector<float>& h : history_) h.assign(pass.keepsHistory() ? outSize : 0, 0.0f);
    const std::size_t batch = static_cast<std::size_t>(pass.batchSize);
    tileIn_.assign(static_cast<std::size_t>(pass.inChannels) * pass.plan->tileH() * pass.plan->tileW() * batch, 0.0f);
    tileOut_.assign(outTileElems() * batch, 0.0f);
    tileUncond_.assign(pass.guidance ? tileOut_.size() : 0, 0.0f);
    tileT_.assign(batch, 0.0f);
    hintIn_.clear();
    controlFilm_.clear();
    for (const PassControl& c : pass.controls) {
        // A hint at the graph's tile scale, or a latent-sized input (a colour fix's latent: factor 1).
        if (c.factor != graphTileScale_ && c.factor != 1)
            throw std::logic_error("CpuTileDevice: a ControlNet's hint factor is not the graph's tile scale");
        hintIn_.emplace_back(static_cast<std::size_t>(c.channels) * pass.plan->tileH() * c.factor * pass.plan->tileW() *
                                 c.factor * batch,
                             0.0f);
        for (const int C : c.scaleWidths) controlFilm_.emplace_back(2 * static_cast<std::size_t>(C) * batch, 0.0f);
    }
}

void CpuTileDevice::startCanvas(const CanvasStart& start) {
    const std::vector<float>* image = start.image;
    if (start.kind != CanvasStart::Kind::Noise && (!image || image->size() != x_.size()))
        throw std::invalid_argument("CpuTileDevice: the start image does not have the input canvas's size");
    switch (start.kind) {
        case CanvasStart::Kind::Noise:
            fillNoise(pool(), z_, pass_->seed, start.draw);
            forEachElement(pool(), x_.size(), [&](std::size_t i) { x_[i] = z_[i] * start.sigma; });
            break;
        case CanvasStart::Kind::NoisedImage:
            fillNoise(pool(), z_, pass_->seed, start.draw);
            forEachElement(pool(), x_.size(),
                           [&](std::size_t i) { x_[i] = (start.a * (*image)[i] + start.b * z_[i]) * start.scale; });
            break;
        case CanvasStart::Kind::Image:
            x_ = *image;
            break;
    }
    std::fill(y_.begin(), y_.end(), 0.0f);
    for (std::vector<float>& h : history_) std::fill(h.begin(), h.end(), 0.0f);
    hasX0Prev_ = false;
}

void CpuTileDevice::beginStep(int step, const StepVariant& variant) {
    step_ = step;
    K_ = pass_->coefficients.at(static_cast<std::size_t>(step));
    if (!hasX0Prev_) K_ = withoutPreviousX0(K_);  // the first step after startCanvas
    hasX0Prev_ = true;
    stepNoise_ = K_.sigma != 0.0f;
    if (stepNoise_) {
        z_.resize(output().size());
        if (pass_->hostStepNoise) {
            if (!stepNoiseGiven_ || stepNoiseGiven_->size() != z_.size())
                throw std::logic_error("CpuTileDevice: a step with noise has no host noise of the canvas's size");
            z_ = *stepNoiseGiven_;
        } else {
            fillNoise(pool(), z_, pass_->seed, static_cast<std::uint32_t>(step + 1));
        }
    }
    stepNoiseGiven_ = nullptr;
    if (variant.sampleFusion) fillParallel(pool(), acc_, 0.0f);
    if (variant.blendsNoise()) fillParallel(pool(), accEps_, 0.0f);
    if (variant.seams) {
        seams_.sum.resize(output().size());
        seams_.sumSq.resize(output().size());
        fillParallel(pool(), seams_.sum, 0.0);
        fillParallel(pool(), seams_.sumSq, 0.0);
    }
    std::fill(tileT_.begin(), tileT_.end(), K_.timestep);
}

bool CpuTileDevice::runStep(const StepVariant&, const std::function<bool(bool)>& body) { return body(false); }

StepReport CpuTileDevice::endStep() {
    StepReport report;
    report.usedMiB = residentMiB();
    return report;
}

void CpuTileDevice::gather(const TileBatch& batch) {
    const CanvasShift shift = pass_->shift(step_);
    gatherTiles(pool(), *pass_->plan, inputCanvas(*pass_), x_, batch.first, batch.count, K_.modelInputScale, shift,
                tileIn_.data());
    // Each ControlNet's hint: the hint canvas cropped at the tiles' positions times its factor.
    for (std::size_t i = 0; i < pass_->controls.size(); ++i) {
        const PassControl& c = pass_->controls[i];
        const int f = c.factor;
        gatherHints(pool(), *pass_->plan, f, Canvas{c.channels, pass_->height * f, pass_->width * f}, *c.hint,
                    batch.first, batch.count, shift, hintIn_[i].data());
    }
}

void CpuTileDevice::evaluate(const TileBatch& batch, Branch branch) {
    const bool conditional = branch == Branch::Conditional;
    float* out = conditional ? tileOut_.data() : tileUncond_.data();
    if (!backend_) {
        function_(tileIn_.data(), tileT_.data(), batch.count, out, branch);
    } else if (contextCond_.empty()) {
        backend_->forward(tileIn_.data(), tileT_.data(), batch.count, out);
    } else {
        std::vector<const float*> inputs{tileIn_.data(), tileT_.data(),
                                         conditional ? contextCond_.data() : contextUncond_.data()};
        if (pass_->addedCondDim > 0) {  // the batch's tiles' rows of the pass's table (ids first..first+count)
            const std::vector<float>& table = conditional ? pass_->addedCond : pass_->addedUncond;
            const auto dim = static_cast<std::ptrdiff_t>(pass_->addedCondDim);
            inputs.push_back(table.data() + batch.first * dim);
        }
        std::size_t film = 0;  // ControlNets: the hint crops, then the step's and branch's scale as FiLM
        for (std::size_t i = 0; i < pass_->controls.size(); ++i) {
            const PassControl& c = pass_->controls[i];
            inputs.push_back(hintIn_[i].data());
            const auto k = static_cast<std::size_t>(step_);
            const float s = conditional ? c.condScale.at(k) : c.uncondScale.at(k);
            for (const int C : c.scaleWidths) {
                std::vector<float>& v = controlFilm_[film++];
                const auto width = static_cast<std::size_t>(C);
                for (std::size_t b = 0; b < static_cast<std::size_t>(batch.count); ++b) {
                    std::fill_n(v.begin() + static_cast<std::ptrdiff_t>(b * 2 * width), width, s - 1.0f);
                    std::fill_n(v.begin() + static_cast<std::ptrdiff_t>((b * 2 + 1) * width), width, 0.0f);
                }
                inputs.push_back(v.data());
            }
        }
        backend_->run(inputs, batch.count, {out});
    }
}

void CpuTileDevice::combineGuidance(const TileBatch& batch, float scale) {
    forEachElement(pool(), outTileElems() * static_cast<std::size_t>(batch.count), [&](std::size_t i) {
        const float u = tileUncond_[i];
        tileOut_[i] = u + scale * (tileOut_[i] - u);
    });
}

bool CpuTileDevice::checkOutput(const TileBatch& batch) {
    return !allFiniteParallel(pool(), tileOut_.data(), outTileElems() * static_cast<std::size_t>(batch.count));
}

void CpuTileDevice::scatter(const TileBatch& batch, const StepVariant& variant) {
    const ScatterStep step = stepOf(K_, output(), z_, x0_, stepNoise_, variant);
    scatterTiles(pool(), *pass_->outPlan, *pass_->weights, outputCanvas(*pass_), step, batch.first, batch.count,
                 batch.y0, batch.y1, pass_->shift(step_), tileOut_.data(), Accumulators{acc_, accEps_, seams_});
}

void CpuTileDevice::fuse(const StepVariant& variant) {
    const ScatterStep step = stepOf(K_, output(), z_, x0_, stepNoise_, variant);
    fuseStep(pool(), outputCanvas(*pass_), pass_->weights->normalizer(), pass_->shift(step_), step, variant.writesX0(),
             acc_, accEps_, output(), x0_, variant.history ? history_.data() : nullptr);
}

bool CpuTileDevice::checkCanvas() { return !allFiniteParallel(pool(), output().data(), output().size()); }

std::vector<float> CpuTileDevice::readPreview(bool x0) { return x0 ? x0_ : output(); }

std::vector<float> CpuTileDevice::readCanvas() { return output(); }

SeamSums CpuTileDevice::readSeams() { return std::move(seams_); }

Backend& CpuTileDevice::wholeGraphBackend(const RunConfig& config) {
    if (!whole_) whole_ = std::make_unique<CpuBackend>(config.threads);
    whole_->setThreads(config.threads);
    return *whole_;
}

Backend& CpuTileDevice::textBackend() {
    if (!whole_) whole_ = std::make_unique<CpuBackend>();
    return *whole_;
}

std::optional<VaeMemoryBudget> CpuTileDevice::vaeMemoryBudget(const RunConfig&) {
    const std::optional<HostMemory> host = availableHostMemory();
    if (!host) return std::nullopt;
    return VaeMemoryBudget{host->availableBytes, 4, true, "host: " + host->source};
}

}  // namespace tessera
