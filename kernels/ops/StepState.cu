#include "kernels/ops/StepState.cuh"

#include "kernels/device/CudaCheck.h"

namespace tessera {
namespace {

__global__ void setStepState(StepState* state, std::uint64_t seed, int step, int hasX0Prev) {
    state->seed = seed;
    state->step = step;
    state->hasX0Prev = hasX0Prev;
}

}  // namespace

void launchSetStepState(StepState* state, std::uint64_t seed, int step, bool hasX0Prev, cudaStream_t stream) {
    setStepState<<<1, 1, 0, stream>>>(state, seed, step, hasX0Prev ? 1 : 0);
    TESSERA_CHECK_LAUNCH();
}

}  // namespace tessera
