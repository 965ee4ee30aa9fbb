// Device-side geometry of a tiled run, shared by the gather, scatter and canvas kernels:
// the canvas (float32 NCHW, the whole image), the tiles' corners, the blend weight maps
// and the per-pixel normaliser N(p) (docs/ENGINE_SEMANTICS.md).
#pragma once

#include <cstdint>

#include "core/sampling/StepUpdate.h"
#include "kernels/device/DType.h"

namespace tessera {

struct CanvasGeometry {
    int channels = 0, height = 0, width = 0;
    int tileH = 0, tileW = 0;
    const int* tileX = nullptr;         // [tiles] left column of each tile
    const int* tileY = nullptr;         // [tiles] top row
    const int* tileMap = nullptr;       // [tiles] index of the tile's weight map
    const float* weightMaps = nullptr;  // [maps][tileH * tileW]
    const float* normalizer = nullptr;  // [height * width], N(p) > 0
    std::uint64_t seed = 0;
};

// The UNet's I/O tensors as the backend lays them out: NHWC, channels padded.
struct TileTensor {
    DType dtype = DType::F32;
    int paddedChannels = 0;
};

}  // namespace tessera
