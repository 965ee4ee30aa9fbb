// UpscaleTiler: an upscale model (core/models/upscale/UpscaleModel.h) run over an image of any size
// in tiles, on any device that runs a ModelGraph (UpscaleDevice: the CPU engine's in
// core/cpu/CpuUpscaler.h, the CUDA engine's in kernels/engine/CudaUpscaler.h), with the memory it
// takes bounded by a budget whatever the image size.
//
// Tiles as ComfyUI's ImageUpscaleWithModel runs them through comfy/utils.py tiled_scale_multidim:
// square tiles of `tile` input pixels (512) overlapping by `overlap` (32) at positions 0,
// tile - overlap, 2 (tile - overlap), ... (TilePlan::axisPositions: ComfyUI's positions, except that
// a last tile that would be short is moved inside the image instead, so every tile has one shape
// and the device is prepared once, and that `tile` is the largest tile: the tiles are shrunk to the
// smallest size that covers the image with as many tiles, so the moved last tile overlaps its
// neighbour by little more than `overlap`); each tile's output weighted by ComfyUI's feather mask (per
// axis, the F = overlap x scale rows/columns nearest each edge scaled by (k + 1) / F, on all four
// sides, none where F is not below the tile's extent), summed, and divided by the sum of the
// weights. An image that fits one tile runs once, unblended. Each tile is padded to the model's
// size requirements (spandrel pad_tensor: reflect, then replicate) and cropped back, and clamped to
// [0, 1] as spandrel's ImageModelDescriptor.__call__ returns it. `Crop` blending instead gives each
// output pixel to the one tile whose ownership interval holds it (boundaries at the middle of each
// overlap, as Real-ESRGAN's tile_process keeps only a tile's core): with an overlap of at least twice
// the model's receptive radius it reproduces the untiled output away from nothing but rounding.
//
// Tiles go to the device in batches (as many as UpscaleDevice::maxTileBatch allows and the budget
// holds) through its slots: with two (a GPU) the tiler gathers the next batch and blends the last
// one on the host while the device runs the current one; with one (the CPU engine) in turn. The
// host's share (gathering, blending, normalising) is spread over the hardware threads.
//
// Memory: the output is produced in bands of rows handed to a sink as soon as no later tile touches
// them, so the tiler holds at most one tile row of output (tile x scale rows of the output width,
// float32 per channel) besides the device's memory for one tile batch and the batch's input and
// output buffers (per slot); the tile size is halved (down to 64 input pixels) until the device's
// estimate plus these fit `memoryBudget`, or, for a device with memory of its own
// (UpscaleDevice::deviceBudget), until the device's estimate fits that budget and the host buffers
// fit `memoryBudget`; then the batch is the largest that still fits (UpscalePlan says what was
// chosen and why). The caller holds the input image and what the sink keeps. Qt-free.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/graph/Backend.h"
#include "core/models/upscale/UpscaleModel.h"
#include "core/run/Engine.h"
#include "core/sampling/TilePlan.h"

