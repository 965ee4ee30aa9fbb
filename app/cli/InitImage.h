// Image-to-image start images: a PNG or JPEG file decoded to 8-bit RGB and resampled to the
// run's size in model space, ready for Engine::setInitImage. Qt-free (tessera-cli links no
// Qt Gui), so the CLI and the window start from exactly the same pixels.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "app/cli/ImageLimits.h"
#include "core/cpu/HostMemoryEstimate.h"
#include "core/run/Engine.h"
#include "core/sampling/ImageOps.h"

namespace tessera {

// Thrown for a file that cannot be used as a start image; what() begins with the path in
// quotes (a short escaped excerpt of it) and says what is wrong (cannot be opened, empty, not
// PNG/JPEG, damaged or truncated, too many pixels, ...).
class InitImageError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// What a start image's header says, read without decoding a pixel.
struct ImageHeader {
    enum class Format { Png, Jpeg };
    Format format = Format::Png;
    int width = 0, height = 0;
    std::uint64_t fileBytes = 0;
};

// Reads only the header of a PNG (its IHDR chunk) or JPEG (the markers up to its frame
// header), recognised by content, and refuses before any decoding: a path that is not a
// regular file of 1 to kMaxInitFileBytes bytes (FIFOs and devices without blocking), another
// format, and dimensions of 0 or of more than kMaxInitImagePixels. Throws InitImageError.
ImageHeader readImageHeader(const std::string& path);

// A start image file read whole, as readImageHeader checks it: what the run decodes, and what
// the run history keeps a copy of (the same bytes, so the copy is what the run started from).
struct ImageFile {
    ImageHeader header;
    std::string bytes;
    // ".png" or ".jpg": the suffix a copy of these bytes gets.
    const char* suffix() const { return header.format == ImageHeader::Format::Png ? ".png" : ".jpg"; }
};
// Reads `path` (checked as readImageHeader checks it) into memory. Throws InitImageError.
ImageFile readImageFile(const std::string& path);
// Decodes the bytes of `file` as decodeImageFile decodes a file; `path` names it in messages.
Rgb8Image decodeImage(const std::string& path, const ImageFile& file);

// The canvas side an image side of `side` pixels gives at `factor` (image-to-image upscaling):
// side * factor rounded down to a multiple of 8 (the VAE's cell), at least 8. The window and
// the worker size the canvas with it, as tessera-cli render does.
int upscaledCanvasSide(int side, double factor);

// Decodes a PNG (libpng) or a JPEG (libjpeg-turbo), recognised by its first bytes rather
// than its name, into 8-bit RGB:
//   - grey and palette images become RGB; 16-bit samples are reduced to 8 bits;
//   - transparency is composited over white (transparent pixels often hold black or junk
//     colour that would otherwise leak into the run);
//   - CMYK/YCCK JPEGs (Adobe's inverted convention when the Adobe marker says so) become RGB;
//   - EXIF orientation is not applied: the pixels are used as stored.
//   - damaged data is refused, not decoded to grey: a file cut short, or entropy-coded data
//     that libjpeg reports as corrupt (premature end of a data segment, bad Huffman or
//     arithmetic code, lost restart markers, inconsistent progression).
// Throws InitImageError. The header is checked as readImageHeader checks it before decoding.
Rgb8Image decodeImageFile(const std::string& path);

// The start image of `config` (config.initImage; nullopt when empty) checked from its header
// alone, for a model with `modelChannels` input channels (1 or 3 can start from an image).
// Throws ValidationError on field "init" naming the file and what is wrong.
std::optional<StartImageSize> checkStartImageHeader(const RunConfig& config, int modelChannels);

// Resamples `image` to width x height and converts it to model space ([-1, 1], C x H x W)
// with `channels` channels (3: RGB; 1: the mean of R, G, B, as fromRgb8). Each axis on its
// own: an axis that shrinks is area-averaged (every source pixel weighted by how much of it
// the output pixel covers, so nothing aliases); an axis that grows uses Catmull-Rom cubic
// interpolation (pixel centres aligned, edge pixels repeated outwards); an unchanged axis
// is copied. The aspect ratio is not kept: the image is stretched to the run's size.
// Cubic overshoot is clamped to [0, 255] before the conversion. Throws
// std::invalid_argument for an empty image, a bad size or channels other than 1 or 3.
ImageTensor resampleToModelSpace(const Rgb8Image& image, int width, int height, int channels);

// decodeImageFile + resampleToModelSpace: what a front end passes to Engine::setInitImage.
ImageTensor loadInitImage(const std::string& path, int width, int height, int channels);
// The same from a file already read (readImageFile); `path` names it in messages.
ImageTensor loadInitImage(const std::string& path, const ImageFile& file, int width, int height, int channels);

}  // namespace tessera
