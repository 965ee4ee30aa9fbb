// A1111's old model hash (modules/sd_models.py model_hash: the SHA-256 of the 64 KiB at offset
// 1 MiB, its first 8 hex digits), which sd-webui-controlnet still shows beside a ControlNet's name
// ("control_v11f1e_sd15_tile [a371b31b]", scripts/global_state.py get_all_models) and writes in
// its infotext. A file shorter than 1 MiB hashes nothing, as Python's read past the end gives b"".
// Qt-free.
#pragma once

#include <string>

namespace tessera {

// 8 lowercase hex digits for a regular file; for a folder, the hash of the weights file a diffusers
// model folder holds (diffusion_pytorch_model.safetensors, else .bin); "" where there is none or it
// cannot be read.
std::string a1111ModelHash(const std::string& path);

}  // namespace tessera
