#include "app/cli/UpscaleCommand.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <ostream>
#include <set>

#include "app/cli/CliOptions.h"
#include "app/cli/CliText.h"
#include "app/cli/EngineFactory.h"
#include "app/cli/InitImage.h"
#include "app/cli/PngIO.h"
#include "app/cli/UpscaleModelRun.h"
#include "core/base/BoundedInput.h"
#include "core/run/OutputSet.h"
#include "core/run/RunConfigFields.h"
#include "core/run/RunRecordIO.h"

namespace tessera {

namespace {

namespace fs = std::filesystem;

struct UpscaleOptions {
    RunConfig config;             // init, upscale_model, upscale, backend, threads, label
    std::set<std::string> given;  // RunConfig fields given, by name
    std::string outDir = ".";
    UpscaleTiling tiling;
    bool help = false;
};

// The run settings the command takes, by flag: parsed by the field table (core/run/RunConfigFields.h)
// as render parses them.
constexpr const char* kRunFlags[] = {"upscale-model", "init", "upscale", "backend", "threads", "label"};

int tileValue(const std::string& text) {
    const int tile = parseCount("tile", text, 0);
    if (tile < kUpscaleTileMin || tile > kUpscaleTileMax)
        fail("tile", std::to_string(tile) + " is not allowed; the upscale tile must be " +
                         std::to_string(kUpscaleTileMin) + " to " + std::to_string(kUpscaleTileMax) + " input pixels");
    return tile;
}

UpscaleOptions parseUpscaleOptions(const std::vector<std::string>& args) {
    UpscaleOptions o;
    o.tiling.tile = kUpscaleTileDefault;
    o.tiling.overlap = kUpscaleOverlapDefault;
    std::optional<std::string> overlap;
    for (std::size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "-h") {
            o.help = true;
            continue;
        }
        std::optional<OptionWord> word = splitOptionWord(args[i]);
        if (!word) fail("option", "unexpected argument " + inQuotes(args[i]) + "; options start with --");
        const std::string& name = word->name;
        if (name == "help") {
            if (word->inlineValue) fail("option", "option '--help' takes no value");
            o.help = true;
            continue;
        }
        const bool runFlag = std::find(std::begin(kRunFlags), std::end(kRunFlags), name) != std::end(kRunFlags);
        if (!runFlag && name != "out" && name != "tile" && name != "tile-overlap")
            fail("option", "unknown option '--" + excerpt(name) +
                               "'; upscale takes --upscale-model, --init, --upscale, --out, --tile, "
                               "--tile-overlap, --backend, --threads, --label; see 'tessera-cli upscale --help'");
        const RunConfigField* field = runFlag ? findRunConfigField(name) : nullptr;
        takeOptionValue(*word, args, i, field ? std::string(field->name) : name);
        if (field) {
            field->parse(o.config, word->value);
            o.given.insert(std::string(field->name));
        } else if (name == "out") {
            if (word->value.empty()) fail("out", "an output folder is needed");
            checkPathText("out", word->value, "the output folder");
            o.outDir = word->value;
        } else if (name == "tile") {
            o.tiling.tile = tileValue(word->value);
        } else {
            overlap = word->value;
        }
    }
    if (o.help) return o;
    if (overlap) {
        const int px = parseCount("tile_overlap", *overlap, 0);
        if (px > o.tiling.tile / 2)
            fail("tile_overlap", std::to_string(px) + " is not allowed; the tile overlap must be 0 to " +
                                     std::to_string(o.tiling.tile / 2) + " input pixels (half the tile, " +
                                     std::to_string(o.tiling.tile) + ")");
        o.tiling.overlap = px;
    }
    if (o.config.upscaleModel.empty())
        fail("upscale_model", "upscale needs a model: --upscale-model FILE|NAME ('tessera-cli upscale --help')");
    if (o.config.initImage.empty()) fail("init", "upscale needs an image: --init FILE ('tessera-cli upscale --help')");
    // The settings' own checks (ranges, text), for the settings this command takes.
    for (const ValidationError& problem : validateAll(o.config))
        if (o.given.count(problem.field())) throw problem;
    return o;
}

std::string hostName() {
    char name[256] = {};
    if (gethostname(name, sizeof name - 1) != 0) return {};
    return name;
}

// What the PNG and the manifest take, counted as renderOutputNeeds counts a render's.
OutputNeeds upscaleOutputNeeds(const RunConfig& config) {
    const std::uintmax_t raw = std::uintmax_t(config.height) * (1 + 3 * std::uintmax_t(config.width));
    const std::uintmax_t strings = 6 * (config.label.size() + config.initImage.size() + 4 * config.upscaleModel.size());
    const std::uintmax_t manifest = (16u << 10) + strings;
    const std::uintmax_t png = raw + raw / 256 + manifest / 2 + strings + (8u << 10);
    OutputNeeds needs;
    needs.totalBytes = png + manifest;
    needs.largestBytes = std::max(png, manifest);
    needs.what = "image up to " + byteCountText(png) + ", manifest up to " + byteCountText(manifest);
    return needs;
}

// The output size at factor x: each side times x, truncated as A1111's extras tab sizes it
// (int(width * upscale_by)), at least 1.
int targetSide(int side, double factor) { return std::max(1, static_cast<int>(side * factor + 1e-9)); }

int runUpscale(const UpscaleOptions& options, std::ostream& out, std::ostream& err) {
    RunConfig config = options.config;
    // Every check before any work, cheapest first: the backend, the image's header, the model
    // (found, read, hashed), the factor against the model's scale, the sizes and memory, the
    // output folder.
    const BackendKind backend = checkRunBackend(config.backend);
    const std::optional<StartImageSize> start = checkStartImageHeader(config, 3);
    UpscaleModelRun run = loadUpscaleModelRun(config.upscaleModel, cliUpscaleModelsFolders(config.model));
    if (!options.given.count("upscale")) config.upscale = run.model.scale();
    config.width = targetSide(start->width, config.upscale);
    config.height = targetSide(start->height, config.upscale);
    std::string note;
    const UpscaleDeviceChoice device = createUpscaleDevice(backend, upscaleDeviceRequest(config), &note);
    if (!note.empty()) err << "note: " << note << "\n";
    checkUpscaleModelRun(run, start->width, start->height, config.width, config.height, device, options.tiling);
    checkOutputFolder(options.outDir, "out", upscaleOutputNeeds(config));

    Rgb8Image image;
    try {
        image = decodeImageFile(config.initImage);
    } catch (const InitImageError& e) {
        fail("init", e.what());
    }
    RunRecord record;
    record.runId = newRunId();
    record.startedAt = isoUtcNow();
    const auto started = std::chrono::steady_clock::now();
    Rgb8Image upscaled = runUpscaleModel(run, image, device, options.tiling);
    if (run.record.resized()) upscaled = toRgb8(resampleToModelSpace(upscaled, config.width, config.height, 3));
    run.record.alone = true;

    record.config = config;
    record.environment.tesseraVersion = TESSERA_VERSION;
    record.environment.backend = run.record.backend;
    record.environment.device = device.deviceName;
    record.environment.host = hostName();
    record.environment.threads = device.threads;
    record.tileCount = run.record.tiles;
    record.tileW = std::min(run.record.tile, start->width) * run.record.scale;
    record.tileH = std::min(run.record.tile, start->height) * run.record.scale;
    record.totalMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    record.imageSha256 = imageSha256(upscaled);
    if (!note.empty()) record.messages.push_back(note);
    record.messages.push_back(describe(run.record));
    record.upscaleModel = run.record;
    err << "note: " << describe(run.record) << "\n";

    // All-or-nothing, the manifest last (core/run/OutputSet.h), as render writes its outputs.
    const fs::path base = fs::path(options.outDir) / record.runId;
    const std::string manifest = jsonText(manifestJson(record), 2);
    OutputSet outputs;
    outputs.createFolders(options.outDir);
    outputs.add(base.string() + ".png", encodeRunPng(base.string() + ".png", upscaled, record, manifest));
    outputs.addText(base.string() + ".json", manifest);
    outputs.commit();

    out << "finished: " << start->width << "x" << start->height << " upscaled to " << config.width << "x"
        << config.height << " with " << run.record.name << " (" << run.record.architecture << ") in "
        << fixed(record.totalMs / 1000.0, 2) << " s\n"
        << "image     " << base.string() << ".png\n"
        << "manifest  " << base.string() << ".json\n";
    return kExitOk;
}

}  // namespace

int runUpscaleCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
    try {
        const UpscaleOptions options = parseUpscaleOptions(args);
        if (options.help) {
            out << upscaleUsage();
            return kExitOk;
        }
        return runUpscale(options, out, err);
    } catch (const FieldError& e) {  // ValidationError, InputFileError, ModelError: invalid input
        err << "tessera-cli: " << e.what() << "\n";
        return kExitInvalid;
    } catch (const std::exception& e) {  // PngError, OutputError, a failure while running
        err << "tessera-cli: upscale failed: " << e.what() << "\n";
        return kExitFailure;
    }
}

}  // namespace tessera
