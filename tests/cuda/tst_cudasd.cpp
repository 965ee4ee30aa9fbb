// The CUDA pieces Stable Diffusion needs beside the UNet's ops:
//  - attention scores in query blocks within a budget (kernels/backend/AttentionPlan.h): the sizing,
//    and TESSERA_CUDA_ATTENTION_MIB checked and recorded (no device needed);
//  - the SD VAE decoder's mid-block attention (one head of 512 channels) where its scores do not
//    fit whole: a 1024 x 1024 tile (latent 128: 16,384 pixels, 1 GiB of float32 scores per image)
//    against the CPU at the default budget (blocks of 4,096 query rows) and at 12 MiB (blocks of
//    192, the last of 64), fp32/fp16/bf16 at the per-op tolerances of tst_backendops; and a
//    2048 x 2048 tile (65,536 pixels, 16 GiB whole) planned in 1,024-row blocks and run;
//  - whole CLIP text encoders (CLIP-L, 12 layers, pooled at the largest id; OpenCLIP-H, 23 of 24
//    layers as SD 2.x runs it, pooled at the first id 49407) on CUDA against the CPU at those
//    tolerances, and ids outside the vocabulary refused with the CPU's words;
//  - tessera-cli bench --shape sd15 on the device, its CSV read back.
// Device tests skip where no CUDA device is present.
#include <QtTest/QtTest>

#include <QFile>
#include <QTemporaryDir>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/cli/BenchCommand.h"
#include "core/cpu/CpuBackend.h"
#include "core/formats/ModelWeights.h"
#include "core/models/clip/ClipTextGraph.h"
#include "core/models/vae/VaeGraph.h"
#include "kernels/backend/AttentionPlan.h"
#include "kernels/backend/CudaBackend.h"
#include "tests/app/CsvRecord.h"
#include "tests/cuda/CudaTestSupport.h"
#include "tests/cuda/OutputComparison.h"

using namespace tessera;

namespace {

using tessera::testing::opTolerance;
using tessera::testing::precisionName;

using tessera::testing::normalInputs;
using tessera::testing::runGraph;
using tessera::testing::ScopedEnv;

// The SD VAE decoder's mid-block attention alone (GroupNorm'd input, residual), its weights.
ModelGraph vaeAttentionGraph() {
    const VaeConfig c =
        vaeConfigFromJson(nlohmann::json::parse(R"({"block_out_channels": [128, 256, 512, 512], "layers_per_block": 2,
        "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D"],
        "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D"]})"));
    const ModelGraph decoder = vaeDecoderExecutionGraph(c);
    for (std::size_t i = 0; i < decoder.ops().size(); ++i)
        if (decoder.ops()[i].kind == OpKind::Attention) return decoder.extract(i);
    throw std::logic_error("the SD VAE decoder has no attention");
}

ClipTextConfig clipConfig(bool openClip) {
    ClipTextConfig c;
    c.hiddenSize = openClip ? 1024 : 768;
    c.intermediateSize = 4 * c.hiddenSize;
    c.numAttentionHeads = openClip ? 16 : 12;
    c.numHiddenLayers = openClip ? 24 : 12;
    c.hiddenAct = openClip ? ClipActivation::Gelu : ClipActivation::QuickGelu;
    c.eosTokenId = openClip ? 49407 : 2;
    return c;
}

// Two prompts as SD's tokenizers frame them: BOS, words, EOS, then padding (row 0: EOS, as
// SD 1.x pads; row 1: id 0, as OpenCLIP pads).
std::vector<float> promptIds(int words0, int words1) {
    std::vector<float> ids(2 * kClipTextTokens);
    std::mt19937 rng(3);
    std::uniform_int_distribution<int> word(0, 49405);
    for (int r = 0; r < 2; ++r) {
        const int words = r ? words1 : words0;
        float* row = ids.data() + r * kClipTextTokens;
        row[0] = 49406;
        for (int k = 1; k <= words; ++k) row[k] = static_cast<float>(word(rng));
        row[words + 1] = 49407;
        for (int k = words + 2; k < kClipTextTokens; ++k) row[k] = r ? 0.0f : 49407.0f;
    }
    return ids;
}

}  // namespace

