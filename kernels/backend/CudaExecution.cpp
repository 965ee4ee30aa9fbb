// CudaBackend::Impl: execution. Lanes, the launches the ops make (convolutions, GEMMs), the
// host path (run: upload, enqueue, download) and enqueue with the forward's own CUDA graphs
// (one per batch size, captured on first use when setGraphs(true): used by `tessera-cli bench`,
// the forward profile and tst_cudabackend; the engine keeps its own in kernels/engine/GraphCache.h;
// both capture through kernels/device/GraphCapture.h).
#include <algorithm>
#include <chrono>
#include <stdexcept>

#include <cublasLt.h>

#include "core/cpu/CpuBackend.h"
#include "kernels/backend/CudaBackendImpl.h"
#include "kernels/device/CudaCheck.h"
#include "kernels/device/GraphCapture.h"
#include "kernels/ops/LayoutConvert.cuh"

namespace tessera {

void CudaBackend::Impl::selectLane(int lane, cudaStream_t s) {
    if (lane < 0 || lane >= lanes)
        throw std::invalid_argument("CudaBackend: lane " + std::to_string(lane) + " outside 0.." +
                                    std::to_string(lanes - 1) + " (the prepared lanes)");
    actBase = laneAct[static_cast<std::size_t>(lane)];
    workspace = actBase + activationBytes;
    opStream = s;
    opCublas = lane == 0 ? cublas.get() : laneCublas[static_cast<std::size_t>(lane) - 1].get();
    TESSERA_CHECK(cudnnSetStream(cudnn.get(), s));
    // cublasSetStream resets the handle's workspace to cuBLAS' own pool: set ours again.
    TESSERA_CHECK(cublasSetStream(opCublas, s));
    TESSERA_CHECK(cublasSetWorkspace(opCublas, workspace + convWorkspace, kCublasWorkspace));
}

char* CudaBackend::Impl::lanePtr(int lane, int buf) const {
    if (lane < 0 || lane >= static_cast<int>(laneAct.size()) || !laneAct[static_cast<std::size_t>(lane)])
        throw std::invalid_argument("CudaBackend: lane " + std::to_string(lane) + " is not prepared");
    return laneAct[static_cast<std::size_t>(lane)] + buffers[static_cast<std::size_t>(buf)].offset;
}

void CudaBackend::Impl::setConvBatch(ConvLayer& c, int batch) {
    if (c.descBatch == batch) return;
    // NHWC with the pixels `pitch` elements apart (a channel slice of a dense group's buffer).
    auto nhwc = [this, batch](cudnnTensorDescriptor_t d, int ch, int h, int w, int pitch) {
        if (pitch == 0 || pitch == ch) {
            TESSERA_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NHWC, cudnnType(dtype), batch, ch, h, w));
            return;
        }
        TESSERA_CHECK(
            cudnnSetTensor4dDescriptorEx(d, cudnnType(dtype), batch, ch, h, w, h * w * pitch, 1, w * pitch, pitch));
    };
    nhwc(c.xDesc.get(), c.cin, c.h, c.w, c.xPitch);
    nhwc(c.yDesc.get(), c.cout, c.ho, c.wo, c.yPitch);
    TESSERA_CHECK(cudnnSetConvolutionMathType(c.convDesc.get(), c.math[static_cast<std::size_t>(batch)]));
    c.descBatch = batch;
}

void CudaBackend::Impl::runConv(int layer, const void* x, void* y, float alpha, float beta, int batch) {
    ConvLayer& c = convs[static_cast<std::size_t>(layer)];
    // A channel slice has its graph plan alone, made for the prepared batch: a smaller batch runs
    // it whole (its buffers hold maxBatch samples; the extra ones are not read).
    if (c.strided()) {
        if (!c.graph || beta != 0.0f || alpha != c.alpha)
            throw std::logic_error("CudaBackend: " + c.name + ": a channel slice's convolution without its plan");
        c.graph->run(x, wt(c.weight), y, nullptr, nullptr, workspace);
        return;
    }
    if (c.graph && batch == maxBatch && beta == 0.0f && alpha == c.alpha) {
        c.graph->run(x, wt(c.weight), y, nullptr, nullptr, workspace);
        return;
    }
    setConvBatch(c, batch);
    TESSERA_CHECK(cudnnConvolutionForward(cudnn.get(), &alpha, c.xDesc.get(), x, c.wDesc.get(), wt(c.weight),
                                          c.convDesc.get(), c.algo[static_cast<std::size_t>(batch)], workspace,
                                          convWorkspace, &beta, c.yDesc.get(), y));
}

