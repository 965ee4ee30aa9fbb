#include "ui/MainWindow.h"

#include <algorithm>
#include <exception>

#include <QAction>
#include <QApplication>
#include <QClipboard>
#include <QCloseEvent>
#include <QDesktopServices>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QMimeData>
#include <QDir>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QGuiApplication>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QPaintEvent>
#include <QPainter>
#include <QProgressBar>
#include <QScreen>
#include <QScrollArea>
#include <QSettings>
#include <QStatusBar>
#include <QStyle>
#include <QTabWidget>
#include <QTimer>
#include <QToolBar>
#include <QUrl>

#include <nlohmann/json.hpp>

#include "app/cli/PngIO.h"
#include "core/base/BoundedInput.h"
#include "core/sampling/ImageOps.h"
#include "core/run/Infotext.h"
#include "core/run/OutputSet.h"
#include "core/run/RunRecordIO.h"
#include "core/models/sd/SdModel.h"
#include "core/sampling/TilePlan.h"
#include "ui/CompareView.h"
#include "ui/ConfigPanel.h"
#include "ui/GraphsPanel.h"
#include "ui/HistoryPanel.h"
#include "ui/TileCanvas.h"
#include "ui/TimingCharts.h"

#ifndef TESSERA_VERSION
#define TESSERA_VERSION "unknown"
#endif

