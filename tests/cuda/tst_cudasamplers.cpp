// Stable Diffusion's stateful and ancestral samplers on the CUDA device against the CPU device,
// on a small random UNet with SD's schedule (diffusers' scaled_linear betas): Euler a (the Philox noise of
// each step drawn on the device) and DPM++ 2M Karras (the x0 canvas: the previous step's blended
// x0 read by the scatter, fusion sample, or by the fuse, fusion noise; none on the first step
// run, text-to-image or image-to-image), in every graph mode, and a DPM++ 2M run replaying no
// step graph captured for a DDIM run of the same shape. Skips where no CUDA device is present.
#include <QtTest/QtTest>

#include <cmath>
#include <memory>
#include <string>

#include "core/cpu/CpuBackend.h"
#include "core/cpu/CpuEngine.h"
#include "core/models/unet/UNetModel.h"
#include "kernels/engine/CudaEngine.h"

using namespace tessera;

namespace {

UNetConfig smallConfig() {
    UNetConfig c;
    c.inChannels = 4;
    c.outChannels = 4;
    c.blockOutChannels = {32, 64};
    c.downBlocks = {DownBlockType::Down, DownBlockType::AttnDown};
    c.upBlocks = {UpBlockType::AttnUp, UpBlockType::Up};
    c.layersPerBlock = 1;
    c.normNumGroups = 8;
    c.attentionHeadDim = 8;
    return c;
}

std::shared_ptr<const UNetModel> sdModel(bool karras) {
    SchedulerOptions o;
    o.betaStart = 0.00085f;
    o.betaEnd = 0.012f;
    o.betaSchedule = BetaSchedule::ScaledLinear;
    o.stepsOffset = 1;
    o.clipSample = false;
    o.setAlphaToOne = false;
    o.karrasSigmas = karras;
    const UNetConfig config = smallConfig();
    return std::make_shared<const UNetModel>(
        UNetModel::fromTensors(config, UNetModel::random(config, 91).tensors(), o));
}

RunConfig runConfig(SchedulerKind scheduler, FusionRule fusion, GraphMode graphs) {
    RunConfig r;
    r.width = 56;
    r.height = 40;
    r.seed = 42;
    r.steps = 6;
    r.scheduler = scheduler;
    r.tile = 32;
    r.overlapPx = 12;
    r.window = BlendWindowKind::Hann;
    r.fusion = fusion;
    r.tileBatch = 2;
    r.precision = Precision::FP32;
    r.graphs = graphs;
    r.previewEvery = 1;
    return r;
}

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

struct Previews : RunObserver {
    std::vector<std::vector<float>> images;
    void onPreview(const PreviewEvent& e) override { images.push_back(e.image.data); }
};

ImageTensor startImage(const RunConfig& c) {
    ImageTensor t{4, c.height, c.width, std::vector<float>(4u * static_cast<std::size_t>(c.width) * c.height)};
    for (std::size_t i = 0; i < t.data.size(); ++i) t.data[i] = 0.8f * std::sin(0.03f * static_cast<float>(i));
    return t;
}

// Runs `cfg` on both engines (`gpu` holds `model` already: setting it again would start a new
// plan); the final images and every preview (x0 canvas, then the canvas) within float32 tolerance.
void compareEngines(const std::shared_ptr<const UNetModel>& model, const RunConfig& cfg, CudaEngine& gpu) {
    CpuEngine cpu(std::make_unique<CpuBackend>(2));
    cpu.setModel(model);
    if (!cfg.initImage.empty()) {
        cpu.setInitImage(startImage(cfg));
        gpu.setInitImage(startImage(cfg));
    }
    Previews cpuSeen, gpuSeen;
    const RunResult ref = cpu.run(cfg, cpuSeen);
    const RunResult got = gpu.run(cfg, gpuSeen);
    const double imageRel = rel(got.image.data, ref.image.data);
    qInfo("%s %s graphs %s%s: image rel %.3e (graph mode run: %s)", std::string(toString(cfg.scheduler)).c_str(),
          std::string(toString(cfg.fusion)).c_str(), std::string(toString(cfg.graphs)).c_str(),
          cfg.initImage.empty() ? "" : " img2img", imageRel, got.record.graphs.mode.c_str());
    QVERIFY2(got.record.graphs.fallbackReason.empty(), got.record.graphs.fallbackReason.c_str());
    QCOMPARE(got.record.stepsRun, ref.record.stepsRun);
    QVERIFY2(imageRel < 1e-4, qPrintable(QString("image differs from the CPU device by %1").arg(imageRel)));
    QCOMPARE(gpuSeen.images.size(), cpuSeen.images.size());
    for (std::size_t k = 0; k < gpuSeen.images.size(); ++k) {
        const double r = rel(gpuSeen.images[k], cpuSeen.images[k]);
        QVERIFY2(r < 1e-4, qPrintable(QString("preview %1 differs by %2").arg(k).arg(r)));
    }
}

}  // namespace

