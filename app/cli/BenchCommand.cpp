#include "app/cli/BenchCommand.h"

#include <algorithm>
#include <atomic>
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
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>

#include <nlohmann/json.hpp>

#include "app/cli/CliOptions.h"
#include "app/cli/CliText.h"
#include "app/cli/EngineFactory.h"
#include "app/cli/ForwardProfile.h"
#include "core/base/BoundedInput.h"
#include "core/cpu/HostMemoryEstimate.h"
#include "core/run/OutputSet.h"
#include "core/models/sd/SdModel.h"
#include "core/sampling/TilePlan.h"
#include "core/models/vae/TiledVae.h"
#include "core/formats/TuningCache.h"
#include "core/models/sd/UNetCondGraph.h"
#include "core/models/sd/UNetCondModel.h"
#include "core/models/unet/UNetGraph.h"
#include "core/models/unet/UNetModel.h"
#include "core/models/vae/VaeConfig.h"
#include "core/models/vae/VaeGraph.h"
#include "core/models/vae/VaeModel.h"

#if defined(TESSERA_HAVE_CUDA) && TESSERA_HAVE_CUDA && __has_include("kernels/backend/CudaBackend.h")
#define TESSERA_BENCH_CUDA 1
#include <cuda_runtime.h>

#include "kernels/backend/CudaBackend.h"
#include "kernels/device/CudaCheck.h"
#include "kernels/engine/CudaTileDevice.h"
#include "kernels/device/DeviceResources.h"
#else
#define TESSERA_BENCH_CUDA 0
#endif

