// Fuzz target: a start image for image-to-image (app/InitImage: PNG through libpng's simplified
// API, JPEG through libjpeg-turbo), decoded and resampled as loadInitImage does, from a memfd
// (/proc/self/fd/N) since the reader takes a path. Input may only be rejected with
// InitImageError and a readable message; an accepted image must have a pixel buffer of its size.
#include "tests/fuzz/FuzzSupport.h"

#include "app/cli/InitImage.h"

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
    // Resampling is checked on images up to 256x256 pixels (its cost grows with the source
    // size, which would swamp the decoder's own time on the large images a tiny file can
    // claim): small outputs, an axis under 16 pixels grows (cubic), a longer one shrinks (area
    // average); both channel counts.
    if (static_cast<long long>(image.width) * image.height > 256 * 256) return 0;
    const int across = image.width < 16 ? 16 : 8, down = image.height < 16 ? 16 : 8;
    (void)resampleToModelSpace(image, across, down, 3);
    (void)resampleToModelSpace(image, down, across, 1);
    return 0;
}
