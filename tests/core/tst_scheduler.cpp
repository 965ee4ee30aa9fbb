// Scheduler checks against values written out by hand and against the textbook update
// formulas of diffusers' schedulers (scheduling_ddpm.py, scheduling_ddim.py,
// scheduling_euler_discrete.py) evaluated in double precision.
#include <QtTest>

#include <cmath>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <vector>

#include "core/sampling/Scheduler.h"

using namespace tessera;

namespace {

std::vector<int> asInts(const std::vector<float>& v) {
    std::vector<int> out;
    for (const float t : v) out.push_back(static_cast<int>(t));
    return out;
}

// Independent schedule: (1 - β) multiplied in double from the double-precision linear betas.
std::vector<double> doubleAlphasCumprodLinear(double start, double end, int n) {
    std::vector<double> out;
    double p = 1.0;
    for (int i = 0; i < n; ++i) {
        p *= 1.0 - (start + (end - start) * i / (n - 1));
        out.push_back(p);
    }
    return out;
}

struct Sample {
    std::vector<float> x, eps, z;
};

Sample randomSample(std::size_t n, unsigned seed, float xScale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    Sample s;
    for (std::size_t i = 0; i < n; ++i) {
        s.x.push_back(xScale * normal(rng));
        s.eps.push_back(normal(rng));
        s.z.push_back(normal(rng));
    }
    return s;
}

double clampD(double v, double r) { return std::min(std::max(v, -r), r); }

bool close(double got, double want, double scale, double rel = 1e-5) {
    return std::fabs(got - want) <= rel * std::max(1.0, scale);
}

}  // namespace

class TestScheduler : public QObject {
    Q_OBJECT

private slots:
    void ddimLeading50() {
        auto s = Scheduler::create(SchedulerKind::DDIM, SchedulerOptions{});
        s->setTimesteps(50);
        QCOMPARE(s->numSteps(), 50);
        for (int k = 0; k < 50; ++k) QCOMPARE(s->timesteps()[static_cast<std::size_t>(k)], float(980 - 20 * k));
        QCOMPARE(s->initNoiseSigma(), 1.0f);
    }

    void leadingWithOffset() {
        SchedulerOptions o;
        o.stepsOffset = 1;
        auto s = Scheduler::create(SchedulerKind::DDIM, o);
        s->setTimesteps(4);  // 1000 // 4 = 250
        QCOMPARE(asInts(s->timesteps()), (std::vector<int>{751, 501, 251, 1}));
        o.stepsOffset = 5;
        auto bad = Scheduler::create(SchedulerKind::DDIM, o);
        try {
            bad->setTimesteps(1000);  // 999 + 5 leaves the table
            QFAIL("steps_offset beyond the table was accepted");
        } catch (const ValidationError& e) {
            QCOMPARE(QString::fromStdString(e.field()), QString("steps_offset"));
            QVERIFY(QString(e.what()).contains("1004"));
        }
    }

    void trailingByHand() {
        // 1000 / 16 = 62.5: 1000, 937.5, 875, ... rounded half to even, minus 1.
        QCOMPARE(spacedTimesteps(1000, 16, TimestepSpacing::Trailing, 0),
                 (std::vector<int>{999, 937, 874, 811, 749, 687, 624, 561, 499, 437, 374, 311, 249, 187, 124, 61}));
        QCOMPARE(spacedTimesteps(1000, 3, TimestepSpacing::Trailing, 0), (std::vector<int>{999, 666, 332}));
        QCOMPARE(spacedTimesteps(1000, 1, TimestepSpacing::Trailing, 7), (std::vector<int>{999}));
        // 1000 / (1000 / 61) > 61 in float64: NumPy would add a 62nd value; we keep exactly 61.
        const std::vector<int> t61 = spacedTimesteps(1000, 61, TimestepSpacing::Trailing, 0);
        QCOMPARE(int(t61.size()), 61);
        QCOMPARE(t61.front(), 999);
        QCOMPARE(t61.back(), 15);  // round(16.39) - 1
    }

    void linspaceByHand() {
        QCOMPARE(spacedTimesteps(1000, 4, TimestepSpacing::Linspace, 0), (std::vector<int>{999, 666, 333, 0}));
        // 999 / 6 = 166.5: 166.5 -> 166, 499.5 -> 500, 832.5 -> 832 (half to even).
        QCOMPARE(spacedTimesteps(1000, 7, TimestepSpacing::Linspace, 0),
                 (std::vector<int>{999, 832, 666, 500, 333, 166, 0}));
        QCOMPARE(spacedTimesteps(1000, 1, TimestepSpacing::Linspace, 3), (std::vector<int>{0}));
        auto s = Scheduler::create(SchedulerKind::DDPM, [] {
            SchedulerOptions o;
            o.timestepSpacing = TimestepSpacing::Linspace;
            return o;
        }());
        s->setTimesteps(7);
        QCOMPARE(asInts(s->timesteps()), (std::vector<int>{999, 832, 666, 500, 333, 166, 0}));
    }

