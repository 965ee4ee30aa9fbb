#include "kernels/backend/CudaAlgorithmChoice.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <tuple>

#include "core/formats/TuningCache.h"
#include "kernels/backend/CudaBackendImpl.h"
#include "kernels/device/GpuTiming.h"
#include "kernels/ops/BiasResidual.cuh"
#include "kernels/ops/FillUniform.cuh"
#include "kernels/ops/FlashAttention.cuh"

namespace tessera {

std::string legacyChoice(cudnnConvolutionFwdAlgo_t algo, cudnnMathType_t math) {
    return "algo=" + std::to_string(static_cast<int>(algo)) + " math=" + std::to_string(static_cast<int>(math));
}
std::optional<std::pair<cudnnConvolutionFwdAlgo_t, cudnnMathType_t>> parseLegacyChoice(const std::string& text) {
    int algo = -1, math = -1;
    char tail = 0;
    if (std::sscanf(text.c_str(), "algo=%d math=%d%c", &algo, &math, &tail) != 2) return std::nullopt;
    if (algo < 0 || algo >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT || math < 0 || math > CUDNN_FMA_MATH) return std::nullopt;
    return std::make_pair(static_cast<cudnnConvolutionFwdAlgo_t>(algo), static_cast<cudnnMathType_t>(math));
}
std::string planChoiceText(std::optional<GraphPlanId> id, const char* none) {
    if (!id) return none;
    return "engine=" + std::to_string(id->engine) + " config=" + std::to_string(id->ordinal);
}
std::optional<GraphConv::PlanId> parsePlanChoice(const std::string& text, const char* none) {
    if (text == none) return GraphConv::PlanId{};
    long long engine = -1;
    int ordinal = -1;
    char tail = 0;
    if (std::sscanf(text.c_str(), "engine=%lld config=%d%c", &engine, &ordinal, &tail) != 2 || engine < 0 ||
        ordinal < 0)
        return std::nullopt;
    return GraphConv::PlanId{engine, ordinal};
}

const char* algoName(cudnnConvolutionFwdAlgo_t a) {
    switch (a) {
        case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM:
            return "implicit_gemm";
        case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM:
            return "implicit_precomp_gemm";
        case CUDNN_CONVOLUTION_FWD_ALGO_GEMM:
            return "gemm";
        case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT:
            return "direct";
        case CUDNN_CONVOLUTION_FWD_ALGO_FFT:
            return "fft";
        case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING:
            return "fft_tiling";
        case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD:
            return "winograd";
        case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED:
            return "winograd_nonfused";
        default:
            return "?";
    }
}

void TuningLedger::clear() {
    used_.clear();
    hits_ = misses_ = rejected_ = 0;
    warnings_.clear();
}

std::optional<std::string> TuningLedger::cached(const std::string& op) const {
    if (!cache_) return std::nullopt;
    return cache_->find(context_, op);
}

void TuningLedger::useCached(const std::string& op, const std::string& choice) {
    ++hits_;
    used_[op] = choice;
}

void TuningLedger::rejectCached(const std::string& op, const std::string& choice, const std::string& why) {
    ++rejected_;
    warnings_.push_back("tuning cache: the stored choice '" + choice + "' for " + op + " is refused now (" + why +
                        "); timed again and replaced");
}

void TuningLedger::useNew(const std::string& op, const std::string& choice, bool timed) {
    used_[op] = choice;
    if (!timed) return;
    ++misses_;
    if (cache_) cache_->store(context_, op, choice);
}

TuningInfo TuningLedger::info(const std::map<std::string, std::string>& settings) const {
    TuningInfo t;
    t.hits = hits_;
    t.misses = misses_;
    t.rejected = rejected_;
    t.digest = tuningDigest(used_);
    t.settings = settings;
    return t;
}

std::string TuningLedger::summary() const {
    std::string s = "  tuning: " + std::to_string(hits_) + " choices from the cache, " + std::to_string(misses_) +
                    " timed, " + std::to_string(rejected_) + " refused; digest " +
                    (used_.empty() ? std::string("none") : tuningDigest(used_)) + "\n";
    for (const std::string& warning : warnings_) s += "  " + warning + "\n";
    return s;
}

// ---- CudaBackend::Impl: the choices of one prepare ----------------------------------------

namespace {

// The tuning cache's text for an attention path: "blocked", "fused" (64 query rows in 4 warps),
// "fused 128" (4 warps) or "fused 128 8w".
std::string attentionChoiceText(bool fused, FlashTiling t) {
    if (!fused) return "blocked";
    if (t.blockQueries != 128) return "fused";
    return t.warps == 8 ? "fused 128 8w" : "fused 128";
}

// A cached text back as {fused, tiling}; nullopt when it names no path this head dim offers.
std::optional<std::pair<bool, FlashTiling>> parseAttentionChoice(const std::string& text, int headDim) {
    if (text == "blocked") return std::pair<bool, FlashTiling>{false, {}};
    for (FlashTiling t : flashTilings(headDim))
        if (attentionChoiceText(true, t) == text) return std::pair<bool, FlashTiling>{true, t};
    return std::nullopt;
}

}  // namespace

std::pair<double, double> CudaBackend::Impl::timeAttentionPaths(const AttentionPlan& plan, std::size_t inBytes,
                                                                std::size_t outBytes, const AttentionBinder& bind,
                                                                float scale, FlashTiling& best, std::string& times) {
    const std::size_t in = alignUp(inBytes), out = alignUp(outBytes), sc = alignUp(plan.scoreBytes);
    DeviceBuffer scratch(in + out + sc + alignUp(plan.probBytes));
    char* base = scratch.as<char>();
    launchFillUniform(dtype, base, static_cast<long long>(in / dtypeSize(dtype)), 4321u, 1.0f, stream.get());
    const AttentionOperands a = bind(base, base + in);
    float* scores = reinterpret_cast<float*>(base + in + out);
    void* probs = base + in + out + sc;
    double fused = -1;
    for (FlashTiling t : flashTilings(a.headDim)) {
        FlashAttentionArgs f = flashArgs(dtype, a, maxBatch, scale);
        f.blockQueries = t.blockQueries;
        f.warps = t.warps;
        const double ms = medianGpuMs(stream.get(), 10, 1, [&] { launchFlashAttention(f, stream.get()); });
        char line[64];
        std::snprintf(line, sizeof line, "%s%d/%dw %.4f ms", times.empty() ? "" : ", ", t.blockQueries, t.warps, ms);
        times += line;
        if (fused < 0 || ms < fused) {
            fused = ms;
            best = t;
        }
    }
    const double blocked = medianGpuMs(stream.get(), 10, 1, [&] { attend(a, plan, maxBatch, scale, scores, probs); });
    return {fused, blocked};
}

CudaBackend::AttentionPath CudaBackend::Impl::choosePath(const std::string& key, int headDim, const AttentionPlan& plan,
                                                         std::size_t inBytes, std::size_t outBytes,
                                                         const AttentionBinder& bind, float scale) {
    CudaBackend::AttentionPath r;
    auto take = [&r](bool fused, FlashTiling t) {
        r.fused = fused;
        r.blockQueries = fused ? t.blockQueries : 0;
        r.warps = fused ? t.warps : 0;
    };
    if (settings.flash != FlashMode::Auto) {
        // A forced tiling the head dim does not offer runs as 64 rows in 4 warps.
        FlashTiling forced{settings.flashBlockQueries, settings.flashWarps};
        const auto offered = flashTilings(headDim);
        if (std::none_of(offered.begin(), offered.end(), [&](FlashTiling t) {
                return t.blockQueries == forced.blockQueries && t.warps == forced.warps;
            }))
            forced = {};
        take(settings.flash == FlashMode::On, forced);
        r.reason = "TESSERA_CUDA_FLASH=" + settings.values.at("TESSERA_CUDA_FLASH");
        tuning.useNew(key, attentionChoiceText(r.fused, forced), false);
        return r;
    }
    if (const auto cached = tuning.cached(key)) {
        if (const auto parsed = parseAttentionChoice(*cached, headDim)) {
            take(parsed->first, parsed->second);
            r.reason = "tuning cache";
            tuning.useCached(key, *cached);
            return r;
        }
        tuning.rejectCached(key, *cached, "not an attention path of head dim " + std::to_string(headDim));
    }
    try {
        FlashTiling best;
        std::string times;
        std::tie(r.fusedMs, r.blockedMs) = timeAttentionPaths(plan, inBytes, outBytes, bind, scale, best, times);
        take(r.fusedMs < r.blockedMs, best);
        r.reason = "timed";
        r.tilingTimes = times;
        tuning.useNew(key, attentionChoiceText(r.fused, best), true);
    } catch (const CudaError& e) {
        if (!e.outOfMemory()) throw;
        (void)cudaGetLastError();
        // No room for the blocked path's scratch: the fused kernel needs none.
        take(true, {});
        r.reason = "not timed (no device memory for the blocked path's scratch)";
        tuning.useNew(key, "fused", false);
    }
    return r;
}

std::shared_ptr<CudnnSdpa> CudaBackend::Impl::chooseCudnnAttention(const std::string& key, const AttentionOperands& a,
                                                                   const AttentionPlan& plan, std::size_t inBytes,
                                                                   std::size_t outBytes, const AttentionBinder& bind,
                                                                   float scale, CudaBackend::AttentionPath& record) {
    if (dtype == DType::F32) return nullptr;
    if (settings.sdpa == FlashMode::Off) {
        record.cudnnReason = "TESSERA_CUDA_SDPA=0";
        return nullptr;
    }
    if (settings.sdpa == FlashMode::Auto && settings.flash != FlashMode::Auto) {
        // A forced own path is that path at every batch, unless cuDNN is forced too.
        record.cudnnReason = "TESSERA_CUDA_FLASH=" + settings.values.at("TESSERA_CUDA_FLASH") + " forces the own path";
        return nullptr;
    }
    const FlashAttentionArgs shape = flashArgs(dtype, a, maxBatch, scale);
    if (const std::string why = CudnnSdpa::refusal(shape); !why.empty()) {
        record.cudnnReason = why;
        return nullptr;
    }
    constexpr std::size_t kWorkspaceCap = std::size_t(256) << 20;
    const std::string op = key + " cudnn";
    auto take = [&](std::shared_ptr<CudnnSdpa> sdpa, const std::string& why) {
        record.cudnn = sdpa->engineName();
        record.cudnnReason = why;
        sdpaWorkspace = std::max(sdpaWorkspace, sdpa->workspaceBytes());
        return sdpa;
    };
    if (settings.sdpa == FlashMode::Auto) {
        if (const auto cached = tuning.cached(op)) {
            const auto id = parsePlanChoice(*cached, "own");
            std::string why = id ? "" : "not a cuDNN attention plan";
            if (id && id->engine < 0) {
                tuning.useCached(op, *cached);
                record.cudnnReason = "tuning cache";
                return nullptr;
            }
            if (id) try {
                    auto sdpa = std::make_shared<CudnnSdpa>(cudnn.get(), shape, kWorkspaceCap, 1, *id);
                    tuning.useCached(op, *cached);
                    return take(sdpa, "tuning cache");
                } catch (const std::runtime_error& e) {
                    why = e.what();
                }
            tuning.rejectCached(op, *cached, why);
        }
    }
    // Timed (or forced) on scratch operands: the inputs, the output and, for the blocked path,
    // its scores.
    const std::size_t in = alignUp(inBytes), out = alignUp(outBytes);
    const bool timeOwn =
        settings.sdpa == FlashMode::Auto && !(record.fused ? record.fusedMs >= 0 : record.blockedMs >= 0);
    const std::size_t own = timeOwn && !record.fused ? alignUp(plan.scoreBytes) + alignUp(plan.probBytes) : 0;
    std::shared_ptr<CudnnSdpa> sdpa;
    try {
        sdpa = std::make_shared<CudnnSdpa>(cudnn.get(), shape, kWorkspaceCap);
        DeviceBuffer scratch(in + out + own);
        char* base = scratch.as<char>();
        launchFillUniform(dtype, base, static_cast<long long>(in / dtypeSize(dtype)), 4321u, 1.0f, stream.get());
        const AttentionOperands ops = bind(base, base + in);
        DeviceBuffer ws(std::max<std::size_t>(sdpa->workspaceBytes(), 256));
        record.cudnnMs = sdpa->benchmark(stream.get(), flashArgs(dtype, ops, maxBatch, scale), ws.data());
        if (settings.sdpa == FlashMode::On) {
            tuning.useNew(op, planChoice(sdpa, "own"), false);
            return take(sdpa, "TESSERA_CUDA_SDPA=1");
        }
        if (!timeOwn)
            record.ownMs = record.fused ? record.fusedMs : record.blockedMs;
        else if (record.fused) {
            FlashAttentionArgs f = flashArgs(dtype, ops, maxBatch, scale);
            f.blockQueries = record.blockQueries;
            f.warps = record.warps;
            record.ownMs = medianGpuMs(stream.get(), 10, 1, [&] { launchFlashAttention(f, stream.get()); });
        } else {
            char* sc = base + in + out;
            record.ownMs = medianGpuMs(stream.get(), 10, 1, [&] {
                attend(ops, plan, maxBatch, scale, reinterpret_cast<float*>(sc), sc + alignUp(plan.scoreBytes));
            });
        }
    } catch (const CudaError& e) {
        if (!e.outOfMemory()) throw;
        (void)cudaGetLastError();
        record.cudnnReason = "not timed (no device memory for scratch operands)";
        return nullptr;
    } catch (const std::runtime_error& e) {
        // cuDNN offers no plan (or none runs) for this shape: stored, so the next prepare
        // does not build it again.
        record.cudnnReason = e.what();
        if (settings.sdpa == FlashMode::Auto) tuning.useNew(op, "own", true);
        return nullptr;
    }
    if (record.cudnnMs < record.ownMs) {
        tuning.useNew(op, planChoice(sdpa, "own"), true);
        return take(sdpa, "timed");
    }
    tuning.useNew(op, "own", true);
    record.cudnnReason = "timed";
    return nullptr;
}

std::string CudaBackend::Impl::legacyRefusal(ConvLayer& c, cudnnConvolutionFwdAlgo_t algo, cudnnMathType_t math,
                                             std::size_t wsCap) {
    if (dtype == DType::F32 && math != CUDNN_FMA_MATH) return "fp32 takes FMA kernels only";
    c.math[static_cast<std::size_t>(maxBatch)] = math;
    c.descBatch = -1;
    setConvBatch(c, maxBatch);
    std::size_t bytes = 0;
    const cudnnStatus_t s = cudnnGetConvolutionForwardWorkspaceSize(cudnn.get(), c.xDesc.get(), c.wDesc.get(),
                                                                    c.convDesc.get(), c.yDesc.get(), algo, &bytes);
    if (s != CUDNN_STATUS_SUCCESS) return std::string("cuDNN: ") + cudnnGetErrorString(s);
    if (bytes > wsCap)
        return "needs " + std::to_string(bytes) + " bytes of workspace, more than the " + std::to_string(wsCap) +
               " available";
    return {};
}

std::pair<cudnnConvolutionFwdAlgo_t, cudnnMathType_t> CudaBackend::Impl::legacyAlgorithm(ConvLayer& c, void* ws,
                                                                                         std::size_t wsCap) {
    const std::string op = "conv " + c.key() + " n" + std::to_string(maxBatch);
    if (auto cached = settings.heuristicsOnly ? std::nullopt : tuning.cached(op)) {
        const auto parsed = parseLegacyChoice(*cached);
        const std::string why = parsed ? legacyRefusal(c, parsed->first, parsed->second, wsCap) : "not an algorithm";
        if (why.empty()) {
            tuning.useCached(op, *cached);
            return *parsed;
        }
        tuning.rejectCached(op, *cached, why);
    }
    const cudnnMathType_t wantMath = dtype == DType::F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
    c.descBatch = -1;
    c.math[static_cast<std::size_t>(maxBatch)] = wantMath;
    setConvBatch(c, maxBatch);
    // Real buffers for the benchmark: any activation region of the right size will do.
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int returned = 0;
    const std::size_t xBytes = static_cast<std::size_t>(maxBatch) * c.xElements() * dtypeSize(dtype);
    const std::size_t yBytes = static_cast<std::size_t>(maxBatch) * c.yElements() * dtypeSize(dtype);
    if (xBytes + yBytes > activationBytes) throw std::logic_error("conv benchmark buffers exceed the arena");
    if (settings.heuristicsOnly) {
        TESSERA_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(cudnn.get(), c.xDesc.get(), c.wDesc.get(),
                                                             c.convDesc.get(), c.yDesc.get(),
                                                             CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
        for (int i = 0; i < returned; ++i)
            if (perf[i].memory > wsCap) perf[i].status = CUDNN_STATUS_NOT_SUPPORTED;
    } else {
        TESSERA_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
            cudnn.get(), c.xDesc.get(), actBase, c.wDesc.get(), wt(c.weight), c.convDesc.get(), c.yDesc.get(),
            actBase + alignUp(xBytes), CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf, ws, wsCap));
    }
    for (int i = 0; i < returned; ++i) {
        const cudnnConvolutionFwdAlgoPerf_t& p = perf[i];
        if (p.status != CUDNN_STATUS_SUCCESS || p.determinism != CUDNN_DETERMINISTIC) continue;
        if (dtype == DType::F32 && p.mathType != CUDNN_FMA_MATH) continue;
        tuning.useNew(op, legacyChoice(p.algo, p.mathType), !settings.heuristicsOnly);
        return {p.algo, p.mathType};
    }
    throw std::runtime_error("cuDNN offers no deterministic forward algorithm for " + c.name + " (" + c.key() + ", " +
                             dtypeName(dtype) + ")");
}

