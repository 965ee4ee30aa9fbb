#include "kernels/engine/CudaVaeDevice.h"

#include "kernels/engine/CudaTileDevice.h"

namespace tessera {

CudaVaeDevice::CudaVaeDevice(int device) : device_(std::make_unique<CudaTileDevice>(device)) {}

CudaVaeDevice::~CudaVaeDevice() = default;

Backend& CudaVaeDevice::backend(const RunConfig& config) { return device_->wholeGraphBackend(config); }

std::optional<VaeMemoryBudget> CudaVaeDevice::memoryBudget(const RunConfig& config) {
    return device_->vaeMemoryBudget(config);
}

void CudaVaeDevice::setMemoryLimit(std::optional<std::uint64_t> bytes) { device_->setVaeMemoryLimit(bytes); }

}  // namespace tessera
