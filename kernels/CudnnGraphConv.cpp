#include "kernels/CudnnGraphConv.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "kernels/CudaCheck.h"
#include "kernels/GpuTiming.h"
#include "kernels/DeviceResources.h"

namespace tessera {

namespace {

// Owner of one cudnnBackendDescriptor_t.
class Desc {
public:
    Desc() = default;
    explicit Desc(cudnnBackendDescriptorType_t type) { TESSERA_CHECK(cudnnBackendCreateDescriptor(type, &d_)); }
    ~Desc() {
        if (d_) (void)cudnnBackendDestroyDescriptor(d_);
    }
    Desc(Desc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
    Desc& operator=(Desc&& o) noexcept {
        if (this != &o) {
            if (d_) (void)cudnnBackendDestroyDescriptor(d_);
            d_ = std::exchange(o.d_, nullptr);
        }
        return *this;
    }
    Desc(const Desc&) = delete;
    Desc& operator=(const Desc&) = delete;

    cudnnBackendDescriptor_t get() const { return d_; }
    cudnnBackendDescriptor_t* addr() { return &d_; }
    Desc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, std::int64_t count, const void* v) {
        TESSERA_CHECK(cudnnBackendSetAttribute(d_, name, type, count, v));
        return *this;
    }
    Desc& set(cudnnBackendAttributeName_t name, const Desc& other) {
        cudnnBackendDescriptor_t o = other.get();
        return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &o);
    }
    void finalize() { TESSERA_CHECK(cudnnBackendFinalize(d_)); }

private:
    cudnnBackendDescriptor_t d_ = nullptr;
};

cudnnDataType_t cudnnTypeOf(DType t) {
    return t == DType::F32 ? CUDNN_DATA_FLOAT : (t == DType::F16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16);
}

// Unique ids of the graph's tensors (the variant pack names pointers by them).
enum : std::int64_t { kX = 1, kW = 2, kY = 3, kBias = 4, kResidual = 5, kConvOut = 6, kBiasOut = 7 };

// NHWC tensor [n, c, h, w] (dimensions in NCHW order, strides of the NHWC layout).
Desc tensor(std::int64_t id, cudnnDataType_t type, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w,
            bool isVirtual = false) {
    Desc d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const std::int64_t dims[4] = {n, c, h, w};
    const std::int64_t strides[4] = {h * w * c, 1, w * c, c};
    const std::int64_t alignment = 16;
    d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type)
        .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims)
        .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides)
        .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id)
        .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    if (isVirtual) {
        const bool v = true;
        d.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v);
    }
    d.finalize();
    return d;
}

Desc pointwiseAdd(const Desc& a, const Desc& b, const Desc& y) {
    Desc mode(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    const cudnnPointwiseMode_t add = CUDNN_POINTWISE_ADD;
    const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    mode.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &add)
        .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    mode.finalize();
    Desc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, mode)
        .set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, a)
        .set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b)
        .set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    op.finalize();
    return op;
}

template <typename Note>
std::vector<Note> notesOf(cudnnBackendDescriptor_t engine, cudnnBackendAttributeName_t name,
                          cudnnBackendAttributeType_t type, int max) {
    std::vector<Note> notes(static_cast<std::size_t>(max));
    std::int64_t n = 0;
    if (cudnnBackendGetAttribute(engine, name, type, max, &n, notes.data()) != CUDNN_STATUS_SUCCESS) return {};
    notes.resize(static_cast<std::size_t>(std::max<std::int64_t>(0, n)));
    return notes;
}

}  // namespace

std::string GraphConvShape::key() const {
    std::ostringstream s;
    s << static_cast<int>(dtype) << ':' << n << ',' << cin << ',' << h << ',' << w << ',' << cout << ',' << k << ','
      << stride << ',' << pad << ',' << alpha << ',' << bias << residual << allowRuntimeCompiled;
    return s.str();
}

