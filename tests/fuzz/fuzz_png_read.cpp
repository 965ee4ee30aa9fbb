// Fuzz target: a finished run's PNG read back (app/PngIO readPng: libpng's full API, 8/16-bit,
// grey/palette/alpha to RGB8, tEXt/zTXt/iTXt chunks), as reopening a run from its PNG does,
// from a memfd (/proc/self/fd/N) since the reader takes a path. Input may only be rejected
// with PngError and a readable message; an accepted image must have a pixel buffer of its size.
#include "tests/fuzz/FuzzSupport.h"

#include "app/cli/PngIO.h"

using namespace tessera;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static fuzz::MemoryFile memory;
    memory.assign(data, size);
    PngFile png;
    try {
        png = readPng(memory.path());
    } catch (const PngError& e) {
        fuzz::checkRejection(e);
        return 0;
    }
    if (png.image.width <= 0 || png.image.height <= 0 ||
        png.image.pixels.size() != static_cast<std::size_t>(png.image.width) * png.image.height * 3)
        fuzz::violation("read " + std::to_string(png.image.width) + "x" + std::to_string(png.image.height) + " with " +
                        std::to_string(png.image.pixels.size()) + " bytes of RGB");
    (void)png.text("tessera-manifest");
    return 0;
}
