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
#include <utility>
#include <vector>

#include "core/run/Infotext.h"
#include "core/run/RunConfig.h"

namespace tessera {

struct ImportedParameters {
    RunConfig config;                       // the base with every setting that maps applied
    std::vector<std::string> fields;        // the RunConfig fields set, by CLI name ("steps", "seed"...)
    std::vector<UnmappedSetting> unmapped;  // what was not applied, in the order found
    std::string source;                     // where the text was: "PNG parameters", "EXIF UserComment"...
    // A1111's "Lora hashes" (each name as the tag writes it, ':' and ',' removed, and its 12-digit
    // hash) and "VAE hash" (10 digits, beside an applied "VAE"), for checkModelFiles.
    std::vector<std::pair<std::string, std::string>> loraHashes;
    std::string vaeHash;
    // A1111's "TI hashes": each textual-inversion embedding the prompts used (its name, ':' and ','
    // removed) and the first 12 hex digits of its file's SHA-256, for checkModelFiles.
    std::vector<std::pair<std::string, std::string>> textualInversionHashes;
};

// The models folders a window run looks the files a setting names up in: tessera-cli's
// (app/cli/UpscaleModelRun.h cliModelsFolders: $TESSERA_MODELS, the folder above `runModel`'s),
// then `windowModelsFolder` (the window's models folder; may be empty). Reads nothing.
std::vector<std::string> windowModelsFolders(const std::string& runModel, const std::string& windowModelsFolder);

// Finds the model files the applied settings name, as a run finds them in `modelsFolders`: each
// LoRA a <lora:...> / <lyco:...> tag of the prompt names, each embedding "TI hashes" names (in the
// run's embeddings folders, core/run/EmbeddingFile.h embeddingFolders: listed when found nowhere, its
// name then read as words, or found with another hash), and the VAE. Lists in `unmapped` each LoRA
// found nowhere (the run would refuse it) and each whose file's hash is not the one "Lora hashes"
// gives (another file or version: the image may differ, as A1111 warns when an infotext is pasted);
// a VAE found nowhere is not applied (vae cleared: the model's own is used, as A1111 keeps the
// checkpoint's own when the infotext's VAE is not in its list) and listed, one found is set by its
// path, and one whose hash is not "VAE hash" listed. Reads and hashes the files: never on the GUI thread.
void checkModelFiles(ImportedParameters& imported, const std::vector<std::string>& modelsFolders);

// The infotext A1111 stores in a JPEG (`bytes`: the whole file): the EXIF UserComment of its APP1
// segment (an 8-byte character code, then UTF-16 for "UNICODE" in the TIFF block's byte order as
// piexif writes it big-endian, ASCII or undefined as UTF-8 text), else the first comment (COM)
// segment; "" when there is neither. Never throws; reads nothing past the segments' lengths.
std::string jpegParametersText(std::string_view bytes);

// The settings in image `path` (PNG or JPEG, by content) applied onto `base`, the model files they
// name checked (checkModelFiles, in windowModelsFolders of the run's model and
// `windowModelsFolder`). Throws InputFileError (field "parameters") naming the file when it cannot
// be read or holds no settings.
ImportedParameters parametersFromImage(const std::string& path, const RunConfig& base,
                                       const std::string& windowModelsFolder = {});

// A1111 infotext `text` (the clipboard's) applied onto `base`. Reads no file (the GUI thread calls
// it): the model files are not checked (checkModelFiles may follow, off that thread), but "Lora
// hashes", "TI hashes" and "VAE hash" are kept for it, not listed. Throws InputFileError (field
// "parameters") when the text holds no setting (no "Steps:" line and no prompt).
ImportedParameters parametersFromText(std::string_view text, const RunConfig& base);

}  // namespace tessera
