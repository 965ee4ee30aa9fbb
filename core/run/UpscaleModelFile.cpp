#include "core/run/UpscaleModelFile.h"

namespace tessera {

const ModelFileKind& upscaleModelKind() {
    static const ModelFileKind kind{"upscale_model",
                                    "upscale model",
                                    "an upscale model",
                                    {kUpscaleModelFolders.begin(), kUpscaleModelFolders.end()},
                                    {kUpscaleModelExtensions.begin(), kUpscaleModelExtensions.end()},
                                    false};
    return kind;
}

std::string upscalerName(std::string_view pathOrName) {
    std::string name(pathOrName);
    while (name.size() > 1 && (name.back() == '/' || name.back() == '\\')) name.pop_back();
    if (const auto slash = name.find_last_of("/\\"); slash != std::string::npos) name.erase(0, slash + 1);
    if (hasModelFileExtension(upscaleModelKind(), name)) name.erase(name.rfind('.'));
    return name;
}

std::vector<std::string> upscaleModelsFolders(std::string_view modelsVariable, const std::string& runModel) {
    return modelsFolders(modelsVariable, runModel);
}

UpscaleModelFile findUpscaleModel(const std::string& given, const std::vector<std::string>& modelsFolders) {
    return findModelFile(upscaleModelKind(), given, modelsFolders);
}

}  // namespace tessera
