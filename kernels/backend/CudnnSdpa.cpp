#include "kernels/backend/CudnnSdpa.h"

#include <map>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "kernels/device/CudaCheck.h"

namespace tessera {

namespace {

using cudnn::Desc;

enum : std::int64_t { kQ = 1, kK = 2, kV = 3, kO = 4, kScale = 5 };

// cuDNN 9.13 introduced the SDPA node; older headers do not name it.
#if CUDNN_VERSION >= 91300
constexpr bool kHeadersHaveSdpa = true;
#else
constexpr bool kHeadersHaveSdpa = false;
#endif
constexpr std::size_t kMinRuntime = 91300;

std::string versionText(std::size_t v) {
    return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

std::string shapeText(const FlashAttentionArgs& a) {
    std::ostringstream s;
    s << "attention " << a.batch << " images x " << a.heads << " heads, " << a.queries << " queries x " << a.keys
      << " keys, head dim " << a.headDim << " (" << dtypeName(a.dtype) << ")";
    return s.str();
}

}  // namespace

std::string CudnnSdpa::refusal(const FlashAttentionArgs& a) {
    if (!kHeadersHaveSdpa)
        return "built against cuDNN " + versionText(CUDNN_VERSION) +
               ", whose graph API has no fused attention node "
               "(9.13 and later)";
    if (cudnnGetVersion() < kMinRuntime)
        return "cuDNN " + versionText(cudnnGetVersion()) + " is loaded; its fused attention node needs 9.13 or later";
    if (a.dtype == DType::F32) return "fp32 (cuDNN's fused attention computes fp16 and bf16 only)";
    if (a.causal) return "causal mask (not built for cuDNN's fused attention)";
    if (a.headDim > 256 || a.headDim % 8 != 0)
        return "head dim " + std::to_string(a.headDim) + " (cuDNN's fused attention takes multiples of 8 up to 256)";
    for (long long stride : {a.qRow, a.qImage, a.kRow, a.kImage, a.vRow, a.vImage, a.oRow, a.oImage})
        if (stride % 8 != 0)
            return "a row or image stride of " + std::to_string(stride) + " elements (not 16-byte aligned)";
    return {};
}

struct CudnnSdpa::Impl {
    cudnnHandle_t handle = nullptr;
    FlashAttentionArgs shape;
    float scale = 1.0f;  // the by-value scale tensor's host copy, read at every execute
    std::vector<Desc> keep;
    Desc graph;
    std::vector<cudnn::Plan> plans;
    int chosen = 0;
    int offered = 0;
    std::map<std::tuple<const void*, const void*, const void*, void*, void*>, Desc> packs;
    Desc scratch;

    cudnnBackendDescriptor_t packFor(const cudnn::Plan& c, const FlashAttentionArgs& a, void* ws) {
        const auto key = std::make_tuple(a.q, a.k, a.v, a.o, ws);
        const bool isChosen = &c == &plans[static_cast<std::size_t>(chosen)];
        if (isChosen) {
            auto it = packs.find(key);
            if (it != packs.end()) return it->second.get();
        }
        void* ptrs[5] = {const_cast<void*>(a.q), const_cast<void*>(a.k), const_cast<void*>(a.v), a.o, &scale};
        const std::int64_t ids[5] = {kQ, kK, kV, kO, kScale};
        Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
        pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 5, ptrs)
            .set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 5, ids)
            .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
        pack.finalize();
        if (!isChosen) {
            scratch = std::move(pack);
            return scratch.get();
        }
        return packs.emplace(key, std::move(pack)).first->second.get();
    }

    void buildGraph();
};

