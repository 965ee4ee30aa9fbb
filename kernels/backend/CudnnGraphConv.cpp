#include "kernels/backend/CudnnGraphConv.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceResources.h"
#include "kernels/device/GpuTiming.h"

namespace tessera {

namespace {

using cudnn::Desc;

// Unique ids of the graph's tensors (the variant pack names pointers by them).
enum : std::int64_t { kX = 1, kW = 2, kY = 3, kBias = 4, kResidual = 5, kConvOut = 6, kBiasOut = 7 };

// NHWC tensor [n, c, h, w] (dimensions in NCHW order, strides of the NHWC layout), its pixels
// `pitch` elements apart (0: packed).
Desc tensor(std::int64_t id, cudnnDataType_t type, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w,
            bool isVirtual = false, std::int64_t pitch = 0) {
    const std::int64_t p = pitch > 0 ? pitch : c;
    return cudnn::tensor(id, type, {n, c, h, w}, {h * w * p, 1, w * p, p}, isVirtual);
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

}  // namespace

std::string GraphConvShape::key() const {
    std::ostringstream s;
    s << static_cast<int>(dtype) << ':' << n << ',' << cin << ',' << h << ',' << w << ',' << cout << ',' << k << ','
      << stride << ',' << pad << ',' << alpha << ',' << bias << residual << allowRuntimeCompiled;
    if (xPitch || yPitch) s << ",p" << xPitch << ',' << yPitch;
    return s.str();
}

struct GraphConv::Impl {
    cudnnHandle_t handle = nullptr;
    GraphConvShape shape;
    std::vector<Desc> keep;  // descriptors the graph refers to
    Desc graph;
    using Candidate = cudnn::Plan;
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
            .set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<std::int64_t>(ids.size()),
                 ids.data())
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
    s.keep.reserve(64);  // `last` below points into it; configs join later
    const cudnnDataType_t io = cudnn::typeOf(shape.dtype);
    const bool fused = shape.bias || shape.residual;
    Desc x = tensor(kX, io, shape.n, shape.cin, shape.h, shape.w, false, shape.xPitch);
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
                         : tensor(kY, io, shape.n, shape.cout, shape.ho, shape.wo, false, shape.yPitch);
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
            Desc out = shape.residual
                           ? tensor(kBiasOut, CUDNN_DATA_FLOAT, shape.n, shape.cout, shape.ho, shape.wo, true)
                           : tensor(kY, io, shape.n, shape.cout, shape.ho, shape.wo, false, shape.yPitch);
            Desc op = pointwiseAdd(*last, b, out);
            ops.push_back(op.get());
            s.keep.push_back(std::move(b));
            s.keep.push_back(std::move(out));
            s.keep.push_back(std::move(op));
            last = &s.keep[s.keep.size() - 2];
        }
        if (shape.residual) {
            Desc r = tensor(kResidual, io, shape.n, shape.cout, shape.ho, shape.wo);
            Desc y = tensor(kY, io, shape.n, shape.cout, shape.ho, shape.wo, false, shape.yPitch);
            Desc op = pointwiseAdd(*last, r, y);
            ops.push_back(op.get());
            s.keep.push_back(std::move(r));
            s.keep.push_back(std::move(y));
            s.keep.push_back(std::move(op));
        }
    }
    s.graph = Desc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    s.graph
        .set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<std::int64_t>(ops.size()),
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
    cudnn::PlanFilter filter;
    filter.noTensorCores = shape.dtype == DType::F32;
    filter.allowRuntimeCompiled = shape.allowRuntimeCompiled;
    plans = cudnn::findPlans(handle, graph, workspaceCap, maxPlans, only, filter, offered, keep);
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
    const int best = cudnn::fastestPlan(s.plans, stream, repeats, [&](const Impl::Candidate& c) {
        return cudnnBackendExecute(s.handle, c.plan.get(), s.packFor(c, x, w, y, bias, residual, workspace)) ==
               CUDNN_STATUS_SUCCESS;
    });
    if (best < 0) throw std::runtime_error("cuDNN graph API: every plan failed to run for " + s.shape.key());
    s.chosen = best;
    s.packs.clear();
    return s.plans[static_cast<std::size_t>(best)].ms;
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
