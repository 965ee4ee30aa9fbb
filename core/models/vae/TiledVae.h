// TiledVae: the VAE's decoder and encoder evaluated tile by tile with GroupNorm statistics of
// the whole image, so that a tiled decode matches an untiled one (where A1111's and ComfyUI's
// tilers, normalising each tile on its own, leave seams). Qt-free.
//
// How (docs in the comments below; the design is general over a primitive ModelGraph):
//  * The graph, before fuseForExecution, is cut before every GroupNorm (and, by default, before
//    every attention over a feature map) into segments. A segment that starts at a GroupNorm
//    starts with ScaleShift(x, v) instead, v = [rstd*gamma - 1 | beta - mean*rstd*gamma] from
//    the statistics of x over the whole image; one that starts at an attention reads its keys
//    and values from the whole image (a context of every pixel's tokens), its queries from the
//    tile. The values live across a cut (found by a liveness pass) are each segment's inputs
//    and outputs.
//  * The image is a grid of cells (one latent pixel: the graph's largest divisor in pixels).
//    Tiles own a core of cells and read a halo around it; every tile's extent (core + halo,
//    kept inside the image) has the same size, so each segment is prepared once.
//  * Lock-step: every segment runs on every tile; each output's core is pasted into a
//    whole-image canvas of that value, and the next segment cuts its tiles (halo included)
//    from those canvases. Convolutions therefore see their true neighbours at every cut, and
//    the result equals the untiled one (up to float rounding) once the halo covers the
//    receptive field of one segment (requiredHalo, 2 latent pixels for SD's VAE). Only an
//    attention left tile-local (AttentionContext::Tile) approximates.
//  * Memory: the canvases of the values live at a cut (about the whole-image activation of 2-3
//    values) plus one tile batch's buffers, in a TiledCanvasStore: host memory by default (float32),
//    or the backend's own (the CUDA backend's device memory, in its activation type, when they
//    fit); and the backend's plan of one segment for one tile batch.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/graph/Backend.h"  // Backend, TensorMap
#include "core/graph/ModelGraph.h"
#include "core/run/RunConfig.h"
#include "core/run/RunRecord.h"  // VaeTilingRecord, VaePassRecord

