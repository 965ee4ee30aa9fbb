#include "ui/MainWindow.h"

#include <algorithm>
#include <exception>

#include <QAction>
#include <QClipboard>
#include <QCloseEvent>
#include <QDesktopServices>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QDockWidget>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileInfo>
#include <QGuiApplication>
#include <QHeaderView>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QPushButton>
#include <QScreen>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QStatusBar>
#include <QStyle>
#include <QTabWidget>
#include <QTableWidget>
#include <QTimer>
#include <QToolBar>
#include <QUrl>
#include <QVBoxLayout>

#include <nlohmann/json.hpp>

#include "app/cli/UpscaleModelRun.h"
#include "app/qt/ModelCatalog.h"
#include "core/base/BoundedInput.h"
#include "core/models/sd/SdModel.h"
#include "core/run/Infotext.h"
#include "core/run/RunRecordIO.h"
#include "core/sampling/ImageOps.h"
#include "core/sampling/TilePlan.h"
#include "ui/CompareView.h"
#include "ui/ConfigPanel.h"
#include "ui/ControlHintView.h"
#include "ui/ControlNetGroup.h"
#include "ui/FileMenu.h"
#include "ui/GraphsPanel.h"
#include "ui/HistoryPanel.h"
#include "ui/RunController.h"
#include "ui/StatusLine.h"
#include "ui/TileCanvas.h"
#include "ui/TimingCharts.h"

#ifndef TESSERA_VERSION
#define TESSERA_VERSION "unknown"
#endif

