// The workbench window: opens, marks invalid settings and blocks Run, previews the cost of a
// tiling, and drives a real (tiny) CPU render through the RunWorker on its own thread.
#include <QAction>
#include <QComboBox>
#include <QDir>
#include <QDockWidget>
#include <QLabel>
#include <QMenuBar>
#include <QSettings>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QThread>
#include <QWheelEvent>
#include <QtTest>

#include "TinyRun.h"
#include "app/cli/EngineFactory.h"
#include "app/cli/PngIO.h"
#include "app/qt/RunWorker.h"
#include "ui/ConfigPanel.h"
#include "ui/MainWindow.h"
#include "ui/TileCanvas.h"
#include "ui/TimingCharts.h"

#include <qcustomplot.h>

using namespace tessera;

namespace {

using testing::haveTestModel;

// A run small enough for a test: 64 x 64, 2 steps, 9 tiles of 32 px.
RunConfig tinyConfig() { return testing::tinyRunConfig(7); }

}  // namespace

class TestMainWindow : public QObject {
    Q_OBJECT

private:
    QTemporaryDir scratch_;
    std::unique_ptr<SettingsFile> freshSettings() {
        return std::make_unique<SettingsFile>(
            scratch_.filePath(QStringLiteral("tessera-%1.ini").arg(++settingsCount_)));
    }
    int settingsCount_ = 0;

    template <typename T>
    static T* child(QObject* parent, const char* name) {
        T* found = parent->findChild<T*>(QString::fromLatin1(name));
        if (!found) qFatal("no child named %s", name);
        return found;
    }

private slots:
    void init() { testing::failOnGuiThreadIo(); }

    void initTestCase() {
        QVERIFY(scratch_.isValid());
        // Finished runs go into the run history: keep it out of the user's folder.
        QStandardPaths::setTestModeEnabled(true);
    }