namespace tessera {

class VaeModel;

// What the attention of a tiled pass sees as keys and values.
enum class AttentionContext {
    Image,  // every pixel of the whole image: exact
    Tile,   // the tile's own extent only (what other tilers do): an approximation
};
// Where each GroupNorm takes its mean and variance from.
enum class NormStatistics {
    WholeImage,  // the whole image: a tiled pass matches the untiled one
    PerTile,     // each tile's extent alone (A1111's and ComfyUI's tilers): visible seams. For comparison.
};

// One tile: its extent (what it reads and evaluates) and its core (what it writes), in cells.
struct GraphTile {
    int x = 0, y = 0, w = 0, h = 0;  // extent
    int coreX = 0, coreY = 0, coreW = 0, coreH = 0;
};

// Tiles over width x height cells: each axis split into ceil(length / tile) cores of nearly
// equal size (they differ by at most one cell), every extent the largest core plus `halo`
// cells on each side, shifted inside the image; one tile on an axis whose largest core plus
// two halos covers it. Every core has at least `halo` cells of context on each side, or the
// image edge. Throws std::invalid_argument for width/height/tile < 1 or halo < 0.
struct GraphTileGrid {
    int width = 0, height = 0, tile = 0, halo = 0;
    int cols = 0, rows = 0;
    int extentW = 0, extentH = 0;  // every tile's extent, cells
    std::vector<GraphTile> tiles;  // row-major
    static GraphTileGrid make(int width, int height, int tile, int halo);
};

// One piece of a graph cut at its GroupNorms (and attentions).
struct SegmentInput {
    enum class Kind {
        Tile,        // a tile of the canvas of whole-graph value `value` (a feature map)
        NormVector,  // [2C]: the ScaleShift form of GroupNorm `op` with the statistics of `value`
        Context,     // the whole canvas of `value` as tokens [pixels, C] (keys and values of attention `op`)
    };
    Kind kind = Kind::Tile;
    int value = -1;
    int op = -1;  // NormVector, Context: the whole graph's op
};

struct GraphSegment {
    ModelGraph graph;                  // primitive; backends run fuseForExecution(graph)
    std::vector<SegmentInput> inputs;  // per graph.inputs(), in order
    std::vector<int> outputs;          // per graph.outputs(): the whole graph's value ids
    std::vector<int> releases;         // whole-graph values no later segment reads (canvases to free)
    int radius = 0;                    // pixels (finest resolution) an output reads beyond itself
};

struct SegmentOptions {
    AttentionContext attention = AttentionContext::Image;
    int imageH = 0, imageW = 0;  // pixels: the context token counts (AttentionContext::Image)
};

// Cuts `primitive` (a graph with one feature-map input and one feature-map output, as its
// builder makes it: no fused ops) before every GroupNorm and, with AttentionContext::Image,
// every attention over a feature map. Throws std::invalid_argument for a graph it cannot cut
// (fused ops, a value other than a feature map live across a cut, several inputs/outputs).
std::vector<GraphSegment> cutAtNorms(const ModelGraph& primitive, const SegmentOptions& options);
// The halo, in cells of `cellPixels` pixels, that covers every segment's radius: with it (and
// attention over the image) a tiled pass is exact up to float rounding.
int requiredHalo(const std::vector<GraphSegment>& segments, int cellPixels);

struct GraphTiling {
    int tile = 64;  // core edge, cells (latent pixels)
    int halo = -1;  // cells of context on each side; -1: requiredHalo (with AttentionContext::Tile at least tile / 4)
    int batch = 1;  // tiles per Backend::run
    AttentionContext attention = AttentionContext::Image;
    NormStatistics statistics = NormStatistics::WholeImage;
};

// What a tiled pass did (or, from estimateTiledGraph, would do).
struct TiledGraphReport {
    GraphTileGrid grid;
    int cellPixels = 1;  // pixels of one cell at the graph's finest resolution
    int requiredHalo = 0;
    int segments = 0, prepares = 0, batchRuns = 0;
    AttentionContext attention = AttentionContext::Image;
    NormStatistics statistics = NormStatistics::WholeImage;
    std::uint64_t hostPeakBytes = 0;   // canvases + one batch's host buffers, float32
    std::string canvases = "host";     // where the canvases were kept (TiledCanvasStore::where)
    std::uint64_t storePeakBytes = 0;  // runTiledGraph: the store's peak (device bytes for a device store)
    std::uint64_t deviceBytes = 0;     // estimateTiledGraph: the largest segment's activations for one batch
    // What the run record keeps of it (core/run/RunRecord.h).
    VaeTilingRecord record() const;
    // describe(record()): "2x2 tiles of 64 latent px + 2 halo (544x544 px evaluated), whole-image
    // GroupNorm, attention over the whole image, host peak 1.2 GiB"
    std::string describe() const;
};

// Where a tiled pass keeps its whole-image canvases (one per value live at a cut) and how a
// segment's tiles move between them and the backend. The host store (the default) keeps
// float32 NCHW canvases in host memory and runs the backend on host buffers, as the CPU does;
// a backend may keep them where it computes (Backend::makeCanvasStore: the CUDA backend's are in
// device memory, tiles cut and pasted there). The tiled algorithm (which tiles, which canvases,
// when statistics are taken) is the same over either. Cells are in the canvas's own pixels
// times `scale`.
struct StoreInput {
    SegmentInput::Kind kind = SegmentInput::Kind::Tile;
    int value = -1;  // Tile, Context: the canvas
    // NormVector: the [2C] vector, one shared by every tile or one per tile of the grid.
    const std::vector<std::vector<float>>* vectors = nullptr;
};
class TiledCanvasStore {
public:
    virtual ~TiledCanvasStore() = default;
    // "host" / "device": where the canvases are (for the report).
    virtual std::string where() const = 0;
    // A zeroed canvas of whole-graph value `value`: channels x h x w pixels, `scale` pixels a cell.
    virtual void allocate(int value, int channels, int h, int w, int scale) = 0;
    virtual void release(int value) = 0;
    virtual void write(int value, const float* nchw) = 0;  // the canvas from host float32 NCHW
    virtual std::vector<float> read(int value) = 0;        // the canvas as host float32 NCHW
    // Per group of `groups` consecutive channels: {mean, biased variance} over the canvas pixels
    // [x0, x0 + w) x [y0, y0 + h) of its channels.
    virtual std::vector<std::pair<double, double>> groupMoments(int value, int groups, int x0, int y0, int w,
                                                                int h) = 0;
    // The backend made ready for segment graph `graph` (fused) on `batch` tiles of tileH x tileW pixels.
    virtual void prepare(const ModelGraph& graph, const TensorMap& weights, int batch, int tileH, int tileW) = 0;
    // The prepared segment over tiles[first, first + count) of `grid` (count <= the prepared
    // batch): input i per inputs[i] (a tile's extent of a canvas, a statistics vector, a whole
    // canvas as [pixels, C] tokens), each output o's tile cores pasted into canvas outputs[o].
    virtual void run(const std::vector<StoreInput>& inputs, const std::vector<int>& outputs, const GraphTileGrid& grid,
                     int first, int count) = 0;
    // The most bytes the store has held at once (canvases and tile buffers) where it keeps them.
    virtual std::uint64_t peakBytes() const = 0;
};

// The host store over `backend` (what runTiledGraph uses when the backend offers none).
std::unique_ptr<TiledCanvasStore> makeHostCanvasStore(Backend& backend);

// Runs `primitive` over `input` (its one input, [B, C, h, w] at the input's divisor; the image
// in pixels a multiple of the graph's largest divisor) tile by tile on `backend`, preparing it
// once per segment (and image). Returns the graph's output for the whole image. `weights` as
// for Backend::prepareGraph. Throws std::invalid_argument for a bad shape or tiling.
HostTensor runTiledGraph(Backend& backend, const ModelGraph& primitive, const TensorMap& weights,
                         const HostTensor& input, const GraphTiling& tiling, TiledGraphReport* report = nullptr);

// Activation bytes of `graph` (as a backend runs it: fused) for `batch` tiles of h x w pixels:
// the largest set of values live at once, plus every attention's score matrix held whole
// (queries x keys per head; a bound: fused attention kernels hold less).
std::uint64_t graphActivationBytes(const ModelGraph& graph, int batch, int h, int w, int bytesPerValue);
// The report runTiledGraph would give for a single image of imageH x imageW pixels (host peak
// exact; deviceBytes per graphActivationBytes), without running anything.
TiledGraphReport estimateTiledGraph(const ModelGraph& primitive, int imageH, int imageW, const GraphTiling& tiling,
                                    int bytesPerValue);

// ---- The VAE --------------------------------------------------------------------------------

// VaeModel::decode / encode tile by tile (the same inputs, outputs and shape checks; the latent
// and image may be larger than the whole-graph limit). Cells are latent pixels.
HostTensor decodeTiled(Backend& backend, const VaeModel& model, const HostTensor& latent, const GraphTiling& tiling,
                       TiledGraphReport* report = nullptr);
HostTensor encodeTiled(Backend& backend, const VaeModel& model, const HostTensor& image, const GraphTiling& tiling,
                       TiledGraphReport* report = nullptr);

// The memory a device lets the VAE use: CPU, the host memory the process may still allocate;
// a GPU, its free device memory. bytesPerValue: what one activation element takes there.
struct VaeMemoryBudget {
    std::uint64_t bytes = 0;
    int bytesPerValue = 4;
    bool sharedWithHost = true;  // the host's memory: a tiled pass's canvases count against it too
    std::string source;          // "host: MemAvailable in /proc/meminfo", "device free memory"
    // The most elements one tensor may have there; 0: no limit. CUDA: 2^31 - 1 (cuDNN refuses
    // larger tensors: the SD decoder's 256-channel activations at 4096x4096 have 2^32).
    std::int64_t maxTensorElements = 0;
};

// The most elements of one value of `graph` (as a backend runs it: fused) for `batch` tiles of
// h x w pixels, channels padded to a multiple of `channelMultiple` (the CUDA backend pads to 8).
std::int64_t largestTensorElements(const ModelGraph& graph, int batch, int h, int w, int channelMultiple = 1);

// Whether a decode or encode of an image of imageH x imageW pixels runs tiled, and how:
//   off   untiled;
//   on    tiled (64-cell tiles, halved while one tile batch does not fit the budget);
//   auto  untiled when its activations fit the budget (or the budget is unknown) and no tensor
//         exceeds the budget's maxTensorElements, else as on.
// A tiled plan's tile is halved while one tile batch (plus, where the budget is the host's, the
// canvases) does not fit the budget or a tile's tensor exceeds maxTensorElements; where the
// budget is a device's own, its batch is then doubled (up to 8 tiles) while the batch's
// activations and the canvases at bytesPerValue still fit and no tensor exceeds the limit.
struct VaePassPlan {
    bool tiled = false;
    GraphTiling tiling;
    std::uint64_t untiledBytes = 0;   // graphActivationBytes of the whole image
    std::int64_t untiledLargest = 0;  // largestTensorElements of the whole image (channels padded to 8)
    TiledGraphReport estimate;        // tiled only
    std::string reason;               // "vae_tiling on", "activations 3.0 GiB exceed 1.0 GiB (host: MemAvailable ...)"
};
VaePassPlan planVaePass(VaeTiling mode, const ModelGraph& primitive, int imageH, int imageW,
                        const std::optional<VaeMemoryBudget>& budget);

// A decode (decoder true) or encode as planVaePass plans it for `budget`, on `backend`;
// `pass` receives what the run record keeps of it: the image's size in pixels, whole or tiled,
// planVaePass's reason and, tiled, the tiling (pass.ms is left to the caller, who times the phase).
HostTensor runVaePass(Backend& backend, const VaeModel& model, const HostTensor& input, bool decoder, VaeTiling mode,
                      const std::optional<VaeMemoryBudget>& budget, VaePassRecord& pass);
// The same; `description` (when non-null) receives describeVaePass of it: "untiled (activations
// 1.1 GiB of 30.2 GiB (host: MemAvailable in /proc/meminfo))" / "tiled 2x2 tiles of 64 latent px + 2 halo ...".
HostTensor runVaePass(Backend& backend, const VaeModel& model, const HostTensor& input, bool decoder, VaeTiling mode,
                      const std::optional<VaeMemoryBudget>& budget, std::string* description);

}  // namespace tessera
