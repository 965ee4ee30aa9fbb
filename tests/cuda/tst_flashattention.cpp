// The fused attention kernel (kernels/ops/FlashAttention.cuh) through the CUDA
// backend's lowering, against the float32 CPU reference:
//  - the attention shapes of the supported models, fp16 and bf16 at the per-op tolerances of
//    tst_backendops (fp32 stays on the blocked path; checked too): SD 1.x self-attention with
//    head dims 40 (4,096 tokens; 900, not a multiple of the 64-query block, batch 3), 80 and
//    160; SD 2.x head dim 64 over 9,216 tokens; SDXL 10 heads of 64; head dim 128; head dim 8
//    (the small test UNet's); cross-attention against 77 (CLIP-L 768, OpenCLIP-bigG 2048),
//    154 and 231 context tokens (OpenCLIP-H 1024); CLIP's causal self-attention (77 tokens,
//    64 and 160 wide heads); pixel attention over a feature map with several heads (Q, K and V
//    interleaved in one buffer); each with the fused path forced (TESSERA_CUDA_FLASH=1) and
//    checked as the one taken (CudaBackend::attentionPaths); head dims up to 80 also with 128
//    query rows per block in 4 warps (=128) and in 8 warps (=128w8). Inputs are N(0, 2^2) so
//    that the softmax is peaked and the running maximum moves between key blocks;
//  - the pixel models' one 512-wide head stays blocked (shared memory) and says why;
//  - a run of fewer images than prepared;
//  - TESSERA_CUDA_FLASH: bad values refused naming it, the value recorded; =0 keeps the blocked
//    path (and its float32 scores, which the fused plan does not allocate);
//  - auto: both paths (the fused kernel at each tiling) timed at prepare, the fastest taken and
//    stored in the tuning cache, the
//    cached choice reused by the next backend (same bits), a damaged cached choice refused and
//    timed again.
// Perf mode (TESSERA_FLASH_PERF=1): per SD shape and precision, both paths' GPU time for
// softmax(Q K^T) V alone (CUDA events, median of 10, at prepare) and their TFLOP/s;
// TESSERA_FLASH_PERF_BATCH sets the batch (default 2). Device tests skip without a device.
#include <QtTest/QtTest>

#include <QTemporaryDir>

#include <cuda_fp16.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/cpu/CpuBackend.h"
#include "core/formats/ModelWeights.h"
#include "core/formats/TuningCache.h"
#include "core/graph/ModelGraph.h"
#include "kernels/backend/AttentionPlan.h"
#include "kernels/backend/CudaBackend.h"
#include "kernels/device/DeviceResources.h"
#include "kernels/ops/FillUniform.cuh"
#include "kernels/ops/FlashAttention.cuh"
#include "tests/cuda/CudaTestSupport.h"
#include "tests/cuda/OutputComparison.h"

using namespace tessera;
using tessera::testing::normalInputs;
using tessera::testing::opTolerance;
using tessera::testing::precisionName;
using tessera::testing::runGraph;
using tessera::testing::ScopedEnv;

