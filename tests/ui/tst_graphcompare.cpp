// "Compare graphs" and what surrounds it, driven offscreen on the CPU backend: the interleaved
// off/on sequence (warm-up pair discarded, the last pair compared), Stop in the middle of the
// sequence, the graphs-versus-eager panel's numbers against the records, the per-tile heat map
// (grid of the plan before a run, filled live during it) and the progress text before a run.
//
// On the CPU engine "graphs on" runs eagerly: the record keeps the mode asked for in
// config.graphs, says "off" in graphs.mode and carries a message; the tests check exactly that,
// and that both modes give the same image.
#include <algorithm>
#include <fstream>
#include <iterator>

#include <QAction>
#include <QComboBox>
#include <QDir>
#include <QLabel>
#include <QProgressBar>
#include <QScopeGuard>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTabWidget>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QThread>
#include <QtTest>

#include <qcustomplot.h>

#include "TinyRun.h"
#include "app/qt/Exporters.h"
#include "app/qt/RunHistory.h"
#include "app/qt/RunWorker.h"
#include "ui/CompareView.h"
#include "ui/ConfigPanel.h"
#include "ui/GraphsPanel.h"
#include "ui/MainWindow.h"
#include "ui/TimingCharts.h"

using namespace tessera;

namespace {

using testing::haveTestModel;

// 64 x 64, 2 steps, 3 x 3 tiles of 32 px in batches of 2 (5 batches a step).
RunConfig tinyConfig() { return testing::tinyRunConfig(11, "gc"); }

std::string readAll(const QString& path) {
    std::ifstream file(path.toStdString(), std::ios::binary);
    return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

QString historyFolder() {
    return QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/history");
}

QString fixed(double value, int decimals) { return QString::number(value, 'f', decimals); }

}  // namespace

class TestGraphCompare : public QObject {
    Q_OBJECT

private:
    QTemporaryDir scratch_;
    int settingsCount_ = 0;
    std::unique_ptr<MainWindow> window_;  // holds the finished comparison for the panel tests

    std::unique_ptr<SettingsFile> freshSettings() {
        return std::make_unique<SettingsFile>(scratch_.filePath(QStringLiteral("gc-%1.ini").arg(++settingsCount_)));
    }

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
        QStandardPaths::setTestModeEnabled(true);
        QDir(historyFolder()).removeRecursively();
    }

    void cleanupTestCase() {
        window_.reset();
        QDir(historyFolder()).removeRecursively();
    }

    void statisticsHelpers() {
        QCOMPARE(medianOf({3, 1, 2}), 2.0);
        QCOMPARE(medianOf({4, 1, 3, 2}), 2.5);
        QCOMPARE(medianOf({}), -1.0);
        std::vector<double> twenty;
        for (int i = 20; i >= 1; --i) twenty.push_back(i);
        QCOMPARE(nearestRankPercentile(twenty, 95), 19.0);  // ceil(0.95 * 20) = 19th smallest
        QCOMPARE(nearestRankPercentile(twenty, 100), 20.0);
        QCOMPARE(nearestRankPercentile({5, 7}, 95), 7.0);
        QCOMPARE(nearestRankPercentile({}, 95), -1.0);
    }

    void workerSequenceSkipsCancelledRunsAndForwardsEveryBatch() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        QThread thread;
        auto* worker = new RunWorker;
        worker->moveToThread(&thread);
        connect(&thread, &QThread::finished, worker, &QObject::deleteLater);
        thread.start();
        // Also on a failed check: a QThread destroyed while running aborts the whole suite.
        const auto stopThread = qScopeGuard([&thread] {
            thread.quit();
            thread.wait();
        });
        QSignalSpy started(worker, &RunWorker::runStarted);
        QSignalSpy finished(worker, &RunWorker::runFinished);
        QSignalSpy timed(worker, &RunWorker::tileBatchesTimed);
        QSignalSpy batchEvents(worker, &RunWorker::tileBatchFinished);
        // Forward at most one batch event a minute (besides the last of each step), so the
        // thinning certainly drops some: their timings must still arrive.
        worker->setTileBatchSignalInterval(60000);
        QSignalSpy sequence(worker, &RunWorker::sequenceFinished);
        const std::vector<RunConfig> configs{tinyConfig(), tinyConfig()};

