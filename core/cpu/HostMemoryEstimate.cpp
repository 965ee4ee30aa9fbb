#include "core/cpu/HostMemoryEstimate.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/cpu/CpuBackend.h"
#include "core/formats/ModelWeights.h"
#include "core/models/sd/UNetCondGraph.h"
#include "core/models/unet/UNetGraph.h"
#include "core/models/vae/TiledVae.h"
#include "core/models/vae/VaeGraph.h"
#include "core/run/RunRecord.h"
#include "core/sampling/ImageOps.h"
#include "core/sampling/TilePlan.h"

namespace tessera {

namespace {

constexpr std::uint64_t kFloat = sizeof(float);
constexpr std::uint64_t kMiB = 1024 * 1024;
constexpr unsigned kStart = static_cast<unsigned>(MemoryPhase::StartImage);
constexpr unsigned kSampling = static_cast<unsigned>(MemoryPhase::Sampling);
constexpr unsigned kOutput = static_cast<unsigned>(MemoryPhase::Output);

// Host memory per tile-batch row of the run record, measured with mallinfo2 on records of
// 10,000 rows (tests/core/tst_hostmemoryestimate.cpp checks these stay upper bounds):
// the TileBatchTiming with its tile-id vector while sampling, and at output the manifest's
// JSON document, its text (held three times: the string, inside the PNG's iTXt chunk and the
// PNG's byte copy) and the CSV text.
constexpr std::uint64_t kRecordRowBytes = 96;
constexpr std::uint64_t kRecordRowBytesPerTile = 4;
constexpr std::uint64_t kOutputRowBytes = 1800;
constexpr std::uint64_t kOutputRowBytesPerTile = 60;
// The process itself: code and runtimes (tessera-cli render of a 32x32 image peaks at 13 MiB
// RSS, measured), with room for OpenBLAS's GEMM buffers (allocated per thread on first use)
// and allocator slack. The CUDA runtime, cuDNN and cuBLAS add host-side state: 1 GiB is a
// stated allowance, not a measurement.
constexpr std::uint64_t kProcessBytes = 128 * kMiB;
constexpr std::uint64_t kCudaRuntimeBytes = 1024 * kMiB;

std::string dims(int c, int h, int w) { return std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w); }

std::uint64_t weightBytes(const ModelGraph& graph) {
    std::uint64_t floats = 0;
    for (const auto& [name, shape] : graph.parameterList()) {
        std::uint64_t n = 1;
        for (const std::int64_t d : shape) n *= static_cast<std::uint64_t>(std::max<std::int64_t>(d, 0));
        floats += n;
    }
    return floats * kFloat;
}

// Peak of the activations alive at once, walking the ops of the graph the CPU backend runs in
// order with each value released after its last reader (what CpuBackend's buffer plan reuses),
// plus the scratch CpuBackend plans (shared, and each of `threads` workers' own). CpuBackend's
// greedy best-fit reuse (a free buffer is grown when none fits) leaves gaps between differently
// sized values: measured 13-27% above the liveness peak on the fixture and cifar10 UNets
// (tst_hostmemoryestimate checks the bound), hence half on top.
std::uint64_t activationBytes(const ModelGraph& graph, int batch, int tileH, int tileW, int threads) {
    const std::vector<int> last = graph.lastUse();
    std::vector<char> released(graph.values().size(), 0);
    auto size = [&](int value) { return static_cast<std::uint64_t>(graph.elements(value, batch, tileH, tileW)); };
    std::uint64_t live = 0;
    for (const int input : graph.inputs()) live += size(input);
    std::uint64_t peak = live;
    const auto release = [&](int value) {
        if (value < 0 || released[static_cast<std::size_t>(value)]) return;
        released[static_cast<std::size_t>(value)] = 1;
        live -= size(value);
    };
    for (std::size_t i = 0; i < graph.ops().size(); ++i) {
        const GraphOp& op = graph.ops()[i];
        live += size(op.output);
        peak = std::max(peak, live);
        for (const int v : op.operands())
            if (last[static_cast<std::size_t>(v)] == static_cast<int>(i)) release(v);
        if (last[static_cast<std::size_t>(op.output)] < 0) release(op.output);
    }
    const CpuBackend::Scratch scratch = CpuBackend::scratchNeeded(graph, batch, tileH, tileW);
    return (peak + peak / 2 + scratch.shared + static_cast<std::uint64_t>(threads) * scratch.perWorker) * kFloat;
}

int cpuThreads(const RunConfig& config) { return cpu::resolveThreads(config.threads); }

struct RunShape {
    int cols = 0, rows = 0, tiles = 0, tileH = 0, tileW = 0, batch = 0, batchesPerStep = 0, stepsRun = 0;
    int windowMaps = 1;  // BlendWeights' distinct maps
};

RunShape runShape(const RunConfig& config) {
    const int overlap = config.overlapPixels();
    RunShape s;
    s.cols = static_cast<int>(TilePlan::axisPositions(config.width, config.tile, overlap).size());
    s.rows = static_cast<int>(TilePlan::axisPositions(config.height, config.tile, overlap).size());
    s.tiles = s.cols * s.rows;
    // One map for a smooth window; with `none`, one per kind of position along each axis
    // (first, interior, next-to-last, last): core/sampling/BlendWindow.h.
    if (config.window == BlendWindowKind::None) s.windowMaps = std::min(s.cols, 4) * std::min(s.rows, 4);
    s.tileH = std::min(config.tile, config.height);
    s.tileW = std::min(config.tile, config.width);
    s.batch = resolveTileBatch(config.tileBatch, s.tiles);
    s.batchesPerStep = (s.tiles + s.batch - 1) / s.batch;
    s.stepsRun = config.initImage.empty() ? config.steps : static_cast<int>(config.steps * config.strength);
    return s;
}

void addStartImage(HostMemoryEstimate& e, const RunConfig& config, int channels, const StartImageSize& image) {
    const std::uint64_t canvas = static_cast<std::uint64_t>(channels) * config.width * config.height;
    const std::uint64_t pixels = static_cast<std::uint64_t>(image.width) * image.height;
    // The file, the decoder's rows (up to 4 bytes a pixel for CMYK) and the RGB copy, then the
    // resize's first pass (3 floats a pixel; core/sampling/ImageOps.h resizeIntermediatePixels).
    e.items.push_back({MemoryPart::StartImageFile,
                       "start image: file and decoded " + std::to_string(image.width) + "x" +
                           std::to_string(image.height) + " pixels",
                       "init", image.fileBytes + pixels * (4 + 3), kStart});
    e.items.push_back({MemoryPart::StartImageResize, "start image: resize buffer", "init",
                       resizeIntermediatePixels(image.width, image.height, config.width, config.height) * 3 * kFloat,
                       kStart});
    e.items.push_back({MemoryPart::StartImage,
                       "start image in model space (" + dims(channels, config.height, config.width) + " float32)",
                       "init", canvas * kFloat, kStart | kSampling | kOutput});
}

}  // namespace

