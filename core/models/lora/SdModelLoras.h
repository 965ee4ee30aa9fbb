// SdModelLoras: a LoRA set merged into a loaded Stable Diffusion model and taken out again, through
// SdModel::changeWeights (core/models/sd/SdModel.h), so that the text encoders forget the rows they
// encoded with the old weights and the UNet's weights fingerprint follows the set's digest. A1111
// merges the active networks into the loaded model in place before sampling and restores its backup
// when the set changes (extensions-builtin/Lora/networks.py network_apply_weights,
// network_restore_weights_from_backup). Qt-free.
#pragma once

#include <vector>

#include "core/models/lora/LoraKeyMap.h"
#include "core/models/lora/MergedLoraSet.h"
#include "core/models/sd/SdModel.h"

namespace tessera {

// Merges `loras` in order into `model` (MergedLoraSet::merge over LoraKeyMap::forModel), with the
// set's digest as the weights variant. The model must have nothing merged (restoreLoras first);
// std::logic_error otherwise. On LoraFileError the model's weights are as they were.
MergedLoraSet mergeLoras(SdModel& model, const std::vector<LoraApplication>& loras,
                         const LoraMergeOptions& options = {});

// Takes `set` (merged into `model` by mergeLoras and nothing else since) out again: the model's
// weights and fingerprint are the file's, bit for bit; `set` is empty afterwards.
void restoreLoras(SdModel& model, MergedLoraSet& set);

}  // namespace tessera
