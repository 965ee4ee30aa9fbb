#include "app/cli/bench/BenchOptions.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <sstream>
#include <utility>

#include "app/cli/CliOptions.h"
#include "app/cli/CliText.h"
#include "app/cli/EngineFactory.h"
#include "core/base/BoundedInput.h"
#include "core/formats/ModelWeights.h"  // ModelError
#include "core/models/sd/UNetCondGraph.h"

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

// sd15/sd21/sdxl: their own defaults for what was not given (a 2048 x 2048 job in native tiles,
// overlap 1/8 of the tile, tile batches 1, 2, 4, 20 timed forwards), and the options that do
// not apply refused. Sizes are pixels; the UNet sees latents of 1/8 and halves them 3 times.
void applySdOptions(BenchOptions& o) {
    const bool sizeGiven = o.given.count("size") || o.given.count("width") || o.given.count("height");
    const int native = o.shape == "sd15" ? 512 : (o.shape == "sd21" ? 768 : 1024);
    const bool flux = isFluxBenchShape(o.shape);
    // FLUX.1 is guidance-distilled: one evaluation per tile, the scale an input.
    if (flux && o.given.count("cfg"))
        fail("cfg",
             "FLUX.1 takes its guidance as an input (one evaluation per tile): --cfg does not apply to " + o.shape);
    if (flux) o.cfg = 1.0;
    if (!sizeGiven) o.width = o.height = 2048;
    if (!o.given.count("tile")) o.tile = native;
    if (!o.given.count("overlap")) o.overlap = o.tile / 8;
    if (!o.given.count("batch") && !o.job) o.batches = {1, 2, 4};
    if (!o.given.count("repeats") && !o.job) o.repeats = 20;
    if (o.given.count("lanes"))
        fail("lanes",
             "the " + o.shape + " bench times one UNet stream; --lanes is for --shape cifar|church and --model");
    for (GraphMode g : o.graphs)
        if (g == GraphMode::Step && !o.job)
            fail("graphs", "step is not allowed for " + o.shape + ": it captures the tiled loop, which the " + o.shape +
                               " bench does not run (it times UNet forwards); use off or tile");
    // FLUX's tokens are 2 x 2 latent pixels of 8: 16-pixel cells.
    const int cell = flux ? 16 : 8, tileUnit = flux ? 16 : 64;
    for (const auto& [field, value] : {std::pair{"width", o.width}, std::pair{"height", o.height}})
        if (value % cell)
            fail(field, std::to_string(value) + " is not allowed; " + (flux ? "FLUX.1" : "Stable Diffusion") +
                            " images are multiples of " + std::to_string(cell) + " pixels");
    if (flux && (o.tile % tileUnit || o.tile > std::min(o.width, o.height)))
        fail("tile", std::to_string(o.tile) + " is not allowed; for " + o.shape +
                         " the tile is a multiple of 16 pixels (one token: 2 x 2 latent pixels) no larger than the " +
                         std::to_string(o.width) + "x" + std::to_string(o.height) + " image");
    if (!flux && (o.tile % 64 || o.tile > std::min(o.width, o.height)))
        fail("tile", std::to_string(o.tile) + " is not allowed; for " + o.shape +
                         " the tile is a multiple of 64 pixels (8 latent pixels, the UNet's downsampling factor) "
                         "no larger than the " +
                         std::to_string(o.width) + "x" + std::to_string(o.height) + " image");
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
    if (o.controlNet && o.shape != "sd15")
        fail("controlnet",
             "--controlnet times an SD 1.5 ControlNet (control_v11f1e_sd15_tile's shape): give --shape sd15");
}

