// ImportedParameters: the generation settings another tool (or Tessera) wrote into an image or a
// text, applied onto the window's settings as A1111's PNG Info "Send to txt2img" and tessera-cli
// --params-from apply them (core/run/Infotext.h applyInfotext, applyComfyPrompt):
//  - a PNG: its "parameters" text chunk (A1111, Tessera, most tools that write A1111's infotext),
//    else its "prompt" chunk (ComfyUI's API graph), as tessera-cli --params-from reads it;
//  - a JPEG: its EXIF UserComment (A1111 writes the infotext there with piexif's
//    UserComment.dump(..., encoding="unicode"): "UNICODE\0" and UTF-16BE; "ASCII\0\0\0" too), else
//    its comment (COM) segment, as A1111's images.read_info_from_image reads them;
//  - text: A1111's infotext as copied from PNG Info or Tessera's Copy parameters.
// Settings that do not map onto a RunConfig (a hires fix, the model by name, a value out of
// range) are listed, never applied. Qt-free; the file readers refuse what a start image refuses
// (core/base/BoundedInput.h limits); call them off the GUI thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/run/Infotext.h"
#include "core/run/RunConfig.h"

namespace tessera {

struct ImportedParameters {
    RunConfig config;                       // the base with every setting that maps applied
    std::vector<std::string> fields;        // the RunConfig fields set, by CLI name ("steps", "seed"...)
    std::vector<UnmappedSetting> unmapped;  // what was not applied, in the order found
    std::string source;                     // where the text was: "PNG parameters", "EXIF UserComment"...
};

// The infotext A1111 stores in a JPEG (`bytes`: the whole file): the EXIF UserComment of its APP1
// segment (an 8-byte character code, then UTF-16 for "UNICODE" in the TIFF block's byte order as
// piexif writes it big-endian, ASCII or undefined as UTF-8 text), else the first comment (COM)
// segment; "" when there is neither. Never throws; reads nothing past the segments' lengths.
std::string jpegParametersText(std::string_view bytes);

// The settings in image `path` (PNG or JPEG, by content) applied onto `base`. Throws
// InputFileError (field "parameters") naming the file when it cannot be read or holds no settings.
ImportedParameters parametersFromImage(const std::string& path, const RunConfig& base);

// A1111 infotext `text` (the clipboard's) applied onto `base`. Throws InputFileError (field
// "parameters") when the text holds no setting (no "Steps:" line and no prompt).
ImportedParameters parametersFromText(std::string_view text, const RunConfig& base);

}  // namespace tessera
