// CudaUpscaler: the CUDA engine as the device of the tiled upscaler (core/sampling/UpscaleTiler.h):
// a CudaBackend running the model's execution graph on a batch of tiles per forward, at the
// precision asked (fp16 by default, bf16 or fp32), the forward replayed from a CUDA graph per batch
// size (CudaBackend::setGraphs), its cuDNN choices from the tuning cache.
//
// Two slots of pinned host memory: the tiler gathers and blends one tile batch on the host while the
// device runs the other. A batch is copied into the backend's float32 staging, converted, run and
// converted back there (CudaBackend::enqueueStaged), checked for NaN and infinity tile by tile on
// the device (kernels/ops/NonFinite.cuh), and copied back, all on the backend's stream; the host
// waits on an event per slot. The copies share that stream with the forwards: they are a few
// percent of a forward's time (timings() says how much), so a second stream was not worth its
// second staging.
//
// Half-precision overflow: when a tile's output holds a NaN or an infinity in fp16 or bf16, that
// tile's batch and every tile after it are computed again in fp32 (the backend prepared anew at
// fp32 within the same budget), note() says so, and later runs of the same model start in fp32.
//
// Memory: a device budget (CudaUpscaleOptions::memoryBudget; by default the free memory at
// construction less kReserveBytes). tileBytes is the backend's memory plan for the graph at the tile
// size (CudaBackend::planGraph, at batch 1, its activations times the batch) plus cuBLAS'
// workspace, kWorkspaceBytes for cuDNN's and kHeadroomBytes; the tiler picks the tile and batch
// whose tileBytes fit the budget. The backend is told that all but budget - kHeadroomBytes of the
// free memory is reserved (CudaBackend::setReservedBytes), so its arena, and its scratch arena
// while prepare times algorithms, stay within that. Bound: the device memory this device allocates
// is at most budget - kHeadroomBytes; the headroom covers what no plan counts (cuDNN's and cuBLAS'
// handles, kernel modules loaded on first use, local memory, the CUDA graphs).
//
// This header includes no CUDA header.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/models/upscale/UpscaleModel.h"
#include "core/run/RunConfig.h"
#include "core/sampling/UpscaleTiler.h"

namespace tessera {

class CudaBackend;  // kernels/backend/CudaBackend.h

struct CudaUpscaleOptions {
    Precision precision = Precision::FP16;
    bool graphs = true;              // each batch size's forward replayed from a captured CUDA graph
    std::uint64_t memoryBudget = 0;  // device bytes; 0: the free memory at construction less kReserveBytes
    int tileBatch = 0;               // tiles per forward at most; 0: up to kBatchPixels output pixels
    std::string tuningCache;         // as RunConfig::tuningCache ("" the user's file, "off", a path)
};

// The device time of the last run (since the last prepare), from CUDA events on the stream.
struct CudaUpscaleTimes {
    double forwardMs = 0;  // staged input to staged output: conversions and the forwards
    double copyMs = 0;     // host to device and back, and the non-finite checks
    int forwards = 0;
};

class CudaUpscaler final : public UpscaleDevice {
public:
    static constexpr std::uint64_t kReserveBytes = 1ull << 30;      // kept out of the default budget
    static constexpr std::uint64_t kHeadroomBytes = 512ull << 20;   // inside the budget, outside every plan
    static constexpr std::uint64_t kWorkspaceBytes = 256ull << 20;  // counted for cuDNN's workspace
    static constexpr std::int64_t kBatchPixels = 2048 * 2048;       // output pixels per forward (auto batch)
    static constexpr int kMaxTileBatch = 16;

    // Throws std::runtime_error ("no CUDA device: ...") when no device can be used.
    explicit CudaUpscaler(CudaUpscaleOptions options = {}, int device = 0);
    ~CudaUpscaler() override;
    CudaUpscaler(const CudaUpscaler&) = delete;
    CudaUpscaler& operator=(const CudaUpscaler&) = delete;

    // UpscaleDevice's overrides (see above).
    std::uint64_t tileBytes(const UpscaleModel& model, int batch, int outH, int outW) const override;
    std::optional<std::uint64_t> deviceBudget() const override;
    int maxTileBatch(int outH, int outW) const override;
    int slotCount() const override { return 2; }
    // Prepares the backend unless it holds this model's plan at this shape and precision; an
    // out-of-memory plan lowers the batch, and where one tile does not fit throws CudaOutOfMemory.
    void prepare(const UpscaleModel& model, int batch, int outH, int outW) override;
    float* tileInput(int slot) override;
    const float* tileOutput(int slot) override;
    void submit(int slot, int count, int firstTile) override;
    // Throws CudaOutOfMemory when an fp32 fallback does not fit the budget.
    void wait(int slot) override;
    std::string note() const override;

    // `image` ([inputChannels][H][W] in [0, 1]) upscaled by `model` in tiles ([outputChannels]
    // [H x scale][W x scale], clamped to [0, 1] unless tiling.clamp is off).
    ImageTensor upscale(const UpscaleModel& model, const ImageTensor& image, const UpscaleTiling& tiling = {});

    // The precision tiles run at now (fp32 after a fallback).
    Precision precision() const;
    // The prepared backend (nullptr before the first prepare); replaced by a fallback.
    const CudaBackend* backend() const;
    CudaBackend* backend();
    // Tiles per forward of the prepared backend (at most the tiler's batch).
    int forwardBatch() const;
    CudaUpscaleTimes timings() const;
    // The device's name (cudaGetDeviceProperties), for the run record before any prepare.
    std::string deviceName() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// The CUDA upscale device for front ends that pick a device at run time (as makeCudaEngine).
std::unique_ptr<UpscaleDevice> makeCudaUpscaler(const CudaUpscaleOptions& options = {}, int device = 0);

}  // namespace tessera
