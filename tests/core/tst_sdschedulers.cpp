// Stable Diffusion's samplers (diffusers' schedulers with SD's configuration): Euler a and DPM++ 2M
// (with and without Karras sigmas) against worked numbers and against diffusers' update formulas
// written out here in double; every scheduler (DDIM, DDPM, Euler, Euler a, DPM++ 2M) against
// diffusers itself (tests/data/schedulers, written by tools/reference/make_scheduler_fixtures.py:
// tables, every step of a text-to-image and an image-to-image run, add_noise); the
// image-to-image start per scheduler; A1111's sampler display names (modules/sd_samplers_kdiffusion.py).
#include <QtTest>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/BoundedInput.h"
#include "core/formats/Safetensors.h"
#include "core/run/SamplerNames.h"
#include "core/sampling/Scheduler.h"

using namespace tessera;

namespace {

// diffusers' SD scheduler configuration (stable-diffusion-v1-5's scheduler_config.json), after the
// pipelines' repairs.
SchedulerOptions sdOptions(PredictionType prediction = PredictionType::Epsilon,
                           TimestepSpacing spacing = TimestepSpacing::Leading, bool karras = false) {
    SchedulerOptions o;
    o.numTrainTimesteps = 1000;
    o.betaStart = 0.00085f;
    o.betaEnd = 0.012f;
    o.betaSchedule = BetaSchedule::ScaledLinear;
    o.stepsOffset = 1;
    o.clipSample = false;
    o.setAlphaToOne = false;
    o.eta = 0.0f;
    o.predictionType = prediction;
    o.timestepSpacing = spacing;
    o.karrasSigmas = karras;
    return o;
}

std::unique_ptr<Scheduler> made(SchedulerKind kind, const SchedulerOptions& o, int steps) {
    auto s = Scheduler::create(kind, o);
    s->setTimesteps(steps);
    return s;
}

std::vector<float> randomVector(std::size_t n, unsigned seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = scale * normal(rng);
    return v;
}

// max |got - want| / max(1, max |want|): the tensor's error relative to its magnitude.
double relativeError(const std::vector<float>& got, const std::vector<float>& want) {
    if (got.size() != want.size()) return 1e30;
    double err = 0, scale = 1;
    for (std::size_t i = 0; i < got.size(); ++i) {
        err = std::max(err, std::fabs(static_cast<double>(got[i]) - want[i]));
        scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
    }
    return std::isfinite(err) ? err / scale : 1e30;
}

#define EXPECT_CLOSE(got, want, tol)                                                   \
    QVERIFY2(std::fabs(static_cast<double>(got) - static_cast<double>(want)) <= (tol), \
             qPrintable(QStringLiteral("%1 = %2, expected %3 (tolerance %4)")          \
                            .arg(#got)                                                 \
                            .arg(static_cast<double>(got), 0, 'g', 9)                  \
                            .arg(static_cast<double>(want), 0, 'g', 9)                 \
                            .arg(static_cast<double>(tol))))

// diffusers' DPMSolverMultistepScheduler.step (dpmsolver++, order 2, midpoint, lower_order_final)
// in double, from the σ list: x' for step k given x, this step's D and the previous D (null: none).
double dpmReference(const std::vector<float>& sigmas, int k, bool havePrevious, double x, double d, double dPrev) {
    auto alphaSigma = [&](int i) {
        const double s = sigmas[static_cast<std::size_t>(i)], a = 1.0 / std::sqrt(s * s + 1.0);
        return std::pair<double, double>{a, s * a};
    };
    const auto [alphaT, sigmaT] = alphaSigma(k + 1);
    const auto [alphaS, sigmaS] = alphaSigma(k);
    const double lambdaT = std::log(alphaT) - std::log(sigmaT), lambdaS = std::log(alphaS) - std::log(sigmaS);
    const double h = lambdaT - lambdaS;
    const bool last = k + 2 == static_cast<int>(sigmas.size());
    if (!havePrevious || last) return (sigmaT / sigmaS) * x - (alphaT * (std::exp(-h) - 1.0)) * d;
    const auto [alphaS1, sigmaS1] = alphaSigma(k - 1);
    const double h0 = lambdaS - (std::log(alphaS1) - std::log(sigmaS1));
    const double r0 = h0 / h;
    const double d1 = (1.0 / r0) * (d - dPrev);
    return (sigmaT / sigmaS) * x - (alphaT * (std::exp(-h) - 1.0)) * d - 0.5 * (alphaT * (std::exp(-h) - 1.0)) * d1;
}

// ---- the diffusers fixtures ---------------------------------------------------------------

const std::filesystem::path kFixtures = std::filesystem::path(TESSERA_TEST_DATA) / "schedulers";

struct Run {
    std::vector<float> samples, inputs, outputs, noise, x0;
};

// The largest errors seen over all fixture runs (printed: what the tolerances leave).
struct WorstErrors {
    double sample = 0, x0 = 0, input = 0, addNoise = 0, sigma = 0, timestep = 0;
};
WorstErrors worst;

Run readRun(const SafetensorsFile& f, const std::string& prefix) {
    return Run{f.readFloat32(prefix + "samples"), f.readFloat32(prefix + "model_inputs"),
               f.readFloat32(prefix + "model_outputs"), f.readFloat32(prefix + "noise"),
               f.readFloat32(prefix + "pred_x0")};
}

std::vector<float> slice(const std::vector<float>& v, std::size_t index, std::size_t size) {
    return std::vector<float>(v.begin() + static_cast<std::ptrdiff_t>(index * size),
                              v.begin() + static_cast<std::ptrdiff_t>((index + 1) * size));
}

bool anyNonZero(const std::vector<float>& v) {
    for (const float x : v)
        if (x != 0.0f) return true;
    return false;
}

// Steps begin .. N-1 of `run` (the fixture's own x and model output at every step, so each step
// is checked on its own), the previous x0 and the history buffers being this scheduler's own.
void checkRun(const Scheduler& s, const Run& run, int begin, std::size_t size, const QString& where) {
    const int n = s.numSteps();
    Scheduler::StepHistory history;
    for (int k = begin; k < n; ++k) {
        const std::size_t j = static_cast<std::size_t>(k - begin);
        const std::vector<float> x = slice(run.samples, j, size), eps = slice(run.outputs, j, size),
                                 z = slice(run.noise, j, size);
        const QString at = where + QStringLiteral(" step %1").arg(k);
        // Noise where diffusers drew it and it counts (Euler a draws at the last step too, with σ_up 0,
        // and DPM++ 2M SDE, with σ_N = 0).
        const bool drawn = anyNonZero(z);
        const bool drawsAtLast = s.kind() == SchedulerKind::EulerAncestral || s.kind() == SchedulerKind::DPMPP2MSDE;
        QVERIFY2(s.addsNoise(k) == (drawn && !(drawsAtLast && k == n - 1)),
                 qPrintable(at + ": noise drawn " + QString::number(drawn)));
        std::vector<float> input(size), x0(size), out(size);
        for (std::size_t i = 0; i < size; ++i) input[i] = x[i] * s.coefficients(k).modelInputScale;
        const double inputErr = relativeError(input, slice(run.inputs, j, size));
        worst.input = std::max(worst.input, inputErr);
        QVERIFY2(inputErr <= 1e-6, qPrintable(at + QStringLiteral(": model input error %1").arg(inputErr)));
        s.predictX0(k, eps.data(), x.data(), x0.data(), size);
        const double x0Err = relativeError(x0, slice(run.x0, j, size));
        worst.x0 = std::max(worst.x0, x0Err);
        QVERIFY2(x0Err <= 1e-5, qPrintable(at + QStringLiteral(": x0 error %1").arg(x0Err)));
        s.step(k, eps.data(), x.data(), z.data(), out.data(), size, history);
        const double err = relativeError(out, slice(run.samples, j + 1, size));
        worst.sample = std::max(worst.sample, err);
        // Heun's second evaluation adds (σ_{i+1} - σ_i)/2 · (x - x0)/σ_{i+1} to the start sample: with
        // two steps σ_{i+1} is 0.03, so float32 rounding of x (about 15 times larger) is amplified
        // 500-fold in both implementations, which round differently (x/σ - x0/σ against (x - x0)/σ).
        const double tolerance = s.kind() == SchedulerKind::Heun ? 3e-5 : 1e-5;
        QVERIFY2(err <= tolerance, qPrintable(at + QStringLiteral(": prev_sample error %1").arg(err)));
    }
}

void checkTables(const Scheduler& s, const SafetensorsFile& f, const std::string& p, const QString& where) {
    const std::vector<float> ts = f.readFloat32(p + "timesteps");
    QCOMPARE(s.timesteps().size(), ts.size());
    for (std::size_t k = 0; k < ts.size(); ++k) {
        worst.timestep = std::max(worst.timestep, std::fabs(double(s.timesteps()[k]) - ts[k]) / std::max(1.0f, ts[k]));
        QVERIFY2(std::fabs(s.timesteps()[k] - ts[k]) <= 1e-5f * std::max(1.0f, ts[k]),
                 qPrintable(where + QStringLiteral(": t[%1] %2 vs %3").arg(k).arg(s.timesteps()[k]).arg(ts[k])));
    }
    if (f.has(p + "sigmas")) {
        const std::vector<float> sig = f.readFloat32(p + "sigmas");
        QCOMPARE(s.sigmas().size(), sig.size());
        for (std::size_t k = 0; k < sig.size(); ++k) {
            if (sig[k] > 0) worst.sigma = std::max(worst.sigma, std::fabs(double(s.sigmas()[k]) - sig[k]) / sig[k]);
            QVERIFY2(std::fabs(s.sigmas()[k] - sig[k]) <= 1e-5f * sig[k],
                     qPrintable(where + QStringLiteral(": sigma[%1] %2 vs %3").arg(k).arg(s.sigmas()[k]).arg(sig[k])));
        }
    } else if (s.kind() == SchedulerKind::DDPM || s.kind() == SchedulerKind::DDIM) {
        QVERIFY(s.sigmas().empty());  // DPM2's table is not diffusers' (which interleaves its interpolated σ apart)
    }
    const float init = f.readFloat32(p + "init_noise_sigma").at(0);
    QVERIFY2(std::fabs(s.initNoiseSigma() - init) <= 1e-6f * init,
             qPrintable(where + QStringLiteral(": init_noise_sigma %1 vs %2").arg(s.initNoiseSigma()).arg(init)));
}

// add_noise at the begin index, then the run from there (its first step without a previous x0).
void checkImageToImage(const Scheduler& s, const SafetensorsFile& f, const std::string& p, int begin, std::size_t size,
                       const QString& where) {
    QCOMPARE(static_cast<int>(f.readFloat32(p + "begin").at(0)), begin);
    const std::vector<float> clean = f.readFloat32(p + "original"), n = f.readFloat32(p + "start_noise");
    const Run run = readRun(f, p);
    const Scheduler::AddNoise c = s.addNoise(begin);
    std::vector<float> noisy(size);
    for (std::size_t i = 0; i < size; ++i) noisy[i] = c.image * clean[i] + c.noise * n[i];
    const double err = relativeError(noisy, slice(run.samples, 0, size));
    worst.addNoise = std::max(worst.addNoise, err);
    QVERIFY2(err <= 1e-6, qPrintable(where + QStringLiteral(": add_noise error %1").arg(err)));
    checkRun(s, run, begin, size, where);
}

}  // namespace

class TestSdSchedulers : public QObject {
    Q_OBJECT

private slots:
    void everyKindIsAvailable() {
        for (const SchedulerKind kind :
             {SchedulerKind::DDPM, SchedulerKind::DDIM, SchedulerKind::Euler, SchedulerKind::EulerAncestral,
              SchedulerKind::DPMPP2M, SchedulerKind::DPMPP2MSDE}) {
            auto s = made(kind, sdOptions(), 20);
            QVERIFY(s->kind() == kind);
            QCOMPARE(s->numSteps(), 20);
        }
    }

