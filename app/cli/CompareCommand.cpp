#include "app/cli/CompareCommand.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "app/cli/CliOptions.h"
#include "app/cli/CliText.h"
#include "app/cli/EngineFactory.h"
#include "app/cli/InitImage.h"
#include "app/cli/InterruptCancels.h"
#include "app/cli/UpscaleModelRun.h"
#include "core/base/BoundedInput.h"
#include "core/cpu/HostMemoryEstimate.h"
#include "core/models/unet/UNetModel.h"
#include "core/run/ConfigDiff.h"
#include "core/run/RunRecordIO.h"
#include "core/sampling/ImageOps.h"

namespace fs = std::filesystem;

namespace tessera {

namespace {

constexpr const char* kTimingNote = "RunRecord.totalMs, the sampling wall time (prepare excluded)";

// "batch=8,graphs=tile" -> (batch, 8), (graphs, tile). A piece without '=' continues the
// previous value, so a label or a path may hold commas ("label=a,b").
void addOverrides(const std::string& option, const std::string& text,
                  std::vector<std::pair<std::string, std::string>>& into) {
    std::size_t added = 0;
    std::string piece;
    std::istringstream in(text);
    while (std::getline(in, piece, ',')) {
        const auto eq = piece.find('=');
        if (eq == std::string::npos) {
            if (added == 0)
                fail(option,
                     inQuotes(text) + " is not KEY=VALUE[,KEY=VALUE...] (e.g. --" + option + " graphs=tile,batch=8)");
            into.back().second += "," + piece;
            continue;
        }
        if (eq == 0)
            fail(option, inQuotes(piece) + " has no key; expected KEY=VALUE, KEY a run setting (e.g. batch=8)");
        into.emplace_back(piece.substr(0, eq), piece.substr(eq + 1));
        ++added;
    }
    if (added == 0) fail(option, "needs KEY=VALUE[,KEY=VALUE...] (e.g. --" + option + " graphs=tile)");
}

// A run configuration file: RunConfig JSON, or a manifest (core/run/RunRecordIO.h) whose
// "config" is one. `side` ("a" / "b") is the field of errors that concern the file itself.
// `tuningDigest` (when given) receives a manifest's tuning.digest ("" otherwise).
nlohmann::json readConfigFile(const std::string& path, const std::string& side, std::string* tuningDigest = nullptr) {
    const nlohmann::json json = readRunSettingsFile(path, side);  // bounded: app/cli/CliOptions.h
    RunConfig config;
    try {
        config = runSettingsFromJson(json, tuningDigest);
    } catch (const ValidationError& e) {
        throw ValidationError(e.field(), std::string(e.what()) + " (in " + inQuotes(path) + ")");
    } catch (const std::exception& e) {
        fail(side, inQuotes(path) + ": " + excerpt(e.what(), 300));
    }
    return toJson(config);
}

// Sets one KEY=VALUE on a RunConfig JSON object. The value is typed after the key's default:
// a string key takes the text as it is; any other key takes it as JSON (8, 0.25, true), or
// as text when it is not JSON, so that the loader names the key and what it expects.
void applyOverride(nlohmann::json& config, std::string key, const std::string& value) {
    std::replace(key.begin(), key.end(), '-', '_');
    if (key == "eta" || key == "timestep_spacing") key = "scheduler_options." + key;  // as the CLI flags
    static const nlohmann::json defaults = toJson(RunConfig{});
    nlohmann::json* target = &config;
    const nlohmann::json* fallback = &defaults;
    std::string leaf = key;
    if (const auto dot = key.find('.'); dot != std::string::npos) {
        const std::string parent = key.substr(0, dot);
        if (parent != "scheduler_options")
            throw ValidationError(
                excerpt(key),
                excerpt(key) + ": unknown key; only scheduler_options holds keys (e.g. scheduler_options.eta)");
        leaf = key.substr(dot + 1);
        target = &config["scheduler_options"];
        fallback = &defaults["scheduler_options"];
    }
    nlohmann::json typed = value;
    const auto known = fallback->find(leaf);
    // Nesting beyond what any setting has stays text, so the parser's recursion stays shallow.
    if ((known == fallback->end() || !known->is_string()) && jsonNestingDepth(value) <= input_limits::kJsonDepth) {
        try {
            typed = nlohmann::json::parse(value);
        } catch (const nlohmann::json::exception&) {
            typed = value;
        }
    }
    (*target)[leaf] = std::move(typed);
}

// config.model as an absolute folder: the one given, or the default model (as render does).
std::string resolveModel(const std::string& given) { return resolveModelFolder(given, executableDir()); }

// Every leaf of a RunConfig JSON object, scheduler options as "scheduler_options.eta".
// Collects the engine's notes; the progress is one line per pair.
class NoteObserver : public RunObserver {
public:
    void onMessage(const std::string& message) override { messages.push_back(message); }
    std::vector<std::string> messages;
};

// One side of the comparison: its configuration, start image, and what its measured runs left.
struct Side {
    std::string name;  // "A" / "B"
    RunConfig config;
    ImageTensor initImage;        // empty: from noise
    std::vector<RunRecord> runs;  // measured runs, in order
    ImageTensor firstImage, lastImage;
    bool repeatable = true;      // every measured image bit-identical to the first
    std::string manifestDigest;  // tuning choices its manifest recorded ("" = none given)
    std::vector<std::string> notes;

