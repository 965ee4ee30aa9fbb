// ControlNets on the CUDA engine: the controlled UNet graph (UNet + ControlNets as one graph) in a
// tiled, guided run of the tiny SD 1.x test pipeline with two tiny random ControlNets (one in
// "ControlNet is more important" mode, one with start/end inside the run), against the CPU engine
// on the same start noise: float32 to 1e-4, fp16 and bf16 to 40 dB, in every graph mode and with
// several lanes (the hint crops and scale rows filled on the device); a second run on the same
// device with other control images follows them (captured graphs read the run's tables). The same
// for SDXL: the tiny SDXL test pipeline with its diffusers-made ControlNet (text_time embeddings in
// the ControlNet too), Euler, a window inside the run, in fp32, fp16 and bf16.
#include <QtTest/QtTest>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/cpu/CpuBackend.h"
#include "core/cpu/CpuTileDevice.h"
#include "core/models/controlnet/ControlNetModel.h"
#include "core/models/sd/SdModel.h"
#include "core/sampling/ControlNetRun.h"
#include "core/sampling/TiledLoop.h"
#include "kernels/backend/CudaBackend.h"
#include "kernels/engine/CudaTileDevice.h"
#include "tests/cuda/OutputComparison.h"
#include "tests/cuda/RandomInputs.h"

using namespace tessera;
using testing::normal;
using testing::psnr8;
using testing::uniform;

namespace {

const std::string kSdPipeline = std::string(TESSERA_TEST_DATA) + "/sdpipeline/sd1";
const std::string kControlNets = std::string(TESSERA_TEST_DATA) + "/controlnet/pipeline";
const std::string kSdxlPipeline = std::string(TESSERA_TEST_DATA) + "/sdxlpipeline/pipeline";
const std::string kSdxlControlNet = std::string(TESSERA_TEST_DATA) + "/controlnet/sdxlpipeline/net0";
const std::string kVocabulary = std::string(TESSERA_SOURCE_DIR) + "/resources/clip/bpe_simple_vocab_16e6.txt.gz";

class Quiet : public RunObserver {};

// The CPU engine's float32 runs of a model from start noise `z`, with ControlNet units or none.
struct CpuReference {
    CpuReference(std::shared_ptr<const SdModel> sd, const ImageTensor& z) {
        loop.setSdModel(std::move(sd));
        loop.setStartNoise(z);
    }
    RunResult run(RunConfig config, const std::vector<ControlNetRunUnit>& units) {
        config.precision = Precision::FP32;
        config.backend = BackendKind::CPU;
        loop.setControlNets(units);
        Quiet quiet;
        return loop.run(config, quiet, cpu, [] { return false; });
    }
    CpuBackend backend{4};
    CpuTileDevice cpu{backend};
    TiledLoop loop;
};

}  // namespace

