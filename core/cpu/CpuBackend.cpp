#include "core/cpu/CpuBackend.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <fstream>
#include <stdexcept>

#include <cblas.h>

#include "core/base/FormatNumber.h"
#include "core/base/HostMemory.h"
#include "core/graph/TimestepEmbedding.h"
#include "core/models/unet/UNetGraph.h"
#include "core/models/unet/UNetModel.h"

namespace tessera {
namespace cpu {

namespace {

// Attention's Q, K, V and O of the images of a tile batch are made a few images at a time, so
// their size stays bounded for large tiles and batches (64 MiB, or one image).
constexpr std::int64_t kMaxAttentionFloats = 16 << 20;

}  // namespace

// ---------------------------------------------------------------- images over threads

ImageSplit splitImages(int images, int threads) {
    ImageSplit split;
    split.opByOp = std::max(images, 0);
    if (images < 2 || threads < 2) return split;
    // Every image a whole forward, on as many lanes as there are threads or images; a thread
    // without an image of its own helps a lane that still has one, op by op inside that lane
    // (CpuBackend::run), so a last partial round (13 images on 16 threads, or the 9 left of 25)
    // keeps every thread busy.
    split.wholeForwards = images;
    split.lanes = std::min(threads, images);
    split.opByOp = 0;
    return split;
}

}  // namespace cpu

// ---------------------------------------------------------------- CpuBackend

namespace {

std::string cpuModelName() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("model name", 0) == 0) {
            const auto colon = line.find(':');
            if (colon != std::string::npos) {
                std::string name = line.substr(colon + 1);
                name.erase(0, name.find_first_not_of(" \t"));
                return name;
            }
        }
    }
    return "unknown CPU";
}

cpu::TokenAttentionShape tokenAttentionShape(const ModelGraph& g, const GraphOp& op, int tileH, int tileW) {
    cpu::TokenAttentionShape s;
    s.tokens = static_cast<int>(g.rows(op.input, tileH, tileW));
    s.channels = g.value(op.input).channels;
    const int kv = op.input2 >= 0 ? op.input2 : op.input;
    s.contextTokens = static_cast<int>(g.rows(kv, tileH, tileW));
    s.contextChannels = g.value(kv).channels;
    s.heads = op.heads;
    s.causal = op.causal;
    s.inner = op.innerChannels;
    s.scale = op.scoreScale;
    s.buckets = op.buckets;
    s.maxDistance = op.maxDistance;
    return s;
}

std::string shapeText(const std::vector<std::int64_t>& shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

}  // namespace

CpuBackend::CpuBackend(int threads)
    : pool_(std::make_unique<cpu::WorkerPool>(threads)), cpuName_(cpuModelName()), blasKernels_(openblasKernels()) {}

CpuBackend::~CpuBackend() = default;

BackendInfo CpuBackend::info() const {
    std::string device = cpuName_ + " (" + std::to_string(pool_->threads()) + " threads, " + blasKernels_ + ")";
    if (prepared_) device += ": " + parallelism();
    return BackendInfo{"cpu", device};
}

void CpuBackend::setThreads(int threads) {
    if (cpu::resolveThreads(threads) == pool_->threads()) return;
    pool_ = std::make_unique<cpu::WorkerPool>(threads);
    pool_->reserveScratch(workerFloats_);
    if (prepared_) planParallelism();
}

void CpuBackend::setWholeForwards(bool allowed) {
    if (allowed == wholeForwards_) return;
    wholeForwards_ = allowed;
    if (prepared_) planParallelism();
}

void CpuBackend::setProfiling(bool on) {
    if (on == profiling_) return;
    profiling_ = on;
    if (prepared_) planParallelism();
}

void CpuBackend::setWholeForwardMemory(std::optional<std::uint64_t> bytes) {
    wholeForwardMemory_ = bytes;
    if (prepared_) planParallelism();
}

std::string CpuBackend::parallelism() const {
    if (!prepared_) return "not prepared";
    const cpu::ImageSplit split = cpu::splitImages(batch_, pool_->threads());
    const std::string batch = "tile batch of " + std::to_string(batch_);
    if (lanes_.empty()) return batch + " op by op" + (note_.empty() ? "" : " (" + note_ + ")");
    return batch + ": " + std::to_string(split.lanes) +
           " images in parallel, whole forwards; a thread without an image helps another's";
}

