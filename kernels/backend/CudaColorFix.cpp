// The colour fix's lowering (ModelGraph OpKind::ColorFix, kernels/ops/ColorFix.cuh): its three
// feature maps as stored (each with its own channel padding; the output padded as eps), the timesteps and the row mark
// from their float32 vectors, the DDPM table from the weight blob, and a double scratch of three
// values per element for the blurs' row and column sums.
#include <stdexcept>
#include <string>

#include "kernels/backend/CudaBackendImpl.h"
#include "kernels/ops/ColorFix.cuh"

namespace tessera {

void CudaBackend::Impl::lowerColorFix(const GraphOp& op) {
    const Act e = act(op.input, op, false);
    const Act x = act(op.input2, op, false);
    const Act z = act(op.hintLatent, op, false);
    const int C = graph.value(op.input).channels;
    if (x.h != e.h || z.h != e.h || x.w != e.w || z.w != e.w || e.c < C || x.c < C || z.c < C)
        throw std::invalid_argument("CudaBackend: " + op.name + ": operands of different sizes");
    const VectorRef t = valueVec[static_cast<std::size_t>(op.timesteps)];
    const VectorRef m = valueVec[static_cast<std::size_t>(op.condMark)];
    if (t.buf < 0 || m.buf < 0)
        throw std::logic_error("CudaBackend: " + op.name + " reads a vector that is not lowered");
    const std::size_t table = floats(op.params[0]);
    const int tableSize = static_cast<int>(graph.param(op.params[0]).shape[1]);
    const Act y = newAct(e.c, e.h, e.w, op.name);
    const int scratch = newBuffer(colorFixScratchBytes(maxBatch, e.h, e.w, C), op.name + ".scratch");
    const int radius = op.radius;
    const float weight = op.scale, sharpness = op.sharpness;
    addOp(op.name, {e.buf, x.buf, z.buf, t.buf, m.buf, scratch, y.buf}, y, [=, this](int batch) {
        ColorFixParams p;
        p.dtype = dtype;
        p.eps = ptr(e.buf);
        p.x = ptr(x.buf);
        p.latent = ptr(z.buf);
        p.y = ptr(y.buf);
        p.timesteps = vec(t);
        p.timestepStride = t.stride;
        p.mark = vec(m);
        p.markStride = m.stride;
        p.table = wf(table);
        p.tableSize = tableSize;
        p.batch = batch;
        p.h = e.h;
        p.w = e.w;
        p.channels = C;
        p.epsStride = e.c;
        p.xStride = x.c;
        p.latentStride = z.c;
        p.yStride = y.c;
        p.radius = radius;
        p.weight = weight;
        p.sharpness = sharpness;
        p.scratch = reinterpret_cast<double*>(ptr(scratch));
        launchColorFix(p, opStream);
    });
    valueAct[static_cast<std::size_t>(op.output)] = y;
}

}  // namespace tessera
