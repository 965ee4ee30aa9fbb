// The small float32 epilogue (bias, optional SiLU) of the time and vector MLPs' GEMMs.
#pragma once

#include <cuda_runtime.h>

namespace tessera {

// y[r, c] = act(y[r, c] + bias[c]) in place, act = SiLU or identity; also
// copies silu(y) into siluOut when siluOut != nullptr (the resnets' act(emb)).
void launchBiasActivationF32(float* y, const float* bias, int rows, int cols, bool silu, float* siluOut, cudaStream_t);

}  // namespace tessera