bool CudaBackend::Impl::runConvFused(int layer, const void* x, void* y, const void* residual, int batch) {
    ConvLayer& c = convs[static_cast<std::size_t>(layer)];
    if (!c.fused || batch != maxBatch) return false;
    c.fused->run(x, wt(c.weight), y, wf(c.epilogueBias), residual, workspace);
    return true;
}

void CudaBackend::Impl::gemmRows(DType t, const void* w, const void* x, void* y, int rows, int k, int nOut, float alpha,
                                 float beta) {
    const cublasComputeType_t compute = t == DType::F32 ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F;
    TESSERA_CHECK(cublasGemmEx(opCublas, CUBLAS_OP_T, CUBLAS_OP_N, nOut, rows, k, &alpha, w, cublasType(t), k, x,
                               cublasType(t), k, &beta, y, cublasType(t), nOut, compute, CUBLAS_GEMM_DEFAULT));
}

// cuBLASLt's descriptors for one shape (column-major: D[nOut, rows] = W^T[nOut, k] X[k, rows]).
struct CudaBackend::Impl::LtPlan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool usable = false;
    ~LtPlan() {
        if (c) cublasLtMatrixLayoutDestroy(c);
        if (b) cublasLtMatrixLayoutDestroy(b);
        if (a) cublasLtMatrixLayoutDestroy(a);
        if (op) cublasLtMatmulDescDestroy(op);
    }
};

bool CudaBackend::Impl::gemmRowsBias(DType t, const void* w, const void* x, void* y, int rows, int k, int nOut,
                                     const void* bias, const void* residual) {
    if (t == DType::F32) return false;
    // A cuBLAS handle is a cuBLASLt handle (cuBLASLt's documentation: "a simple cast").
    auto lt = reinterpret_cast<cublasLtHandle_t>(opCublas);
    // Held through the enqueue: ops of one shape share a descriptor, and each sets its own bias
    // pointer in it (lanes may enqueue from several threads).
    const std::lock_guard<std::mutex> lock(ltMutex);
    std::shared_ptr<LtPlan> plan;
    {
        auto& slot = ltPlans[{static_cast<int>(t), rows, k, nOut, residual != nullptr}];
        if (!slot) {
            auto p = std::make_shared<LtPlan>();
            const cudaDataType_t type = cublasType(t);
            TESSERA_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
            const cublasOperation_t transA = CUBLAS_OP_T, transB = CUBLAS_OP_N;
            TESSERA_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &transA, sizeof(transA)));
            TESSERA_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &transB, sizeof(transB)));
            const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
            TESSERA_CHECK(
                cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
            TESSERA_CHECK(
                cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type, sizeof(type)));
            TESSERA_CHECK(cublasLtMatrixLayoutCreate(&p->a, type, k, nOut, k));
            TESSERA_CHECK(cublasLtMatrixLayoutCreate(&p->b, type, k, rows, k));
            TESSERA_CHECK(cublasLtMatrixLayoutCreate(&p->c, type, nOut, rows, nOut));
            cublasLtMatmulPreference_t pref = nullptr;
            TESSERA_CHECK(cublasLtMatmulPreferenceCreate(&pref));
            const std::size_t bytes = kCublasWorkspace;
            TESSERA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes,
                                                               sizeof(bytes)));
            cublasLtMatmulHeuristicResult_t found{};
            int count = 0;
            const cublasStatus_t st =
                cublasLtMatmulAlgoGetHeuristic(lt, p->op, p->a, p->b, p->c, p->c, pref, 1, &found, &count);
            cublasLtMatmulPreferenceDestroy(pref);
            p->usable = st == CUBLAS_STATUS_SUCCESS && count > 0;
            if (p->usable) p->algo = found.algo;
            slot = std::move(p);
        }
        plan = slot;
    }
    if (!plan->usable) return false;
    TESSERA_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    const float alpha = 1.0f, beta = residual ? 1.0f : 0.0f;
    TESSERA_CHECK(cublasLtMatmul(lt, plan->op, &alpha, w, plan->a, x, plan->b, &beta, residual ? residual : y, plan->c,
                                 y, plan->c, &plan->algo, workspace + convWorkspace, kCublasWorkspace, opStream));
    return true;
}