namespace {

constexpr float kInputStd = 2.0f;

// One Attention op: over the tokens of a square tile (tile^2 queries), over a fixed token count
// (`tokens` > 0: causal, CLIP), or over a feature map (pixel attention); with a context of
// `contextTokens` x `contextChannels` for cross-attention.
struct AttentionCase {
    const char* name;
    int channels = 0, heads = 1, tile = 1;
    int tokens = 0;  // > 0: a fixed count, causal
    int contextTokens = 0, contextChannels = 0;
    bool featureMap = false;
    int batch = 2;
    bool fused = true;  // the fused kernel takes it (fp16/bf16)
};

const std::vector<AttentionCase>& cases() {
    static const std::vector<AttentionCase> all = {
        {"sd15 self d40 4096", 320, 8, 64},
        {"sd15 self d40 900 batch 3", 320, 8, 30, 0, 0, 0, false, 3},
        {"sd21 self d64 9216 batch 1", 320, 5, 96, 0, 0, 0, false, 1},
        {"sdxl self d64 1024", 640, 10, 32},
        {"self d80 961", 640, 8, 31},
        {"sd15 self d160 256", 1280, 8, 16},
        {"self d160 324", 1280, 8, 18},
        {"self d128 1089", 256, 2, 33},
        {"sd15 cross d40 4096 x 77x768", 320, 8, 64, 0, 77, 768},
        {"sd21 cross d64 2304 x 231x1024", 320, 5, 48, 0, 231, 1024},
        {"sdxl cross d64 1024 x 77x2048", 640, 10, 32, 0, 77, 2048},
        {"sd15 cross d160 64 x 154x768", 1280, 8, 8, 0, 154, 768},
        {"clip-l causal d64 77", 768, 12, 64, 77},
        {"causal d160 77", 320, 2, 64, 77},
        {"pixel d40 900, 8 heads", 320, 8, 30, 0, 0, 0, true},
        {"pixel d8 144, 6 heads", 48, 6, 12, 0, 0, 0, true},
        {"pixel d512 256, one head", 512, 1, 16, 0, 0, 0, true, 2, false},
    };
    return all;
}

// The case's attention op, `repeat` times in a chain (each op reading the previous one's output).
ModelGraph attentionGraph(const AttentionCase& c, int repeat = 1) {
    ModelGraph g;
    const int C = c.channels;
    int x = -1;
    if (c.featureMap)
        x = g.addInput("x", ValueKind::FeatureMap, C);
    else if (c.tokens > 0)
        x = g.addTokenInput("x", c.tokens, C);
    else
        x = g.addInput("x", ValueKind::Tokens, C);
    const int context = c.contextTokens > 0 ? g.addTokenInput("context", c.contextTokens, c.contextChannels) : -1;
    const std::int64_t kv = c.contextTokens > 0 ? c.contextChannels : C;
    for (int r = 0; r < repeat; ++r) {
        GraphOp op;
        op.kind = OpKind::Attention;
        op.name = r == 0 ? "attn" : "attn" + std::to_string(r);
        op.heads = c.heads;
        op.input = x;
        op.input2 = context;
        op.causal = c.tokens > 0;
        // SD's transformer attention has no q/k/v biases; pixel attention and CLIP have them.
        op.qkvBias = c.featureMap || c.tokens > 0;
        op.params.push_back(g.addParam(op.name + ".to_q.weight", {C, C}));
        if (op.qkvBias) op.params.push_back(g.addParam(op.name + ".to_q.bias", {C}));
        for (const char* p : {".to_k", ".to_v"}) {
            op.params.push_back(g.addParam(op.name + p + ".weight", {C, kv}));
            if (op.qkvBias) op.params.push_back(g.addParam(op.name + p + ".bias", {C}));
        }
        op.params.push_back(g.addParam(op.name + ".to_out.0.weight", {C, C}));
        op.params.push_back(g.addParam(op.name + ".to_out.0.bias", {C}));
        x = g.addOp(op);
    }
    g.markOutput(x);
    return g;
}

QString describe(const CudaBackend::AttentionPath& p) {
    return QString("%1: %2 (%3), fused %4 ms, blocked %5 ms")
        .arg(QString::fromStdString(p.op), p.fused ? "fused" : "blocked", QString::fromStdString(p.reason))
        .arg(p.fusedMs)
        .arg(p.blockedMs);
}

// The attention choices a tuning cache file holds ("attention ..." op keys -> choice).
std::map<std::string, std::string> attentionChoices(const std::string& file) {
    std::ifstream in(file);
    const nlohmann::json j = nlohmann::json::parse(in);
    std::map<std::string, std::string> found;
    for (const auto& [context, ops] : j.at("contexts").items())
        for (const auto& [op, choice] : ops.items())
            if (op.rfind("attention ", 0) == 0) found[op] = choice.get<std::string>();
    return found;
}

}  // namespace

class TestFlashAttention : public QObject {
    Q_OBJECT

    std::map<int, std::vector<float>> reference_;  // CPU output per case