namespace tessera {

namespace {

int parsePositive(const std::string& field, const std::string& text, int lo = 1) { return parseCount(field, text, lo); }

std::vector<std::string> splitList(const std::string& field, const std::string& text) {
    std::vector<std::string> items;
    std::string item;
    std::istringstream in(text);
    while (std::getline(in, item, ','))
        if (!item.empty()) items.push_back(item);
    if (items.empty()) fail(field, inQuotes(text) + " is an empty list; give values separated by commas");
    return items;
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
    auto num = [&](double v) { return ran ? significant(v, 4) : std::string(); };
    std::string line = csvField(r.engine) + "," + csvField(r.shape) + "," + r.size + "," + std::to_string(r.tile) + "," +
                       std::to_string(r.overlap) + "," + std::to_string(r.batch) + "," + r.precision + "," +
                       std::to_string(r.steps) + "," + std::to_string(r.tiles) + "," + num(r.secondsPerImage) + "," +
                       num(r.tileEvalsPerS) + "," + num(r.tflops) + "," + (ran && r.peakMiB >= 0 ? significant(r.peakMiB, 4) : "") +
                       "," + num(r.hostEnqueueMsPerStep) + "," + num(r.prepareS) + "," + significant(r.gflopPerEval, 4) + "," +
                       r.graphs + "," + r.graphsEffective + "," +
                       (ran && r.peakTflops ? significant(r.tflops / *r.peakTflops, 4) : "") + "," +
                       (r.peakTflops ? significant(*r.peakTflops, 4) : "") + "," + num(r.firstRunS) + "," +
                       std::to_string(r.repeats) + "," + csvField(r.device) + "," + csvField(r.note) + "," +
                       (ran ? significant(r.graphMiB, 4) : "") + "," + (ran ? std::to_string(r.graphNodes) : "") + "," +
                       (ran ? num(r.captureMs) : "") + "," + (ran ? num(r.stepGpuMs) : "") + "," +
                       (ran ? std::to_string(r.lanes) : "") + "," + std::to_string(r.lanesRequested);
    return line;
}

// The rows' CSV, written whole after the last row (core/run/OutputSet.h: all or nothing). False,
// after saying why on `err`, when it could not be written.
template <typename Row, typename Line>
bool writeCsv(const std::string& path, const std::string& header, const std::vector<Row>& rows, Line line,
              std::ostream& err) {
    std::string csv = header + "\n";
    for (const Row& row : rows) csv += line(row) + "\n";
    try {
        writeTextFileAtomically(path, csv);
    } catch (const std::exception& e) {
        err << "tessera-cli bench: csv: " << e.what() << "\n";
        return false;
    }
    return true;
}

// A row whose runs threw: kept in the table and the CSV, marked failed, the error as its note.
template <typename Row>
void markFailed(Row& row, const std::exception& e, std::ostream& err) {
    row.failed = true;
    row.note = std::string("failed: ") + e.what();
    err << " " << row.note << "\n";
}

std::string pad(const std::string& text, std::size_t width) {
    return text.size() >= width ? text : std::string(width - text.size(), ' ') + text;
}

// Right-aligned columns, two spaces apart.
void printCells(std::ostream& out, const std::vector<std::string>& head, const std::vector<std::vector<std::string>>& cells) {
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
    printCells(out, head, cells);
}

std::string today() {
    const std::time_t now = std::time(nullptr);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
    return text;
}

}  // namespace

UNetConfig benchShapeConfig(std::string_view shape) {
    UNetConfig c;
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
    return "Usage: tessera-cli bench (--shape cifar|church|sd15|sd21|sdxl | --model DIR) [options]\n"
           "       tessera-cli bench --shape vae [options]   (the SD VAE alone: bench --shape vae --help)\n"
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
           "  --batch LIST           tiles per UNet call, e.g. 1,8,32 (default 1,8,32); with --job also\n"
           "                         auto (the run's default: all the tiles over the fewest calls of at most 32)\n"
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
           "  --profile              instead of runs: per precision x batch, one forward's GPU time per op\n"
           "                         (event-record nodes in one captured forward) grouped by kind, the 25\n"
           "                         slowest ops, the forward timed eagerly and as a CUDA graph (--repeats\n"
           "                         timed after --warmup-steps untimed; default 20 after 3) and the arena\n"
           "                         (weights, activations, workspace). CUDA only; not with --graphs, --lanes,\n"
           "                         --csv, --steps\n"
           "  --help, -h             this text\n\n"
           "Stable Diffusion UNets (CUDA only): --shape sd15 (SD 1.5, 860 M parameters, context 77x768),\n"
           "sd21 (SD 2.1 768-v: context 77x1024, linear projections, heads 5,10,20,20, upcast attention) or\n"
           "sdxl (SDXL base: 2.6 G parameters, context 77x2048, depths 1,2,10, text_embeds_time 2816),\n"
           "random weights. Each row times --repeats forwards of one tile batch (CUDA events, median) after\n"
           "--warmup-steps untimed ones and derives the UNet's share of a step of the tiled job: UNet\n"
           "evaluations/s, seconds per step, TFLOP/s, %peak, device MiB in use. Sizes are pixels, latents 1/8.\n"
           "  --cfg X                guidance scale (default 7): not 1 = two UNet evaluations per tile\n"
           "                         (one doubled batch), 1 = one\n"
           "  defaults here: --size 2048, --tile 512 (sd15) / 768 (sd21) / 1024 (sdxl), --overlap tile/8,\n"
           "  --batch 1,2,4,"
           "  --repeats 20; --graphs off or tile; --lanes does not apply. CSV columns: torch_sd_unet.py's.\n"
           "  --job                  instead: whole text-to-image jobs on one engine (random weights for the\n"
           "                         text encoders, UNet and VAE): prompt and negative prompt, --steps of DPM++ 2M\n"
           "                         Karras, noise-prediction blending, the VAE decode; a warm-up job of\n"
           "                         --warmup-steps (default: all --steps; prepare, algorithm search, captures),\n"
           "                         then --repeats jobs (default 3), each timed on the host clock from run to\n"
           "                         decoded image: prepare (text encoding, cached choices), sampling, decode.\n"
           "                         Every job's prompt and negative prompt end in its number (\", take N\"), so\n"
           "                         each encodes its text anew (text_s, a part of prepare_s).\n"
           "                         Defaults: --graphs step, --batch 4. sample_s, decode_s, total_s and\n"
           "                         s_per_step as kernels/bench/torch_sd_tiled.py prints them.\n";
}

namespace {

// sd15/sd21/sdxl: their own defaults for what was not given (a 2048 x 2048 job in native tiles,
// overlap 1/8 of the tile, tile batches 1, 2, 4, 20 timed forwards), and the options that do
// not apply refused. Sizes are pixels; the UNet sees latents of 1/8 and halves them 3 times.
void applySdOptions(BenchOptions& o) {
    const bool sizeGiven = o.given.count("size") || o.given.count("width") || o.given.count("height");
    const int native = o.shape == "sd15" ? 512 : (o.shape == "sd21" ? 768 : 1024);
    if (!sizeGiven) o.width = o.height = 2048;
    if (!o.given.count("tile")) o.tile = native;
    if (!o.given.count("overlap")) o.overlap = o.tile / 8;
    if (!o.given.count("batch") && !o.job) o.batches = {1, 2, 4};
    if (!o.given.count("repeats") && !o.job) o.repeats = 20;
    if (o.given.count("lanes"))
        fail("lanes", "the " + o.shape + " bench times one UNet stream; --lanes is for --shape cifar|church and --model");
    for (GraphMode g : o.graphs)
        if (g == GraphMode::Step && !o.job)
            fail("graphs", "step is not allowed for " + o.shape + ": it captures the tiled loop, which the " + o.shape +
                               " bench does not run (it times UNet forwards); use off or tile");
    for (const auto& [field, value] : {std::pair{"width", o.width}, std::pair{"height", o.height}})
        if (value % 8)
            fail(field, std::to_string(value) + " is not allowed; Stable Diffusion images are multiples of 8 pixels "
                                                "(one latent pixel each)");
    if (o.tile % 64 || o.tile > std::min(o.width, o.height))
        fail("tile", std::to_string(o.tile) + " is not allowed; for " + o.shape +
                         " the tile is a multiple of 64 pixels (8 latent pixels, the UNet's downsampling factor) "
                         "no larger than the " + std::to_string(o.width) + "x" + std::to_string(o.height) + " image");
    if (o.overlap % 8 || o.overlap >= o.tile)
        fail("overlap", std::to_string(o.overlap) + " is not allowed; for " + o.shape +
                            " the overlap is a multiple of 8 pixels below the tile (" + std::to_string(o.tile) + ")");
}

// --job runs whole Stable Diffusion jobs: only for the SD shapes, not with --profile or --lanes;
// step graphs and tile batch 4 unless given, 3 timed jobs after a full-length warm-up job.
void applyJobOptions(BenchOptions& o) {
    if (!isSdBenchShape(o.shape))
        fail("job", "--job runs whole text-to-image jobs of a Stable Diffusion shape: give --shape sd15, sd21 or sdxl");
    if (o.profile) fail("job", "give --job or --profile, not both");
    if (o.given.count("lanes")) fail("lanes", "--lanes does not apply to --job (the SD engine runs one lane)");
    if (!o.given.count("graphs")) o.graphs = {GraphMode::Step};
    if (!o.given.count("batch")) o.batches = {4};
    if (!o.given.count("repeats")) o.repeats = 3;
    if (!o.given.count("warmup_steps")) o.warmupSteps = 0;
}

// --profile times UNet forwards of each (precision x batch), eagerly and as one captured graph,
// so the options of whole runs do not apply; 20 timed forwards unless --repeats says otherwise.
void applyProfileOptions(BenchOptions& o) {
    for (const char* field : {"graphs", "lanes", "csv", "steps"})
        if (o.given.count(field))
            fail(field, std::string("--") + field + " does not apply to --profile: it times one forward per precision "
                        "x batch, eagerly and as one captured graph, and prints the table (no runs, no CSV)");
    if (!o.given.count("repeats")) o.repeats = 20;
}

}  // namespace

BenchOptions parseBenchOptions(const std::vector<std::string>& args) {
    // Every bench option takes a value (--help, -h aside); its field as messages name it.
    static const std::map<std::string, std::string> kOptions{
        {"shape", "shape"},     {"model", "model"},     {"size", "size"},
        {"width", "width"},     {"height", "height"},   {"tile", "tile"},
        {"overlap", "overlap"}, {"batch", "batch"},     {"precision", "precision"},
        {"graphs", "graphs"},   {"lanes", "lanes"},     {"steps", "steps"},
        {"repeats", "repeats"}, {"warmup-steps", "warmup_steps"}, {"backend", "backend"},
        {"seed", "seed"},       {"peak-tflops", "peak_tflops"},   {"csv", "csv"},
        {"tuning-cache", "tuning_cache"}, {"cfg", "cfg"}};
    BenchOptions o;
    bool sizeGiven = false, widthGiven = false, heightGiven = false;
    for (std::size_t i = 0; i < args.size(); ++i) {
        std::string name = args[i], value;
        if (name == "-h" || name == "--help") {
            o.help = true;
            continue;
        }
        if (name == "--profile" || name == "--job") {  // the options without a value
            (name == "--job" ? o.job : o.profile) = true;
            o.given.insert(name.substr(2));
            continue;
        }
        std::optional<OptionWord> word = splitOptionWord(name);
        if (!word) fail("option", "unexpected argument " + inQuotes(name) + "; options start with --");
        name = word->name;
        const auto known = kOptions.find(name);
        if (known == kOptions.end())
            fail("option", "unknown option '--" + excerpt(name) + "'; see 'tessera-cli bench --help'");
        takeOptionValue(*word, args, i, known->second);
        value = word->value;
        o.given.insert(known->second);
        if (name == "shape") {
            if (!isSdBenchShape(value) && value != "cifar" && value != "church")
                fail("shape", inQuotes(value) + " is not one of cifar, church, sd15, sd21, sdxl");
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
            for (const auto& item : splitList("batch", value))
                o.batches.push_back(item == "auto" ? 0 : parsePositive("batch", item));
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
        } else if (name == "cfg") {
            double cfg = 0;
            const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), cfg);
            if (value.empty() || ec != std::errc() || ptr != value.data() + value.size() || !(cfg >= 0.0 && cfg <= kMaxCfgScale))
                fail("cfg", inQuotes(value) + " is not allowed; the guidance scale is a number from 0 to " +
                                fixed(kMaxCfgScale, 0) + " (1 = guidance off)");
            o.cfg = cfg;
        }
    }
    if (o.help) return o;
    if (sizeGiven && (widthGiven || heightGiven)) fail("size", "give --size or --width/--height, not both");
    if (o.shape.empty() == o.model.empty())
        fail("shape", o.shape.empty() ? "give --shape cifar|church|sd15|sd21|sdxl (random weights) or --model DIR"
                                      : "give --shape or --model, not both");
    if (o.profile) applyProfileOptions(o);
    if (o.job) applyJobOptions(o);
    if (!o.job && std::find(o.batches.begin(), o.batches.end(), 0) != o.batches.end())
        fail("batch", "--batch auto is for --job (the other rows time UNet calls of a given batch)");
    if (isSdBenchShape(o.shape))
        applySdOptions(o);
    else if (o.given.count("cfg"))
        fail("cfg", "guidance needs a text-conditioned UNet: --cfg is for --shape sd15|sd21|sdxl");
    return o;
}

