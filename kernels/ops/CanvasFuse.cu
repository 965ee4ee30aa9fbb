#include "kernels/ops/CanvasFuse.cuh"

#include "core/sampling/Philox.h"
#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceTypes.cuh"

namespace tessera {
namespace {

__global__ void canvasFuse(CanvasGeometry g, long long total, float* __restrict__ x, float* __restrict__ acc,
                           float* __restrict__ accEps, float* __restrict__ x0, float* __restrict__ history,
                           const StepCoefficients* __restrict__ coeff, const StepState* __restrict__ state,
                           bool sampleFusion) {
    const StepState s = *state;
    const StepCoefficients K = stepCoefficients(coeff, s);
    const unsigned draw = static_cast<unsigned>(s.step + 1);
    const long long plane = static_cast<long long>(g.height) * g.width;
    const bool withHistory = history != nullptr && usesHistory(K);
    for (long long p = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; p < total;
         p += static_cast<long long>(gridDim.x) * blockDim.x) {
        long long pix = p % plane;  // the normalizer is the plan's: read at the plan pixel over p
        if (s.shiftY != 0 || s.shiftX != 0) {
            const int y = static_cast<int>(pix / g.width), x = static_cast<int>(pix % g.width);
            pix = static_cast<long long>(rolledPlace(y, s.shiftY, g.height)) * g.width +
                  rolledPlace(x, s.shiftX, g.width);
        }
        const float n = g.normalizer[pix];
        const float xOld = x[p];
        float e = 0.0f;
        if (accEps) {
            e = accEps[p] / n;
            accEps[p] = 0.0f;
        }
        if (sampleFusion) {
            x[p] = acc[p] / n;
            acc[p] = 0.0f;
        } else {
            const float z = K.sigma != 0.0f ? philoxNormal(s.seed, draw, static_cast<std::uint64_t>(p)) : 0.0f;
            x[p] = applyStep(K, xOld, e, z, K.cprev != 0.0f && x0 ? x0[p] : 0.0f);
        }
        const float x0p = predictX0(K, xOld, e);
        if (withHistory) {
            float h[kStepHistory];
            for (int j = 0; j < kStepHistory; ++j) h[j] = history[j * total + p];
            x[p] += K.hw[0] * h[0] + K.hw[1] * h[1] + K.hw[2] * h[2];
            for (int j = 0; j < kStepHistory; ++j) history[j * total + p] = nextHistory(K, j, h[j], xOld, x0p);
        }
        if (x0) x0[p] = x0p;
    }
}

}  // namespace

void launchCanvasFuse(const CanvasGeometry& g, float* x, float* acc, float* accEps, float* x0, float* history,
                      const StepCoefficients* coeff, const StepState* state, bool sampleFusion, cudaStream_t stream) {
    const long long total = static_cast<long long>(g.channels) * g.height * g.width;
    canvasFuse<<<gridFor(total, 256), 256, 0, stream>>>(g, total, x, acc, accEps, x0, history, coeff, state,
                                                        sampleFusion);
    TESSERA_CHECK_LAUNCH();
}

}  // namespace tessera
