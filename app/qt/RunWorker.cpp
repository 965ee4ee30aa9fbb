#include "app/qt/RunWorker.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <optional>
#include <utility>

#include <filesystem>
#include <mutex>

#include <QCoreApplication>
#include <QSysInfo>

#include "app/cli/CliOptions.h"
#include "app/cli/ControlImages.h"
#include "app/cli/InitImage.h"
#include "app/cli/LoraRun.h"
#include "core/base/BoundedInput.h"
#include "core/base/FormatNumber.h"
#include "core/models/flux/FluxFiles.h"
#include "core/models/flux/FluxModel.h"
#include "core/models/sd/SdModel.h"
#include "core/models/unet/UNetModel.h"
#include "core/run/ControlNetModelFile.h"
#include "core/run/RunRecordIO.h"
#include "core/sampling/ControlPreprocess.h"
#include "core/sampling/ImageOps.h"

namespace tessera {

void registerRunMetaTypes() {
    qRegisterMetaType<tessera::RunConfig>();
    qRegisterMetaType<tessera::RunRecord>();
    qRegisterMetaType<tessera::LoadProgress>();
    qRegisterMetaType<tessera::StepEvent>();
    qRegisterMetaType<tessera::TileBatchEvent>();
    qRegisterMetaType<std::vector<tessera::TileBatchTiming>>();
    qRegisterMetaType<tessera::MemorySample>();
    qRegisterMetaType<tessera::FinishedRun>();
    qRegisterMetaType<tessera::DeviceReport>();
}

namespace {

// Image-to-image with an upscale factor: the canvas is the start image's size times the
// factor, rounded down to multiples of 8 (as tessera-cli render does). Reads the header only.
RunConfig withUpscaledCanvas(RunConfig config) {
    if (config.initImage.empty() || config.upscale == 1.0 || !isSdModelPath(config.model)) return config;
    if (!(config.upscale >= 1.0 && config.upscale <= kMaxUpscale)) return config;  // the engine's validation says why
    ImageHeader header;
    try {
        header = readImageHeader(config.initImage);
    } catch (const InitImageError& e) {
        throw ValidationError("init", std::string("init: ") + e.what());
    }
    config.width = upscaledCanvasSide(header.width, config.upscale);
    config.height = upscaledCanvasSide(header.height, config.upscale);
    return config;
}

// The configuration a window run runs: the canvas from the start image and the factor; an upscale
// model (and strength, upscale, preserve colour) only with a start image (the settings stay in the
// window without one, and the run then names none).
RunConfig windowRunConfig(const RunConfig& given) { return withoutUnusedStartImageSettings(withUpscaledCanvas(given)); }

// A start image that cannot be read or decoded is a problem of the "init" setting.
template <typename Read>
auto withInitError(Read read) {
    try {
        return read();
    } catch (const InitImageError& e) {
        throw ValidationError("init", std::string("init: ") + e.what());
    }
}

// The ControlNets a run names by NAME, found as a run finds them (core/run/ControlNetModelFile.h) in
// `folders` (the window's models folder too, which the engine does not know of): each by its path.
RunConfig withControlNetFiles(RunConfig config, const std::vector<std::string>& folders) {
    if (config.controlNets.empty()) return config;
    const std::vector<ModelFile> files = findControlNetFiles(config, folders);
    for (std::size_t i = 0; i < files.size(); ++i)
        if (files[i].byName) config.controlNets[i].model = files[i].path;
    return config;
}

// The hint canvas of each of the run's ControlNets as the engine makes it (core/sampling/ControlNetRun.h
// controlHints, without the model it reads only the hint's channel count from): the unit's control
// image or the start image (`start`, model space), through the unit's preprocessor. A null image for a
// unit with neither (the engine refuses the run).
std::vector<QImage> controlHintImages(const RunConfig& config, const std::vector<ImageTensor>& images,
                                      const ImageTensor& start) {
    std::vector<QImage> hints;
    for (std::size_t i = 0; i < config.controlNets.size(); ++i) {
        const ControlNetUnit& unit = config.controlNets[i];
        const bool own = i < images.size() && !images[i].data.empty();
        if (!own && start.data.empty()) {
            hints.emplace_back();
            continue;
        }
        ImageTensor hint = own ? images[i] : start;
        if (!own)
            for (float& v : hint.data) v = (v + 1.0f) * 0.5f;  // model space to the hint's [0, 1]
        if (unit.preprocessor == "tile_resample")
            hint.data = tileResampleHint(hint.data, hint.channels, hint.height, hint.width, unit.downSampling,
                                         own ? ControlResizeMode::CropAndResize : ControlResizeMode::JustResize);
        for (float& v : hint.data) v = v * 2.0f - 1.0f;  // toQImage takes model space
        hints.push_back(toQImage(hint));
    }
    return hints;
}

ImageFile readStartFile(const std::string& path) {
    return withInitError([&path] { return readImageFile(path); });
}

}  // namespace

RunConfig withoutUnusedStartImageSettings(RunConfig config) {
    if (!config.initImage.empty()) return config;
    const RunConfig defaults;
    config.strength = defaults.strength;
    config.upscale = defaults.upscale;
    config.upscaleModel = defaults.upscaleModel;
    config.preserveColor = defaults.preserveColor;
    return config;
}

void useBundledClipVocabulary() {
    static std::once_flag once;
    std::call_once(once, [] {
        const std::string dir = QCoreApplication::applicationDirPath().toStdString();
        for (const std::string& candidate : resourceCandidates(dir, "clip/bpe_simple_vocab_16e6.txt.gz")) {
            std::error_code ec;
            if (std::filesystem::is_regular_file(candidate, ec)) {
                setBundledClipVocabulary(candidate);
                return;
            }
        }
    });
}

QImage toQImage(Rgb8Image&& rgb) {
    const auto rowBytes = static_cast<qsizetype>(rgb.width) * 3;
    if (rgb.width <= 0 || rgb.height <= 0 || rgb.pixels.size() != static_cast<std::size_t>(rowBytes) * rgb.height)
        return {};
    // The QImage shares the pixels (read-only: a write would copy them) and frees them with
    // its last copy, on whichever thread that is.
    auto* pixels = new std::vector<std::uint8_t>(std::move(rgb.pixels));
    return QImage(
        pixels->data(), rgb.width, rgb.height, rowBytes, QImage::Format_RGB888,
        [](void* owned) { delete static_cast<std::vector<std::uint8_t>*>(owned); }, pixels);
}

Rgb8Image rgb8Of(const QImage& image) {
    Rgb8Image rgb;
    if (image.isNull()) return rgb;
    const QImage packed =
        image.format() == QImage::Format_RGB888 ? image : image.convertToFormat(QImage::Format_RGB888);
    rgb.width = packed.width();
    rgb.height = packed.height();
    const auto rowBytes = static_cast<std::size_t>(rgb.width) * 3;
    rgb.pixels.resize(rowBytes * static_cast<std::size_t>(rgb.height));
    for (int y = 0; y < rgb.height; ++y)
        std::copy_n(packed.constScanLine(y), rowBytes, rgb.pixels.data() + static_cast<std::size_t>(y) * rowBytes);
    return rgb;
}

QImage toQImage(const ImageTensor& image) {
    if (image.data.empty()) return {};
    return toQImage(toRgb8(image));
}

QImage heatmapToQImage(const ImageTensor& map) {
    if (map.data.empty()) return {};
    return toQImage(heatmapToRgb8(map));
}

// Turns engine callbacks (on the worker thread) into queued signals.
class RunWorker::Observer : public RunObserver {
public:
    Observer(RunWorker& worker, quint64 runId)
        : worker_(worker), runId_(runId), interval_(worker.tileBatchIntervalMs_.load()) {}

