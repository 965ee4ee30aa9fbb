#include "app/BenchCommand.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include "app/CliOptions.h"
#include "app/EngineFactory.h"
#include "core/BoundedInput.h"
#include "core/HostMemoryEstimate.h"
#include "core/OutputSet.h"
#include "core/TilePlan.h"
#include "core/UNetModel.h"

namespace tessera {

namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitInvalid = 2;

[[noreturn]] void fail(const std::string& field, const std::string& message) {
    throw ValidationError(field, field + ": " + message);
}

// A value as typed, quoted for a message: a short escaped excerpt, never the whole of it.
std::string inQuotes(std::string_view text) { return "'" + excerpt(text) + "'"; }

int parsePositive(const std::string& field, const std::string& text, int lo = 1) {
    int value = 0;
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (text.empty() || ec != std::errc() || ptr != end) fail(field, inQuotes(text) + " is not a whole number");
    if (value < lo) fail(field, inQuotes(text) + " is not allowed; it must be at least " + std::to_string(lo));
    return value;
}

std::vector<std::string> splitList(const std::string& field, const std::string& text) {
    std::vector<std::string> items;
    std::string item;
    std::istringstream in(text);
    while (std::getline(in, item, ','))
        if (!item.empty()) items.push_back(item);
    if (items.empty()) fail(field, inQuotes(text) + " is an empty list; give values separated by commas");
    return items;
}

double median(std::vector<double> values) {
    if (values.empty()) return 0;
    std::sort(values.begin(), values.end());
    const std::size_t n = values.size();
    return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

std::string fixed(double value, int decimals) {
    char text[64];
    std::snprintf(text, sizeof text, "%.*f", decimals, value);
    return text;
}

// Four significant digits, like the PyTorch script's "%.4g".
std::string sig4(double value) {
    char text[64];
    std::snprintf(text, sizeof text, "%.4g", value);
    return text;
}

std::string csvField(const std::string& text) {
    if (text.find_first_of(",\"\n") == std::string::npos) return text;
    std::string quoted = "\"";
    for (char c : text) {
        if (c == '"') quoted += '"';
        quoted += c == '\n' ? ' ' : c;
    }
    return quoted + "\"";
}

// Collects nothing but the engine's notes; progress is one line per run.
class QuietObserver : public RunObserver {
public:
    void onMessage(const std::string& message) override { messages.push_back(message); }
    std::vector<std::string> messages;
};

struct BenchRow {
    std::string engine, shape, size, precision, graphs, graphsEffective, device, note;
    int tile = 0, overlap = 0, batch = 0, steps = 0, tiles = 0, repeats = 0;
    int lanesRequested = 0, lanes = 0;   // config lanes (0 = auto) and the lanes the runs used
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
    auto num = [&](double v) { return ran ? sig4(v) : std::string(); };
    std::string line = csvField(r.engine) + "," + csvField(r.shape) + "," + r.size + "," + std::to_string(r.tile) + "," +
                       std::to_string(r.overlap) + "," + std::to_string(r.batch) + "," + r.precision + "," +
                       std::to_string(r.steps) + "," + std::to_string(r.tiles) + "," + num(r.secondsPerImage) + "," +
                       num(r.tileEvalsPerS) + "," + num(r.tflops) + "," + (ran && r.peakMiB >= 0 ? sig4(r.peakMiB) : "") +
                       "," + num(r.hostEnqueueMsPerStep) + "," + num(r.prepareS) + "," + sig4(r.gflopPerEval) + "," +
                       r.graphs + "," + r.graphsEffective + "," +
                       (ran && r.peakTflops ? sig4(r.tflops / *r.peakTflops) : "") + "," +
                       (r.peakTflops ? sig4(*r.peakTflops) : "") + "," + num(r.firstRunS) + "," +
                       std::to_string(r.repeats) + "," + csvField(r.device) + "," + csvField(r.note) + "," +
                       (ran ? sig4(r.graphMiB) : "") + "," + (ran ? std::to_string(r.graphNodes) : "") + "," +
                       (ran ? num(r.captureMs) : "") + "," + (ran ? num(r.stepGpuMs) : "") + "," +
                       (ran ? std::to_string(r.lanes) : "") + "," + std::to_string(r.lanesRequested);
    return line;
}

std::string pad(const std::string& text, std::size_t width) {
    return text.size() >= width ? text : std::string(width - text.size(), ' ') + text;
}

void printTable(std::ostream& out, const std::vector<BenchRow>& rows) {
    const std::vector<std::string> head{"engine", "prec", "graphs", "B", "lanes", "tiles", "s/image", "evals/s",
                                        "TFLOP/s", "%peak", "peak MiB", "enq ms/step", "prep s", "1st run s"};
    std::vector<std::vector<std::string>> cells;
    for (const BenchRow& r : rows) {
        if (r.failed) {
            cells.push_back({r.engine, r.precision, r.graphs, std::to_string(r.batch),
                             r.lanesRequested ? std::to_string(r.lanesRequested) : "auto", std::to_string(r.tiles),
                             "failed", "", "", "", "", "", "", ""});
            continue;
        }
        cells.push_back({r.engine, r.precision, r.graphsEffective == r.graphs ? r.graphs : r.graphs + ">" + r.graphsEffective,
                         std::to_string(r.batch),
                         std::to_string(r.lanes) + (r.lanesRequested ? "" : " (auto)"), std::to_string(r.tiles),
                         fixed(r.secondsPerImage, 3),
                         fixed(r.tileEvalsPerS, 0), fixed(r.tflops, 1),
                         r.peakTflops ? fixed(100.0 * r.tflops / *r.peakTflops, 1) : "-",
                         r.peakMiB >= 0 ? fixed(r.peakMiB, 0) : "-", fixed(r.hostEnqueueMsPerStep, 2), fixed(r.prepareS, 2),
                         fixed(r.firstRunS, 2)});
    }
    std::vector<std::size_t> widths(head.size());
    for (std::size_t c = 0; c < head.size(); ++c) {
        widths[c] = head[c].size();
        for (const auto& row : cells) widths[c] = std::max(widths[c], row[c].size());
    }
    for (std::size_t c = 0; c < head.size(); ++c) out << (c ? "  " : "") << pad(head[c], widths[c]);
    out << "\n";
    for (const auto& row : cells) {
        for (std::size_t c = 0; c < row.size(); ++c) out << (c ? "  " : "") << pad(row[c], widths[c]);
        out << "\n";
    }
}

std::string today() {
    const std::time_t now = std::time(nullptr);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
    return text;
}

}  // namespace

ModelConfig benchShapeConfig(std::string_view shape) {
    ModelConfig c;
    c.layersPerBlock = 2;
    c.attentionHeadDim = std::nullopt;
    c.downsamplePadding = 0;
    c.normEps = 1e-6f;
    c.normNumGroups = 32;
    c.freqShift = 1;
    c.flipSinToCos = false;
    c.midBlockScaleFactor = 1.0f;
    c.inChannels = c.outChannels = 3;
    using D = DownBlockType;
    using U = UpBlockType;
    if (shape == "cifar") {  // google/ddpm-cifar10-32
        c.sampleSize = 32;
        c.blockOutChannels = {128, 256, 256, 256};
        c.downBlocks = {D::Down, D::AttnDown, D::Down, D::Down};
        c.upBlocks = {U::Up, U::Up, U::AttnUp, U::Up};
    } else if (shape == "church") {  // google/ddpm-church-256 (attention at 16x16 of 256)
        c.sampleSize = 256;
        c.blockOutChannels = {128, 128, 256, 256, 512, 512};
        c.downBlocks = {D::Down, D::Down, D::Down, D::Down, D::AttnDown, D::Down};
        c.upBlocks = {U::Up, U::AttnUp, U::Up, U::Up, U::Up, U::Up};
    } else {
        fail("shape", inQuotes(shape) + " is not one of cifar, church");
    }
    return c;
}

std::optional<double> denseTensorPeakTflops(std::string_view name) {
    auto has = [&](std::string_view part) { return name.find(part) != std::string_view::npos; };
    // Datasheet dense (no sparsity) fp16/bf16 tensor throughput at boost clock.
    if (has("H100")) {
        if (has("PCIe")) return 756.0;
        if (has("NVL")) return 835.0;
        return 989.0;  // SXM5 (reported as "NVIDIA H100 80GB HBM3")
    }
    if (has("H200")) return 989.0;
    if (has("GH200")) return 989.0;
    if (has("A100")) return 312.0;
    if (has("L40S")) return 362.0;
    if (has("A10G")) return 70.0;
    if (has("RTX 4090")) return 165.0;
    return std::nullopt;
}

std::string benchCsvHeader() {
    return "engine,shape,size,tile,overlap,batch,precision,steps,tiles,seconds_per_image,tile_evals_per_s,tflops,"
           "peak_mib,host_enqueue_ms_per_step,prepare_s,gflop_per_eval,graphs,graphs_effective,fraction_of_peak,"
           "peak_tflops_assumed,first_run_s,repeats,device,note,graph_mib,graph_nodes,capture_ms,step_gpu_ms,lanes,"
           "lanes_requested";
}

std::string benchUsage() {
    return "Usage: tessera-cli bench (--shape cifar|church | --model DIR) [options]\n"
           "Times tiled DDIM generations for every combination of --batch x --precision x --graphs x --lanes.\n"
           "Each row: a warm-up run (prepare, cuDNN algorithm search, graph capture), then --repeats\n"
           "measured runs on the same engine; the median is reported. Previews are off.\n\n"
           "  --shape NAME           random-weight network of a diffusers shape: cifar (google/ddpm-cifar10-32,\n"
           "                         35.7 M parameters) or church (google/ddpm-church-256)\n"
           "  --model DIR            a diffusers UNet2DModel folder instead\n"
           "  --size PX              square image (sets --width and --height; default 1024)\n"
           "  --width PX, --height PX\n"
           "  --tile PX              tile edge (default 64)\n"
           "  --overlap PX           tile overlap in pixels (default 16)\n"
           "  --batch LIST           tiles per UNet call, e.g. 1,8,32 (default 1,8,32)\n"
           "  --precision LIST       fp16, bf16, fp32 (default fp16; the CPU always computes fp32)\n"
           "  --graphs LIST          off, tile, step (default off)\n"
           "  --lanes LIST           CUDA: tile batches in flight at once, 0 = auto, 1..8 (default 0)\n"
           "  --steps N              DDIM steps (default 20)\n"
           "  --repeats N            measured runs per row (default 3; the median is reported)\n"
           "  --warmup-steps N       steps of the warm-up run (default 3, enough for every graph capture;\n"
           "                         0 = as many as --steps)\n"
           "  --backend NAME         auto, cuda or cpu (default auto)\n"
           "  --seed N               noise seed and random-weight seed (default 0)\n"
           "  --peak-tflops X        the GPU's dense fp16/bf16 tensor peak (default: known from its name)\n"
           "  --csv FILE             write the rows as CSV (columns as bench/torch_tiled_ddim.py, plus more)\n"
           "  --tuning-cache FILE|off  CUDA: the tuning cache of timed choices (default: the user's cache\n"
           "                         file, as render); off times every prepare (prepare_s as without a cache)\n"
           "  --help, -h             this text\n";
}

BenchOptions parseBenchOptions(const std::vector<std::string>& args) {
    // Every bench option takes a value (--help, -h aside); its field as messages name it.
    static const std::map<std::string, std::string> kOptions{
        {"shape", "shape"},     {"model", "model"},     {"size", "size"},
        {"width", "width"},     {"height", "height"},   {"tile", "tile"},
        {"overlap", "overlap"}, {"batch", "batch"},     {"precision", "precision"},
        {"graphs", "graphs"},   {"lanes", "lanes"},     {"steps", "steps"},
        {"repeats", "repeats"}, {"warmup-steps", "warmup_steps"}, {"backend", "backend"},
        {"seed", "seed"},       {"peak-tflops", "peak_tflops"},   {"csv", "csv"},
        {"tuning-cache", "tuning_cache"}};
    BenchOptions o;
    bool sizeGiven = false, widthGiven = false, heightGiven = false;
    for (std::size_t i = 0; i < args.size(); ++i) {
        std::string name = args[i], value;
        if (name == "-h" || name == "--help") {
            o.help = true;
            continue;
        }
        if (name.rfind("--", 0) != 0) fail("option", "unexpected argument " + inQuotes(name) + "; options start with --");
        name = name.substr(2);
        const auto eq = name.find('=');
        if (eq != std::string::npos) {
            value = name.substr(eq + 1);
            name = name.substr(0, eq);
        }
        const auto known = kOptions.find(name);
        if (known == kOptions.end())
            fail("option", "unknown option '--" + excerpt(name) + "'; see 'tessera-cli bench --help'");
        if (eq == std::string::npos) {
            if (i + 1 >= args.size()) fail(known->second, "option '--" + name + "' needs a value");
            value = args[++i];
        }
        if (name == "shape") {
            benchShapeConfig(value);  // validates the name
            o.shape = value;
        } else if (name == "model") {
            if (value.empty()) fail("model", "a model folder is needed");
            checkPathText("model", value, "a model folder path");
            o.model = value;
        } else if (name == "size") {
            o.width = o.height = parsePositive("size", value);
            sizeGiven = true;
        } else if (name == "width") {
            o.width = parsePositive("width", value);
            widthGiven = true;
        } else if (name == "height") {
            o.height = parsePositive("height", value);
            heightGiven = true;
        } else if (name == "tile") {
            o.tile = parsePositive("tile", value);
        } else if (name == "overlap") {
            o.overlap = parsePositive("overlap", value, 0);
        } else if (name == "batch") {
            o.batches.clear();
            for (const auto& item : splitList("batch", value)) o.batches.push_back(parsePositive("batch", item));
        } else if (name == "precision") {
            o.precisions.clear();
            for (const auto& item : splitList("precision", value)) o.precisions.push_back(parsePrecision(item));
        } else if (name == "graphs") {
            o.graphs.clear();
            for (const auto& item : splitList("graphs", value)) o.graphs.push_back(parseGraphMode(item));
        } else if (name == "lanes") {
            o.lanes.clear();
            for (const auto& item : splitList("lanes", value)) {
                const int lanes = parsePositive("lanes", item, 0);
                if (lanes > kMaxLanes)
                    fail("lanes", inQuotes(item) + " is not allowed; lanes must be 0 (auto) to " + std::to_string(kMaxLanes));
                o.lanes.push_back(lanes);
            }
        } else if (name == "steps") {
            o.steps = parsePositive("steps", value);
        } else if (name == "repeats") {
            o.repeats = parsePositive("repeats", value);
        } else if (name == "warmup-steps") {
            o.warmupSteps = parsePositive("warmup_steps", value, 0);
        } else if (name == "backend") {
            o.backend = parseBackend(value);
        } else if (name == "seed") {
            std::uint64_t seed = 0;
            const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), seed);
            if (value.empty() || ec != std::errc() || ptr != value.data() + value.size())
                fail("seed", inQuotes(value) + " is not a whole number");
            o.seed = seed;
        } else if (name == "peak-tflops") {
            double peak = 0;
            const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), peak);
            if (value.empty() || ec != std::errc() || ptr != value.data() + value.size() || !(peak > 0))
                fail("peak_tflops", inQuotes(value) + " is not a positive number");
            o.peakTflops = peak;
        } else if (name == "csv") {
            if (value.empty()) fail("csv", "a file name is needed");
            checkPathText("csv", value, "the csv file");
            o.csvPath = value;
        } else if (name == "tuning-cache") {
            if (value.empty()) fail("tuning_cache", "a file path or off is needed");
            checkPathText("tuning_cache", value, "the tuning cache path (or off)");
            o.tuningCache = value;
        }
    }
    if (o.help) return o;
    if (sizeGiven && (widthGiven || heightGiven)) fail("size", "give --size or --width/--height, not both");
    if (o.shape.empty() == o.model.empty())
        fail("shape", o.shape.empty() ? "give --shape cifar|church (random weights) or --model DIR"
                                      : "give --shape or --model, not both");
    return o;
}

