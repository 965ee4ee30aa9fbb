// Flow matching's Euler sampler (core/sampling/FlowMatchScheduler.h) against diffusers'
// FlowMatchEulerDiscreteScheduler (tests/data/flux/scheduler.json, tools/reference/make_flux_fixtures.py):
// FLUX.1-dev's resolution-dependent shift and schnell's none at several sizes and step counts, the
// image-to-image start, and the per-step arithmetic.
#include <QtTest>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/run/RunConfig.h"
#include "core/sampling/FlowMatchScheduler.h"

using namespace tessera;

class TestFluxScheduler : public QObject {
    Q_OBJECT

private slots:
    void sigmasMatchDiffusers() {
        std::ifstream in(std::string(TESSERA_TEST_DATA) + "/flux/scheduler.json");
        const nlohmann::json cases = nlohmann::json::parse(in);
        QVERIFY(cases.size() >= 12);
        for (const auto& c : cases) {
            FlowMatchOptions o;
            o.dynamicShift = c["variant"] == "dev";
            o.imageSeqLen = c["image_seq_len"];
            if (o.dynamicShift) QVERIFY(std::fabs(o.mu() - c["mu"].get<double>()) < 1e-12);
            auto s = createFlowMatchScheduler(o);
            s->setTimesteps(c["steps"]);
            const auto& sigmas = c["sigmas"];
            QCOMPARE(s->sigmas().size(), sigmas.size());
            for (std::size_t k = 0; k < sigmas.size(); ++k)
                QVERIFY2(std::fabs(s->sigmas()[k] - sigmas[k].get<double>()) <= 1e-7,
                         qPrintable(QString("%1 case %2 sigma %3: %4 vs %5")
                                        .arg(QString::fromStdString(c["variant"]))
                                        .arg(c["steps"].get<int>())
                                        .arg(k)
                                        .arg(s->sigmas()[k])
                                        .arg(sigmas[k].get<double>())));
            for (std::size_t k = 0; k + 1 < sigmas.size(); ++k) {
                QVERIFY(std::fabs(s->timesteps()[k] - c["timesteps"][k].get<double>()) <= 1e-4);
                QCOMPARE(s->coefficients(static_cast<int>(k)).timestep, s->timesteps()[k]);
            }
            for (const char* strength : {"0.3", "0.6", "1.0"}) {
                const auto& start = c[std::string("img2img_") + strength];
                RunConfig config;  // the first step run as the engine counts it
                config.steps = c["steps"];
                config.strength = std::stod(strength);
                QCOMPARE(firstFlowStepRun(config, true), start["start_index"].get<int>());
                QCOMPARE(firstFlowStepRun(config, false), 0);
                const Scheduler::AddNoise a = s->addNoise(start["start_index"].get<int>());
                QVERIFY(std::fabs(a.noise - start["start_sigma"].get<double>()) <= 1e-7);
                QCOMPARE(a.image, 1.0f - a.noise);
            }
        }
    }

    // The spec's test vectors: mu at FLUX.1's anchors, dev 1024^2 in 4 steps.
    void shiftTestVectors() {
        FlowMatchOptions o;
        o.imageSeqLen = 64 * 64;
        QVERIFY(std::fabs(o.mu() - 1.15) < 1e-12);
        o.imageSeqLen = 32 * 32;
        QVERIFY(std::fabs(o.mu() - 0.63) < 1e-12);
        o.imageSeqLen = 128 * 128;
        QVERIFY(std::fabs(o.mu() - 3.23) < 1e-9);
    }

    // One Euler step of flow matching: x + (sigma_next - sigma) v; x0 = x - sigma v.
    void stepArithmetic() {
        FlowMatchOptions o;
        o.dynamicShift = false;
        auto s = createFlowMatchScheduler(o);
        s->setTimesteps(4);  // 1, 0.75, 0.5, 0.25, 0
        const float x = 0.8f, v = -1.5f;
        float out = 0, x0 = 0;
        s->step(1, &v, &x, nullptr, &out, 1);
        QCOMPARE(out, x + (0.5f - 0.75f) * v);
        s->predictX0(1, &v, &x, &x0, 1);
        QCOMPARE(x0, x - 0.75f * v);
        QCOMPARE(s->initNoiseSigma(), 1.0f);
        QVERIFY_THROWS_EXCEPTION(ValidationError, s->setTimesteps(0));
        QVERIFY_THROWS_EXCEPTION(std::out_of_range, (void)s->addNoise(4));
    }
};

QTEST_APPLESS_MAIN(TestFluxScheduler)
#include "tst_fluxscheduler.moc"