    // Heun, DPM2 and DPM++ SDE evaluate the model twice per step (the last step once), LMS once;
    // their steps need the history buffers, so the x0Prev-only step() refuses them.
    void evaluationsAndHistory() {
        const struct {
            SchedulerKind kind;
            int perStep;
        } kinds[] = {{SchedulerKind::Heun, 2}, {SchedulerKind::DPM2, 2},  {SchedulerKind::DPMPPSDE, 2},
                     {SchedulerKind::LMS, 1},  {SchedulerKind::Euler, 1}, {SchedulerKind::DPMPP2M, 1},
                     {SchedulerKind::DDIM, 1}};
        for (const auto& k : kinds) {
            auto s = made(k.kind, sdOptions(), 10);
            QCOMPARE(s->evaluationsPerStep(), k.perStep);
            QCOMPARE(s->numSteps(), k.perStep * 10 - (k.perStep - 1));
            QCOMPARE(s->sigmas().empty(), k.kind == SchedulerKind::DDIM);
            const bool history = k.kind == SchedulerKind::Heun || k.kind == SchedulerKind::DPM2 ||
                                 k.kind == SchedulerKind::DPMPPSDE || k.kind == SchedulerKind::LMS;
            QCOMPARE(usesHistory(s->coefficients(0)), history);
            float x = 1, eps = 0.5f, z = 0.25f, out = 0;
            if (history) QVERIFY_THROWS_EXCEPTION(std::logic_error, s->step(0, &eps, &x, &z, &out, 1));
            Scheduler::StepHistory h;
            s->step(0, &eps, &x, &z, &out, 1, h);  // every kind through the history overload
            QVERIFY(std::isfinite(out));
        }
        // DPM++ SDE adds noise at both evaluations of a step but the last (σ_N = 0: Euler's).
        auto sde = made(SchedulerKind::DPMPPSDE, sdOptions(), 4);
        for (int k = 0; k < sde->numSteps(); ++k) QCOMPARE(sde->addsNoise(k), k + 1 < sde->numSteps());
        // The tiled loop counts one step per evaluation: 2n - 1 for these, beginning image-to-image at
        // evaluation b * 2 (diffusers' get_timesteps: timesteps[t_start * order:]).
        for (const SchedulerKind kind :
             {SchedulerKind::Heun, SchedulerKind::LMS, SchedulerKind::DPM2, SchedulerKind::DPMPPSDE}) {
            RunConfig config;
            config.scheduler = kind;
            config.steps = 10;
            config.strength = 0.55;
            validate(config);
            const int per = evaluationsPerStep(kind);
            QCOMPARE(per, made(kind, sdOptions(), 10)->evaluationsPerStep());
            QCOMPARE(loopSteps(config), made(kind, sdOptions(), 10)->numSteps());
            QCOMPARE(firstLoopStep(config, true), (10 - 5) * per);
            QCOMPARE(firstLoopStep(config, false), 0);
        }
    }