void CudnnSdpa::Impl::buildGraph() {
#if CUDNN_VERSION >= 91300
    const FlashAttentionArgs& a = shape;
    const cudnnDataType_t io = cudnn::typeOf(a.dtype);
    const std::int64_t b = a.batch, h = a.heads, d = a.headDim;
    // [batch, heads, rows, headDim] over rows of heads x headDim elements.
    Desc q = cudnn::tensor(kQ, io, {b, h, a.queries, d}, {a.qImage, d, a.qRow, 1});
    Desc k = cudnn::tensor(kK, io, {b, h, a.keys, d}, {a.kImage, d, a.kRow, 1});
    Desc v = cudnn::tensor(kV, io, {b, h, a.keys, d}, {a.vImage, d, a.vRow, 1});
    Desc o = cudnn::tensor(kO, io, {b, h, a.queries, d}, {a.oImage, d, a.oRow, 1});
    Desc s = cudnn::tensor(kScale, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
    Desc op(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, q)
        .set(CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, k)
        .set(CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, v)
        .set(CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, o)
        .set(CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, s);
    if (cudnnBackendFinalize(op.get()) != CUDNN_STATUS_SUCCESS)
        throw std::runtime_error("cuDNN fused attention: the SDPA node is refused for " + shapeText(a) + ": " +
                                 cudnn::lastError());
    cudnnBackendDescriptor_t ops[1] = {op.get()};
    graph = Desc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, ops)
        .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    if (cudnnBackendFinalize(graph.get()) != CUDNN_STATUS_SUCCESS)
        throw std::runtime_error("cuDNN fused attention: no operation graph for " + shapeText(a) + ": " +
                                 cudnn::lastError());
    for (Desc* t : {&q, &k, &v, &o, &s, &op}) keep.push_back(std::move(*t));
#else
    throw std::runtime_error("cuDNN fused attention: " + CudnnSdpa::refusal(shape));
#endif
}

CudnnSdpa::CudnnSdpa(cudnnHandle_t handle, const FlashAttentionArgs& shape, std::size_t workspaceCap, int maxPlans,
                     PlanId only)
    : impl_(std::make_unique<Impl>()) {
    if (const std::string why = refusal(shape); !why.empty()) throw std::runtime_error("cuDNN fused attention: " + why);
    Impl& s = *impl_;
    s.handle = handle;
    s.shape = shape;
    s.scale = shape.scale;
    s.buildGraph();
    cudnn::PlanFilter filter;
    filter.allowRuntimeCompiled = true;  // noted in engineName; prepare's timing includes the compile
    s.plans = cudnn::findPlans(handle, s.graph, workspaceCap, maxPlans, only, filter, s.offered, s.keep);
    if (s.plans.empty())
        throw std::runtime_error("cuDNN fused attention: no plan for " + shapeText(shape) +
                                 (only.engine >= 0 ? " with engine " + std::to_string(only.engine) : std::string()) +
                                 " (" + std::to_string(s.offered) + " configurations offered" +
                                 (cudnn::lastError().empty() ? std::string(")") : "; " + cudnn::lastError() + ")"));
}

CudnnSdpa::~CudnnSdpa() = default;

double CudnnSdpa::benchmark(cudaStream_t stream, const FlashAttentionArgs& a, void* workspace, int repeats) {
    Impl& s = *impl_;
    const int best = cudnn::fastestPlan(s.plans, stream, repeats, [&](const cudnn::Plan& c) {
        return cudnnBackendExecute(s.handle, c.plan.get(), s.packFor(c, a, workspace)) == CUDNN_STATUS_SUCCESS;
    });
    if (best < 0)
        throw std::runtime_error("cuDNN fused attention: every plan failed to run for " + shapeText(s.shape) + ": " +
                                 cudnn::lastError());
    s.chosen = best;
    s.packs.clear();
    return s.plans[static_cast<std::size_t>(best)].ms;
}

void CudnnSdpa::run(const FlashAttentionArgs& a, void* workspace) {
    Impl& s = *impl_;
    if (a.batch != s.shape.batch)
        throw std::logic_error("CudnnSdpa: a plan for " + std::to_string(s.shape.batch) + " images run on " +
                               std::to_string(a.batch));
    const cudnn::Plan& c = s.plans[static_cast<std::size_t>(s.chosen)];
    TESSERA_CHECK(cudnnBackendExecute(s.handle, c.plan.get(), s.packFor(c, a, workspace)));
}

int CudnnSdpa::batch() const { return impl_->shape.batch; }

std::size_t CudnnSdpa::workspaceBytes() const {
    return static_cast<std::size_t>(impl_->plans[static_cast<std::size_t>(impl_->chosen)].workspace);
}

CudnnSdpa::PlanId CudnnSdpa::planId() const {
    const cudnn::Plan& c = impl_->plans[static_cast<std::size_t>(impl_->chosen)];
    return PlanId{c.engineIndex, c.ordinal};
}

std::string CudnnSdpa::engineName() const {
    const cudnn::Plan& c = impl_->plans[static_cast<std::size_t>(impl_->chosen)];
    std::ostringstream s;
    s << "cuDNN SDPA engine " << c.engineIndex << " (" << impl_->plans.size() << " of " << impl_->offered
      << " candidates" << (c.runtimeCompiled ? ", compiled at prepare" : "") << ")";
    return s.str();
}

}  // namespace tessera
