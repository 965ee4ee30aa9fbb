// Element types of device activations and weights. Plain C++ (no CUDA headers), so the
// backend's public header and the launchers' headers can share it.
#pragma once

#include <cstddef>

namespace tessera {

enum class DType { F32, F16, BF16 };

inline std::size_t dtypeSize(DType t) { return t == DType::F32 ? 4 : 2; }
inline const char* dtypeName(DType t) { return t == DType::F32 ? "f32" : (t == DType::F16 ? "f16" : "bf16"); }

}  // namespace tessera
