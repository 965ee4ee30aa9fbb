// tessera-cli: plan, render, info, bench, compare, tokens and upscale, headless. Exit status: 0 success, 2 invalid
// input (the message names the field), 1 failure while running.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "app/cli/BenchCommand.h"
#include "app/cli/CliOptions.h"
#include "app/cli/CliText.h"
#include "app/cli/CompareCommand.h"
#include "app/cli/ControlImages.h"
#include "app/cli/EngineFactory.h"
#include "app/cli/InitImage.h"
#include "app/cli/InterruptCancels.h"
#include "app/cli/LoraRun.h"
#include "app/cli/PathStatus.h"
#include "app/cli/PngIO.h"
#include "app/cli/PromptEmbeddingCheck.h"
#include "app/cli/RunMemoryCheck.h"
#include "app/cli/SdInfoCommand.h"
#include "app/cli/TokensCommand.h"
#include "app/cli/UpscaleCommand.h"
#include "app/cli/UpscaleModelRun.h"
#include "app/cli/VaeReplacement.h"
#include "core/base/BoundedInput.h"
#include "core/base/FormatNumber.h"
#include "core/base/LoadProgress.h"
#include "core/cpu/CpuBackend.h"
#include "core/cpu/CpuEngine.h"
#include "core/cpu/HostMemoryEstimate.h"
#include "core/models/sd/SdModel.h"
#include "core/models/sd/SdPipeline.h"
#include "core/models/unet/UNetModel.h"
#include "core/run/OutputSet.h"
#include "core/run/RunRecordIO.h"
#include "core/run/VaeFile.h"
#include "core/sampling/ImageOps.h"
#include "core/sampling/Scheduler.h"
#include "core/sampling/TilePlan.h"

namespace fs = std::filesystem;
using namespace tessera;

