// The tiled sampler's initial canvas x_T over the whole image: Philox draw 0, or the
// image-to-image forward noising of an init image.
#pragma once

#include <cuda_runtime.h>

#include "kernels/ops/TiledCanvas.cuh"

namespace tessera {

// x = init ? (a * init + b * z(draw)) * scale : z(draw) * sigma, over the whole canvas
// (the seed is the geometry's).
void launchCanvasInit(const CanvasGeometry&, float* x, const float* init, unsigned draw, float sigma, float a, float b,
                      float scale, cudaStream_t);

}  // namespace tessera