    void linearBetas() {
        auto s = Scheduler::create(SchedulerKind::DDPM, SchedulerOptions{});
        const std::vector<float>& b = s->betas();
        QCOMPARE(int(b.size()), 1000);
        QCOMPARE(b.front(), 1e-4f);  // start + step * 0
        QCOMPARE(b.back(), 0.02f);   // end - step * 0
        for (const int i : {1, 2, 17, 250, 499, 500, 501, 998}) {
            const double want = 1e-4 + (0.02 - 1e-4) * i / 999.0;
            const double ulp = std::nextafter(float(want), 1.0f) - float(want);
            QVERIFY2(std::fabs(b[static_cast<std::size_t>(i)] - want) <= 2 * ulp, qPrintable(QString::number(i)));
        }
        // Spot values of torch.linspace(1e-4, 0.02, 1000, dtype=float32).
        QCOMPARE(b[1], 0.00011991991777904332f);
        QCOMPARE(b[499], 0.010040040127933025f);
        QCOMPARE(b[500], 0.010059959255158901f);
    }

    void alphasCumprodMatchesDouble() {
        auto s = Scheduler::create(SchedulerKind::DDPM, SchedulerOptions{});
        const std::vector<double> want = doubleAlphasCumprodLinear(1e-4, 0.02, 1000);
        const std::vector<float>& got = s->alphasCumprod();
        QCOMPARE(int(got.size()), 1000);
        for (std::size_t i = 0; i < got.size(); ++i)
            QVERIFY2(std::fabs(got[i] - want[i]) <= 1e-5 * want[i], qPrintable(QString::number(i)));
        QVERIFY(std::fabs(got[999] - 4.0358e-5) < 1e-8);  // the well-known DDPM value
    }

    void scaledLinear() {
        SchedulerOptions o;
        o.betaSchedule = BetaSchedule::ScaledLinear;
        o.betaStart = 0.00085f;
        o.betaEnd = 0.012f;
        const std::vector<float> b = betaSchedule(o);
        const double a = std::sqrt(0.00085), e = std::sqrt(0.012);
        for (const int i : {0, 1, 333, 999}) {
            const double r = a + (e - a) * i / 999.0;
            QVERIFY(std::fabs(b[static_cast<std::size_t>(i)] - r * r) <= 1e-6 * r * r);
        }
    }

    void squaredCos() {
        SchedulerOptions o;
        o.betaSchedule = BetaSchedule::SquaredCosCapV2;
        const std::vector<float> b = betaSchedule(o);
        QCOMPARE(int(b.size()), 1000);
        const double pi = std::acos(-1.0);
        auto f = [pi](double t) { return std::pow(std::cos((t + 0.008) / 1.008 * pi / 2), 2); };
        for (const int i : {0, 1, 100, 500, 900, 990}) {
            const double want = std::min(1.0 - f((i + 1) / 1000.0) / f(i / 1000.0), 0.999);
            QVERIFY2(std::fabs(b[static_cast<std::size_t>(i)] - want) <= 1e-6 * want, qPrintable(QString::number(i)));
        }
        QCOMPARE(b[999], 0.999f);  // ᾱ(1) = cos²(π/2) ≈ 0, so the cap applies
        QVERIFY(b[0] > 0.0f && b[0] < 1e-4f);
        QVERIFY(std::is_sorted(b.begin(), b.end()));
    }

    void ddimMatchesTextbook_data() {
        QTest::addColumn<int>("prediction");
        QTest::addColumn<bool>("clip");
        QTest::addColumn<float>("eta");
        QTest::addColumn<int>("spacing");
        QTest::newRow("eps") << int(PredictionType::Epsilon) << false << 0.0f << int(TimestepSpacing::Leading);
        QTest::newRow("eps-clip") << int(PredictionType::Epsilon) << true << 0.0f << int(TimestepSpacing::Leading);
        QTest::newRow("eps-eta") << int(PredictionType::Epsilon) << true << 0.7f << int(TimestepSpacing::Leading);
        QTest::newRow("eps-trailing") << int(PredictionType::Epsilon) << false << 0.0f
                                      << int(TimestepSpacing::Trailing);
        QTest::newRow("sample") << int(PredictionType::Sample) << true << 0.0f << int(TimestepSpacing::Leading);
        QTest::newRow("v") << int(PredictionType::VPrediction) << true << 1.0f << int(TimestepSpacing::Linspace);
    }