std::string_view toString(MemoryPhase phase) {
    switch (phase) {
        case MemoryPhase::StartImage:
            return "preparing the start image";
        case MemoryPhase::Sampling:
            return "sampling";
        case MemoryPhase::Output:
            return "writing the outputs";
    }
    return "sampling";
}

std::uint64_t HostMemoryEstimate::bytesOf(MemoryPart part) const {
    std::uint64_t total = 0;
    for (const MemoryItem& item : items)
        if (item.part == part) total += item.bytes;
    return total;
}

std::uint64_t HostMemoryEstimate::bytesIn(MemoryPhase phase) const {
    std::uint64_t total = 0;
    for (const MemoryItem& item : items)
        if (item.heldIn(phase)) total += item.bytes;
    return total;
}

MemoryPhase HostMemoryEstimate::peakPhase() const {
    MemoryPhase best = MemoryPhase::Sampling;
    for (const MemoryPhase phase : {MemoryPhase::StartImage, MemoryPhase::Output})
        if (bytesIn(phase) > bytesIn(best)) best = phase;
    return best;
}

std::uint64_t cpuActivationBytes(const UNetConfig& model, int batch, int tileH, int tileW, int threads) {
    return activationBytes(unet2DExecutionGraph(model), batch, tileH, tileW, threads);
}

