// RunRecord: everything a finished (or cancelled/failed) run leaves behind; what every
// exporter and chart reads. Plain data, Qt-free. Writers in core/run/RunRecordIO.h.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/run/RunConfig.h"

namespace tessera {

// How a run ended. The manifest, the CLI's summary line and the history keep the names
// "finished", "cancelled", "failed" (toString / parseRunStatus, core/run/RunRecord.cpp).
enum class RunStatus { Finished, Cancelled, Failed };
std::string_view toString(RunStatus);
// nullopt for any other text (a manifest from elsewhere; the reader names it).
std::optional<RunStatus> parseRunStatus(std::string_view);

struct TileBatchTiming {
    int step = 0;              // 0-based step index
    float timestep = 0;        // the UNet timestep of that step
    int batchIndex = 0;        // 0-based tile batch within the step
    std::vector<int> tileIds;  // tiles in this batch (TilePlan ids)
    double gpuMs = -1;         // device time (CUDA events); -1 where not measured (CPU)
    double hostMs = 0;         // wall time on the host for this batch (CPU: compute; CUDA: enqueue)
    double deviceMiB = -1;     // device memory in use after the batch; -1 on CPU
};

struct StepTiming {
    int step = 0;
    float timestep = 0;
    double gpuMs = -1;         // whole step on the device; -1 on CPU
    double hostEnqueueMs = 0;  // host time to enqueue the step (CPU: wall time of the step)
    double wallMs = 0;         // wall time of the step, host clock
    // CUDA graphs: "eager" (kernels launched from the host: graphs off, warm-up, fallback),
    // "capture" (a graph of this step was captured, or updated, before it ran: first-run
    // cost), "replay" (cached graphs only: the steady state). Empty on CPU.
    std::string graph{};
    bool captured = false;  // graph == "capture"
};

struct MemorySample {
    double tMs = 0;       // since run start
    double usedMiB = 0;   // device memory in use (cudaMemGetInfo); host RSS for CPU
    double arenaMiB = 0;  // arena high-water mark (CUDA)
};

// One executable graph of the engine's graph cache, as a run used it.
struct GraphEntryStats {
    std::string name;  // what it holds, e.g. "step normal 64x64 ..." or "tile forward x3 ..."
    int nodes = 0;
    double captureMs = 0;      // its (last) capture
    double instantiateMs = 0;  // cudaGraphInstantiate + upload; 0 when the exec came from an update
    double updateMs = 0;       // cudaGraphExecUpdate onto a cached exec; 0 when instantiated
    double deviceMiB = 0;      // cudaMemGetInfo delta over instantiate + upload
    int launches = 0;          // launches in this run
    bool captured = false;     // captured (or updated) during this run
    bool updated = false;      // the exec is a cached one updated with cudaGraphExecUpdate
};

struct GraphStats {
    // The effective mode as its RunConfig name ("off" after a fallback): the CUDA backend and
    // the manifest write it as text; compare it through effectiveGraphMode.
    std::string mode = "off";
    std::string fallbackReason;  // why capture failed, empty when it did not
    // This run's share of the engine's graph cache (which lives across runs).
    int captures = 0, hits = 0, misses = 0, evictions = 0, updates = 0, instantiations = 0;
    int nodes = 0;                            // largest graph used by the run
    double captureMs = 0, instantiateMs = 0;  // summed over this run's captures / instantiations
    double graphMemMiB = 0;                   // device memory held by every cached graph after the run
    int cacheCapacity = 0;                    // graph cache size limit in effect (graph_cache)
    int lanes = 1;                        // tile batches that were in flight at once (streams; config lanes resolved)
    int cacheEntries = 0;                 // graphs cached after the run
    int invalidations = 0;                // cached graphs dropped because the UNet plan they bake in is gone
    int failures = 0;                     // failed captures (the run then continued with graphs off)
    double updateMs = 0;                  // summed over this run's cudaGraphExecUpdate calls
    std::vector<GraphEntryStats> used{};  // the graphs this run launched
};

// GraphStats::mode as a GraphMode; nullopt for a name this build does not know (a manifest from
// elsewhere).
std::optional<GraphMode> effectiveGraphMode(const GraphStats& stats);

struct EnvironmentInfo {
    std::string tesseraVersion;
    std::string backend;  // "cpu" / "cuda"
    std::string device;   // CPU model / GPU name
    std::string driver;   // CUDA driver/runtime, cuDNN versions; BLAS on CPU
    std::string host;
    int threads = 0;  // CPU engine: the threads that computed (RunConfig::threads resolved); else the host's
};

struct MemoryPlanInfo {
    double weightsMiB = 0, activationsMiB = 0, workspaceMiB = 0, canvasMiB = 0, totalMiB = 0;
};

// Choices made by timing at prepare (cuDNN algorithms, graph plans, fused or not) and the
// settings that change a backend's numerics, so that a run can be reproduced and compared.
struct TuningInfo {
    std::string cachePath;  // the tuning cache file used; "" = none (off, or a backend without one)
    int hits = 0;           // choices taken from the cache
    int misses = 0;         // choices timed (then stored)
    int rejected = 0;       // cached choices the library refused now: timed again and replaced
    std::string digest;     // core/formats/TuningCache.h tuningDigest of every choice the plan uses; "" = none
    // Every setting that changes the numerical path, by name (TESSERA_CUD* variables; "" = not
    // set), e.g. {"TESSERA_CUDNN_FUSE", "0"}.
    std::map<std::string, std::string> settings{};
};

// The text encoders' share of a Stable Diffusion run: the prompt and negative prompt encoded once,
// before sampling.
struct TextEncodeRecord {
    double ms = 0;                     // wall time of the encode, host clock
    std::uint64_t rowsRun = 0;         // token rows the encoders computed
    std::uint64_t rowsRemembered = 0;  // rows taken from the encoders' row memo, or repeated in the batch
    // The embeddings the prompts used, as A1111's "TI hashes" value ("name: hash, ..."); empty
    // when none was used.
    std::string textualInversionHashes;
};

// How a tiled VAE pass (core/models/vae/TiledVae.h runTiledGraph) cut the image.
struct VaeTilingRecord {
    int cols = 0, rows = 0;              // tiles across and down
    int tile = 0;                        // core edge, latent pixels
    int halo = 0;                        // latent pixels of context on each side of a core
    int requiredHalo = 0;                // the halo that makes the pass exact
    int evaluatedW = 0, evaluatedH = 0;  // one tile's extent (core and halo), image pixels
    bool wholeImageNorm = true;          // GroupNorm statistics of the whole image (else each tile's own)
    bool wholeImageAttention = true;     // attention over the whole image (else within each tile)
    std::string canvases = "host";       // where the whole-image canvases lived: "host" or "device"
    std::uint64_t hostPeakBytes = 0;     // host canvases and tile buffers at their peak (canvases "host")
    std::uint64_t devicePeakBytes = 0;   // device canvases and tile buffers at their peak (canvases "device")
};

// One VAE pass of a Stable Diffusion run: the decode of the finished latents, or the encode of
// the start image.
struct VaePassRecord {
    double ms = 0;              // wall time of the phase (the VAE's backend and budget, the pass), host clock
    int width = 0, height = 0;  // the image, pixels
    bool tiled = false;
    std::string reason;      // why whole or tiled, e.g. "vae_tiling on", "activations 3.0 GiB exceed ..."
    VaeTilingRecord tiling;  // tiled only
};

// A tile batch the device tried at prepare and could not fit; it then tried `to`.
struct TileBatchLowering {
    int from = 0, to = 0;  // tiles per call
    std::string reason;    // what did not fit (the device's out-of-memory message)
};

// Tiles per model call: what the run asked for and what ran.
struct TileBatchRecord {
    int asked = 0;                             // RunConfig::tileBatch as given (0 = auto)
    int ran = 0;                               // tiles per call the run used
    int tiles = 0;                             // tiles of the plan
    int autoBatch = 0;                         // auto: what autoTileBatch chose before fitting the device
    std::vector<TileBatchLowering> lowered{};  // auto: this prepare's batches that did not fit, in order
    bool automatic() const { return asked <= 0; }
    // Auto chose fewer tiles per call than autoTileBatch for the device's memory (in this
    // prepare, or one before it with the same plan).
    bool loweredToFit() const { return automatic() && ran < autoBatch; }
};

// An upscale model's pass (core/models/upscale/): over the start image of an image-to-image
// upscale, before the canvas resize; or the whole run, with no diffusion pass (tessera-cli upscale).
struct UpscaleModelRecord {
    std::string file;          // the file's name without its folder ("4x-UltraSharp.pth")
    std::string name;          // as A1111 names it (core/run/UpscaleModelFile.h upscalerName): "4x-UltraSharp"
    std::string sha256;        // of the whole file, 64 lowercase hex digits (A1111 writes no upscaler hash)
    std::string architecture;  // UpscaleConfig::describe(): "ESRGAN 4x, 64 features, 23 blocks"
    int scale = 0;             // the model's factor
    // Read from a PyTorch checkpoint by the restricted reader (pickle opcodes parsed as data, nothing
    // executed); false for a safetensors file.
    bool pickle = false;
    std::string backend;             // where it ran: "cpu" / "cuda"
    std::string precision;           // what it computed in: "fp32", "fp16", "bf16"
    int tile = 0, overlap = 0;       // input pixels, after fitting the memory budget
    int tiles = 0;                   // tiles run (1: the image fit one tile, run unblended)
    std::uint64_t planBytes = 0;     // the tiler's plan: one tile on the device, the tile buffers, the row band
    std::uint64_t budgetBytes = 0;   // what that had to fit
    std::string tileNote;            // why the tile is smaller than asked; "" when it is not
    int inputW = 0, inputH = 0;      // the start image
    int outputW = 0, outputH = 0;    // the model's output: the input times scale
    int resizedW = 0, resizedH = 0;  // after the resize to the asked size; the output's where there is none
    std::string resizeFilter;        // "" (none), "area average" (shrinking) or "Catmull-Rom" (growing)
    double ms = 0;                   // wall time of the model's pass, host clock (the resize excluded)
    bool alone = false;              // the whole run: no diffusion pass followed
    bool resized() const { return !resizeFilter.empty(); }
};

// A separate VAE that replaced the Stable Diffusion model's own for the run's decode and encode
// (RunConfig::vae); the latent scaling stayed the model's.
struct VaeFileRecord {
    std::string name;    // A1111's "VAE": the file's name with its extension, or a folder's name (core/run/VaeFile.h)
    std::string sha256;  // of the weights file read, 64 lowercase hex digits; A1111's "VAE hash" is its first 10
    std::string layout;  // the names it holds: "LDM" (encoder.down.0.block.0...) or "diffusers"
    // Read from a PyTorch checkpoint by the restricted reader (pickle opcodes parsed as data, nothing
    // executed); false for safetensors.
    bool pickle = false;
};

// A LoRA / LyCORIS merged into the Stable Diffusion model's weights for the run (a <lora:...> tag of
// the prompt, or RunConfig::loras), in the order merged.
struct LoraRecord {
    std::string name;       // as the tag names it (A1111's mentioned_name): "Lora hashes" writes it
    std::string file;       // the file's name without its folder ("detail-tweaker.safetensors")
    std::string sha256;     // of the whole file, 64 lowercase hex digits
    std::string shortHash;  // A1111's 12 hex digits (its network hash: addnet / sshs_model_hash / sha256)
    double teMultiplier = 1.0;
    double unetMultiplier = 1.0;
    int modulesMerged = 0;     // modules added to the weights
    int modulesSkipped = 0;    // their component's multiplier was 0
    int keysUnmatched = 0;     // file keys that name no module of the model
    int modulesNotMerged = 0;  // modules of a shape that does not fit, or of an algorithm not merged (IA3, OFT, ...)
};

struct RunRecord {
    static constexpr int kSchemaVersion = 1;
    std::string runId;      // unique, e.g. "20261122-061500-3f2a"
    std::string startedAt;  // ISO 8601 UTC
    RunConfig config;       // as run (overlap resolved)
    std::string modelName;  // folder name or "default"
    std::string modelHash;  // hash of the weights file
    // The model's file was a PyTorch checkpoint read by the restricted reader (pickle opcodes parsed
    // as data, nothing executed); false for safetensors files and folders.
    bool modelPickle = false;
    // The run sampled by flow matching (FLUX.1: one evaluation a step, guidance embedded, its own
    // image-to-image step count); false for the noise-prediction samplers of the UNet families.
    bool flowMatching = false;
    EnvironmentInfo environment;
    int tileCount = 0, tileW = 0, tileH = 0;
    int stepsRun = 0;
    std::vector<float> timesteps;
    std::vector<StepTiming> steps;
    std::vector<TileBatchTiming> batches;
    std::vector<MemorySample> memory;
    GraphStats graphs;
    TuningInfo tuning;
    MemoryPlanInfo memoryPlan;
    double prepareMs = 0;  // load + prepare (+ capture for the first run)
    double totalMs = 0;    // sampling wall time, prepare excluded
    double peakDeviceMiB = -1;
    RunStatus status = RunStatus::Finished;
    std::string error;        // for failed
    std::string imageSha256;  // of the 8-bit RGB image, row-major
    // How visible the tile borders are in the finished image (core/sampling/SeamScore.h): 1.0 = not at
    // all; -1 = not measured (one tile, or the run did not finish).
    double seamScore = -1;
    double seamWorst = -1;  // the most visible border line's ratio
    // The phases around sampling and the tile batch, as data; nullopt where the run had no such
    // phase, or the record (an older manifest) does not say.
    std::optional<TextEncodeRecord> textEncode;
    std::optional<VaePassRecord> vaeEncode;  // image-to-image: the start image into latents
    std::optional<VaePassRecord> vaeDecode;  // the finished latents into the image
    std::optional<TileBatchRecord> tileBatch;
    std::optional<UpscaleModelRecord> upscaleModel;  // the run had an upscale model's pass
    std::vector<LoraRecord> loras;                   // merged into the model's weights, in order
    // A1111's model hash (8 hex, core/formats/A1111ModelHash.h) of each ControlNet that ran, in
    // config.controlNets' order ("" for one in memory): its infotext entry's "Model: name [hash]".
    std::vector<std::string> controlNetHashes;
    std::optional<VaeFileRecord> vaeFile;  // a separate VAE replaced the model's own
    // What the user is told: warnings (fallbacks, etc.) and notes, among them each phase above as
    // its describe function words it.
    std::vector<std::string> messages;
};

// The record's words for its phases, one place for every front end (the messages the engine
// adds, the CLI bench's notes):
//   describe(TextEncodeRecord)   "812 ms, 2 of 4 encoder rows run (the rest remembered or repeated)"
//   describe(VaeTilingRecord)    "2x2 tiles of 64 latent px + 2 halo (544x544 px evaluated), whole-image
//                                 GroupNorm, attention over the whole image, host peak 1.2 GiB"
//   describeVaeDecode            "vae decode: 1024x1024 untiled (activations ...), 812 ms"
//   describeVaeEncode            "vae encode: tiled 2x2 tiles ... (vae_tiling on), 95 ms"
//   describe(TileBatchLowering)  "batch: 25 tiles per call do not fit (...); trying 13"
//   describeAutoTileBatch        "batch: auto, 13 tiles per UNet call (25 tiles in 2 calls; fewer than
//                                 the 25 asked for, to fit the device)"
// Milliseconds are whole (truncated), byte counts as formatBytes writes them.
std::string describe(const TextEncodeRecord& text);
std::string describe(const VaeTilingRecord& tiling);
// "untiled (reason)" / "tiled <describe(tiling)> (reason)": how the pass ran.
std::string describeVaePass(const VaePassRecord& pass);
std::string describeVaeDecode(const VaePassRecord& decode);
std::string describeVaeEncode(const VaePassRecord& encode);
std::string describe(const TileBatchLowering& lowering);
std::string describeAutoTileBatch(const TileBatchRecord& batch);
//   describe(UpscaleModelRecord) "upscale model: 4x-UltraSharp (ESRGAN 4x, 64 features, 23 blocks, safetensors)
//                                 on cpu in fp32: 512x384 -> 2048x1536 in 6 tiles of 512 px, overlap 32,
//                                 1234 ms; resized to 1024x768 (area average)"
std::string describe(const UpscaleModelRecord& upscale);
//   describe(LoraRecord)         "lora: detail-tweaker (detail-tweaker.safetensors, hash 0123456789ab), te 1,
//                                 unet 0.5: 264 modules merged; 2 keys name nothing in the model"
std::string describe(const LoraRecord& lora);
//   describe(VaeFileRecord)      "vae: vae-ft-mse-840000-ema-pruned.safetensors (LDM names, safetensors,
//                                 VAE hash 735e4c3a44) in place of the model's own"
std::string describe(const VaeFileRecord& vae);

}  // namespace tessera
