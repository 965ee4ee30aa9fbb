// tile_colorfix on the CUDA engine: the ColorFix op (kernels/ops/ColorFix.cu) against the CPU
// op on random rows of odd sizes (both variants, a weight below 1, conditional and unconditional
// rows, fractional timesteps), float32 to 1e-6 and fp16/bf16 to their op tolerances; and tiled,
// guided runs of the tiny SD 1.x pipeline with a colour-fixing ControlNet (tile_colorfix and
// tile_colorfix+sharp) against the CPU engine on the same start noise, in several graph modes and
// lanes (the hint latent's crops and the row marks placed on the device). Skips without a GPU.
#include <QtTest/QtTest>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/cpu/CpuBackend.h"
#include "core/cpu/CpuTileDevice.h"
#include "core/graph/GraphBuilder.h"
#include "core/graph/ModelGraph.h"
#include "core/models/controlnet/ControlNetConfig.h"
#include "core/models/controlnet/ControlNetModel.h"
#include "core/models/controlnet/ControlledUNetGraph.h"
#include "core/models/sd/SdModel.h"
#include "core/sampling/ControlNetRun.h"
#include "core/sampling/TiledLoop.h"
#include "kernels/backend/CudaBackend.h"
#include "kernels/engine/CudaTileDevice.h"
#include "tests/cuda/OutputComparison.h"
#include "tests/cuda/RandomInputs.h"

using namespace tessera;
using testing::normal;
using testing::uniform;

namespace {

const std::string kSdPipeline = std::string(TESSERA_TEST_DATA) + "/sdpipeline/sd1";
const std::string kVocabulary = std::string(TESSERA_SOURCE_DIR) + "/resources/clip/bpe_simple_vocab_16e6.txt.gz";

std::shared_ptr<const ControlNetModel> tinyControlNet(std::uint64_t seed) {
    const nlohmann::json j = nlohmann::json::parse(R"({"_class_name": "ControlNetModel", "block_out_channels": [16, 32],
      "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"], "layers_per_block": 1, "norm_num_groups": 8,
      "cross_attention_dim": 8, "attention_head_dim": 2, "conditioning_embedding_out_channels": [4, 6, 8, 10]})");
    return std::make_shared<const ControlNetModel>(ControlNetModel::random(controlNetConfigFromJson(j), seed));
}

ModelGraph colorFixGraph(int channels, int radius, float weight, float sharpness) {
    ModelGraph g;
    const int eps = g.addInput("eps", ValueKind::FeatureMap, channels);
    const int x = g.addInput("x", ValueKind::FeatureMap, channels);
    const int latent = g.addInput("latent", ValueKind::FeatureMap, channels);
    const int t = g.addInput("timestep", ValueKind::Vector, 1);
    const int mark = g.addInput("cond_mark", ValueKind::Vector, 2);
    GraphOp op = newOp(OpKind::ColorFix, "colorfix", eps, x);
    op.hintLatent = latent;
    op.timesteps = t;
    op.condMark = mark;
    op.radius = radius;
    op.scale = weight;
    op.sharpness = sharpness;
    op.params = {g.addParam("table", {2, 1000})};
    g.markOutput(g.addOp(std::move(op)));
    return g;
}

std::vector<float> runOn(Backend& backend, const ModelGraph& g, const TensorMap& weights, int batch, int h, int w,
                         const std::vector<std::vector<float>>& inputs) {
    backend.prepareGraph(g, weights, batch, h, w);
    std::vector<const float*> pointers;
    for (const auto& v : inputs) pointers.push_back(v.data());
    std::vector<float> out(static_cast<std::size_t>(g.elements(g.outputs().front(), batch, h, w)));
    backend.run(pointers, batch, {out.data()});
    return out;
}

class Quiet : public RunObserver {};

}  // namespace