namespace tessera {

// What runs the model for the tiler. A batch of tiles goes through one of the device's slots: the
// tiler writes the tiles' inputs into tileInput(slot), submit() starts them and wait() returns once
// tileOutput(slot) holds their outputs. With slotCount() == 2 the tiler fills one slot while the device
// works on the other; it waits for the slots in the order it submitted them.
class UpscaleDevice {
public:
    virtual ~UpscaleDevice() = default;
    // Bytes the device holds to run `model` on `batch` tiles of outH x outW output pixels.
    virtual std::uint64_t tileBytes(const UpscaleModel& model, int batch, int outH, int outW) const = 0;
    // A device with memory of its own (a GPU): the bytes tileBytes must fit; the tiling's
    // memoryBudget then bounds the host's buffers alone. nullopt (memory shared with the host, the
    // default): tileBytes and the host buffers fit memoryBudget together.
    virtual std::optional<std::uint64_t> deviceBudget() const { return std::nullopt; }
    // The most tiles of outH x outW output pixels one submit should take (1: one at a time).
    virtual int maxTileBatch(int outH, int outW) const;
    // 1 or 2 (see above).
    virtual int slotCount() const { return 1; }
    // Ready to run `model` on up to `batch` tiles of outH x outW output pixels per submit (the input
    // is outH / scale x outW / scale). Called before every run; a device keeps what it can.
    virtual void prepare(const UpscaleModel& model, int batch, int outH, int outW) = 0;
    // Slot `slot`'s buffers, float32 NCHW: the input [batch][inputChannels][outH / scale][outW / scale]
    // and the output [batch][outputChannels][outH][outW]. Valid until the next prepare.
    virtual float* tileInput(int slot) = 0;
    virtual const float* tileOutput(int slot) = 0;
    // Starts the first `count` tiles of tileInput(slot); `firstTile` is the first one's index in the
    // image (row-major), for the device's notes.
    virtual void submit(int slot, int count, int firstTile) = 0;
    // Returns once tileOutput(slot) holds the outputs of the slot's last submit.
    virtual void wait(int slot) = 0;
    // What the device decided on its own during the last run ("" when nothing): a precision
    // fallback, say.
    virtual std::string note() const { return {}; }
};

// A device over a Backend (prepared at the tile's output size and the batch, weights bound where the
// model holds them), one slot, synchronous: submit runs the tiles. The CPU engine's
// (core/cpu/CpuUpscaler.h); a Backend of a test's own.
class BackendUpscaleDevice : public UpscaleDevice {
public:
    virtual Backend& backend() = 0;
    // Prepares the backend unless it holds this model's plan at this shape (upscalePlanKey).
    void prepare(const UpscaleModel& model, int batch, int outH, int outW) override;
    float* tileInput(int) override { return input_.data(); }
    const float* tileOutput(int) override { return output_.data(); }
    void submit(int slot, int count, int firstTile) override;
    void wait(int) override {}

private:
    std::vector<float> input_, output_;
    std::string preparedKey_;
};

// What a plan of `model` at batch x outH x outW depends on: the model's address, description and
// every tensor's address, size and three sampled values (another model loaded at the same
// addresses does not match), and the shape.
std::string upscalePlanKey(const UpscaleModel& model, int batch, int outH, int outW);

enum class UpscaleBlend {
    Feather,  // ComfyUI's tiled_scale_multidim mask and normalisation
    Crop,     // each pixel from the tile that owns it (overlap split in the middle)
};

struct UpscaleTiling {
    // Input pixels per tile side (ComfyUI's ImageUpscaleWithModel: 512); 0: the whole image, unless
    // the budget needs tiles (then halved from the image's longer side).
    int tile = 512;
    int overlap = 32;  // input pixels
    UpscaleBlend blend = UpscaleBlend::Feather;
    // Bytes the device's memory for one tile batch, the tile buffers and the row band may take
    // together (a device with memory of its own: the tile buffers and the band alone); 0: 4 GiB, or
    // half of what the host has available when that is less.
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
    int batch = 1;                         // tiles per submit
    int slotCount = 1;                     // the device's slots (UpscaleDevice::slotCount)
    // deviceBytes: the device's estimate for one tile batch; bufferBytes: the batch's input and
    // output buffers of every slot; bandBytes: the row band; budget: what these fit (deviceBudget
    // 0), or what the buffers and the band fit, the device's estimate fitting deviceBudget.
    std::uint64_t deviceBytes = 0, bufferBytes = 0, bandBytes = 0, budget = 0, deviceBudget = 0;
    std::string note;        // why the tile is smaller than asked, "" when it is not
    std::string deviceNote;  // after run: UpscaleDevice::note()
    int tiles() const { return static_cast<int>(xs.size() * ys.size()); }
    std::uint64_t bytes() const { return deviceBytes + bufferBytes + bandBytes; }
    std::uint64_t hostBytes() const { return bufferBytes + bandBytes; }
    // The tiles in output pixels (for the seam score: core/sampling/SeamScore.h).
    TilePlan outputTiles() const;
};

class UpscaleTiler {
public:
    // Rows [firstRow, firstRow + rows) of the output, laid out [rows][channels][width x scale]
    // (each row's channel planes one after another), final: normalised and clamped. Called in
    // order, each row once.
    using RowSink = std::function<void(int firstRow, int rows, const float* band)>;

    // `model` and `device` must outlive the tiler. Throws std::invalid_argument for a negative tile
    // or an overlap outside 0 .. tile - 1 (0 .. any with tile 0).
    UpscaleTiler(const UpscaleModel& model, UpscaleDevice& device, UpscaleTiling tiling = {});

    // The plan for an input of width x height. Throws std::invalid_argument when even the
    // smallest tile does not fit the budget (naming the need and the budget).
    UpscalePlan plan(int width, int height) const;
    // Upscales `input` ([inputChannels][H][W], values in [0, 1]) into the sink; returns the plan
    // run. `progress(done, total)` after each tile, when set.
    UpscalePlan run(const ImageTensor& input, const RowSink& sink,
                    const std::function<void(int done, int total)>& progress = {});
    // The same into `output`, resized to [outputChannels][H x scale][W x scale]: the final values
    // written there directly (one pass over the output fewer than a sink that copies the bands).
    UpscalePlan runInto(const ImageTensor& input, ImageTensor& output,
                        const std::function<void(int done, int total)>& progress = {});
    // The whole output as one image ([outputChannels][H x scale][W x scale]).
    ImageTensor upscale(const ImageTensor& input);

private:
    std::uint64_t budget() const;
    // Whether a batch of `batch` tiles fits: the plan's byte counts set for it.
    bool fits(UpscalePlan& p, int batch) const;
    // The input window at (x, y) of tileW x tileH, padded to paddedW x paddedH, into `in`.
    void gatherTile(const ImageTensor& input, const UpscalePlan& plan, int x, int y, float* in) const;
    // run and runInto: the final rows go to `sink`, or straight into `image` (already sized).
    UpscalePlan runTo(const ImageTensor& input, const RowSink* sink, ImageTensor* image,
                      const std::function<void(int, int)>& progress);

    const UpscaleModel& model_;
    UpscaleDevice& device_;
    UpscaleTiling tiling_;
};

// body(begin, end) over pieces of the rows [0, rows), on up to 16 hardware threads where the
// `floats` the rows touch are worth starting them (the calling thread takes the first piece): for a
// sink that converts or copies a band. The pieces must write disjoint rows.
void parallelRows(int rows, std::int64_t floats, const std::function<void(int begin, int end)>& body);

// spandrel's pad_tensor for one axis of n pixels padded to `padded`: the source index of each
// padded position (reflect without repeating the edge up to n - 1 pixels, then the last one
// repeated).
std::vector<int> paddedIndices(int n, int padded);

}  // namespace tessera