std::size_t CpuBackend::preparedFloats() const {
    std::size_t n = batched_.floats() + pool_->scratchFloats();
    for (const Lane& lane : lanes_) n += lane.space.floats() + lane.pool->scratchFloats();
    for (const std::vector<float>& s : helperScratch_) n += s.size();
    return n;
}

void CpuBackend::prepare(const UNetModel& model, int batch, int tileH, int tileW) {
    prepareGraph(unet2DExecutionGraph(model.config()), model.tensors(), batch, tileH, tileW);
}

void CpuBackend::forward(const float* x, const float* timesteps, int batch, float* out) {
    run({x, timesteps}, batch, {out});
}

namespace {

// The plan of one op for `batch` tiles of tileH x tileW, and the scratch it needs.
struct OpPlan {
    int scratchImages = 1, queryBlock = 1;
    std::size_t shared = 0, perWorker = 0;
};

// A Conv op's shape at this tile size (bindWeights checks it against the graph's output size).
cpu::ConvShape convShape(const ModelGraph& graph, const GraphOp& op, int tileH, int tileW) {
    const GraphValue& x = graph.value(op.input);
    cpu::ConvShape s;
    s.cin = x.channels;
    s.cout = op.channels;
    s.h = tileH / x.divisor;
    s.w = tileW / x.divisor;
    s.kernel = op.kernel;
    s.stride = op.stride;
    s.padTop = s.padLeft = op.padBegin;
    s.hout = (s.h + op.padBegin + op.padEnd - op.kernel) / op.stride + 1;
    s.wout = (s.w + op.padBegin + op.padEnd - op.kernel) / op.stride + 1;
    return s;
}

OpPlan planOp(const ModelGraph& graph, const GraphOp& op, int batch, int tileH, int tileW) {
    OpPlan plan;
    if (op.kind == OpKind::Conv) {
        plan.perWorker = cpu::convWorkerFloats(convShape(graph, op, tileH, tileW));
    } else if (op.kind == OpKind::Attention) {
        const cpu::TokenAttentionShape s = tokenAttentionShape(graph, op, tileH, tileW);
        const std::size_t perImage = graph.value(op.input).kind == ValueKind::Tokens
                                         ? cpu::tokenAttentionScratchFloats(s)
                                         : cpu::attentionScratchFloats(s.channels, s.tokens);
        plan.scratchImages = static_cast<int>(std::clamp<std::int64_t>(
            cpu::kMaxAttentionFloats / std::max<std::int64_t>(static_cast<std::int64_t>(perImage), 1), 1, batch));
        plan.queryBlock = cpu::attentionTaskRows(s.tokens, s.contextTokens, cpu::kWorkerFloats);
        plan.shared = perImage * static_cast<std::size_t>(plan.scratchImages);
        plan.perWorker = static_cast<std::size_t>(std::int64_t(plan.queryBlock) * s.contextTokens);
    } else if (op.kind == OpKind::PackedAttention) {
        const std::int64_t tokens = graph.rows(op.input, tileH, tileW);
        plan.perWorker = static_cast<std::size_t>(cpu::packedAttentionTaskRows(tokens) * tokens);
    } else if (op.kind == OpKind::GEGLU) {
        const auto rows = static_cast<int>(graph.rows(op.input, tileH, tileW));
        plan.perWorker = cpu::gegluWorkerFloats(rows, graph.value(op.input).channels, op.channels);
    }
    return plan;
}

}  // namespace

CpuBackend::Scratch CpuBackend::scratchNeeded(const ModelGraph& graph, int batch, int tileH, int tileW) {
    Scratch need;
    for (const GraphOp& op : graph.ops()) {
        const OpPlan plan = planOp(graph, op, batch, tileH, tileW);
        need.shared = std::max(need.shared, plan.shared);
        need.perWorker = std::max(need.perWorker, plan.perWorker);
    }
    return need;
}

