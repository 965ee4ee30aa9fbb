// CudaEngine against the CPU tiled sampler (docs/ENGINE_SEMANTICS.md) on a small random UNet:
// same image and seam map for both fusion rules and noisy schedulers, repeatable runs,
// per-batch/per-step device timings, cancellation; on the fixture model (tests/data/models,
// or $TESSERA_TEST_DATA_DIR/models) a 256x256 tiled DDIM run against the CPU engine
// (PSNR >= 40 dB) and tile batch 1 against 8; a NaN or infinity (a poisoned latent, weights that
// overflow fp16) stops the run naming the step and tile batch, in every graph mode; both engines
// being the one tiled loop (core/sampling/TiledLoop.h), the same events and record structure as the CPU
// engine in every graph mode, and the CUDA device refusing passes it cannot lower (map, guidance).
// Skips where no CUDA device is present.
#include <QtTest/QtTest>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>

#include "core/cpu/CpuBackend.h"
#include "core/cpu/CpuEngine.h"
#include "core/models/unet/UNetModel.h"
#include "core/run/NonFiniteError.h"
#include "core/sampling/BlendWindow.h"
#include "core/sampling/ImageOps.h"
#include "core/sampling/TileDevice.h"
#include "core/sampling/TilePlan.h"
#include "core/sampling/TiledLoop.h"
#include "kernels/backend/CudaBackend.h"
#include "kernels/engine/CudaEngine.h"
#include "kernels/engine/CudaTileDevice.h"
#include "tests/cuda/OutputComparison.h"

using namespace tessera;
using testing::psnr8;

namespace {

UNetConfig smallConfig() {
    UNetConfig c;
    c.blockOutChannels = {32, 64};
    c.downBlocks = {DownBlockType::Down, DownBlockType::AttnDown};
    c.upBlocks = {UpBlockType::AttnUp, UpBlockType::Up};
    c.layersPerBlock = 1;
    c.normNumGroups = 8;
    c.attentionHeadDim = std::nullopt;
    c.downsamplePadding = 0;
    c.freqShift = 1;
    c.flipSinToCos = false;
    return c;
}

RunConfig runConfig(SchedulerKind scheduler, FusionRule fusion, Precision precision) {
    RunConfig r;
    r.width = 56;
    r.height = 40;
    r.seed = 42;
    r.steps = 4;
    r.scheduler = scheduler;
    r.schedulerOptions.eta = 0.5f;  // DDIM adds noise too
    r.tile = 32;
    r.overlapPx = 12;
    r.window = BlendWindowKind::Hann;
    r.fusion = fusion;
    r.tileBatch = 3;
    r.precision = precision;
    r.previewEvery = 1;  // every step: per-step images to compare
    return r;
}

double rel(const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0, den = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const double d = static_cast<double>(a[i]) - b[i];
        num += std::isfinite(d) ? d * d : 1e30;
        den += static_cast<double>(b[i]) * b[i];
    }
    return std::sqrt(num / std::max(den, 1e-30));
}

// Test data: compiled-in path, or $TESSERA_TEST_DATA_DIR (the GPU machine has another tree).
std::string testData() {
    const QByteArray env = qgetenv("TESSERA_TEST_DATA_DIR");
    return env.isEmpty() ? std::string(TESSERA_TEST_DATA) : env.toStdString();
}

// PSNR of two 8-bit RGB images in dB (99 when identical).
RunConfig fixtureRun(int batch) {
    RunConfig r;
    r.width = 256;
    r.height = 256;
    r.seed = 7;
    r.steps = 10;
    r.scheduler = SchedulerKind::DDIM;
    r.tile = 64;
    r.overlapPx = 16;
    r.window = BlendWindowKind::Hann;
    r.fusion = FusionRule::Sample;
    r.tileBatch = batch;
    r.precision = Precision::FP16;
    r.previewEvery = 0;
    return r;
}

struct Counting : RunObserver {
    int batches = 0, steps = 0, previews = 0;
    std::vector<std::vector<float>> images;
    double gpuMs = 0;
    Engine* cancelAfterFirstStep = nullptr;
    void onTileBatch(const TileBatchEvent& e) override {
        ++batches;
        gpuMs += e.timing.gpuMs;
    }
    void onStep(const StepEvent&) override {
        ++steps;
        if (cancelAfterFirstStep) cancelAfterFirstStep->requestCancel();
    }
    void onPreview(const PreviewEvent& e) override {
        ++previews;
        images.push_back(e.image.data);
    }
};

}  // namespace

