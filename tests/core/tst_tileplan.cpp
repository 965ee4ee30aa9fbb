// TilePlan: tile positions, counts and coverage (docs/ENGINE_SEMANTICS.md "Tile plan").
#include <QtTest/QtTest>

#include <cmath>
#include <string>
#include <vector>

#include "core/run/RunConfig.h"
#include "core/sampling/TilePlan.h"

using namespace tessera;

namespace {

// The rule written out independently: 0, s, 2s, ... while pos + T < L, then L - T.
std::vector<int> expectedPositions(int length, int tile, int overlap) {
    const int t = std::min(tile, length);
    if (t < tile) return {0};
    std::vector<int> p{0};
    for (int pos = tile - overlap; pos + t < length; pos += tile - overlap) p.push_back(pos);
    if (p.back() + t < length) p.push_back(length - t);
    return p;
}

int expectedCount(int length, int tile, int overlap) {
    const int t = std::min(tile, length);
    if (length <= t) return 1;
    return 1 + static_cast<int>(std::ceil(static_cast<double>(length - t) / (tile - overlap)));
}

}  // namespace

class TestTilePlan : public QObject {
    Q_OBJECT

private slots:
    void exactPositions_data() {
        QTest::addColumn<int>("width");
        QTest::addColumn<int>("height");
        QTest::addColumn<int>("tile");
        QTest::addColumn<int>("overlap");
        QTest::addColumn<QList<int>>("xs");
        QTest::addColumn<QList<int>>("ys");
        QTest::newRow("96x64 t32 o8") << 96 << 64 << 32 << 8 << QList<int>{0, 24, 48, 64} << QList<int>{0, 24, 32};
        QTest::newRow("exact fit") << 128 << 64 << 64 << 0 << QList<int>{0, 64} << QList<int>{0};
        QTest::newRow("exact stride fit") << 112 << 64 << 64 << 16 << QList<int>{0, 48} << QList<int>{0};
        QTest::newRow("not a multiple of stride")
            << 100 << 70 << 32 << 8 << QList<int>{0, 24, 48, 68} << QList<int>{0, 24, 38};
        QTest::newRow("one pixel over") << 65 << 64 << 64 << 16 << QList<int>{0, 1} << QList<int>{0};
        QTest::newRow("image smaller than tile") << 40 << 24 << 64 << 16 << QList<int>{0} << QList<int>{0};
        QTest::newRow("one axis smaller") << 200 << 48 << 64 << 16 << QList<int>{0, 48, 96, 136} << QList<int>{0};
        QTest::newRow("stride one") << 36 << 32 << 32 << 31 << QList<int>{0, 1, 2, 3, 4} << QList<int>{0};
        QTest::newRow("no overlap remainder")
            << 100 << 100 << 32 << 0 << QList<int>{0, 32, 64, 68} << QList<int>{0, 32, 64, 68};
    }

    void exactPositions() {
        QFETCH(int, width);
        QFETCH(int, height);
        QFETCH(int, tile);
        QFETCH(int, overlap);
        QFETCH(QList<int>, xs);
        QFETCH(QList<int>, ys);
        const TilePlan plan = TilePlan::make(width, height, tile, overlap);
        QCOMPARE(plan.cols(), static_cast<int>(xs.size()));
        QCOMPARE(plan.rows(), static_cast<int>(ys.size()));
        QCOMPARE(plan.count(), plan.cols() * plan.rows());
        QCOMPARE(plan.tileW(), std::min(tile, width));
        QCOMPARE(plan.tileH(), std::min(tile, height));
        QCOMPARE(plan.stride(), tile - overlap);
        QCOMPARE(plan.overlap(), overlap);
        QCOMPARE(QList<int>(plan.columnPositions().begin(), plan.columnPositions().end()), xs);
        QCOMPARE(QList<int>(plan.rowPositions().begin(), plan.rowPositions().end()), ys);
        for (int row = 0; row < plan.rows(); ++row) {
            for (int col = 0; col < plan.cols(); ++col) {
                const TileRect& t = plan.tile(row * plan.cols() + col);
                QCOMPARE(t.id, row * plan.cols() + col);
                QCOMPARE(t.col, col);
                QCOMPARE(t.row, row);
                QCOMPARE(t.x, xs[col]);
                QCOMPARE(t.y, ys[row]);
                QCOMPARE(t.w, plan.tileW());
                QCOMPARE(t.h, plan.tileH());
            }
        }
        QCOMPARE(plan.evaluationsPerStep(), plan.count());
        QCOMPARE(plan.totalEvaluations(20), static_cast<std::int64_t>(plan.count()) * 20);
    }

    void rowMajorIds() {
        const TilePlan plan = TilePlan::make(96, 64, 32, 8);
        QCOMPARE(plan.count(), 12);
        QCOMPARE(plan.tile(5), (TileRect{5, 1, 1, 24, 24, 32, 32}));
        QCOMPARE(plan.tile(11), (TileRect{11, 3, 2, 64, 32, 32, 32}));
        QCOMPARE(plan.tiles().size(), static_cast<std::size_t>(12));
        QVERIFY_THROWS_EXCEPTION(std::out_of_range, (void)plan.tile(12));
        QVERIFY_THROWS_EXCEPTION(std::out_of_range, (void)plan.tile(-1));
    }

