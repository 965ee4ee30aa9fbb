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

}  // namespace tessera