    void cleanupTestCase() {
        QDir(QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/history"))
            .removeRecursively();
    }

    void windowOpensWithMenusAndAbout() {
        MainWindow window(freshSettings());
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QStringList menus;
        for (QAction* action : window.menuBar()->actions()) menus << action->text().remove(QLatin1Char('&'));
        QCOMPARE(menus, QStringList({"File", "Edit", "Run", "View", "Help"}));
        auto* about = window.findChild<QAction*>(QStringLiteral("actionAbout"));
        QVERIFY(about);
        QCOMPARE(about->text().remove(QLatin1Char('&')), QStringLiteral("About Tessera"));
        for (const char* name :
             {"actionOpenPreset", "actionSavePreset", "actionExportImage", "actionQuit", "actionToggleConfig",
              "actionToggleCharts", "actionTileOverlay", "actionFit", "actionActualSize"})
            QVERIFY2(window.findChild<QAction*>(QString::fromLatin1(name)), name);
        // Nothing rendered yet: nothing to export, nothing to stop.
        QVERIFY(!child<QAction>(&window, "actionExportImage")->isEnabled());
        QVERIFY(!window.stopAction()->isEnabled());
    }

    // A wheel over an unfocused editor scrolls the panel and leaves the editor's value (Blend
    // window Hann stays Hann); once focused, the wheel edits it.
    void wheelOverUnfocusedEditorLeavesItsValue() {
        MainWindow window(freshSettings());
        window.resize(1366, 768);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        ConfigPanel* panel = window.configPanel();
        auto* combo = child<QComboBox>(panel, "windowCombo");
        auto* spin = child<QSpinBox>(panel, "stepsSpin");
        const auto wheelDown = [](QWidget* w) {
            const QPointF at(w->width() / 2.0, w->height() / 2.0);
            QWheelEvent wheel(at, w->mapToGlobal(at), QPoint(), QPoint(0, -120), Qt::NoButton, Qt::NoModifier,
                              Qt::NoScrollPhase, false);
            QCoreApplication::sendEvent(w, &wheel);
        };
        QVERIFY(combo->count() > 1);
        combo->setCurrentIndex(0);
        const int steps = spin->value();
        window.setFocus();
        QVERIFY(!combo->hasFocus());
        wheelDown(combo);
        wheelDown(spin);
        QCOMPARE(combo->currentIndex(), 0);
        QCOMPARE(spin->value(), steps);
        QCOMPARE(combo->focusPolicy(), Qt::StrongFocus);

        // Focused (clicked or tabbed into), the wheel changes the value as usual.
        combo->setFocus();
        QTRY_VERIFY(combo->hasFocus());
        wheelDown(combo);
        QCOMPARE(combo->currentIndex(), 1);
        spin->setFocus();
        QTRY_VERIFY(spin->hasFocus());
        wheelDown(spin);
        QVERIFY(spin->value() != steps);
    }

    // CUDA chosen where it cannot run, or FP16 for a CPU run: the panel says what will really
    // compute before Run, with the probe's reason in words.
    void computeNoteSaysWhatWillRun() {
        ConfigPanel panel;
        auto* note = child<QLabel>(&panel, "computeNote");
        RunConfig c = tinyConfig();
        c.backend = BackendKind::CUDA;
        c.precision = Precision::FP16;
        panel.setConfig(c);
        DeviceReport none;
        none.cudaBuilt = true;
        none.cudaReason =
            "the NVIDIA driver is too old: it supports CUDA 12.4, this build needs CUDA 13.0 (a newer driver)";
        panel.setDeviceReport(none);
        // Without CUDA the precision shown follows what the CPU computes (FP32); a preset's FP16
        // put in afterwards stays, and the note says what will compute.
        QCOMPARE(panel.config().precision == Precision::FP32, true);
        panel.setConfig(c);
        QVERIFY(!note->isHidden());
        QVERIFY2(note->text().contains("CUDA cannot be used on this machine: the NVIDIA driver is too old"),
                 qPrintable(note->text()));
        QVERIFY2(note->text().contains("CPU engine computes in FP32"), qPrintable(note->text()));

        c.precision = Precision::FP32;  // CUDA still asked for: the first sentence stays
        panel.setConfig(c);
        QVERIFY(note->text().contains("CUDA cannot be used") && !note->text().contains("FP32;"));

        c.backend = BackendKind::CPU;  // as asked: nothing to say
        panel.setConfig(c);
        QVERIFY(note->isHidden());
        c.precision = Precision::BF16;
        panel.setConfig(c);
        QVERIFY2(note->text().startsWith("The CPU engine computes in FP32; BF16"), qPrintable(note->text()));

        DeviceReport gpu;
        gpu.cudaBuilt = gpu.cudaAvailable = true;
        panel.setDeviceReport(gpu);
        c.backend = BackendKind::CUDA;
        c.precision = Precision::FP16;
        panel.setConfig(c);
        QVERIFY(note->isHidden());
    }

    void invalidTileMarksFieldAndDisablesRun() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing: the model field would be invalid anyway");
        MainWindow window(freshSettings());
        ConfigPanel* panel = window.configPanel();
        RunConfig config = tinyConfig();
        config.tile = 64;
        config.overlapPx = 16;
        config.width = config.height = 256;
        QVERIFY(testing::setConfigAndWait(*panel, config));
        QVERIFY2(panel->isValid(), qPrintable(panel->problems().join('\n')));
        QVERIFY(window.runAction()->isEnabled());

        auto* tile = child<QSpinBox>(panel, "tileSpin");
        auto* tileError = child<QLabel>(panel, "tileError");
        QSignalSpy validity(panel, &ConfigPanel::validityChanged);
        tile->setValue(0);
        QVERIFY(!panel->isValid());
        QCOMPARE(validity.count(), 1);
        QCOMPARE(validity.at(0).at(0).toBool(), false);
        QVERIFY2(panel->problemFor("tile").startsWith("0 is not allowed"), qPrintable(panel->problemFor("tile")));
        QCOMPARE(tileError->text(), panel->problemFor("tile"));
        QVERIFY(tileError->isVisibleTo(panel));
        QVERIFY(tile->property("invalid").toBool());
        QVERIFY(!window.runAction()->isEnabled());
        QVERIFY(window.runAction()->toolTip().contains("tile: 0 is not allowed"));

        // Overlap as large as the tile: the overlap field is the one marked now.
        tile->setValue(64);
        auto* overlap = child<QSpinBox>(panel, "overlapSpin");
        overlap->setValue(64);
        QVERIFY(panel->problemFor("tile").isEmpty());
        QVERIFY(!tileError->isVisibleTo(panel));
        QVERIFY(!tile->property("invalid").toBool());
        QVERIFY2(panel->problemFor("overlap").contains("must be 0 to 63"), qPrintable(panel->problemFor("overlap")));
        QVERIFY(child<QLabel>(panel, "overlapError")->isVisibleTo(panel));
        QVERIFY(!window.runAction()->isEnabled());

        overlap->setValue(16);
        QVERIFY(panel->isValid());
        QVERIFY(window.runAction()->isEnabled());
        QCOMPARE(validity.last().at(0).toBool(), true);
        QCOMPARE(child<QLabel>(panel, "strideLabel")->text().left(5), QStringLiteral("48 px"));

        // Lanes: 0 reads "auto"; more than 8 is refused in the widget, naming the range.
        auto* lanes = child<QSpinBox>(panel, "lanesSpin");
        QCOMPARE(lanes->value(), 0);
        QCOMPARE(lanes->text(), QStringLiteral("auto"));
        lanes->setValue(9);
        QVERIFY(!panel->isValid());
        QVERIFY2(panel->problemFor("lanes").contains("must be 0 to 8"), qPrintable(panel->problemFor("lanes")));
        QVERIFY(child<QLabel>(panel, "lanesError")->isVisibleTo(panel));
        QVERIFY(!window.runAction()->isEnabled());
        lanes->setValue(3);
        QVERIFY(panel->isValid());
        QCOMPARE(panel->config().lanes, 3);

        // Tile batch: 0 (the default) reads "auto"; more than 1024 is refused, naming the range.
        auto* tileBatch = child<QSpinBox>(panel, "tileBatchSpin");
        tileBatch->setValue(0);
        QCOMPARE(tileBatch->text(), QStringLiteral("auto"));
        QVERIFY(panel->isValid());
        QCOMPARE(panel->config().tileBatch, 0);
        QVERIFY(tileBatch->toolTip().contains(QStringLiteral("0 = auto")));
        tileBatch->setValue(1025);
        QVERIFY(!panel->isValid());
        QVERIFY2(panel->problemFor("batch").contains("must be 0 to 1024"), qPrintable(panel->problemFor("batch")));
        tileBatch->setValue(5);
        QVERIFY(panel->isValid());
        QCOMPARE(panel->config().tileBatch, 5);

        // Tile shift: off by default; random (SpotDiffusion) reaches the configuration and back.
        auto* shift = child<QComboBox>(panel, "tileShiftCombo");
        QVERIFY(panel->config().tileShift == TileShift::Off);
        QVERIFY(shift->toolTip().contains(QStringLiteral("SpotDiffusion")));
        shift->setCurrentIndex(shift->findData(QStringLiteral("random")));
        QVERIFY(panel->config().tileShift == TileShift::Random);
        shift->setCurrentIndex(shift->findData(QStringLiteral("off")));
        QVERIFY(panel->config().tileShift == TileShift::Off);

        // Threads: 0 reads "all cores"; more than 1024 is refused, naming the range.
        auto* threads = child<QSpinBox>(panel, "threadsSpin");
        QCOMPARE(threads->value(), 0);
        QCOMPARE(threads->text(), QStringLiteral("all cores"));
        threads->setValue(2000);
        QVERIFY(!panel->isValid());
        QVERIFY2(panel->problemFor("threads").contains("must be 0 to 1024"), qPrintable(panel->problemFor("threads")));
        QVERIFY(child<QLabel>(panel, "threadsError")->isVisibleTo(panel));
        threads->setValue(6);
        QVERIFY(panel->isValid());
        QCOMPARE(panel->config().threads, 6);
    }

