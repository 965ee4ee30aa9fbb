// The run's step state in device memory. The per-step kernels (gather, scatter, fuse, the
// non-finite check) read the step index and the seed from a StepState and index the run's
// StepCoefficients table with it, so one captured CUDA graph serves every step (and every seed)
// of a run; a one-thread kernel sets the state before each step in every graph mode, so off /
// tile / step launch the same kernels with the same arguments.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "core/base/CanvasShift.h"
#include "kernels/ops/TiledCanvas.cuh"

namespace tessera {

struct StepState {
    std::uint64_t seed = 0;  // Philox key of the run
    int step = 0;            // 0-based step index k: coefficients coeff[k], noise draw k + 1
    int hasX0Prev = 0;       // 0: the first step after the canvas start, no previous x0 (core/sampling/TileDevice.h)
    int shiftY = 0, shiftX = 0;  // the step's tiles over the canvas rolled by this (core/base/CanvasShift.h)
};

// The step's coefficients: coeff[state.step], without the previous-x0 term when there is none.
TESSERA_HD StepCoefficients stepCoefficients(const StepCoefficients* coeff, const StepState& state) {
    const StepCoefficients k = coeff[state.step];
    return state.hasX0Prev ? k : withoutPreviousX0(k);
}

// state = {seed, step, hasX0Prev, shift}; enqueued on the stream before the step's work.
void launchSetStepState(StepState* state, std::uint64_t seed, int step, bool hasX0Prev, CanvasShift shift,
                        cudaStream_t);

}  // namespace tessera