    const std::vector<float>& reference(int index, const ModelGraph& g, const TensorMap& w,
                                        const std::vector<std::vector<float>>& in) {
        auto it = reference_.find(index);
        if (it == reference_.end()) {
            CpuBackend cpu;
            const AttentionCase& c = cases()[static_cast<std::size_t>(index)];
            it = reference_.emplace(index, runGraph(cpu, g, w, c.batch, c.tile, in).at(0)).first;
        }
        return it->second;
    }

private slots:
    // Each case at each precision with the fused kernel forced at 64 query rows per block
    // (TESSERA_CUDA_FLASH=1); fp16/bf16 cases whose head dim offers them also at 128 rows in 4
    // warps of two m16 tiles (=128) and in 8 warps (=128w8).
    void matchesCpu_data() {
        QTest::addColumn<int>("index");
        QTest::addColumn<int>("precision");
        QTest::addColumn<QString>("flash");
        for (std::size_t i = 0; i < cases().size(); ++i)
            for (Precision p : {Precision::FP16, Precision::BF16, Precision::FP32}) {
                const AttentionCase& c = cases()[i];
                QTest::newRow((std::string(c.name) + " " + std::string(precisionName(p))).c_str())
                    << static_cast<int>(i) << static_cast<int>(p) << QString("1");
                if (p == Precision::FP32 || !c.fused || flashTilings(c.channels / c.heads).size() < 3) continue;
                for (const char* wide : {"128", "128w8"})
                    QTest::newRow((std::string(c.name) + " " + std::string(precisionName(p)) + " " + wide).c_str())
                        << static_cast<int>(i) << static_cast<int>(p) << QString(wide);
            }
    }
    void matchesCpu() {
        REQUIRE_DEVICE();
        QFETCH(int, index);
        QFETCH(int, precision);
        QFETCH(QString, flash);
        const AttentionCase& c = cases()[static_cast<std::size_t>(index)];
        const Precision prec = static_cast<Precision>(precision);
        const ModelGraph g = attentionGraph(c);
        const TensorMap w = randomTensors(g.parameterList(), 40 + static_cast<unsigned>(index));
        const auto in = normalInputs(g, c.batch, c.tile, 7, kInputStd);
        const std::vector<float>& ref = reference(index, g, w, in);

        ScopedEnv env("TESSERA_CUDA_FLASH", flash.toStdString().c_str());
        CudaBackend gpu(prec);
        const std::vector<float> out = runGraph(gpu, g, w, c.batch, c.tile, in).at(0);
        const auto paths = gpu.attentionPaths();
        QCOMPARE(paths.size(), std::size_t(1));
        const bool fused = c.fused && prec != Precision::FP32;
        QVERIFY2(paths[0].fused == fused, qPrintable(describe(paths[0])));
        if (fused) {
            QCOMPARE(paths[0].reason, "TESSERA_CUDA_FLASH=" + flash.toStdString());
            QCOMPARE(paths[0].blockQueries, flash == "1" ? 64 : 128);
            QCOMPARE(paths[0].warps, flash == "128w8" ? 8 : 4);
        }
        if (prec == Precision::FP32) QVERIFY2(paths[0].reason.find("fp32") == 0, qPrintable(describe(paths[0])));
        if (!c.fused && prec != Precision::FP32)
            QVERIFY2(paths[0].reason.find("head dim 512") == 0, qPrintable(describe(paths[0])));
        const QString summary = QString::fromStdString(gpu.planSummary());
        QVERIFY2(summary.contains(fused ? "attn: fused (head dim" : "attn: blocked, query block"), qPrintable(summary));
        if (fused && flash != "1")
            QVERIFY2(summary.contains(flash == "128" ? "128 queries x 64 keys per block, 4 warps of 32 rows"
                                                     : "128 queries x 64 keys per block, 8 warps"),
                     qPrintable(summary));
        const QString bad = tessera::testing::outputMismatch(ref, out, opTolerance(prec),
                                                             QString("%1 %2").arg(c.name, precisionName(prec)), true);
        QVERIFY2(bad.isEmpty(), qPrintable(bad));
    }

    // The kernel alone (no cuBLAS projections: compute-sanitizer's racecheck runs it at full SD
    // shapes, where it cannot run cuBLAS's sm_90 GEMMs) on uniform noise: every tiling the head
    // dim offers gives the outputs of the 64-row tiling within fp16 rounding, and all are finite.
    void tilingsAgreeOnTheKernelAlone_data() {
        QTest::addColumn<int>("heads");
        QTest::addColumn<int>("headDim");
        QTest::addColumn<int>("queries");
        QTest::addColumn<int>("keys");
        QTest::addColumn<bool>("causal");
        QTest::newRow("sd15 self d40 4096") << 8 << 40 << 4096 << 4096 << false;
        QTest::newRow("sd15 cross d40 4096 x 77") << 8 << 40 << 4096 << 77 << false;
        QTest::newRow("sdxl self d64 1024") << 10 << 64 << 1024 << 1024 << false;
        QTest::newRow("sd21 self d64 2304") << 5 << 64 << 2304 << 2304 << false;
        QTest::newRow("self d80 1000") << 8 << 80 << 1000 << 1000 << false;
        QTest::newRow("clip causal d64 77") << 12 << 64 << 77 << 77 << true;
        QTest::newRow("sd15 self d160 256") << 8 << 160 << 256 << 256 << false;
    }
    void tilingsAgreeOnTheKernelAlone() {
        REQUIRE_DEVICE();
        QFETCH(int, heads);
        QFETCH(int, headDim);
        QFETCH(int, queries);
        QFETCH(int, keys);
        QFETCH(bool, causal);
        const int batch = 2, width = heads * headDim;
        const std::size_t qElems = std::size_t(batch) * queries * width, kvElems = std::size_t(batch) * keys * width;
        DeviceBuffer q(qElems * 2), k(kvElems * 2), v(kvElems * 2);
        launchFillUniform(DType::F16, q.data(), static_cast<long long>(qElems), 11, 3.0f, nullptr);
        launchFillUniform(DType::F16, k.data(), static_cast<long long>(kvElems), 12, 3.0f, nullptr);
        launchFillUniform(DType::F16, v.data(), static_cast<long long>(kvElems), 13, 1.0f, nullptr);
        FlashAttentionArgs a;
        a.dtype = DType::F16;
        a.q = q.data();
        a.k = k.data();
        a.v = v.data();
        a.qRow = a.oRow = width;
        a.kRow = a.vRow = width;
        a.qImage = a.oImage = static_cast<long long>(queries) * width;
        a.kImage = a.vImage = static_cast<long long>(keys) * width;
        a.batch = batch;
        a.heads = heads;
        a.queries = queries;
        a.keys = keys;
        a.headDim = headDim;
        a.scale = 1.0f / std::sqrt(static_cast<float>(headDim));
        a.causal = causal;
        std::vector<std::vector<float>> outs;
        for (FlashTiling t : flashTilings(headDim)) {
            DeviceBuffer o(qElems * 2);
            TESSERA_CHECK(cudaMemset(o.data(), 0xFF, o.bytes()));  // NaN poison
            a.o = o.data();
            a.blockQueries = t.blockQueries;
            a.warps = t.warps;
            launchFlashAttention(a, nullptr);
            TESSERA_CHECK(cudaDeviceSynchronize());
            std::vector<__half> host(qElems);
            TESSERA_CHECK(cudaMemcpy(host.data(), o.data(), o.bytes(), cudaMemcpyDeviceToHost));
            std::vector<float> f(qElems);
            for (std::size_t i = 0; i < qElems; ++i) {
                f[i] = __half2float(host[i]);
                if (!std::isfinite(f[i]))
                    QFAIL(qPrintable(QString("%1/%2w: element %3 not finite").arg(t.blockQueries).arg(t.warps).arg(i)));
            }
            outs.push_back(std::move(f));
        }
        for (std::size_t i = 1; i < outs.size(); ++i) {
            const QString bad = tessera::testing::outputMismatch(outs[0], outs[i], opTolerance(Precision::FP16),
                                                                 QString("tiling %1").arg(i), true);
            QVERIFY2(bad.isEmpty(), qPrintable(bad));
        }
    }

