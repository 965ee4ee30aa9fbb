// PNG files of finished runs: 8-bit RGB pixels plus text chunks, through libpng directly
// (no Qt needed). Encoded in memory, so a PNG can join an all-or-nothing set of outputs
// (core/run/OutputSet.h); writePng writes one through such a set, so a reader never sees half a PNG.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/run/RunConfig.h"
#include "core/run/RunRecord.h"
#include "core/sampling/ImageOps.h"

namespace tessera {

struct PngTextChunk {
    std::string keyword;  // 1-79 printable ASCII characters, e.g. "parameters"
    std::string text;     // valid UTF-8: invalid bytes as "\xNN" (toValidUtf8), written and read
    // Written: true = iTXt (UTF-8, zlib-compressed above 1 KiB); false = as Pillow's add_text
    // (A1111): tEXt in Latin-1 when every character is U+0000..U+00FF, else uncompressed iTXt.
    // Read: true for an iTXt chunk, false for tEXt and zTXt (Latin-1, given here as UTF-8).
    bool international = false;
};

struct PngFile {
    Rgb8Image image;  // always RGB8 after reading (grey/palette/alpha/16-bit converted)
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
// encodePng, then written atomically (core/run/OutputSet.h writeFileAtomically); PngError on failure.
void writePng(const std::string& path, const Rgb8Image& image, const std::vector<PngTextChunk>& texts);

// The PNG of a run: "parameters" = the A1111 infotext (core/run/Infotext.h; tEXt when Latin-1, else
// iTXt, as A1111 stores it) and iTXt "tessera-manifest" = the manifest JSON text
// (core/run/RunRecordIO.h jsonText(manifestJson)). From a record: infotext(record.config,
// infotextExtras(record)), with the model's name and hash; from a configuration alone:
// parametersLine(config).
std::string encodeRunPng(const std::string& path, const Rgb8Image& image, const RunRecord& record,
                         const std::string& manifestJson);
std::string encodeRunPng(const std::string& path, const Rgb8Image& image, const RunConfig& config,
                         const std::string& manifestJson);

// Walks a PNG's chunk headers after the signature (read8(offset, out) reads 8 bytes): "" when
// every chunk fits in `size` bytes, else what is wrong. libpng allocates a text chunk's claimed
// length before reading it (a 204-byte file claiming a 1.9 GB tEXt chunk costs 1.9 GB), so both
// PNG readers call this first.
std::string firstOverlongPngChunk(std::int64_t size, const std::function<bool(std::int64_t, unsigned char*)>& read8);

// Reads any 8/16-bit PNG as RGB8 with its tEXt/zTXt/iTXt chunks (as UTF-8). Untrusted input:
// opened as core/BoundedInput opens files (a regular file of at most kMaxInitFileBytes; a FIFO
// or device refused without blocking), chunk lengths checked against the file first
// (firstOverlongPngChunk), each chunk and each decompressed text at most 64 MiB, and everything
// libpng allocates for one file at most 256 MiB (text chunks past that are dropped).
PngFile readPng(const std::string& path);

}  // namespace tessera