namespace tessera {

namespace {

// A one-line label drawn cut with "…" to its current width, never wider than the room it is given:
// a run's note in the status bar keeps the fields beside it and shows that it goes on (the whole
// note is its tooltip).
class ElidedLabel : public QLabel {
public:
    using QLabel::QLabel;
    QSize minimumSizeHint() const override { return {0, QLabel::minimumSizeHint().height()}; }
    QSize sizeHint() const override { return {0, QLabel::sizeHint().height()}; }

protected:
    void paintEvent(QPaintEvent*) override {
        QPainter painter(this);
        painter.setPen(palette().color(QPalette::WindowText));
        const QRect r = contentsRect();
        painter.drawText(r, Qt::AlignLeft | Qt::AlignVCenter, fontMetrics().elidedText(text(), Qt::ElideRight, r.width()));
    }
};

}  // namespace


namespace {

const QString kLastConfigKey = QStringLiteral("run/lastConfig");
const QString kPresetDirKey = QStringLiteral("paths/presets");
const QString kExportDirKey = QStringLiteral("paths/export");
const QString kGeometryKey = QStringLiteral("window/geometry");
const QString kStateKey = QStringLiteral("window/state");
const QString kOverlayKey = QStringLiteral("view/tileOverlay");
const QString kBlendOverlayKey = QStringLiteral("view/blendOverlay");
const QString kSeamOverlayKey = QStringLiteral("view/seamOverlay");
const QString kModelsFolderKey = QStringLiteral("models/folder");
const QString kRecentModelsKey = QStringLiteral("models/recent");
const QString kChartTabKey = QStringLiteral("window/chartTab");

// Files whose configuration the window can take: run PNGs, manifests, presets.
bool isConfigurationFile(const QString& path) {
    const QString suffix = QFileInfo(path).suffix().toLower();
    return suffix == QStringLiteral("png") || suffix == QStringLiteral("json");
}

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

// What a run ran on and made, for the status bar: "CPU FP32 · 512 × 512 px · seed 3".
QString ranOn(const RunRecord& record) {
    return QCoreApplication::translate("MainWindow", "%1 %2 · %3 × %4 px · seed %5")
        .arg(QString::fromStdString(record.environment.backend).toUpper(),
             QString::fromUtf8(toString(record.config.precision).data()).toUpper())
        .arg(record.config.width)
        .arg(record.config.height)
        .arg(record.config.seed);
}

QString presetsFolder() {
    // Installed (.deb) and bundled copies keep the presets beside the binaries.
    const QString installed = QCoreApplication::applicationDirPath() + QStringLiteral("/../share/tessera/presets");
    if (QFileInfo(installed).isDir()) return QDir::cleanPath(installed);
#ifdef TESSERA_RESOURCE_DIR
    const QString resources = QStringLiteral(TESSERA_RESOURCE_DIR "/presets");
    if (QFileInfo(resources).isDir()) return resources;
#endif
    return QDir::homePath();
}

}  // namespace

MainWindow::MainWindow(std::unique_ptr<QSettings> settings, const QString& historyFolder, QWidget* parent)
    : QMainWindow(parent),
      settings_(settings ? std::move(settings) : std::make_unique<QSettings>()),
      history_(new HistoryStore(historyFolder, RunHistory::kDefaultCapacity, RunHistory::kDefaultTrashDepth, this)) {
    setObjectName(QStringLiteral("mainWindow"));
    setWindowTitle(tr("Tessera"));
    setAcceptDrops(true);
    setDockOptions(QMainWindow::AnimatedDocks | QMainWindow::AllowTabbedDocks);

    canvas_ = new TileCanvas;
    setCentralWidget(canvas_);
    buildActions();
    buildDocks();
    buildMenus();
    buildToolBar();
    buildStatusBar();

    panel_->locateDefaultModel(QCoreApplication::applicationDirPath());
    const auto settingsChanged = [this] {
        refreshPlan();
        updateActions();
        if (!running_) showReadyProgress();
    };
    connect(panel_, &ConfigPanel::configChanged, this, settingsChanged);
    connect(panel_, &ConfigPanel::modelChecked, this, settingsChanged);
    connect(panel_, &ConfigPanel::validityChanged, this, &MainWindow::updateActions);

    connect(history_, &HistoryStore::loaded, this, &MainWindow::onHistoryLoaded);
    connect(history_, &HistoryStore::entryAdded, this, &MainWindow::refreshHistory);
    connect(history_, &HistoryStore::entryRemoved, this, &MainWindow::refreshHistory);
    connect(history_, &HistoryStore::entryRestored, this, [this](quint64, const QString& id) {
        refreshHistory();
        setStatusText(tr("Run %1 is back in the history").arg(id));
    });
    connect(history_, &HistoryStore::imagesAvailable, this, &MainWindow::onCompareImages);
    connect(history_, &HistoryStore::runOpened, this, &MainWindow::onHistoryRunOpened);
    connect(history_, &HistoryStore::failed, this, &MainWindow::onHistoryFailed);
    connect(canvas_, &TileCanvas::imageDropped, this, [this](const QString& path) {
        panel_->setStartImage(path);
        setStatusText(tr("Start image: %1 (dropped on the canvas; drop a run PNG elsewhere on the window to restore "
                         "its settings instead)")
                          .arg(QFileInfo(path).fileName()));
    });

    progressTimer_.setInterval(kProgressIntervalMs);
    connect(&progressTimer_, &QTimer::timeout, this, &MainWindow::refreshProgress);

    restoreSettings();
    startWorker();
    refreshPlan();
    updateActions();
    showReadyProgress();
    // 1500 x 920 where the screen has room; otherwise the screen's available area (a 1366 x 768
    // laptop's), so the window never opens larger than the screen.
    QSize size(1500, 920);
    if (const QScreen* screen = QGuiApplication::primaryScreen())
        size = size.boundedTo(screen->availableGeometry().size());
    resize(size);
    // The history is a strip under the canvas, a few rows high.
    resizeDocks({historyDock_}, {190}, Qt::Vertical);
    if (settings_->contains(kGeometryKey)) restoreGeometry(settings_->value(kGeometryKey).toByteArray());
    if (settings_->contains(kStateKey)) restoreState(settings_->value(kStateKey).toByteArray());
    const int chartTab = settings_->value(kChartTabKey, 0).toInt();
    if (chartTab >= 0 && chartTab < chartTabs_->count()) chartTabs_->setCurrentIndex(chartTab);
}

MainWindow::~MainWindow() {
    // Stop a run in flight at the next tile batch, then let the thread finish; the worker
    // (and its engine) is deleted on its own thread through QThread::finished.
    if (running_ && worker_) worker_->cancel(isComparingGraphs() ? comparison_->lastRunId() : currentRunId_);
    workerThread_.quit();
    workerThread_.wait();
}

void MainWindow::startWorker() {
    registerRunMetaTypes();
    worker_ = new RunWorker;
    worker_->moveToThread(&workerThread_);
    workerThread_.setObjectName(QStringLiteral("tessera-engine"));
    connect(&workerThread_, &QThread::finished, worker_, &QObject::deleteLater);
    connect(worker_, &RunWorker::modelLoadProgress, this, &MainWindow::onLoadProgress);
    connect(worker_, &RunWorker::runStarted, this, &MainWindow::onRunStarted);
    connect(worker_, &RunWorker::tileBatchFinished, this, &MainWindow::onTileBatch);
    connect(worker_, &RunWorker::tileBatchesTimed, this, &MainWindow::onTileBatchesTimed);
    connect(worker_, &RunWorker::sequenceFinished, this, &MainWindow::onSequenceFinished);
    connect(worker_, &RunWorker::stepFinished, this, &MainWindow::onStep);
    connect(worker_, &RunWorker::previewReady, this, &MainWindow::onPreview);
    connect(worker_, &RunWorker::memorySampled, this, &MainWindow::onMemory);
    connect(worker_, &RunWorker::message, this, &MainWindow::onMessage);
    connect(worker_, &RunWorker::runFinished, this, &MainWindow::onRunFinished);
    connect(worker_, &RunWorker::runFailed, this, &MainWindow::onRunFailed);
    connect(worker_, &RunWorker::devicesProbed, this, &MainWindow::onDevicesProbed);
    workerThread_.start();
    // Device discovery may call CUDA, so it happens on the worker thread too.
    QMetaObject::invokeMethod(worker_, &RunWorker::probeDevices, Qt::QueuedConnection);
}

void MainWindow::buildActions() {
    auto make = [this](const QString& text, const char* name, const QKeySequence& shortcut = {}) {
        auto* action = new QAction(text, this);
        action->setObjectName(QString::fromLatin1(name));
        if (!shortcut.isEmpty()) action->setShortcut(shortcut);
        return action;
    };
    openPresetAction_ = make(tr("&Open preset…"), "actionOpenPreset", QKeySequence::Open);
    savePresetAction_ = make(tr("&Save preset…"), "actionSavePreset", QKeySequence::Save);
    exportAction_ = make(tr("&Export image…"), "actionExportImage", QKeySequence(tr("Ctrl+E")));
    exportCsvAction_ = make(tr("Export &timings (CSV)…"), "actionExportTimings");
    exportManifestAction_ = make(tr("Export &manifest (JSON)…"), "actionExportManifest");
    exportTraceAction_ = make(tr("Export Chrome t&race (JSON)…"), "actionExportTrace");
    quitAction_ = make(tr("&Quit"), "actionQuit", QKeySequence::Quit);
    runAction_ = make(tr("Run"), "actionRun", QKeySequence(tr("Ctrl+R")));
    runAction_->setIcon(style()->standardIcon(QStyle::SP_MediaPlay));
    runAction_->setToolTip(tr("Generate the image with the current settings (Ctrl+R)"));
    stopAction_ = make(tr("Stop"), "actionStop", QKeySequence(Qt::Key_Escape));
    stopAction_->setIcon(style()->standardIcon(QStyle::SP_MediaStop));
    stopAction_->setToolTip(tr("Stop after the tile batch in progress (Esc)"));
    compareGraphsAction_ = make(tr("Compare &graphs"), "actionCompareGraphs", QKeySequence(tr("Ctrl+Shift+R")));
    compareGraphsAction_->setIcon(style()->standardIcon(QStyle::SP_BrowserReload));
    fitAction_ = make(tr("&Fit"), "actionFit", QKeySequence(tr("Ctrl+0")));
    actualSizeAction_ = make(tr("&Actual size (1:1)"), "actionActualSize", QKeySequence(tr("Ctrl+1")));
    overlayAction_ = make(tr("&Tile grid overlay"), "actionTileOverlay", QKeySequence(tr("Ctrl+G")));
    overlayAction_->setCheckable(true);
    overlayAction_->setChecked(true);
    overlayAction_->setToolTip(tr("Tile edges and the overlap bands where tiles are blended (Ctrl+G)"));
    blendOverlayAction_ = make(tr("&Blend weights"), "actionBlendOverlay", QKeySequence(tr("Ctrl+B")));
    blendOverlayAction_->setCheckable(true);
    blendOverlayAction_->setToolTip(tr("Normalised blend weight of the tile under the cursor; "
                                       "elsewhere the normaliser N (Ctrl+B)"));
    seamOverlayAction_ = make(tr("&Seam map"), "actionSeamOverlay", QKeySequence(tr("Ctrl+M")));
    seamOverlayAction_->setCheckable(true);
    seamOverlayAction_->setToolTip(tr("Where overlapping tiles disagreed at the last step (Ctrl+M)"));
    aboutAction_ = make(tr("&About Tessera"), "actionAbout");
    aboutAction_->setMenuRole(QAction::AboutRole);
    undoDeleteAction_ = make(tr("&Undo delete"), "actionUndoDelete", QKeySequence::Undo);
    undoDeleteAction_->setEnabled(false);
    beforeAfterAction_ = make(tr("&Before/after"), "actionBeforeAfter", QKeySequence(tr("Ctrl+D")));
    beforeAfterAction_->setCheckable(true);
    beforeAfterAction_->setEnabled(false);
    beforeAfterAction_->setToolTip(tr("The start image and the result side by side with a split you drag, at 1:1 "
                                      "(runs started from an image; Ctrl+D)"));

    connect(openPresetAction_, &QAction::triggered, this, &MainWindow::openPreset);
    connect(savePresetAction_, &QAction::triggered, this, &MainWindow::savePreset);
    connect(exportAction_, &QAction::triggered, this, [this] { exportInteractively(ExportFormat::ImagePng); });
    connect(exportCsvAction_, &QAction::triggered, this, [this] { exportInteractively(ExportFormat::TimingsCsv); });
    connect(exportManifestAction_, &QAction::triggered, this, [this] { exportInteractively(ExportFormat::ManifestJson); });
    connect(exportTraceAction_, &QAction::triggered, this, [this] { exportInteractively(ExportFormat::ChromeTrace); });
    connect(quitAction_, &QAction::triggered, this, &QWidget::close);
    connect(runAction_, &QAction::triggered, this, &MainWindow::startRun);
    connect(stopAction_, &QAction::triggered, this, &MainWindow::stopRun);
    connect(compareGraphsAction_, &QAction::triggered, this, &MainWindow::startGraphComparison);
    connect(fitAction_, &QAction::triggered, canvas_, &TileCanvas::fitToView);
    connect(actualSizeAction_, &QAction::triggered, canvas_, &TileCanvas::showActualSize);
    connect(overlayAction_, &QAction::toggled, canvas_, &TileCanvas::setOverlayVisible);
    connect(blendOverlayAction_, &QAction::toggled, canvas_, &TileCanvas::setBlendOverlayVisible);
    connect(seamOverlayAction_, &QAction::toggled, canvas_, &TileCanvas::setSeamOverlayVisible);
    connect(aboutAction_, &QAction::triggered, this, &MainWindow::showAbout);
    connect(undoDeleteAction_, &QAction::triggered, this, &MainWindow::undoRemove);
    connect(beforeAfterAction_, &QAction::toggled, canvas_, &TileCanvas::setBeforeAfterVisible);
}

void MainWindow::buildDocks() {
    panel_ = new ConfigPanel;
    auto* scroll = new QScrollArea;
    scroll->setWidget(panel_);
    scroll->setWidgetResizable(true);
    scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    scroll->setFrameShape(QFrame::NoFrame);
    scroll->setMinimumWidth(panel_->sizeHint().width() + 24);
    configDock_ = new QDockWidget(tr("Configuration"), this);
    configDock_->setObjectName(QStringLiteral("configDock"));
    configDock_->setWidget(scroll);
    configDock_->setFeatures(QDockWidget::DockWidgetMovable | QDockWidget::DockWidgetFloatable |
                             QDockWidget::DockWidgetClosable);
    addDockWidget(Qt::LeftDockWidgetArea, configDock_);

    charts_ = new TimingCharts;
    graphsPanel_ = new GraphsPanel;
    chartTabs_ = new QTabWidget;
    chartTabs_->setObjectName(QStringLiteral("chartTabs"));
    chartTabs_->setDocumentMode(true);
    chartTabs_->addTab(charts_, tr("Timing"));
    chartTabs_->addTab(graphsPanel_, tr("Graphs vs eager"));
    chartsDock_ = new QDockWidget(tr("Charts"), this);
    chartsDock_->setObjectName(QStringLiteral("chartsDock"));
    chartsDock_->setWidget(chartTabs_);
    charts_->setMinimumWidth(380);
    addDockWidget(Qt::RightDockWidgetArea, chartsDock_);

    historyPanel_ = new HistoryPanel;
    historyDock_ = new QDockWidget(tr("History"), this);
    historyDock_->setObjectName(QStringLiteral("historyDock"));
    historyDock_->setWidget(historyPanel_);
    addDockWidget(Qt::BottomDockWidgetArea, historyDock_);
    connect(historyPanel_, &HistoryPanel::compareRequested, this, [this](const QString& a, const QString& b) {
        QString error;
        if (!compareRuns(a, b, &error)) QMessageBox::warning(this, tr("Compare runs"), error);
    });
    connect(historyPanel_, &HistoryPanel::openRequested, this, [this](const QString& id) {
        QString error;
        if (!openFromHistory(id, &error)) setStatusText(error, true);
    });
    connect(historyPanel_, &HistoryPanel::removeRequested, this, &MainWindow::removeFromHistory);
    connect(historyPanel_, &HistoryPanel::undoRemoveRequested, this, &MainWindow::undoRemove);
    connect(historyPanel_, &HistoryPanel::copyParametersRequested, this, &MainWindow::copyParameters);
    connect(historyPanel_, &HistoryPanel::showInFolderRequested, this, &MainWindow::showInFolder);
}

void MainWindow::buildMenus() {
    QMenu* file = menuBar()->addMenu(tr("&File"));
    file->addAction(openPresetAction_);
    file->addAction(savePresetAction_);
    file->addSeparator();
    file->addAction(exportAction_);
    file->addAction(exportCsvAction_);
    file->addAction(exportManifestAction_);
    file->addAction(exportTraceAction_);
    file->addSeparator();
    file->addAction(quitAction_);

    QMenu* edit = menuBar()->addMenu(tr("&Edit"));
    edit->addAction(undoDeleteAction_);

    QMenu* run = menuBar()->addMenu(tr("&Run"));
    run->addAction(runAction_);
    run->addAction(stopAction_);
    run->addSeparator();
    run->addAction(compareGraphsAction_);

    QMenu* view = menuBar()->addMenu(tr("&View"));
    QAction* configToggle = configDock_->toggleViewAction();
    configToggle->setObjectName(QStringLiteral("actionToggleConfig"));
    QAction* chartsToggle = chartsDock_->toggleViewAction();
    chartsToggle->setObjectName(QStringLiteral("actionToggleCharts"));
    view->addAction(configToggle);
    view->addAction(chartsToggle);
    QAction* historyToggle = historyDock_->toggleViewAction();
    historyToggle->setObjectName(QStringLiteral("actionToggleHistory"));
    view->addAction(historyToggle);
    view->addSeparator();
    view->addAction(overlayAction_);
    view->addAction(blendOverlayAction_);
    view->addAction(seamOverlayAction_);
    view->addAction(beforeAfterAction_);
    view->addAction(fitAction_);
    view->addAction(actualSizeAction_);

    QMenu* help = menuBar()->addMenu(tr("&Help"));
    help->addAction(aboutAction_);
}

void MainWindow::buildToolBar() {
    QToolBar* bar = addToolBar(tr("Run"));
    bar->setObjectName(QStringLiteral("runToolBar"));
    bar->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
    bar->setMovable(false);
    bar->addAction(runAction_);
    bar->addAction(stopAction_);
    bar->addAction(compareGraphsAction_);
    bar->addSeparator();
    bar->addAction(fitAction_);
    bar->addAction(actualSizeAction_);
    bar->addAction(overlayAction_);
    bar->addAction(blendOverlayAction_);
    bar->addAction(seamOverlayAction_);
    bar->addAction(beforeAfterAction_);
}

void MainWindow::buildStatusBar() {
    statusText_ = new QLabel(tr("Ready"));
    statusText_->setObjectName(QStringLiteral("statusText"));
    statusText_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    statusText_->setMinimumWidth(200);
    progressText_ = new QLabel;
    progressText_->setObjectName(QStringLiteral("progressText"));
    stepBar_ = new QProgressBar;
    stepBar_->setObjectName(QStringLiteral("stepProgress"));
    stepBar_->setFormat(tr("step %v/%m"));
    stepBar_->setFixedWidth(170);
    tileBar_ = new QProgressBar;
    tileBar_->setObjectName(QStringLiteral("tileProgress"));
    tileBar_->setFormat(tr("tile %v/%m"));
    tileBar_->setFixedWidth(150);
    for (QProgressBar* bar : {stepBar_, tileBar_}) {
        bar->setRange(0, 1);
        bar->setValue(0);
        bar->setTextVisible(true);
    }
    // A run's notes show for 8 s in place of the status text (showNote).
    noteText_ = new ElidedLabel;
    noteText_->setObjectName(QStringLiteral("statusNote"));
    noteText_->setContentsMargins(3, 0, 0, 0);  // where QStatusBar drew its messages
    noteText_->hide();
    noteTimer_ = new QTimer(this);
    noteTimer_->setSingleShot(true);
    connect(noteTimer_, &QTimer::timeout, this, [this] {
        noteText_->hide();
        statusText_->show();
    });
    statusBar()->addWidget(statusText_, 1);
    statusBar()->addWidget(noteText_, 1);
    statusBar()->addPermanentWidget(progressText_);
    statusBar()->addPermanentWidget(stepBar_);
    statusBar()->addPermanentWidget(tileBar_);
}

void MainWindow::restoreSettings() {
    RunConfig config;
    // The settings file is input like any other: bounded in size and depth before parsing.
    const std::string json = settings_->value(kLastConfigKey).toString().toStdString();
    if (!json.empty()) {
        try {
            if (json.size() > input_limits::kJsonBytes)
                throw InputFileError("settings", "settings: the saved configuration is " + std::to_string(json.size()) +
                                                     " bytes; at most " + std::to_string(input_limits::kJsonBytes) + " are allowed");
            const std::string where = "'" + excerpt(settings_->fileName().toStdString(), 200) + "' key " + kLastConfigKey.toStdString();
            config = runConfigFromJson(parseBoundedJson(json, "settings", where));
        } catch (const std::exception& e) {
            const QString why = QString::fromStdString(toValidUtf8(e.what()));
            qWarning().noquote() << "tessera: the saved settings are ignored, defaults used:" << why;
            setStatusText(tr("The saved settings could not be read (%1); using the defaults").arg(why), true);
        }
    }
    panel_->setConfig(config);
    panel_->setModelsFolder(settings_->value(kModelsFolderKey).toString());
    panel_->setRecentModels(settings_->value(kRecentModelsKey).toStringList());
    overlayAction_->setChecked(settings_->value(kOverlayKey, true).toBool());
    blendOverlayAction_->setChecked(settings_->value(kBlendOverlayKey, false).toBool());
    seamOverlayAction_->setChecked(settings_->value(kSeamOverlayKey, false).toBool());
}

void MainWindow::saveSettings() {
    settings_->setValue(kLastConfigKey, QString::fromStdString(toJson(panel_->config()).dump()));
    settings_->setValue(kGeometryKey, saveGeometry());
    settings_->setValue(kStateKey, saveState());
    settings_->setValue(kOverlayKey, overlayAction_->isChecked());
    settings_->setValue(kBlendOverlayKey, blendOverlayAction_->isChecked());
    settings_->setValue(kSeamOverlayKey, seamOverlayAction_->isChecked());
    settings_->setValue(kModelsFolderKey, panel_->modelsFolder());
    settings_->setValue(kRecentModelsKey, panel_->recentModels());
    settings_->setValue(kChartTabKey, chartTabs_->currentIndex());
    settings_->sync();
}

void MainWindow::closeEvent(QCloseEvent* event) {
    saveSettings();
    QMainWindow::closeEvent(event);
}

void MainWindow::updateActions() {
    const bool valid = panel_->isValid();
    runAction_->setEnabled(valid && !running_);
    runAction_->setToolTip(valid ? tr("Generate the image with the current settings (Ctrl+R)")
                                 : tr("Fix the marked settings first:\n%1").arg(panel_->problems().join(QLatin1Char('\n'))));
    stopAction_->setEnabled(running_ && !stopping_);
    const QString blocker = panel_->graphsUnavailableReason();
    compareGraphsAction_->setEnabled(valid && !running_ && blocker.isEmpty());
    if (!blocker.isEmpty())
        compareGraphsAction_->setToolTip(tr("Compare graphs is unavailable. %1").arg(blocker));
    else if (!valid)
        compareGraphsAction_->setToolTip(tr("Fix the marked settings first:\n%1").arg(panel_->problems().join(QLatin1Char('\n'))));
    else
        compareGraphsAction_->setToolTip(tr("Run the settings with graphs off and with graphs %1, interleaved "
                                            "(off, on, off, on); the first pair warms up and is discarded (Ctrl+Shift+R)")
                                             .arg(QString::fromStdString(std::string(toString(
                                                 panel_->config().graphs != GraphMode::Off ? panel_->config().graphs : GraphMode::Tile)))));
    exportAction_->setEnabled(lastRun_.has_value() && !lastRun_->image.isNull());
    for (QAction* action : {exportCsvAction_, exportManifestAction_, exportTraceAction_})
        action->setEnabled(lastRun_.has_value() && lastRun_->result);
    beforeAfterAction_->setEnabled(!canvas_->beforeImage().isNull() && !canvas_->image().isNull());
    // The panel stays editable during a run: the run took a copy of the settings, and the
    // next Run uses whatever is shown.
}

void MainWindow::refreshPlan() {
    if (running_) return;  // the canvas shows the plan of the run in flight
    const RunConfig config = panel_->config();
    std::optional<TilePlan> plan;
    try {
        if (validateAll(config).empty() || panel_->problemFor(QStringLiteral("tile")).isEmpty())
            plan = TilePlan::fromConfig(config);
    } catch (const std::exception&) {
        plan.reset();  // the panel already says what is wrong
    }
    // The image shown stays: the canvas draws the plan of the settings over it (stretched and
    // marked when the sizes differ), so editing a setting never hides what was made.
    // The seam map belongs to the last run's plan; keep it only while the settings still match.
    if (!lastRun_ || !lastRun_->result || !plan || lastRun_->result->record.config.tile != config.tile ||
        lastRun_->result->record.config.overlapPixels() != config.overlapPixels())
        canvas_->setSeamMap({});
    canvas_->setBlendWindow(config.window);
    charts_->setTilePlan(plan);
    canvas_->setPlan(std::move(plan));
}

void MainWindow::setStatusText(const QString& text, bool error) {
    statusText_->setText(text);
    statusText_->setToolTip(text);
    statusText_->setStyleSheet(error ? QStringLiteral("color: #c0392b;") : QString());
}

RunConfig MainWindow::runnableConfig() const {
    RunConfig config = panel_->config();
    // The engine loads models by absolute folder; the empty field means the default model.
    if (config.model.empty()) config.model = panel_->defaultModelFolder().toStdString();
    // random:sd15 names no file (core/models/sd/SdModel.h); anything else is a path (no file is read here).
    if (config.model.rfind(kRandomModelPrefix, 0) != 0)
        config.model = QFileInfo(QString::fromStdString(config.model)).absoluteFilePath().toStdString();
    return config;
}

void MainWindow::beginRunDisplay(const RunConfig& config) {
    runConfig_ = config;
    progress_ = Progress{};
    progress_.steps = config.steps;
    progress_.firstStep = std::clamp(firstStepRun(config, !config.initImage.empty()), 0, config.steps);
    try {
        TilePlan plan = TilePlan::fromConfig(config);
        progress_.tiles = plan.count();
        charts_->startTileTimes(plan);
        canvas_->setPlan(std::move(plan));
    } catch (const std::exception&) {
        charts_->setTilePlan(std::nullopt);
        canvas_->setPlan(std::nullopt);
    }
    canvas_->setImage({});
    canvas_->setSeamMap({});
    showStartImage({});
    startedRecord_.reset();
    canvas_->setBlendWindow(config.window);
    canvas_->setPlaceholderText(tr("Loading the model and preparing…"));
    charts_->clear();
    stepBar_->show();
    tileBar_->show();
    // Busy until the engine reports the model load's fraction (a model kept from the last run,
    // or a pixel model, reports none), and again while it prepares; the text counts the seconds.
    updateStepBar();
    runClock_.start();
    markProgressDirty();
}

void MainWindow::startRun() {
    if (running_ || !panel_->isValid()) return;
    const RunConfig config = runnableConfig();
    if (!panel_->config().model.empty()) panel_->noteModelUsed(QString::fromStdString(config.model));
    saveSettings();

    currentRunId_ = nextRunId_++;
    running_ = true;
    stopping_ = false;
    beginRunDisplay(config);
    setStatusText(tr("Loading the model and preparing the backend…"));
    progressTimer_.start();
    updateActions();

    const quint64 runId = currentRunId_;
    RunWorker* worker = worker_;
    QMetaObject::invokeMethod(worker, [worker, config, runId] { worker->start(config, runId); }, Qt::QueuedConnection);
}

void MainWindow::setGraphComparisonPairs(int pairs) { graphPairs_ = std::clamp(pairs, 2, 9); }

void MainWindow::startGraphComparison() {
    if (running_ || !panel_->isValid()) return;
    const RunConfig base = runnableConfig();
    saveSettings();

    GraphComparison comparison;
    comparison.onMode = base.graphs != GraphMode::Off ? base.graphs : GraphMode::Tile;
    comparison.firstRunId = nextRunId_;
    const std::string onName(toString(comparison.onMode));
    for (int pair = 1; pair <= graphPairs_; ++pair) {
        for (const bool on : {false, true}) {
            GraphComparison::Run run;
            run.config = base;
            run.config.graphs = on ? comparison.onMode : GraphMode::Off;
            run.graphsOn = on;
            run.pair = pair;
            run.warmUp = pair == 1;
            // The label says what the run was in the history and the exports.
            std::string label = (base.label.empty() ? std::string() : base.label + " · ") + "graphs " +
                                (on ? onName : std::string("off")) + " · pair " + std::to_string(pair);
            if (run.warmUp) label += " (warm-up)";
            run.config.label = label;
            comparison.runs.push_back(std::move(run));
        }
    }
    comparison.active = true;
    nextRunId_ += comparison.runs.size();
    comparison_ = std::move(comparison);

    std::vector<RunConfig> configs;
    for (const GraphComparison::Run& run : comparison_->runs) configs.push_back(run.config);
    currentRunId_ = comparison_->firstRunId;
    running_ = true;
    stopping_ = false;
    beginRunDisplay(configs.front());
    setStatusText(graphComparisonStatus(0));
    progressTimer_.start();
    updateActions();
    emit graphComparisonRunStarted(0, static_cast<int>(configs.size()));

    const quint64 firstRunId = comparison_->firstRunId;
    RunWorker* worker = worker_;
    QMetaObject::invokeMethod(worker, [worker, configs, firstRunId] { worker->startSequence(configs, firstRunId); },
                              Qt::QueuedConnection);
}

QString MainWindow::graphComparisonStatus(int index) const {
    const GraphComparison::Run& run = comparison_->runs[static_cast<std::size_t>(index)];
    return tr("Compare graphs: run %1 of %2 — graphs %3, pair %4%5")
        .arg(index + 1)
        .arg(comparison_->runs.size())
        .arg(QString::fromStdString(std::string(toString(run.config.graphs))))
        .arg(run.pair)
        .arg(run.warmUp ? tr(" (warm-up, discarded)") : QString());
}

void MainWindow::stopRun() {
    if (!running_ || stopping_) return;
    stopping_ = true;
    // Direct call: the worker thread is busy inside the engine; cancel() is thread-safe.
    // Cancelling the last id of a comparison stops its run in flight and every run after it.
    worker_->cancel(isComparingGraphs() ? comparison_->lastRunId() : currentRunId_);
    setStatusText(isComparingGraphs() ? tr("Stopping the comparison after the current tile batch…")
                                      : tr("Stopping after the current tile batch…"));
    updateActions();
}

void MainWindow::markProgressDirty() { progressDirty_ = true; }

void MainWindow::refreshProgress() {
    if (!progressDirty_ && !running_) return;
    progressDirty_ = false;
    const Progress& p = progress_;
    updateStepBar();
    tileBar_->setRange(0, std::max(1, p.tiles));
    tileBar_->setValue(std::min(p.tilesDone, std::max(1, p.tiles)));
    if (!running_) return;

    const double elapsed = runClock_.isValid() ? runClock_.elapsed() / 1000.0 : 0.0;
    // The bars show step k/N and tile j/M; the text adds time.
    QString text = tr("%1 elapsed").arg(formatDuration(elapsed));
    if (p.loading())
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
    progressText_->setText(text);
}

void MainWindow::updateStepBar() {
    const Progress& p = progress_;
    if (running_ && p.loading()) {
        stepBar_->setFormat(p.loadPhase + QStringLiteral(" %p%"));
        stepBar_->setRange(0, kLoadBarSteps);
        stepBar_->setValue(static_cast<int>(p.loadFraction * kLoadBarSteps));
        return;
    }
    stepBar_->setFormat(tr("step %v/%m"));
    // The steps this run evaluates (image-to-image at strength 0.35 of 20: 7, not 20). While
    // running, the step in progress (1-based); afterwards, the steps completed. Busy while the
    // engine prepares (and loads a model that reports no fraction).
    const int runSteps = std::max(1, p.steps - p.firstStep);
    stepBar_->setRange(0, running_ && !p.started ? 0 : runSteps);
    stepBar_->setValue(std::clamp(running_ && p.started ? p.step + 1 - p.firstStep : p.step - p.firstStep, 0, runSteps));
}

void MainWindow::showReadyProgress() {
    // Before a run the bars would read "step 0/1": say what a run would do instead.
    stepBar_->hide();
    tileBar_->hide();
    if (!panel_->isValid()) {
        progressText_->setText(tr("not ready: fix the marked settings"));
        return;
    }
    try {
        const RunConfig config = panel_->config();
        const TilePlan plan = TilePlan::fromConfig(config);
        const int batch = resolveTileBatch(config.tileBatch, plan.count());
        const int batches = (plan.count() + batch - 1) / batch;
        progressText_->setText(tr("ready: %1 steps × %2 tile batches (%3 tiles, batch %4%5)")
                                   .arg(config.steps)
                                   .arg(batches)
                                   .arg(plan.count())
                                   .arg(batch)
                                   .arg(config.tileBatch <= 0 ? tr(", auto") : QString()));
    } catch (const std::exception&) {
        progressText_->setText(tr("not ready: fix the marked settings"));
    }
}

void MainWindow::onLoadProgress(quint64 runId, const LoadProgress& progress) {
    if (runId != currentRunId_ || progress_.started) return;
    progress_.loadFraction = std::clamp(progress.fraction(), 0.0, 1.0);
    progress_.loadPhase = QString::fromStdString(progress.phase);
    // The worker sends a few dozen a second at most: the bar follows each at once.
    updateStepBar();
    markProgressDirty();
    emit loadProgressShown(progress_.loadFraction, progress_.loadPhase);
}

void MainWindow::onRunStarted(quint64 runId, const RunRecord& record) {
    if (runId != currentRunId_) return;
    progress_.started = true;
    progress_.tiles = record.tileCount;
    progress_.steps = record.config.steps;
    progress_.firstStep = std::clamp(firstStepRun(record.config, !record.config.initImage.empty()), 0, progress_.steps);
    startedRecord_ = record;
    panel_->setLastRunSeed(record.config.seed);
    samplingClock_.start();
    canvas_->setPlaceholderText(tr("Step 1 of %1 — the image appears after each step").arg(progress_.steps - progress_.firstStep));
    QString text = tr("Running on %1 — %2 (prepared in %3 s)")
                       .arg(QString::fromStdString(record.environment.backend).toUpper(),
                            QString::fromStdString(record.environment.device))
                       .arg(record.prepareMs / 1000.0, 0, 'f', 2);
    if (isComparingGraphs())
        text = graphComparisonStatus(static_cast<int>(currentRunId_ - comparison_->firstRunId)) + QStringLiteral(" · ") + text;
    if (stopping_) text = tr("Stopping after the current tile batch…");
    setStatusText(text);
    markProgressDirty();
}

void MainWindow::onTileBatch(quint64 runId, const TileBatchEvent& event) {
    if (runId != currentRunId_) return;
    progress_.step = event.step;
    progress_.steps = event.steps;
    progress_.tilesDone = event.tileIds.empty() ? progress_.tilesDone : event.tileIds.back() + 1;
    canvas_->setActiveTiles(event.tileIds);
    markProgressDirty();
}

void MainWindow::onStep(quint64 runId, const StepEvent& event) {
    if (runId != currentRunId_) return;
    progress_.step = event.step + 1;
    progress_.steps = event.steps;
    progress_.tilesDone = 0;
    charts_->addStep(event.timing);
    markProgressDirty();
}

void MainWindow::onPreview(quint64 runId, int step, const QImage& image) {
    if (runId != currentRunId_) return;
    canvas_->setImage(image);
    emit previewShown(step, image);
}

void MainWindow::onMemory(quint64 runId, const MemorySample& sample) {
    if (runId != currentRunId_) return;
    charts_->addMemory(sample, devices_ && devices_->cudaAvailable && runConfig_.backend != BackendKind::CPU);
}

void MainWindow::onMessage(quint64 runId, const QString& text) {
    if (runId == currentRunId_) showNote(text);
}

void MainWindow::showNote(const QString& text) {
    // Not QStatusBar::showMessage: it cut a long note at the progress fields without a sign, at
    // whatever width they took after it was shown (docs/screenshots/window-sd-1366x768.png).
    noteText_->setText(text);
    noteText_->setToolTip(text);
    statusText_->hide();
    noteText_->show();
    noteTimer_->start(8000);
}

void MainWindow::showFinishedRun(const FinishedRun& run, bool keepInHistory) {
    canvas_->setPlaceholderText({});
    lastRun_ = run;
    const RunRecord& record = run.result->record;
    if (!run.image.isNull()) canvas_->setImage(run.image);
    canvas_->setSeamMap(run.result->seamMap);
    showStartImage(run.startImage);
    charts_->showTileTimes(record);
    canvas_->setActiveTiles({});
    // The bars keep the run's end state: the steps run of those it was to run (its first step
    // from the record), and all tiles of a finished run.
    progress_.steps = record.config.steps;
    progress_.firstStep = !record.steps.empty()
                              ? std::clamp(record.steps.front().step, 0, progress_.steps)
                              : std::clamp(firstStepRun(record.config, !record.config.initImage.empty()), 0, progress_.steps);
    progress_.step = progress_.firstStep + record.stepsRun;
    progress_.tilesDone = record.status == RunStatus::Finished ? progress_.tiles : progress_.tilesDone;
    updateStepBar();
    tileBar_->setRange(0, std::max(1, progress_.tiles));
    tileBar_->setValue(std::min(progress_.tilesDone, std::max(1, progress_.tiles)));
    progressDirty_ = false;
    const bool cancelled = record.status == RunStatus::Cancelled;
    QString text = cancelled ? tr("Cancelled after %1 of %2 steps").arg(record.stepsRun).arg(progress_.steps - progress_.firstStep)
                             : tr("Finished %1 steps, %2 tiles in %3 s (%4 ms/step)")
                                   .arg(record.stepsRun)
                                   .arg(record.tileCount)
                                   .arg(record.totalMs / 1000.0, 0, 'f', 2)
                                   .arg(record.stepsRun > 0 ? record.totalMs / record.stepsRun : 0.0, 0, 'f', 1);
    if (record.seamScore > 0)
        text += tr(" · seams %1 (1 = invisible, worst border %2)")
                    .arg(record.seamScore, 0, 'f', 2)
                    .arg(record.seamWorst, 0, 'f', 2);
    for (const std::string& message : record.messages) text += QStringLiteral(" · ") + QString::fromStdString(message);
    setStatusText(text);
    progressText_->setText(ranOn(record));
    // Every run goes into the history, a cancelled one with its partial image (if a step
    // ended); Compare graphs keeps only the runs it compares. Its PNG is encoded and written
    // on the history's thread; the row appears on entryAdded.
    if (keepInHistory && !(cancelled && isComparingGraphs())) history_->add(run.result, run.startFile);
}

void MainWindow::showStartImage(const QImage& startImage) {
    canvas_->setBeforeImage(startImage);
    // After a run from an image, the before/after view is what one wants to see first.
    if (startImage.isNull()) beforeAfterAction_->setChecked(false);
    beforeAfterAction_->setEnabled(!startImage.isNull() && !canvas_->image().isNull());
    if (beforeAfterAction_->isEnabled()) {
        beforeAfterAction_->setChecked(true);
        canvas_->setBeforeAfterVisible(true);  // also when it was checked already: back to 1:1
    }
}

void MainWindow::keepFailedRun(const QString& error) {
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

void MainWindow::onRunFinished(quint64 runId, const FinishedRun& run) {
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
            setStatusText(graphComparisonStatus(static_cast<int>(index + 1)));
            emit graphComparisonRunStarted(static_cast<int>(index + 1), static_cast<int>(comparison_->runs.size()));
        }
        return;  // the sequence ends with onSequenceFinished
    }
    running_ = false;
    stopping_ = false;
    progressTimer_.stop();
    showFinishedRun(run, true);
    const bool cancelled = run.result->record.status == RunStatus::Cancelled;
    updateActions();
    refreshPlan();
    emit runEnded(!cancelled);
}

