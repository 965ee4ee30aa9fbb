#include "core/run/EmbeddingFile.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <system_error>

#include "core/run/ModelFileLookup.h"
#include "core/run/RunConfig.h"

namespace tessera {

namespace fs = std::filesystem;

namespace {

std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

bool isEmbeddingFile(const fs::path& path) {
    const std::string name = lower(path.filename().string());
    for (const char* extension : kEmbeddingExtensions) {
        const std::string ext(extension);
        if (name.size() > ext.size() && name.compare(name.size() - ext.size(), ext.size(), ext) == 0) return true;
    }
    return false;
}

// Folders compared by what they are where they exist, else by their text.
std::string folderKey(const std::string& folder) {
    std::error_code ec;
    const fs::path canonical = fs::weakly_canonical(folder, ec);
    return ec ? fs::path(folder).lexically_normal().string() : canonical.string();
}

}  // namespace

std::vector<std::string> embeddingFolders(const RunConfig& config, std::string_view modelsVariable) {
    std::vector<std::string> folders;
    std::vector<std::string> keys;
    const auto add = [&](const std::string& folder) {
        const std::string key = folderKey(folder);
        if (std::find(keys.begin(), keys.end(), key) != keys.end()) return;
        keys.push_back(key);
        folders.push_back(folder);
    };
    for (const std::string& models : modelsFolders(modelsVariable, config.model)) {
        fs::path folder = fs::path(models).lexically_normal();
        if (!folder.has_filename()) folder = folder.parent_path();  // "models/" names "models"
        add((folder / "embeddings").string());
        const fs::path parent = folder.parent_path();
        if (!parent.empty()) add((parent / "embeddings").string());
    }
    if (!config.embeddingsDir.empty()) add(config.embeddingsDir);
    return folders;
}

std::vector<EmbeddingFileEntry> listEmbeddingFiles(const std::vector<std::string>& folders) {
    std::vector<EmbeddingFileEntry> out;
    for (const std::string& folder : folders) {
        std::error_code ec;
        if (!fs::is_directory(folder, ec)) continue;
        std::vector<fs::path> found;
        std::size_t entries = 0;
        for (fs::recursive_directory_iterator it(
                 folder,
                 fs::directory_options::follow_directory_symlink | fs::directory_options::skip_permission_denied, ec),
             end;
             !ec && it != end; it.increment(ec)) {
            if (++entries > embedding_lookup_limits::kMaxEntries) break;
            if (it.depth() >= embedding_lookup_limits::kMaxDepth) it.disable_recursion_pending();
            std::error_code fileEc;
            if (!it->is_regular_file(fileEc) || !isEmbeddingFile(it->path())) continue;
            if (it->file_size(fileEc) == 0 || fileEc) continue;  // A1111 skips empty files
            found.push_back(it->path());
        }
        std::sort(found.begin(), found.end());
        for (const fs::path& path : found) out.push_back({path.stem().string(), path.string()});
    }
    return out;
}

}  // namespace tessera
