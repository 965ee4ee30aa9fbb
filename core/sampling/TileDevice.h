// TileDevice: what the one tiled loop (core/sampling/TiledLoop.h) needs from an engine's device. The
// loop plans a pass, and describes every step as a sequence of calls on this interface; the
// CPU device (core/cpu/CpuTileDevice.h) carries each call out at once on host buffers, the CUDA
// device (kernels/engine/CudaTileDevice.h) enqueues it on streams, or records it into a captured graph
// of the whole step and replays that. docs/ENGINE_LOOP.md has the design. Qt-free.
//
// A step, as the loop issues it (the body of runStep):
//   forkLanes
//   per tile batch b, in order:  [cancellation check]  beginBatch gather evaluate
//                                [evaluate(Unconditional) combineGuidance]  joinBatch
//                                checkOutput scatter endBatch
//   fuse checkCanvas
// framed by beginStep (per-step scalars) and endStep (wait, results). The same calls in the
// same order in every mode, so a device that captures the body replays exactly the work it
// would have launched.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/base/CanvasShift.h"
#include "core/models/vae/TiledVae.h"
#include "core/run/RunConfig.h"
#include "core/sampling/Denoiser.h"
#include "core/sampling/NormalGenerator.h"
#include "core/sampling/StepUpdate.h"

