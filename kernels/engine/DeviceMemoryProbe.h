// DeviceMemoryProbe: the memory in use on one GPU, every process's (cudaMemGetInfo: total less
// free), now and at its peak: a thread of the probe's own samples it every `interval` while the
// probe lives, so a peak inside a pass (a VAE decode's activations) is seen without touching the
// pass. For benchmarks; the engines report their own memory in the RunRecord.
//
// This header includes no CUDA header.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace tessera {

class DeviceMemoryProbe {
public:
    // Starts sampling device `device`. Throws (CudaError) when the device cannot be queried.
    explicit DeviceMemoryProbe(int device = 0, std::chrono::milliseconds interval = std::chrono::milliseconds(2));
    ~DeviceMemoryProbe();  // stops the sampling thread
    DeviceMemoryProbe(const DeviceMemoryProbe&) = delete;
    DeviceMemoryProbe& operator=(const DeviceMemoryProbe&) = delete;

    std::uint64_t currentBytes() const;  // in use now (one query, also counted in the peak)
    std::uint64_t peakBytes() const;     // the most in use at any sample so far
    double peakMiB() const { return static_cast<double>(peakBytes()) / (1 << 20); }

private:
    int device_;
    std::atomic<bool> stop_{false};
    mutable std::atomic<std::uint64_t> peak_{0};
    std::thread sampler_;
};

}  // namespace tessera