// --profile times UNet forwards of each (precision x batch), eagerly and as one captured graph,
// so the options of whole runs do not apply; 20 timed forwards unless --repeats says otherwise.
void applyProfileOptions(BenchOptions& o) {
    for (const char* field : {"graphs", "lanes", "csv", "steps"})
        if (o.given.count(field))
            fail(field, std::string("--") + field +
                            " does not apply to --profile: it times one forward per precision "
                            "x batch, eagerly and as one captured graph, and prints the table (no runs, no CSV)");
    if (!o.given.count("repeats")) o.repeats = 20;
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

std::string benchUsage() {
    return "Usage: tessera-cli bench (--shape cifar|church|sd15|sd21|sdxl | --model DIR) [options]\n"
           "       tessera-cli bench --shape vae [options]   (the SD VAE alone: bench --shape vae --help)\n"
           "       tessera-cli bench --shape upscale [options]   (an upscale model: bench --shape upscale --help)\n"
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
           "  --csv FILE             write the rows as CSV (columns as bench/pytorch/torch_tiled_ddim.py, plus more)\n"
           "  --tuning-cache FILE|off  CUDA: the tuning cache of timed choices (default: the user's cache\n"
           "                         file, as render); off times every prepare (prepare_s as without a cache)\n"
           "  --profile              instead of runs: per precision x batch, one forward's GPU time per op\n"
           "                         (event-record nodes in one captured forward) grouped by kind, the 25\n"
           "                         slowest ops, the forward timed eagerly and as a CUDA graph (--repeats\n"
           "                         timed after --warmup-steps untimed; default 20 after 3) and the arena\n"
           "                         (weights, activations, workspace). CUDA only; not with --graphs, --lanes,\n"
           "                         --csv, --steps\n"
           "  --help, -h             this text\n\n"
           "FLUX.1's transformer (CUDA only): --shape flux-dev (11.9 G parameters: 19 double and 38 single\n"
           "blocks of 24 heads of 128, T5 context 512x4096, guidance embedded) or flux-schnell (no guidance\n"
           "input, context 256x4096), random weights, one evaluation per tile (no --cfg); defaults --size\n"
           "2048, --tile 1024 (4,096 image tokens), --overlap 128; rows and columns as the UNets' below.\n\n"
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
           "                         s_per_step as bench/pytorch/torch_sd_tiled.py prints them.\n"
           "  --strength X           with --job: image-to-image upscale jobs instead, at this denoising strength\n"
           "                         (a synthetic start image; its VAE encode is a part of prepare_s)\n"
           "  --controlnet           with --job --shape sd15: and a random ControlNet of control_v11f1e_sd15_tile's\n"
           "                         shape (written to a temporary folder, removed after) whose control image is\n"
           "                         the start image; --strength 0.5 unless given\n"
           "  --tile-shift NAME      with --job: off (default) or random: SpotDiffusion's shifted tiles (the\n"
           "                         run's tile_shift; give --overlap 0 for its non-overlapping plan)\n";
}

namespace {

// The options that shape the sampling of a run or job: --cfg, --strength, --tile-shift.
void parseSamplingOption(const std::string& name, const std::string& value, BenchOptions& o) {
    if (name == "cfg") {
        double cfg = 0;
        const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), cfg);
        if (value.empty() || ec != std::errc() || ptr != value.data() + value.size() ||
            !(cfg >= 0.0 && cfg <= kMaxCfgScale))
            fail("cfg", inQuotes(value) + " is not allowed; the guidance scale is a number from 0 to " +
                            fixed(kMaxCfgScale, 0) + " (1 = guidance off)");
        o.cfg = cfg;
    } else if (name == "strength") {
        double strength = 0;
        const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), strength);
        if (value.empty() || ec != std::errc() || ptr != value.data() + value.size() ||
            !(strength > 0.0 && strength <= 1.0))
            fail("strength", inQuotes(value) + " is not allowed; the denoising strength is above 0, at most 1");
        o.strength = strength;
    } else if (name == "tile-shift") {
        o.tileShift = parseTileShift(value, "tile_shift");
    }
}

}  // namespace

