// MainWindow: the workbench. Settings dock on the left, the tile canvas in the middle, the
// timing charts dock on the right, Run/Stop in the tool bar, two-level progress in the status
// bar. The engine runs in a RunWorker on its own QThread; this window only reacts to the
// worker's queued signals (dropping those of any run but the current one) and refreshes the
// progress display from a short coalescing timer.
#pragma once

#include <memory>
#include <optional>

#include <QElapsedTimer>
#include <QMainWindow>
#include <QSettings>
#include <QThread>
#include <QTimer>

#include "app/EngineFactory.h"
#include "app/RunWorker.h"
#include "core/RunConfig.h"

class QAction;
class QDockWidget;
class QLabel;
class QProgressBar;

namespace tessera {

class ConfigPanel;
class TileCanvas;
class TimingCharts;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    // `settings`: where the window keeps its geometry and last configuration; null uses the
    // application's default QSettings. Tests pass a throw-away INI file.
    explicit MainWindow(std::unique_ptr<QSettings> settings = nullptr, QWidget* parent = nullptr);
    ~MainWindow() override;

    ConfigPanel* configPanel() const { return panel_; }
    TileCanvas* canvas() const { return canvas_; }
    TimingCharts* charts() const { return charts_; }
    QAction* runAction() const { return runAction_; }
    QAction* stopAction() const { return stopAction_; }
    bool isRunning() const { return running_; }
    // The last finished run (null before the first).
    const FinishedRun* lastRun() const { return lastRun_ ? &*lastRun_ : nullptr; }

    // Writes the last finished image as PNG with the "parameters" line and the run manifest.
    // False with *error set (naming the path) when there is no image or it cannot be written.
    bool exportImageTo(const QString& path, QString* error = nullptr);

public slots:
    void startRun();
    void stopRun();

signals:
    // The current run ended (finished, cancelled or failed); for tests and the screenshot mode.
    void runEnded(bool succeeded);

protected:
    void closeEvent(QCloseEvent* event) override;

private:
    void buildActions();
    void buildMenus();
    void buildToolBar();
    void buildDocks();
    void buildStatusBar();
    void startWorker();
    void restoreSettings();
    void saveSettings();
    void updateActions();
    void refreshPlan();
    void refreshProgress();
    void markProgressDirty();
    void setStatusText(const QString& text, bool error = false);

    void openPreset();
    void savePreset();
    void exportImage();
    void showAbout();

    // Worker signals (queued).
    void onRunStarted(quint64 runId, const RunRecord& record);
    void onTileBatch(quint64 runId, const TileBatchEvent& event);
    void onStep(quint64 runId, const StepEvent& event);
    void onPreview(quint64 runId, int step, const QImage& image);
    void onMemory(quint64 runId, const MemorySample& sample);
    void onMessage(quint64 runId, const QString& text);
    void onRunFinished(quint64 runId, const FinishedRun& run);
    void onRunFailed(quint64 runId, const QString& error);
    void onDevicesProbed(const DeviceReport& report);

    std::unique_ptr<QSettings> settings_;
    ConfigPanel* panel_ = nullptr;
    TileCanvas* canvas_ = nullptr;
    TimingCharts* charts_ = nullptr;
    QDockWidget* configDock_ = nullptr;
    QDockWidget* chartsDock_ = nullptr;

    QAction* openPresetAction_ = nullptr;
    QAction* savePresetAction_ = nullptr;
    QAction* exportAction_ = nullptr;
    QAction* quitAction_ = nullptr;
    QAction* runAction_ = nullptr;
    QAction* stopAction_ = nullptr;
    QAction* fitAction_ = nullptr;
    QAction* actualSizeAction_ = nullptr;
    QAction* overlayAction_ = nullptr;
    QAction* aboutAction_ = nullptr;

    QLabel* statusText_ = nullptr;
    QLabel* progressText_ = nullptr;
    QProgressBar* stepBar_ = nullptr;
    QProgressBar* tileBar_ = nullptr;

    QThread workerThread_;
    RunWorker* worker_ = nullptr;  // lives on workerThread_, deleted there
    std::optional<DeviceReport> devices_;

    // The run in flight. Ids only grow, so a late signal of an older run never matches.
    quint64 nextRunId_ = 1;
    quint64 currentRunId_ = 0;
    bool running_ = false;
    bool stopping_ = false;
    RunConfig runConfig_;
    std::optional<FinishedRun> lastRun_;

    // Progress, refreshed on screen at most every kProgressIntervalMs.
    static constexpr int kProgressIntervalMs = 50;
    struct Progress {
        int step = 0, steps = 0;          // steps completed / total
        int tilesDone = 0, tiles = 0;     // tiles completed in the current step / per step
        bool started = false;             // onStarted seen (prepare done)
    } progress_;
    QElapsedTimer runClock_;              // since Run was pressed
    QElapsedTimer samplingClock_;         // since the engine reported onStarted
    QTimer progressTimer_;
    bool progressDirty_ = false;
};

}  // namespace tessera
