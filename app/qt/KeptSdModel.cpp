#include "app/qt/KeptSdModel.h"

#include <chrono>
#include <utility>

#include "core/models/lora/SdModelLoras.h"

namespace tessera {

namespace {

using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point start) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

void KeptSdModel::clear() {
    if (!model_) return;
    model_.reset();
    modelPath_.clear();
    vaePath_.clear();
    vae_.reset();
    set_ = MergedLoraSet();
    ++generation_;
}

std::shared_ptr<const SdModel> KeptSdModel::modelFor(const RunConfig& config, VaeReplacement* vae,
                                                     const RunLoras& loras, const LoadProgressCallback& progress,
                                                     Use* use) {
    Use local;
    Use& u = use ? *use : local;
    u = Use{};
    const std::string vaePath = vae ? vae->path() : std::string();
    if (!model_ || modelPath_ != config.model || vaePath_ != vaePath) {
        clear();  // the old weights go before the new ones come
        const auto start = Clock::now();
        ++reads_;
        std::shared_ptr<const SdModel> loaded =
            vae ? vae->load(config, progress) : std::make_shared<const SdModel>(loadSdModel(config.model, progress));
        // A copy of the parts, the load's reference dropped: the components are this copy's
        // alone, so that changeWeights changes them in place.
        model_ = std::make_shared<SdModel>(*loaded);
        loaded.reset();
        modelPath_ = config.model;
        vaePath_ = vaePath;
        if (vae) vae_ = *vae;
        ++generation_;
        u.read = true;
        u.loadMs = msSince(start);
    }

    const std::string wanted = loras.empty() ? std::string() : loras.digest();
    if (wanted != set_.digest()) {
        if (!loras.empty()) loras.checkFits(*model_);
        const auto start = Clock::now();
        u.restored = set_.digest();
        ++generation_;  // the weights change from here on, whatever happens
        if (!set_.empty()) restoreLoras(*model_, set_);
        if (!loras.empty()) set_ = mergeLoras(*model_, loras.applications());
        u.merged = true;
        u.mergeMs = msSince(start);
    }
    return model_;
}

}  // namespace tessera
