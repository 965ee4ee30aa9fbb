// RunRecord writers: timings CSV, manifest round trip, Chrome trace layout, atomic
// file writes, SHA-256 (FIPS 180-4 vectors) and run ids.
#include <QtTest>

#include <QDir>
#include <QFile>
#include <QRegularExpression>
#include <QTemporaryDir>

#include <clocale>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "core/base/BoundedInput.h"
#include "core/base/Sha256.h"
#include "core/run/RunRecordIO.h"

using namespace tessera;

namespace {

// An ESRGAN 4x model's pass over a 160x128 start image, shrunk to the 320x256 canvas.
UpscaleModelRecord sampleUpscale() {
    UpscaleModelRecord u;
    u.file = "4x-UltraSharp.safetensors";
    u.name = "4x-UltraSharp";
    u.sha256 = std::string(64, 'c');
    u.architecture = "ESRGAN 4x, 64 features, 23 blocks";
    u.scale = 4;
    u.backend = "cpu";
    u.precision = "fp32";
    u.tile = 128;
    u.overlap = 16;
    u.tiles = 4;
    u.planBytes = 700u << 20;
    u.budgetBytes = 1u << 30;
    u.tileNote = "tile 512 lowered to 128: 256 needed 1.2 GiB, over the budget of 1.0 GiB";
    u.inputW = 160;
    u.inputH = 128;
    u.outputW = 640;
    u.outputH = 512;
    u.resizedW = 320;
    u.resizedH = 256;
    u.resizeFilter = "area average";
    u.ms = 1234.5;
    return u;
}

RunRecord sampleRecord() {
    RunRecord r;
    r.runId = "20261122-061500-3f2a9c1d";
    r.startedAt = "2026-11-22T06:15:00Z";
    r.config.width = 320;
    r.config.steps = 2;
    r.config.label = "seam test";
    r.modelName = "ddpm-cifar10-32";
    r.modelHash = std::string(64, 'a');
    r.environment = {"0.1.0", "cuda", "NVIDIA H100", "CUDA 12.4, cuDNN 9", "box", 16};
    r.tuning.cachePath = "tuning/choices.json";
    r.tuning.hits = 7;
    r.tuning.misses = 2;
    r.tuning.rejected = 1;
    r.tuning.digest = "0123456789abcdef";
    r.tuning.settings = {{"TESSERA_CUDNN_FUSE", "0"}, {"TESSERA_CUDA_BETA", ""}};
    r.tileCount = 3;
    r.tileW = 64;
    r.tileH = 48;
    r.stepsRun = 2;
    r.timesteps = {980.0f, 498.25f};
    r.steps = {{0, 980.0f, 4.5, 0.25, 5.0}, {1, 498.25f, 3.0, 0.5, 4.0}};
    // Step 0: batches {0,1} and {2}; step 1: one batch of all three.
    r.batches = {{0, 980.0f, 0, {0, 1}, 2.5, 0.125, 812.5},
                 {0, 980.0f, 1, {2}, 1.5, 0.0625, 815.0},
                 {1, 498.25f, 0, {0, 1, 2}, -1, 3.75, -1}};
    r.memory = {{1.0, 800.0, 512.0}, {6.0, 816.0, 512.0}};
    r.graphs.mode = "step";
    r.graphs.fallbackReason = "";
    r.graphs.captures = 1;
    r.graphs.hits = 1;
    r.graphs.nodes = 321;
    r.graphs.captureMs = 12.5;
    r.graphs.cacheCapacity = 4;
    r.graphs.cacheEntries = 3;
    r.graphs.invalidations = 2;
    r.graphs.failures = 0;
    r.graphs.updateMs = 0.75;
    r.graphs.used = {{"step normal", 321, 12.5, 3.25, 0, 1.5, 1, true, false},
                     {"step last", 321, 11.0, 0, 0.5, 0, 1, true, true}};
    r.steps[0].graph = "capture";
    r.steps[0].captured = true;
    r.steps[1].graph = "replay";
    r.memoryPlan = {100.0, 200.0, 50.0, 1.5, 351.5};
    r.prepareMs = 10.0;
    r.totalMs = 9.0;
    r.peakDeviceMiB = 816.0;
    r.status = RunStatus::Finished;
    r.imageSha256 = std::string(64, 'b');
    r.messages = {"graphs: fell back, \"quoted\"", "second"};
    r.textEncode = TextEncodeRecord{812.75, 2, 6};
    r.vaeEncode = VaePassRecord{95.5, 320, 256, false, "vae_tiling off", {}};
    VaePassRecord decode{1234.5, 320, 256, true, "vae_tiling on", {}};
    decode.tiling = {3, 2, 16, 2, 3, 160, 160, true, false, "device", 0, 5u << 20};
    r.vaeDecode = decode;
    r.tileBatch = TileBatchRecord{0, 2, 3, 3, {{3, 2, "needs 900 MiB, 512 MiB free"}}};
    r.config.upscaleModel = "4x-UltraSharp";
    r.upscaleModel = sampleUpscale();
    return r;
}

QStringList lines(const std::string& text) {
    QStringList l = QString::fromStdString(text).split('\n');
    if (!l.isEmpty() && l.last().isEmpty()) l.removeLast();
    return l;
}

QByteArray readAll(const QString& path) {
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) return {};
    return f.readAll();
}

}  // namespace

