// The graph's elementwise ops over NHWC rows, float32 arithmetic: Affine (x * scale + shift),
// SiLU, Add (same shape: x * scale + other, scale 1 unless a lowering folded a scale into it), AddVector (a per-(sample, channel) float32 vector added to every
// pixel), FiLM ScaleShift (x * (1 + v[b, c]) + v[b, channels + c]), LeakyRelu (negative side
// times `scale`), Prelu (negative side times v[b, c]: the weights with vectorStride 0), Sigmoid
// and Mul (same shape). The UNet runs the fused
// forms (GroupNorm pre-add/FiLM/SiLU, conv epilogues); these serve the ops a graph keeps apart
// (center_input_sample's affine, unfused graphs, float32 vectors with dtype F32).
#pragma once

#include <cuda_runtime.h>

#include "kernels/device/DType.h"

namespace tessera {

enum class PointwiseOp { Affine, Silu, Add, AddVector, ScaleShift, LeakyRelu, Prelu, Sigmoid, Mul };

struct PointwiseParams {
    PointwiseOp op = PointwiseOp::Affine;
    DType dtype = DType::F32;       // of x, other and y
    const void* x = nullptr;        // [rows, channels]
    const void* other = nullptr;    // Add, Mul: [rows, channels]
    const float* vector = nullptr;  // AddVector, Prelu [b, channels], ScaleShift [b, 2 * channels] at vectorStride
    long long vectorStride = 0;     // floats between samples of `vector`
    void* y = nullptr;              // [rows, channels]; may alias x
    long long rows = 0;             // batch * pixels
    long long rowsPerSample = 1;    // pixels (which sample a row belongs to)
    int channels = 0;
    float scale = 1.0f, shift = 0.0f;  // Affine; LeakyRelu: scale is the negative slope
};

void launchPointwise(const PointwiseParams&, cudaStream_t);

}  // namespace tessera
