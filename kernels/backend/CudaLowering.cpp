// CudaBackend::Impl: the graph lowered to ops, one lower* per op kind (the lowering choices are
// listed in CudaBackendImpl.h and docs/ENGINE_GRAPH.md); attention is CudaAttention.cpp's.
#include <algorithm>
#include <stdexcept>

#include "core/formats/Safetensors.h"
#include "kernels/backend/CudaBackendImpl.h"
#include "kernels/device/CudaCheck.h"
#include "kernels/ops/BiasActivation.cuh"
#include "kernels/ops/BiasResidual.cuh"
#include "kernels/ops/Concat.cuh"
#include "kernels/ops/EosPool.cuh"
#include "kernels/ops/GegluGate.cuh"
#include "kernels/ops/Gelu.cuh"
#include "kernels/ops/GroupNorm.cuh"
#include "kernels/ops/LayerNorm.cuh"
#include "kernels/ops/PadRightBottom.cuh"
#include "kernels/ops/PixelShuffle.cuh"
#include "kernels/ops/Pointwise.cuh"
#include "kernels/ops/TimestepEmbedding.cuh"
#include "kernels/ops/TokenEmbedding.cuh"
#include "kernels/ops/Upsample.cuh"

namespace tessera {

int CudaBackend::Impl::newBuffer(std::size_t bytes, std::string name) {
    PlanBuffer b;
    b.bytes = alignUp(bytes);
    b.name = std::move(name);
    buffers.push_back(b);
    return static_cast<int>(buffers.size()) - 1;
}

CudaBackend::Impl::Act CudaBackend::Impl::newAct(int c, int h, int w, const std::string& name) {
    Act a;
    a.c = c;
    a.h = h;
    a.w = w;
    a.buf = newBuffer(static_cast<std::size_t>(maxBatch) * h * w * c * dtypeSize(dtype), name);
    return a;
}

void CudaBackend::Impl::addOp(std::string name, std::vector<int> bufs, Act out, std::function<void(int)> run) {
    ops.push_back(Op{std::move(name), std::move(bufs), std::move(run), out});
}

std::size_t CudaBackend::Impl::convWeight(int param, int ipad, int opad) {
    return blob.addTyped(packConvWeight(weight(param), ipad, opad), dtype);
}

int CudaBackend::Impl::addConv(const std::string& name, int cin, int cout, int k, int stride, int pad, int h, int w,
                               std::size_t weight) {
    // Filled field by field like other parameter blocks: alike in shape only.
    ConvLayer c;
    c.name = name;
    c.cin = cin;
    c.cout = cout;
    c.k = k;
    c.stride = stride;
    c.pad = pad;
    c.h = h;
    c.w = w;
    c.ho = (h + 2 * pad - k) / stride + 1;
    c.wo = (w + 2 * pad - k) / stride + 1;
    c.weight = weight;
    c.xDesc = makeTensorDescriptor();
    c.yDesc = makeTensorDescriptor();
    c.wDesc = makeFilterDescriptor();
    c.convDesc = makeConvDescriptor();
    TESSERA_CHECK(cudnnSetFilter4dDescriptor(c.wDesc.get(), cudnnType(dtype), CUDNN_TENSOR_NHWC, cout, cin, k, k));
    TESSERA_CHECK(cudnnSetConvolution2dDescriptor(c.convDesc.get(), pad, pad, stride, stride, 1, 1,
                                                  CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    TESSERA_CHECK(
        cudnnSetConvolutionMathType(c.convDesc.get(), dtype == DType::F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
    c.algo.assign(static_cast<std::size_t>(maxBatch) + 1, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM);
    c.math.assign(static_cast<std::size_t>(maxBatch) + 1, dtype == DType::F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH);
    convs.push_back(std::move(c));
    return static_cast<int>(convs.size()) - 1;
}

const HostTensor& CudaBackend::Impl::weight(int param) const {
    const GraphParam& p = graph.param(param);
    const auto it = weightMap->find(p.name);
    if (it == weightMap->end()) throw ModelError("weights: no tensor '" + p.name + "'");
    if (it->second.shape != p.shape)
        throw ModelError(p.name + ": expected " + shapeToString(p.shape) + ", found " +
                         shapeToString(it->second.shape));
    return it->second;
}

int CudaBackend::Impl::producerOf(int value) const {
    for (std::size_t i = 0; i < graph.ops().size(); ++i)
        if (graph.ops()[i].output == value) return static_cast<int>(i);
    return -1;
}

bool CudaBackend::Impl::onlyReader(int value, int op) const {
    const auto& r = readersOf[static_cast<std::size_t>(value)];
    return !isGraphOutput[static_cast<std::size_t>(value)] && r.size() == 1 && r[0] == op;
}

bool CudaBackend::Impl::plainConv(const GraphOp& op) {
    return op.kind == OpKind::Conv && op.residual < 0 && op.outputScale == 1.0f && !op.leakyRelu;
}

const CudaBackend::Impl::Act& CudaBackend::Impl::act(int value, const GraphOp& op, bool unpadded) const {
    const Act& a = valueAct[static_cast<std::size_t>(value)];
    if (a.buf < 0) throw std::logic_error("CudaBackend: " + op.name + " reads a value that is not lowered");
    if (unpadded && a.c != graph.value(value).channels)
        throw std::invalid_argument("CudaBackend: " + op.name + " (" + toString(op.kind) + ") cannot read '" +
                                    graph.value(value).name + "', stored with " + std::to_string(a.c) +
                                    " channels (padded for cuDNN)");
    return a;
}

void CudaBackend::Impl::analyse() {
    const auto& ops = graph.ops();
    const std::size_t nv = graph.values().size(), no = ops.size();
    readersOf.assign(nv, {});
    isGraphOutput.assign(nv, 0);
    for (std::size_t i = 0; i < no; ++i)
        for (int v : ops[i].operands()) readersOf[static_cast<std::size_t>(v)].push_back(static_cast<int>(i));
    for (int v : graph.outputs()) isGraphOutput[static_cast<std::size_t>(v)] = 1;
    projectionOf.assign(no, -1);
    projections.clear();
    biasIntoNorm.assign(no, -1);
    biasMoved.assign(no, 0);
    shortcutOf.assign(no, -1);
    deferred.assign(no, 0);
    for (std::size_t i = 0; i < no; ++i) {
        const GraphOp& op = ops[i];
        if (op.kind != OpKind::Linear || op.silu || isGraphOutput[static_cast<std::size_t>(op.output)] ||
            graph.value(op.output).kind != ValueKind::Vector)
            continue;
        const auto& readers = readersOf[static_cast<std::size_t>(op.output)];
        const bool normsOnly = !readers.empty() && std::all_of(readers.begin(), readers.end(), [&](int r) {
            const GraphOp& n = opAt(r);
            return n.kind == OpKind::GroupNorm && n.input != op.output;
        });
        if (!normsOnly) continue;
        auto p = std::find_if(projections.begin(), projections.end(),
                              [&](const Projection& q) { return q.input == op.input; });
        if (p == projections.end()) p = projections.insert(projections.end(), Projection{op.input, -1, 0, {}});
        projectionOf[i] = static_cast<int>(p - projections.begin());
        p->members.push_back(static_cast<int>(i));
    }
    for (std::size_t i = 0; i < no; ++i) {
        const GraphOp& norm = ops[i];
        if (norm.kind != OpKind::GroupNorm) continue;
        const int c = producerOf(norm.input);
        if (c < 0 || !plainConv(opAt(c)) || !onlyReader(norm.input, static_cast<int>(i))) continue;
        // The bias goes into the projection feeding the pre-add (read by this norm only), or
        // becomes the pre-add itself.
        const int p = norm.preAdd >= 0 ? producerOf(norm.preAdd) : -1;
        if (norm.preAdd >= 0 &&
            (p < 0 || projectionOf[static_cast<std::size_t>(p)] < 0 || !onlyReader(norm.preAdd, static_cast<int>(i))))
            continue;
        biasIntoNorm[i] = c;
        biasMoved[static_cast<std::size_t>(c)] = 1;
    }
    for (std::size_t i = 0; i < no; ++i) {
        const GraphOp& s = ops[i];
        if (!plainConv(s) || biasMoved[i] || isGraphOutput[static_cast<std::size_t>(s.output)]) continue;
        const auto& readers = readersOf[static_cast<std::size_t>(s.output)];
        if (readers.size() != 1) continue;
        const GraphOp& r = opAt(readers[0]);
        if (r.kind == OpKind::Conv && r.residual == s.output && r.input != s.output && r.padEnd == r.padBegin) {
            shortcutOf[static_cast<std::size_t>(readers[0])] = static_cast<int>(i);
            deferred[i] = 1;
        }
    }
}

void CudaBackend::Impl::lowerInputs() {
    const std::size_t nv = graph.values().size();
    valueAct.assign(nv, Act{});
    valueVec.assign(nv, VectorRef{});
    stageIn.assign(graph.inputs().size(), -1);
    stageOut.assign(graph.outputs().size(), -1);
    auto planeBytes = [&](int v) { return static_cast<std::size_t>(graph.elements(v, maxBatch, tileH, tileW)) * 4; };
    for (std::size_t k = 0; k < graph.inputs().size(); ++k)
        if (graph.value(graph.inputs()[k]).kind != ValueKind::Vector)
            stageIn[k] = newBuffer(planeBytes(graph.inputs()[k]), "stage." + graph.value(graph.inputs()[k]).name);
    for (std::size_t k = 0; k < graph.outputs().size(); ++k)
        if (graph.value(graph.outputs()[k]).kind != ValueKind::Vector)
            stageOut[k] = newBuffer(planeBytes(graph.outputs()[k]), "stage." + graph.value(graph.outputs()[k]).name);
    timestepBuf = inputBuf = tokenBuf = -1;
    for (int v : graph.inputs()) {
        const GraphValue& g = graph.value(v);
        if (g.kind != ValueKind::Vector) continue;
        valueVec[static_cast<std::size_t>(v)] = {newBuffer(static_cast<std::size_t>(maxBatch) * g.channels * 4, g.name),
                                                 0, g.channels};
        if (timestepBuf < 0) timestepBuf = valueVec[static_cast<std::size_t>(v)].buf;
    }
    for (int v : graph.inputs()) {
        const GraphValue& g = graph.value(v);
        if (g.kind == ValueKind::Tokens) {  // [B, rows, C] is NHWC already; channels not padded
            // Ids are read from the float32 staging (idsBuffer); no activation copy unless
            // another op reads the value as tokens.
            if (!readAsIdsOnly(v)) {
                valueAct[static_cast<std::size_t>(v)] = tokenAct(v, g.channels, g.name);
                if (tokenBuf < 0) tokenBuf = valueAct[static_cast<std::size_t>(v)].buf;
            }
            continue;
        }
        if (g.kind != ValueKind::FeatureMap) continue;
        valueAct[static_cast<std::size_t>(v)] =
            newAct((g.channels + 7) / 8 * 8, tileH / g.divisor, tileW / g.divisor, g.name);
        if (inputBuf < 0) {
            inputBuf = valueAct[static_cast<std::size_t>(v)].buf;
            inPad = valueAct[static_cast<std::size_t>(v)].c;
        }
    }
}

void CudaBackend::Impl::lowerVectors() {
    std::vector<int> bufs;
    std::vector<std::function<void(int)>> steps;
    bool timestep = false;
    for (int v : graph.inputs())
        if (valueVec[static_cast<std::size_t>(v)].buf >= 0) bufs.push_back(valueVec[static_cast<std::size_t>(v)].buf);
    for (std::size_t i = 0; i < graph.ops().size(); ++i) {
        const GraphOp& op = graph.ops()[i];
        const GraphValue& out = graph.value(op.output);
        if (out.kind != ValueKind::Vector || op.kind == OpKind::EosPool) continue;
        for (int v : op.operands()) {
            const int p = producerOf(v);
            if (p >= 0 && opAt(p).kind == OpKind::EosPool)
                throw std::invalid_argument("CudaBackend: " + op.name + " reads the pooled vector '" +
                                            graph.value(v).name +
                                            "'; vector ops run before the token ops here, so none may read it");
        }
        const VectorRef x = valueVec[static_cast<std::size_t>(op.input)];
        const int in = graph.value(op.input).channels, C = out.channels;
        if (projectionOf[i] >= 0) {
            Projection& p = projections[static_cast<std::size_t>(projectionOf[i])];
            if (p.buf < 0) steps.push_back(lowerProjection(p, bufs));
            continue;
        }
        const VectorRef y{newBuffer(static_cast<std::size_t>(maxBatch) * C * 4, op.name), 0, C};
        valueVec[static_cast<std::size_t>(op.output)] = y;
        bufs.push_back(y.buf);
        switch (op.kind) {
            case OpKind::TimestepEmbedding:
                timestep = true;
                steps.push_back([=, this](int batch) {
                    launchTimestepEmbedding(vec(x), vec(y), batch, C, op.freqShift, op.flipSinToCos, opStream);
                });
                break;
            case OpKind::Linear: {
                const std::size_t w = floats(op.params[0]), b = floats(op.params[1]);
                const bool silu = op.silu;
                steps.push_back([=, this](int batch) {
                    gemmRows(DType::F32, wf(w), vec(x), vec(y), batch, in, C, 1.0f, 0.0f);
                    launchBiasActivationF32(vec(y), wf(b), batch, C, silu, nullptr, opStream);
                });
                break;
            }
            default: {  // Affine, SiLU, Add of vectors
                PointwiseParams p;
                p.op = op.kind == OpKind::Affine ? PointwiseOp::Affine
                                                 : (op.kind == OpKind::SiLU ? PointwiseOp::Silu : PointwiseOp::Add);
                if (op.kind != OpKind::Affine && op.kind != OpKind::SiLU && op.kind != OpKind::Add)
                    throw std::logic_error("CudaBackend: " + op.name + " is not a vector op");
                p.channels = C;
                p.scale = op.scale;
                p.shift = op.shift;
                const VectorRef other = op.input2 >= 0 ? valueVec[static_cast<std::size_t>(op.input2)] : VectorRef{};
                steps.push_back([=, this](int batch) mutable {
                    p.x = vec(x);
                    p.other = other.buf >= 0 ? vec(other) : nullptr;
                    p.y = vec(y);
                    p.rows = batch;
                    launchPointwise(p, opStream);
                });
            }
        }
    }
    addOp(timestep ? "time_embedding" : "vectors", bufs, Act{}, [steps](int batch) {
        for (const auto& step : steps) step(batch);
    });
}

std::function<void(int)> CudaBackend::Impl::lowerProjection(Projection& p, std::vector<int>& bufs) {
    std::vector<float> w, b;
    for (int m : p.members) {
        const GraphOp& op = opAt(m);
        valueVec[static_cast<std::size_t>(op.output)] = VectorRef{-1, p.width, 0};
        const HostTensor& wt = weight(op.params[0]);
        w.insert(w.end(), wt.data.begin(), wt.data.end());
        std::vector<float> bias = weight(op.params[1]).data;
        for (int r : readersOf[static_cast<std::size_t>(op.output)]) {
            const int conv = biasIntoNorm[static_cast<std::size_t>(r)];
            if (conv < 0 || opAt(r).preAdd != op.output) continue;
            const std::vector<float>& cb = weight(opAt(conv).params[1]).data;
            for (std::size_t c = 0; c < cb.size(); ++c) bias[c] += cb[c];
        }
        b.insert(b.end(), bias.begin(), bias.end());
        p.width += op.channels;
    }
    p.buf = newBuffer(static_cast<std::size_t>(maxBatch) * p.width * 4, "projections." + graph.value(p.input).name);
    bufs.push_back(p.buf);
    for (int m : p.members) {
        VectorRef& r = valueVec[static_cast<std::size_t>(opAt(m).output)];
        r.buf = p.buf;
        r.stride = p.width;
    }
    const std::size_t wOff = blob.addFloats(w), bOff = blob.addFloats(b);
    const VectorRef x = valueVec[static_cast<std::size_t>(p.input)];
    const int in = graph.value(p.input).channels, width = p.width, buf = p.buf;
    return [=, this](int batch) {
        gemmRows(DType::F32, wf(wOff), vec(x), ptr(buf), batch, in, width, 1.0f, 0.0f);
        launchBiasActivationF32(reinterpret_cast<float*>(ptr(buf)), wf(bOff), batch, width, false, nullptr, opStream);
    };
}

void CudaBackend::Impl::lowerPointwise(const GraphOp& op) {
    // Ops that read padded channels as they are (PReLU's weights are padded with zeros below).
    const bool sameShape = op.kind == OpKind::Affine || op.kind == OpKind::SiLU || op.kind == OpKind::LeakyReLU ||
                           op.kind == OpKind::Sigmoid || op.kind == OpKind::PReLU || op.kind == OpKind::Mul ||
                           (op.kind == OpKind::Add && graph.value(op.input2).kind != ValueKind::Vector);
    const Act x = act(op.input, op, !sameShape);
    const Act y = newAct(x.c, x.h, x.w, op.name);
    std::vector<int> bufs{x.buf, y.buf};
    PointwiseParams p;
    p.channels = x.c;
    p.rowsPerSample = static_cast<long long>(x.h) * x.w;
    p.scale = op.scale;
    p.shift = op.shift;
    Act other;
    VectorRef v;
    std::size_t prelu = 0;  // PReLU: weight-blob offset of its slopes
    switch (op.kind) {
        case OpKind::Affine:
            p.op = PointwiseOp::Affine;
            break;
        case OpKind::SiLU:
            p.op = PointwiseOp::Silu;
            break;
        case OpKind::Add:
            if (sameShape) {
                p.op = PointwiseOp::Add;
                other = act(op.input2, op, false);
                if (other.c != x.c)
                    throw std::invalid_argument("CudaBackend: " + op.name + ": operands stored differently");
                bufs.push_back(other.buf);
            } else {
                p.op = PointwiseOp::AddVector;
                v = valueVec[static_cast<std::size_t>(op.input2)];
            }
            break;
        case OpKind::ScaleShift:
            p.op = PointwiseOp::ScaleShift;
            v = valueVec[static_cast<std::size_t>(op.input2)];
            break;
        case OpKind::LeakyReLU:
            p.op = PointwiseOp::LeakyRelu;
            p.scale = op.slope;
            break;
        case OpKind::Sigmoid:
            p.op = PointwiseOp::Sigmoid;
            break;
        case OpKind::Mul:
            p.op = PointwiseOp::Mul;
            other = act(op.input2, op, false);
            if (other.c != x.c)
                throw std::invalid_argument("CudaBackend: " + op.name + ": operands stored differently");
            bufs.push_back(other.buf);
            break;
        case OpKind::PReLU: {
            p.op = PointwiseOp::Prelu;
            std::vector<float> w = weight(op.params[0]).data;
            w.resize(static_cast<std::size_t>(x.c), 0.0f);  // padded channels stay 0
            prelu = blob.addFloats(w);
            break;
        }
        default:
            throw std::logic_error("CudaBackend: " + op.name + " is not elementwise");
    }
    if (v.buf >= 0) {
        bufs.push_back(v.buf);
        p.vectorStride = v.stride;
    }
    addOp(op.name, bufs, y, [=, this](int batch) mutable {
        p.dtype = dtype;
        p.x = ptr(x.buf);
        p.other = other.buf >= 0 ? ptr(other.buf) : nullptr;
        p.vector = v.buf >= 0 ? vec(v) : (p.op == PointwiseOp::Prelu ? wf(prelu) : nullptr);
        p.y = ptr(y.buf);
        p.rows = batch * p.rowsPerSample;
        launchPointwise(p, opStream);
    });
    valueAct[static_cast<std::size_t>(op.output)] = y;
}

void CudaBackend::Impl::lowerConvActivation(const GraphOp& op, const Act& y) {
    if (!op.leakyRelu) return;
    PointwiseParams p;
    p.op = PointwiseOp::LeakyRelu;
    p.scale = op.slope;
    p.channels = y.c;
    addOp(op.name + ".lrelu", {y.buf}, y, [=, this](int batch) mutable {
        p.dtype = dtype;
        p.x = ptr(y.buf);
        p.y = ptr(y.buf);
        p.rows = static_cast<long long>(batch) * y.h * y.w;
        launchPointwise(p, opStream);
    });
}

void CudaBackend::Impl::lowerConv(int index) {
    const GraphOp& op = opAt(index);
    const bool output = isGraphOutput[static_cast<std::size_t>(op.output)];
    const int co = output ? (op.channels + 7) / 8 * 8 : op.channels;
    Act src = act(op.input, op, false);
    // One more row/column at the bottom/right: diffusers models/downsampling.py Downsample2D
    // pads (0, 1, 0, 1) before its stride-2 conv when padding is 0.
    if (op.padEnd != op.padBegin) {
        const Act unpadded = src;
        src = newAct(src.c, src.h + 1, src.w + 1, op.name + ".pad");
        const Act padded = src;
        addOp(op.name + ".pad", {unpadded.buf, padded.buf}, padded, [this, unpadded, padded](int batch) {
            launchPadRightBottom(dtype, ptr(unpadded.buf), ptr(padded.buf), batch, unpadded.h, unpadded.w, unpadded.c,
                                 opStream);
        });
    }
    const std::size_t w = convWeight(op.params[0], src.c, co);
    const int layer = addConv(op.name, src.c, co, op.kernel, op.stride, op.padBegin, src.h, src.w, w);
    const int ho = convs.back().ho, wo = convs.back().wo;
    if (biasMoved[static_cast<std::size_t>(index)]) {  // into the GroupNorm that reads it
        const Act y = newAct(co, ho, wo, op.name);
        addOp(op.name, {src.buf, y.buf}, y,
              [this, layer, src, y](int batch) { runConv(layer, ptr(src.buf), ptr(y.buf), 1.0f, 0.0f, batch); });
        valueAct[static_cast<std::size_t>(op.output)] = y;
        return;
    }
    std::vector<float> bias = weight(op.params[1]).data;
    bias.resize(static_cast<std::size_t>(co), 0.0f);
    const float scale = op.outputScale;
    convs.back().alpha = scale;
    const Act y = newAct(co, ho, wo, op.name);
    std::vector<int> bufs{src.buf, y.buf};
    int rb = -1, sc = -1;
    Act xs;
    const int s = shortcutOf[static_cast<std::size_t>(index)];
    if (s >= 0) {  // conv_shortcut, lowered here without its bias
        const GraphOp& shortcut = opAt(s);
        const std::vector<float>& sb = weight(shortcut.params[1]).data;
        for (std::size_t k = 0; k < sb.size(); ++k) bias[k] += sb[k];
        xs = act(shortcut.input, shortcut, false);
        sc = addConv(shortcut.name, xs.c, co, shortcut.kernel, 1, shortcut.padBegin, xs.h, xs.w,
                     convWeight(shortcut.params[0], xs.c, co));
        rb = newBuffer(static_cast<std::size_t>(maxBatch) * xs.h * xs.w * co * dtypeSize(dtype), shortcut.name);
        bufs.push_back(xs.buf);
    } else if (op.residual >= 0) {
        const Act r = act(op.residual, op, false);
        if (r.c != co) throw std::invalid_argument("CudaBackend: " + op.name + ": residual stored with other channels");
        rb = r.buf;
    }
    if (rb >= 0) bufs.push_back(rb);
    const std::size_t b = blob.addFloats(bias);
    const long long pix = static_cast<long long>(ho) * wo;
    if (betaAccumulate) {  // diagnostics: the output initialised, the convolutions accumulate
        addOp(op.name, bufs, y, [=, this](int batch) {
            launchBiasResidual(dtype, ptr(y.buf), false, wf(b), sc < 0 && rb >= 0 ? ptr(rb) : nullptr, batch * pix, co,
                               scale, opStream);
            if (sc >= 0) runConv(sc, ptr(xs.buf), ptr(y.buf), scale, 1.0f, batch);
            runConv(layer, ptr(src.buf), ptr(y.buf), scale, 1.0f, batch);
        });
        lowerConvActivation(op, y);
        valueAct[static_cast<std::size_t>(op.output)] = y;
        return;
    }
    if (sc >= 0)
        addOp(opAt(s).name, {xs.buf, rb}, Act{rb, co, xs.h, xs.w},
              [=, this](int batch) { runConv(sc, ptr(xs.buf), ptr(rb), 1.0f, 0.0f, batch); });
    ConvLayer& layerRef = convs[static_cast<std::size_t>(layer)];
    layerRef.hasEpilogue = scale == 1.0f;
    layerRef.epilogueBias = b;
    layerRef.epilogueResidual = rb >= 0;
    // Two ops (same launches) so that profiles show the convolution and its epilogue apart.
    addOp(op.name, bufs, y, [=, this](int batch) {
        const void* r = rb >= 0 ? ptr(rb) : nullptr;
        if (!runConvFused(layer, ptr(src.buf), ptr(y.buf), r, batch))
            runConv(layer, ptr(src.buf), ptr(y.buf), scale, 0.0f, batch);
    });
    std::vector<int> epilogueBufs = rb >= 0 ? std::vector<int>{y.buf, rb} : std::vector<int>{src.buf, y.buf};
    if (s >= 0) epilogueBufs.push_back(xs.buf);
    addOp(op.name + ".epilogue", epilogueBufs, y, [=, this](int batch) {
        if (fusedAt(layer, batch)) return;
        launchBiasResidual(dtype, ptr(y.buf), true, wf(b), rb >= 0 ? ptr(rb) : nullptr, batch * pix, co, scale,
                           opStream);
    });
    lowerConvActivation(op, y);
    valueAct[static_cast<std::size_t>(op.output)] = y;
}

void CudaBackend::Impl::lowerGroupNorm(int index) {
    const GraphOp& op = opAt(index);
    const Act x = act(op.input, op);
    const Act y = newAct(x.c, x.h, x.w, op.name);
    const int pixels = x.h * x.w;
    const int chunks = groupNormChunks(pixels, maxBatch, props.multiProcessorCount);
    const int scratch =
        newBuffer(groupNormScratchFloats(maxBatch, chunks, op.groups) * sizeof(float), op.name + ".stats");
    const std::size_t gamma = floats(op.params[0]), beta = floats(op.params[1]);
    std::vector<int> bufs{x.buf, y.buf, scratch};
    // Pre-add: a vector (the projection, which holds the conv bias when it was moved), or the
    // moved conv bias alone (shared by the samples).
    const VectorRef pre = op.preAdd >= 0 ? valueVec[static_cast<std::size_t>(op.preAdd)] : VectorRef{};
    const VectorRef film = op.scaleShift >= 0 ? valueVec[static_cast<std::size_t>(op.scaleShift)] : VectorRef{};
    const int conv = biasIntoNorm[static_cast<std::size_t>(index)];
    const bool ownBias = conv >= 0 && op.preAdd < 0;
    const std::size_t convBias = ownBias ? floats(opAt(conv).params[1]) : 0;
    for (int b : {pre.buf, film.buf})
        if (b >= 0 && std::find(bufs.begin(), bufs.end(), b) == bufs.end()) bufs.push_back(b);
    const int groups = op.groups, channels = x.c;
    const float eps = op.eps;
    const bool silu = op.silu;
    addOp(op.name, bufs, y, [=, this](int batch) {
        GroupNormParams p;
        p.dtype = dtype;
        p.x = ptr(x.buf);
        p.y = ptr(y.buf);
        p.batch = batch;
        p.pixels = pixels;
        p.channels = channels;
        p.groups = groups;
        p.eps = eps;
        p.gamma = wf(gamma);
        p.beta = wf(beta);
        p.silu = silu;
        p.chunks = chunks;
        p.scratch = reinterpret_cast<float*>(ptr(scratch));
        if (pre.buf >= 0) {
            p.preAdd = vec(pre);
            p.preAddBatchStride = pre.stride;
        } else if (ownBias) {
            p.preAdd = wf(convBias);
            p.preAddBatchStride = 0;
        }
        if (film.buf >= 0) {
            p.scale = vec(film);
            p.shift = vec(film) + channels;
            p.filmBatchStride = film.stride;
        }
        launchGroupNorm(p, opStream);
    });
    valueAct[static_cast<std::size_t>(op.output)] = y;
}

CudaBackend::Impl::Act CudaBackend::Impl::tokenAct(int value, int channels, const std::string& name) {
    const GraphValue& g = graph.value(value);
    if (g.tokens > 0) return newAct(channels, g.tokens, 1, name);
    return newAct(channels, tileH / g.divisor, tileW / g.divisor, name);
}

void CudaBackend::Impl::lowerLayoutChange(const GraphOp& op) {
    const Act x = act(op.input, op);
    if (op.residual < 0) {
        valueAct[static_cast<std::size_t>(op.output)] = x;
        return;
    }
    const Act r = act(op.residual, op);
    const Act y = newAct(x.c, x.h, x.w, op.name);
    PointwiseParams p;
    p.op = PointwiseOp::Add;
    p.channels = x.c;
    addOp(op.name, {x.buf, r.buf, y.buf}, y, [=, this](int batch) mutable {
        p.dtype = dtype;
        p.x = ptr(x.buf);
        p.other = ptr(r.buf);
        p.y = ptr(y.buf);
        p.rows = static_cast<long long>(batch) * x.h * x.w;
        launchPointwise(p, opStream);
    });
    valueAct[static_cast<std::size_t>(op.output)] = y;
}

void CudaBackend::Impl::lowerLayerNorm(const GraphOp& op) {
    const Act x = act(op.input, op);
    const Act y = newAct(x.c, x.h, x.w, op.name);
    const std::size_t gamma = floats(op.params[0]), beta = floats(op.params[1]);
    const float eps = op.eps;
    addOp(op.name, {x.buf, y.buf}, y, [=, this](int batch) {
        launchLayerNorm(dtype, ptr(x.buf), ptr(y.buf), wf(gamma), wf(beta), static_cast<long long>(batch) * x.h * x.w,
                        x.c, eps, opStream);
    });
    valueAct[static_cast<std::size_t>(op.output)] = y;
}

void CudaBackend::Impl::lowerTokenLinear(const GraphOp& op) {
    if (graph.value(op.input).kind != ValueKind::Tokens)
        throw std::logic_error("CudaBackend: " + op.name + " is not over tokens");
    const Act x = act(op.input, op);
    const Act r = op.residual >= 0 ? act(op.residual, op) : Act{};
    const int in = x.c, out = op.channels;
    const Act y = newAct(out, x.h, x.w, op.name);
    const std::size_t w = blob.addTyped(weight(op.params[0]).data, dtype), b = floats(op.params[1]);
    std::vector<int> bufs{x.buf, y.buf};
    if (r.buf >= 0) bufs.push_back(r.buf);
    addOp(op.name, bufs, y, [=, this](int batch) {
        const long long rows = static_cast<long long>(batch) * x.h * x.w;
        gemmRows(dtype, wt(w), ptr(x.buf), ptr(y.buf), static_cast<int>(rows), in, out, 1.0f, 0.0f);
        launchBiasResidual(dtype, ptr(y.buf), true, wf(b), r.buf >= 0 ? ptr(r.buf) : nullptr, rows, out, 1.0f,
                           opStream);
    });
    valueAct[static_cast<std::size_t>(op.output)] = y;
}

void CudaBackend::Impl::lowerGeglu(const GraphOp& op) {
    const Act x = act(op.input, op);
    const int in = x.c, inner = op.channels;
    const int proj =
        newBuffer(static_cast<std::size_t>(maxBatch) * x.h * x.w * 2 * inner * dtypeSize(dtype), op.name + ".proj");
    const Act y = newAct(inner, x.h, x.w, op.name);
    const std::size_t w = blob.addTyped(weight(op.params[0]).data, dtype), b = floats(op.params[1]);
    addOp(op.name, {x.buf, proj, y.buf}, y, [=, this](int batch) {
        const long long rows = static_cast<long long>(batch) * x.h * x.w;
        gemmRows(dtype, wt(w), ptr(x.buf), ptr(proj), static_cast<int>(rows), in, 2 * inner, 1.0f, 0.0f);
        launchGegluGate(dtype, ptr(proj), wf(b), ptr(y.buf), rows, inner, opStream);
    });
    valueAct[static_cast<std::size_t>(op.output)] = y;
}

void CudaBackend::Impl::lowerGelu(const GraphOp& op) {
    const Act x = act(op.input, op);
    const Act y = newAct(x.c, x.h, x.w, op.name);
    const GeluKind kind =
        op.kind == OpKind::QuickGELU ? GeluKind::Quick : (op.geluTanh ? GeluKind::Tanh : GeluKind::Exact);
    addOp(op.name, {x.buf, y.buf}, y, [=, this](int batch) {
        launchGelu(dtype, kind, ptr(x.buf), ptr(y.buf), static_cast<long long>(batch) * x.h * x.w * x.c, opStream);
    });
    valueAct[static_cast<std::size_t>(op.output)] = y;
}

bool CudaBackend::Impl::readAsIdsOnly(int value) const {
    const auto& readers = readersOf[static_cast<std::size_t>(value)];
    if (readers.empty() || isGraphOutput[static_cast<std::size_t>(value)]) return false;
    return std::all_of(readers.begin(), readers.end(), [&](int r) {
        const GraphOp& op = opAt(r);
        return (op.kind == OpKind::TokenEmbedding && op.operands() == std::vector<int>{value}) ||
               (op.kind == OpKind::EosPool && op.input2 == value && op.input != value);
    });
}

int CudaBackend::Impl::idsBuffer(int value, const GraphOp& op) const {
    const auto& in = graph.inputs();
    const auto it = std::find(in.begin(), in.end(), value);
    if (it == in.end())
        throw std::invalid_argument("CudaBackend: " + op.name + " (" + toString(op.kind) + ") reads ids '" +
                                    graph.value(value).name + "', which are not a graph input");
    return stageIn[static_cast<std::size_t>(it - in.begin())];
}

void CudaBackend::Impl::lowerTokenEmbedding(const GraphOp& op) {
    const int ids = idsBuffer(op.input, op);
    const int tokens = graph.value(op.input).tokens, C = op.channels;
    const long long vocab = graph.param(op.params[0]).shape.at(0);
    const Act y = tokenAct(op.output, C, op.name);
    const std::size_t table = blob.addTyped(weight(op.params[0]).data, dtype);
    const std::size_t positions = blob.addTyped(weight(op.params[1]).data, dtype);
    addOp(op.name, {ids, y.buf}, y, [=, this](int batch) {
        launchTokenEmbedding(dtype, reinterpret_cast<const float*>(ptr(ids)), wt(table), wt(positions), ptr(y.buf),
                             static_cast<long long>(batch) * tokens, tokens, C, vocab, opStream);
    });
    valueAct[static_cast<std::size_t>(op.output)] = y;
}

void CudaBackend::Impl::lowerEosPool(const GraphOp& op) {
    const Act x = act(op.input, op);
    const int ids = idsBuffer(op.input2, op);
    const int tokens = graph.value(op.input).tokens, C = x.c, token = op.token;
    const VectorRef y{newBuffer(static_cast<std::size_t>(maxBatch) * C * 4, op.name), 0, C};
    valueVec[static_cast<std::size_t>(op.output)] = y;
    addOp(op.name, {x.buf, ids, y.buf}, Act{}, [=, this](int batch) {
        launchEosPool(dtype, ptr(x.buf), reinterpret_cast<const float*>(ptr(ids)), vec(y), batch, tokens, C, token,
                      opStream);
    });
}

void CudaBackend::Impl::lowerConcat(const GraphOp& op) {
    const Act a = act(op.input, op), s = act(op.input2, op);
    const Act cat = newAct(a.c + s.c, a.h, a.w, op.name);
    addOp(op.name, {a.buf, s.buf, cat.buf}, cat, [this, a, s, cat](int batch) {
        launchConcatChannels(dtype, ptr(a.buf), a.c, ptr(s.buf), s.c, ptr(cat.buf),
                             static_cast<long long>(batch) * a.h * a.w, opStream);
    });
    valueAct[static_cast<std::size_t>(op.output)] = cat;
}

void CudaBackend::Impl::lowerUpsample(const GraphOp& op) {
    const Act src = act(op.input, op, false);
    const int f = op.factor;
    const Act up = newAct(src.c, src.h * f, src.w * f, op.name);
    addOp(op.name, {src.buf, up.buf}, up, [this, src, up, f](int batch) {
        launchUpsampleNearest(dtype, ptr(src.buf), ptr(up.buf), batch, src.h, src.w, src.c, f, opStream);
    });
    valueAct[static_cast<std::size_t>(op.output)] = up;
}

void CudaBackend::Impl::lowerPixelShuffle(const GraphOp& op) {
    // The output stored padded to a multiple of 8 channels where its count is not one, like a
    // graph input, so that it meets the padded image in an Add (Compact's + upsampled input).
    const Act src = act(op.input, op, false);
    const int logical = graph.value(op.output).channels, stored = logical % 8 ? (logical + 7) / 8 * 8 : logical;
    const int r = op.factor;
    const bool shuffle = op.kind == OpKind::PixelShuffle;
    const Act y =
        shuffle ? newAct(stored, src.h * r, src.w * r, op.name) : newAct(stored, src.h / r, src.w / r, op.name);
    const int channels = shuffle ? logical : graph.value(op.input).channels;
    addOp(op.name, {src.buf, y.buf}, y, [this, src, y, r, channels, shuffle](int batch) {
        if (shuffle)
            launchPixelShuffle(dtype, ptr(src.buf), src.c, ptr(y.buf), y.c, batch, src.h, src.w, channels, r, opStream);
        else
            launchPixelUnshuffle(dtype, ptr(src.buf), src.c, ptr(y.buf), y.c, batch, y.h, y.w, channels, r, opStream);
    });
    valueAct[static_cast<std::size_t>(op.output)] = y;
}

void CudaBackend::Impl::build(const ModelGraph& g, const TensorMap& weights) {
    graph = g;
    weightMap = &weights;
    graph.checkTileSize(tileH, tileW);
    analyse();
    lowerInputs();
    bool vectorsDone = false;
    for (std::size_t i = 0; i < graph.ops().size(); ++i) {
        const GraphOp& op = graph.ops()[i];
        const std::size_t before = ops.size();
        // Every vector op but the pooling (which waits for its tokens) runs as one stage.
        if (graph.value(op.output).kind == ValueKind::Vector && op.kind != OpKind::EosPool) {
            if (!vectorsDone) lowerVectors();
            vectorsDone = true;
            continue;
        }
        switch (op.kind) {
            case OpKind::Conv:
                if (!deferred[i]) lowerConv(static_cast<int>(i));
                break;
            case OpKind::GroupNorm:
                lowerGroupNorm(static_cast<int>(i));
                break;
            case OpKind::Attention:
                if (graph.value(op.input).kind == ValueKind::Tokens)
                    lowerTokenAttention(static_cast<int>(i));
                else
                    lowerAttention(static_cast<int>(i));
                break;
            case OpKind::ToTokens:
            case OpKind::ToFeatureMap:
                lowerLayoutChange(op);
                break;
            case OpKind::LayerNorm:
                lowerLayerNorm(op);
                break;
            case OpKind::Linear:
                lowerTokenLinear(op);
                break;
            case OpKind::GEGLU:
                lowerGeglu(op);
                break;
            case OpKind::GELU:
            case OpKind::QuickGELU:
                lowerGelu(op);
                break;
            case OpKind::Concat:
                lowerConcat(op);
                break;
            case OpKind::Upsample:
                lowerUpsample(op);
                break;
            case OpKind::PixelShuffle:
            case OpKind::PixelUnshuffle:
                lowerPixelShuffle(op);
                break;
            case OpKind::TokenEmbedding:
                lowerTokenEmbedding(op);
                break;
            case OpKind::EosPool:
                lowerEosPool(op);
                break;
            default:
                lowerPointwise(op);
                break;
        }
        // The op that completes the value (not a conv whose bias went into the norm after it).
        if (ops.size() > before && !biasMoved[i]) ops.back().value = op.output;
    }
    // Buffers the host or the engine touches between calls live for the whole run.
    outputBuf = -1;
    for (int v : graph.outputs()) {
        const int buf = graph.value(v).kind == ValueKind::Vector ? valueVec[static_cast<std::size_t>(v)].buf
                                                                 : valueAct[static_cast<std::size_t>(v)].buf;
        buffers[static_cast<std::size_t>(buf)].wholeRun = true;
        if (outputBuf < 0 && graph.value(v).kind == ValueKind::FeatureMap) {
            outputBuf = buf;
            outPad = valueAct[static_cast<std::size_t>(v)].c;
        }
    }
    for (int b : stageIn)
        if (b >= 0) buffers[static_cast<std::size_t>(b)].wholeRun = true;
    for (int b : stageOut)
        if (b >= 0) buffers[static_cast<std::size_t>(b)].wholeRun = true;
    for (int v : graph.inputs()) {
        const int b = graph.value(v).kind == ValueKind::Vector ? valueVec[static_cast<std::size_t>(v)].buf
                                                               : valueAct[static_cast<std::size_t>(v)].buf;
        if (b >= 0) buffers[static_cast<std::size_t>(b)].wholeRun = true;  // ids only: no activation
    }
    weightMap = nullptr;
}

}  // namespace tessera
