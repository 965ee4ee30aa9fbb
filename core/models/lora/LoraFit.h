// LoraFit: whether a LoRA file fits a model, told before anything is merged, from the file's names,
// shapes and metadata alone: how many of its modules name a module of the model with the right shape,
// which keys name nothing, and which Stable Diffusion family the file itself says it is for, with the
// evidence (A1111 extensions-builtin/Lora/network.py NetworkOnDisk.detect_version reads the metadata;
// the widths of the text encoders and of the UNet's cross-attention context decide where present).
// Qt-free.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "core/models/lora/LoraFile.h"
#include "core/models/lora/LoraKeyMap.h"
#include "core/models/lora/LoraNetwork.h"

namespace tessera {

struct LoraFit {
    std::size_t modules = 0;  // mergeable modules in the file
    std::size_t matched = 0;  // of them, naming a module of the model whose shape fits
    // Keys naming no module of the model (unknown suffixes included), sorted.
    std::vector<std::string> unmatchedKeys;
    // "<stem>: <why>" for modules that name a module of another shape, or whose factors do not fit
    // together.
    std::vector<std::string> shapeMismatches;
    // "<stem> (<algorithm>)" for recognised modules Tessera does not merge (IA3, GLoRA, OFT).
    std::vector<std::string> notMerged;
    // The family the file is for, when its shapes, key names or metadata tell; and why.
    std::optional<SdFamily> fileFamily;
    std::vector<std::string> evidence;

    // Something merges, nothing has a wrong shape, and the file is not for another family.
    bool fits(SdFamily model) const;
    // For a note: "fits Stable Diffusion 1.x: 16 of 16 modules" or "this LoRA is for Stable Diffusion
    // XL (keys lora_te2_*: a second text encoder; ...), the model is Stable Diffusion 1.x", or why
    // it does not fit.
    std::string verdict(SdFamily model) const;
};

// Names and shapes only; nothing is read beyond the file's listing.
LoraFit checkLoraFit(const LoraFile& file, const LoraNetwork& network, const LoraKeyMap& keys);

}  // namespace tessera