std::size_t CpuBackend::activationFloats(const ModelGraph& graph, int batch, int tileH, int tileW) {
    graph.checkTileSize(tileH, tileW);
    return planWorkspace(graph, batch, tileH, tileW).floats();
}

std::vector<CpuBackend::OpWeights> CpuBackend::bindWeights(const ModelGraph& graph, const TensorMap& weights, int tileH,
                                                           int tileW) {
    std::vector<OpWeights> bound(graph.ops().size());
    for (std::size_t i = 0; i < graph.ops().size(); ++i) {
        const GraphOp& op = graph.ops()[i];
        OpWeights& w = bound[i];
        for (int id : op.params) {
            const GraphParam& p = graph.param(id);
            const auto it = weights.find(p.name);
            if (it == weights.end()) throw ModelError("weights: no tensor '" + p.name + "' (read by " + op.name + ")");
            if (it->second.shape != p.shape)
                throw ModelError(p.name + ": expected " + shapeText(p.shape) + ", found " +
                                 shapeText(it->second.shape));
            w.params.push_back(it->second.data.data());
        }
        w.queryBlock = planOp(graph, op, 1, tileH, tileW).queryBlock;
        if (op.kind == OpKind::Conv) {
            w.conv = convShape(graph, op, tileH, tileW);
            const GraphValue& y = graph.value(op.output);
            if (w.conv.hout != tileH / y.divisor || w.conv.wout != tileW / y.divisor)
                throw std::logic_error("CpuBackend: " + op.name + " output size does not match the graph");
        } else if (op.kind == OpKind::QkNormRope) {
            const GraphValue& x = graph.value(op.input);
            cpu::RopeShape rope;
            rope.fixedTokens = x.tokens;
            rope.gridH = x.divisor > 0 ? tileH / x.divisor : 0;
            rope.gridW = x.divisor > 0 ? tileW / x.divisor : 0;
            std::copy(std::begin(op.ropeAxes), std::end(op.ropeAxes), std::begin(rope.axes));
            rope.theta = op.ropeTheta;
            w.rope = cpu::ropeTable(rope);
        } else if (op.kind == OpKind::Attention) {
            cpu::AttentionWeights& a = w.attn;
            std::size_t k = 0;
            auto next = [&w, &k] { return w.params[k++]; };
            for (auto [weight, bias] : {std::pair{&a.wq, &a.bq}, {&a.wk, &a.bk}, {&a.wv, &a.bv}}) {
                *weight = next();
                if (op.qkvBias) *bias = next();
            }
            a.wo = next();
            if (op.bias) a.bo = next();
            if (op.buckets > 0) a.relativeBias = next();
        }
    }
    return bound;
}

void CpuBackend::Workspace::allocate() {
    buffers.assign(sizes.size(), {});
    for (std::size_t k = 0; k < sizes.size(); ++k) buffers[k].assign(sizes[k], 0.0f);
    shared.assign(sharedFloats, 0.0f);
}

float* CpuBackend::Workspace::data(int value) {
    return value < 0 ? nullptr : buffers[static_cast<std::size_t>(bufferOf[static_cast<std::size_t>(value)])].data();
}

std::size_t CpuBackend::Workspace::floats() const {
    std::size_t n = sharedFloats;
    for (const std::size_t size : sizes) n += size;
    return n;
}

