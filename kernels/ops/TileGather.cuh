// Gathers the canvas crops of tiles [first, first + count) into the UNet's NHWC input,
// scaled by the step's modelInputScale; padding channels are written as zeros. Also writes
// the step's UNet timestep into timesteps[0 .. count). The step is coeff[state->step], read
// from device memory, so a captured graph serves every step; so is the step's canvas shift
// (the tiles over the canvas rolled by it: core/base/CanvasShift.h).
#pragma once

#include <cuda_runtime.h>

#include "kernels/ops/StepState.cuh"
#include "kernels/ops/TiledCanvas.cuh"

namespace tessera {

void launchTileGather(const CanvasGeometry&, const float* canvas, const StepCoefficients* coeff, const StepState* state,
                      int first, int count, const TileTensor&, void* input, float* timesteps, cudaStream_t);

}  // namespace tessera
