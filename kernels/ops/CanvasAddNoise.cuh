// The host-drawn noise of a step (torch's generators as A1111 draws them, core/sampling/LatentNoise.h)
// added to the canvas after the step's fuse: x += noise, noise already scaled by the step's sigma.
// The update is linear in its noise term (core/sampling/StepUpdate.h applyStep: + sigma * z), and z
// is the same for every tile at a canvas pixel, so adding it after the window-weighted blend is the
// blend of the per-tile updates with it.
#pragma once

#include <cstddef>

#include <cuda_runtime.h>

namespace tessera {

// x[i] += noise[i] for i < count.
void launchCanvasAddNoise(float* x, const float* noise, std::size_t count, cudaStream_t stream);

}  // namespace tessera