    // The CPU engine's threads: editable where a run goes to the CPU engine (asked for, or CUDA
    // unusable), disabled but kept where it goes to CUDA; a preset's count shows and round-trips.
    void threadsFollowWhereTheRunGoes() {
        ConfigPanel panel;
        auto* threads = child<QSpinBox>(&panel, "threadsSpin");
        RunConfig c = tinyConfig();
        c.backend = BackendKind::Auto;
        c.threads = 5;
        panel.setConfig(c);
        QCOMPARE(threads->value(), 5);
        DeviceReport gpu;
        gpu.cudaBuilt = gpu.cudaAvailable = true;
        panel.setDeviceReport(gpu);
        QVERIFY(!threads->isEnabled());
        QVERIFY2(threads->toolTip().endsWith("This run goes to the CUDA engine."), qPrintable(threads->toolTip()));
        QCOMPARE(panel.config().threads, 5);
        c.backend = BackendKind::CPU;
        panel.setConfig(c);
        QVERIFY(threads->isEnabled());
        QVERIFY2(threads->toolTip().startsWith("Threads the CPU engine computes on (all cores: "),
                 qPrintable(threads->toolTip()));
        DeviceReport none;
        none.cudaBuilt = true;
        none.cudaReason = "no CUDA device";
        panel.setDeviceReport(none);
        c.backend = BackendKind::CUDA;  // asked for, but CUDA cannot run: the CPU engine's threads apply
        panel.setConfig(c);
        QVERIFY(threads->isEnabled());
        threads->setValue(2);
        QCOMPARE(panel.config().threads, 2);
    }

