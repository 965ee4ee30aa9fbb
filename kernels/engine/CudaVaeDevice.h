// CudaVaeDevice: the CUDA device's VAE path as a render job runs it, for front ends that time
// the VAE alone (tessera-cli bench --shape vae): the tile device's whole-graph backend (the run's
// precision, plans kept across passes of one shape, choices from the tuning cache) and the memory
// budget it gives a decode or encode (CudaTileDevice::wholeGraphBackend, vaeMemoryBudget). The
// passes themselves go through core's VAE API (core/models/vae/TiledVae.h runVaePass). Times on
// its stream come from a DeviceClock (kernels/engine/DeviceClock.h).
//
// This header includes no CUDA header.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "core/graph/Backend.h"
#include "core/models/vae/TiledVae.h"  // VaeMemoryBudget
#include "core/run/RunConfig.h"

namespace tessera {

class CudaTileDevice;

class CudaVaeDevice {
public:
    // Throws (std::runtime_error / CudaError) when the device cannot be used.
    explicit CudaVaeDevice(int device = 0);
    ~CudaVaeDevice();
    CudaVaeDevice(const CudaVaeDevice&) = delete;
    CudaVaeDevice& operator=(const CudaVaeDevice&) = delete;

    // The backend a render's VAE runs on at config.precision, with config.tuningCache's choices.
    // Valid while this object lives (a call with another precision replaces it).
    Backend& backend(const RunConfig& config);
    // The device memory a decode or encode may use now (free memory less a reserve, at the
    // precision's bytes per value), capped by setMemoryLimit.
    std::optional<VaeMemoryBudget> memoryBudget(const RunConfig& config);
    // Caps memoryBudget at `bytes` (forces a tiled pass under vae_tiling auto); nullopt: no cap.
    void setMemoryLimit(std::optional<std::uint64_t> bytes);

private:
    friend class DeviceClock;  // times work on backend()'s stream
    std::unique_ptr<CudaTileDevice> device_;
};

}  // namespace tessera