    void onLoadProgress(const LoadProgress& progress) override {
        // Reported once per tensor (thousands for SDXL): forwarded at most every interval_, but
        // always a phase's first report and the load's last.
        const auto now = Clock::now();
        const bool newPhase = progress.phase != lastLoadPhase_, last = progress.done == progress.total;
        if (!newPhase && !last && lastLoadSignal_ && now - *lastLoadSignal_ < interval_) return;
        lastLoadSignal_ = now;
        lastLoadPhase_ = progress.phase;
        emit worker_.modelLoadProgress(runId_, progress);
    }

    void onStarted(const RunRecord& record) override { emit worker_.runStarted(runId_, record); }

    void onTileBatch(const TileBatchEvent& event) override {
        // A fast device finishes thousands of batches a second; the window only needs enough
        // of them to move the highlight, and always the last one of a step. The timings of the
        // batches not forwarded travel with the next one that is.
        pendingTimings_.push_back(event.timing);
        const auto now = Clock::now();
        const bool lastOfStep = event.batchIndex + 1 >= event.batches;
        if (!lastOfStep && lastBatchSignal_ && now - *lastBatchSignal_ < interval_) return;
        lastBatchSignal_ = now;
        std::vector<TileBatchTiming> timings;
        timings.swap(pendingTimings_);
        emit worker_.tileBatchesTimed(runId_, timings);
        emit worker_.tileBatchFinished(runId_, event);
    }