namespace tessera {

class Backend;
class BlendWeights;
class TilePlan;
struct RunRecord;

// Tiles [first, first + count) of the pass's plan, evaluated together: batch `index` of every
// step, on lane `lane` (index % lanes). [y0, y1) x [x0, x1) bounds its tiles in the output canvas.
struct TileBatch {
    int index = 0, first = 0, count = 0, lane = 0;
    int y0 = 0, y1 = 0, x0 = 0, x1 = 0;
    std::vector<int> tileIds;
};

// What a step accumulates besides the blended update: the only differences between the work
// of two steps (a device may capture one graph per variant and replay it for every step).
struct StepVariant {
    bool sampleFusion = true;  // fusion "sample": the update fused into the scatter; "noise": after the normalise
    bool preview = false;      // also blend the noise, and write the x0 preview in the fuse
    bool seams = false;        // the last step: accumulate the seam statistics
    // The pass's update reads the previous step's x0 (DPM++ 2M; the same for every step of a
    // pass): also blend the noise, and write the blended x0 to the x0 canvas in every fuse.
    bool keepX0 = false;
    // The pass keeps history canvases (LMS: StepUpdate.h h_j; the same for every step of a pass):
    // also blend the noise, whose x0 the fuse folds into them.
    bool history = false;
    bool blendsNoise() const { return !sampleFusion || preview || keepX0 || history; }
    bool writesX0() const { return preview || keepX0; }
    const char* name() const { return seams ? "last" : (preview ? "preview" : "normal"); }
};

// Classifier-free guidance: every tile batch is evaluated twice, conditioned (c) and
// unconditioned (u), and blended as u + scale * (c - u) before its scatter.
struct Guidance {
    float scale = 1.0f;
};

// How the input canvas starts (Philox draws keyed by canvas element, core/sampling/Philox.h).
struct CanvasStart {
    enum class Kind { Noise, NoisedImage, Image };
    Kind kind = Kind::Noise;
    std::uint32_t draw = 0;                     // Noise, NoisedImage: the Philox draw of z
    float sigma = 1.0f;                         // Noise: x = z * sigma
    float a = 0.0f, b = 0.0f, scale = 1.0f;     // NoisedImage: x = (a * image + b * z) * scale
    const std::vector<float>* image = nullptr;  // NoisedImage, Image (x = image): the input canvas's size
};

// One ControlNet of a controlled sampling pass (core/sampling/ControlNetRun.h): the tile function's
// graph takes, after its own inputs, per ControlNet its hint crop [B, channels, tile * factor]
// (the hint canvas at the tile's position times factor) and one FiLM vector [B, 2C] per width of
// scaleWidths (s - 1 in the first C entries, 0 in the others; s the row's scale for the step).
struct PassControl {
    const std::vector<float>* hint = nullptr;  // channels x (height * factor) x (width * factor)
    int channels = 3, factor = 8;
    std::vector<int> scaleWidths;
    std::vector<float> condScale, uncondScale;  // per step index k, per branch
};

// One tiled pass: tiles cut from the input canvas, a function evaluated on each, the values
// window-weighted and blended into the output canvas, once per step.
//
// The x0 canvas (output-canvas sized): the blended x0 prediction predictX0(K, x, eps / N) of the
// last step that wrote it (StepVariant::writesX0): the preview of a preview step, and, for a
// pass that keepsX0(), the previous step's x0 that the next update reads (StepCoefficients::
// cprev): per tile in the scatter (fusion sample), per pixel in the fuse (fusion noise), before
// the fuse replaces it. A device holds no previous x0 until a step has run after startCanvas:
// its first step uses withoutPreviousX0(K) (diffusers' first-order first step). The sampler is a pass
// whose output canvas is its input (the latents, updated in place by the scheduler's
// coefficients); a map pass (a VAE decoder or encoder tile by tile) has one step with
// coefficients that pass the function's value through (identityStep), into an output canvas of
// another size (a decoder's larger, an encoder's smaller) with its own channels.
struct TiledPass {
    int inChannels = 0, outChannels = 0;
    int height = 0, width = 0;              // the input canvas: inChannels x height x width
    int outHeight = 0, outWidth = 0;        // the output canvas: outChannels x outHeight x outWidth
    bool inPlace = true;                    // output canvas == input canvas (same size and channels)
    const TilePlan* plan = nullptr;         // tiles in input-canvas pixels
    const TilePlan* outPlan = nullptr;      // the same tiles (same ids) in output-canvas pixels (the sampler: plan)
    const BlendWeights* weights = nullptr;  // over outPlan
    BlendWindowKind window = BlendWindowKind::Hann;
    FusionRule fusion = FusionRule::Sample;
    int batchSize = 1, lanes = 1;
    std::vector<TileBatch> batches;              // in order; the same every step
    std::vector<StepCoefficients> coefficients;  // per step index k (coefficients.size() steps)
    std::uint64_t seed = 0;                      // Philox key of every draw
    int previewEvery = 0;                        // previews after every N-th step (0: never)
    bool seamMap = true;                         // seam statistics at the last step
    std::optional<Guidance> guidance;
    // Denoiser::addedCond of every tile (id order), [tiles][addedCondDim] per branch (addedUncond
    // when guided); empty without added conditioning. A device places tile t's rows beside its input.
    int addedCondDim = 0;
    std::vector<float> addedCond, addedUncond;
    Precision precision = Precision::FP32;  // what the function computes in (for messages)
    CanvasStart start;
    // The steps' noise z comes from the host (TileDevice::setStepNoise: torch's generators as
    // A1111 draws them, core/sampling/LatentNoise.h) instead of the Philox draw step + 1.
    bool hostStepNoise = false;
    std::vector<PassControl> controls;  // ControlNets, in the graph's input order; empty: none
    // Shifted tiles (core/base/CanvasShift.h): step k's tiles lie over the canvas rolled by
    // shifts[k]: gathers, hint crops and scatters map the plan's pixels to the canvas's, the fuse reads
    // the normalizer at the plan pixel over each canvas pixel. Empty: the plan's places every step
    // (a map pass never shifts). A ControlNet's hint canvas rolls by the shift times its factor.
    std::vector<CanvasShift> shifts;