void* CudaBackend::Impl::graphValuePtr(int v, int lane) const {
    if (!prepared) throw std::logic_error("CudaBackend: device buffers before prepare");
    if (graph.value(v).kind == ValueKind::Vector)
        return lanePtr(lane, valueVec[static_cast<std::size_t>(v)].buf) +
               valueVec[static_cast<std::size_t>(v)].offset * sizeof(float);
    const int buf = valueAct[static_cast<std::size_t>(v)].buf;
    return buf < 0 ? nullptr : lanePtr(lane, buf);
}

void CudaBackend::Impl::checkIds(const std::vector<const float*>& inputs, int batch) const {
    const auto& in = graph.inputs();
    for (const GraphOp& op : graph.ops()) {
        if (op.kind != OpKind::TokenEmbedding) continue;
        const auto k = static_cast<std::size_t>(std::find(in.begin(), in.end(), op.input) - in.begin());
        if (k < inputs.size())
            cpu::checkTokenIds(batch, graph.value(op.input).tokens, graph.param(op.params[0]).shape.at(0), inputs[k]);
    }
}

void CudaBackend::Impl::runOps(int batch) {
    for (Op& op : ops) {
        op.run(batch);
        if (syncEveryOp) TESSERA_CHECK(cudaStreamSynchronize(opStream));
    }
}

cudaGraphExec_t CudaBackend::Impl::capture(int batch) {
    CapturedGraph captured;
    try {
        captured = captureGraph(stream.get(), [&] { runOps(batch); });
    } catch (const GraphCaptureFailed& e) {
        graphsFailed = true;
        graphStats.mode = "off";
        graphStats.fallbackReason = e.what();
        return nullptr;
    }
    const auto t1 = std::chrono::steady_clock::now();
    CudaGraphExec exec = instantiateGraph(captured.graph.get());
    const auto t2 = std::chrono::steady_clock::now();
    graphStats.captures += 1;
    graphStats.instantiations += 1;
    graphStats.nodes = captured.nodes;
    graphStats.captureMs += captured.captureMs;
    graphStats.instantiateMs += std::chrono::duration<double, std::milli>(t2 - t1).count();
    const cudaGraphExec_t launchable = exec.get();
    graphs[batch] = std::move(exec);
    return launchable;
}

void CudaBackend::Impl::enqueue(int batch, int lane, cudaStream_t s) {
    if (!prepared) throw std::logic_error("CudaBackend: enqueue before prepare");
    if (batch < 1 || batch > maxBatch)
        throw std::invalid_argument("CudaBackend: batch " + std::to_string(batch) + " outside 1.." +
                                    std::to_string(maxBatch) + " (the prepared tile batch)");
    if (!s) s = stream.get();
    selectLane(lane, s);
    // Inside a capture of the caller's own (a step graph) the forward's kernels become
    // nodes of that graph directly.
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    TESSERA_CHECK(cudaStreamIsCapturing(s, &capturing));
    if (capturing != cudaStreamCaptureStatusNone || lane != 0 || s != stream.get()) {
        runOps(batch);
        return;
    }
    if (graphsWanted && !graphsFailed && !syncEveryOp) {
        auto it = graphs.find(batch);
        cudaGraphExec_t exec = nullptr;
        if (it != graphs.end()) {
            exec = it->second.get();
            graphStats.hits += 1;
        } else {
            graphStats.misses += 1;
            exec = capture(batch);
        }
        if (exec) {
            TESSERA_CHECK(cudaGraphLaunch(exec, stream.get()));
            return;
        }
    }
    runOps(batch);
}

void CudaBackend::Impl::stagedToActivation(std::size_t k, int batch, cudaStream_t s) {
    const int v = graph.inputs()[k];
    const GraphValue& g = graph.value(v);
    const Act& a = valueAct[static_cast<std::size_t>(v)];
    if (g.kind == ValueKind::Vector || a.buf < 0) return;  // vectors: not staged; ids only: read from the staging
    // Tokens: host [B, rows, C] is the device layout; as one-channel NCHW the conversion is a
    // plain type conversion.
    const bool tokens = g.kind == ValueKind::Tokens;
    launchNchwToNhwc(reinterpret_cast<const float*>(ptr(stageIn[k])), dtype, ptr(a.buf), batch, tokens ? 1 : g.channels,
                     tokens ? a.h * a.w * a.c : a.h, tokens ? 1 : a.w, tokens ? 1 : a.c, 1.0f, s);
}

