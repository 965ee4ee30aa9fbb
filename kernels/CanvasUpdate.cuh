// Whole-canvas kernels of the tiled sampler: the initial x_T (Philox draw 0, or the
// image-to-image forward noising) and the end-of-step fuse (normalise by N(p), then for
// fusion "noise" one scheduler step), which also resets the accumulators for the next step
// and writes the blended x0 preview when asked.
#pragma once

#include <cuda_runtime.h>

#include "kernels/TiledCanvas.cuh"

namespace tessera {

// x = init ? (a * init + b * z(draw)) * scale : z(draw) * sigma, over the whole canvas.
void launchCanvasInit(const CanvasGeometry&, float* x, const float* init, unsigned draw, float sigma, float a, float b,
                      float scale, cudaStream_t);

// sample fusion: x = acc / N, acc = 0.  noise fusion: x = applyStep(K, x, accEps / N, z(k+1)).
// preview (nullptr: none): preview = clamp(K.ax x_old + K.ae accEps / N). accEps (when given) = 0.
void launchCanvasFuse(const CanvasGeometry&, float* x, float* acc, float* accEps, float* preview,
                      const StepCoefficients* step, int stepIndex, bool sampleFusion, cudaStream_t);

}  // namespace tessera