struct GraphConv::Impl {
    cudnnHandle_t handle = nullptr;
    GraphConvShape shape;
    std::vector<Desc> keep;   // descriptors the graph refers to
    Desc graph;
    struct Candidate {
        Desc plan;
        std::int64_t workspace = 0;
        std::int64_t engineIndex = -1;
        int ordinal = 0;   // among the usable configurations of that engine (PlanId)
        double ms = 0;
    };
    std::vector<Candidate> plans;
    int chosen = 0;
    int offered = 0;
    std::map<std::tuple<const void*, const void*, void*, const void*, const void*, void*>, Desc> packs;

    cudnnBackendDescriptor_t packFor(const Candidate& c, const void* x, const void* w, void* y, const float* bias,
                                     const void* residual, void* ws) {
        auto key = std::make_tuple(x, w, y, static_cast<const void*>(bias), residual, ws);
        if (&c == &plans[static_cast<std::size_t>(chosen)]) {
            auto it = packs.find(key);
            if (it != packs.end()) return it->second.get();
        }
        std::vector<void*> ptrs{const_cast<void*>(x), const_cast<void*>(w), y};
        std::vector<std::int64_t> ids{kX, kW, kY};
        if (shape.bias) {
            ptrs.push_back(const_cast<float*>(bias));
            ids.push_back(kBias);
        }
        if (shape.residual) {
            ptrs.push_back(const_cast<void*>(residual));
            ids.push_back(kResidual);
        }
        Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
        pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<std::int64_t>(ptrs.size()),
                 ptrs.data())
            .set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<std::int64_t>(ids.size()), ids.data())
            .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
        pack.finalize();
        if (&c != &plans[static_cast<std::size_t>(chosen)]) {
            // Benchmark packs are not kept: they are only for plans that may lose.
            scratch = std::move(pack);
            return scratch.get();
        }
        return packs.emplace(key, std::move(pack)).first->second.get();
    }
    Desc scratch;

    void buildGraph();
    void findPlans(std::size_t workspaceCap, int maxPlans, PlanId only);
};

// cuDNN's backend API builds one operation graph as a fixed sequence of descriptors (x, w, y,
// conv, then the bias/residual pointwise nodes), each pointing at the previous.
void GraphConv::Impl::buildGraph() {
    Impl& s = *this;
    s.keep.reserve(64);   // `last` below points into it; configs join later
    const cudnnDataType_t io = cudnnTypeOf(shape.dtype);
    const bool fused = shape.bias || shape.residual;
    Desc x = tensor(kX, io, shape.n, shape.cin, shape.h, shape.w);
    // Filter [cout, cin, k, k] stored KRSC ([cout][k][k][cin]).
    Desc w(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    {
        const std::int64_t dims[4] = {shape.cout, shape.cin, shape.k, shape.k};
        const std::int64_t strides[4] = {static_cast<std::int64_t>(shape.k) * shape.k * shape.cin, 1,
                                         static_cast<std::int64_t>(shape.k) * shape.cin, shape.cin};
        const std::int64_t id = kW, alignment = 16;
        w.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &io)
            .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims)
            .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides)
            .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id)
            .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
        w.finalize();
    }
    // The convolution writes y directly, or a float32 virtual tensor the epilogue reads.
    Desc convOut = fused ? tensor(kConvOut, CUDNN_DATA_FLOAT, shape.n, shape.cout, shape.ho, shape.wo, true)
                         : tensor(kY, io, shape.n, shape.cout, shape.ho, shape.wo);
    Desc conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    {
        const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
        const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
        const std::int64_t dims = 2, one[2] = {1, 1}, stride[2] = {shape.stride, shape.stride},
                           pad[2] = {shape.pad, shape.pad};
        conv.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute)
            .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode)
            .set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims)
            .set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, one)
            .set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride)
            .set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad)
            .set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
        conv.finalize();
    }
    std::vector<cudnnBackendDescriptor_t> ops;
    Desc convOp(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
    {
        const float alpha = shape.alpha, beta = 0.0f;
        convOp.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, x)
            .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, w)
            .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, convOut)
            .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv)
            .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha)
            .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
        convOp.finalize();
    }
    ops.push_back(convOp.get());
    if (fused) {
        // conv -> (+ bias) -> (+ residual) -> y, all in float32 until y.
        Desc* last = &convOut;
        if (shape.bias) {
            Desc b = tensor(kBias, CUDNN_DATA_FLOAT, 1, shape.cout, 1, 1);
            Desc out = shape.residual ? tensor(kBiasOut, CUDNN_DATA_FLOAT, shape.n, shape.cout, shape.ho, shape.wo, true)
                                      : tensor(kY, io, shape.n, shape.cout, shape.ho, shape.wo);
            Desc op = pointwiseAdd(*last, b, out);
            ops.push_back(op.get());
            s.keep.push_back(std::move(b));
            s.keep.push_back(std::move(out));
            s.keep.push_back(std::move(op));
            last = &s.keep[s.keep.size() - 2];
        }
        if (shape.residual) {
            Desc r = tensor(kResidual, io, shape.n, shape.cout, shape.ho, shape.wo);
            Desc y = tensor(kY, io, shape.n, shape.cout, shape.ho, shape.wo);
            Desc op = pointwiseAdd(*last, r, y);
            ops.push_back(op.get());
            s.keep.push_back(std::move(r));
            s.keep.push_back(std::move(y));
            s.keep.push_back(std::move(op));
        }
    }
    s.graph = Desc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    s.graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<std::int64_t>(ops.size()),
                ops.data())
        .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    s.graph.finalize();
    s.keep.push_back(std::move(x));
    s.keep.push_back(std::move(w));
    s.keep.push_back(std::move(convOut));
    s.keep.push_back(std::move(conv));
    s.keep.push_back(std::move(convOp));
}