void MainWindow::onTileBatchesTimed(quint64 runId, const std::vector<TileBatchTiming>& batches) {
    if (runId != currentRunId_) return;
    charts_->addTileBatches(batches);
}

void MainWindow::onSequenceFinished(quint64 firstRunId, int runsFinished, bool completed) {
    if (!comparison_ || comparison_->firstRunId != firstRunId || !comparison_->active) return;
    comparison_->active = false;
    comparison_->completed = completed;
    running_ = false;
    stopping_ = false;
    progressTimer_.stop();
    canvas_->setActiveTiles({});
    canvas_->setPlaceholderText({});
    if (completed) {
        finishGraphComparison();
    } else if (!comparison_->error.isEmpty()) {
        setStatusText(tr("Compare graphs failed at run %1 of %2: %3")
                          .arg(runsFinished + 1)
                          .arg(comparison_->runs.size())
                          .arg(comparison_->error),
                      true);
    } else {
        setStatusText(tr("Compare graphs stopped after %1 of %2 runs; nothing was compared")
                          .arg(runsFinished)
                          .arg(comparison_->runs.size()));
    }
    updateActions();
    refreshPlan();
    emit graphComparisonEnded(completed);
}

void MainWindow::finishGraphComparison() {
    GraphComparison& c = *comparison_;
    // Per mode, the kept runs (every pair but the warm-up); with one kept pair that pair is
    // compared, with more the run of median total time of each mode.
    std::vector<int> keptOff, keptOn;
    for (std::size_t i = 0; i < c.runs.size(); ++i)
        if (!c.runs[i].warmUp && c.runs[i].result) (c.runs[i].graphsOn ? keptOn : keptOff).push_back(static_cast<int>(i));
    if (keptOff.empty() || keptOn.empty()) return;
    auto median = [&c](std::vector<int> indices) {
        std::sort(indices.begin(), indices.end(), [&c](int x, int y) {
            return c.runs[static_cast<std::size_t>(x)].result->record.totalMs < c.runs[static_cast<std::size_t>(y)].result->record.totalMs;
        });
        return indices[(indices.size() - 1) / 2];  // the lower median: always a real run
    };
    c.shownA = median(keptOff);
    c.shownB = median(keptOn);
    const int pairs = c.runs.back().pair;
    c.choice = keptOff.size() == 1
                   ? tr("Compared: the last pair (pair %1 of %1); pair 1 was a warm-up and is discarded.").arg(pairs)
                   : tr("Compared: the run of median total time of each mode over pairs 2–%1; pair 1 was a warm-up "
                        "and is discarded.")
                         .arg(pairs);
    // Every run of the sequence, so the reader sees the spread and the warm-up.
    QStringList order, lines;
    for (const GraphComparison::Run& run : c.runs) order << QString::fromStdString(std::string(toString(run.config.graphs)));
    for (int pair = 1; pair <= pairs; ++pair) {
        QStringList times;
        for (const GraphComparison::Run& run : c.runs)
            if (run.pair == pair && run.result)
                times << tr("%1 %2 s").arg(QString::fromStdString(std::string(toString(run.config.graphs))))
                             .arg(run.result->record.totalMs / 1000.0, 0, 'f', 3);
        lines << tr("pair %1%2: %3").arg(pair).arg(pair == 1 ? tr(" (warm-up, discarded)") : QString(), times.join(QStringLiteral(", ")));
    }
    QString note = tr("Compare graphs, interleaved %1 — %2. %3")
                       .arg(order.join(QStringLiteral(", ")), lines.join(QStringLiteral("; ")), c.choice);

    const GraphComparison::Run& a = c.runs[static_cast<std::size_t>(c.shownA)];
    const GraphComparison::Run& b = c.runs[static_cast<std::size_t>(c.shownB)];
    if (effectiveGraphMode(b.result->record.graphs) == GraphMode::Off)
        note += tr(" Graphs %1 ran as off (%2), so both runs launched eagerly: the times differ only by run-to-run "
                   "variation.")
                    .arg(QString::fromStdString(std::string(toString(c.onMode))),
                         b.result->record.environment.backend == "cpu"
                             ? tr("the CPU engine has no CUDA graphs")
                             : QString::fromStdString(b.result->record.graphs.fallbackReason));
    // The panel gets the short story (the full one is in the compare view and the tooltip).
    graphsPanel_->setRuns(a.result->record, b.result->record, c.choice);
    graphsPanel_->caption()->setToolTip(note);
    chartTabs_->setCurrentWidget(graphsPanel_);
    chartsDock_->show();
    // Grouped bars and a table need more room than the timing charts.
    if (!chartsDock_->isFloating() && chartsDock_->width() < kGraphsDockWidth)
        resizeDocks({chartsDock_}, {kGraphsDockWidth}, Qt::Horizontal);
    CompareSide sideA{a.result->record, a.image, seamStats(a.result->seamMap).mean};
    CompareSide sideB{b.result->record, b.image, seamStats(b.result->seamMap).mean};
    openCompareView(sideA, sideB, note);
    const double ta = a.result->record.totalMs, tb = b.result->record.totalMs;
    setStatusText(tr("Compare graphs: graphs %1 took %2 s, graphs off %3 s (%4×); %5")
                      .arg(QString::fromStdString(std::string(toString(c.onMode))))
                      .arg(tb / 1000.0, 0, 'f', 3)
                      .arg(ta / 1000.0, 0, 'f', 3)
                      .arg(tb > 0 ? ta / tb : 0.0, 0, 'f', 2)
                      .arg(c.choice));
}

