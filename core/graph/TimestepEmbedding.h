// The sinusoidal timestep embedding (diffusers' embeddings.py get_timestep_embedding), the
// reference the graphs' TimestepEmbedding op and the SDXL size ids compute. Qt-free.
#pragma once

namespace tessera {

// float32 in diffusers' order of operations; out [batch, dim]. An odd dim's last column is 0.
void timestepEmbedding(const float* timesteps, int batch, int dim, int freqShift, bool flipSinToCos, float* out);

}  // namespace tessera