class TestCudaEngine : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() {
        std::string why;
        if (!cudaDeviceAvailable(&why)) QSKIP(why.c_str());
    }

    void matchesCpuSampler_data() {
        QTest::addColumn<int>("scheduler");
        QTest::addColumn<int>("fusion");
        QTest::addColumn<int>("precision");
        QTest::newRow("ddim sample fp32") << int(SchedulerKind::DDIM) << int(FusionRule::Sample) << 0;
        QTest::newRow("ddpm noise fp32") << int(SchedulerKind::DDPM) << int(FusionRule::Noise) << 0;
        QTest::newRow("euler sample fp32") << int(SchedulerKind::Euler) << int(FusionRule::Sample) << 0;
        QTest::newRow("ddim sample fp16") << int(SchedulerKind::DDIM) << int(FusionRule::Sample) << 1;
    }

    void matchesCpuSampler() {
        QFETCH(int, scheduler);
        QFETCH(int, fusion);
        QFETCH(int, precision);
        auto model = std::make_shared<const UNetModel>(UNetModel::random(smallConfig(), 77));
        const RunConfig cfg = runConfig(static_cast<SchedulerKind>(scheduler), static_cast<FusionRule>(fusion),
                                        static_cast<Precision>(precision));
        CpuEngine cpu(std::make_unique<CpuBackend>(2));
        cpu.setModel(model);
        Counting cpuSeen;
        const RunResult ref = cpu.run(cfg, cpuSeen);

        CudaEngine gpu;
        gpu.setModel(model);
        Counting seen;
        const RunResult got = gpu.run(cfg, seen);
        const double imageRel = rel(got.image.data, ref.image.data);
        const double seamRel = rel(got.seamMap.data, ref.seamMap.data);
        qInfo("image rel %.3e, seam map rel %.3e, %d tiles, gpu %.3f ms over %d batches", imageRel, seamRel,
              got.record.tileCount, seen.gpuMs, seen.batches);
        const double tol = precision == 0 ? 1e-4 : 2e-2;
        for (std::size_t k = 0; k < seen.images.size() && k < cpuSeen.images.size(); ++k)
            qInfo("  step %zu: preview rel %.3e", k, rel(seen.images[k], cpuSeen.images[k]));
        QVERIFY2(imageRel < tol, qPrintable(QString("image differs from the CPU sampler by %1").arg(imageRel)));
        QVERIFY2(seamRel < 20 * tol, qPrintable(QString("seam map differs by %1").arg(seamRel)));
        QCOMPARE(std::string(toString(got.record.status)), std::string("finished"));
        QCOMPARE(got.record.stepsRun, cfg.steps);
        const int batches = (got.record.tileCount + cfg.tileBatch - 1) / cfg.tileBatch;
        QCOMPARE(seen.batches, cfg.steps * batches);
        QCOMPARE(static_cast<int>(got.record.batches.size()), cfg.steps * batches);
        QVERIFY(seen.gpuMs > 0);
        for (const StepTiming& s : got.record.steps) QVERIFY(s.gpuMs > 0);
        QCOMPARE(seen.previews, cfg.steps);  // x0 previews, then the final canvas
        QVERIFY(got.record.memoryPlan.totalMiB > 0);
        QVERIFY(got.record.peakDeviceMiB > 0);
    }

    void repeatable() {
        auto model = std::make_shared<const UNetModel>(UNetModel::random(smallConfig(), 5));
        const RunConfig cfg = runConfig(SchedulerKind::DDPM, FusionRule::Sample, Precision::FP16);
        CudaEngine gpu;
        gpu.setModel(model);
        RunObserver quiet;
        const RunResult a = gpu.run(cfg, quiet);
        const RunResult b = gpu.run(cfg, quiet);
        QCOMPARE(a.record.imageSha256, b.record.imageSha256);
        QVERIFY(a.image.data == b.image.data);
    }

    void tileGraphsMatchEager() {
        auto model = std::make_shared<const UNetModel>(UNetModel::random(smallConfig(), 8));
        RunConfig cfg = runConfig(SchedulerKind::DDIM, FusionRule::Sample, Precision::FP16);
        CudaEngine gpu;
        gpu.setModel(model);
        RunObserver quiet;
        const RunResult eager = gpu.run(cfg, quiet);
        cfg.graphs = GraphMode::Tile;
        const RunResult graphed = gpu.run(cfg, quiet);
        const GraphStats& g = graphed.record.graphs;
        qInfo("tile graphs: mode %s captures %d hits %d nodes %d %s", g.mode.c_str(), g.captures, g.hits, g.nodes,
              g.fallbackReason.c_str());
        QVERIFY2(g.fallbackReason.empty(), g.fallbackReason.c_str());
        QCOMPARE(g.mode, std::string("tile"));
        QVERIFY(g.hits > 0);
        QVERIFY2(eager.image.data == graphed.image.data, "tile graphs changed the image");
    }

    // A 256x256 tiled DDIM sampling on the GPU (fp16, 25 tiles of 64, batch 4)
    // against the float32 CPU engine on a fixture model.
    void psnr256AgainstCpuEngine() {
        auto model = std::make_shared<const UNetModel>(UNetModel::load(testData() + "/models/cifar_like"));
        const RunConfig cfg = fixtureRun(4);
        CpuEngine cpu(std::make_unique<CpuBackend>(std::max(2, QThread::idealThreadCount())));
        cpu.setModel(model);
        RunObserver quiet;
        const RunResult ref = cpu.run(cfg, quiet);
        CudaEngine gpu;
        gpu.setModel(model);
        const RunResult got = gpu.run(cfg, quiet);
        const double db = psnr8(got.image, ref.image);
        qInfo("256x256 DDIM, %d tiles, fp16 GPU vs fp32 CPU: PSNR %.2f dB, rel %.3e", got.record.tileCount, db,
              rel(got.image.data, ref.image.data));
        QCOMPARE(got.record.tileCount, 25);
        QVERIFY2(db >= 40.0, qPrintable(QString("PSNR %1 dB against the CPU engine is below 40 dB").arg(db)));
    }

    // Tile batch 1 and 8 compute the same tiles in the same order; only cuDNN's algorithm
    // choice per batch size differs, so the images agree within fp16 rounding: no further
    // apart than either is from the float32 run (measured on an H100: rel 1.3e-2 between
    // the two over 10 steps, as far as fp16 is from fp32; PSNR 47 dB).
    void tileBatchOneAgreesWithEight() {
        auto model = std::make_shared<const UNetModel>(UNetModel::load(testData() + "/models/cifar_like"));
        CudaEngine gpu;
        gpu.setModel(model);
        RunObserver quiet;
        const RunResult one = gpu.run(fixtureRun(1), quiet);
        const RunResult eight = gpu.run(fixtureRun(8), quiet);
        RunConfig fp32 = fixtureRun(8);
        fp32.precision = Precision::FP32;
        CudaEngine exact;
        exact.setModel(model);
        const RunResult ref = exact.run(fp32, quiet);
        double maxAbs = 0;
        for (std::size_t i = 0; i < one.image.data.size(); ++i)
            maxAbs = std::max(maxAbs, std::abs(static_cast<double>(one.image.data[i]) - eight.image.data[i]));
        const double r = rel(one.image.data, eight.image.data), db = psnr8(one.image, eight.image);
        const double fp16Error = std::max(rel(one.image.data, ref.image.data), rel(eight.image.data, ref.image.data));
        qInfo("tile batch 1 vs 8: rel %.3e, max |diff| %.3e, PSNR %.2f dB; fp16 vs fp32: rel %.3e", r, maxAbs, db,
              fp16Error);
        QVERIFY2(
            r <= 2.0 * fp16Error,
            qPrintable(
                QString("batch 1 and 8 differ by rel %1, more than twice fp16's own error %2").arg(r).arg(fp16Error)));
        QVERIFY2(r < 2e-2, qPrintable(QString("batch 1 and 8 differ by rel %1").arg(r)));
        QVERIFY2(db >= 45.0, qPrintable(QString("batch 1 vs 8: PSNR %1 dB").arg(db)));
    }

    // The auto tile batch (0) puts the fixture's 25 tiles in one call where they fit. Where they do
    // not (most of the GPU's memory taken by another allocation), it comes down to what fits, the
    // tiles again spread evenly, says so in the record, and the next run of that shape starts
    // there; an asked-for batch that does not fit is refused naming the tile batch and what fits.
    void autoTileBatchComesDownToWhatFits() {
        auto model = std::make_shared<const UNetModel>(UNetModel::load(testData() + "/models/cifar_like"));
        RunObserver quiet;
        RunConfig cfg = fixtureRun(0);
        cfg.width = cfg.height = 1024;  // 25 tiles of 256: activations of hundreds of MiB, far above the slack
        cfg.tile = 256;
        cfg.overlapPx = 32;
        cfg.steps = 2;
        cfg.lanes = 1;
        double totalAt25 = 0, activationsAt25 = 0, workspaceAt25 = 0;
        {
            CudaEngine gpu;
            gpu.setModel(model);
            const RunResult all = gpu.run(cfg, quiet);
            QCOMPARE(std::string(toString(all.record.status)), std::string("finished"));
            QCOMPARE(all.record.config.tileBatch, 25);
            const auto& m = all.record.messages;
            QVERIFY(std::find(m.begin(), m.end(), "batch: auto, 25 tiles per UNet call (25 tiles in one call)") !=
                    m.end());
            QCOMPARE(all.record.batches.size(), std::size_t(cfg.steps));
            totalAt25 = all.record.memoryPlan.totalMiB;  // weights, activations, workspace, canvas
            activationsAt25 = all.record.memoryPlan.activationsMiB;
            workspaceAt25 = all.record.memoryPlan.workspaceMiB;
            qInfo("batch 25: plan %.1f MiB, activations %.1f MiB, workspace %.1f MiB", totalAt25, activationsAt25,
                  workspaceAt25);
            QVERIFY2(activationsAt25 > 400, "the test needs activations far above its slack");
        }
        // Leave free the plan at 25 less 60 % of its activations and all of its convolution
        // workspace (which may shrink when memory is short), with 32 MiB for cuBLAS and 64 for
        // the handles and events: a batch near 10 fits, 25 does not.
        std::size_t freeBytes = 0, total = 0;
        QCOMPARE(cudaMemGetInfo(&freeBytes, &total), cudaSuccess);
        const double leaveMiB = totalAt25 - 0.6 * activationsAt25 - workspaceAt25 + 32 + 64;
        const std::size_t hogBytes = freeBytes - static_cast<std::size_t>(leaveMiB * 1024 * 1024);
        void* hog = nullptr;
        QCOMPARE(cudaMalloc(&hog, hogBytes), cudaSuccess);
        const auto freeHog = qScopeGuard([&] { cudaFree(hog); });
        auto gpu = std::make_unique<CudaEngine>();
        gpu->setModel(model);
        const RunResult lowered = gpu->run(cfg, quiet);
        QCOMPARE(std::string(toString(lowered.record.status)), std::string("finished"));
        const int batch = lowered.record.config.tileBatch;
        qInfo("auto under pressure: batch %d", batch);
        for (const std::string& m : lowered.record.messages) qInfo("  %s", m.c_str());
        QVERIFY2(batch >= 1 && batch < 25, qPrintable(QString::number(batch)));
        QCOMPARE(batch, autoTileBatch(25, batch));  // spread evenly
        const auto& m = lowered.record.messages;
        const auto has = [&](const std::vector<std::string>& ms, const std::string& prefix) {
            return std::any_of(ms.begin(), ms.end(), [&](const std::string& x) { return x.rfind(prefix, 0) == 0; });
        };
        QVERIFY(has(m, "batch: 25 tiles per call do not fit (not enough GPU memory for tile batch 25 of 256x256"));
        const int calls = (25 + batch - 1) / batch;
        QVERIFY(std::find(m.begin(), m.end(),
                          "batch: auto, " + std::to_string(batch) + " tiles per UNet call (25 tiles in " +
                              std::to_string(calls) + " calls; fewer than the 25 asked for, to fit the device)") !=
                m.end());
        QCOMPARE(lowered.record.batches.size(), std::size_t(cfg.steps * calls));
        // The next run of the shape starts at what fitted: no failed try.
        const RunResult again = gpu->run(cfg, quiet);
        QCOMPARE(again.record.config.tileBatch, batch);
        QVERIFY(!has(again.record.messages, "batch: 25 tiles per call do not fit"));
        QCOMPARE(again.record.imageSha256, lowered.record.imageSha256);
        // Asked for, 25 is the user's: refused with what fits. The engine above gives its plan
        // back first, so that the other meets the same pressure (not the first one's plan too).
        gpu.reset();
        RunConfig asked = cfg;
        asked.tileBatch = 25;
        CudaEngine other;
        other.setModel(model);
        try {
            const RunResult r = other.run(asked, quiet);
            QVERIFY2(r.record.status == RunStatus::Failed, "an asked-for batch that does not fit ran");
            QVERIFY2(r.record.error.find("not enough GPU memory for tile batch 25 of 256x256") != std::string::npos,
                     r.record.error.c_str());
        } catch (const std::exception& e) {
            QVERIFY2(
                std::string(e.what()).find("not enough GPU memory for tile batch 25 of 256x256") != std::string::npos,
                e.what());
            QVERIFY2(std::string(e.what()).find("the largest tile batch that fits is about") != std::string::npos,
                     e.what());
        }
    }

    // Non-finite values on the GPU, in every graph mode (lanes auto: several lanes here): a NaN
    // in one pixel of the start image (a poisoned latent) stops the run at the first step it runs,
    // in the tile batch holding the first tile that covers the pixel. The poisoned run follows a
    // clean one that captured the graphs, so the flag is written by replayed graphs too; a clean
    // run afterwards finishes with the first clean run's bits (the flag is reset per run).
    void poisonedLatentStopsTheRun_data() {
        QTest::addColumn<int>("graphs");
        QTest::newRow("graphs off") << int(GraphMode::Off);
        QTest::newRow("graphs tile") << int(GraphMode::Tile);
        QTest::newRow("graphs step") << int(GraphMode::Step);
    }

    void poisonedLatentStopsTheRun() {
        QFETCH(int, graphs);
        auto model = std::make_shared<const UNetModel>(UNetModel::random(smallConfig(), 11));
        RunConfig cfg = runConfig(SchedulerKind::DDIM, FusionRule::Sample, Precision::FP16);
        cfg.graphs = static_cast<GraphMode>(graphs);
        cfg.graphWarmup = 0;
        cfg.previewEvery = 0;
        cfg.initImage = "in-memory";
        cfg.strength = 0.5;  // starts at step index 4 - int(4 * 0.5) = 2
        const ImageTensor clean{3, cfg.height, cfg.width, std::vector<float>(3 * cfg.height * cfg.width, 0.25f)};
        ImageTensor poisoned = clean;
        const int y = cfg.height - 1, x = cfg.width - 1;
        poisoned.data[(static_cast<std::size_t>(1) * cfg.height + y) * cfg.width + x] = std::nanf("");
        const TilePlan plan = TilePlan::fromConfig(cfg);
        int tile = plan.count();
        for (const TileRect& r : plan.tiles())
            if (y >= r.y && y < r.y + plan.tileH() && x >= r.x && x < r.x + plan.tileW()) tile = std::min(tile, r.id);
        QVERIFY(tile < plan.count());
        const int batches = (plan.count() + cfg.tileBatch - 1) / cfg.tileBatch, j = tile / cfg.tileBatch;

        CudaEngine gpu;
        gpu.setModel(model);
        RunObserver quiet;
        gpu.setInitImage(clean);
        const RunResult before = gpu.run(cfg, quiet);
        QCOMPARE(std::string(toString(before.record.status)), std::string("finished"));
        gpu.setInitImage(poisoned);
        try {
            gpu.run(cfg, quiet);
            QFAIL("a run with a NaN in its latents finished");
        } catch (const NonFiniteError& e) {
            const QString want =
                QString("in the UNet output at step 3/4 (timestep 250), tile batch %1/%2 (").arg(j + 1).arg(batches);
            qInfo("%s", e.what());
            QVERIFY2(QString::fromUtf8(e.what()).contains(want), qPrintable(QString(e.what()) + "\nwanted: " + want));
            QVERIFY2(QString::fromUtf8(e.what()).contains("fp16"), e.what());
            QCOMPARE(e.site().step, 2);
            QCOMPARE(e.site().batch, j);
            QCOMPARE(std::string(toString(e.record().status)), std::string("failed"));
            QCOMPARE(e.record().error, std::string(e.what()));
        }
        gpu.setInitImage(clean);
        const RunResult after = gpu.run(cfg, quiet);
        QCOMPARE(std::string(toString(after.record.status)), std::string("finished"));
        QVERIFY2(after.image.data == before.image.data, "the run after the failed one differs from the one before it");
    }

    // Weights that overflow fp16 but not float32 (conv_out x 1e8): in fp16 the first tile batch of
    // the first step stops the run and the message suggests bf16 or fp32; both then run the same
    // model to the end. Every graph mode.
    void fp16OverflowSuggestsWiderPrecision_data() { poisonedLatentStopsTheRun_data(); }

    void fp16OverflowSuggestsWiderPrecision() {
        QFETCH(int, graphs);
        std::map<std::string, HostTensor> tensors = UNetModel::random(smallConfig(), 12).tensors();
        for (float& v : tensors.at("conv_out.weight").data) v *= 1e8f;
        auto model = std::make_shared<const UNetModel>(UNetModel::fromTensors(smallConfig(), std::move(tensors)));
        RunConfig cfg = runConfig(SchedulerKind::DDIM, FusionRule::Sample, Precision::FP16);
        cfg.graphs = static_cast<GraphMode>(graphs);
        cfg.graphWarmup = 0;
        cfg.previewEvery = 0;
        CudaEngine gpu;
        gpu.setModel(model);
        RunObserver quiet;
        try {
            gpu.run(cfg, quiet);
            QFAIL("an fp16 run whose UNet output overflowed finished");
        } catch (const NonFiniteError& e) {
            qInfo("%s", e.what());
            QVERIFY2(
                QString::fromUtf8(e.what()).contains("in the UNet output at step 1/4 (timestep 750), tile batch 1/"),
                e.what());
            QVERIFY2(QString::fromUtf8(e.what()).contains("fp16, which overflows above 65504: run again with precision "
                                                          "bf16 or fp32"),
                     e.what());
            QCOMPARE(std::string(toString(e.record().status)), std::string("failed"));
            QCOMPARE(e.record().stepsRun, 0);
        }
        for (const Precision wider : {Precision::BF16, Precision::FP32}) {
            cfg.precision = wider;
            const RunResult r = gpu.run(cfg, quiet);
            QCOMPARE(std::string(toString(r.record.status)), std::string("finished"));
            for (const float v : r.image.data) QVERIFY(std::isfinite(v));
        }
    }

    // One loop, two devices: the CPU and CUDA engines report the same steps, tile batches (ids in
    // order), previews and memory samples and fill the same record fields, whatever the graph mode
    // (step graphs replay the loop's body without running it on the host); the CUDA engine adds
    // device timings, graph statistics and lanes.
    void sameLoopEventsAsCpuEngine_data() { poisonedLatentStopsTheRun_data(); }

    void sameLoopEventsAsCpuEngine() {
        QFETCH(int, graphs);
        struct Events : RunObserver {
            std::vector<int> stepOrder, tileOrder, previewSteps;
            int memory = 0, started = 0;
            void onStarted(const RunRecord&) override { ++started; }
            void onStep(const StepEvent& e) override { stepOrder.push_back(e.step); }
            void onTileBatch(const TileBatchEvent& e) override {
                tileOrder.insert(tileOrder.end(), e.tileIds.begin(), e.tileIds.end());
            }
            void onPreview(const PreviewEvent& e) override { previewSteps.push_back(e.step); }
            void onMemory(const MemorySample&) override { ++memory; }
        };
        auto model = std::make_shared<const UNetModel>(UNetModel::random(smallConfig(), 31));
        RunConfig cfg = runConfig(SchedulerKind::DDPM, FusionRule::Noise, Precision::FP32);
        cfg.steps = 5;
        cfg.previewEvery = 2;
        cfg.graphs = static_cast<GraphMode>(graphs);
        cfg.graphWarmup = 1;
        CpuEngine cpu(std::make_unique<CpuBackend>(2));
        cpu.setModel(model);
        Events cpuSeen, gpuSeen;
        const RunResult ref = cpu.run(cfg, cpuSeen);
        CudaEngine gpu;
        gpu.setModel(model);
        const RunResult got = gpu.run(cfg, gpuSeen);
        QCOMPARE(gpuSeen.started, 1);
        QCOMPARE(gpuSeen.stepOrder, cpuSeen.stepOrder);
        QCOMPARE(gpuSeen.tileOrder, cpuSeen.tileOrder);
        QCOMPARE(gpuSeen.previewSteps, (std::vector<int>{1, 3, 4}));
        QCOMPARE(gpuSeen.previewSteps, cpuSeen.previewSteps);
        QCOMPARE(gpuSeen.memory, cpuSeen.memory);
        QCOMPARE(got.record.stepsRun, ref.record.stepsRun);
        QCOMPARE(got.record.timesteps, ref.record.timesteps);
        QCOMPARE(got.record.batches.size(), ref.record.batches.size());
        for (std::size_t i = 0; i < ref.record.batches.size(); ++i) {
            QCOMPARE(got.record.batches[i].step, ref.record.batches[i].step);
            QCOMPARE(got.record.batches[i].batchIndex, ref.record.batches[i].batchIndex);
            QCOMPARE(got.record.batches[i].timestep, ref.record.batches[i].timestep);
            QVERIFY(got.record.batches[i].gpuMs > 0);
        }
        QCOMPARE(got.record.config.overlapPx, ref.record.config.overlapPx);
        QCOMPARE(got.record.tileCount, ref.record.tileCount);
        QCOMPARE(got.record.environment.backend, std::string("cuda"));
        QCOMPARE(got.record.graphs.mode, std::string(toString(cfg.graphs)));
        QCOMPARE(got.seamMap.data.size(), ref.seamMap.data.size());
        // The numbers themselves: matchesCpuSampler (1e-4 there, over 4 steps).
        QVERIFY2(rel(got.image.data, ref.image.data) < 1e-3, "fp32 GPU image differs from the CPU engine's");
    }

    // The CUDA device's tile function is the UNet over the latents: a map pass (another canvas
    // size or channel count) or a guided pass is refused before any work, saying why.
    void refusesPassesItCannotLower() {
        CudaTileDevice device(0);
        const ImageTensor input{3, 32, 32, std::vector<float>(3 * 32 * 32, 0.5f)};
        MapSpec spec;
        spec.tile = 16;
        spec.overlap = 4;
        spec.upscale = 2;
        spec.outChannels = 3;
        RunObserver quiet;
        try {
            (void)TiledLoop::map(device, input, spec, quiet, [] { return false; });
            QFAIL("the CUDA device accepted a map pass");
        } catch (const std::invalid_argument& e) {
            QVERIFY2(QString::fromUtf8(e.what()).contains("map passes"), e.what());
        }
        const TilePlan plan = TilePlan::make(32, 32, 16, 4);
        const BlendWeights weights(plan, BlendWindowKind::Hann, 4);
        TiledPass pass;
        pass.inChannels = pass.outChannels = 3;
        pass.height = pass.width = pass.outHeight = pass.outWidth = 32;
        pass.plan = pass.outPlan = &plan;
        pass.weights = &weights;
        pass.guidance = Guidance{7.5f};
        RunRecord record;
        try {
            device.beginRun(pass, record, [](const std::string&) {});
            QFAIL("the CUDA device accepted a guided pass");
        } catch (const std::invalid_argument& e) {
            QVERIFY2(QString::fromUtf8(e.what()).contains("guidance"), e.what());
        }
    }

    void cancels() {
        auto model = std::make_shared<const UNetModel>(UNetModel::random(smallConfig(), 5));
        RunConfig cfg = runConfig(SchedulerKind::DDIM, FusionRule::Sample, Precision::FP16);
        CudaEngine gpu;
        gpu.setModel(model);
        Counting seen;
        seen.cancelAfterFirstStep = &gpu;
        const RunResult r = gpu.run(cfg, seen);
        QCOMPARE(std::string(toString(r.record.status)), std::string("cancelled"));
        QCOMPARE(r.record.stepsRun, 1);
        QCOMPARE(static_cast<int>(r.image.data.size()), 3 * cfg.width * cfg.height);
        gpu.resetCancel();
    }
};

QTEST_GUILESS_MAIN(TestCudaEngine)
#include "tst_cudaengine.moc"