class TestRunRecordIO : public QObject {
    Q_OBJECT

private slots:
    // startedAt: ISO 8601 UTC with milliseconds, so runs started within one second order by it.
    void startTimesHaveMilliseconds() {
        const std::string first = isoUtcNow();
        const QRegularExpression iso(QStringLiteral("^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}\\.\\d{3}Z$"));
        QVERIFY2(iso.match(QString::fromStdString(first)).hasMatch(), first.c_str());
        QTest::qSleep(5);
        const std::string second = isoUtcNow();
        QVERIFY2(first < second, (first + " then " + second).c_str());
    }

    // The one timings CSV (the window's export and the CLI's <run-id>.csv): steps and batches
    // counted from 1, with the step's and the run's memory peaks.
    void csvRowsAndColumns() {
        const RunRecord r = sampleRecord();
        const QStringList rows = lines(timingsCsv(r));
        QCOMPARE(rows.size(), 4);  // header + one row per step x tile batch
        QCOMPARE(rows[0], QString("run_id,step,timestep,batch,tile_ids,gpu_ms,host_ms,device_mib,"
                                  "step_peak_device_mib,run_peak_device_mib,run_peak_host_rss_mib"));
        for (const QString& row : rows) QCOMPARE(row.split(',').size(), 11);
        const QStringList first = rows[1].split(',');
        QCOMPARE(first[0], QString::fromStdString(r.runId));
        QCOMPARE(first[1], QString("1"));
        QCOMPARE(first[2].toDouble(), 980.0);
        QCOMPARE(first[3], QString("1"));
        QCOMPARE(first[4], QString("0;1"));
        QCOMPARE(first[5].toDouble(), 2.5);
        QCOMPARE(first[6].toDouble(), 0.125);
        QCOMPARE(first[7], QString("812.50"));
        QCOMPARE(first[8], QString("815.00"));  // the most over step 1's two batches
        QCOMPARE(first[9], QString("816.00"));  // peakDeviceMiB
        QCOMPARE(first[10], QString());         // a CUDA run: no host RSS peak
        QCOMPARE(rows[2].split(',')[3], QString("2"));
        const QStringList last = rows[3].split(',');
        QCOMPARE(last[1], QString("2"));
        QCOMPARE(last[2].toDouble(), 498.25);
        QCOMPARE(last[3], QString("1"));
        QCOMPARE(last[4], QString("0;1;2"));
        QCOMPARE(last[5], QString());  // not measured
        QCOMPARE(last[6].toDouble(), 3.75);
        QCOMPARE(last[7], QString());
        QCOMPARE(last[8], QString());  // no batch of step 2 measured device memory
        QCOMPARE(last[9], QString("816.00"));

        RunRecord empty;
        QCOMPARE(lines(timingsCsv(empty)).size(), 1);
    }

    // A figure that is not finite is an empty field, never "nan" or "inf" in a column of numbers.
    void csvNonFiniteFieldsAreEmpty() {
        RunRecord r = sampleRecord();
        r.batches[0].timestep = std::numeric_limits<float>::quiet_NaN();
        r.batches[0].hostMs = std::numeric_limits<double>::infinity();
        r.batches[0].gpuMs = std::numeric_limits<double>::infinity();
        const QStringList first = lines(timingsCsv(r))[1].split(',');
        QCOMPARE(first.size(), 11);
        QCOMPARE(first[2], QString());
        QCOMPARE(first[5], QString());
        QCOMPARE(first[6], QString());
    }

    void csvIsLocaleIndependent() {
        const char* previous = std::setlocale(LC_NUMERIC, nullptr);
        const std::string saved = previous ? previous : "C";
        // A decimal-comma locale, if the system has one; the CSV must not change.
        const bool switched = std::setlocale(LC_NUMERIC, "de_DE.UTF-8") != nullptr;
        const std::string csv = timingsCsv(sampleRecord());
        std::setlocale(LC_NUMERIC, saved.c_str());
        QVERIFY(QString::fromStdString(csv).contains(",2.5000,"));
        if (!switched) qInfo("de_DE.UTF-8 is not installed; checked in the current locale only");
    }

