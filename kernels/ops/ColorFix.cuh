// sd-webui-controlnet's tile_colorfix / tile_colorfix+sharp correction of a UNet output (ModelGraph
// OpKind::ColorFix; scripts/hook.py, "Post-processing for color fix") over NHWC rows, in double as
// the CPU reference (core/cpu/ops/ColorFix.cpp) computes it: the box blurs as clamped row sums,
// then clamped column sums, in the same order. eps, x, latent and y in the activation type, each
// with its own stored channel count (padding); y's padded channels are written as zeros.
#pragma once

#include <cstddef>

#include <cuda_runtime.h>

#include "kernels/device/DType.h"

namespace tessera {

struct ColorFixParams {
    DType dtype = DType::F32;          // of eps, x, latent and y
    const void* eps = nullptr;         // the UNet's output [batch, h, w, channels]
    const void* x = nullptr;           // its input x_t, the same shape
    const void* latent = nullptr;      // the hint's latent, the same shape
    void* y = nullptr;                 // the corrected output; must not alias an input
    const float* timesteps = nullptr;  // float32, one per sample, timestepStride floats apart
    long long timestepStride = 1;
    const float* mark = nullptr;  // float32 FiLM rows [v0, v1] markStride floats apart: mark = v0 + 1
    long long markStride = 2;
    const float* table = nullptr;  // [2, tableSize]: sqrt(1 / abar), sqrt(1 / abar - 1)
    int tableSize = 1000;
    int batch = 0, h = 0, w = 0, channels = 0;                      // channels: the graph's (the latent's)
    int epsStride = 0, xStride = 0, latentStride = 0, yStride = 0;  // stored channels per pixel
    int radius = 8;
    float weight = 1.0f;
    float sharpness = -1.0f;    // < 0: no sharpening
    double* scratch = nullptr;  // colorFixScratchBytes
};

std::size_t colorFixScratchBytes(int batch, int h, int w, int channels);
void launchColorFix(const ColorFixParams&, cudaStream_t);

}  // namespace tessera