    void missingModelFolderIsMarked() {
        MainWindow window(freshSettings());
        ConfigPanel* panel = window.configPanel();
        RunConfig config = tinyConfig();
        config.model = scratch_.filePath(QStringLiteral("no-such-model")).toStdString();
        QVERIFY(testing::setConfigAndWait(*panel, config));
        QVERIFY(!panel->isValid());
        QVERIFY2(panel->problemFor("model").contains("is not a folder"), qPrintable(panel->problemFor("model")));
        QVERIFY(!window.runAction()->isEnabled());
    }

    void costPreviewCountsTiles() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        MainWindow window(freshSettings());
        ConfigPanel* panel = window.configPanel();
        RunConfig config = tinyConfig();
        config.width = config.height = 256;
        config.tile = 64;
        config.overlapPx = 16;
        config.steps = 20;
        config.tileBatch = 4;
        QVERIFY(testing::setConfigAndWait(*panel, config));
        // Stride 48: columns at 0, 48, 96, 144, 192 -> 5 x 5 tiles; 25 * 64^2 / 256^2 = 1.5625.
        QCOMPARE(child<QLabel>(panel, "costTiles")->text(), QStringLiteral("25 (5 × 5) of 64×64 px"));
        QCOMPARE(child<QLabel>(panel, "costRedundancy")->text(), QStringLiteral("1.56×"));
        QCOMPARE(child<QLabel>(panel, "costEvaluations")->text(), QStringLiteral("25 per step, 500 total"));
        QCOMPARE(child<QLabel>(panel, "costBatches")->text(), QStringLiteral("7 (batch 4)"));

        // The same overlap as a percentage of the tile gives the same plan.
        child<QComboBox>(panel, "overlapUnitCombo")->setCurrentIndex(1);
        QCOMPARE(child<QSpinBox>(panel, "overlapSpin")->value(), 25);
        QVERIFY(panel->config().overlapFraction.has_value());
        QCOMPARE(panel->config().overlapPixels(), 16);
        QCOMPARE(child<QLabel>(panel, "costTiles")->text(), QStringLiteral("25 (5 × 5) of 64×64 px"));

