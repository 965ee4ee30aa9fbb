// core/SeamScore: how visible tile borders are in a finished image. Synthetic images with and
// without a step at a tile border; the runs of `none` against Hann are in tst_cpuengine.
#include <QtTest/QtTest>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/run/RunConfig.h"
#include "core/sampling/SeamScore.h"
#include "core/sampling/TilePlan.h"

using namespace tessera;

namespace {

// A smooth image: three channels of slow sinusoids plus a ramp.
ImageTensor smoothImage(int w, int h) {
    ImageTensor im{3, h, w, std::vector<float>(static_cast<std::size_t>(3 * w * h))};
    for (int c = 0; c < 3; ++c)
        for (int y = 0; y < h; ++y)
            for (int x = 0; x < w; ++x)
                im.data[(static_cast<std::size_t>(c) * h + y) * w + x] =
                    0.3f * std::sin(0.11f * x + 0.7f * c) + 0.2f * std::cos(0.07f * y) + 0.002f * (x + y);
    return im;
}

}  // namespace

class TestSeamScore : public QObject {
    Q_OBJECT
private slots:
    void smoothImageScoresOne() {
        const TilePlan plan = TilePlan::make(96, 80, 48, 16);
        const SeamScore s = seamScore(smoothImage(96, 80), plan);
        QVERIFY(!s.lines.empty());
        // Smooth content changes a little from place to place: near 1, far from a seam.
        QVERIFY2(std::abs(s.score - 1.0) < 0.4, qPrintable(QString::number(s.score)));
        QVERIFY2(s.worst < 1.6, qPrintable(QString::number(s.worst)));
    }

    void stepAtABorderIsFound() {
        const TilePlan plan = TilePlan::make(96, 80, 48, 16);
        ImageTensor im = smoothImage(96, 80);
        // Everything right of where the first two columns of tiles meet shifted: a hard block
        // edge, as `none` makes when tiles disagree.
        const auto& xs = plan.columnPositions();
        QVERIFY(xs.size() >= 2);
        const int middle = (xs[1] + xs[0] + plan.tileW()) / 2;  // where tiles 0 and 1 meet
        for (int c = 0; c < 3; ++c)
            for (int y = 0; y < 80; ++y)
                for (int x = middle; x < 96; ++x) im.data[(static_cast<std::size_t>(c) * 80 + y) * 96 + x] += 0.15f;
        const SeamScore s = seamScore(im, plan);
        QVERIFY2(s.worst > 2.0, qPrintable(QString::number(s.worst)));
        // The shifted line is the most visible one.
        const auto top = std::max_element(s.lines.begin(), s.lines.end(),
                                          [](const SeamLine& a, const SeamLine& b) { return a.ratio < b.ratio; });
        QVERIFY(top->vertical);
        QCOMPARE(top->position, middle);
        QVERIFY2(s.score > 1.2, qPrintable(QString::number(s.score)));  // one line of three
    }

    // Shifted tiles: the lines are where the last step's tiles met, the plan's borders rolled by its
    // shift, and the line where the rolled canvas wrapped.
    void shiftedTilesMeasureTheirOwnBorders() {
        const TilePlan plan = TilePlan::make(96, 64, 32, 0);  // borders at 32 and 64
        ImageTensor im = smoothImage(96, 64);
        const CanvasShift shift{0, 20};  // the plan's borders at 12 and 44, its edge at 76
        for (int c = 0; c < 3; ++c)
            for (int y = 0; y < 64; ++y)
                for (int x = 44; x < 96; ++x) im.data[(static_cast<std::size_t>(c) * 64 + y) * 96 + x] += 0.15f;
        const SeamScore still = seamScore(im, plan);
        const SeamScore moved = seamScore(im, plan, shift);
        std::vector<int> positions;
        for (const SeamLine& l : moved.lines)
            if (l.vertical) positions.push_back(l.position);
        QCOMPARE(positions, (std::vector<int>{12, 44, 76}));
        QVERIFY2(moved.worst > 2.0, qPrintable(QString::number(moved.worst)));
        QVERIFY2(still.worst < 1.6, qPrintable(QString::number(still.worst)));  // nothing at 32 or 64
        QCOMPARE(seamScore(im, plan, CanvasShift{0, 96}).score, -1.0);          // a shift past the image
    }

    void oneTileOrMismatchedPlanIsNotMeasured() {
        QCOMPARE(seamScore(smoothImage(32, 32), TilePlan::make(32, 32, 32, 0)).score, -1.0);
        QCOMPARE(seamScore(smoothImage(32, 32), TilePlan::make(64, 64, 32, 8)).score, -1.0);  // sizes differ
        QCOMPARE(seamScore(ImageTensor{}, TilePlan::make(64, 64, 32, 8)).score, -1.0);
    }

    void flatImageIsOne() {
        ImageTensor flat{3, 40, 40, std::vector<float>(3 * 40 * 40, 0.25f)};
        const SeamScore s = seamScore(flat, TilePlan::make(40, 40, 16, 4));
        QVERIFY(!s.lines.empty());
        QCOMPARE(s.score, 1.0);
    }
};

QTEST_APPLESS_MAIN(TestSeamScore)
#include "tst_seamscore.moc"
