// CudaBackend::Impl: the graph lowered to ops, one lower* per op kind (the lowering choices are
// listed in CudaBackendImpl.h and docs/ENGINE_GRAPH.md); attention is CudaAttention.cpp's.
#include <algorithm>
#include <stdexcept>

#include "core/formats/Safetensors.h"
#include "kernels/backend/CudaBackendImpl.h"
#include "kernels/device/CudaCheck.h"
#include "kernels/ops/BiasActivation.cuh"
#include "kernels/ops/BiasResidual.cuh"
#include "kernels/ops/ChannelSlice.cuh"
#include "kernels/ops/Concat.cuh"
#include "kernels/ops/EosPool.cuh"
#include "kernels/ops/GegluGate.cuh"
#include "kernels/ops/Gelu.cuh"
#include "kernels/ops/GroupNorm.cuh"
#include "kernels/ops/LayerNorm.cuh"
#include "kernels/ops/LayoutConvert.cuh"
#include "kernels/ops/PadRightBottom.cuh"
#include "kernels/ops/PixelShuffle.cuh"
#include "kernels/ops/Pointwise.cuh"
#include "kernels/ops/TimestepEmbedding.cuh"
#include "kernels/ops/TokenEmbedding.cuh"
#include "kernels/ops/Upsample.cuh"