void MainWindow::onRunFailed(quint64 runId, const QString& error) {
    if (runId != currentRunId_) return;
    if (isComparingGraphs()) {
        // The worker skips the rest of the sequence; onSequenceFinished ends it.
        comparison_->error = error;
        canvas_->setActiveTiles({});
        setStatusText(tr("Run failed: %1").arg(error), true);
        return;
    }
    running_ = false;
    updateStepBar();  // not the failed load's fraction
    canvas_->setPlaceholderText(tr("The run failed: %1").arg(error));
    stopping_ = false;
    progressTimer_.stop();
    canvas_->setActiveTiles({});
    progressText_->clear();
    setStatusText(tr("Run failed: %1").arg(error), true);
    keepFailedRun(error);
    updateActions();
    emit runEnded(false);
}

void MainWindow::onDevicesProbed(const DeviceReport& report) {
    devices_ = report;
    panel_->setDeviceReport(report);
    updateActions();  // Compare graphs depends on the device
}

void MainWindow::openPreset() {
    const QString path = QFileDialog::getOpenFileName(this, tr("Open preset"),
                                                      settings_->value(kPresetDirKey, presetsFolder()).toString(),
                                                      tr("Presets, manifests and run images (*.json *.png);;All files (*)"));
    if (path.isEmpty()) return;
    settings_->setValue(kPresetDirKey, QFileInfo(path).absolutePath());
    restoreConfiguration(path, Feedback::MessageBox);
}