std::size_t CudaBackend::Impl::applyAlgorithm(ConvLayer& c,
                                              std::pair<cudnnConvolutionFwdAlgo_t, cudnnMathType_t> chosen,
                                              std::size_t wsCap) {
    const cudnnMathType_t wantMath = dtype == DType::F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
    std::size_t need = 0;
    for (int b = 1; b <= maxBatch; ++b) {
        c.algo[static_cast<std::size_t>(b)] = chosen.first;
        c.math[static_cast<std::size_t>(b)] = chosen.second;
        c.descBatch = -1;
        setConvBatch(c, b);
        std::size_t bytes = 0;
        cudnnStatus_t s = cudnnGetConvolutionForwardWorkspaceSize(
            cudnn.get(), c.xDesc.get(), c.wDesc.get(), c.convDesc.get(), c.yDesc.get(), chosen.first, &bytes);
        if (s != CUDNN_STATUS_SUCCESS) {
            // Not usable at this batch: take the heuristics' first deterministic choice.
            c.math[static_cast<std::size_t>(b)] = wantMath;
            c.descBatch = -1;
            setConvBatch(c, b);
            cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
            int returned = 0;
            TESSERA_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(cudnn.get(), c.xDesc.get(), c.wDesc.get(),
                                                                 c.convDesc.get(), c.yDesc.get(),
                                                                 CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
            bool ok = false;
            for (int i = 0; i < returned && !ok; ++i) {
                if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].determinism != CUDNN_DETERMINISTIC ||
                    perf[i].memory > wsCap)
                    continue;
                if (dtype == DType::F32 && perf[i].mathType != CUDNN_FMA_MATH) continue;
                c.algo[static_cast<std::size_t>(b)] = perf[i].algo;
                c.math[static_cast<std::size_t>(b)] = perf[i].mathType;
                c.descBatch = -1;
                setConvBatch(c, b);
                s = cudnnGetConvolutionForwardWorkspaceSize(cudnn.get(), c.xDesc.get(), c.wDesc.get(), c.convDesc.get(),
                                                            c.yDesc.get(), perf[i].algo, &bytes);
                ok = s == CUDNN_STATUS_SUCCESS;
            }
            if (!ok) TESSERA_CHECK(s);
        }
        need = std::max(need, bytes);
    }
    c.descBatch = -1;
    return need;
}

