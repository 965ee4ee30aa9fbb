#include "app/cli/bench/UpscaleBench.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>

#include "app/cli/CliOptions.h"
#include "app/cli/CliText.h"
#include "app/cli/EngineFactory.h"
#include "app/cli/bench/BenchOptions.h"
#include "app/cli/bench/BenchTable.h"
#include "core/base/FormatNumber.h"
#include "core/cpu/CpuUpscaler.h"
#include "core/models/upscale/UpscaleModel.h"
#include "core/sampling/UpscaleTiler.h"

#if defined(TESSERA_HAVE_CUDA) && TESSERA_HAVE_CUDA && __has_include("kernels/engine/CudaUpscaler.h")
#define TESSERA_UPSCALE_BENCH_CUDA 1
#include "kernels/backend/CudaBackend.h"
#include "kernels/engine/CudaUpscaler.h"
#include "kernels/engine/DeviceMemoryProbe.h"
#else
#define TESSERA_UPSCALE_BENCH_CUDA 0
#endif

namespace tessera {

namespace {

struct UpscaleBenchOptions {
    int width = 1024, height = 1024;
    std::vector<int> tiles{0, 512};  // 0: the whole image where it fits the budget
    int overlap = 32;
    int batch = 0;  // CUDA: tiles per forward at most, 0 auto
    Precision precision = Precision::FP16;
    bool graphs = true;
    bool cuda = true;  // --engine cuda (else cpu)
    int threads = 0;   // cpu: 0 = every hardware thread
    int warmup = 1, repeats = 5;
    std::uint64_t budgetBytes = 0;  // cuda: the device budget; cpu: the tiler's memory budget; 0 default
    std::string modelPath;
    int features = 64, blocks = 23;
    std::uint64_t seed = 0;
    std::string csvPath, tuningCache;
    std::optional<double> peakTflops;
    int profileTop = 0;  // cuda: after each tile size, the N op groups that take the most GPU time
    bool help = false;
};

std::string upscaleBenchUsage() {
    return "Usage: tessera-cli bench --shape upscale [--size W[xH]] [--tile LIST] [--engine cuda|cpu] [options]\n"
           "Times an upscale model on a W x H image of uniform noise through the tiled upscaler (ComfyUI's\n"
           "feathered tiles): by default an ESRGAN of 4x-UltraSharp's shape (RRDBNet, 64 features, 23 blocks,\n"
           "16.7 M parameters, random weights) x4 on the CUDA engine. Per tile size: --warmup untimed images\n"
           "(the first one plans, prepares and captures; its wall time is first_s), then --repeats timed ones,\n"
           "wall time per image from the input image to the whole output image in host memory; the median,\n"
           "min and max, tiles/s, TFLOP/s of the executed forwards (the model graph's FLOPs at the tile size\n"
           "times the tiles: overlaps counted) and their fraction of the GPU's peak, the peak device memory in\n"
           "use (every process's, sampled every 2 ms), the share of the wall time the GPU spent in forwards.\n\n"
           "  --size W[xH]           input pixels (default 1024; the output is scale times that)\n"
           "  --tile LIST            input pixels per tile side, comma-separated; 0 = the whole image where it\n"
           "                         fits the budget (default 0,512)\n"
           "  --overlap PX           input pixels (default 32)\n"
           "  --batch N              cuda: tiles per forward at most (default 0: auto)\n"
           "  --precision P          fp16, bf16 or fp32 (default fp16; cpu: fp32 always)\n"
           "  --graphs on|off        cuda: replay each forward from a CUDA graph (default on)\n"
           "  --engine cuda|cpu      default cuda\n"
           "  --threads N            cpu: worker threads (default: every hardware thread)\n"
           "  --warmup N             untimed images first (default 1, at least 1)\n"
           "  --repeats N            timed images (default 5)\n"
           "  --budget-mib N         cuda: the device memory budget; cpu: the tiler's (default: the device's\n"
           "                         free memory less 1 GiB; cpu 4 GiB or half the host's available)\n"
           "  --upscale-model FILE   a .safetensors upscale model instead of the random RRDBNet\n"
           "  --features N, --blocks N  the random RRDBNet's shape (default 64, 23)\n"
           "  --seed N               the weights' and the image's seed (default 0)\n"
           "  --csv FILE             write the rows as CSV (columns as bench/pytorch/upscale_spandrel.py)\n"
           "  --tuning-cache FILE|off  as render (default: the user's cache file)\n"
           "  --peak-tflops X        the GPU's dense fp16/bf16 tensor peak (default: known from its name)\n"
           "  --profile N            cuda: after each tile size, one forward's GPU time per op (CUDA events\n"
           "                         in a captured graph, median of 3), ops grouped by name with the block\n"
           "                         numbers taken out; the N groups that take the most time\n";
}

std::vector<std::string> splitCommas(const std::string& field, const std::string& text) {
    std::vector<std::string> items;
    std::string item;
    std::istringstream in(text);
    while (std::getline(in, item, ','))
        if (!item.empty()) items.push_back(item);
    if (items.empty()) fail(field, inQuotes(text) + " is an empty list; give values separated by commas");
    return items;
}

template <typename T>
T parseNumber(const std::string& field, const std::string& text) {
    T v{};
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (text.empty() || ec != std::errc() || ptr != text.data() + text.size())
        fail(field, inQuotes(text) + " is not a number");
    return v;
}

void parseSize(UpscaleBenchOptions& o, const std::string& value) {
    const std::size_t x = value.find('x');
    o.width = parseCount("size", value.substr(0, x), 1);
    o.height = x == std::string::npos ? o.width : parseCount("size", value.substr(x + 1), 1);
    if (o.width > 16384 || o.height > 16384) fail("size", inQuotes(value) + " is over 16384 pixels a side");
}

// One option with its value; false for a name that is not the bench's.
bool takeOption(UpscaleBenchOptions& o, const std::string& name, const std::string& value) {
    if (name == "shape") {
        if (value != "upscale") fail("shape", inQuotes(value) + " is not upscale");
    } else if (name == "size") {
        parseSize(o, value);
    } else if (name == "tile") {
        o.tiles.clear();
        for (const std::string& t : splitCommas("tile", value)) o.tiles.push_back(parseCount("tile", t, 0));
    } else if (name == "overlap") {
        o.overlap = parseCount("overlap", value, 0);
    } else if (name == "batch") {
        o.batch = parseCount("batch", value, 0);
    } else if (name == "precision") {
        o.precision = parsePrecision(value, "precision");
    } else if (name == "graphs") {
        if (value != "on" && value != "off") fail("graphs", inQuotes(value) + " is not on or off");
        o.graphs = value == "on";
    } else if (name == "engine") {
        if (value != "cuda" && value != "cpu") fail("engine", inQuotes(value) + " is not cuda or cpu");
        o.cuda = value == "cuda";
    } else if (name == "threads") {
        o.threads = parseCount("threads", value, 1);
    } else if (name == "warmup") {
        o.warmup = parseCount("warmup", value, 1);
    } else if (name == "repeats") {
        o.repeats = parseCount("repeats", value, 1);
    } else if (name == "budget-mib") {
        o.budgetBytes = static_cast<std::uint64_t>(parseCount("budget-mib", value, 1)) << 20;
    } else if (name == "upscale-model") {
        if (value.empty()) fail("upscale_model", "a file name is needed");
        o.modelPath = value;
    } else if (name == "features") {
        o.features = parseCount("features", value, 1);
    } else if (name == "blocks") {
        o.blocks = parseCount("blocks", value, 1);
    } else if (name == "seed") {
        o.seed = parseNumber<std::uint64_t>("seed", value);
    } else if (name == "csv") {
        if (value.empty()) fail("csv", "a file name is needed");
        o.csvPath = value;
    } else if (name == "tuning-cache") {
        if (value.empty()) fail("tuning_cache", "a file path or off is needed");
        o.tuningCache = value;
    } else if (name == "profile") {
        o.profileTop = parseCount("profile", value, 1);
    } else if (name == "peak-tflops") {
        const double peak = parseNumber<double>("peak_tflops", value);
        if (!(peak > 0)) fail("peak_tflops", inQuotes(value) + " is not a positive number");
        o.peakTflops = peak;
    } else {
        return false;
    }
    return true;
}

UpscaleBenchOptions parseUpscaleBenchOptions(const std::vector<std::string>& args) {
    UpscaleBenchOptions o;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (arg == "--help" || arg == "-h") {
            o.help = true;
            continue;
        }
        std::optional<OptionWord> word = splitOptionWord(arg);
        if (!word) fail("option", inQuotes(arg) + " is not an option; see tessera-cli bench --shape upscale --help");
        takeOptionValue(*word, args, i, word->name);
        if (!takeOption(o, word->name, word->value))
            fail("option", inQuotes(arg) + " is not an option of bench --shape upscale (see --help)");
    }
    if (!o.cuda) o.precision = Precision::FP32;
    return o;
}

// An RRDBNet (ESRGAN's old layout) of `features` and `blocks`, x4, with PyTorch's default
// initialisation of a convolution (weights and biases uniform in +-1/sqrt(fan_in)) from `seed`, as
// spandrel's RRDBNet is made in bench/pytorch/upscale_spandrel.py.
UpscaleModel randomRrdbNet(int features, int blocks, std::uint64_t seed) {
    UpscaleConfig c;
    c.features = features;
    c.blocks = blocks;
    c.growth = 32;  // spandrel RRDB.py: gc=32 whatever the features
    const ModelGraph graph = buildUpscaleGraph(c);
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    TensorMap tensors;
    std::vector<float> bound;  // per conv: 1/sqrt(fan_in), the bias takes its weight's
    for (const GraphParam& p : graph.params()) {
        HostTensor t{p.shape, std::vector<float>(static_cast<std::size_t>(HostTensor{p.shape, {}}.numel()))};
        const bool weight = p.shape.size() == 4;
        const double fanIn = weight ? double(p.shape[1] * p.shape[2] * p.shape[3]) : 1.0;
        if (weight) bound.push_back(static_cast<float>(1.0 / std::sqrt(fanIn)));
        const float b = bound.empty() ? 0.1f : bound.back();
        for (float& v : t.data) v = b * u(rng);
        tensors[p.name] = std::move(t);
    }
    return UpscaleModel(c, std::move(tensors), "random weights, seed " + std::to_string(seed));
}

ImageTensor noiseImage(int channels, int width, int height, std::uint64_t seed) {
    std::mt19937_64 rng(seed + 1);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    ImageTensor im{channels, height, width, std::vector<float>(std::size_t(channels) * height * width)};
    for (float& v : im.data) v = u(rng);
    return im;
}

struct UpscaleRow {
    std::string engine, model, device, note;
    int tileAsked = 0, tile = 0, overlap = 0, batch = 0, tiles = 0, forwardBatch = 0;
    std::string precision;
    bool graphs = false, failed = false;
    std::vector<double> seconds;
    double firstS = 0, peakMiB = -1, gflopPerImage = 0, workFactor = 1, forwardShare = -1;
    std::optional<double> peakTflops;
    double median() const { return seconds.empty() ? 0 : tessera::median(seconds); }
    double tflops() const { return seconds.empty() ? 0 : gflopPerImage / median() / 1e3; }
};

std::string upscaleCsvHeader() {
    return "engine,model,size,scale,tile,overlap,batch,precision,graphs,tiles,seconds_per_image,min_s,max_s,repeats,"
           "tiles_per_s,tflops,fraction_of_peak,peak_tflops_assumed,peak_mib,gflop_per_image,work_factor,first_s,"
           "forward_share,device,note";
}

std::string csvLine(const UpscaleRow& r, const UpscaleBenchOptions& o, int scale) {
    const bool ran = !r.failed && !r.seconds.empty();
    const auto [lo, hi] = ran ? std::minmax_element(r.seconds.begin(), r.seconds.end())
                              : std::make_pair(r.seconds.end(), r.seconds.end());
    const double med = r.median();
    auto num = [ran](double v, int digits) { return ran ? significant(v, digits) : std::string(); };
    return r.engine + "," + csvField(r.model) + "," + std::to_string(o.width) + "x" + std::to_string(o.height) + "," +
           std::to_string(scale) + "," + std::to_string(r.tile) + "," + std::to_string(r.overlap) + "," +
           std::to_string(r.batch) + "," + r.precision + "," + (r.graphs ? "on" : "off") + "," +
           std::to_string(r.tiles) + "," + num(med, 5) + "," + (ran ? significant(*lo, 5) : "") + "," +
           (ran ? significant(*hi, 5) : "") + "," + std::to_string(r.seconds.size()) + "," +
           num(med > 0 ? r.tiles / med : 0, 5) + "," + num(r.tflops(), 4) + "," +
           (ran && r.peakTflops ? significant(r.tflops() / *r.peakTflops, 4) : "") + "," +
           (r.peakTflops ? significant(*r.peakTflops, 4) : "") + "," +
           (ran && r.peakMiB >= 0 ? significant(r.peakMiB, 5) : "") + "," + significant(r.gflopPerImage, 5) + "," +
           significant(r.workFactor, 4) + "," + significant(r.firstS, 4) + "," +
           (ran && r.forwardShare >= 0 ? significant(r.forwardShare, 3) : "") + "," + csvField(r.device) + "," +
           csvField(r.note);
}

void printTable(std::ostream& out, const std::vector<UpscaleRow>& rows) {
    const std::vector<std::string> head{"engine",  "tile",    "batch",    "tiles", "prec",
                                        "graphs",  "s/image", "min s",    "max s", "tiles/s",
                                        "TFLOP/s", "%peak",   "peak MiB", "fwd %", "1st s"};
    std::vector<std::vector<std::string>> cells;
    for (const UpscaleRow& r : rows) {
        if (r.failed || r.seconds.empty()) {
            cells.push_back({r.engine, std::to_string(r.tile), "-", "-", r.precision, r.graphs ? "on" : "off", "failed",
                             "-", "-", "-", "-", "-", "-", "-", "-"});
            continue;
        }
        const auto [lo, hi] = std::minmax_element(r.seconds.begin(), r.seconds.end());
        cells.push_back({r.engine, std::to_string(r.tile), std::to_string(r.batch), std::to_string(r.tiles),
                         r.precision, r.graphs ? "on" : "off", fixed(r.median(), 3), fixed(*lo, 3), fixed(*hi, 3),
                         fixed(r.tiles / r.median(), 1), significant(r.tflops(), 3),
                         r.peakTflops ? fixed(100.0 * r.tflops() / *r.peakTflops, 1) : "-",
                         r.peakMiB >= 0 ? fixed(r.peakMiB, 0) : "-",
                         r.forwardShare >= 0 ? fixed(100.0 * r.forwardShare, 0) : "-", fixed(r.firstS, 2)});
    }
    printCells(out, head, cells);
}

// What one tile size's images took on a device, through the tiler; `measure` wraps the images
// (the CUDA device's memory probe) and `afterImage` reads the device after each timed one.
struct TimedImages {
    UpscalePlan plan;
    std::vector<double> seconds;
    double firstS = 0;
};

TimedImages timeImages(const UpscaleBenchOptions& o, UpscaleTiler& tiler, const ImageTensor& input, ImageTensor& output,
                       const std::function<void()>& afterImage) {
    TimedImages t;
    for (int i = 0; i < o.warmup + o.repeats; ++i) {
        const auto start = std::chrono::steady_clock::now();
        // The whole output image as float32 planes in host memory, what the PyTorch peer ends with.
        t.plan = tiler.runInto(input, output);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (i == 0) t.firstS = s;
        if (i >= o.warmup) {
            t.seconds.push_back(s);
            if (afterImage) afterImage();
        }
    }
    return t;
}

void fillFromPlan(UpscaleRow& row, const TimedImages& t, const UpscaleModel& model, const UpscaleBenchOptions& o) {
    const UpscalePlan& p = t.plan;
    const int s = p.scale;
    row.tile = p.single ? std::max(p.width, p.height) : p.tile;
    row.overlap = p.single ? 0 : p.overlap;
    row.batch = p.batch;
    row.tiles = p.tiles();
    row.seconds = t.seconds;
    row.firstS = t.firstS;
    const double perTile = model.executionGraph().flops(p.paddedH * s, p.paddedW * s);
    row.gflopPerImage = perTile * p.tiles() / 1e9;
    row.workFactor = perTile * p.tiles() / model.executionGraph().flops(o.height * s, o.width * s);
    std::string note = p.single ? "whole image" : std::string();
    if (row.tileAsked > 0 && row.tileAsked != row.tile && !p.single)
        appendNote(note, "asked " + std::to_string(row.tileAsked));
    if (!p.note.empty()) appendNote(note, p.note);
    if (!p.deviceNote.empty()) appendNote(note, p.deviceNote);
    row.note = note;
}

UpscaleRow runCpuRow(const UpscaleBenchOptions& o, const UpscaleModel& model, const ImageTensor& input,
                     ImageTensor& output, int tile) {
    UpscaleRow row;
    row.engine = "tessera-upscale-cpu";
    row.model = model.description();
    row.tileAsked = tile;
    row.precision = "fp32";
    CpuUpscaler cpu(o.threads);
    row.device = cpu.cpu().info().device;
    UpscaleTiling tiling;
    tiling.tile = tile;
    tiling.overlap = tile > 0 ? std::min(o.overlap, tile - 1) : o.overlap;
    tiling.memoryBudget = o.budgetBytes;
    UpscaleTiler tiler(model, cpu, tiling);
    fillFromPlan(row, timeImages(o, tiler, input, output, {}), model, o);
    return row;
}

#if TESSERA_UPSCALE_BENCH_CUDA
// An op's group: its name with every run of digits replaced by '#' ("body.#.rdb#.conv#").
std::string opGroup(const std::string& name) {
    std::string g;
    for (std::size_t i = 0; i < name.size(); ++i) {
        if (name[i] >= '0' && name[i] <= '9') {
            if (g.empty() || g.back() != '#') g += '#';
        } else {
            g += name[i];
        }
    }
    return g;
}

void printOpGroups(std::ostream& err, int tile, CudaUpscaler& gpu, int top) {
    const std::vector<CudaBackend::OpTime> times = gpu.backend()->profileOps(std::max(1, gpu.forwardBatch()), 3);
    std::map<std::string, std::pair<double, int>> groups;
    double total = 0;
    for (const CudaBackend::OpTime& t : times) {
        auto& g = groups[opGroup(t.name)];
        g.first += t.ms;
        g.second += 1;
        total += t.ms;
    }
    std::vector<std::pair<std::string, std::pair<double, int>>> sorted(groups.begin(), groups.end());
    std::sort(sorted.begin(), sorted.end(),
              [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
    err << "profile, tile " << tile << ": one forward of " << std::max(1, gpu.forwardBatch()) << " tile(s), "
        << fixed(total, 2) << " ms in " << times.size() << " ops\n";
    for (std::size_t i = 0; i < sorted.size() && static_cast<int>(i) < top; ++i)
        err << "  " << fixed(sorted[i].second.first, 3) << " ms  " << fixed(100.0 * sorted[i].second.first / total, 1)
            << " %  x" << sorted[i].second.second << "  " << sorted[i].first << "\n";
}

UpscaleRow runCudaRow(const UpscaleBenchOptions& o, const UpscaleModel& model, const ImageTensor& input,
                      ImageTensor& output, int tile) {
    UpscaleRow row;
    row.engine = "tessera-upscale";
    row.model = model.description();
    row.tileAsked = tile;
    row.graphs = o.graphs;
    CudaUpscaleOptions options;
    options.precision = o.precision;
    options.graphs = o.graphs;
    options.memoryBudget = o.budgetBytes;
    options.tileBatch = o.batch;
    options.tuningCache = o.tuningCache;
    const DeviceMemoryProbe memory(0);
    CudaUpscaler gpu(options);
    UpscaleTiling tiling;
    tiling.tile = tile;
    tiling.overlap = tile > 0 ? std::min(o.overlap, tile - 1) : o.overlap;
    tiling.memoryBudget = 0;
    UpscaleTiler tiler(model, gpu, tiling);
    double forwardS = 0;
    const TimedImages t =
        timeImages(o, tiler, input, output, [&gpu, &forwardS] { forwardS += gpu.timings().forwardMs / 1e3; });
    fillFromPlan(row, t, model, o);
    row.peakMiB = memory.peakMiB();
    row.precision = std::string(toString(gpu.precision()));
    row.forwardBatch = gpu.forwardBatch();
    double total = 0;
    for (double s : t.seconds) total += s;
    row.forwardShare = total > 0 ? forwardS / total : -1;
    row.device = gpu.backend()->info().device;
    row.peakTflops = o.peakTflops ? o.peakTflops : denseTensorPeakTflops(row.device);
    if (row.forwardBatch < row.batch)
        appendNote(row.note, "the device ran " + std::to_string(row.forwardBatch) + " tiles per forward");
    const GraphStats graphs = gpu.backend()->graphStats();
    if (o.graphs && !graphs.fallbackReason.empty()) appendNote(row.note, "graphs off: " + graphs.fallbackReason);
    if (o.profileTop > 0) printOpGroups(std::cerr, tile, gpu, o.profileTop);
    return row;
}
#else
UpscaleRow runCudaRow(const UpscaleBenchOptions&, const UpscaleModel&, const ImageTensor&, ImageTensor&, int) {
    fail("engine", "bench --shape upscale --engine cuda needs the CUDA backend, and this build has none");
}
#endif

int runUpscaleBench(const UpscaleBenchOptions& o, std::ostream& out, std::ostream& err) {
    if (o.cuda && checkRunBackend(BackendKind::Auto) != BackendKind::CUDA) {
        const DeviceReport report = probeDevices();
        fail("engine", "bench --shape upscale times the CUDA engine and found none (" +
                           (report.cudaBuilt ? report.cudaReason : std::string("this build has no CUDA backend")) +
                           "); --engine cpu times the CPU");
    }
    if (!o.csvPath.empty()) checkBenchCsv(o.csvPath, o.tiles.size());
    const UpscaleModel model =
        o.modelPath.empty() ? randomRrdbNet(o.features, o.blocks, o.seed) : UpscaleModel::loadFile(o.modelPath);
    const ImageTensor input = noiseImage(model.inputChannels(), o.width, o.height, o.seed);
    ImageTensor output{model.outputChannels(), o.height * model.scale(), o.width * model.scale(), {}};
    output.data.assign(std::size_t(output.channels) * output.height * output.width, 0.0f);
    out << "tessera-cli bench --shape upscale, " << benchDate() << "\n"
        << model.description() << " (" << (o.modelPath.empty() ? model.source() : o.modelPath) << "), " << o.width
        << "x" << o.height << " -> " << output.width << "x" << output.height << ", " << (o.cuda ? "CUDA" : "CPU")
        << " engine\n";
    std::vector<UpscaleRow> rows;
    bool failed = false;
    for (int tile : o.tiles) {
        UpscaleRow row;
        try {
            row = o.cuda ? runCudaRow(o, model, input, output, tile) : runCpuRow(o, model, input, output, tile);
        } catch (const ValidationError&) {
            throw;
        } catch (const ModelError&) {
            throw;
        } catch (const std::exception& e) {
            row.engine = o.cuda ? "tessera-upscale" : "tessera-upscale-cpu";
            row.model = model.description();
            row.tile = row.tileAsked = tile;
            row.precision = std::string(toString(o.precision));
            row.graphs = o.cuda && o.graphs;
            markFailed(row, e, err);
            failed = true;
        }
        err << "tile " << tile << ": " << (row.failed ? "failed" : fixed(row.median(), 3) + " s per image") << "\n";
        rows.push_back(std::move(row));
    }
    printTable(out, rows);
    const auto shown =
        std::find_if(rows.begin(), rows.end(), [](const UpscaleRow& r) { return r.peakTflops.has_value(); });
    if (o.cuda && shown != rows.end())
        out << "peak assumed: " << fixed(*shown->peakTflops, 0) << " TFLOP/s dense fp16/bf16 tensor ("
            << (o.peakTflops ? "--peak-tflops" : shown->device) << ")\n";
    for (const UpscaleRow& r : rows)
        if (!r.note.empty()) out << "tile " << r.tileAsked << ": " << r.note << "\n";
    const int scale = model.scale();
    out << upscaleCsvHeader() << "\n";
    for (const UpscaleRow& r : rows) out << csvLine(r, o, scale) << "\n";
    if (!o.csvPath.empty() && !writeBenchCsv(
                                  o.csvPath, upscaleCsvHeader(), rows,
                                  [&o, scale](const UpscaleRow& r) { return csvLine(r, o, scale); }, err))
        return kExitFailure;
    return failed ? kExitFailure : kExitOk;
}

}  // namespace

bool asksForUpscaleBench(const std::vector<std::string>& args) {
    for (std::size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "--shape=upscale") return true;
        if (i + 1 < args.size() && args[i] == "--shape" && args[i + 1] == "upscale") return true;
    }
    return false;
}

int runUpscaleBenchCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
    try {
        const UpscaleBenchOptions o = parseUpscaleBenchOptions(args);
        if (o.help) {
            out << upscaleBenchUsage();
            return kExitOk;
        }
        return runUpscaleBench(o, out, err);
    } catch (const ValidationError&) {
        return benchInputFailure(err);
    } catch (const ModelError&) {
        return benchInputFailure(err);
    } catch (const std::exception& e) {
        err << "tessera-cli bench: " << e.what() << "\n";
        return kExitFailure;
    }
}

}  // namespace tessera