class TestCudaControlNet : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() {
        std::string why;
        if (!cudaDeviceAvailable(&why)) QSKIP(why.c_str());
        setBundledClipVocabulary(kVocabulary);
    }

    void tiledRunMatchesCpu_data() {
        QTest::addColumn<int>("precision");
        QTest::addColumn<int>("graphs");
        QTest::addColumn<int>("lanes");
        QTest::addColumn<int>("tileBatch");
        QTest::addColumn<bool>("shifted");
        QTest::newRow("fp32") << int(Precision::FP32) << int(GraphMode::Off) << 1 << 2 << false;
        QTest::newRow("fp32, step graphs, 2 lanes") << int(Precision::FP32) << int(GraphMode::Step) << 2 << 1 << false;
        QTest::newRow("fp32, tile graphs, 2 lanes") << int(Precision::FP32) << int(GraphMode::Tile) << 2 << 1 << false;
        QTest::newRow("fp16, step graphs") << int(Precision::FP16) << int(GraphMode::Step) << 1 << 2 << false;
        QTest::newRow("bf16, tile graphs, 3 lanes") << int(Precision::BF16) << int(GraphMode::Tile) << 3 << 1 << false;
        // Shifted tiles: the hints cropped from the hint canvas rolled by the step's shift times 8.
        QTest::newRow("fp32, step graphs, shifted tiles")
            << int(Precision::FP32) << int(GraphMode::Step) << 1 << 2 << true;
    }
    void tiledRunMatchesCpu() {
        QFETCH(int, precision);
        QFETCH(int, graphs);
        QFETCH(int, lanes);
        QFETCH(int, tileBatch);
        QFETCH(bool, shifted);
        auto sd = std::make_shared<SdModel>(loadSdModel(kSdPipeline));
        RunConfig config;
        config.width = 160;
        config.height = 64;
        config.tile = 64;
        config.overlapPx = 32;  // latent 20 x 8: 4 tiles
        config.tileBatch = tileBatch;
        config.steps = 4;
        config.scheduler = SchedulerKind::DDIM;
        config.prompt = "a lighthouse at dusk";
        config.negativePrompt = "fog";
        config.cfgScale = 5.0;
        config.previewEvery = 0;
        config.lanes = 1;
        if (shifted) config.tileShift = TileShift::Random;
        std::vector<ControlNetRunUnit> units(2);
        // The diffusers-made fixture ControlNets: every weight drawn (hint encoder included), so
        // that the control image steers the result; a fresh random one's hint encoder starts near 0.
        units[0].model = std::make_shared<const ControlNetModel>(ControlNetModel::load(kControlNets + "/net0"));
        units[0].image = ImageTensor{3, 64, 160, uniform(3 * 64 * 160, 2)};
        units[0].weight = 0.8f;
        units[0].mode = ControlMode::ControlNet;
        units[1].model = std::make_shared<const ControlNetModel>(ControlNetModel::load(kControlNets + "/net1"));
        units[1].image = ImageTensor{3, 64, 160, uniform(3 * 64 * 160, 4)};
        units[1].weight = 1.2f;
        units[1].start = 0.25;
        units[1].end = 0.75;
        const ImageTensor z{4, 8, 20, normal(4 * 8 * 20, 5)};
        Quiet quiet;
        CpuReference cpu(sd, z);
        const RunResult ref = cpu.run(config, units);
        const RunResult plain = cpu.run(config, {});

        // The same ControlNets over other control images: the second GPU run must follow them.
        // (Inverted images: two draws of uniform noise steer these tiny random ControlNets alike.)
        std::vector<ControlNetRunUnit> other = units;
        for (ControlNetRunUnit& u : other)
            for (float& v : u.image.data) v = 1.0f - v;
        const RunResult refOther = cpu.run(config, other);

        config.precision = static_cast<Precision>(precision);
        config.graphs = static_cast<GraphMode>(graphs);
        config.lanes = lanes;
        config.graphWarmup = 1;
        config.backend = BackendKind::CUDA;
        CudaTileDevice gpu(0);
        TiledLoop gpuLoop;
        gpuLoop.setSdModel(sd);
        gpuLoop.setStartNoise(z);
        for (int pass = 0; pass < 2; ++pass) {
            gpuLoop.setControlNets(pass == 0 ? units : other);
            const RunResult& want = pass == 0 ? ref : refOther;
            const RunResult got = gpuLoop.run(config, quiet, gpu, [] { return false; });
            QCOMPARE(std::string(toString(got.record.status)), std::string("finished"));
            QCOMPARE(got.record.tileCount, 4);
            if (config.precision == Precision::FP32) {
                const QString bad = testing::outputMismatch(want.latents.data, got.latents.data, 1e-4, "latents", true);
                QVERIFY2(bad.isEmpty(), qPrintable(QString("run %1: %2").arg(pass).arg(bad)));
            } else {
                const double db = psnr8(got.image, want.image);
                qInfo("run %d: PSNR %.1f dB (8-bit) against the CPU", pass, db);
                QVERIFY2(db >= 40.0, qPrintable(QString::number(db)));
            }
            if (config.graphs != GraphMode::Off) {
                // The graphs ran: no fallback message, and the record lists graph launches.
                for (const std::string& m : got.record.messages)
                    QVERIFY2(m.find("graphs off") == std::string::npos, m.c_str());
                QVERIFY(!got.record.graphs.used.empty());
            }
        }
        QVERIFY(psnr8(ref.image, plain.image) < 40.0);  // the ControlNets changed the picture
        // Other control images move the latents well beyond the float32 tolerance above (1.3e-3).
        const QString moved = testing::outputMismatch(ref.latents.data, refOther.latents.data, 5e-4, "latents", true);
        QVERIFY2(!moved.isEmpty(), "other control images left the latents within 5e-4");
    }

    void sdxlTiledRunMatchesCpu_data() {
        QTest::addColumn<int>("precision");
        QTest::addColumn<int>("graphs");
        QTest::newRow("fp32") << int(Precision::FP32) << int(GraphMode::Off);
        QTest::newRow("fp16, step graphs") << int(Precision::FP16) << int(GraphMode::Step);
        QTest::newRow("bf16, tile graphs") << int(Precision::BF16) << int(GraphMode::Tile);
    }
    void sdxlTiledRunMatchesCpu() {
        QFETCH(int, precision);
        QFETCH(int, graphs);
        auto sd = std::make_shared<SdModel>(loadSdModel(kSdxlPipeline));
        QVERIFY(sd->family == SdFamily::SDXL);
        RunConfig config;
        config.width = 128;
        config.height = 64;
        config.tile = 64;
        config.overlapPx = 32;  // latent 16 x 8: 3 tiles
        config.tileBatch = 2;
        config.steps = 5;
        config.scheduler = SchedulerKind::Euler;
        config.schedulerOptions.karrasSigmas = false;
        config.prompt = "a lighthouse on a cliff at dusk";
        config.negativePrompt = "blurry";
        config.cfgScale = 4.0;
        config.previewEvery = 0;
        config.sdxlSizeConditioning = SdxlSizeConditioning::Image;
        std::vector<ControlNetRunUnit> units(1);
        units[0].model = std::make_shared<const ControlNetModel>(ControlNetModel::load(kSdxlControlNet));
        units[0].image = ImageTensor{3, 64, 128, uniform(3 * 64 * 128, 7)};
        units[0].weight = 1.2f;
        units[0].end = 0.6;
        const ImageTensor z{4, 8, 16, normal(4 * 8 * 16, 8)};
        Quiet quiet;
        CpuReference cpu(sd, z);
        const RunResult ref = cpu.run(config, units);
        const RunResult plain = cpu.run(config, {});
        QCOMPARE(ref.record.tileCount, 3);

        config.precision = static_cast<Precision>(precision);
        config.graphs = static_cast<GraphMode>(graphs);
        config.graphWarmup = 1;
        config.backend = BackendKind::CUDA;
        CudaTileDevice gpu(0);
        TiledLoop gpuLoop;
        gpuLoop.setSdModel(sd);
        gpuLoop.setStartNoise(z);
        gpuLoop.setControlNets(units);
        const RunResult got = gpuLoop.run(config, quiet, gpu, [] { return false; });
        QCOMPARE(std::string(toString(got.record.status)), std::string("finished"));
        if (config.precision == Precision::FP32) {
            const QString bad = testing::outputMismatch(ref.latents.data, got.latents.data, 1e-4, "latents", true);
            QVERIFY2(bad.isEmpty(), qPrintable(bad));
        } else {
            const double db = psnr8(got.image, ref.image);
            qInfo("SDXL ControlNet %s: PSNR %.1f dB (8-bit) against the CPU",
                  std::string(toString(config.precision)).c_str(), db);
            QVERIFY2(db >= 40.0, qPrintable(QString::number(db)));
        }
        const double apart = psnr8(ref.image, plain.image);
        qInfo("with and without the ControlNet: %.1f dB apart", apart);
        QVERIFY(apart < 40.0);  // the ControlNet changed the picture
    }
};

QTEST_GUILESS_MAIN(TestCudaControlNet)
#include "tst_cudacontrolnet.moc"