// ---- Stable Diffusion UNet shapes (sd15, sd21, sdxl) -------------------------------------------

bool isSdBenchShape(std::string_view shape) { return shape == "sd15" || shape == "sd21" || shape == "sdxl"; }

UNetCondConfig benchSdShapeConfig(std::string_view shape) {
    if (!isSdBenchShape(shape)) fail("shape", inQuotes(shape) + " is not one of sd15, sd21, sdxl");
    if (shape == "sdxl") return sdxlBaseUNetConfig();
    const bool sd2 = shape == "sd21";
    UNetCondConfig c;  // the defaults are SD 1.x's, but for these
    c.sampleSize = sd2 ? 96 : 64;
    c.crossAttentionDim = sd2 ? 1024 : 768;
    c.attentionHeads = sd2 ? std::vector<int>{5, 10, 20, 20} : std::vector<int>{8, 8, 8, 8};
    c.useLinearProjection = sd2;
    c.upcastAttention = sd2;
    return c;
}

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
           (r.peakTflops ? significant(*r.peakTflops, 4) : "") + "," + (ran && r.peakMiB >= 0 ? significant(r.peakMiB, 4) : "") + "," +
           significant(r.gflopPerEval, 4) + "," + num(r.step.hostEnqueueMsPerStep) + "," + num(r.prepareS) + "," +
           num(r.firstRunS) + "," + r.graphs + "," + std::to_string(r.repeats) + "," + csvField(r.device) + "," +
           csvField(r.note);
}

void printSdTable(std::ostream& out, const std::vector<SdBenchRow>& rows) {
    const std::vector<std::string> head{"engine", "prec", "graphs", "B", "UNet B", "tiles", "fwd/step", "fwd ms",
                                        "s/step", "evals/s", "TFLOP/s", "%peak", "peak MiB", "prep s"};
    std::vector<std::vector<std::string>> cells;
    for (const SdBenchRow& r : rows) {
        std::vector<std::string> row{r.engine, r.precision, r.graphs, std::to_string(r.batch), std::to_string(r.unetBatch),
                                     std::to_string(r.tiles), std::to_string(r.step.forwardsPerStep)};
        if (r.failed) {
            row.insert(row.end(), {"failed", "", "", "", "", "", ""});
        } else {
            row.insert(row.end(), {fixed(r.forwardMs, 2), fixed(r.step.secondsPerStep, 3), fixed(r.step.unetEvalsPerS, 1),
                                   fixed(r.step.tflops, 1),
                                   r.peakTflops ? fixed(100.0 * r.step.tflops / *r.peakTflops, 1) : "-",
                                   r.peakMiB >= 0 ? fixed(r.peakMiB, 0) : "-", fixed(r.prepareS, 2)});
        }
        cells.push_back(std::move(row));
    }
    printCells(out, head, cells);
}

// The SD shapes and --profile run on the CUDA backend only; anything else is refused with the reason.
void checkCudaBench(const BenchOptions& o) {
    const std::string what = o.profile ? "--profile" : o.shape;
    if (o.backend == BackendKind::CPU)
        fail("backend", "cpu is not allowed for " + what + ": " +
                            (o.profile ? std::string("it times the CUDA backend's ops with CUDA events; use cuda or auto")
                                       : "the Stable Diffusion shapes are timed on the CUDA backend only (one CPU "
                                         "forward of an 860 M-parameter UNet takes minutes); use cuda or auto"));
    if (checkRunBackend(o.backend) != BackendKind::CUDA) {
        const DeviceReport report = probeDevices();
        fail("backend", "auto found no CUDA backend to time " + what + " on (" +
                            (report.cudaBuilt ? report.cudaReason : std::string("this build has no CUDA backend")) + ")");
    }
}