    // EulerDiscreteScheduler's tables with SD's configuration, worked out (N = 20).
    void eulerSdTables() {
        auto lead = made(SchedulerKind::Euler, sdOptions(), 20);
        const std::vector<float>& s = lead->sigmas();
        const double want[] = {11.0283, 8.3907, 6.5064, 5.1344, 4.1167, 3.3478};
        for (int k = 0; k < 6; ++k) EXPECT_CLOSE(s[static_cast<std::size_t>(k)], want[k], 6e-5);
        EXPECT_CLOSE(s[17], 0.3462, 6e-5);
        EXPECT_CLOSE(s[19], 0.0413, 6e-5);
        QCOMPARE(s[20], 0.0f);
        EXPECT_CLOSE(lead->initNoiseSigma(), 11.07358, 1e-5);
        EXPECT_CLOSE(lead->coefficients(0).modelInputScale, 0.090305, 1e-6);
        EXPECT_CLOSE(lead->coefficients(0).ceps, -2.63765, 1e-5);
        auto lin = made(SchedulerKind::Euler, sdOptions(PredictionType::Epsilon, TimestepSpacing::Linspace), 20);
        EXPECT_CLOSE(lin->timesteps()[1], 946.4211, 1e-4);
        EXPECT_CLOSE(lin->sigmas()[0], 14.6147, 6e-5);
        EXPECT_CLOSE(lin->sigmas()[1], 10.7469, 6e-5);
        EXPECT_CLOSE(lin->sigmas()[2], 8.0815, 6e-5);
        EXPECT_CLOSE(lin->sigmas()[19], 0.02917, 6e-6);
        EXPECT_CLOSE(lin->initNoiseSigma(), lin->sigmas()[0], 0.0);
    }

