#include "app/cli/EngineFactory.h"

#include "core/cpu/CpuBackend.h"
#include "core/cpu/CpuEngine.h"

#if defined(TESSERA_HAVE_CUDA) && TESSERA_HAVE_CUDA && __has_include("kernels/engine/CudaEngine.h")
#include "kernels/engine/CudaEngine.h"
#define TESSERA_ENGINE_FACTORY_CUDA 1
#else
#define TESSERA_ENGINE_FACTORY_CUDA 0
#endif

namespace tessera {

namespace {

std::unique_ptr<Engine> makeCpuEngine() { return std::make_unique<CpuEngine>(std::make_unique<CpuBackend>()); }

bool cudaUsable(std::string* why) {
#if TESSERA_ENGINE_FACTORY_CUDA
    return cudaDeviceAvailable(why);
#else
    if (why) *why = "this build of Tessera has no CUDA backend";
    return false;
#endif
}

}  // namespace

bool cudaBackendBuilt() { return TESSERA_ENGINE_FACTORY_CUDA != 0; }

std::unique_ptr<Engine> createEngine(BackendKind requested, std::string* message) {
    if (message) message->clear();
    if (requested == BackendKind::CPU) return makeCpuEngine();

    std::string why;
    if (cudaUsable(&why)) {
#if TESSERA_ENGINE_FACTORY_CUDA
        return makeCudaEngine();
#endif
    }
    // Auto quietly means "the CPU" on a machine without CUDA only when CUDA was never built;
    // otherwise a missing device is worth a sentence, because the user expects a GPU run.
    if (message && (requested == BackendKind::CUDA || cudaBackendBuilt()))
        *message = "backend: CUDA " + std::string(requested == BackendKind::CUDA ? "was requested" : "is not used") +
                   " (" + why + "); running on the CPU reference engine";
    return makeCpuEngine();
}

BackendKind effectiveBackend(BackendKind requested, const DeviceReport& report) {
    if (requested == BackendKind::CPU) return BackendKind::CPU;
    return report.cudaAvailable ? BackendKind::CUDA : BackendKind::CPU;
}

DeviceReport probeDevices() {
    DeviceReport report;
    report.cudaBuilt = cudaBackendBuilt();
    std::string why;
    report.cudaAvailable = cudaUsable(&why);
    if (!report.cudaAvailable) report.cudaReason = why.empty() ? "no CUDA device" : why;
    report.cpuDevice = CpuBackend().info().device;
    return report;
}

}  // namespace tessera