// --profile: printForwardProfile (app/cli/ForwardProfile.h) for every precision x batch; `factor`
// doubles the forward batch where guidance evaluates both halves at once.
int runProfiles(const BenchOptions& o, const std::string& name, const ModelGraph& graph, const TensorMap& weights,
                int tileH, int tileW, int factor, std::ostream& out, std::ostream& err) {
    bool anyFailed = false;
    for (Precision p : o.precisions)
        for (int batch : o.batches) {
            try {
#if TESSERA_BENCH_CUDA
                printForwardProfile(out, graph, weights, {name, p, batch * factor, tileH, tileW, o.warmupSteps, o.repeats,
                                                          o.seed, o.tuningCache});
#else
                (void)graph, (void)weights, (void)tileH, (void)tileW, (void)factor, (void)out;
                throw std::runtime_error("this build has no CUDA backend");
#endif
            } catch (const std::exception& e) {
                anyFailed = true;
                err << "bench: profile " << name << " " << toString(p) << " batch " << batch << " failed: " << e.what() << "\n";
            }
        }
    return anyFailed ? kExitFailure : kExitOk;
}

// Random weights in host memory (float32) and the backend's packed copy: refused before
// anything is drawn when the host cannot hold them.
void checkSdHostMemory(const BenchOptions& o, const UNetCondConfig& config) {
    std::uint64_t params = 0;
    for (const auto& [name, shape] : UNetCondModel::expectedTensors(config)) {
        std::uint64_t n = 1;
        for (auto d : shape) n *= static_cast<std::uint64_t>(d);
        params += n;
    }
    const std::uint64_t needed = params * 8;  // float32 tensors + the packed upload
    const std::optional<HostMemory> available = availableHostMemory();
    if (available && needed > available->availableBytes)
        fail("shape", o.shape + " needs about " + fixed(static_cast<double>(needed) / (1 << 20), 0) +
                          " MiB of host memory for its random weights; " +
                          fixed(static_cast<double>(available->availableBytes) / (1 << 20), 0) + " MiB are available (" +
                          available->source + ")");
}

#if TESSERA_BENCH_CUDA
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
    for (const std::string& w : gpu.tuningWarnings()) row.note += (row.note.empty() ? "" : "; ") + w;
    for (const std::string& w : cache.warnings()) row.note += (row.note.empty() ? "" : "; ") + w;
    row.prepareS = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    runForwardOnRandomInputs(gpu, graph, row.unetBatch, plan.tileH(), plan.tileW(), o.seed);
    row.firstRunS = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    const int warmup = o.warmupSteps;
    const CudaBackend::ForwardTimes full = gpu.timeForwards(row.unetBatch, warmup, o.repeats);
    const int rest = row.tiles % std::min(row.batch, row.tiles);
    CudaBackend::ForwardTimes remainder;
    if (rest) remainder = gpu.timeForwards(rest * factor, warmup, o.repeats);
    row.forwardMs = median(full.gpuMs);
    row.step = unetStepTiming(row.tiles, std::min(row.batch, row.tiles), guidance, row.forwardMs,
                              median(remainder.gpuMs), median(full.hostEnqueueMs), median(remainder.hostEnqueueMs),
                              row.gflopPerEval);
    row.peakMiB = std::max(full.deviceUsedMiB, remainder.deviceUsedMiB);
    row.device = gpu.info().device;
    const GraphStats stats = gpu.graphStats();
    if (mode == GraphMode::Tile && effectiveGraphMode(stats) != GraphMode::Tile) row.graphs += ">off";
    if (!stats.fallbackReason.empty()) row.note += (row.note.empty() ? "" : "; ") + stats.fallbackReason;
    row.peakTflops = o.peakTflops ? o.peakTflops : denseTensorPeakTflops(row.device);
}
#endif

// ---- --job: whole Stable Diffusion jobs ------------------------------------------------------

RunConfig rowConfig(const BenchOptions& options, Precision precision, GraphMode graphs, int lanes, int batch);

struct SdJobRow {
    std::string engine = "tessera", shape, size, precision, graphs, device, note;
    int tile = 0, overlap = 0, steps = 0, batch = 0, tiles = 0, repeats = 0;
    double cfg = 0;
    double prepareS = 0, textS = 0, sampleS = 0, decodeS = 0, totalS = 0, firstJobS = 0, peakMiB = -1;
    std::vector<double> totals;   // every timed job's total_s
    bool failed = false;
};

std::string sdJobCsvHeader() {
    return "engine,shape,size,tile,overlap,steps,cfg,batch,tiles,precision,graphs,prepare_s,text_s,sample_s,decode_s,total_s,"
           "s_per_step,total_min_s,total_max_s,first_job_s,peak_mib,repeats,device,note";
}

std::string sdJobCsvLine(const SdJobRow& r) {
    const auto [lo, hi] = r.totals.empty() ? std::pair{0.0, 0.0}
                                           : std::pair{*std::min_element(r.totals.begin(), r.totals.end()),
                                                       *std::max_element(r.totals.begin(), r.totals.end())};
    auto num = [&](double v, int digits) { return r.failed ? std::string() : fixed(v, digits); };
    return csvField(r.engine) + "," + r.shape + "," + r.size + "," + std::to_string(r.tile) + "," +
           std::to_string(r.overlap) + "," + std::to_string(r.steps) + "," + significant(r.cfg, 4) + "," +
           std::to_string(r.batch) + "," + std::to_string(r.tiles) + "," + r.precision + "," + r.graphs + "," +
           num(r.prepareS, 3) + "," + num(r.textS, 3) + "," + num(r.sampleS, 3) + "," + num(r.decodeS, 3) + "," + num(r.totalS, 3) + "," +
           num(r.sampleS / std::max(1, r.steps), 4) + "," + num(lo, 3) + "," + num(hi, 3) + "," + num(r.firstJobS, 2) +
           "," + (!r.failed && r.peakMiB >= 0 ? fixed(r.peakMiB, 0) : "") + "," + std::to_string(r.repeats) + "," +
           csvField(r.device) + "," + csvField(r.note);
}

