// FLUX.1 on the CUDA backend: the diffusers fixture transformer (tests/data/flux: heads of 20, the
// blocked attention path) against diffusers' float64 output; a FLUX-shaped random transformer
// (heads of 128 as FLUX.1's: the fused attention) against the CPU in fp32, fp16 and bf16; and the
// fixture pipeline through the one tiled loop on the CUDA tile device against the CPU engine, tiled,
// with CUDA graphs off, per tile and per step and two lanes. Skips where no CUDA device is present.
#include <QtTest/QtTest>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/cpu/CpuBackend.h"
#include "core/cpu/CpuTileDevice.h"
#include "core/formats/Safetensors.h"
#include "core/models/flux/FluxGraph.h"
#include "core/models/flux/FluxModel.h"
#include "core/models/flux/FluxWeights.h"
#include "core/sampling/TiledLoop.h"
#include "kernels/backend/CudaBackend.h"
#include "kernels/engine/CudaTileDevice.h"
#include "tests/cuda/OutputComparison.h"
#include "tests/cuda/RandomInputs.h"

using namespace tessera;
using testing::normal;

namespace {

const std::string kFixtures = std::string(TESSERA_TEST_DATA) + "/flux";

class Quiet : public RunObserver {};

std::vector<float> forward(Backend& backend, const ModelGraph& g, const TensorMap& w, int batch, int h, int wd,
                           const std::vector<std::vector<float>>& in) {
    backend.prepareGraph(g, w, batch, h, wd);
    std::vector<const float*> ptrs;
    for (const auto& x : in) ptrs.push_back(x.data());
    std::vector<float> out(static_cast<std::size_t>(g.elements(g.outputs()[0], batch, h, wd)), NAN);
    backend.run(ptrs, batch, {out.data()});
    return out;
}

// The graph's inputs for `batch` tiles of h x w: latents, timesteps 1000 sigma, text, pooled (+ guidance).
std::vector<std::vector<float>> randomInputs(const ModelGraph& g, const FluxConfig& c, int batch, int h, int w) {
    std::vector<std::vector<float>> in;
    for (std::size_t k = 0; k < g.inputs().size(); ++k)
        in.push_back(normal(static_cast<std::size_t>(g.elements(g.inputs()[k], batch, h, w)), 40 + k));
    for (int b = 0; b < batch; ++b) in[1][static_cast<std::size_t>(b)] = 1000.0f * (0.9f - 0.3f * b);
    if (c.guidanceEmbeds)
        for (int b = 0; b < batch; ++b)
            in[3][static_cast<std::size_t>(b) * (c.pooledProjectionDim + 1) + c.pooledProjectionDim] = 3.5f + b;
    return in;
}

}  // namespace

