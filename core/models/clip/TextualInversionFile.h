// TextualInversionFile: one textual-inversion embedding file read as A1111 reads it
// (modules/textual_inversion/textual_inversion.py EmbeddingDatabase.load_from_file and
// create_embedding_from_data), through core/formats/TensorFile.h: a safetensors file, or a pickle
// read as data by the restricted reader (nothing executed). Qt-free.
//
//   - A1111's .pt: {"string_to_param": {"*": tensor [n, width]}, "name", "step", ...}: the one tensor
//     under string_to_param (a torch ParameterDict there is a class the restricted reader refuses);
//   - SDXL: "clip_l" [n, 768] and "clip_g" [n, 1280] (safetensors, or a pickle);
//   - any other file of exactly one tensor: safetensors' "emb_params" [n, width], a .pt of it, or
//     diffusers' concept .bin {"<token>": tensor [width]} (one dimension: one vector).
// Images holding an embedding (.png, .webp with "sd-ti-embedding") are not read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/BoundedInput.h"
#include "core/run/EmbeddingFile.h"
#include "core/text/EmbeddingDatabase.h"
#include "core/text/PromptParser.h"

namespace tessera {

namespace embedding_file_limits {
// An embedding of 75 SDXL vectors is 600 KiB in float32; A1111's .pt adds a few hundred bytes.
// A file above this is no embedding, and is refused unread.
inline constexpr std::uint64_t kMaxFileBytes = std::uint64_t{64} << 20;
// Widths of text encoders: 768 (SD 1.x, SDXL's CLIP-L), 1024 (SD 2.x), 1280 (SDXL's OpenCLIP-G).
inline constexpr std::int64_t kMaxWidth = 8192;
}  // namespace embedding_file_limits

// A file that is no embedding A1111 could use. what() names the file and what was found.
class TextualInversionFileError : public InputFileError {
public:
    explicit TextualInversionFileError(const std::string& message) : InputFileError("embedding", message) {}
};

// Reads `path` (its name, without folder and extension, is the embedding's name) and hashes the whole
// file. Throws TextualInversionFileError for a file that cannot be read, is too large, is refused
// by the restricted reader, holds no tensor A1111 would take (or several where it takes one),
// a tensor that is not 1- or 2-dimensional float, 0 or more than embedding_limits::kMaxVectors
// vectors, clip_l and clip_g of different vector counts, or a value that is NaN or infinite.
TextualInversion readTextualInversion(const std::string& path);

// The embeddings of `files` (listEmbeddingFiles) for `texts`, as one EmbeddingDatabase per
// tokenizer (SDXL's two encoders tokenize apart): every file registered by its name, in order, as
// A1111 registers the whole folder, but only the files whose names the texts use (chunked with
// `chunking`) read and hashed, each once. Throws TextualInversionFileError for a file the texts use
// that readTextualInversion refuses (A1111 reports it and reads its name as words; here the run is
// refused before any work).
std::vector<EmbeddingDatabase> loadPromptEmbeddings(const std::vector<const ClipTokenizer*>& tokenizers,
                                                    const std::vector<EmbeddingFileEntry>& files,
                                                    const std::vector<std::string>& texts,
                                                    PromptChunkOptions chunking = {});

// The embedding name of a file: its name without folder and extension (".pt" of "a.b.pt" only).
std::string textualInversionName(const std::string& path);

}  // namespace tessera