std::size_t CudaBackend::Impl::chooseAlgorithms(void* ws, std::size_t wsCap) {
    std::map<std::string, std::pair<cudnnConvolutionFwdAlgo_t, cudnnMathType_t>> chosen;
    std::size_t need = 0;
    for (ConvLayer& c : convs) {
        if (c.strided()) continue;  // cuDNN's legacy API has no algorithm for channel slices
        auto it = chosen.find(c.key());
        if (it == chosen.end()) it = chosen.emplace(c.key(), legacyAlgorithm(c, ws, wsCap)).first;
        need = std::max(need, applyAlgorithm(c, it->second, wsCap));
    }
    return alignUp(need);
}

std::optional<std::shared_ptr<GraphConv>> CudaBackend::Impl::cachedPlan(const std::string& op, const char* none,
                                                                        const GraphConvShape& shape,
                                                                        std::size_t wsCap) {
    const auto cached = tuning.cached(op);
    if (!cached) return std::nullopt;
    const auto id = parsePlanChoice(*cached, none);
    if (!id) {
        tuning.rejectCached(op, *cached, "not a plan choice");
        return std::nullopt;
    }
    try {
        std::shared_ptr<GraphConv> plan;
        if (id->engine >= 0) plan = std::make_shared<GraphConv>(cudnn.get(), shape, wsCap, 8, *id);
        tuning.useCached(op, *cached);
        return plan;
    } catch (const std::exception& e) {
        (void)cudaGetLastError();
        tuning.rejectCached(op, *cached, e.what());
        return std::nullopt;
    }
}

