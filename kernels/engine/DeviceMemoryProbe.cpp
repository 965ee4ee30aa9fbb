#include "kernels/engine/DeviceMemoryProbe.h"

#include <cuda_runtime.h>

#include "kernels/device/CudaCheck.h"

namespace tessera {

namespace {

// Memory in use on the calling thread's device; false where the query failed.
bool usedBytes(std::uint64_t& used) {
    std::size_t freeBytes = 0, totalBytes = 0;
    if (cudaMemGetInfo(&freeBytes, &totalBytes) != cudaSuccess) return false;
    used = totalBytes - freeBytes;
    return true;
}

void raisePeak(std::atomic<std::uint64_t>& peak, std::uint64_t value) {
    std::uint64_t seen = peak.load();
    while (value > seen && !peak.compare_exchange_weak(seen, value)) {}
}

}  // namespace

DeviceMemoryProbe::DeviceMemoryProbe(int device, std::chrono::milliseconds interval) : device_(device) {
    (void)currentBytes();  // the first sample, and a device that cannot be queried throws here
    sampler_ = std::thread([this, interval] {
        if (cudaSetDevice(device_) != cudaSuccess) return;
        while (!stop_) {
            std::uint64_t used = 0;
            if (usedBytes(used)) raisePeak(peak_, used);
            std::this_thread::sleep_for(interval);
        }
    });
}

DeviceMemoryProbe::~DeviceMemoryProbe() {
    stop_ = true;
    sampler_.join();
}

std::uint64_t DeviceMemoryProbe::currentBytes() const {
    int current = 0;
    TESSERA_CHECK(cudaGetDevice(&current));
    TESSERA_CHECK(cudaSetDevice(device_));
    std::size_t freeBytes = 0, totalBytes = 0;
    const cudaError_t status = cudaMemGetInfo(&freeBytes, &totalBytes);
    TESSERA_CHECK(cudaSetDevice(current));
    TESSERA_CHECK(status);
    const std::uint64_t used = totalBytes - freeBytes;
    raisePeak(peak_, used);
    return used;
}

std::uint64_t DeviceMemoryProbe::peakBytes() const { return peak_.load(); }

}  // namespace tessera