    int steps() const { return static_cast<int>(coefficients.size()); }
    int tileCount() const;
    StepVariant variant(int step) const;
    CanvasShift shift(int step) const;  // shifts[step], or none
    // Whether any step reads the previous step's x0 (a coefficient cprev != 0).
    bool keepsX0() const;
    // Whether any step reads or rewrites the history canvases (usesHistory). A device holds
    // kStepHistory canvas-sized buffers h_j for such a pass, zero after startCanvas; each step whose
    // coefficients use them adds sum_j hw[j] h_j to the blended update and then sets
    // h_j = hKeep[j] h_j + hx[j] x + h0[j] x0 per pixel in the fuse (x the step's input, x0 its
    // prediction from the blended noise).
    bool keepsHistory() const;
};

// Coefficients whose update is v = eps: a map pass blends the function's values themselves.
StepCoefficients identityStep();

// The sampler's request before a run: the device's tile function (the UNet, with the run's text
// conditioning when it has one) ready for batches of up to batchSize tiles of tileH x tileW,
// `batches` batches a step; `guided`: every batch is evaluated for both branches (a device may
// run them as one doubled batch).
struct DevicePrepare {
    const Denoiser& model;
    std::uint64_t modelGeneration = 0;  // changes whenever the model does
    const RunConfig& config;            // precision, lanes, graphs
    int batchSize = 1, tileH = 0, tileW = 0, batches = 1;
    bool guided = false;
    int tiles = 0;           // of the plan (the last batch may hold fewer than batchSize)
    bool batchAuto = false;  // batchSize is the auto tile batch: the device may lower it to fit
    int pixelScale = 1;      // image pixels per tile pixel (8 for SD latents): for messages
    // The canvas the run will sample (channels x height x width) and the blend window's weight
    // maps: a device that keeps the canvas beside the UNet's plan counts it when it fits the plan.
    int canvasChannels = 0, canvasHeight = 0, canvasWidth = 0, weightMaps = 0, steps = 0;
    // The model's graph takes tiles this many times tileH x tileW (a controlled UNet's graph works
    // at its ControlNets' hint size, core/models/controlnet/ControlledUNetGraph.h); 1 otherwise.
    int graphTileScale = 1;
};

struct DevicePlan {
    int lanes = 1;                          // tile batches in flight at once (batch j on lane j % lanes)
    Precision precision = Precision::FP32;  // what the UNet computes in
    int batchSize = 0;                      // tiles per call where the device lowered an auto batch; 0: as asked
};

// What a device knows after a step has finished.
struct BatchReport {
    double gpuMs = -1;      // device time of the batch; -1 where not measured
    double deviceMiB = -1;  // device memory in use after the step; -1 on the CPU
};
struct NonFiniteAt {
    int step = 0;
    int batch = -1;  // tile batch whose output held it; -1: the canvas after the update
};
struct StepReport {
    std::optional<NonFiniteAt> nonFinite;  // the first NaN or infinity of the step (asynchronous devices)
    std::vector<BatchReport> batches;      // per batch (asynchronous devices); empty when reported as they ran
    double gpuMs = -1;                     // the step on the device; -1 where not measured
    std::string graph;                     // "eager", "capture", "replay" (StepTiming::graph); empty on the CPU
    double usedMiB = 0, arenaMiB = 0;      // MemorySample: memory in use (device, or host RSS) and the plan's
};

// The per-step and per-run accumulators of the seam map (ENGINE_SEMANTICS.md), output canvas sized.
struct SeamSums {
    std::vector<double> sum, sumSq;
};

class TileDevice {
public:
    virtual ~TileDevice() = default;

    // --- Run set-up -------------------------------------------------------------------
    // The sampler's tile function made ready (once per shape; the device decides what it
    // keeps across runs); fills the record's environment and what the device adds to it
    // (messages to record.messages). Returns the lanes and the precision it will use.
    virtual DevicePlan prepare(const DevicePrepare& request, RunRecord& record) = 0;
    // Buffers and constant tables for `pass` (valid until the run ends); the record's memory
    // plan. `say` reports a message while the run goes on (e.g. a CUDA graph fallback).
    virtual void beginRun(const TiledPass& pass, RunRecord& record, std::function<void(const std::string&)> say) = 0;
    // Fills the input canvas (and zeroes the output canvas of a map pass).
    virtual void startCanvas(const CanvasStart& start) = 0;
    // A pass with hostStepNoise: z of the next beginStep (input-canvas sized, read during that
    // call), given before each beginStep whose coefficients have sigma != 0; nullptr for the others.
    // A device that cannot take host noise throws std::logic_error.
    virtual void setStepNoise(const std::vector<float>* z) {
        if (z) throw std::logic_error("this tile device draws its own noise; it takes no host step noise");
    }
    // torch's CUDA generator on this device (torch.Generator("cuda").manual_seed(seed) and its
    // randn, bit for bit for this GPU: kernels/ops/TorchCudaRandn.cuh), for A1111's "GPU" noise;
    // empty where the device has none (the CPU: LatentNoise then uses A1111's NV emulation).
    virtual NormalGeneratorFactory torchCudaGenerators() { return {}; }