HostMemoryEstimate estimateHostMemory(const RunConfig& config, const UNetConfig& model, BackendKind backend,
                                      const std::optional<StartImageSize>& startImage) {
    const bool onDevice = backend == BackendKind::CUDA;
    const int channels = model.inChannels;
    const RunShape s = runShape(config);
    const std::uint64_t plane = static_cast<std::uint64_t>(config.width) * config.height;
    const std::uint64_t canvas = plane * channels;
    const std::string canvasDims = dims(channels, config.height, config.width);
    const ModelGraph graph = unet2DExecutionGraph(model);

    HostMemoryEstimate e;
    e.items.push_back({MemoryPart::Process,
                       "the process itself" + std::string(onDevice ? " with the CUDA runtime" : ""), "",
                       kProcessBytes + (onDevice ? kCudaRuntimeBytes : 0), kStart | kSampling | kOutput});
    e.items.push_back(
        {MemoryPart::Weights, "model weights (float32)", "model", weightBytes(graph), kSampling | kOutput});
    if (!onDevice) {
        e.items.push_back(
            {MemoryPart::Activations,
             "UNet activations for a batch of " + std::to_string(s.batch) +
                 (s.batch == 1 ? " tile of " : " tiles of ") + std::to_string(s.tileW) + "x" + std::to_string(s.tileH),
             "batch", activationBytes(graph, s.batch, s.tileH, s.tileW, cpuThreads(config)), kSampling | kOutput});
        e.items.push_back({MemoryPart::TileBuffers, "tile batch input and output", "batch",
                           2 * static_cast<std::uint64_t>(s.batch) * channels * s.tileH * s.tileW * kFloat, kSampling});
        e.items.push_back({MemoryPart::Canvas,
                           "canvas: latents, noise and two accumulators (4 x " + canvasDims + " float32)", "width",
                           4 * canvas * kFloat, kSampling});
    }
    e.items.push_back({MemoryPart::Seams, "seam statistics of the last step (2 x " + canvasDims + " float64)", "width",
                       2 * canvas * 8, kSampling});
    // Previews (one canvas, while the observer holds it) come and go before the final image is
    // made; they never add to the peak.
    e.items.push_back({MemoryPart::FinalImage, "final image and seam map", "width", canvas * kFloat + plane * kFloat,
                       kSampling | kOutput});
    // Normaliser and its inverse per pixel, the distinct window maps, the tile tables.
    e.items.push_back({MemoryPart::Blend, "blend weights and tile tables", "width",
                       2 * plane * kFloat + static_cast<std::uint64_t>(s.windowMaps) * s.tileH * s.tileW * kFloat +
                           static_cast<std::uint64_t>(s.tiles) * (sizeof(TileRect) + sizeof(int)),
                       kSampling});
    const std::uint64_t rows = static_cast<std::uint64_t>(std::max(s.stepsRun, 0)) * s.batchesPerStep;
    e.items.push_back({MemoryPart::Record, "run record: " + std::to_string(rows) + " tile-batch timing rows", "steps",
                       rows * (kRecordRowBytes + kRecordRowBytesPerTile * s.batch), kSampling | kOutput});
    e.items.push_back({MemoryPart::OutputText, "manifest and CSV text of the timing rows", "steps",
                       rows * (kOutputRowBytes + kOutputRowBytesPerTile * s.batch), kOutput});
    // toRgb8, and the PNG: its encoded bytes and their copy for the atomic write (noise does
    // not compress: up to 3 bytes a pixel each).
    e.items.push_back({MemoryPart::Png, "8-bit image and its PNG encoding", "width", 3 * plane * 3, kOutput});
    if (startImage) addStartImage(e, config, channels, *startImage);
    return e;
}

namespace {

// The CPU's least need for a VAE pass over an image of imageH x imageW pixels (decoder or
// encoder graph): whole, the activations as the CPU backend runs it (attention in blocks of
// query rows, so no score matrix is held whole); tiled, what a tiled pass keeps however small
// its tiles (planVaePass with a budget nothing fits: its smallest tile), whose whole-image
// canvases (one per value live at a cut, float32) dominate; auto takes the smaller.
std::uint64_t cpuVaePassBytes(const VaeConfig& vae, bool decoder, int imageH, int imageW, VaeTiling mode, int threads) {
    const ModelGraph execution = decoder ? vaeDecoderExecutionGraph(vae) : vaeEncoderExecutionGraph(vae);
    const std::uint64_t whole = activationBytes(execution, 1, imageH, imageW, threads);
    if (mode == VaeTiling::Off) return whole;
    const ModelGraph primitive = decoder ? buildVaeDecoderGraph(vae) : buildVaeEncoderGraph(vae);
    const VaePassPlan plan = planVaePass(VaeTiling::On, primitive, imageH, imageW, VaeMemoryBudget{1, 4, true, ""});
    const std::uint64_t tiled = plan.estimate.hostPeakBytes;
    return mode == VaeTiling::On ? tiled : std::min(whole, tiled);
}

std::uint64_t sdWeightBytes(const SdModelConfigs& model) {
    std::uint64_t bytes = float32Bytes(UNetCondModel::expectedTensors(model.unet)) +
                          float32Bytes(VaeModel::expectedTensors(model.vae)) +
                          float32Bytes(ClipTextModel::expectedTensors(model.textEncoder));
    if (model.textEncoder2) bytes += float32Bytes(ClipTextModel::expectedTensors(*model.textEncoder2));
    return bytes;
}

}  // namespace