class TestCudaSd : public QObject {
    Q_OBJECT

private slots:
    // Whole matrices while they fit (images batched with one head, heads with several), else
    // one head in blocks of query rows: multiples of 64 from 64 up, at least one row.
    void attentionPlanSizes() {
        // SD VAE at 2048 x 2048: 65,536 pixels, 256 KiB of scores per query row.
        AttentionPlan p = planAttention(1, 1, 65536, 65536, 2, 256u << 20);
        QCOMPARE(p.queryBlock, 1024);
        QCOMPARE(p.imagesPerPass, 1);
        QCOMPARE(p.headsPerPass, 1);
        QCOMPARE(p.scoreBytes, std::size_t(256) << 20);
        QCOMPARE(p.probBytes, std::size_t(128) << 20);
        QCOMPARE(p.passes(1, 1, 65536), 64LL);
        QVERIFY(p.blocked(65536));
        QCOMPARE(
            QString::fromStdString(p.describe(65536)),
            QStringLiteral(
                "query block 1024 of 65536, 1 head x 1 image per pass, scores 256.0 MiB + probabilities 128.0 MiB"));
        // 16,384 pixels at 12 MiB: 192 rows (not a divisor: 85 blocks of 192 and one of 64).
        p = planAttention(2, 1, 16384, 16384, 4, 12u << 20);
        QCOMPARE(p.queryBlock, 192);
        QCOMPARE(p.passes(2, 1, 16384), 2LL * 86);
        QVERIFY(p.scoreBytes <= (12u << 20));
        // A tile whose scores fit: images batched, as many as the budget holds.
        p = planAttention(8, 1, 1024, 1024, 2, 256u << 20);
        QCOMPARE(p.queryBlock, 1024);
        QCOMPARE(p.imagesPerPass, 8);
        QVERIFY(!p.blocked(1024));
        QCOMPARE(planAttention(100, 1, 1024, 1024, 2, 256u << 20).imagesPerPass, 64);
        // SD self-attention at latent 64 (4,096 tokens, 8 heads of 64 MiB): 4 heads per pass, whole;
        // at latent 128 (1 GiB per head): one head in blocks of 4,096.
        p = planAttention(4, 8, 4096, 4096, 2, 256u << 20);
        QCOMPARE(p.headsPerPass, 4);
        QCOMPARE(p.imagesPerPass, 1);
        QCOMPARE(p.queryBlock, 4096);
        p = planAttention(4, 8, 16384, 16384, 2, 256u << 20);
        QCOMPARE(p.headsPerPass, 1);
        QCOMPARE(p.queryBlock, 4096);
        QCOMPARE(p.passes(4, 8, 16384), 4LL * 8 * 4);
        // Cross-attention (77 keys) and CLIP (77 x 77) never block.
        QCOMPARE(planAttention(8, 20, 9216, 77, 2, 256u << 20).queryBlock, 9216);
        QCOMPARE(planAttention(2, 12, 77, 77, 2, 256u << 20).headsPerPass, 12);
        // Rounding to whole 64-row tiles, and the one-row floor.
        QCOMPARE(planAttention(1, 1, 16384, 16384, 2, 100 * 65536).queryBlock, 64);
        QCOMPARE(planAttention(1, 1, 16384, 16384, 2, 63 * 65536).queryBlock, 63);
        QCOMPARE(planAttention(1, 1, 65536, 65536, 2, 1024).queryBlock, 1);
        for (int bad : {0, -1}) {
            QVERIFY_THROWS_EXCEPTION(std::invalid_argument, planAttention(bad, 1, 16, 16, 2, 1 << 20));
            QVERIFY_THROWS_EXCEPTION(std::invalid_argument, planAttention(1, bad, 16, 16, 2, 1 << 20));
            QVERIFY_THROWS_EXCEPTION(std::invalid_argument, planAttention(1, 1, bad, 16, 2, 1 << 20));
            QVERIFY_THROWS_EXCEPTION(std::invalid_argument, planAttention(1, 1, 16, bad, 2, 1 << 20));
        }
    }

