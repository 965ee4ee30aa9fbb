// The timing charts and the status line must not mislead: the current run stays readable over a
// far slower earlier run, a heat map of one batch of every tile says that it has no per-tile
// times, a one-tile plan fills the heat map at the image's aspect, and the tile progress counts
// the tiles (or batches) of the step under way.
#include <QtTest/QtTest>

#include <QMainWindow>
#include <QProgressBar>
#include <QStatusBar>

#include <qcustomplot.h>

#include "core/run/RunRecord.h"
#include "core/sampling/TilePlan.h"
#include "ui/StatusLine.h"
#include "ui/TimingCharts.h"

using namespace tessera;

namespace {

StepTiming stepOf(int step, double wallMs) {
    StepTiming timing;
    timing.step = step;
    timing.wallMs = wallMs;
    timing.hostEnqueueMs = wallMs;
    return timing;
}

// A CPU run of `steps` steps over a width x height image cut into tiles of `tile` px (no overlap),
// `perBatch` tiles per call, every step taking `stepMs` split evenly over its batches.
RunRecord cpuRun(const std::string& label, const std::string& model, int width, int height, int tile, int perBatch,
                 int steps, double stepMs) {
    RunRecord record;
    record.runId = label + "-run";
    record.config.label = label;
    record.config.width = width;
    record.config.height = height;
    record.config.tile = tile;
    record.config.overlapPx = 0;
    record.config.steps = steps;
    record.modelName = model;
    record.environment.backend = "cpu";
    const TilePlan plan = TilePlan::make(width, height, tile, 0);
    record.tileCount = plan.count();
    const int batches = (plan.count() + perBatch - 1) / perBatch;
    for (int s = 0; s < steps; ++s) {
        record.steps.push_back(stepOf(s, stepMs * (1.0 + 0.05 * (s % 3))));
        for (int b = 0; b < batches; ++b) {
            TileBatchTiming batch;
            batch.step = s;
            batch.batchIndex = b;
            for (int id = b * perBatch; id < std::min(plan.count(), (b + 1) * perBatch); ++id)
                batch.tileIds.push_back(id);
            batch.hostMs = stepMs / batches;
            record.batches.push_back(batch);
        }
    }
    record.stepsRun = steps;
    return record;
}

QCPColorScale* colorScaleOf(QCustomPlot* plot) {
    for (QCPLayoutElement* element : plot->plotLayout()->elements(true))
        if (auto* scale = qobject_cast<QCPColorScale*>(element)) return scale;
    return nullptr;
}

void settle(QCustomPlot* plot) {
    // The heat map's aspect is set after a layout, then replotted (queued): a few passes settle it.
    for (int i = 0; i < 4; ++i) {
        plot->replot(QCustomPlot::rpImmediateRefresh);
        QCoreApplication::processEvents();
    }
}

}  // namespace

class TestCharts : public QObject {
    Q_OBJECT
private slots:
    // At 1366x768 the charts dock is about 380 px wide: an earlier run of another model 20 times
    // slower must not flatten the current run's line to the floor.
    void slowEarlierRunDoesNotFlattenTheCurrentOne() {
        TimingCharts charts;
        charts.resize(380, 700);
        charts.show();
        const RunRecord slow = cpuRun("sdxl portrait", "sdxl-base", 256, 256, 64, 4, 20, 8240);
        const RunRecord same = cpuRun("lighthouse seed 6", "sd15", 256, 256, 64, 4, 20, 450);
        const RunRecord current = cpuRun("lighthouse", "sd15", 256, 256, 64, 4, 20, 412);
        charts.setEarlierRuns({&slow, &same});
        charts.showRecord(current);
        charts.flush();
        QCOMPARE(charts.earlierRunCount(), 2);

        QCustomPlot* steps = charts.plot(TimingCharts::Chart::Steps);
        steps->replot(QCustomPlot::rpImmediateRefresh);
        double currentTop = 0;
        for (const StepTiming& s : current.steps) currentTop = std::max(currentTop, s.wallMs);
        const QCPRange range = steps->yAxis->range();
        QVERIFY2(
            range.upper <= TimingCharts::kEarlierRunRangeFactor * currentTop * 1.15,
            qPrintable(
                QStringLiteral("value axis to %1 ms for a run of at most %2 ms").arg(range.upper).arg(currentTop)));
        // The current run's slowest step is drawn in the upper half of the chart, not at the floor.
        const double y = steps->yAxis->coordToPixel(currentTop);
        const QRect area = steps->axisRect()->rect();
        QVERIFY2(y < area.top() + area.height() / 2.0,
                 qPrintable(QStringLiteral("y %1 in %2..%3").arg(y).arg(area.top()).arg(area.bottom())));
        // A run of about the same speed is drawn whole; the slow one is cut and the chart says so.
        QVERIFY(range.upper >= 450 * 1.1);
        const QString note = charts.earlierRunsNote();
        QVERIFY2(note.contains(QStringLiteral("sdxl portrait (sdxl-base)")), qPrintable(note));
        QVERIFY2(note.contains(QStringLiteral("cut off")), qPrintable(note));
        QVERIFY2(!note.contains(QStringLiteral("lighthouse")), qPrintable(note));

        // Without the slow run nothing is cut and the note goes.
        charts.setEarlierRuns({&same});
        charts.flush();
        QVERIFY(charts.earlierRunsNote().isEmpty());
    }