namespace tessera {

namespace {

// The T5 encoder's ops and attributes (core/models/t5/T5Graph.h) run on the CPU reference only so
// far: refused before anything is planned, naming the op, rather than lowered as something else.
void refuseUnlowered(const GraphOp& op) {
    auto refuse = [&op](const std::string& what) {
        throw std::runtime_error("CudaBackend: op " + op.name + " (" + toString(op.kind) + "): " + what +
                                 " has no CUDA lowering yet");
    };
    if (op.kind == OpKind::RMSNorm) refuse("RMSNorm");
    if (op.kind == OpKind::Linear && !op.bias) refuse("a linear layer without bias");
    if (op.kind == OpKind::TokenEmbedding && !op.positionTable) refuse("a token embedding without positions");
    if (op.kind == OpKind::Attention) {
        if (!op.bias) refuse("attention without to_out's bias");
        if (op.scoreScale != 0.0f) refuse("attention with a score scale other than 1/sqrt(d)");
        if (op.innerChannels != 0) refuse("attention with inner channels");
        if (op.buckets > 0) refuse("attention with a relative position bias");
    }
}

}  // namespace

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

const CudaBackend::Impl::Act& CudaBackend::Impl::act(int value, const GraphOp& op, bool unpadded, bool view) const {
    const Act& a = valueAct[static_cast<std::size_t>(value)];
    if (a.buf < 0) throw std::logic_error("CudaBackend: " + op.name + " reads a value that is not lowered");
    if (a.isView() && !view)
        throw std::logic_error("CudaBackend: " + op.name + " (" + toString(op.kind) + ") reads '" +
                               graph.value(value).name + "', a slice of a dense block's buffer");
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
    findSkipAdds();
    findDenseGroups();
    findConcatTails();
}

// A Concat's last operand made by a convolution that nothing else reads (each dense-block layer of
// ESRGAN's ResidualDenseBlock_5C): the convolution's epilogue (bias, leaky ReLU) writes its output
// straight into the concatenation's tail, and the Concat copies only its first operand: 32 of the
// 96..192 channels of every concatenation are not copied again.
void CudaBackend::Impl::findConcatTails() {
    const auto& all = graph.ops();
    tailInto.assign(all.size(), -1);
    concatEarly.clear();
    if (betaAccumulate) return;
    for (std::size_t i = 0; i < all.size(); ++i) {
        const GraphOp& cat = all[i];
        if (cat.kind != OpKind::Concat || cat.input == cat.input2 || (!denseConcat.empty() && denseConcat[i] >= 0))
            continue;
        if (graph.value(cat.input).kind != ValueKind::FeatureMap || graph.value(cat.input).channels % 8 != 0 ||
            graph.value(cat.input2).channels % 8 != 0 || isGraphOutput[static_cast<std::size_t>(cat.output)])
            continue;
        const int p = producerOf(cat.input2);
        if (p < 0 || !onlyReader(cat.input2, static_cast<int>(i))) continue;
        const GraphOp& conv = opAt(p);
        const auto pi = static_cast<std::size_t>(p);
        if (conv.kind != OpKind::Conv || conv.residual >= 0 || conv.outputScale != 1.0f || deferred[pi] ||
            biasMoved[pi] || shortcutOf[pi] >= 0 || addIntoConv[pi] >= 0 || conv.padEnd != conv.padBegin)
            continue;
        if (!denseOf.empty() && denseOf[static_cast<std::size_t>(cat.input2)].group >= 0) continue;
        tailInto[pi] = static_cast<int>(i);
    }
}

bool CudaBackend::Impl::sameShapeAdd(const GraphOp& op) const {
    return op.kind == OpKind::Add && op.input2 >= 0 && graph.value(op.input2).kind != ValueKind::Vector &&
           op.input != op.input2;
}

// Skip connections around a rescaled branch (ESRGAN's x5 * 0.2 + x, out * 0.2 + x) in one pass:
//   Conv{outputScale s} -> Add(other): the convolution's epilogue adds `other` unscaled
//     (y = s (conv + bias) + other); the Add is not lowered;
//   Affine(a, s, 0) -> Add(other): the Add computes a * s + other; the Affine is not lowered.
// Each where the scaled value has no other reader and `other` exists before the conv runs.
void CudaBackend::Impl::findSkipAdds() {
    const auto& all = graph.ops();
    addIntoConv.assign(all.size(), -1);
    affineIntoAdd.assign(all.size(), -1);
    skipped.assign(all.size(), 0);
    if (betaAccumulate) return;
    for (std::size_t i = 0; i < all.size(); ++i) {
        const GraphOp& op = all[i];
        const bool conv = op.kind == OpKind::Conv && op.residual < 0 && !op.leakyRelu && !deferred[i] &&
                          !biasMoved[i] && shortcutOf[i] < 0 && op.padEnd == op.padBegin;
        const bool affine = op.kind == OpKind::Affine && op.shift == 0.0f;
        if (!conv && !affine) continue;
        if (isGraphOutput[static_cast<std::size_t>(op.output)] || graph.value(op.output).kind != ValueKind::FeatureMap)
            continue;
        const auto& readers = readersOf[static_cast<std::size_t>(op.output)];
        if (readers.size() != 1) continue;
        const int a = readers[0];
        const GraphOp& add = opAt(a);
        if (!sameShapeAdd(add) || skipped[static_cast<std::size_t>(a)] ||
            affineIntoAdd[static_cast<std::size_t>(a)] >= 0)
            continue;
        const int other = add.input == op.output ? add.input2 : add.input;
        if (isGraphOutput[static_cast<std::size_t>(add.output)]) continue;
        if (conv) {
            if (graph.value(op.output).channels % 8 != 0) continue;  // stored padded: the skip is not
            const int p = producerOf(other);
            if (p >= static_cast<int>(i)) continue;  // computed after the conv
            addIntoConv[i] = a;
        } else {
            affineIntoAdd[static_cast<std::size_t>(a)] = static_cast<int>(i);
        }
        skipped[static_cast<std::size_t>(conv ? a : static_cast<int>(i))] = 1;
    }
    // A GELU or QK norm over a channel slice of tokens that only it reads (FLUX.1's single blocks:
    // the MLP and q | k | v parts of linear1's output) reads the slice in place: no copy.
    sliceInPlace.assign(all.size(), -1);
    for (std::size_t i = 0; i < all.size(); ++i) {
        const GraphOp& op = all[i];
        if (op.kind != OpKind::GELU && op.kind != OpKind::QuickGELU && op.kind != OpKind::QkNormRope) continue;
        const int p = producerOf(op.input);
        if (p < 0 || opAt(p).kind != OpKind::ChannelSlice || graph.value(op.input).kind != ValueKind::Tokens ||
            isGraphOutput[static_cast<std::size_t>(op.input)] ||
            readersOf[static_cast<std::size_t>(op.input)].size() != 1)
            continue;
        sliceInPlace[i] = p;
        skipped[static_cast<std::size_t>(p)] = 1;
    }
}

// A convolution that can read `value` as a slice: its input, same-size padding, not a residual.
bool CudaBackend::Impl::denseReaderConv(const GraphOp& op, int value) const {
    return op.kind == OpKind::Conv && op.input == value && op.residual != value && op.padEnd == op.padBegin &&
           op.input2 != value;
}

// Densely connected blocks (DenseNet; ESRGAN's ResidualDenseBlock_5C: x1 = conv1(x),
// x2 = conv2([x, x1]), ..., x5 = conv5([x, x1, x2, x3, x4])) lowered without copying their
// concatenations: a chain of Concats, each growing the last by one value, whose outputs only
// convolutions read (and the next Concat), becomes one buffer of the last Concat's channels.
// Each concatenation is a prefix of it (a view at the buffer's pitch), each value joining the
// chain a slice of it: written there by its convolution where that convolution is its only
// producer and the Concat its only reader (bias and leaky ReLU applied in place there), else
// copied there once; the chain's first operand is copied there once. A naive lowering copies
// every prefix again at every Concat: for ESRGAN's 64 + 4 x 32 channels, 1,152 channels moved
// per pixel and block instead of 64 + the convolutions' own writes. Opt-in (TESSERA_CUDA_DENSE=1):
// cuDNN's plans for strided channel slices are slower than the copies save (docs/UPSCALE.md).
void CudaBackend::Impl::findDenseGroups() {
    const auto& all = graph.ops();
    denseOf.assign(graph.values().size(), DenseSlot{});
    denseGroups.clear();
    denseConcat.assign(all.size(), -1);
    if (!denseViews || betaAccumulate) return;
    auto aligned = [&](int v) {
        return graph.value(v).channels % 8 == 0 && !isGraphOutput[static_cast<std::size_t>(v)];
    };
    for (std::size_t i = 0; i < all.size(); ++i) {
        if (all[i].kind != OpKind::Concat || denseConcat[i] >= 0) continue;
        if (denseOf[static_cast<std::size_t>(all[i].input)].group >= 0) continue;
        // Follow the chain from this Concat: each link's output read by convolutions and by the next link.
        std::vector<int> chain{static_cast<int>(i)};
        bool ok = aligned(all[i].input) && aligned(all[i].input2) && all[i].input != all[i].input2;
        for (;;) {
            const int out = opAt(chain.back()).output;
            if (!aligned(out)) {
                ok = false;
                break;
            }
            int next = -1, convReaders = 0;
            for (int r : readersOf[static_cast<std::size_t>(out)]) {
                const GraphOp& reader = opAt(r);
                if (reader.kind == OpKind::Concat && reader.input == out && reader.input2 != out && next < 0 &&
                    aligned(reader.input2))
                    next = r;
                else if (denseReaderConv(reader, out) && !deferred[static_cast<std::size_t>(r)])
                    ++convReaders;
                else
                    ok = false;
            }
            if (!ok) break;
            if (next < 0) {
                ok = convReaders > 0;
                break;
            }
            chain.push_back(next);
        }
        if (!ok || chain.size() < 2) continue;
        // A value joining twice (or the first operand again) would need two places.
        std::vector<int> joined{all[i].input};
        for (int c : chain) joined.push_back(opAt(c).input2);
        std::vector<int> sorted = joined;
        std::sort(sorted.begin(), sorted.end());
        if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) continue;
        const int g = static_cast<int>(denseGroups.size());
        DenseGroup group;
        group.channels = graph.value(opAt(chain.back()).output).channels;
        group.name = opAt(chain.back()).name + ".dense";
        denseGroups.push_back(group);
        int offset = 0;
        for (std::size_t k = 0; k < joined.size(); ++k) {
            const int v = joined[k];
            DenseSlot slot{g, offset, false};
            const int p = k == 0 ? -1 : producerOf(v);
            if (p >= 0) {
                const GraphOp& conv = opAt(p);
                slot.direct = conv.kind == OpKind::Conv && onlyReader(v, chain[k - 1]) && conv.residual < 0 &&
                              conv.outputScale == 1.0f && conv.padEnd == conv.padBegin &&
                              !deferred[static_cast<std::size_t>(p)] && !biasMoved[static_cast<std::size_t>(p)] &&
                              shortcutOf[static_cast<std::size_t>(p)] < 0;
            }
            denseOf[static_cast<std::size_t>(v)] = slot;
            offset += graph.value(v).channels;
        }
        for (int c : chain) {
            denseConcat[static_cast<std::size_t>(c)] = g;
            denseOf[static_cast<std::size_t>(opAt(c).output)] = DenseSlot{g, 0, false};
        }
        if (offset != group.channels) throw std::logic_error("CudaBackend: a dense group's channels do not add up");
    }
}

