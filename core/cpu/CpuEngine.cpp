#include "core/cpu/CpuEngine.h"

#include <stdexcept>

#include "core/models/unet/UNetModel.h"

namespace tessera {

namespace {

Backend& required(const std::unique_ptr<Backend>& backend) {
    if (!backend) throw std::invalid_argument("CpuEngine: a backend is required");
    return *backend;
}

}  // namespace

CpuEngine::CpuEngine(std::unique_ptr<Backend> backend) : backend_(std::move(backend)), device_(required(backend_)) {}

CpuEngine::~CpuEngine() = default;

RunResult CpuEngine::run(const RunConfig& config, RunObserver& observer) {
    return loop_.run(config, observer, device_, [this] { return cancelRequested(); });
}

}  // namespace tessera