    // Prepared for 3 images, run for 2: the first two images' outputs, from the fused kernel.
    void fewerImagesThanPrepared() {
        REQUIRE_DEVICE();
        const int index = 1;  // sd15 self d40 900 batch 3
        const AttentionCase& c = cases()[index];
        const ModelGraph g = attentionGraph(c);
        const TensorMap w = randomTensors(g.parameterList(), 40 + index);
        const auto in = normalInputs(g, c.batch, c.tile, 7, kInputStd);
        const std::vector<float>& ref = reference(index, g, w, in);
        ScopedEnv env("TESSERA_CUDA_FLASH", "1");
        for (Precision p : {Precision::FP16, Precision::BF16}) {
            CudaBackend gpu(p);
            const std::vector<float> out = runGraph(gpu, g, w, c.batch, c.tile, in, 2).at(0);
            QVERIFY(gpu.attentionPaths().at(0).fused);
            const std::vector<float> first(ref.begin(), ref.begin() + static_cast<std::ptrdiff_t>(out.size()));
            const QString bad = tessera::testing::outputMismatch(first, out, opTolerance(p), precisionName(p), true);
            QVERIFY2(bad.isEmpty(), qPrintable(bad));
        }
    }

    // The setting: a bad value is refused naming it (before any device is touched), a good one
    // recorded with the other settings.
    void flashSetting() {
        for (const char* bad : {"2", "yes", "on", "00", " 1", "auto ", "64", "128w4", "256"}) {
            ScopedEnv env("TESSERA_CUDA_FLASH", bad);
            try {
                CudaBackend b(Precision::FP16);
                QFAIL(qPrintable(QString("TESSERA_CUDA_FLASH=%1 was taken").arg(bad)));
            } catch (const std::invalid_argument& e) {
                QVERIFY2(QString(e.what()).startsWith("TESSERA_CUDA_FLASH: '") &&
                             QString(e.what()).contains("give 0 (the blocked attention path), 1"),
                         e.what());
            }
        }
        REQUIRE_DEVICE();
        for (const char* good : {"0", "1", "128", "128w8", "auto"}) {
            ScopedEnv env("TESSERA_CUDA_FLASH", good);
            CudaBackend b(Precision::FP16);
            const ModelGraph g = attentionGraph(cases()[3]);
            b.prepareGraph(g, randomTensors(g.parameterList(), 5), 1, 32, 32);
            QCOMPARE(b.tuningInfo().settings.at("TESSERA_CUDA_FLASH"), std::string(good));
        }
    }