    void manifestRoundTrip() {
        const RunRecord r = sampleRecord();
        const nlohmann::json j = manifestJson(r);
        QCOMPARE(j.at("schema_version").get<int>(), RunRecord::kSchemaVersion);
        QCOMPARE(j.at("config"), toJson(r.config));
        QCOMPARE(j.at("batches").size(), std::size_t(3));
        QCOMPARE(j.at("batches")[2].at("tile_ids"), nlohmann::json({0, 1, 2}));

        // Through text, as a manifest file is read back.
        const RunRecord back = runRecordFromManifest(nlohmann::json::parse(j.dump(2)));
        QCOMPARE(back.runId, r.runId);
        QCOMPARE(back.startedAt, r.startedAt);
        QCOMPARE(toJson(back.config), toJson(r.config));
        QCOMPARE(back.config.label, r.config.label);
        QCOMPARE(back.modelName, r.modelName);
        QCOMPARE(back.modelHash, r.modelHash);
        QVERIFY(!j.contains("flow_matching") && !back.flowMatching);  // written only where true
        RunRecord flow = r;
        flow.flowMatching = true;
        QVERIFY(runRecordFromManifest(nlohmann::json::parse(manifestJson(flow).dump())).flowMatching);
        QCOMPARE(back.environment.device, r.environment.device);
        QCOMPARE(back.environment.driver, r.environment.driver);
        QCOMPARE(back.environment.threads, 16);
        QCOMPARE(back.tileCount, 3);
        QCOMPARE(back.tileW, 64);
        QCOMPARE(back.tileH, 48);
        QCOMPARE(back.stepsRun, 2);
        QCOMPARE(back.timesteps, r.timesteps);
        QCOMPARE(back.steps.size(), r.steps.size());
        QCOMPARE(back.steps[1].timestep, 498.25f);
        QCOMPARE(back.steps[1].gpuMs, 3.0);
        QCOMPARE(back.steps[1].hostEnqueueMs, 0.5);
        QCOMPARE(back.steps[1].wallMs, 4.0);
        QCOMPARE(back.batches.size(), r.batches.size());
        QCOMPARE(back.batches[0].tileIds, (std::vector<int>{0, 1}));
        QCOMPARE(back.batches[1].batchIndex, 1);
        QCOMPARE(back.batches[1].deviceMiB, 815.0);
        QCOMPARE(back.batches[2].gpuMs, -1.0);
        QCOMPARE(back.memory.size(), std::size_t(2));
        QCOMPARE(back.memory[1].usedMiB, 816.0);
        QCOMPARE(back.memory[1].arenaMiB, 512.0);
        QCOMPARE(back.graphs.mode, std::string("step"));
        QCOMPARE(back.graphs.nodes, 321);
        QCOMPARE(back.graphs.captureMs, 12.5);
        QCOMPARE(back.graphs.cacheCapacity, 4);
        QCOMPARE(back.graphs.cacheEntries, 3);
        QCOMPARE(back.graphs.invalidations, 2);
        QCOMPARE(back.graphs.updateMs, 0.75);
        QCOMPARE(back.graphs.used.size(), std::size_t(2));
        QCOMPARE(back.graphs.used[0].name, std::string("step normal"));
        QCOMPARE(back.graphs.used[0].instantiateMs, 3.25);
        QCOMPARE(back.graphs.used[0].deviceMiB, 1.5);
        QCOMPARE(back.graphs.used[1].updated, true);
        QCOMPARE(back.graphs.used[1].updateMs, 0.5);
        QCOMPARE(back.steps[0].graph, std::string("capture"));
        QCOMPARE(back.steps[0].captured, true);
        QCOMPARE(back.steps[1].captured, false);
        QCOMPARE(back.tuning.cachePath, r.tuning.cachePath);
        QCOMPARE(back.tuning.hits, 7);
        QCOMPARE(back.tuning.misses, 2);
        QCOMPARE(back.tuning.rejected, 1);
        QCOMPARE(back.tuning.digest, r.tuning.digest);
        QVERIFY(back.tuning.settings == r.tuning.settings);
        QCOMPARE(j.at("tuning").at("settings").at("TESSERA_CUDNN_FUSE").get<std::string>(), std::string("0"));
        QCOMPARE(back.memoryPlan.totalMiB, 351.5);
        QCOMPARE(back.prepareMs, 10.0);
        QCOMPARE(back.totalMs, 9.0);
        QCOMPARE(back.peakDeviceMiB, 816.0);
        QCOMPARE(std::string(toString(back.status)), std::string(toString(r.status)));
        QCOMPARE(back.imageSha256, r.imageSha256);
        QCOMPARE(back.messages, r.messages);
        QVERIFY(back.textEncode && back.vaeEncode && back.vaeDecode && back.tileBatch);
        QCOMPARE(back.textEncode->ms, 812.75);
        QCOMPARE(back.textEncode->rowsRun, std::uint64_t{2});
        QCOMPARE(back.textEncode->rowsRemembered, std::uint64_t{6});
        QCOMPARE(back.vaeEncode->tiled, false);
        QCOMPARE(back.vaeEncode->reason, std::string("vae_tiling off"));
        QVERIFY(!j.at("vae_encode").contains("tiling"));  // whole: no tiling to say
        QCOMPARE(back.vaeDecode->ms, 1234.5);
        QCOMPARE(back.vaeDecode->width, 320);
        QCOMPARE(back.vaeDecode->tiling.cols, 3);
        QCOMPARE(back.vaeDecode->tiling.requiredHalo, 3);
        QCOMPARE(back.vaeDecode->tiling.wholeImageAttention, false);
        QCOMPARE(back.vaeDecode->tiling.canvases, std::string("device"));
        QCOMPARE(back.vaeDecode->tiling.devicePeakBytes, std::uint64_t{5u << 20});
        QCOMPARE(back.tileBatch->asked, 0);
        QCOMPARE(back.tileBatch->ran, 2);
        QCOMPARE(back.tileBatch->lowered.size(), std::size_t{1});
        QCOMPARE(back.tileBatch->lowered[0].reason, std::string("needs 900 MiB, 512 MiB free"));
        QVERIFY(back.tileBatch->loweredToFit());
        QCOMPARE(manifestJson(back), j);  // nothing lost either way
        // The ControlNets' hashes where the run had ControlNets (a reopened run's infotext names them).
        RunRecord controlled = sampleRecord();
        controlled.controlNetHashes = {"a371b31b", ""};
        const nlohmann::json cj = manifestJson(controlled);
        QCOMPARE(cj.at("controlnet_hashes"), nlohmann::json({"a371b31b", ""}));
        QVERIFY(!j.contains("controlnet_hashes"));
        QCOMPARE(runRecordFromManifest(nlohmann::json::parse(cj.dump())).controlNetHashes, controlled.controlNetHashes);
        nlohmann::json bad = cj;
        bad["controlnet_hashes"] = nlohmann::json({1});
        QVERIFY_THROWS_EXCEPTION(std::runtime_error, runRecordFromManifest(bad));
    }

