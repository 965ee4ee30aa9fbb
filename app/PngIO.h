// PNG files of finished runs: 8-bit RGB pixels plus text chunks, through libpng directly
// (no Qt needed). Encoded in memory, so a PNG can join an all-or-nothing set of outputs
// (core/OutputSet.h); writePng writes one through such a set, so a reader never sees half a PNG.
#pragma once

#include <stdexcept>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/ImageOps.h"
#include "core/RunConfig.h"

namespace tessera {

struct PngTextChunk {
    std::string keyword;     // 1-79 printable Latin-1 characters, e.g. "parameters"
    std::string text;        // stored as valid UTF-8: invalid bytes as "\xNN" (toValidUtf8)
    bool international = false;  // iTXt (UTF-8, any length) instead of tEXt (Latin-1); non-ASCII text always goes to iTXt
};

struct PngFile {
    Rgb8Image image;               // always RGB8 after reading (grey/palette/alpha/16-bit converted)
    std::vector<PngTextChunk> texts;
    // The text of the first chunk named `keyword`, or "" when there is none.
    std::string text(const std::string& keyword) const;
};

// Thrown for a file that cannot be written or read; what() names the path and libpng's reason.
class PngError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// The PNG file's bytes: `image` with the given text chunks. `path` only names the file in
// PngError's message.
std::string encodePng(const std::string& path, const Rgb8Image& image, const std::vector<PngTextChunk>& texts);
// encodePng, then written atomically (core/OutputSet.h writeFileAtomically); PngError on failure.
void writePng(const std::string& path, const Rgb8Image& image, const std::vector<PngTextChunk>& texts);

// The PNG of a run: tEXt "parameters" = parametersLine(config) (the A1111 convention) and
// iTXt "tessera-manifest" = the manifest JSON text (core/RunRecordIO.h jsonText(manifestJson)).
std::string encodeRunPng(const std::string& path, const Rgb8Image& image, const RunConfig& config,
                         const std::string& manifestJson);
void writeRunPng(const std::string& path, const Rgb8Image& image, const RunConfig& config,
                 const std::string& manifestJson);

// Walks a PNG's chunk headers after the signature (read8(offset, out) reads 8 bytes): "" when
// every chunk fits in `size` bytes, else what is wrong. libpng allocates a text chunk's claimed
// length before reading it (a 204-byte file claiming a 1.9 GB tEXt chunk costs 1.9 GB), so both
// PNG readers call this first.
std::string firstOverlongPngChunk(std::int64_t size, const std::function<bool(std::int64_t, unsigned char*)>& read8);

// Reads any 8/16-bit PNG as RGB8 with its tEXt/zTXt/iTXt chunks.
PngFile readPng(const std::string& path);

}  // namespace tessera