// Over 150 lines, not yet split: option handling, the run loop and the table are to part when
// bench folds tessera-cuda-bench in and moves to the Qt-free CLI core (issue 14 item 8).
int runBenchCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
    BenchOptions options;
    std::shared_ptr<const UNetModel> model;
    std::string shapeName;
    try {
        options = parseBenchOptions(args);
        if (options.help) {
            out << benchUsage();
            return kExitOk;
        }
        // Every row's settings, the backend and the host memory are checked before any work
        // (the model's weights are loaded or drawn only then), from the model's config alone.
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
            RunConfig probe;
            probe.width = options.width;
            probe.height = options.height;
            probe.tile = options.tile;
            probe.overlapPx = options.overlap;
            probe.tileBatch = batch;
            probe.steps = options.steps;
            probe.previewEvery = 0;
            validate(probe, folder.limits());
            if (available) checkHostMemory(probe, folder.config, backend, std::nullopt, *available);
        }
        if (!options.model.empty()) {
            model = std::make_shared<const UNetModel>(UNetModel::load(options.model));
            shapeName = std::filesystem::path(options.model).lexically_normal().filename().string();
            if (shapeName.empty()) shapeName = model->name();
        } else {
            model = std::make_shared<const UNetModel>(UNetModel::random(folder.config, options.seed));
            shapeName = options.shape;
        }
    } catch (const ValidationError& e) {
        err << "tessera-cli bench: " << e.what() << "\n";
        return kExitInvalid;
    } catch (const ModelError& e) {
        err << "tessera-cli bench: model: " << e.what() << "\n";
        return kExitInvalid;
    }

    // The CSV is written whole after the last row (core/OutputSet.h: all or nothing); its
    // folder is checked now, before the first run. A row is well under 1 KiB.
    if (!options.csvPath.empty()) {
        const std::uintmax_t rowCount = options.precisions.size() * options.graphs.size() * options.lanes.size() *
                                        options.batches.size();
        const std::uintmax_t bytes = (4u << 10) + (1u << 10) * rowCount;
        try {
            checkOutputFile(options.csvPath, "csv", OutputNeeds{bytes, bytes, {}});
        } catch (const ValidationError& e) {
            err << "tessera-cli bench: " << e.what() << "\n";
            return kExitInvalid;
        }
    }

    const std::string size = options.width == options.height
                                 ? std::to_string(options.width)
                                 : std::to_string(options.width) + "x" + std::to_string(options.height);
    err << "bench: " << shapeName << " (" << fixed(model->parameterCount() / 1e6, 1) << " M parameters), " << size
        << ", tile " << options.tile << ", overlap " << options.overlap << ", " << options.steps << " DDIM steps, "
        << options.repeats << " measured run(s) per row after a " << (options.warmupSteps ? options.warmupSteps : options.steps)
        << "-step warm-up run; " << today() << "\n";

    std::vector<BenchRow> rows;
    std::optional<double> shownPeak;
    std::string shownDevice;
    bool anyFailed = false;
    for (Precision precision : options.precisions) {
        for (GraphMode graphs : options.graphs) {
            for (int lanes : options.lanes)
            for (int batch : options.batches) {
                BenchRow row;
                row.lanesRequested = lanes;
                row.shape = shapeName;
                row.size = size;
                row.tile = options.tile;
                row.overlap = options.overlap;
                row.batch = batch;
                row.precision = std::string(toString(precision));
                row.graphs = std::string(toString(graphs));
                row.graphsEffective = row.graphs;
                row.steps = options.steps;
                row.repeats = options.repeats;
                row.engine = "tessera";

                RunConfig config;
                config.width = options.width;
                config.height = options.height;
                config.tile = options.tile;
                config.overlapPx = options.overlap;
                config.tileBatch = batch;
                config.steps = options.steps;
                config.scheduler = SchedulerKind::DDIM;
                config.precision = precision;
                config.graphs = graphs;
                config.lanes = lanes;
                config.backend = options.backend;
                config.seed = options.seed;
                config.previewEvery = 0;  // a benchmark measures sampling, not preview copies
                config.label = "bench";
                config.tuningCache = options.tuningCache;
                {
                    const TilePlan plan = TilePlan::fromConfig(config);
                    row.tiles = plan.count();
                    row.gflopPerEval = model->flopsPerEvaluation(plan.tileH(), plan.tileW()) / 1e9;
                }
                err << "bench: " << row.precision << ", graphs " << row.graphs << ", lanes "
                    << (lanes ? std::to_string(lanes) : std::string("auto")) << ", batch " << batch << " ..." << std::flush;
                try {
                    std::string note;
                    // One engine per row: its first run pays prepare, algorithm search and capture.
                    std::unique_ptr<Engine> engine = createEngine(options.backend, &note);
                    if (!note.empty()) err << "\nnote: " << note << "\n";
                    engine->setModel(model);  // Engine interface: every engine takes an in-memory model
                    QuietObserver observer;

                    RunConfig warm = config;
                    if (options.warmupSteps > 0) warm.steps = std::min(options.steps, options.warmupSteps);
                    const RunResult first = engine->run(warm, observer);
                    if (first.record.status != "finished")
                        throw std::runtime_error("warm-up run " + first.record.status + ": " + first.record.error);
                    row.prepareS = first.record.prepareMs / 1000.0;
                    row.firstRunS = (first.record.prepareMs + first.record.totalMs) / 1000.0;
                    row.engine = "tessera-" + first.record.environment.backend;
                    row.device = first.record.environment.device;

                    std::vector<double> totals, enqueue, stepGpu;
                    double peakMiB = first.record.peakDeviceMiB;
                    RunRecord last;
                    for (int r = 0; r < options.repeats; ++r) {
                        RunResult result = engine->run(config, observer);
                        if (result.record.status != "finished")
                            throw std::runtime_error("run " + result.record.status + ": " + result.record.error);
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
                    for (const auto& m : notes) row.note += (row.note.empty() ? "" : "; ") + m;
                    if (row.peakTflops) {
                        shownPeak = row.peakTflops;
                        shownDevice = row.device;
                    }
                    err << " " << fixed(row.secondsPerImage, 3) << " s/image\n";
                    for (const auto& m : notes) err << "note: " << m << "\n";
                } catch (const std::exception& e) {
                    row.failed = true;
                    row.note = std::string("failed: ") + e.what();
                    anyFailed = true;
                    err << " " << row.note << "\n";
                }
                rows.push_back(std::move(row));
            }
        }
    }

    if (!options.csvPath.empty()) {
        std::string csv = benchCsvHeader() + "\n";
        for (const BenchRow& row : rows) csv += csvLine(row) + "\n";
        try {
            writeTextFileAtomically(options.csvPath, csv);
        } catch (const std::exception& e) {
            err << "tessera-cli bench: csv: " << e.what() << "\n";
            return kExitFailure;
        }
    }

    out << "\n" << shapeName << " " << size << ", tile " << options.tile << ", overlap " << options.overlap << " ("
        << (rows.empty() ? 0 : rows.front().tiles) << " tiles), " << options.steps << " DDIM steps, "
        << fixed(rows.empty() ? 0.0 : rows.front().gflopPerEval, 2) << " GFLOP per tile evaluation; median of "
        << options.repeats << "\n";
    printTable(out, rows);
    if (shownPeak)
        out << "peak assumed: " << fixed(*shownPeak, 0) << " TFLOP/s dense fp16/bf16 tensor"
            << (options.peakTflops ? " (--peak-tflops)" : " (" + shownDevice + ")") << "\n";
    else
        out << "peak: unknown for this device (give --peak-tflops); %peak left out\n";
    return anyFailed ? kExitFailure : kExitOk;
}

}  // namespace tessera
