// ControlNets on the CUDA engine: the controlled UNet graph (UNet + ControlNets as one graph) in a
// tiled, guided run of the tiny SD 1.x test pipeline with two tiny random ControlNets (one in
// "ControlNet is more important" mode, one with start/end inside the run), against the CPU engine
// on the same start noise: float32 to 1e-4, fp16 and bf16 to 40 dB; a run asking for step graphs
// runs with graphs off and says so.
#include <QtTest/QtTest>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/cpu/CpuBackend.h"
#include "core/cpu/CpuTileDevice.h"
#include "core/models/controlnet/ControlNetConfig.h"
#include "core/models/controlnet/ControlNetModel.h"
#include "core/models/sd/SdModel.h"
#include "core/sampling/ControlNetRun.h"
#include "core/sampling/TiledLoop.h"
#include "kernels/backend/CudaBackend.h"
#include "kernels/engine/CudaTileDevice.h"
#include "tests/cuda/OutputComparison.h"

using namespace tessera;

namespace {

const std::string kSdPipeline = std::string(TESSERA_TEST_DATA) + "/sdpipeline/sd1";
const std::string kVocabulary = std::string(TESSERA_SOURCE_DIR) + "/resources/clip/bpe_simple_vocab_16e6.txt.gz";

std::shared_ptr<const ControlNetModel> tinyControlNet(std::uint64_t seed) {
    const nlohmann::json j = nlohmann::json::parse(R"({"_class_name": "ControlNetModel", "block_out_channels": [16, 32],
      "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"], "layers_per_block": 1, "norm_num_groups": 8,
      "cross_attention_dim": 8, "attention_head_dim": 2, "conditioning_embedding_out_channels": [4, 6, 8, 10]})");
    return std::make_shared<const ControlNetModel>(ControlNetModel::random(controlNetConfigFromJson(j), seed));
}

std::vector<float> uniform(std::size_t n, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(0.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

std::vector<float> normal(std::size_t n, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

double psnr8(const ImageTensor& a, const ImageTensor& b) {
    double se = 0;
    for (std::size_t i = 0; i < a.data.size(); ++i) {
        const auto q = [](float v) { return std::round(std::clamp((v + 1.0f) * 127.5f, 0.0f, 255.0f)); };
        const double d = q(a.data[i]) - q(b.data[i]);
        se += d * d;
    }
    const double mse = se / static_cast<double>(a.data.size());
    return mse == 0 ? 99.0 : 10.0 * std::log10(255.0 * 255.0 / mse);
}

class Quiet : public RunObserver {};

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
        QTest::newRow("fp32") << int(Precision::FP32) << int(GraphMode::Off);
        QTest::newRow("fp16, step graphs asked") << int(Precision::FP16) << int(GraphMode::Step);
        QTest::newRow("bf16") << int(Precision::BF16) << int(GraphMode::Off);
    }
    void tiledRunMatchesCpu() {
        QFETCH(int, precision);
        QFETCH(int, graphs);
        auto sd = std::make_shared<SdModel>(loadSdModel(kSdPipeline));
        RunConfig config;
        config.width = 160;
        config.height = 64;
        config.tile = 64;
        config.overlapPx = 32;  // latent 20 x 8: 4 tiles
        config.tileBatch = 2;
        config.steps = 4;
        config.scheduler = SchedulerKind::DDIM;
        config.prompt = "a lighthouse at dusk";
        config.negativePrompt = "fog";
        config.cfgScale = 5.0;
        config.previewEvery = 0;
        config.lanes = 1;
        std::vector<ControlNetRunUnit> units(2);
        units[0].model = tinyControlNet(1);
        units[0].image = ImageTensor{3, 64, 160, uniform(3 * 64 * 160, 2)};
        units[0].weight = 0.8f;
        units[0].mode = ControlMode::ControlNet;
        units[1].model = tinyControlNet(3);
        units[1].image = ImageTensor{3, 64, 160, uniform(3 * 64 * 160, 4)};
        units[1].weight = 1.2f;
        units[1].start = 0.25;
        units[1].end = 0.75;
        const ImageTensor z{4, 8, 20, normal(4 * 8 * 20, 5)};
        Quiet quiet;

        config.precision = Precision::FP32;
        config.backend = BackendKind::CPU;
        CpuBackend backend(4);
        CpuTileDevice cpu(backend);
        TiledLoop cpuLoop;
        cpuLoop.setSdModel(sd);
        cpuLoop.setStartNoise(z);
        cpuLoop.setControlNets(units);
        const RunResult ref = cpuLoop.run(config, quiet, cpu, [] { return false; });
        cpuLoop.setControlNets({});
        const RunResult plain = cpuLoop.run(config, quiet, cpu, [] { return false; });

        config.precision = static_cast<Precision>(precision);
        config.graphs = static_cast<GraphMode>(graphs);
        config.backend = BackendKind::CUDA;
        CudaTileDevice gpu(0);
        TiledLoop gpuLoop;
        gpuLoop.setSdModel(sd);
        gpuLoop.setStartNoise(z);
        gpuLoop.setControlNets(units);
        const RunResult got = gpuLoop.run(config, quiet, gpu, [] { return false; });
        QCOMPARE(std::string(toString(got.record.status)), std::string("finished"));
        QCOMPARE(got.record.tileCount, 4);
        if (config.precision == Precision::FP32) {
            const QString bad = testing::outputMismatch(ref.latents.data, got.latents.data, 1e-4, "latents", true);
            QVERIFY2(bad.isEmpty(), qPrintable(bad));
        } else {
            const double db = psnr8(got.image, ref.image);
            qInfo("PSNR %.1f dB (8-bit) against the CPU", db);
            QVERIFY2(db >= 40.0, qPrintable(QString::number(db)));
        }
        QVERIFY(psnr8(ref.image, plain.image) < 40.0);  // the ControlNets changed the picture
        if (config.graphs != GraphMode::Off) {
            bool said = false;
            for (const std::string& m : got.record.messages) said = said || m.find("ControlNet") != std::string::npos;
            QVERIFY(said);
        }
    }
};

QTEST_GUILESS_MAIN(TestCudaControlNet)
#include "tst_cudacontrolnet.moc"
