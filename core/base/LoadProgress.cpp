#include "core/base/LoadProgress.h"

#include <algorithm>
#include <utility>

namespace tessera {

LoadMeter::LoadMeter(LoadProgressCallback callback, std::uint64_t total) : callback_(std::move(callback)) {
    progress_.total = total;
}

void LoadMeter::beginPhase(std::string phase, std::uint64_t bytes) {
    progress_.phase = std::move(phase);
    phaseEnd_ = progress_.done + std::min(bytes, progress_.total - progress_.done);
    report();
}

void LoadMeter::advance(std::uint64_t bytes) {
    progress_.done += std::min(bytes, phaseEnd_ - progress_.done);
    report();
}

void LoadMeter::endPhase() { progress_.done = phaseEnd_; }

void LoadMeter::finish(std::string phase) {
    if (!phase.empty()) progress_.phase = std::move(phase);
    progress_.done = phaseEnd_ = progress_.total;
    report();
}

void LoadMeter::report() const {
    if (callback_) callback_(progress_);
}

LoadCancelled::LoadCancelled(const LoadProgress& at)
    : std::runtime_error("stopped while loading the model (" + at.phase + ", " + std::to_string(at.done >> 20) +
                         " of " + std::to_string(at.total >> 20) + " MiB); nothing was run") {}

}  // namespace tessera
