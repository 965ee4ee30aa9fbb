// Sinusoidal timestep embedding, float32, as diffusers' models/embeddings.py
// get_timestep_embedding (flip_sin_to_cos, downscale_freq_shift).
#pragma once

#include <cuda_runtime.h>

namespace tessera {

// out[b, :] = [sin(t_b f_i), cos(t_b f_i)] (halves swapped when flipSinToCos), f_i =
// exp(-ln(10000) i / (half - freqShift)); a trailing zero when dim is odd.
void launchTimestepEmbedding(const float* timesteps, float* out, int batch, int dim, int freqShift, bool flipSinToCos,
                             cudaStream_t);

}  // namespace tessera
