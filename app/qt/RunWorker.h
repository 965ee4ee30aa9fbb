// RunWorker: runs the engine on its own thread and reports in queued Qt signals.
//
// Image-to-image with an upscale model (RunConfig::upscaleModel) runs the model over the start
// image first, as tessera-cli render --upscale-model does (app/qt/UpscaleModelPass.h): its tiles
// are reported (upscaleModelProgress), Stop ends the pass between tile batches, and the record
// gets its upscale_model section and line. startUpscale() runs the model alone, as tessera-cli
// upscale does (no diffusion model needed). The upscale model applies to a start image only: a
// run without one ignores the setting (the run's configuration then names none).
//
// Usage: create it without a parent, moveToThread(thread), connect QThread::finished to
// deleteLater (so the engine, and any CUDA context it holds, dies on the worker thread), and
// call start() through a queued invocation (QMetaObject::invokeMethod or a signal). Every
// signal carries the run id given to start(); receivers drop signals of any run other than
// the one they are waiting for (a Stop followed by a new Run can leave a few in flight).
//
// A Stable Diffusion run's model is read by the worker and kept between runs (app/qt/KeptSdModel.h),
// with the run's separate VAE (RunConfig::vae, as tessera-cli render --vae: app/cli/VaeReplacement.h)
// in place of its own and its LoRAs (the prompt's <lora:...> tags, then RunConfig::loras, as
// tessera-cli render: app/qt/RunLoras.h) merged into its weights: a LoRA found nowhere or made for
// another family is refused before any work; a run with other LoRAs than the last one's takes the
// kept set out and merges the new one without reading the checkpoint again. The record and the
// run's messages say what was merged (and the keys that matched nothing), as the CLI's do.
//
// Threads: start() and probeDevices() run on the worker thread and block it for the whole
// run. cancel() is the one member that may be called from any thread, directly (it must be:
// the worker's event loop is busy inside Engine::run). The GUI thread never touches the
// engine, and so never makes a CUDA call.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <QImage>
#include <QMetaType>
#include <QObject>
#include <QString>

#include "app/cli/EngineFactory.h"
#include "app/cli/InitImage.h"
#include "app/qt/KeptSdModel.h"
#include "app/qt/UpscaleModelPass.h"
#include "core/run/Engine.h"
#include "core/run/RunConfig.h"
#include "core/run/RunRecord.h"

namespace tessera {

// A finished (or cancelled) run as the window needs it. The result is shared, not copied,
// on its way through the event queue: a 4K image is hundreds of MB of floats.
struct FinishedRun {
    std::shared_ptr<const RunResult> result;
    // 8-bit RGB of result->image. A run reopened from the history has this alone (its
    // result->image is empty: the float copy would take four times the memory); exports make
    // the model-space image from it when they need one.
    QImage image;
    QImage seamMap;  // grey heat map of result->seamMap; null when the engine gave none
    // Image-to-image: the start image resampled to the canvas, as the engine took it, and the
    // file it came from as it was read (the run history keeps a copy). Null without one. With an
    // upscale model (RunConfig::upscaleModel) the engine took the model's output; startImage is
    // then the start image as a plain resize makes it, so that the before/after view compares
    // the model and the diffusion pass with what resizing alone gives (and a run reopened from
    // the history, which resizes its copy of the start image, shows the same).
    QImage startImage;
    std::shared_ptr<const ImageFile> startFile;
    // RunConfig::controlNets' hint canvases as the run took them (each unit's control image, or the
    // start image, through its preprocessor), in the units' order; empty for a run without one.
    std::vector<QImage> controlHints;
};

// Points core at the bundled CLIP vocabulary (resources/clip, found as tessera-cli finds it),
// which SD models without tokenizer/ use. Once per process; looks at files, so call it off the
// GUI thread (the worker and the model inspector do, before they need a tokenizer).
void useBundledClipVocabulary();

// `config` as a run without a start image uses it: with no initImage, the settings only a start
// image gives meaning to (strength, upscale, upscale model, preserve colour) are back at their
// defaults, so the run's record, its PNG parameters and comparisons with other runs say only what
// ran. The window keeps showing what was typed; the run is given this.
RunConfig withoutUnusedStartImageSettings(RunConfig config);

// Registers every type the worker's signals carry (idempotent; the worker's constructor calls it).
void registerRunMetaTypes();

// Model-space image -> QImage (RGB888), as ImageOps' toRgb8. Null for an empty tensor.
QImage toQImage(const ImageTensor& image);
// 8-bit RGB pixels -> QImage (RGB888) that takes them over without a copy. Null for an empty
// image or one whose pixel count does not match its size.
QImage toQImage(Rgb8Image&& rgb);
// QImage -> 8-bit RGB pixels (a copy; other formats converted to RGB888 first).
Rgb8Image rgb8Of(const QImage& image);
// A 1 x H x W map -> grey QImage scaled by its maximum. Null for an empty tensor.
QImage heatmapToQImage(const ImageTensor& map);

class RunWorker : public QObject {
    Q_OBJECT
public:
    explicit RunWorker(QObject* parent = nullptr);
    ~RunWorker() override;