// One list of parts per phase, as estimateHostMemory's, at the latent canvas's size (one of
// the VAE's cells a latent pixel); the reasons for each part are given there.
HostMemoryEstimate estimateSdHostMemory(const RunConfig& config, const SdModelConfigs* model, BackendKind backend,
                                        const std::optional<StartImageSize>& startImage) {
    const bool onDevice = backend == BackendKind::CUDA;
    const int f = model ? model->vae.scaleFactor() : 8;
    const int channels = model ? model->unet.inChannels : 4;
    RunConfig latent = config;  // the canvas the tiled loop runs on (core/models/sd/SdPipeline.h checkSdRun)
    latent.width = std::max(1, config.width / f);
    latent.height = std::max(1, config.height / f);
    latent.tile = std::max(1, config.tile / f);
    latent.overlapPx = config.overlapPixels() / f;
    latent.overlapFraction.reset();
    const RunShape s = runShape(latent);
    // Guidance evaluates every tile twice, conditional and unconditional, as one doubled batch.
    const int rows = s.batch * (config.cfgScale != 1.0 ? 2 : 1);
    const std::uint64_t latentPlane = static_cast<std::uint64_t>(latent.width) * latent.height;
    const std::uint64_t canvas = latentPlane * channels;
    const std::uint64_t plane = static_cast<std::uint64_t>(config.width) * config.height;
    const std::string canvasDims = dims(channels, latent.height, latent.width);

    HostMemoryEstimate e;
    e.items.push_back({MemoryPart::Process,
                       "the process itself" + std::string(onDevice ? " with the CUDA runtime" : ""), "",
                       kProcessBytes + (onDevice ? kCudaRuntimeBytes : 0), kStart | kSampling | kOutput});
    if (model) {
        e.items.push_back(
            {MemoryPart::Weights,
             std::string("model weights (float32): UNet, VAE and text encoder") + (model->textEncoder2 ? "s" : ""),
             "model", sdWeightBytes(*model), kSampling | kOutput});
        if (!onDevice)
            e.items.push_back({MemoryPart::Activations,
                               "UNet activations for " + std::to_string(rows) +
                                   (rows == 1 ? " latent tile of " : " latent tiles of ") + std::to_string(s.tileW) +
                                   "x" + std::to_string(s.tileH),
                               "batch",
                               activationBytes(unet2DConditionExecutionGraph(model->unet), rows, s.tileH, s.tileW,
                                               cpuThreads(config)),
                               kSampling | kOutput});
    }
    if (!onDevice) {
        e.items.push_back({MemoryPart::TileBuffers, "tile batch input and output", "batch",
                           2 * static_cast<std::uint64_t>(rows) * channels * s.tileH * s.tileW * kFloat, kSampling});
        e.items.push_back({MemoryPart::Canvas,
                           "latent canvas: latents, noise and two accumulators (4 x " + canvasDims + " float32)",
                           "width", 4 * canvas * kFloat, kSampling});
        if (model) {
            std::uint64_t vae =
                cpuVaePassBytes(model->vae, true, config.height, config.width, config.vaeTiling, cpuThreads(config));
            if (startImage)
                vae = std::max(vae, cpuVaePassBytes(model->vae, false, config.height, config.width, config.vaeTiling,
                                                    cpuThreads(config)));
            e.items.push_back({MemoryPart::Activations,
                               std::string("VAE ") + (startImage ? "encode and decode" : "decode") + " of " +
                                   std::to_string(config.width) + "x" + std::to_string(config.height) + " px" +
                                   (config.vaeTiling == VaeTiling::Off ? " (untiled)" : ""),
                               "width", vae, kSampling});
        }
    }
    e.items.push_back({MemoryPart::Seams, "seam statistics of the last step (2 x " + canvasDims + " float64)", "width",
                       2 * canvas * 8, kSampling});
    e.items.push_back({MemoryPart::FinalImage,
                       "final latents, seam map and the decoded image (3x" + std::to_string(config.height) + "x" +
                           std::to_string(config.width) + " float32)",
                       "width", (canvas + latentPlane + 3 * plane) * kFloat, kSampling | kOutput});
    e.items.push_back({MemoryPart::Blend, "blend weights and tile tables", "width",
                       2 * latentPlane * kFloat +
                           static_cast<std::uint64_t>(s.windowMaps) * s.tileH * s.tileW * kFloat +
                           static_cast<std::uint64_t>(s.tiles) * (sizeof(TileRect) + sizeof(int)),
                       kSampling});
    const std::uint64_t records = static_cast<std::uint64_t>(std::max(s.stepsRun, 0)) * s.batchesPerStep;
    e.items.push_back({MemoryPart::Record, "run record: " + std::to_string(records) + " tile-batch timing rows",
                       "steps", records * (kRecordRowBytes + kRecordRowBytesPerTile * s.batch), kSampling | kOutput});
    e.items.push_back({MemoryPart::OutputText, "manifest and CSV text of the timing rows", "steps",
                       records * (kOutputRowBytes + kOutputRowBytesPerTile * s.batch), kOutput});
    e.items.push_back({MemoryPart::Png, "8-bit image and its PNG encoding", "width", 3 * plane * 3, kOutput});
    if (startImage) addStartImage(e, config, 3, *startImage);
    return e;
}