class TestCudaSamplers : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() {
        std::string why;
        if (!cudaDeviceAvailable(&why)) QSKIP(why.c_str());
    }

    void matchesCpuDevice_data() {
        QTest::addColumn<int>("scheduler");
        QTest::addColumn<int>("fusion");
        QTest::addColumn<int>("graphs");
        QTest::addColumn<bool>("fromImage");
        const int sample = int(FusionRule::Sample), noise = int(FusionRule::Noise);
        const int ea = int(SchedulerKind::EulerAncestral), dpm = int(SchedulerKind::DPMPP2M);
        QTest::newRow("euler_a sample") << ea << sample << int(GraphMode::Off) << false;
        QTest::newRow("euler_a noise") << ea << noise << int(GraphMode::Off) << false;
        QTest::newRow("euler_a sample img2img") << ea << sample << int(GraphMode::Off) << true;
        QTest::newRow("dpmpp_2m karras sample") << dpm << sample << int(GraphMode::Off) << false;
        QTest::newRow("dpmpp_2m karras noise") << dpm << noise << int(GraphMode::Off) << false;
        QTest::newRow("dpmpp_2m karras sample img2img") << dpm << sample << int(GraphMode::Off) << true;
        QTest::newRow("dpmpp_2m karras noise img2img") << dpm << noise << int(GraphMode::Off) << true;
        QTest::newRow("dpmpp_2m karras sample step graphs") << dpm << sample << int(GraphMode::Step) << false;
        QTest::newRow("dpmpp_2m karras noise tile graphs") << dpm << noise << int(GraphMode::Tile) << false;
        QTest::newRow("euler_a noise step graphs") << ea << noise << int(GraphMode::Step) << true;
        // DPM++ 2M SDE: DPM++ 2M's previous x0 and a noise draw at every step but the last.
        const int sde = int(SchedulerKind::DPMPP2MSDE);
        QTest::newRow("dpmpp_2m_sde karras sample") << sde << sample << int(GraphMode::Off) << false;
        QTest::newRow("dpmpp_2m_sde karras noise") << sde << noise << int(GraphMode::Off) << false;
        QTest::newRow("dpmpp_2m_sde karras noise img2img") << sde << noise << int(GraphMode::Off) << true;
        QTest::newRow("dpmpp_2m_sde karras sample step graphs") << sde << sample << int(GraphMode::Step) << false;
        QTest::newRow("dpmpp_2m_sde karras noise tile graphs") << sde << noise << int(GraphMode::Tile) << true;
        // LMS: three history canvases in the fuse.
        const int lms = int(SchedulerKind::LMS);
        QTest::newRow("lms karras sample") << lms << sample << int(GraphMode::Off) << false;
        QTest::newRow("lms karras noise") << lms << noise << int(GraphMode::Off) << false;
        QTest::newRow("lms karras sample img2img") << lms << sample << int(GraphMode::Off) << true;
        QTest::newRow("lms karras sample step graphs") << lms << sample << int(GraphMode::Step) << false;
        QTest::newRow("lms karras noise tile graphs") << lms << noise << int(GraphMode::Tile) << true;
        // Two model evaluations a step (2n - 1 loop steps): Heun and DPM2 keep the step's start in
        // the history canvases; DPM++ SDE adds noise at both.
        const int heun = int(SchedulerKind::Heun), dpm2 = int(SchedulerKind::DPM2), psde = int(SchedulerKind::DPMPPSDE);
        QTest::newRow("heun karras sample") << heun << sample << int(GraphMode::Off) << false;
        QTest::newRow("heun karras noise img2img step graphs") << heun << noise << int(GraphMode::Step) << true;
        QTest::newRow("dpm2 karras sample tile graphs") << dpm2 << sample << int(GraphMode::Tile) << false;
        QTest::newRow("dpm2 karras noise img2img") << dpm2 << noise << int(GraphMode::Off) << true;
        QTest::newRow("dpmpp_sde karras sample step graphs") << psde << sample << int(GraphMode::Step) << false;
        QTest::newRow("dpmpp_sde karras noise img2img") << psde << noise << int(GraphMode::Off) << true;
        const int unipc = int(SchedulerKind::UniPC);  // the corrector and predictor through the history canvases
        QTest::newRow("unipc karras sample step graphs") << unipc << sample << int(GraphMode::Step) << false;
        QTest::newRow("unipc karras noise img2img") << unipc << noise << int(GraphMode::Off) << true;
    }
    void matchesCpuDevice() {
        QFETCH(int, scheduler);
        QFETCH(int, fusion);
        QFETCH(int, graphs);
        QFETCH(bool, fromImage);
        RunConfig cfg = runConfig(SchedulerKind(scheduler), FusionRule(fusion), GraphMode(graphs));
        cfg.graphWarmup = 1;
        if (fromImage) {
            cfg.initImage = "in-memory";
            cfg.strength = 0.6;  // begins at step 6 - int(3.6) = 3: second order for DPM++ 2M
        }
        const auto model = sdModel(true);
        CudaEngine gpu;
        gpu.setModel(model);
        compareEngines(model, cfg, gpu);
    }

    // Shifted tiles: each step's tiles over the canvas rolled by the step's offset (the gather, the
    // scatter and the fuse read it from the step state, so captured step and tile graphs serve every
    // shift). With overlap 0 the 56 x 40 canvas still has tiles that overlap (32-pixel tiles at 0 and
    // 24, 0 and 8): the normalizer is read at the plan pixel over each canvas pixel.
    void shiftedTilesMatchCpuDevice_data() {
        QTest::addColumn<int>("scheduler");
        QTest::addColumn<int>("fusion");
        QTest::addColumn<int>("graphs");
        QTest::addColumn<bool>("fromImage");
        QTest::addColumn<int>("overlap");
        const int sample = int(FusionRule::Sample), noise = int(FusionRule::Noise);
        QTest::newRow("euler_a sample") << int(SchedulerKind::EulerAncestral) << sample << int(GraphMode::Off) << false
                                        << 0;
        QTest::newRow("dpmpp_2m karras noise step graphs")
            << int(SchedulerKind::DPMPP2M) << noise << int(GraphMode::Step) << false << 0;
        QTest::newRow("dpmpp_2m karras sample tile graphs overlap 12")
            << int(SchedulerKind::DPMPP2M) << sample << int(GraphMode::Tile) << false << 12;
        QTest::newRow("lms karras noise img2img step graphs")
            << int(SchedulerKind::LMS) << noise << int(GraphMode::Step) << true << 0;
        QTest::newRow("heun karras sample tile graphs")
            << int(SchedulerKind::Heun) << sample << int(GraphMode::Tile) << false << 0;
    }
    void shiftedTilesMatchCpuDevice() {
        QFETCH(int, scheduler);
        QFETCH(int, fusion);
        QFETCH(int, graphs);
        QFETCH(bool, fromImage);
        QFETCH(int, overlap);
        RunConfig cfg = runConfig(SchedulerKind(scheduler), FusionRule(fusion), GraphMode(graphs));
        cfg.graphWarmup = 1;
        cfg.overlapPx = overlap;
        cfg.tileShift = TileShift::Random;
        if (fromImage) {
            cfg.initImage = "in-memory";
            cfg.strength = 0.6;
        }
        const auto model = sdModel(true);
        CudaEngine gpu;
        gpu.setModel(model);
        compareEngines(model, cfg, gpu);
    }

    // Step graphs are cached across runs by shape; a DPM++ 2M run must not replay a DDIM run's
    // graph (which neither blends the noise nor keeps the x0 canvas), nor an LMS run a DPM++ 2M
    // run's (which keeps no history canvases).
    void noStepGraphSharedWithAnotherSampler() {
        CudaEngine gpu;
        RunConfig cfg = runConfig(SchedulerKind::DDIM, FusionRule::Sample, GraphMode::Step);
        cfg.previewEvery = 0;
        cfg.graphWarmup = 0;
        const auto model = sdModel(true);
        gpu.setModel(model);
        RunObserver quiet;
        const RunResult ddim = gpu.run(cfg, quiet);
        QVERIFY(ddim.record.graphs.captures > 0);
        cfg.scheduler = SchedulerKind::DPMPP2M;
        compareEngines(model, cfg, gpu);
        cfg.scheduler = SchedulerKind::LMS;
        compareEngines(model, cfg, gpu);
    }
};

QTEST_GUILESS_MAIN(TestCudaSamplers)
#include "tst_cudasamplers.moc"