    // EulerAncestralDiscreteScheduler: σ_up, σ_down of step 0 (leading, N = 20); σ_up² + σ_down² = σ_next² at every step; the
    // same σ tables as Euler; no Karras option.
    void eulerAncestralSigmas() {
        auto ea = made(SchedulerKind::EulerAncestral, sdOptions(), 20);
        auto eu = made(SchedulerKind::Euler, sdOptions(), 20);
        QVERIFY(ea->sigmas() == eu->sigmas());
        QVERIFY(ea->timesteps() == eu->timesteps());
        QCOMPARE(ea->initNoiseSigma(), eu->initNoiseSigma());
        const StepCoefficients c0 = ea->coefficients(0);
        EXPECT_CLOSE(c0.sigma, 5.44515, 1e-5);
        EXPECT_CLOSE(c0.ceps + ea->sigmas()[0], 6.38389, 1e-5);  // dt = σ_down - σ
        for (int k = 0; k < 20; ++k) {
            const StepCoefficients c = ea->coefficients(k);
            const double down = c.ceps + ea->sigmas()[static_cast<std::size_t>(k)],
                         next = ea->sigmas()[static_cast<std::size_t>(k) + 1];
            EXPECT_CLOSE(c.sigma * c.sigma + down * down, next * next, 1e-5 * std::max(1.0, next * next));
            QCOMPARE(c.modelInputScale, eu->coefficients(k).modelInputScale);
            QCOMPARE(c.cprev, 0.0f);
        }
        QVERIFY(!ea->addsNoise(19));  // σ_up = 0 at the last step
        QVERIFY(ea->addsNoise(18));
        auto karras =
            made(SchedulerKind::EulerAncestral, sdOptions(PredictionType::Epsilon, TimestepSpacing::Leading, true), 20);
        QVERIFY(karras->sigmas() == ea->sigmas());  // ignored: diffusers' class has no Karras sigmas
    }

    // Euler a against diffusers' step written out in double, epsilon and v.
    void eulerAncestralMatchesFormula_data() {
        QTest::addColumn<int>("prediction");
        QTest::newRow("epsilon") << int(PredictionType::Epsilon);
        QTest::newRow("v") << int(PredictionType::VPrediction);
    }
    void eulerAncestralMatchesFormula() {
        QFETCH(int, prediction);
        auto s =
            made(SchedulerKind::EulerAncestral, sdOptions(PredictionType(prediction), TimestepSpacing::Trailing), 12);
        const std::size_t n = 64;
        for (int k = 0; k < 12; ++k) {
            const double sf = s->sigmas()[static_cast<std::size_t>(k)],
                         st = s->sigmas()[static_cast<std::size_t>(k) + 1];
            const std::vector<float> x = randomVector(n, 10 + k, static_cast<float>(sf)), e = randomVector(n, 40 + k),
                                     z = randomVector(n, 70 + k);
            std::vector<float> out(n);
            s->step(k, e.data(), x.data(), z.data(), out.data(), n);
            const double up = std::sqrt(st * st * (sf * sf - st * st) / (sf * sf)), down = std::sqrt(st * st - up * up);
            std::vector<float> want(n);
            for (std::size_t i = 0; i < n; ++i) {
                const double x0 = prediction == int(PredictionType::Epsilon)
                                      ? x[i] - sf * e[i]
                                      : e[i] * (-sf / std::sqrt(sf * sf + 1)) + x[i] / (sf * sf + 1);
                want[i] = static_cast<float>(x[i] + (x[i] - x0) / sf * (down - sf) + up * z[i]);
            }
            const double err = relativeError(out, want);
            QVERIFY2(err < 2e-6, qPrintable(QStringLiteral("step %1: %2").arg(k).arg(err)));
        }
    }

