// CpuUpscaler: the CPU engine as the device of the tiled upscaler (core/sampling/UpscaleTiler.h): a
// CpuBackend on all threads (the worker pool; one tile at a time, each op spread over the threads),
// whose memory for a tile batch is planned from the graph without allocating
// (CpuBackend::activationFloats, scratchNeeded). Qt-free.
#pragma once

#include <cstdint>

#include "core/cpu/CpuBackend.h"
#include "core/models/upscale/UpscaleModel.h"
#include "core/sampling/UpscaleTiler.h"

namespace tessera {

class CpuUpscaler : public BackendUpscaleDevice {
public:
    explicit CpuUpscaler(int threads = 0) : backend_(threads) {}

    Backend& backend() override { return backend_; }
    CpuBackend& cpu() { return backend_; }
    // Activations of a batch of tiles op by op, plus every worker's scratch, in bytes.
    std::uint64_t tileBytes(const UpscaleModel& model, int batch, int outH, int outW) const override;

    // `image` ([inputChannels][H][W] in [0, 1]) upscaled by `model` in tiles ([outputChannels]
    // [H x scale][W x scale], clamped to [0, 1] unless tiling.clamp is off).
    ImageTensor upscale(const UpscaleModel& model, const ImageTensor& image, const UpscaleTiling& tiling = {});

private:
    CpuBackend backend_;
};

}  // namespace tessera