    // Thread-safe. Asks run `runId` (and every run with a smaller id) to stop at the next
    // tile-batch boundary; also marks runs not started yet (queued behind another, or later in
    // a sequence) as cancelled, so they finish at once or are skipped. Cancelling the last id of
    // a sequence therefore stops the whole sequence.
    void cancel(quint64 runId);

    // Tile-batch events closer together than this (ms) are not all forwarded (the last batch
    // of each step always is); the RunRecord keeps every timing. Model-load progress is thinned
    // the same way (the first report of each phase and the last of the load always go).
    static constexpr int kTileBatchSignalIntervalMs = 15;
    // Thread-safe; applies from the next run. Tests widen it to see the thinning at work.
    void setTileBatchSignalInterval(int ms) { tileBatchIntervalMs_.store(ms); }
    // Thread-safe; applies from the next run. A models folder where LoRAs named by the prompt's tags
    // are also looked for (the window's models folder), after those tessera-cli looks in
    // (app/cli/LoraRun.h cliLoraFolders: $TESSERA_MODELS, the folder above the model's). Empty: none.
    void setModelsFolder(const std::string& folder);
    // Thread-safe. How often the worker has read a Stable Diffusion checkpoint (with its VAE):
    // a run that keeps the model, whatever its LoRAs, reads none.
    int sdModelReads() const { return sdModelReads_.load(); }

public slots:
    // Runs `config` to the end on the calling (worker) thread. Creates or reuses the engine for
    // config.backend and config.model: a run of another model gets a new engine, so nothing the
    // last run's engine kept for its model (the denoiser, its canvas and prepared plan) reaches
    // it. Emits modelLoadProgress while the engine reads the model (not when it
    // keeps the last run's), runStarted, then stepFinished/tileBatchFinished/previewReady/
    // memorySampled as the engine reports, then exactly one of runFinished or runFailed.
    void start(const tessera::RunConfig& config, quint64 runId);
    // Runs `configs` one after the other on the worker thread, run i with id firstRunId + i,
    // each reported exactly as start() reports a run. The sequence stops early after a run
    // that did not finish (cancelled or failed); the runs after it are not started. Ends with
    // sequenceFinished. The engine (and its loaded model) is shared by the whole sequence.
    void startSequence(const std::vector<tessera::RunConfig>& configs, quint64 firstRunId);
    // Runs config.upscaleModel alone over config.initImage, as tessera-cli upscale does: the
    // output is the image times config.upscale (each side truncated, as A1111's extras tab
    // sizes it), or, with config.upscale 1, config.width x config.height; the model's output is
    // shrunk to it (never enlarged). Reported as start() reports a run, without runStarted:
    // upscaleModelProgress, then one of runFinished (the record's upscale_model marked alone;
    // status cancelled when stopped) or runFailed. The engine (and its model) is not touched.
    void startUpscale(const tessera::RunConfig& config, quint64 runId);
    // Looks for devices on the worker thread; answers with devicesProbed.
    void probeDevices();

signals:
    // The engine is reading the run's model: bytes done of the load's total, the phase under
    // way (core/base/LoadProgress.h). Fractions never decrease; the last of a load has done == total.
    void modelLoadProgress(quint64 runId, const tessera::LoadProgress& progress);
    void runStarted(quint64 runId, const tessera::RunRecord& record);
    void tileBatchFinished(quint64 runId, const tessera::TileBatchEvent& event);
    // The timings of every tile batch finished since the last such signal, in order, sent just
    // before each tileBatchFinished: tileBatchFinished is thinned out on fast devices, these
    // are not, so a live per-tile chart sees every batch.
    void tileBatchesTimed(quint64 runId, const std::vector<tessera::TileBatchTiming>& batches);
    void stepFinished(quint64 runId, const tessera::StepEvent& event);
    void previewReady(quint64 runId, int step, const QImage& image);
    void memorySampled(quint64 runId, const tessera::MemorySample& sample);
    void message(quint64 runId, const QString& text);  // fallbacks and warnings worth showing
    // The upscale model's pass over the start image: `tilesDone` of `tiles` (0 of n when it
    // starts, n of n when its last tile is done). Thinned as tile batches are; the last always goes.
    void upscaleModelProgress(quint64 runId, int tilesDone, int tiles);
    void runFinished(quint64 runId, const tessera::FinishedRun& run);
    void runFailed(quint64 runId, const QString& error);
    void devicesProbed(const tessera::DeviceReport& report);
    // A startSequence ended: `runsFinished` runs finished (status "finished"); `completed`
    // when that is every run of the sequence.
    void sequenceFinished(quint64 firstRunId, int runsFinished, bool completed);

private:
    class Observer;

