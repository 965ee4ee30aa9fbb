// ControlNetFileLayout: what a single ControlNet weights file is, told from its tensor names (the
// detection list of diffusers' loaders/single_file_utils.py convert_controlnet_checkpoint and of
// ComfyUI's comfy/controlnet.py load_controlnet): original (LDM) names as ControlNet 1.0/1.1's .pth
// files hold them under "control_model." (or without the prefix, as extracted and pruned files
// do), or diffusers' names (SDXL ControlNets are mostly shipped that way); and its configuration
// read from the tensors' shapes, for files that come without a config.json. Files that are not a
// ControlNet Tessera runs (Control-LoRA, difference files, ControlNet++ union, SD3 / FLUX
// ControlNets, whole Stable Diffusion checkpoints) are refused by name. Qt-free.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/formats/TensorFile.h"
#include "core/models/controlnet/ControlNetConfig.h"

namespace tessera {

// A file's tensor shapes by name (as stored, prefix included).
using TensorShapes = std::map<std::string, std::vector<std::int64_t>, std::less<>>;
TensorShapes tensorShapes(const TensorFile& file);

enum class ControlNetNames { Diffusers, Ldm };

struct ControlNetFileLayout {
    ControlNetNames names = ControlNetNames::Ldm;
    std::string prefix;  // "control_model." or ""
    std::string reason;  // the tensor that told the layout
    // Where the file stores a ControlNetModel tensor named `name` (diffusers' name): the prefix and,
    // for LDM names, controlNetLdmName. `config` gives the layers per level and the hint encoder's
    // length.
    std::string storedName(const std::string& name, const ControlNetConfig& config) const;
};

// The layout of a single file; ModelError naming `where` for a file that is not a ControlNet
// Tessera runs, saying what it holds instead.
ControlNetFileLayout detectControlNetLayout(const TensorShapes& file, const std::string& where);

// The configuration the tensors' shapes give: input channels, widths and levels, layers per level,
// block kinds and transformer depths, mid block kind, hint channels and encoder widths, text
// width, projection kind and SDXL's text-time embedding. What shapes cannot show is taken from the
// family's UNet, as diffusers' single-file loader takes it from the family's config: GroupNorm
// groups 32, 8 heads per level (SD 1.x) or one per 64 channels (SD 2.x, SDXL), 256-wide size-id
// sinusoids (SDXL), RGB hints, no pooling. The family is SDXL with an add_embedding, else SD 2.x
// for a 1024-wide text context or Linear projections, else SD 1.x; `family` and `reason` (both
// optional) say which. ModelError naming `where` and the tensor for a missing tensor or sizes that
// do not fit; "give its config.json" where the family's values do not fit.
ControlNetConfig controlNetConfigFromShapes(const TensorShapes& file, const ControlNetFileLayout& layout,
                                            const std::string& where, SdFamily* family = nullptr,
                                            std::string* reason = nullptr);

}  // namespace tessera
