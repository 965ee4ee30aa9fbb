#include "kernels/engine/DeviceClock.h"

#include <stdexcept>

#include <cuda_runtime.h>

#include "kernels/backend/CudaBackend.h"
#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceResources.h"
#include "kernels/engine/CudaTileDevice.h"
#include "kernels/engine/CudaVaeDevice.h"

namespace tessera {

struct DeviceClock::Events {
    cudaStream_t stream = nullptr;
    CudaEvent begin = makeEvent(), end = makeEvent();
    bool started = false;
};

DeviceClock::DeviceClock(const CudaBackend& backend) : events_(std::make_unique<Events>()) {
    events_->stream = backend.stream();
}

DeviceClock::DeviceClock(const CudaVaeDevice& vae) : events_(std::make_unique<Events>()) {
    events_->stream = vae.device_->wholeGraphStream();
    if (!events_->stream)
        throw std::logic_error("DeviceClock: the VAE device has no backend yet; call CudaVaeDevice::backend first");
}

DeviceClock::~DeviceClock() = default;

void DeviceClock::start() {
    TESSERA_CHECK(cudaEventRecord(events_->begin.get(), events_->stream));
    events_->started = true;
}

double DeviceClock::stopMs() {
    if (!events_->started) throw std::logic_error("DeviceClock::stopMs without start");
    TESSERA_CHECK(cudaEventRecord(events_->end.get(), events_->stream));
    TESSERA_CHECK(cudaEventSynchronize(events_->end.get()));
    float ms = 0;
    TESSERA_CHECK(cudaEventElapsedTime(&ms, events_->begin.get(), events_->end.get()));
    events_->started = false;
    return ms;
}

}  // namespace tessera
