#include "core/sampling/TileDevice.h"

#include <stdexcept>

#include "core/sampling/TilePlan.h"

namespace tessera {

int TiledPass::tileCount() const { return plan ? plan->count() : 0; }

StepVariant TiledPass::variant(int step) const {
    const bool last = step == steps() - 1;
    StepVariant v;
    v.sampleFusion = fusion == FusionRule::Sample;
    v.preview = previewEvery > 0 && (step + 1) % previewEvery == 0 && !last;
    v.seams = last && seamMap;
    v.keepX0 = keepsX0();
    v.history = keepsHistory();
    return v;
}

CanvasShift TiledPass::shift(int step) const {
    return step >= 0 && static_cast<std::size_t>(step) < shifts.size() ? shifts[static_cast<std::size_t>(step)]
                                                                       : CanvasShift{};
}

bool TiledPass::keepsX0() const {
    for (const StepCoefficients& k : coefficients)
        if (k.cprev != 0.0f) return true;
    return false;
}

bool TiledPass::keepsHistory() const {
    for (const StepCoefficients& k : coefficients)
        if (usesHistory(k)) return true;
    return false;
}

StepCoefficients identityStep() {
    StepCoefficients k;
    k.ae = 1.0f;   // x0 = eps
    k.cx0 = 1.0f;  // x' = x0: applyStep gives eps, with no clip and no noise
    return k;
}

Backend& TileDevice::wholeGraphBackend(const RunConfig&) {
    throw std::logic_error("this tile device has no backend for whole graphs (the VAE)");
}

std::optional<VaeMemoryBudget> TileDevice::vaeMemoryBudget(const RunConfig&) { return std::nullopt; }

Backend& TileDevice::textBackend() { throw std::logic_error("this tile device has no backend for the text encoders"); }

}  // namespace tessera
