// CudaBackend against the float32 CPU reference on small random UNets: fp32 / fp16 / bf16
// tolerances, every output element written (outputs poisoned with NaN first), bit-identical
// repeats, and batch 1 agreeing with batch 4. Skips where no CUDA device is present.
#include <QtTest/QtTest>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/cpu/CpuBackend.h"
#include "core/models/unet/UNetModel.h"
#include "kernels/backend/CudaBackend.h"

using namespace tessera;

namespace {

// DDPM-like: one head per attention, downsample_padding 0 (pad right/bottom), freq_shift 1,
// sin first; three levels, a conv_shortcut in every up resnet.
UNetConfig ddpmLike() {
    UNetConfig c;
    c.inChannels = 3;
    c.outChannels = 3;
    c.blockOutChannels = {32, 64, 64};
    c.downBlocks = {DownBlockType::Down, DownBlockType::AttnDown, DownBlockType::Down};
    c.upBlocks = {UpBlockType::Up, UpBlockType::AttnUp, UpBlockType::Up};
    c.layersPerBlock = 2;
    c.normNumGroups = 8;
    c.attentionHeadDim = std::nullopt;
    c.downsamplePadding = 0;
    c.normEps = 1e-6f;
    c.freqShift = 1;
    c.flipSinToCos = false;
    return c;
}

// The other branches: multi-head attention everywhere, symmetric downsample padding,
// FiLM time conditioning (so the mid attention has no GroupNorm), a mid-block rescale,
// an explicit time-embedding width, 3 channels per group (scalar GroupNorm path).
UNetConfig variant() {
    UNetConfig c;
    c.inChannels = 3;
    c.outChannels = 3;
    c.blockOutChannels = {32, 48};
    c.downBlocks = {DownBlockType::AttnDown, DownBlockType::AttnDown};
    c.upBlocks = {UpBlockType::AttnUp, UpBlockType::AttnUp};
    c.layersPerBlock = 1;
    c.normNumGroups = 16;
    c.attentionHeadDim = 8;
    c.downsamplePadding = 1;
    c.resnetTimeScaleShift = TimeScaleShift::ScaleShift;
    c.midBlockScaleFactor = 1.41421356f;
    c.timeEmbeddingDim = 96;
    return c;
}

std::vector<float> randomInput(std::size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

struct Comparison {
    double rel = 0, maxAbs = 0;
    long long nonFinite = 0;
};

Comparison compare(const std::vector<float>& got, const std::vector<float>& ref) {
    Comparison c;
    double num = 0, den = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
        if (!std::isfinite(got[i])) {
            ++c.nonFinite;
            continue;
        }
        const double d = static_cast<double>(got[i]) - ref[i];
        num += d * d;
        den += static_cast<double>(ref[i]) * ref[i];
        c.maxAbs = std::max(c.maxAbs, std::abs(d));
    }
    c.rel = std::sqrt(num / std::max(den, 1e-30));
    return c;
}

const char* precisionName(Precision p) {
    return p == Precision::FP32 ? "fp32" : (p == Precision::FP16 ? "fp16" : "bf16");
}

// Relative L2 difference of two layer traces over the first `count` values (all when 0).
double relDiff(const std::vector<float>& a, const std::vector<float>& b, std::size_t count = 0) {
    const std::size_t n = count ? std::min(count, a.size()) : a.size();
    double num = 0, den = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const double d = static_cast<double>(a[i]) - b[i];
        num += std::isfinite(d) ? d * d : 1e30;
        den += static_cast<double>(b[i]) * b[i];
    }
    return std::sqrt(num / std::max(den, 1e-30));
}

// Prints the first layers where two traces differ by more than `limit` (diagnostics).
void reportTraceDifferences(const std::vector<CudaBackend::LayerTrace>& a,
                            const std::vector<CudaBackend::LayerTrace>& b, double limit, const char* what,
                            int batchA = 1, int batchB = 1) {
    int shown = 0;
    for (std::size_t i = 0; i < a.size() && i < b.size() && shown < 6; ++i) {
        if (a[i].values.empty()) continue;
        const std::size_t per = std::min(a[i].values.size() / batchA, b[i].values.size() / batchB);
        const double r = relDiff(a[i].values, b[i].values, per);
        if (r > limit) {
            qInfo("%s: layer %zu %s differs by %.3e", what, i, a[i].name.c_str(), r);
            ++shown;
        }
    }
    if (shown == 0) qInfo("%s: no layer differs by more than %.1e", what, limit);
}