// Activation buffers reused after each value's last reader (greedy best fit, in op order), and
// the attention scratch of the images attended at once.
CpuBackend::Workspace CpuBackend::planWorkspace(const ModelGraph& graph, int batch, int tileH, int tileW) {
    const std::vector<int> last = graph.lastUse();
    const std::size_t valueCount = graph.values().size();
    std::vector<int> bufferOf(valueCount, -1);
    std::vector<std::size_t> sizes;
    std::vector<int> freeList;
    auto acquire = [&](int value) {
        const std::size_t need = static_cast<std::size_t>(graph.elements(value, batch, tileH, tileW));
        // Best fit: the smallest free buffer that holds `need`, else the largest free one (grown).
        int best = -1;
        for (std::size_t k = 0; k < freeList.size(); ++k) {
            if (best < 0) {
                best = static_cast<int>(k);
                continue;
            }
            const std::size_t have = sizes[static_cast<std::size_t>(freeList[k])];
            const std::size_t cur = sizes[static_cast<std::size_t>(freeList[static_cast<std::size_t>(best)])];
            const bool better = have >= need ? (cur < need || have < cur) : (cur < need && have > cur);
            if (better) best = static_cast<int>(k);
        }
        if (best >= 0) {
            const int id = freeList[static_cast<std::size_t>(best)];
            freeList.erase(freeList.begin() + best);
            sizes[static_cast<std::size_t>(id)] = std::max(sizes[static_cast<std::size_t>(id)], need);
            bufferOf[static_cast<std::size_t>(value)] = id;
        } else {
            sizes.push_back(need);
            bufferOf[static_cast<std::size_t>(value)] = static_cast<int>(sizes.size()) - 1;
        }
    };
    std::vector<char> released(valueCount, 0);
    auto release = [&](int value) {
        if (value < 0 || released[static_cast<std::size_t>(value)]) return;
        released[static_cast<std::size_t>(value)] = 1;
        freeList.push_back(bufferOf[static_cast<std::size_t>(value)]);
    };
    for (int v : graph.inputs()) acquire(v);
    for (std::size_t i = 0; i < graph.ops().size(); ++i) {
        const GraphOp& op = graph.ops()[i];
        acquire(op.output);
        for (int v : op.operands())
            if (last[static_cast<std::size_t>(v)] == static_cast<int>(i)) release(v);
        if (last[static_cast<std::size_t>(op.output)] < 0) release(op.output);
    }
    Workspace space;
    space.batch = batch;
    space.sizes = std::move(sizes);
    space.bufferOf = std::move(bufferOf);
    for (const GraphOp& op : graph.ops()) {
        const OpPlan plan = planOp(graph, op, batch, tileH, tileW);
        space.scratchImages.push_back(plan.scratchImages);
        space.sharedFloats = std::max(space.sharedFloats, plan.shared);
    }
    return space;
}

// Whole forwards take a lane per thread or image (cpu::splitImages of the prepared batch: no
// call of fewer images needs more), each with its activations for one image and a one-thread
// pool; the threads beyond the lanes hold only a worker's scratch, to help the lanes. Op by op
// then runs only calls of one image. Where the lanes need more memory than op by op
// for the whole batch and more than the budget, every call runs op by op.
void CpuBackend::planParallelism() {
    lanes_.clear();
    helperScratch_.clear();
    batched_ = {};  // released first, so the memory available counts them free
    const int threads = pool_->threads();
    const int lanes = wholeForwards_ && !profiling_ ? cpu::splitImages(batch_, threads).lanes : 0;
    Workspace batched = planWorkspace(graph_, lanes > 0 ? 1 : batch_, tileH_, tileW_);  // lanes: one image a call
    Workspace lane = planWorkspace(graph_, 1, tileH_, tileW_);
    note_.clear();
    if (lanes > 0) {
        Workspace all = planWorkspace(graph_, batch_, tileH_, tileW_);
        const auto bytes = [](std::size_t floats) { return static_cast<std::uint64_t>(floats) * sizeof(float); };
        const std::uint64_t need =
            bytes(batched.floats() + lanes * lane.floats() + std::size_t(threads) * workerFloats_);
        std::optional<std::uint64_t> budget = wholeForwardMemory_;
        std::string available;
        if (!budget) {
            if (const std::optional<HostMemory> host = availableHostMemory()) {
                budget = host->availableBytes / 2;
                available = " (half of the " + formatBytes(host->availableBytes) + " available: " + host->source + ")";
            }
        }
        if (need > bytes(all.floats()) && budget && need > *budget) {
            note_ = "whole forwards on " + std::to_string(lanes) + " threads would need " + formatBytes(need) +
                    " of host memory (op by op " + formatBytes(bytes(all.floats())) + "), over the " +
                    formatBytes(*budget) + " they may take" + available;
            batched = std::move(all);
        }
    }
    batched_ = std::move(batched);
    batched_.allocate();
    if (!note_.empty()) return;
    lane.allocate();
    for (int i = 0; i < lanes; ++i) {
        Lane l{std::make_unique<cpu::WorkerPool>(1), lane};
        l.pool->reserveScratch(workerFloats_);
        lanes_.push_back(std::move(l));
    }
    // Helper slot t is the thread of the lane call's task t (CpuBackend::run): a lane's own
    // scratch once its images are done, or scratch of its own beyond the lanes.
    std::vector<float*> slots;
    for (Lane& l : lanes_) slots.push_back(l.pool->scratch(0));
    if (lanes > 0)
        for (int t = lanes; t < threads; ++t) {
            helperScratch_.emplace_back(workerFloats_, 0.0f);
            slots.push_back(helperScratch_.back().data());
        }
    for (Lane& l : lanes_) l.pool->setHelperScratch(slots);
}

