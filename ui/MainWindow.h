// MainWindow: the workbench. Settings dock on the left (ConfigPanel), the tile canvas in the
// middle, the charts dock on the right (timing charts; graphs versus eager), the history dock
// under the canvas, Run/Stop in the tool bar, the status line at the bottom. The window builds
// these parts and wires them; its runs are a RunController's (ui/RunController.h), which owns
// the worker thread and shows each run on the canvas, the charts and the status line.
//
// "Compare graphs" runs the settings with graphs off and on, interleaved (ui/GraphComparison.h),
// then opens the compare view and the graphs-versus-eager panel on the kept runs.
//
// Every run that ends goes into the run history (app/qt/HistoryStore.h; a dock with a table).
// Any history entry reopens (openFromHistory): its full-resolution image on the canvas, its
// charts and settings, and the Export actions act on it as on a run just finished. Two runs
// open in a CompareView. Delete moves runs to the history's trash; Edit > Undo delete brings
// them back until the window closes. Exports (File menu) write through app/qt/Exporters.h and
// never replace an existing file without asking.
//
// The canvas keeps the image shown while the settings change: the tile plan of the settings
// is drawn over it. After a run from a start image, View > Before/after shows the start image
// (as the engine took it, resampled to the canvas) and the result with a split between them,
// at 1:1. A PNG or JPEG dropped on the canvas or the window asks whether it is the start image
// or its generation settings are wanted (a run PNG's, an A1111 or ComfyUI image's); dropping a
// manifest or a preset restores its configuration. Edit ▸ Paste parameters applies A1111's text.
//
// This thread reads and writes no file and encodes no image (app/qt/GuiThreadGuard.h): the
// history's IO runs on its own thread (HistoryStore), model inspection on a pool
// (ConfigPanel's ModelInspector), and exports, presets and restores on a JobQueue. Each answer
// comes back as a queued call or signal (configurationRestored, exportFinished,
// compareViewOpened); answers to a request superseded by a newer one are dropped by job id.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <QList>
#include <QMainWindow>
#include <QPair>
#include <QPointer>

#include "app/cli/EngineFactory.h"
#include "app/qt/Exporters.h"
#include "app/qt/HistoryStore.h"
#include "app/qt/RunWorker.h"
#include "app/qt/SettingsFile.h"
#include "core/run/RunConfig.h"
#include "ui/CompareView.h"
#include "ui/FileMenu.h"
#include "ui/GraphComparison.h"
#include "ui/TileCanvas.h"

class QAction;
class QDockWidget;
class QMessageBox;
class QTabWidget;

namespace tessera {

class ConfigPanel;
class ControlHintView;
class GraphsPanel;
class HistoryPanel;
class RunController;
class StatusLine;
class TimingCharts;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    // The configuration Run starts: the settings shown with the model folder or checkpoint
    // made absolute (random:sd15 / random:sd21 kept as they are), the default model filled in,
    // and without a start image none of its settings (withoutUnusedStartImageSettings).
    RunConfig runnableConfig() const;
    // `settings`: where the window keeps its geometry and last configuration, read before this
    // is called; null reads SettingsFile::defaultPath() (the user's tessera.conf). A file that
    // could not be used is named in the status line (the window starts with the defaults and
    // does not save them). Tests pass a throw-away file.
    // `historyFolder`: where finished runs are kept; empty: RunHistory's default
    // (QStandardPaths::AppDataLocation/history). It is loaded off this thread: history()
    // holds it once its loaded() signal came.
    explicit MainWindow(std::unique_ptr<SettingsFile> settings = nullptr, const QString& historyFolder = {},
                        QWidget* parent = nullptr);

    ~MainWindow() override;

    // A run's note in the status bar for 8 s, in place of the status text: drawn cut with "…" where
    // it is longer than the room left of the progress fields, the whole note its tooltip.
    void showNote(const QString& text);

    // What to do when an export's target file exists already.
    using Overwrite = FileMenu::Overwrite;

    ConfigPanel* configPanel() const { return panel_; }
    TileCanvas* canvas() const { return canvas_; }
    TimingCharts* charts() const { return charts_; }
    GraphsPanel* graphsPanel() const { return graphsPanel_; }
    // The tabs beside the canvas: the timing charts, the graphs-versus-eager panel and the ControlNet hint.
    QTabWidget* chartTabs() const { return chartTabs_; }
    // The chart tabs' "ControlNet hint": the hints of the run shown (its ControlNets' control images
    // after their preprocessors).
    ControlHintView* controlHintView() const { return controlHints_; }
    HistoryPanel* historyPanel() const { return historyPanel_; }
    const HistoryStore& history() const { return *history_; }
    // The compare window opened last (null when none is open).
    CompareView* compareView() const { return compareView_; }
    QAction* overlayAction(CanvasOverlay which) const;
    QAction* runAction() const { return runAction_; }
    QAction* stopAction() const { return stopAction_; }
    // Run ▸ Compare graphs (and its tool-bar button). Disabled, with the reason in its tooltip,
    // where CUDA graphs cannot run (no CUDA device, or the CPU backend chosen).
    QAction* compareGraphsAction() const { return compareGraphsAction_; }
    // Run ▸ Upscale only (and the Start image group's button): the upscale model alone over the
    // start image, no diffusion model needed. Disabled, with the reason in its tooltip, without a
    // start image and a usable upscale model, and while running.
    QAction* upscaleOnlyAction() const { return upscaleOnlyAction_; }
    // The comparison in flight or the last one (nullopt before the first).
    const std::optional<GraphComparison>& graphComparison() const;
    bool isComparingGraphs() const;
    bool isRunning() const;
    // The last finished run (null before the first).
    const FinishedRun* lastRun() const { return lastRun_ ? &*lastRun_ : nullptr; }

