#include "kernels/ops/StepState.cuh"

#include "kernels/device/CudaCheck.h"

namespace tessera {
namespace {

__global__ void setStepState(StepState* state, std::uint64_t seed, int step, int hasX0Prev, int shiftY, int shiftX) {
    state->seed = seed;
    state->step = step;
    state->hasX0Prev = hasX0Prev;
    state->shiftY = shiftY;
    state->shiftX = shiftX;
}

}  // namespace

void launchSetStepState(StepState* state, std::uint64_t seed, int step, bool hasX0Prev, CanvasShift shift,
                        cudaStream_t stream) {
    setStepState<<<1, 1, 0, stream>>>(state, seed, step, hasX0Prev ? 1 : 0, shift.dy, shift.dx);
    TESSERA_CHECK_LAUNCH();
}

}  // namespace tessera