double CudaBackend::Impl::timeLegacy(ConvLayer& c, void* ws, std::size_t wsCap) {
    const std::size_t xBytes = static_cast<std::size_t>(maxBatch) * c.xElements() * dtypeSize(dtype);
    void* x = actBase;
    void* y = actBase + alignUp(xBytes);
    c.descBatch = -1;
    setConvBatch(c, maxBatch);
    return medianGpuMs(stream.get(), 5, 1, [&] {
        const float one = c.alpha, zero = 0.0f;
        TESSERA_CHECK(cudnnConvolutionForward(cudnn.get(), &one, c.xDesc.get(), x, c.wDesc.get(), wt(c.weight),
                                              c.convDesc.get(), c.algo[static_cast<std::size_t>(maxBatch)], ws, wsCap,
                                              &zero, c.yDesc.get(), y));
    });
}

CudaBackend::Impl::PlanChoice CudaBackend::Impl::graphPlanFor(ConvLayer& c, const GraphConvShape& shape, void* ws,
                                                              std::size_t wsCap) {
    const std::string op = "graph conv " + shape.key();
    if (auto plan = cachedPlan(op, "legacy", shape, wsCap); plan && (*plan || !c.strided())) return {*plan, -1.0, -1.0};
    const double legacy = c.strided() ? std::numeric_limits<double>::infinity() : timeLegacy(c, ws, wsCap);
    const std::size_t xBytes = static_cast<std::size_t>(maxBatch) * c.xElements() * dtypeSize(dtype);
    void* x = actBase;
    void* y = actBase + alignUp(xBytes);
    std::shared_ptr<GraphConv> graph;
    double graphMs = -1;
    try {
        graph = std::make_shared<GraphConv>(cudnn.get(), shape, wsCap);
        graphMs = graph->benchmark(stream.get(), x, wt(c.weight), y, nullptr, nullptr, ws);
    } catch (const std::exception& e) {
        graph.reset();
        (void)cudaGetLastError();
        graphNotes += "  " + c.name + ": legacy only (" + e.what() + ")\n";
    }
    if (graph && !(graphMs < legacy)) graph.reset();
    if (!graph && c.strided())
        throw DenseViewsRefused(c.name +
                                " reads or writes a channel slice, and cuDNN's graph API offers no plan for it");
    tuning.useNew(op, planChoice(graph, "legacy"), true);
    return {graph, legacy, graphMs};
}