int CudaBackend::Impl::denseBuffer(int group) {
    DenseGroup& g = denseGroups[static_cast<std::size_t>(group)];
    if (g.buf < 0) {
        // Every member has the first operand's size (Concat joins equal feature maps).
        int h = 0, w = 0;
        for (std::size_t c = 0; c < denseConcat.size(); ++c)
            if (denseConcat[c] == group) {
                const Act& first = valueAct[static_cast<std::size_t>(opAt(static_cast<int>(c)).input)];
                h = first.h;
                w = first.w;
                break;
            }
        g.buf = newBuffer(static_cast<std::size_t>(maxBatch) * h * w * g.channels * dtypeSize(dtype), g.name);
    }
    return g.buf;
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
    // Vector linears whose float32 weights together pass kTypedVectorWeightBytes (FLUX.1's
    // modulation: 3.2 G weights, 12.9 GB read every call) keep their weights in the activation type,
    // as the model runs in it: each input row converted once, the products accumulated and written
    // in float32. The SD UNets' time embeddings stay float32.
    std::size_t linearBytes = 0;
    for (const GraphOp& op : graph.ops())
        if (op.kind == OpKind::Linear && graph.value(op.output).kind == ValueKind::Vector)
            linearBytes += weight(op.params[0]).data.size() * sizeof(float);
    const bool typedLinears = dtype != DType::F32 && linearBytes > kTypedVectorWeightBytes;
    std::map<int, int> typedInput;  // vector value -> its rows in the activation type
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
            case OpKind::ChannelSlice: {  // a packed copy of the rows' channel range
                const int offset = op.offset;
                steps.push_back([=, this](int batch) {
                    TESSERA_CHECK(cudaMemcpy2DAsync(vec(y), static_cast<std::size_t>(C) * 4, vec(x) + offset,
                                                    static_cast<std::size_t>(x.stride) * 4,
                                                    static_cast<std::size_t>(C) * 4, static_cast<std::size_t>(batch),
                                                    cudaMemcpyDeviceToDevice, opStream));
                });
                break;
            }
            case OpKind::Linear: {
                const std::size_t b = floats(op.params[1]);
                const bool silu = op.silu;
                if (typedLinears && x.stride == in) {
                    auto [at, first] = typedInput.try_emplace(op.input, -1);
                    if (first) {  // the input row converted once, before its first reader
                        at->second = newBuffer(static_cast<std::size_t>(maxBatch) * in * dtypeSize(dtype),
                                               graph.value(op.input).name + ".typed");
                        const int xt = at->second;
                        steps.push_back([=, this](int batch) {
                            launchNchwToNhwc(vec(x), dtype, ptr(xt), batch, 1, in, 1, 1, 1.0f, opStream);
                        });
                    }
                    const int xt = at->second;
                    bufs.push_back(xt);
                    const std::size_t w = blob.addTyped(weight(op.params[0]).data, dtype);
                    steps.push_back([=, this](int batch) {
                        const cudaDataType_t t = cublasType(dtype);
                        const float alpha = 1.0f, beta = 0.0f;
                        TESSERA_CHECK(cublasGemmEx(opCublas, CUBLAS_OP_T, CUBLAS_OP_N, C, batch, in, &alpha, wt(w), t,
                                                   in, ptr(xt), t, in, &beta, vec(y), CUDA_R_32F, C, CUBLAS_COMPUTE_32F,
                                                   CUBLAS_GEMM_DEFAULT));
                        launchBiasActivationF32(vec(y), wf(b), batch, C, silu, nullptr, opStream);
                    });
                    break;
                }
                const std::size_t w = floats(op.params[0]);
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
    // An Add that applies its operand's Affine itself (findSkipAdds): x * s + other.
    const std::size_t here = static_cast<std::size_t>(&op - graph.ops().data());
    const int folded = affineIntoAdd.empty() ? -1 : affineIntoAdd[here];
    const int first = folded < 0 ? op.input : opAt(folded).input;
    const int second = folded < 0 ? op.input2 : (op.input == opAt(folded).output ? op.input2 : op.input);
    const Act x = act(first, op, !sameShape);
    const Act y = newAct(x.c, x.h, x.w, op.name);
    std::vector<int> bufs{x.buf, y.buf};
    PointwiseParams p;
    p.channels = x.c;
    p.rowsPerSample = static_cast<long long>(x.h) * x.w;
    p.scale = op.kind == OpKind::Add ? (folded < 0 ? 1.0f : opAt(folded).scale) : op.scale;
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
                other = act(second, op, false);
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
    Act src = act(op.input, op, false, true);  // may be a prefix of a dense group's buffer
    if (src.isView() && op.padEnd != op.padBegin)
        throw std::logic_error("CudaBackend: " + op.name + " pads a slice of a dense group's buffer");
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
    if (src.isView()) convs.back().xPitch = src.stride();
    // A value a dense group keeps: written in its slice of the group's buffer.
    const DenseSlot slot = denseOf.empty() ? DenseSlot{} : denseOf[static_cast<std::size_t>(op.output)];
    const bool intoSlice = slot.group >= 0 && slot.direct;
    auto outputAct = [&] {
        if (!intoSlice) return newAct(co, ho, wo, op.name);
        Act a;
        a.buf = denseBuffer(slot.group);
        a.c = co;
        a.h = ho;
        a.w = wo;
        a.pitch = denseGroups[static_cast<std::size_t>(slot.group)].channels;
        a.offset = slot.offset;
        convs.back().yPitch = a.pitch;
        return a;
    };
    if (biasMoved[static_cast<std::size_t>(index)]) {  // into the GroupNorm that reads it
        const Act y = newAct(co, ho, wo, op.name);
        addOp(op.name, {src.buf, y.buf}, y,
              [this, layer, src, y](int batch) { runConv(layer, at(src), ptr(y.buf), 1.0f, 0.0f, batch); });
        valueAct[static_cast<std::size_t>(op.output)] = y;
        return;
    }
    std::vector<float> bias = weight(op.params[1]).data;
    bias.resize(static_cast<std::size_t>(co), 0.0f);
    const float scale = op.outputScale;
    convs.back().alpha = scale;
    const Act y = outputAct();
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
    // The Add of this output to a skip connection (findSkipAdds), after the scale.
    const int skipAdd = addIntoConv.empty() ? -1 : addIntoConv[static_cast<std::size_t>(index)];
    if (skipAdd >= 0) {
        const GraphOp& add = opAt(skipAdd);
        const Act r = act(add.input == op.output ? add.input2 : add.input, add, false);
        if (r.c != co) throw std::invalid_argument("CudaBackend: " + add.name + ": operands stored differently");
        rb = r.buf;
    }
    const bool residualAfterScale = skipAdd >= 0 && scale != 1.0f;
    if (rb >= 0) bufs.push_back(rb);
    const std::size_t b = blob.addFloats(bias);
    const long long pix = static_cast<long long>(ho) * wo;
    if (betaAccumulate) {  // diagnostics: the output initialised, the convolutions accumulate
        addOp(op.name, bufs, y, [=, this](int batch) {
            launchBiasResidual(dtype, ptr(y.buf), false, wf(b), sc < 0 && rb >= 0 ? ptr(rb) : nullptr, batch * pix, co,
                               scale, opStream);
            if (sc >= 0) runConv(sc, ptr(xs.buf), ptr(y.buf), scale, 1.0f, batch);
            runConv(layer, at(src), ptr(y.buf), scale, 1.0f, batch);
        });
        lowerConvActivation(op, y);
        valueAct[static_cast<std::size_t>(op.output)] = y;
        return;
    }
    if (sc >= 0)
        addOp(opAt(s).name, {xs.buf, rb}, Act{rb, co, xs.h, xs.w},
              [=, this](int batch) { runConv(sc, ptr(xs.buf), ptr(rb), 1.0f, 0.0f, batch); });
    ConvLayer& layerRef = convs[static_cast<std::size_t>(layer)];
    layerRef.hasEpilogue = scale == 1.0f && !y.isView();  // cuDNN's fused form adds an unscaled bias
    layerRef.epilogueBias = b;
    layerRef.epilogueResidual = rb >= 0;
    // Two ops (same launches) so that profiles show the convolution and its epilogue apart.
    addOp(op.name, bufs, y, [=, this](int batch) {
        const void* r = rb >= 0 ? ptr(rb) : nullptr;
        if (!runConvFused(layer, at(src), at(y), r, batch)) runConv(layer, at(src), at(y), scale, 0.0f, batch);
    });
    std::vector<int> epilogueBufs = rb >= 0 ? std::vector<int>{y.buf, rb} : std::vector<int>{src.buf, y.buf};
    if (s >= 0) epilogueBufs.push_back(xs.buf);
    // A Concat's tail (findConcatTails): the concatenation made here, the activated output written there.
    const int tailCat = tailInto.empty() ? -1 : tailInto[static_cast<std::size_t>(index)];
    Act cat;
    int catOffset = 0;
    if (tailCat >= 0) {
        const GraphOp& c = opAt(tailCat);
        catOffset = graph.value(c.input).channels;
        cat = newAct(catOffset + co, ho, wo, c.name);
        concatEarly[tailCat] = cat;
        epilogueBufs.push_back(cat.buf);
    }
    // Bias and leaky ReLU in one pass where nothing else is added (always for a slice).
    const bool biasActivation = y.isView() || tailCat >= 0 || (op.leakyRelu && rb < 0 && scale == 1.0f);
    const bool leaky = op.leakyRelu;
    const float slope = op.slope;
    // (a slice or a tail written elsewhere: no packed output for traces to read)
    const Act traced = y.isView() || tailCat >= 0 ? Act{} : y;
    addOp(op.name + ".epilogue", epilogueBufs, traced, [=, this](int batch) {
        const bool fused = fusedAt(layer, batch);
        if (tailCat >= 0) {
            launchSliceBiasActivationTo(dtype, at(y), y.stride(),
                                        ptr(cat.buf) + static_cast<std::size_t>(catOffset) * dtypeSize(dtype), cat.c,
                                        batch * pix, co, fused ? nullptr : wf(b), leaky, slope, opStream);
            return;
        }
        if (biasActivation) {
            if (!fused || leaky)
                launchSliceBiasActivation(dtype, at(y), y.stride(), batch * pix, co, fused ? nullptr : wf(b), leaky,
                                          slope, opStream);
            return;
        }
        if (fused) return;
        if (residualAfterScale)
            launchBiasThenResidual(dtype, ptr(y.buf), true, wf(b), ptr(rb), batch * pix, co, scale, opStream);
        else
            launchBiasResidual(dtype, ptr(y.buf), true, wf(b), rb >= 0 ? ptr(rb) : nullptr, batch * pix, co, scale,
                               opStream);
    });
    if (!biasActivation) lowerConvActivation(op, y);
    if (skipAdd >= 0) valueAct[static_cast<std::size_t>(opAt(skipAdd).output)] = y;
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
    // A joined sequence (fixed tokens, then the tile's) is one column of rows.
    if (g.tokens > 0 && g.divisor > 0)
        return newAct(channels, g.tokens + (tileH / g.divisor) * (tileW / g.divisor), 1, name);
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
    // fp16/bf16: the bias (in the activation type) and the residual in cuBLASLt's epilogue, one
    // pass over the output instead of two.
    const bool lt = settings.lt && dtype != DType::F32;
    const std::size_t bt = lt ? blob.addTyped(weight(op.params[1]).data, dtype) : 0;
    std::vector<int> bufs{x.buf, y.buf};
    if (r.buf >= 0) bufs.push_back(r.buf);
    addOp(op.name, bufs, y, [=, this](int batch) {
        const long long rows = static_cast<long long>(batch) * x.h * x.w;
        const void* residual = r.buf >= 0 ? ptr(r.buf) : nullptr;
        if (lt && gemmRowsBias(dtype, wt(w), ptr(x.buf), ptr(y.buf), static_cast<int>(rows), in, out, wt(bt), residual))
            return;
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

void CudaBackend::Impl::lowerGelu(int index) {
    const GraphOp& op = opAt(index);
    const GeluKind kind =
        op.kind == OpKind::QuickGELU ? GeluKind::Quick : (op.geluTanh ? GeluKind::Tanh : GeluKind::Exact);
    if (const int slice = sliceInPlace[static_cast<std::size_t>(index)]; slice >= 0) {
        const GraphOp& s = opAt(slice);  // its channels [offset, offset + count) of each row
        const Act x = act(s.input, op);
        const Act y = tokenAct(op.output, s.channels, op.name);
        const int offset = s.offset, count = s.channels;
        addOp(op.name, {x.buf, y.buf}, y, [=, this](int batch) {
            launchGeluRows(dtype, kind, ptr(x.buf) + static_cast<std::size_t>(offset) * dtypeSize(dtype), x.c,
                           ptr(y.buf), static_cast<long long>(batch) * x.h * x.w, count, opStream);
        });
        valueAct[static_cast<std::size_t>(op.output)] = y;
        return;
    }
    const Act x = act(op.input, op);
    const Act y = newAct(x.c, x.h, x.w, op.name);
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
    const int group = denseConcat.empty() ? -1 : denseConcat[static_cast<std::size_t>(&op - graph.ops().data())];
    if (group >= 0) {
        // A link of a dense group (findDenseGroups): its operands copied into their slices where
        // no convolution wrote them there, its output a prefix of the group's buffer.
        const int buf = denseBuffer(group);
        const int pitch = denseGroups[static_cast<std::size_t>(group)].channels;
        auto copyIn = [&](int value) {
            const Act from = act(value, op, false);
            const int offset = denseOf[static_cast<std::size_t>(value)].offset;
            addOp(op.name + ".into", {from.buf, buf}, Act{}, [this, from, buf, pitch, offset](int batch) {
                launchCopySlice(dtype, at(from), from.stride(),
                                ptr(buf) + static_cast<std::size_t>(offset) * dtypeSize(dtype), pitch,
                                static_cast<long long>(batch) * from.h * from.w, from.c, opStream);
            });
        };
        const int p = producerOf(op.input);
        if (p < 0 || denseConcat[static_cast<std::size_t>(p)] != group) copyIn(op.input);
        if (!denseOf[static_cast<std::size_t>(op.input2)].direct) copyIn(op.input2);
        const Act& joined = valueAct[static_cast<std::size_t>(op.input2)];
        Act cat;
        cat.buf = buf;
        cat.c = denseOf[static_cast<std::size_t>(op.input2)].offset + graph.value(op.input2).channels;
        cat.h = joined.h;
        cat.w = joined.w;
        cat.pitch = pitch;
        valueAct[static_cast<std::size_t>(op.output)] = cat;
        return;
    }
    const int here = static_cast<int>(&op - graph.ops().data());
    if (const auto early = concatEarly.find(here); early != concatEarly.end()) {
        // The tail is written by its convolution's epilogue: only the first operand is copied.
        const Act a = act(op.input, op);
        const Act cat = early->second;
        addOp(op.name, {a.buf, cat.buf}, cat, [this, a, cat](int batch) {
            launchCopySlice(dtype, at(a), a.stride(), ptr(cat.buf), cat.c, static_cast<long long>(batch) * a.h * a.w,
                            a.c, opStream);
        });
        valueAct[static_cast<std::size_t>(op.output)] = cat;
        return;
    }
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
    for (const GraphOp& op : graph.ops()) refuseUnlowered(op);
    analyse();
    lowerInputs();
    bool vectorsDone = false;
    for (std::size_t i = 0; i < graph.ops().size(); ++i) {
        const GraphOp& op = graph.ops()[i];
        const std::size_t before = ops.size();
        if (skipped[i]) continue;  // done by the op it was folded into (findSkipAdds)
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
                lowerGelu(static_cast<int>(i));
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
            case OpKind::ColorFix:
                lowerColorFix(op);
                break;
            case OpKind::ChannelSlice:
                lowerTokenSlice(op);
                break;
            case OpKind::AdaLayerNorm:
                lowerAdaLayerNorm(op);
                break;
            case OpKind::GatedAdd:
                lowerGatedAdd(op);
                break;
            case OpKind::QkNormRope:
                lowerQkNormRope(static_cast<int>(i));
                break;
            case OpKind::PackedAttention:
                lowerPackedAttention(static_cast<int>(i));
                break;
            case OpKind::TokenConcat:
            case OpKind::TokenSplit:
                lowerTokenJoin(op);
                break;
            case OpKind::RMSNorm:
                refuseUnlowered(op);  // throws: "op X has no CUDA lowering yet"
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