    // Every tile in one call per step: the same time for all 25 is not a per-tile time.
    void oneBatchOfAllTilesShowsTheBatchTime() {
        TimingCharts charts;
        charts.resize(380, 700);
        charts.show();
        const RunRecord record = cpuRun("all at once", "sd15", 320, 320, 64, 25, 3, 412);
        QCOMPARE(record.tileCount, 25);
        charts.showRecord(record);
        charts.flush();
        const QString text = charts.tilePlaceholderText();
        QVERIFY2(text.contains(QStringLiteral("one batch of 25 tiles: 412 ms")), qPrintable(text));
        QVERIFY(charts.tileTimesPerBatchOnly());
        QCPColorScale* scale = colorScaleOf(charts.plot(TimingCharts::Chart::Tiles));
        QVERIFY(scale);
        QVERIFY(!scale->visible());  // no colour scale for a colour that means nothing per tile
        QCustomPlot* tiles = charts.plot(TimingCharts::Chart::Tiles);
        tiles->replot(QCustomPlot::rpImmediateRefresh);
        const QString hover = charts.hoverText(TimingCharts::Chart::Tiles,
                                               QPointF(tiles->xAxis->coordToPixel(1), tiles->yAxis->coordToPixel(1)));
        QVERIFY2(hover.contains(QStringLiteral("one batch")), qPrintable(hover));

        // Batches of a few tiles: per-tile colours (each tile's share of its batch) and a scale.
        const RunRecord split = cpuRun("in batches", "sd15", 320, 320, 64, 9, 3, 412);
        charts.showRecord(split);
        charts.flush();
        QVERIFY(!charts.tileTimesPerBatchOnly());
        QVERIFY2(charts.tilePlaceholderText().isEmpty(), qPrintable(charts.tilePlaceholderText()));
        QVERIFY(scale->visible());
        QCOMPARE(charts.timedTileCount(), 25);

        // Live: the first batch of a run with every tile in it shows the batch's time at once.
        charts.startTileTimes(TilePlan::make(320, 320, 64, 0));
        std::vector<TileBatchTiming> first(record.batches.begin(), record.batches.begin() + 1);
        charts.addTileBatches(first);
        QVERIFY(charts.tileTimesPerBatchOnly());
        QVERIFY2(charts.tilePlaceholderText().contains(QStringLiteral("one batch of 25 tiles")),
                 qPrintable(charts.tilePlaceholderText()));
    }

