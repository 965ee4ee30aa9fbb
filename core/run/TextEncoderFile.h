// Where a text encoder file a run names (RunConfig::textEncoders: FLUX.1's CLIP-L and T5 files) is
// found: a path as given, or a NAME looked up in text_encoders/ (ComfyUI's current folder) and clip/
// (its older one) of the models folders (core/run/ModelFileLookup.h). Qt-free.
#pragma once

#include <string>
#include <vector>

#include "core/run/ModelFileLookup.h"

namespace tessera {

const ModelFileKind& textEncoderKind();
ModelFile findTextEncoderFile(const std::string& given, const std::vector<std::string>& modelsFolders);

}  // namespace tessera