    // Any shape and budget: the scores of a pass stay within the budget (or one row), and the
    // passes cover every (image, head, query row) exactly once.
    void attentionPlanCoversEverything() {
        std::mt19937 rng(7);
        for (int i = 0; i < 2000; ++i) {
            const int batch = 1 + static_cast<int>(rng() % 16), heads = 1 + static_cast<int>(rng() % 24);
            const long long queries = 1 + rng() % 70000, keys = 1 + rng() % 70000;
            const std::size_t budget = 1 + rng() % (512u << 20), pe = 1 + rng() % 4;
            const AttentionPlan p = planAttention(batch, heads, queries, keys, pe, budget);
            const std::size_t row = static_cast<std::size_t>(keys) * 4;
            QVERIFY(p.queryBlock >= 1 && p.queryBlock <= queries);
            QVERIFY(p.imagesPerPass >= 1 && p.imagesPerPass <= batch && (heads == 1 || p.imagesPerPass == 1));
            QVERIFY(p.headsPerPass >= 1 && p.headsPerPass <= heads);
            QVERIFY(p.queryBlock == queries || (p.headsPerPass == 1 && p.imagesPerPass == 1));
            QVERIFY2(p.scoreBytes <= std::max(budget, row), qPrintable(QString::fromStdString(p.describe(queries))));
            QCOMPARE(p.probBytes, p.scoreBytes / 4 * pe);
            const long long covered = (static_cast<long long>(p.imagesPerPass) * p.headsPerPass * p.queryBlock) *
                                      p.passes(batch, heads, queries);
            QVERIFY(covered >= static_cast<long long>(batch) * heads * queries);
        }
    }

    // The budget is an environment setting: a bad value is refused naming it (before any device
    // is touched), a good one recorded with the other settings.
    void attentionBudgetSetting() {
        for (const char* bad : {"0", "abc", "12.5", "-3", "1048577", "99999999999"}) {
            ScopedEnv env("TESSERA_CUDA_ATTENTION_MIB", bad);
            try {
                CudaBackend b(Precision::FP16);
                QFAIL(qPrintable(QString("TESSERA_CUDA_ATTENTION_MIB=%1 was taken").arg(bad)));
            } catch (const std::invalid_argument& e) {
                QVERIFY2(QString(e.what()).startsWith("TESSERA_CUDA_ATTENTION_MIB: '") &&
                             QString(e.what()).contains("a whole number of MiB from 1 to 1048576"),
                         e.what());
            }
        }
        REQUIRE_DEVICE();
        ScopedEnv env("TESSERA_CUDA_ATTENTION_MIB", "12");
        CudaBackend b(Precision::FP16);
        const ModelGraph g = vaeAttentionGraph();
        b.prepareGraph(g, randomTensors(g.parameterList(), 5), 1, 256, 256);
        QCOMPARE(b.tuningInfo().settings.at("TESSERA_CUDA_ATTENTION_MIB"), std::string("12"));
    }

    void vaeAttentionInBlocks_data() {
        QTest::addColumn<QByteArray>("budget");
        QTest::addColumn<QString>("plan");
        QTest::newRow("default budget") << QByteArray() << "query block 4096 of 16384";
        QTest::newRow("12 MiB") << QByteArray("12") << "query block 192 of 16384";
    }
    void vaeAttentionInBlocks() {
        REQUIRE_DEVICE();
        QFETCH(QByteArray, budget);
        QFETCH(QString, plan);
        const ModelGraph g = vaeAttentionGraph();
        const TensorMap w = randomTensors(g.parameterList(), 5);
        const int tile = 1024, batch = 1;
        const auto in = normalInputs(g, batch, tile, 11);
        CpuBackend cpu;
        const std::vector<float> ref = runGraph(cpu, g, w, batch, tile, in).at(0);
        ScopedEnv env("TESSERA_CUDA_ATTENTION_MIB", budget);
        for (Precision p : {Precision::FP32, Precision::FP16, Precision::BF16}) {
            CudaBackend gpu(p);
            const std::vector<float> out = runGraph(gpu, g, w, batch, tile, in).at(0);
            const QString summary = QString::fromStdString(gpu.planSummary());
            QVERIFY2(summary.contains(plan), qPrintable(summary));
            // The whole score matrix (1 GiB in float32) is never allocated.
            if (!budget.isEmpty()) QVERIFY(gpu.memoryPlan().activationsBytes < (std::size_t(512) << 20));
            const QString bad = tessera::testing::outputMismatch(ref, out, opTolerance(p), precisionName(p), true);
            QVERIFY2(bad.isEmpty(), qPrintable(bad));
        }
    }

