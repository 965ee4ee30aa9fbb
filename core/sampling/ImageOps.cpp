#include "core/sampling/ImageOps.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/base/Sha256.h"

namespace tessera {

namespace {

void checkShape(const ImageTensor& image, const char* what) {
    if (image.channels <= 0 || image.height <= 0 || image.width <= 0)
        throw std::invalid_argument(std::string(what) + ": empty image");
    const std::size_t expected = static_cast<std::size_t>(image.channels) * image.height * image.width;
    if (image.data.size() != expected)
        throw std::invalid_argument(std::string(what) + ": data has " + std::to_string(image.data.size()) +
                                    " values, the shape needs " + std::to_string(expected));
}

std::uint8_t toByte(float x) {
    // NaN maps to 0: both comparisons fail for it, on every platform.
    float v = x / 2.0f + 0.5f;
    v = v > 0.0f ? v : 0.0f;
    v = v < 1.0f ? v : 1.0f;
    // std::lround(y) for y = 255 v in [0, 255], without the library call (a 2048x2048 image
    // took 50 ms): y + 0.5 is exact in double, and truncation is floor for y >= 0.
    const float y = 255.0f * v;
    return static_cast<std::uint8_t>(static_cast<int>(static_cast<double>(y) + 0.5));
}

}  // namespace

Rgb8Image toRgb8(const ImageTensor& image) {
    checkShape(image, "toRgb8");
    Rgb8Image out;
    out.width = image.width;
    out.height = image.height;
    const std::size_t plane = static_cast<std::size_t>(image.height) * image.width;
    out.pixels.resize(plane * 3);
    const float* r = image.data.data();
    const float* g = image.channels >= 3 ? r + plane : r;
    const float* b = image.channels >= 3 ? r + 2 * plane : r;
    std::uint8_t* px = out.pixels.data();
    for (std::size_t p = 0; p < plane; ++p) {
        px[3 * p] = toByte(r[p]);
        px[3 * p + 1] = toByte(g[p]);
        px[3 * p + 2] = toByte(b[p]);
    }
    return out;
}

ImageTensor fromRgb8(const Rgb8Image& image, int channels) {
    if (channels != 1 && channels != 3)
        throw std::invalid_argument("fromRgb8: " + std::to_string(channels) + " channels; only 1 or 3 are supported");
    const std::size_t plane = static_cast<std::size_t>(image.height) * image.width;
    if (image.width <= 0 || image.height <= 0 || image.pixels.size() != plane * 3)
        throw std::invalid_argument("fromRgb8: pixel buffer does not match " + std::to_string(image.width) + "x" +
                                    std::to_string(image.height) + " RGB");
    ImageTensor out;
    out.channels = channels;
    out.height = image.height;
    out.width = image.width;
    out.data.resize(plane * channels);
    auto toModel = [](float byteValue) { return byteValue / 255.0f * 2.0f - 1.0f; };
    if (channels == 3) {
        for (int c = 0; c < 3; ++c)
            for (std::size_t p = 0; p < plane; ++p) out.data[c * plane + p] = toModel(image.pixels[p * 3 + c]);
    } else {
        for (std::size_t p = 0; p < plane; ++p) {
            const float mean =
                (float(image.pixels[p * 3]) + float(image.pixels[p * 3 + 1]) + float(image.pixels[p * 3 + 2])) / 3.0f;
            out.data[p] = toModel(mean);
        }
    }
    return out;
}

Rgb8Image heatmapToRgb8(const ImageTensor& map, float maxValue) {
    checkShape(map, "heatmapToRgb8");
    const std::size_t plane = static_cast<std::size_t>(map.height) * map.width;
    float scale = maxValue;
    if (scale <= 0.0f) {
        scale = 0.0f;
        for (std::size_t p = 0; p < plane; ++p) scale = std::max(scale, map.data[p]);
    }
    Rgb8Image out;
    out.width = map.width;
    out.height = map.height;
    out.pixels.assign(plane * 3, 0);
    if (scale <= 0.0f) return out;
    for (std::size_t p = 0; p < plane; ++p) {
        const float v = std::clamp(map.data[p] / scale, 0.0f, 1.0f);
        const auto b = static_cast<std::uint8_t>(std::lround(255.0f * v));
        out.pixels[p * 3] = out.pixels[p * 3 + 1] = out.pixels[p * 3 + 2] = b;
    }
    return out;
}

std::string imageSha256(const Rgb8Image& image) { return sha256Hex(image.pixels.data(), image.pixels.size()); }

bool resizeColumnsFirst(int inW, int inH, int outW, int outH) {
    return static_cast<std::uint64_t>(outH) * static_cast<std::uint64_t>(inW) <
           static_cast<std::uint64_t>(inH) * static_cast<std::uint64_t>(outW);
}

std::uint64_t resizeIntermediatePixels(int inW, int inH, int outW, int outH) {
    return std::min(static_cast<std::uint64_t>(outH) * static_cast<std::uint64_t>(inW),
                    static_cast<std::uint64_t>(inH) * static_cast<std::uint64_t>(outW));
}

}  // namespace tessera