    // A manifest without the phases (a run without them, or one written before they were data)
    // reads as "unknown", not as zeros; a phase of the wrong type is named.
    void manifestPhasesAreOptional() {
        nlohmann::json j = manifestJson(sampleRecord());
        for (const char* key : {"text_encode", "vae_encode", "vae_decode", "tile_batch", "upscale_model"}) j.erase(key);
        const RunRecord old = runRecordFromManifest(j);
        QVERIFY(!old.textEncode && !old.vaeEncode && !old.vaeDecode && !old.tileBatch && !old.upscaleModel);
        QVERIFY(!manifestJson(old).contains("upscale_model"));
        QCOMPARE(old.messages, sampleRecord().messages);
        QVERIFY(!manifestJson(old).contains("vae_decode"));
        for (const auto& [key, value, where] :
             {std::tuple{"vae_decode", nlohmann::json(3), "vae_decode"},
              {"text_encode", nlohmann::json{{"ms", "slow"}}, "text_encode.ms"},
              {"tile_batch", nlohmann::json{{"lowered", {{{"from", 1.5}}}}}, "tile_batch.lowered[0].from"},
              {"vae_decode", nlohmann::json{{"tiling", {{"halo", "2"}}}}, "vae_decode.tiling.halo"},
              {"upscale_model", nlohmann::json{{"pickle", "no"}}, "upscale_model.pickle"},
              {"upscale_model", nlohmann::json{{"scale", 4.5}}, "upscale_model.scale"},
              {"upscale_model", nlohmann::json("4x"), "upscale_model"}}) {
            nlohmann::json bad = manifestJson(sampleRecord());
            bad[key] = value;
            try {
                runRecordFromManifest(bad);
                QFAIL(qPrintable(QString("a wrong-typed %1 was accepted").arg(key)));
            } catch (const std::runtime_error& e) {
                QVERIFY2(QString(e.what()).contains(QString("'") + where + "'"), e.what());
            }
        }
    }