// The milliseconds in the record's first message that starts with `prefix`: the number after
// the last `separator` (core/sampling/TiledLoop.cpp: "vae decode: ..., N ms", "text: ...; N ms, ..."); 0 without one.
double messageMs(const RunRecord& record, std::string_view prefix, std::string_view separator) {
    for (const std::string& m : record.messages) {
        if (m.rfind(prefix, 0) != 0) continue;
        const std::size_t at = m.rfind(separator);
        if (at == std::string::npos) break;
        return std::strtod(m.c_str() + at + separator.size(), nullptr);
    }
    return 0;
}

// Job `take` of a row: the prompt and the negative prompt end in its number, so no job finds
// its text already encoded (the text encoders remember rows across runs): every timed job
// pays for its text as a job with a new prompt does.
RunConfig takeOf(const RunConfig& config, int take) {
    RunConfig c = config;
    c.prompt += ", take " + std::to_string(take);
    c.negativePrompt += ", take " + std::to_string(take);
    return c;
}

// One row: a warm-up job on a fresh engine, then o.repeats timed jobs on it; medians.
void runSdJobRow(SdJobRow& row, const BenchOptions& o, const std::shared_ptr<const SdModel>& model,
                 const RunConfig& config, std::ostream& err) {
    std::string note;
    std::unique_ptr<Engine> engine = createEngine(o.backend, &note);
    if (!note.empty()) row.note = note;
    engine->setSdModel(model);
    QuietObserver observer;
    RunConfig warm = takeOf(config, 0);
    if (o.warmupSteps > 0) warm.steps = std::min(o.steps, o.warmupSteps);
    auto t0 = std::chrono::steady_clock::now();
    const RunResult first = engine->run(warm, observer);
    if (first.record.status != RunStatus::Finished)
        throw std::runtime_error("warm-up job " + std::string(toString(first.record.status)) + ": " + first.record.error);
    row.firstJobS = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    row.device = first.record.environment.device;
    row.engine = "tessera-" + first.record.environment.backend;
    std::vector<double> prepare, text, sample, decode;
    RunRecord last;
    for (int r = 0; r < o.repeats; ++r) {
        const RunConfig take = takeOf(config, r + 1);
        t0 = std::chrono::steady_clock::now();
        RunResult result = engine->run(take, observer);
        const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (result.record.status != RunStatus::Finished)
            throw std::runtime_error("job " + std::string(toString(result.record.status)) + ": " + result.record.error);
        double steps = 0;
        for (const auto& step : result.record.steps) steps += step.wallMs;
        row.totals.push_back(wall);
        prepare.push_back(result.record.prepareMs / 1000.0);
        text.push_back(messageMs(result.record, "text: ", "; ") / 1000.0);
        sample.push_back(steps / 1000.0);
        decode.push_back(messageMs(result.record, "vae decode: ", ", ") / 1000.0);
        row.peakMiB = std::max(row.peakMiB, result.record.peakDeviceMiB);
        if (config.tileBatch <= 0) row.batch = result.record.config.tileBatch;   // what auto chose
        last = std::move(result.record);
    }
    row.totalS = median(row.totals);
    row.prepareS = median(prepare);
    row.textS = median(text);
    row.sampleS = median(sample);
    row.decodeS = median(decode);
    if (!last.graphs.mode.empty() && last.graphs.mode != row.graphs) row.graphs += ">" + last.graphs.mode;
    for (const std::string& m : last.messages)
        if (m.rfind("vae decode: ", 0) == 0 || m.rfind("batch: auto", 0) == 0)
            row.note += (row.note.empty() ? "" : "; ") + m;
    err << " " << fixed(row.totalS, 3) << " s per job (text " << fixed(row.textS, 3) << " s, sampling "
        << fixed(row.sampleS, 3) << " s, decode "
        << fixed(row.decodeS, 3) << " s)\n";
}

int runSdJobs(const BenchOptions& o, std::ostream& out, std::ostream& err) {
    if (!o.csvPath.empty()) {
        const std::uintmax_t bytes = (4u << 10) + (1u << 10) * o.precisions.size() * o.graphs.size() * o.batches.size();
        checkOutputFile(o.csvPath, "csv", OutputNeeds{bytes, bytes, {}});
    }
    const std::string size = o.width == o.height ? std::to_string(o.width)
                                                 : std::to_string(o.width) + "x" + std::to_string(o.height);
    const TilePlan plan = TilePlan::make(o.width / 8, o.height / 8, o.tile / 8, o.overlap / 8);
    err << "bench: " << o.shape << " whole jobs (random weights: text encoders, UNet, VAE), " << size << ", tile "
        << o.tile << ", overlap " << o.overlap << ", cfg " << significant(o.cfg, 4) << ", " << o.steps
        << " steps of DPM++ 2M Karras; " << o.repeats << " timed jobs per row after a "
        << (o.warmupSteps ? std::min(o.warmupSteps, o.steps) : o.steps) << "-step warm-up job; " << today() << "\n";
    const auto model = std::make_shared<const SdModel>(randomSdModel("random:" + o.shape, o.seed));
    std::vector<SdJobRow> rows;
    bool anyFailed = false;
    for (Precision p : o.precisions)
        for (GraphMode mode : o.graphs)
            for (int batch : o.batches) {
                // The DDPM rows' run, as a text-to-image job: DPM++ 2M Karras, noise-prediction
                // blending, a prompt and a negative prompt, guidance.
                RunConfig c = rowConfig(o, p, mode, 0, batch);
                c.scheduler = SchedulerKind::DPMPP2M;
                c.schedulerOptions.karrasSigmas = true;
                c.fusion = FusionRule::Noise;
                c.prompt = "a lighthouse on a cliff above a stormy sea, dramatic light";
                c.negativePrompt = "blurry, low quality";
                c.cfgScale = o.cfg;
                SdJobRow row;
                row.shape = o.shape;
                row.size = size;
                row.tile = o.tile;
                row.overlap = o.overlap;
                row.steps = o.steps;
                row.cfg = o.cfg;
                row.batch = batch;
                row.tiles = plan.count();
                row.precision = std::string(toString(p));
                row.graphs = std::string(toString(mode));
                row.repeats = o.repeats;
                err << "bench: job " << row.precision << ", graphs " << row.graphs << ", batch "
                    << (batch > 0 ? std::to_string(batch) : std::string("auto")) << " ..."
                    << std::flush;
                try {
                    runSdJobRow(row, o, model, c, err);
                } catch (const std::exception& e) {
                    anyFailed = row.failed = true;
                    row.note = e.what();
                    err << " failed: " << e.what() << "\n";
                }
                rows.push_back(std::move(row));
            }
    out << sdJobCsvHeader() << "\n";
    for (const SdJobRow& r : rows) out << sdJobCsvLine(r) << "\n";
    if (!o.csvPath.empty() && !writeCsv(o.csvPath, sdJobCsvHeader(), rows, sdJobCsvLine, err)) return kExitFailure;
    return anyFailed ? kExitFailure : kExitOk;
}

