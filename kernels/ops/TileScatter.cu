#include "kernels/ops/TileScatter.cuh"

#include "core/sampling/Philox.h"
#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

template <typename T>
__global__ void tileScatter(CanvasGeometry g, const float* __restrict__ canvas,
                            const StepCoefficients* __restrict__ coeff, const StepState* __restrict__ state,
                            bool sampleFusion, int first, int count, int y0, int x0, int boxH, int boxW, int padded,
                            const T* __restrict__ output, ScatterTargets out) {
    const StepState s = *state;
    const StepCoefficients K = stepCoefficients(coeff, s);
    const unsigned draw = static_cast<unsigned>(s.step + 1);
    const long long total = static_cast<long long>(g.channels) * boxH * boxW;
    const int tileArea = g.tileH * g.tileW;
    for (long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int x = x0 + static_cast<int>(idx % boxW);  // plan coordinates
        const int y = y0 + static_cast<int>((idx / boxW) % boxH);
        const int c = static_cast<int>(idx / (static_cast<long long>(boxW) * boxH));
        const long long pix = static_cast<long long>(y) * g.width + x;  // the blend's normalizer: the plan's
        const long long p = (static_cast<long long>(c) * g.height + rolledSource(y, s.shiftY, g.height)) * g.width +
                            rolledSource(x, s.shiftX, g.width);
        const float xp = canvas[p];
        const float z =
            sampleFusion && K.sigma != 0.0f ? philoxNormal(s.seed, draw, static_cast<std::uint64_t>(p)) : 0.0f;
        const float x0Prev = sampleFusion && K.cprev != 0.0f && out.x0Prev ? out.x0Prev[p] : 0.0f;
        float acc = sampleFusion ? out.acc[p] : 0.0f;
        float accEps = out.accEps ? out.accEps[p] : 0.0f;
        double seamSum = out.seamSum ? out.seamSum[p] : 0.0, seamSumSq = out.seamSumSq ? out.seamSumSq[p] : 0.0;
        bool touched = false;
        for (int b = 0; b < count; ++b) {
            const int t = first + b;
            const int ly = y - g.tileY[t], lx = x - g.tileX[t];
            if (ly < 0 || lx < 0 || ly >= g.tileH || lx >= g.tileW) continue;
            touched = true;
            const float e = toFloat(output[(static_cast<long long>(b) * tileArea + ly * g.tileW + lx) * padded + c]);
            const float w = g.weightMaps[static_cast<long long>(g.tileMap[t]) * tileArea + ly * g.tileW + lx];
            float v = e;
            if (sampleFusion) {
                v = applyStep(K, xp, e, z, x0Prev);
                acc += w * v;
            }
            if (out.accEps) accEps += w * e;
            if (out.seamSum && w != 0.0f) {
                const double wn = static_cast<double>(w) / g.normalizer[pix];
                seamSum += wn * v;
                seamSumSq += wn * static_cast<double>(v) * v;
            }
        }
        if (!touched) continue;
        if (sampleFusion) out.acc[p] = acc;
        if (out.accEps) out.accEps[p] = accEps;
        if (out.seamSum) {
            out.seamSum[p] = seamSum;
            out.seamSumSq[p] = seamSumSq;
        }
    }
}

}  // namespace

void launchTileScatter(const CanvasGeometry& g, const float* canvas, const StepCoefficients* coeff,
                       const StepState* state, bool sampleFusion, int first, int count, int y0, int y1, int x0, int x1,
                       const TileTensor& io, const void* output, const ScatterTargets& targets, cudaStream_t stream) {
    const int boxH = y1 - y0, boxW = x1 - x0;
    const long long total = static_cast<long long>(g.channels) * boxH * boxW;
    TESSERA_DISPATCH_DTYPE(io.dtype, {
        tileScatter<T><<<gridFor(total, 256), 256, 0, stream>>>(g, canvas, coeff, state, sampleFusion, first, count, y0,
                                                                x0, boxH, boxW, io.paddedChannels,
                                                                static_cast<const T*>(output), targets);
        TESSERA_CHECK_LAUNCH();
    })
}

}  // namespace tessera
