// TiledVae: segments of a graph cut at its GroupNorms, run in lock-step over tiles through
// whole-image canvases (core/models/vae/TiledVae.h has the design).
#include "core/models/vae/TiledVae.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>

#include "core/base/FormatNumber.h"
#include "core/formats/ModelWeights.h"
#include "core/formats/Safetensors.h"  // shapeToString
#include "core/graph/Backend.h"
#include "core/models/vae/VaeGraph.h"
#include "core/models/vae/VaeModel.h"

namespace tessera {

namespace {

// Image sides a tiled pass takes: 4x the whole-graph limit of VaeModel (16384 px); the canvases
// of such an image need tens of GiB, which the run's memory check refuses first.
constexpr std::int64_t kMaxTiledSide = 65536;
constexpr std::int64_t kMaxBatch = 4096;
// Tiles per Backend::run: beyond this a batch saves nothing and only costs memory.
constexpr int kMaxTileBatch = 64;
// The smallest tile planVaePass halves to (cells).
constexpr int kMinPlannedTile = 8;
constexpr int kDefaultTile = 64;
// The most tiles planVaePass batches per segment call on a device.
constexpr int kMaxPlannedBatch = 8;
// What the largest-tensor rule counts channels as: the CUDA backend pads NHWC channels to 8.
constexpr int kChannelPadding = 8;

[[noreturn]] void bad(const std::string& message) { throw std::invalid_argument(message); }

std::int64_t ceilDiv(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// ---------------------------------------------------------------------------------- tile grid

struct AxisSplit {
    int extent = 0;
    std::vector<int> start, coreStart, coreEnd;
};

AxisSplit splitAxis(int length, int tile, int halo) {
    AxisSplit a;
    std::int64_t n = ceilDiv(length, tile);
    const std::int64_t maxCore = ceilDiv(length, n);
    if (maxCore + 2 * static_cast<std::int64_t>(halo) >= length) n = 1;  // one extent covers the axis
    a.extent = n == 1 ? length : static_cast<int>(maxCore + 2 * static_cast<std::int64_t>(halo));
    for (std::int64_t i = 0; i < n; ++i) {
        const int cs = static_cast<int>(i * length / n), ce = static_cast<int>((i + 1) * length / n);
        a.coreStart.push_back(cs);
        a.coreEnd.push_back(ce);
        a.start.push_back(std::clamp(cs - halo, 0, length - a.extent));
    }
    return a;
}

// ---------------------------------------------------------------------------------- cutting

bool isCut(const ModelGraph& g, const GraphOp& op, AttentionContext attention) {
    if (op.kind == OpKind::GroupNorm) return true;
    return attention == AttentionContext::Image && op.kind == OpKind::Attention && op.input2 < 0 &&
           g.value(op.input).kind == ValueKind::FeatureMap;
}

void checkPrimitive(const ModelGraph& g) {
    if (g.inputs().size() != 1 || g.outputs().size() != 1)
        bad("tiled graph: " + std::to_string(g.inputs().size()) + " inputs and " + std::to_string(g.outputs().size()) +
            " outputs; a tiled pass takes one feature map in and one out");
    for (int v : {g.inputs().front(), g.outputs().front()})
        if (g.value(v).kind != ValueKind::FeatureMap)
            bad("tiled graph: '" + g.value(v).name + "' is not a feature map");
    if (g.ops().empty()) bad("tiled graph: no ops");
    for (const GraphOp& op : g.ops())
        if (op.silu || op.preAdd >= 0 || op.scaleShift >= 0 || op.residual >= 0 || op.outputScale != 1.0f)
            bad("tiled graph: " + op.name + " is fused; cut the graph as its builder made it, before fuseForExecution");
}

// Pixels (finest resolution) that one output pixel of `op` reads beyond its own area: a
// convolution's padding side or its kernel's reach past the stride. Attention over a tile is
// the tiled pass's stated approximation, not a reach.
int reachOf(const ModelGraph& g, const GraphOp& op) {
    if (op.kind != OpKind::Conv) return 0;
    const int divisor = g.value(op.input).divisor;
    return std::max(op.padBegin, op.kernel - op.padBegin - op.stride) * divisor;
}

// Builds one segment: ops [begin, end) of the whole graph, the op at `begin` replaced when it is a cut.
class SegmentBuilder {
public:
    SegmentBuilder(const ModelGraph& whole, const SegmentOptions& options) : g_(whole), options_(options) {}

    GraphSegment build(std::size_t begin, std::size_t end, bool startsAtCut, const std::vector<int>& lastUse) {
        for (std::size_t i = begin; i < end; ++i) {
            const GraphOp& op = g_.ops()[i];
            if (i == begin && startsAtCut) {
                if (op.kind == OpKind::GroupNorm)
                    normStart(op, static_cast<int>(i));
                else
                    attentionStart(op, static_cast<int>(i));
            } else {
                copy(op);
            }
        }
        std::map<int, int> reach;  // segment value -> pixels it reads beyond itself
        for (const GraphOp& op : s_.ops()) {
            int r = 0;
            for (int v : op.operands()) r = std::max(r, reach[v]);
            reach[op.output] = r + reachOf(s_, op);
        }
        for (const auto& [whole, local] : value_) {
            if (produced_.count(whole) == 0 || lastUse[static_cast<std::size_t>(whole)] < static_cast<int>(end))
                continue;
            s_.markOutput(local);
            out_.outputs.push_back(whole);
            out_.radius = std::max(out_.radius, reach[local]);
        }
        out_.graph = std::move(s_);
        return std::move(out_);
    }

private:
    int mapped(int v) {
        if (v < 0) return -1;
        const auto it = value_.find(v);
        if (it != value_.end()) return it->second;
        const GraphValue& gv = g_.value(v);
        if (gv.kind != ValueKind::FeatureMap)
            bad("tiled graph: '" + gv.name +
                "' is live across a GroupNorm and is not a feature map; tiles carry feature maps only");
        const int id = s_.addInputValue(gv);
        value_[v] = id;
        out_.inputs.push_back({SegmentInput::Kind::Tile, v, -1});
        return id;
    }
    void mapParams(GraphOp& op) {
        for (int& p : op.params) {
            const auto it = param_.find(p);
            if (it != param_.end()) {
                p = it->second;
                continue;
            }
            const int id = s_.addParam(g_.param(p).name, g_.param(p).shape);
            param_[p] = id;
            p = id;
        }
    }
    void produced(int whole, int local) {
        value_[whole] = local;
        produced_.insert(whole);
    }
    void copy(const GraphOp& op) {
        GraphOp o = op;
        o.input = mapped(op.input);
        o.input2 = mapped(op.input2);
        mapParams(o);
        produced(op.output, s_.addOp(std::move(o), g_.value(op.output).name));
    }
    // GroupNorm(x) with known statistics: ScaleShift(x, v), v the statistics' affine form.
    void normStart(const GraphOp& gn, int index) {
        const int x = mapped(gn.input);
        const int v = s_.addInput(gn.name + ".statistics", ValueKind::Vector, 2 * g_.value(gn.input).channels);
        out_.inputs.push_back({SegmentInput::Kind::NormVector, gn.input, index});
        GraphOp o;
        o.kind = OpKind::ScaleShift;
        o.name = gn.name;
        o.input = x;
        o.input2 = v;
        produced(gn.output, s_.addOp(std::move(o), g_.value(gn.output).name));
    }
    // Attention over a feature map with the whole image's pixels as keys and values: the tile's
    // pixels as tokens, attending to a context of every pixel's tokens, back to a feature map.
    void attentionStart(const GraphOp& a, int index) {
        const GraphValue& h = g_.value(a.input);
        const int x = mapped(a.input);
        const int tokens = (options_.imageH / h.divisor) * (options_.imageW / h.divisor);
        const int context = s_.addTokenInput(a.name + ".context", tokens, h.channels);
        out_.inputs.push_back({SegmentInput::Kind::Context, a.input, index});
        GraphOp toTokens;
        toTokens.kind = OpKind::ToTokens;
        toTokens.name = a.name + ".to_tokens";
        toTokens.input = x;
        GraphOp attention = a;
        attention.input = s_.addOp(std::move(toTokens));
        attention.input2 = context;
        mapParams(attention);
        GraphOp toMap;
        toMap.kind = OpKind::ToFeatureMap;
        toMap.name = a.name + ".to_feature_map";
        toMap.input = s_.addOp(std::move(attention), g_.value(a.output).name + ".tokens");
        produced(a.output, s_.addOp(std::move(toMap), g_.value(a.output).name));
    }

    const ModelGraph& g_;
    const SegmentOptions& options_;
    ModelGraph s_;
    GraphSegment out_;
    std::map<int, int> value_, param_;  // whole graph id -> segment id
    std::set<int> produced_;            // whole values an op of this segment makes
};

// ---------------------------------------------------------------------------------- statistics

// The ScaleShift vector [scale_c - 1 | shift_c] of GroupNorm `gn` from its groups' {mean, biased
// variance} (double, as the CPU reference's GroupNorm).
std::vector<float> normVector(const std::vector<std::pair<double, double>>& moments, const GraphOp& gn,
                              const ModelGraph& g, const TensorMap& weights, int channels) {
    const auto& gamma = weights.at(g.param(gn.params.at(0)).name).data;
    const auto& beta = weights.at(g.param(gn.params.at(1)).name).data;
    const int perGroup = channels / gn.groups;
    std::vector<float> v(2 * static_cast<std::size_t>(channels));
    for (int group = 0; group < gn.groups; ++group) {
        const auto [mean, variance] = moments[static_cast<std::size_t>(group)];
        const double invStd = 1.0 / std::sqrt(variance + static_cast<double>(gn.eps));
        for (int c = group * perGroup; c < (group + 1) * perGroup; ++c) {
            const double scale = invStd * gamma[static_cast<std::size_t>(c)];
            v[static_cast<std::size_t>(c)] = static_cast<float>(scale - 1.0);
            v[static_cast<std::size_t>(channels + c)] =
                static_cast<float>(beta[static_cast<std::size_t>(c)] - mean * scale);
        }
    }
    return v;
}

// ---------------------------------------------------------------------------------- host store

// One value over the whole image at its resolution: channels x h x w float32.
struct Canvas {
    int channels = 0, h = 0, w = 0;
    int scale = 1;  // pixels of this value per cell
    std::vector<float> data;
    std::uint64_t bytes() const { return data.size() * sizeof(float); }
};

class HostCanvasStore final : public TiledCanvasStore {
public:
    explicit HostCanvasStore(Backend& backend) : backend_(backend) {}

    std::string where() const override { return "host"; }
    void allocate(int value, int channels, int h, int w, int scale) override {
        release(value);
        Canvas& c = canvases_[value];
        c.channels = channels;
        c.h = h;
        c.w = w;
        c.scale = scale;
        c.data.assign(static_cast<std::size_t>(channels) * h * w, 0.0f);
        held_ += c.bytes();
    }
    void release(int value) override {
        const auto it = canvases_.find(value);
        if (it == canvases_.end()) return;
        held_ -= it->second.bytes();
        canvases_.erase(it);
    }
    void write(int value, const float* nchw) override {
        Canvas& c = canvases_.at(value);
        std::copy(nchw, nchw + c.data.size(), c.data.begin());
    }
    std::vector<float> read(int value) override { return canvases_.at(value).data; }

    // Two passes in double over the region, row by row.
    std::vector<std::pair<double, double>> groupMoments(int value, int groups, int x0, int y0, int w, int h) override {
        const Canvas& x = canvases_.at(value);
        const int perGroup = x.channels / groups;
        const auto forEach = [&](int c0, auto&& f) {
            for (int c = c0; c < c0 + perGroup; ++c)
                for (int row = 0; row < h; ++row) {
                    const float* p = x.data.data() + (static_cast<std::size_t>(c) * x.h + y0 + row) * x.w + x0;
                    for (int col = 0; col < w; ++col) f(static_cast<double>(p[col]));
                }
        };
        std::vector<std::pair<double, double>> moments;
        for (int group = 0; group < groups; ++group) {
            double sum = 0, sq = 0;
            forEach(group * perGroup, [&](double e) { sum += e; });
            const double count = static_cast<double>(perGroup) * w * h, mean = sum / count;
            forEach(group * perGroup, [&](double e) { sq += (e - mean) * (e - mean); });
            moments.emplace_back(mean, sq / count);
        }
        return moments;
    }

    void prepare(const ModelGraph& graph, const TensorMap& weights, int batch, int tileH, int tileW) override {
        backend_.prepareGraph(graph, weights, batch, tileH, tileW);
        batch_ = batch;
        in_.assign(graph.inputs().size(), {});
        out_.assign(graph.outputs().size(), {});
        for (std::size_t i = 0; i < in_.size(); ++i)
            in_[i].resize(static_cast<std::size_t>(graph.elements(graph.inputs()[i], batch, tileH, tileW)));
        for (std::size_t i = 0; i < out_.size(); ++i)
            out_[i].resize(static_cast<std::size_t>(graph.elements(graph.outputs()[i], batch, tileH, tileW)));
        tokens_.clear();
        noted_ = false;
    }

    void run(const std::vector<StoreInput>& inputs, const std::vector<int>& outputs, const GraphTileGrid& grid,
             int first, int count) override {
        if (!noted_) noteBuffers(inputs);
        for (std::size_t i = 0; i < in_.size(); ++i) {
            const std::size_t per = in_[i].size() / static_cast<std::size_t>(batch_);
            const StoreInput& si = inputs[i];
            for (int t = 0; t < count; ++t) {
                float* dst = in_[i].data() + static_cast<std::size_t>(t) * per;
                const auto tile = static_cast<std::size_t>(first + t);
                if (si.kind == SegmentInput::Kind::Tile) {
                    cut(canvases_.at(si.value), grid.tiles[tile], dst);
                } else {
                    const std::vector<float>& data = si.kind == SegmentInput::Kind::Context ? tokens(si.value)
                                                     : si.vectors->size() == 1              ? si.vectors->front()
                                                                                            : (*si.vectors)[tile];
                    std::copy(data.begin(), data.end(), dst);
                }
            }
        }
        std::vector<const float*> inPtr;
        std::vector<float*> outPtr;
        for (auto& b : in_) inPtr.push_back(b.data());
        for (auto& b : out_) outPtr.push_back(b.data());
        backend_.run(inPtr, count, outPtr);
        for (std::size_t o = 0; o < out_.size(); ++o) {
            const std::size_t per = out_[o].size() / static_cast<std::size_t>(batch_);
            for (int t = 0; t < count; ++t)
                paste(out_[o].data() + static_cast<std::size_t>(t) * per,
                      grid.tiles[static_cast<std::size_t>(first + t)], canvases_.at(outputs[o]));
        }
    }
    std::uint64_t peakBytes() const override { return peak_; }

private:
    // The segment's host buffers besides the canvases: one batch's inputs and outputs, the
    // context tokens and the statistics vectors (one, or one per tile).
    void noteBuffers(const std::vector<StoreInput>& inputs) {
        std::uint64_t n = 0;
        for (const StoreInput& si : inputs) {
            if (si.kind == SegmentInput::Kind::Context) n += canvases_.at(si.value).data.size();
            if (si.kind == SegmentInput::Kind::NormVector)
                for (const auto& v : *si.vectors) n += v.size();
        }
        for (const auto& b : in_) n += b.size();
        for (const auto& b : out_) n += b.size();
        peak_ = std::max(peak_, held_ + n * sizeof(float));
        noted_ = true;
    }
    // Canvas `value` as tokens [pixels, C], made once per prepare.
    const std::vector<float>& tokens(int value) {
        auto it = tokens_.find(value);
        if (it != tokens_.end()) return it->second;
        const Canvas& x = canvases_.at(value);
        const std::size_t pixels = static_cast<std::size_t>(x.h) * x.w;
        std::vector<float> t(x.data.size());
        for (int c = 0; c < x.channels; ++c)
            for (std::size_t p = 0; p < pixels; ++p) t[p * x.channels + c] = x.data[c * pixels + p];
        return tokens_.emplace(value, std::move(t)).first->second;
    }
    // The tile's extent of canvas `c` into dst [C, h, w].
    static void cut(const Canvas& c, const GraphTile& t, float* dst) {
        const int h = t.h * c.scale, w = t.w * c.scale, x0 = t.x * c.scale, y0 = t.y * c.scale;
        for (int ch = 0; ch < c.channels; ++ch)
            for (int row = 0; row < h; ++row) {
                const float* src = c.data.data() + (static_cast<std::size_t>(ch) * c.h + y0 + row) * c.w + x0;
                std::copy(src, src + w, dst + (static_cast<std::size_t>(ch) * h + row) * w);
            }
    }
    // The tile's core out of src [C, h, w] (its extent) into canvas `c`.
    static void paste(const float* src, const GraphTile& t, Canvas& c) {
        const int h = t.h * c.scale, w = t.w * c.scale, s = c.scale;
        const int dx = (t.coreX - t.x) * s, dy = (t.coreY - t.y) * s, cw = t.coreW * s, chh = t.coreH * s;
        for (int ch = 0; ch < c.channels; ++ch)
            for (int row = 0; row < chh; ++row) {
                const float* from = src + (static_cast<std::size_t>(ch) * h + dy + row) * w + dx;
                std::copy(from, from + cw,
                          c.data.data() + (static_cast<std::size_t>(ch) * c.h + t.coreY * s + row) * c.w + t.coreX * s);
            }
    }

    Backend& backend_;
    std::map<int, Canvas> canvases_;
    std::map<int, std::vector<float>> tokens_;
    std::vector<std::vector<float>> in_, out_;
    int batch_ = 1;
    bool noted_ = false;
    std::uint64_t held_ = 0, peak_ = 0;
};

// ---------------------------------------------------------------------------------- the run

// Geometry shared by the run and the estimate: the image, its cells, the grid, the segments.
struct TiledLayout {
    int imageH = 0, imageW = 0, cell = 1;
    std::vector<GraphSegment> segments;
    std::vector<ModelGraph> execution;  // fuseForExecution of each segment's graph
    GraphTileGrid grid;
    int batch = 1, requiredHalo = 0;
    GraphTiling tiling;

    TiledLayout(const ModelGraph& primitive, int h, int w, const GraphTiling& t) : imageH(h), imageW(w), tiling(t) {
        checkPrimitive(primitive);
        if (t.tile < 1 || t.halo < -1 || t.batch < 1 || t.batch > kMaxTileBatch)
            bad("tiled graph: tile " + std::to_string(t.tile) + ", halo " + std::to_string(t.halo) + ", batch " +
                std::to_string(t.batch) +
                "; the tile must be at least 1 cell, the halo at least 0 (or -1: the "
                "smallest exact one), the batch 1 to " +
                std::to_string(kMaxTileBatch));
        cell = primitive.downsampleFactor();
        segments = cutAtNorms(primitive, SegmentOptions{t.attention, h, w});
        requiredHalo = tessera::requiredHalo(segments, cell);
        int halo = t.halo;
        if (halo < 0) halo = t.attention == AttentionContext::Tile ? std::max(requiredHalo, t.tile / 4) : requiredHalo;
        tiling.halo = halo;
        grid = GraphTileGrid::make(w / cell, h / cell, t.tile, halo);
        batch = std::min(t.batch, static_cast<int>(grid.tiles.size()));
        for (const GraphSegment& s : segments) execution.push_back(fuseForExecution(s.graph));
    }
    int tileH() const { return grid.extentH * cell; }
    int tileW() const { return grid.extentW * cell; }
    // Elements of segment input/output value `local` for a batch of tiles.
    std::int64_t elements(const GraphSegment& s, int local) const {
        return s.graph.elements(local, batch, tileH(), tileW());
    }
    std::uint64_t canvasBytes(const ModelGraph& whole, int value) const {
        const GraphValue& v = whole.value(value);
        return static_cast<std::uint64_t>(v.channels) * (imageH / v.divisor) * (imageW / v.divisor) * sizeof(float);
    }
    // Host bytes of segment k's buffers: one batch's inputs and outputs, the context tokens and
    // the statistics vectors (one, or one per tile).
    std::uint64_t bufferBytes(const ModelGraph& whole, std::size_t k) const {
        const GraphSegment& s = segments[k];
        std::int64_t n = 0;
        for (const SegmentInput& si : s.inputs) {
            const std::int64_t channels = whole.value(si.value).channels;
            if (si.kind == SegmentInput::Kind::Context)
                n += static_cast<std::int64_t>(canvasBytes(whole, si.value) / sizeof(float));
            if (si.kind == SegmentInput::Kind::NormVector)
                n += 2 * channels *
                     (tiling.statistics == NormStatistics::PerTile ? static_cast<std::int64_t>(grid.tiles.size()) : 1);
        }
        for (int v : s.graph.inputs()) n += elements(s, v);
        for (int v : s.graph.outputs()) n += elements(s, v);
        return static_cast<std::uint64_t>(n) * sizeof(float);
    }
    TiledGraphReport report() const {
        TiledGraphReport r;
        r.grid = grid;
        r.cellPixels = cell;
        r.requiredHalo = requiredHalo;
        r.segments = static_cast<int>(segments.size());
        r.attention = tiling.attention;
        r.statistics = tiling.statistics;
        return r;
    }
};

class TiledRun {
public:
    TiledRun(TiledCanvasStore& store, const ModelGraph& whole, const TensorMap& weights, const TiledLayout& layout,
             TiledGraphReport& report)
        : store_(store), g_(whole), weights_(weights), L_(layout), report_(report) {}

    // One image: the graph's input at its resolution in, its output out.
    std::vector<float> run(const float* input) {
        const int in = g_.inputs().front(), out = g_.outputs().front();
        allocate(in);
        store_.write(in, input);
        for (std::size_t k = 0; k < L_.segments.size(); ++k) runSegment(k);
        std::vector<float> image = store_.read(out);
        for (int v : live_) store_.release(v);
        live_.clear();
        return image;
    }

private:
    void allocate(int value) {
        const GraphValue& v = g_.value(value);
        if (L_.cell % v.divisor != 0)
            bad("tiled graph: '" + v.name + "' has divisor " + std::to_string(v.divisor) + ", which does not divide " +
                std::to_string(L_.cell));
        store_.allocate(value, v.channels, L_.imageH / v.divisor, L_.imageW / v.divisor, L_.cell / v.divisor);
        live_.insert(value);
    }

    void runSegment(std::size_t k) {
        const GraphSegment& s = L_.segments[k];
        // Per input: the statistics vectors (NormVector: one shared, or one per tile).
        std::vector<std::vector<std::vector<float>>> vectors(s.inputs.size());
        std::vector<StoreInput> feeds;
        for (std::size_t i = 0; i < s.inputs.size(); ++i) {
            const SegmentInput& si = s.inputs[i];
            if (si.kind == SegmentInput::Kind::NormVector) vectors[i] = normVectors(si);
            feeds.push_back(StoreInput{si.kind, si.value, &vectors[i]});
        }
        for (int v : s.outputs) allocate(v);
        store_.prepare(L_.execution[k], weights_, L_.batch, L_.tileH(), L_.tileW());
        ++report_.prepares;
        const int tiles = static_cast<int>(L_.grid.tiles.size());
        for (int first = 0; first < tiles; first += L_.batch) {
            store_.run(feeds, s.outputs, L_.grid, first, std::min(L_.batch, tiles - first));
            ++report_.batchRuns;
        }
        for (int v : s.releases)
            if (live_.erase(v) != 0) store_.release(v);
    }

    // GroupNorm si.op's ScaleShift vectors from the statistics of canvas si.value: one for the
    // whole image, or one per tile's extent.
    std::vector<std::vector<float>> normVectors(const SegmentInput& si) {
        const GraphOp& gn = g_.ops()[static_cast<std::size_t>(si.op)];
        const GraphValue& x = g_.value(si.value);
        const int h = L_.imageH / x.divisor, w = L_.imageW / x.divisor, scale = L_.cell / x.divisor;
        if (L_.tiling.statistics == NormStatistics::WholeImage)
            return {normVector(store_.groupMoments(si.value, gn.groups, 0, 0, w, h), gn, g_, weights_, x.channels)};
        std::vector<std::vector<float>> perTile;
        for (const GraphTile& t : L_.grid.tiles)
            perTile.push_back(
                normVector(store_.groupMoments(si.value, gn.groups, t.x * scale, t.y * scale, t.w * scale, t.h * scale),
                           gn, g_, weights_, x.channels));
        return perTile;
    }

    TiledCanvasStore& store_;
    const ModelGraph& g_;
    const TensorMap& weights_;
    const TiledLayout& L_;
    TiledGraphReport& report_;
    std::set<int> live_;  // values with a canvas in the store
};

// The host store's peak: the canvases live at each segment plus its buffers, float32.
std::uint64_t hostPeak(const ModelGraph& primitive, const TiledLayout& layout) {
    std::uint64_t held = layout.canvasBytes(primitive, primitive.inputs().front()), peak = 0;
    for (std::size_t k = 0; k < layout.segments.size(); ++k) {
        const GraphSegment& s = layout.segments[k];
        for (int v : s.outputs) held += layout.canvasBytes(primitive, v);
        peak = std::max(peak, held + layout.bufferBytes(primitive, k));
        for (int v : s.releases) held -= layout.canvasBytes(primitive, v);
    }
    return peak;
}

// `t` is [B, C, h, w] of the graph's input (C its channels) with B, h, w in range and the image
// (h, w times the input's divisor) a multiple of the graph's largest divisor. Messages name the input.
void checkGraphInput(const ModelGraph& g, const HostTensor& t) {
    const GraphValue& v = g.value(g.inputs().front());
    const std::int64_t f = g.downsampleFactor(), multiple = std::max<std::int64_t>(1, f / v.divisor);
    const std::int64_t maxSide = kMaxTiledSide / v.divisor / multiple * multiple;
    const std::string expected = "; expected [batch 1 to " + std::to_string(kMaxBatch) + ", " +
                                 std::to_string(v.channels) + ", height, width], each side a multiple of " +
                                 std::to_string(multiple) + " from " + std::to_string(multiple) + " to " +
                                 std::to_string(maxSide) + " (images up to " + std::to_string(kMaxTiledSide) + " px)";
    const bool ok = t.shape.size() == 4 && t.shape[0] >= 1 && t.shape[0] <= kMaxBatch && t.shape[1] == v.channels &&
                    std::all_of(t.shape.begin() + 2, t.shape.end(), [&](std::int64_t side) {
                        return side >= multiple && side <= maxSide && side % multiple == 0;
                    });
    if (!ok) bad(v.name + ": shape " + shapeToString(t.shape) + expected);
    if (static_cast<std::int64_t>(t.data.size()) != t.numel())
        bad(v.name + ": " + std::to_string(t.data.size()) + " values for shape " + shapeToString(t.shape));
}

}  // namespace

// ---------------------------------------------------------------------------------- public

std::unique_ptr<TiledCanvasStore> makeHostCanvasStore(Backend& backend) {
    return std::make_unique<HostCanvasStore>(backend);
}

std::unique_ptr<TiledCanvasStore> Backend::makeCanvasStore(std::uint64_t) { return nullptr; }

GraphTileGrid GraphTileGrid::make(int width, int height, int tile, int halo) {
    if (width < 1 || height < 1 || tile < 1 || halo < 0)
        bad("tile grid: " + std::to_string(width) + " x " + std::to_string(height) + " cells, tile " +
            std::to_string(tile) + ", halo " + std::to_string(halo) +
            "; the image and the tile must be at least 1 cell, the halo at least 0");
    GraphTileGrid grid;
    grid.width = width;
    grid.height = height;
    grid.tile = tile;
    grid.halo = halo;
    const AxisSplit xs = splitAxis(width, tile, halo), ys = splitAxis(height, tile, halo);
    grid.cols = static_cast<int>(xs.start.size());
    grid.rows = static_cast<int>(ys.start.size());
    grid.extentW = xs.extent;
    grid.extentH = ys.extent;
    for (int r = 0; r < grid.rows; ++r)
        for (int c = 0; c < grid.cols; ++c) {
            const auto rc = static_cast<std::size_t>(r), cc = static_cast<std::size_t>(c);
            grid.tiles.push_back(GraphTile{xs.start[cc], ys.start[rc], xs.extent, ys.extent, xs.coreStart[cc],
                                           ys.coreStart[rc], xs.coreEnd[cc] - xs.coreStart[cc],
                                           ys.coreEnd[rc] - ys.coreStart[rc]});
        }
    return grid;
}

std::vector<GraphSegment> cutAtNorms(const ModelGraph& primitive, const SegmentOptions& options) {
    checkPrimitive(primitive);
    const std::vector<int> lastUse = primitive.lastUse();
    std::vector<std::size_t> cuts;
    for (std::size_t i = 0; i < primitive.ops().size(); ++i)
        if (isCut(primitive, primitive.ops()[i], options.attention)) cuts.push_back(i);
    std::vector<std::size_t> starts{0};
    for (std::size_t c : cuts)
        if (c != 0) starts.push_back(c);
    std::vector<GraphSegment> segments;
    std::set<int> alive{primitive.inputs().front()};  // values with a canvas
    for (std::size_t k = 0; k < starts.size(); ++k) {
        const std::size_t begin = starts[k], end = k + 1 < starts.size() ? starts[k + 1] : primitive.ops().size();
        const bool startsAtCut = std::find(cuts.begin(), cuts.end(), begin) != cuts.end();
        GraphSegment s = SegmentBuilder(primitive, options).build(begin, end, startsAtCut, lastUse);
        alive.insert(s.outputs.begin(), s.outputs.end());
        for (auto it = alive.begin(); it != alive.end();) {
            if (lastUse[static_cast<std::size_t>(*it)] < static_cast<int>(end)) {
                s.releases.push_back(*it);
                it = alive.erase(it);
            } else {
                ++it;
            }
        }
        segments.push_back(std::move(s));
    }
    return segments;
}

int requiredHalo(const std::vector<GraphSegment>& segments, int cellPixels) {
    int radius = 0;
    for (const GraphSegment& s : segments) radius = std::max(radius, s.radius);
    return static_cast<int>(ceilDiv(radius, std::max(cellPixels, 1)));
}

VaeTilingRecord TiledGraphReport::record() const {
    // Filled field by field like other parameter blocks: alike in shape only.
    VaeTilingRecord r;
    r.cols = grid.cols;
    r.rows = grid.rows;
    r.tile = grid.tile;
    r.halo = grid.halo;
    r.requiredHalo = requiredHalo;
    r.evaluatedW = grid.extentW * cellPixels;
    r.evaluatedH = grid.extentH * cellPixels;
    r.wholeImageNorm = statistics == NormStatistics::WholeImage;
    r.wholeImageAttention = attention == AttentionContext::Image;
    r.canvases = canvases;
    r.hostPeakBytes = hostPeakBytes;
    r.devicePeakBytes = canvases == "host" ? 0 : storePeakBytes;
    return r;
}

std::string TiledGraphReport::describe() const { return tessera::describe(record()); }

HostTensor runTiledGraph(Backend& backend, const ModelGraph& primitive, const TensorMap& weights,
                         const HostTensor& input, const GraphTiling& tiling, TiledGraphReport* report) {
    checkPrimitive(primitive);
    checkGraphInput(primitive, input);
    const GraphValue& in = primitive.value(primitive.inputs().front());
    const int imageH = static_cast<int>(input.shape[2]) * in.divisor,
              imageW = static_cast<int>(input.shape[3]) * in.divisor;
    const TiledLayout layout(primitive, imageH, imageW, tiling);
    TiledGraphReport r = layout.report();
    std::unique_ptr<TiledCanvasStore> store = backend.makeCanvasStore(hostPeak(primitive, layout));
    if (!store) store = makeHostCanvasStore(backend);
    TiledRun run(*store, primitive, weights, layout, r);
    const int outValue = primitive.outputs().front();
    HostTensor out;
    out.shape = primitive.shape(outValue, static_cast<int>(input.shape[0]), imageH, imageW);
    const std::size_t inPer = static_cast<std::size_t>(input.numel() / input.shape[0]);
    for (std::int64_t b = 0; b < input.shape[0]; ++b) {
        const std::vector<float> image = run.run(input.data.data() + static_cast<std::size_t>(b) * inPer);
        out.data.insert(out.data.end(), image.begin(), image.end());
    }
    r.canvases = store->where();
    r.storePeakBytes = store->peakBytes();
    r.hostPeakBytes = r.canvases == "host" ? r.storePeakBytes : 0;
    if (report) *report = r;
    return out;
}

std::uint64_t graphActivationBytes(const ModelGraph& graph, int batch, int h, int w, int bytesPerValue) {
    const std::vector<int> lastUse = graph.lastUse();
    std::vector<std::uint64_t> bytes(graph.values().size());
    for (std::size_t v = 0; v < bytes.size(); ++v)
        bytes[v] = static_cast<std::uint64_t>(graph.elements(static_cast<int>(v), batch, h, w)) *
                   static_cast<std::uint64_t>(bytesPerValue);
    std::vector<char> freed(bytes.size(), 0);
    std::uint64_t live = 0, peak = 0;
    for (int v : graph.inputs()) live += bytes[static_cast<std::size_t>(v)];
    for (std::size_t i = 0; i < graph.ops().size(); ++i) {
        const GraphOp& op = graph.ops()[i];
        live += bytes[static_cast<std::size_t>(op.output)];
        std::uint64_t scores = 0;
        if (op.kind == OpKind::Attention)
            scores = static_cast<std::uint64_t>(batch) * op.heads * graph.rows(op.input, h, w) *
                     graph.rows(op.input2 >= 0 ? op.input2 : op.input, h, w) * sizeof(float);
        peak = std::max(peak, live + scores);
        std::vector<int> touched = op.operands();
        touched.push_back(op.output);
        for (int v : touched) {
            const auto u = static_cast<std::size_t>(v);
            if (!freed[u] && lastUse[u] <= static_cast<int>(i)) {
                live -= bytes[u];
                freed[u] = 1;
            }
        }
    }
    return std::max(peak, live);
}

std::int64_t largestTensorElements(const ModelGraph& graph, int batch, int h, int w, int channelMultiple) {
    const std::int64_t m = std::max(channelMultiple, 1);
    std::int64_t largest = 0;
    for (std::size_t v = 0; v < graph.values().size(); ++v) {
        const GraphValue& g = graph.value(static_cast<int>(v));
        std::int64_t n = graph.elements(static_cast<int>(v), batch, h, w);
        if (g.kind == ValueKind::FeatureMap && g.channels > 0) n = n / g.channels * ((g.channels + m - 1) / m * m);
        largest = std::max(largest, n);
    }
    return largest;
}

TiledGraphReport estimateTiledGraph(const ModelGraph& primitive, int imageH, int imageW, const GraphTiling& tiling,
                                    int bytesPerValue) {
    const TiledLayout layout(primitive, imageH, imageW, tiling);
    TiledGraphReport r = layout.report();
    r.hostPeakBytes = hostPeak(primitive, layout);
    for (const ModelGraph& segment : layout.execution)
        r.deviceBytes = std::max(
            r.deviceBytes, graphActivationBytes(segment, layout.batch, layout.tileH(), layout.tileW(), bytesPerValue));
    return r;
}

HostTensor decodeTiled(Backend& backend, const VaeModel& model, const HostTensor& latent, const GraphTiling& tiling,
                       TiledGraphReport* report) {
    return runTiledGraph(backend, buildVaeDecoderGraph(model.config()), model.tensors(), latent, tiling, report);
}

HostTensor encodeTiled(Backend& backend, const VaeModel& model, const HostTensor& image, const GraphTiling& tiling,
                       TiledGraphReport* report) {
    return runTiledGraph(backend, buildVaeEncoderGraph(model.config()), model.tensors(), image, tiling, report);
}

VaePassPlan planVaePass(VaeTiling mode, const ModelGraph& primitive, int imageH, int imageW,
                        const std::optional<VaeMemoryBudget>& budget) {
    VaePassPlan plan;
    const int bytesPerValue = budget ? budget->bytesPerValue : 4;
    const ModelGraph execution = fuseForExecution(primitive);
    plan.untiledBytes = graphActivationBytes(execution, 1, imageH, imageW, bytesPerValue);
    plan.untiledLargest = largestTensorElements(execution, 1, imageH, imageW, kChannelPadding);
    const std::int64_t limit = budget ? budget->maxTensorElements : 0;
    const bool tooLarge = limit > 0 && plan.untiledLargest > limit;
    const std::string untiled = "activations " + formatBytes(plan.untiledBytes);
    const std::string budgetText = budget ? formatBytes(budget->bytes) + " (" + budget->source + ")" : std::string();
    const std::string largest = "its largest tensor has " + std::to_string(plan.untiledLargest) +
                                " elements, over the " + std::to_string(limit) + " the device takes";
    if (mode == VaeTiling::Off) {
        plan.reason = "vae_tiling off" + (tooLarge ? ", although " + largest : std::string());
        return plan;
    }
    if (mode == VaeTiling::Auto && !tooLarge && (!budget || plan.untiledBytes <= budget->bytes)) {
        plan.reason = budget ? untiled + " of " + budgetText : "vae_tiling auto, no memory budget known";
        return plan;
    }
    plan.tiled = true;
    const bool fits = !budget || plan.untiledBytes <= budget->bytes;
    if (mode == VaeTiling::On)
        plan.reason = "vae_tiling on";
    else if (!fits)
        plan.reason = untiled + " exceed " + budgetText + (tooLarge ? ", and " + largest : std::string());
    else
        plan.reason = untiled + " of " + budgetText + ", but " + largest;
    plan.tiling.tile = kDefaultTile;
    // On the host the canvases share the budget with the tile's activations.
    const auto need = [&](const TiledGraphReport& r) {
        return r.deviceBytes + (budget && budget->sharedWithHost ? r.hostPeakBytes : 0);
    };
    const auto tileTooLarge = [&] {
        if (limit <= 0) return false;
        const int h = plan.estimate.grid.extentH * plan.estimate.cellPixels,
                  w = plan.estimate.grid.extentW * plan.estimate.cellPixels;
        return largestTensorElements(execution, plan.tiling.batch, h, w, kChannelPadding) > limit;
    };
    plan.estimate = estimateTiledGraph(primitive, imageH, imageW, plan.tiling, bytesPerValue);
    while (budget && (need(plan.estimate) > budget->bytes || tileTooLarge()) && plan.tiling.tile > kMinPlannedTile) {
        plan.tiling.tile /= 2;
        plan.estimate = estimateTiledGraph(primitive, imageH, imageW, plan.tiling, bytesPerValue);
    }
    // A device's own memory: batch tiles per segment call (fewer, larger launches) while the batch's
    // activations and the canvases (at the device's bytes per value) fit the budget.
    if (budget && !budget->sharedWithHost) {
        const auto deviceNeed = [&](const TiledGraphReport& r) {
            return r.deviceBytes + r.hostPeakBytes / sizeof(float) * static_cast<std::uint64_t>(bytesPerValue);
        };
        const int tiles = static_cast<int>(plan.estimate.grid.tiles.size());
        while (plan.tiling.batch * 2 <= std::min(kMaxPlannedBatch, tiles)) {
            GraphTiling wider = plan.tiling;
            wider.batch *= 2;
            const TiledGraphReport estimate = estimateTiledGraph(primitive, imageH, imageW, wider, bytesPerValue);
            const int h = estimate.grid.extentH * estimate.cellPixels, w = estimate.grid.extentW * estimate.cellPixels;
            if (deviceNeed(estimate) > budget->bytes ||
                (limit > 0 && largestTensorElements(execution, wider.batch, h, w, kChannelPadding) > limit))
                break;
            plan.tiling = wider;
            plan.estimate = estimate;
        }
    }
    return plan;
}

HostTensor runVaePass(Backend& backend, const VaeModel& model, const HostTensor& input, bool decoder, VaeTiling mode,
                      const std::optional<VaeMemoryBudget>& budget, VaePassRecord& pass) {
    const ModelGraph primitive = decoder ? buildVaeDecoderGraph(model.config()) : buildVaeEncoderGraph(model.config());
    checkGraphInput(primitive, input);
    const int divisor = primitive.value(primitive.inputs().front()).divisor;
    const int imageH = static_cast<int>(input.shape[2]) * divisor, imageW = static_cast<int>(input.shape[3]) * divisor;
    const VaePassPlan plan = planVaePass(mode, primitive, imageH, imageW, budget);
    pass = VaePassRecord{};
    pass.width = imageW;
    pass.height = imageH;
    pass.tiled = plan.tiled;
    pass.reason = plan.reason;
    if (!plan.tiled) return decoder ? model.decode(backend, input) : model.encode(backend, input);
    TiledGraphReport report;
    HostTensor out = runTiledGraph(backend, primitive, model.tensors(), input, plan.tiling, &report);
    pass.tiling = report.record();
    return out;
}

HostTensor runVaePass(Backend& backend, const VaeModel& model, const HostTensor& input, bool decoder, VaeTiling mode,
                      const std::optional<VaeMemoryBudget>& budget, std::string* description) {
    VaePassRecord pass;
    HostTensor out = runVaePass(backend, model, input, decoder, mode, budget, pass);
    if (description) *description = describeVaePass(pass);
    return out;
}

}  // namespace tessera
