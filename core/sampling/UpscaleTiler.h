// UpscaleTiler: an upscale model (core/models/upscale/UpscaleModel.h) run over an image of any size
// in tiles, on any device that runs a ModelGraph (UpscaleDevice: the CPU engine's in
// core/cpu/CpuUpscaler.h), with the memory it takes bounded by a budget whatever the image size.
//
// Tiles as ComfyUI's ImageUpscaleWithModel runs them through comfy/utils.py tiled_scale_multidim:
// square tiles of `tile` input pixels (512) overlapping by `overlap` (32) at positions 0,
// tile - overlap, 2 (tile - overlap), ... (TilePlan::axisPositions: ComfyUI's positions, except that
// a last tile that would be short is moved inside the image instead, so every tile has one shape
// and the device is prepared once); each tile's output weighted by ComfyUI's feather mask (per
// axis, the F = overlap x scale rows/columns nearest each edge scaled by (k + 1) / F, on all four
// sides, none where F is not below the tile's extent), summed, and divided by the sum of the
// weights. An image that fits one tile runs once, unblended. Each tile is padded to the model's
// size requirements (spandrel pad_tensor: reflect, then replicate) and cropped back, and clamped to
// [0, 1] as spandrel's ImageModelDescriptor.__call__ returns it. `Crop` blending instead gives each
// output pixel to the one tile whose ownership interval holds it (boundaries at the middle of each
// overlap, as Real-ESRGAN's tile_process keeps only a tile's core): with an overlap of at least twice
// the model's receptive radius it reproduces the untiled output away from nothing but rounding.
//
// Memory: the output is produced in bands of rows handed to a sink as soon as no later tile touches
// them, so the tiler holds at most one tile row of output (tile x scale rows of the output width,
// float32 per channel) besides the device's memory for one tile and the tile's input and output
// buffers; the tile size is halved (down to 64 input pixels) until the device's estimate plus these
// fit `memoryBudget` (UpscalePlan says what was chosen and why). The caller holds the input image
// and what the sink keeps. Qt-free.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/graph/Backend.h"
#include "core/models/upscale/UpscaleModel.h"
#include "core/run/Engine.h"
#include "core/sampling/TilePlan.h"

namespace tessera {

// What runs the model's graph for the tiler: a Backend (prepared by the tiler at the output size of
// one tile, batch 1) and the memory one tile takes on it.
class UpscaleDevice {
public:
    virtual ~UpscaleDevice() = default;
    virtual Backend& backend() = 0;
    // Bytes the backend holds to run `graph` on one tile of outH x outW output pixels.
    virtual std::uint64_t tileBytes(const ModelGraph& graph, int outH, int outW) const = 0;
};

enum class UpscaleBlend {
    Feather,  // ComfyUI's tiled_scale_multidim mask and normalisation
    Crop,     // each pixel from the tile that owns it (overlap split in the middle)
};

struct UpscaleTiling {
    int tile = 512;    // input pixels per tile side (ComfyUI's ImageUpscaleWithModel)
    int overlap = 32;  // input pixels
    UpscaleBlend blend = UpscaleBlend::Feather;
    // Bytes the device's memory for one tile, the tile buffers and the row band may take together;
    // 0: 4 GiB, or half of what the host has available when that is less.
    std::uint64_t memoryBudget = 0;
    // Each tile's output clamped to [0, 1] (spandrel's ImageModelDescriptor); off: the network's
    // values, blended (for comparisons with a reference forward).
    bool clamp = true;
};

// What the tiler chose for one image.
struct UpscalePlan {
    int width = 0, height = 0, scale = 1;  // input size; the output is width x scale by height x scale
    int tile = 0, overlap = 0;             // input pixels, after fitting the budget
    bool single = false;                   // the image fits one tile: one unblended run
    int tileW = 0, tileH = 0;              // every tile's input size (the image's where it is smaller)
    int paddedW = 0, paddedH = 0;          // after the model's size requirements
    std::vector<int> xs, ys;               // tile positions in input pixels
    std::uint64_t deviceBytes = 0, bufferBytes = 0, bandBytes = 0, budget = 0;
    std::string note;  // why the tile is smaller than asked, "" when it is not
    int tiles() const { return static_cast<int>(xs.size() * ys.size()); }
    std::uint64_t bytes() const { return deviceBytes + bufferBytes + bandBytes; }
    // The tiles in output pixels (for the seam score: core/sampling/SeamScore.h).
    TilePlan outputTiles() const;
};

class UpscaleTiler {
public:
    // Rows [firstRow, firstRow + rows) of the output, laid out [rows][channels][width x scale]
    // (each row's channel planes one after another), final: normalised and clamped. Called in
    // order, each row once.
    using RowSink = std::function<void(int firstRow, int rows, const float* band)>;

    // `model` and `device` must outlive the tiler. Throws std::invalid_argument for a tile below
    // 1 or an overlap outside 0 .. tile - 1.
    UpscaleTiler(const UpscaleModel& model, UpscaleDevice& device, UpscaleTiling tiling = {});

    // The plan for an input of width x height. Throws std::invalid_argument when even the
    // smallest tile does not fit the budget (naming the need and the budget).
    UpscalePlan plan(int width, int height) const;
    // Upscales `input` ([inputChannels][H][W], values in [0, 1]) into the sink; returns the plan
    // run. `progress(done, total)` after each tile, when set.
    UpscalePlan run(const ImageTensor& input, const RowSink& sink,
                    const std::function<void(int done, int total)>& progress = {});
    // The whole output as one image ([outputChannels][H x scale][W x scale]).
    ImageTensor upscale(const ImageTensor& input);

private:
    std::uint64_t budget() const;
    void prepareFor(int outH, int outW);
    // One tile: the input window at (x, y) of tileW x tileH, padded, run, cropped, clamped, into out.
    void runTile(const ImageTensor& input, const UpscalePlan& plan, int x, int y, std::vector<float>& in,
                 std::vector<float>& out, std::vector<float>& cropped);

    const UpscaleModel& model_;
    UpscaleDevice& device_;
    UpscaleTiling tiling_;
    int preparedH_ = 0, preparedW_ = 0;
};

// spandrel's pad_tensor for one axis of n pixels padded to `padded`: the source index of each
// padded position (reflect without repeating the edge up to n - 1 pixels, then the last one
// repeated).
std::vector<int> paddedIndices(int n, int padded);

}  // namespace tessera
