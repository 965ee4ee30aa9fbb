// Window-weighted scatter of a tile batch's UNet output into the canvas accumulators.
// One thread per canvas element of the batch's bounding box; it visits the batch's tiles in
// id order, so the accumulation order (and the result) is the CPU sampler's and never
// depends on scheduling (no atomics).
// The step k = state->step and K = coeff[k] are read from device memory (z is drawn with
// state->seed), so a captured graph serves every step and seed. The box and the weights are in
// plan coordinates; each plan pixel p adds to the canvas pixel under it (the canvas rolled by the
// state's shift: core/base/CanvasShift.h).
//   fusion "sample": v = applyStep(K, x[p], eps, z(k+1, p), x0Prev[p]); acc[p] += w v   (update fused;
//                    K = stepCoefficients(coeff, *state), x0Prev read only where K.cprev != 0)
//   fusion "noise":  v = eps;                                 accEps[p] += w eps
//   accEps also when previewEps (the x0 preview of a sample-fusion step);
//   seam statistics (last step): seamSum[p] += (w/N) v, seamSumSq[p] += (w/N) v^2.
#pragma once

#include <cuda_runtime.h>

#include "kernels/ops/StepState.cuh"
#include "kernels/ops/TiledCanvas.cuh"

namespace tessera {

struct ScatterTargets {
    const float* x0Prev = nullptr;  // read: the x0 canvas, the previous step's x0 (nullptr: the pass keeps none)
    float* acc = nullptr;           // sample fusion
    float* accEps = nullptr;        // noise fusion or preview (nullptr: not accumulated)
    double* seamSum = nullptr;      // last step only (nullptr: not accumulated)
    double* seamSumSq = nullptr;
};

// Tiles [first, first + count); the bounding box of their rectangles is
// rows [y0, y1) x columns [x0, x1) of the canvas.
void launchTileScatter(const CanvasGeometry&, const float* canvas, const StepCoefficients* coeff,
                       const StepState* state, bool sampleFusion, int first, int count, int y0, int y1, int x0, int x1,
                       const TileTensor&, const void* output, const ScatterTargets&, cudaStream_t);

}  // namespace tessera
