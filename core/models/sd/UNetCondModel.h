// UNetCondModel: a diffusers UNet2DConditionModel folder (unet/config.json and
// diffusion_pytorch_model.safetensors, or a pipeline folder holding unet/) loaded through the
// same folder and weight readers as UNetModel and VaeModel (core/formats/ModelWeights.h) and bound to
// float32 host tensors by diffusers parameter name. Qt-free.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/formats/ModelWeights.h"
#include "core/models/sd/UNetCondConfig.h"

namespace tessera {

struct SdModel;  // core/models/sd/SdModel.h: changes the weights in place (SdModel::changeWeights)

class UNetCondModel {
public:
    // Reads config.json (through BoundedInput; _class_name, when given, must be
    // "UNet2DConditionModel"), range-checks it, then binds every tensor the graph declares,
    // shapes checked before any data is read. Throws ModelError naming the file and, for a
    // tensor, its name, expected and found shape, or the non-finite value.
    // `meter` (optional) counts the tensors read (core/base/LoadProgress.h).
    static UNetCondModel load(const std::string& dir, LoadMeter* meter = nullptr);
    // A model from tensors in memory under diffusers' names (a converted single-file
    // checkpoint, tests), checked as load() checks; `digest` as in ModelWeights::fromTensors.
    static UNetCondModel fromTensors(UNetCondConfig config, std::map<std::string, HostTensor> tensors,
                                     WeightsDigest digest = WeightsDigest::Compute);
    // Random weights for a config (randomTensors' initialisation; deterministic in `seed`).
    static UNetCondModel random(const UNetCondConfig&, std::uint64_t seed, LoadMeter* meter = nullptr);

    const UNetCondConfig& config() const { return config_; }
    const std::map<std::string, HostTensor>& tensors() const { return weights_.tensors; }
    const std::string& directory() const { return dir_; }  // the unet folder; empty for random models
    const std::vector<std::string>& extraTensors() const { return weights_.extra; }
    // The weights' fingerprint: of the file (or, in memory, of names, shapes and values); where
    // adapters were merged into them (SdModel::changeWeights), of that and the merged set's digest,
    // so that nothing keyed by it takes the merged weights for the file's.
    const std::string& weightsSha256() const { return changedSha256_.empty() ? weights_.sha256 : changedSha256_; }
    std::int64_t parameterCount() const;

    // (name, shape) of every parameter the config requires, in the graph's declaration order.
    // Throws ModelError "config.json: <key>: ..." for a config the graph cannot be built from.
    static std::vector<std::pair<std::string, std::vector<std::int64_t>>> expectedTensors(const UNetCondConfig&);

private:
    // Adapters (LoRA, core/models/lora/MergedLoraSet.h) are merged into a loaded model's weights in
    // place, through SdModel::changeWeights alone, which holds its components as const (engines
    // share them) and keeps every other reader away meanwhile: the tensors, writable, and the
    // digest of what was merged into them ("" for the file's own weights).
    friend struct SdModel;
    std::map<std::string, HostTensor>& weightsToChange() const { return weights_.tensors; }
    void setWeightsVariant(const std::string& variant) const;

    UNetCondConfig config_;
    std::string dir_;
    mutable ModelWeights weights_;       // tensors by canonical name, extra names, sha256; mutable: weightsToChange()
    mutable std::string changedSha256_;  // "" for the file's weights; mutable: setWeightsVariant()
};

}  // namespace tessera