        // Cancelling the last id before the sequence starts: nothing runs at all.
        worker->cancel(102);
        QMetaObject::invokeMethod(
            worker, [worker, configs] { worker->startSequence(configs, 101); }, Qt::QueuedConnection);
        QVERIFY(
            QTest::qWaitFor([&] { return !sequence.isEmpty(); }, 300000));  // not wait(): the signal may come before it
        QCOMPARE(sequence.at(0).at(0).value<quint64>(), quint64(101));
        QCOMPARE(sequence.at(0).at(1).toInt(), 0);
        QCOMPARE(sequence.at(0).at(2).toBool(), false);
        QCOMPARE(started.count(), 0);
        QCOMPARE(finished.count(), 0);

        // A fresh sequence runs both, in order, and every tile batch's timing reaches the GUI
        // thread, even where tileBatchFinished is thinned out.
        sequence.clear();
        QMetaObject::invokeMethod(
            worker, [worker, configs] { worker->startSequence(configs, 103); }, Qt::QueuedConnection);
        QVERIFY(
            QTest::qWaitFor([&] { return !sequence.isEmpty(); }, 300000));  // not wait(): the signal may come before it
        QCOMPARE(sequence.at(0).at(1).toInt(), 2);
        QCOMPARE(sequence.at(0).at(2).toBool(), true);
        QCOMPARE(finished.count(), 2);
        QCOMPARE(finished.at(0).at(0).value<quint64>(), quint64(103));
        QCOMPARE(finished.at(1).at(0).value<quint64>(), quint64(104));
        const RunRecord& record = finished.at(0).at(1).value<FinishedRun>().result->record;
        std::vector<TileBatchTiming> forwarded;
        for (const QList<QVariant>& signal : timed)
            if (signal.at(0).value<quint64>() == 103)
                for (const TileBatchTiming& t : signal.at(1).value<std::vector<TileBatchTiming>>())
                    forwarded.push_back(t);
        QCOMPARE(forwarded.size(), record.batches.size());
        QCOMPARE(forwarded.size(), std::size_t(10));
        int events = 0;
        for (const QList<QVariant>& signal : batchEvents) events += signal.at(0).value<quint64>() == 103;
        QCOMPARE(events, 3);  // the first batch, and the last of each of the 2 steps
        for (std::size_t i = 0; i < forwarded.size(); ++i) {
            QCOMPARE(forwarded[i].step, record.batches[i].step);
            QCOMPARE(forwarded[i].tileIds, record.batches[i].tileIds);
            QCOMPARE(forwarded[i].hostMs, record.batches[i].hostMs);
        }
    }

    void progressTextBeforeRun() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        MainWindow window(freshSettings());
        QVERIFY(testing::setConfigAndWait(*window.configPanel(), tinyConfig()));
        auto* text = child<QLabel>(&window, "progressText");
        // 9 tiles in batches of 2: 5 batches per step. Not "step 0/1".
        QCOMPARE(text->text(), QStringLiteral("ready: 2 steps × 5 tile batches (9 tiles, batch 2)"));
        QVERIFY(child<QProgressBar>(&window, "stepProgress")->isHidden());
        QVERIFY(child<QProgressBar>(&window, "tileProgress")->isHidden());

        RunConfig config = tinyConfig();
        config.width = config.height = 256;
        config.tile = 64;
        config.overlapPx = 16;
        config.steps = 20;
        config.tileBatch = 4;
        QVERIFY(testing::setConfigAndWait(*window.configPanel(), config));
        QCOMPARE(text->text(), QStringLiteral("ready: 20 steps × 7 tile batches (25 tiles, batch 4)"));
        // Auto (0): the 25 tiles in one call per step, and the line says it was auto.
        config.tileBatch = 0;
        QVERIFY(testing::setConfigAndWait(*window.configPanel(), config));
        QCOMPARE(text->text(), QStringLiteral("ready: 20 steps × 1 tile batches (25 tiles, batch 25, auto)"));
        config.width = 1024;  // 21 x 5 tiles: 4 calls of at most 32, spread evenly
        QVERIFY(testing::setConfigAndWait(*window.configPanel(), config));
        QCOMPARE(text->text(), QStringLiteral("ready: 20 steps × 4 tile batches (105 tiles, batch 27, auto)"));

        child<QSpinBox>(window.configPanel(), "tileSpin")->setValue(0);
        QCOMPARE(text->text(), QStringLiteral("not ready: fix the marked settings"));
    }

    void heatMapMatchesPlanBeforeAndDuringRun() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        MainWindow window(freshSettings());
        window.show();
        TimingCharts* charts = window.charts();
        QCustomPlot* tiles = charts->plot(TimingCharts::Chart::Tiles);
        auto* map = qobject_cast<QCPColorMap*>(tiles->plottable(0));
        QVERIFY(map);

        RunConfig config = tinyConfig();
        config.width = config.height = 256;
        config.tile = 64;
        config.overlapPx = 16;
        QVERIFY(testing::setConfigAndWait(*window.configPanel(), config));
        // Stride 48: 5 x 5 tiles, and the heat map says so before any run.
        QCOMPARE(charts->tileGridSize(), QSize(5, 5));
        QCOMPARE(map->data()->keySize(), 5);
        QCOMPARE(map->data()->valueSize(), 5);
        QCOMPARE(tiles->xAxis->range().lower, -0.5);
        QCOMPARE(tiles->xAxis->range().upper, 4.5);
        QCOMPARE(tiles->yAxis->range().upper, 4.5);
        QCOMPARE(charts->timedTileCount(), 0);
        QVERIFY2(charts->tilePlaceholderText().startsWith(QStringLiteral("5 × 5 tiles")),
                 qPrintable(charts->tilePlaceholderText()));

        config.overlapPx = 0;
        QVERIFY(testing::setConfigAndWait(*window.configPanel(), config));
        QCOMPARE(charts->tileGridSize(), QSize(4, 4));
        QCOMPARE(map->data()->keySize(), 4);
        QCOMPARE(tiles->xAxis->range().upper, 3.5);

        // Live: the first update during the run holds only the first batch (tiles 0 and 1).
        QVERIFY(testing::setConfigAndWait(*window.configPanel(), tinyConfig()));
        QCOMPARE(charts->tileGridSize(), QSize(3, 3));
        struct Live {
            bool seen = false, running = false;
            int timed = 0;
            double tile0 = -2, tile1 = -2, tile2 = -2;
        } live;
        connect(charts, &TimingCharts::tileTimesChanged, this, [&] {
            if (live.seen || charts->timedTileCount() == 0) return;
            live = {true,
                    window.isRunning(),
                    charts->timedTileCount(),
                    charts->tileTimeMs(0),
                    charts->tileTimeMs(1),
                    charts->tileTimeMs(2)};
        });
        QSignalSpy ended(&window, &MainWindow::runEnded);
        window.runAction()->trigger();
        QVERIFY(!child<QProgressBar>(&window, "stepProgress")->isHidden());
        QVERIFY(ended.wait(300000));
        QCOMPARE(ended.at(0).at(0).toBool(), true);
        const RunRecord& record = window.lastRun()->result->record;
        QVERIFY(live.seen);
        QVERIFY(live.running);
        QCOMPARE(live.timed, 2);
        QCOMPARE(record.batches.front().tileIds, std::vector<int>({0, 1}));
        QCOMPARE(live.tile0, record.batches.front().hostMs / 2);
        QCOMPARE(live.tile1, record.batches.front().hostMs / 2);
        QCOMPARE(live.tile2, -1.0);

        // After the run: the same grid, every tile timed, each the mean of its batches' share.
        QCOMPARE(charts->tileGridSize(), QSize(3, 3));
        QCOMPARE(map->data()->keySize(), 3);
        QCOMPARE(charts->timedTileCount(), 9);
        for (int id = 0; id < 9; ++id) {
            double sum = 0;
            int n = 0;
            for (const TileBatchTiming& batch : record.batches)
                if (std::find(batch.tileIds.begin(), batch.tileIds.end(), id) != batch.tileIds.end()) {
                    sum += batch.hostMs / static_cast<double>(batch.tileIds.size());
                    ++n;
                }
            QCOMPARE(n, 2);  // once per step
            QVERIFY2(std::abs(charts->tileTimeMs(id) - sum / n) < 1e-9, qPrintable(QString::number(id)));
        }
        QVERIFY(charts->tilePlaceholderText().isEmpty());
        // The progress bars keep the finished run's state; the settings are unchanged.
        QCOMPARE(child<QProgressBar>(&window, "stepProgress")->value(), 2);
        QCOMPARE(child<QProgressBar>(&window, "tileProgress")->value(), 9);

        // Other settings with other tiles: their empty grid, not the old times.
        config = tinyConfig();
        config.overlapPx = 0;  // 2 x 2 tiles
        QVERIFY(testing::setConfigAndWait(*window.configPanel(), config));
        QCOMPARE(charts->tileGridSize(), QSize(2, 2));
        QCOMPARE(charts->timedTileCount(), 0);
        QVERIFY(child<QLabel>(&window, "progressText")
                    ->text()
                    .startsWith(QStringLiteral("ready: 2 steps × 2 tile batches")));
    }

    void compareGraphsDisabledWithoutUsableGraphs() {
        MainWindow window(freshSettings());
        ConfigPanel* panel = window.configPanel();
        QAction* action = window.compareGraphsAction();
        QVERIFY(action);
        QCOMPARE(action->objectName(), QStringLiteral("actionCompareGraphs"));
        // In the Run menu, beside Run and Stop.
        QVERIFY(window.findChild<QAction*>(QStringLiteral("actionCompareGraphs")));
        // Wait for the device probe (on the worker thread).
        QTRY_VERIFY_WITH_TIMEOUT(!panel->graphsUnavailableReason().startsWith(QStringLiteral("Looking")), 30000);
        if (panel->graphsUnavailableReason().isEmpty()) {
            // A usable CUDA device: choosing the CPU backend must disable graphs and the button.
            RunConfig config = tinyConfig();
            config.backend = BackendKind::CPU;
            QVERIFY(testing::setConfigAndWait(*panel, config));
        }
        const QString reason = panel->graphsUnavailableReason();
        QVERIFY(!reason.isEmpty());
        QVERIFY(!action->isEnabled());
        QVERIFY2(action->toolTip().contains(reason), qPrintable(action->toolTip()));
        QVERIFY2(action->toolTip().startsWith(QStringLiteral("Compare graphs is unavailable")),
                 qPrintable(action->toolTip()));
        QCOMPARE(child<QLabel>(panel, "graphsReason")->text(), reason);
        QVERIFY(!child<QComboBox>(panel, "graphModeCombo")->isEnabled());
    }

    void compareGraphsSequenceOnCpu() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        window_ = std::make_unique<MainWindow>(freshSettings());
        window_->resize(1400, 900);
        window_->show();
        QVERIFY(QTest::qWaitForWindowExposed(window_.get()));
        QVERIFY(testing::setConfigAndWait(*window_->configPanel(),
                                          tinyConfig()));  // graphs off in the settings: "on" is tile
        QVERIFY(testing::waitForHistory(*window_));
        const std::size_t historyBefore = window_->history().entries().size();

        QSignalSpy started(window_.get(), &MainWindow::graphComparisonRunStarted);
        QSignalSpy ended(window_.get(), &MainWindow::graphComparisonEnded);
        QSignalSpy runEnded(window_.get(), &MainWindow::runEnded);
        window_->startGraphComparison();
        QVERIFY(window_->isRunning());
        QVERIFY(window_->isComparingGraphs());
        QVERIFY(!window_->runAction()->isEnabled());
        QVERIFY(window_->stopAction()->isEnabled());
        QVERIFY(ended.wait(600000));
        QCOMPARE(ended.count(), 1);
        QCOMPARE(ended.at(0).at(0).toBool(), true);
        QCOMPARE(runEnded.count(), 0);  // one sequence, not four single runs
        QVERIFY(!window_->isRunning());
        QVERIFY(window_->runAction()->isEnabled());
        QCOMPARE(started.count(), 4);
        for (int i = 0; i < 4; ++i) {
            QCOMPARE(started.at(i).at(0).toInt(), i);
            QCOMPARE(started.at(i).at(1).toInt(), 4);
        }

        const GraphComparison& c = *window_->graphComparison();
        QVERIFY(c.completed);
        QCOMPARE(std::string(toString(c.onMode)), std::string("tile"));
        QCOMPARE(c.runs.size(), std::size_t(4));
        const GraphMode order[] = {GraphMode::Off, GraphMode::Tile, GraphMode::Off, GraphMode::Tile};
        const char* labels[] = {"gc · graphs off · pair 1 (warm-up)", "gc · graphs tile · pair 1 (warm-up)",
                                "gc · graphs off · pair 2", "gc · graphs tile · pair 2"};
        QStringList ids;
        for (std::size_t i = 0; i < 4; ++i) {
            const GraphComparison::Run& run = c.runs[i];
            QVERIFY(run.result);
            const RunRecord& record = run.result->record;
            QCOMPARE(std::string(toString(record.status)), std::string("finished"));
            QCOMPARE(std::string(toString(record.config.graphs)), std::string(toString(order[i])));
            QCOMPARE(record.config.label, std::string(labels[i]));
            QCOMPARE(run.warmUp, i < 2);
            QCOMPARE(run.pair, i < 2 ? 1 : 2);
            // CPU honesty: the mode asked for is recorded, the effective mode is off, and why.
            QCOMPARE(record.environment.backend, std::string("cpu"));
            QCOMPARE(record.graphs.mode, std::string("off"));
            QCOMPARE(record.graphs.captures, 0);
            const bool explained =
                std::any_of(record.messages.begin(), record.messages.end(),
                            [](const std::string& m) { return m.find("no CUDA graphs") != std::string::npos; });
            QCOMPARE(explained, order[i] == GraphMode::Tile);
            // Same kernels either way: the same image.
            QCOMPARE(record.imageSha256, c.runs[0].result->record.imageSha256);
            ids << QString::fromStdString(record.runId);
        }
        ids.removeDuplicates();
        QCOMPARE(ids.size(), 4);
        // The last pair is compared: off as A, tile as B.
        QCOMPARE(c.shownA, 2);
        QCOMPARE(c.shownB, 3);
        QVERIFY2(c.choice.contains(QStringLiteral("last pair")) && c.choice.contains(QStringLiteral("warm-up")),
                 qPrintable(c.choice));

        // Only the kept pair goes into the history.
        QVERIFY(testing::waitForHistory(*window_));
        const auto& entries = window_->history().entries();
        QCOMPARE(entries.size(), historyBefore + 2);
        QCOMPARE(entries[entries.size() - 2].id(), ids.at(2));
        QCOMPARE(entries.back().id(), ids.at(3));

        // The compare view: A and B of the last pair, the reason in its note, no pixel difference.
        CompareView* view = window_->compareView();
        QVERIFY(view);
        QCOMPARE(view->deltas().totalMsA, c.runs[2].result->record.totalMs);
        QCOMPARE(view->deltas().totalMsB, c.runs[3].result->record.totalMs);
        QCOMPARE(view->deltas().maxPixelDiff, 0);
        QVERIFY2(view->note().contains(QStringLiteral("pair 1 (warm-up, discarded)")), qPrintable(view->note()));
        QVERIFY2(view->note().contains(QStringLiteral("last pair")), qPrintable(view->note()));
        QVERIFY(view->note().contains(fixed(c.runs[0].result->record.totalMs / 1000.0, 3)));

        // The graphs panel shows the same two runs, in front.
        QCOMPARE(window_->chartTabs()->currentWidget(), static_cast<QWidget*>(window_->graphsPanel()));
        QCOMPARE(window_->graphsPanel()->runIdA(), ids.at(2));
        QCOMPARE(window_->graphsPanel()->runIdB(), ids.at(3));
        QVERIFY2(child<QLabel>(window_.get(), "statusText")
                     ->text()
                     .startsWith(QStringLiteral("Compare graphs: graphs tile took")),
                 qPrintable(child<QLabel>(window_.get(), "statusText")->text()));
    }

    void graphsPanelNumbersEqualRecords() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        QVERIFY(window_ && window_->graphComparison() && window_->graphComparison()->completed);
        const GraphComparison& c = *window_->graphComparison();
        const RunRecord& a = c.runs[2].result->record;
        const RunRecord& b = c.runs[3].result->record;
        GraphsPanel* panel = window_->graphsPanel();
        QVERIFY(panel->hasRuns());

        // Independent numbers: 2 steps, no device time on CPU -> wall times; the median of two
        // is their mean, the nearest-rank p95 of two is the larger.
        auto check = [&](const RunRecord& r, GraphsPanel::Side side, int column) {
            QCOMPARE(r.steps.size(), std::size_t(2));
            QVERIFY(r.steps[0].gpuMs < 0);
            const double median = (r.steps[0].wallMs + r.steps[1].wallMs) / 2;
            const double p95 = std::max(r.steps[0].wallMs, r.steps[1].wallMs);
            const double enqueue = (r.steps[0].hostEnqueueMs + r.steps[1].hostEnqueueMs) / 2;
            double peak = -1;
            for (const MemorySample& m : r.memory) peak = std::max(peak, m.usedMiB);
            QVERIFY(peak > 0);
            QCOMPARE(r.peakDeviceMiB, -1.0);
            QCOMPARE(panel->barValue(side, GraphsPanel::TotalTime), r.totalMs / 1000.0);
            QCOMPARE(panel->barValue(side, GraphsPanel::StepMedian), median);
            QCOMPARE(panel->barValue(side, GraphsPanel::StepP95), p95);
            QCOMPARE(panel->barValue(side, GraphsPanel::HostEnqueue), enqueue);
            QCOMPARE(panel->barValue(side, GraphsPanel::GraphMemory), r.graphs.graphMemMiB);
            QCOMPARE(panel->barValue(side, GraphsPanel::PeakMemory), peak);
            QTableWidget* table = panel->table();
            QCOMPARE(table->item(GraphsPanel::TotalTime, column)->text(), fixed(r.totalMs / 1000.0, 3));
            QCOMPARE(table->item(GraphsPanel::StepMedian, column)->text(), fixed(median, 2));
            QCOMPARE(table->item(GraphsPanel::StepP95, column)->text(), fixed(p95, 2));
            QCOMPARE(table->item(GraphsPanel::HostEnqueue, column)->text(), fixed(enqueue, 2));
            QCOMPARE(table->item(GraphsPanel::GraphMemory, column)->text(), fixed(r.graphs.graphMemMiB, 1));
            QCOMPARE(table->item(GraphsPanel::PeakMemory, column)->text(), fixed(peak, 1));
        };
        check(a, GraphsPanel::SideA, 0);
        check(b, GraphsPanel::SideB, 1);
        QTableWidget* table = panel->table();
        QCOMPARE(table->item(GraphsPanel::TotalTime, 2)->text(),
                 QStringLiteral("%1×").arg(b.totalMs / a.totalMs, 0, 'f', 2));
        // The labels say what was measured: wall time and host memory on the CPU.
        QCOMPARE(table->verticalHeaderItem(GraphsPanel::StepMedian)->text(), QStringLiteral("Step median, wall (ms)"));
        QCOMPARE(table->verticalHeaderItem(GraphsPanel::PeakMemory)->text(),
                 QStringLiteral("Peak memory, host RSS (MiB)"));
        QCOMPARE(table->horizontalHeaderItem(0)->text(), QStringLiteral("A: off"));
        QCOMPARE(table->horizontalHeaderItem(1)->text(), QStringLiteral("B: tile (ran off)"));
        QVERIFY2(panel->caption()->text().contains(QStringLiteral("Neither run used CUDA graphs")),
                 qPrintable(panel->caption()->text()));

        // Hovering a bar names it and gives its value; away from the bars, nothing.
        panel->plot()->replot(QCustomPlot::rpImmediateRefresh);
        const QPointF at = panel->barCentre(GraphsPanel::SideB, GraphsPanel::StepP95);
        QVERIFY(at.x() >= 0);
        const QString text = panel->hoverText(at);
        QVERIFY2(text.startsWith(QStringLiteral("B: graphs tile (ran off) — Step p95, wall: ")) &&
                     text.contains(fixed(panel->barValue(GraphsPanel::SideB, GraphsPanel::StepP95), 2)),
                 qPrintable(text));
        QVERIFY(panel->hoverText(QPointF(-50, -50)).isEmpty());

        const QString png = scratch_.filePath(QStringLiteral("graphs.png")),
                      pdf = scratch_.filePath(QStringLiteral("graphs.pdf"));
        QVERIFY(panel->saveChart(png));
        QVERIFY(panel->saveChart(pdf));
        QCOMPARE(readAll(png).substr(1, 3), std::string("PNG"));
        QCOMPARE(readAll(pdf).substr(0, 4), std::string("%PDF"));

        // Picking two runs in the history puts them in the panel as well (older as A).
        const auto& entries = window_->history().entries();
        QString error;
        QVERIFY2(testing::compareAndWait(*window_, entries.back().id(), entries[entries.size() - 2].id(), &error),
                 qPrintable(error));
        QCOMPARE(panel->runIdA(), entries[entries.size() - 2].id());
        QCOMPARE(panel->runIdB(), entries.back().id());
        window_->compareView()->close();
    }

    void graphsPanelUsesDeviceNumbersWhenMeasured() {
        // A CUDA-like pair of records: device step times, graph memory, device peak.
        RunRecord a, b;
        a.runId = "eager";
        b.runId = "graphs";
        a.totalMs = 1000;
        b.totalMs = 800;
        a.config.graphs = GraphMode::Off;
        b.config.graphs = GraphMode::Step;
        a.graphs.mode = "off";
        b.graphs.mode = "step";
        b.graphs.graphMemMiB = 12.5;
        a.peakDeviceMiB = 900;
        b.peakDeviceMiB = 912.5;
        a.environment.backend = b.environment.backend = "cuda";
        for (int i = 0; i < 20; ++i) {
            a.steps.push_back({i, 0, 50.0 + i, 4.0 + i * 0.1, 55.0 + i});  // gpu 50..69, enqueue 4.0..5.9
            b.steps.push_back({i, 0, 40.0 + i, 0.2, 41.0 + i});
        }
        GraphsPanel panel;
        panel.setRuns(a, b, QStringLiteral("synthetic"));
        QCOMPARE(panel.metricLabel(GraphsPanel::StepMedian), QStringLiteral("Step median, GPU (ms)"));
        QCOMPARE(panel.metricLabel(GraphsPanel::PeakMemory), QStringLiteral("Peak device memory (MiB)"));
        QCOMPARE(panel.barValue(GraphsPanel::SideA, GraphsPanel::StepMedian), 59.5);  // (59 + 60) / 2
        QCOMPARE(panel.barValue(GraphsPanel::SideA, GraphsPanel::StepP95), 68.0);     // 19th of 20
        QCOMPARE(panel.barValue(GraphsPanel::SideB, GraphsPanel::StepP95), 58.0);
        QCOMPARE(panel.barValue(GraphsPanel::SideA, GraphsPanel::HostEnqueue),
                 ((4.0 + 9 * 0.1) + (4.0 + 10 * 0.1)) / 2);
        QCOMPARE(panel.barValue(GraphsPanel::SideB, GraphsPanel::HostEnqueue), 0.2);
        QCOMPARE(panel.barValue(GraphsPanel::SideB, GraphsPanel::GraphMemory), 12.5);
        QCOMPARE(panel.barValue(GraphsPanel::SideB, GraphsPanel::PeakMemory), 912.5);
        QCOMPARE(panel.barValue(GraphsPanel::SideA, GraphsPanel::TotalTime), 1.0);
        QCOMPARE(panel.table()->item(GraphsPanel::TotalTime, 2)->text(), QStringLiteral("0.80×"));
        QCOMPARE(panel.table()->item(GraphsPanel::GraphMemory, 1)->text(), QStringLiteral("12.5"));
        QCOMPARE(panel.table()->horizontalHeaderItem(1)->text(), QStringLiteral("B: step"));
        QVERIFY(!panel.caption()->text().contains(QStringLiteral("Neither run")));
        QVERIFY(panel.caption()->text().contains(QStringLiteral("synthetic")));
        panel.clear();
        QVERIFY(!panel.hasRuns());
        QCOMPARE(panel.barValue(GraphsPanel::SideA, GraphsPanel::TotalTime), -1.0);
        QCOMPARE(panel.table()->item(GraphsPanel::TotalTime, 0)->text(), QStringLiteral("—"));
    }

    void stopCancelsTheWholeSequence() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        MainWindow window(freshSettings());
        window.show();
        // Long enough that Stop lands inside the second run: 5 x 5 tiles, 13 batches a step, 4 steps.
        RunConfig config = tinyConfig();
        config.width = config.height = 128;
        config.steps = 4;
        QVERIFY(testing::setConfigAndWait(*window.configPanel(), config));
        QVERIFY(testing::waitForHistory(window));
        const std::size_t historyBefore = window.history().entries().size();

        QSignalSpy ended(&window, &MainWindow::graphComparisonEnded);
        int heartbeats = 0;  // the GUI thread keeps serving timers while the sequence runs
        QTimer heartbeat;
        connect(&heartbeat, &QTimer::timeout, this, [&] { ++heartbeats; });
        heartbeat.start(10);
        connect(&window, &MainWindow::graphComparisonRunStarted, this, [&window](int index, int) {
            if (index == 1) window.stopAction()->trigger();
        });
        window.startGraphComparison();
        QVERIFY(ended.wait(600000));
        heartbeat.stop();
        QCOMPARE(ended.at(0).at(0).toBool(), false);
        QVERIFY(heartbeats > 5);

        const GraphComparison& c = *window.graphComparison();
        QVERIFY(!c.completed);
        QVERIFY(!c.active);
        QVERIFY(c.runs[0].result);
        QCOMPARE(std::string(toString(c.runs[0].result->record.status)), std::string("finished"));
        // Stop came while the worker was in the second run (cancelled there) or, on a very
        // fast machine, just before it began it (then it never started); never finished.
        if (!c.runs[1].result) qInfo("Stop landed before the second run began");
        if (c.runs[1].result) {
            QCOMPARE(std::string(toString(c.runs[1].result->record.status)), std::string("cancelled"));
            QVERIFY(c.runs[1].result->record.stepsRun < 4);
        }
        // The rest of the sequence never started.
        QVERIFY(!c.runs[2].result);
        QVERIFY(!c.runs[3].result);
        QCOMPARE(c.shownA, -1);
        QVERIFY(!window.compareView());
        QVERIFY(!window.graphsPanel()->hasRuns());
        QVERIFY(testing::waitForHistory(window));
        QCOMPARE(window.history().entries().size(), historyBefore);  // warm-up and cancelled runs are not kept
        QVERIFY(!window.isRunning());
        QVERIFY(window.runAction()->isEnabled());
        QVERIFY(!window.stopAction()->isEnabled());
        QVERIFY2(child<QLabel>(&window, "statusText")
                     ->text()
                     .startsWith(QStringLiteral("Compare graphs stopped after 1 of 4 runs")),
                 qPrintable(child<QLabel>(&window, "statusText")->text()));

        // The worker is free again: a plain run afterwards finishes.
        QVERIFY(testing::setConfigAndWait(*window.configPanel(), tinyConfig()));
        QSignalSpy runEnded(&window, &MainWindow::runEnded);
        window.runAction()->trigger();
        QVERIFY(runEnded.wait(300000));
        QCOMPARE(runEnded.at(0).at(0).toBool(), true);
        QCOMPARE(QString::fromStdString(std::string(toString(window.lastRun()->result->record.status))),
                 QStringLiteral("finished"));
    }
};

QTEST_MAIN(TestGraphCompare)
#include "tst_graphcompare.moc"