    // Writes the last finished run in `format` to `path` (ImagePng: the image with the
    // "parameters" line and the run manifest), off this thread; exportFinished tells
    // how it went (also when there is nothing to export: at once). An existing file is
    // replaced only after the user agrees (Ask), always (Replace) or never (Refuse: the
    // error says so).
    void exportTo(ExportFormat format, const QString& path, Overwrite overwrite = Overwrite::Ask);
    // Puts the configuration stored in a run PNG, a manifest JSON or a preset JSON in the
    // settings panel (what dropping the file on the window does). The file is read off this
    // thread; configurationRestored tells how it went. A newer request drops the answer of an
    // older one still in flight.
    void restoreConfigurationFrom(const QString& path);
    // Opens the compare window for two runs of the history once their images are read (off
    // this thread): compareViewOpened. False (with *error) when either run is unknown.
    bool compareRuns(const QString& idA, const QString& idB, QString* error = nullptr);
    // Shows run `id` of the history again: its settings in the panel and its charts at once,
    // its image (read off this thread) when historyRunOpened comes. False (with *error) when
    // the run is unknown or a run is in progress.
    bool openFromHistory(const QString& id, QString* error = nullptr);
    // Applies the generation settings of image `path` onto the settings shown (File ▸ Load
    // parameters from PNG/JPEG…, read off this thread); parametersApplied tells how it went.
    void loadParametersFrom(const QString& path) { fileMenu_->loadParametersFrom(path); }
    // Edit ▸ Paste parameters (Ctrl+Shift+V): the clipboard's A1111 text applied onto the settings.
    QAction* pasteParametersAction() const { return pasteParametersAction_; }
    // A PNG or JPEG dropped on the window or the canvas asks what it is for: this question
    // (buttons "dropAsStartImage" and "dropAsParameters"), null when none is open.
    QMessageBox* dropQuestion() const;
    // Edit > Undo delete (Ctrl+Z): the runs deleted last come back from the trash.
    QAction* undoDeleteAction() const { return undoDeleteAction_; }
    // View ▸ Go to history (Ctrl+H): the keyboard focus in the history table (the dock shown).
    QAction* focusHistoryAction() const { return focusHistoryAction_; }
    // Help ▸ Keyboard shortcuts (F1): a list of every key (keys, what it does), from the menus'
    // actions and the keys of single places; shown in a dialog named "shortcutsDialog".
    QAction* shortcutsAction() const { return shortcutsAction_; }
    QList<QPair<QString, QString>> keyboardShortcuts() const;
    // View > Before/after (Ctrl+D): enabled when the run shown started from an image.
    QAction* beforeAfterAction() const { return beforeAfterAction_; }
    QAction* exportAction(ExportFormat format) const;

public slots:
    void startRun();
    // Starts "Compare graphs" with the settings shown: graphs off, then the mode chosen in the
    // Graphs group (tile when that is off), interleaved for RunController::kGraphComparisonPairs
    // pairs. The action is disabled where graphs cannot run; this slot runs the sequence
    // regardless (the CPU engine then runs both eagerly and records the mode asked for in
    // config.graphs and "off" in graphs.mode), which the tests use.
    void startGraphComparison();
    // Runs the upscale model alone over the start image (upscaleOnlyAction).
    void startUpscaleOnly();
    // Stops the run in flight, or the whole comparison sequence.
    void stopRun();

signals:
    // The current run ended (finished, cancelled or failed); for tests and the screenshot mode.
    // Not emitted for the runs of a comparison: graphComparisonEnded is. The run, whatever
    // its end, is then on its way into the history (history().entryAdded follows).
    void runEnded(bool succeeded);
    // restoreConfigurationFrom(path) ended: the settings panel shows the file's configuration
    // (ok), or `error` names the file and what is wrong with it (nothing changed).
    void configurationRestored(const QString& path, bool ok, const QString& error);
    // exportTo(path) ended: written (ok), or `error` names the path and why not.
    void exportFinished(const QString& path, bool ok, const QString& error);
    // loadParametersFrom(path) or Paste parameters (path empty) ended: the settings are in the
    // panel (ok) but those in `notApplied` ("'Hires upscale: 2' is not supported; ignored"), or
    // `error` says why nothing changed.
    void parametersApplied(const QString& path, bool ok, const QString& error, const QStringList& notApplied);
    // compareRuns' window is open (compareView() returns it).
    void compareViewOpened(tessera::CompareView* view);
    // openFromHistory(id) ended: the run is shown (ok), or `error` says why not.
    void historyRunOpened(const QString& id, bool ok, const QString& error);
    // The canvas shows the preview of step `step` (0-based) of the run in flight (an SD run's
    // latent approximation, a pixel model's x0 estimate).
    void previewShown(int step, const QImage& image);
    // The step bar shows the model load of the run in flight at `fraction` (0..1) in `phase`
    // ("reading the UNet"); at 1 the load is done and the bar is busy until the run is prepared.
    void loadProgressShown(double fraction, const QString& phase);
    // Run `index` (0-based) of `count` of a comparison is starting.
    void graphComparisonRunStarted(int index, int count);
    // A comparison ended; `completed` when every run finished and the views were opened.
    void graphComparisonEnded(bool completed);

protected:
    void closeEvent(QCloseEvent* event) override;
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;

private:
    void buildActions();
    void buildMenus();
    void buildToolBar();
    void buildDocks();
    void wireRuns();
    void restoreSettings();
    void saveSettings();
    void updateActions();
    void refreshPlan();
    void showReadyProgress();
    void setStatusText(const QString& text, bool error = false);
    // A run that ended is shown: the one the Export actions act on.
    void showRun(const FinishedRun& run);
    // The canvas's start image and the Before/after action for the run shown.
    void showStartImage(const QImage& startImage);
    // The graphs-versus-eager panel and the compare view of a completed comparison.
    void showGraphComparison(const GraphComparison& comparison);
    CompareView* openCompareView(const CompareSide& a, const CompareSide& b, const QString& note);

