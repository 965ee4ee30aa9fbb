// LoraModelFile: where a LoRA a run names is found, the name A1111 gives it, and the tags a run's
// extra LoRAs (RunConfig::loras) add to the prompt an infotext writes, through the models-folder
// lookup every model file setting shares (core/run/ModelFileLookup.h). Qt-free.
//
// A value holding a '/' or naming an existing file is a path, used as given. Any other value is a
// NAME, looked up as A1111 keeps LoRAs (extensions-builtin/Lora/networks.py list_available_networks:
// models/Lora, and the older LyCORIS extension's models/LyCORIS, with their subfolders; *.pt, *.ckpt,
// *.safetensors) and ComfyUI (models/loras): in each models folder's Lora/, LyCORIS/ then loras/, as
// NAME.safetensors, NAME.pt, NAME.ckpt in that order (NAME itself when it ends in one of these),
// first in the folder itself, then in its subfolders (A1111 lists them recursively and names a
// network by its file's stem alone).
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "core/run/ModelFileLookup.h"
#include "core/run/RunConfig.h"

namespace tessera {

// The subfolders of a models folder that hold LoRAs, in lookup order.
inline constexpr std::array<const char*, 3> kLoraFolders{"Lora", "LyCORIS", "loras"};
// The file name extensions a LoRA has, in lookup order (a .safetensors is read without a pickle).
inline constexpr std::array<const char*, 3> kLoraExtensions{".safetensors", ".pt", ".ckpt"};

// LoRAs as core/run/ModelFileLookup.h finds them (field "lora", the folders and extensions above).
const ModelFileKind& loraKind();

// A1111's name of a LoRA (NetworkOnDisk.name, what <lora:NAME:...> names): the file's name without
// its folder and without a .safetensors/.pt/.ckpt extension. "" for "".
std::string loraName(std::string_view pathOrName);

// Finds the file `given` names (see above). Throws ValidationError on field "lora": an empty value;
// a path that does not exist or is not a regular file; a NAME found nowhere, listing every folder
// looked in (or saying that no models folder is known) and how to point Tessera at one.
ModelFile findLoraFile(const std::string& given, const std::vector<std::string>& modelsFolders);

// The prompt tag of an extra LoRA as A1111 writes it: <lora:NAME:W> where its te and unet
// multipliers agree, else <lora:NAME:TE:UNET> (NAME: loraName of its file).
std::string loraTagText(const LoraSetting& lora);

// The prompt with a tag for each of config.loras appended, as A1111's sd_lora setting appends its
// tag to every prompt (extensions-builtin/Lora/extra_networks_lora.py ExtraNetworkLora.activate):
// the prompt an infotext writes, which reads back as a run with the same LoRAs.
std::string promptWithLoraTags(const RunConfig& config);

}  // namespace tessera
