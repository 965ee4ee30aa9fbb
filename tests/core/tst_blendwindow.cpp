// BlendWindow: the 1-D windows, per-tile weights and the normaliser (docs/ENGINE_SEMANTICS.md
// "Blend windows"). The central property: for every window the weights covering a pixel,
// divided by N, sum to 1 everywhere, borders included.
#include <QtTest/QtTest>

#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "core/sampling/BlendWindow.h"
#include "core/sampling/TilePlan.h"

using namespace tessera;

namespace {

const BlendWindowKind kAllWindows[] = {BlendWindowKind::None, BlendWindowKind::Linear, BlendWindowKind::Hann,
                                       BlendWindowKind::Gaussian};

struct Layout {
    int width, height, tile, overlap;
};

const Layout kOddLayouts[] = {
    {97, 61, 32, 7},  {129, 255, 64, 17}, {33, 33, 32, 31}, {1000, 1000, 64, 16}, {96, 64, 32, 8},
    {40, 24, 64, 16}, {36, 32, 32, 31},   {57, 200, 32, 7}, {64, 64, 64, 0},      {130, 70, 64, 0},
};

QByteArray describe(const Layout& l, BlendWindowKind kind) {
    return QStringLiteral("%1x%2 tile %3 overlap %4 window %5")
        .arg(l.width)
        .arg(l.height)
        .arg(l.tile)
        .arg(l.overlap)
        .arg(QString::fromUtf8(toString(kind).data(), static_cast<int>(toString(kind).size())))
        .toUtf8();
}

}  // namespace

class TestBlendWindow : public QObject {
    Q_OBJECT

private slots:
    void partitionOfUnityEverywhere() {
        for (const Layout& l : kOddLayouts) {
            const TilePlan plan = TilePlan::make(l.width, l.height, l.tile, l.overlap);
            for (BlendWindowKind kind : kAllWindows) {
                const QByteArray where = describe(l, kind);
                const BlendWeights weights(plan, kind, l.overlap);
                QCOMPARE(weights.tileCount(), plan.count());
                const std::size_t pixels = static_cast<std::size_t>(l.width) * static_cast<std::size_t>(l.height);
                QCOMPARE(weights.normalizer().size(), pixels);
                QCOMPARE(weights.inverseNormalizer().size(), pixels);
                std::vector<double> viaN(pixels, 0.0), viaInverse(pixels, 0.0), rawSum(pixels, 0.0);
                std::vector<int> owners(pixels, 0);
                for (const TileRect& t : plan.tiles()) {
                    const float* w = weights.tileWeights(t.id);
                    for (int y = 0; y < t.h; ++y) {
                        for (int x = 0; x < t.w; ++x) {
                            const std::size_t p =
                                static_cast<std::size_t>(t.y + y) * static_cast<std::size_t>(l.width) +
                                static_cast<std::size_t>(t.x + x);
                            const float v = w[static_cast<std::size_t>(y) * static_cast<std::size_t>(t.w) +
                                              static_cast<std::size_t>(x)];
                            QVERIFY2(v >= 0.0f && std::isfinite(v), where.constData());
                            rawSum[p] += v;
                            viaN[p] += static_cast<double>(v) / weights.normalizer()[p];
                            viaInverse[p] += static_cast<double>(v * weights.inverseNormalizer()[p]);
                            if (kind == BlendWindowKind::None) {
                                QVERIFY2(v == 0.0f || v == 1.0f, where.constData());
                                if (v == 1.0f) ++owners[p];
                            }
                        }
                    }
                }
                for (std::size_t p = 0; p < pixels; ++p) {
                    bool ok = weights.normalizer()[p] > 0.0f && std::abs(viaN[p] - 1.0) < 1e-6 &&
                              std::abs(viaInverse[p] - 1.0) < 1e-6 &&
                              std::abs(rawSum[p] - weights.normalizer()[p]) <= 1e-6 * rawSum[p];
                    if (kind == BlendWindowKind::None) ok = ok && owners[p] == 1 && weights.normalizer()[p] == 1.0f;
                    if (!ok) {
                        const QByteArray at = where + " pixel (y " + QByteArray::number(qulonglong(p) / l.width) +
                                              ", x " + QByteArray::number(qulonglong(p) % l.width) + "): N " +
                                              QByteArray::number(weights.normalizer()[p]) + ", sum w/N " +
                                              QByteArray::number(viaN[p], 'g', 12) + ", sum w/N via 1/N " +
                                              QByteArray::number(viaInverse[p], 'g', 12) + ", owners " +
                                              QByteArray::number(owners[p]);
                        QFAIL(at.constData());
                    }
                }
            }
        }
    }