CudaBackend::Impl::PlanChoice CudaBackend::Impl::fusedPlanFor(ConvLayer& c, const GraphConvShape& shape, void* ws,
                                                              std::size_t wsCap) {
    const std::string op = "fused conv " + shape.key();
    if (auto plan = cachedPlan(op, "apart", shape, wsCap)) return {*plan, -1.0, -1.0};
    const std::size_t xBytes = static_cast<std::size_t>(maxBatch) * c.xElements() * dtypeSize(dtype);
    const std::size_t yBytes = static_cast<std::size_t>(maxBatch) * c.yElements() * dtypeSize(dtype);
    void* x = actBase;
    void* y = actBase + alignUp(xBytes);
    void* r = c.epilogueResidual && alignUp(xBytes) + 2 * alignUp(yBytes) <= activationBytes
                  ? actBase + alignUp(xBytes) + alignUp(yBytes)
                  : nullptr;
    const double epilogueMs = medianGpuMs(stream.get(), 5, 1, [&] {
        launchBiasResidual(dtype, y, true, wf(c.epilogueBias), r, static_cast<long long>(maxBatch) * c.ho * c.wo,
                           c.cout, 1.0f, stream.get());
    });
    std::shared_ptr<GraphConv> fused;
    double fusedMs = -1;
    if (!c.epilogueResidual || r) {
        try {
            const auto t0 = std::chrono::steady_clock::now();
            fused = std::make_shared<GraphConv>(cudnn.get(), shape, wsCap);
            fusedMs = fused->benchmark(stream.get(), x, wt(c.weight), y, wf(c.epilogueBias), r, ws);
            fusedBuildMs += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        } catch (const std::exception& e) {
            fused.reset();
            (void)cudaGetLastError();
            graphNotes += "  " + c.name + ": no fused epilogue (" + e.what() + ")\n";
        }
    }
    // The unfused side: this layer's graph plan when it has one, else the legacy algorithm
    // (timed here when its graph choice came from the cache).
    const double convMs =
        c.graph
            ? (c.graphMs >= 0 ? c.graphMs : c.graph->benchmark(stream.get(), x, wt(c.weight), y, nullptr, nullptr, ws))
            : (c.legacyMs >= 0 ? c.legacyMs : timeLegacy(c, ws, wsCap));
    if (fused && !(fusedMs < convMs + epilogueMs)) fused.reset();
    tuning.useNew(op, planChoice(fused, "apart"), true);
    return {fused, epilogueMs, fusedMs};
}