void CudaBackend::Impl::activationToStaged(std::size_t k, int batch, cudaStream_t s) {
    const int v = graph.outputs()[k];
    const GraphValue& g = graph.value(v);
    if (g.kind == ValueKind::Vector) return;
    const Act& a = valueAct[static_cast<std::size_t>(v)];
    const bool tokens = g.kind == ValueKind::Tokens;  // as in stagedToActivation
    launchNhwcToNchw(dtype, ptr(a.buf), reinterpret_cast<float*>(ptr(stageOut[k])), batch, tokens ? 1 : g.channels,
                     tokens ? a.h * a.w * a.c : a.h, tokens ? 1 : a.w, tokens ? 1 : a.c, s);
}

float* CudaBackend::Impl::stagingPtr(const std::vector<int>& stages, std::size_t k) const {
    if (!prepared) throw std::logic_error("CudaBackend: staging buffers before prepare");
    const int buf = stages.at(k);
    return buf < 0 ? nullptr : reinterpret_cast<float*>(lanePtr(0, buf));
}

void CudaBackend::Impl::upload(const std::vector<const float*>& inputs, int batch, cudaStream_t s) {
    if (inputs.size() != graph.inputs().size())
        throw std::invalid_argument("CudaBackend: " + std::to_string(inputs.size()) + " inputs for a graph of " +
                                    std::to_string(graph.inputs().size()));
    for (std::size_t k = 0; k < inputs.size(); ++k) {
        const int v = graph.inputs()[k];
        const GraphValue& g = graph.value(v);
        if (g.kind == ValueKind::Vector) {
            TESSERA_CHECK(cudaMemcpyAsync(vec(valueVec[static_cast<std::size_t>(v)]), inputs[k],
                                          static_cast<std::size_t>(batch) * g.channels * 4, cudaMemcpyHostToDevice, s));
            continue;
        }
        TESSERA_CHECK(cudaMemcpyAsync(ptr(stageIn[k]), inputs[k],
                                      static_cast<std::size_t>(graph.elements(v, batch, tileH, tileW)) * 4,
                                      cudaMemcpyHostToDevice, s));
        stagedToActivation(k, batch, s);
    }
}

void CudaBackend::Impl::download(const std::vector<float*>& outputs, int batch, cudaStream_t s) {
    if (outputs.size() != graph.outputs().size())
        throw std::invalid_argument("CudaBackend: " + std::to_string(outputs.size()) + " outputs for a graph of " +
                                    std::to_string(graph.outputs().size()));
    for (std::size_t k = 0; k < outputs.size(); ++k) {
        const int v = graph.outputs()[k];
        const GraphValue& g = graph.value(v);
        if (g.kind == ValueKind::Vector) {
            TESSERA_CHECK(cudaMemcpyAsync(outputs[k], vec(valueVec[static_cast<std::size_t>(v)]),
                                          static_cast<std::size_t>(batch) * g.channels * 4, cudaMemcpyDeviceToHost, s));
            continue;
        }
        activationToStaged(k, batch, s);
        TESSERA_CHECK(cudaMemcpyAsync(outputs[k], ptr(stageOut[k]),
                                      static_cast<std::size_t>(graph.elements(v, batch, tileH, tileW)) * 4,
                                      cudaMemcpyDeviceToHost, s));
    }
}

void CudaBackend::Impl::enqueueStaged(int batch) {
    if (!prepared) throw std::logic_error("CudaBackend: enqueueStaged before prepare");
    if (batch < 1 || batch > maxBatch)
        throw std::invalid_argument("CudaBackend: batch " + std::to_string(batch) + " outside 1.." +
                                    std::to_string(maxBatch) + " (the prepared tile batch)");
    TESSERA_CHECK(cudaSetDevice(device));
    selectOwnLane();
    cudaStream_t s = stream.get();
    for (std::size_t k = 0; k < graph.inputs().size(); ++k) stagedToActivation(k, batch, s);
    enqueue(batch, 0, s);
    for (std::size_t k = 0; k < graph.outputs().size(); ++k) activationToStaged(k, batch, s);
}

void CudaBackend::Impl::run(const std::vector<const float*>& inputs, int batch, const std::vector<float*>& outputs) {
    if (!prepared) throw std::logic_error("CudaBackend: run before prepare");
    selectOwnLane();
    if (batch < 1 || batch > maxBatch)
        throw std::invalid_argument("CudaBackend: batch " + std::to_string(batch) + " outside 1.." +
                                    std::to_string(maxBatch) + " (the prepared tile batch)");
    TESSERA_CHECK(cudaSetDevice(device));
    checkIds(inputs, batch);
    cudaStream_t s = stream.get();
    upload(inputs, batch, s);
    enqueue(batch, 0, s);
    download(outputs, batch, s);
    TESSERA_CHECK(cudaStreamSynchronize(s));
}

}  // namespace tessera
