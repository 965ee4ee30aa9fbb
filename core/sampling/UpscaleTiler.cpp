#include "core/sampling/UpscaleTiler.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "core/base/FormatNumber.h"
#include "core/base/HostMemory.h"

namespace tessera {

namespace {

constexpr int kMinimumTile = 64;                                  // input pixels: where halving stops
constexpr std::uint64_t kDefaultBudget = std::uint64_t(4) << 30;  // 4 GiB
constexpr int kSinkRows = 256;                                    // rows per sink call of a one-tile run
constexpr std::int64_t kThreadFloats = std::int64_t(1) << 18;     // host work per thread worth starting it
constexpr unsigned kMaxHostThreads = 16;

std::uint64_t floatBytes(std::int64_t floats) { return static_cast<std::uint64_t>(floats) * sizeof(float); }

// body(begin, end) over pieces of the rows [0, n), on up to the hardware's threads where the
// `floats` the rows touch are worth it (the calling thread takes the first piece). The pieces
// write disjoint rows.
template <class Body>
void forRows(int n, std::int64_t floats, const Body& body) {
    const unsigned hardware = std::max(1u, std::min(kMaxHostThreads, std::thread::hardware_concurrency()));
    const auto wanted = static_cast<unsigned>(std::clamp<std::int64_t>(floats / kThreadFloats, 1, hardware));
    const int pieces = std::min(n, static_cast<int>(wanted));
    if (pieces <= 1) {
        body(0, n);
        return;
    }
    std::vector<std::thread> helpers;
    helpers.reserve(static_cast<std::size_t>(pieces) - 1);
    for (int i = 1; i < pieces; ++i)
        helpers.emplace_back([&body, i, n, pieces] { body(n * i / pieces, n * (i + 1) / pieces); });
    body(0, n / pieces);
    for (std::thread& t : helpers) t.join();
}

// Where a tile sits: its position in input pixels and its row and column in the plan.
struct TileSpot {
    int x = 0, y = 0;
    std::size_t row = 0, col = 0;
};

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

// The smallest tile (a multiple of `multiple`, at most p.tile) that covers both sides with as few
// tiles per axis as p.tile does: the asked tile is the largest allowed, and a last tile moved inside
// the image would otherwise recompute most of its neighbour (1024 pixels in tiles of 512 overlapping
// by 32: three of 512, 2.25 times the image's pixels; three of 363: 1.13 times).
void evenTiles(UpscalePlan& p, int multiple) {
    int tile = multiple;
    for (const int length : {p.width, p.height}) {
        if (length <= p.tile) {
            tile = std::max(tile, std::min(length, p.tile));
            continue;
        }
        const auto n = static_cast<int>(TilePlan::axisPositions(length, p.tile, p.overlap).size());
        const int least = (length + (n - 1) * p.overlap + n - 1) / n;
        tile = std::max(tile, (least + multiple - 1) / multiple * multiple);
    }
    if (tile >= p.tile || tile <= p.overlap) return;
    p.tile = tile;
    p.tileW = std::min(p.tile, p.width);
    p.tileH = std::min(p.tile, p.height);
    p.single = p.width <= p.tile && p.height <= p.tile;
}

}  // namespace

void parallelRows(int rows, std::int64_t floats, const std::function<void(int, int)>& body) {
    forRows(rows, floats, body);
}

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

int UpscaleDevice::maxTileBatch(int /*outH*/, int /*outW*/) const { return 1; }

std::string upscalePlanKey(const UpscaleModel& model, int batch, int outH, int outW) {
    std::ostringstream k;
    k << std::hexfloat << static_cast<const void*>(&model) << '|' << model.description() << '|' << batch << 'x' << outH
      << 'x' << outW;
    for (const auto& [name, t] : model.tensors()) {
        const std::vector<float>& d = t.data;
        k << '\n' << name << '@' << static_cast<const void*>(d.data()) << ':' << d.size();
        if (!d.empty()) k << ':' << d.front() << ':' << d[d.size() / 2] << ':' << d.back();
    }
    return k.str();
}

void BackendUpscaleDevice::prepare(const UpscaleModel& model, int batch, int outH, int outW) {
    std::string key = upscalePlanKey(model, batch, outH, outW);
    const int s = model.scale();
    input_.resize(static_cast<std::size_t>(batch) * model.inputChannels() * (outH / s) * (outW / s));
    output_.resize(static_cast<std::size_t>(batch) * model.outputChannels() * outH * outW);
    if (key == preparedKey_) return;
    preparedKey_.clear();
    backend().prepareGraph(model.executionGraph(), model.tensors(), batch, outH, outW);
    preparedKey_ = std::move(key);
}

void BackendUpscaleDevice::submit(int /*slot*/, int count, int /*firstTile*/) {
    backend().run({input_.data()}, count, {output_.data()});
}

TilePlan UpscalePlan::outputTiles() const {
    return TilePlan::make(width * scale, height * scale, tile * scale, overlap * scale);
}

UpscaleTiler::UpscaleTiler(const UpscaleModel& model, UpscaleDevice& device, UpscaleTiling tiling)
    : model_(model), device_(device), tiling_(tiling) {
    if (tiling_.tile < 0) throw std::invalid_argument("tile: " + std::to_string(tiling_.tile) + " is negative");
    if (tiling_.overlap < 0 || (tiling_.tile > 0 && tiling_.overlap >= tiling_.tile))
        throw std::invalid_argument("overlap: " + std::to_string(tiling_.overlap) + " must be 0 to " +
                                    std::to_string(tiling_.tile - 1) + " pixels (below the tile)");
}

std::uint64_t UpscaleTiler::budget() const {
    if (tiling_.memoryBudget > 0) return tiling_.memoryBudget;
    std::uint64_t b = kDefaultBudget;
    if (const std::optional<HostMemory> host = availableHostMemory()) b = std::min(b, host->availableBytes / 2);
    return b;
}

bool UpscaleTiler::fits(UpscalePlan& p, int batch) const {
    const int s = p.scale, cin = model_.inputChannels(), cout = model_.outputChannels();
    const std::int64_t outTile = std::int64_t(p.paddedH) * s * p.paddedW * s;
    p.deviceBytes = device_.tileBytes(model_, batch, p.paddedH * s, p.paddedW * s);
    p.bufferBytes = floatBytes(std::int64_t(p.slotCount) * batch *
                               (std::int64_t(cin) * p.paddedH * p.paddedW + std::int64_t(cout) * outTile));
    p.bandBytes = p.single ? floatBytes(std::int64_t(kSinkRows) * cout * p.width * s)
                           : floatBytes(std::int64_t(p.tileH) * s * cout * p.width * s);
    if (p.deviceBudget > 0) return p.deviceBytes <= p.deviceBudget && p.hostBytes() <= p.budget;
    return p.bytes() <= p.budget;
}

UpscalePlan UpscaleTiler::plan(int width, int height) const {
    if (width < 1 || height < 1)
        throw std::invalid_argument("upscale: an image of " + std::to_string(width) + " x " + std::to_string(height) +
                                    " pixels");
    const SizeRequirements req = model_.sizeRequirements();
    const int multiple = std::max(req.multipleOf, model_.inputMultiple());
    auto roundTile = [multiple](int t) { return std::max(multiple, t / multiple * multiple); };
    UpscalePlan p;
    p.width = width;
    p.height = height;
    p.scale = model_.scale();
    p.budget = budget();
    p.deviceBudget = device_.deviceBudget().value_or(0);
    p.slotCount = std::clamp(device_.slotCount(), 1, 2);
    const int asked = tiling_.tile > 0 ? tiling_.tile : (std::max(width, height) + multiple - 1) / multiple * multiple;
    p.tile = roundTile(asked);
    p.overlap = std::min(tiling_.overlap, p.tile - 1);
    const std::string askedText = tiling_.tile > 0 ? "tile " + std::to_string(tiling_.tile) : "the whole image";
    for (;;) {
        p.single = width <= p.tile && height <= p.tile;
        p.tileW = std::min(p.tile, width);
        p.tileH = std::min(p.tile, height);
        p.paddedW = req.padded(p.tileW);
        p.paddedH = req.padded(p.tileH);
        if (p.paddedW % multiple != 0 || p.paddedH % multiple != 0)
            throw std::logic_error("upscale: a tile not a multiple of the model's unshuffle");
        if (fits(p, 1)) break;
        const std::string need = formatBytes(p.bytes()) + " (" + formatBytes(p.deviceBytes) + " on the device)";
        const std::string over = p.deviceBudget > 0 ? "over the device's budget of " + formatBytes(p.deviceBudget) +
                                                          " or the host's of " + formatBytes(p.budget)
                                                    : "over the memory budget of " + formatBytes(p.budget);
        if (p.tile <= kMinimumTile || roundTile(p.tile / 2) == p.tile)
            throw std::invalid_argument("upscale: tiles of " + std::to_string(p.tile) + " pixels need " + need + ", " +
                                        over);
        const int from = p.tile;
        p.tile = roundTile(std::max(kMinimumTile, p.tile / 2));
        p.overlap = std::min(p.overlap, p.tile / 4);
        p.note = askedText + " lowered to tiles of " + std::to_string(p.tile) + ": " + std::to_string(from) +
                 " needed " + need + ", " + over;
    }
    if (!p.single) {
        evenTiles(p, multiple);
        p.paddedW = req.padded(p.tileW);
        p.paddedH = req.padded(p.tileH);
        if (!fits(p, 1)) throw std::logic_error("upscale: a smaller tile did not fit");
    }
    p.xs = p.single ? std::vector<int>{0} : TilePlan::axisPositions(width, p.tile, p.overlap);
    p.ys = p.single ? std::vector<int>{0} : TilePlan::axisPositions(height, p.tile, p.overlap);
    // The largest batch that fits, from what the device takes at once.
    int batch = std::min(p.tiles(), std::max(1, device_.maxTileBatch(p.paddedH * p.scale, p.paddedW * p.scale)));
    while (batch > 1 && !fits(p, batch)) batch = batch * 3 / 4;
    p.batch = std::max(1, batch);
    if (!fits(p, p.batch)) throw std::logic_error("upscale: a batch of one tile fitted, then did not");
    return p;
}

void UpscaleTiler::gatherTile(const ImageTensor& input, const UpscalePlan& p, int x, int y, float* in) const {
    const std::vector<int> rows = paddedIndices(p.tileH, p.paddedH), cols = paddedIndices(p.tileW, p.paddedW);
    for (int c = 0; c < model_.inputChannels(); ++c)
        for (int r = 0; r < p.paddedH; ++r) {
            const float* src = input.data.data() +
                               (std::int64_t(c) * input.height + y + rows[static_cast<std::size_t>(r)]) * input.width +
                               x;
            float* dst = in + (std::int64_t(c) * p.paddedH + r) * p.paddedW;
            for (int k = 0; k < p.paddedW; ++k) dst[k] = src[cols[static_cast<std::size_t>(k)]];
        }
}

// The pipeline: batches gathered into a slot and submitted; the previous slot's tiles, once the
// device has them, blended into the band (or, for one tile, cropped into it) and emitted.
UpscalePlan UpscaleTiler::run(const ImageTensor& input, const RowSink& sink,
                              const std::function<void(int, int)>& progress) {
    return runTo(input, &sink, nullptr, progress);
}

UpscalePlan UpscaleTiler::runInto(const ImageTensor& input, ImageTensor& output,
                                  const std::function<void(int, int)>& progress) {
    output.channels = model_.outputChannels();
    output.width = input.width * model_.scale();
    output.height = input.height * model_.scale();
    output.data.resize(static_cast<std::size_t>(output.channels) * output.height * output.width);
    return runTo(input, nullptr, &output, progress);
}

UpscalePlan UpscaleTiler::runTo(const ImageTensor& input, const RowSink* sink, ImageTensor* image,
                                const std::function<void(int, int)>& progress) {
    if (input.channels != model_.inputChannels() ||
        input.data.size() != static_cast<std::size_t>(input.channels) * input.height * input.width)
        throw std::invalid_argument("upscale: an image of " + std::to_string(input.channels) + " channels for " +
                                    model_.description() + ", which takes " + std::to_string(model_.inputChannels()));
    UpscalePlan p = plan(input.width, input.height);
    const int s = p.scale, cout = model_.outputChannels(), outWidth = p.width * s, outHeight = p.height * s;
    device_.prepare(model_, p.batch, p.paddedH * s, p.paddedW * s);
    const std::size_t rowFloats = static_cast<std::size_t>(cout) * outWidth;
    const std::size_t inFloats = static_cast<std::size_t>(model_.inputChannels()) * p.paddedH * p.paddedW;
    const int tileOutH = p.paddedH * s, tileOutW = p.paddedW * s, cropH = p.tileH * s, cropW = p.tileW * s;
    const std::size_t outFloats = static_cast<std::size_t>(cout) * tileOutH * tileOutW;
    const bool clamp = tiling_.clamp;
    auto value = [clamp](float v) { return clamp ? std::clamp(v, 0.0f, 1.0f) : v; };

    std::vector<TileSpot> spots;
    for (std::size_t row = 0; row < p.ys.size(); ++row)
        for (std::size_t col = 0; col < p.xs.size(); ++col) spots.push_back({p.xs[col], p.ys[row], row, col});
    const int total = p.tiles();
    const AxisWeights wx = p.single ? AxisWeights{} : axisWeights(p.xs, p.width, p.tileW, s, p.overlap, tiling_.blend);
    const AxisWeights wy = p.single ? AxisWeights{} : axisWeights(p.ys, p.height, p.tileH, s, p.overlap, tiling_.blend);
    const int capacity = p.single ? kSinkRows : cropH;  // band rows: one tile row of output
    // (none where one tile goes straight into the image)
    std::vector<float> band(p.single && image ? 0 : rowFloats * static_cast<std::size_t>(capacity), 0.0f);
    int bandStart = 0;
    // Rows [bandStart, end) are final: normalise, clamp, hand over, and move the rest up.
    auto emit = [&](int end) {
        const int n = end - bandStart;
        if (n <= 0) return;
        forRows(n, std::int64_t(n) * static_cast<std::int64_t>(rowFloats), [&](int r0, int r1) {
            for (int r = r0; r < r1; ++r) {
                const float ny = wy.sum[static_cast<std::size_t>(bandStart + r)];
                for (int c = 0; c < cout; ++c) {
                    float* row = band.data() + std::size_t(r) * rowFloats + std::size_t(c) * outWidth;
                    float* dst = image ? image->data.data() +
                                             (std::size_t(c) * outHeight + std::size_t(bandStart + r)) * outWidth
                                       : row;
                    for (int k = 0; k < outWidth; ++k)
                        dst[k] = value(row[k] / (ny * wx.sum[static_cast<std::size_t>(k)]));
                }
            }
        });
        if (sink) (*sink)(bandStart, n, band.data());
        const std::size_t kept = std::size_t(capacity - n) * rowFloats;
        std::memmove(band.data(), band.data() + std::size_t(n) * rowFloats, sizeof(float) * kept);
        std::fill(band.begin() + static_cast<std::ptrdiff_t>(kept), band.end(), 0.0f);
        bandStart = end;
    };
    // The one tile of a one-tile run: cropped and clamped into bands for the sink.
    auto emitSingle = [&](const float* out) {
        if (image) {  // every row straight from the tile's output
            forRows(outHeight, std::int64_t(outHeight) * static_cast<std::int64_t>(rowFloats), [&](int a, int b) {
                for (int r = a; r < b; ++r)
                    for (int c = 0; c < cout; ++c) {
                        const float* src = out + (std::size_t(c) * tileOutH + std::size_t(r)) * tileOutW;
                        float* dst = image->data.data() + (std::size_t(c) * outHeight + std::size_t(r)) * outWidth;
                        for (int k = 0; k < outWidth; ++k) dst[k] = value(src[k]);
                    }
            });
            return;
        }
        for (int r0 = 0; r0 < outHeight; r0 += kSinkRows) {
            const int n = std::min(kSinkRows, outHeight - r0);
            forRows(n, std::int64_t(n) * static_cast<std::int64_t>(rowFloats), [&](int a, int b) {
                for (int r = a; r < b; ++r)
                    for (int c = 0; c < cout; ++c) {
                        const float* src = out + (std::size_t(c) * tileOutH + std::size_t(r0 + r)) * tileOutW;
                        float* dst = band.data() + std::size_t(r) * rowFloats + std::size_t(c) * outWidth;
                        for (int k = 0; k < outWidth; ++k) dst[k] = value(src[k]);
                    }
            });
            (*sink)(r0, n, band.data());
        }
    };
    // Tile t's output (padded: cropped here), clamped, weighted and added to the band.
    auto blend = [&](int t, const float* out) {
        const TileSpot& spot = spots[static_cast<std::size_t>(t)];
        if (spot.col == 0) emit(spot.y * s);  // no tile of this row or after reaches above it
        const std::vector<float>& wr = wy.tile[spot.row];
        const std::vector<float>& wc = wx.tile[spot.col];
        forRows(cropH, std::int64_t(cropH) * cropW * cout, [&](int r0, int r1) {
            for (int r = r0; r < r1; ++r) {
                const float w = wr[static_cast<std::size_t>(r)];
                if (w == 0.0f) continue;
                float* dstRow =
                    band.data() + std::size_t(spot.y * s + r - bandStart) * rowFloats + std::size_t(spot.x) * s;
                for (int c = 0; c < cout; ++c) {
                    const float* src = out + (std::size_t(c) * tileOutH + std::size_t(r)) * tileOutW;
                    float* dst = dstRow + std::size_t(c) * outWidth;
                    for (int k = 0; k < cropW; ++k) dst[k] += value(src[k]) * (w * wc[static_cast<std::size_t>(k)]);
                }
            }
        });
    };
    // A slot's tiles once the device has them.
    int done = 0;
    auto finish = [&](int slot, int first, int count) {
        device_.wait(slot);
        const float* out = device_.tileOutput(slot);
        for (int j = 0; j < count; ++j) {
            if (p.single)
                emitSingle(out);
            else
                blend(first + j, out + std::size_t(j) * outFloats);
            if (progress) progress(++done, total);
        }
    };

    struct Pending {
        int slot = -1, first = 0, count = 0;
    } pending;
    for (int first = 0, k = 0; first < total; first += p.batch, ++k) {
        const int count = std::min(p.batch, total - first), slot = k % p.slotCount;
        float* in = device_.tileInput(slot);
        for (int j = 0; j < count; ++j) {
            const TileSpot& spot = spots[static_cast<std::size_t>(first + j)];
            gatherTile(input, p, spot.x, spot.y, in + std::size_t(j) * inFloats);
        }
        device_.submit(slot, count, first);
        if (pending.slot >= 0) finish(pending.slot, pending.first, pending.count);
        pending = {slot, first, count};
        if (p.slotCount == 1) {
            finish(slot, first, count);
            pending = {};
        }
    }
    if (pending.slot >= 0) finish(pending.slot, pending.first, pending.count);
    if (!p.single) emit(outHeight);
    p.deviceNote = device_.note();
    return p;
}

ImageTensor UpscaleTiler::upscale(const ImageTensor& input) {
    ImageTensor out;
    runInto(input, out);
    return out;
}

}  // namespace tessera
