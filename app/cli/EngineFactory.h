// EngineFactory: builds the engine for a requested backend: the CPU reference engine
// (CpuEngine over CpuBackend) or, in builds with the CUDA backend, the CUDA engine.
// A CUDA request without a usable device falls back to the CPU and says why.
// Threads: everything here that may touch CUDA (createEngine, probeDevices) must run on the
// thread that will own the engine (the RunWorker's), never on the GUI thread.
#pragma once

#include <memory>
#include <string>

#include "core/run/Engine.h"
#include "core/run/RunConfig.h"
#include "core/sampling/UpscaleTiler.h"

namespace tessera {

// What a probe found; plain data, copied to the GUI thread.
struct DeviceReport {
    bool cudaBuilt = false;      // this binary contains the CUDA backend
    bool cudaAvailable = false;  // ... and a device can be used
    std::string cudaReason;      // why not, when !cudaAvailable (empty otherwise)
    std::string cpuDevice;       // e.g. "AMD EPYC 7B13 (2 threads)"
};

// True when the binary was built with the CUDA backend (a compile-time fact; no CUDA call).
bool cudaBackendBuilt();

// The engine for `requested`. Auto and CUDA take the CUDA engine when it is built and a
// device is usable, otherwise the CPU engine; *message (when non-null) is then set to a
// sentence naming the reason ("backend: ..."), and cleared when nothing needed saying.
// Never returns null; throws only what the engines' constructors throw.
std::unique_ptr<Engine> createEngine(BackendKind requested, std::string* message);

// The backend an engine from createEngine(requested) would run on, given a probe.
BackendKind effectiveBackend(BackendKind requested, const DeviceReport& report);

// Looks for a CUDA device (when built) and describes the CPU. May call CUDA.
DeviceReport probeDevices();

// What runs an upscale model's graph (core/sampling/UpscaleTiler.h) for a run.
struct UpscaleDeviceChoice {
    std::unique_ptr<UpscaleDevice> device;
    Precision precision = Precision::FP32;  // what it computes in
    int threads = 0;                        // the CPU threads that compute (the CPU engine's); 0 on a GPU
    std::string backendName;                // for the run record: the backend's name and its device
    std::string deviceName;
};

// What a run asks of the device an upscale model runs on.
struct UpscaleDeviceRequest {
    int threads = 0;                        // CPU engine: computing threads (0: all cores)
    Precision precision = Precision::FP16;  // CUDA: the tiles' precision (the CPU computes in float32)
    bool graphs = true;                     // CUDA: forwards replayed from captured CUDA graphs
    std::string tuningCache;                // CUDA: as RunConfig::tuningCache
};

// The device an upscale model runs on for a run asking for backend `requested`: the CUDA
// upscaler (kernels/engine/CudaUpscaler.h) where auto or cuda is asked and a device is usable,
// else the CPU engine's (core/cpu/CpuUpscaler.h: float32). *message (when non-null) is set to a
// note where CUDA was asked for (or built) but the model runs on the CPU, and cleared otherwise.
// Like createEngine, may call CUDA.
UpscaleDeviceChoice createUpscaleDevice(BackendKind requested, const UpscaleDeviceRequest& request,
                                        std::string* message);

}  // namespace tessera