    void redundancyAndEvaluations() {
        const TilePlan plan = TilePlan::make(96, 64, 32, 8);
        QCOMPARE(plan.redundancy(), 12.0 * 32 * 32 / (96.0 * 64));
        QCOMPARE(plan.evaluationsPerStep(), 12);
        QCOMPARE(plan.totalEvaluations(50), std::int64_t{600});
        const TilePlan exact = TilePlan::make(128, 128, 64, 0);
        QCOMPARE(exact.redundancy(), 1.0);
        const TilePlan small = TilePlan::make(40, 24, 64, 16);
        QCOMPARE(small.count(), 1);
        QCOMPARE(small.redundancy(), 1.0);
        // Large counts do not overflow int arithmetic.
        const TilePlan big = TilePlan::make(4096, 4096, 64, 48);
        QCOMPARE(big.count(), 253 * 253);
        QCOMPARE(big.totalEvaluations(1000), std::int64_t{253} * 253 * 1000);
    }

    void countsMatchFormulaAndCoverEverything() {
        // Many sizes, including non-square, primes and sizes below the tile.
        const int tiles[] = {8, 32, 64};
        for (int tile : tiles) {
            for (int overlap : {0, 1, tile / 4, tile / 2, tile - 1}) {
                for (int width : {1, 7, tile - 1, tile, tile + 1, 97, 2 * tile + 3, 255}) {
                    for (int height : {3, tile, 61, 129}) {
                        const TilePlan plan = TilePlan::make(width, height, tile, overlap);
                        const QByteArray where =
                            QStringLiteral("%1x%2 t%3 o%4").arg(width).arg(height).arg(tile).arg(overlap).toUtf8();
                        QVERIFY2(plan.cols() == expectedCount(width, tile, overlap), where.constData());
                        QVERIFY2(plan.rows() == expectedCount(height, tile, overlap), where.constData());
                        QVERIFY2(plan.columnPositions() == expectedPositions(width, tile, overlap), where.constData());
                        QVERIFY2(plan.rowPositions() == expectedPositions(height, tile, overlap), where.constData());
                        std::vector<int> cover(static_cast<std::size_t>(width) * static_cast<std::size_t>(height), 0);
                        for (const TileRect& t : plan.tiles()) {
                            // Never smaller than the tile (or the whole axis), always inside the image.
                            QVERIFY2(t.w == std::min(tile, width) && t.h == std::min(tile, height), where.constData());
                            QVERIFY2(t.x >= 0 && t.y >= 0 && t.x + t.w <= width && t.y + t.h <= height,
                                     where.constData());
                            for (int y = t.y; y < t.y + t.h; ++y)
                                for (int x = t.x; x < t.x + t.w; ++x)
                                    ++cover[static_cast<std::size_t>(y) * static_cast<std::size_t>(width) +
                                            static_cast<std::size_t>(x)];
                        }
                        long long area = 0;
                        for (int c : cover) {
                            QVERIFY2(c >= 1, where.constData());
                            area += c;
                        }
                        QVERIFY2(std::abs(plan.redundancy() - static_cast<double>(area) / (width * height)) < 1e-12,
                                 where.constData());
                        // Positions strictly increase: no duplicate tiles.
                        for (std::size_t i = 1; i < plan.columnPositions().size(); ++i)
                            QVERIFY2(plan.columnPositions()[i] > plan.columnPositions()[i - 1], where.constData());
                    }
                }
            }
        }
    }

    void fromConfigUsesResolvedOverlap() {
        RunConfig c;
        c.width = 96;
        c.height = 64;
        c.tile = 32;
        c.overlapFraction = 0.25;  // 8 px
        const TilePlan plan = TilePlan::fromConfig(c);
        QCOMPARE(plan.overlap(), 8);
        QCOMPARE(plan.stride(), 24);
        QCOMPARE(plan.cols(), 4);
        QCOMPARE(plan.rows(), 3);
    }

    void rejectsNonsense_data() {
        QTest::addColumn<int>("width");
        QTest::addColumn<int>("height");
        QTest::addColumn<int>("tile");
        QTest::addColumn<int>("overlap");
        QTest::addColumn<QString>("field");
        QTest::newRow("tile 0") << 64 << 64 << 0 << 0 << "tile";
        QTest::newRow("tile negative") << 64 << 64 << -8 << 0 << "tile";
        QTest::newRow("overlap = tile") << 64 << 64 << 32 << 32 << "overlap";
        QTest::newRow("overlap negative") << 64 << 64 << 32 << -1 << "overlap";
        QTest::newRow("width 0") << 0 << 64 << 32 << 8 << "width";
        QTest::newRow("height 0") << 64 << 0 << 32 << 8 << "height";
    }

    void rejectsNonsense() {
        QFETCH(int, width);
        QFETCH(int, height);
        QFETCH(int, tile);
        QFETCH(int, overlap);
        QFETCH(QString, field);
        try {
            (void)TilePlan::make(width, height, tile, overlap);
            QFAIL("TilePlan::make accepted a nonsense plan");
        } catch (const ValidationError& e) {
            QCOMPARE(QString::fromStdString(e.field()), field);
            QVERIFY2(QString::fromUtf8(e.what()).startsWith(field + ": "), e.what());
        }
    }
};

QTEST_GUILESS_MAIN(TestTilePlan)
#include "tst_tileplan.moc"