namespace {

// Thrown for invalid input detected here rather than by the core (no default model, ...).
struct InputError {
    std::string message;
};

// Resolves config.model to an absolute folder: the given one, or the default model.
std::string resolveModel(const std::string& given) {
    try {
        return resolveModelFolder(given, executableDir());
    } catch (const ValidationError& e) {
        throw InputError{e.what()};
    }
}

std::string humanFlops(double flops) {
    const char* units[] = {"FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP"};
    int unit = 0;
    while (flops >= 1000.0 && unit < 5) {
        flops /= 1000.0;
        ++unit;
    }
    return fixed(flops, 2) + " " + units[unit];
}

// Upscaling (Stable Diffusion image-to-image): the canvas is the init image's size times
// config.upscale, each side rounded down to a multiple of 8 (the VAE's cell). The size comes
// from the image's header: nothing is decoded before the run's checks.
void applyUpscale(RunConfig& config) {
    if (!(config.upscale >= 1.0 && config.upscale <= kMaxUpscale))
        throw InputError{"upscale: " + formatNumber(config.upscale) +
                         " is not allowed; the upscale factor must be 1 to " + formatNumber(kMaxUpscale)};
    ImageHeader header;
    try {
        header = readImageHeader(config.initImage);
    } catch (const InitImageError& e) {
        throw InputError{std::string("init: ") + e.what()};
    }
    config.width = upscaledCanvasSide(header.width, config.upscale);
    config.height = upscaledCanvasSide(header.height, config.upscale);
    std::cerr << "note: upscale: " << header.width << "x" << header.height << " x " << fixed(config.upscale, 2)
              << " -> " << config.width << "x" << config.height << "\n";
}

// The strength of image-to-image (core/run/RunConfig.h): a value outside 0..1 is refused
// whether or not the run starts from an image (validate() checks it only with one); without
// --init the --strength given is unused, and the user is told so rather than left guessing.
void checkStrength(const CliOptions& options) {
    const RunConfig& config = options.config;
    checkStrengthRange(config);
    if (config.initImage.empty() && options.flagsGiven.count("strength"))
        std::cerr << "note: strength: " << formatNumber(config.strength)
                  << " is unused: it applies to image-to-image runs (--init); this run starts from noise\n";
}

// LoRAs (a <lora:...> tag, --lora) change a Stable Diffusion model's weights; a UNet2DModel has none
// to change (and takes no prompt).
std::string loraNeedsSdModel(const RunConfig& config) {
    return "lora: LoRAs are merged into a Stable Diffusion model; " +
           (config.model.empty() ? std::string("no --model is given (the default model is an unconditional UNet)")
                                 : shownPath(config.model) + " is an unconditional UNet2DModel folder") +
           ": give a Stable Diffusion pipeline folder or checkpoint with --model";
}

// What the host-memory estimate sizes the run by (app/cli/RunMemoryCheck.h).
RunModelShape runModelShape(const RunConfig& config, const std::optional<ModelFolderConfig>& folder) {
    RunModelShape shape;
    shape.stableDiffusion = !folder;
    if (folder)
        shape.pixel = folder->config;
    else
        shape.sdModel = readSdModelConfigs(config.model);
    return shape;
}

// What a render of this plan would ask of the host, on the CPU engine and on the CUDA one.
void printHostMemory(const RunConfig& config, const RunModelShape& model) {
    const HostMemoryEstimate cpu = estimateRunMemory(config, model, BackendKind::CPU, std::nullopt);
    const HostMemoryEstimate cuda = estimateRunMemory(config, model, BackendKind::CUDA, std::nullopt);
    const std::optional<HostMemory> available = availableHostMemory();
    std::cout << "host memory  about " << formatBytes(cpu.peakBytes()) << " at the peak with the cpu engine, "
              << formatBytes(cuda.peakBytes()) << " with the cuda engine";
    if (available) std::cout << "; " << formatBytes(available->availableBytes) << " available";
    std::cout << "\n";
}

// --upscale-model: the model's pass over the start image as render would run it (found, read and
// checked the same way), before the diffusion tiles.
void printUpscaleModelPlan(const RunConfig& config) {
    const std::optional<StartImageSize> start = checkStartImageHeader(config, 3);
    if (!start) throw InputError{"upscale_model: an upscale model runs on a start image: give --init FILE"};
    UpscaleModelRun run = loadUpscaleModelRun(config.upscaleModel, cliUpscaleModelsFolders(config.model));
    const UpscaleDeviceChoice device = createUpscaleDevice(config.backend, upscaleDeviceRequest(config), nullptr);
    checkUpscaleModelRun(run, start->width, start->height, config.width, config.height, device, UpscaleTiling{});
    const UpscaleModelRecord& r = run.record;
    std::cout << "upscaler     " << r.name << " (" << r.architecture << (r.pickle ? ", a PyTorch checkpoint" : "")
              << ") on " << r.backend << " " << r.precision << ": " << r.inputW << " x " << r.inputH << " -> "
              << r.outputW << " x " << r.outputH;
    if (r.tile >= r.inputW && r.tile >= r.inputH)
        std::cout << " in one tile";
    else
        std::cout << " in tiles of " << r.tile << " px (overlap " << r.overlap << ")";
    if (r.resized()) std::cout << ", then " << r.resizeFilter << " to " << r.resizedW << " x " << r.resizedH;
    std::cout << "\n";
}

// --vae (app/cli/VaeReplacement.h), found and checked against the model's VAE before any weights
// are read. A VAE that --params-from's PNG names and that is not found here is left out with a
// note, as A1111 keeps the checkpoint's own VAE when the one an infotext names is not in its list
// (modules/sd_vae.py resolve_vae, "VAE not found"); one given any other way must be found.
std::optional<VaeReplacement> separateVae(const CliOptions& options, RunConfig& config, bool sd) {
    if (config.vae.empty()) return std::nullopt;
    if (!sd)
        throw InputError{"vae: a separate VAE replaces a Stable Diffusion model's own; " + shownPath(config.model) +
                         " is a UNet2DModel folder, which has none"};
    const bool fromPng =
        !options.paramsFromVae.empty() && config.vae == options.paramsFromVae && options.flagsGiven.count("vae") == 0;
    if (fromPng) {
        try {
            (void)findVaeFile(config.vae, cliModelsFolders(config.model));
        } catch (const ValidationError& e) {
            std::cerr << "note: params-from: the PNG's VAE is not used, the model's own is: " << e.what() << "\n";
            config.vae.clear();
            return std::nullopt;
        }
    }
    return std::optional<VaeReplacement>(std::in_place, config);
}

int cmdPlan(const CliOptions& options) {
    RunConfig config = options.config;
    std::unique_ptr<UNetModel> model;
    std::optional<ModelFolderConfig> folder;
    bool sd = false;
    if (!config.model.empty()) {
        config.model = resolveModel(config.model);
        // A Stable Diffusion model is planned from the run's fields alone, with render's checks; its
        // limits come from three components, which the engine checks once it has loaded them.
        sd = isSdModelPath(config.model);
        if (!sd) folder = readModelFolderConfig(config.model);
    }
    checkStrength(options);
    if (sd && !config.initImage.empty() && config.upscale != 1.0) applyUpscale(config);
    validate(config, sd ? ModelLimits{8, 1000, 3} : folder ? folder->limits() : ModelLimits{});
    if (sd) checkSdCells(config);
    if (folder) model = std::make_unique<UNetModel>(UNetModel::load(config.model));
    const TilePlan plan = TilePlan::fromConfig(config);
    const int tiles = plan.count();
    const int batch = resolveTileBatch(config.tileBatch, tiles);
    const int stepsRun = loopSteps(config) - firstLoopStep(config, !config.initImage.empty());
    std::cout << "image        " << config.width << " x " << config.height << " px\n"
              << "tile grid    " << plan.cols() << " cols x " << plan.rows() << " rows\n"
              << "tile         " << plan.tileW() << " x " << plan.tileH() << " px\n"
              << "stride       " << plan.stride() << " px\n"
              << "overlap      " << config.overlapPixels() << " px\n"
              << "tiles        " << tiles << "\n"
              << "redundancy   " << fixed(plan.redundancy(), 3) << " (tile area / image area)\n"
              << "batch        " << batch << " tiles per UNet call" << (config.tileBatch <= 0 ? " (auto)" : "") << ", "
              << (tiles + batch - 1) / batch << " calls per step\n"
              << "evaluations  " << tiles << " per step, " << static_cast<long long>(tiles) * stepsRun << " total ("
              << stepsRun << " steps)\n";
    if (!config.upscaleModel.empty()) printUpscaleModelPlan(config);
    const std::optional<VaeReplacement> vae = separateVae(options, config, sd);
    if (runHasLoras(config)) {
        if (!sd) throw InputError{loraNeedsSdModel(config)};
        const LoraRun loras(config, cliLoraFolders(config.model));
        for (const std::string& note : loras.notes()) std::cerr << "note: " << note << "\n";
        for (const std::string& line : loras.describeLines()) std::cout << "lora         " << line << "\n";
    }
    if (sd) {
        std::cout << "latent       " << config.width / 8 << " x " << config.height / 8 << ", tiles of "
                  << plan.tileW() / 8 << " x " << plan.tileH() / 8 << " (Stable Diffusion: 8 image px per latent px)\n"
                  << "guidance     "
                  << (config.cfgScale != 1.0 ? "cfg " + fixed(config.cfgScale, 1) +
                                                   ": each tile evaluated twice (conditional and unconditional rows)"
                                             : std::string("cfg 1: the conditional row only"))
                  << "\n"
                  << "model        " << config.model << " ('tessera-cli info' describes it; render and bench report "
                  << "FLOPs and memory)\n";
        if (vae) {
            std::cout << "vae          " << vaeName(vae->path());
            if (vae->checked())
                std::cout << " (" << toString(vae->info().names) << " names, " << vae->info().reader << ")";
            std::cout << " in place of the model's own; latents scaled as the model's\n";
        }
        printHostMemory(config, runModelShape(config, std::nullopt));
    }
    if (model) {
        const double perEval = model->flopsPerEvaluation(plan.tileH(), plan.tileW());
        std::cout << "FLOPs        " << humanFlops(perEval * tiles) << " per step, "
                  << humanFlops(perEval * tiles * stepsRun) << " total (" << humanFlops(perEval)
                  << " per tile evaluation)\n";
        printHostMemory(config, runModelShape(config, folder));
    }
    return kExitOk;
}

int cmdInfo(const CliOptions& options) {
    if (options.infoDir.empty()) throw InputError{"model: info needs a model folder: tessera-cli info DIR"};
    // Stable Diffusion pipeline folders and checkpoint files (app/cli/SdInfoCommand.h).
    if (isSdModelPath(options.infoDir)) {
        // A link loop or a link to nothing is said as such (app/cli/PathStatus.h); the model's
        // reader says what else is wrong, or that nothing is there.
        if (options.infoDir.rfind(kRandomModelPrefix, 0) != 0) {
            checkPathText("model", options.infoDir, "a model folder or checkpoint file");
            const PathStatus status = pathStatus(options.infoDir);
            if (status.kind == PathStatus::Kind::LinkLoop || status.kind == PathStatus::Kind::DanglingLink)
                throw InputError{"model: " + shownPath(options.infoDir) + " " + status.problem};
        }
        printSdModelInfo(options.infoDir, executableDir(), std::cout);
        return kExitOk;
    }
    const std::string dir = resolveModel(options.infoDir);
    const UNetModel model = UNetModel::load(dir);
    const int tile = options.fieldsGiven.count("tile") ? options.config.tile : 64;
    if (tile <= 0 || tile % model.config().downsampleFactor() != 0)
        throw InputError{"tile: " + std::to_string(tile) + " is not allowed; this model needs a positive multiple of " +
                         std::to_string(model.config().downsampleFactor())};
    const UNetConfig& c = model.config();
    std::string channels;
    for (int ch : c.blockOutChannels) channels += (channels.empty() ? "" : ", ") + std::to_string(ch);
    std::string blocks;
    for (auto b : c.downBlocks)
        blocks += (blocks.empty() ? "" : ", ") + std::string(b == DownBlockType::AttnDown ? "AttnDown" : "Down");
    const SchedulerOptions& s = model.schedulerOptions();
    std::cout << "model        " << model.name() << " (" << dir << ")\n"
              << "sample size  " << (c.sampleSize > 0 ? std::to_string(c.sampleSize) : std::string("not given")) << "\n"
              << "channels     in " << c.inChannels << ", out " << c.outChannels << "\n"
              << "blocks       " << blocks << "\n"
              << "block width  " << channels << " (" << c.layersPerBlock << " layers per block)\n"
              << "downsample   x" << c.downsampleFactor() << " (tile sizes must be multiples of it)\n"
              << "scheduler    " << model.schedulerClass() << ": " << s.numTrainTimesteps << " train steps, beta "
              << toString(s.betaSchedule) << " " << s.betaStart << " .. " << s.betaEnd << ", variance "
              << toString(s.varianceType) << ", prediction " << toString(s.predictionType) << ", clip "
              << (s.clipSample ? "on" : "off") << "\n"
              << "tensors      " << model.tensors().size() << "\n"
              << "parameters   " << withThousands(model.parameterCount()) << "\n"
              << "FLOPs        " << humanFlops(model.flopsPerEvaluation(tile, tile)) << " per evaluation of a " << tile
              << " x " << tile << " tile\n"
              << "weights      sha256 " << model.weightsSha256() << "\n";
    if (!model.extraTensors().empty())
        std::cout << "unused       " << model.extraTensors().size()
                  << " tensors in the file are not used by the config\n";
    return kExitOk;
}

// Progress on stderr: the model load by phase and tenths (a multi-GB checkpoint takes a while),
// then one line per step.
class ConsoleObserver : public RunObserver {
public:
    void onLoadProgress(const LoadProgress& p) override {
        const int tenth = static_cast<int>(p.fraction() * 10.0);
        const bool done = p.done == p.total;
        if (p.phase == lastPhase_ && tenth == lastTenth_ && !(done && !doneShown_)) return;
        lastPhase_ = p.phase;
        lastTenth_ = tenth;
        doneShown_ = done;
        std::cerr << "loading: " << p.phase << " " << static_cast<int>(p.fraction() * 100.0) << "% ("
                  << fixed(static_cast<double>(p.done) / 1048576.0, 1) << " of "
                  << fixed(static_cast<double>(p.total) / 1048576.0, 1) << " MiB)\n";
    }
    void onStarted(const RunRecord& record) override {
        std::cerr << "run " << record.runId << ": " << record.tileCount << " tiles of " << record.tileW << "x"
                  << record.tileH << ", " << record.config.steps << " steps on " << record.environment.backend << " ("
                  << record.environment.device << ")\n";
    }
    void onStep(const StepEvent& e) override {
        std::cerr << "step " << (e.step + 1) << "/" << e.steps << "  t=" << e.timestep << "  "
                  << fixed(e.timing.wallMs, 1) << " ms\n";
    }
    void onMessage(const std::string& message) override { std::cerr << "note: " << message << "\n"; }

private:
    std::string lastPhase_;
    int lastTenth_ = -1;
    bool doneShown_ = false;
};

std::unique_ptr<Engine> makeEngine(BackendKind kind) {
    std::string note;
    std::unique_ptr<Engine> engine = createEngine(kind, &note);
    if (!note.empty()) std::cerr << "note: " << note << "\n";
    return engine;
}

// The start image decoded and resampled to the run's size in model space (app/cli/InitImage.h);
// every engine takes it. Called after every check: a damaged file is refused here (exit 2).
ImageTensor startImageTensor(const RunConfig& config, int channels) {
    Rgb8Image decoded;
    try {
        decoded = decodeImageFile(config.initImage);
    } catch (const InitImageError& e) {
        throw InputError{std::string("init: ") + e.what()};
    }
    if (decoded.width != config.width || decoded.height != config.height) {
        std::cerr << "note: init: " << shownPath(config.initImage) << " is " << decoded.width << "x" << decoded.height
                  << ", resized to " << config.width << "x" << config.height;
        const double inAspect = static_cast<double>(decoded.width) / decoded.height;
        const double runAspect = static_cast<double>(config.width) / config.height;
        if (std::abs(inAspect / runAspect - 1.0) > 0.01) std::cerr << " (stretched: the aspect ratios differ)";
        std::cerr << "\n";
    }
    return resampleToModelSpace(decoded, config.width, config.height, channels);
}

// The outputs of all --batch-count images: seeds seed .. seed + N - 1 (A1111's batch count), each
// within the seed's range.
OutputNeeds batchOutputNeeds(const CliOptions& options, const RunConfig& config) {
    OutputNeeds needs = renderOutputNeeds(config);
    if (options.batchCount > 1) {
        const std::uint64_t more = static_cast<std::uint64_t>(options.batchCount - 1);
        if (config.seed > std::numeric_limits<std::uint64_t>::max() - more)
            throw ValidationError("batch-count", "batch-count: " + std::to_string(options.batchCount) +
                                                     " images from seed " + std::to_string(config.seed) +
                                                     " go past the largest seed, 18446744073709551615; lower the "
                                                     "seed or the batch count");
        needs.totalBytes *= static_cast<std::uintmax_t>(options.batchCount);
        needs.what += " per image, " + std::to_string(options.batchCount) + " images";
    }
    return needs;
}

// One run's outputs and the lines that name them.
void writeRenderOutputs(const std::string& outDir, const RunResult& result) {
    const RunRecord& record = result.record;
    // One all-or-nothing set (core/run/OutputSet.h): temporary files, fsync, then renames with the
    // manifest last, so a manifest means a complete set. A failure, a full disk or a fatal signal
    // (HUP, INT, QUIT, TERM, PIPE) while writing leaves none of the set, except the finished image
    // once written whole: it is kept as <run-id>.incomplete.png and the error or a line on stderr
    // says so. Text is stored as valid UTF-8 (a Latin-1 label is escaped, never a reason to lose
    // the run).
    const fs::path base = fs::path(outDir) / record.runId;
    const std::string manifest = jsonText(manifestJson(record), 2);
    OutputSet outputs;
    outputs.createFolders(outDir);
    outputs.add(base.string() + ".png", encodeRunPng(base.string() + ".png", toRgb8(result.image), record, manifest),
                OutputSet::IfIncomplete::Keep);
    outputs.addText(base.string() + ".csv", timingsCsv(record));
    outputs.addText(base.string() + ".json", manifest);
    outputs.commit();

    const double seconds = record.totalMs / 1000.0;
    long long evaluations = 0;
    for (const auto& batch : record.batches) evaluations += static_cast<long long>(batch.tileIds.size());
    std::cout << toString(record.status) << ": " << record.stepsRun << " steps in " << fixed(seconds, 2)
              << " s (prepare " << fixed(record.prepareMs / 1000.0, 2) << " s), " << evaluations
              << " tile evaluations, " << fixed(seconds > 0 ? evaluations / seconds : 0.0, 2) << " tile evals/s\n"
              << "image     " << base.string() << ".png\n"
              << "timings   " << base.string() << ".csv\n"
              << "manifest  " << base.string() << ".json\n";
}

int cmdRender(const CliOptions& options) {
    RunConfig config = options.config;
    // Every check before any work, cheapest first: the fields against the model's limits
    // (its config.json alone), the backend, the start image's header, the host memory.
    config.model = resolveModel(config.model);
    const bool sd = isSdModelPath(config.model);
    std::optional<ModelFolderConfig> model;
    if (!sd) model = readModelFolderConfig(config.model);
    checkStrength(options);
    if (sd && !config.initImage.empty() && config.upscale != 1.0) applyUpscale(config);
    validate(config, sd ? ModelLimits{8, 1000, 3} : model->limits());
    if (sd) checkSdCells(config);  // before the model is loaded: a multi-GB read for nothing otherwise
    const BackendKind backend = checkRunBackend(config.backend);
    const int channels = sd ? 3 : model->config.inChannels;
    const std::optional<StartImageSize> startImage = checkStartImageHeader(config, channels);
    // The host memory of the whole run, every family (a Stable Diffusion model's parts from its
    // config files or header), before the start image is decoded or any model loaded. The engine
    // checks a Stable Diffusion run against the model once it is loaded (its limits come from
    // three components).
    const RunModelShape shape = runModelShape(config, model);
    checkRunMemory(config, shape, backend, startImage);

    // The output folder: the last validation, before any work. It creates nothing: the --out
    // folder (and missing parents) are created only when the outputs are written, so a rejected
    // render leaves no folder behind.
    checkOutputFolder(options.outDir, "out", batchOutputNeeds(options, config));
    std::optional<VaeReplacement> vae = separateVae(options, config, sd);

    // --upscale-model: the model's pass over the start image, found, read and checked before the
    // engine loads anything, run before the canvas resize (app/cli/UpscaleModelRun.h).
    std::optional<StartImageUpscale> upscaleModel;
    if (!config.upscaleModel.empty()) upscaleModel.emplace(config, startImage, std::cerr);

    // LoRAs (the prompt's <lora:...> tags, --lora): found, hashed and checked against the model's
    // configurations before any weights are read, merged once it is loaded (app/cli/LoraRun.h).
    std::optional<LoraRun> loras;
    std::vector<std::string> loraHashNotes;  // --params-from's "Lora hashes" against the files found
    if (runHasLoras(config)) {
        if (!sd) throw InputError{loraNeedsSdModel(config)};
        loras.emplace(config, cliLoraFolders(config.model));
        loraHashNotes = loras->hashNotes(options.paramsFromLoraHashes);
        for (const std::string& note : loras->notes()) std::cerr << "note: " << note << "\n";
        for (const std::string& note : loraHashNotes) std::cerr << "note: " << note << "\n";
    }

    // The textual-inversion embeddings the prompts name: read and checked (a hostile or damaged file,
    // vectors of another width than the text encoders') before any weights are (app/cli/PromptEmbeddingCheck.h).
    if (sd) checkPromptEmbeddings(config, shape.sdModel);

    // Control images are files too: decoded and checked against the run's size before any model loads.
    std::vector<ImageTensor> controlImages = decodeControlImages(config);
    std::unique_ptr<Engine> engine = makeEngine(config.backend);
    engine->setControlImages(std::move(controlImages));
    if (startImage)
        engine->setInitImage(upscaleModel ? upscaleModel->startImage(config, channels, std::cerr)
                                          : startImageTensor(config, channels));

    ConsoleObserver observer;
    if (vae || loras) {
        // The model is loaded here rather than by the engine, to give it the VAE in place of its own
        // and to merge the LoRAs into its weights before the engine prepares them.
        const InterruptCancels interrupt(*engine);
        const LoadProgressCallback progress = [&](const LoadProgress& p) {
            observer.onLoadProgress(p);
            if (engine->cancelRequested()) throw LoadCancelled(p);
        };
        std::shared_ptr<const SdModel> pinned =
            vae ? vae->load(config, progress) : std::make_shared<const SdModel>(loadSdModel(config.model, progress));
        if (loras) {
            pinned = loras->merge(std::move(pinned));
            for (const std::string& note : loras->mergeNotes()) std::cerr << "note: " << note << "\n";
        }
        engine->setSdModel(std::move(pinned));
    }
    // --batch-count: one run and one output set per seed; a cancelled run ends the batch once its
    // set is written.
    for (int image = 0; image < options.batchCount; ++image) {
        RunConfig imageConfig = config;
        imageConfig.seed = config.seed + static_cast<std::uint64_t>(image);
        RunResult result;
        {
            const InterruptCancels interrupt(*engine);  // Ctrl-C: finish the tile batch, keep what was made
            result = engine->run(imageConfig, observer);
        }
        if (upscaleModel) upscaleModel->addTo(result.record);
        if (loras) {
            loras->addTo(result.record);
            result.record.messages.insert(result.record.messages.end(), loraHashNotes.begin(), loraHashNotes.end());
        }
        if (vae) {
            const std::size_t noted = result.record.messages.size();
            vae->addTo(result.record);
            for (std::size_t i = noted; i < result.record.messages.size(); ++i)
                std::cerr << "note: " << result.record.messages[i] << "\n";
            const std::string& pngHash = options.paramsFromVaeHash;
            if (!pngHash.empty() && config.vae == options.paramsFromVae &&
                vae->record().sha256.rfind(pngHash, 0) != 0) {
                const std::string note = "params-from: the PNG's VAE hash " + excerpt(pngHash, 20) +
                                         " is not that of " + shownPath(vae->path()) + " (" +
                                         vae->record().sha256.substr(0, 10) + "): the image may differ from the PNG's";
                std::cerr << "note: " << note << "\n";
                result.record.messages.push_back(note);
            }
        }
        if (sd) {
            if (const std::string note = recordModelReader(config.model, result.record); !note.empty())
                std::cerr << "note: " << note << "\n";
        }
        // Replayed from a manifest (--preset <run-id>.json): the same bits need the same timed choices.
        if (const std::string note = tuningMismatchNote(result.record.tuning.digest, options.presetTuningDigest);
            !note.empty()) {
            std::cerr << "note: " << note << "\n";
            result.record.messages.push_back(note);
        }
        writeRenderOutputs(options.outDir, result);
        if (result.record.status == RunStatus::Cancelled) return kExitFailure;
    }
    return kExitOk;
}

// An allocation failed past the up-front check (an estimate, not a reservation): say what ran
// out and what can be done, rather than "std::bad_alloc".
void reportOutOfMemory() {
    const std::optional<HostMemory> available = availableHostMemory();
    std::cerr << "tessera-cli: out of memory: an allocation failed while running"
              << (available ? " (" + formatBytes(available->availableBytes) + " left: " + available->source + ")"
                            : std::string())
              << "; lower width and height, batch or the tile size, or raise the memory limit\n";
}

}  // namespace