    // A 1 x 1 plan: its one cell fills the heat map's drawing area, at the image's aspect.
    void oneTileFillsTheMapAtTheImageAspect() {
        TimingCharts charts;
        charts.resize(380, 760);
        charts.show();
        const RunRecord record = cpuRun("one tile", "sd15", 256, 192, 256, 1, 2, 300);
        QCOMPARE(record.tileCount, 1);
        charts.showRecord(record);
        charts.flush();
        QCOMPARE(charts.tileGridSize(), QSize(1, 1));
        QCustomPlot* tiles = charts.plot(TimingCharts::Chart::Tiles);
        settle(tiles);
        const QRect area = tiles->axisRect()->rect();
        const double aspect = static_cast<double>(area.width()) / area.height();
        QVERIFY2(std::abs(aspect - 256.0 / 192.0) < 0.05,
                 qPrintable(QStringLiteral("drawing area %1 x %2").arg(area.width()).arg(area.height())));
        const QImage image = tiles->grab().toImage();
        const QColor cell = image.pixelColor(area.center());
        QVERIFY(cell != QColor(Qt::white));
        const int inset = 4;
        for (const QPoint corner :
             {area.topLeft() + QPoint(inset, inset), area.topRight() + QPoint(-inset, inset),
              area.bottomLeft() + QPoint(inset, -inset), area.bottomRight() + QPoint(-inset, -inset)})
            QVERIFY2(image.pixelColor(corner) == cell,
                     qPrintable(QStringLiteral("(%1, %2) is %3, the cell %4")
                                    .arg(corner.x())
                                    .arg(corner.y())
                                    .arg(image.pixelColor(corner).name(), cell.name())));

        // A wide grid in a tall chart: as wide as the chart allows, the image's aspect kept.
        charts.setTilePlan(TilePlan::make(512, 128, 64, 0));
        settle(tiles);
        const QRect wide = tiles->axisRect()->rect();
        QVERIFY2(std::abs(static_cast<double>(wide.width()) / wide.height() - 4.0) < 0.1,
                 qPrintable(QStringLiteral("drawing area %1 x %2").arg(wide.width()).arg(wide.height())));
    }

    // All tiles in one call: the tile bar says which batch of which step is under way.
    void tileProgressCountsBatchesWithinTheStep() {
        QMainWindow window;
        window.resize(1366, 200);
        StatusLine status(window.statusBar());
        window.show();
        auto* tileBar = window.findChild<QProgressBar*>(QStringLiteral("tileProgress"));
        QVERIFY(tileBar);

        RunConfig config;
        config.width = config.height = 320;
        config.tile = 64;
        config.overlapPx = 0;
        config.steps = 20;
        config.tileBatch = 25;  // 5 x 5 tiles, all in one call
        status.showReady(true, config);
        status.showBars();
        RunProgress progress;
        progress.started = true;
        progress.steps = 20;
        progress.tiles = 25;
        progress.step = 4;  // the fifth step under way, none of its tiles done
        status.showProgress(progress, true);
        QCOMPARE(tileBar->text(), QStringLiteral("batch 1/1 of step 5/20"));

        // Three batches (9, 9, 7 tiles): the first done, the second under way.
        config.tileBatch = 9;
        status.showReady(true, config);
        status.showBars();
        progress.tilesDone = 9;
        status.showProgress(progress, true);
        QCOMPARE(tileBar->text(), QStringLiteral("batch 2/3 of step 5/20"));
        QCOMPARE(tileBar->value(), 9);
        // The run's own batch (auto lowered to fit the device) wins over the planned one.
        status.setTilesPerBatch(5);
        progress.tilesDone = 15;
        status.showProgress(progress, true);
        QCOMPARE(tileBar->text(), QStringLiteral("batch 4/5 of step 5/20"));

        // One tile per call: the tile under way.
        config.tileBatch = 1;
        status.showReady(true, config);
        status.showBars();
        progress.tilesDone = 7;
        status.showProgress(progress, true);
        QCOMPARE(tileBar->text(), QStringLiteral("tile 8/25 of step 5/20"));

        // Image-to-image from step 14 of 20: the steps it runs, counted from 1.
        progress.firstStep = 13;
        progress.step = 14;
        status.showProgress(progress, true);
        QCOMPARE(tileBar->text(), QStringLiteral("tile 8/25 of step 2/7"));

        // After the run: every tile of the last step done.
        progress.tilesDone = 25;
        status.showProgress(progress, false);
        QCOMPARE(tileBar->text(), QStringLiteral("tile 25/25"));
        QVERIFY(tileBar->width() >=
                tileBar->fontMetrics().horizontalAdvance(QStringLiteral("batch 12/13 of step 15/20")));
    }
};

QTEST_MAIN(TestCharts)
#include "tst_charts.moc"
