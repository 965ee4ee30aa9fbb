// PNG files of finished runs: 8-bit RGB pixels plus text chunks, through libpng directly
// (no Qt needed). Written atomically: a temporary file in the same folder, then a rename,
// so a reader never sees half a PNG.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "core/ImageOps.h"
#include "core/RunConfig.h"

namespace tessera {

struct PngTextChunk {
    std::string keyword;     // 1-79 Latin-1 characters, e.g. "parameters"
    std::string text;
    bool international = false;  // iTXt (UTF-8, any length) instead of tEXt (Latin-1)
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

// Writes `image` with the given text chunks to `path` atomically.
void writePng(const std::string& path, const Rgb8Image& image, const std::vector<PngTextChunk>& texts);

// The PNG of a run: tEXt "parameters" = parametersLine(config) (the A1111 convention) and
// iTXt "tessera-manifest" = the manifest JSON (core/RunRecordIO.h manifestJson).
void writeRunPng(const std::string& path, const Rgb8Image& image, const RunConfig& config,
                 const std::string& manifestJson);

// Reads any 8/16-bit PNG as RGB8 with its tEXt/zTXt/iTXt chunks.
PngFile readPng(const std::string& path);

}  // namespace tessera
