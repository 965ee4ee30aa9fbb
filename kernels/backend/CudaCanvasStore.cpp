#include "kernels/backend/CudaCanvasStore.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "core/graph/ModelGraph.h"
#include "kernels/backend/CudaBackend.h"
#include "kernels/device/CudaCheck.h"
#include "kernels/device/DeviceResources.h"
#include "kernels/device/NvtxRange.h"
#include "kernels/ops/GroupMoments.cuh"
#include "kernels/ops/LayoutConvert.cuh"

namespace tessera {

namespace {

constexpr std::uint64_t kReserveBytes = 2ull << 30;

DType dtypeOf(Precision p) {
    return p == Precision::FP32 ? DType::F32 : (p == Precision::FP16 ? DType::F16 : DType::BF16);
}
int padded(int channels) { return (channels + 7) / 8 * 8; }

// One canvas: [h, w, stride] in the activation type.
struct DeviceCanvas {
    int channels = 0, stride = 0, h = 0, w = 0, scale = 1;
    DeviceBuffer buffer;
    char* at(int y, int x, std::size_t elementBytes) const {
        return buffer.as<char>() + (static_cast<std::size_t>(y) * w + x) * stride * elementBytes;
    }
};

class CudaCanvasStore final : public TiledCanvasStore {
public:
    CudaCanvasStore(Backend& preparer, CudaBackend& device)
        : preparer_(preparer),
          device_(device),
          dtype_(dtypeOf(device.precision())),
          es_(dtypeSize(dtype_)),
          stream_(device.stream()),
          moments_(sizeof(double) * 2 * 4096) {}

    std::string where() const override { return "device"; }

