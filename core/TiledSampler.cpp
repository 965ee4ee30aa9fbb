#include "core/TiledSampler.h"

#include <stdexcept>

#include "core/UNetModel.h"

namespace tessera {

namespace {

Backend& required(const std::unique_ptr<Backend>& backend) {
    if (!backend) throw std::invalid_argument("TiledSampler: a backend is required");
    return *backend;
}

}  // namespace

TiledSampler::TiledSampler(std::unique_ptr<Backend> backend)
    : backend_(std::move(backend)), device_(required(backend_)) {}

TiledSampler::~TiledSampler() = default;

RunResult TiledSampler::run(const RunConfig& config, RunObserver& observer) {
    return loop_.run(config, observer, device_, [this] { return cancelRequested(); });
}

}  // namespace tessera