    void ddimMatchesTextbook() {
        QFETCH(int, prediction);
        QFETCH(bool, clip);
        QFETCH(float, eta);
        QFETCH(int, spacing);
        SchedulerOptions o;
        o.predictionType = PredictionType(prediction);
        o.clipSample = clip;
        o.eta = eta;
        o.timestepSpacing = TimestepSpacing(spacing);
        auto s = Scheduler::create(SchedulerKind::DDIM, o);
        const int N = 25;
        s->setTimesteps(N);
        const std::vector<float>& ac = s->alphasCumprod();
        const Sample smp = randomSample(64, 7);
        for (int k = 0; k < N; ++k) {
            const int t = static_cast<int>(s->timesteps()[static_cast<std::size_t>(k)]);
            const int prev = t - 1000 / N;
            const double at = ac[static_cast<std::size_t>(t)];
            const double ap = prev >= 0 ? double(ac[static_cast<std::size_t>(prev)]) : 1.0;
            const double bt = 1 - at, bp = 1 - ap;
            const double var = bp / bt * (1 - at / ap), sd = eta * std::sqrt(var);
            QCOMPARE(s->addsNoise(k), eta > 0 && sd > 0);
            std::vector<float> out(smp.x.size());
            s->step(k, smp.eps.data(), smp.x.data(), smp.z.data(), out.data(), out.size());
            for (std::size_t i = 0; i < out.size(); ++i) {
                const double x = smp.x[i], m = smp.eps[i];
                double x0 = 0, e = 0;
                if (o.predictionType == PredictionType::Epsilon) {
                    x0 = (x - std::sqrt(bt) * m) / std::sqrt(at);
                    e = m;
                } else if (o.predictionType == PredictionType::Sample) {
                    x0 = m;
                    e = (x - std::sqrt(at) * x0) / std::sqrt(bt);
                } else {
                    x0 = std::sqrt(at) * x - std::sqrt(bt) * m;
                    e = std::sqrt(at) * m + std::sqrt(bt) * x;
                }
                if (clip) x0 = clampD(x0, 1.0);
                const double want =
                    std::sqrt(ap) * x0 + std::sqrt(1 - ap - sd * sd) * e + (eta > 0 ? sd * smp.z[i] : 0.0);
                const double scale = std::fabs(x) / std::sqrt(at) + std::fabs(m) * std::sqrt(bt / at) + std::fabs(e);
                QVERIFY2(close(out[i], want, scale),
                         qPrintable(QString("step %1 i %2: %3 vs %4").arg(k).arg(i).arg(out[i]).arg(want)));
            }
            QCOMPARE(s->coefficients(k).timestep, float(t));
            QCOMPARE(s->coefficients(k).modelInputScale, 1.0f);
        }
    }

    void ddimLastStepReturnsX0() {
        auto s = Scheduler::create(SchedulerKind::DDIM, SchedulerOptions{});  // clip_sample, set_alpha_to_one
        s->setTimesteps(50);
        const StepCoefficients k = s->coefficients(49);
        QCOMPARE(k.timestep, 0.0f);
        const double a0 = s->alphasCumprod()[0];
        for (const float x : {-3.0f, -0.2f, 0.0f, 0.5f, 2.0f})
            for (const float e : {-1.5f, 0.0f, 0.3f}) {
                const double x0 = clampD((x - std::sqrt(1 - a0) * e) / std::sqrt(a0), 1.0);
                QVERIFY(std::fabs(applyStep(k, x, e, 123.0f, 0.0f) - x0) < 1e-6);
            }
        QVERIFY(!s->addsNoise(49));
    }

    void ddpmMatchesTextbook_data() {
        QTest::addColumn<int>("variance");
        QTest::addColumn<bool>("clip");
        QTest::addColumn<int>("steps");
        QTest::newRow("small-clip-1000") << int(VarianceType::FixedSmall) << true << 1000;
        QTest::newRow("large-clip-1000") << int(VarianceType::FixedLarge) << true << 1000;
        QTest::newRow("small-noclip-40") << int(VarianceType::FixedSmall) << false << 40;
        QTest::newRow("large-clip-33") << int(VarianceType::FixedLarge) << true << 33;
    }