    // The record's words for its phases: the texts the engines put in the messages.
    void phasesDescribeThemselves() {
        const RunRecord r = sampleRecord();
        QCOMPARE(describe(*r.textEncode),
                 std::string("812 ms, 2 of 8 encoder rows run (the rest remembered or repeated)"));
        QCOMPARE(describe(TextEncodeRecord{40.9, 4, 0}), std::string("40 ms, 4 of 4 encoder rows run"));
        QCOMPARE(describeVaeEncode(*r.vaeEncode), std::string("vae encode: untiled (vae_tiling off), 95 ms"));
        QCOMPARE(describeVaeDecode(*r.vaeDecode),
                 std::string("vae decode: 320x256 tiled 3x2 tiles of 16 latent px + 2 halo (160x160 px evaluated), "
                             "whole-image GroupNorm, attention within each tile, halo below the exact 3, canvases on "
                             "the device (peak 5.0 MiB) (vae_tiling on), 1234 ms"));
        VaeTilingRecord host = r.vaeDecode->tiling;
        host.canvases = "host";
        host.hostPeakBytes = 3u << 30;
        host.halo = 3;
        host.wholeImageNorm = false;
        host.wholeImageAttention = true;
        QCOMPARE(describe(host), std::string("3x2 tiles of 16 latent px + 3 halo (160x160 px evaluated), per-tile "
                                             "GroupNorm, attention over the whole image, host peak 3.0 GiB"));
        QCOMPARE(describe(r.tileBatch->lowered[0]),
                 std::string("batch: 3 tiles per call do not fit (needs 900 MiB, 512 MiB free); trying 2"));
        QCOMPARE(describeAutoTileBatch(*r.tileBatch),
                 std::string("batch: auto, 2 tiles per UNet call (3 tiles in 2 calls; fewer than the 3 asked for, to "
                             "fit the device)"));
        QCOMPARE(describeAutoTileBatch(TileBatchRecord{0, 1, 1, 1, {}}),
                 std::string("batch: auto, 1 tile per UNet call (1 tile in one call)"));
        const TileBatchRecord asked{4, 4, 9, 0, {}};
        QVERIFY(!asked.automatic());
        QVERIFY(!asked.loweredToFit());
        QCOMPARE(describe(*r.upscaleModel),
                 std::string("upscale model: 4x-UltraSharp (ESRGAN 4x, 64 features, 23 blocks, safetensors) on cpu in "
                             "fp32: 160x128 -> 640x512 in 4 tiles of 128 px, overlap 16 (tile 512 lowered to 128: 256 "
                             "needed 1.2 GiB, over the budget of 1.0 GiB), 1234 ms; resized to 320x256 (area "
                             "average)"));
        UpscaleModelRecord one = sampleUpscale();
        one.pickle = true;
        one.tiles = 1;
        one.tileNote.clear();
        one.resizeFilter.clear();
        QCOMPARE(describe(one), std::string("upscale model: 4x-UltraSharp (ESRGAN 4x, 64 features, 23 blocks, a "
                                            "PyTorch checkpoint read without executing it) on cpu in fp32: 160x128 "
                                            "-> 640x512 in 1 tile, 1234 ms"));
    }

    // The upscale model's pass in the manifest: every field under "upscale_model", as written.
    void manifestUpscaleModel() {
        const nlohmann::json j = manifestJson(sampleRecord());
        const nlohmann::json& u = j.at("upscale_model");
        QCOMPARE(u.at("name").get<std::string>(), std::string("4x-UltraSharp"));
        QCOMPARE(u.at("file").get<std::string>(), std::string("4x-UltraSharp.safetensors"));
        QCOMPARE(u.at("sha256").get<std::string>(), std::string(64, 'c'));
        QCOMPARE(u.at("architecture").get<std::string>(), std::string("ESRGAN 4x, 64 features, 23 blocks"));
        QCOMPARE(u.at("scale").get<int>(), 4);
        QCOMPARE(u.at("pickle").get<bool>(), false);
        QCOMPARE(u.at("precision").get<std::string>(), std::string("fp32"));
        QCOMPARE(u.at("tile").get<int>(), 128);
        QCOMPARE(u.at("resize_filter").get<std::string>(), std::string("area average"));
        QCOMPARE(j.at("config").at("upscale_model").get<std::string>(), std::string("4x-UltraSharp"));
        const RunRecord back = runRecordFromManifest(j);
        QVERIFY(back.upscaleModel.has_value());
        QCOMPARE(back.upscaleModel->planBytes, std::uint64_t(700u << 20));
        QCOMPARE(back.upscaleModel->ms, 1234.5);
        QVERIFY(back.upscaleModel->resized());
        QVERIFY(!back.upscaleModel->alone);
        QCOMPARE(back.config.upscaleModel, std::string("4x-UltraSharp"));
    }

