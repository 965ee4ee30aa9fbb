#include "core/models/lora/SdModelLoras.h"

#include <stdexcept>

namespace tessera {

namespace {

LoraWeights loraWeightsOf(const SdWeightsToChange& w) { return LoraWeights{w.unet, w.textEncoder, w.textEncoder2}; }

}  // namespace

MergedLoraSet mergeLoras(SdModel& model, const std::vector<LoraApplication>& loras, const LoraMergeOptions& options) {
    if (!model.weightsVariant().empty())
        throw std::logic_error("mergeLoras: the model already has a LoRA set merged; restore it first");
    const LoraKeyMap keys = LoraKeyMap::forModel(model);
    MergedLoraSet set;
    model.changeWeights(loraSetDigest(loras, options), [&](const SdWeightsToChange& weights) {
        set = MergedLoraSet::merge(loraWeightsOf(weights), keys, loras, options);
    });
    return set;
}

void restoreLoras(SdModel& model, MergedLoraSet& set) {
    model.changeWeights({}, [&set](const SdWeightsToChange& weights) { set.restore(loraWeightsOf(weights)); });
}

}  // namespace tessera
