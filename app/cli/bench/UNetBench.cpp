#include "app/cli/bench/UNetBench.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <vector>

#include "app/cli/CliOptions.h"
#include "app/cli/CliText.h"
#include "app/cli/ForwardProfile.h"
#include "app/cli/bench/BenchTable.h"
#include "app/cli/bench/ProfileBench.h"
#include "core/cpu/HostMemoryEstimate.h"
#include "core/models/flux/FluxGraph.h"
#include "core/models/sd/UNetCondGraph.h"
#include "core/models/sd/UNetCondModel.h"
#include "core/sampling/TilePlan.h"

#if TESSERA_FORWARD_PROFILE_CUDA
#include "core/formats/TuningCache.h"
#include "kernels/backend/CudaBackend.h"
#endif

namespace tessera {

namespace {

struct SdBenchRow {
    std::string engine = "tessera-cuda", shape, size, precision, graphs, device, note;
    int tile = 0, overlap = 0, batch = 0, unetBatch = 0, steps = 0, tiles = 0, repeats = 0;
    double cfg = 1, gflopPerEval = 0, forwardMs = 0, peakMiB = -1, prepareS = 0, firstRunS = 0;
    UNetStepTiming step;
    std::optional<double> peakTflops;
    bool failed = false;
};

std::string sdCsvLine(const SdBenchRow& r) {
    const bool ran = !r.failed;
    auto num = [&](double v) { return ran ? significant(v, 4) : std::string(); };
    return csvField(r.engine) + "," + r.shape + "," + r.size + "," + std::to_string(r.tile) + "," +
           std::to_string(r.overlap) + "," + std::to_string(r.batch) + "," + significant(r.cfg, 4) + "," +
           std::to_string(r.unetBatch) + "," + r.precision + "," + std::to_string(r.steps) + "," +
           std::to_string(r.tiles) + "," + std::to_string(r.step.forwardsPerStep) + "," + num(r.step.secondsPerStep) +
           "," + num(r.step.secondsPerStep * r.steps) + "," + num(r.step.unetEvalsPerS) + "," + num(r.forwardMs) + "," +
           num(r.step.tflops) + "," + (ran && r.peakTflops ? significant(r.step.tflops / *r.peakTflops, 4) : "") + "," +
           (r.peakTflops ? significant(*r.peakTflops, 4) : "") + "," +
           (ran && r.peakMiB >= 0 ? significant(r.peakMiB, 4) : "") + "," + significant(r.gflopPerEval, 4) + "," +
           num(r.step.hostEnqueueMsPerStep) + "," + num(r.prepareS) + "," + num(r.firstRunS) + "," + r.graphs + "," +
           std::to_string(r.repeats) + "," + csvField(r.device) + "," + csvField(r.note);
}

void printSdTable(std::ostream& out, const std::vector<SdBenchRow>& rows) {
    const std::vector<std::string> head{"engine", "prec",   "graphs",  "B",       "UNet B", "tiles",    "fwd/step",
                                        "fwd ms", "s/step", "evals/s", "TFLOP/s", "%peak",  "peak MiB", "prep s"};
    std::vector<std::vector<std::string>> cells;
    for (const SdBenchRow& r : rows) {
        std::vector<std::string> row{r.engine,
                                     r.precision,
                                     r.graphs,
                                     std::to_string(r.batch),
                                     std::to_string(r.unetBatch),
                                     std::to_string(r.tiles),
                                     std::to_string(r.step.forwardsPerStep)};
        if (r.failed) {
            row.insert(row.end(), {"failed", "", "", "", "", "", ""});
        } else {
            row.insert(row.end(),
                       {fixed(r.forwardMs, 2), fixed(r.step.secondsPerStep, 3), fixed(r.step.unetEvalsPerS, 1),
                        fixed(r.step.tflops, 1), r.peakTflops ? fixed(100.0 * r.step.tflops / *r.peakTflops, 1) : "-",
                        r.peakMiB >= 0 ? fixed(r.peakMiB, 0) : "-", fixed(r.prepareS, 2)});
        }
        cells.push_back(std::move(row));
    }
    printCells(out, head, cells);
}

#if TESSERA_FORWARD_PROFILE_CUDA
// One row: prepare at the doubled (guidance) batch, one forward through the host path with
// N(0,1) inputs (timestep 500; SDXL's text_embeds_time N(0,1) too), then the timed forwards,
// and the remainder batch apart.
// `plan` is the job's tiles in latents; row.batch, tiles and unetBatch are set.
void runSdRow(SdBenchRow& row, const BenchOptions& o, const ModelGraph& graph, const TensorMap& weights, Precision p,
              GraphMode mode, const TilePlan& plan) {
    const bool guidance = o.cfg != 1.0;
    const int factor = guidance ? 2 : 1;
    const auto t0 = std::chrono::steady_clock::now();
    CudaBackend gpu(p);
    gpu.setGraphs(mode == GraphMode::Tile);
    TuningCache cache(TuningCache::resolvePath(o.tuningCache));
    gpu.setTuningCache(&cache);
    gpu.prepareGraph(graph, weights, row.unetBatch, plan.tileH(), plan.tileW());
    gpu.setTuningCache(nullptr);
    cache.save();
    for (const std::string& w : gpu.tuningWarnings()) appendNote(row.note, w);
    for (const std::string& w : cache.warnings()) appendNote(row.note, w);
    row.prepareS = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    runForwardOnRandomInputs(gpu, graph, row.unetBatch, plan.tileH(), plan.tileW(), o.seed);
    row.firstRunS = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    const int warmup = o.warmupSteps;
    const CudaBackend::ForwardTimes full = gpu.timeForwards(row.unetBatch, warmup, o.repeats);
    const int rest = row.tiles % std::min(row.batch, row.tiles);
    CudaBackend::ForwardTimes remainder;
    if (rest) remainder = gpu.timeForwards(rest * factor, warmup, o.repeats);
    row.forwardMs = median(full.gpuMs);
    row.step =
        unetStepTiming(row.tiles, std::min(row.batch, row.tiles), guidance, row.forwardMs, median(remainder.gpuMs),
                       median(full.hostEnqueueMs), median(remainder.hostEnqueueMs), row.gflopPerEval);
    row.peakMiB = std::max(full.deviceUsedMiB, remainder.deviceUsedMiB);
    row.device = gpu.info().device;
    const GraphStats stats = gpu.graphStats();
    if (mode == GraphMode::Tile && effectiveGraphMode(stats) != GraphMode::Tile) row.graphs += ">off";
    if (!stats.fallbackReason.empty()) appendNote(row.note, stats.fallbackReason);
    row.peakTflops = o.peakTflops ? o.peakTflops : denseTensorPeakTflops(row.device);
}
#endif

// Every (precision x graphs x batch) row over the job's tiles `plan` (latents).
std::vector<SdBenchRow> runSdRows(const BenchOptions& o, const ModelGraph& graph, const TensorMap& weights,
                                  const TilePlan& plan, std::ostream& err) {
    const double gflop = graph.flops(plan.tileH(), plan.tileW()) / 1e9;
    std::vector<SdBenchRow> rows;
    for (Precision p : o.precisions)
        for (GraphMode mode : o.graphs)
            for (int batch : o.batches) {
                SdBenchRow row;
                row.shape = o.shape;
                row.size = benchSizeText(o);
                row.tile = o.tile;
                row.overlap = o.overlap;
                row.batch = batch;
                row.cfg = o.cfg;
                row.precision = std::string(toString(p));
                row.graphs = std::string(toString(mode));
                row.steps = o.steps;
                row.repeats = o.repeats;
                row.gflopPerEval = gflop;
                row.tiles = plan.count();
                row.unetBatch = std::min(batch, row.tiles) * (o.cfg != 1.0 ? 2 : 1);
                row.step.forwardsPerStep = (row.tiles + batch - 1) / batch;
                err << "bench: " << row.precision << ", graphs " << row.graphs << ", batch " << batch << " ..."
                    << std::flush;
                try {
#if TESSERA_FORWARD_PROFILE_CUDA
                    runSdRow(row, o, graph, weights, p, mode, plan);
#else
                    (void)weights;
                    throw std::runtime_error("this build has no CUDA backend");
#endif
                    err << " " << fixed(row.forwardMs, 2) << " ms per forward of " << row.unetBatch << "\n";
                } catch (const std::exception& e) {
                    markFailed(row, e, err);
                }
                rows.push_back(std::move(row));
            }
    return rows;
}

}  // namespace

UNetStepTiming unetStepTiming(int tiles, int batch, bool guidance, double fullMs, double remainderMs, double fullHostMs,
                              double remainderHostMs, double gflopPerEval) {
    UNetStepTiming t;
    const int full = tiles / batch, rest = tiles % batch;
    t.forwardsPerStep = full + (rest ? 1 : 0);
    t.evaluationsPerStep = tiles * (guidance ? 2 : 1);
    t.secondsPerStep = (full * fullMs + (rest ? remainderMs : 0.0)) / 1000.0;
    t.hostEnqueueMsPerStep = full * fullHostMs + (rest ? remainderHostMs : 0.0);
    if (t.secondsPerStep > 0) {
        t.unetEvalsPerS = t.evaluationsPerStep / t.secondsPerStep;
        t.tflops = gflopPerEval * 1e9 * t.evaluationsPerStep / t.secondsPerStep / 1e12;
    }
    return t;
}

std::string sdBenchCsvHeader() {
    return "engine,shape,size,tile,overlap,batch,cfg,unet_batch,precision,steps,tiles,forwards_per_step,"
           "seconds_per_step,seconds_per_image,unet_evals_per_s,forward_ms,tflops,fraction_of_peak,peak_tflops_assumed,"
           "peak_mib,gflop_per_eval,host_enqueue_ms_per_step,prepare_s,first_run_s,graphs,repeats,device,note";
}

void checkSdHostMemory(const BenchOptions& o, const UNetCondConfig& config) {
    checkHostMemoryFor(o, UNetCondModel::expectedTensors(config));
}

void checkHostMemoryFor(const BenchOptions& o, const TensorList& tensors) {
    std::uint64_t params = 0;
    for (const auto& [name, shape] : tensors) {
        std::uint64_t n = 1;
        for (auto d : shape) n *= static_cast<std::uint64_t>(d);
        params += n;
    }
    const std::uint64_t needed = params * 8;  // float32 tensors + the packed upload
    const std::optional<HostMemory> available = availableHostMemory();
    if (available && needed > available->availableBytes)
        fail("shape", o.shape + " needs about " + fixed(static_cast<double>(needed) / (1 << 20), 0) +
                          " MiB of host memory for its random weights; " +
                          fixed(static_cast<double>(available->availableBytes) / (1 << 20), 0) +
                          " MiB are available (" + available->source + ")");
}

int runSdUNetBench(const BenchOptions& o, std::ostream& out, std::ostream& err) {
    const bool flux = isFluxBenchShape(o.shape);
    if (!o.csvPath.empty()) checkBenchCsv(o.csvPath, o.precisions.size() * o.graphs.size() * o.batches.size());
    const TilePlan plan = TilePlan::make(o.width / 8, o.height / 8, o.tile / 8, o.overlap / 8);
    const FluxConfig fluxConfig = benchFluxShapeConfig(o.shape);
    // FLUX.1's T5 context: 512 tokens for dev, 256 for schnell (black-forest-labs/flux cli.py).
    const ModelGraph graph = flux ? fuseForExecution(buildFluxGraph(fluxConfig, fluxConfig.guidanceEmbeds ? 512 : 256))
                                  : unet2DConditionExecutionGraph(benchSdShapeConfig(o.shape));
    auto randomWeights = [&] {
        return flux ? randomTensors(fluxParameters(fluxConfig), o.seed)
                    : UNetCondModel::random(benchSdShapeConfig(o.shape), o.seed).tensors();
    };
    if (o.profile)
        return runProfiles(o, o.shape, graph, randomWeights(), plan.tileH(), plan.tileW(), o.cfg != 1.0 ? 2 : 1, out,
                           err);
    const double gflop = graph.flops(plan.tileH(), plan.tileW()) / 1e9;
    const std::string size = benchSizeText(o);
    err << "bench: " << o.shape << (flux ? " transformer (" : " UNet (")
        << fixed(static_cast<double>(graph.parameterCount()) / 1e6, 1) << " M parameters, random weights), " << size
        << ", tile " << o.tile << ", overlap " << o.overlap << " pixels (latent 1/8), cfg " << significant(o.cfg, 4)
        << ", " << o.repeats << " timed forwards per row after " << o.warmupSteps << " untimed; " << benchDate()
        << "\n";
    const TensorMap weights = randomWeights();
    const std::vector<SdBenchRow> rows = runSdRows(o, graph, weights, plan, err);
    const bool anyFailed = std::any_of(rows.begin(), rows.end(), [](const SdBenchRow& r) { return r.failed; });
    if (!o.csvPath.empty() && !writeBenchCsv(o.csvPath, sdBenchCsvHeader(), rows, sdCsvLine, err)) return kExitFailure;
    out << "\n"
        << o.shape << (flux ? " transformer " : " UNet ") << size << ", tile " << o.tile << ", overlap " << o.overlap
        << " (" << (rows.empty() ? 0 : rows.front().tiles) << " tiles), cfg " << significant(o.cfg, 4) << " ("
        << (o.cfg != 1.0 ? "guidance: 2 evaluations per tile" : "no guidance: 1 evaluation per tile") << "), "
        << fixed(gflop, 1) << " GFLOP per evaluation; UNet forwards only (s/step and evals/s leave out gather, "
        << "guidance, scheduler and scatter); median of " << o.repeats << "\n";
    printSdTable(out, rows);
    return anyFailed ? kExitFailure : kExitOk;
}

}  // namespace tessera