    void windowsAreSymmetricPositiveAndBounded() {
        for (BlendWindowKind kind : kAllWindows) {
            for (int length : {1, 2, 7, 8, 32, 33, 64, 255}) {
                for (int overlap : {0, 1, 5, 16, 31, 1000}) {
                    const auto w = axisWindow(kind, length, overlap);
                    QCOMPARE(w.size(), static_cast<std::size_t>(length));
                    for (int i = 0; i < length; ++i) {
                        QVERIFY(w[static_cast<std::size_t>(i)] == w[static_cast<std::size_t>(length - 1 - i)]);
                        QVERIFY(w[static_cast<std::size_t>(i)] > 0.0f);
                        QVERIFY(w[static_cast<std::size_t>(i)] <= 1.0f);
                    }
                }
            }
        }
    }

    void windowFormulas() {
        // linear, T = 32, O = 8: ramps of 8 pixels, 1 in the middle.
        const auto lin = axisWindow(BlendWindowKind::Linear, 32, 8);
        QCOMPARE(lin[0], 0.0625f);
        QCOMPARE(lin[7], 0.9375f);
        for (int i = 8; i < 24; ++i) QCOMPARE(lin[static_cast<std::size_t>(i)], 1.0f);
        QCOMPARE(lin[24], 0.9375f);
        QCOMPARE(lin[31], 0.0625f);
        // O = 0: flat; O clamped to T - 1.
        for (float v : axisWindow(BlendWindowKind::Linear, 16, 0)) QCOMPARE(v, 1.0f);
        QCOMPARE(axisWindow(BlendWindowKind::Linear, 16, 100), axisWindow(BlendWindowKind::Linear, 16, 15));
        QCOMPARE(axisWindow(BlendWindowKind::Linear, 16, 15)[0], static_cast<float>(0.5 / 15));
        // none: ones (ownership is applied per tile).
        for (float v : axisWindow(BlendWindowKind::None, 16, 4)) QCOMPARE(v, 1.0f);
        // hann and gaussian against the formulas.
        for (int T : {8, 33, 64}) {
            const auto hann = axisWindow(BlendWindowKind::Hann, T, 4);
            const auto gauss = axisWindow(BlendWindowKind::Gaussian, T, 4);
            for (int i = 0; i < T; ++i) {
                const double h = 0.5 - 0.5 * std::cos(2.0 * std::numbers::pi * (i + 0.5) / T);
                const double d = i - (T - 1) / 2.0;
                const double g = std::exp(-(d * d) / (double(T) * T) / (2.0 * 0.01));
                QVERIFY(std::abs(hann[static_cast<std::size_t>(i)] - h) <= 1e-7 * std::max(1.0, h));
                QVERIFY(std::abs(gauss[static_cast<std::size_t>(i)] - g) <= 1e-6 * g);
            }
        }
        // The Gaussian edge is tiny but positive: exp(-12.5 * (31/32)^2) for T = 32.
        const auto g32 = axisWindow(BlendWindowKind::Gaussian, 32, 0);
        QVERIFY(std::abs(g32[0] - std::exp(-12.5 * (31.0 / 32) * (31.0 / 32))) < 1e-9);
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, (void)axisWindow(BlendWindowKind::Hann, 0, 0));
    }

    void tileMapsAreSeparableAndShared() {
        const TilePlan plan = TilePlan::make(97, 61, 32, 7);
        for (BlendWindowKind kind : {BlendWindowKind::Linear, BlendWindowKind::Hann, BlendWindowKind::Gaussian}) {
            const BlendWeights weights(plan, kind, 7);
            QCOMPARE(weights.mapCount(), 1);
            const auto wx = axisWindow(kind, plan.tileW(), 7);
            const auto wy = axisWindow(kind, plan.tileH(), 7);
            for (int id = 0; id < plan.count(); ++id) {
                QCOMPARE(weights.tileWeights(id), weights.map(0));
                for (int y = 0; y < plan.tileH(); y += 5)
                    for (int x = 0; x < plan.tileW(); x += 3)
                        QCOMPARE(weights.weight(id, y, x),
                                 wy[static_cast<std::size_t>(y)] * wx[static_cast<std::size_t>(x)]);
            }
            std::vector<float> copy(static_cast<std::size_t>(plan.tileW() * plan.tileH()));
            weights.fillTileWeights(3, copy.data());
            QVERIFY(std::equal(copy.begin(), copy.end(), weights.tileWeights(3)));
        }
        // Small image: the tile is the image, the window is built for that length.
        const TilePlan small = TilePlan::make(40, 24, 64, 16);
        const BlendWeights hann(small, BlendWindowKind::Hann, 16);
        QCOMPARE(hann.tileW(), 40);
        QCOMPARE(hann.tileH(), 24);
        QCOMPARE(hann.columnWeights(0), axisWindow(BlendWindowKind::Hann, 40, 16));
        QCOMPARE(hann.rowWeights(0), axisWindow(BlendWindowKind::Hann, 24, 16));
        QVERIFY_THROWS_EXCEPTION(std::out_of_range, (void)hann.tileWeights(1));
        QVERIFY_THROWS_EXCEPTION(std::out_of_range, (void)hann.weight(0, 24, 0));
    }

    void linearIsOneWhereOnlyOneTileCovers() {
        // 96 wide, tile 32, overlap 8: x positions 0, 24, 48, 64. Pixels 8..23 are covered by
        // tile 0 alone, and linear is exactly 1 there, so the blend leaves them untouched.
        const TilePlan plan = TilePlan::make(96, 64, 32, 8);
        const BlendWeights weights(plan, BlendWindowKind::Linear, 8);
        for (int x = 8; x < 24; ++x) {
            QCOMPARE(weights.columnWeights(0)[static_cast<std::size_t>(x)], 1.0f);
            QCOMPARE(weights.normalizerAt(8, x), 1.0f);
        }
    }

    void noneOwnershipIsNearestCentre() {
        // x positions 0, 24, 48, 64 with T = 32: centres 16, 40, 64, 80; boundaries at 28, 52, 72.
        const TilePlan plan = TilePlan::make(96, 64, 32, 8);
        const BlendWeights weights(plan, BlendWindowKind::None, 8);
        const int firstOwned[] = {0, 4, 4, 8};  // tile-local
        const int lastOwned[] = {27, 27, 23, 31};
        for (int col = 0; col < 4; ++col) {
            const auto& w = weights.columnWeights(col);
            for (int i = 0; i < 32; ++i) {
                const float expected = (i >= firstOwned[col] && i <= lastOwned[col]) ? 1.0f : 0.0f;
                QVERIFY2(w[static_cast<std::size_t>(i)] == expected,
                         QByteArray("col ") + QByteArray::number(col) + " i " + QByteArray::number(i));
            }
        }
        // Ties go to the lower index: 57 wide, tile 32, overlap 7 -> positions 0, 25, centres 16 and 41;
        // pixel 28 (centre 28.5) is 12.5 from both and belongs to tile 0.
        const TilePlan tie = TilePlan::make(57, 32, 32, 7);
        const BlendWeights tied(tie, BlendWindowKind::None, 7);
        QCOMPARE(tied.columnWeights(0)[28], 1.0f);
        QCOMPARE(tied.columnWeights(1)[3], 0.0f);  // pixel 28 in tile 1
        QCOMPARE(tied.columnWeights(0)[29], 0.0f);
        QCOMPARE(tied.columnWeights(1)[4], 1.0f);
        // Many tiles, few distinct maps.
        const TilePlan big = TilePlan::make(1000, 1000, 64, 16);
        const BlendWeights many(big, BlendWindowKind::None, 16);
        QVERIFY(many.mapCount() <= 16);
        QVERIFY(many.mapCount() >= 4);
    }
};

QTEST_GUILESS_MAIN(TestBlendWindow)
#include "tst_blendwindow.moc"
