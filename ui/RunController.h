// RunController: the window's runs, from Run pressed to the record in the history. It owns the
// RunWorker and its QThread, starts a run (or a "Compare graphs" sequence) of a configuration,
// reacts to the worker's queued signals (dropping those of any run but the current one: ids
// only grow), and keeps the canvas, the timing charts and the status line up to date: progress
// is refreshed from a short coalescing timer, never per signal.
//
// Every run that ends goes into the run history: finished, cancelled (with its partial image)
// and failed (the record of its start, or its configuration, and the error). Compare graphs keeps
// only the finished runs of the pairs it compares.
//
// Threads: everything here runs on the GUI thread; the worker's thread runs the engine. Stop
// calls RunWorker::cancel directly (thread-safe) because the worker's event loop is busy.
#pragma once

#include <optional>

#include <QElapsedTimer>
#include <QImage>
#include <QObject>
#include <QThread>
#include <QTimer>

#include "app/cli/EngineFactory.h"
#include "app/qt/RunWorker.h"
#include "core/run/RunConfig.h"
#include "ui/GraphComparison.h"
#include "ui/StatusLine.h"

namespace tessera {

class HistoryStore;
class TileCanvas;
class TimingCharts;

class RunController : public QObject {
    Q_OBJECT
public:
    // Shows runs on `canvas`, `charts` and `status` and keeps them in `history`; none is owned,
    // all must outlive the runs (the window owns them and this). Starts the worker's thread and
    // asks it for the devices (devicesProbed).
    RunController(TileCanvas* canvas, TimingCharts* charts, StatusLine* status, HistoryStore* history,
                  QObject* parent = nullptr);
    // Stops a run in flight at its next tile batch and waits for the worker's thread to end.
    ~RunController() override;

    // A models folder where the worker also looks for the LoRAs a prompt's tags name (the
    // window's models folder); applies from the next run.
    void setModelsFolder(const QString& folder);

    // Pairs of runs a comparison makes (off + on each); the first pair is the warm-up.
    static constexpr int kGraphComparisonPairs = 2;

    // Runs `config` (already made runnable: model path absolute). No-op while running.
    void start(const RunConfig& config);
    // Runs config.upscaleModel alone over config.initImage (RunWorker::startUpscale), shown and
    // kept as a run is. No-op while running.
    void startUpscaleOnly(const RunConfig& config);
    // Runs `base` with graphs off and on, interleaved (GraphComparison::plan). No-op while running.
    void startGraphComparison(const RunConfig& base);
    // Stops the run in flight, or the whole comparison sequence, after its tile batch in progress.
    void stop();

    bool isRunning() const { return running_; }
    bool isStopping() const { return stopping_; }
    // The comparison in flight or the last one (nullopt before the first).
    const std::optional<GraphComparison>& graphComparison() const { return comparison_; }
    bool isComparingGraphs() const { return comparison_ && comparison_->active; }
    // What the worker found (nullopt until it answered).
    const std::optional<DeviceReport>& devices() const { return devices_; }

    // The loop step a started run begins at, from its record: FLUX.1 image-to-image by
    // FluxImg2ImgPipeline's count (firstFlowStepRun), every other run by firstLoopStep.
    static int firstRecordedStep(const RunRecord& record);

signals:
    // A run or comparison started, was asked to stop, or ended (isRunning, isStopping).
    void runningChanged(bool running);
    // The canvas was cleared for a run about to start (its start image too).
    void displayCleared();
    // A run failed before it showed anything: the canvas shows again the image it had before
    // (the run shown last stays the one to export and compare).
    void displayRestored();
    // The engine started the current run (its record: the seed and everything else it runs with).
    void runStarted(const tessera::RunRecord& record);
    // A run that ended (of a comparison too) is on the canvas: its image, its start image.
    void runShown(const tessera::FinishedRun& run);
    // The current run ended (finished, cancelled or failed). Not for the runs of a comparison.
    void runEnded(bool succeeded);
    void previewShown(int step, const QImage& image);
    void loadProgressShown(double fraction, const QString& phase);
    // Run `index` (0-based) of `count` of a comparison is starting.
    void graphComparisonRunStarted(int index, int count);
    // A completed comparison chose the runs it compares (shownA, shownB, choice).
    void graphComparisonCompared(const tessera::GraphComparison& comparison);
    // A comparison ended; `completed` when every run finished.
    void graphComparisonEnded(bool completed);
    void devicesProbed(const tessera::DeviceReport& report);

private:
    void startWorker();
    // Resets the canvas, charts and progress for a run of `config` about to start.
    void beginRunDisplay(const RunConfig& config);
    void showFinishedRun(const FinishedRun& run, bool keepInHistory);
    // Keeps a run that failed in the history: the record of its start (or its configuration).
    void keepFailedRun(const QString& error);
    void markProgressDirty() { progressDirty_ = true; }
    void refreshProgress();
    QString progressText() const;

    // Worker signals (queued).
    void onLoadProgress(quint64 runId, const LoadProgress& progress);
    void onRunStarted(quint64 runId, const RunRecord& record);
    void onTileBatch(quint64 runId, const TileBatchEvent& event);
    void onTileBatchesTimed(quint64 runId, const std::vector<TileBatchTiming>& batches);
    void onStep(quint64 runId, const StepEvent& event);
    void onPreview(quint64 runId, int step, const QImage& image);
    void onMemory(quint64 runId, const MemorySample& sample);
    void onMessage(quint64 runId, const QString& text);
    void onUpscaleModelProgress(quint64 runId, int tilesDone, int tiles);
    void onRunFinished(quint64 runId, const FinishedRun& run);
    void onRunFailed(quint64 runId, const QString& error);
    void onSequenceFinished(quint64 firstRunId, int runsFinished, bool completed);

    TileCanvas* canvas_;
    TimingCharts* charts_;
    StatusLine* status_;
    HistoryStore* history_;

    QThread workerThread_;
    RunWorker* worker_ = nullptr;  // lives on workerThread_, deleted there
    std::optional<DeviceReport> devices_;

    // The run in flight. Ids only grow, so a late signal of an older run never matches.
    quint64 nextRunId_ = 1;
    quint64 currentRunId_ = 0;
    bool running_ = false;
    bool stopping_ = false;
    bool upscaleOnly_ = false;                     // the run in flight is an upscale model alone
    int upscaleTilesDone_ = 0, upscaleTiles_ = 0;  // its (or the run's) upscale model pass
    RunConfig runConfig_;
    QImage imageBefore_;                      // the canvas's image when the run in flight started
    std::optional<RunRecord> startedRecord_;  // onRunStarted's record of the run in flight
    std::optional<GraphComparison> comparison_;

    // Progress, refreshed on screen at most every kProgressIntervalMs.
    static constexpr int kProgressIntervalMs = 50;
    RunProgress progress_;
    QElapsedTimer runClock_;       // since Run was pressed
    QElapsedTimer samplingClock_;  // since the engine reported the run started
    QTimer progressTimer_;
    bool progressDirty_ = false;
};

}  // namespace tessera