    void ddpmMatchesTextbook() {
        QFETCH(int, variance);
        QFETCH(bool, clip);
        QFETCH(int, steps);
        SchedulerOptions o;
        o.varianceType = VarianceType(variance);
        o.clipSample = clip;
        auto s = Scheduler::create(SchedulerKind::DDPM, o);
        s->setTimesteps(steps);
        QCOMPARE(s->numSteps(), steps);
        const std::vector<float>& ac = s->alphasCumprod();
        const Sample smp = randomSample(32, 11, 1.5f);
        for (int k = 0; k < steps; k += (steps > 100 ? 37 : 1)) {
            const int t = static_cast<int>(s->timesteps()[static_cast<std::size_t>(k)]);
            const int prev = k + 1 < steps ? static_cast<int>(s->timesteps()[static_cast<std::size_t>(k + 1)]) : -1;
            const double at = ac[static_cast<std::size_t>(t)];
            const double ap = prev >= 0 ? double(ac[static_cast<std::size_t>(prev)]) : 1.0;
            const double bt = 1 - at, bp = 1 - ap, acur = at / ap, bcur = 1 - acur;
            const double sigma =
                t > 0 ? (o.varianceType == VarianceType::FixedLarge ? std::sqrt(bcur)
                                                                    : std::sqrt(std::max(bp / bt * bcur, 1e-20)))
                      : 0.0;
            QCOMPARE(s->addsNoise(k), t > 0);
            for (std::size_t i = 0; i < smp.x.size(); ++i) {
                const double x = smp.x[i], e = smp.eps[i];
                double x0 = (x - std::sqrt(bt) * e) / std::sqrt(at);
                if (clip) x0 = clampD(x0, 1.0);
                const double mu = std::sqrt(ap) * bcur / bt * x0 + std::sqrt(acur) * bp / bt * x;
                const double want = mu + sigma * smp.z[i];
                const float got = applyStep(s->coefficients(k), smp.x[i], smp.eps[i], smp.z[i], 0.0f);
                const double scale = std::fabs(x) / std::sqrt(at) + std::fabs(e) * std::sqrt(bt / at);
                QVERIFY2(close(got, want, scale),
                         qPrintable(QString("step %1 t %2: %3 vs %4").arg(k).arg(t).arg(got).arg(want)));
            }
        }
    }