class TestCudaFlux : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() {
        std::string why;
        if (!cudaDeviceAvailable(&why)) QSKIP(why.c_str());
    }

    // diffusers' float64 forward of the fixture transformer, in fp32 on the device.
    void fixtureForward() {
        const std::shared_ptr<const FluxModel> model = loadFluxModel(kFixtures);
        const SafetensorsFile file(kFixtures + "/transformer_square.safetensors");
        const ModelGraph g = fuseForExecution(buildFluxGraph(model->config, 7));
        std::vector<float> t = file.readFloat32("sigma"), vector;
        for (float& s : t) s *= 1000.0f;
        const std::vector<float> pooled = file.readFloat32("pooled"), guidance = file.readFloat32("guidance");
        for (int b = 0; b < 2; ++b) {
            vector.insert(vector.end(), pooled.begin() + b * 40, pooled.begin() + (b + 1) * 40);
            vector.push_back(guidance[static_cast<std::size_t>(b)]);
        }
        CudaBackend gpu(Precision::FP32);
        const std::vector<float> out = forward(gpu, g, model->tensors, 2, 6, 10,
                                               {file.readFloat32("sample"), t, file.readFloat32("text"), vector});
        const QString bad = testing::outputMismatch(file.readFloat32("output"), out, 1e-4, "output", true);
        QVERIFY2(bad.isEmpty(), qPrintable(bad));
    }

    void shapedForward_data() {
        QTest::addColumn<int>("precision");
        QTest::addColumn<double>("tolerance");
        QTest::newRow("fp32") << int(Precision::FP32) << 1e-4;
        QTest::newRow("fp16") << int(Precision::FP16) << 2e-2;
        QTest::newRow("bf16") << int(Precision::BF16) << 8e-2;
    }

    // FLUX.1's head width (128, rope axes 16 + 56 + 56) at 4 heads, 2 blocks of each kind, over
    // 64 text tokens and a 32 x 48 latent tile (384 image tokens), batch 2, against the CPU.
    void shapedForward() {
        QFETCH(int, precision);
        QFETCH(double, tolerance);
        FluxConfig c;
        c.heads = 4;
        c.layers = 2;
        c.singleLayers = 2;
        c.jointAttentionDim = 256;
        c.pooledProjectionDim = 64;
        const ModelGraph g = fuseForExecution(buildFluxGraph(c, 64));
        const auto weights = randomTensors(fluxParameters(c), 7);
        const auto in = randomInputs(g, c, 2, 32, 48);
        CpuBackend cpu(4);
        const std::vector<float> ref = forward(cpu, g, weights, 2, 32, 48, in);
        CudaBackend gpu(static_cast<Precision>(precision));
        const std::vector<float> out = forward(gpu, g, weights, 2, 32, 48, in);
        const QString bad = testing::outputMismatch(ref, out, tolerance, "output", true);
        QVERIFY2(bad.isEmpty(), qPrintable(bad));
        // The fused attention ran for heads of 128 in fp16 and bf16 (the path record names it).
        bool fused = false;
        for (const auto& p : gpu.attentionPaths()) fused = fused || p.fused;
        QVERIFY(fused == (static_cast<Precision>(precision) != Precision::FP32));
    }

    void pipelineMatchesCpu_data() {
        QTest::addColumn<int>("graphs");
        QTest::addColumn<int>("lanes");
        QTest::newRow("graphs off") << int(GraphMode::Off) << 1;
        QTest::newRow("tile graphs, 2 lanes") << int(GraphMode::Tile) << 2;
        QTest::newRow("step graphs, 2 lanes") << int(GraphMode::Step) << 2;
    }

    // The fixture pipeline tiled (32-px tiles, 16 px overlap over 80 x 48: 8 tiles), 4 steps.
    void pipelineMatchesCpu() {
        QFETCH(int, graphs);
        QFETCH(int, lanes);
        const std::shared_ptr<const FluxModel> model = loadFluxModel(kFixtures);
        const SafetensorsFile file(kFixtures + "/pipeline_t2i.safetensors");
        FluxConditioning text;
        text.text = file.readFloat32("prompt_embeds");
        text.tokens = 7;
        text.pooled = file.readFloat32("pooled");
        const ImageTensor z{16, 6, 10, file.readFloat32("start")};
        RunConfig config;
        config.model = kFixtures;
        config.width = 80;
        config.height = 48;
        config.tile = 32;
        config.overlapPx = 16;
        config.tileBatch = 3;
        config.steps = 4;
        config.scheduler = SchedulerKind::Euler;
        config.cfgScale = 1.0;
        config.previewEvery = 0;
        config.precision = Precision::FP32;
        config.backend = BackendKind::CPU;
        Quiet quiet;
        CpuBackend backend(4);
        CpuTileDevice cpu(backend);
        TiledLoop cpuLoop;
        cpuLoop.setFluxModel(model);
        cpuLoop.setFluxConditioning(text);
        cpuLoop.setStartNoise(z);
        const RunResult want = cpuLoop.run(config, quiet, cpu, [] { return false; });

        config.backend = BackendKind::CUDA;
        config.graphs = static_cast<GraphMode>(graphs);
        config.lanes = lanes;
        config.graphWarmup = 1;
        CudaTileDevice gpu(0);
        TiledLoop gpuLoop;
        gpuLoop.setFluxModel(model);
        gpuLoop.setFluxConditioning(text);
        gpuLoop.setStartNoise(z);
        const RunResult got = gpuLoop.run(config, quiet, gpu, [] { return false; });
        QCOMPARE(std::string(toString(got.record.status)), std::string("finished"));
        QCOMPARE(got.record.tileCount, want.record.tileCount);
        const QString bad = testing::outputMismatch(want.latents.data, got.latents.data, 1e-4, "latents", true);
        QVERIFY2(bad.isEmpty(), qPrintable(bad));
        for (const std::string& m : got.record.messages) QVERIFY2(m.find("fell back") == std::string::npos, m.c_str());
    }
};

QTEST_APPLESS_MAIN(TestCudaFlux)
#include "tst_cudaflux.moc"