namespace tessera {

namespace {

const QString kLastConfigKey = QStringLiteral("run/lastConfig");
const QString kGeometryKey = QStringLiteral("window/geometry");
const QString kStateKey = QStringLiteral("window/state");
const QString kOverlayKey = QStringLiteral("view/tileOverlay");
const QString kBlendOverlayKey = QStringLiteral("view/blendOverlay");
const QString kSeamOverlayKey = QStringLiteral("view/seamOverlay");
const QString kModelsFolderKey = QStringLiteral("models/folder");
const QString kRecentModelsKey = QStringLiteral("models/recent");
const QString kChartTabKey = QStringLiteral("window/chartTab");
// Every ControlNet unit of the group, switched-off ones too (ControlNetGroup::allUnits), as JSON:
// [{"enabled": bool, "unit": <a "controlnets" entry of the configuration JSON>}, ...].
const QString kControlNetUnitsKey = QStringLiteral("window/controlNetUnits");

QString controlNetUnitsText(const std::vector<std::pair<bool, ControlNetUnit>>& units) {
    nlohmann::json all = nlohmann::json::array();
    for (const auto& u : units) {
        RunConfig one;
        one.controlNets = {u.second};
        all.push_back({{"enabled", u.first}, {"unit", toJson(one).at("controlnets").at(0)}});
    }
    return QString::fromStdString(all.dump());
}

// The units of controlNetUnitsText; none for text that is not such a list (a damaged or older file).
std::vector<std::pair<bool, ControlNetUnit>> controlNetUnitsFrom(const std::string& text) {
    std::vector<std::pair<bool, ControlNetUnit>> units;
    if (text.empty() || text.size() > input_limits::kJsonBytes) return units;
    try {
        const nlohmann::json all = parseBoundedJson(text, "settings", "the saved ControlNet units");
        if (!all.is_array() || all.size() > kMaxControlNets) return {};
        for (const nlohmann::json& item : all) {
            const RunConfig one = runConfigFromJson(nlohmann::json{{"controlnets", {item.at("unit")}}});
            if (one.controlNets.size() != 1) return {};
            units.emplace_back(item.at("enabled").get<bool>(), one.controlNets.front());
        }
    } catch (const std::exception&) {
        return {};
    }
    return units;
}
const QString kBatchCountKey = QStringLiteral("run/batchCount");

// Images: a start image, or the generation settings they hold.
bool isImageFile(const QString& path) {
    const QString suffix = QFileInfo(path).suffix().toLower();
    return suffix == QStringLiteral("png") || suffix == QStringLiteral("jpg") || suffix == QStringLiteral("jpeg");
}

// Files whose configuration the window can take: images, manifests, presets.
bool isConfigurationFile(const QString& path) {
    return isImageFile(path) || QFileInfo(path).suffix().toLower() == QStringLiteral("json");
}

}  // namespace

MainWindow::MainWindow(std::unique_ptr<SettingsFile> settings, const QString& historyFolder, QWidget* parent)
    : QMainWindow(parent),
      settings_(settings ? std::move(settings) : std::make_unique<SettingsFile>(SettingsFile::defaultPath())),
      history_(new HistoryStore(historyFolder, RunHistory::kDefaultCapacity, RunHistory::kDefaultTrashDepth, this)) {
    setObjectName(QStringLiteral("mainWindow"));
    setWindowTitle(tr("Tessera"));
    setAcceptDrops(true);
    setDockOptions(QMainWindow::AnimatedDocks | QMainWindow::AllowTabbedDocks);

    canvas_ = new TileCanvas;
    setCentralWidget(canvas_);
    buildActions();
    buildDocks();
    statusLine_ = new StatusLine(statusBar());
    runs_ = new RunController(canvas_, charts_, statusLine_, history_, this);
    wireRuns();
    fileMenu_ = new FileMenu(this, settings_->values(), panel_, statusLine_, [this] { return lastRun(); });
    connect(fileMenu_, &FileMenu::configurationRestored, this, &MainWindow::configurationRestored);
    connect(fileMenu_, &FileMenu::exportFinished, this, &MainWindow::exportFinished);
    connect(fileMenu_, &FileMenu::parametersApplied, this, &MainWindow::parametersApplied);
    buildMenus();
    buildToolBar();

    panel_->locateDefaultModel(QCoreApplication::applicationDirPath());
    const auto settingsChanged = [this] {
        refreshPlan();
        updateActions();
        if (!runs_->isRunning()) showReadyProgress();
    };
    connect(panel_, &ConfigPanel::configChanged, this, settingsChanged);
    connect(panel_, &ConfigPanel::modelChecked, this, settingsChanged);
    connect(panel_, &ConfigPanel::validityChanged, this, &MainWindow::updateActions);

    connect(history_, &HistoryStore::loaded, this, &MainWindow::onHistoryLoaded);
    connect(history_, &HistoryStore::entryAdded, this, [this](quint64, const QString& id, const QStringList&) {
        refreshHistory();
        // Runs are added as they end: the newest row is the run just made, not the one selected before.
        historyPanel_->selectIds({id});
    });
    connect(history_, &HistoryStore::entryRemoved, this, &MainWindow::refreshHistory);
    connect(history_, &HistoryStore::entryRestored, this, [this](quint64, const QString& id) {
        refreshHistory();
        setStatusText(tr("Run %1 is back in the history").arg(id));
    });
    connect(history_, &HistoryStore::imagesAvailable, this, &MainWindow::onCompareImages);
    connect(history_, &HistoryStore::runOpened, this, &MainWindow::onHistoryRunOpened);
    connect(history_, &HistoryStore::failed, this, &MainWindow::onHistoryFailed);
    connect(canvas_, &TileCanvas::imageDropped, this, &MainWindow::askAboutDroppedImage);

    panel_->startImageGroup()->setUpscaleOnlyAction(upscaleOnlyAction_);
    restoreSettings();
    refreshPlan();
    updateActions();
    showReadyProgress();
    // 1500 x 920 where the screen has room; otherwise the screen's available area (a 1366 x 768
    // laptop's), so the window never opens larger than the screen.
    QSize size(1500, 920);
    if (const QScreen* screen = QGuiApplication::primaryScreen())
        size = size.boundedTo(screen->availableGeometry().size());
    resize(size);
    // The history is a strip under the canvas, a few rows high; on a 768-px screen one row and its
    // buttons, so that the charts beside the canvas keep their whole height.
    resizeDocks({historyDock_}, {size.height() >= 900 ? 190 : 140}, Qt::Vertical);
    const QSettings& saved = settings_->values();
    if (saved.contains(kGeometryKey)) restoreGeometry(saved.value(kGeometryKey).toByteArray());
    if (saved.contains(kStateKey)) restoreState(saved.value(kStateKey).toByteArray());
    const int chartTab = saved.value(kChartTabKey, 0).toInt();
    if (chartTab >= 0 && chartTab < chartTabs_->count()) chartTabs_->setCurrentIndex(chartTab);
}

MainWindow::~MainWindow() {
    // Nothing reaches the window's slots any more; then the worker's thread ends (a run in flight
    // stops at its next tile batch) before the widgets that show runs are deleted with the window.
    panel_->disconnect(this);
    history_->disconnect(this);
    delete runs_;
    runs_ = nullptr;
}

void MainWindow::wireRuns() {
    connect(runs_, &RunController::runningChanged, this, [this](bool running) {
        updateActions();
        if (!running) refreshPlan();
    });
    connect(runs_, &RunController::displayCleared, this, [this] { showStartImage({}); });
    connect(runs_, &RunController::displayRestored, this, [this] {
        if (lastRun_) showStartImage(lastRun_->startImage);
    });
    connect(runs_, &RunController::runStarted, this,
            [this](const RunRecord& record) { panel_->setLastRunSeed(record.config.seed); });
    // The tiles per call the run chose (auto may lower the planned batch to fit the device).
    connect(runs_, &RunController::runStarted, this, [this](const RunRecord& record) {
        if (record.tileBatch) statusLine_->setTilesPerBatch(record.tileBatch->ran);
    });
    connect(runs_, &RunController::runShown, this, &MainWindow::showRun);
    connect(runs_, &RunController::graphComparisonCompared, this, &MainWindow::showGraphComparison);
    connect(runs_, &RunController::devicesProbed, this, [this](const DeviceReport& report) {
        panel_->setDeviceReport(report);
        updateActions();  // Compare graphs depends on the device
    });
    connect(runs_, &RunController::runEnded, this, &MainWindow::runEnded);
    // A batch count: the next image once this one finished (a stop, a failure ends the batch).
    connect(runs_, &RunController::runEnded, this, [this](bool succeeded) {
        if (!succeeded) batchLeft_ = 0;
        if (batchLeft_ > 0) QTimer::singleShot(0, this, &MainWindow::continueBatch);
    });
    connect(runs_, &RunController::previewShown, this, &MainWindow::previewShown);
    connect(runs_, &RunController::loadProgressShown, this, &MainWindow::loadProgressShown);
    connect(runs_, &RunController::graphComparisonRunStarted, this, &MainWindow::graphComparisonRunStarted);
    connect(runs_, &RunController::graphComparisonEnded, this, &MainWindow::graphComparisonEnded);
}

const std::optional<GraphComparison>& MainWindow::graphComparison() const { return runs_->graphComparison(); }

bool MainWindow::isComparingGraphs() const { return runs_->isComparingGraphs(); }

bool MainWindow::isRunning() const { return runs_->isRunning(); }

void MainWindow::buildActions() {
    auto make = [this](const QString& text, const char* name, const QKeySequence& shortcut = {}) {
        auto* action = new QAction(text, this);
        action->setObjectName(QString::fromLatin1(name));
        if (!shortcut.isEmpty()) action->setShortcut(shortcut);
        return action;
    };
    quitAction_ = make(tr("&Quit"), "actionQuit", QKeySequence::Quit);
    runAction_ = make(tr("Run"), "actionRun", QKeySequence(tr("Ctrl+R")));
    runAction_->setIcon(style()->standardIcon(QStyle::SP_MediaPlay));
    runAction_->setToolTip(tr("Generate the image with the current settings (Ctrl+R)"));
    stopAction_ = make(tr("Stop"), "actionStop", QKeySequence(Qt::Key_Escape));
    stopAction_->setIcon(style()->standardIcon(QStyle::SP_MediaStop));
    stopAction_->setToolTip(tr("Stop after the tile batch in progress (Esc)"));
    compareGraphsAction_ = make(tr("Compare &graphs"), "actionCompareGraphs", QKeySequence(tr("Ctrl+Shift+R")));
    compareGraphsAction_->setIcon(style()->standardIcon(QStyle::SP_BrowserReload));
    upscaleOnlyAction_ = make(tr("&Upscale only"), "actionUpscaleOnly", QKeySequence(tr("Ctrl+U")));
    fitAction_ = make(tr("&Fit"), "actionFit", QKeySequence(tr("Ctrl+0")));
    actualSizeAction_ = make(tr("&Actual size (1:1)"), "actionActualSize", QKeySequence(tr("Ctrl+1")));
    overlayAction_ = make(tr("&Tile grid overlay"), "actionTileOverlay", QKeySequence(tr("Ctrl+G")));
    overlayAction_->setCheckable(true);
    overlayAction_->setChecked(true);
    overlayAction_->setToolTip(tr("Tile edges and the overlap bands where tiles are blended (Ctrl+G)"));
    blendOverlayAction_ = make(tr("&Blend weights"), "actionBlendOverlay", QKeySequence(tr("Ctrl+B")));
    blendOverlayAction_->setCheckable(true);
    blendOverlayAction_->setToolTip(
        tr("Normalised blend weight of the tile under the cursor; "
           "elsewhere the normaliser N (Ctrl+B)"));
    seamOverlayAction_ = make(tr("&Seam map"), "actionSeamOverlay", QKeySequence(tr("Ctrl+M")));
    seamOverlayAction_->setCheckable(true);
    seamOverlayAction_->setToolTip(tr("Where overlapping tiles disagreed at the last step (Ctrl+M)"));
    focusHistoryAction_ = make(tr("Go to &history"), "actionFocusHistory", QKeySequence(tr("Ctrl+H")));
    focusHistoryAction_->setToolTip(
        tr("Move the keyboard focus to the run history (arrows choose a run, Enter opens it, Del deletes it)"));
    shortcutsAction_ = make(tr("&Keyboard shortcuts"), "actionShortcuts", QKeySequence::HelpContents);
    aboutAction_ = make(tr("&About Tessera"), "actionAbout");
    aboutAction_->setMenuRole(QAction::AboutRole);
    pasteParametersAction_ = make(tr("&Paste parameters"), "actionPasteParameters", QKeySequence(tr("Ctrl+Shift+V")));
    pasteParametersAction_->setToolTip(
        tr("Apply generation settings copied as text (A1111's PNG Info, a run's Copy parameters) onto the settings "
           "shown (Ctrl+Shift+V)"));
    undoDeleteAction_ = make(tr("&Undo delete"), "actionUndoDelete", QKeySequence::Undo);
    undoDeleteAction_->setEnabled(false);
    beforeAfterAction_ = make(tr("&Before/after"), "actionBeforeAfter", QKeySequence(tr("Ctrl+D")));
    beforeAfterAction_->setCheckable(true);
    beforeAfterAction_->setEnabled(false);
    beforeAfterAction_->setToolTip(
        tr("The start image and the result side by side with a split you drag, at 1:1 "
           "(runs started from an image; Ctrl+D)"));

    connect(quitAction_, &QAction::triggered, this, &QWidget::close);
    connect(runAction_, &QAction::triggered, this, &MainWindow::startRun);
    connect(stopAction_, &QAction::triggered, this, &MainWindow::stopRun);
    connect(compareGraphsAction_, &QAction::triggered, this, &MainWindow::startGraphComparison);
    connect(upscaleOnlyAction_, &QAction::triggered, this, &MainWindow::startUpscaleOnly);
    connect(fitAction_, &QAction::triggered, canvas_, &TileCanvas::fitToView);
    connect(actualSizeAction_, &QAction::triggered, canvas_, &TileCanvas::showActualSize);
    connect(overlayAction_, &QAction::toggled, canvas_, &TileCanvas::setOverlayVisible);
    connect(blendOverlayAction_, &QAction::toggled, canvas_, &TileCanvas::setBlendOverlayVisible);
    connect(seamOverlayAction_, &QAction::toggled, canvas_, &TileCanvas::setSeamOverlayVisible);
    connect(aboutAction_, &QAction::triggered, this, &MainWindow::showAbout);
    connect(shortcutsAction_, &QAction::triggered, this, &MainWindow::showShortcuts);
    connect(focusHistoryAction_, &QAction::triggered, this, &MainWindow::focusHistory);
    connect(undoDeleteAction_, &QAction::triggered, this, &MainWindow::undoRemove);
    connect(pasteParametersAction_, &QAction::triggered, this, &MainWindow::pasteParameters);
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
    controlHints_ = new ControlHintView;
    chartTabs_->addTab(controlHints_, tr("ControlNet hint"));
    chartsDock_ = new QDockWidget(tr("Charts"), this);
    chartsDock_->setObjectName(QStringLiteral("chartsDock"));
    // The charts scroll where the dock is short: their own minimum height (three plots one above the
    // other) would otherwise be the dock's, and with the history under it make the window taller
    // than a 1366 x 768 screen and leave the history no room to grow.
    auto* chartsScroll = new QScrollArea;
    chartsScroll->setObjectName(QStringLiteral("chartsScroll"));
    chartsScroll->setWidget(chartTabs_);
    chartsScroll->setWidgetResizable(true);
    chartsScroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    chartsScroll->setFrameShape(QFrame::NoFrame);
    chartsDock_->setWidget(chartsScroll);
    charts_->setMinimumWidth(380);
    chartsScroll->setMinimumWidth(chartTabs_->minimumSizeHint().width() +
                                  chartsScroll->verticalScrollBar()->sizeHint().width());
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
    fileMenu_->addTo(file);
    file->addSeparator();
    file->addAction(quitAction_);

    QMenu* edit = menuBar()->addMenu(tr("&Edit"));
    edit->addAction(undoDeleteAction_);
    edit->addSeparator();
    edit->addAction(pasteParametersAction_);

    QMenu* run = menuBar()->addMenu(tr("&Run"));
    run->addAction(runAction_);
    run->addAction(stopAction_);
    run->addAction(upscaleOnlyAction_);
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
    view->addAction(focusHistoryAction_);
    view->addSeparator();
    view->addAction(overlayAction_);
    view->addAction(blendOverlayAction_);
    view->addAction(seamOverlayAction_);
    view->addAction(beforeAfterAction_);
    view->addAction(fitAction_);
    view->addAction(actualSizeAction_);

    QMenu* help = menuBar()->addMenu(tr("&Help"));
    help->addAction(shortcutsAction_);
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

void MainWindow::restoreSettings() {
    if (!settings_->problem().isEmpty()) {
        // Nothing was read from it; it stays as it is (saveSettings writes nothing there).
        qWarning().noquote() << "tessera:" << settings_->problem();
        setStatusText(settings_->problem(), true);
    }
    const QSettings& saved = settings_->values();
    RunConfig config;
    // The saved configuration is input like any other: bounded in size and depth before parsing.
    const std::string json = saved.value(kLastConfigKey).toString().toStdString();
    if (!json.empty()) {
        try {
            if (json.size() > input_limits::kJsonBytes)
                throw InputFileError("settings", "settings: the saved configuration is " + std::to_string(json.size()) +
                                                     " bytes; at most " + std::to_string(input_limits::kJsonBytes) +
                                                     " are allowed");
            const std::string where =
                shownPath(settings_->path().toStdString()) + " key " + kLastConfigKey.toStdString();
            config = runConfigFromJson(parseBoundedJson(json, "settings", where));
        } catch (const std::exception& e) {
            const QString why = QString::fromStdString(toValidUtf8(e.what()));
            qWarning().noquote() << "tessera: the saved settings are ignored, defaults used:" << why;
            setStatusText(tr("The saved settings could not be read (%1); using the defaults").arg(why), true);
        }
    }
    panel_->setConfig(config);
    panel_->controlNetGroup()->restoreUnits(
        controlNetUnitsFrom(saved.value(kControlNetUnitsKey).toString().toStdString()));
    panel_->setModelsFolder(saved.value(kModelsFolderKey).toString());
    panel_->setBatchCount(saved.value(kBatchCountKey, 1).toInt());
    panel_->setRecentModels(saved.value(kRecentModelsKey).toStringList());
    overlayAction_->setChecked(saved.value(kOverlayKey, true).toBool());
    blendOverlayAction_->setChecked(saved.value(kBlendOverlayKey, false).toBool());
    seamOverlayAction_->setChecked(saved.value(kSeamOverlayKey, false).toBool());
}

void MainWindow::saveSettings() {
    QSettings& values = settings_->values();
    // The prompts too where the model takes none: they are the person's text, kept for the next model.
    values.setValue(kLastConfigKey, QString::fromStdString(toJson(panel_->shownSettings()).dump()));
    values.setValue(kGeometryKey, saveGeometry());
    values.setValue(kStateKey, saveState());
    values.setValue(kOverlayKey, overlayAction_->isChecked());
    values.setValue(kBlendOverlayKey, blendOverlayAction_->isChecked());
    values.setValue(kSeamOverlayKey, seamOverlayAction_->isChecked());
    values.setValue(kModelsFolderKey, panel_->modelsFolder());
    values.setValue(kBatchCountKey, panel_->batchCount());
    values.setValue(kRecentModelsKey, panel_->recentModels());
    values.setValue(kChartTabKey, chartTabs_->currentIndex());
    values.setValue(kControlNetUnitsKey, controlNetUnitsText(panel_->controlNetGroup()->allUnits()));
    QString error;
    if (!settings_->save(&error)) {
        qWarning().noquote() << "tessera:" << error;
        setStatusText(error, true);
    }
}

void MainWindow::closeEvent(QCloseEvent* event) {
    panel_->modelCatalog().cancelHash();  // a checkpoint's hash is of no use once the window is gone
    saveSettings();
    QMainWindow::closeEvent(event);
}

void MainWindow::updateActions() {
    const bool valid = panel_->isValid();
    const bool running = runs_->isRunning();
    runAction_->setEnabled(valid && !running);
    runAction_->setToolTip(
        valid ? tr("Generate the image with the current settings (Ctrl+R)")
              : tr("Fix the marked settings first:\n%1").arg(panel_->problems().join(QLatin1Char('\n'))));
    stopAction_->setEnabled(running && !runs_->isStopping());
    const QString upscaleBlocker = panel_->upscaleOnlyBlocker();
    upscaleOnlyAction_->setEnabled(!running && upscaleBlocker.isEmpty());
    upscaleOnlyAction_->setToolTip(upscaleBlocker.isEmpty()
                                       ? tr("Run the upscale model alone over the start image, no diffusion "
                                            "(A1111's extras tab; Ctrl+U)")
                                       : tr("Upscale only: %1").arg(upscaleBlocker));
    const QString blocker = panel_->graphsUnavailableReason();
    compareGraphsAction_->setEnabled(valid && !running && blocker.isEmpty());
    if (!blocker.isEmpty())
        compareGraphsAction_->setToolTip(tr("Compare graphs is unavailable. %1").arg(blocker));
    else if (!valid)
        compareGraphsAction_->setToolTip(
            tr("Fix the marked settings first:\n%1").arg(panel_->problems().join(QLatin1Char('\n'))));
    else
        compareGraphsAction_->setToolTip(
            tr("Run the settings with graphs off and with graphs %1, interleaved "
               "(off, on, off, on); the first pair warms up and is discarded (Ctrl+Shift+R)")
                .arg(QString::fromStdString(std::string(
                    toString(panel_->config().graphs != GraphMode::Off ? panel_->config().graphs : GraphMode::Tile)))));
    fileMenu_->updateActions();
    beforeAfterAction_->setEnabled(!canvas_->beforeImage().isNull() && !canvas_->image().isNull());
    // The panel stays editable during a run: the run took a copy of the settings, and the
    // next Run uses whatever is shown.
}

void MainWindow::refreshPlan() {
    if (runs_->isRunning()) return;  // the canvas shows the plan of the run in flight
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
    if (config.tileShift == TileShift::Off) canvas_->setTileShift({});  // the grid where the settings put it
}

void MainWindow::setStatusText(const QString& text, bool error) { statusLine_->setStatusText(text, error); }

void MainWindow::showNote(const QString& text) { statusLine_->showNote(text); }

void MainWindow::showReadyProgress() { statusLine_->showReady(panel_->isValid(), panel_->config()); }

RunConfig MainWindow::runnableConfig() const {
    // What the run uses, and so what its record says: no strength or upscale from noise.
    RunConfig config = withoutUnusedStartImageSettings(panel_->config());
    // The engine loads models by absolute folder; the empty field means the default model.
    if (config.model.empty()) config.model = panel_->defaultModelFolder().toStdString();
    // random:sd15 names no file (core/models/sd/SdModel.h); anything else is a path (no file is read here).
    if (config.model.rfind(kRandomModelPrefix, 0) != 0)
        config.model = QFileInfo(QString::fromStdString(config.model)).absoluteFilePath().toStdString();
    return config;
}

void MainWindow::startRun() {
    if (runs_->isRunning() || !panel_->isValid()) return;
    const RunConfig config = runnableConfig();
    if (!panel_->config().model.empty()) panel_->noteModelUsed(QString::fromStdString(config.model));
    saveSettings();
    // The prompt's <lora:name> tags are also looked up in the window's models folder.
    runs_->setModelsFolder(panel_->modelsFolder());
    runs_->start(config);
    // A1111's batch count: the next images one after the other, seeds seed + 1, seed + 2, ...
    batchNext_ = config;
    batchCount_ = panel_->batchCount();
    batchLeft_ = batchCount_ - 1;
}

void MainWindow::continueBatch() {
    if (batchLeft_ <= 0 || runs_->isRunning()) return;
    --batchLeft_;
    ++batchNext_.seed;
    runs_->start(batchNext_);
    setStatusText(tr("Batch: image %1 of %2, seed %3")
                      .arg(batchCount_ - batchLeft_)
                      .arg(batchCount_)
                      .arg(QString::number(batchNext_.seed)));
}

void MainWindow::startGraphComparison() {
    if (runs_->isRunning() || !panel_->isValid()) return;
    const RunConfig base = runnableConfig();
    saveSettings();
    runs_->startGraphComparison(base);
}

void MainWindow::startUpscaleOnly() {
    if (runs_->isRunning() || !panel_->upscaleOnlyBlocker().isEmpty()) return;
    saveSettings();
    runs_->startUpscaleOnly(runnableConfig());
}

void MainWindow::stopRun() {
    batchLeft_ = 0;  // Stop ends the whole batch
    runs_->stop();
}

void MainWindow::showRun(const FinishedRun& run) {
    lastRun_ = run;
    controlHints_->showRun(run);
    showStartImage(run.startImage);
}

void MainWindow::showStartImage(const QImage& startImage) {
    canvas_->setBeforeImage(startImage);
    // With an upscale model the start image shown is resized alone (FinishedRun::startImage):
    // the tags say so, and what made the result.
    const RunRecord* record = lastRun_ && lastRun_->result ? &lastRun_->result->record : nullptr;
    if (record && record->upscaleModel) {
        const UpscaleModelRecord& u = *record->upscaleModel;
        const std::string filter = resizeFilterName(u.inputW, u.inputH, record->config.width, record->config.height);
        const QString name = QString::fromStdString(u.name);
        canvas_->setBeforeAfterLabels(filter.empty()
                                          ? tr("Before: start image")
                                          : tr("Before: start image, resized (%1)").arg(QString::fromStdString(filter)),
                                      u.alone ? tr("After: %1").arg(name) : tr("After: %1 + img2img").arg(name));
    } else {
        canvas_->setBeforeAfterLabels({}, {});
    }
    // After a run from an image, the before/after view is what one wants to see first.
    if (startImage.isNull()) beforeAfterAction_->setChecked(false);
    beforeAfterAction_->setEnabled(!startImage.isNull() && !canvas_->image().isNull());
    if (beforeAfterAction_->isEnabled()) {
        beforeAfterAction_->setChecked(true);
        canvas_->setBeforeAfterVisible(true);  // also when it was checked already: back to 1:1
    }
}

void MainWindow::showGraphComparison(const GraphComparison& c) {
    const GraphComparison::Run& a = c.runs[static_cast<std::size_t>(c.shownA)];
    const GraphComparison::Run& b = c.runs[static_cast<std::size_t>(c.shownB)];
    const QString note = c.note();
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

void MainWindow::restoreConfigurationFrom(const QString& path) { fileMenu_->restoreConfigurationFrom(path); }

void MainWindow::exportTo(ExportFormat format, const QString& path, Overwrite overwrite) {
    fileMenu_->exportTo(format, path, overwrite);
}

QAction* MainWindow::exportAction(ExportFormat format) const { return fileMenu_->exportAction(format); }

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
    const QList<QUrl> urls = event->mimeData()->urls();
    if (urls.size() == 1 && urls.front().isLocalFile() && isConfigurationFile(urls.front().toLocalFile()))
        event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event) {
    const QList<QUrl> urls = event->mimeData()->urls();
    if (urls.size() != 1 || !urls.front().isLocalFile()) return;
    event->acceptProposedAction();
    const QString path = urls.front().toLocalFile();
    if (isImageFile(path)) return askAboutDroppedImage(path);
    // Read off this thread; what it held, or why nothing, is told in the status line.
    fileMenu_->restoreConfigurationFrom(path);
}

void MainWindow::askAboutDroppedImage(const QString& path) {
    // A dropped image is a start image or a run's (or another tool's) settings: the person says
    // which. The question does not block: the answer comes as a click.
    if (QMessageBox* open = dropQuestion()) open->close();
    auto* box =
        new QMessageBox(QMessageBox::Question, tr("Dropped image"),
                        tr("What should %1 be used for?").arg(QFileInfo(path).fileName()), QMessageBox::Cancel, this);
    box->setObjectName(QStringLiteral("dropQuestion"));
    box->setInformativeText(
        tr("As the start image: the run starts from it (image-to-image, upscaling).\nIts parameters: the generation "
           "settings it holds (a Tessera run's settings, A1111's or ComfyUI's parameters) go into the panel."));
    QPushButton* start = box->addButton(tr("Use as start image"), QMessageBox::AcceptRole);
    start->setObjectName(QStringLiteral("dropAsStartImage"));
    QPushButton* parameters = box->addButton(tr("Use its parameters"), QMessageBox::ActionRole);
    parameters->setObjectName(QStringLiteral("dropAsParameters"));
    box->setDefaultButton(start);
    box->setAttribute(Qt::WA_DeleteOnClose);
    connect(box, &QMessageBox::buttonClicked, this, [this, box, start, parameters, path](QAbstractButton* clicked) {
        if (clicked == start) {
            panel_->setStartImage(path);
            setStatusText(tr("Start image: %1").arg(QFileInfo(path).fileName()));
        } else if (clicked == parameters) {
            fileMenu_->restoreConfigurationFrom(path);
        }
        box->close();
    });
    box->open();
}

QMessageBox* MainWindow::dropQuestion() const { return findChild<QMessageBox*>(QStringLiteral("dropQuestion")); }

void MainWindow::pasteParameters() {
    // The clipboard's text (no file is read): A1111's PNG Info text, a run's Copy parameters.
    fileMenu_->applyParametersText(QGuiApplication::clipboard()->text());
}

QAction* MainWindow::overlayAction(CanvasOverlay which) const {
    switch (which) {
        case CanvasOverlay::TileGrid:
            return overlayAction_;
        case CanvasOverlay::BlendWeights:
            return blendOverlayAction_;
        case CanvasOverlay::SeamMap:
            return seamOverlayAction_;
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
    const QString why = !entry               ? tr("Run %1 is not in the history").arg(id)
                        : runs_->isRunning() ? tr("A run is in progress; open run %1 when it has ended").arg(id)
                                             : QString();
    if (!why.isEmpty()) {
        if (error) *error = why;
        return false;
    }
    // The settings it asked for (its tile batch "auto", not what auto chose), on the window's
    // device: the record's backend and threads say where it ran, not a choice to make again.
    RunConfig config = configurationAsAsked(entry->record);
    const RunConfig shown = panel_->config();
    config.backend = shown.backend;
    config.threads = shown.threads;
    panel_->setConfig(config);
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
    if (runs_->isRunning()) {  // Run was pressed meanwhile: the run in flight owns the canvas
        emit historyRunOpened(id, false, tr("a run started before run %1 was read").arg(id));
        return;
    }
    lastRun_ = run;
    controlHints_->showRun(run);
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
    statusLine_->hideBars();
    statusLine_->showRanOn(record);
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
    const QString what = ids.isEmpty()     ? QString()
                         : ids.size() == 1 ? tr("run %1").arg(ids.front())
                                           : tr("%1 runs").arg(ids.size());
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
    CompareView* view =
        openCompareView({a->record, images.at(0), a->seamMean}, {b->record, images.at(1), b->seamMean}, {});
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

void MainWindow::focusHistory() {
    historyDock_->show();
    historyDock_->raise();
    QTableWidget* table = historyPanel_->table();
    table->setFocus(Qt::ShortcutFocusReason);
    // The keys act on the current row: the selected run, else the newest.
    if (table->rowCount() > 0 && historyPanel_->selectedIds().isEmpty()) table->selectRow(0);
}

QList<QPair<QString, QString>> MainWindow::keyboardShortcuts() const {
    QList<QPair<QString, QString>> list;
    // Every menu action with a key, in menu order, as the menus name them.
    for (QAction* menuAction : menuBar()->actions()) {
        const QMenu* menu = menuAction->menu();
        if (!menu) continue;
        const QString menuName = menuAction->text().remove(QLatin1Char('&'));
        for (QAction* action : menu->actions()) {
            if (action->shortcut().isEmpty()) continue;
            list.append({action->shortcut().toString(QKeySequence::NativeText),
                         menuName + QStringLiteral(" ▸ ") + action->text().remove(QLatin1Char('&'))});
        }
    }
    // The keys of one place, which no menu shows.
    list.append({tr("Enter"), tr("History: open the selected run")});
    list.append({QKeySequence(QKeySequence::Delete).toString(QKeySequence::NativeText),
                 tr("History: move the selected runs to the trash")});
    list.append({tr("Ctrl+Up / Ctrl+Down"), tr("Prompt: weight of the selection or the word at the cursor ±0.1")});
    list.append({tr("Tab / Shift+Tab"), tr("Settings: next / previous field")});
    list.append({tr("Esc"), tr("Compare window: close it")});
    return list;
}

void MainWindow::showShortcuts() {
    if (auto* open = findChild<QDialog*>(QStringLiteral("shortcutsDialog"))) {
        open->raise();
        return;
    }
    auto* dialog = new QDialog(this);
    dialog->setObjectName(QStringLiteral("shortcutsDialog"));
    dialog->setWindowTitle(tr("Keyboard shortcuts"));
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    const QList<QPair<QString, QString>> keys = keyboardShortcuts();
    auto* table = new QTableWidget(static_cast<int>(keys.size()), 2, dialog);
    table->setObjectName(QStringLiteral("shortcutsTable"));
    table->setHorizontalHeaderLabels({tr("Keys"), tr("Does")});
    table->verticalHeader()->setVisible(false);
    table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    table->setSelectionBehavior(QAbstractItemView::SelectRows);
    for (int row = 0; row < keys.size(); ++row) {
        table->setItem(row, 0, new QTableWidgetItem(keys.at(row).first));
        table->setItem(row, 1, new QTableWidgetItem(keys.at(row).second));
    }
    table->horizontalHeader()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
    table->horizontalHeader()->setSectionResizeMode(1, QHeaderView::Stretch);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, dialog);
    connect(buttons, &QDialogButtonBox::rejected, dialog, &QDialog::close);
    auto* layout = new QVBoxLayout(dialog);
    layout->addWidget(table);
    layout->addWidget(buttons);
    dialog->resize(560, 520);
    dialog->open();
}

void MainWindow::showAbout() {
    QString devices = tr("Looking for devices…");
    if (const std::optional<DeviceReport>& report = runs_->devices()) {
        devices = tr("CPU: %1<br>CUDA: %2")
                      .arg(QString::fromStdString(report->cpuDevice).toHtmlEscaped(),
                           report->cudaAvailable ? tr("available")
                                                 : QString::fromStdString(report->cudaReason).toHtmlEscaped());
    }
    QMessageBox::about(this, tr("About Tessera"),
                       tr("<h3>Tessera %1</h3>"
                          "<p>Tiled high-resolution diffusion workbench.</p>"
                          "<p>Qt %2 (built with %3)<br>%4</p>")
                           .arg(QStringLiteral(TESSERA_VERSION), QString::fromLatin1(qVersion()),
                                QStringLiteral(QT_VERSION_STR), devices));
}

}  // namespace tessera
