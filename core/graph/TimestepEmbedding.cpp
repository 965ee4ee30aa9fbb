#include "core/graph/TimestepEmbedding.h"

#include <cmath>
#include <cstdint>

namespace tessera {

void timestepEmbedding(const float* timesteps, int batch, int dim, int freqShift, bool flipSinToCos, float* out) {
    const int half = dim / 2;
    // diffusers: exponent = -ln(10000) * arange(half) (float32), / (half - shift), exp; the
    // Python double ln(10000) enters the float32 product as a float32 scalar.
    const float negLog = static_cast<float>(-std::log(10000.0));
    const float divisor = static_cast<float>(half - freqShift);
    for (int b = 0; b < batch; ++b) {
        const float t = timesteps[b];
        float* e = out + std::int64_t(b) * dim;
        for (int i = 0; i < half; ++i) {
            const float exponent = (negLog * static_cast<float>(i)) / divisor;
            const float arg = t * std::exp(exponent);
            const float sn = std::sin(arg), cs = std::cos(arg);
            e[i] = flipSinToCos ? cs : sn;
            e[half + i] = flipSinToCos ? sn : cs;
        }
        if (dim % 2 == 1) e[dim - 1] = 0.0f;
    }
}

}  // namespace tessera