    void refreshHistory();
    void onHistoryLoaded();
    void onCompareImages(quint64 jobId, const QStringList& ids, const QList<QImage>& images);
    void onHistoryRunOpened(quint64 jobId, const QString& id, const FinishedRun& run);
    void onHistoryFailed(quint64 jobId, const QString& error);
    void removeFromHistory(const QStringList& ids);
    void undoRemove();
    void updateUndo();
    void copyParameters(const QString& id);
    void showInFolder(const QString& id);
    void showAbout();
    void showShortcuts();
    void focusHistory();
    void askAboutDroppedImage(const QString& path);
    void pasteParameters();
    // The next image of a batch count (startRun), when the last one finished.
    void continueBatch();

    std::unique_ptr<SettingsFile> settings_;
    ConfigPanel* panel_ = nullptr;
    TileCanvas* canvas_ = nullptr;
    TimingCharts* charts_ = nullptr;
    GraphsPanel* graphsPanel_ = nullptr;
    QTabWidget* chartTabs_ = nullptr;
    ControlHintView* controlHints_ = nullptr;
    QDockWidget* configDock_ = nullptr;
    QDockWidget* chartsDock_ = nullptr;
    QDockWidget* historyDock_ = nullptr;
    HistoryPanel* historyPanel_ = nullptr;
    HistoryStore* history_ = nullptr;  // a child: lives and is deleted with the window
    StatusLine* statusLine_ = nullptr;
    RunController* runs_ = nullptr;  // a child, deleted first by ~MainWindow
    FileMenu* fileMenu_ = nullptr;   // a child: presets and exports
    QPointer<CompareView> compareView_;
    quint64 compareJob_ = 0;  // the images of the newest compareRuns

    QAction* quitAction_ = nullptr;
    QAction* runAction_ = nullptr;
    QAction* stopAction_ = nullptr;
    QAction* compareGraphsAction_ = nullptr;
    QAction* upscaleOnlyAction_ = nullptr;
    QAction* fitAction_ = nullptr;
    QAction* actualSizeAction_ = nullptr;
    QAction* overlayAction_ = nullptr;
    QAction* blendOverlayAction_ = nullptr;
    QAction* seamOverlayAction_ = nullptr;
    QAction* aboutAction_ = nullptr;
    QAction* shortcutsAction_ = nullptr;
    QAction* focusHistoryAction_ = nullptr;
    QAction* undoDeleteAction_ = nullptr;
    QAction* pasteParametersAction_ = nullptr;
    QAction* beforeAfterAction_ = nullptr;

    std::optional<FinishedRun> lastRun_;  // the run shown: the last that ended, or one reopened
    quint64 openJob_ = 0;                 // the newest openFromHistory
    QString openRunId_;
    RunConfig batchNext_;  // the batch's last run started
    int batchCount_ = 1;   // images of the batch
    int batchLeft_ = 0;    // images still to start

    // Width the charts dock grows to when the graphs panel is brought to front.
    static constexpr int kGraphsDockWidth = 640;
};

}  // namespace tessera