    // 2048 x 2048 pixels (65,536 latent pixels): planned in blocks, run, every output finite.
    void vaeAttentionAt2048() {
        REQUIRE_DEVICE();
        const ModelGraph g = vaeAttentionGraph();
        const TensorMap w = randomTensors(g.parameterList(), 5);
        CudaBackend gpu(Precision::FP16);
        const std::vector<float> out = runGraph(gpu, g, w, 1, 2048, normalInputs(g, 1, 2048, 3)).at(0);
        const QString summary = QString::fromStdString(gpu.planSummary());
        QVERIFY2(summary.contains("query block 1024 of 65536"), qPrintable(summary));
        QVERIFY(gpu.memoryPlan().activationsBytes < (std::size_t(4) << 30));  // 16 GiB whole
        QCOMPARE(std::count_if(out.begin(), out.end(), [](float v) { return !std::isfinite(v); }), 0L);
        QVERIFY(std::any_of(out.begin(), out.end(), [](float v) { return v != 0.0f; }));
    }

    void clipTextEncoderMatchesCpu_data() {
        QTest::addColumn<bool>("openClip");
        QTest::addColumn<int>("layers");
        QTest::newRow("clip-l, 12 layers, pooled at the largest id") << false << 12;
        QTest::newRow("open-clip-h, 23 of 24 layers, pooled at id 49407") << true << 23;
    }
    void clipTextEncoderMatchesCpu() {
        REQUIRE_DEVICE();
        QFETCH(bool, openClip);
        QFETCH(int, layers);
        const ClipTextConfig c = clipConfig(openClip);
        const ModelGraph g = fuseForExecution(buildClipTextGraph(c, layers));
        const TensorMap w = randomTensors(g.parameterList(), 9);
        const std::vector<std::vector<float>> in{promptIds(5, 30)};
        CpuBackend cpu;
        const auto ref = runGraph(cpu, g, w, 2, 64, in);
        for (Precision p : {Precision::FP32, Precision::FP16, Precision::BF16}) {
            CudaBackend gpu(p);
            const auto out = runGraph(gpu, g, w, 2, 64, in);
            for (std::size_t k = 0; k < out.size(); ++k) {
                const QString what =
                    QString("%1 %2").arg(precisionName(p), QString::fromStdString(g.value(g.outputs()[k]).name));
                const QString bad = tessera::testing::outputMismatch(ref[k], out[k], opTolerance(p), what, true);
                QVERIFY2(bad.isEmpty(), qPrintable(bad));
            }
        }
    }

    // An id outside the vocabulary (or not an integer) is refused before any work, with the
    // CPU backend's words; the backend runs the next good ids as if nothing had happened.
    void clipIdsRefusedAsOnCpu() {
        REQUIRE_DEVICE();
        ClipTextConfig c;
        c.vocabSize = 1000;
        c.hiddenSize = 64;
        c.intermediateSize = 128;
        c.numAttentionHeads = 2;
        c.numHiddenLayers = 1;
        c.bosTokenId = 998;
        c.eosTokenId = 999;
        const ModelGraph g = fuseForExecution(buildClipTextGraph(c, 1));
        const TensorMap w = randomTensors(g.parameterList(), 2);
        CpuBackend cpu;
        CudaBackend gpu(Precision::FP16);
        std::vector<float> good(2 * kClipTextTokens, 7.0f);
        std::vector<float> last(2 * kClipTextTokens * 64), pooled(2 * 64);
        for (Backend* b : std::initializer_list<Backend*>{&cpu, &gpu}) b->prepareGraph(g, w, 2, 64, 64);
        for (float badId : {1000.0f, 2.5f, -1.0f}) {
            std::vector<float> ids = good;
            ids[kClipTextTokens + 3] = badId;
            std::string words[2];
            int k = 0;
            for (Backend* b : std::initializer_list<Backend*>{&cpu, &gpu}) {
                try {
                    b->run({ids.data()}, 2, {last.data(), pooled.data()});
                } catch (const std::out_of_range& e) {
                    words[k] = e.what();
                }
                ++k;
            }
            QVERIFY2(words[0].find("row 1 position 3 holds id") != std::string::npos, words[0].c_str());
            QCOMPARE(words[1], words[0]);
        }
        std::fill(last.begin(), last.end(), std::numeric_limits<float>::quiet_NaN());
        gpu.run({good.data()}, 2, {last.data(), pooled.data()});
        QVERIFY(std::all_of(last.begin(), last.end(), [](float v) { return std::isfinite(v); }));
    }