    // --- One step ---------------------------------------------------------------------
    // Per-step scalars (the step index k: coefficients[k], or withoutPreviousX0 of it for the
    // first step after startCanvas; noise draw k + 1).
    virtual void beginStep(int step, const StepVariant& variant) = 0;
    // Runs the step's body: body(false) issues its calls one by one (and returns false when it
    // stopped for cancellation between batches); a device that captures may instead call
    // body(true) once per variant while recording a graph (the body then never checks
    // cancellation and the host-side parts of the loop skip) and launch that graph, or launch
    // a graph it recorded before without calling body at all. Returns false when cancelled.
    virtual bool runStep(const StepVariant& variant, const std::function<bool(bool capturing)>& body) = 0;
    // Waits for the step; its non-finite site, timings and memory.
    virtual StepReport endStep() = 0;
    // True when every call has finished when it returns: the loop then reports each tile batch
    // as it finishes (so a cancellation asked for in onTileBatch stops the next batch).
    virtual bool synchronous() const = 0;

    // --- The body's calls (in the order of the header comment) ------------------------
    virtual void forkLanes() {}                   // the step's batches may start on their lanes
    virtual void beginBatch(const TileBatch&) {}  // the batch's lane may reuse its buffers; timing starts
    virtual void gather(const TileBatch&) = 0;    // input-canvas tiles x modelInputScale -> the function's input
    virtual void evaluate(const TileBatch&, Branch) = 0;              // the tile function
    virtual void combineGuidance(const TileBatch&, float scale) = 0;  // output = u + scale (c - u)
    virtual void joinBatch(const TileBatch&) {}  // the output is complete: what follows runs in batch order
    // The non-finite watch of the batch's output. A synchronous device returns true when it found
    // a NaN or an infinity; an asynchronous one returns false and reports it with the step.
    virtual bool checkOutput(const TileBatch&) = 0;
    virtual void scatter(const TileBatch&, const StepVariant&) = 0;  // window-weighted, batch order
    virtual void endBatch(const TileBatch&) {}                       // timing ends
    virtual void fuse(const StepVariant&) = 0;                       // normalise (and, for fusion noise, the update)
    virtual bool checkCanvas() = 0;  // as checkOutput, for the output canvas after the update
    // The body stopped between batches (cancellation): wait for what it enqueued.
    virtual void abandonStep() {}

    // --- Results (after endStep, or after the run) ------------------------------------
    // The x0 canvas after a preview step (x0), or the output canvas.
    virtual std::vector<float> readPreview(bool x0) = 0;
    virtual std::vector<float> readCanvas() = 0;  // the output canvas, C x H x W float32
    virtual SeamSums readSeams() = 0;             // after a pass whose last step accumulated them
    // What the device adds to the record at the end of a run (or before a failure is thrown):
    // graph statistics, peak memory.
    virtual void finishRun(RunRecord& record) = 0;

    // --- Whole-graph work outside the tiled loop ----------------------------------------
    // A backend of this device for graphs run whole (the VAE decoder and encoder), separate from
    // the tile function's so that using it keeps the sampler's plan. Precision: the device's.
    // Throws std::logic_error on a device that has none (test devices).
    virtual Backend& wholeGraphBackend(const RunConfig& config);
    // The memory wholeGraphBackend's work may use now (vae_tiling auto decodes whole when the
    // activations fit it): the CPU device, the host memory the process may still allocate; a
    // GPU device, its free device memory. nullopt where the device cannot tell (then auto
    // decodes whole).
    virtual std::optional<VaeMemoryBudget> vaeMemoryBudget(const RunConfig& config);
    // The backend the run's text encoders run on (core/models/clip/ClipTextModel.h encode): a
    // float32 CPU backend on every device, so that both engines condition on the same bits;
    // owned by the device and kept across runs (it may be the one wholeGraphBackend returns:
    // each user prepares it for its own graph). Throws std::logic_error on a device that has
    // none (test devices).
    virtual Backend& textBackend();
};

}  // namespace tessera
