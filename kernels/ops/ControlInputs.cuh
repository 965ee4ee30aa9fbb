// A ControlNet's per-batch graph inputs, filled on the device from tables uploaded once per run:
// each tile's crop of the hint canvas and the FiLM scale rows of the step. Reading the tile
// positions from the run arena and the step from the StepState keeps them inside captured step
// graphs and off the host: one lane per batch, graphs on.
#pragma once

#include <cuda_runtime.h>

#include "kernels/device/DType.h"
#include "kernels/ops/StepState.cuh"

namespace tessera {

// The hint inputs of a tile batch of `count` tiles from tile `first` (tileX/tileY in latent pixels),
// `rows` rows (count, or 2 count when guided: row r is tile first + r % count): dst[r, y, x, c] =
// hint[c, (tileY * factor + y), (tileX * factor + x)] for c < channels, 0 up to paddedChannels; the
// hint canvas is float32 channels x hintH x hintW, dst the activations' dtype, tileH x tileW the
// crop (latent tile times factor). With a state (nullptr: none), the hint canvas rolled by its
// shift times factor (core/base/CanvasShift.h), as the latents under the tiles.
void launchControlHintCrop(const float* hint, int channels, int hintH, int hintW, int factor, const int* tileX,
                           const int* tileY, const StepState* state, int first, int count, int rows, int tileH,
                           int tileW, int paddedChannels, DType, void* dst, cudaStream_t);

// FiLM scale rows of the step state's step k: row r (of `rows`, the first `count` conditional) holds
// `width` values s - 1 then `width` zeros, s = scales[k] for a conditional row and scales[steps + k]
// for an unconditional one (the table is the conditional scales of `steps` steps, then the
// unconditional ones).
void launchControlScaleRows(const float* scales, int steps, const StepState* state, int count, int rows, int width,
                            float* dst, cudaStream_t);

}  // namespace tessera