void CpuBackend::prepareGraph(const ModelGraph& graph, const TensorMap& weights, int batch, int tileH, int tileW) {
    if (batch < 1) throw std::invalid_argument("batch: " + std::to_string(batch) + " must be at least 1");
    graph.checkTileSize(tileH, tileW);
    prepared_ = false;
    // OpenBLAS computes on the calling thread: with more threads, some of its kernels (seen on
    // an AMD EPYC with Debian's OpenBLAS 0.3.21) split the work so that the bits depend on the
    // thread count, and a run must give the same image on any machine and thread setting; its
    // threads would also compete with the pool's. The pool runs the GEMMs in blocks of a fixed
    // shape instead (cpu::gemmBlocks), one single-threaded sgemm per block.
    openblas_set_num_threads(1);
    // Bind every weight once, checking shapes, so run() only follows pointers.
    weights_ = bindWeights(graph, weights, tileH, tileW);
    graph_ = graph;
    workerFloats_ = scratchNeeded(graph, batch, tileH, tileW).perWorker;
    pool_->reserveScratch(workerFloats_);
    opMs_.assign(graph_.ops().size(), 0.0);
    batch_ = batch;
    tileH_ = tileH;
    tileW_ = tileW;
    planParallelism();
    prepared_ = true;
}

std::int64_t CpuBackend::pixels(int value) const { return graph_.rows(value, tileH_, tileW_); }

void CpuBackend::run(const std::vector<const float*>& inputs, int batch, const std::vector<float*>& outputs) {
    if (!prepared_) throw std::logic_error("CpuBackend::run called before prepare()");
    if (batch < 1 || batch > batch_)
        throw std::invalid_argument("batch: " + std::to_string(batch) + " is outside 1.." + std::to_string(batch_) +
                                    " (the prepared batch)");
    if (inputs.size() != graph_.inputs().size() || outputs.size() != graph_.outputs().size())
        throw std::invalid_argument("CpuBackend::run: " + std::to_string(inputs.size()) + " inputs and " +
                                    std::to_string(outputs.size()) + " outputs for a graph of " +
                                    std::to_string(graph_.inputs().size()) + " and " +
                                    std::to_string(graph_.outputs().size()));
    // Token ids are checked for the whole call before any work, so a bad id is refused with the
    // same words (its row in the call) however the images are split.
    for (const GraphOp& op : graph_.ops()) {
        const auto input = std::find(graph_.inputs().begin(), graph_.inputs().end(), op.input);
        if (op.kind == OpKind::TokenEmbedding && input != graph_.inputs().end())
            cpu::checkTokenIds(batch, static_cast<int>(pixels(op.input)), graph_.param(op.params[0]).shape[0],
                               inputs[static_cast<std::size_t>(input - graph_.inputs().begin())]);
    }
    const cpu::ImageSplit split =
        lanes_.empty() ? cpu::ImageSplit{0, 0, batch} : cpu::splitImages(batch, pool_->threads());
    if (split.lanes > static_cast<int>(lanes_.size()) || split.opByOp > batched_.batch)
        throw std::logic_error("CpuBackend::run: the split of " + std::to_string(batch) +
                               " images exceeds the prepared activations");
    if (split.wholeForwards > 0) {
        // One task per thread. Task t < lanes takes the call's images one after another, each as a
        // whole forward on lane t; then, like every task without a lane, it helps the lane with
        // the fewest helpers that still has an image, until none has. An image's bits do not depend
        // on its lane or its helpers. An exception is carried out of its task.
        const int threads = pool_->threads(), lanes = split.lanes;
        std::atomic<int> nextImage{0};
        std::vector<std::atomic<bool>> busy(static_cast<std::size_t>(lanes));
        std::vector<std::atomic<int>> helpers(static_cast<std::size_t>(lanes));
        for (int l = 0; l < lanes; ++l) busy[static_cast<std::size_t>(l)].store(true);
        std::vector<std::exception_ptr> errors(static_cast<std::size_t>(lanes));
        pool_->parallelFor(threads, [&](std::int64_t task) {
            const auto t = static_cast<std::size_t>(task);
            if (t < static_cast<std::size_t>(lanes)) {
                Lane& l = lanes_[t];
                try {
                    for (int image; (image = nextImage.fetch_add(1)) < split.wholeForwards;)
                        runImages(*l.pool, l.space, inputs, image, 1, outputs);
                } catch (...) {
                    errors[t] = std::current_exception();
                    nextImage.store(split.wholeForwards);  // the other lanes start no new image
                }
                busy[t].store(false);
            }
            for (;;) {
                int target = -1;
                for (int l = 0; l < lanes; ++l) {
                    const auto k = static_cast<std::size_t>(l);
                    if (busy[k].load() &&
                        (target < 0 || helpers[k].load() < helpers[static_cast<std::size_t>(target)].load()))
                        target = l;
                }
                if (target < 0) return;
                const auto k = static_cast<std::size_t>(target);
                helpers[k].fetch_add(1);
                lanes_[k].pool->helpWhile(static_cast<int>(task), busy[k]);
                helpers[k].fetch_sub(1);
            }
        });
        for (const std::exception_ptr& error : errors)
            if (error) std::rethrow_exception(error);
    }
    if (split.opByOp > 0) runImages(*pool_, batched_, inputs, split.wholeForwards, split.opByOp, outputs);
}

