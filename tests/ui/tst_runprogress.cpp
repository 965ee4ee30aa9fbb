// The tile progress of the step under way, counted from what each finished tile batch says: the
// CUDA engine's lanes finish a step's batches out of order, and the count must neither step back
// nor miss or double a batch, ending at exactly the plan's tiles; the status line's "batch j/M of
// step k/N" follows it.
#include <QtTest/QtTest>

#include <QMainWindow>
#include <QProgressBar>
#include <QStatusBar>

#include <algorithm>
#include <vector>

#include "core/run/RunRecord.h"
#include "ui/RunController.h"
#include "ui/StatusLine.h"

using namespace tessera;

namespace {

// Batch `index` of schedule step `step` over `tiles`.
TileBatchTiming batchOf(int step, int index, std::vector<int> tiles) {
    TileBatchTiming b;
    b.step = step;
    b.batchIndex = index;
    b.tileIds = std::move(tiles);
    return b;
}

// 7 tiles in batches of 3: {0, 1, 2}, {3, 4, 5}, {6}.
std::vector<TileBatchTiming> stepBatches(int step) {
    return {batchOf(step, 0, {0, 1, 2}), batchOf(step, 1, {3, 4, 5}), batchOf(step, 2, {6})};
}

RunProgress startedRun() {
    RunProgress p;
    p.started = true;
    p.steps = 20;
    p.tiles = 7;
    return p;
}

}  // namespace

class TestRunProgress : public QObject {
    Q_OBJECT

private slots:
    // Two lanes: the last (short) batch first, then the second, then the first. Counting from the
    // last tile id would read 7, then 6, then 3.
    void outOfOrderBatchesNeverStepBack() {
        RunProgress p = startedRun();
        p.step = 4;
        const std::vector<TileBatchTiming> b = stepBatches(4);
        std::vector<int> seen;
        for (int i : {2, 1, 0}) {
            p.countFinishedBatch(b[static_cast<std::size_t>(i)]);
            seen.push_back(p.tilesDone);
            QCOMPARE(p.step, 4);
        }
        QCOMPARE(seen, (std::vector<int>{1, 4, 7}));

        // Every order of the three batches ends at the plan's 7 tiles, never falling back.
        std::vector<int> order{0, 1, 2};
        do {
            RunProgress q = startedRun();
            q.step = 4;
            int last = 0;
            for (int i : order) {
                q.countFinishedBatch(b[static_cast<std::size_t>(i)]);
                QVERIFY(q.tilesDone > last);
                last = q.tilesDone;
            }
            QCOMPARE(q.tilesDone, 7);
        } while (std::next_permutation(order.begin(), order.end()));
    }

    // A batch reported twice counts once; a late batch of a finished step is left out; a batch of
    // the next step, before the step's end was reported, starts that step's count.
    void eachBatchCountsOnceInItsStep() {
        RunProgress p = startedRun();
        const std::vector<TileBatchTiming> step0 = stepBatches(0), step1 = stepBatches(1);
        p.countFinishedBatch(step0[1]);
        p.countFinishedBatch(step0[1]);
        QCOMPARE(p.tilesDone, 3);
        p.countFinishedBatch(step0[0]);
        p.finishStep(0);
        QCOMPARE(p.step, 1);
        QCOMPARE(p.tilesDone, 0);
        p.countFinishedBatch(step0[2]);  // late: step 1 of the schedule is under way
        QCOMPARE(p.tilesDone, 0);
        p.countFinishedBatch(step1[2]);
        QCOMPARE(p.tilesDone, 1);
        p.countFinishedBatch(batchOf(2, 0, {0, 1, 2}));  // step 2's first batch: step 1 is over
        QCOMPARE(p.step, 2);
        QCOMPARE(p.tilesDone, 3);
        p.countFinishedBatch(step1[0]);  // step 1's, after step 2 began
        QCOMPARE(p.step, 2);
        QCOMPARE(p.tilesDone, 3);
        p.finishStep(1);  // step 1's end reported late: step 2's count stands
        QCOMPARE(p.step, 2);
        QCOMPARE(p.tilesDone, 3);
    }

    // The status line follows the count: batches finished out of order are batches done.
    void statusLineNamesTheBatchUnderWay() {
        QMainWindow window;
        window.resize(1366, 200);
        StatusLine status(window.statusBar());
        window.show();
        auto* tileBar = window.findChild<QProgressBar*>(QStringLiteral("tileProgress"));
        QVERIFY(tileBar);
        status.showBars();
        status.setTilesPerBatch(3);
        RunProgress p = startedRun();
        p.step = 4;
        status.showProgress(p, true);
        QCOMPARE(tileBar->text(), QStringLiteral("batch 1/3 of step 5/20"));
        const std::vector<TileBatchTiming> b = stepBatches(4);
        p.countFinishedBatch(b[2]);
        status.showProgress(p, true);
        QCOMPARE(tileBar->text(), QStringLiteral("batch 2/3 of step 5/20"));
        QCOMPARE(tileBar->value(), 1);
        p.countFinishedBatch(b[0]);
        status.showProgress(p, true);
        QCOMPARE(tileBar->text(), QStringLiteral("batch 3/3 of step 5/20"));
        QCOMPARE(tileBar->value(), 4);
        p.countFinishedBatch(b[1]);
        status.showProgress(p, true);
        QCOMPARE(tileBar->value(), 7);
        QCOMPARE(tileBar->maximum(), 7);
    }

    // The progress bar's first step of an image-to-image run: FLUX.1 counts steps x strength unrounded
    // (6 steps at 0.6 run 4, from step 2), the SD pipelines its integer part (3 run, from step 3). The
    // record (RunRecord::flowMatching) tells them apart.
    void fluxImageToImageStartsWhereItsPipelineDoes() {
        RunRecord r;
        r.config.steps = 6;
        r.config.strength = 0.6;
        r.config.initImage = "start.png";
        r.config.scheduler = SchedulerKind::Euler;
        QCOMPARE(RunController::firstRecordedStep(r), 3);
        r.flowMatching = true;
        QCOMPARE(RunController::firstRecordedStep(r), 2);
        r.config.initImage.clear();
        QCOMPARE(RunController::firstRecordedStep(r), 0);
    }
};

QTEST_MAIN(TestRunProgress)
#include "tst_runprogress.moc"