    // The engine for a run of `config`: the kept one while the backend and the model stay the
    // same, else a new one.
    Engine& engineFor(const RunConfig& config, quint64 runId);
    // One run, reported as start() says; true when it finished (not cancelled, not failed).
    bool runOne(const RunConfig& config, quint64 runId);
    // Runs `pass` over `image` for run `runId`, reporting its tiles and stopping when the run is
    // cancelled (UpscaleCancelled).
    Rgb8Image runUpscalePass(UpscaleModelPass& pass, const Rgb8Image& image, quint64 runId);
    // The run was cancelled during its upscale model's pass: a record saying so.
    FinishedRun cancelledUpscale(const RunConfig& config, const UpscaleModelPass& pass, const UpscaleCancelled& stop,
                                 bool alone) const;
    bool isCancelled(quint64 runId) const { return runId <= cancelledUpTo_.load(); }
    void setActiveRun(quint64 runId);

    // The kept model for an SD run (read or kept, its VAE and LoRAs in place) given to `engine` where
    // the engine does not hold it at its present state. Emits the LoRA notes; adds nothing to records.
    void prepareSdModel(const RunConfig& config, Engine& engine, VaeReplacement* vae, const RunLoras& loras,
                        RunObserver& observer, KeptSdModel::Use& use);
    // The record of a run on the kept model: its read time, the LoRAs merged (or kept, or taken
    // out), the separate VAE and a pickled checkpoint, as tessera-cli render records them.
    void addModelUse(RunRecord& record, const RunConfig& config, const RunLoras& loras,
                     const KeptSdModel::Use& use) const;
    // The folders a run's LoRA names are looked up in.
    std::vector<std::string> loraFolders(const std::string& runModel) const;

    KeptSdModel kept_;
    unsigned keptGenerationPinned_ = 0;  // kept_.generation() engine_ was last given
    bool enginePinsKept_ = false;        // engine_ was given the kept model
    std::atomic<int> sdModelReads_{0};
    mutable std::mutex foldersMutex_;
    std::string modelsFolder_;  // setModelsFolder's
    // Guards engine_ and activeRunId_ against cancel() from other threads.
    std::mutex engineMutex_;
    std::unique_ptr<Engine> engine_;
    BackendKind engineBackend_ = BackendKind::Auto;
    std::string engineModel_;  // RunConfig::model of the runs engine_ made
    std::string engineVae_;    // RunConfig::vae of the runs engine_ made
    quint64 activeRunId_ = 0;
    std::atomic<quint64> cancelledUpTo_{0};  // every run id <= this is cancelled
    std::atomic<int> tileBatchIntervalMs_{kTileBatchSignalIntervalMs};
};

}  // namespace tessera

Q_DECLARE_METATYPE(tessera::RunConfig)
Q_DECLARE_METATYPE(tessera::RunRecord)
Q_DECLARE_METATYPE(tessera::LoadProgress)
Q_DECLARE_METATYPE(tessera::StepEvent)
Q_DECLARE_METATYPE(tessera::TileBatchEvent)
Q_DECLARE_METATYPE(std::vector<tessera::TileBatchTiming>)
Q_DECLARE_METATYPE(tessera::MemorySample)
Q_DECLARE_METATYPE(tessera::FinishedRun)
Q_DECLARE_METATYPE(tessera::DeviceReport)