    void manifestRejectsBadInput() {
        nlohmann::json j = manifestJson(sampleRecord());
        j["schema_version"] = RunRecord::kSchemaVersion + 1;
        try {
            runRecordFromManifest(j);
            QFAIL("a newer schema_version was accepted");
        } catch (const std::runtime_error& e) {
            QVERIFY2(QString(e.what()).contains("schema_version"), e.what());
        }
        j = manifestJson(sampleRecord());
        j["batches"][1]["gpu_ms"] = "fast";
        try {
            runRecordFromManifest(j);
            QFAIL("a string gpu_ms was accepted");
        } catch (const std::runtime_error& e) {
            QVERIFY2(QString(e.what()).contains("batches[1].gpu_ms"), e.what());
        }
        for (const char* key : {"hits", "digest", "settings"}) {
            j = manifestJson(sampleRecord());
            j["tuning"][key] = nlohmann::json::array();
            try {
                runRecordFromManifest(j);
                QFAIL("a wrong-typed tuning entry was accepted");
            } catch (const std::runtime_error& e) {
                QVERIFY2(QString(e.what()).contains(QString("tuning.") + key), e.what());
            }
        }
        j = manifestJson(sampleRecord());
        j["tuning"]["settings"]["TESSERA_CUDNN_FIND"] = 0;
        try {
            runRecordFromManifest(j);
            QFAIL("a number as a setting was accepted");
        } catch (const std::runtime_error& e) {
            QVERIFY2(QString(e.what()).contains("tuning.settings.TESSERA_CUDNN_FIND"), e.what());
        }
        // A manifest from before the tuning cache (no "tuning") reads as no cache, no choices.
        j = manifestJson(sampleRecord());
        j.erase("tuning");
        const RunRecord old = runRecordFromManifest(j);
        QCOMPARE(old.tuning.cachePath, std::string());
        QCOMPARE(old.tuning.digest, std::string());
        QVERIFY(old.tuning.settings.empty());
        QVERIFY_THROWS_EXCEPTION(std::runtime_error, runRecordFromManifest(nlohmann::json::array()));
        QVERIFY_THROWS_EXCEPTION(std::runtime_error, runRecordFromManifest(nlohmann::json::object()));
    }

    // Numbers a field's type cannot hold are quoted as written with the range, never wrapped
    // (schema_version 2^64 - 1 read as -1, tile_count 2^32 as 0).
    void manifestNumbersBeyondTheirType() {
        const auto contains = [](const std::string& text, const char* part) {
            return text.find(part) != std::string::npos;
        };
        const auto messageOf = [](const nlohmann::json& j) -> std::string {
            try {
                (void)runRecordFromManifest(j);
            } catch (const std::exception& e) {
                return e.what();
            }
            return "<accepted>";
        };
        nlohmann::json j = manifestJson(sampleRecord());
        j["schema_version"] = std::numeric_limits<std::uint64_t>::max();
        QCOMPARE(messageOf(j), std::string("manifest: 'schema_version' 18446744073709551615 is not supported (this "
                                           "build reads 1 to ") +
                                   std::to_string(RunRecord::kSchemaVersion) + ")");
        j["schema_version"] = std::numeric_limits<std::int64_t>::min();
        QVERIFY(contains(messageOf(j), "'schema_version' -9223372036854775808 is not supported"));
        j["schema_version"] = 1.0;
        QVERIFY(contains(messageOf(j), "'schema_version' must be an integer"));
        j = manifestJson(sampleRecord());
        j["tile_count"] = std::uint64_t{1} << 32;
        QCOMPARE(messageOf(j), std::string("manifest: 'tile_count' 4294967296 is out of range; allowed -2147483648 to "
                                           "2147483647"));
        j = manifestJson(sampleRecord());
        j["config"]["scheduler_options"]["beta_start"] = 1e-300;
        const std::string beta = messageOf(j);
        QVERIFY2(contains(beta, "beta_start: 1e-300 is out of range; allowed above 0 and below 1"), beta.c_str());
        QVERIFY2(!contains(beta, "0 is not allowed"), beta.c_str());
    }

    // Status and graph mode are enums inside; the manifest keeps the text history files have.
    void statusAndGraphModeText() {
        const std::pair<RunStatus, const char*> names[] = {
            {RunStatus::Finished, "finished"}, {RunStatus::Cancelled, "cancelled"}, {RunStatus::Failed, "failed"}};
        for (const auto& [status, name] : names) {
            RunRecord r = sampleRecord();
            r.status = status;
            const nlohmann::json j = manifestJson(r);
            QCOMPARE(j.at("status"), nlohmann::json(name));
            QVERIFY(runRecordFromManifest(j).status == status);
            QVERIFY(parseRunStatus(name) == status);
        }
        for (const nlohmann::json& bad : {nlohmann::json("done"), nlohmann::json("Finished"), nlohmann::json(1)}) {
            nlohmann::json j = manifestJson(sampleRecord());
            j["status"] = bad;
            try {
                runRecordFromManifest(j);
                QFAIL(qPrintable("status " + QString::fromStdString(bad.dump()) + " was accepted"));
            } catch (const std::runtime_error& e) {
                QVERIFY2(QString(e.what()).contains("'status' must be \"finished\", \"cancelled\" or \"failed\""),
                         e.what());
            }
        }
        GraphStats g;
        for (const GraphMode mode : {GraphMode::Off, GraphMode::Tile, GraphMode::Step}) {
            g.mode = std::string(toString(mode));
            QVERIFY(effectiveGraphMode(g) == mode);
        }
        g.mode = "";
        QVERIFY(!effectiveGraphMode(g));
        g.mode = "warp";
        QVERIFY(!effectiveGraphMode(g));
    }