    void addNote(const std::string& note) {
        if (std::find(notes.begin(), notes.end(), note) == notes.end()) notes.push_back(note);
    }
    std::vector<double> seconds() const {
        std::vector<double> s;
        for (const auto& r : runs) s.push_back(r.totalMs / 1000.0);
        return s;
    }
    std::vector<double> prepareMs() const {
        std::vector<double> s;
        for (const auto& r : runs) s.push_back(r.prepareMs);
        return s;
    }
    // Median step GPU time over every step of every measured run; nullopt where not measured.
    std::optional<double> stepGpuMs() const {
        std::vector<double> s;
        for (const auto& r : runs)
            for (const auto& step : r.steps)
                if (step.gpuMs >= 0) s.push_back(step.gpuMs);
        if (s.empty()) return std::nullopt;
        return median(s);
    }
    std::optional<double> peakMiB() const {
        double peak = -1;
        for (const auto& r : runs) peak = std::max(peak, r.peakDeviceMiB);
        if (peak < 0) return std::nullopt;
        return peak;
    }
    const RunRecord& last() const { return runs.back(); }

    // Before any run: the model's config, the engine's backend, the start image's header.
    UNetConfig model;
    BackendKind backend = BackendKind::CPU;
    std::optional<StartImageSize> startImage;
};

// Host memory of the whole comparison: the larger side's run, plus what compare keeps of
// both sides throughout (first and last images, the measured runs' records, the start
// images) and, with two engines, the other engine's weights and activations.
HostMemoryEstimate compareMemory(const Side& a, const Side& b, int repeats) {
    const HostMemoryEstimate ea = estimateHostMemory(a.config, a.model, a.backend, a.startImage);
    const HostMemoryEstimate eb = estimateHostMemory(b.config, b.model, b.backend, b.startImage);
    const bool aPeaks = ea.peakBytes() >= eb.peakBytes();
    HostMemoryEstimate total = aPeaks ? ea : eb;
    constexpr unsigned kAlways = 7;  // every MemoryPhase
    for (const auto& [side, e, peaks] : {std::tuple{&a, &ea, aPeaks}, std::tuple{&b, &eb, !aPeaks}}) {
        const std::string name = side->name + ": ";
        total.items.push_back({MemoryPart::FinalImage, name + "first and last images kept", "width",
                               2 * e->bytesOf(MemoryPart::FinalImage), kAlways});
        total.items.push_back({MemoryPart::Record, name + "records of " + std::to_string(repeats) + " measured runs",
                               "steps", static_cast<std::uint64_t>(repeats) * e->bytesOf(MemoryPart::Record), kAlways});
        if (peaks) continue;
        total.items.push_back(
            {MemoryPart::StartImage, name + "start image", "init", e->bytesOf(MemoryPart::StartImage), kAlways});
        if (a.backend != b.backend)
            total.items.push_back({MemoryPart::Weights, name + "its engine's weights and activations", "batch",
                                   e->bytesOf(MemoryPart::Weights) + e->bytesOf(MemoryPart::Activations), kAlways});
    }
    return total;
}

// Graph counters summed over the measured runs (each record holds its own run's share of the
// engine's graph cache); the mode, nodes and graph memory as of the last measured run.
GraphStats measuredGraphStats(const Side& side) {
    GraphStats g = side.last().graphs;
    g.captures = g.hits = g.misses = g.evictions = g.updates = g.instantiations = 0;
    for (const auto& r : side.runs) {
        g.captures += r.graphs.captures;
        g.hits += r.graphs.hits;
        g.misses += r.graphs.misses;
        g.evictions += r.graphs.evictions;
        g.updates += r.graphs.updates;
        g.instantiations += r.graphs.instantiations;
    }
    return g;
}

std::string graphSummary(const Side& side) {
    const RunConfig& c = side.config;
    const GraphStats g = measuredGraphStats(side);
    std::string text = "requested " + std::string(toString(c.graphs)) + ", ran " + (g.mode.empty() ? "off" : g.mode);
    if (!g.fallbackReason.empty()) text += " (fallback: " + g.fallbackReason + ")";
    text += ", " + std::to_string(g.captures) + " captures, " + std::to_string(g.hits) + " hits";
    if (g.misses || g.evictions || g.updates)
        text += ", " + std::to_string(g.misses) + " misses, " + std::to_string(g.evictions) + " evictions, " +
                std::to_string(g.updates) + " updates";
    if (g.nodes) text += ", " + std::to_string(g.nodes) + " nodes";
    if (g.graphMemMiB > 0) text += ", " + fixed(g.graphMemMiB, 1) + " MiB of graphs";
    return text;
}

nlohmann::json graphJson(const Side& side) {
    const GraphStats g = measuredGraphStats(side);
    nlohmann::json j = graphCountersJson(g);
    j["requested"] = toString(side.config.graphs);
    j["graph_mib"] = g.graphMemMiB;
    return j;
}

nlohmann::json optionalJson(const std::optional<double>& value) {
    return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

nlohmann::json sideJson(const Side& side) {
    const RunRecord& r = side.last();
    return {{"config", toJson(side.config)},
            {"backend", r.environment.backend},
            {"device", r.environment.device},
            {"model", r.modelName},
            {"tiles", r.tileCount},
            {"median_s", median(side.seconds())},
            {"median_prepare_ms", median(side.prepareMs())},
            {"step_gpu_ms", optionalJson(side.stepGpuMs())},
            {"peak_device_mib", optionalJson(side.peakMiB())},
            {"graphs", graphJson(side)},
            {"repeatable", side.repeatable},
            {"image_sha256", r.imageSha256},
            {"notes", side.notes}};
}

std::string csvText(const Side& a, const Side& b) {
    std::string text =
        "pair,side,run_id,seconds,prepare_ms,steps_run,step_gpu_ms,peak_device_mib,graphs_requested,graphs_effective,"
        "graph_captures,graph_hits,backend,image_sha256\n";
    for (std::size_t i = 0; i < a.runs.size(); ++i) {
        for (const Side* side : {&a, &b}) {
            const RunRecord& r = side->runs[i];
            std::vector<double> gpu;
            for (const auto& step : r.steps)
                if (step.gpuMs >= 0) gpu.push_back(step.gpuMs);
            text += std::to_string(i + 1) + "," + side->name + "," + csvField(r.runId) + "," +
                    significant(r.totalMs / 1000.0, 6) + "," + significant(r.prepareMs, 6) + "," +
                    std::to_string(r.stepsRun) + "," + (gpu.empty() ? "" : significant(median(gpu), 6)) + "," +
                    (r.peakDeviceMiB >= 0 ? significant(r.peakDeviceMiB, 6) : "") + "," +
                    std::string(toString(side->config.graphs)) + "," + csvField(r.graphs.mode) + "," +
                    std::to_string(r.graphs.captures) + "," + std::to_string(r.graphs.hits) + "," +
                    csvField(r.environment.backend) + "," + r.imageSha256 + "\n";
        }
    }
    return text;
}

// The folder of an output file must exist and take it (core/run/OutputSet.h), so a long
// comparison does not end in a write error. A summary is a few KiB plus ~1 KiB per run.
void checkWritable(const std::string& field, const std::string& path, int runs) {
    if (path.empty()) return;
    const std::uintmax_t bytes = (64u << 10) + (1u << 10) * static_cast<std::uintmax_t>(std::max(runs, 0));
    checkOutputFile(path, field, OutputNeeds{bytes, bytes, {}});
}

std::string padLeft(const std::string& text, std::size_t width) {
    return text.size() >= width ? text : std::string(width - text.size(), ' ') + text;
}

// Checks both sides completely before the first (possibly long) run, cheapest first: fields
// against the model's limits and the backend, then the start images' headers, then the host
// memory of the whole comparison; only then decodes the start images. Throws ValidationError
// whose message begins with the side ("A: tile: ...") where it concerns one.
void checkSides(Side& a, Side& b, int repeats, std::ostream& err) {
    const auto forSide = [](Side& side, const auto& check) {
        try {
            check(side);
        } catch (const ValidationError& e) {
            throw ValidationError(e.field(), side.name + ": " + e.what());
        } catch (const InputFileError& e) {  // ModelError: the model folder's files
            throw ValidationError(e.field(), side.name + ": " + e.what());
        }
    };
    for (Side* side : {&a, &b})
        forSide(*side, [](Side& s) {
            RunConfig& c = s.config;
            c.previewEvery = 0;  // measure sampling, not preview copies
            c.model = resolveModel(c.model);
            const ModelFolderConfig folder = readModelFolderConfig(c.model);
            validate(c, folder.limits());
            if (!c.loras.empty())
                fail("lora", "LoRAs are merged into Stable Diffusion models; compare runs UNet2DModel folders");
            checkStrengthRange(c);
            s.model = folder.config;
            s.backend = checkRunBackend(c.backend);
        });
    for (Side* side : {&a, &b})
        forSide(*side, [](Side& s) { s.startImage = checkStartImageHeader(s.config, s.model.inChannels); });
    if (const std::optional<HostMemory> available = availableHostMemory())
        checkHostMemory(compareMemory(a, b, repeats), *available);
    for (Side* side : {&a, &b})
        forSide(*side, [&err](Side& s) {
            if (!s.startImage) return;
            try {
                // --upscale-model: the side's start image through its upscale model first, as render runs it.
                if (!s.config.upscaleModel.empty()) {
                    StartImageUpscale pass(s.config, s.startImage, err);
                    s.initImage = pass.startImage(s.config, s.model.inChannels, err);
                    return;
                }
                s.initImage = loadInitImage(s.config.initImage, s.config.width, s.config.height, s.model.inChannels);
            } catch (const InitImageError& e) {
                fail("init", e.what());
            }
        });
}

}  // namespace

std::string compareUsage() {
    return "Usage: tessera-cli compare A.json B.json [options]\n"
           "       tessera-cli compare [run options] --a KEY=VALUE[,KEY=VALUE...] --b KEY=VALUE[,...] [options]\n"
           "Runs two configurations interleaved (A B A B ...) on one engine per backend and prints B's\n"
           "speedup over A (the median of the per-pair ratios A time / B time, with min-max and the\n"
           "interquartile range), the median seconds, the median step GPU ms where measured, the peak\n"
           "device MiB and its delta, the graph statistics, and the largest pixel difference between\n"
           "A's and B's final images (8-bit RGB and model-space floats) and whether they are bit-identical.\n"
           "The time of a run is RunRecord.totalMs: the sampling wall time, prepare excluded. Previews are off.\n\n"
           "A.json, B.json           run settings (as --preset takes) or run manifests (<run-id>.json of render);\n"
           "                         run options given as well apply to both\n"
           "  --a KEY=VALUE,...      A's settings: the run options' configuration with these JSON keys changed\n"
           "  --b KEY=VALUE,...      B's (e.g. --a graphs=off --b graphs=tile, --a batch=1 --b batch=8);\n"
           "                         KEY as in a preset: width, seed, batch, graphs, precision, backend, overlap,\n"
           "                         scheduler_options.eta, ...; may be given more than once\n"
           "  --warmup N             pairs run first and discarded (default 1)\n"
           "  --repeats N            measured pairs (default 5)\n"
           "  --csv FILE             every measured run as a row\n"
           "  --json FILE            the summary as a JSON object\n"
           "  --help, -h             this text\n\n" +
           cliUsage(CliCommand::Render).substr(cliUsage(CliCommand::Render).find("Run options"));
}

CompareOptions parseCompareOptions(const std::vector<std::string>& args) {
    CompareOptions o;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (arg == "-h" || arg == "--help") {
            o.help = true;
            continue;
        }
        std::optional<OptionWord> word = splitOptionWord(arg);
        if (!word) {
            o.configFiles.push_back(arg);
            continue;
        }
        const std::string& name = word->name;
        if (name == "a" || name == "b" || name == "repeats" || name == "warmup" || name == "csv" || name == "json") {
            takeOptionValue(*word, args, i, name);
            const std::string& value = word->value;
            if (name == "a")
                addOverrides(name, value, o.overridesA);
            else if (name == "b")
                addOverrides(name, value, o.overridesB);
            else if (name == "repeats")
                o.repeats = parseCount(name, value, 1);
            else if (name == "warmup")
                o.warmup = parseCount(name, value, 0);
            else {
                if (value.empty()) fail(name, "a file name is needed");
                checkPathText(name, value, "the " + name + " file");
                (name == "csv" ? o.csvPath : o.jsonPath) = value;
            }
            continue;
        }
        const std::optional<bool> takesValue = cliOptionTakesValue(name);
        if (!takesValue)
            fail("option", "unknown option " + inQuotes("--" + name) + "; see 'tessera-cli compare --help'");
        if (name == "out") fail("out", "compare writes no images; give --csv FILE or --json FILE for its results");
        o.runFlags.push_back(arg);
        if (*takesValue && !word->inlineValue) {
            takeOptionValue(*word, args, i, name);
            o.runFlags.push_back(word->value);
        }
    }
    if (!o.help && !o.configFiles.empty() && o.configFiles.size() != 2) {
        std::string given;
        for (const auto& f : o.configFiles) given += " " + inQuotes(f);
        fail("option", "compare takes two configuration files (A.json B.json) or none; got " +
                           std::to_string(o.configFiles.size()) + ":" + given);
    }
    return o;
}

ComparedConfigs compareConfigs(const CompareOptions& options) {
    std::vector<std::string> renderArgs{"render"};
    renderArgs.insert(renderArgs.end(), options.runFlags.begin(), options.runFlags.end());
    const CliOptions common = parseCliOptions(renderArgs);
    nlohmann::json flags = toJson(common.config);
    ComparedConfigs configs;

    auto base = [&](std::size_t index, const std::string& side) {
        if (options.configFiles.empty()) return flags;
        nlohmann::json config = readConfigFile(options.configFiles.at(index), side,
                                               index == 0 ? &configs.tuningDigestA : &configs.tuningDigestB);
        // Run options on the line apply to both files.
        for (const std::string& field : common.fieldsGiven) {
            if (field == "eta" || field == "timestep_spacing")
                config["scheduler_options"][field] = flags["scheduler_options"][field];
            else if (flags.contains(field))
                config[field] = flags[field];
        }
        return config;
    };
    auto build = [](nlohmann::json config, const std::vector<std::pair<std::string, std::string>>& overrides,
                    const std::string& option) {
        try {
            for (const auto& [key, value] : overrides) applyOverride(config, key, value);
            return runConfigFromJson(config);
        } catch (const ValidationError& e) {
            throw ValidationError(e.field(), "--" + option + ": " + e.what());
        }
    };
    configs.a = build(base(0, "a"), options.overridesA, "a");
    configs.b = build(base(1, "b"), options.overridesB, "b");
    return configs;
}

RatioSpread ratioSpread(std::vector<double> ratios) {
    RatioSpread s;
    if (ratios.empty()) return s;
    std::sort(ratios.begin(), ratios.end());
    auto quantile = [&](double q) {
        const double pos = q * static_cast<double>(ratios.size() - 1);
        const std::size_t lo = static_cast<std::size_t>(std::floor(pos));
        const std::size_t hi = std::min(lo + 1, ratios.size() - 1);
        const double frac = pos - static_cast<double>(lo);
        return ratios[lo] + (ratios[hi] - ratios[lo]) * frac;
    };
    s.min = ratios.front();
    s.max = ratios.back();
    s.median = quantile(0.5);
    s.q1 = quantile(0.25);
    s.q3 = quantile(0.75);
    return s;
}

ImageDifference imageDifference(const ImageTensor& a, const ImageTensor& b) {
    ImageDifference d;
    if (a.channels != b.channels || a.height != b.height || a.width != b.width || a.data.size() != b.data.size() ||
        a.data.empty())
        return d;
    d.comparable = true;
    d.bitIdentical = std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(float)) == 0;
    for (std::size_t i = 0; i < a.data.size(); ++i) {
        const double diff = std::abs(static_cast<double>(a.data[i]) - static_cast<double>(b.data[i]));
        if (!(diff <= d.maxAbsModel)) d.maxAbsModel = std::isnan(diff) ? std::numeric_limits<double>::infinity() : diff;
    }
    const Rgb8Image ra = toRgb8(a), rb = toRgb8(b);
    for (std::size_t i = 0; i < ra.pixels.size(); ++i)
        d.maxAbsRgb8 =
            std::max(d.maxAbsRgb8, std::abs(static_cast<int>(ra.pixels[i]) - static_cast<int>(rb.pixels[i])));
    return d;
}