void MainWindow::restoreConfigurationFrom(const QString& path) { restoreConfiguration(path, Feedback::StatusLine); }

void MainWindow::restoreConfiguration(const QString& path, Feedback feedback) {
    restoreJob_ = files_.start(
        [file = path.toStdString()] { return configurationFromFile(file); },
        [this, path](quint64 id, const RestoredConfig& restored) {
            if (id != restoreJob_) return;  // a newer file was opened or dropped since
            panel_->setConfig(restored.config);
            const QString name = QFileInfo(path).fileName();
            const QString run = QString::fromStdString(restored.runId);
            switch (restored.source) {
            case ConfigSource::RunPng: setStatusText(tr("Settings of run %1 restored from the image %2").arg(run, name)); break;
            case ConfigSource::Manifest: setStatusText(tr("Settings of run %1 restored from the manifest %2").arg(run, name)); break;
            case ConfigSource::Preset: setStatusText(tr("Loaded preset %1").arg(name)); break;
            }
            emit configurationRestored(path, true, {});
        },
        [this, path, feedback](quint64 id, const QString& error) {
            if (id != restoreJob_) return;
            if (feedback == Feedback::MessageBox)
                QMessageBox::warning(this, tr("Open preset"), tr("This is not a usable preset:\n%1").arg(error));
            else
                setStatusText(tr("Nothing restored: %1").arg(error), true);
            emit configurationRestored(path, false, error);
        });
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
    const QList<QUrl> urls = event->mimeData()->urls();
    if (urls.size() == 1 && urls.front().isLocalFile() && isConfigurationFile(urls.front().toLocalFile()))
        event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event) {
    const QList<QUrl> urls = event->mimeData()->urls();
    if (urls.size() != 1 || !urls.front().isLocalFile()) return;
    // Read off this thread; what it held, or why nothing, is told in the status line.
    event->acceptProposedAction();
    restoreConfiguration(urls.front().toLocalFile(), Feedback::StatusLine);
}