void CpuBackend::runImages(cpu::WorkerPool& pool, Workspace& space, const std::vector<const float*>& inputs, int first,
                           int count, const std::vector<float*>& outputs) {
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        const int v = graph_.inputs()[i];
        const std::int64_t perImage = graph_.elements(v, 1, tileH_, tileW_);
        cpu::copyFloats(pool, perImage * count, inputs[i] + perImage * first, space.data(v));
    }
    const bool timed = profiling_ && &pool == pool_.get();
    for (std::size_t i = 0; i < graph_.ops().size(); ++i) {
        if (!timed) {
            runOp(pool, space, i, count);
            continue;
        }
        const auto start = std::chrono::steady_clock::now();
        runOp(pool, space, i, count);
        opMs_[i] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    }
    for (std::size_t i = 0; i < outputs.size(); ++i) {
        const int v = graph_.outputs()[i];
        const std::int64_t perImage = graph_.elements(v, 1, tileH_, tileW_);
        cpu::copyFloats(pool, perImage * count, space.data(v), outputs[i] + perImage * first);
    }
}

void CpuBackend::runOp(cpu::WorkerPool& pool, Workspace& space, std::size_t index, int batch) {
    const GraphOp& op = graph_.ops()[index];
    const OpWeights& w = weights_[index];
    const float* in = space.data(op.input);
    float* y = space.data(op.output);
    const int channels = graph_.value(op.input).channels;
    const std::int64_t inPixels = pixels(op.input);
    const std::int64_t count = std::int64_t(batch) * channels * inPixels;
    switch (op.kind) {
        case OpKind::Affine:
            cpu::affine(pool, count, in, op.scale, op.shift, y);
            break;
        case OpKind::SiLU:
            cpu::silu(pool, count, in, y);
            break;
        case OpKind::Add:
            cpu::add(pool, batch, channels, inPixels, in, space.data(op.input2),
                     graph_.value(op.input2).kind == ValueKind::Vector &&
                         graph_.value(op.input).kind == ValueKind::FeatureMap,
                     y);
            break;
        case OpKind::ScaleShift:
            cpu::scaleShift(pool, batch, channels, inPixels, in, space.data(op.input2), y);
            break;
        case OpKind::TimestepEmbedding:
            timestepEmbedding(in, batch, op.channels, op.freqShift, op.flipSinToCos, y);
            break;
        case OpKind::Linear:
            if (graph_.value(op.input).kind == ValueKind::Tokens)
                cpu::tokenLinear(pool, batch, static_cast<int>(inPixels), channels, op.channels, in, w.params[0],
                                 op.bias ? w.params[1] : nullptr, space.data(op.residual), y);
            else
                cpu::linear(batch, channels, op.channels, in, w.params[0], op.bias ? w.params[1] : nullptr, op.silu, y);
            break;
        case OpKind::Conv:
            cpu::conv2d(pool, w.conv, batch, in, w.params[0], w.params[1], space.data(op.residual), op.outputScale, y,
                        op.leakyRelu ? op.slope : 1.0f);
            break;
        case OpKind::GroupNorm:
            cpu::groupNorm(pool, batch, channels, inPixels, op.groups, op.eps, in, w.params[0], w.params[1],
                           space.data(op.preAdd), space.data(op.scaleShift), op.silu, y);
            break;
        case OpKind::Attention:
            if (graph_.value(op.input).kind == ValueKind::Tokens)
                cpu::tokenAttention(pool, batch, tokenAttentionShape(graph_, op, tileH_, tileW_), w.attn, in,
                                    space.data(op.input2), space.data(op.residual), op.outputScale, y,
                                    space.shared.data(), space.scratchImages[index], w.queryBlock);
            else
                cpu::attention(pool, batch, channels, inPixels, op.heads, w.attn, in, space.data(op.residual),
                               op.outputScale, y, space.shared.data(), space.scratchImages[index], w.queryBlock);
            break;
        case OpKind::Concat: {
            if (graph_.value(op.input).kind == ValueKind::Tokens) {
                cpu::concatRows(pool, std::int64_t(batch) * inPixels, channels, graph_.value(op.input2).channels, in,
                                space.data(op.input2), y);
                break;
            }
            const float* skip = space.data(op.input2);
            const int c1 = channels, c2 = graph_.value(op.input2).channels, cOut = c1 + c2;
            pool.parallelFor(std::int64_t(batch) * cOut, [&](std::int64_t plane) {
                const std::int64_t b = plane / cOut, c = plane % cOut;
                const float* src = c < c1 ? in + (b * c1 + c) * inPixels : skip + (b * c2 + (c - c1)) * inPixels;
                std::copy(src, src + inPixels, y + plane * inPixels);
            });
            break;
        }
        case OpKind::Upsample: {
            const int d = graph_.value(op.input).divisor;
            if (op.factor == 2)
                cpu::upsampleNearest2x(pool, std::int64_t(batch) * channels, tileH_ / d, tileW_ / d, in, y);
            else
                cpu::upsampleNearest(pool, std::int64_t(batch) * channels, tileH_ / d, tileW_ / d, op.factor, in, y);
            break;
        }
        case OpKind::PixelShuffle: {
            const int d = graph_.value(op.input).divisor;
            cpu::pixelShuffle(pool, batch, graph_.value(op.output).channels, tileH_ / d, tileW_ / d, op.factor, in, y);
            break;
        }
        case OpKind::PixelUnshuffle: {
            const int d = graph_.value(op.output).divisor;
            cpu::pixelUnshuffle(pool, batch, channels, tileH_ / d, tileW_ / d, op.factor, in, y);
            break;
        }
        case OpKind::LeakyReLU:
            cpu::leakyRelu(pool, count, in, op.slope, y);
            break;
        case OpKind::PReLU:
            cpu::prelu(pool, batch, channels, inPixels, in, w.params[0], y);
            break;
        case OpKind::Sigmoid:
            cpu::sigmoid(pool, count, in, y);
            break;
        case OpKind::Mul:
            cpu::mul(pool, count, in, space.data(op.input2), y);
            break;
        case OpKind::ToTokens:
            cpu::toTokens(pool, batch, channels, inPixels, in, y);
            break;
        case OpKind::ToFeatureMap:
            cpu::toFeatureMap(pool, batch, channels, inPixels, in, space.data(op.residual), y);
            break;
        case OpKind::LayerNorm:
            cpu::layerNorm(pool, std::int64_t(batch) * inPixels, channels, op.eps, in, w.params[0], w.params[1], y);
            break;
        case OpKind::RMSNorm:
            cpu::rmsNorm(pool, std::int64_t(batch) * inPixels, channels, op.eps, in, w.params[0], y);
            break;
        case OpKind::GEGLU:
            cpu::geglu(pool, batch, static_cast<int>(inPixels), channels, op.channels, in, w.params[0], w.params[1], y);
            break;
        case OpKind::GELU:
            cpu::gelu(pool, count, in, op.geluTanh, y);
            break;
        case OpKind::QuickGELU:
            cpu::quickGelu(pool, count, in, y);
            break;
        case OpKind::TokenEmbedding:
            cpu::tokenEmbedding(pool, batch, static_cast<int>(inPixels), op.channels,
                                graph_.param(op.params[0]).shape[0], in, w.params[0],
                                op.positionTable ? w.params[1] : nullptr, y);
            break;
        case OpKind::EosPool:
            cpu::eosPool(batch, static_cast<int>(inPixels), channels, in, space.data(op.input2), op.token, y);
            break;
        case OpKind::ChannelSlice:
        case OpKind::AdaLayerNorm:
        case OpKind::GatedAdd:
        case OpKind::QkNormRope:
        case OpKind::PackedAttention:
        case OpKind::TokenConcat:
        case OpKind::TokenSplit:
            runTransformerOp(pool, space, index, batch);
            break;
        case OpKind::ColorFix: {
            const int d = graph_.value(op.input).divisor;
            const cpu::ColorFixShape shape{
                batch,     channels, tileH_ / d,   tileW_ / d,
                op.radius, op.scale, op.sharpness, static_cast<int>(graph_.param(op.params[0]).shape[1])};
            cpu::colorFix(pool, shape, in, space.data(op.input2), space.data(op.hintLatent), space.data(op.timesteps),
                          space.data(op.condMark), w.params[0], y);
            break;
        }
    }
}

