// ControlNetInfotext: a ControlNet unit as sd-webui-controlnet writes it into A1111's infotext, one
// key per unit, "ControlNet 0: \"Module: tile_resample, Model: control_v11f1e_sd15_tile [a371b31b],
// Weight: 1, Resize Mode: Crop and Resize, Processor Res: 512, Threshold A: 1, Threshold B: 0.5,
// Guidance Start: 0, Guidance End: 1, Pixel Perfect: False, Control Mode: Balanced\""
// (scripts/infotext.py Infotext.write_infotext over ControlNetUnit.serialize), and read back.
// Qt-free.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/run/ControlNetUnit.h"

namespace tessera {

// "ControlNet <index>".
std::string controlNetInfotextKey(std::size_t index);
// The index of a "ControlNet <n>" key (n < kMaxControlNets), nullopt for any other key.
std::optional<std::size_t> controlNetInfotextIndex(std::string_view key);

// The model's name as the extension lists it: the file name without extension (a folder: its
// name), with " [hash]" (the first 8 hex digits of `hash`: A1111's model hash,
// core/formats/A1111ModelHash.h) when it is given.
std::string controlNetInfotextModel(const std::string& model, const std::string& hash);

// The unit's value (before A1111's quoting): the keys above; Threshold A is tile_resample's down
// sampling rate, tile_colorfix's Variation, Threshold B tile_colorfix+sharp's Sharpness.
std::string controlNetInfotextValue(const ControlNetUnit& unit, const std::string& hash);

// A unit from such a value: Module, Model (without its " [hash]"), Weight, Guidance Start, Guidance
// End, Control Mode, Threshold A for tile_resample and the colour fixes, Threshold B for
// tile_colorfix+sharp; the image is the start image (the
// extension writes none). nullopt with `why` for a value that is not one (no Model, a number that
// is none, an unknown mode).
std::optional<ControlNetUnit> controlNetFromInfotext(std::string_view value, std::string* why);

}  // namespace tessera
