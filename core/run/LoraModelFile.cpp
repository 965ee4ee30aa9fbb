#include "core/run/LoraModelFile.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "core/base/FormatNumber.h"

namespace tessera {

namespace fs = std::filesystem;

namespace {

// Subfolders a name is looked up in below a LoRA folder: deep and wide enough for any collection
// sorted by hand, bounded so that a link loop or a huge tree costs little.
constexpr int kMaxSearchDepth = 8;
constexpr std::size_t kMaxSearchEntries = 100000;

// <folder>/<sub>/**/<candidate> for the first candidate found, in the folders' order, each tree
// walked in name order (the order of a directory listing is the file system's); "" when none.
std::string findBelow(const std::vector<std::string>& folders, const std::vector<std::string>& candidates) {
    std::size_t entries = 0;
    for (const std::string& folder : folders)
        for (const char* sub : kLoraFolders) {
            std::error_code ec;
            const fs::path root = fs::path(folder) / sub;
            if (!fs::is_directory(root, ec)) continue;
            std::vector<fs::path> found;
            for (fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec), end;
                 !ec && it != end; it.increment(ec)) {
                if (++entries > kMaxSearchEntries) return {};
                if (it.depth() >= kMaxSearchDepth) it.disable_recursion_pending();
                if (it.depth() == 0 || !it->is_regular_file(ec)) continue;  // the folder itself was looked in
                for (const std::string& candidate : candidates)
                    if (it->path().filename() == candidate) found.push_back(it->path());
            }
            if (!found.empty()) {
                std::sort(found.begin(), found.end());
                return found.front().string();
            }
        }
    return {};
}

}  // namespace

const ModelFileKind& loraKind() {
    static const ModelFileKind kind{"lora",
                                    "LoRA",
                                    "a LoRA",
                                    {kLoraFolders.begin(), kLoraFolders.end()},
                                    {kLoraExtensions.begin(), kLoraExtensions.end()},
                                    false};
    return kind;
}

std::string loraName(std::string_view pathOrName) {
    std::string name(pathOrName);
    while (name.size() > 1 && (name.back() == '/' || name.back() == '\\')) name.pop_back();
    if (const auto slash = name.find_last_of("/\\"); slash != std::string::npos) name.erase(0, slash + 1);
    if (hasModelFileExtension(loraKind(), name)) name.erase(name.rfind('.'));
    return name;
}

ModelFile findLoraFile(const std::string& given, const std::vector<std::string>& modelsFolders) {
    try {
        return findModelFile(loraKind(), given, modelsFolders);
    } catch (const ValidationError& notFound) {
        std::error_code ec;
        if (given.empty() || given.find('/') != std::string::npos || fs::exists(given, ec)) throw;
        std::vector<std::string> candidates;
        if (hasModelFileExtension(loraKind(), given)) {
            candidates.push_back(given);
        } else {
            for (const char* extension : kLoraExtensions) candidates.push_back(given + extension);
        }
        std::string path = findBelow(modelsFolders, candidates);
        if (path.empty()) throw;
        return ModelFile{std::move(path), true};
    }
}

std::string loraTagText(const LoraSetting& lora) {
    std::string tag = "<lora:" + loraName(lora.file) + ":" + formatNumber(lora.teMultiplier);
    if (lora.unetMultiplier != lora.teMultiplier) tag += ":" + formatNumber(lora.unetMultiplier);
    return tag + ">";
}

std::string promptWithLoraTags(const RunConfig& config) {
    std::string prompt = config.prompt;
    for (const LoraSetting& lora : config.loras) prompt += loraTagText(lora);
    return prompt;
}

}  // namespace tessera
