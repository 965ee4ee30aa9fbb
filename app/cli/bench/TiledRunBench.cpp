#include "app/cli/bench/TiledRunBench.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

#include "app/cli/CliOptions.h"
#include "app/cli/CliText.h"
#include "app/cli/EngineFactory.h"
#include "app/cli/bench/BenchTable.h"
#include "app/cli/bench/ProfileBench.h"
#include "core/cpu/HostMemoryEstimate.h"
#include "core/models/unet/UNetGraph.h"
#include "core/models/unet/UNetModel.h"
#include "core/sampling/TilePlan.h"

namespace tessera {

namespace {

struct BenchRow {
    std::string engine, shape, size, precision, graphs, graphsEffective, device, note;
    int tile = 0, overlap = 0, batch = 0, steps = 0, tiles = 0, repeats = 0;
    int lanesRequested = 0, lanes = 0;  // config lanes (0 = auto) and the lanes the runs used
    double secondsPerImage = 0, tileEvalsPerS = 0, tflops = 0, peakMiB = -1, hostEnqueueMsPerStep = 0;
    double prepareS = 0, firstRunS = 0, gflopPerEval = 0;
    // Graphs: device memory of the executable graphs, nodes, capture + instantiate time (all
    // from the measured runs' records; zero with graphs off), and the median step GPU time.
    double graphMiB = 0, captureMs = 0, stepGpuMs = 0;
    int graphNodes = 0;
    std::optional<double> peakTflops;
    bool failed = false;
};

std::string csvLine(const BenchRow& r) {
    const bool ran = !r.failed;
    auto num = [&](double v) { return ran ? significant(v, 4) : std::string(); };
    std::string line = csvField(r.engine) + "," + csvField(r.shape) + "," + r.size + "," + std::to_string(r.tile) +
                       "," + std::to_string(r.overlap) + "," + std::to_string(r.batch) + "," + r.precision + "," +
                       std::to_string(r.steps) + "," + std::to_string(r.tiles) + "," + num(r.secondsPerImage) + "," +
                       num(r.tileEvalsPerS) + "," + num(r.tflops) + "," +
                       (ran && r.peakMiB >= 0 ? significant(r.peakMiB, 4) : "") + "," + num(r.hostEnqueueMsPerStep) +
                       "," + num(r.prepareS) + "," + significant(r.gflopPerEval, 4) + "," + r.graphs + "," +
                       r.graphsEffective + "," + (ran && r.peakTflops ? significant(r.tflops / *r.peakTflops, 4) : "") +
                       "," + (r.peakTflops ? significant(*r.peakTflops, 4) : "") + "," + num(r.firstRunS) + "," +
                       std::to_string(r.repeats) + "," + csvField(r.device) + "," + csvField(r.note) + "," +
                       (ran ? significant(r.graphMiB, 4) : "") + "," + (ran ? std::to_string(r.graphNodes) : "") + "," +
                       (ran ? num(r.captureMs) : "") + "," + (ran ? num(r.stepGpuMs) : "") + "," +
                       (ran ? std::to_string(r.lanes) : "") + "," + std::to_string(r.lanesRequested);
    return line;
}

void printTable(std::ostream& out, const std::vector<BenchRow>& rows) {
    const std::vector<std::string> head{"engine",   "prec",        "graphs",  "B",        "lanes",
                                        "tiles",    "s/image",     "evals/s", "TFLOP/s",  "%peak",
                                        "peak MiB", "enq ms/step", "prep s",  "1st run s"};
    std::vector<std::vector<std::string>> cells;
    for (const BenchRow& r : rows) {
        if (r.failed) {
            cells.push_back({r.engine, r.precision, r.graphs, std::to_string(r.batch),
                             r.lanesRequested ? std::to_string(r.lanesRequested) : "auto", std::to_string(r.tiles),
                             "failed", "", "", "", "", "", "", ""});
            continue;
        }
        cells.push_back({r.engine, r.precision,
                         r.graphsEffective == r.graphs ? r.graphs : r.graphs + ">" + r.graphsEffective,
                         std::to_string(r.batch), std::to_string(r.lanes) + (r.lanesRequested ? "" : " (auto)"),
                         std::to_string(r.tiles), fixed(r.secondsPerImage, 3), fixed(r.tileEvalsPerS, 0),
                         fixed(r.tflops, 1), r.peakTflops ? fixed(100.0 * r.tflops / *r.peakTflops, 1) : "-",
                         r.peakMiB >= 0 ? fixed(r.peakMiB, 0) : "-", fixed(r.hostEnqueueMsPerStep, 2),
                         fixed(r.prepareS, 2), fixed(r.firstRunS, 2)});
    }
    printCells(out, head, cells);
}

// One row of whole tiled runs on one engine: a warm-up run (prepare, algorithm search, capture),
// then options.repeats measured runs; their medians fill `row`. Throws when a run does not finish.
void runDdpmRow(BenchRow& row, const RunConfig& config, const std::shared_ptr<const UNetModel>& model,
                const BenchOptions& options, std::ostream& err) {
    std::string note;
    // One engine per row: its first run pays prepare, algorithm search and capture.
    std::unique_ptr<Engine> engine = createEngine(options.backend, &note);
    if (!note.empty()) err << "\nnote: " << note << "\n";
    engine->setModel(model);  // Engine interface: every engine takes an in-memory model
    BenchNotes observer;

    RunConfig warm = config;
    if (options.warmupSteps > 0) warm.steps = std::min(options.steps, options.warmupSteps);
    const RunResult first = engine->run(warm, observer);
    if (first.record.status != RunStatus::Finished)
        throw std::runtime_error("warm-up run " + std::string(toString(first.record.status)) + ": " +
                                 first.record.error);
    row.prepareS = first.record.prepareMs / 1000.0;
    row.firstRunS = (first.record.prepareMs + first.record.totalMs) / 1000.0;
    row.engine = "tessera-" + first.record.environment.backend;
    row.device = first.record.environment.device;

    std::vector<double> totals, enqueue, stepGpu;
    double peakMiB = first.record.peakDeviceMiB;
    RunRecord last;
    for (int r = 0; r < options.repeats; ++r) {
        RunResult result = engine->run(config, observer);
        if (result.record.status != RunStatus::Finished)
            throw std::runtime_error("run " + std::string(toString(result.record.status)) + ": " + result.record.error);
        totals.push_back(result.record.totalMs);
        for (const auto& step : result.record.steps) {
            enqueue.push_back(step.hostEnqueueMs);
            stepGpu.push_back(step.gpuMs);
        }
        peakMiB = std::max(peakMiB, result.record.peakDeviceMiB);
        last = std::move(result.record);
    }
    row.graphsEffective = last.graphs.mode.empty() ? row.graphs : last.graphs.mode;
    row.lanes = last.graphs.lanes;
    row.secondsPerImage = median(totals) / 1000.0;
    const double evaluations = static_cast<double>(row.tiles) * options.steps;
    row.tileEvalsPerS = evaluations / row.secondsPerImage;
    row.tflops = row.gflopPerEval * 1e9 * evaluations / row.secondsPerImage / 1e12;
    row.peakMiB = peakMiB;
    row.hostEnqueueMsPerStep = median(enqueue);
    row.stepGpuMs = median(stepGpu);
    row.graphMiB = std::max(first.record.graphs.graphMemMiB, last.graphs.graphMemMiB);
    row.graphNodes = std::max(first.record.graphs.nodes, last.graphs.nodes);
    row.captureMs = first.record.graphs.captureMs + first.record.graphs.instantiateMs;
    row.peakTflops = options.peakTflops;
    if (!row.peakTflops && last.environment.backend == "cuda") row.peakTflops = denseTensorPeakTflops(row.device);
    // The engine's own words (e.g. why a graph capture fell back to graphs off).
    std::vector<std::string> notes = last.messages;
    for (const auto& m : observer.messages)
        if (std::find(notes.begin(), notes.end(), m) == notes.end()) notes.push_back(m);
    for (const auto& m : notes) appendNote(row.note, m);
    err << " " << fixed(row.secondsPerImage, 3) << " s/image\n";
    for (const auto& m : notes) err << "note: " << m << "\n";
}

// The model of the rows: every row's settings, the backend and the host memory are checked
// before any work (from the model's config alone), then its weights are loaded or drawn.
// Throws ValidationError or ModelError for what cannot run. `shapeName` names it in the table.
std::shared_ptr<const UNetModel> benchModel(const BenchOptions& options, std::string& shapeName) {
    ModelFolderConfig folder;
    if (!options.model.empty()) {
        folder = readModelFolderConfig(resolveModelFolder(options.model, {}));
    } else {
        folder.config = benchShapeConfig(options.shape);
        // folder.scheduler keeps diffusers' defaults: UNetModel::random's schedule
    }
    const BackendKind backend = checkRunBackend(options.backend);
    const std::optional<HostMemory> available = availableHostMemory();
    for (int batch : options.batches) {
        const RunConfig probe = benchCanvasConfig(options, batch);
        validate(probe, folder.limits());
        if (available) checkHostMemory(probe, folder.config, backend, std::nullopt, *available);
    }
    if (options.model.empty()) {
        shapeName = options.shape;
        return std::make_shared<const UNetModel>(UNetModel::random(folder.config, options.seed));
    }
    auto model = std::make_shared<const UNetModel>(UNetModel::load(options.model));
    shapeName = std::filesystem::path(options.model).lexically_normal().filename().string();
    if (shapeName.empty()) shapeName = model->name();
    return model;
}

// Every (precision x graphs x lanes x batch) row, run in that order.
std::vector<BenchRow> runRows(const BenchOptions& options, const std::shared_ptr<const UNetModel>& model,
                              const std::string& shapeName, std::ostream& err) {
    std::vector<BenchRow> rows;
    for (Precision precision : options.precisions)
        for (GraphMode graphs : options.graphs)
            for (int lanes : options.lanes)
                for (int batch : options.batches) {
                    BenchRow row;
                    row.lanesRequested = lanes;
                    row.shape = shapeName;
                    row.size = benchSizeText(options);
                    row.tile = options.tile;
                    row.overlap = options.overlap;
                    row.batch = batch;
                    row.precision = std::string(toString(precision));
                    row.graphs = std::string(toString(graphs));
                    row.graphsEffective = row.graphs;
                    row.steps = options.steps;
                    row.repeats = options.repeats;
                    row.engine = "tessera";
                    const RunConfig config = benchRowConfig(options, precision, graphs, lanes, batch);
                    const TilePlan plan = TilePlan::fromConfig(config);
                    row.tiles = plan.count();
                    row.gflopPerEval = model->flopsPerEvaluation(plan.tileH(), plan.tileW()) / 1e9;
                    err << "bench: " << row.precision << ", graphs " << row.graphs << ", lanes "
                        << (lanes ? std::to_string(lanes) : std::string("auto")) << ", batch " << batch << " ..."
                        << std::flush;
                    try {
                        runDdpmRow(row, config, model, options, err);
                    } catch (const std::exception& e) {
                        markFailed(row, e, err);
                    }
                    rows.push_back(std::move(row));
                }
    return rows;
}

}  // namespace

std::string benchCsvHeader() {
    return "engine,shape,size,tile,overlap,batch,precision,steps,tiles,seconds_per_image,tile_evals_per_s,tflops,"
           "peak_mib,host_enqueue_ms_per_step,prepare_s,gflop_per_eval,graphs,graphs_effective,fraction_of_peak,"
           "peak_tflops_assumed,first_run_s,repeats,device,note,graph_mib,graph_nodes,capture_ms,step_gpu_ms,lanes,"
           "lanes_requested";
}

int runTiledRunBench(const BenchOptions& options, std::ostream& out, std::ostream& err) {
    std::shared_ptr<const UNetModel> model;
    std::string shapeName;
    try {
        model = benchModel(options, shapeName);
        if (options.profile)
            return runProfiles(options, shapeName, unet2DExecutionGraph(model->config()), model->tensors(),
                               options.tile, options.tile, 1, out, err);
        // The CSV is written whole after the last row; its folder is checked now, before the first run.
        if (!options.csvPath.empty())
            checkBenchCsv(options.csvPath, options.precisions.size() * options.graphs.size() * options.lanes.size() *
                                               options.batches.size());
    } catch (...) {
        return benchInputFailure(err);
    }

    const std::string size = benchSizeText(options);
    err << "bench: " << shapeName << " (" << fixed(model->parameterCount() / 1e6, 1) << " M parameters), " << size
        << ", tile " << options.tile << ", overlap " << options.overlap << ", " << options.steps << " DDIM steps, "
        << options.repeats << " measured run(s) per row after a "
        << (options.warmupSteps ? options.warmupSteps : options.steps) << "-step warm-up run; " << benchDate() << "\n";
    const std::vector<BenchRow> rows = runRows(options, model, shapeName, err);
    const bool anyFailed = std::any_of(rows.begin(), rows.end(), [](const BenchRow& r) { return r.failed; });
    if (!options.csvPath.empty() && !writeBenchCsv(options.csvPath, benchCsvHeader(), rows, csvLine, err))
        return kExitFailure;

    out << "\n"
        << shapeName << " " << size << ", tile " << options.tile << ", overlap " << options.overlap << " ("
        << (rows.empty() ? 0 : rows.front().tiles) << " tiles), " << options.steps << " DDIM steps, "
        << fixed(rows.empty() ? 0.0 : rows.front().gflopPerEval, 2) << " GFLOP per tile evaluation; median of "
        << options.repeats << "\n";
    printTable(out, rows);
    // The peak of the last row that knew one, and whose device it is.
    const auto shown = std::find_if(rows.rbegin(), rows.rend(),
                                    [](const BenchRow& r) { return !r.failed && r.peakTflops.has_value(); });
    if (shown != rows.rend())
        out << "peak assumed: " << fixed(*shown->peakTflops, 0) << " TFLOP/s dense fp16/bf16 tensor"
            << (options.peakTflops ? " (--peak-tflops)" : " (" + shown->device + ")") << "\n";
    else
        out << "peak: unknown for this device (give --peak-tflops); %peak left out\n";
    return anyFailed ? kExitFailure : kExitOk;
}

}  // namespace tessera