    // TESSERA_CUDA_FLASH=0: the blocked path, with its float32 scores in the plan; the fused
    // plan of the same graph holds no scores (at least their bytes less).
    void forcedBlocked() {
        REQUIRE_DEVICE();
        const int index = 2;  // sd21 self d64 9216
        const AttentionCase& c = cases()[index];
        const ModelGraph g = attentionGraph(c);
        const TensorMap w = randomTensors(g.parameterList(), 40 + index);
        const auto in = normalInputs(g, c.batch, c.tile, 7, kInputStd);
        const std::vector<float>& ref = reference(index, g, w, in);
        std::size_t blockedBytes = 0, fusedBytes = 0;
        for (const char* mode : {"0", "1"}) {
            ScopedEnv env("TESSERA_CUDA_FLASH", mode);
            CudaBackend gpu(Precision::FP16);
            const std::vector<float> out = runGraph(gpu, g, w, c.batch, c.tile, in).at(0);
            const auto path = gpu.attentionPaths().at(0);
            QCOMPARE(path.fused, mode[0] == '1');
            QCOMPARE(path.reason, std::string("TESSERA_CUDA_FLASH=") + mode);
            (path.fused ? fusedBytes : blockedBytes) = gpu.memoryPlan().activationsBytes;
            const QString bad = tessera::testing::outputMismatch(ref, out, opTolerance(Precision::FP16), mode, true);
            QVERIFY2(bad.isEmpty(), qPrintable(bad));
        }
        const long long queries = static_cast<long long>(c.tile) * c.tile;
        const AttentionPlan plan = planAttention(c.batch, c.heads, queries, queries, 2, std::size_t(256) << 20);
        qInfo("activations: blocked %zu bytes, fused %zu bytes, scores of one pass %zu bytes", blockedBytes, fusedBytes,
              plan.scoreBytes);
        QVERIFY(blockedBytes >= fusedBytes + plan.scoreBytes);
    }

    // auto: both paths timed (once for two ops of one shape), the faster taken and stored; the
    // next backend takes the cached choice (no timing, same bits); a damaged cached choice is
    // refused and timed again.
    void autoChoiceCached() {
        REQUIRE_DEVICE();
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const std::string file = dir.filePath("tuning.json").toStdString();
        const AttentionCase& c = cases()[8];  // sd15 cross d40 4096 x 77x768
        const ModelGraph g = attentionGraph(c, 2);
        const TensorMap w = randomTensors(g.parameterList(), 48);
        const auto in = normalInputs(g, c.batch, c.tile, 7, kInputStd);
        ScopedEnv env("TESSERA_CUDA_FLASH", "auto"), sdpa("TESSERA_CUDA_SDPA", "0");
        std::vector<float> first;
        bool fused = false;
        int rows = 0, warps = 0;
        {
            TuningCache cache(file);
            CudaBackend gpu(Precision::FP16);
            gpu.setTuningCache(&cache);
            first = runGraph(gpu, g, w, c.batch, c.tile, in).at(0);
            const auto paths = gpu.attentionPaths();
            QCOMPARE(paths.size(), std::size_t(2));
            const auto& path = paths[0];
            qInfo("%s", qPrintable(describe(path)));
            QCOMPARE(path.reason, std::string("timed"));
            QVERIFY(path.fusedMs > 0 && path.blockedMs > 0);
            QCOMPARE(path.fused, path.fusedMs < path.blockedMs);
            // Every tiling the head dim offers was timed; the fused time is the fastest's.
            QVERIFY2(QString::fromStdString(path.tilingTimes).startsWith("64/4w ") &&
                         path.tilingTimes.find("128/4w ") != std::string::npos &&
                         path.tilingTimes.find("128/8w ") != std::string::npos,
                     path.tilingTimes.c_str());
            fused = path.fused;
            rows = path.blockQueries;
            warps = path.warps;
            QCOMPARE(rows, fused ? rows : 0);
            QCOMPARE(paths[1].op, std::string("attn1"));
            QCOMPARE(paths[1].fused, fused);
            QCOMPARE(paths[1].fusedMs, path.fusedMs);  // the same measurement: timed once
            QCOMPARE(gpu.tuningInfo().misses, 1);
            QVERIFY(cache.save());
        }
        const auto stored = attentionChoices(file);
        QCOMPARE(stored.size(), std::size_t(1));
        const std::string text = !fused ? "blocked" : rows == 64 ? "fused" : warps == 8 ? "fused 128 8w" : "fused 128";
        QCOMPARE(stored.begin()->second, text);
        {
            TuningCache cache(file);
            CudaBackend gpu(Precision::FP16);
            gpu.setTuningCache(&cache);
            const std::vector<float> again = runGraph(gpu, g, w, c.batch, c.tile, in).at(0);
            const auto path = gpu.attentionPaths().at(0);
            QCOMPARE(path.reason, std::string("tuning cache"));
            QCOMPARE(path.fused, fused);
            QCOMPARE(path.blockQueries, rows);
            QCOMPARE(path.warps, warps);
            QCOMPARE(path.fusedMs, -1.0);
            QCOMPARE(gpu.tuningInfo().hits, 1);
            QCOMPARE(gpu.tuningInfo().misses, 0);
            QVERIFY(again == first);
        }
        // Damage the stored choice: refused with a warning, timed again, replaced.
        std::ifstream in0(file);
        nlohmann::json j = nlohmann::json::parse(in0);
        in0.close();
        for (auto& [context, ops] : j.at("contexts").items())
            for (auto& [op, choice] : ops.items())
                if (op.rfind("attention ", 0) == 0) choice = "bogus";
        std::ofstream(file) << j.dump();
        {
            TuningCache cache(file);
            CudaBackend gpu(Precision::FP16);
            gpu.setTuningCache(&cache);
            (void)runGraph(gpu, g, w, c.batch, c.tile, in);
            QCOMPARE(gpu.attentionPaths().at(0).reason, std::string("timed"));
            QCOMPARE(gpu.tuningInfo().rejected, 1);
            const auto warnings = gpu.tuningWarnings();
            QVERIFY(!warnings.empty() && warnings[0].find("'bogus'") != std::string::npos &&
                    warnings[0].find("not an attention path") != std::string::npos);
        }
    }

