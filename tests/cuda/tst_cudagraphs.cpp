// CUDA graphs in the CudaEngine: off / tile / step give bit-identical images,
// previews and seam maps; step graphs time every tile batch (event-record nodes); cached
// graphs are replayed across runs; the LRU graph cache keeps device memory flat over 200
// renders switching among 20 configurations with evictions as counted by hand; a capture
// that cannot succeed (TESSERA_CUDA_SYNC=op synchronises inside the forward) falls back to
// graphs off and says why. Skips where no CUDA device is present.
#include <QtTest/QtTest>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/models/unet/UNetModel.h"
#include "kernels/backend/CudaBackend.h"
#include "kernels/engine/CudaEngine.h"

using namespace tessera;

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

std::string testData() {
    const QByteArray env = qgetenv("TESSERA_TEST_DATA_DIR");
    return env.isEmpty() ? std::string(TESSERA_TEST_DATA) : env.toStdString();
}

// 96x64, tile 32, overlap 8: 4 x 3 = 12 tiles in batches of 5, 5, 2 (two forward shapes).
// Five steps with previews every second step: normal (0, 2), preview (1, 3), last (4).
RunConfig identityConfig(SchedulerKind scheduler, FusionRule fusion, GraphMode graphs) {
    RunConfig r;
    r.width = 96;
    r.height = 64;
    r.seed = 1234;
    r.steps = 5;
    r.scheduler = scheduler;
    r.schedulerOptions.eta = 0.5f;
    r.tile = 32;
    r.overlapPx = 8;
    r.window = BlendWindowKind::Hann;
    r.fusion = fusion;
    r.tileBatch = 5;
    r.precision = Precision::FP16;
    r.previewEvery = 2;
    r.graphs = graphs;
    r.graphWarmup = 1;
    r.lanes = 1;  // one tile batch in flight: the counts below are per lane (lanesAreBitIdentical: more)
    return r;
}

struct Seen : RunObserver {
    std::vector<std::vector<float>> previews;
    std::vector<TileBatchEvent> batches;
    std::vector<std::string> messages;
    void onPreview(const PreviewEvent& e) override { previews.push_back(e.image.data); }
    void onTileBatch(const TileBatchEvent& e) override { batches.push_back(e); }
    void onMessage(const std::string& m) override { messages.push_back(m); }
};

std::string describe(const GraphStats& g) {
    return "mode " + g.mode + ", captures " + std::to_string(g.captures) + ", hits " + std::to_string(g.hits) +
           ", misses " + std::to_string(g.misses) + ", evictions " + std::to_string(g.evictions) + ", updates " +
           std::to_string(g.updates) + ", instantiations " + std::to_string(g.instantiations) + ", nodes " +
           std::to_string(g.nodes) + ", entries " + std::to_string(g.cacheEntries) + ", fallback '" + g.fallbackReason +
           "'";
}

}  // namespace

