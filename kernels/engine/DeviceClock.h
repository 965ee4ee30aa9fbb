// DeviceClock: the device time of work on one stream, for benchmarks: start() records an event
// on the stream, stopMs() records a second one, waits for it and returns the milliseconds
// between the two (CUDA events: the GPU's own clock, so host enqueue and launch gaps between
// kernels are counted, work on other streams is not).
//
// This header includes no CUDA header.
#pragma once

#include <memory>

namespace tessera {

class CudaBackend;    // kernels/backend/CudaBackend.h
class CudaVaeDevice;  // kernels/engine/CudaVaeDevice.h

class DeviceClock {
public:
    // On the backend's stream (where its runs and forwards are ordered).
    explicit DeviceClock(const CudaBackend& backend);
    // On the stream of the VAE device's backend; call vae.backend(config) first (the stream is
    // that backend's). Throws std::logic_error before it.
    explicit DeviceClock(const CudaVaeDevice& vae);
    ~DeviceClock();
    DeviceClock(const DeviceClock&) = delete;
    DeviceClock& operator=(const DeviceClock&) = delete;

    void start();
    // Milliseconds since start() on the stream; synchronises with the stream's work up to here.
    // Throws std::logic_error without a start().
    double stopMs();

private:
    struct Events;
    std::unique_ptr<Events> events_;
};

}  // namespace tessera