double tolerance(Precision p) { return p == Precision::FP32 ? 1e-5 : (p == Precision::FP16 ? 2e-3 : 1e-2); }

}  // namespace

class TestCudaBackend : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() {
        std::string why;
        if (!cudaDeviceAvailable(&why)) QSKIP(why.c_str());
    }

    void matchesCpu_data() {
        QTest::addColumn<int>("model");
        QTest::addColumn<int>("precision");
        QTest::addColumn<int>("tileH");
        QTest::addColumn<int>("tileW");
        for (int p : {0, 1, 2}) {
            const char* n = precisionName(static_cast<Precision>(p));
            QTest::newRow((std::string("ddpm-like 32x32 ") + n).c_str()) << 0 << p << 32 << 32;
            QTest::newRow((std::string("variant 16x24 ") + n).c_str()) << 1 << p << 16 << 24;
        }
    }

    void matchesCpu() {
        QFETCH(int, model);
        QFETCH(int, precision);
        QFETCH(int, tileH);
        QFETCH(int, tileW);
        const Precision prec = static_cast<Precision>(precision);
        const UNetModel m = UNetModel::random(model == 0 ? ddpmLike() : variant(), 7 + model);
        const int batch = 2;
        const std::size_t n = static_cast<std::size_t>(batch) * 3 * tileH * tileW;
        const std::vector<float> x = randomInput(n, 11 + model);
        const std::vector<float> t{999.0f, 37.5f};

        CpuBackend cpu(2);
        cpu.prepare(m, batch, tileH, tileW);
        std::vector<float> ref(n, std::numeric_limits<float>::quiet_NaN());
        cpu.forward(x.data(), t.data(), batch, ref.data());

        CudaBackend gpu(prec);
        gpu.prepare(m, batch, tileH, tileW);
        std::vector<float> out(n, std::numeric_limits<float>::quiet_NaN());
        gpu.forward(x.data(), t.data(), batch, out.data());

        const Comparison c = compare(out, ref);
        const CudaMemoryPlan plan = gpu.memoryPlan();
        qInfo(
            "%s %s %dx%d: rel %.3e max|d| %.3e (tolerance %.0e); arena %.2f MiB = weights %.2f + activations %.2f "
            "(unshared %.2f) + workspace %.2f",
            model == 0 ? "ddpm-like" : "variant", precisionName(prec), tileW, tileH, c.rel, c.maxAbs, tolerance(prec),
            plan.totalBytes / 1048576.0, plan.weightsBytes / 1048576.0, plan.activationsBytes / 1048576.0,
            plan.unsharedActivationsBytes / 1048576.0, plan.workspaceBytes / 1048576.0);
        QVERIFY2(c.nonFinite == 0,
                 qPrintable(QString("%1 output elements not finite (unwritten or overflowed)").arg(c.nonFinite)));
        QVERIFY2(
            c.rel < tolerance(prec),
            qPrintable(
                QString("relative error %1 exceeds %2 (%3)").arg(c.rel).arg(tolerance(prec)).arg(precisionName(prec))));
        QVERIFY(plan.totalBytes == plan.weightsBytes + plan.activationsBytes + plan.workspaceBytes);
        QVERIFY(plan.activationsBytes <= plan.unsharedActivationsBytes);
    }

    void deterministic_data() {
        QTest::addColumn<int>("precision");
        QTest::newRow("fp32") << 0;
        QTest::newRow("fp16") << 1;
        QTest::newRow("bf16") << 2;
    }

    void deterministic() {
        QFETCH(int, precision);
        const UNetModel m = UNetModel::random(ddpmLike(), 3);
        const int batch = 3;
        const std::size_t n = static_cast<std::size_t>(batch) * 3 * 32 * 32;
        const std::vector<float> x = randomInput(n, 5);
        const std::vector<float> t{500.0f, 20.0f, 0.0f};
        CudaBackend gpu(static_cast<Precision>(precision));
        gpu.prepare(m, batch, 32, 32);
        std::vector<float> a(n, std::numeric_limits<float>::quiet_NaN()), b(n, std::numeric_limits<float>::quiet_NaN());
        gpu.forward(x.data(), t.data(), batch, a.data());
        gpu.forward(x.data(), t.data(), batch, b.data());
        if (std::memcmp(a.data(), b.data(), n * sizeof(float)) != 0) {
            const auto ta = gpu.traceForward(x.data(), t.data(), batch);
            const auto tb = gpu.traceForward(x.data(), t.data(), batch);
            reportTraceDifferences(ta, tb, 0.0, "repeat", batch, batch);
            qInfo("%s", gpu.planSummary().c_str());
        }
        QVERIFY2(std::memcmp(a.data(), b.data(), n * sizeof(float)) == 0, "two identical forwards differ");
        QCOMPARE(compare(a, a).nonFinite, 0LL);
    }

    void batchOneMatchesBatchFour_data() {
        QTest::addColumn<int>("precision");
        QTest::newRow("fp32") << 0;
        QTest::newRow("fp16") << 1;
    }

    void batchOneMatchesBatchFour() {
        QFETCH(int, precision);
        const Precision prec = static_cast<Precision>(precision);
        const UNetModel m = UNetModel::random(ddpmLike(), 4);
        const std::size_t per = 3 * 32 * 32;
        const std::vector<float> x = randomInput(4 * per, 9);
        const std::vector<float> t{999.0f, 600.0f, 250.0f, 1.0f};
        CudaBackend gpu(prec);
        gpu.prepare(m, 4, 32, 32);
        std::vector<float> four(4 * per, std::numeric_limits<float>::quiet_NaN());
        gpu.forward(x.data(), t.data(), 4, four.data());
        for (int i = 0; i < 4; ++i) {
            std::vector<float> one(per, std::numeric_limits<float>::quiet_NaN());
            gpu.forward(x.data() + i * per, t.data() + i, 1, one.data());
            const std::vector<float> slice(four.begin() + i * per, four.begin() + (i + 1) * per);
            const Comparison c = compare(one, slice);
            qInfo("%s sample %d: batch 1 vs batch 4 rel %.3e", precisionName(prec), i, c.rel);
            if (i == 0 && c.rel >= tolerance(prec)) {
                const auto t4 = gpu.traceForward(x.data(), t.data(), 4);
                const auto t1 = gpu.traceForward(x.data(), t.data(), 1);
                reportTraceDifferences(t1, t4, tolerance(prec) / 4, "batch 1 vs 4", 1, 4);
            }
            QCOMPARE(c.nonFinite, 0LL);
            QVERIFY2(c.rel < tolerance(prec),
                     qPrintable(QString("sample %1: batch 1 vs 4 differ by %2").arg(i).arg(c.rel)));
        }
    }

    // One feature of the variant model at a time on the DDPM-like base, so that a failure
    // names the branch that is wrong.
    void features_data() {
        QTest::addColumn<int>("feature");
        QTest::addColumn<int>("precision");
        const char* names[] = {"heads8",  "pad1",     "scaleshift", "midscale",
                               "tembdim", "groups16", "nonsquare",  "allattn"};
        for (int p : {0, 1})
            for (int f = 0; f < 8; ++f)
                QTest::newRow((std::string(names[f]) + " " + precisionName(static_cast<Precision>(p))).c_str())
                    << f << p;
    }

    void features() {
        QFETCH(int, feature);
        QFETCH(int, precision);
        const Precision prec = static_cast<Precision>(precision);
        UNetConfig c = ddpmLike();
        int tileH = 32, tileW = 32;
        switch (feature) {
            case 0:
                c.attentionHeadDim = 8;
                break;
            case 1:
                c.downsamplePadding = 1;
                break;
            case 2:
                c.resnetTimeScaleShift = TimeScaleShift::ScaleShift;
                break;
            case 3:
                c.midBlockScaleFactor = 1.41421356f;
                break;
            case 4:
                c.timeEmbeddingDim = 96;
                break;
            case 5:
                c.normNumGroups = 16;
                c.blockOutChannels = {32, 48, 48};
                break;
            case 6:
                tileH = 16;
                tileW = 24;
                break;
            case 7:
                c.downBlocks = {DownBlockType::AttnDown, DownBlockType::AttnDown, DownBlockType::AttnDown};
                c.upBlocks = {UpBlockType::AttnUp, UpBlockType::AttnUp, UpBlockType::AttnUp};
                break;
        }
        const UNetModel m = UNetModel::random(c, 21);
        const int batch = 2;
        const std::size_t n = static_cast<std::size_t>(batch) * 3 * tileH * tileW;
        const std::vector<float> x = randomInput(n, 3);
        const std::vector<float> t{999.0f, 37.5f};
        CpuBackend cpu(2);
        cpu.prepare(m, batch, tileH, tileW);
        std::vector<float> ref(n);
        cpu.forward(x.data(), t.data(), batch, ref.data());
        CudaBackend gpu(prec);
        gpu.prepare(m, batch, tileH, tileW);
        std::vector<float> out(n, std::numeric_limits<float>::quiet_NaN());
        gpu.forward(x.data(), t.data(), batch, out.data());
        const Comparison r = compare(out, ref);
        qInfo("feature %d %s: rel %.3e", feature, precisionName(prec), r.rel);
        if (prec == Precision::FP16 && r.rel >= tolerance(prec)) {
            CudaBackend exact(Precision::FP32);
            exact.prepare(m, batch, tileH, tileW);
            reportTraceDifferences(gpu.traceForward(x.data(), t.data(), batch),
                                   exact.traceForward(x.data(), t.data(), batch), 1e-2, "fp16 vs fp32");
        }
        QCOMPARE(r.nonFinite, 0LL);
        QVERIFY2(r.rel < tolerance(prec), qPrintable(QString("relative error %1").arg(r.rel)));
    }

    void graphsMatchEager() {
        const UNetModel m = UNetModel::random(ddpmLike(), 12);
        const std::size_t per = 3 * 32 * 32;
        const std::vector<float> x = randomInput(2 * per, 13);
        const std::vector<float> t{700.0f, 3.0f};
        CudaBackend gpu(Precision::FP16);
        gpu.prepare(m, 2, 32, 32);
        std::vector<float> eager(2 * per), captured(2 * per, std::numeric_limits<float>::quiet_NaN()),
            replayed(2 * per, std::numeric_limits<float>::quiet_NaN());
        gpu.forward(x.data(), t.data(), 2, eager.data());
        gpu.setGraphs(true);
        gpu.forward(x.data(), t.data(), 2, captured.data());
        gpu.forward(x.data(), t.data(), 2, replayed.data());
        std::vector<float> one(per, std::numeric_limits<float>::quiet_NaN());
        gpu.forward(x.data(), t.data(), 1, one.data());
        const GraphStats g = gpu.graphStats();
        qInfo("graphs: mode %s, captures %d, hits %d, misses %d, nodes %d, capture %.2f ms, instantiate %.2f ms%s%s",
              g.mode.c_str(), g.captures, g.hits, g.misses, g.nodes, g.captureMs, g.instantiateMs,
              g.fallbackReason.empty() ? "" : ", fallback: ", g.fallbackReason.c_str());
        QVERIFY2(g.fallbackReason.empty(), g.fallbackReason.c_str());
        QCOMPARE(g.captures, 2);  // batch 2 and batch 1
        QCOMPARE(g.hits, 1);
        QVERIFY(g.nodes > 100);
        QVERIFY2(std::memcmp(eager.data(), captured.data(), eager.size() * sizeof(float)) == 0, "captured run differs");
        QVERIFY2(std::memcmp(eager.data(), replayed.data(), eager.size() * sizeof(float)) == 0, "replay differs");
        QCOMPARE(compare(one, std::vector<float>(eager.begin(), eager.begin() + per)).nonFinite, 0LL);
    }

    void rejectsBadShapes() {
        const UNetModel m = UNetModel::random(ddpmLike(), 1);
        CudaBackend gpu(Precision::FP16);
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, gpu.prepare(m, 1, 30, 32));
        gpu.prepare(m, 2, 32, 32);
        std::vector<float> x(3 * 3 * 32 * 32, 0.5f), out(x.size());
        const float t[3] = {1, 2, 3};
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, gpu.forward(x.data(), t, 3, out.data()));
    }
};

QTEST_GUILESS_MAIN(TestCudaBackend)
#include "tst_cudabackend.moc"
