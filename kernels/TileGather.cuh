// Gathers the canvas crops of tiles [first, first + count) into the UNet's NHWC input,
// scaled by the step's modelInputScale (read from device memory, so a captured graph
// serves every step); padding channels are written as zeros. Also writes the step's UNet
// timestep into timesteps[0 .. count).
#pragma once

#include <cuda_runtime.h>

#include "kernels/TiledCanvas.cuh"

namespace tessera {

void launchTileGather(const CanvasGeometry&, const float* canvas, const StepCoefficients* step, int first, int count,
                      const TileTensor&, void* input, float* timesteps, cudaStream_t);

}  // namespace tessera
