// EmbeddingFile: where the textual-inversion embeddings a prompt may name are found, as A1111
// finds them: every file below an embeddings folder, recursively, named by its file's name without
// folder and extension (modules/textual_inversion/textual_inversion.py EmbeddingDatabase
// load_from_dir: os.walk, empty files skipped; *.preview.png is a preview image). Only the names are
// listed here; the files are read by core/models/clip/TextualInversionFile.h. Qt-free.
//
// The folders, in order (a later file of the same name replaces an earlier one, as A1111's
// registration does): for each models folder (core/run/ModelFileLookup.h modelsFolders: $TESSERA_MODELS,
// then the folder holding --model's folder) its embeddings/ (ComfyUI's models/embeddings) and the
// embeddings/ beside it (A1111 keeps them in its root folder, the models folder's parent), then
// RunConfig::embeddingsDir (A1111's --embeddings-dir).
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

struct RunConfig;

// The file name extensions of embeddings read (case-insensitively): A1111 also reads .png, .webp,
// .jxl and .avif images with an embedding inside, which are not read here.
inline constexpr std::array<const char*, 3> kEmbeddingExtensions{".safetensors", ".pt", ".bin"};

namespace embedding_lookup_limits {
// Subfolders walked and entries looked at below one embeddings folder: any collection sorted by
// hand fits, a link loop or a huge tree costs little.
inline constexpr int kMaxDepth = 8;
inline constexpr std::size_t kMaxEntries = 100000;
}  // namespace embedding_lookup_limits

// The embeddings folders of a run, in the order above (duplicates dropped, nothing read).
// `modelsVariable`: the value of $TESSERA_MODELS ("" when unset).
std::vector<std::string> embeddingFolders(const RunConfig& config, std::string_view modelsVariable);

struct EmbeddingFileEntry {
    std::string name;  // the file's name without folder and extension
    std::string path;
};

// Every non-empty embedding file below `folders` (missing folders skipped), each folder's tree in
// path order, the folders in the order given.
std::vector<EmbeddingFileEntry> listEmbeddingFiles(const std::vector<std::string>& folders);

}  // namespace tessera
