// ControlNetModelFile: where a ControlNet a run names is found (core/run/ModelFileLookup.h): a path,
// or a NAME looked up in a models folder's ControlNet/ (A1111's models/ControlNet) and controlnet/
// (ComfyUI's models/controlnet), as a file (.safetensors, .pth, .ckpt, .bin) or a diffusers folder.
// Qt-free.
#pragma once

#include <string>
#include <vector>

#include "core/run/ModelFileLookup.h"
#include "core/run/RunConfig.h"

namespace tessera {

const ModelFileKind& controlNetKind();

// The files or folders of config.controlNets' models, in order. ValidationError("controlnet") for
// a unit without a model (its --control-* options came before any --controlnet) or one not found.
std::vector<ModelFile> findControlNetFiles(const RunConfig& config, const std::vector<std::string>& modelsFolders);

}  // namespace tessera
