// UpscaleModelFile: where the upscale model a run names (RunConfig::upscaleModel) is found, and the
// name A1111 gives it, through the models-folder lookup every model file setting shares
// (core/run/ModelFileLookup.h), so that every front end (the CLI, the window's worker) finds the
// same file from the same text. Qt-free.
//
// A value is a path when it holds a '/' or names an existing file; it is used as given. Any other
// value is a NAME, looked up as A1111 and ComfyUI keep upscale models: in each models folder's
// ESRGAN/ (A1111's models/ESRGAN) then upscale_models/ (ComfyUI's models/upscale_models), as
// NAME.safetensors, NAME.pth, NAME.pt in that order (or NAME itself when it ends in one of these).
// A .safetensors file is preferred where both are there: it is read without a pickle.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "core/run/ModelFileLookup.h"

namespace tessera {

// The subfolders of a models folder that hold upscale models, in lookup order.
inline constexpr std::array<const char*, 2> kUpscaleModelFolders{"ESRGAN", "upscale_models"};
// The file name extensions an upscale model has, in lookup order.
inline constexpr std::array<const char*, 3> kUpscaleModelExtensions{".safetensors", ".pth", ".pt"};

// Upscale models as core/run/ModelFileLookup.h finds them (field "upscale_model", the folders and
// extensions above, files only).
const ModelFileKind& upscaleModelKind();

// The upscaler's name as A1111 writes it in an infotext ("SD upscale upscaler", "Postprocess
// upscaler"): the file name without its folder and without a .safetensors/.pth/.pt extension
// (A1111 modules/modelloader.py friendly_name). "" for "".
std::string upscalerName(std::string_view pathOrName);

// modelsFolders (core/run/ModelFileLookup.h): the models folders a NAME is looked up in.
std::vector<std::string> upscaleModelsFolders(std::string_view modelsVariable, const std::string& runModel);

using UpscaleModelFile = ModelFile;

// Finds the file `given` names (see above). Throws ValidationError on field "upscale_model": an
// empty value; a path that does not exist or is not a regular file; a NAME found nowhere, listing
// every place looked in (or saying that no models folder is known) and how to point Tessera at one.
UpscaleModelFile findUpscaleModel(const std::string& given, const std::vector<std::string>& modelsFolders);

}  // namespace tessera
