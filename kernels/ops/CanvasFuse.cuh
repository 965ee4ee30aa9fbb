// The tiled sampler's end-of-step fuse over the whole canvas: normalise the accumulators by
// N(p), then (fusion "noise") one scheduler step; it also resets the accumulators for the next
// step and writes the blended x0 (preview, and DPM++ 2M's previous x0) when asked.
#pragma once

#include <cuda_runtime.h>

#include "kernels/ops/StepState.cuh"
#include "kernels/ops/TiledCanvas.cuh"

namespace tessera {

// With K = stepCoefficients(coeff, *state) and z drawn with (state->seed, state->step + 1):
// sample fusion: x = acc / N, acc = 0.  noise fusion: x = applyStep(K, x, accEps / N, z, x0[p]).
// x0 (nullptr: none; the x0 canvas): after the update x0 = predictX0(K, x_old, accEps / N).
// history (nullptr: none; kStepHistory canvases one after the other, TiledPass::keepsHistory): where
// usesHistory(K), x += sum_j hw[j] h_j, then h_j = nextHistory(K, j, h_j, x_old, x0) (accEps required).
// accEps (when given) = 0.
void launchCanvasFuse(const CanvasGeometry&, float* x, float* acc, float* accEps, float* x0, float* history,
                      const StepCoefficients* coeff, const StepState* state, bool sampleFusion, cudaStream_t);

}  // namespace tessera
