// The CPU reference engine against goldens computed by an independent float64 PyTorch
// reference (tools/reference/, run outside this code base; see tests/data/golden/README.md):
// one UNet forward per fixture model, full DDIM/DDPM samplings untiled and tiled with both
// fusion rules, the Philox noise, and the scheduler coefficients.
#include <QtTest>

#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "core/cpu/CpuBackend.h"
#include "core/cpu/CpuEngine.h"
#include "core/formats/Safetensors.h"
#include "core/models/unet/UNetModel.h"
#include "core/run/RunConfig.h"
#include "core/sampling/Philox.h"
#include "core/sampling/Scheduler.h"

using namespace tessera;

namespace {

const std::string kData = TESSERA_TEST_DATA;

struct ErrorStats {
    double relL2 = 0, maxAbs = 0, rms = 0;
};

ErrorStats compare(const std::vector<float>& got, const std::vector<float>& want) {
    ErrorStats s;
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        const double d = double(got[i]) - double(want[i]);
        if (!std::isfinite(got[i])) return {std::numeric_limits<double>::infinity(), 1e30, 1e30};
        num += d * d;
        den += double(want[i]) * want[i];
        s.maxAbs = std::max(s.maxAbs, std::abs(d));
    }
    s.relL2 = std::sqrt(num / std::max(den, 1e-300));
    s.rms = std::sqrt(num / double(want.size()));
    return s;
}

std::vector<std::uint32_t> readU32(const SafetensorsFile& f, const std::string& name) {
    const auto* info = f.find(name);
    if (!info) throw std::runtime_error("missing " + name);
    const auto bytes = f.readBytes(*info);
    std::vector<std::uint32_t> out(bytes.size() / 4);
    std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
}

class NullObserver : public RunObserver {};

}  // namespace

class TestGolden : public QObject {
    Q_OBJECT

private slots:
    void forward_data() {
        QTest::addColumn<QString>("model");
        QTest::newRow("cifar_like (1 head, padding 0)") << "cifar_like";
        QTest::newRow("heads_pad1 (4 heads, padding 1, scale_shift)") << "heads_pad1";
        QTest::newRow("legacy_names (query/key/value/proj_attn)") << "legacy_names";
    }
    void forward() {
        QFETCH(QString, model);
        const std::string name = model.toStdString();
        const UNetModel m = UNetModel::load(kData + "/models/" + name);
        const SafetensorsFile golden(kData + "/golden/forward_" + name + ".safetensors");
        const auto input = golden.readFloat32("input");
        const auto timesteps = golden.readFloat32("timesteps");
        const auto want = golden.readFloat32("output");
        QCOMPARE(input.size(), size_t(2 * 3 * 32 * 48));

        CpuBackend backend;
        backend.prepare(m, 2, 32, 48);
        std::vector<float> out(want.size(), std::numeric_limits<float>::quiet_NaN());  // poisoned
        backend.forward(input.data(), timesteps.data(), 2, out.data());
        const ErrorStats e = compare(out, want);
        qInfo("%s: forward relative L2 error %.3g, max abs %.3g", name.c_str(), e.relL2, e.maxAbs);
        QVERIFY2(e.relL2 < 1e-4, qPrintable(QString("relative error %1").arg(e.relL2)));
    }

    void sampling_data() {
        QTest::addColumn<QString>("file");
        QTest::addColumn<int>("scheduler");
        QTest::addColumn<int>("steps");
        QTest::addColumn<bool>("tiled");
        QTest::addColumn<int>("fusion");
        const int ddim = int(SchedulerKind::DDIM), ddpm = int(SchedulerKind::DDPM);
        const int sample = int(FusionRule::Sample), noise = int(FusionRule::Noise);
        QTest::newRow("ddim20 untiled") << "ddim20_untiled" << ddim << 20 << false << sample;
        QTest::newRow("ddim20 tiled sample") << "ddim20_tiled_sample" << ddim << 20 << true << sample;
        QTest::newRow("ddim20 tiled noise") << "ddim20_tiled_noise" << ddim << 20 << true << noise;
        QTest::newRow("ddpm10 untiled") << "ddpm10_untiled" << ddpm << 10 << false << sample;
        QTest::newRow("ddpm10 tiled sample") << "ddpm10_tiled_sample" << ddpm << 10 << true << sample;
        QTest::newRow("ddpm10 tiled noise") << "ddpm10_tiled_noise" << ddpm << 10 << true << noise;
    }
    void sampling() {
        QFETCH(QString, file);
        QFETCH(int, scheduler);
        QFETCH(int, steps);
        QFETCH(bool, tiled);
        QFETCH(int, fusion);
        const SafetensorsFile golden(kData + "/golden/sample_cifar_like_" + file.toStdString() + ".safetensors");
        const auto want = golden.readFloat32("x_final");
        const auto wantTimesteps = golden.readFloat32("timesteps");

        RunConfig cfg;
        cfg.model = kData + "/models/cifar_like";
        cfg.width = 96;
        cfg.height = 64;
        cfg.seed = 1234;
        cfg.steps = steps;
        cfg.scheduler = SchedulerKind(scheduler);
        cfg.schedulerOptions.eta = 0.0f;
        cfg.window = BlendWindowKind::Hann;
        cfg.fusion = FusionRule(fusion);
        cfg.tile = tiled ? 32 : 96;  // 96 > height: one 64x96 tile covers the image
        cfg.overlapPx = tiled ? 8 : 0;
        cfg.tileBatch = tiled ? 5 : 1;  // a batch that does not divide the 12 tiles
        cfg.previewEvery = 0;
        cfg.backend = BackendKind::CPU;

        CpuEngine sampler(std::make_unique<CpuBackend>());
        NullObserver observer;
        const RunResult r = sampler.run(cfg, observer);
        QCOMPARE(std::string(toString(r.record.status)), std::string("finished"));
        QCOMPARE(r.record.tileCount, tiled ? 12 : 1);
        QCOMPARE(r.record.timesteps.size(), wantTimesteps.size());
        for (size_t i = 0; i < wantTimesteps.size(); ++i) QCOMPARE(r.record.timesteps[i], wantTimesteps[i]);
        QCOMPARE(r.image.data.size(), want.size());
        const ErrorStats e = compare(r.image.data, want);
        qInfo("%s: max abs %.3g, rms %.3g, relative L2 %.3g", qPrintable(file), e.maxAbs, e.rms, e.relL2);
        QVERIFY2(e.maxAbs < 1e-3, qPrintable(QString("max abs error %1").arg(e.maxAbs)));
        QVERIFY2(e.rms < 1e-4, qPrintable(QString("rms error %1").arg(e.rms)));
    }