    // cuDNN's fused attention (kernels/backend/CudnnSdpa.h) forced (TESSERA_CUDA_SDPA=1) on every
    // non-causal case it may take, fp16 and bf16, against the CPU at the fused kernel's
    // tolerances. A loaded cuDNN of 9.13 or later must take the 64-wide heads (its flash
    // attention's home shape); other head dims where it offers a plan (the reason is printed
    // where it does not).
    void cudnnMatchesCpu_data() {
        QTest::addColumn<int>("index");
        QTest::addColumn<int>("precision");
        for (std::size_t i = 0; i < cases().size(); ++i)
            for (Precision p : {Precision::FP16, Precision::BF16}) {
                const AttentionCase& c = cases()[i];
                if (!c.fused || c.tokens > 0) continue;
                QTest::newRow((std::string(c.name) + " " + std::string(precisionName(p))).c_str())
                    << static_cast<int>(i) << static_cast<int>(p);
            }
    }
    void cudnnMatchesCpu() {
        REQUIRE_DEVICE();
        QFETCH(int, index);
        QFETCH(int, precision);
        const AttentionCase& c = cases()[static_cast<std::size_t>(index)];
        const Precision prec = static_cast<Precision>(precision);
        const ModelGraph g = attentionGraph(c);
        const TensorMap w = randomTensors(g.parameterList(), 40 + static_cast<unsigned>(index));
        const auto in = normalInputs(g, c.batch, c.tile, 7, kInputStd);
        const std::vector<float>& ref = reference(index, g, w, in);

        ScopedEnv env("TESSERA_CUDA_SDPA", "1"), flash("TESSERA_CUDA_FLASH", "1");
        CudaBackend gpu(prec);
        std::vector<float> out = runGraph(gpu, g, w, c.batch, c.tile, in).at(0);
        const auto path = gpu.attentionPaths().at(0);
        qInfo("%s: cuDNN %s [%s]", c.name, path.cudnn.empty() ? "not taken" : path.cudnn.c_str(),
              path.cudnnReason.c_str());
        const bool sdpaNode = cudnnGetVersion() >= 91300;
        if (path.cudnn.empty()) {
            QVERIFY2(!path.cudnnReason.empty(), "not taken without a reason");
            QVERIFY2(!(sdpaNode && c.channels / c.heads == 64), path.cudnnReason.c_str());
            QSKIP(qPrintable("cuDNN offers no fused attention here: " + QString::fromStdString(path.cudnnReason)));
        }
        QCOMPARE(path.cudnnReason, std::string("TESSERA_CUDA_SDPA=1"));
        QVERIFY2(path.cudnn.rfind("cuDNN SDPA engine ", 0) == 0, path.cudnn.c_str());
        const QString summary = QString::fromStdString(gpu.planSummary());
        QVERIFY2(summary.contains(QString("at batch %1: cuDNN SDPA engine").arg(c.batch)), qPrintable(summary));
        const QString bad = tessera::testing::outputMismatch(
            ref, out, opTolerance(prec), QString("%1 %2 cuDNN").arg(c.name, precisionName(prec)), true);
        QVERIFY2(bad.isEmpty(), qPrintable(bad));
    }