void MainWindow::savePreset() {
    const QString path = QFileDialog::getSaveFileName(this, tr("Save preset"),
                                                      settings_->value(kPresetDirKey, QDir::homePath()).toString() +
                                                          QStringLiteral("/preset.json"),
                                                      tr("Tessera presets (*.json)"), nullptr,
                                                      QFileDialog::DontConfirmOverwrite);
    if (path.isEmpty()) return;
    settings_->setValue(kPresetDirKey, QFileInfo(path).absolutePath());
    const std::string json = toJson(panel_->config()).dump(2) + "\n";
    writeInBackground(
        path, Overwrite::Ask, [json](const std::string& file) { writeFileAtomically(file, json); },
        [this, path](bool ok, const QString& error) {
            if (ok) setStatusText(tr("Saved preset %1").arg(QFileInfo(path).fileName()));
            else if (!error.isEmpty()) QMessageBox::warning(this, tr("Save preset"), error);
        });
}

void MainWindow::writeInBackground(const QString& path, Overwrite overwrite, std::function<void(const std::string&)> write,
                                   std::function<void(bool, const QString&)> done) {
    // The existence check runs with the write, off this thread; only the question is asked here.
    files_.start(
        [file = path.toStdString(), replace = overwrite == Overwrite::Replace, write] {
            if (!replace && QFileInfo::exists(QString::fromStdString(file))) return false;
            write(file);
            return true;
        },
        [this, path, overwrite, write, done](quint64, bool written) {
            if (written) return done(true, {});
            if (overwrite == Overwrite::Ask && askToReplace(path))
                return writeInBackground(path, Overwrite::Replace, write, done);
            done(false, tr("%1: the file exists and was not replaced").arg(QDir::toNativeSeparators(path)));
        },
        [path, done](quint64, const QString& error) {
            done(false, error.contains(path) ? error : QDir::toNativeSeparators(path) + QStringLiteral(": ") + error);
        });
}

