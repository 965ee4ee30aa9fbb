#include "ui/RunController.h"

#include <algorithm>
#include <exception>

#include "app/qt/HistoryStore.h"
#include "app/qt/RunHistory.h"
#include "core/run/RunRecordIO.h"
#include "core/sampling/TilePlan.h"
#include "ui/TileCanvas.h"
#include "ui/TimingCharts.h"

namespace tessera {

namespace {

QString formatDuration(double seconds) {
    if (seconds < 0) return QStringLiteral("—");
    const auto total = static_cast<qint64>(seconds + 0.5);
    if (total >= 3600)
        return QStringLiteral("%1:%2:%3")
            .arg(total / 3600)
            .arg((total / 60) % 60, 2, 10, QLatin1Char('0'))
            .arg(total % 60, 2, 10, QLatin1Char('0'));
    return QStringLiteral("%1:%2").arg(total / 60, 2, 10, QLatin1Char('0')).arg(total % 60, 2, 10, QLatin1Char('0'));
}

}  // namespace

RunController::RunController(TileCanvas* canvas, TimingCharts* charts, StatusLine* status, HistoryStore* history,
                             QObject* parent)
    : QObject(parent), canvas_(canvas), charts_(charts), status_(status), history_(history) {
    progressTimer_.setInterval(kProgressIntervalMs);
    connect(&progressTimer_, &QTimer::timeout, this, &RunController::refreshProgress);
    startWorker();
}

RunController::~RunController() {
    // Stop a run in flight at the next tile batch, then let the thread finish; the worker
    // (and its engine) is deleted on its own thread through QThread::finished.
    if (running_ && worker_) worker_->cancel(isComparingGraphs() ? comparison_->lastRunId() : currentRunId_);
    workerThread_.quit();
    workerThread_.wait();
}

void RunController::startWorker() {
    registerRunMetaTypes();
    worker_ = new RunWorker;
    worker_->moveToThread(&workerThread_);
    workerThread_.setObjectName(QStringLiteral("tessera-engine"));
    connect(&workerThread_, &QThread::finished, worker_, &QObject::deleteLater);
    connect(worker_, &RunWorker::modelLoadProgress, this, &RunController::onLoadProgress);
    connect(worker_, &RunWorker::runStarted, this, &RunController::onRunStarted);
    connect(worker_, &RunWorker::tileBatchFinished, this, &RunController::onTileBatch);
    connect(worker_, &RunWorker::tileBatchesTimed, this, &RunController::onTileBatchesTimed);
    connect(worker_, &RunWorker::sequenceFinished, this, &RunController::onSequenceFinished);
    connect(worker_, &RunWorker::stepFinished, this, &RunController::onStep);
    connect(worker_, &RunWorker::previewReady, this, &RunController::onPreview);
    connect(worker_, &RunWorker::memorySampled, this, &RunController::onMemory);
    connect(worker_, &RunWorker::message, this, &RunController::onMessage);
    connect(worker_, &RunWorker::upscaleModelProgress, this, &RunController::onUpscaleModelProgress);
    connect(worker_, &RunWorker::runFinished, this, &RunController::onRunFinished);
    connect(worker_, &RunWorker::runFailed, this, &RunController::onRunFailed);
    connect(worker_, &RunWorker::devicesProbed, this, [this](const DeviceReport& report) {
        devices_ = report;
        emit devicesProbed(report);
    });
    workerThread_.start();
    // Device discovery may call CUDA, so it happens on the worker thread too.
    QMetaObject::invokeMethod(worker_, &RunWorker::probeDevices, Qt::QueuedConnection);
}

void RunController::setModelsFolder(const QString& folder) {
    worker_->setModelsFolder(folder.toStdString());  // thread-safe: applies from the next run
}

void RunController::start(const RunConfig& config) {
    if (running_) return;
    currentRunId_ = nextRunId_++;
    running_ = true;
    stopping_ = false;
    upscaleOnly_ = false;
    beginRunDisplay(config);
    status_->setStatusText(tr("Loading the model and preparing the backend…"));
    progressTimer_.start();
    emit runningChanged(true);

    const quint64 runId = currentRunId_;
    RunWorker* worker = worker_;
    QMetaObject::invokeMethod(
        worker, [worker, config, runId] { worker->start(config, runId); }, Qt::QueuedConnection);
}

void RunController::startUpscaleOnly(const RunConfig& config) {
    if (running_) return;
    currentRunId_ = nextRunId_++;
    running_ = true;
    stopping_ = false;
    upscaleOnly_ = true;
    beginRunDisplay(config);
    status_->setStatusText(tr("Reading the upscale model…"));
    progressTimer_.start();
    emit runningChanged(true);

    const quint64 runId = currentRunId_;
    RunWorker* worker = worker_;
    QMetaObject::invokeMethod(
        worker, [worker, config, runId] { worker->startUpscale(config, runId); }, Qt::QueuedConnection);
}

void RunController::startGraphComparison(const RunConfig& base) {
    if (running_) return;
    upscaleOnly_ = false;
    comparison_ = GraphComparison::plan(base, kGraphComparisonPairs, nextRunId_);
    nextRunId_ += comparison_->runs.size();
    const std::vector<RunConfig> configs = comparison_->configs();
    currentRunId_ = comparison_->firstRunId;
    running_ = true;
    stopping_ = false;
    beginRunDisplay(configs.front());
    status_->setStatusText(comparison_->runStatus(0));
    progressTimer_.start();
    emit runningChanged(true);
    emit graphComparisonRunStarted(0, static_cast<int>(configs.size()));

    const quint64 firstRunId = comparison_->firstRunId;
    RunWorker* worker = worker_;
    QMetaObject::invokeMethod(
        worker, [worker, configs, firstRunId] { worker->startSequence(configs, firstRunId); }, Qt::QueuedConnection);
}

void RunController::stop() {
    if (!running_ || stopping_) return;
    stopping_ = true;
    // Direct call: the worker thread is busy inside the engine; cancel() is thread-safe.
    // Cancelling the last id of a comparison stops its run in flight and every run after it.
    worker_->cancel(isComparingGraphs() ? comparison_->lastRunId() : currentRunId_);
    status_->setStatusText(isComparingGraphs() ? tr("Stopping the comparison after the current tile batch…")
                                               : tr("Stopping after the current tile batch…"));
    emit runningChanged(true);
}

// The loop step a started run begins at: FLUX.1's image-to-image counts its steps as
// FluxImg2ImgPipeline does (firstFlowStepRun, one evaluation a step), the others as the SD pipelines.
// Before the record arrives (beginRunDisplay) the SD rule stands in; the record says which ran.
int RunController::firstRecordedStep(const RunRecord& record) {
    const bool fromImage = !record.config.initImage.empty();
    return ranFlowMatching(record) ? firstFlowStepRun(record.config, fromImage)
                                   : firstLoopStep(record.config, fromImage);
}

void RunController::beginRunDisplay(const RunConfig& config) {
    runConfig_ = config;
    progress_ = RunProgress{};
    progress_.steps = loopSteps(config);  // model evaluations: Heun's 20 steps are 39
    progress_.firstStep = std::clamp(firstLoopStep(config, !config.initImage.empty()), 0, progress_.steps);
    upscaleTilesDone_ = upscaleTiles_ = 0;
    try {
        TilePlan plan = TilePlan::fromConfig(config);
        progress_.tiles = plan.count();
        charts_->startTileTimes(plan);
        canvas_->setPlan(std::move(plan));
        canvas_->setTileShift({});  // until the run's first tile batch says where its tiles lie
    } catch (const std::exception&) {
        charts_->setTilePlan(std::nullopt);
        canvas_->setPlan(std::nullopt);
    }
    if (upscaleOnly_) {  // an upscale model alone has tiles of its own (its record's), not the diffusion plan's
        progress_.tiles = 0;
        charts_->setTilePlan(std::nullopt);
        canvas_->setPlan(std::nullopt);
    }
    imageBefore_ = canvas_->image();
    canvas_->setImage({});
    canvas_->setSeamMap({});
    emit displayCleared();
    startedRecord_.reset();
    canvas_->setBlendWindow(config.window);
    canvas_->setPlaceholderText(upscaleOnly_ ? tr("Upscaling the start image…")
                                             : tr("Loading the model and preparing…"));
    charts_->clear();
    status_->showBars();
    // Busy until the engine reports the model load's fraction (a model kept from the last run,
    // or a pixel model, reports none), and again while it prepares; the text counts the seconds.
    status_->showStepBar(progress_, running_);
    runClock_.start();
    markProgressDirty();
}

void RunController::refreshProgress() {
    if (!progressDirty_ && !running_) return;
    progressDirty_ = false;
    status_->showProgress(progress_, running_);
    if (running_) status_->setProgressText(progressText());
}

QString RunController::progressText() const {
    const RunProgress& p = progress_;
    const double elapsed = runClock_.isValid() ? runClock_.elapsed() / 1000.0 : 0.0;
    // The bars show step k/N and tile j/M; the text adds time.
    QString text = tr("%1 elapsed").arg(formatDuration(elapsed));
    if (!p.started && upscaleTiles_ > 0 && upscaleTilesDone_ < upscaleTiles_)
        text = tr("upscale model: tile %1 of %2 · ").arg(upscaleTilesDone_ + 1).arg(upscaleTiles_) + text;
    else if (p.loading())
        text = tr("loading the model: %1 %2% · ").arg(p.loadPhase).arg(static_cast<int>(p.loadFraction * 100)) + text;
    else if (!p.started)
        text = (p.loadFraction < 0 ? tr("loading the model and preparing · ") : tr("preparing · ")) + text;
    if (isComparingGraphs())
        text = tr("run %1/%2 · ").arg(currentRunId_ - comparison_->firstRunId + 1).arg(comparison_->runs.size()) + text;
    if (p.started && p.steps > 0 && p.tiles > 0) {
        const double done = (p.step + static_cast<double>(p.tilesDone) / p.tiles) / p.steps;
        const double sampling = samplingClock_.elapsed() / 1000.0;
        if (done > 0.0 && done < 1.0) text += tr(" · ETA %1").arg(formatDuration(sampling * (1.0 - done) / done));
    }
    return text;
}

void RunController::onLoadProgress(quint64 runId, const LoadProgress& progress) {
    if (runId != currentRunId_ || progress_.started) return;
    progress_.loadFraction = std::clamp(progress.fraction(), 0.0, 1.0);
    progress_.loadPhase = QString::fromStdString(progress.phase);
    // The worker sends a few dozen a second at most: the bar follows each at once.
    status_->showStepBar(progress_, running_);
    markProgressDirty();
    emit loadProgressShown(progress_.loadFraction, progress_.loadPhase);
}

void RunController::onRunStarted(quint64 runId, const RunRecord& record) {
    if (runId != currentRunId_) return;
    progress_.started = true;
    progress_.tiles = record.tileCount;
    progress_.steps = loopSteps(record.config);
    progress_.firstStep = std::clamp(firstRecordedStep(record), 0, progress_.steps);
    startedRecord_ = record;
    emit runStarted(record);
    samplingClock_.start();
    canvas_->setPlaceholderText(
        tr("Step 1 of %1 — the image appears after each step").arg(progress_.steps - progress_.firstStep));
    QString text = tr("Running on %1 — %2 (prepared in %3 s)")
                       .arg(QString::fromStdString(record.environment.backend).toUpper(),
                            QString::fromStdString(record.environment.device))
                       .arg(record.prepareMs / 1000.0, 0, 'f', 2);
    if (isComparingGraphs())
        text = comparison_->runStatus(static_cast<int>(currentRunId_ - comparison_->firstRunId)) +
               QStringLiteral(" · ") + text;
    if (stopping_) text = tr("Stopping after the current tile batch…");
    status_->setStatusText(text);
    markProgressDirty();
}

void RunController::onTileBatch(quint64 runId, const TileBatchEvent& event) {
    if (runId != currentRunId_) return;
    // The tiles finished are counted from every batch's timing (onTileBatchesTimed, sent just
    // before, never thinned out): this event only says what is under way.
    progress_.steps = event.steps;
    if (event.step < progress_.step) return;  // a late batch of a step already finished
    canvas_->setTileShift(event.shift);
    canvas_->setActiveTiles(event.tileIds);
    markProgressDirty();
}

void RunController::onTileBatchesTimed(quint64 runId, const std::vector<TileBatchTiming>& batches) {
    if (runId != currentRunId_) return;
    charts_->addTileBatches(batches);
    for (const TileBatchTiming& batch : batches) progress_.countFinishedBatch(batch);
    markProgressDirty();
}

void RunController::onStep(quint64 runId, const StepEvent& event) {
    if (runId != currentRunId_) return;
    progress_.finishStep(event.step);
    progress_.steps = event.steps;
    charts_->addStep(event.timing);
    markProgressDirty();
}

void RunController::onPreview(quint64 runId, int step, const QImage& image) {
    if (runId != currentRunId_) return;
    canvas_->setImage(image);
    emit previewShown(step, image);
}

void RunController::onMemory(quint64 runId, const MemorySample& sample) {
    if (runId != currentRunId_) return;
    charts_->addMemory(sample, devices_ && devices_->cudaAvailable && runConfig_.backend != BackendKind::CPU);
}

void RunController::onMessage(quint64 runId, const QString& text) {
    if (runId == currentRunId_) status_->showNote(text);
}

void RunController::onUpscaleModelProgress(quint64 runId, int tilesDone, int tiles) {
    if (runId != currentRunId_ || progress_.started) return;
    upscaleTilesDone_ = tilesDone;
    upscaleTiles_ = tiles;
    // The step bar shows the pass as it shows a model load: its fraction, then busy while the
    // diffusion model loads and the engine prepares.
    progress_.loadFraction = tiles > 0 ? static_cast<double>(tilesDone) / tiles : 1.0;
    progress_.loadPhase = tr("upscale model");
    status_->showStepBar(progress_, running_);
    if (tilesDone == 0) {
        status_->setStatusText(upscaleOnly_ ? tr("Upscaling the start image with the upscale model…")
                                            : tr("Upscaling the start image with the upscale model first…"));
        canvas_->setPlaceholderText(tr("Upscaling the start image…"));
    } else if (tilesDone == tiles && !upscaleOnly_) {
        canvas_->setPlaceholderText(tr("Loading the model and preparing…"));
    }
    markProgressDirty();
}

void RunController::showFinishedRun(const FinishedRun& run, bool keepInHistory) {
    canvas_->setPlaceholderText({});
    const RunRecord& record = run.result->record;
    if (!run.image.isNull()) canvas_->setImage(run.image);
    canvas_->setSeamMap(run.result->seamMap);
    emit runShown(run);
    charts_->showTileTimes(record);
    canvas_->setActiveTiles({});
    // The bars keep the run's end state: the steps run of those it was to run (its first step
    // from the record), and all tiles of a finished run.
    progress_.steps = loopSteps(record.config);
    progress_.firstStep = !record.steps.empty() ? std::clamp(record.steps.front().step, 0, progress_.steps)
                                                : std::clamp(firstRecordedStep(record), 0, progress_.steps);
    progress_.step = progress_.firstStep + record.stepsRun;
    progress_.tilesDone = record.status == RunStatus::Finished ? progress_.tiles : progress_.tilesDone;
    status_->showProgress(progress_, running_);
    progressDirty_ = false;
    const bool cancelled = record.status == RunStatus::Cancelled;
    const bool alone = record.upscaleModel && record.upscaleModel->alone;
    if (alone || (cancelled && record.stepsRun == 0 && record.upscaleModel)) status_->hideBars();
    QString text =
        cancelled ? tr("Cancelled after %1 of %2 steps").arg(record.stepsRun).arg(progress_.steps - progress_.firstStep)
                  : tr("Finished %1 steps, %2 tiles in %3 s (%4 ms/step)")
                        .arg(record.stepsRun)
                        .arg(record.tileCount)
                        .arg(record.totalMs / 1000.0, 0, 'f', 2)
                        .arg(record.stepsRun > 0 ? record.totalMs / record.stepsRun : 0.0, 0, 'f', 1);
    if (alone)
        text = tr("Upscaled %1 × %2 px to %3 × %4 px in %5 s")
                   .arg(record.upscaleModel->inputW)
                   .arg(record.upscaleModel->inputH)
                   .arg(record.config.width)
                   .arg(record.config.height)
                   .arg(record.totalMs / 1000.0, 0, 'f', 2);
    if (record.seamScore > 0)
        text += tr(" · seams %1 (1 = invisible, worst border %2)")
                    .arg(record.seamScore, 0, 'f', 2)
                    .arg(record.seamWorst, 0, 'f', 2);
    for (const std::string& message : record.messages) text += QStringLiteral(" · ") + QString::fromStdString(message);
    status_->setStatusText(text);
    status_->showRanOn(record);
    // Every run goes into the history, a cancelled one with its partial image (if a step
    // ended); Compare graphs keeps only the runs it compares. Its PNG is encoded and written
    // on the history's thread; the row appears on entryAdded.
    if (keepInHistory && !(cancelled && isComparingGraphs())) history_->add(run.result, run.startFile);
}

void RunController::keepFailedRun(const QString& error) {
    auto failed = std::make_shared<RunResult>();
    RunRecord& record = failed->record;
    if (startedRecord_) {
        record = *startedRecord_;
    } else {  // it failed before the engine started (a model or start image that cannot be used)
        record.config = runConfig_;
        record.runId = newRunId();
        record.startedAt = isoUtcNow();
    }
    record.status = RunStatus::Failed;
    record.error = error.toStdString();
    history_->add(failed);
}

void RunController::onRunFinished(quint64 runId, const FinishedRun& run) {
    if (runId != currentRunId_ || !run.result) return;
    if (isComparingGraphs()) {
        const auto index = static_cast<std::size_t>(runId - comparison_->firstRunId);
        GraphComparison::Run& entry = comparison_->runs[index];
        entry.result = run.result;
        entry.image = run.image;
        // Warm-up runs are shown but not kept: they measure the first-run costs on purpose.
        showFinishedRun(run, !entry.warmUp);
        if (run.result->record.status == RunStatus::Finished && index + 1 < comparison_->runs.size() && !stopping_) {
            // The worker goes straight on with the next run of the sequence.
            currentRunId_ = runId + 1;
            beginRunDisplay(comparison_->runs[index + 1].config);
            status_->setStatusText(comparison_->runStatus(static_cast<int>(index + 1)));
            emit graphComparisonRunStarted(static_cast<int>(index + 1), static_cast<int>(comparison_->runs.size()));
        }
        return;  // the sequence ends with onSequenceFinished
    }
    running_ = false;
    stopping_ = false;
    imageBefore_ = {};
    progressTimer_.stop();
    showFinishedRun(run, true);
    const bool cancelled = run.result->record.status == RunStatus::Cancelled;
    emit runningChanged(false);
    emit runEnded(!cancelled);
}

void RunController::onRunFailed(quint64 runId, const QString& error) {
    if (runId != currentRunId_) return;
    if (isComparingGraphs()) {
        // The worker skips the rest of the sequence; onSequenceFinished ends it.
        comparison_->error = error;
        canvas_->setActiveTiles({});
        status_->setStatusText(tr("Run failed: %1").arg(error), true);
        return;
    }
    running_ = false;
    status_->showStepBar(progress_, running_);  // not the failed load's fraction
    canvas_->setPlaceholderText(tr("The run failed: %1").arg(error));
    // Nothing of this run was shown (a preview would be): the image before it comes back, the
    // error is in the status line and the history.
    if (canvas_->image().isNull() && !imageBefore_.isNull()) {
        canvas_->setImage(imageBefore_);
        emit displayRestored();
    }
    imageBefore_ = {};
    stopping_ = false;
    progressTimer_.stop();
    canvas_->setActiveTiles({});
    status_->clearProgressText();
    status_->setStatusText(tr("Run failed: %1").arg(error), true);
    keepFailedRun(error);
    emit runningChanged(false);
    emit runEnded(false);
}

void RunController::onSequenceFinished(quint64 firstRunId, int runsFinished, bool completed) {
    if (!comparison_ || comparison_->firstRunId != firstRunId || !comparison_->active) return;
    comparison_->active = false;
    comparison_->completed = completed;
    running_ = false;
    stopping_ = false;
    progressTimer_.stop();
    canvas_->setActiveTiles({});
    canvas_->setPlaceholderText({});
    if (completed) {
        if (comparison_->chooseCompared()) emit graphComparisonCompared(*comparison_);
    } else if (!comparison_->error.isEmpty()) {
        status_->setStatusText(tr("Compare graphs failed at run %1 of %2: %3")
                                   .arg(runsFinished + 1)
                                   .arg(comparison_->runs.size())
                                   .arg(comparison_->error),
                               true);
    } else {
        status_->setStatusText(tr("Compare graphs stopped after %1 of %2 runs; nothing was compared")
                                   .arg(runsFinished)
                                   .arg(comparison_->runs.size()));
    }
    emit runningChanged(false);
    emit graphComparisonEnded(completed);
}

}  // namespace tessera
