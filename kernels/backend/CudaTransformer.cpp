// The lowering of FLUX's transformer ops (ModelGraph OpKinds ChannelSlice over tokens,
// AdaLayerNorm, GatedAdd, QkNormRope, PackedAttention, TokenConcat, TokenSplit): token rows are
// NHWC rows as everywhere here; a joined sequence (fixed tokens, then the tile's) is one
// column of rows. Modulation vectors are the float32 vector stage's outputs.
#include <cmath>

#include "core/cpu/CpuOps.h"
#include "kernels/backend/CudaBackendImpl.h"
#include "kernels/device/CudaCheck.h"
#include "kernels/ops/AdaLayerNorm.cuh"
#include "kernels/ops/ChannelSlice.cuh"
#include "kernels/ops/GatedAdd.cuh"
#include "kernels/ops/QkNormRope.cuh"

namespace tessera {

namespace {

// Rows of one image of a token value at this tile size.
long long rowsOf(const ModelGraph& g, int value, int tileH, int tileW) { return g.rows(value, tileH, tileW); }

}  // namespace

void CudaBackend::Impl::lowerTokenSlice(const GraphOp& op) {
    const Act x = act(op.input, op);
    const Act y = tokenAct(op.output, op.channels, op.name);
    const int offset = op.offset, count = op.channels;
    addOp(op.name, {x.buf, y.buf}, y, [=, this](int batch) {
        launchCopySlice(dtype, ptr(x.buf) + static_cast<std::size_t>(offset) * dtypeSize(dtype), x.c, ptr(y.buf), y.c,
                        static_cast<long long>(batch) * x.h * x.w, count, opStream);
    });
    valueAct[static_cast<std::size_t>(op.output)] = y;
}

void CudaBackend::Impl::lowerAdaLayerNorm(const GraphOp& op) {
    const Act x = act(op.input, op);
    const VectorRef m = valueVec[static_cast<std::size_t>(op.input2)];
    const Act y = tokenAct(op.output, x.c, op.name);
    const long long perImage = rowsOf(graph, op.input, tileH, tileW);
    addOp(op.name, {x.buf, y.buf, m.buf}, y, [=, this](int batch) {
        AdaLayerNormArgs a;
        a.dtype = dtype;
        a.x = ptr(x.buf);
        a.y = ptr(y.buf);
        a.mod = vec(m);
        a.modStride = m.stride;
        a.shiftAt = op.shiftAt;
        a.scaleAt = op.scaleAt;
        a.rows = batch * perImage;
        a.rowsPerImage = perImage;
        a.channels = x.c;
        a.eps = op.eps;
        launchAdaLayerNorm(a, opStream);
    });
    valueAct[static_cast<std::size_t>(op.output)] = y;
}

void CudaBackend::Impl::lowerGatedAdd(const GraphOp& op) {
    const Act x = act(op.input, op);
    const Act a = act(op.input2, op);
    const VectorRef g = valueVec[static_cast<std::size_t>(op.gate)];
    const Act y = tokenAct(op.output, x.c, op.name);
    const long long perImage = rowsOf(graph, op.input, tileH, tileW);
    addOp(op.name, {x.buf, a.buf, y.buf, g.buf}, y, [=, this](int batch) {
        GatedAddArgs p;
        p.dtype = dtype;
        p.x = ptr(x.buf);
        p.addend = ptr(a.buf);
        p.y = ptr(y.buf);
        p.gate = vec(g);
        p.gateStride = g.stride;
        p.gateAt = op.gateAt;
        p.rows = batch * perImage;
        p.rowsPerImage = perImage;
        p.channels = x.c;
        launchGatedAdd(p, opStream);
    });
    valueAct[static_cast<std::size_t>(op.output)] = y;
}

void CudaBackend::Impl::lowerQkNormRope(int index) {
    const GraphOp& op = opAt(index);
    // Reading a channel slice in place (sliceInPlace): its source's rows from the slice's offset.
    const int slice = sliceInPlace[static_cast<std::size_t>(index)];
    const Act x = act(slice >= 0 ? opAt(slice).input : op.input, op);
    const int channels = slice >= 0 ? opAt(slice).channels : x.c;
    const std::size_t offset = slice >= 0 ? static_cast<std::size_t>(opAt(slice).offset) * dtypeSize(dtype) : 0;
    const Act y = tokenAct(op.output, channels, op.name);
    const GraphValue& v = graph.value(op.input);
    cpu::RopeShape shape;  // the CPU backend's table: one definition of the positions
    shape.fixedTokens = v.tokens;
    shape.gridH = v.divisor > 0 ? tileH / v.divisor : 0;
    shape.gridW = v.divisor > 0 ? tileW / v.divisor : 0;
    for (int a = 0; a < 3; ++a) shape.axes[a] = op.ropeAxes[a];
    shape.theta = op.ropeTheta;
    const std::size_t table = blob.addFloats(cpu::ropeTable(shape));
    const std::size_t qw = floats(op.params[0]), kw = floats(op.params[1]);
    const long long perImage = rowsOf(graph, op.input, tileH, tileW);
    const int heads = op.heads, d = channels / 3 / op.heads;
    addOp(op.name, {x.buf, y.buf}, y, [=, this](int batch) {
        QkNormRopeArgs a;
        a.dtype = dtype;
        a.x = ptr(x.buf) + offset;
        a.xPitch = x.c;
        a.y = ptr(y.buf);
        a.qWeight = wf(qw);
        a.kWeight = wf(kw);
        a.table = wf(table);
        a.rows = batch * perImage;
        a.rowsPerImage = perImage;
        a.heads = heads;
        a.headDim = d;
        a.eps = op.eps;
        launchQkNormRope(a, opStream);
    });
    valueAct[static_cast<std::size_t>(op.output)] = y;
}

void CudaBackend::Impl::lowerPackedAttention(int index) {
    const GraphOp& op = opAt(index);
    const Act x = act(op.input, op);
    const int D = x.c / 3, heads = op.heads, d = D / heads;
    const long long N = rowsOf(graph, op.input, tileH, tileW);
    const std::size_t es = dtypeSize(dtype);
    const std::size_t inBytes = static_cast<std::size_t>(maxBatch) * N * 3 * D * es;
    const std::size_t outBytes = static_cast<std::size_t>(maxBatch) * N * D * es;
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    // Q, K and V are views into the packed rows (3 D apart); the heads' output [N, D].
    auto operands = [=](char* qkv, char* o) {
        AttentionOperands a;
        a.q = qkv;
        a.k = qkv ? qkv + static_cast<std::size_t>(D) * es : nullptr;
        a.v = qkv ? qkv + static_cast<std::size_t>(2 * D) * es : nullptr;
        a.qRow = a.kRow = a.vRow = 3LL * D;
        a.qImage = a.kImage = a.vImage = 3LL * D * N;
        a.o = o;
        a.oRow = D;
        a.oImage = static_cast<long long>(N) * D;
        a.queries = a.keys = static_cast<int>(N);
        a.heads = heads;
        a.headDim = d;
        return a;
    };
    const AttentionChoice path =
        attentionPath(op, operands(nullptr, nullptr), {3LL * D, 3LL * D * N, static_cast<long long>(D), D * N, 2LL * D},
                      inBytes, outBytes, operands, scale);
    const Act y = tokenAct(op.output, D, op.name);
    std::vector<int> bufs{x.buf, y.buf};
    if (!path.fused) bufs.insert(bufs.end(), {path.scores, path.probs});
    addOp(op.name, bufs, y,
          [=, this](int batch) { runAttention(path, operands(ptr(x.buf), ptr(y.buf)), batch, scale); });
    valueAct[static_cast<std::size_t>(op.output)] = y;
}

void CudaBackend::Impl::lowerTokenJoin(const GraphOp& op) {
    // TokenConcat: each image's fixed rows, then its tile rows; TokenSplit: one part of them. Row
    // blocks of whole images, one strided copy per part.
    const std::size_t es = dtypeSize(dtype);
    const bool concat = op.kind == OpKind::TokenConcat;
    const Act x = act(op.input, op);
    const int C = x.c;
    const Act y = tokenAct(op.output, C, op.name);
    const long long yRows = rowsOf(graph, op.output, tileH, tileW);
    if (concat) {
        const Act b = act(op.input2, op);
        const long long first = rowsOf(graph, op.input, tileH, tileW), second = rowsOf(graph, op.input2, tileH, tileW);
        addOp(op.name, {x.buf, b.buf, y.buf}, y, [=, this](int batch) {
            const std::size_t row = static_cast<std::size_t>(C) * es, pitch = yRows * row;
            TESSERA_CHECK(cudaMemcpy2DAsync(ptr(y.buf), pitch, ptr(x.buf), first * row, first * row,
                                            static_cast<std::size_t>(batch), cudaMemcpyDeviceToDevice, opStream));
            TESSERA_CHECK(cudaMemcpy2DAsync(ptr(y.buf) + first * row, pitch, ptr(b.buf), second * row, second * row,
                                            static_cast<std::size_t>(batch), cudaMemcpyDeviceToDevice, opStream));
        });
    } else {
        const long long total = rowsOf(graph, op.input, tileH, tileW);
        const long long skip = op.tail ? total - yRows : 0;
        addOp(op.name, {x.buf, y.buf}, y, [=, this](int batch) {
            const std::size_t row = static_cast<std::size_t>(C) * es;
            TESSERA_CHECK(cudaMemcpy2DAsync(ptr(y.buf), yRows * row, ptr(x.buf) + skip * row, total * row, yRows * row,
                                            static_cast<std::size_t>(batch), cudaMemcpyDeviceToDevice, opStream));
        });
    }
    valueAct[static_cast<std::size_t>(op.output)] = y;
}

}  // namespace tessera
