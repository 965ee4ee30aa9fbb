#include "core/run/VaeFile.h"

namespace tessera {

const ModelFileKind& vaeKind() {
    static const ModelFileKind kind{
        "vae", "VAE", "a VAE", {kVaeFolders.begin(), kVaeFolders.end()}, {kVaeExtensions.begin(), kVaeExtensions.end()},
        true};
    return kind;
}

std::string vaeName(std::string_view pathOrName) {
    std::string name(pathOrName);
    while (name.size() > 1 && (name.back() == '/' || name.back() == '\\')) name.pop_back();
    if (const auto slash = name.find_last_of("/\\"); slash != std::string::npos) name.erase(0, slash + 1);
    return name;
}

ModelFile findVaeFile(const std::string& given, const std::vector<std::string>& modelsFolders) {
    return findModelFile(vaeKind(), given, modelsFolders);
}

}  // namespace tessera