        // No overlap: 4 x 4 tiles, no redundancy.
        child<QComboBox>(panel, "overlapUnitCombo")->setCurrentIndex(0);
        child<QSpinBox>(panel, "overlapSpin")->setValue(0);
        QCOMPARE(child<QLabel>(panel, "costTiles")->text(), QStringLiteral("16 (4 × 4) of 64×64 px"));
        QCOMPARE(child<QLabel>(panel, "costRedundancy")->text(), QStringLiteral("1.00×"));

        // The canvas shows the same plan.
        QCOMPARE(window.canvas()->size().isEmpty(), false);
    }

    void settingsPersistLastConfig() {
        const QString path = scratch_.filePath(QStringLiteral("persist.ini"));
        RunConfig config = tinyConfig();
        config.seed = 123456789;
        config.tile = 48;
        config.lanes = 3;
        {
            MainWindow window(std::make_unique<SettingsFile>(path));
            window.configPanel()->setConfig(config);
            window.close();
        }
        MainWindow again(std::make_unique<SettingsFile>(path));
        QCOMPARE(again.configPanel()->config().seed, config.seed);
        QCOMPARE(again.configPanel()->config().tile, 48);
        QCOMPARE(again.configPanel()->config().lanes, 3);
    }

    void windowSizeAndLayoutAreRemembered() {
        // Size, docks and the chart tab in front come back after a restart,
        // from the window's own settings file (here a throw-away one).
        const QString path = scratch_.filePath(QStringLiteral("layout.ini"));
        QSize chosen;
        int chartsWidth = 0;
        {
            MainWindow window(std::make_unique<SettingsFile>(path));
            window.show();
            QVERIFY(QTest::qWaitForWindowExposed(&window));
            window.resize(window.size() + QSize(157, 43));  // not the size a fresh window opens at
            auto* charts = window.findChild<QDockWidget*>(QStringLiteral("chartsDock"));
            window.resizeDocks({charts}, {charts->width() + 61}, Qt::Horizontal);
            auto* history = window.findChild<QDockWidget*>(QStringLiteral("historyDock"));
            QVERIFY(history && history->isVisible());
            history->close();
            window.chartTabs()->setCurrentIndex(1);
            QCoreApplication::processEvents();
            chosen = window.size();
            chartsWidth = charts->width();
            window.close();
        }
        QSettings saved(path, QSettings::IniFormat);
        QVERIFY(saved.contains(QStringLiteral("window/geometry")));
        QVERIFY(saved.contains(QStringLiteral("window/state")));
        MainWindow again(std::make_unique<SettingsFile>(path));
        again.show();
        QVERIFY(QTest::qWaitForWindowExposed(&again));
        QCOMPARE(again.size(), chosen);
        QCOMPARE(again.findChild<QDockWidget*>(QStringLiteral("chartsDock"))->width(), chartsWidth);
        QVERIFY(!again.findChild<QDockWidget*>(QStringLiteral("historyDock"))->isVisible());
        QVERIFY(again.findChild<QDockWidget*>(QStringLiteral("configDock"))->isVisible());
        QCOMPARE(again.chartTabs()->currentIndex(), 1);
    }

    // A run's note longer than the status bar's room is drawn cut with "…" inside the room left of
    // the progress fields (the whole in its tooltip), not cut at those fields without a sign (seen
    // in window-sd-1366x768.png once the text line gave its time and rows); after 8 s the status
    // text is back.
    void longNotesEndInAnEllipsis() {
        MainWindow window(freshSettings());
        window.resize(1366, 768);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        auto* progress = child<QLabel>(&window, "progressText");
        progress->setText(QStringLiteral("CPU FP32 · 256 × 192 px · seed 7"));
        const QString note = QStringLiteral(
                                 "text: 2 chunk(s) of 75 tokens, sd1 text encoder, clip skip 1, guidance 6 "
                                 "(conditional and unconditional); 4 ms, 4 of 4 encoder rows run ") +
                             QString(200, QChar('x'));
        window.showNote(note);
        auto* shown = child<QLabel>(&window, "statusNote");
        auto* status = child<QLabel>(&window, "statusText");
        QVERIFY(QTest::qWaitFor([&] { return shown->isVisible() && !status->isVisible(); }, 2000));
        QCOMPARE(shown->text(), note);
        QCOMPARE(shown->toolTip(), note);
        // Laid out left of the progress fields, narrower than the note: what it draws is cut with "…".
        QTest::qWait(50);
        QVERIFY2(shown->geometry().right() < progress->geometry().left(),
                 qPrintable(QStringLiteral("note ends at %1, progress starts at %2")
                                .arg(shown->geometry().right())
                                .arg(progress->geometry().left())));
        QVERIFY(shown->fontMetrics().horizontalAdvance(note) > shown->contentsRect().width());
        const QString drawn = shown->fontMetrics().elidedText(note, Qt::ElideRight, shown->contentsRect().width());
        QVERIFY2(drawn.endsWith(QChar(0x2026)), qPrintable(drawn));
        // The note goes after 8 s and the status text comes back.
        QVERIFY(QTest::qWaitFor([&] { return !shown->isVisible() && status->isVisible(); }, 12000));
    }

    void stepChartLegendEntriesAreNotCutShort() {
        // With GPU times and an earlier run the step chart has four legend entries; in a
        // 350-px dock they wrap rather than cut ("wall (hos", "host enqueu"): every entry gets
        // at least the width it asks for, inside the plot, and the summary wraps too.
        TimingCharts charts;
        charts.resize(340, 600);
        charts.show();
        QVERIFY(QTest::qWaitForWindowExposed(&charts));
        RunRecord earlier;
        earlier.runId = "earlier";
        for (int k = 0; k < 3; ++k) earlier.steps.push_back(StepTiming{k, 0.f, 9.0, 1.0, 10.0});
        charts.setEarlierRuns({&earlier});
        for (int k = 0; k < 3; ++k) charts.addStep(StepTiming{k, 0.f, 12.345, 2.0, 14.0});
        charts.flush();
        QCustomPlot* plot = charts.plot(TimingCharts::Chart::Steps);
        plot->replot(QCustomPlot::rpImmediateRefresh);
        // itemCount() counts the grid's cells, empty ones included once the entries wrap.
        QStringList names;
        for (int i = 0; i < plot->legend->itemCount(); ++i) {
            QCPAbstractLegendItem* item = plot->legend->item(i);
            if (!item) continue;
            auto* entry = qobject_cast<QCPPlottableLegendItem*>(item);
            QVERIFY(entry);
            names << entry->plottable()->name();
            QVERIFY2(item->outerRect().width() >= item->minimumOuterSizeHint().width(), qPrintable(names.last()));
            QVERIFY2(plot->rect().contains(item->outerRect()), qPrintable(names.last()));
        }
        QCOMPARE(names.size(), 4);  // wall (host), earlier runs, GPU, host enqueue
        auto* summary = charts.findChild<QLabel*>(QStringLiteral("chartSummary"));
        QVERIFY(summary && summary->text().contains(QStringLiteral("GPU mean")));
        QVERIFY(summary->wordWrap());
    }

    void chartsShowTheirWholeRangeWithLegendsOutside() {
        // After a run, in every chart tab, each series lies inside its axes'
        // ranges, no legend overlaps a plot area, and every axis in use has a label and tick
        // labels of a readable size.
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        MainWindow window(freshSettings());
        window.resize(1366, 768);
        window.show();
        QVERIFY(testing::runOnce(window, tinyConfig()));
        window.charts()->flush();
        int plotsChecked = 0, seriesChecked = 0;
        for (int tab = 0; tab < window.chartTabs()->count(); ++tab) {
            window.chartTabs()->setCurrentIndex(tab);
            QCoreApplication::processEvents();
            for (QCustomPlot* plot : window.chartTabs()->widget(tab)->findChildren<QCustomPlot*>()) {
                if (!plot->isVisible()) continue;
                plot->replot(QCustomPlot::rpImmediateRefresh);  // lays the plot out at its size
                ++plotsChecked;
                const QString name = plot->objectName();
                for (QCPAxisRect* rect : plot->axisRects()) {
                    if (plot->legend->visible() && plot->legend->itemCount() > 0)
                        QVERIFY2(!plot->legend->outerRect().intersects(rect->rect()), qPrintable(name));
                    for (QCPAxis* axis : rect->axes()) {
                        if (!axis->visible() || !axis->tickLabels()) continue;
                        if (axis->axisType() == QCPAxis::atLeft || axis->axisType() == QCPAxis::atBottom)
                            QVERIFY2(!axis->label().isEmpty() || rect->axis(QCPAxis::atBottom) == axis,
                                     qPrintable(name));
                        QVERIFY2(QFontInfo(axis->tickLabelFont()).pixelSize() >= 9, qPrintable(name));
                    }
                }
                for (int i = 0; i < plot->plottableCount(); ++i) {
                    QCPAbstractPlottable* series = plot->plottable(i);
                    if (!series->visible() || !qobject_cast<QCPGraph*>(series)) continue;
                    bool found = false;
                    const QCPRange keys = series->getKeyRange(found);
                    if (!found) continue;
                    const QCPRange values = series->getValueRange(found);
                    const QString what = name + QStringLiteral(" ") + series->name();
                    QVERIFY2(series->keyAxis()->range().contains(keys.lower) &&
                                 series->keyAxis()->range().contains(keys.upper),
                             qPrintable(what));
                    QVERIFY2(series->valueAxis()->range().contains(values.lower) &&
                                 series->valueAxis()->range().contains(values.upper),
                             qPrintable(what));
                    ++seriesChecked;
                }
            }
        }
        QVERIFY(plotsChecked >= 3);
        QVERIFY(seriesChecked >= 2);  // the step times and the memory over the run
    }

    void workerRendersTinyImage() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        QThread thread;
        auto* worker = new RunWorker;
        worker->moveToThread(&thread);
        connect(&thread, &QThread::finished, worker, &QObject::deleteLater);
        thread.start();

        QSignalSpy started(worker, &RunWorker::runStarted);
        QSignalSpy steps(worker, &RunWorker::stepFinished);
        QSignalSpy batches(worker, &RunWorker::tileBatchFinished);
        QSignalSpy previews(worker, &RunWorker::previewReady);
        QSignalSpy finished(worker, &RunWorker::runFinished);
        QSignalSpy failed(worker, &RunWorker::runFailed);

        const RunConfig config = tinyConfig();
        QMetaObject::invokeMethod(
            worker, [worker, config] { worker->start(config, 41); }, Qt::QueuedConnection);
        QVERIFY(QTest::qWaitFor([&] { return !finished.isEmpty() || !failed.isEmpty(); }, 300000));
        if (!failed.isEmpty()) QFAIL(qPrintable("runFailed: " + failed.at(0).at(1).toString()));

        QCOMPARE(started.count(), 1);
        QCOMPARE(started.at(0).at(0).value<quint64>(), quint64(41));
        QCOMPARE(started.at(0).at(1).value<RunRecord>().tileCount, 9);  // 0, 24, 32 per axis
        QCOMPARE(steps.count(), 2);
        const auto lastStep = steps.at(1).at(1).value<StepEvent>();
        QCOMPARE(lastStep.step, 1);
        QCOMPARE(lastStep.steps, 2);
        QVERIFY(lastStep.timing.wallMs > 0);
        // 9 tiles in batches of 2 = 5 batches a step; the last of each step is always forwarded.
        QVERIFY2(batches.count() >= 2, qPrintable(QString::number(batches.count())));
        QCOMPARE(batches.last().at(1).value<TileBatchEvent>().batchIndex, 4);
        QCOMPARE(batches.last().at(1).value<TileBatchEvent>().tileIds, std::vector<int>({8}));
        QVERIFY(previews.count() >= 1);
        QCOMPARE(previews.last().at(2).value<QImage>().size(), QSize(64, 64));

        QCOMPARE(finished.at(0).at(0).value<quint64>(), quint64(41));
        const auto run = finished.at(0).at(1).value<FinishedRun>();
        QVERIFY(run.result);
        QCOMPARE(QString::fromStdString(std::string(toString(run.result->record.status))), QStringLiteral("finished"));
        QCOMPARE(run.result->record.stepsRun, 2);
        QCOMPARE(run.image.size(), QSize(64, 64));
        QVERIFY(!run.seamMap.isNull());

        // A run cancelled before it starts ends at once, as cancelled, without any step.
        steps.clear();
        finished.clear();
        worker->cancel(42);
        QMetaObject::invokeMethod(
            worker, [worker, config] { worker->start(config, 42); }, Qt::QueuedConnection);
        QVERIFY(QTest::qWaitFor([&] { return !finished.isEmpty() || failed.count() > 0; }, 300000));
        QVERIFY(failed.isEmpty());
        const auto cancelled = finished.at(0).at(1).value<FinishedRun>();
        QCOMPARE(QString::fromStdString(std::string(toString(cancelled.result->record.status))),
                 QStringLiteral("cancelled"));
        QCOMPARE(cancelled.result->record.stepsRun, 0);
        QCOMPARE(steps.count(), 0);

        thread.quit();
        QVERIFY(thread.wait(30000));
    }

    void windowRunsAndShowsResult() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        MainWindow window(freshSettings());
        window.show();
        QVERIFY(testing::setConfigAndWait(*window.configPanel(), tinyConfig()));
        QVERIFY(window.runAction()->isEnabled());
        QSignalSpy ended(&window, &MainWindow::runEnded);
        window.runAction()->trigger();
        QVERIFY(window.isRunning());
        QVERIFY(!window.runAction()->isEnabled());  // one run at a time
        QVERIFY(window.stopAction()->isEnabled());
        QVERIFY(ended.wait(300000));
        QCOMPARE(ended.at(0).at(0).toBool(), true);
        QVERIFY(!window.isRunning());
        QVERIFY(window.lastRun());
        QCOMPARE(window.canvas()->image().size(), QSize(64, 64));
        QVERIFY(window.canvas()->activeTiles().empty());
        QCOMPARE(window.charts()->stepCount(), 2);
        QVERIFY(child<QAction>(&window, "actionExportImage")->isEnabled());
        QVERIFY(window.runAction()->isEnabled());
        QVERIFY2(child<QLabel>(&window, "statusText")->text().startsWith("Finished 2 steps, 9 tiles"),
                 qPrintable(child<QLabel>(&window, "statusText")->text()));

        // Export: the PNG holds the image and the A1111 parameters line of this run.
        const QString png = scratch_.filePath(QStringLiteral("export.png"));
        QString error;
        QVERIFY2(testing::exportAndWait(window, ExportFormat::ImagePng, png, MainWindow::Overwrite::Ask, &error),
                 qPrintable(error));
        const PngFile file = readPng(png.toStdString());
        QCOMPARE(file.image.width, 64);
        QCOMPARE(file.image.height, 64);
        QVERIFY2(QString::fromStdString(file.text("parameters")).contains("Seed: 7"), file.text("parameters").c_str());
        QVERIFY(!file.text("tessera-manifest").empty());
        QVERIFY(!testing::exportAndWait(window, ExportFormat::ImagePng,
                                        scratch_.filePath(QStringLiteral("no-such-dir/x.png")),
                                        MainWindow::Overwrite::Ask, &error));
        QVERIFY2(error.contains("no-such-dir"), qPrintable(error));
    }
};

QTEST_MAIN(TestMainWindow)
#include "tst_mainwindow.moc"