    void ddpmNoNoiseAtZero() {
        auto s = Scheduler::create(SchedulerKind::DDPM, SchedulerOptions{});
        s->setTimesteps(1000);
        QCOMPARE(s->timesteps().back(), 0.0f);
        QCOMPARE(s->coefficients(999).sigma, 0.0f);
        QVERIFY(!s->addsNoise(999));
        QVERIFY(s->addsNoise(998));
        QVERIFY(s->addsNoise(0));
        // z is not needed on a step without noise, and is required on one with noise.
        std::vector<float> x{0.3f}, e{0.1f}, out(1);
        s->step(999, e.data(), x.data(), nullptr, out.data(), 1);
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, s->step(0, e.data(), x.data(), nullptr, out.data(), 1));
    }

    void eulerMatchesTextbook_data() {
        QTest::addColumn<bool>("karras");
        QTest::addColumn<int>("spacing");
        QTest::newRow("linspace") << false << int(TimestepSpacing::Linspace);
        QTest::newRow("karras-linspace") << true << int(TimestepSpacing::Linspace);
        QTest::newRow("karras-leading") << true << int(TimestepSpacing::Leading);
    }

    void eulerMatchesTextbook() {
        QFETCH(bool, karras);
        QFETCH(int, spacing);
        SchedulerOptions o;
        o.karrasSigmas = karras;
        o.timestepSpacing = TimestepSpacing(spacing);
        o.clipSample = false;  // diffusers' EulerDiscreteScheduler exactly (SD's schedules do not clip)
        auto s = Scheduler::create(SchedulerKind::Euler, o);
        const int N = 20;
        s->setTimesteps(N);
        QCOMPARE(int(s->sigmas().size()), N + 1);
        QCOMPARE(s->sigmas().back(), 0.0f);

        // Independent σ schedule in double from the float32 ᾱ table (checked against double above):
        // 1 - ᾱ cancels near t = 0, so a fully double ᾱ would differ from float32 diffusers by 1e-4 there.
        const std::vector<double> ac(s->alphasCumprod().begin(), s->alphasCumprod().end());
        auto sigmaTrain = [&ac](double t) {
            const auto j = static_cast<std::size_t>(std::floor(t));
            const double s0 = std::sqrt((1 - ac[j]) / ac[j]);
            if (j + 1 >= ac.size()) return s0;
            const double s1 = std::sqrt((1 - ac[j + 1]) / ac[j + 1]);
            return s0 + (t - double(j)) * (s1 - s0);
        };
        std::vector<double> t(N), sig(N);
        if (o.timestepSpacing == TimestepSpacing::Linspace)
            for (int k = 0; k < N; ++k) t[k] = 999.0 * (N - 1 - k) / (N - 1);
        else
            for (int k = 0; k < N; ++k) t[k] = 50.0 * (N - 1 - k);
        for (int k = 0; k < N; ++k) sig[k] = sigmaTrain(t[k]);
        if (karras) {
            const double hi = std::pow(sig[0], 1 / 7.0), lo = std::pow(sig[N - 1], 1 / 7.0);
            for (int k = 0; k < N; ++k) sig[k] = std::pow(hi + k / double(N - 1) * (lo - hi), 7.0);
        }
        for (int k = 0; k < N; ++k) {
            QVERIFY2(
                std::fabs(s->sigmas()[static_cast<std::size_t>(k)] - sig[k]) <= 2e-5 * sig[k],
                qPrintable(
                    QString("sigma %1: %2 vs %3").arg(k).arg(s->sigmas()[static_cast<std::size_t>(k)]).arg(sig[k])));
            if (!karras) QVERIFY(std::fabs(s->timesteps()[static_cast<std::size_t>(k)] - t[k]) < 1e-3);
        }
        if (karras) {  // endpoints: σ_max = σ_train(t_0), σ_min = σ_train(t_{N-1}); t_k recovered from σ
            QVERIFY(std::fabs(s->timesteps().front() - t.front()) < 1e-2);
            QVERIFY(std::fabs(s->timesteps().back() - t.back()) < 1e-2);
            for (int k = 1; k < N; ++k)
                QVERIFY(s->timesteps()[static_cast<std::size_t>(k)] < s->timesteps()[static_cast<std::size_t>(k - 1)]);
        }
        const double maxSigma = sig[0];
        const double wantInit =
            o.timestepSpacing == TimestepSpacing::Leading ? std::sqrt(maxSigma * maxSigma + 1) : maxSigma;
        QVERIFY(std::fabs(s->initNoiseSigma() - wantInit) <= 2e-5 * wantInit);

        const Sample smp = randomSample(32, 5, 10.0f);
        for (int k = 0; k < N; ++k) {
            const StepCoefficients c = s->coefficients(k);
            const double sg = s->sigmas()[static_cast<std::size_t>(k)],
                         sn = s->sigmas()[static_cast<std::size_t>(k + 1)];
            QVERIFY(std::fabs(c.modelInputScale - 1 / std::sqrt(sg * sg + 1)) <= 1e-6 / std::sqrt(sg * sg + 1));
            QCOMPARE(c.timestep, s->timesteps()[static_cast<std::size_t>(k)]);
            QVERIFY(!s->addsNoise(k));
            for (std::size_t i = 0; i < smp.x.size(); ++i) {
                const double x = smp.x[i], e = smp.eps[i];
                const double x0 = x - sg * e;
                const double want = x + (x - x0) / sg * (sn - sg);
                const float got = applyStep(c, smp.x[i], smp.eps[i], 0.0f, 0.0f);
                QVERIFY2(close(got, want, std::fabs(x) + std::fabs(e) * sg), qPrintable(QString("step %1").arg(k)));
            }
        }
    }

    // A schedule that clips x0 (pixel DDPMs: clip_sample true) makes Euler's step
    // clip(x0) + σ_next ε (DDIM's update in σ form); without it the bundled model's Euler images saturated (tst_cli's
    // eulerOnTheDefaultModelIsNotSaturated is the end-to-end check).
    void eulerClipsWhenTheScheduleClips() {
        SchedulerOptions o;
        o.clipSample = true;
        o.clipSampleRange = 1.0f;
        auto s = Scheduler::create(SchedulerKind::Euler, o);
        s->setTimesteps(20);
        const Sample smp = randomSample(64, 9, 10.0f);
        int clipped = 0;
        for (int k = 0; k < 20; ++k) {
            const StepCoefficients c = s->coefficients(k);
            const double sg = s->sigmas()[static_cast<std::size_t>(k)],
                         sn = s->sigmas()[static_cast<std::size_t>(k + 1)];
            for (std::size_t i = 0; i < smp.x.size(); ++i) {
                const double x = smp.x[i], e = smp.eps[i];
                const double raw = x - sg * e, x0 = clampD(raw, 1.0);
                clipped += raw != x0;
                const double want = x0 + sn * e;
                const float got = applyStep(c, smp.x[i], smp.eps[i], 0.0f, 0.0f);
                QVERIFY2(close(got, want, std::fabs(x) + std::fabs(e) * sg + 1.0),
                         qPrintable(QString("step %1: %2 vs %3").arg(k).arg(got).arg(want)));
            }
        }
        QVERIFY(clipped > 100);  // the samples exercise the clip
    }

    void eulerVPrediction() {
        SchedulerOptions o;
        o.predictionType = PredictionType::VPrediction;
        o.timestepSpacing = TimestepSpacing::Trailing;
        auto s = Scheduler::create(SchedulerKind::Euler, o);
        s->setTimesteps(10);
        const Sample smp = randomSample(16, 3, 4.0f);
        for (int k = 0; k < 10; ++k) {
            const double sg = s->sigmas()[static_cast<std::size_t>(k)],
                         sn = s->sigmas()[static_cast<std::size_t>(k + 1)];
            for (std::size_t i = 0; i < smp.x.size(); ++i) {
                const double x = smp.x[i], v = smp.eps[i];
                const double x0 = v * (-sg / std::sqrt(sg * sg + 1)) + x / (sg * sg + 1);
                const double want = x + (x - x0) / sg * (sn - sg);
                const float got = applyStep(s->coefficients(k), smp.x[i], smp.eps[i], 0.0f, 0.0f);
                QVERIFY2(close(got, want,
                               std::fabs(x) + std::fabs(v) * sg + std::fabs(x - x0) / sg * std::fabs(sn - sg), 2e-5),
                         qPrintable(QString("step %1: %2 vs %3").arg(k).arg(got).arg(want)));
            }
        }
    }

    void karrasEndpoints() {
        SchedulerOptions o;
        o.karrasSigmas = true;
        o.timestepSpacing = TimestepSpacing::Linspace;
        auto s = Scheduler::create(SchedulerKind::Euler, o);
        s->setTimesteps(30);
        // σ_train(999) = √((1 - ᾱ)/ᾱ) with ᾱ_999 = 4.0358e-5; σ_train(0) = √((1 - ᾱ_0)/ᾱ_0) with the
        // float32 ᾱ_0 = 0.99989998 (exactly √(β_0/(1 - β_0)) = 0.0100005 would need ᾱ_0 in double).
        QVERIFY(std::fabs(s->sigmas().front() - 157.4073) < 2e-3);
        QVERIFY2(std::fabs(s->sigmas()[29] - 0.01000133) < 1e-8, qPrintable(QString::number(s->sigmas()[29], 'g', 9)));
        QCOMPARE(s->sigmas()[30], 0.0f);
        QCOMPARE(s->initNoiseSigma(), s->sigmas().front());
        QVERIFY(std::fabs(s->timesteps().front() - 999.0f) < 1e-3);
        QVERIFY(std::fabs(s->timesteps().back()) < 1e-3);
    }

    void alphaCumprodLookups() {
        auto s = Scheduler::create(SchedulerKind::DDIM, SchedulerOptions{});
        s->setTimesteps(10);
        const std::vector<float>& ac = s->alphasCumprod();
        QCOMPARE(s->alphaCumprodAt(500.0f), ac[500]);
        QCOMPARE(s->alphaCumprodAt(-3.0f), ac[0]);
        QCOMPARE(s->alphaCumprodAt(5000.0f), ac[999]);
        const float mid = s->alphaCumprodAt(500.5f);
        QVERIFY(mid < ac[500] && mid > ac[501]);
        QCOMPARE(s->alphaCumprodForStep(3), ac[static_cast<std::size_t>(s->timesteps()[3])]);

        SchedulerOptions o;
        o.timestepSpacing = TimestepSpacing::Linspace;
        auto e = Scheduler::create(SchedulerKind::Euler, o);
        e->setTimesteps(10);
        const double sg = e->sigmas()[4];
        QVERIFY(std::fabs(e->alphaCumprodForStep(4) - 1 / (1 + sg * sg)) <= 1e-6 / (1 + sg * sg));
    }

    void badInputsThrow() {
        for (const SchedulerKind kind : {SchedulerKind::DDPM, SchedulerKind::DDIM, SchedulerKind::Euler}) {
            auto s = Scheduler::create(kind, SchedulerOptions{});
            QVERIFY_THROWS_EXCEPTION(std::logic_error, s->coefficients(0));  // before setTimesteps
            for (const int n : {0, -5, 1001}) {
                try {
                    s->setTimesteps(n);
                    QFAIL(qPrintable(QString("setTimesteps(%1) was accepted").arg(n)));
                } catch (const ValidationError& e) {
                    QCOMPARE(QString::fromStdString(e.field()), QString("steps"));
                    QVERIFY2(QString(e.what()).contains(QString::number(n)) && QString(e.what()).contains("1000"),
                             e.what());
                }
            }
            s->setTimesteps(1000);  // the upper limit itself is fine
            QCOMPARE(s->numSteps(), 1000);
            s->setTimesteps(5);
            QVERIFY_THROWS_EXCEPTION(std::out_of_range, s->coefficients(5));
            QVERIFY_THROWS_EXCEPTION(std::out_of_range, s->coefficients(-1));
        }
        SchedulerOptions o;
        o.eta = -0.5f;
        try {
            Scheduler::create(SchedulerKind::DDIM, o);
            QFAIL("negative eta was accepted");
        } catch (const ValidationError& e) {
            QCOMPARE(QString::fromStdString(e.field()), QString("eta"));
        }
        o = SchedulerOptions{};
        o.betaEnd = 1.5f;
        try {
            Scheduler::create(SchedulerKind::DDPM, o);
            QFAIL("beta_end 1.5 was accepted");
        } catch (const ValidationError& e) {
            QCOMPARE(QString::fromStdString(e.field()), QString("beta_end"));
            QVERIFY(QString(e.what()).contains("1.5"));
        }
        o = SchedulerOptions{};
        o.numTrainTimesteps = 0;
        QVERIFY_THROWS_EXCEPTION(ValidationError, Scheduler::create(SchedulerKind::DDIM, o));
    }

    // A schedule with beta_start = beta_end = 0 would render black, eta 1e30 noise: every value
    // outside its range is refused, naming the field.
    void badValuesRefusedWithField_data() {
        QTest::addColumn<int>("caseIndex");
        QTest::addColumn<QString>("field");
        QTest::addColumn<QString>("messagePart");
        const char* cases[][2] = {
            {"beta_start", "beta_start: 0 is not allowed; it must be above 0 and below 1"},
            {"beta_start", "beta_start: -0.0001 is not allowed"},
            {"beta_start", "beta_start: nan is not allowed"},
            {"beta_end", "beta_end: 1 is not allowed; it must be above 0 and below 1"},
            {"beta_end", "beta_end: 0.0001 is below beta_start (0.02)"},
            {"num_train_timesteps", "num_train_timesteps: 0 is not allowed; it must be 1 to 100000"},
            {"num_train_timesteps", "num_train_timesteps: 100001 is not allowed"},
            {"steps_offset", "steps_offset: -1 is not allowed; it must be 0 to num_train_timesteps - 1 (999)"},
            {"steps_offset", "steps_offset: 1000 is not allowed"},
            {"clip_sample_range", "clip_sample_range: 0 is not allowed; it must be a finite number above 0"},
            {"clip_sample_range", "clip_sample_range: inf is not allowed"},
            {"eta", "eta: -0.5 is not allowed; it must be 0 to 1"},
            {"eta", "eta: 1.5 is not allowed"},
            {"eta", "eta: 1e+30 is not allowed"},
            {"eta", "eta: nan is not allowed"},
            // Inside (0, 1), yet 1 - beta rounds to 1 in float32: alphas_cumprod[0] = 1.
            {"beta_start", "beta_start: alphas_cumprod[0] is 1 (linear schedule, beta_start 1e-09"},
            // 100000 timesteps of beta ~0.5: alphas_cumprod underflows to 0.
            {"beta_end", "beta_end: alphas_cumprod["},
        };
        for (int i = 0; i < int(std::size(cases)); ++i)
            QTest::newRow(cases[i][1]) << i << QString(cases[i][0]) << QString(cases[i][1]);
    }

    void badValuesRefusedWithField() {
        QFETCH(int, caseIndex);
        QFETCH(QString, field);
        QFETCH(QString, messagePart);
        const float nan = std::numeric_limits<float>::quiet_NaN();
        const std::vector<std::function<void(SchedulerOptions&)>> edits = {
            [](SchedulerOptions& o) {
                o.betaStart = 0.0f;
                o.betaEnd = 0.0f;
            },
            [](SchedulerOptions& o) { o.betaStart = -1e-4f; },
            [nan](SchedulerOptions& o) { o.betaStart = nan; },
            [](SchedulerOptions& o) { o.betaEnd = 1.0f; },
            [](SchedulerOptions& o) {
                o.betaStart = 0.02f;
                o.betaEnd = 1e-4f;
            },
            [](SchedulerOptions& o) { o.numTrainTimesteps = 0; },
            [](SchedulerOptions& o) { o.numTrainTimesteps = 100001; },
            [](SchedulerOptions& o) { o.stepsOffset = -1; },
            [](SchedulerOptions& o) { o.stepsOffset = 1000; },
            [](SchedulerOptions& o) { o.clipSampleRange = 0.0f; },
            [](SchedulerOptions& o) { o.clipSampleRange = std::numeric_limits<float>::infinity(); },
            [](SchedulerOptions& o) { o.eta = -0.5f; },
            [](SchedulerOptions& o) { o.eta = 1.5f; },
            [](SchedulerOptions& o) { o.eta = 1e30f; },
            [nan](SchedulerOptions& o) { o.eta = nan; },
            [](SchedulerOptions& o) {
                o.betaStart = 1e-9f;
                o.betaEnd = 1e-9f;
            },
            [](SchedulerOptions& o) {
                o.numTrainTimesteps = 100000;
                o.betaEnd = 0.5f;
            },
        };
        QCOMPARE(int(edits.size()), 17);  // one edit per row of the _data table
        SchedulerOptions o;
        edits.at(static_cast<std::size_t>(caseIndex))(o);
        // Each scheduler refuses it, and so does the front ends' check without a scheduler.
        const std::vector<std::function<void()>> attempts = {
            [&o] { Scheduler::create(SchedulerKind::DDPM, o); },
            [&o] { Scheduler::create(SchedulerKind::DDIM, o); },
            [&o] { Scheduler::create(SchedulerKind::Euler, o); },
            [&o] { checkSchedulerOptions(o); },
        };
        for (const auto& attempt : attempts) {
            try {
                attempt();
                QFAIL(qPrintable(QString("accepted: ") + QTest::currentDataTag()));
            } catch (const ValidationError& e) {
                QCOMPARE(QString::fromStdString(e.field()), field);
                QVERIFY2(QString(e.what()).startsWith(messagePart), e.what());
            }
        }
    }

    // The limits themselves are allowed, and a constant schedule (beta_start = beta_end) too.
    void boundaryValuesAccepted() {
        SchedulerOptions o;
        o.betaStart = o.betaEnd = 0.01f;
        o.eta = 1.0f;
        o.stepsOffset = 999;
        o.clipSample = false;
        o.clipSampleRange = 0.0f;  // unused without clipping
        QVERIFY_THROWS_NO_EXCEPTION(checkSchedulerOptions(o));
        auto s = Scheduler::create(SchedulerKind::DDIM, o);
        s->setTimesteps(1);  // 0 + 999 stays in the table
        QCOMPARE(s->timesteps().front(), 999.0f);
        o = SchedulerOptions{};
        o.eta = 0.0f;
        o.numTrainTimesteps = 1;
        QVERIFY_THROWS_NO_EXCEPTION(Scheduler::create(SchedulerKind::Euler, o));
        o.numTrainTimesteps = kMaxTrainTimesteps;
        o.betaEnd = 1e-4f;
        QVERIFY_THROWS_NO_EXCEPTION(Scheduler::create(SchedulerKind::DDPM, o));
    }

    // The schedules real models ship: every alphas_cumprod strictly inside (0, 1) and decreasing.
    void realSchedulesPassTheTableCheck_data() {
        QTest::addColumn<int>("schedule");
        QTest::addColumn<float>("betaStart");
        QTest::addColumn<float>("betaEnd");
        QTest::newRow("google/ddpm-* linear") << int(BetaSchedule::Linear) << 1e-4f << 0.02f;
        QTest::newRow("stable diffusion scaled_linear") << int(BetaSchedule::ScaledLinear) << 0.00085f << 0.012f;
        QTest::newRow("squaredcos_cap_v2") << int(BetaSchedule::SquaredCosCapV2) << 1e-4f << 0.02f;
    }

    void realSchedulesPassTheTableCheck() {
        QFETCH(int, schedule);
        QFETCH(float, betaStart);
        QFETCH(float, betaEnd);
        SchedulerOptions o;
        o.betaSchedule = static_cast<BetaSchedule>(schedule);
        o.betaStart = betaStart;
        o.betaEnd = betaEnd;
        const std::vector<float> abar = alphasCumprodFromBetas(betaSchedule(o));
        QVERIFY(abar.front() < 1.0f && abar.back() > 0.0f);
        for (std::size_t t = 1; t < abar.size(); ++t) QVERIFY2(abar[t] < abar[t - 1], qPrintable(QString::number(t)));
        QVERIFY_THROWS_NO_EXCEPTION(Scheduler::create(SchedulerKind::Euler, o));
    }

    void linspaceRule() {
        const std::vector<float> v = torchLinspace(0.0f, 1.0f, 5);
        QCOMPARE(v, (std::vector<float>{0.0f, 0.25f, 0.5f, 0.75f, 1.0f}));
        QCOMPARE(torchLinspace(2.0f, 3.0f, 1), (std::vector<float>{2.0f}));
        QVERIFY(torchLinspace(2.0f, 3.0f, 0).empty());
    }
};

QTEST_GUILESS_MAIN(TestScheduler)
#include "tst_scheduler.moc"