    // DPMSolverMultistepScheduler with Karras sigmas, worked out: σ and rounded t (N = 20), the first two steps' coefficients.
    void dpmKarrasWorkedNumbers() {
        auto s = made(SchedulerKind::DPMPP2M, sdOptions(PredictionType::Epsilon, TimestepSpacing::Leading, true), 20);
        const double sig[] = {14.6147, 11.7254, 9.3402, 7.3836, 5.7894, 4.4998, 3.4648, 2.6408, 1.9909, 1.4832, 1.0908,
                              0.7909,  0.5647,  0.3964, 0.2730, 0.1842, 0.1213, 0.0779, 0.0485, 0.0292, 0.0};
        const int ts[] = {999, 962, 921, 876, 827, 772, 710, 640, 561, 474, 380, 285, 197, 123, 69, 35, 15, 6, 2, 0};
        QCOMPARE(s->sigmas().size(), std::size_t(21));
        for (std::size_t k = 0; k < 21; ++k) EXPECT_CLOSE(s->sigmas()[k], sig[k], 6e-5);
        EXPECT_CLOSE(s->sigmas()[0], 14.6146526, 2e-5);  // σ_train[999]
        EXPECT_CLOSE(s->sigmas()[19], 0.0291675, 1e-6);  // σ_train[0]
        for (std::size_t k = 0; k < 20; ++k) QCOMPARE(s->timesteps()[k], float(ts[k]));
        QCOMPARE(s->initNoiseSigma(), 1.0f);
        auto alpha = [&](std::size_t k) { return 1.0 / std::sqrt(double(s->sigmas()[k]) * s->sigmas()[k] + 1.0); };
        // Step 0 (first order): in k-diffusion's VE terms x coefficient σ1/σ0, D coefficient 1 - σ1/σ0;
        // diffusers' VP state carries α: cx = s1/s0 = (σ1 α1)/(σ0 α0), cx0 = α1 (1 - σ1/σ0).
        const StepCoefficients c0 = s->coefficients(0), c1 = s->coefficients(1), last = s->coefficients(19);
        EXPECT_CLOSE(c0.cx * alpha(0) / alpha(1), 0.802303, 2e-6);
        EXPECT_CLOSE(c0.cx0 / alpha(1), 0.197697, 2e-6);
        QCOMPARE(c0.cprev, 0.0f);
        EXPECT_CLOSE(c0.modelInputScale, 1.0, 0.0);
        EXPECT_CLOSE(c0.ax, 1.0 / 0.0682649, 1e-4);  // D = (x - s ε)/α
        EXPECT_CLOSE(c0.ae, -14.6146526, 2e-5);
        // Step 1 (second order): D' = 1.516246 D1 - 0.516246 D0, x coef 0.796581, D coef 0.203419.
        EXPECT_CLOSE(c1.cx * alpha(1) / alpha(2), 0.796581, 2e-6);
        EXPECT_CLOSE(c1.cx0 / alpha(2), 0.203419 * 1.516246, 3e-6);
        EXPECT_CLOSE(c1.cprev / alpha(2), -0.203419 * 0.516246, 3e-6);
        // The last step is first order to σ = 0: x' = D.
        QCOMPARE(last.cx, 0.0f);
        QCOMPARE(last.cx0, 1.0f);
        QCOMPARE(last.cprev, 0.0f);
        for (int k = 0; k < 20; ++k) QCOMPARE(s->usesPreviousX0(k), k > 0 && k < 19);
        const Scheduler::AddNoise start = s->addNoise(0);
        EXPECT_CLOSE(start.image, 0.0682649, 1e-7);
        EXPECT_CLOSE(start.noise, 0.9976672, 1e-7);
    }

    // This class's own spacings (not DDIM's), with steps_offset; non-Karras σ are the training
    // table's at those integer timesteps.
    void dpmSpacings() {
        auto trainSigma = [](const Scheduler& s, float t) {
            const float a = s.alphasCumprod()[static_cast<std::size_t>(t)];
            return std::sqrt((1.0f - a) / a);
        };
        auto lead = made(SchedulerKind::DPMPP2M, sdOptions(), 20);  // 1000 // 21 = 47: 940 + 1 ... 47 + 1
        for (std::size_t k = 0; k < 20; ++k) {
            QCOMPARE(lead->timesteps()[k], float((20 - static_cast<int>(k)) * 47 + 1));
            QCOMPARE(lead->sigmas()[k], trainSigma(*lead, lead->timesteps()[k]));
        }
        auto lin = made(SchedulerKind::DPMPP2M, sdOptions(PredictionType::Epsilon, TimestepSpacing::Linspace), 4);
        // linspace(0, 999, 5) = 0, 249.75, 499.5, 749.25, 999 rounded half to even, reversed, smallest dropped
        QCOMPARE(lin->timesteps(), (std::vector<float>{999, 749, 500, 250}));
        for (std::size_t k = 0; k < 4; ++k) QCOMPARE(lin->sigmas()[k], trainSigma(*lin, lin->timesteps()[k]));
        auto trail = made(SchedulerKind::DPMPP2M, sdOptions(PredictionType::Epsilon, TimestepSpacing::Trailing), 16);
        const std::vector<int> ddim = spacedTimesteps(1000, 16, TimestepSpacing::Trailing, 1);
        QCOMPARE(trail->timesteps(), std::vector<float>(ddim.begin(), ddim.end()));
    }

