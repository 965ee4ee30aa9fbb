// CudaBackend::Impl: attention's lowering (over feature maps and over tokens) and its two
// paths, the fused kernel (FlashAttention.cuh) and the blocked plan (AttentionPlan.h); which
// one an attention takes is chosen in CudaAlgorithmChoice.cpp (choosePath).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "kernels/backend/CudaBackendImpl.h"
#include "kernels/device/CudaCheck.h"
#include "kernels/ops/BiasResidual.cuh"
#include "kernels/ops/CausalMask.cuh"
#include "kernels/ops/Softmax.cuh"

namespace tessera {

void CudaBackend::Impl::attend(const AttentionOperands& a, const AttentionPlan& plan, int batch, float scale,
                               float* scores, void* probs) {
    const DType t = dtype;
    const cudaDataType_t ct = cublasType(t);
    const long long es = static_cast<long long>(dtypeSize(t));
    const cublasComputeType_t compute = t == DType::F32 ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F;
    const float one = 1.0f, zero = 0.0f;
    const bool overImages = a.heads == 1;
    const long long qStride = overImages ? a.qImage : a.headDim, kStride = overImages ? a.kImage : a.headDim;
    const long long vStride = overImages ? a.vImage : a.headDim, oStride = overImages ? a.oImage : a.headDim;
    for (int b0 = 0; b0 < batch; b0 += plan.imagesPerPass)
        for (int h0 = 0; h0 < a.heads; h0 += plan.headsPerPass)
            for (int q0 = 0; q0 < a.queries; q0 += plan.queryBlock) {
                const int count =
                    overImages ? std::min(plan.imagesPerPass, batch - b0) : std::min(plan.headsPerPass, a.heads - h0);
                const int nq = std::min(plan.queryBlock, a.queries - q0);
                const long long block = static_cast<long long>(nq) * a.keys;
                const long long head = static_cast<long long>(h0) * a.headDim;
                const char* qB = static_cast<const char*>(a.q) + (b0 * a.qImage + q0 * a.qRow + head) * es;
                const char* kB = static_cast<const char*>(a.k) + (b0 * a.kImage + head) * es;
                const char* vB = static_cast<const char*>(a.v) + (b0 * a.vImage + head) * es;
                char* oB = static_cast<char*>(a.o) + (b0 * a.oImage + q0 * a.oRow + head) * es;
                // S^T (keys x queries, column-major) = K_h^T-view x Q_h: row-major S[query][key].
                TESSERA_CHECK(cublasGemmStridedBatchedEx(opCublas, CUBLAS_OP_T, CUBLAS_OP_N, a.keys, nq, a.headDim,
                                                         &scale, kB, ct, static_cast<int>(a.kRow), kStride, qB, ct,
                                                         static_cast<int>(a.qRow), qStride, &zero, scores, CUDA_R_32F,
                                                         a.keys, block, count, compute, CUBLAS_GEMM_DEFAULT));
                if (a.causal) launchCausalMask(scores, count, nq, a.keys, q0, opStream);
                launchSoftmaxRows(t, scores, probs, static_cast<long long>(count) * nq, a.keys, opStream);
                // O_h^T (d x queries) = V_h^T-view x P^T-view.
                TESSERA_CHECK(cublasGemmStridedBatchedEx(opCublas, CUBLAS_OP_N, CUBLAS_OP_N, a.headDim, nq, a.keys,
                                                         &one, vB, ct, static_cast<int>(a.vRow), vStride, probs, ct,
                                                         a.keys, block, &zero, oB, ct, static_cast<int>(a.oRow),
                                                         oStride, count, compute, CUBLAS_GEMM_DEFAULT));
            }
}

FlashAttentionArgs CudaBackend::Impl::flashArgs(DType t, const AttentionOperands& a, int batch, float scale) {
    FlashAttentionArgs f = a;
    f.dtype = t;
    f.batch = batch;
    f.scale = scale;
    return f;
}

CudaBackend::Impl::AttentionChoice CudaBackend::Impl::attentionPath(const GraphOp& op, const AttentionOperands& a,
                                                                    std::initializer_list<long long> offsets,
                                                                    std::size_t inBytes, std::size_t outBytes,
                                                                    const AttentionBinder& bind, float scale) {
    const AttentionPlan plan =
        planAttention(maxBatch, a.heads, a.queries, a.keys, dtypeSize(dtype), settings.attentionBudgetBytes);
    const std::string key =
        "attention n" + std::to_string(maxBatch) + " h" + std::to_string(a.heads) + " q" + std::to_string(a.queries) +
        " k" + std::to_string(a.keys) + " d" + std::to_string(a.headDim) + (a.causal ? " causal" : "") + " rows " +
        std::to_string(a.qRow) + "," + std::to_string(a.kRow) + " scores " + std::to_string(plan.scoreBytes);
    // Once per distinct shape and layout in a prepare (later ops of the shape take it).
    auto it = attentionChosen.find(key);
    if (it == attentionChosen.end()) {
        CudaBackend::AttentionPath chosen;
        chosen.reason = flashAttentionRefusal(dtype, a.headDim, maxBatch, a.heads, offsets);
        if (chosen.reason.empty()) chosen = choosePath(key, a.headDim, plan, inBytes, outBytes, bind, scale);
        if (std::all_of(offsets.begin(), offsets.end(), [](long long e) { return e % 8 == 0; }))
            sdpaChosen[key] = chooseCudnnAttention(key, a, plan, inBytes, outBytes, bind, scale, chosen);
        else
            chosen.cudnnReason = "operands not 16-byte aligned";
        it = attentionChosen.emplace(key, chosen).first;
    }
    CudaBackend::AttentionPath record = it->second;
    record.op = op.name;
    record.flops = 4.0 * maxBatch * a.heads * static_cast<double>(a.queries) * a.keys * a.headDim;
    AttentionChoice choice;
    choice.fused = record.fused;
    choice.tiling = {record.blockQueries, record.warps};
    choice.sdpa = sdpaChosen[key];
    if (!choice.fused) {
        choice.plan = plan;
        choice.scores = newBuffer(plan.scoreBytes, op.name + ".scores");
        choice.probs = newBuffer(plan.probBytes, op.name + ".probs");
    }
    char times[96] = "";
    if (record.fusedMs >= 0)
        std::snprintf(times, sizeof times, "; fused %.4f ms, blocked %.4f ms", record.fusedMs, record.blockedMs);
    const std::string tilings = record.tilingTimes.empty() ? "" : " (tilings: " + record.tilingTimes + ")";
    std::string cudnnNote;
    if (choice.sdpa || record.cudnnMs >= 0) {
        char ms[96] = "";
        if (record.cudnnMs >= 0)
            std::snprintf(ms, sizeof ms, "; cuDNN %.4f ms, own %.4f ms", record.cudnnMs, record.ownMs);
        cudnnNote = (choice.sdpa ? "; at batch " + std::to_string(maxBatch) + ": " + record.cudnn
                                 : std::string("; cuDNN SDPA not taken")) +
                    " [" + record.cudnnReason + ms + "]";
    } else if (!record.cudnnReason.empty() && dtype != DType::F32)
        cudnnNote = "; cuDNN SDPA: " + record.cudnnReason;
    attentionNotes += "  " + op.name + ": " +
                      (choice.fused ? "fused (" + flashAttentionTiling(a.headDim, choice.tiling) + ")"
                                    : "blocked, " + plan.describe(a.queries)) +
                      " [" + record.reason + times + tilings + "]" + cudnnNote + "\n";
    attentionRecords.push_back(record);
    return choice;
}

void CudaBackend::Impl::lowerAttention(int index) {
    const GraphOp& op = opAt(index);
    if (!op.qkvBias)
        throw std::invalid_argument("CudaBackend: " + op.name + ": attention over a feature map needs q/k/v biases");
    const Act xn = act(op.input, op);
    const Act res = op.residual >= 0 ? act(op.residual, op) : Act{};
    const int C = xn.c, N = xn.h * xn.w, heads = op.heads, d = C / heads;
    std::vector<float> wqkv, bqkv;
    for (int k = 0; k < 3; ++k) {
        const HostTensor& w = weight(op.params[static_cast<std::size_t>(2 * k)]);
        const HostTensor& b = weight(op.params[static_cast<std::size_t>(2 * k + 1)]);
        wqkv.insert(wqkv.end(), w.data.begin(), w.data.end());
        bqkv.insert(bqkv.end(), b.data.begin(), b.data.end());
    }
    const std::size_t wq = blob.addTyped(wqkv, dtype), bq = blob.addFloats(bqkv);
    const std::size_t wo = blob.addTyped(weight(op.params[6]).data, dtype);
    const std::size_t bo = floats(op.params[7]);

    const std::size_t es = dtypeSize(dtype);
    const std::size_t qkvBytes = static_cast<std::size_t>(maxBatch) * N * 3 * C * es;
    const std::size_t headBytes = static_cast<std::size_t>(maxBatch) * N * C * es;
    // Q, K, V interleaved per pixel ([q | k | v], 3C), the heads' output [N, C].
    auto operands = [=](char* qkvBase, char* oBase) {
        AttentionOperands a;
        a.q = qkvBase;
        a.k = qkvBase ? qkvBase + static_cast<std::size_t>(C) * es : nullptr;
        a.v = qkvBase ? qkvBase + static_cast<std::size_t>(2 * C) * es : nullptr;
        a.qRow = a.kRow = a.vRow = 3LL * C;
        a.qImage = a.kImage = a.vImage = 3LL * C * N;
        a.o = oBase;
        a.oRow = C;
        a.oImage = static_cast<long long>(C) * N;
        a.queries = a.keys = N;
        a.heads = heads;
        a.headDim = d;
        return a;
    };
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    const AttentionChoice path = attentionPath(op, operands(nullptr, nullptr), {3LL * C, 3LL * C * N, C, 2LL * C},
                                               qkvBytes, headBytes, operands, scale);
    const int qkv = newBuffer(qkvBytes, op.name + ".qkv");
    const int o = newBuffer(headBytes, op.name + ".heads");
    const Act out = newAct(C, xn.h, xn.w, op.name + ".out");
    const float s = op.outputScale;
    std::vector<int> bufs{xn.buf, qkv, o, out.buf};
    if (!path.fused) bufs.insert(bufs.end(), {path.scores, path.probs});
    if (res.buf >= 0) bufs.insert(bufs.begin(), res.buf);
    addOp(op.name, bufs, out, [=, this](int batch) {
        const DType t = dtype;
        gemmRows(t, wt(wq), ptr(xn.buf), ptr(qkv), batch * N, C, 3 * C, 1.0f, 0.0f);
        launchBiasResidual(t, ptr(qkv), true, wf(bq), nullptr, static_cast<long long>(batch) * N, 3 * C, 1.0f,
                           opStream);
        runAttention(path, operands(ptr(qkv), ptr(o)), batch, scale);
        gemmRows(t, wt(wo), ptr(o), ptr(out.buf), batch * N, C, C, s, 0.0f);
        launchBiasResidual(t, ptr(out.buf), true, wf(bo), res.buf >= 0 ? ptr(res.buf) : nullptr,
                           static_cast<long long>(batch) * N, C, s, opStream);
    });
    valueAct[static_cast<std::size_t>(op.output)] = out;
}

void CudaBackend::Impl::runAttention(const AttentionChoice& path, const AttentionOperands& a, int batch, float scale) {
    if (path.sdpa && batch == path.sdpa->batch())
        path.sdpa->run(flashArgs(dtype, a, batch, scale), workspace);
    else if (path.fused) {
        FlashAttentionArgs f = flashArgs(dtype, a, batch, scale);
        f.blockQueries = path.tiling.blockQueries;
        f.warps = path.tiling.warps;
        launchFlashAttention(f, opStream);
    } else
        attend(a, path.plan, batch, scale, reinterpret_cast<float*>(ptr(path.scores)), ptr(path.probs));
}

void CudaBackend::Impl::lowerTokenAttention(int index) {
    const GraphOp& op = opAt(index);
    const Act x = act(op.input, op);
    const Act ctx = op.input2 >= 0 ? act(op.input2, op) : x;
    const Act res = op.residual >= 0 ? act(op.residual, op) : Act{};
    const int C = x.c, N = x.h * x.w, M = ctx.h * ctx.w, Ckv = ctx.c, heads = op.heads, d = C / heads;
    std::size_t k = 0;
    auto next = [&]() -> const HostTensor& { return weight(op.params[k++]); };
    const std::vector<float> wqData = next().data;
    const std::vector<float> bqData = op.qkvBias ? next().data : std::vector<float>{};
    std::vector<float> wkv = next().data, bkv = op.qkvBias ? next().data : std::vector<float>{};
    const HostTensor& wvT = next();
    wkv.insert(wkv.end(), wvT.data.begin(), wvT.data.end());
    if (op.qkvBias) {
        const std::vector<float>& bv = next().data;
        bkv.insert(bkv.end(), bv.begin(), bv.end());
    }
    const std::size_t wq = blob.addTyped(wqData, dtype), wkvOff = blob.addTyped(wkv, dtype);
    const std::size_t wo = blob.addTyped(next().data, dtype), bo = blob.addFloats(next().data);
    const bool bias = op.qkvBias;
    const std::size_t bq = bias ? blob.addFloats(bqData) : 0, bkvOff = bias ? blob.addFloats(bkv) : 0;

    const std::size_t es = dtypeSize(dtype);
    const std::size_t qBytes = static_cast<std::size_t>(maxBatch) * N * C * es;
    const std::size_t kvBytes = static_cast<std::size_t>(maxBatch) * M * 2 * C * es;
    const float scale = 1.0f / std::sqrt(static_cast<float>(d)), s = op.outputScale;
    const bool causal = op.causal;
    // Q [N, C], K and V interleaved per context token ([k | v], 2C), the heads' output [N, C].
    auto operands = [=](char* qBase, char* kvBase, char* oBase) {
        AttentionOperands a;
        a.q = qBase;
        a.qRow = C;
        a.qImage = static_cast<long long>(N) * C;
        a.k = kvBase;
        a.v = kvBase ? kvBase + static_cast<std::size_t>(C) * es : nullptr;
        a.kRow = a.vRow = 2LL * C;
        a.kImage = a.vImage = 2LL * C * M;
        a.o = oBase;
        a.oRow = C;
        a.oImage = static_cast<long long>(N) * C;
        a.queries = N;
        a.keys = M;
        a.heads = heads;
        a.headDim = d;
        a.causal = causal;
        return a;
    };
    // For timing: Q, then K | V after it, in one scratch buffer.
    auto bindScratch = [=](char* in, char* oBase) { return operands(in, in + alignUp(qBytes), oBase); };
    const AttentionChoice path =
        attentionPath(op, operands(nullptr, nullptr, nullptr), {C, 2LL * C, static_cast<long long>(N) * C, 2LL * C * M},
                      alignUp(qBytes) + kvBytes, qBytes, bindScratch, scale);
    const int q = newBuffer(qBytes, op.name + ".q");
    const int kv = newBuffer(kvBytes, op.name + ".kv");
    const int o = newBuffer(qBytes, op.name + ".heads");
    const Act out = newAct(C, x.h, x.w, op.name + ".out");
    std::vector<int> bufs{x.buf, q, kv, o, out.buf};
    if (!path.fused) bufs.insert(bufs.end(), {path.scores, path.probs});
    if (ctx.buf != x.buf) bufs.insert(bufs.begin(), ctx.buf);
    if (res.buf >= 0 && res.buf != x.buf) bufs.insert(bufs.begin(), res.buf);
    addOp(op.name, bufs, out, [=, this](int batch) {
        const DType t = dtype;
        gemmRows(t, wt(wq), ptr(x.buf), ptr(q), batch * N, C, C, 1.0f, 0.0f);
        gemmRows(t, wt(wkvOff), ptr(ctx.buf), ptr(kv), batch * M, Ckv, 2 * C, 1.0f, 0.0f);
        if (bias) {
            launchBiasResidual(t, ptr(q), true, wf(bq), nullptr, static_cast<long long>(batch) * N, C, 1.0f, opStream);
            launchBiasResidual(t, ptr(kv), true, wf(bkvOff), nullptr, static_cast<long long>(batch) * M, 2 * C, 1.0f,
                               opStream);
        }
        runAttention(path, operands(ptr(q), ptr(kv), ptr(o)), batch, scale);
        gemmRows(t, wt(wo), ptr(o), ptr(out.buf), batch * N, C, C, s, 0.0f);
        launchBiasResidual(t, ptr(out.buf), true, wf(bo), res.buf >= 0 ? ptr(res.buf) : nullptr,
                           static_cast<long long>(batch) * N, C, s, opStream);
    });
    valueAct[static_cast<std::size_t>(op.output)] = out;
}

}  // namespace tessera
