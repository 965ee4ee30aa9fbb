// Backend: evaluates the UNet on a batch of tiles. The tiled sampler (core/TiledSampler.h)
// drives any Backend with host-side float32 NCHW buffers. Qt-free.
#pragma once

#include <memory>
#include <string>

namespace tessera {

class UNetModel;  // core/UNetModel.h: config + bound float32 weights

struct BackendInfo {
    std::string name;        // "cpu", "cuda"
    std::string device;      // "AMD EPYC ... (2 threads)" / "NVIDIA H100 80GB HBM3"
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual BackendInfo info() const = 0;
    // Prepares for `batch` tiles of tileH x tileW; called once per shape before forward().
    // Everything that allocates happens here.
    virtual void prepare(const UNetModel& model, int batch, int tileH, int tileW) = 0;
    // out = eps_theta(x, t). x and out are float32 NCHW [batch, C, tileH, tileW] in host
    // memory; timesteps has `batch` entries. batch <= the prepared batch.
    virtual void forward(const float* x, const float* timesteps, int batch, float* out) = 0;
};

}  // namespace tessera
