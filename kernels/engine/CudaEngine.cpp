#include "kernels/engine/CudaEngine.h"

#include <stdexcept>

#include "core/models/unet/UNetModel.h"
#include "core/sampling/TiledLoop.h"
#include "kernels/device/CudaCheck.h"
#include "kernels/engine/CudaTileDevice.h"

namespace tessera {

struct CudaEngine::Impl {
    explicit Impl(int deviceIndex) : device(deviceIndex) {}
    // The loop (model, start image) outlives the device (backend, arena, graphs): declared first.
    TiledLoop loop;
    CudaTileDevice device;
};

CudaEngine::CudaEngine(int device) {
    std::string why;
    if (!cudaDeviceAvailable(&why)) throw std::runtime_error(why);
    int count = 0;
    TESSERA_CHECK(cudaGetDeviceCount(&count));
    if (device < 0 || device >= count)
        throw std::runtime_error("CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(count) +
                                 " present)");
    impl_ = std::make_unique<Impl>(device);
}

CudaEngine::~CudaEngine() = default;

void CudaEngine::setModel(std::shared_ptr<const UNetModel> model) { impl_->loop.setModel(std::move(model)); }
void CudaEngine::setSdModel(std::shared_ptr<const SdModel> model) { impl_->loop.setSdModel(std::move(model)); }
void CudaEngine::setStartNoise(ImageTensor z) { impl_->loop.setStartNoise(std::move(z)); }
void CudaEngine::setFluxModel(std::shared_ptr<const FluxModel> model) { impl_->loop.setFluxModel(std::move(model)); }
void CudaEngine::setFluxConditioning(std::optional<FluxConditioning> conditioning) {
    impl_->loop.setFluxConditioning(std::move(conditioning));
}

void CudaEngine::setInitImage(ImageTensor image) { impl_->loop.setInitImage(std::move(image)); }
void CudaEngine::setControlImages(std::vector<ImageTensor> images) { impl_->loop.setControlImages(std::move(images)); }

const CudaBackend* CudaEngine::backend() const { return impl_->device.backend(); }

RunResult CudaEngine::run(const RunConfig& config, RunObserver& observer) {
    return impl_->loop.run(config, observer, impl_->device, [this] { return cancelRequested(); });
}

std::unique_ptr<Engine> makeCudaEngine(int device) { return std::make_unique<CudaEngine>(device); }

}  // namespace tessera