int main(int argc, char** argv) {
    // OpenBLAS's kernels for this CPU where it loaded older ones (a restart, before anything runs).
    restartWithOpenblasKernelsForThisCpu(argv);
    // Warnings (unused tensors, unknown config keys) are diagnostics: stderr, never the report on stdout.
    spdlog::set_default_logger(spdlog::stderr_color_mt("tessera-cli"));
    // The CLIP vocabulary Stable Diffusion models without tokenizer/ use (resources/clip).
    for (const std::string& candidate : resourceCandidates(executableDir(), "clip/bpe_simple_vocab_16e6.txt.gz"))
        if (pathStatus(candidate).kind == PathStatus::Kind::File) {
            setBundledClipVocabulary(candidate);
            break;
        }
    std::vector<std::string> args(argv + 1, argv + argc);
    // The subcommands with option parsers of their own, each given the words after its name:
    // bench (lists of batches, precisions, graph modes: app/cli/BenchCommand.h), compare (two
    // configurations, files or render flags with --a/--b: app/cli/CompareCommand.h), tokens (a
    // prompt's CLIP token ids per 75-token chunk: app/cli/TokensCommand.h) and upscale (an upscale
    // model alone: app/cli/UpscaleCommand.h).
    using Subcommand = std::function<int(const std::vector<std::string>&)>;
    const std::pair<const char*, Subcommand> subcommands[] = {
        {"bench", [](const auto& words) { return runBenchCommand(words, std::cout, std::cerr); }},
        {"compare", [](const auto& words) { return runCompareCommand(words, std::cout, std::cerr); }},
        {"tokens", [](const auto& words) { return runTokensCommand(words, std::cout, std::cerr, executableDir()); }},
        {"upscale", [](const auto& words) { return runUpscaleCommand(words, std::cout, std::cerr); }}};
    for (const auto& [name, run] : subcommands)
        if (!args.empty() && args.front() == name) {
            try {
                return run(std::vector<std::string>(args.begin() + 1, args.end()));
            } catch (const std::bad_alloc&) {
                reportOutOfMemory();
                return kExitFailure;
            } catch (const std::exception& e) {
                std::cerr << "tessera-cli: " << name << " failed: " << e.what() << "\n";
                return kExitFailure;
            }
        }
    CliOptions options;
    try {
        options = parseCliOptions(args);
    } catch (const ValidationError& e) {
        std::cerr << "tessera-cli: " << e.what() << "\n";
        return kExitInvalid;
    }
    for (const std::string& note : options.paramsFromNotes) std::cerr << note << "\n";  // --params-from
    if (options.command == CliCommand::Version) {
        std::cout << "tessera-cli " << TESSERA_VERSION << "\n";
        return kExitOk;
    }
    if (options.help || options.command == CliCommand::Help) {
        std::cout << cliUsage(options.command);
        if (options.command == CliCommand::Help)
            std::cout
                << "\n  bench     time a matrix of batch x precision x graph mode runs ('tessera-cli bench --help')\n"
                << "  compare   run two configurations interleaved: speedup, memory, pixel difference\n"
                << "            ('tessera-cli compare --help')\n"
                << "  tokens    a prompt's CLIP token ids (and weights) per 75-token chunk ('tessera-cli tokens "
                   "--help')\n"
                << "  upscale   an upscale model alone over an image, no diffusion model needed ('tessera-cli "
                   "upscale --help')\n";
        return kExitOk;
    }
    try {
        switch (options.command) {
            case CliCommand::Plan:
                return cmdPlan(options);
            case CliCommand::Render:
                return cmdRender(options);
            case CliCommand::Info:
                return cmdInfo(options);
            default:
                return kExitOk;
        }
    } catch (const InputError& e) {
        std::cerr << "tessera-cli: " << e.message << "\n";
        return kExitInvalid;
    } catch (const ModelError& e) {  // an InputFileError of field "model": before FieldError
        std::cerr << "tessera-cli: model: " << e.what() << "\n";
        return kExitInvalid;
    } catch (const FieldError& e) {  // ValidationError, InputFileError
        std::cerr << "tessera-cli: " << e.what() << "\n";
        return kExitInvalid;
    } catch (const PngError& e) {
        std::cerr << "tessera-cli: " << e.what() << "\n";
        return kExitFailure;
    } catch (const LoadCancelled& e) {  // Ctrl-C while the model loads: nothing was run or written
        std::cerr << "tessera-cli: " << e.what() << "\n";
        return kExitFailure;
    } catch (const std::bad_alloc&) {
        reportOutOfMemory();
        return kExitFailure;
    } catch (const std::exception& e) {
        std::cerr << "tessera-cli: failed: " << e.what() << "\n";
        return kExitFailure;
    }
}
