// Philox4x32-10 against the Random123 known-answer vectors, and the statistics of the
// Box-Muller normals every backend draws its noise from (core/sampling/Philox.h).
#include <QtTest>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/sampling/Philox.h"

using namespace tessera;

class TestPhilox : public QObject {
    Q_OBJECT

private slots:
    void knownAnswers_data() {
        QTest::addColumn<QList<quint32>>("counter");
        QTest::addColumn<QList<quint32>>("key");
        QTest::addColumn<QList<quint32>>("expected");
        // Random123 kat_vectors, philox4x32 with 10 rounds.
        QTest::newRow("zero") << QList<quint32>{0, 0, 0, 0} << QList<quint32>{0, 0}
                              << QList<quint32>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8};
        QTest::newRow("ones") << QList<quint32>{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}
                              << QList<quint32>{0xffffffff, 0xffffffff}
                              << QList<quint32>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd};
        QTest::newRow("pi") << QList<quint32>{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}
                            << QList<quint32>{0xa4093822, 0x299f31d0}
                            << QList<quint32>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1};
    }

    void knownAnswers() {
        QFETCH(QList<quint32>, counter);
        QFETCH(QList<quint32>, key);
        QFETCH(QList<quint32>, expected);
        const Philox4x32 out =
            philox4x32_10(Philox4x32{{counter[0], counter[1], counter[2], counter[3]}}, key[0], key[1]);
        for (int i = 0; i < 4; ++i)
            QVERIFY2(out.v[i] == expected[i], qPrintable(QString("word %1: %2 vs %3")
                                                             .arg(i)
                                                             .arg(out.v[i], 8, 16, QChar('0'))
                                                             .arg(expected[i], 8, 16, QChar('0'))));
    }

    void keyingFollowsTheContract() {
        // philoxBits(seed, draw, index) = philox(counter (lo, hi of index, draw, tag), key (lo, hi of seed)).
        const std::uint64_t seed = 0x0123456789abcdefull, index = 0x00000007fedcba98ull;
        const Philox4x32 a = philoxBits(seed, 5, index);
        const Philox4x32 b = philox4x32_10(Philox4x32{{0xfedcba98u, 0x7u, 5u, kPhiloxTag}}, 0x89abcdefu, 0x01234567u);
        for (int i = 0; i < 4; ++i) QCOMPARE(a.v[i], b.v[i]);
    }

    void normalStatistics() {
        const int n = 1000000;
        double sum = 0, sumSq = 0, sum4 = 0;
        int beyond3 = 0;
        for (int i = 0; i < n; ++i) {
            const double z = philoxNormal(42, 0, static_cast<std::uint64_t>(i));
            QVERIFY(std::isfinite(z));
            sum += z;
            sumSq += z * z;
            sum4 += z * z * z * z;
            if (std::fabs(z) > 3) ++beyond3;
        }
        const double mean = sum / n, var = sumSq / n - mean * mean;
        // Standard errors: mean 1e-3, variance 1.4e-3; allow 5 of them.
        QVERIFY2(std::fabs(mean) < 5e-3, qPrintable(QString::number(mean)));
        QVERIFY2(std::fabs(var - 1) < 7e-3, qPrintable(QString::number(var)));
        QVERIFY2(std::fabs(sum4 / n - 3) < 0.05, qPrintable(QString::number(sum4 / n)));  // kurtosis of a normal
        QVERIFY2(std::abs(beyond3 - 2700) < 300, qPrintable(QString::number(beyond3)));   // P(|z| > 3) = 0.27 %
    }

    void deterministic() {
        for (const std::uint64_t i : {0ull, 1ull, 12345ull, 0xffffffffffull}) {
            QCOMPARE(philoxNormal(7, 3, i), philoxNormal(7, 3, i));
            const Philox4x32 a = philoxBits(7, 3, i), b = philoxBits(7, 3, i);
            for (int w = 0; w < 4; ++w) QCOMPARE(a.v[w], b.v[w]);
        }
        QVERIFY(philoxNormal(7, 3, 10) != philoxNormal(8, 3, 10));                 // the seed matters
        QVERIFY(philoxNormal(7, 3, 10) != philoxNormal(7, 4, 10));                 // the draw matters
        QVERIFY(philoxNormal(7, 3, 10) != philoxNormal(7, 3, 11));                 // the index matters
        QVERIFY(philoxNormal(7, 3, 10) != philoxNormal(7, 3, 10 + (1ull << 32)));  // the index's high word too
        QVERIFY(philoxNormal(1ull << 32, 3, 10) != philoxNormal(0, 3, 10));        // the seed's high word too
    }

    void independentAcrossDrawAndIndex() {
        constexpr int n = 200000;
        auto correlation = [](auto first, auto second) {
            double sa = 0, sb = 0, sab = 0, saa = 0, sbb = 0;
            for (int i = 0; i < n; ++i) {
                const double a = first(i), b = second(i);
                sa += a;
                sb += b;
                sab += a * b;
                saa += a * a;
                sbb += b * b;
            }
            const double cov = sab / n - sa / n * sb / n;
            return cov / std::sqrt((saa / n - sa / n * sa / n) * (sbb / n - sb / n * sb / n));
        };
        // Standard error of a correlation over n pairs is 1/sqrt(n) = 2.2e-3; allow 5 of them.
        const double limit = 5.0 / std::sqrt(double(n));
        const double draws = correlation([](int i) { return philoxNormal(9, 0, std::uint64_t(i)); },
                                         [](int i) { return philoxNormal(9, 1, std::uint64_t(i)); });
        const double neighbours = correlation([](int i) { return philoxNormal(9, 0, std::uint64_t(2 * i)); },
                                              [](int i) { return philoxNormal(9, 0, std::uint64_t(2 * i + 1)); });
        const double seeds = correlation([](int i) { return philoxNormal(9, 2, std::uint64_t(i)); },
                                         [](int i) { return philoxNormal(10, 2, std::uint64_t(i)); });
        QVERIFY2(std::fabs(draws) < limit, qPrintable(QString::number(draws)));
        QVERIFY2(std::fabs(neighbours) < limit, qPrintable(QString::number(neighbours)));
        QVERIFY2(std::fabs(seeds) < limit, qPrintable(QString::number(seeds)));
    }
};

QTEST_GUILESS_MAIN(TestPhilox)
#include "tst_philox.moc"