    void traceStructure() {
        const RunRecord a = sampleRecord();
        RunRecord b = sampleRecord();
        b.runId = "other";
        b.config.label.clear();
        const nlohmann::json trace = chromeTrace({&a, nullptr, &b});
        QVERIFY(trace.at("traceEvents").is_array());
        QCOMPARE(trace.at("displayTimeUnit").get<std::string>(), std::string("ms"));

        int steps = 0, batches = 0, counters = 0, prepares = 0;
        std::vector<double> stepTs, batchTs, batchDur;
        QStringList processNames;
        for (const auto& e : trace.at("traceEvents")) {
            const std::string ph = e.at("ph").get<std::string>();
            const int pid = e.at("pid").get<int>();
            QVERIFY(pid == 1 || pid == 3);  // run i is pid i + 1; the null entry is skipped
            if (ph == "M" && e.at("name") == "process_name")
                processNames << QString::fromStdString(e.at("args").at("name").get<std::string>());
            if (pid != 1) continue;
            if (ph == "X") {
                QVERIFY(e.at("dur").get<double>() >= 0);
                const std::string cat = e.at("cat").get<std::string>();
                if (cat == "step") {
                    ++steps;
                    stepTs.push_back(e.at("ts").get<double>());
                } else if (cat == "tile_batch") {
                    ++batches;
                    batchTs.push_back(e.at("ts").get<double>());
                    batchDur.push_back(e.at("dur").get<double>());
                } else if (cat == "run") {
                    ++prepares;
                    QCOMPARE(e.at("dur").get<double>(), 10000.0);
                }
            } else if (ph == "C") {
                ++counters;
                QVERIFY(e.at("args").contains("used_mib"));
            }
        }
        QCOMPARE(processNames, (QStringList{"20261122-061500-3f2a9c1d seam test", "other"}));
        QCOMPARE(prepares, 1);
        QCOMPARE(steps, 2);
        QCOMPARE(batches, 3);
        QCOMPARE(counters, 2);
        // Steps back to back after prepare (10 ms); microseconds.
        QCOMPARE(stepTs, (std::vector<double>{10000.0, 15000.0}));
        // Batches back to back from their step's start; gpu time where measured, else host time.
        QCOMPARE(batchTs, (std::vector<double>{10000.0, 12500.0, 15000.0}));
        QCOMPARE(batchDur, (std::vector<double>{2500.0, 1500.0, 3750.0}));
        // The whole trace survives a text round trip (valid JSON).
        QCOMPARE(nlohmann::json::parse(trace.dump()), trace);
    }