// The deterministic plans the heuristics offer (fp32: no tensor cores; no runtime-compiled
// engines unless allowed), at most `maxPlans` within `workspaceCap`; with `only`, just that one.
void GraphConv::Impl::findPlans(std::size_t workspaceCap, int maxPlans, PlanId only) {
    Impl& s = *this;
    // Heuristics (mode A), then the fallback list if A offers nothing usable.
    std::map<std::int64_t, int> skipped;   // usable configurations passed over per engine (PlanId)
    for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
        skipped.clear();
        Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
        heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, s.graph)
            .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
        if (cudnnBackendFinalize(heur.get()) != CUDNN_STATUS_SUCCESS) continue;
        std::int64_t count = 0;
        if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                     nullptr) != CUDNN_STATUS_SUCCESS)
            continue;
        std::vector<Desc> configs;
        std::vector<cudnnBackendDescriptor_t> raw;
        for (std::int64_t i = 0; i < count; ++i) {
            configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
            raw.push_back(configs.back().get());
        }
        std::int64_t got = 0;
        if (count == 0 || cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                                   raw.data()) != CUDNN_STATUS_SUCCESS)
            continue;
        s.offered += static_cast<int>(got);
        for (std::int64_t i = 0; i < got && static_cast<int>(s.plans.size()) < maxPlans; ++i) {
            Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
            std::int64_t one = 0;
            cudnnBackendDescriptor_t e = engine.get();
            if (cudnnBackendGetAttribute(raw[static_cast<std::size_t>(i)], CUDNN_ATTR_ENGINECFG_ENGINE,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &one, &e) != CUDNN_STATUS_SUCCESS)
                continue;
            bool usable = true;
            for (cudnnBackendNumericalNote_t n : notesOf<cudnnBackendNumericalNote_t>(
                     e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT)) {
                if (n == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) usable = false;
                if (shape.dtype == DType::F32 &&
                    (n == CUDNN_NUMERICAL_NOTE_TENSOR_CORE || n == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS))
                    usable = false;
            }
            for (cudnnBackendBehaviorNote_t n : notesOf<cudnnBackendBehaviorNote_t>(
                     e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT))
                if (n == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION && !shape.allowRuntimeCompiled) usable = false;
            if (!usable) continue;
            std::int64_t engineIndex = -1;
            (void)cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &one, &engineIndex);
            int ordinal = 0;
            for (const Impl::Candidate& earlier : s.plans) ordinal += earlier.engineIndex == engineIndex ? 1 : 0;
            ordinal += skipped[engineIndex];
            if (only.engine >= 0 && (engineIndex != only.engine || ordinal != only.ordinal)) {
                ++skipped[engineIndex];
                continue;
            }
            Impl::Candidate c;
            c.plan = Desc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
            c.plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle)
                .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                     &raw[static_cast<std::size_t>(i)]);
            if (cudnnBackendFinalize(c.plan.get()) != CUDNN_STATUS_SUCCESS) continue;
            if (cudnnBackendGetAttribute(c.plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                         &one, &c.workspace) != CUDNN_STATUS_SUCCESS)
                continue;
            if (c.workspace < 0 || static_cast<std::size_t>(c.workspace) > workspaceCap) continue;
            c.engineIndex = engineIndex;
            c.ordinal = ordinal;
            s.plans.push_back(std::move(c));
        }
        for (Desc& c : configs) s.keep.push_back(std::move(c));   // plans were made from them
        if (!s.plans.empty()) break;
    }
}