std::size_t CudaBackend::Impl::chooseGraphConvs(void* ws, std::size_t wsCap) {
    // fp32 and the legacy setting take legacy algorithms, except for channel slices (graph plans only).
    const bool legacy = dtype == DType::F32 || settings.legacyOnly;
    std::map<std::string, PlanChoice> chosen;
    std::size_t need = 0;
    for (ConvLayer& c : convs) {
        if (legacy && !c.strided()) continue;
        // Filled field by field like other parameter blocks: alike in shape only.
        GraphConvShape shape;
        shape.dtype = dtype;
        shape.n = maxBatch;
        shape.cin = c.cin;
        shape.h = c.h;
        shape.w = c.w;
        shape.cout = c.cout;
        shape.k = c.k;
        shape.stride = c.stride;
        shape.pad = c.pad;
        shape.ho = c.ho;
        shape.wo = c.wo;
        shape.alpha = c.alpha;
        shape.xPitch = c.xPitch;
        shape.yPitch = c.yPitch;
        auto it = chosen.find(shape.key());
        if (it == chosen.end()) it = chosen.emplace(shape.key(), graphPlanFor(c, shape, ws, wsCap)).first;
        std::tie(c.graph, c.legacyMs, c.graphMs) = it->second;
        c.descBatch = -1;
        if (c.graph) need = std::max(need, c.graph->workspaceBytes());
        if (!c.hasEpilogue || !settings.fuse) continue;
        shape.bias = true;
        shape.residual = c.epilogueResidual;
        // cuDNN's fused conv+bias+add engines compile at prepare time (NVRTC): about
        // 0.5 s per distinct shape, 4-10 s per prepare, for 2-4% faster forwards (H100,
        // docs/PERFORMANCE.md). Opt-in for long renders and benchmarks.
        shape.allowRuntimeCompiled = settings.runtimeFusion;
        auto fit = fusedChosen.find(shape.key());
        if (fit == fusedChosen.end()) fit = fusedChosen.emplace(shape.key(), fusedPlanFor(c, shape, ws, wsCap)).first;
        std::tie(c.fused, c.epilogueMs, c.fusedMs) = fit->second;
        if (c.fused) need = std::max(need, c.fused->workspaceBytes());
    }
    return alignUp(need);
}

}  // namespace tessera
