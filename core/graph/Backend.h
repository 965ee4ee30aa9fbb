// Backend: lowers a ModelGraph (core/graph/ModelGraph.h) and evaluates it on a batch of tiles. The
// CPU engine (core/cpu/CpuEngine.h) drives any Backend through the UNet entry points
// (prepare(UNetModel) / forward) with host-side float32 NCHW buffers. Qt-free.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tessera {

class ModelGraph;        // core/graph/ModelGraph.h
class UNetModel;         // core/models/unet/UNetModel.h: config + bound float32 weights
struct HostTensor;       // core/models/unet/UNetModel.h
class TiledCanvasStore;  // core/models/vae/TiledVae.h

// Float32 weights by parameter name (PyTorch layouts), e.g. UNetModel::tensors().
using TensorMap = std::map<std::string, HostTensor>;

struct BackendInfo {
    std::string name;    // "cpu", "cuda"
    std::string device;  // "AMD EPYC ... (2 threads)" / "NVIDIA H100 80GB HBM3"
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual BackendInfo info() const = 0;

    // Lowers `graph` for `batch` tiles of tileH x tileW, binding every parameter by name from
    // `weights` (shapes checked; ModelError names a missing or mis-shaped one). The weights are
    // read where they are until the next prepare, so they must outlive it. Everything that
    // allocates happens here. Throws std::invalid_argument for a tile the graph cannot take.
    virtual void prepareGraph(const ModelGraph& graph, const TensorMap& weights, int batch, int tileH, int tileW) = 0;
    // Evaluates the prepared graph for the first `batch` tiles (batch <= the prepared batch).
    // inputs/outputs: one host float32 buffer per graph input/output, in graph order; feature
    // maps NCHW [batch, C, tileH / divisor, tileW / divisor], vectors [batch, C].
    virtual void run(const std::vector<const float*>& inputs, int batch, const std::vector<float*>& outputs) = 0;

    // The UNet: prepareGraph(unet2DExecutionGraph(model.config()), model.tensors(), ...).
    virtual void prepare(const UNetModel& model, int batch, int tileH, int tileW) = 0;
    // out = eps_theta(x, t): run({x, timesteps}, batch, {out}). x and out are float32 NCHW
    // [batch, C, tileH, tileW]; timesteps has `batch` entries.
    virtual void forward(const float* x, const float* timesteps, int batch, float* out) = 0;

    // Where a tiled pass (core/models/vae/TiledVae.h) keeps its whole-image canvases: a store of this
    // backend's (e.g. in device memory) when canvases of `canvasBytes` (float32, the pass's
    // peak) fit there, else nullptr: the host's (the default, defined in core/models/vae/TiledVae.cpp).
    virtual std::unique_ptr<TiledCanvasStore> makeCanvasStore(std::uint64_t canvasBytes);
};

}  // namespace tessera
