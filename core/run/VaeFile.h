// VaeFile: where the separate VAE a run names (RunConfig::vae) is found, and the name A1111 gives
// it, through the models-folder lookup every model file setting shares (core/run/ModelFileLookup.h).
// A value holding a '/' or naming an existing entry is a path: a .safetensors, .pt or .ckpt file,
// or a diffusers AutoencoderKL folder. Any other value is a NAME, looked up as A1111 keeps VAEs
// (modules/sd_vae.py refresh_vae_list: models/VAE/*.ckpt, *.pt, *.safetensors) and ComfyUI
// (models/vae): in each models folder's VAE/ then vae/, as NAME.safetensors, NAME.pt, NAME.ckpt in
// that order, NAME itself when it ends in one of these (A1111's infotext names a VAE with its
// extension), or a folder NAME there. Qt-free.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "core/run/ModelFileLookup.h"

namespace tessera {

// The subfolders of a models folder that hold VAEs, in lookup order.
inline constexpr std::array<const char*, 2> kVaeFolders{"VAE", "vae"};
// The file name extensions a VAE file has, in lookup order.
inline constexpr std::array<const char*, 3> kVaeExtensions{".safetensors", ".pt", ".ckpt"};

// VAEs as core/run/ModelFileLookup.h finds them (field "vae", the folders and extensions above,
// diffusers folders too).
const ModelFileKind& vaeKind();

// The VAE's name as A1111 writes it in an infotext ("VAE"): the file's name with its extension,
// without its folder (modules/sd_vae.py get_loaded_vae_name: os.path.basename of the file); a
// folder's own name. "" for "".
std::string vaeName(std::string_view pathOrName);

// findModelFile(vaeKind(), ...): ValidationError on field "vae" for a value that names nothing.
ModelFile findVaeFile(const std::string& given, const std::vector<std::string>& modelsFolders);

}  // namespace tessera