    // cuDNN's plan is for the prepared batch: prepared for 3 images and run for 2, the own path
    // computes them (the same outputs as the CPU's first two images); run for 3, cuDNN.
    void cudnnAtThePreparedBatchOnly() {
        REQUIRE_DEVICE();
        const int index = 1;  // sd15 self d40 900 batch 3
        const AttentionCase& c = cases()[index];
        const ModelGraph g = attentionGraph(c);
        const TensorMap w = randomTensors(g.parameterList(), 40 + index);
        const auto in = normalInputs(g, c.batch, c.tile, 7, kInputStd);
        const std::vector<float>& ref = reference(index, g, w, in);
        ScopedEnv env("TESSERA_CUDA_SDPA", "1"), flash("TESSERA_CUDA_FLASH", "1");
        CudaBackend gpu(Precision::FP16);
        const std::vector<float> two = runGraph(gpu, g, w, c.batch, c.tile, in, 2).at(0);
        if (gpu.attentionPaths().at(0).cudnn.empty())
            QSKIP(qPrintable("cuDNN offers no fused attention here: " +
                             QString::fromStdString(gpu.attentionPaths().at(0).cudnnReason)));
        const std::vector<float> first(ref.begin(), ref.begin() + static_cast<std::ptrdiff_t>(two.size()));
        QString bad = tessera::testing::outputMismatch(first, two, opTolerance(Precision::FP16), "2 of 3", true);
        QVERIFY2(bad.isEmpty(), qPrintable(bad));
        const std::vector<float> three = runGraph(gpu, g, w, c.batch, c.tile, in).at(0);
        bad = tessera::testing::outputMismatch(ref, three, opTolerance(Precision::FP16), "3 of 3", true);
        QVERIFY2(bad.isEmpty(), qPrintable(bad));
    }

    // auto: cuDNN timed beside the own path (once per shape), taken only where faster, the
    // choice stored under the shape's key + " cudnn" ("own" or its plan); the next backend takes
    // it from the cache with the same bits; TESSERA_CUDA_FLASH forced keeps cuDNN out.
    void cudnnAutoChoiceCached() {
        REQUIRE_DEVICE();
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const std::string file = dir.filePath("tuning.json").toStdString();
        const AttentionCase& c = cases()[3];  // sdxl self d64 1024
        const ModelGraph g = attentionGraph(c, 2);
        const TensorMap w = randomTensors(g.parameterList(), 43);
        const auto in = normalInputs(g, c.batch, c.tile, 7, kInputStd);
        ScopedEnv flash("TESSERA_CUDA_FLASH", "auto"), sdpa("TESSERA_CUDA_SDPA", "auto");
        std::vector<float> first;
        std::string taken;
        {
            TuningCache cache(file);
            CudaBackend gpu(Precision::FP16);
            gpu.setTuningCache(&cache);
            first = runGraph(gpu, g, w, c.batch, c.tile, in).at(0);
            const auto paths = gpu.attentionPaths();
            QCOMPARE(paths.size(), std::size_t(2));
            const auto& path = paths[0];
            qInfo("%s; cuDNN %.4f ms, own %.4f ms: %s [%s]", qPrintable(describe(path)), path.cudnnMs, path.ownMs,
                  path.cudnn.c_str(), path.cudnnReason.c_str());
            if (cudnnGetVersion() < 91300) QSKIP("cuDNN before 9.13 has no fused attention node");
            QCOMPARE(path.cudnnReason, std::string("timed"));
            QVERIFY(path.cudnnMs > 0 && path.ownMs > 0);
            QCOMPARE(!path.cudnn.empty(), path.cudnnMs < path.ownMs);
            QCOMPARE(paths[1].cudnnMs, path.cudnnMs);  // timed once per shape
            QCOMPARE(gpu.tuningInfo().misses, 2);      // the own path and cuDNN's
            taken = path.cudnn;
            QVERIFY(cache.save());
        }
        const auto stored = attentionChoices(file);
        QCOMPARE(stored.size(), std::size_t(2));
        const auto cudnnEntry = std::find_if(stored.begin(), stored.end(), [](const auto& kv) {
            return kv.first.size() > 6 && kv.first.compare(kv.first.size() - 6, 6, " cudnn") == 0;
        });
        QVERIFY(cudnnEntry != stored.end());
        QVERIFY2(taken.empty() ? cudnnEntry->second == "own" : cudnnEntry->second.rfind("engine=", 0) == 0,
                 cudnnEntry->second.c_str());
        {
            TuningCache cache(file);
            CudaBackend gpu(Precision::FP16);
            gpu.setTuningCache(&cache);
            const std::vector<float> again = runGraph(gpu, g, w, c.batch, c.tile, in).at(0);
            const auto path = gpu.attentionPaths().at(0);
            QCOMPARE(path.cudnnReason, std::string("tuning cache"));
            QCOMPARE(path.cudnn.empty(), taken.empty());
            QCOMPARE(path.cudnnMs, -1.0);
            QCOMPARE(gpu.tuningInfo().hits, 2);
            QVERIFY(again == first);
        }
        {
            ScopedEnv forced("TESSERA_CUDA_FLASH", "1");
            CudaBackend gpu(Precision::FP16);
            (void)runGraph(gpu, g, w, c.batch, c.tile, in);
            const auto path = gpu.attentionPaths().at(0);
            QVERIFY(path.cudnn.empty());
            QCOMPARE(path.cudnnReason, std::string("TESSERA_CUDA_FLASH=1 forces the own path"));
        }
    }

