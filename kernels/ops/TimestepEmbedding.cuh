// Sinusoidal timestep embedding (shared/spec/unet2d.md §2.2), float32, and the small
// float32 epilogue (bias, optional SiLU) of the time MLP's GEMMs.
#pragma once

#include <cuda_runtime.h>

namespace tessera {

// out[b, :] = [sin(t_b f_i), cos(t_b f_i)] (halves swapped when flipSinToCos), f_i =
// exp(-ln(10000) i / (half - freqShift)); a trailing zero when dim is odd.
void launchTimestepEmbedding(const float* timesteps, float* out, int batch, int dim, int freqShift,
                             bool flipSinToCos, cudaStream_t);
// y[r, c] = act(y[r, c] + bias[c]) in place, act = SiLU or identity; also
// copies silu(y) into siluOut when siluOut != nullptr (the resnets' act(emb)).
void launchBiasActivationF32(float* y, const float* bias, int rows, int cols, bool silu, float* siluOut,
                             cudaStream_t);

}  // namespace tessera
