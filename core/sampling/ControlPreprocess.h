// ControlPreprocess: sd-webui-controlnet's tile_resample preprocessor and the resize of the processed
// map back to the run's size, on the 8-bit image A1111 works on, so that a unit with a down
// sampling rate gives the hint A1111 gives. The resizes are OpenCV's (imgproc/src/resize.cpp), as
// the extension calls them: INTER_AREA to shrink, INTER_CUBIC (a = -0.75, 11-bit fixed-point
// coefficients, replicated borders) to enlarge, INTER_NEAREST for maps of 3 to 199 colours.
// Qt-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

// An 8-bit image, height x width x channels, interleaved (OpenCV's layout).
struct Image8 {
    int width = 0, height = 0, channels = 0;
    std::vector<std::uint8_t> pixels;
};

// cv2.resize with INTER_AREA (shrinking: each output pixel the area-weighted mean of the input
// pixels its cell covers), INTER_CUBIC and INTER_NEAREST. Sizes must be positive.
Image8 resizeArea(const Image8& image, int width, int height);
Image8 resizeCubic(const Image8& image, int width, int height);
Image8 resizeNearest(const Image8& image, int width, int height);

// How the extension brings a processed map to the run's size (scripts/controlnet.py
// detectmap_proc): "Just Resize" stretches it; "Crop and Resize" scales it by the larger ratio
// (rounded) and keeps the centre.
enum class ControlResizeMode { JustResize, CropAndResize };
std::string_view a1111Name(ControlResizeMode mode);  // "Just Resize", "Crop and Resize"

// detectmap_proc's high_quality_resize: INTER_NEAREST for 3 to 199 distinct colours, INTER_AREA to
// a smaller size (by area), else INTER_CUBIC; the image as it is at its own size. `how` (optional)
// gets "nearest", "area", "cubic" or "none". A two-colour black-and-white map (an edge map) is
// resized the same way, without the extension's Otsu threshold and thinning.
Image8 highQualityResize(const Image8& image, int width, int height, std::string* how = nullptr);
Image8 detectmapResize(const Image8& image, ControlResizeMode mode, int width, int height, std::string* how = nullptr);

// scripts/preprocessor/legacy/processor.py tile_resample: below a rate of 1.1 the image as it is,
// else INTER_AREA to (int(width / rate), int(height / rate)).
Image8 tileResample(const Image8& image, double rate);

// A hint canvas (channels x height x width in [0, 1]) through tile_resample at `rate` and back to
// its size with `mode`, on its 8-bit values (round(255 v)) as A1111 has them; the result in [0, 1].
// The hint as it is below a rate of 1.1.
std::vector<float> tileResampleHint(const std::vector<float>& hint, int channels, int height, int width, double rate,
                                    ControlResizeMode mode);

}  // namespace tessera