    void philoxMatchesReference() {
        const SafetensorsFile golden(kData + "/golden/philox_seed1234.safetensors");
        const auto normal = golden.readFloat32("normal");
        const auto draws = readU32(golden, "draws");
        QCOMPARE(normal.size(), size_t(3 * 1024));
        int mismatches = 0;
        for (int d = 0; d < 3; ++d)
            for (int i = 0; i < 1024; ++i)
                if (philoxNormal(1234, draws[d], std::uint64_t(i)) != normal[size_t(d) * 1024 + i]) ++mismatches;
        QCOMPARE(mismatches, 0);

        const auto inputs = readU32(golden, "bits_inputs");  // [8,5]: seed lo, seed hi, draw, index lo, index hi
        const auto bits = readU32(golden, "bits");           // [8,4]
        for (int r = 0; r < 8; ++r) {
            const std::uint64_t seed = std::uint64_t(inputs[r * 5 + 1]) << 32 | inputs[r * 5 + 0];
            const std::uint64_t index = std::uint64_t(inputs[r * 5 + 4]) << 32 | inputs[r * 5 + 3];
            const Philox4x32 out = philoxBits(seed, inputs[r * 5 + 2], index);
            for (int k = 0; k < 4; ++k) QCOMPARE(out.v[k], bits[r * 4 + k]);
        }
    }

    void schedulerMatchesReference_data() {
        QTest::addColumn<QString>("prefix");
        QTest::addColumn<int>("scheduler");
        QTest::addColumn<int>("steps");
        QTest::newRow("ddim20") << "ddim20" << int(SchedulerKind::DDIM) << 20;
        QTest::newRow("ddim50") << "ddim50" << int(SchedulerKind::DDIM) << 50;
        QTest::newRow("ddpm10") << "ddpm10" << int(SchedulerKind::DDPM) << 10;
    }
    void schedulerMatchesReference() {
        QFETCH(QString, prefix);
        QFETCH(int, scheduler);
        QFETCH(int, steps);
        const SafetensorsFile golden(kData + "/golden/schedules.safetensors");
        const UNetModel m = UNetModel::load(kData + "/models/cifar_like");
        SchedulerOptions opts = m.schedulerOptions();
        opts.eta = 0.0f;
        auto s = Scheduler::create(SchedulerKind(scheduler), opts);
        s->setTimesteps(steps);
        const auto ts = golden.readFloat32(prefix.toStdString() + "_timesteps");
        const auto coef = golden.readFloat32(prefix.toStdString() + "_coefficients");  // [N, 13]
        QCOMPARE(s->timesteps().size(), ts.size());
        for (int k = 0; k < steps; ++k) {
            QCOMPARE(s->timesteps()[size_t(k)], ts[size_t(k)]);
            const StepCoefficients c = s->coefficients(k);
            const float mine[13] = {c.ax, c.ae,   c.clip,  c.clipRange,       c.ee,      c.ex, c.e0, c.cx0,
                                    c.cx, c.ceps, c.sigma, c.modelInputScale, c.timestep};
            for (int j = 0; j < 13; ++j) {
                const float want = coef[size_t(k) * 13 + j];
                const float tol = 2e-6f * std::max(1.0f, std::abs(want));
                QVERIFY2(
                    std::abs(mine[j] - want) <= tol,
                    qPrintable(QString("step %1 column %2: %3 vs reference %4").arg(k).arg(j).arg(mine[j]).arg(want)));
            }
        }
    }
};

QTEST_GUILESS_MAIN(TestGolden)
#include "tst_golden.moc"
