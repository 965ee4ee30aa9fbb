#include "app/cli/EngineFactory.h"

#include "core/cpu/CpuBackend.h"
#include "core/cpu/CpuEngine.h"
#include "core/cpu/CpuUpscaler.h"

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

UpscaleDeviceChoice createUpscaleDevice(BackendKind requested, int threads, std::string* message) {
    if (message) message->clear();
    // The CUDA upscaler's place: where a CUDA device is usable (cudaUsable) and the run asks for
    // auto or cuda, return it here with the run's precision. Until then the CPU engine's upscaler
    // serves both engines, and a run on the CUDA engine says so.
    if (requested != BackendKind::CPU && message) {
        std::string why;
        if (cudaUsable(&why))
            *message =
                "upscale model: runs on the CPU engine (float32) although CUDA is usable: this build has no "
                "CUDA upscaler";
    }
    auto cpu = std::make_unique<CpuUpscaler>(threads);
    const int computing = cpu->cpu().threads();
    std::string backendName = cpu->backend().info().name;
    std::string deviceName = cpu->backend().info().device;
    return UpscaleDeviceChoice{std::move(cpu), Precision::FP32, computing, std::move(backendName),
                               std::move(deviceName)};
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