// Every (precision x graphs x batch) row (runSdRow), then the CSV and the table.
int runSdBench(const BenchOptions& o, std::ostream& out, std::ostream& err) {
    const UNetCondConfig config = benchSdShapeConfig(o.shape);
    checkCudaBench(o);
    checkSdHostMemory(o, config);
    if (o.job) return runSdJobs(o, out, err);
    if (!o.csvPath.empty()) {
        const std::uintmax_t bytes = (4u << 10) + (1u << 10) * o.precisions.size() * o.graphs.size() * o.batches.size();
        checkOutputFile(o.csvPath, "csv", OutputNeeds{bytes, bytes, {}});
    }
    const TilePlan plan = TilePlan::make(o.width / 8, o.height / 8, o.tile / 8, o.overlap / 8);
    const ModelGraph graph = unet2DConditionExecutionGraph(config);
    if (o.profile)
        return runProfiles(o, o.shape, graph, UNetCondModel::random(config, o.seed).tensors(), plan.tileH(),
                           plan.tileW(), o.cfg != 1.0 ? 2 : 1, out, err);
    const double gflop = graph.flops(plan.tileH(), plan.tileW()) / 1e9;
    const std::string size = o.width == o.height ? std::to_string(o.width)
                                                 : std::to_string(o.width) + "x" + std::to_string(o.height);
    err << "bench: " << o.shape << " UNet (" << fixed(static_cast<double>(graph.parameterCount()) / 1e6, 1)
        << " M parameters, random weights), " << size << ", tile " << o.tile << ", overlap " << o.overlap
        << " pixels (latent 1/8), cfg " << significant(o.cfg, 4) << ", " << o.repeats << " timed forwards per row after "
        << o.warmupSteps << " untimed; " << today() << "\n";
    const UNetCondModel model = UNetCondModel::random(config, o.seed);
    std::vector<SdBenchRow> rows;
    bool anyFailed = false;
    for (Precision p : o.precisions)
        for (GraphMode mode : o.graphs)
            for (int batch : o.batches) {
                SdBenchRow row;
                row.shape = o.shape;
                row.size = size;
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
                err << "bench: " << row.precision << ", graphs " << row.graphs << ", batch " << batch << " ..." << std::flush;
                try {
#if TESSERA_BENCH_CUDA
                    runSdRow(row, o, graph, model.tensors(), p, mode, plan);
#else
                    throw std::runtime_error("this build has no CUDA backend");
#endif
                    err << " " << fixed(row.forwardMs, 2) << " ms per forward of " << row.unetBatch << "\n";
                } catch (const std::exception& e) {
                    markFailed(row, e, err);
                    anyFailed = true;
                }
                rows.push_back(std::move(row));
            }
    if (!o.csvPath.empty() && !writeCsv(o.csvPath, sdBenchCsvHeader(), rows, sdCsvLine, err)) return kExitFailure;
    out << "\n" << o.shape << " UNet " << size << ", tile " << o.tile << ", overlap " << o.overlap << " ("
        << (rows.empty() ? 0 : rows.front().tiles) << " tiles), cfg " << significant(o.cfg, 4) << " ("
        << (o.cfg != 1.0 ? "guidance: 2 evaluations per tile" : "no guidance: 1 evaluation per tile") << "), "
        << fixed(gflop, 1) << " GFLOP per evaluation; UNet forwards only (s/step and evals/s leave out gather, "
        << "guidance, scheduler and scatter); median of " << o.repeats << "\n";
    printSdTable(out, rows);
    return anyFailed ? kExitFailure : kExitOk;
}

// The run of one (precision, graphs, lanes, batch) row.
RunConfig rowConfig(const BenchOptions& options, Precision precision, GraphMode graphs, int lanes, int batch) {
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
    return config;
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
    QuietObserver observer;

    RunConfig warm = config;
    if (options.warmupSteps > 0) warm.steps = std::min(options.steps, options.warmupSteps);
    const RunResult first = engine->run(warm, observer);
    if (first.record.status != RunStatus::Finished)
        throw std::runtime_error("warm-up run " + std::string(toString(first.record.status)) + ": " + first.record.error);
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
    for (const auto& m : notes) row.note += (row.note.empty() ? "" : "; ") + m;
    err << " " << fixed(row.secondsPerImage, 3) << " s/image\n";
    for (const auto& m : notes) err << "note: " << m << "\n";
}

// ---- --shape vae: the SD VAE's decode (or --encode) alone --------------------------------------

struct VaeBenchOptions {
    int size = 2048;
    VaeTiling tiling = VaeTiling::Auto;
    bool encode = false;
    Precision precision = Precision::FP16;
    int warmup = 1, repeats = 5;
    std::optional<std::uint64_t> budgetBytes;   // --budget-mib: caps the device's VAE budget
    std::string csvPath, tuningCache;
    std::uint64_t seed = 0;
    bool help = false;
};