bool MainWindow::askToReplace(const QString& path) {
    return QMessageBox::question(this, tr("Replace file?"),
                                 tr("%1 already exists.\nDo you want to replace it?").arg(QDir::toNativeSeparators(path)),
                                 QMessageBox::Yes | QMessageBox::No, QMessageBox::No) == QMessageBox::Yes;
}

void MainWindow::exportInteractively(ExportFormat format) {
    if (!lastRun_ || !lastRun_->result) return;
    const RunRecord& record = lastRun_->result->record;
    const QString suggested = settings_->value(kExportDirKey, QDir::homePath()).toString() + QLatin1Char('/') +
                              suggestedExportName(record, format);
    const QString filter = QStringLiteral("%1 (*.%2)").arg(exportTitle(format), exportSuffix(format));
    // The overwrite question is ours (writeInBackground), the same for every way of exporting.
    QString path = QFileDialog::getSaveFileName(this, tr("Export %1").arg(exportTitle(format)), suggested, filter,
                                                nullptr, QFileDialog::DontConfirmOverwrite);
    if (path.isEmpty()) return;
    if (QFileInfo(path).suffix().isEmpty()) path += QLatin1Char('.') + exportSuffix(format);
    settings_->setValue(kExportDirKey, QFileInfo(path).absolutePath());
    startExport(format, path, Overwrite::Ask, Feedback::MessageBox);
}

void MainWindow::exportTo(ExportFormat format, const QString& path, Overwrite overwrite) {
    startExport(format, path, overwrite, Feedback::StatusLine);
}

void MainWindow::startExport(ExportFormat format, const QString& path, Overwrite overwrite, Feedback feedback) {
    const auto done = [this, path, format, feedback](bool ok, const QString& error) {
        if (ok) setStatusText(tr("Exported %1").arg(QDir::toNativeSeparators(path)));
        else if (feedback == Feedback::MessageBox && !error.isEmpty())
            QMessageBox::warning(this, tr("Export %1").arg(exportTitle(format)), error);
        else
            setStatusText(error, true);
        emit exportFinished(path, ok, error);
    };
    const std::shared_ptr<const RunResult> result = lastRun_ ? lastRun_->result : nullptr;
    if (!result) return done(false, QDir::toNativeSeparators(path) + tr(": there is no finished run to export yet"));
    if (format == ExportFormat::ImagePng && result->image.data.empty())
        return done(false, QDir::toNativeSeparators(path) + tr(": there is no finished image to export yet"));
    // The shared result is only read there; the PNG is encoded on files_' thread too.
    writeInBackground(
        path, overwrite, [result, format](const std::string& file) { exportRun(*result, format, file); }, done);
}

QAction* MainWindow::overlayAction(CanvasOverlay which) const {
    switch (which) {
    case CanvasOverlay::TileGrid: return overlayAction_;
    case CanvasOverlay::BlendWeights: return blendOverlayAction_;
    case CanvasOverlay::SeamMap: return seamOverlayAction_;
    }
    return nullptr;
}

void MainWindow::refreshHistory() {
    historyPanel_->setEntries(history_->entries());
    // The few most recent runs other than the one shown, in grey behind it.
    constexpr int kEarlierRuns = 5;
    const std::string current = lastRun_ && lastRun_->result ? lastRun_->result->record.runId : std::string();
    std::vector<const RunRecord*> earlier;
    const std::vector<HistoryEntry>& entries = history_->entries();
    for (auto it = entries.rbegin(); it != entries.rend() && static_cast<int>(earlier.size()) < kEarlierRuns; ++it)
        if (it->record.runId != current) earlier.push_back(&it->record);
    charts_->setEarlierRuns(earlier);
}

