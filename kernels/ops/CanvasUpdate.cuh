// Whole-canvas kernels of the tiled sampler: the initial x_T (Philox draw 0, or the
// image-to-image forward noising), the end-of-step fuse (normalise by N(p), then for
// fusion "noise" one scheduler step), which also resets the accumulators for the next step
// and writes the blended x0 (preview, and DPM++ 2M's previous x0) when asked, and the run's
// device-side step state.
//
// The per-step kernels (gather, scatter, fuse) read the step index and the seed from a
// StepState in device memory and index the run's StepCoefficients table with it, so one
// captured CUDA graph serves every step (and every seed) of a run; a one-thread kernel sets
// the state before each step in every graph mode, so off / tile / step launch the same
// kernels with the same arguments.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/ops/TiledCanvas.cuh"

namespace tessera {

struct StepState {
    std::uint64_t seed = 0;   // Philox key of the run
    int step = 0;             // 0-based step index k: coefficients coeff[k], noise draw k + 1
    int hasX0Prev = 0;        // 0: the first step after the canvas start, no previous x0 (core/sampling/TileDevice.h)
};

// The step's coefficients: coeff[state.step], without the previous-x0 term when there is none.
TESSERA_HD StepCoefficients stepCoefficients(const StepCoefficients* coeff, const StepState& state) {
    const StepCoefficients k = coeff[state.step];
    return state.hasX0Prev ? k : withoutPreviousX0(k);
}

// state = {seed, step, hasX0Prev}; enqueued on the stream before the step's work.
void launchSetStepState(StepState* state, std::uint64_t seed, int step, bool hasX0Prev, cudaStream_t);

// x = init ? (a * init + b * z(draw)) * scale : z(draw) * sigma, over the whole canvas
// (the seed is the geometry's).
void launchCanvasInit(const CanvasGeometry&, float* x, const float* init, unsigned draw, float sigma, float a, float b,
                      float scale, cudaStream_t);

// With K = stepCoefficients(coeff, *state) and z drawn with (state->seed, state->step + 1):
// sample fusion: x = acc / N, acc = 0.  noise fusion: x = applyStep(K, x, accEps / N, z, x0[p]).
// x0 (nullptr: none; the x0 canvas): after the update x0 = predictX0(K, x_old, accEps / N).
// accEps (when given) = 0.
void launchCanvasFuse(const CanvasGeometry&, float* x, float* acc, float* accEps, float* x0,
                      const StepCoefficients* coeff, const StepState* state, bool sampleFusion, cudaStream_t);

}  // namespace tessera