    void atomicWrite() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const QString path = dir.filePath("out.json");
        writeFileAtomically(path.toStdString(), "first");
        QCOMPARE(readAll(path), QByteArray("first"));
        writeFileAtomically(path.toStdString(), std::string("second\0bytes", 12));
        QCOMPARE(readAll(path), QByteArray("second\0bytes", 12));
        writeFileAtomically(path.toStdString(), "");
        QCOMPARE(readAll(path), QByteArray());
        QCOMPARE(QDir(dir.path()).entryList(QDir::Files | QDir::Hidden), QStringList{"out.json"});  // no temp left
    }

    void atomicWriteFailures() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        // A folder that does not exist.
        const std::string missing = dir.filePath("no/such/folder/run.csv").toStdString();
        try {
            writeFileAtomically(missing, "x");
            QFAIL("writing into a missing folder succeeded");
        } catch (const std::runtime_error& e) {
            QVERIFY2(QString(e.what()).contains(QString::fromStdString(missing)), e.what());
            QVERIFY2(QString(e.what()).contains("No such file or directory"), e.what());
        }
        // The target exists but cannot be replaced (a non-empty folder): it stays as it was.
        QVERIFY(QDir(dir.path()).mkpath("busy"));
        const QString keep = dir.filePath("busy/keep.txt");
        writeFileAtomically(keep.toStdString(), "kept");
        const std::string busy = dir.filePath("busy").toStdString();
        try {
            writeFileAtomically(busy, "x");
            QFAIL("replacing a folder succeeded");
        } catch (const std::runtime_error& e) {
            QVERIFY2(QString(e.what()).contains(QString::fromStdString(busy)), e.what());
        }
        QCOMPARE(readAll(keep), QByteArray("kept"));
        QVERIFY(QFileInfo(QString::fromStdString(busy)).isDir());
        QCOMPARE(QDir(dir.path()).entryList(QDir::AllEntries | QDir::Hidden | QDir::NoDotAndDotDot),
                 QStringList{"busy"});
    }

    // Stored JSON text is valid UTF-8 whatever the strings hold: invalid bytes become "\xNN".
    void jsonTextEscapesInvalidUtf8() {
        const nlohmann::json valid = {{"label", "caf\u00e9 \u2615"}, {"n", 1.5}, {"list", {1, "two"}}};
        QCOMPARE(jsonText(valid), valid.dump());
        QCOMPARE(jsonText(valid, 2), valid.dump(2));
        const nlohmann::json invalid = {{"label", "caf\xE9"}, {"k\xFF", {"a", "b\xC0", {{"deep", "\xED\xA0\x80"}}}}};
        QVERIFY_THROWS_EXCEPTION(nlohmann::json::type_error, (void)invalid.dump());  // what lost whole runs
        const std::string text = jsonText(invalid, 2);
        QVERIFY(isValidUtf8(text));
        const nlohmann::json back = nlohmann::json::parse(text);
        QCOMPARE(back["label"].get<std::string>(), std::string("caf\\xE9"));
        QVERIFY(back.contains("k\\xFF"));
        QCOMPARE(back["k\\xFF"][1].get<std::string>(), std::string("b\\xC0"));
        QCOMPARE(back["k\\xFF"][2]["deep"].get<std::string>(),
                 std::string("\\xED\\xA0\\x80"));  // a surrogate is not UTF-8
    }

    // A run whose label, init file and model folder are Latin-1 bytes: its manifest is stored
    // (escaped) and read back, instead of nlohmann's type_error 316 throwing the run away.
    void latin1ManifestIsStored() {
        RunRecord r = sampleRecord();
        r.config.label = "caf\xE9";
        r.config.initImage = "/photos/\xE9t\xE9.png";
        r.config.model = "/models/mod\xE8le";
        r.modelName = "mod\xE8le";
        r.messages = {"note about /models/mod\xE8le"};
        QVERIFY_THROWS_EXCEPTION(nlohmann::json::type_error, (void)manifestJson(r).dump(2));
        const std::string text = jsonText(manifestJson(r), 2);
        QVERIFY(isValidUtf8(text));
        const RunRecord back = runRecordFromManifest(nlohmann::json::parse(text));
        QCOMPARE(back.config.label, std::string("caf\\xE9"));
        QCOMPARE(back.config.initImage, std::string("/photos/\\xE9t\\xE9.png"));
        QCOMPARE(back.config.model, std::string("/models/mod\\xE8le"));
        QCOMPARE(back.modelName, std::string("mod\\xE8le"));
        QCOMPARE(back.messages, std::vector<std::string>{"note about /models/mod\\xE8le"});
        QCOMPARE(back.runId, r.runId);
        QCOMPARE(back.batches.size(), r.batches.size());
    }

    void sha256Vectors() {
        QCOMPARE(sha256Hex("abc", 3), std::string("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
        const std::string m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
        QCOMPARE(m448.size() * 8, std::size_t(448));
        QCOMPARE(sha256Hex(m448.data(), m448.size()),
                 std::string("248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
        QCOMPARE(sha256Hex("", 0), std::string("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
        const std::string m896 =
            "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstno"
            "pqrstu";
        QCOMPARE(sha256Hex(m896.data(), m896.size()),
                 std::string("cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"));
        const std::string million(1000000, 'a');
        QCOMPARE(sha256Hex(million.data(), million.size()),
                 std::string("cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
        // Streaming in uneven pieces (crossing block boundaries) gives the same digest.
        Sha256 h;
        std::size_t pos = 0, piece = 1;
        while (pos < million.size()) {
            const std::size_t take = std::min(piece, million.size() - pos);
            h.update(million.data() + pos, take);
            pos += take;
            piece = piece * 3 % 1000 + 1;
        }
        QCOMPARE(h.hexDigest(), std::string("cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
        QVERIFY_THROWS_EXCEPTION(std::logic_error, h.update("x", 1));
        // Padding edge: 55 and 56 bytes (the length does / does not fit in the first block).
        QCOMPARE(sha256Hex(std::string(55, 'a').data(), 55),
                 std::string("9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"));
        QCOMPARE(sha256Hex(std::string(56, 'a').data(), 56),
                 std::string("b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"));
    }

    void runIds() {
        const QString a = QString::fromStdString(newRunId()), b = QString::fromStdString(newRunId());
        const QRegularExpression pattern("^\\d{8}-\\d{6}-[0-9a-f]{8}$");
        QVERIFY2(pattern.match(a).hasMatch(), qPrintable(a));
        QVERIFY(a != b);
    }
};

QTEST_GUILESS_MAIN(TestRunRecordIO)
#include "tst_runrecordio.moc"