GraphConv::GraphConv(cudnnHandle_t handle, const GraphConvShape& shape, std::size_t workspaceCap, int maxPlans,
                     PlanId only)
    : impl_(std::make_unique<Impl>()) {
    Impl& s = *impl_;
    s.handle = handle;
    s.shape = shape;
    s.buildGraph();
    s.findPlans(workspaceCap, maxPlans, only);
    if (s.plans.empty() && only.engine >= 0)
        throw std::runtime_error("cuDNN graph API: engine " + std::to_string(only.engine) + " (configuration " +
                                 std::to_string(only.ordinal) + ") is not offered or not usable for convolution " +
                                 shape.key());
    if (s.plans.empty())
        throw std::runtime_error("cuDNN graph API: no deterministic engine for convolution " + shape.key() + " (" +
                                 std::to_string(s.offered) + " offered)");
}

GraphConv::~GraphConv() = default;

double GraphConv::benchmark(cudaStream_t stream, const void* x, const void* w, void* y, const float* bias,
                            const void* residual, void* workspace, int repeats) {
    Impl& s = *impl_;
    double best = -1;
    int bestIndex = 0;
    for (std::size_t i = 0; i < s.plans.size(); ++i) {
        Impl::Candidate& c = s.plans[i];
        const cudnnBackendDescriptor_t pack = s.packFor(c, x, w, y, bias, residual, workspace);
        if (cudnnBackendExecute(s.handle, c.plan.get(), pack) != CUDNN_STATUS_SUCCESS) {
            (void)cudaGetLastError();
            c.ms = -1;
            continue;
        }
        c.ms = medianGpuMs(stream, repeats, 0,
                           [&] { TESSERA_CHECK(cudnnBackendExecute(s.handle, c.plan.get(), pack)); });
        if (best < 0 || c.ms < best) {
            best = c.ms;
            bestIndex = static_cast<int>(i);
        }
    }
    if (best < 0) throw std::runtime_error("cuDNN graph API: every plan failed to run for " + s.shape.key());
    s.chosen = bestIndex;
    s.packs.clear();
    return best;
}

void GraphConv::run(const void* x, const void* w, void* y, const float* bias, const void* residual, void* workspace) {
    Impl& s = *impl_;
    const Impl::Candidate& c = s.plans[static_cast<std::size_t>(s.chosen)];
    TESSERA_CHECK(cudnnBackendExecute(s.handle, c.plan.get(), s.packFor(c, x, w, y, bias, residual, workspace)));
}

std::size_t GraphConv::workspaceBytes() const {
    return static_cast<std::size_t>(impl_->plans[static_cast<std::size_t>(impl_->chosen)].workspace);
}

std::string GraphConv::engineName() const {
    std::ostringstream s;
    s << "graph engine " << impl_->plans[static_cast<std::size_t>(impl_->chosen)].engineIndex << " ("
      << impl_->plans.size() << " of " << impl_->offered << " candidates)";
    return s.str();
}

GraphConv::PlanId GraphConv::planId() const {
    const Impl::Candidate& c = impl_->plans[static_cast<std::size_t>(impl_->chosen)];
    return PlanId{c.engineIndex, c.ordinal};
}

int GraphConv::candidates() const { return static_cast<int>(impl_->plans.size()); }

}  // namespace tessera