    // DPM++ 2M against diffusers' update written out in double, over a whole run where each step's
    // x0 becomes the next one's previous x0; with and without Karras, epsilon and v.
    void dpmMatchesFormula_data() {
        QTest::addColumn<int>("prediction");
        QTest::addColumn<bool>("karras");
        QTest::addColumn<int>("steps");
        QTest::newRow("epsilon karras 20") << int(PredictionType::Epsilon) << true << 20;
        QTest::newRow("epsilon leading 25") << int(PredictionType::Epsilon) << false << 25;
        QTest::newRow("v karras 10") << int(PredictionType::VPrediction) << true << 10;
        QTest::newRow("v leading 3") << int(PredictionType::VPrediction) << false << 3;
    }
    void dpmMatchesFormula() {
        QFETCH(int, prediction);
        QFETCH(bool, karras);
        QFETCH(int, steps);
        auto s = made(SchedulerKind::DPMPP2M, sdOptions(PredictionType(prediction), TimestepSpacing::Leading, karras),
                      steps);
        const std::size_t n = 48;
        std::vector<float> x = randomVector(n, 3), x0Prev(n);
        std::vector<double> dPrev(n);
        for (int k = 0; k < steps; ++k) {
            const std::vector<float> e = randomVector(n, 100 + k);
            const double sg = s->sigmas()[static_cast<std::size_t>(k)], a = 1.0 / std::sqrt(sg * sg + 1.0), sd = sg * a;
            std::vector<float> out(n), x0(n), want(n);
            s->predictX0(k, e.data(), x.data(), x0.data(), n);
            s->step(k, e.data(), x.data(), nullptr, out.data(), n, k == 0 ? nullptr : x0Prev.data());
            std::vector<double> d(n);
            for (std::size_t i = 0; i < n; ++i) {
                d[i] = prediction == int(PredictionType::Epsilon) ? (x[i] - sd * e[i]) / a : a * x[i] - sd * e[i];
                want[i] = static_cast<float>(dpmReference(s->sigmas(), k, k > 0, x[i], d[i], dPrev[i]));
                QVERIFY(std::fabs(x0[i] - d[i]) <= 1e-5 * std::max(1.0, std::fabs(d[i])));
            }
            const double err = relativeError(out, want);
            QVERIFY2(err < 3e-6, qPrintable(QStringLiteral("step %1: %2").arg(k).arg(err)));
            x = out;
            x0Prev = x0;
            dPrev = d;
        }
    }

    // A step with no previous x0 (the first step run, from an image too) is the first-order step;
    // the previous x0 is read only where the coefficient is not 0.
    void firstStepRunHasNoPreviousX0() {
        auto s = made(SchedulerKind::DPMPP2M, sdOptions(), 10);
        const int b = 4;  // an image-to-image begin index
        QVERIFY(s->usesPreviousX0(b));
        const StepCoefficients k = s->coefficients(b), first = withoutPreviousX0(k);
        QCOMPARE(first.cprev, 0.0f);
        EXPECT_CLOSE(first.cx0, k.cx0 + k.cprev, 0.0);
        const std::size_t n = 16;
        const std::vector<float> x = randomVector(n, 5), e = randomVector(n, 6);
        std::vector<float> out(n), x0(n), withSelf(n);
        s->step(b, e.data(), x.data(), nullptr, out.data(), n);
        s->predictX0(b, e.data(), x.data(), x0.data(), n);
        s->step(b, e.data(), x.data(), nullptr, withSelf.data(), n, x0.data());  // x0Prev = this x0: same thing
        QVERIFY(relativeError(out, withSelf) < 1e-6);
        const double sg = s->sigmas()[b], a = 1.0 / std::sqrt(sg * sg + 1.0);
        std::vector<float> want(n);
        for (std::size_t i = 0; i < n; ++i)
            want[i] = static_cast<float>(dpmReference(s->sigmas(), b, false, x[i], (x[i] - sg * a * e[i]) / a, 0.0));
        QVERIFY(relativeError(out, want) < 2e-6);
        // Other schedulers ignore x0Prev altogether.
        auto ddim = made(SchedulerKind::DDIM, sdOptions(), 10);
        std::vector<float> plain(n), bOut(n), junk(n, std::nanf(""));
        ddim->step(3, e.data(), x.data(), nullptr, plain.data(), n);
        ddim->step(3, e.data(), x.data(), nullptr, bOut.data(), n, junk.data());
        QVERIFY(plain == bOut);
    }

    // add_noise at begin index 5 (leading, N = 20, strength 0.75: t 701).
    void addNoisePerScheduler() {
        auto ddim = made(SchedulerKind::DDIM, sdOptions(), 20), ddpm = made(SchedulerKind::DDPM, sdOptions(), 20);
        QCOMPARE(ddim->timesteps()[5], 701.0f);
        for (const auto* s : {ddim.get(), ddpm.get()}) {
            const Scheduler::AddNoise c = s->addNoise(5);
            EXPECT_CLOSE(c.image, 0.2862108, 2e-7);
            EXPECT_CLOSE(c.noise, 0.9581667, 2e-7);
            EXPECT_CLOSE(s->alphaCumprodForStep(5), 0.0819166, 2e-7);
        }
        for (const SchedulerKind kind : {SchedulerKind::Euler, SchedulerKind::EulerAncestral}) {
            auto s = made(kind, sdOptions(), 20);
            const Scheduler::AddNoise c = s->addNoise(5);
            QCOMPARE(c.image, 1.0f);
            EXPECT_CLOSE(c.noise, 3.34777, 1e-5);
            QCOMPARE(c.noise, s->sigmas()[5]);
        }
        auto dpm = made(SchedulerKind::DPMPP2M, sdOptions(PredictionType::Epsilon, TimestepSpacing::Leading, true), 20);
        const double sg = dpm->sigmas()[5];
        const Scheduler::AddNoise c = dpm->addNoise(5);
        EXPECT_CLOSE(c.image, 1.0 / std::sqrt(sg * sg + 1.0), 1e-7);
        EXPECT_CLOSE(c.noise, sg / std::sqrt(sg * sg + 1.0), 1e-7);
        EXPECT_CLOSE(dpm->alphaCumprodForStep(5), 1.0 / (sg * sg + 1.0), 1e-8);
        QVERIFY_THROWS_EXCEPTION(std::out_of_range, dpm->addNoise(20));
    }

