#include "core/sampling/UpscaleTiler.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "core/base/FormatNumber.h"
#include "core/base/HostMemory.h"

namespace tessera {

namespace {

constexpr int kMinimumTile = 64;                                  // input pixels: where halving stops
constexpr std::uint64_t kDefaultBudget = std::uint64_t(4) << 30;  // 4 GiB
constexpr int kSinkRows = 64;                                     // rows per sink call of a one-tile run

std::uint64_t floatBytes(std::int64_t floats) { return static_cast<std::uint64_t>(floats) * sizeof(float); }

// ComfyUI tiled_scale_multidim's mask along one axis of a tile's output: ones, then for
// k < feather the k-th row/column from each end multiplied by (k + 1) / feather (not at all when
// the feather is not below the extent).
std::vector<float> featherProfile(int extent, int feather) {
    std::vector<float> m(static_cast<std::size_t>(extent), 1.0f);
    if (feather <= 0 || feather >= extent) return m;
    for (int k = 0; k < feather; ++k) {
        const auto a = static_cast<float>(double(k + 1) / feather);
        m[static_cast<std::size_t>(k)] *= a;
        m[static_cast<std::size_t>(extent - 1 - k)] *= a;
    }
    return m;
}

// Each tile's weights along one axis (output pixels, tile-local) and their sum over the tiles at
// every output position.
struct AxisWeights {
    std::vector<std::vector<float>> tile;
    std::vector<float> sum;
};

AxisWeights axisWeights(const std::vector<int>& positions, int length, int tileLength, int scale, int overlap,
                        UpscaleBlend blend) {
    AxisWeights a;
    const int extent = tileLength * scale;
    a.sum.assign(static_cast<std::size_t>(length) * scale, 0.0f);
    const std::size_t n = positions.size();
    for (std::size_t i = 0; i < n; ++i) {
        std::vector<float> w;
        const int start = positions[i] * scale;
        if (blend == UpscaleBlend::Feather) {
            w = featherProfile(extent, overlap * scale);
        } else {
            // The middle of the overlap with each neighbour bounds the pixels this tile owns.
            const int lo = i == 0 ? 0 : (positions[i] + positions[i - 1] + tileLength) / 2;
            const int hi = i + 1 == n ? length : (positions[i + 1] + positions[i] + tileLength) / 2;
            w.assign(static_cast<std::size_t>(extent), 0.0f);
            for (int k = 0; k < extent; ++k)
                if (start + k >= lo * scale && start + k < hi * scale) w[static_cast<std::size_t>(k)] = 1.0f;
        }
        for (int k = 0; k < extent; ++k) a.sum[static_cast<std::size_t>(start + k)] += w[static_cast<std::size_t>(k)];
        a.tile.push_back(std::move(w));
    }
    return a;
}

}  // namespace

std::vector<int> paddedIndices(int n, int padded) {
    std::vector<int> idx(static_cast<std::size_t>(std::max(padded, n)));
    const int reflect = std::min(padded - n, n - 1);
    for (int i = 0; i < static_cast<int>(idx.size()); ++i) {
        if (i < n)
            idx[static_cast<std::size_t>(i)] = i;
        else if (i - n < reflect)
            idx[static_cast<std::size_t>(i)] = 2 * (n - 1) - i;  // PyTorch "reflect": the edge not repeated
        else
            idx[static_cast<std::size_t>(i)] = reflect > 0 ? n - 1 - reflect : n - 1;  // "replicate" of the last
    }
    return idx;
}

TilePlan UpscalePlan::outputTiles() const {
    return TilePlan::make(width * scale, height * scale, tile * scale, overlap * scale);
}

UpscaleTiler::UpscaleTiler(const UpscaleModel& model, UpscaleDevice& device, UpscaleTiling tiling)
    : model_(model), device_(device), tiling_(tiling) {
    if (tiling_.tile < 1) throw std::invalid_argument("tile: " + std::to_string(tiling_.tile) + " must be positive");
    if (tiling_.overlap < 0 || tiling_.overlap >= tiling_.tile)
        throw std::invalid_argument("overlap: " + std::to_string(tiling_.overlap) + " must be 0 to " +
                                    std::to_string(tiling_.tile - 1) + " pixels (below the tile)");
}

std::uint64_t UpscaleTiler::budget() const {
    if (tiling_.memoryBudget > 0) return tiling_.memoryBudget;
    std::uint64_t b = kDefaultBudget;
    if (const std::optional<HostMemory> host = availableHostMemory()) b = std::min(b, host->availableBytes / 2);
    return b;
}

UpscalePlan UpscaleTiler::plan(int width, int height) const {
    if (width < 1 || height < 1)
        throw std::invalid_argument("upscale: an image of " + std::to_string(width) + " x " + std::to_string(height) +
                                    " pixels");
    const SizeRequirements req = model_.sizeRequirements();
    const int multiple = std::max(req.multipleOf, model_.inputMultiple());
    const int s = model_.scale(), cin = model_.inputChannels(), cout = model_.outputChannels();
    auto roundTile = [multiple](int t) { return std::max(multiple, t / multiple * multiple); };
    UpscalePlan p;
    p.width = width;
    p.height = height;
    p.scale = s;
    p.budget = budget();
    p.tile = roundTile(tiling_.tile);
    p.overlap = std::min(tiling_.overlap, p.tile - 1);
    for (;;) {
        p.single = width <= p.tile && height <= p.tile;
        p.tileW = std::min(p.tile, width);
        p.tileH = std::min(p.tile, height);
        p.paddedW = req.padded(p.tileW);
        p.paddedH = req.padded(p.tileH);
        if (p.paddedW % multiple != 0 || p.paddedH % multiple != 0)
            throw std::logic_error("upscale: a tile not a multiple of the model's unshuffle");
        const std::int64_t outTile = std::int64_t(p.paddedH) * s * p.paddedW * s;
        p.deviceBytes = device_.tileBytes(model_.executionGraph(), p.paddedH * s, p.paddedW * s);
        p.bufferBytes = floatBytes(std::int64_t(cin) * p.paddedH * p.paddedW + std::int64_t(cout) * outTile +
                                   std::int64_t(cout) * p.tileH * s * p.tileW * s);
        p.bandBytes = p.single ? floatBytes(std::int64_t(kSinkRows) * cout * width * s)
                               : floatBytes(std::int64_t(p.tileH) * s * cout * width * s);
        if (p.bytes() <= p.budget) break;
        if (p.tile <= kMinimumTile || roundTile(p.tile / 2) == p.tile)
            throw std::invalid_argument("upscale: tiles of " + std::to_string(p.tile) + " pixels need " +
                                        formatBytes(p.bytes()) + " (" + formatBytes(p.deviceBytes) +
                                        " on the device), over the memory budget of " + formatBytes(p.budget));
        const int asked = p.tile;
        p.tile = roundTile(std::max(kMinimumTile, p.tile / 2));
        p.overlap = std::min(p.overlap, p.tile / 4);
        p.note = "tile " + std::to_string(tiling_.tile) + " lowered to " + std::to_string(p.tile) + ": " +
                 std::to_string(asked) + " needed " + formatBytes(p.bytes()) + ", over the budget of " +
                 formatBytes(p.budget);
    }
    p.xs = p.single ? std::vector<int>{0} : TilePlan::axisPositions(width, p.tile, p.overlap);
    p.ys = p.single ? std::vector<int>{0} : TilePlan::axisPositions(height, p.tile, p.overlap);
    return p;
}

void UpscaleTiler::prepareFor(int outH, int outW) {
    if (outH == preparedH_ && outW == preparedW_) return;
    preparedH_ = preparedW_ = 0;
    device_.backend().prepareGraph(model_.executionGraph(), model_.tensors(), 1, outH, outW);
    preparedH_ = outH;
    preparedW_ = outW;
}

void UpscaleTiler::runTile(const ImageTensor& input, const UpscalePlan& p, int x, int y, std::vector<float>& in,
                           std::vector<float>& out, std::vector<float>& cropped) {
    const int s = p.scale, cin = model_.inputChannels(), cout = model_.outputChannels();
    const std::vector<int> rows = paddedIndices(p.tileH, p.paddedH), cols = paddedIndices(p.tileW, p.paddedW);
    for (int c = 0; c < cin; ++c)
        for (int r = 0; r < p.paddedH; ++r) {
            const float* src = input.data.data() +
                               (std::int64_t(c) * input.height + y + rows[static_cast<std::size_t>(r)]) * input.width +
                               x;
            float* dst = in.data() + (std::int64_t(c) * p.paddedH + r) * p.paddedW;
            for (int k = 0; k < p.paddedW; ++k) dst[k] = src[cols[static_cast<std::size_t>(k)]];
        }
    device_.backend().run({in.data()}, 1, {out.data()});
    const int outW = p.paddedW * s, cropH = p.tileH * s, cropW = p.tileW * s;
    for (int c = 0; c < cout; ++c)
        for (int r = 0; r < cropH; ++r) {
            const float* src = out.data() + (std::int64_t(c) * p.paddedH * s + r) * outW;
            float* dst = cropped.data() + (std::int64_t(c) * cropH + r) * cropW;
            for (int k = 0; k < cropW; ++k) dst[k] = tiling_.clamp ? std::clamp(src[k], 0.0f, 1.0f) : src[k];
        }
}

UpscalePlan UpscaleTiler::run(const ImageTensor& input, const RowSink& sink,
                              const std::function<void(int, int)>& progress) {
    if (input.channels != model_.inputChannels() ||
        input.data.size() != static_cast<std::size_t>(input.channels) * input.height * input.width)
        throw std::invalid_argument("upscale: an image of " + std::to_string(input.channels) + " channels for " +
                                    model_.description() + ", which takes " + std::to_string(model_.inputChannels()));
    UpscalePlan p = plan(input.width, input.height);
    const int s = p.scale, cout = model_.outputChannels(), outWidth = p.width * s;
    prepareFor(p.paddedH * s, p.paddedW * s);
    std::vector<float> in(static_cast<std::size_t>(model_.inputChannels()) * p.paddedH * p.paddedW);
    std::vector<float> out(static_cast<std::size_t>(cout) * p.paddedH * s * p.paddedW * s);
    std::vector<float> tile(static_cast<std::size_t>(cout) * p.tileH * s * p.tileW * s);
    const std::size_t rowFloats = static_cast<std::size_t>(cout) * outWidth;

    if (p.single) {
        runTile(input, p, 0, 0, in, out, tile);
        if (progress) progress(1, 1);
        const int outHeight = p.height * s;
        std::vector<float> band(rowFloats * kSinkRows);
        for (int r0 = 0; r0 < outHeight; r0 += kSinkRows) {
            const int n = std::min(kSinkRows, outHeight - r0);
            for (int r = 0; r < n; ++r)
                for (int c = 0; c < cout; ++c)
                    std::memcpy(band.data() + std::size_t(r) * rowFloats + std::size_t(c) * outWidth,
                                tile.data() + (std::size_t(c) * outHeight + std::size_t(r0 + r)) * outWidth,
                                sizeof(float) * static_cast<std::size_t>(outWidth));
            sink(r0, n, band.data());
        }
        return p;
    }

    const AxisWeights wx = axisWeights(p.xs, p.width, p.tileW, s, p.overlap, tiling_.blend);
    const AxisWeights wy = axisWeights(p.ys, p.height, p.tileH, s, p.overlap, tiling_.blend);
    const int capacity = p.tileH * s;  // band rows: one tile row of output
    std::vector<float> band(rowFloats * static_cast<std::size_t>(capacity), 0.0f);
    int bandStart = 0;
    // Rows [bandStart, end) are final: normalise, clamp, hand over, and move the rest up.
    auto emit = [&](int end) {
        const int n = end - bandStart;
        if (n <= 0) return;
        for (int r = 0; r < n; ++r) {
            const float ny = wy.sum[static_cast<std::size_t>(bandStart + r)];
            for (int c = 0; c < cout; ++c) {
                float* row = band.data() + std::size_t(r) * rowFloats + std::size_t(c) * outWidth;
                for (int k = 0; k < outWidth; ++k) {
                    const float v = row[k] / (ny * wx.sum[static_cast<std::size_t>(k)]);
                    row[k] = tiling_.clamp ? std::clamp(v, 0.0f, 1.0f) : v;
                }
            }
        }
        sink(bandStart, n, band.data());
        const std::size_t kept = std::size_t(capacity - n) * rowFloats;
        std::memmove(band.data(), band.data() + std::size_t(n) * rowFloats, sizeof(float) * kept);
        std::fill(band.begin() + static_cast<std::ptrdiff_t>(kept), band.end(), 0.0f);
        bandStart = end;
    };
    const int total = p.tiles(), cropH = p.tileH * s, cropW = p.tileW * s;
    int done = 0;
    for (std::size_t row = 0; row < p.ys.size(); ++row) {
        const int y = p.ys[row];
        emit(y * s);  // no tile of this row or after reaches above it
        const std::vector<float>& wr = wy.tile[row];
        for (std::size_t col = 0; col < p.xs.size(); ++col) {
            const int x = p.xs[col];
            runTile(input, p, x, y, in, out, tile);
            const std::vector<float>& wc = wx.tile[col];
            for (int r = 0; r < cropH; ++r) {
                const float w = wr[static_cast<std::size_t>(r)];
                if (w == 0.0f) continue;
                float* dstRow = band.data() + std::size_t(y * s + r - bandStart) * rowFloats + std::size_t(x) * s;
                for (int c = 0; c < cout; ++c) {
                    const float* src = tile.data() + (std::size_t(c) * cropH + std::size_t(r)) * cropW;
                    float* dst = dstRow + std::size_t(c) * outWidth;
                    for (int k = 0; k < cropW; ++k) dst[k] += src[k] * (w * wc[static_cast<std::size_t>(k)]);
                }
            }
            if (progress) progress(++done, total);
        }
    }
    emit(p.height * s);
    return p;
}

ImageTensor UpscaleTiler::upscale(const ImageTensor& input) {
    ImageTensor out;
    out.channels = model_.outputChannels();
    out.width = input.width * model_.scale();
    out.height = input.height * model_.scale();
    out.data.assign(static_cast<std::size_t>(out.channels) * out.height * out.width, 0.0f);
    run(input, [&out](int firstRow, int rows, const float* band) {
        for (int r = 0; r < rows; ++r)
            for (int c = 0; c < out.channels; ++c)
                std::memcpy(out.data.data() + (std::size_t(c) * out.height + std::size_t(firstRow + r)) * out.width,
                            band + (std::size_t(r) * out.channels + std::size_t(c)) * out.width,
                            sizeof(float) * static_cast<std::size_t>(out.width));
    });
    return out;
}

}  // namespace tessera