void CpuBackend::runTransformerOp(cpu::WorkerPool& pool, Workspace& space, std::size_t index, int batch) {
    const GraphOp& op = graph_.ops()[index];
    const OpWeights& w = weights_[index];
    const float* in = space.data(op.input);
    float* y = space.data(op.output);
    const int channels = graph_.value(op.input).channels;
    const std::int64_t inPixels = pixels(op.input);
    switch (op.kind) {
        case OpKind::ChannelSlice:
            cpu::channelSlice(pool, std::int64_t(batch) * inPixels, channels, op.offset, op.channels, in, y);
            return;
        case OpKind::AdaLayerNorm:
            cpu::adaLayerNorm(pool, batch, inPixels, channels, op.eps, in, space.data(op.input2),
                              graph_.value(op.input2).channels, op.shiftAt, op.scaleAt, y);
            return;
        case OpKind::GatedAdd:
            cpu::gatedAdd(pool, batch, inPixels, channels, in, space.data(op.input2), space.data(op.gate),
                          graph_.value(op.gate).channels, op.gateAt, y);
            return;
        case OpKind::QkNormRope:
            cpu::qkNormRope(pool, batch, inPixels, op.heads, channels / 3 / op.heads, op.eps, in, w.params[0],
                            w.params[1], w.rope.data(), y);
            return;
        case OpKind::PackedAttention:
            cpu::packedAttention(pool, batch, inPixels, op.heads, channels / 3 / op.heads, in, y);
            return;
        case OpKind::TokenConcat:
            cpu::tokenConcat(pool, batch, inPixels, pixels(op.input2), channels, in, space.data(op.input2), y);
            return;
        case OpKind::TokenSplit: {
            const std::int64_t first = graph_.value(op.input).tokens;
            cpu::tokenSplit(pool, batch, first, inPixels - first, channels, op.tail, in, y);
            return;
        }
        default:
            throw std::logic_error("CpuBackend: " + op.name + " is not a transformer op");
    }
}

}  // namespace tessera