    // tessera-cli bench --shape sd15 at one 512 x 512 tile, guidance on (a UNet batch of 2),
    // graphs off and tile: the CSV's arithmetic holds together.
    void sdBenchRuns() {
        REQUIRE_DEVICE();
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const std::string csvPath = dir.filePath(QStringLiteral("sd15.csv")).toStdString();
        std::ostringstream out, err;
        const int rc = runBenchCommand({"--shape", "sd15", "--size", "512", "--batch", "1", "--graphs", "off,tile",
                                        "--steps", "2", "--repeats", "3", "--warmup-steps", "1", "--tuning-cache",
                                        dir.filePath(QStringLiteral("tuning.json")).toStdString(), "--csv", csvPath},
                                       out, err);
        qInfo("%s%s", err.str().c_str(), out.str().c_str());
        QCOMPARE(rc, 0);
        QFile file(QString::fromStdString(csvPath));
        QVERIFY(file.open(QIODevice::ReadOnly));
        const QStringList lines = QString::fromUtf8(file.readAll()).split('\n', Qt::SkipEmptyParts);
        QCOMPARE(lines.size(), 3);
        QCOMPARE(lines[0], QString::fromStdString(sdBenchCsvHeader()));
        const QStringList header = lines[0].split(',');
        for (int i = 1; i < 3; ++i) {
            const QStringList f = tessera::testing::splitCsv(lines[i]);
            QCOMPARE(f.size(), header.size());
            auto col = [&](const char* name) { return f[header.indexOf(QLatin1String(name))]; };
            auto num = [&](const char* name) { return col(name).toDouble(); };
            QCOMPARE(col("engine"), QStringLiteral("tessera-cuda"));
            QCOMPARE(col("graphs"), i == 1 ? QStringLiteral("off") : QStringLiteral("tile"));
            QCOMPARE(col("tiles"), QStringLiteral("1"));
            QCOMPARE(col("unet_batch"), QStringLiteral("2"));
            QCOMPARE(col("forwards_per_step"), QStringLiteral("1"));
            QVERIFY2(num("forward_ms") > 0, qPrintable(lines[i]));
            QVERIFY(std::abs(num("seconds_per_step") - num("forward_ms") / 1000) <= 1e-3 * num("seconds_per_step"));
            QVERIFY(std::abs(num("seconds_per_image") - 2 * num("seconds_per_step")) <=
                    1e-3 * num("seconds_per_image"));
            QVERIFY(std::abs(num("unet_evals_per_s") * num("seconds_per_step") - 2) < 1e-2);
            const double tflops = num("gflop_per_eval") * 2 / num("seconds_per_step") / 1000;
            QVERIFY2(std::abs(num("tflops") - tflops) <= 2e-3 * tflops, qPrintable(lines[i]));
            QVERIFY2(num("peak_mib") > 1600, qPrintable(lines[i]));  // fp16 weights alone: 1,639 MiB
            if (!col("peak_tflops_assumed").isEmpty())
                QVERIFY2(num("fraction_of_peak") > 0 && num("fraction_of_peak") < 1, qPrintable(lines[i]));
        }
    }
};

QTEST_GUILESS_MAIN(TestCudaSd)
#include "tst_cudasd.moc"