namespace {

// The measured ratios and the image difference of a finished comparison.
struct CompareResult {
    std::vector<double> ratios;  // per measured pair: A seconds / B seconds
    RatioSpread speedup;
    ImageDifference pixels;
};

// Runs A and B options.warmup + options.repeats times, interleaved (A B A B ...), one engine per
// backend; each side keeps its measured runs, notes and images. Throws when a run does not finish.
void runInterleaved(const CompareOptions& options, const std::vector<std::string>& differences, Side& a, Side& b,
                    std::ostream& err) {
    std::map<BackendKind, std::unique_ptr<Engine>> engines;
    const bool sharedEngine = a.config.backend == b.config.backend;
    const bool anyInit = !a.initImage.data.empty() || !b.initImage.data.empty();
    for (const Side* side : {&a, &b}) {
        auto& engine = engines[side->config.backend];
        if (engine) continue;
        std::string note;
        engine = createEngine(side->config.backend, &note);
        if (!note.empty()) err << "note: " << note << "\n";
    }
    err << "compare: " << (sharedEngine ? "one engine for A and B" : "one engine for A, one for B") << "; "
        << options.warmup << " warm-up pair(s) discarded, then " << options.repeats
        << " measured pair(s), interleaved A B\n";
    for (const std::string& d : differences) err << "compare: B differs from A in " << d << "\n";

    const int pairs = options.warmup + options.repeats;
    for (int pair = 0; pair < pairs; ++pair) {
        const bool measured = pair >= options.warmup;
        double seconds[2] = {0, 0};
        int index = 0;
        for (Side* side : {&a, &b}) {
            Engine& engine = *engines.at(side->config.backend);
            if (anyInit) engine.setInitImage(side->initImage);  // the other side may have changed it
            NoteObserver observer;
            RunResult result;
            {
                const InterruptCancels interrupt(engine);  // Ctrl-C: the run ends "cancelled", compare stops
                result = engine.run(side->config, observer);
            }
            if (result.record.status != RunStatus::Finished)
                throw std::runtime_error(side->name + " run " + std::string(toString(result.record.status)) +
                                         (result.record.error.empty() ? "" : ": " + result.record.error));
            seconds[index++] = result.record.totalMs / 1000.0;
            for (const auto& m : result.record.messages) side->addNote(m);
            for (const auto& m : observer.messages) side->addNote(m);
            // A manifest replays to the same bits only with the same timed choices.
            if (const std::string note = tuningMismatchNote(result.record.tuning.digest, side->manifestDigest);
                !note.empty())
                side->addNote(note);
            if (!measured) continue;
            if (side->runs.empty())
                side->firstImage = result.image;
            else if (!imageDifference(side->firstImage, result.image).bitIdentical)
                side->repeatable = false;
            side->lastImage = std::move(result.image);
            side->runs.push_back(std::move(result.record));
        }
        err << "compare: "
            << (measured ? "pair " + std::to_string(pair - options.warmup + 1) + "/" + std::to_string(options.repeats)
                         : "warm-up pair " + std::to_string(pair + 1) + "/" + std::to_string(options.warmup) +
                               " (discarded)")
            << ": A " << fixed(seconds[0], 3) << " s, B " << fixed(seconds[1], 3) << " s\n";
    }
}

// The report on stdout: both sides, what differs, the pairs, speedup, times, memory, graphs, pixels.
void printReport(const CompareOptions& options, const std::vector<std::string>& differences, const Side& a,
                 const Side& b, const CompareResult& result, std::ostream& out) {
    const std::vector<double>& ratios = result.ratios;
    const RatioSpread& speedup = result.speedup;
    const ImageDifference& pixels = result.pixels;
    auto describe = [](const Side& side) {
        const RunRecord& r = side.last();
        const RunConfig& c = side.config;
        return r.environment.backend + " (" + r.environment.device + "), " + r.modelName + ", " +
               std::to_string(c.width) + "x" + std::to_string(c.height) + ", " + std::to_string(r.tileCount) +
               " tiles of " + std::to_string(r.tileW) + "x" + std::to_string(r.tileH) + ", batch " +
               (c.tileBatch > 0 ? std::to_string(c.tileBatch) : std::string("auto")) + ", " +
               std::to_string(r.stepsRun) + " " + std::string(toString(c.scheduler)) + " steps, " +
               std::string(toString(c.precision)) + ", graphs " + std::string(toString(c.graphs)) + ", seed " +
               std::to_string(c.seed);
    };
    out << "A  " << describe(a) << "\n"
        << "B  " << describe(b) << "\n";
    if (differences.empty()) {
        out << "B differs from A in: nothing (the same configuration: this measures run-to-run noise)\n";
    } else {
        out << "B differs from A in: ";
        for (std::size_t i = 0; i < differences.size(); ++i) out << (i ? "; " : "") << differences[i];
        out << "\n";
    }
    out << "time per run: " << kTimingNote << "; " << options.warmup << " warm-up pair(s) discarded, "
        << options.repeats << " measured pair(s), interleaved A B, previews off\n\n";

    out << padLeft("pair", 4) << "  " << padLeft("A s", 9) << "  " << padLeft("B s", 9) << "  " << padLeft("A/B", 7)
        << "\n";
    for (std::size_t i = 0; i < a.runs.size(); ++i)
        out << padLeft(std::to_string(i + 1), 4) << "  " << padLeft(fixed(a.runs[i].totalMs / 1000.0, 4), 9) << "  "
            << padLeft(fixed(b.runs[i].totalMs / 1000.0, 4), 9) << "  " << padLeft(fixed(ratios[i], 3), 7) << "\n";
    out << "\n";

    out << "speedup B vs A   " << fixed(speedup.median, 3) << "x  (median of " << ratios.size()
        << " per-pair ratios A time / B time; min " << fixed(speedup.min, 3) << ", max " << fixed(speedup.max, 3)
        << "; interquartile " << fixed(speedup.q1, 3) << " - " << fixed(speedup.q3, 3) << "; above 1: B is faster)\n";
    const double medA = median(a.seconds()), medB = median(b.seconds());
    out << "median seconds   A " << fixed(medA, 4) << "   B " << fixed(medB, 4) << "\n";
    out << "median prepare   A " << fixed(median(a.prepareMs()), 1) << " ms   B " << fixed(median(b.prepareMs()), 1)
        << " ms  (not in the times above)\n";
    const auto gpuA = a.stepGpuMs(), gpuB = b.stepGpuMs();
    auto orNa = [](const std::optional<double>& v, int decimals, const Side& side) {
        return v ? fixed(*v, decimals) : "n/a (not measured on " + side.last().environment.backend + ")";
    };
    out << "step GPU ms      A " << orNa(gpuA, 3, a) << "   B " << orNa(gpuB, 3, b) << "  (median over steps)\n";
    const auto peakA = a.peakMiB(), peakB = b.peakMiB();
    out << "peak device MiB  A " << orNa(peakA, 1, a) << "   B " << orNa(peakB, 1, b);
    if (peakA && peakB) out << "   delta B - A " << (*peakB >= *peakA ? "+" : "") << fixed(*peakB - *peakA, 1);
    out << "\n";
    out << "graphs           A " << graphSummary(a) << "\n"
        << "                 B " << graphSummary(b) << "\n"
        << "                 (captures and hits summed over each side's measured runs)\n";
    if (pixels.comparable) {
        out << "pixels           max |A - B| " << pixels.maxAbsRgb8 << " of 255 (8-bit RGB), "
            << significant(pixels.maxAbsModel, 6)
            << " (model space); bit-identical: " << (pixels.bitIdentical ? "yes" : "no") << "\n";
    } else {
        out << "pixels           max |A - B| n/a (sizes differ: A " << a.config.width << "x" << a.config.height
            << ", B " << b.config.width << "x" << b.config.height << ")\n";
    }
    out << "repeatability    A " << (a.repeatable ? "bit-identical" : "NOT bit-identical") << " across its "
        << a.runs.size() << " measured runs, B " << (b.repeatable ? "bit-identical" : "NOT bit-identical")
        << " across its " << b.runs.size() << "\n";
    for (const Side* side : {&a, &b})
        for (const auto& note : side->notes) out << "note " << side->name << "           " << note << "\n";
}

// The --json summary: settings, differences, the speedup spread, memory, pixels and every run.
nlohmann::json summaryJson(const CompareOptions& options, const nlohmann::json& differencesJson, const Side& a,
                           const Side& b, const CompareResult& result) {
    const RatioSpread& speedup = result.speedup;
    const ImageDifference& pixels = result.pixels;
    const std::vector<double>& ratios = result.ratios;
    const bool sharedEngine = a.config.backend == b.config.backend;
    const auto peakA = a.peakMiB(), peakB = b.peakMiB();
    nlohmann::json runs = nlohmann::json::array();
    for (std::size_t i = 0; i < a.runs.size(); ++i)
        for (const Side* side : {&a, &b}) {
            const RunRecord& r = side->runs[i];
            runs.push_back(
                {{"pair", i + 1},
                 {"side", side->name},
                 {"run_id", r.runId},
                 {"seconds", r.totalMs / 1000.0},
                 {"prepare_ms", r.prepareMs},
                 {"peak_device_mib", r.peakDeviceMiB >= 0 ? nlohmann::json(r.peakDeviceMiB) : nlohmann::json(nullptr)},
                 {"image_sha256", r.imageSha256}});
        }
    nlohmann::json pixelJson = {{"comparable", pixels.comparable}};
    if (pixels.comparable) {
        pixelJson["max_abs_diff_rgb8"] = pixels.maxAbsRgb8;
        pixelJson["max_abs_diff_model"] = pixels.maxAbsModel;
        pixelJson["bit_identical"] = pixels.bitIdentical;
    } else {
        pixelJson["max_abs_diff_rgb8"] = nullptr;
        pixelJson["max_abs_diff_model"] = nullptr;
        pixelJson["bit_identical"] = nullptr;
        pixelJson["note"] = "n/a (sizes differ)";
    }
    nlohmann::json summary = {
        {"timing", kTimingNote},
        {"order", "interleaved A B, warm-up pairs discarded, previews off"},
        {"warmup", options.warmup},
        {"repeats", options.repeats},
        {"shared_engine", sharedEngine},
        {"a", sideJson(a)},
        {"b", sideJson(b)},
        {"differences", differencesJson},
        {"speedup_b_vs_a",
         {{"definition", "per pair: A seconds / B seconds; above 1 means B is faster"},
          {"median", speedup.median},
          {"min", speedup.min},
          {"max", speedup.max},
          {"q1", speedup.q1},
          {"q3", speedup.q3},
          {"ratios", ratios}}},
        {"peak_device_mib_delta", peakA && peakB ? nlohmann::json(*peakB - *peakA) : nlohmann::json(nullptr)},
        {"pixels", pixelJson},
        {"runs", runs}};
    return summary;
}

}  // namespace

int runCompareCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
    CompareOptions options;
    Side a, b;
    a.name = "A";
    b.name = "B";
    try {
        options = parseCompareOptions(args);
        if (options.help) {
            out << compareUsage();
            return kExitOk;
        }
        // Nothing says what A and B are: usage, not a comparison of the default run with itself.
        if (options.configFiles.empty() && options.runFlags.empty() && options.overridesA.empty() &&
            options.overridesB.empty()) {
            const std::string usage = compareUsage();
            err << "tessera-cli compare: nothing to compare: give two configuration files (A.json B.json), or run "
                   "options with --a and --b changing A's and B's settings\n\n"
                << usage.substr(0, usage.find("Run options")) << "Run options: 'tessera-cli compare --help'.\n";
            return kExitInvalid;
        }
        const ComparedConfigs configs = compareConfigs(options);
        a.config = configs.a;
        b.config = configs.b;
        a.manifestDigest = configs.tuningDigestA;
        b.manifestDigest = configs.tuningDigestB;
        checkWritable("csv", options.csvPath, 2 * (options.warmup + options.repeats));
        checkWritable("json", options.jsonPath, 2 * (options.warmup + options.repeats));
        checkSides(a, b, options.repeats, err);
    } catch (const ValidationError& e) {
        err << "tessera-cli compare: " << e.what() << "\n";
        return kExitInvalid;
    }

    std::vector<std::string> differences;
    nlohmann::json differencesJson = nlohmann::json::object();
    for (const SettingDifference& d : configDifferences(a.config, b.config)) {
        differences.push_back(d.key + " " + d.a + " -> " + d.b);
        differencesJson[d.key] = {d.valueA, d.valueB};
    }
    try {
        runInterleaved(options, differences, a, b, err);
    } catch (const ValidationError& e) {
        err << "tessera-cli compare: " << e.what() << "\n";
        return kExitInvalid;
    } catch (const std::exception& e) {
        err << "tessera-cli compare: run failed: " << e.what() << "\n";
        return kExitFailure;
    }

    CompareResult result;
    for (std::size_t i = 0; i < a.runs.size(); ++i)
        result.ratios.push_back(b.runs[i].totalMs > 0 ? a.runs[i].totalMs / b.runs[i].totalMs : 0.0);
    result.speedup = ratioSpread(result.ratios);
    result.pixels = imageDifference(a.lastImage, b.lastImage);
    printReport(options, differences, a, b, result, out);

    try {
        OutputSet files;  // the CSV and the JSON appear together or not at all
        if (!options.csvPath.empty()) files.addText(options.csvPath, csvText(a, b));
        if (!options.jsonPath.empty())
            files.addText(options.jsonPath, jsonText(summaryJson(options, differencesJson, a, b, result), 2) + "\n");
        files.commit();
        if (!options.csvPath.empty()) out << "csv              " << options.csvPath << "\n";
        if (!options.jsonPath.empty()) out << "json             " << options.jsonPath << "\n";
    } catch (const std::exception& e) {
        err << "tessera-cli compare: " << e.what() << "\n";
        return kExitFailure;
    }
    return kExitOk;
}

}  // namespace tessera
