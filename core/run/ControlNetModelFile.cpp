#include "core/run/ControlNetModelFile.h"

namespace tessera {

const ModelFileKind& controlNetKind() {
    static const ModelFileKind kind{"controlnet",
                                    "ControlNet",
                                    "a ControlNet",
                                    {"ControlNet", "controlnet"},
                                    {".safetensors", ".pth", ".ckpt", ".bin"},
                                    true};
    return kind;
}

std::vector<ModelFile> findControlNetFiles(const RunConfig& config, const std::vector<std::string>& modelsFolders) {
    std::vector<ModelFile> files;
    for (std::size_t i = 0; i < config.controlNets.size(); ++i) {
        if (config.controlNets[i].model.empty())
            throw ValidationError("controlnet", "controlnet: ControlNet " + std::to_string(i) +
                                                    " names no model; give --controlnet FILE|NAME before its "
                                                    "--control-* options");
        files.push_back(findModelFile(controlNetKind(), config.controlNets[i].model, modelsFolders));
    }
    return files;
}

}  // namespace tessera
