// Non-finite watch of the CUDA engine: whether a tensor holds a NaN or an infinity, recorded in
// one device word as the first site where one appeared, key = (step << 32) | slot, where slot is
// the tile batch whose UNet output was checked, or kNonFiniteLatents for the canvas after the
// step's update (after every batch of that step). Each block ORs its threads' findings and one
// thread per block takes atomicMin of the key, so the earliest site wins whatever order the
// lanes finish in. The step is read from the StepState in device memory, so a captured step
// graph serves every step; the host reads the word back once per step (kernels/engine/CudaEngine.cpp).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/device/DType.h"
#include "kernels/ops/StepState.cuh"

namespace tessera {

inline constexpr unsigned long long kNonFiniteClean = ~0ull;  // the word while nothing was found
inline constexpr unsigned kNonFiniteLatents = 0xFFFFFFFEu;    // slot of the canvas check

// Checks `elements` values of `data` (storage type `dtype`) laid out in rows of `stride` values
// of which the first `channels` are real (NHWC with padded channels; a plain tensor has
// channels = stride = 1). If any real value is NaN or infinite:
// *first = min(*first, (state->step << 32) | slot).
void launchNonFiniteCheck(DType dtype, const void* data, long long elements, int channels, int stride,
                          const StepState* state, unsigned slot, unsigned long long* first, cudaStream_t stream);

}  // namespace tessera