std::string vaeBenchUsage() {
    return "Usage: tessera-cli bench --shape vae [--size 512|1024|2048|4096] [--tiling auto|on|off] [--encode] [options]\n"
           "Times the Stable Diffusion VAE (AutoencoderKL of SD 1.x/2.x/XL: 83.7 M parameters, random weights)\n"
           "decoding a size x size image (or, with --encode, encoding one) on the CUDA backend, as a render\n"
           "job runs it (vae_tiling, the device's memory budget): --warmup untimed passes (the first one\n"
           "prepares: lowering, cuDNN plans from the tuning cache or timed), then --repeats timed ones\n"
           "(CUDA events around each pass on the backend's stream, host copies included); the median,\n"
           "min and max, the first pass's wall time, the peak device memory in use (cudaMemGetInfo sampled\n"
           "every 2 ms), the budget, the untiled estimate and the choice.\n\n"
           "  --size PX              512, 1024, 2048 or 4096 (default 2048)\n"
           "  --tiling MODE          auto, on or off (default auto, as vae_tiling)\n"
           "  --encode               time the encoder instead of the decoder\n"
           "  --precision P          fp16, bf16 or fp32 (default fp16)\n"
           "  --warmup N             untimed passes first (default 1, at least 1)\n"
           "  --repeats N            timed passes (default 5)\n"
           "  --budget-mib N         cap the device's VAE memory budget (forces tiling under auto)\n"
           "  --seed N               the weights' and the input's seed (default 0)\n"
           "  --csv FILE             write the row as CSV (columns as kernels/bench/torch_sd_tiled.py --vae-only)\n"
           "  --tuning-cache FILE|off  as render (default: the user's cache file)\n";
}

VaeBenchOptions parseVaeBenchOptions(const std::vector<std::string>& args) {
    VaeBenchOptions o;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (arg == "--help" || arg == "-h") {
            o.help = true;
            continue;
        }
        if (arg == "--encode") {
            o.encode = true;
            continue;
        }
        std::optional<OptionWord> word = splitOptionWord(arg);
        if (!word) fail("option", inQuotes(arg) + " is not an option; see tessera-cli bench --shape vae --help");
        takeOptionValue(*word, args, i, word->name);
        const std::string& name = word->name;
        const std::string& value = word->value;
        if (name == "shape") {
            if (value != "vae") fail("shape", inQuotes(value) + " is not vae");
        } else if (name == "size") {
            o.size = parsePositive("size", value);
            if (o.size != 512 && o.size != 1024 && o.size != 2048 && o.size != 4096)
                fail("size", inQuotes(value) + " is not allowed; use 512, 1024, 2048 or 4096");
        } else if (name == "tiling") {
            o.tiling = parseVaeTiling(value, "tiling");
        } else if (name == "precision") {
            o.precision = parsePrecision(value, "precision");
        } else if (name == "warmup") {
            o.warmup = parsePositive("warmup", value);
        } else if (name == "repeats") {
            o.repeats = parsePositive("repeats", value);
        } else if (name == "budget-mib") {
            o.budgetBytes = static_cast<std::uint64_t>(parsePositive("budget-mib", value)) << 20;
        } else if (name == "seed") {
            o.seed = static_cast<std::uint64_t>(parsePositive("seed", value, 0));
        } else if (name == "csv") {
            o.csvPath = value;
        } else if (name == "tuning-cache") {
            o.tuningCache = value;
        } else {
            fail("option", inQuotes(arg) + " is not an option of bench --shape vae (see --help)");
        }
    }
    return o;
}

// The SD VAE (diffusers' AutoencoderKL of SD 1.x/2.x/XL) with weights uniform in +-1/sqrt(fan_in),
// norms 1 +- 0.1 and +- 0.1, from `seed`.
[[maybe_unused]] VaeModel randomSdVae(std::uint64_t seed) {
    const VaeConfig config = vaeConfigFromJson(nlohmann::json::parse(R"({
      "block_out_channels": [128, 256, 512, 512], "layers_per_block": 2, "norm_num_groups": 32, "latent_channels": 4,
      "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D"],
      "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D"]})"));
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::map<std::string, HostTensor> tensors;
    for (const auto& [name, shape] : VaeModel::expectedTensors(config)) {
        HostTensor t{shape, std::vector<float>(static_cast<std::size_t>(HostTensor{shape, {}}.numel()))};
        const bool norm = shape.size() == 1 && name.find("norm") != std::string::npos;
        const bool gamma = norm && name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
        const double fanIn = shape.size() > 1 ? static_cast<double>(t.numel() / shape[0]) : 1.0;
        for (float& v : t.data) v = gamma ? 1.0f + 0.1f * u(rng) : (norm ? 0.1f : static_cast<float>(1.0 / std::sqrt(fanIn))) * u(rng);
        tensors[name] = std::move(t);
    }
    return VaeModel::fromTensors(config, std::move(tensors));
}

[[maybe_unused]] std::string vaeBenchCsvHeader() {
    return "engine,shape,size,pass,mode,precision,median_ms,min_ms,max_ms,repeats,first_s,peak_used_mib,budget_mib,"
           "untiled_mib,largest_tensor,choice,device";
}