    void allocate(int value, int channels, int h, int w, int scale) override {
        release(value);
        DeviceCanvas& c = canvases_[value];
        c.channels = channels;
        c.stride = padded(channels);
        c.h = h;
        c.w = w;
        c.scale = scale;
        c.buffer = DeviceBuffer(static_cast<std::size_t>(h) * w * c.stride * es_);
        TESSERA_CHECK(cudaMemsetAsync(c.buffer.data(), 0, c.buffer.bytes(), stream_));
        held_ += c.buffer.bytes();
        peak_ = std::max(peak_, held_);
    }
    void release(int value) override {
        const auto it = canvases_.find(value);
        if (it == canvases_.end()) return;
        // Work still queued may read it: freeing waits (cudaFree synchronises the device).
        held_ -= it->second.buffer.bytes();
        canvases_.erase(it);
    }
    void write(int value, const float* nchw) override {
        const DeviceCanvas& c = canvases_.at(value);
        const std::size_t n = static_cast<std::size_t>(c.channels) * c.h * c.w;
        DeviceBuffer staging(n * sizeof(float));
        TESSERA_CHECK(cudaMemcpyAsync(staging.data(), nchw, n * sizeof(float), cudaMemcpyHostToDevice, stream_));
        launchNchwToNhwc(staging.as<float>(), dtype_, c.buffer.data(), 1, c.channels, c.h, c.w, c.stride, 1.0f,
                         stream_);
        TESSERA_CHECK(cudaStreamSynchronize(stream_));
    }
    std::vector<float> read(int value) override {
        const DeviceCanvas& c = canvases_.at(value);
        std::vector<float> out(static_cast<std::size_t>(c.channels) * c.h * c.w);
        DeviceBuffer staging(out.size() * sizeof(float));
        launchNhwcToNchw(dtype_, c.buffer.data(), staging.as<float>(), 1, c.channels, c.h, c.w, c.stride, stream_);
        TESSERA_CHECK(
            cudaMemcpyAsync(out.data(), staging.data(), out.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
        TESSERA_CHECK(cudaStreamSynchronize(stream_));
        return out;
    }

    std::vector<std::pair<double, double>> groupMoments(int value, int groups, int x0, int y0, int w, int h) override {
        const NvtxRange range("vae statistics");
        const DeviceCanvas& c = canvases_.at(value);
        // Filled field by field like other parameter blocks: alike in shape only.
        GroupMomentsParams p;
        p.dtype = dtype_;
        p.x = c.buffer.data();
        p.width = c.w;
        p.stride = c.stride;
        p.channels = c.channels;
        p.groups = groups;
        p.x0 = x0;
        p.y0 = y0;
        p.w = w;
        p.h = h;
        const std::size_t scratch = groupMomentsScratch(p) * sizeof(double);
        if (scratch_.bytes() < scratch) scratch_ = DeviceBuffer(scratch);
        if (moments_.bytes() < 2 * sizeof(double) * static_cast<std::size_t>(groups))
            moments_ = DeviceBuffer(2 * sizeof(double) * static_cast<std::size_t>(groups));
        launchGroupMoments(p, moments_.as<double>(), scratch_.as<double>(), stream_);
        std::vector<double> host(2 * static_cast<std::size_t>(groups));
        TESSERA_CHECK(cudaMemcpyAsync(host.data(), moments_.data(), host.size() * sizeof(double),
                                      cudaMemcpyDeviceToHost, stream_));
        TESSERA_CHECK(cudaStreamSynchronize(stream_));
        std::vector<std::pair<double, double>> out;
        for (int g = 0; g < groups; ++g)
            out.emplace_back(host[2 * static_cast<std::size_t>(g)], host[2 * static_cast<std::size_t>(g) + 1]);
        return out;
    }

    void prepare(const ModelGraph& graph, const TensorMap& weights, int batch, int tileH, int tileW) override {
        const NvtxRange range("vae segment prepare");
        preparer_.prepareGraph(graph, weights, batch, tileH, tileW);
    }

    void run(const std::vector<StoreInput>& inputs, const std::vector<int>& outputs, const GraphTileGrid& grid,
             int first, int count) override {
        const NvtxRange range("vae segment tiles " + std::to_string(first) + "+" + std::to_string(count));
        const ModelGraph& g = device_.graph();
        for (std::size_t k = 0; k < inputs.size(); ++k) {
            char* dst = static_cast<char*>(device_.deviceGraphInput(k));
            const GraphValue& v = g.value(g.inputs().at(k));
            for (int t = 0; t < count; ++t)
                feed(inputs[k], v, grid.tiles[static_cast<std::size_t>(first + t)], first + t, t, dst);
        }
        device_.enqueue(count);
        for (std::size_t o = 0; o < outputs.size(); ++o) {
            const char* src = static_cast<const char*>(device_.deviceGraphOutput(o));
            for (int t = 0; t < count; ++t)
                paste(src, grid.tiles[static_cast<std::size_t>(first + t)], t, canvases_.at(outputs[o]));
        }
    }
    std::uint64_t peakBytes() const override { return peak_; }

private:
    // Tile `t` of the batch (grid tile `tile`) of input `in` into its buffer `dst` (value `v`).
    void feed(const StoreInput& in, const GraphValue& v, const GraphTile& tile, int index, int t, char* dst) {
        if (in.kind == SegmentInput::Kind::NormVector) {
            const std::vector<float>& data =
                in.vectors->size() == 1 ? in.vectors->front() : (*in.vectors)[static_cast<std::size_t>(index)];
            const std::size_t bytes = data.size() * sizeof(float);
            TESSERA_CHECK(cudaMemcpyAsync(dst + t * bytes, data.data(), bytes, cudaMemcpyHostToDevice, stream_));
            return;
        }
        const DeviceCanvas& c = canvases_.at(in.value);
        if (in.kind == SegmentInput::Kind::Context) {  // [pixels, C], channels unpadded
            const std::size_t row = static_cast<std::size_t>(v.channels) * es_,
                              pixels = static_cast<std::size_t>(c.h) * c.w;
            TESSERA_CHECK(cudaMemcpy2DAsync(dst + t * pixels * row, row, c.buffer.data(), c.stride * es_, row, pixels,
                                            cudaMemcpyDeviceToDevice, stream_));
            return;
        }
        if (c.stride != padded(v.channels))
            throw std::logic_error("CudaCanvasStore: the canvas of '" + v.name + "' has another layout");
        const int h = tile.h * c.scale, w = tile.w * c.scale;
        const std::size_t row = static_cast<std::size_t>(w) * c.stride * es_;
        TESSERA_CHECK(cudaMemcpy2DAsync(dst + t * row * h, row, c.at(tile.y * c.scale, tile.x * c.scale, es_),
                                        static_cast<std::size_t>(c.w) * c.stride * es_, row, h,
                                        cudaMemcpyDeviceToDevice, stream_));
    }
    // The core of tile `t` of the batch out of output buffer `src` (its extents) into canvas `c`.
    void paste(const char* src, const GraphTile& tile, int t, DeviceCanvas& c) {
        const int s = c.scale, h = tile.h * s, w = tile.w * s;
        const std::size_t pixel = static_cast<std::size_t>(c.stride) * es_, row = w * pixel;
        const char* from = src + t * row * h +
                           (static_cast<std::size_t>((tile.coreY - tile.y) * s) * w +
                            static_cast<std::size_t>((tile.coreX - tile.x) * s)) *
                               pixel;
        TESSERA_CHECK(cudaMemcpy2DAsync(c.at(tile.coreY * s, tile.coreX * s, es_), c.w * pixel, from, row,
                                        static_cast<std::size_t>(tile.coreW) * s * pixel, tile.coreH * s,
                                        cudaMemcpyDeviceToDevice, stream_));
    }

    Backend& preparer_;
    CudaBackend& device_;
    DType dtype_;
    std::size_t es_;
    cudaStream_t stream_;
    std::map<int, DeviceCanvas> canvases_;
    DeviceBuffer scratch_, moments_;
    std::uint64_t held_ = 0, peak_ = 0;
};

}  // namespace

std::uint64_t canvasStoreReserveBytes(std::uint64_t totalDeviceBytes) {
    return std::min(kReserveBytes, totalDeviceBytes / 4);
}

std::unique_ptr<TiledCanvasStore> makeCudaCanvasStore(Backend& preparer, CudaBackend& device,
                                                      std::uint64_t canvasBytes) {
    std::size_t freeBytes = 0, totalBytes = 0;
    TESSERA_CHECK(cudaMemGetInfo(&freeBytes, &totalBytes));
    const std::uint64_t need = canvasBytes / sizeof(float) * dtypeSize(dtypeOf(device.precision()));
    if (need + canvasStoreReserveBytes(totalBytes) > freeBytes) return nullptr;
    return std::make_unique<CudaCanvasStore>(preparer, device);
}

}  // namespace tessera