bool MainWindow::openFromHistory(const QString& id, QString* error) {
    const HistoryEntry* entry = history_->find(id);
    const QString why = !entry ? tr("Run %1 is not in the history").arg(id)
                        : running_ ? tr("A run is in progress; open run %1 when it has ended").arg(id)
                                   : QString();
    if (!why.isEmpty()) {
        if (error) *error = why;
        return false;
    }
    panel_->setConfig(entry->record.config);
    panel_->setLastRunSeed(entry->record.config.seed);
    charts_->showRecord(entry->record);
    setStatusText(tr("Opening run %1…").arg(id));
    historyPanel_->selectIds({id});  // the row of the run shown
    // The image (and start image) are read on the history's thread: onHistoryRunOpened.
    openRunId_ = id;
    openJob_ = history_->open(id);
    return true;
}

void MainWindow::onHistoryRunOpened(quint64 jobId, const QString& id, const FinishedRun& run) {
    if (jobId != openJob_) return;  // a newer run was opened since
    openJob_ = 0;
    if (running_) {  // Run was pressed meanwhile: the run in flight owns the canvas
        emit historyRunOpened(id, false, tr("a run started before run %1 was read").arg(id));
        return;
    }
    lastRun_ = run;
    const RunRecord& record = run.result->record;
    canvas_->setImage(run.image);
    canvas_->setSeamMap({});  // the history keeps the seam statistics, not the map
    canvas_->setActiveTiles({});
    canvas_->setPlaceholderText(record.status == RunStatus::Failed
                                    ? tr("This run failed: %1").arg(QString::fromStdString(toValidUtf8(record.error)))
                                    : tr("This run has no image"));
    showStartImage(run.startImage);
    if (run.startImage.isNull()) canvas_->fitToView();
    charts_->showRecord(record);
    refreshHistory();  // the earlier runs behind its charts
    stepBar_->hide();
    tileBar_->hide();
    progressText_->setText(ranOn(record));
    const QString status = HistoryPanel::statusText(record);
    setStatusText(run.image.isNull() && record.status != RunStatus::Failed
                      ? tr("Run %1 (%2) reopened; its image could not be read (see the log)").arg(id, status)
                      : tr("Run %1 (%2) reopened from the history").arg(id, status),
                  run.image.isNull() && record.status != RunStatus::Failed);
    updateActions();
    emit historyRunOpened(id, true, {});
}

void MainWindow::onHistoryFailed(quint64 jobId, const QString& error) {
    if (jobId != 0 && jobId == openJob_) {
        openJob_ = 0;
        setStatusText(tr("Run %1 could not be opened: %2").arg(openRunId_, error), true);
        emit historyRunOpened(openRunId_, false, error);
        return;
    }
    setStatusText(tr("The run history could not be updated: %1").arg(error), true);
}

void MainWindow::onHistoryLoaded() {
    refreshHistory();
    // Each problem is logged in full by RunHistory; the status line names the first.
    if (const QStringList& problems = history_->problems(); !problems.isEmpty())
        setStatusText(tr("%n file(s) of the history could not be used (see the log); the first: %1", nullptr,
                         static_cast<int>(problems.size()))
                          .arg(problems.front()),
                      true);
}

void MainWindow::removeFromHistory(const QStringList& ids) {
    // The rows go when the files are in the trash (entryRemoved).
    history_->remove(ids);
    setStatusText(tr("%n run(s) moved to the trash; Edit ▸ Undo delete (Ctrl+Z) brings them back until Tessera closes",
                     nullptr, static_cast<int>(ids.size())));
    updateUndo();
}

void MainWindow::undoRemove() {
    const QStringList ids = history_->undoableRemoval();
    if (ids.isEmpty()) return;
    history_->undoRemove();  // entryRestored per run
    updateUndo();
}

void MainWindow::updateUndo() {
    const QStringList ids = history_->undoableRemoval();
    const QString what = ids.isEmpty() ? QString() : ids.size() == 1 ? tr("run %1").arg(ids.front()) : tr("%1 runs").arg(ids.size());
    undoDeleteAction_->setEnabled(!ids.isEmpty());
    undoDeleteAction_->setText(ids.isEmpty() ? tr("&Undo delete") : tr("&Undo delete (%1)").arg(what));
    historyPanel_->setUndoText(what);
}

void MainWindow::copyParameters(const QString& id) {
    const HistoryEntry* entry = history_->find(id);
    if (!entry) return;
    // A1111's infotext, which its PNG Info, Tessera's --params-from and other tools read.
    const std::string text = infotext(entry->record.config, infotextExtras(entry->record));
    QGuiApplication::clipboard()->setText(QString::fromStdString(text));
    setStatusText(tr("Parameters of run %1 copied").arg(id));
}

void MainWindow::showInFolder(const QString& id) {
    if (!history_->find(id)) return;
    // Every file of a run is in the history's folder. The file manager (a process of its own)
    // opens it; nothing is read here.
    const QString folder = QDir::cleanPath(history_->folder());
    if (!QDesktopServices::openUrl(QUrl::fromLocalFile(folder)))
        setStatusText(tr("No file manager could open %1").arg(QDir::toNativeSeparators(folder)), true);
    else
        setStatusText(tr("Run %1 is in %2").arg(id, QDir::toNativeSeparators(folder)));
}

QAction* MainWindow::exportAction(ExportFormat format) const {
    switch (format) {
    case ExportFormat::ImagePng: return exportAction_;
    case ExportFormat::TimingsCsv: return exportCsvAction_;
    case ExportFormat::ManifestJson: return exportManifestAction_;
    case ExportFormat::ChromeTrace: return exportTraceAction_;
    }
    return nullptr;
}

bool MainWindow::compareRuns(const QString& idA, const QString& idB, QString* error) {
    const HistoryEntry* a = history_->find(idA);
    const HistoryEntry* b = history_->find(idB);
    if (!a || !b) {
        if (error) *error = tr("Run %1 is not in the history").arg(a ? idB : idA);
        return false;
    }
    // Older run as A, so "speedup" and the deltas read as "what changed since".
    if (a->record.startedAt > b->record.startedAt) std::swap(a, b);
    graphsPanel_->setRuns(a->record, b->record, tr("Two runs picked in the history (older as A)."));
    // The view opens when both images are read (onCompareImages); a newer request wins.
    compareJob_ = history_->loadImages({a->id(), b->id()});
    return true;
}

void MainWindow::onCompareImages(quint64 jobId, const QStringList& ids, const QList<QImage>& images) {
    if (jobId != compareJob_) return;
    const HistoryEntry* a = history_->find(ids.at(0));
    const HistoryEntry* b = history_->find(ids.at(1));
    if (!a || !b) {  // deleted while its image was read
        setStatusText(tr("Run %1 is no longer in the history").arg(a ? ids.at(1) : ids.at(0)), true);
        return;
    }
    CompareView* view = openCompareView({a->record, images.at(0), a->seamMean}, {b->record, images.at(1), b->seamMean}, {});
    emit compareViewOpened(view);
}

CompareView* MainWindow::openCompareView(const CompareSide& a, const CompareSide& b, const QString& note) {
    if (compareView_) compareView_->close();
    compareView_ = new CompareView(a, b, this);
    if (!note.isEmpty()) compareView_->setNote(note);
    compareView_->setWindowFlag(Qt::Window);
    compareView_->setAttribute(Qt::WA_DeleteOnClose);
    compareView_->show();
    return compareView_;
}

void MainWindow::showAbout() {
    QString devices = tr("Looking for devices…");
    if (devices_) {
        devices = tr("CPU: %1<br>CUDA: %2")
                      .arg(QString::fromStdString(devices_->cpuDevice).toHtmlEscaped(),
                           devices_->cudaAvailable ? tr("available")
                                                   : QString::fromStdString(devices_->cudaReason).toHtmlEscaped());
    }
    QMessageBox::about(this, tr("About Tessera"),
                       tr("<h3>Tessera %1</h3>"
                          "<p>Tiled high-resolution diffusion workbench.</p>"
                          "<p>Qt %2 (built with %3)<br>%4</p>")
                           .arg(QStringLiteral(TESSERA_VERSION), QString::fromLatin1(qVersion()),
                                QStringLiteral(QT_VERSION_STR), devices));
}

}  // namespace tessera