class TestCudaColorFix : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() {
        std::string why;
        if (!cudaDeviceAvailable(&why)) QSKIP(why.c_str());
        setBundledClipVocabulary(kVocabulary);
    }

    void opMatchesCpu_data() {
        QTest::addColumn<int>("precision");
        QTest::addColumn<bool>("sharp");
        QTest::addColumn<int>("radius");
        QTest::addColumn<float>("weight");
        for (const int p : {int(Precision::FP32), int(Precision::FP16), int(Precision::BF16)}) {
            const std::string name = testing::precisionName(static_cast<Precision>(p));
            QTest::newRow((name + " colorfix k8").c_str()) << p << false << 8 << 1.0f;
            QTest::newRow((name + " colorfix k3 w0.6").c_str()) << p << false << 3 << 0.6f;
            QTest::newRow((name + " sharp k5 w0.8").c_str()) << p << true << 5 << 0.8f;
            QTest::newRow((name + " sharp k32").c_str()) << p << true << 32 << 1.0f;
        }
    }
    void opMatchesCpu() {
        QFETCH(int, precision);
        QFETCH(bool, sharp);
        QFETCH(int, radius);
        QFETCH(float, weight);
        const int B = 4, C = 4, H = 13, W = 21;
        const ModelGraph g = colorFixGraph(C, radius, weight, sharp ? 0.015f : -1.0f);
        const TensorMap weights{{"table", HostTensor{{2, 1000}, colorFixDdpmTable()}}};
        const auto n = static_cast<std::size_t>(B * C * H * W);
        std::vector<float> x = normal(n, 2);
        for (float& v : x) v *= 1.7f;
        const std::vector<std::vector<float>> inputs{normal(n, 1),
                                                     x,
                                                     normal(n, 3),
                                                     {999.0f, 500.5f, 1.5f, 761.49f},
                                                     {0.0f, 0.0f, -1.0f, 0.0f, 0.0f, 0.0f, -1.0f, 0.0f}};
        CpuBackend cpu(2);
        const std::vector<float> want = runOn(cpu, g, weights, B, H, W, inputs);
        CudaBackend gpu(static_cast<Precision>(precision));
        const std::vector<float> got = runOn(gpu, g, weights, B, H, W, inputs);
        const double tolerance =
            precision == int(Precision::FP32) ? 1e-6 : testing::opTolerance(static_cast<Precision>(precision));
        const QString bad = testing::outputMismatch(want, got, tolerance, "colorfix", true);
        QVERIFY2(bad.isEmpty(), qPrintable(bad));
    }

    void tiledRunMatchesCpu_data() {
        QTest::addColumn<QString>("preprocessor");
        QTest::addColumn<int>("graphs");
        QTest::addColumn<int>("lanes");
        QTest::addColumn<int>("tileBatch");
        QTest::newRow("colorfix, no graphs") << QString("tile_colorfix") << int(GraphMode::Off) << 1 << 2;
        QTest::newRow("colorfix+sharp, step graphs, 2 lanes")
            << QString("tile_colorfix+sharp") << int(GraphMode::Step) << 2 << 1;
        QTest::newRow("colorfix+sharp, tile graphs")
            << QString("tile_colorfix+sharp") << int(GraphMode::Tile) << 1 << 3;
    }
    void tiledRunMatchesCpu() {
        QFETCH(QString, preprocessor);
        QFETCH(int, graphs);
        QFETCH(int, lanes);
        QFETCH(int, tileBatch);
        auto sd = std::make_shared<SdModel>(loadSdModel(kSdPipeline));
        RunConfig config;
        config.width = 160;
        config.height = 64;
        config.tile = 64;
        config.overlapPx = 32;  // latent 20 x 8: 4 tiles
        config.tileBatch = tileBatch;
        config.steps = 4;
        config.scheduler = SchedulerKind::Euler;
        config.schedulerOptions.karrasSigmas = true;  // fractional timesteps, x * c_in
        config.prompt = "a lighthouse at dusk";
        config.negativePrompt = "fog";
        config.cfgScale = 5.0;
        config.previewEvery = 0;
        config.lanes = 1;
        std::vector<ControlNetRunUnit> units(1);
        units[0].model = tinyControlNet(1);
        units[0].image = ImageTensor{3, 64, 160, uniform(3 * 64 * 160, 2)};
        units[0].weight = 0.9f;
        units[0].preprocessor = preprocessor.toStdString();
        units[0].colorfixVariation = 5;
        units[0].colorfixSharpness = 1.5;
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
        const RunResult want = cpuLoop.run(config, quiet, cpu, [] { return false; });

        config.graphs = static_cast<GraphMode>(graphs);
        config.lanes = lanes;
        config.graphWarmup = 1;
        config.backend = BackendKind::CUDA;
        CudaTileDevice gpu(0);
        TiledLoop gpuLoop;
        gpuLoop.setSdModel(sd);
        gpuLoop.setStartNoise(z);
        gpuLoop.setControlNets(units);
        const RunResult got = gpuLoop.run(config, quiet, gpu, [] { return false; });
        QCOMPARE(std::string(toString(got.record.status)), std::string("finished"));
        QCOMPARE(got.record.tileCount, 4);
        const QString bad = testing::outputMismatch(want.latents.data, got.latents.data, 1e-4, "latents", true);
        QVERIFY2(bad.isEmpty(), qPrintable(bad));
    }
};

QTEST_GUILESS_MAIN(TestCudaColorFix)
#include "tst_cudacolorfix.moc"