    void refusals() {
        try {
            Scheduler::create(SchedulerKind::EulerAncestral, sdOptions(PredictionType::Sample));
            QFAIL("euler_a with prediction_type sample was accepted");
        } catch (const ValidationError& e) {
            QCOMPARE(e.field(), std::string("prediction_type"));
            QVERIFY(std::string(e.what()).find("euler_a") != std::string::npos);
        }
        // Leading spacing places steps + 1 points: 1000 steps leave a ratio of 0.
        auto dpm = Scheduler::create(SchedulerKind::DPMPP2M, sdOptions());
        try {
            dpm->setTimesteps(1000);
            QFAIL("1000 leading dpmpp_2m steps were accepted");
        } catch (const ValidationError& e) {
            QCOMPARE(e.field(), std::string("steps"));
            QVERIFY(std::string(e.what()).find("at most 999") != std::string::npos);
        }
        // linspace over 1001 points rounds two timesteps together: refused, not NaN.
        auto lin =
            Scheduler::create(SchedulerKind::DPMPP2M, sdOptions(PredictionType::Epsilon, TimestepSpacing::Linspace));
        try {
            lin->setTimesteps(1000);
            QFAIL("coinciding dpmpp_2m noise levels were accepted");
        } catch (const ValidationError& e) {
            QCOMPARE(e.field(), std::string("steps"));
            QVERIFY(std::string(e.what()).find("same noise level") != std::string::npos);
        }
        // 999 steps: ratio 1, and steps_offset 1 puts the first timestep at 1000.
        try {
            dpm->setTimesteps(999);
            QFAIL("timestep 1000 was accepted");
        } catch (const ValidationError& e) {
            QCOMPARE(e.field(), std::string("steps_offset"));
        }
        dpm->setTimesteps(998);
        QCOMPARE(dpm->numSteps(), 998);
        QCOMPARE(dpm->timesteps().front(), 999.0f);
    }

    void displayNames() {
        SchedulerOptions o;
        auto shown = [&](SchedulerKind kind, bool karras) {
            o.karrasSigmas = karras;
            const SamplerDisplay d = samplerDisplayName(kind, o);
            return QString::fromStdString(d.sampler + " | " + d.scheduleType);
        };
        QCOMPARE(shown(SchedulerKind::DPMPP2M, true), QString("DPM++ 2M | Karras"));
        QCOMPARE(shown(SchedulerKind::DPMPP2M, false), QString("DPM++ 2M | Uniform"));
        QCOMPARE(shown(SchedulerKind::Euler, true), QString("Euler | Karras"));
        QCOMPARE(shown(SchedulerKind::Euler, false), QString("Euler | Automatic"));
        QCOMPARE(shown(SchedulerKind::EulerAncestral, true), QString("Euler a | Automatic"));
        QCOMPARE(shown(SchedulerKind::DDIM, true), QString("DDIM | Automatic"));
        QCOMPARE(shown(SchedulerKind::DDPM, false), QString("DDPM | Automatic"));
        QCOMPARE(shown(SchedulerKind::DPMPP2MSDE, true), QString("DPM++ 2M SDE | Karras"));
        QCOMPARE(shown(SchedulerKind::DPMPP2MSDE, false), QString("DPM++ 2M SDE | Uniform"));

        using Parsed = std::optional<std::pair<SchedulerKind, bool>>;
        auto parsed = [](SchedulerKind kind, bool karras) { return Parsed(std::make_pair(kind, karras)); };
        auto expect = [](std::string_view sampler, std::string_view schedule, const Parsed& want) {
            const Parsed got = samplerFromDisplayName(sampler, schedule);
            auto text = [](const Parsed& p) {
                return p ? QStringLiteral("%1 karras %2").arg(QString::fromUtf8(toString(p->first))).arg(p->second)
                         : QStringLiteral("none");
            };
            QVERIFY2(got == want, qPrintable(QStringLiteral("'%1' '%2': %3, expected %4")
                                                 .arg(QString::fromUtf8(sampler.data(), qsizetype(sampler.size())))
                                                 .arg(QString::fromUtf8(schedule.data(), qsizetype(schedule.size())))
                                                 .arg(text(got), text(want))));
        };
        expect("DPM++ 2M", "Karras", parsed(SchedulerKind::DPMPP2M, true));
        expect("DPM++ 2M", "Automatic", parsed(SchedulerKind::DPMPP2M, true));
        expect("DPM++ 2M", "Uniform", parsed(SchedulerKind::DPMPP2M, false));
        expect("DPM++ 2M", "", parsed(SchedulerKind::DPMPP2M, false));  // pre-1.9
        expect("DPM++ 2M Karras", "", parsed(SchedulerKind::DPMPP2M, true));
        expect("DPM++ 2M Karras", "Uniform", parsed(SchedulerKind::DPMPP2M, true));
        expect("dpm++ 2m karras", "", parsed(SchedulerKind::DPMPP2M, true));
        expect("Euler a", "Automatic", parsed(SchedulerKind::EulerAncestral, false));
        expect("Euler a", "", parsed(SchedulerKind::EulerAncestral, false));
        expect("Euler", "Karras", parsed(SchedulerKind::Euler, true));
        expect("Euler Karras", "", parsed(SchedulerKind::Euler, true));
        expect("Euler", "Automatic", parsed(SchedulerKind::Euler, false));
        expect("DDIM", "Automatic", parsed(SchedulerKind::DDIM, false));
        expect("DDPM", "", parsed(SchedulerKind::DDPM, false));
        // What Tessera does not run.
        expect("Euler a", "Karras", Parsed());
        expect("Euler a Karras", "", Parsed());
        expect("DDIM", "Karras", Parsed());
        expect("DPM++ 2M", "Exponential", Parsed());
        expect("DPM++ 2M SGM Uniform", "", Parsed());
        expect("Euler SGM Uniform", "", Parsed());  // the longer label, not "Euler SGM" + Uniform
        expect("DPM++ 2M SDE", "Karras", parsed(SchedulerKind::DPMPP2MSDE, true));
        expect("DPM++ 2M SDE", "Uniform", parsed(SchedulerKind::DPMPP2MSDE, false));
        expect("DPM++ 2M SDE", "", parsed(SchedulerKind::DPMPP2MSDE, false));  // pre-1.9
        expect("DPM++ 2M SDE Karras", "", parsed(SchedulerKind::DPMPP2MSDE, true));
        expect("DPM++ 2M SDE", "Automatic", Parsed());  // A1111's Exponential
        expect("DPM++ 2M SDE Exponential", "", Parsed());
        expect("DPM++ 2M SDE Heun", "Karras", Parsed());
        expect("LMS", "", parsed(SchedulerKind::LMS, false));
        expect("LMS", "Karras", parsed(SchedulerKind::LMS, true));
        expect("LMS Karras", "", parsed(SchedulerKind::LMS, true));
        expect("LMS", "Automatic", parsed(SchedulerKind::LMS, false));
        expect("DPM++ SDE", "Automatic", parsed(SchedulerKind::DPMPPSDE, true));  // A1111's default: Karras
        expect("DPM++ SDE Karras", "", parsed(SchedulerKind::DPMPPSDE, true));
        expect("Heun", "Automatic", parsed(SchedulerKind::Heun, false));
        expect("DPM2", "Karras", parsed(SchedulerKind::DPM2, true));
        expect("", "", Parsed());
        expect(" Karras", "", Parsed());
        expect("Karras", "", Parsed());
        // Round trip: what is written is read back as what ran.
        for (const SchedulerKind kind :
             {SchedulerKind::DDPM, SchedulerKind::DDIM, SchedulerKind::Euler, SchedulerKind::EulerAncestral,
              SchedulerKind::DPMPP2M, SchedulerKind::DPMPP2MSDE, SchedulerKind::LMS, SchedulerKind::Heun,
              SchedulerKind::DPM2, SchedulerKind::DPMPPSDE, SchedulerKind::UniPC})
            for (const bool karras : {false, true}) {
                o.karrasSigmas = karras;
                const SamplerDisplay d = samplerDisplayName(kind, o);
                const bool withKarras =
                    kind != SchedulerKind::EulerAncestral && kind != SchedulerKind::DDIM && kind != SchedulerKind::DDPM;
                const bool ran = karras && withKarras;
                QCOMPARE(samplerHasKarras(kind), withKarras);
                expect(d.sampler, d.scheduleType, parsed(kind, ran));
            }
    }

