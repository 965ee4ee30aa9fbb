// Fuzz target: a start image for image-to-image (app/InitImage: PNG through libpng's simplified
// API, JPEG through libjpeg-turbo), decoded and resampled as loadInitImage does, from a memfd
// (/proc/self/fd/N) since the reader takes a path. Input may only be rejected with
// InitImageError and a readable message; an accepted image must have a pixel buffer of its size.
#include "tests/fuzz/FuzzSupport.h"

#include "app/InitImage.h"

using namespace tessera;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static fuzz::MemoryFile memory;
    memory.assign(data, size);
    Rgb8Image image;
    try {
        image = decodeImageFile(memory.path());
    } catch (const InitImageError& e) {
        fuzz::checkRejection(e);
        return 0;
    }
    if (image.width <= 0 || image.height <= 0 ||
        static_cast<long long>(image.width) * image.height > kMaxInitImagePixels ||
        image.pixels.size() != static_cast<std::size_t>(image.width) * image.height * 3)
        fuzz::violation("decoded " + std::to_string(image.width) + "x" + std::to_string(image.height) + " with " +
                        std::to_string(image.pixels.size()) + " bytes of RGB");
    // Small outputs, so memory stays bounded by the input: an axis under 16 pixels grows (cubic),
    // a longer one shrinks (area average); both channel counts.
    const int across = image.width < 16 ? 16 : 8, down = image.height < 16 ? 16 : 8;
    (void)resampleToModelSpace(image, across, down, 3);
    (void)resampleToModelSpace(image, down, across, 1);
    return 0;
}
