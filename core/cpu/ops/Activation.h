// The scalar activations the CPU operations share (core/cpu/ops/, not for use outside it).
#pragma once

#include <cmath>

namespace tessera {
namespace cpu {

inline float siluValue(float v) { return v / (1.0f + std::exp(-v)); }
// LeakyReLU and PReLU: the negative side scaled by `slope` (PyTorch: x if x >= 0, else slope * x).
inline float leakyReluValue(float v, float slope) { return v >= 0.0f ? v : v * slope; }
// GELU: exact (erf), and PyTorch's tanh approximation (approximate="tanh").
inline float geluValue(float v) { return 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f)); }
inline float geluTanhValue(float v) {
    const float k = 0.79788456080286536f;  // sqrt(2 / pi)
    return 0.5f * v * (1.0f + std::tanh(k * (v + 0.044715f * v * v * v)));
}

}  // namespace cpu
}  // namespace tessera