    // Every table and step of diffusers' schedulers (tests/data/schedulers). Skips only while the
    // folder is absent; once cases.json is there, every file it lists must be present and match.
    void matchesDiffusers() {
        if (!std::filesystem::exists(kFixtures / "cases.json"))
            QSKIP("tests/data/schedulers not committed yet (tools/reference/make_scheduler_fixtures.py)");
        const nlohmann::json cases = readBoundedJson(kFixtures / "cases.json", "cases");
        std::size_t size = 1;
        for (const auto& d : cases.at("shape")) size *= d.get<std::size_t>();
        int files = 0, runs = 0;
        for (const auto& entry : cases.at("files")) {
            const std::string file = entry.at("file").get<std::string>();
            const QString where = QString::fromStdString(file);
            SchedulerOptions o = sdOptions(parsePredictionType(entry.at("prediction_type").get<std::string>()),
                                           parseTimestepSpacing(entry.at("timestep_spacing").get<std::string>()),
                                           entry.value("use_karras_sigmas", false));
            const SchedulerKind kind = parseScheduler(entry.at("scheduler").get<std::string>());
            const SafetensorsFile f((kFixtures / file).string());
            for (const auto& steps : entry.at("steps")) {
                const int n = steps.get<int>();
                const std::string p = "n" + std::to_string(n) + ".";
                const QString at = where + QStringLiteral(" N=%1").arg(n);
                auto s = made(kind, o, n);
                checkTables(*s, f, p, at);
                checkRun(*s, readRun(f, p), 0, size, at);
                ++runs;
                const auto begin = entry.at("i2i_begin").find(std::to_string(n));
                if (begin == entry.at("i2i_begin").end()) continue;
                auto fromImage = made(kind, o, n);  // planned from the begin index, as diffusers' set_begin_index
                fromImage->setBeginIndex(begin->get<int>());
                checkImageToImage(*fromImage, f, p + "i2i.", begin->get<int>(), size, at + " img2img");
                ++runs;
            }
            ++files;
        }
        QCOMPARE(files, 108);  // 18 scheduler variants x 2 predictions x 3 spacings
        qInfo(
            "%d fixture files, %d runs matched; worst relative errors: prev_sample %.2e, x0 %.2e, model input %.2e, "
            "add_noise %.2e, sigma %.2e, timestep %.2e",
            files, runs, worst.sample, worst.x0, worst.input, worst.addNoise, worst.sigma, worst.timestep);
    }
};

QTEST_GUILESS_MAIN(TestSdSchedulers)
#include "tst_sdschedulers.moc"