#if TESSERA_BENCH_CUDA
// The most device memory in use (every process's: total - free) while it lives, sampled every 2 ms.
class DeviceMemoryPeak {
public:
    explicit DeviceMemoryPeak(int device) : thread_([this, device] {
        (void)cudaSetDevice(device);
        while (!stop_) {
            std::size_t freeBytes = 0, totalBytes = 0;
            if (cudaMemGetInfo(&freeBytes, &totalBytes) == cudaSuccess) peak_ = std::max<std::uint64_t>(peak_, totalBytes - freeBytes);
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
    }) {}
    ~DeviceMemoryPeak() {
        stop_ = true;
        thread_.join();
    }
    double mib() const { return static_cast<double>(peak_.load()) / (1 << 20); }

private:
    std::atomic<bool> stop_{false};
    std::atomic<std::uint64_t> peak_{0};
    std::thread thread_;
};

int runVaeBench(const VaeBenchOptions& o, std::ostream& out, std::ostream& err) {
    if (checkRunBackend(BackendKind::Auto) != BackendKind::CUDA) {
        const DeviceReport report = probeDevices();
        fail("backend", "bench --shape vae times the CUDA backend and found none (" +
                            (report.cudaBuilt ? report.cudaReason : std::string("this build has no CUDA backend")) + ")");
    }
    const VaeModel vae = randomSdVae(o.seed);
    CudaTileDevice device(0);
    device.setVaeMemoryLimit(o.budgetBytes);
    RunConfig config;
    config.precision = o.precision;
    config.tuningCache = o.tuningCache;
    Backend& backend = device.wholeGraphBackend(config);
    std::mt19937_64 rng(o.seed + 1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int side = o.encode ? o.size : o.size / 8, channels = o.encode ? 3 : 4;
    HostTensor input{{1, channels, side, side}, std::vector<float>(static_cast<std::size_t>(channels) * side * side)};
    for (float& v : input.data) v = o.encode ? std::clamp(0.5f * normal(rng), -1.0f, 1.0f) : normal(rng);

    const ModelGraph primitive = o.encode ? buildVaeEncoderGraph(vae.config()) : buildVaeDecoderGraph(vae.config());
    const std::optional<VaeMemoryBudget> budget = device.vaeMemoryBudget(config);
    const VaePassPlan plan = planVaePass(o.tiling, primitive, o.size, o.size, budget);
    std::string choice;
    const auto pass = [&] { runVaePass(backend, vae, input, !o.encode, o.tiling, budget, &choice); };
    double firstS = 0, peakMiB = 0;
    std::vector<double> ms;
    {
        const DeviceMemoryPeak peak(0);
        const auto start = std::chrono::steady_clock::now();
        pass();
        firstS = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        for (int i = 1; i < o.warmup; ++i) pass();
        const cudaStream_t stream = device.wholeGraphStream();
        for (int r = 0; r < o.repeats; ++r) {
            const CudaEvent begin = makeEvent(), end = makeEvent();
            TESSERA_CHECK(cudaEventRecord(begin.get(), stream));
            pass();
            TESSERA_CHECK(cudaEventRecord(end.get(), stream));
            TESSERA_CHECK(cudaEventSynchronize(end.get()));
            float elapsed = 0;
            TESSERA_CHECK(cudaEventElapsedTime(&elapsed, begin.get(), end.get()));
            ms.push_back(elapsed);
        }
        peakMiB = peak.mib();
    }
    const double med = median(ms);
    const auto [lo, hi] = std::minmax_element(ms.begin(), ms.end());
    const std::string row = std::string("tessera-vae,sd,") + std::to_string(o.size) + "," + (o.encode ? "encode" : "decode") +
                            "," + std::string(toString(o.tiling)) + "," + std::string(toString(o.precision)) + "," + fixed(med, 2) + "," +
                            fixed(*lo, 2) + "," + fixed(*hi, 2) + "," + std::to_string(o.repeats) + "," + fixed(firstS, 3) +
                            "," + fixed(peakMiB, 0) + "," + fixed(budget ? static_cast<double>(budget->bytes) / (1 << 20) : -1, 0) +
                            "," + fixed(static_cast<double>(plan.untiledBytes) / (1 << 20), 0) + "," +
                            std::to_string(plan.untiledLargest) + "," + csvField(choice) + "," +
                            csvField(backend.info().device);
    out << vaeBenchCsvHeader() << "\n" << row << "\n";
    out << (o.encode ? "encode " : "decode ") << o.size << "x" << o.size << " " << toString(o.precision) << ": median "
        << fixed(med, 1) << " ms (min " << fixed(*lo, 1) << ", max " << fixed(*hi, 1) << ", " << o.repeats
        << " passes), first pass " << fixed(firstS, 2) << " s, peak " << fixed(peakMiB, 0) << " MiB in use\n  "
        << choice << "\n";
    if (!o.csvPath.empty()) {
        std::ofstream csv(o.csvPath);
        csv << vaeBenchCsvHeader() << "\n" << row << "\n";
        if (!csv) {
            err << "bench: cannot write " << o.csvPath << "\n";
            return kExitFailure;
        }
    }
    return kExitOk;
}
#else
int runVaeBench(const VaeBenchOptions&, std::ostream&, std::ostream&) {
    fail("backend", "bench --shape vae times the CUDA backend, and this build has none");
}
#endif

// `args` ask for --shape vae.
bool asksForVaeBench(const std::vector<std::string>& args) {
    for (std::size_t i = 0; i + 1 < args.size(); ++i)
        if (args[i] == "--shape" && args[i + 1] == "vae") return true;
    return false;
}

int runVaeBenchCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
    try {
        const VaeBenchOptions o = parseVaeBenchOptions(args);
        if (o.help) {
            out << vaeBenchUsage();
            return kExitOk;
        }
        return runVaeBench(o, out, err);
    } catch (const ValidationError& e) {
        err << "bench: " << e.what() << "\n";
        return kExitInvalid;
    } catch (const std::exception& e) {
        err << "bench: " << e.what() << "\n";
        return kExitFailure;
    }
}

}  // namespace

int runBenchCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
    if (asksForVaeBench(args)) return runVaeBenchCommand(args, out, err);
    BenchOptions options;
    std::shared_ptr<const UNetModel> model;
    std::string shapeName;
    try {
        options = parseBenchOptions(args);
        if (options.help) {
            out << benchUsage();
            return kExitOk;
        }
        if (options.profile) checkCudaBench(options);  // before any weights are loaded or drawn
        if (isSdBenchShape(options.shape)) return runSdBench(options, out, err);
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
        if (options.profile)
            return runProfiles(options, shapeName, unet2DExecutionGraph(model->config()), model->tensors(),
                               options.tile, options.tile, 1, out, err);
    } catch (const ValidationError& e) {
        err << "tessera-cli bench: " << e.what() << "\n";
        return kExitInvalid;
    } catch (const ModelError& e) {
        err << "tessera-cli bench: model: " << e.what() << "\n";
        return kExitInvalid;
    }

    // The CSV is written whole after the last row (core/run/OutputSet.h: all or nothing); its
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

                const RunConfig config = rowConfig(options, precision, graphs, lanes, batch);
                {
                    const TilePlan plan = TilePlan::fromConfig(config);
                    row.tiles = plan.count();
                    row.gflopPerEval = model->flopsPerEvaluation(plan.tileH(), plan.tileW()) / 1e9;
                }
                err << "bench: " << row.precision << ", graphs " << row.graphs << ", lanes "
                    << (lanes ? std::to_string(lanes) : std::string("auto")) << ", batch " << batch << " ..." << std::flush;
                try {
                    runDdpmRow(row, config, model, options, err);
                    if (row.peakTflops) {
                        shownPeak = row.peakTflops;
                        shownDevice = row.device;
                    }
                } catch (const std::exception& e) {
                    markFailed(row, e, err);
                    anyFailed = true;
                }
                rows.push_back(std::move(row));
            }
        }
    }

    if (!options.csvPath.empty() && !writeCsv(options.csvPath, benchCsvHeader(), rows, csvLine, err))
        return kExitFailure;

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