namespace {

// The largest value in [lo, hi] for which fits(value) holds, assuming fits is monotone
// (smaller never needs more); nullopt when not even lo fits.
template <typename Fits>
std::optional<int> largestFitting(int lo, int hi, Fits fits) {
    if (hi < lo || !fits(lo)) return std::nullopt;
    while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        if (fits(mid))
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

std::string genericAdvice(const std::string& field) {
    if (field == "width") return "lower width and height";
    if (field == "batch") return "lower batch or the tile size";
    if (field == "steps") return "lower steps or raise batch";
    if (field == "init") return "use a smaller start image (init)";
    if (field == "threads") return "lower threads, or raise the process's memory limit (ulimit -v / -d)";
    return "use a smaller model or free memory";
}

// What to lower, and to what, for the part that dominates the peak. `peakOf` is the estimate's
// peak for a changed configuration; `sideStep` what width and height must stay multiples of.
template <typename PeakOf>
std::string advice(const std::string& field, const RunConfig& config, int sideStep, const PeakOf& peakOf,
                   std::uint64_t available) {
    const auto fitsWith = [&](auto change) {
        RunConfig c = config;
        change(c);
        return peakOf(c) <= available;
    };
    if (field == "width") {
        // Scale both sides by the same factor, keeping them multiples of the model's factor.
        const int step = std::max(1, sideStep);
        const auto scaled = [&](int side, int percent) { return std::max(step, side * percent / 100 / step * step); };
        const auto percent = largestFitting(1, 99, [&](int p) {
            return fitsWith([&](RunConfig& c) {
                c.width = scaled(config.width, p);
                c.height = scaled(config.height, p);
            });
        });
        if (percent)
            return "lower width and height (at most about " + std::to_string(scaled(config.width, *percent)) + "x" +
                   std::to_string(scaled(config.height, *percent)) + " fits)";
    }
    if (field == "batch") {
        const int now = resolveTileBatch(config.tileBatch, runShape(config).tiles);
        const auto batch =
            largestFitting(1, now - 1, [&](int b) { return fitsWith([&](RunConfig& c) { c.tileBatch = b; }); });
        if (batch) return "lower batch (at most " + std::to_string(*batch) + " fits)";
    }
    if (field == "steps") {
        const auto steps =
            largestFitting(1, config.steps - 1, [&](int k) { return fitsWith([&](RunConfig& c) { c.steps = k; }); });
        if (steps) return "lower steps (at most " + std::to_string(*steps) + " fits) or raise batch";
    }
    return genericAdvice(field);
}

// The refusal for `estimate`, without advice: its field and message; nullopt when it fits.
std::optional<ValidationError> refusal(const HostMemoryEstimate& estimate, const HostMemory& available) {
    const MemoryPhase phase = estimate.peakPhase();
    const std::uint64_t need = estimate.bytesIn(phase);
    if (need <= available.availableBytes) return std::nullopt;
    std::vector<const MemoryItem*> parts;
    for (const MemoryItem& item : estimate.items)
        if (item.heldIn(phase)) parts.push_back(&item);
    std::sort(parts.begin(), parts.end(), [](const MemoryItem* a, const MemoryItem* b) { return a->bytes > b->bytes; });
    // The field to lower: the one whose parts weigh most at the peak.
    std::vector<std::pair<std::string, std::uint64_t>> byField;
    for (const MemoryItem* item : parts) {
        if (item->field.empty()) continue;  // the process itself: nothing to lower
        auto it = std::find_if(byField.begin(), byField.end(), [&](const auto& f) { return f.first == item->field; });
        if (it == byField.end())
            byField.emplace_back(item->field, item->bytes);
        else
            it->second += item->bytes;
    }
    const auto heaviest = std::max_element(byField.begin(), byField.end(),
                                           [](const auto& a, const auto& b) { return a.second < b.second; });
    const std::string field = heaviest == byField.end() ? std::string("width") : heaviest->first;
    std::string largest;
    for (std::size_t i = 0; i < parts.size() && i < 3; ++i)
        largest += (i ? "; " : "") + parts[i]->what + " " + formatBytes(parts[i]->bytes);
    return ValidationError(field, field + ": the run needs about " + formatBytes(need) + " of host memory while " +
                                      std::string(toString(phase)) + ", more than the " +
                                      formatBytes(available.availableBytes) + " available (" + available.source +
                                      "); the largest parts: " + largest + "; ");
}

// Under a process limit (available.countsAddressSpace), the address space the run's computing
// threads will map beyond their data (core/base/HostMemory.h kThreadAddressSpaceBytes): with
// it left out, a run that passed the check could stop in an allocation, or hang in OpenBLAS.
HostMemoryEstimate withThreadAddressSpace(HostMemoryEstimate estimate, const RunConfig& config, BackendKind backend,
                                          const HostMemory& available) {
    if (!available.countsAddressSpace) return estimate;
    const int threads = backend == BackendKind::CUDA ? 1 : cpuThreads(config);
    estimate.items.push_back({MemoryPart::Process,
                              "address space of " + std::to_string(threads) + (threads == 1 ? " thread" : " threads") +
                                  " (stacks, malloc arenas, OpenBLAS buffers; mapped, mostly never touched)",
                              "threads", static_cast<std::uint64_t>(threads) * kThreadAddressSpaceBytes,
                              kStart | kSampling | kOutput});
    return estimate;
}

}  // namespace

void checkHostMemory(const HostMemoryEstimate& estimate, const HostMemory& available) {
    if (auto error = refusal(estimate, available))
        throw ValidationError(error->field(), error->what() + genericAdvice(error->field()));
}

void checkHostMemory(const RunConfig& config, const UNetConfig& model, BackendKind backend,
                     const std::optional<StartImageSize>& startImage, const HostMemory& available) {
    const auto estimate = [&](const RunConfig& c) {
        return withThreadAddressSpace(estimateHostMemory(c, model, backend, startImage), c, backend, available);
    };
    if (auto error = refusal(estimate(config), available)) {
        const auto peakOf = [&](const RunConfig& c) { return estimate(c).peakBytes(); };
        throw ValidationError(error->field(), error->what() + advice(error->field(), config, model.downsampleFactor(),
                                                                     peakOf, available.availableBytes));
    }
}

void checkSdHostMemory(const RunConfig& config, const SdModelConfigs* model, BackendKind backend,
                       const std::optional<StartImageSize>& startImage, const HostMemory& available) {
    const auto estimate = [&](const RunConfig& c) {
        return withThreadAddressSpace(estimateSdHostMemory(c, model, backend, startImage), c, backend, available);
    };
    if (auto error = refusal(estimate(config), available)) {
        const auto peakOf = [&](const RunConfig& c) { return estimate(c).peakBytes(); };
        const int step = model ? model->vae.scaleFactor() : 8;
        throw ValidationError(error->field(),
                              error->what() + advice(error->field(), config, step, peakOf, available.availableBytes));
    }
}

}  // namespace tessera
