// ModelFileLookup: where a model file that a run names by a setting (an upscale model, a VAE) is
// found, the same way for every kind: a value holding a '/' or naming an existing entry is a path,
// used as given; any other value is a NAME, looked up in each models folder's subfolders for that
// kind as A1111 and ComfyUI keep them (A1111 models/ESRGAN, models/VAE; ComfyUI models/upscale_models,
// models/vae), as NAME plus each of the kind's extensions in order, or NAME itself when it ends in
// one. It needs the file system only, no model code and no Qt, so every front end finds the same
// file from the same text. Qt-free.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tessera {

// The environment variable naming the models folder (A1111's or ComfyUI's models/).
inline constexpr const char* kModelsFolderVariable = "TESSERA_MODELS";

// One kind of model file a setting names.
struct ModelFileKind {
    std::string_view field;                    // the RunConfig field, in messages: "upscale_model", "vae"
    std::string_view what;                     // "upscale model", "VAE": "no VAE named ...", "not a VAE file"
    std::string_view aWhat;                    // with its article: "an upscale model", "a VAE"
    std::vector<std::string_view> subfolders;  // of a models folder, in lookup order
    std::vector<std::string_view> extensions;  // in lookup order (a .safetensors first: read without a pickle)
    bool folders = false;                      // a path may name a folder (a diffusers model folder)
};

// The models folders a NAME is looked up in, in order: `modelsVariable` (the value of
// $TESSERA_MODELS) when not empty, then the folder holding the folder of `runModel` (the run's
// diffusion model: a checkpoint in models/Stable-diffusion/ (A1111) or models/checkpoints/
// (ComfyUI) gives models/), when a model is named. Duplicates are dropped; nothing is read.
std::vector<std::string> modelsFolders(std::string_view modelsVariable, const std::string& runModel);

// `name` ends in one of the kind's extensions (case-insensitively).
bool hasModelFileExtension(const ModelFileKind& kind, const std::string& name);

struct ModelFile {
    std::string path;     // as given for a path; <folder>/<sub>/<NAME><ext> for a name
    bool byName = false;  // found by name in a models folder
};

// Finds the file (or, where the kind allows it, the folder) `given` names. Throws ValidationError
// on kind.field: an empty value; a path that does not exist or is not a regular file (nor a folder
// where allowed); a NAME found nowhere, listing every place looked in (or saying that no models
// folder is known) and how to point Tessera at one.
ModelFile findModelFile(const ModelFileKind& kind, const std::string& given, const std::vector<std::string>& folders);

}  // namespace tessera