class TestCudaGraphs : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() {
        std::string why;
        if (!cudaDeviceAvailable(&why)) QSKIP(why.c_str());
    }

    void modesAreBitIdentical_data() {
        QTest::addColumn<int>("scheduler");
        QTest::addColumn<int>("fusion");
        QTest::newRow("ddim sample") << int(SchedulerKind::DDIM) << int(FusionRule::Sample);
        QTest::newRow("ddpm noise") << int(SchedulerKind::DDPM) << int(FusionRule::Noise);
    }

    void modesAreBitIdentical() {
        QFETCH(int, scheduler);
        QFETCH(int, fusion);
        auto model = std::make_shared<const UNetModel>(UNetModel::random(smallConfig(), 21));
        CudaEngine gpu;
        gpu.setModel(model);
        const auto kind = static_cast<SchedulerKind>(scheduler);
        const auto rule = static_cast<FusionRule>(fusion);

        Seen offSeen, tileSeen, stepSeen, replaySeen;
        const RunResult off = gpu.run(identityConfig(kind, rule, GraphMode::Off), offSeen);
        const RunResult tile = gpu.run(identityConfig(kind, rule, GraphMode::Tile), tileSeen);
        const RunResult step = gpu.run(identityConfig(kind, rule, GraphMode::Step), stepSeen);
        const RunResult replay = gpu.run(identityConfig(kind, rule, GraphMode::Step), replaySeen);
        qInfo("tile: %s", describe(tile.record.graphs).c_str());
        qInfo("step: %s", describe(step.record.graphs).c_str());
        qInfo("step again: %s", describe(replay.record.graphs).c_str());
        for (const GraphEntryStats& e : step.record.graphs.used)
            qInfo("  %s: %d nodes, capture %.2f ms, instantiate %.2f ms, update %.2f ms, %.2f MiB", e.name.c_str(),
                  e.nodes, e.captureMs, e.instantiateMs, e.updateMs, e.deviceMiB);
        for (const StepTiming& t : step.record.steps)
            qInfo("  step %d: %s, gpu %.3f ms, host enqueue %.3f ms", t.step, t.graph.c_str(), t.gpuMs,
                  t.hostEnqueueMs);

        QCOMPARE(off.record.tileCount, 12);
        QCOMPARE(static_cast<int>(off.record.batches.size()), 5 * 3);
        QCOMPARE(off.record.graphs.mode, std::string("off"));
        QCOMPARE(tile.record.graphs.mode, std::string("tile"));
        QCOMPARE(step.record.graphs.mode, std::string("step"));
        QVERIFY2(tile.record.graphs.fallbackReason.empty(), tile.record.graphs.fallbackReason.c_str());
        QVERIFY2(step.record.graphs.fallbackReason.empty(), step.record.graphs.fallbackReason.c_str());

        // Same kernels, same arguments, same order: equal bits, not merely close values.
        QVERIFY2(off.image.data == tile.image.data, "tile graphs changed the image");
        QVERIFY2(off.image.data == step.image.data, "step graphs changed the image");
        QVERIFY2(off.image.data == replay.image.data, "replayed step graphs changed the image");
        QVERIFY2(off.seamMap.data == step.seamMap.data, "step graphs changed the seam map (last-step variant)");
        QVERIFY2(off.seamMap.data == tile.seamMap.data, "tile graphs changed the seam map");
        QCOMPARE(off.record.imageSha256, step.record.imageSha256);
        QCOMPARE(offSeen.previews.size(), std::size_t(3));  // steps 1 and 3, then the final canvas
        QVERIFY2(offSeen.previews == stepSeen.previews, "step graphs changed a preview (preview variant)");
        QVERIFY2(offSeen.previews == tileSeen.previews, "tile graphs changed a preview");

        // Tile mode: step 0 is the warm-up; step 1 captures the x5 and x2 forwards (looked up
        // once per step each), steps 2-4 replay them: x5 twice a step, x2 once.
        const GraphStats& tg = tile.record.graphs;
        QCOMPARE(tg.captures, 2);
        QCOMPARE(tg.hits, 3 * 2);
        QCOMPARE(static_cast<int>(tg.used.size()), 2);
        QCOMPARE(tg.used[0].launches + tg.used[1].launches, 4 * 3);
        QCOMPARE(tile.record.steps[0].graph, std::string("eager"));
        QCOMPARE(tile.record.steps[1].graph, std::string("capture"));
        QCOMPARE(tile.record.steps[2].graph, std::string("replay"));

        // Step mode: warm-up step 0, then preview (1), normal (2), replay (3), last (4).
        const GraphStats& sg = step.record.graphs;
        QCOMPARE(sg.captures, 3);
        QCOMPARE(sg.misses, 3);
        QCOMPARE(sg.hits, 1);
        QCOMPARE(sg.instantiations + sg.updates, 3);
        QCOMPARE(static_cast<int>(sg.used.size()), 3);
        QVERIFY(sg.nodes > 3 * 2 + 1);  // at least gather + scatter per batch and the fuse
        const std::vector<std::string> kinds{"eager", "capture", "capture", "replay", "capture"};
        for (int k = 0; k < 5; ++k) {
            QCOMPARE(step.record.steps[static_cast<std::size_t>(k)].graph, kinds[static_cast<std::size_t>(k)]);
            QCOMPARE(step.record.steps[static_cast<std::size_t>(k)].captured,
                     kinds[static_cast<std::size_t>(k)] == "capture");
        }
        for (const GraphEntryStats& e : sg.used) {
            QVERIFY2(e.nodes > 0 && e.captureMs > 0, e.name.c_str());
            QVERIFY2(e.captured, e.name.c_str());
        }
        // Every tile batch of every step has a device time, replayed steps included
        // (event-record nodes inside the step graph).
        QCOMPARE(stepSeen.batches.size(), std::size_t(5 * 3));
        for (const TileBatchTiming& b : step.record.batches)
            QVERIFY2(b.gpuMs > 0,
                     qPrintable(QString("step %1 batch %2: gpuMs %3").arg(b.step).arg(b.batchIndex).arg(b.gpuMs)));
        for (const StepTiming& t : step.record.steps) QVERIFY(t.gpuMs > 0);

        // The same run again: every graph is cached, no warm-up, nothing captured.
        const GraphStats& rg = replay.record.graphs;
        QCOMPARE(rg.misses, 0);
        QCOMPARE(rg.captures, 0);
        QCOMPARE(rg.hits, 5);
        for (const StepTiming& t : replay.record.steps) QCOMPARE(t.graph, std::string("replay"));
        for (const TileBatchTiming& b : replay.record.batches) QVERIFY(b.gpuMs > 0);
    }

    // Lanes: batches gathered and evaluated on 2 or 3 streams with their own buffers, scattered
    // in batch order on one: the same bits as one lane, in every graph mode, previews and seam
    // map included; the record says how many lanes ran. Tile mode keeps one forward graph per
    // (batch size, lane), step mode one forked graph per variant.
    void lanesAreBitIdentical() {
        auto model = std::make_shared<const UNetModel>(UNetModel::random(smallConfig(), 24));
        CudaEngine gpu;
        gpu.setModel(model);
        // Plan with 3 lanes first: the runs below (at most 3 lanes) then share its algorithm
        // choices, which a re-plan could make differently (they are benchmarked).
        RunConfig three = identityConfig(SchedulerKind::DDIM, FusionRule::Sample, GraphMode::Off);
        three.lanes = 3;
        RunObserver quiet;
        const RunResult planned = gpu.run(three, quiet);
        QCOMPARE(planned.record.graphs.lanes, 3);
        Seen refSeen;
        const RunResult ref = gpu.run(identityConfig(SchedulerKind::DDIM, FusionRule::Sample, GraphMode::Off), refSeen);
        QCOMPARE(ref.record.graphs.lanes, 1);
        QCOMPARE(gpu.backend()->lanes(), 3);  // the 3-lane plan served the 1-lane run
        for (int lanes : {2, 3, 0}) {
            for (GraphMode mode : {GraphMode::Off, GraphMode::Tile, GraphMode::Step}) {
                RunConfig cfg = identityConfig(SchedulerKind::DDIM, FusionRule::Sample, mode);
                cfg.lanes = lanes;
                Seen seen;
                const RunResult r = gpu.run(cfg, seen);
                const GraphStats& g = r.record.graphs;
                const std::string what = "lanes " + std::to_string(lanes) + ", graphs " + std::string(toString(mode));
                qInfo("%s: %s, lanes used %d, step GPU %.3f ms", what.c_str(), describe(g).c_str(), g.lanes,
                      r.record.steps.back().gpuMs);
                QVERIFY2(g.fallbackReason.empty(), (what + ": " + g.fallbackReason).c_str());
                QCOMPARE(g.mode, std::string(toString(mode)));
                QCOMPARE(g.lanes, lanes == 0 ? 3 : lanes);  // auto: 5 tiles of 32x32 are small (4 lanes); 3 batches
                QVERIFY2(r.image.data == ref.image.data, (what + ": the image differs from one lane's").c_str());
                QVERIFY2(r.seamMap.data == ref.seamMap.data, (what + ": the seam map differs").c_str());
                QVERIFY2(seen.previews == refSeen.previews, (what + ": a preview differs").c_str());
                QCOMPARE(seen.batches.size(), std::size_t(5 * 3));
                for (const TileBatchTiming& b : r.record.batches) QVERIFY2(b.gpuMs > 0, what.c_str());
                // Tile: batches 0, 1, 2 (x5, x5, x2) on lanes 0, 1, 2 (3 lanes) or 0, 1, 0 (2):
                // 3 forward graphs. Step: preview, normal, last. Auto (3 lanes) finds the
                // 3-lane graphs cached.
                if (mode != GraphMode::Off) QCOMPARE(g.captures, lanes == 0 ? 0 : 3);
            }
        }
    }

    // A new seed is a new run of the same graphs (the seed is device data), bit-identical
    // to the eager run of that seed.
    void stepGraphsServeEverySeed() {
        auto model = std::make_shared<const UNetModel>(UNetModel::random(smallConfig(), 22));
        CudaEngine gpu;
        gpu.setModel(model);
        RunObserver quiet;
        RunConfig cfg = identityConfig(SchedulerKind::DDIM, FusionRule::Sample, GraphMode::Step);
        (void)gpu.run(cfg, quiet);
        cfg.seed = 99;
        const RunResult graphed = gpu.run(cfg, quiet);
        QCOMPARE(graphed.record.graphs.misses, 0);
        cfg.graphs = GraphMode::Off;
        const RunResult eager = gpu.run(cfg, quiet);
        QVERIFY2(eager.image.data == graphed.image.data, "a cached step graph replayed with another seed differs");
    }

    // 200 renders cycling through 20 configurations (5 sizes x 2 fusions x 2 windows; the
    // UNet plan stays: tile 32, batch 4, fp16) with a cache of 4. Each run: step 0 warm-up,
    // step 1 captures "normal", step 2 replays it, step 3 captures "last": 2 misses, 1 hit.
    // A configuration's graphs are long evicted when it comes round again, so every run
    // misses twice and the cache (full after run 1) evicts 2 graphs per run from run 2 on.
    void cacheKeepsMemoryFlat() {
        auto model = std::make_shared<const UNetModel>(UNetModel::load(testData() + "/models/cifar_like"));
        CudaEngine gpu;
        gpu.setModel(model);
        std::vector<RunConfig> configs;
        for (int size : {64, 80, 96, 112, 128})
            for (FusionRule fusion : {FusionRule::Sample, FusionRule::Noise})
                for (BlendWindowKind window : {BlendWindowKind::Hann, BlendWindowKind::Linear}) {
                    RunConfig r;
                    r.width = size;
                    r.height = size;
                    r.steps = 4;
                    r.scheduler = SchedulerKind::DDIM;
                    r.tile = 32;
                    r.overlapPx = 8;
                    r.window = window;
                    r.fusion = fusion;
                    r.tileBatch = 4;
                    r.precision = Precision::FP16;
                    r.previewEvery = 0;
                    r.graphs = GraphMode::Step;
                    r.graphWarmup = 1;
                    r.graphCacheSize = 4;
                    r.lanes = 2;  // two tile batches in flight: streams, lane buffers, forked graphs
                    configs.push_back(r);
                }
        QCOMPARE(configs.size(), std::size_t(20));
        RunObserver quiet;
        const int rounds = 10;
        std::vector<std::vector<double>> usedMiB(configs.size());
        int evictions = 0, misses = 0, hits = 0, instantiations = 0, updates = 0, invalidations = 0;
        for (int round = 0; round < rounds; ++round)
            for (std::size_t c = 0; c < configs.size(); ++c) {
                RunConfig cfg = configs[c];
                cfg.seed = static_cast<std::uint64_t>(round);
                const RunResult r = gpu.run(cfg, quiet);
                const GraphStats& g = r.record.graphs;
                const int run = round * 20 + static_cast<int>(c);
                QVERIFY2(g.fallbackReason.empty(), g.fallbackReason.c_str());
                QCOMPARE(g.misses, 2);
                QCOMPARE(g.hits, 1);
                QCOMPARE(g.evictions, run < 2 ? 0 : 2);
                QVERIFY(g.cacheEntries <= 4);
                QCOMPARE(g.cacheCapacity, 4);
                evictions += g.evictions;
                misses += g.misses;
                hits += g.hits;
                instantiations += g.instantiations;
                updates += g.updates;
                invalidations += g.invalidations;
                usedMiB[c].push_back(r.record.memory.back().usedMiB);
                if (run < 2 || run % 50 == 0)
                    qInfo("run %d (%dx%d): %s, graph memory %.2f MiB, device used %.1f MiB", run, cfg.width, cfg.height,
                          describe(g).c_str(), g.graphMemMiB, r.record.memory.back().usedMiB);
            }
        qInfo("200 runs: misses %d, hits %d, evictions %d, instantiations %d, updates %d, invalidations %d", misses,
              hits, evictions, instantiations, updates, invalidations);
        QCOMPARE(misses, 400);
        QCOMPARE(hits, 200);
        QCOMPARE(evictions, 400 - 4);
        QCOMPARE(instantiations + updates, misses);
        QCOMPARE(invalidations, 0);
        // Flat: after the first round every configuration finds the device as it did then.
        double worst = 0;
        for (std::size_t c = 0; c < configs.size(); ++c)
            for (int round = 1; round < rounds; ++round)
                worst = std::max(worst, std::abs(usedMiB[c][static_cast<std::size_t>(round)] - usedMiB[c][1]));
        qInfo("device memory drift after round 1: %.2f MiB", worst);
        QVERIFY2(worst <= 4.0, qPrintable(QString("device memory moved by %1 MiB across rounds").arg(worst)));

        // The last two configurations' graphs are cached: running the last one again replays
        // everything (no warm-up, no capture).
        RunConfig again = configs.back();
        again.seed = 5;
        const RunResult r = gpu.run(again, quiet);
        QCOMPARE(r.record.graphs.misses, 0);
        QCOMPARE(r.record.graphs.hits, 4);
        QCOMPARE(r.record.graphs.evictions, 0);
    }

    // Numbers for the report (fixture model, 512x512, tile 64, overlap 16: 121 tiles): the
    // steady-state step (after warm-up and capture) per mode. The one check: replaying a
    // step graph costs the host less than launching its kernels one by one.
    void reportsTimings_data() {
        QTest::addColumn<int>("batch");
        QTest::newRow("B=1") << 1;
        QTest::newRow("B=8") << 8;
    }

    void reportsTimings() {
        QFETCH(int, batch);
        auto model = std::make_shared<const UNetModel>(UNetModel::load(testData() + "/models/cifar_like"));
        CudaEngine gpu;
        gpu.setModel(model);
        RunObserver quiet;
        double offHost = 0, stepHost = 0;
        std::string offSha;
        for (GraphMode mode : {GraphMode::Off, GraphMode::Tile, GraphMode::Step}) {
            RunConfig r;
            r.width = r.height = 512;
            r.steps = 8;
            r.tile = 64;
            r.overlapPx = 16;
            r.tileBatch = batch;
            r.previewEvery = 0;
            r.graphs = mode;
            const RunResult res = gpu.run(r, quiet);
            std::vector<double> wall, host, gpuMs;
            for (const StepTiming& t : res.record.steps)
                if (t.graph != "capture" && t.step >= r.graphWarmup) {
                    wall.push_back(t.wallMs);
                    host.push_back(t.hostEnqueueMs);
                    gpuMs.push_back(t.gpuMs);
                }
            const auto median = [](std::vector<double> v) {
                std::sort(v.begin(), v.end());
                return v.empty() ? -1.0 : v[v.size() / 2];
            };
            const GraphStats& g = res.record.graphs;
            double batchGpu = 0;
            for (const TileBatchTiming& b : res.record.batches) batchGpu += b.gpuMs;
            qInfo(
                "B=%d %-4s: %d tiles, steady step wall %.2f ms, host enqueue %.2f ms, gpu %.2f ms; total %.1f ms; "
                "graphs: %d captured, nodes %d, capture %.1f ms, instantiate %.1f ms, graph memory %.2f MiB; "
                "peak device %.0f MiB; per-batch gpu sum %.1f ms",
                batch, std::string(toString(mode)).c_str(), res.record.tileCount, median(wall), median(host),
                median(gpuMs), res.record.totalMs, g.captures, g.nodes, g.captureMs, g.instantiateMs, g.graphMemMiB,
                res.record.peakDeviceMiB, batchGpu);
            for (const StepTiming& t : res.record.steps)
                if (t.captured)
                    qInfo("    step %d (capture): host %.1f ms, wall %.1f ms", t.step, t.hostEnqueueMs, t.wallMs);
            if (mode == GraphMode::Off) {
                offHost = median(host);
                offSha = res.record.imageSha256;
            }
            if (mode == GraphMode::Step) stepHost = median(host);
            QCOMPARE(res.record.imageSha256, offSha);
            QVERIFY2(g.fallbackReason.empty(), g.fallbackReason.c_str());
        }
        QVERIFY2(
            stepHost < offHost,
            qPrintable(QString("step graphs' host enqueue %1 ms is not below eager %2 ms").arg(stepHost).arg(offHost)));
    }

    // TESSERA_CUDA_SYNC=op makes the backend synchronise after every op, which a stream
    // capture cannot contain: the first capture fails, the run goes on with graphs off, the
    // record and the observer say why, and the image is the eager one.
    void failedCaptureFallsBackToOff_data() {
        QTest::addColumn<int>("lanes");
        QTest::newRow("1 lane") << 1;
        QTest::newRow("3 lanes") << 3;  // the capture had forked onto the lane streams when it failed
    }
    void failedCaptureFallsBackToOff() {
        QFETCH(int, lanes);
        qputenv("TESSERA_CUDA_SYNC", "op");
        auto model = std::make_shared<const UNetModel>(UNetModel::random(smallConfig(), 23));
        CudaEngine gpu;  // its backend (created by the first run) reads the variable
        gpu.setModel(model);
        Seen seen;
        RunConfig cfg = identityConfig(SchedulerKind::DDIM, FusionRule::Sample, GraphMode::Step);
        cfg.lanes = lanes;
        const RunResult graphed = gpu.run(cfg, seen);
        RunObserver quiet;
        cfg.graphs = GraphMode::Off;
        const RunResult eager = gpu.run(cfg, quiet);
        qunsetenv("TESSERA_CUDA_SYNC");
        const GraphStats& g = graphed.record.graphs;
        qInfo("fallback: %s", describe(g).c_str());
        QCOMPARE(g.mode, std::string("off"));
        QVERIFY2(g.fallbackReason.find("capture failed") != std::string::npos, g.fallbackReason.c_str());
        QCOMPARE(g.failures, 1);
        QCOMPARE(g.captures, 0);
        const auto said = [&](const std::vector<std::string>& lines) {
            return std::any_of(lines.begin(), lines.end(),
                               [](const std::string& m) { return m.find("ran with graphs off") != std::string::npos; });
        };
        QVERIFY2(said(graphed.record.messages), "the record's messages do not mention the fallback");
        QVERIFY2(said(seen.messages), "the observer was not told about the fallback");
        for (const StepTiming& t : graphed.record.steps) QCOMPARE(t.graph, std::string("eager"));
        QCOMPARE(graphed.record.stepsRun, 5);
        QVERIFY2(graphed.image.data == eager.image.data, "the fallback run differs from the eager run");
    }
};

QTEST_GUILESS_MAIN(TestCudaGraphs)
#include "tst_cudagraphs.moc"