    void sdpaSetting() {
        for (const char* bad : {"2", "yes", "on", "cudnn", " 1", "auto "}) {
            ScopedEnv env("TESSERA_CUDA_SDPA", bad);
            try {
                CudaBackend b(Precision::FP16);
                QFAIL(qPrintable(QString("TESSERA_CUDA_SDPA=%1 was taken").arg(bad)));
            } catch (const std::invalid_argument& e) {
                QVERIFY2(QString(e.what()).startsWith("TESSERA_CUDA_SDPA: '") &&
                             QString(e.what()).contains("give 0 (never cuDNN's fused attention), 1"),
                         e.what());
            }
        }
        REQUIRE_DEVICE();
        // fp32 and a causal mask are refused by name; TESSERA_CUDA_SDPA=0 is recorded as the reason.
        {
            ScopedEnv env("TESSERA_CUDA_SDPA", "1");
            CudaBackend b(Precision::FP32);
            const ModelGraph g = attentionGraph(cases()[3]);
            b.prepareGraph(g, randomTensors(g.parameterList(), 5), 1, 32, 32);
            QVERIFY(b.attentionPaths().at(0).cudnn.empty());
        }
        {
            ScopedEnv env("TESSERA_CUDA_SDPA", "1");
            CudaBackend b(Precision::FP16);
            const ModelGraph g = attentionGraph(cases()[12]);  // clip-l causal
            b.prepareGraph(g, randomTensors(g.parameterList(), 5), 1, 64, 64);
            QCOMPARE(b.attentionPaths().at(0).cudnnReason,
                     std::string("causal mask (not built for cuDNN's fused attention)"));
        }
        {
            ScopedEnv env("TESSERA_CUDA_SDPA", "0");
            CudaBackend b(Precision::FP16);
            const ModelGraph g = attentionGraph(cases()[3]);
            b.prepareGraph(g, randomTensors(g.parameterList(), 5), 1, 32, 32);
            QCOMPARE(b.attentionPaths().at(0).cudnnReason, std::string("TESSERA_CUDA_SDPA=0"));
            QCOMPARE(b.tuningInfo().settings.at("TESSERA_CUDA_SDPA"), std::string("0"));
        }
    }

    void perf() {
        if (!qEnvironmentVariableIsSet("TESSERA_FLASH_PERF")) QSKIP("set TESSERA_FLASH_PERF=1 to measure");
        REQUIRE_DEVICE();
        const int batch = qEnvironmentVariableIsSet("TESSERA_FLASH_PERF_BATCH")
                              ? std::max(1, qEnvironmentVariableIntValue("TESSERA_FLASH_PERF_BATCH"))
                              : 2;
        ScopedEnv env("TESSERA_CUDA_FLASH", "auto");
        std::printf("softmax(Q K^T) V alone, batch %d, median of 10 (CUDA events at prepare)\n", batch);
        std::printf("%-32s %-5s %10s %10s %10s %9s %9s %9s %8s %s\n", "shape", "prec", "fused ms", "blocked ms",
                    "cuDNN ms", "fused TF/s", "block TF/s", "cuDNN TF/s", "speedup", "tiling");
        for (const AttentionCase& c : cases()) {
            if (!c.fused) continue;
            const ModelGraph g = attentionGraph(c);
            const TensorMap w = randomTensors(g.parameterList(), 5);
            for (Precision p : {Precision::FP16, Precision::BF16}) {
                CudaBackend gpu(p);  // no tuning cache: every prepare times both paths
                gpu.prepareGraph(g, w, batch, c.tile, c.tile);
                const auto path = gpu.attentionPaths().at(0);
                const QString summary = QString::fromStdString(gpu.planSummary());
                const qsizetype at = summary.indexOf("attn: ");
                std::printf("%-32s %-5s %10.4f %10.4f %10.4f %9.1f %9.1f %9.1f %7.2fx %s\n", c.name, precisionName(p),
                            path.fusedMs, path.blockedMs, path.cudnnMs, path.flops / (path.fusedMs * 1e-3) / 1e12,
                            path.flops / (path.blockedMs * 1e-3) / 1e12,
                            path.cudnnMs > 0 ? path.flops / (path.cudnnMs * 1e-3) / 1e12 : 0.0,
                            path.blockedMs / path.fusedMs, qPrintable(summary.mid(at, summary.indexOf('\n', at) - at)));
            }
        }
    }
};

QTEST_GUILESS_MAIN(TestFlashAttention)
#include "tst_flashattention.moc"
