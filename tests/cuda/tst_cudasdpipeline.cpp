// Stable Diffusion on the CUDA engine against the CPU engine, end to end: the tiny SD 1.x and
// SD 2.x pipelines of tests/data/sdpipeline (text conditioning, classifier-free guidance as one
// doubled batch per tile batch, the latent canvas tiled, the VAE decode on the device), in fp32
// (within 1e-4 of the CPU), fp16 and bf16 (PSNR >= 40 dB on the decoded 8-bit image), in every
// graph mode and with two lanes; guidance 1 (conditional rows only). Skips without a device.
#include <QtTest/QtTest>

#include <cmath>
#include <memory>
#include <string>

#include "core/cpu/CpuBackend.h"
#include "core/cpu/CpuEngine.h"
#include "core/models/sd/SdModel.h"
#include "core/sampling/ImageOps.h"
#include "kernels/backend/CudaBackend.h"
#include "kernels/engine/CudaEngine.h"
#include "tests/cuda/OutputComparison.h"

using namespace tessera;
using testing::psnr8;

namespace {

const std::string kFixtures = std::string(TESSERA_TEST_DATA) + "/sdpipeline";

double rel(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return 1e30;
    double num = 0, den = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const double d = static_cast<double>(a[i]) - b[i];
        num += std::isfinite(d) ? d * d : 1e30;
        den += static_cast<double>(b[i]) * b[i];
    }
    return std::sqrt(num / std::max(den, 1e-30));
}

// PSNR of the 8-bit images the two runs would write.
RunConfig sdConfig(const std::string& family) {
    RunConfig c;
    c.model = kFixtures + "/" + family;
    c.width = 192;
    c.height = 128;
    c.tile = 64;
    c.overlapPx = 32;
    c.tileBatch = 3;
    c.steps = 6;
    c.seed = 7;
    c.scheduler = SchedulerKind::DPMPP2M;
    c.schedulerOptions.karrasSigmas = true;
    c.prompt = "a lighthouse on a cliff, stormy sea";
    c.negativePrompt = "blurry";
    c.cfgScale = 7.0;
    c.previewEvery = 0;
    c.lanes = 1;
    return c;
}

class Quiet : public RunObserver {};

}  // namespace

class TestCudaSdPipeline : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() {
        std::string why;
        if (!cudaDeviceAvailable(&why)) QSKIP(why.c_str());
        setBundledClipVocabulary(std::string(TESSERA_SOURCE_DIR) + "/resources/clip/bpe_simple_vocab_16e6.txt.gz");
    }

    void matchesCpuEngine_data() {
        QTest::addColumn<QString>("family");
        QTest::addColumn<int>("precision");
        QTest::addColumn<int>("graphs");
        QTest::addColumn<int>("lanes");
        QTest::addColumn<double>("cfg");
        const int f32 = int(Precision::FP32), f16 = int(Precision::FP16), b16 = int(Precision::BF16);
        const int off = int(GraphMode::Off), tile = int(GraphMode::Tile), step = int(GraphMode::Step);
        QTest::newRow("sd1 fp32") << "sd1" << f32 << off << 1 << 7.0;
        QTest::newRow("sd1 fp32 no guidance") << "sd1" << f32 << off << 1 << 1.0;
        QTest::newRow("sd1 fp32 step graphs") << "sd1" << f32 << step << 1 << 7.0;
        QTest::newRow("sd1 fp32 tile graphs 2 lanes") << "sd1" << f32 << tile << 2 << 7.0;
        QTest::newRow("sd1 fp16") << "sd1" << f16 << off << 1 << 7.0;
        QTest::newRow("sd1 bf16 step graphs") << "sd1" << b16 << step << 2 << 7.0;
        QTest::newRow("sd2 fp32 (v-prediction)") << "sd2" << f32 << off << 1 << 7.0;
        QTest::newRow("sd2 fp16 step graphs") << "sd2" << f16 << step << 1 << 7.0;
    }
    void matchesCpuEngine() {
        QFETCH(QString, family);
        QFETCH(int, precision);
        QFETCH(int, graphs);
        QFETCH(int, lanes);
        QFETCH(double, cfg);
        RunConfig config = sdConfig(family.toStdString());
        config.cfgScale = cfg;
        config.precision = Precision::FP32;
        config.backend = BackendKind::CPU;
        CpuEngine cpu(std::make_unique<CpuBackend>());
        Quiet quiet;
        const RunResult ref = cpu.run(config, quiet);

        config.precision = static_cast<Precision>(precision);
        config.graphs = static_cast<GraphMode>(graphs);
        config.lanes = lanes;
        config.backend = BackendKind::CUDA;
        CudaEngine gpu(0);
        const RunResult got = gpu.run(config, quiet);
        QCOMPARE(std::string(toString(got.record.status)), std::string("finished"));
        QVERIFY2(got.record.graphs.fallbackReason.empty(), got.record.graphs.fallbackReason.c_str());
        const double r = rel(got.image.data, ref.image.data);
        const double db = psnr8(got.image, ref.image);
        qInfo("%s: image rel %.3e, PSNR %.1f dB (8-bit), prepare %.0f ms, run %.0f ms", QTest::currentDataTag(), r, db,
              got.record.prepareMs, got.record.totalMs);
        if (config.precision == Precision::FP32)
            QVERIFY2(r < 1e-4, qPrintable(QString("fp32 image differs from the CPU by %1").arg(r)));
        else
            QVERIFY2(db >= 40.0, qPrintable(QString("PSNR %1 dB against the CPU").arg(db)));
        // The same engine again: the cached plan and graphs give the same bits.
        const RunResult again = gpu.run(config, quiet);
        QCOMPARE(again.record.imageSha256, got.record.imageSha256);
    }
};

QTEST_GUILESS_MAIN(TestCudaSdPipeline)
#include "tst_cudasdpipeline.moc"
