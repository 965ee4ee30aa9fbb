// The CUDA backend's memory plan (how CudaBackend's one arena is laid out): every tensor of
// the lowered graph is a PlanBuffer with the span of ops that use it; placeBuffers packs them
// into one activation region so that tensors whose lifetimes do not overlap share bytes. The
// arena is then weights + lanes x (activations + cuDNN/cuBLAS workspace) (CudaPrepare.cpp).
#pragma once

#include <climits>
#include <cstddef>
#include <string>
#include <vector>

namespace tessera {

inline constexpr std::size_t kAlign = 256;                  // every buffer and weight offset
inline constexpr std::size_t kCublasWorkspace = 32u << 20;  // cuBLAS' recommendation for Hopper
// Vector linears (time embeddings, modulation) whose float32 weights together pass this are stored
// in the activation type (CudaLowering.cpp lowerVectors); the SD UNets' stay float32.
inline constexpr std::size_t kTypedVectorWeightBytes = std::size_t(1) << 30;

inline std::size_t alignUp(std::size_t v, std::size_t a = kAlign) { return (v + a - 1) / a * a; }
inline double mib(std::size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

struct PlanBuffer {
    std::size_t bytes = 0;
    int first = INT_MAX, last = -1;  // the ops that use it (set by placeBuffers)
    bool wholeRun = false;           // touched between calls (inputs, outputs, staging): never shared
    std::size_t offset = 0;          // in the activation region (set by placeBuffers)
    std::string name;
};

struct ActivationLayout {
    std::size_t bytes = 0;          // the activation region with buffers shared
    std::size_t unsharedBytes = 0;  // what one region per buffer would need
};

// Sets every buffer's lifetime from `buffersPerOp` (op i uses the buffers buffersPerOp[i]; a
// buffer no op uses, or a wholeRun one, lives throughout) and its offset: greedy by size, each
// buffer at the lowest offset that does not overlap, in address and in lifetime, a buffer
// already placed.
ActivationLayout placeBuffers(std::vector<PlanBuffer>& buffers, const std::vector<std::vector<int>>& buffersPerOp);

}  // namespace tessera
