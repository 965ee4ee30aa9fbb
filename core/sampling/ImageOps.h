// Conversions between the engine's model-space images (float32 NCHW, [-1, 1] nominal)
// and 8-bit RGB pixels, exactly as diffusers post-processes: clamp(x / 2 + 0.5, 0, 1),
// then round(255 v) (diffusers VaeImageProcessor.postprocess / numpy_to_pil; docs/ENGINE_SEMANTICS.md, "Sampling"). Qt-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/run/Engine.h"

namespace tessera {

// Interleaved 8-bit RGB, row-major, no padding: pixels.size() == width * height * 3.
struct Rgb8Image {
    int width = 0, height = 0;
    std::vector<std::uint8_t> pixels;
};

// Model space -> 8-bit RGB. One channel is replicated to grey; three are taken as RGB;
// with more than three the first three are shown. Throws std::invalid_argument for an
// empty tensor or one whose data size does not match its shape.
Rgb8Image toRgb8(const ImageTensor& image);

// 8-bit RGB -> model space with `channels` channels (3: RGB; 1: the mean of R, G, B),
// v / 255 * 2 - 1. Throws std::invalid_argument for channels other than 1 or 3 or a bad size.
ImageTensor fromRgb8(const Rgb8Image& image, int channels = 3);

// A 1 x H x W map of non-negative values (e.g. the seam map) as grey 8-bit, scaled so that
// `maxValue` is white (maxValue <= 0: scaled by the map's own maximum; all-zero stays black).
Rgb8Image heatmapToRgb8(const ImageTensor& map, float maxValue = 0.0f);

// SHA-256 (hex) of the 8-bit pixels, the value stored as RunRecord::imageSha256.
std::string imageSha256(const Rgb8Image& image);

// A separable resize of inW x inH pixels to outW x outH (start images: app/cli/InitImage.h
// resampleToModelSpace) resamples one axis over the whole image, then the other; the first
// pass's result is held in between: inH x outW pixels when rows go first, outH x inW when
// columns go first. Rows go first unless columns first holds fewer pixels, so what is held in
// between is never more than the larger of the source and the result (a 1 x 65535 image made
// 4096 x 64 holds 64 x 1 pixels in between, not 65535 x 4096). Sides must be positive.
bool resizeColumnsFirst(int inW, int inH, int outW, int outH);
// The pixels held in between by that resize: min(inH x outW, outH x inW).
std::uint64_t resizeIntermediatePixels(int inW, int inH, int outW, int outH);

}  // namespace tessera
