#include "app/cli/EngineFactory.h"

#include "core/cpu/CpuBackend.h"
#include "core/cpu/CpuEngine.h"
#include "core/cpu/CpuUpscaler.h"

#if defined(TESSERA_HAVE_CUDA) && TESSERA_HAVE_CUDA && __has_include("kernels/engine/CudaEngine.h")
#include "kernels/engine/CudaEngine.h"
#include "kernels/engine/CudaUpscaler.h"
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

UpscaleDeviceChoice createUpscaleDevice(BackendKind requested, const UpscaleDeviceRequest& request,
                                        std::string* message) {
    if (message) message->clear();
    if (requested != BackendKind::CPU) {
        std::string why;
        if (cudaUsable(&why)) {
#if TESSERA_ENGINE_FACTORY_CUDA
            CudaUpscaleOptions options;
            options.precision = request.precision;
            options.graphs = request.graphs;
            options.tuningCache = request.tuningCache;
            auto gpu = std::make_unique<CudaUpscaler>(options);
            const Precision precision = gpu->precision();
            std::string deviceName = gpu->deviceName();
            return UpscaleDeviceChoice{std::move(gpu), precision, 0, "cuda", std::move(deviceName)};
#endif
        }
        if (message && (requested == BackendKind::CUDA || cudaBackendBuilt()))
            *message = "upscale model: CUDA " +
                       std::string(requested == BackendKind::CUDA ? "was requested" : "is not used") + " (" + why +
                       "); it runs on the CPU engine (float32)";
    }
    auto cpu = std::make_unique<CpuUpscaler>(request.threads);
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