BenchOptions parseBenchOptions(const std::vector<std::string>& args) {
    // Every bench option takes a value (--help, -h aside); its field as messages name it.
    static const std::map<std::string, std::string> kOptions{{"shape", "shape"},
                                                             {"model", "model"},
                                                             {"size", "size"},
                                                             {"width", "width"},
                                                             {"height", "height"},
                                                             {"tile", "tile"},
                                                             {"overlap", "overlap"},
                                                             {"batch", "batch"},
                                                             {"precision", "precision"},
                                                             {"graphs", "graphs"},
                                                             {"lanes", "lanes"},
                                                             {"steps", "steps"},
                                                             {"repeats", "repeats"},
                                                             {"warmup-steps", "warmup_steps"},
                                                             {"backend", "backend"},
                                                             {"seed", "seed"},
                                                             {"peak-tflops", "peak_tflops"},
                                                             {"csv", "csv"},
                                                             {"tuning-cache", "tuning_cache"},
                                                             {"cfg", "cfg"},
                                                             {"strength", "strength"},
                                                             {"tile-shift", "tile_shift"}};
    BenchOptions o;
    bool sizeGiven = false, widthGiven = false, heightGiven = false;
    for (std::size_t i = 0; i < args.size(); ++i) {
        std::string name = args[i], value;
        if (name == "-h" || name == "--help") {
            o.help = true;
            continue;
        }
        if (name == "--profile" || name == "--job" || name == "--controlnet") {  // the options without a value
            (name == "--job" ? o.job : name == "--controlnet" ? o.controlNet : o.profile) = true;
            o.given.insert(name.substr(2));
            continue;
        }
        std::optional<OptionWord> word = splitOptionWord(name);
        if (!word) fail("option", "unexpected argument " + inQuotes(name) + "; options start with --");
        name = word->name;
        const auto known = kOptions.find(name);
        if (known == kOptions.end())
            fail("option", "unknown option " + inQuotes("--" + name) + "; see 'tessera-cli bench --help'");
        takeOptionValue(*word, args, i, known->second);
        value = word->value;
        o.given.insert(known->second);
        if (name == "shape") {
            if (!isSdBenchShape(value) && !isFluxBenchShape(value) && value != "cifar" && value != "church")
                fail("shape",
                     inQuotes(value) + " is not one of cifar, church, sd15, sd21, sdxl, flux-dev, flux-schnell");
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
                    fail("lanes",
                         inQuotes(item) + " is not allowed; lanes must be 0 (auto) to " + std::to_string(kMaxLanes));
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
        } else {
            parseSamplingOption(name, value, o);
        }
    }
    if (o.help) return o;
    if (sizeGiven && (widthGiven || heightGiven)) fail("size", "give --size or --width/--height, not both");
    if (o.shape.empty() == o.model.empty())
        fail("shape", o.shape.empty() ? "give --shape cifar|church|sd15|sd21|sdxl (random weights) or --model DIR"
                                      : "give --shape or --model, not both");
    if (o.profile) applyProfileOptions(o);
    if ((o.controlNet || o.given.count("strength")) && !o.job)
        fail(o.controlNet ? "controlnet" : "strength", "--controlnet and --strength are for --job");
    if (o.given.count("tile_shift") && !o.job) fail("tile_shift", "--tile-shift is for --job");
    if (o.controlNet && !o.given.count("strength")) o.strength = 0.5;
    if (o.job) applyJobOptions(o);
    if (!o.job && std::find(o.batches.begin(), o.batches.end(), 0) != o.batches.end())
        fail("batch", "--batch auto is for --job (the other rows time UNet calls of a given batch)");
    if (isSdBenchShape(o.shape) || isFluxBenchShape(o.shape))
        applySdOptions(o);
    else if (o.given.count("cfg"))
        fail("cfg", "guidance needs a text-conditioned UNet: --cfg is for --shape sd15|sd21|sdxl");
    return o;
}

bool isSdBenchShape(std::string_view shape) { return shape == "sd15" || shape == "sd21" || shape == "sdxl"; }
bool isFluxBenchShape(std::string_view shape) { return shape == "flux-dev" || shape == "flux-schnell"; }

FluxConfig benchFluxShapeConfig(std::string_view shape) {
    FluxConfig c;  // FLUX.1's own (black-forest-labs/flux util.py configs["flux-dev"])
    c.guidanceEmbeds = shape != "flux-schnell";
    return c;
}

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

RunConfig benchCanvasConfig(const BenchOptions& options, int batch) {
    // Filled field by field like other parameter blocks: alike in shape only.
    RunConfig config;
    config.width = options.width;
    config.height = options.height;
    config.tile = options.tile;
    config.overlapPx = options.overlap;
    config.tileBatch = batch;
    config.steps = options.steps;
    config.previewEvery = 0;  // a benchmark measures sampling, not preview copies
    return config;
}

RunConfig benchRowConfig(const BenchOptions& options, Precision precision, GraphMode graphs, int lanes, int batch) {
    RunConfig config = benchCanvasConfig(options, batch);
    config.scheduler = SchedulerKind::DDIM;
    config.precision = precision;
    config.graphs = graphs;
    config.lanes = lanes;
    config.backend = options.backend;
    config.seed = options.seed;
    config.label = "bench";
    config.tuningCache = options.tuningCache;
    return config;
}

void checkCudaBench(const BenchOptions& o) {
    const std::string what = o.profile ? "--profile" : o.shape;
    if (o.backend == BackendKind::CPU)
        fail("backend",
             "cpu is not allowed for " + what + ": " +
                 (o.profile ? std::string("it times the CUDA backend's ops with CUDA events; use cuda or auto")
                            : "the Stable Diffusion shapes are timed on the CUDA backend only (one CPU "
                              "forward of an 860 M-parameter UNet takes minutes); use cuda or auto"));
    if (checkRunBackend(o.backend) != BackendKind::CUDA) {
        const DeviceReport report = probeDevices();
        fail("backend", "auto found no CUDA backend to time " + what + " on (" +
                            (report.cudaBuilt ? report.cudaReason : std::string("this build has no CUDA backend")) +
                            ")");
    }
}

std::string benchSizeText(const BenchOptions& options) {
    return options.width == options.height ? std::to_string(options.width)
                                           : std::to_string(options.width) + "x" + std::to_string(options.height);
}

int benchInputFailure(std::ostream& err) {
    try {
        throw;
    } catch (const ValidationError& e) {
        err << "tessera-cli bench: " << e.what() << "\n";
    } catch (const ModelError& e) {
        err << "tessera-cli bench: model: " << e.what() << "\n";
    }
    return kExitInvalid;
}

}  // namespace tessera