    void onStep(const StepEvent& event) override { emit worker_.stepFinished(runId_, event); }

    void onPreview(const PreviewEvent& event) override {
        // Converted here, off the GUI thread.
        lastPreview_ = toQImage(event.image);
        lastPreviewStep_ = event.step;
        emit worker_.previewReady(runId_, event.step, lastPreview_);
    }

    // The last preview sent (null before the first) and its step.
    const QImage& lastPreview() const { return lastPreview_; }
    int lastPreviewStep() const { return lastPreviewStep_; }

    void onMemory(const MemorySample& sample) override { emit worker_.memorySampled(runId_, sample); }

    void onMessage(const std::string& text) override { emit worker_.message(runId_, QString::fromStdString(text)); }

private:
    using Clock = std::chrono::steady_clock;
    RunWorker& worker_;
    quint64 runId_;
    std::chrono::milliseconds interval_;
    std::optional<Clock::time_point> lastBatchSignal_;
    std::optional<Clock::time_point> lastLoadSignal_;
    std::string lastLoadPhase_;
    std::vector<TileBatchTiming> pendingTimings_;
    QImage lastPreview_;
    int lastPreviewStep_ = -1;
};

namespace {

// A run stopped after a step shows what the window showed last, as A1111 keeps the last preview
// of an interrupted job: the preview of its last step (a pixel model's x0 estimate, an SD run's
// latent approximation) rather than the canvas mid-schedule, which is mostly noise. The image kept
// (canvas, history, exports) and its hash are the preview's; the record says so.
void keepLastPreview(RunResult& result, QImage& shown, const QImage& preview, int step) {
    RunRecord& record = result.record;
    if (record.status != RunStatus::Cancelled || preview.isNull() || record.stepsRun == 0) return;
    Rgb8Image rgb = rgb8Of(preview);
    record.imageSha256 = imageSha256(rgb);
    record.messages.push_back("cancelled: the image is the preview of step " + std::to_string(step + 1) +
                              ", the last shown (the canvas after it is mostly noise)");
    result.image = fromRgb8(rgb);
    shown = toQImage(std::move(rgb));
}

}  // namespace

RunWorker::RunWorker(QObject* parent) : QObject(parent) { registerRunMetaTypes(); }

RunWorker::~RunWorker() = default;

void RunWorker::cancel(quint64 runId) {
    quint64 seen = cancelledUpTo_.load();
    while (seen < runId && !cancelledUpTo_.compare_exchange_weak(seen, runId)) {}
    std::lock_guard lock(engineMutex_);
    if (engine_ && activeRunId_ != 0 && activeRunId_ <= runId) engine_->requestCancel();
}

Engine& RunWorker::engineFor(const RunConfig& config, quint64 runId) {
    // Engines keep their loaded model and prepared memory between runs of that model. Another
    // model gets a new engine: an engine keeps one model of each kind (a UNet2DModel folder, a
    // Stable Diffusion model) and the denoiser of whichever ran last, so a pixel model run again
    // after an SD run would sample with the SD denoiser's canvas (4 latent channels) and refuse
    // its own 3-channel start image.
    // Another separate VAE gets one too, so that the last model (held by the engine) is freed
    // before the next is read.
    if (engine_ && engineBackend_ == config.backend && engineModel_ == config.model && engineVae_ == config.vae)
        return *engine_;
    std::string note;
    {
        std::lock_guard lock(engineMutex_);
        engine_.reset();  // before the new one: its model and buffers go first
    }
    auto engine = createEngine(config.backend, &note);
    {
        std::lock_guard lock(engineMutex_);
        engine_ = std::move(engine);
        engineBackend_ = config.backend;
        engineModel_ = config.model;
        engineVae_ = config.vae;
        enginePinsKept_ = false;
    }
    if (!note.empty()) emit message(runId, QString::fromStdString(note));
    return *engine_;
}

void RunWorker::start(const RunConfig& config, quint64 runId) { runOne(config, runId); }

void RunWorker::addModelUse(RunRecord& record, const RunConfig& config, const RunLoras& loras,
                            const KeptSdModel::Use& use) const {
    // The engine counts the read of a model it loads itself in its prepare time; so does this.
    if (use.read) record.prepareMs += use.loadMs;
    if (!use.restored.empty()) {
        record.messages.push_back(
            "lora: the last run's LoRAs were taken out of the kept model's weights (bit for bit; the checkpoint "
            "was not read again)");
        if (loras.empty()) record.prepareMs += use.mergeMs;
    }
    if (!loras.empty()) loras.addTo(record, kept_.mergeReports(), use.mergeMs, !use.merged);
    if (kept_.vae()) kept_.vae()->addTo(record);
    (void)recordModelReader(config.model, record);
}

void RunWorker::setModelsFolder(const std::string& folder) {
    std::lock_guard lock(foldersMutex_);
    modelsFolder_ = folder;
}

std::vector<std::string> RunWorker::loraFolders(const std::string& runModel) const {
    std::vector<std::string> folders = cliLoraFolders(runModel);
    std::lock_guard lock(foldersMutex_);
    if (!modelsFolder_.empty() && std::find(folders.begin(), folders.end(), modelsFolder_) == folders.end())
        folders.push_back(modelsFolder_);
    return folders;
}

void RunWorker::prepareSdModel(const RunConfig& config, Engine& engine, VaeReplacement* vae, const RunLoras& loras,
                               RunObserver& observer, KeptSdModel::Use& use) {
    const LoadProgressCallback progress = [&observer, &engine](const LoadProgress& p) {
        observer.onLoadProgress(p);
        // Stop between tensors rather than after a load of several GB; the next run reads again.
        if (engine.cancelRequested()) throw LoadCancelled(p);
    };
    std::shared_ptr<const SdModel> model = kept_.modelFor(config, vae, loras, progress, &use);
    if (use.read) sdModelReads_.fetch_add(1);
    if (!enginePinsKept_ || keptGenerationPinned_ != kept_.generation()) {
        engine.setSdModel(std::move(model));  // the engine prepares the new weights at its next run
        enginePinsKept_ = true;
        keptGenerationPinned_ = kept_.generation();
    }
}

void RunWorker::startSequence(const std::vector<RunConfig>& configs, quint64 firstRunId) {
    int finished = 0;
    for (std::size_t i = 0; i < configs.size(); ++i) {
        const quint64 runId = firstRunId + i;
        // Stop cancels the rest of the sequence: a run cancelled before it starts is skipped,
        // not reported (the window is told by sequenceFinished).
        if (runId <= cancelledUpTo_.load()) break;
        if (!runOne(configs[i], runId)) break;
        ++finished;
    }
    emit sequenceFinished(firstRunId, finished, finished == static_cast<int>(configs.size()));
}

void RunWorker::setActiveRun(quint64 runId) {
    std::lock_guard lock(engineMutex_);
    activeRunId_ = runId;
}

Rgb8Image RunWorker::runUpscalePass(UpscaleModelPass& pass, const Rgb8Image& image, quint64 runId) {
    using Clock = std::chrono::steady_clock;
    const std::chrono::milliseconds interval(tileBatchIntervalMs_.load());
    std::optional<Clock::time_point> last;
    return pass.run(
        image, [this, runId] { return isCancelled(runId); },
        [this, runId, interval, &last](int done, int tiles) {
            // As tile batches: thinned on a fast device, the first and the last always sent.
            const auto now = Clock::now();
            if (done != 0 && done != tiles && last && now - *last < interval) return;
            last = now;
            emit upscaleModelProgress(runId, done, tiles);
        });
}

FinishedRun RunWorker::cancelledUpscale(const RunConfig& config, const UpscaleModelPass& pass,
                                        const UpscaleCancelled& stop, bool alone) const {
    auto result = std::make_shared<RunResult>();
    RunRecord& record = result->record;
    record.runId = newRunId();
    record.startedAt = isoUtcNow();
    record.config = config;
    record.status = RunStatus::Cancelled;
    record.environment.tesseraVersion = TESSERA_VERSION;
    record.environment.backend = pass.record().backend;
    record.environment.device = pass.device().deviceName;
    record.environment.host = QSysInfo::machineHostName().toStdString();
    record.upscaleModel = pass.record();
    record.upscaleModel->alone = alone;
    record.messages.push_back(stop.what());
    FinishedRun finished;
    finished.result = std::move(result);
    return finished;
}

bool RunWorker::runOne(const RunConfig& given, quint64 runId) {
    try {
        useBundledClipVocabulary();
        // ControlNets named by NAME are looked up in the window's models folder too.
        const RunConfig config = withControlNetFiles(windowRunConfig(given), loraFolders(given.model));
        // The separate VAE and the LoRAs, found and checked against the model's configurations
        // before any work, as tessera-cli render checks them.
        // A FLUX.1 model (a FluxPipeline folder, a BFL or ComfyUI file, random:flux-*) is the engine's to
        // read (core/sampling/TiledLoop.h setFluxModel): its own VAE and text encoders, no LoRAs yet.
        const bool flux = isFluxModelPath(config.model) || isFluxSingleFile(config.model);
        const bool sd = !flux && isSdModelPath(config.model);
        std::optional<VaeReplacement> vae;
        std::optional<RunLoras> loras;
        if (flux) {
            kept_.clear();  // the engine of this model holds it; a kept SD model's memory goes back
            if (runHasLoras(config))
                throw ValidationError("lora", "lora: FLUX.1 LoRAs are not supported yet; remove the LoRAs to run " +
                                                  shownPath(config.model));
        } else if (sd) {
            if (!config.vae.empty()) vae.emplace(config);
            loras.emplace(config, loraFolders(config.model));
            for (const std::string& note : loras->notes()) emit message(runId, QString::fromStdString(note));
        } else {
            kept_.clear();  // as an engine of another model would: its memory back
            if (runHasLoras(config))
                throw ValidationError(
                    "lora", "lora: LoRAs are merged into a Stable Diffusion model; " +
                                (config.model.empty() ? std::string("the default model") : shownPath(config.model)) +
                                " is an unconditional UNet2DModel: choose a Stable Diffusion model");
            if (!config.vae.empty())
                throw ValidationError(
                    "vae", "vae: a separate VAE replaces a Stable Diffusion model's own; " +
                               (config.model.empty() ? std::string("the default model") : shownPath(config.model)) +
                               " is a UNet2DModel, which has none");
        }
        // Control images are files too: decoded and checked against the run's size before any work
        // (as tessera-cli render does); every run gives the engine its own (none clears the last run's).
        std::vector<ImageTensor> controlImages = decodeControlImages(config);
        Engine& engine = engineFor(config, runId);
        engine.setControlImages(controlImages);
        {
            std::lock_guard lock(engineMutex_);
            activeRunId_ = runId;
            engine.resetCancel();
            if (runId <= cancelledUpTo_.load()) engine.requestCancel();
        }
        FinishedRun finished;
        std::optional<UpscaleModelPass> upscale;
        {
            // Any PNG or JPEG, resampled to the run's size (app/cli/InitImage.h); every engine takes
            // it, and an empty tensor clears the last run's. The file is read once: the bytes
            // decoded are the bytes the history keeps.
            ImageTensor init;
            if (!config.initImage.empty()) {
                auto file = std::make_shared<const ImageFile>(readStartFile(config.initImage));
                finished.startFile = file;
                if (config.upscaleModel.empty()) {
                    init = withInitError(
                        [&] { return loadInitImage(config.initImage, *file, config.width, config.height, 3); });
                    finished.startImage = toQImage(init);
                } else {
                    // The model over the start image first, checked before any work (as tessera-cli
                    // render --upscale-model), then resized to the canvas.
                    std::string note;
                    upscale.emplace(config, file->header.width, file->header.height, config.width, config.height,
                                    &note);
                    if (!note.empty()) emit message(runId, QString::fromStdString(note));
                    const Rgb8Image decoded = withInitError([&] { return decodeImage(config.initImage, *file); });
                    Rgb8Image upscaled;
                    try {
                        upscaled = runUpscalePass(*upscale, decoded, runId);
                    } catch (const UpscaleCancelled& stop) {
                        setActiveRun(0);
                        FinishedRun cancelled = cancelledUpscale(config, *upscale, stop, false);
                        cancelled.startFile = finished.startFile;
                        emit runFinished(runId, cancelled);
                        return false;
                    }
                    emit message(runId, QString::fromStdString(describe(upscale->record())));
                    init = resampleToModelSpace(upscaled, config.width, config.height, 3);
                    finished.startImage = toQImage(resampleToModelSpace(decoded, config.width, config.height, 3));
                }
            }
            finished.controlHints = controlHintImages(config, controlImages, init);
            engine.setInitImage(std::move(init));
        }

        Observer observer(*this, runId);
        KeptSdModel::Use use;
        if (sd) prepareSdModel(config, engine, vae ? &*vae : nullptr, *loras, observer, use);
        auto result = std::make_shared<RunResult>(engine.run(config, observer));
        setActiveRun(0);
        if (upscale) {
            // As StartImageUpscale::addTo: the pass in the record and its line among the messages.
            result->record.upscaleModel = upscale->record();
            result->record.messages.push_back(describe(upscale->record()));
        }
        if (sd) addModelUse(result->record, config, *loras, use);
        finished.image = toQImage(result->image);
        keepLastPreview(*result, finished.image, observer.lastPreview(), observer.lastPreviewStep());
        finished.seamMap = heatmapToQImage(result->seamMap);
        const bool completed = result->record.status == RunStatus::Finished;
        finished.result = std::move(result);
        emit runFinished(runId, finished);
        return completed;
    } catch (const std::exception& e) {
        setActiveRun(0);
        emit runFailed(runId, QString::fromUtf8(e.what()));
        return false;
    } catch (...) {
        setActiveRun(0);
        emit runFailed(runId, QStringLiteral("the engine failed with an unknown error"));
        return false;
    }
}

void RunWorker::startUpscale(const RunConfig& given, quint64 runId) {
    try {
        RunConfig config = given;
        if (config.initImage.empty())
            throw ValidationError("init", "init: upscaling needs a start image: open one in the Start image group");
        if (config.upscaleModel.empty())
            throw ValidationError("upscale_model",
                                  "upscale_model: upscaling alone needs an upscale model: choose one in the Start "
                                  "image group");
        if (!(config.upscale >= 1.0 && config.upscale <= kMaxUpscale))
            throw ValidationError("upscale", "upscale: " + formatNumber(config.upscale) +
                                                 " is not allowed; the upscale factor must be 1 to " +
                                                 formatNumber(kMaxUpscale));
        const auto file = std::make_shared<const ImageFile>(readStartFile(config.initImage));
        const int inW = file->header.width, inH = file->header.height;
        if (config.upscale != 1.0) {
            // As A1111's extras tab sizes it (and tessera-cli upscale): int(side * factor), at least 1.
            config.width = std::max(1, static_cast<int>(inW * config.upscale + 1e-9));
            config.height = std::max(1, static_cast<int>(inH * config.upscale + 1e-9));
        }
        const auto started = std::chrono::steady_clock::now();
        std::string note;
        UpscaleModelPass pass(config, inW, inH, config.width, config.height, &note);
        if (!note.empty()) emit message(runId, QString::fromStdString(note));
        const Rgb8Image decoded = withInitError([&] { return decodeImage(config.initImage, *file); });
        Rgb8Image upscaled;
        try {
            upscaled = runUpscalePass(pass, decoded, runId);
        } catch (const UpscaleCancelled& stop) {
            FinishedRun cancelled = cancelledUpscale(config, pass, stop, true);
            cancelled.startFile = file;
            emit runFinished(runId, cancelled);
            return;
        }
        if (pass.record().resized()) upscaled = toRgb8(resampleToModelSpace(upscaled, config.width, config.height, 3));
        pass.record().alone = true;

        // The record tessera-cli upscale writes (app/cli/UpscaleCommand.h).
        auto result = std::make_shared<RunResult>();
        RunRecord& record = result->record;
        record.runId = newRunId();
        record.startedAt = isoUtcNow();
        record.config = config;
        record.status = RunStatus::Finished;
        record.environment.tesseraVersion = TESSERA_VERSION;
        record.environment.backend = pass.record().backend;
        record.environment.device = pass.device().deviceName;
        record.environment.host = QSysInfo::machineHostName().toStdString();
        record.environment.threads = pass.device().threads;
        record.tileCount = pass.record().tiles;
        record.tileW = std::min(pass.record().tile, inW) * pass.record().scale;
        record.tileH = std::min(pass.record().tile, inH) * pass.record().scale;
        record.totalMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
        record.imageSha256 = imageSha256(upscaled);
        if (!note.empty()) record.messages.push_back(note);
        record.messages.push_back(describe(pass.record()));
        record.upscaleModel = pass.record();
        emit message(runId, QString::fromStdString(describe(pass.record())));

        FinishedRun finished;
        finished.startFile = file;
        finished.startImage = toQImage(resampleToModelSpace(decoded, config.width, config.height, 3));
        result->image = fromRgb8(upscaled);  // what the history and the exports write (8-bit values survive)
        finished.image = toQImage(std::move(upscaled));
        finished.result = std::move(result);
        emit runFinished(runId, finished);
    } catch (const std::exception& e) {
        emit runFailed(runId, QString::fromUtf8(e.what()));
    } catch (...) {
        emit runFailed(runId, QStringLiteral("the upscale failed with an unknown error"));
    }
}

void RunWorker::probeDevices() { emit devicesProbed(tessera::probeDevices()); }

}  // namespace tessera
