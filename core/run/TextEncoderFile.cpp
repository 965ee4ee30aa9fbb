#include "core/run/TextEncoderFile.h"

namespace tessera {

const ModelFileKind& textEncoderKind() {
    static const ModelFileKind kind{"text_encoder",   "text encoder", "a text encoder", {"text_encoders", "clip"},
                                    {".safetensors"}, false};
    return kind;
}

ModelFile findTextEncoderFile(const std::string& given, const std::vector<std::string>& modelsFolders) {
    return findModelFile(textEncoderKind(), given, modelsFolders);
}

}  // namespace tessera
