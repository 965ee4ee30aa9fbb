#include "ui/MainWindow.h"

#include <exception>
#include <fstream>
#include <sstream>

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDir>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QProgressBar>
#include <QScrollArea>
#include <QSettings>
#include <QStatusBar>
#include <QStyle>
#include <QToolBar>

#include <nlohmann/json.hpp>

#include "app/ModelLocator.h"
#include "app/PngIO.h"
#include "core/ImageOps.h"
#include "core/RunRecordIO.h"
#include "core/TilePlan.h"
#include "ui/ConfigPanel.h"
#include "ui/TileCanvas.h"
#include "ui/TimingCharts.h"

#ifndef TESSERA_VERSION
#define TESSERA_VERSION "unknown"
#endif

namespace tessera {

namespace {

const QString kLastConfigKey = QStringLiteral("run/lastConfig");
const QString kPresetDirKey = QStringLiteral("paths/presets");
const QString kExportDirKey = QStringLiteral("paths/export");
const QString kGeometryKey = QStringLiteral("window/geometry");
const QString kStateKey = QStringLiteral("window/state");
const QString kOverlayKey = QStringLiteral("view/tileOverlay");

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

QString presetsFolder() {
#ifdef TESSERA_RESOURCE_DIR
    const QString resources = QStringLiteral(TESSERA_RESOURCE_DIR "/presets");
    if (QFileInfo(resources).isDir()) return resources;
#endif
    return QDir::homePath();
}

}  // namespace

MainWindow::MainWindow(std::unique_ptr<QSettings> settings, QWidget* parent)
    : QMainWindow(parent), settings_(settings ? std::move(settings) : std::make_unique<QSettings>()) {
    setObjectName(QStringLiteral("mainWindow"));
    setWindowTitle(tr("Tessera"));
    setDockOptions(QMainWindow::AnimatedDocks | QMainWindow::AllowTabbedDocks);

    canvas_ = new TileCanvas;
    setCentralWidget(canvas_);
    buildActions();
    buildDocks();
    buildMenus();
    buildToolBar();
    buildStatusBar();

    panel_->setDefaultModelFolder(ModelLocator(QCoreApplication::applicationDirPath()).defaultModelFolder());
    connect(panel_, &ConfigPanel::configChanged, this, [this] {
        refreshPlan();
        updateActions();
    });
    connect(panel_, &ConfigPanel::validityChanged, this, &MainWindow::updateActions);

    progressTimer_.setInterval(kProgressIntervalMs);
    connect(&progressTimer_, &QTimer::timeout, this, &MainWindow::refreshProgress);

    restoreSettings();
    startWorker();
    refreshPlan();
    updateActions();
    resize(1500, 920);
    if (settings_->contains(kGeometryKey)) restoreGeometry(settings_->value(kGeometryKey).toByteArray());
    if (settings_->contains(kStateKey)) restoreState(settings_->value(kStateKey).toByteArray());
}

MainWindow::~MainWindow() {
    // Stop a run in flight at the next tile batch, then let the thread finish; the worker
    // (and its engine) is deleted on its own thread through QThread::finished.
    if (running_ && worker_) worker_->cancel(currentRunId_);
    workerThread_.quit();
    workerThread_.wait();
}

void MainWindow::startWorker() {
    registerRunMetaTypes();
    worker_ = new RunWorker;
    worker_->moveToThread(&workerThread_);
    workerThread_.setObjectName(QStringLiteral("tessera-engine"));
    connect(&workerThread_, &QThread::finished, worker_, &QObject::deleteLater);
    connect(worker_, &RunWorker::runStarted, this, &MainWindow::onRunStarted);
    connect(worker_, &RunWorker::tileBatchFinished, this, &MainWindow::onTileBatch);
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
    quitAction_ = make(tr("&Quit"), "actionQuit", QKeySequence::Quit);
    runAction_ = make(tr("Run"), "actionRun", QKeySequence(tr("Ctrl+R")));
    runAction_->setIcon(style()->standardIcon(QStyle::SP_MediaPlay));
    runAction_->setToolTip(tr("Generate the image with the current settings (Ctrl+R)"));
    stopAction_ = make(tr("Stop"), "actionStop", QKeySequence(Qt::Key_Escape));
    stopAction_->setIcon(style()->standardIcon(QStyle::SP_MediaStop));
    stopAction_->setToolTip(tr("Stop after the tile batch in progress (Esc)"));
    fitAction_ = make(tr("&Fit"), "actionFit", QKeySequence(tr("Ctrl+0")));
    actualSizeAction_ = make(tr("&Actual size (1:1)"), "actionActualSize", QKeySequence(tr("Ctrl+1")));
    overlayAction_ = make(tr("&Tile grid overlay"), "actionTileOverlay", QKeySequence(tr("Ctrl+G")));
    overlayAction_->setCheckable(true);
    overlayAction_->setChecked(true);
    aboutAction_ = make(tr("&About Tessera"), "actionAbout");
    aboutAction_->setMenuRole(QAction::AboutRole);

    connect(openPresetAction_, &QAction::triggered, this, &MainWindow::openPreset);
    connect(savePresetAction_, &QAction::triggered, this, &MainWindow::savePreset);
    connect(exportAction_, &QAction::triggered, this, &MainWindow::exportImage);
    connect(quitAction_, &QAction::triggered, this, &QWidget::close);
    connect(runAction_, &QAction::triggered, this, &MainWindow::startRun);
    connect(stopAction_, &QAction::triggered, this, &MainWindow::stopRun);
    connect(fitAction_, &QAction::triggered, canvas_, &TileCanvas::fitToView);
    connect(actualSizeAction_, &QAction::triggered, canvas_, &TileCanvas::showActualSize);
    connect(overlayAction_, &QAction::toggled, canvas_, &TileCanvas::setOverlayVisible);
    connect(aboutAction_, &QAction::triggered, this, &MainWindow::showAbout);
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
    chartsDock_ = new QDockWidget(tr("Timing"), this);
    chartsDock_->setObjectName(QStringLiteral("chartsDock"));
    chartsDock_->setWidget(charts_);
    charts_->setMinimumWidth(380);
    addDockWidget(Qt::RightDockWidgetArea, chartsDock_);
}

void MainWindow::buildMenus() {
    QMenu* file = menuBar()->addMenu(tr("&File"));
    file->addAction(openPresetAction_);
    file->addAction(savePresetAction_);
    file->addSeparator();
    file->addAction(exportAction_);
    file->addSeparator();
    file->addAction(quitAction_);

    QMenu* run = menuBar()->addMenu(tr("&Run"));
    run->addAction(runAction_);
    run->addAction(stopAction_);

    QMenu* view = menuBar()->addMenu(tr("&View"));
    QAction* configToggle = configDock_->toggleViewAction();
    configToggle->setObjectName(QStringLiteral("actionToggleConfig"));
    QAction* chartsToggle = chartsDock_->toggleViewAction();
    chartsToggle->setObjectName(QStringLiteral("actionToggleCharts"));
    view->addAction(configToggle);
    view->addAction(chartsToggle);
    view->addSeparator();
    view->addAction(overlayAction_);
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
    bar->addSeparator();
    bar->addAction(fitAction_);
    bar->addAction(actualSizeAction_);
    bar->addAction(overlayAction_);
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
    statusBar()->addWidget(statusText_, 1);
    statusBar()->addPermanentWidget(progressText_);
    statusBar()->addPermanentWidget(stepBar_);
    statusBar()->addPermanentWidget(tileBar_);
}

void MainWindow::restoreSettings() {
    RunConfig config;
    const QString json = settings_->value(kLastConfigKey).toString();
    if (!json.isEmpty()) {
        try {
            config = runConfigFromJson(nlohmann::json::parse(json.toStdString()));
        } catch (const std::exception& e) {
            setStatusText(tr("The saved settings could not be read (%1); using the defaults").arg(QString::fromUtf8(e.what())));
        }
    }
    panel_->setConfig(config);
    overlayAction_->setChecked(settings_->value(kOverlayKey, true).toBool());
}

void MainWindow::saveSettings() {
    settings_->setValue(kLastConfigKey, QString::fromStdString(toJson(panel_->config()).dump()));
    settings_->setValue(kGeometryKey, saveGeometry());
    settings_->setValue(kStateKey, saveState());
    settings_->setValue(kOverlayKey, overlayAction_->isChecked());
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
    exportAction_->setEnabled(lastRun_.has_value() && !lastRun_->image.isNull());
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
    // Keep the last image only while it still matches the planned size.
    if (!plan || canvas_->image().size() != QSize(plan->width(), plan->height())) canvas_->setImage({});
    canvas_->setPlan(std::move(plan));
}

void MainWindow::setStatusText(const QString& text, bool error) {
    statusText_->setText(text);
    statusText_->setToolTip(text);
    statusText_->setStyleSheet(error ? QStringLiteral("color: #c0392b;") : QString());
}

void MainWindow::startRun() {
    if (running_ || !panel_->isValid()) return;
    RunConfig config = panel_->config();
    // The engine loads models by absolute folder; the empty field means the default model.
    if (config.model.empty()) config.model = panel_->defaultModelFolder().toStdString();
    config.model = QFileInfo(QString::fromStdString(config.model)).absoluteFilePath().toStdString();
    saveSettings();

    runConfig_ = config;
    currentRunId_ = nextRunId_++;
    running_ = true;
    stopping_ = false;
    progress_ = Progress{};
    progress_.steps = config.steps;
    try {
        TilePlan plan = TilePlan::fromConfig(config);
        progress_.tiles = plan.count();
        canvas_->setPlan(std::move(plan));
    } catch (const std::exception&) {
        canvas_->setPlan(std::nullopt);
    }
    canvas_->setImage({});
    canvas_->setPlaceholderText(tr("Preparing…"));
    charts_->clear();
    runClock_.start();
    setStatusText(tr("Loading the model and preparing the backend…"));
    markProgressDirty();
    progressTimer_.start();
    updateActions();

    const quint64 runId = currentRunId_;
    RunWorker* worker = worker_;
    QMetaObject::invokeMethod(worker, [worker, config, runId] { worker->start(config, runId); }, Qt::QueuedConnection);
}

void MainWindow::stopRun() {
    if (!running_ || stopping_) return;
    stopping_ = true;
    // Direct call: the worker thread is busy inside the engine; cancel() is thread-safe.
    worker_->cancel(currentRunId_);
    setStatusText(tr("Stopping after the current tile batch…"));
    updateActions();
}

void MainWindow::markProgressDirty() { progressDirty_ = true; }

void MainWindow::refreshProgress() {
    if (!progressDirty_ && !running_) return;
    progressDirty_ = false;
    const Progress& p = progress_;
    // While running, the step in progress (1-based); afterwards, the steps completed.
    stepBar_->setRange(0, std::max(1, p.steps));
    stepBar_->setValue(std::min(running_ && p.started ? p.step + 1 : p.step, std::max(1, p.steps)));
    tileBar_->setRange(0, std::max(1, p.tiles));
    tileBar_->setValue(std::min(p.tilesDone, std::max(1, p.tiles)));
    if (!running_) return;

    const double elapsed = runClock_.isValid() ? runClock_.elapsed() / 1000.0 : 0.0;
    // The bars show step k/N and tile j/M; the text adds time.
    QString text = tr("%1 elapsed").arg(formatDuration(elapsed));
    if (!p.started) text = tr("preparing · ") + text;
    if (p.started && p.steps > 0 && p.tiles > 0) {
        const double done = (p.step + static_cast<double>(p.tilesDone) / p.tiles) / p.steps;
        const double sampling = samplingClock_.elapsed() / 1000.0;
        if (done > 0.0 && done < 1.0) text += tr(" · ETA %1").arg(formatDuration(sampling * (1.0 - done) / done));
    }
    progressText_->setText(text);
}

void MainWindow::onRunStarted(quint64 runId, const RunRecord& record) {
    if (runId != currentRunId_) return;
    progress_.started = true;
    progress_.tiles = record.tileCount;
    progress_.steps = record.config.steps;
    samplingClock_.start();
    canvas_->setPlaceholderText(tr("Step 1 of %1 — the image appears after each step").arg(record.config.steps));
    QString text = tr("Running on %1 — %2 (prepared in %3 s)")
                       .arg(QString::fromStdString(record.environment.backend).toUpper(),
                            QString::fromStdString(record.environment.device))
                       .arg(record.prepareMs / 1000.0, 0, 'f', 2);
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

void MainWindow::onPreview(quint64 runId, int, const QImage& image) {
    if (runId != currentRunId_) return;
    canvas_->setImage(image);
}

void MainWindow::onMemory(quint64 runId, const MemorySample& sample) {
    if (runId != currentRunId_) return;
    charts_->addMemory(sample, devices_ && devices_->cudaAvailable && runConfig_.backend != BackendKind::CPU);
}

void MainWindow::onMessage(quint64 runId, const QString& text) {
    if (runId != currentRunId_) return;
    statusBar()->showMessage(text, 8000);
}

void MainWindow::onRunFinished(quint64 runId, const FinishedRun& run) {
    if (runId != currentRunId_) return;
    running_ = false;
    canvas_->setPlaceholderText({});
    stopping_ = false;
    progressTimer_.stop();
    lastRun_ = run;
    const RunRecord& record = run.result->record;
    if (!run.image.isNull()) canvas_->setImage(run.image);
    canvas_->setActiveTiles({});
    progress_.step = record.stepsRun;
    progress_.tilesDone = record.status == "finished" ? progress_.tiles : progress_.tilesDone;
    progressDirty_ = true;
    refreshProgress();
    const bool cancelled = record.status == "cancelled";
    QString text = cancelled ? tr("Cancelled after %1 of %2 steps").arg(record.stepsRun).arg(record.config.steps)
                             : tr("Finished %1 steps, %2 tiles in %3 s (%4 ms/step)")
                                   .arg(record.stepsRun)
                                   .arg(record.tileCount)
                                   .arg(record.totalMs / 1000.0, 0, 'f', 2)
                                   .arg(record.stepsRun > 0 ? record.totalMs / record.stepsRun : 0.0, 0, 'f', 1);
    for (const std::string& message : record.messages) text += QStringLiteral(" · ") + QString::fromStdString(message);
    setStatusText(text);
    progressText_->setText(tr("%1 · %2 × %3 px · seed %4")
                               .arg(QString::fromStdString(record.environment.backend).toUpper())
                               .arg(record.config.width)
                               .arg(record.config.height)
                               .arg(record.config.seed));
    updateActions();
    refreshPlan();
    emit runEnded(!cancelled);
}

void MainWindow::onRunFailed(quint64 runId, const QString& error) {
    if (runId != currentRunId_) return;
    running_ = false;
    canvas_->setPlaceholderText({});
    stopping_ = false;
    progressTimer_.stop();
    canvas_->setActiveTiles({});
    progressText_->clear();
    setStatusText(tr("Run failed: %1").arg(error), true);
    updateActions();
    emit runEnded(false);
}

void MainWindow::onDevicesProbed(const DeviceReport& report) {
    devices_ = report;
    panel_->setDeviceReport(report);
}

void MainWindow::openPreset() {
    const QString path = QFileDialog::getOpenFileName(this, tr("Open preset"),
                                                      settings_->value(kPresetDirKey, presetsFolder()).toString(),
                                                      tr("Tessera presets (*.json);;All files (*)"));
    if (path.isEmpty()) return;
    settings_->setValue(kPresetDirKey, QFileInfo(path).absolutePath());
    try {
        std::ifstream file(path.toStdString());
        if (!file) throw std::runtime_error("the file cannot be opened");
        panel_->setConfig(runConfigFromJson(nlohmann::json::parse(file)));
        setStatusText(tr("Loaded preset %1").arg(QFileInfo(path).fileName()));
    } catch (const std::exception& e) {
        QMessageBox::warning(this, tr("Open preset"),
                             tr("%1 is not a usable preset:\n%2").arg(QDir::toNativeSeparators(path), QString::fromUtf8(e.what())));
    }
}

void MainWindow::savePreset() {
    const QString path = QFileDialog::getSaveFileName(this, tr("Save preset"),
                                                      settings_->value(kPresetDirKey, QDir::homePath()).toString() +
                                                          QStringLiteral("/preset.json"),
                                                      tr("Tessera presets (*.json)"));
    if (path.isEmpty()) return;
    settings_->setValue(kPresetDirKey, QFileInfo(path).absolutePath());
    try {
        writeFileAtomically(path.toStdString(), toJson(panel_->config()).dump(2) + "\n");
        setStatusText(tr("Saved preset %1").arg(QFileInfo(path).fileName()));
    } catch (const std::exception& e) {
        QMessageBox::warning(this, tr("Save preset"), QString::fromUtf8(e.what()));
    }
}

void MainWindow::exportImage() {
    if (!lastRun_ || !lastRun_->result) return;
    const RunRecord& record = lastRun_->result->record;
    const QString suggested = QStringLiteral("%1/tessera-%2-seed%3.png")
                                  .arg(settings_->value(kExportDirKey, QDir::homePath()).toString(),
                                       QString::fromStdString(record.runId))
                                  .arg(record.config.seed);
    const QString path = QFileDialog::getSaveFileName(this, tr("Export image"), suggested, tr("PNG images (*.png)"));
    if (path.isEmpty()) return;
    settings_->setValue(kExportDirKey, QFileInfo(path).absolutePath());
    QString error;
    if (exportImageTo(path, &error)) setStatusText(tr("Exported %1").arg(QDir::toNativeSeparators(path)));
    else QMessageBox::warning(this, tr("Export image"), error);
}

bool MainWindow::exportImageTo(const QString& path, QString* error) {
    try {
        if (!lastRun_ || !lastRun_->result || lastRun_->result->image.data.empty())
            throw std::runtime_error("there is no finished image to export yet");
        const RunRecord& record = lastRun_->result->record;
        // The PNG carries the A1111 "parameters" line and the full run manifest.
        writeRunPng(path.toStdString(), toRgb8(lastRun_->result->image), record.config, manifestJson(record).dump());
        return true;
    } catch (const std::exception& e) {
        if (error) *error = QDir::toNativeSeparators(path) + QStringLiteral(": ") + QString::fromUtf8(e.what());
        return false;
    }
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
