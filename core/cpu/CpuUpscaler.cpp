#include "core/cpu/CpuUpscaler.h"

namespace tessera {

std::uint64_t CpuUpscaler::tileBytes(const UpscaleModel& model, int batch, int outH, int outW) const {
    const ModelGraph& graph = model.executionGraph();
    const CpuBackend::Scratch scratch = CpuBackend::scratchNeeded(graph, batch, outH, outW);
    const std::size_t floats = CpuBackend::activationFloats(graph, batch, outH, outW) +
                               scratch.perWorker * static_cast<std::size_t>(backend_.threads());
    return static_cast<std::uint64_t>(floats) * sizeof(float);
}

ImageTensor CpuUpscaler::upscale(const UpscaleModel& model, const ImageTensor& image, const UpscaleTiling& tiling) {
    UpscaleTiler tiler(model, *this, tiling);
    return tiler.upscale(image);
}

}  // namespace tessera
