// CpuBackend's threads: the worker pool, the fixed GEMM blocks, results bit-identical for any
// thread count and tile batch (every model family's graph, and whole tiled runs), the blocked
// convolution and attention against direct double-precision loops, the `threads` setting, and
// (TESSERA_CPU_BENCH=1) where the time of a default-model forward goes.
#include <QtTest>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <numeric>
#include <random>
#include <thread>

#include "core/cpu/CpuBackend.h"
#include "core/cpu/CpuEngine.h"
#include "core/cpu/CpuTileDevice.h"
#include "core/graph/ModelGraph.h"
#include "core/models/clip/ClipTextConfig.h"
#include "core/models/clip/ClipTextGraph.h"
#include "core/models/sd/UNetCondConfig.h"
#include "core/models/sd/UNetCondGraph.h"
#include "core/models/unet/UNetGraph.h"
#include "core/models/unet/UNetModel.h"
#include "core/models/vae/VaeConfig.h"
#include "core/models/vae/VaeGraph.h"
#include "core/run/RunConfig.h"

using namespace tessera;

namespace {

std::vector<float> randomVector(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

int envInt(const char* name, int fallback) {
    return qEnvironmentVariableIsSet(name) ? qEnvironmentVariableIntValue(name) : fallback;
}

double maxAbs(const std::vector<float>& a, const std::vector<double>& b) {
    double m = 0;
    for (std::size_t i = 0; i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
}

// Weights for every parameter of `graph` at about PyTorch's initial scale: norms 1 +- 0.1,
// biases +-0.1, other tensors N(0, 1 / fan_in).
TensorMap randomWeights(const ModelGraph& graph, std::uint32_t seed) {
    TensorMap weights;
    for (const GraphParam& p : graph.params()) {
        std::int64_t n = 1, fanIn = 1;
        for (std::size_t d = 0; d < p.shape.size(); ++d) {
            n *= p.shape[d];
            if (d > 0) fanIn *= p.shape[d];
        }
        const bool norm = p.shape.size() == 1 && p.name.find("norm") != std::string::npos && p.name.size() > 7 &&
                          p.name.compare(p.name.size() - 7, 7, ".weight") == 0;
        const float scale = p.shape.size() == 1 ? 0.1f : 1.0f / std::sqrt(float(fanIn));
        std::vector<float> data = randomVector(std::size_t(n), seed++, scale);
        if (norm)
            for (float& v : data) v += 1.0f;
        weights[p.name] = HostTensor{p.shape, std::move(data)};
    }
    return weights;
}

// Random inputs for `batch` tiles; inputs read as token ids hold ids below the embedding's vocabulary.
std::vector<std::vector<float>> randomInputs(const ModelGraph& graph, int batch, int h, int w, std::uint32_t seed) {
    std::vector<std::vector<float>> in;
    for (int v : graph.inputs()) {
        std::vector<float> x = randomVector(std::size_t(graph.elements(v, batch, h, w)), seed++);
        for (const GraphOp& op : graph.ops())
            if (op.kind == OpKind::TokenEmbedding && op.input == v) {
                const auto vocab = graph.param(op.params[0]).shape[0];
                for (std::size_t i = 0; i < x.size(); ++i) x[i] = float((i * 7919 + std::size_t(seed)) % vocab);
            }
        in.push_back(std::move(x));
    }
    return in;
}

// The outputs of one call of `batch` images on a prepared backend.
std::vector<std::vector<float>> runPrepared(CpuBackend& backend, const ModelGraph& graph, int batch, int h, int w,
                                            const std::vector<std::vector<float>>& inputs) {
    std::vector<const float*> in;
    for (const auto& x : inputs) in.push_back(x.data());
    std::vector<std::vector<float>> out;
    std::vector<float*> outPtr;
    for (int v : graph.outputs()) out.emplace_back(std::size_t(graph.elements(v, batch, h, w)), 0.0f);
    for (auto& y : out) outPtr.push_back(y.data());
    backend.run(in, batch, outPtr);
    return out;
}

// prepared for `batch` images; wholeForwards off: every call op by op.
std::vector<std::vector<float>> runGraph(const ModelGraph& graph, const TensorMap& weights, int threads, int batch,
                                         int h, int w, const std::vector<std::vector<float>>& inputs,
                                         bool wholeForwards = true) {
    CpuBackend backend(threads);
    backend.setWholeForwards(wholeForwards);
    backend.prepareGraph(graph, weights, batch, h, w);
    return runPrepared(backend, graph, batch, h, w, inputs);
}

// The first `count` images of each of a call's inputs or outputs.
std::vector<std::vector<float>> firstImages(const std::vector<std::vector<float>>& x, int batch, int count) {
    std::vector<std::vector<float>> out;
    for (const auto& v : x) {
        const std::size_t per = v.size() / std::size_t(batch);
        out.emplace_back(v.begin(), v.begin() + long(per * std::size_t(count)));
    }
    return out;
}

// A two-level pixel UNet with attention, random weights: the tiled runs' model.
std::shared_ptr<const UNetModel> smallPixelUNet() {
    const UNetConfig c = unetConfigFromJson(nlohmann::json::parse(R"({"_class_name": "UNet2DModel",
      "block_out_channels": [16, 32], "down_block_types": ["DownBlock2D", "AttnDownBlock2D"],
      "up_block_types": ["AttnUpBlock2D", "UpBlock2D"], "layers_per_block": 1, "norm_num_groups": 8})"));
    return std::make_shared<const UNetModel>(UNetModel::random(c, 3));
}

// An 80x56 canvas in 32 px tiles with 8 px overlap: 3 x 2 = 6 tiles.
RunConfig sixTileRun() {
    RunConfig cfg;
    cfg.width = 80;
    cfg.height = 56;
    cfg.tile = 32;
    cfg.overlapPx = 8;
    return cfg;
}

// The graph of one of the model families the CPU backend runs, at a small size.
ModelGraph familyGraph(const QString& family);

// Image b of a [batch, ...] buffer.
std::vector<float> imageOf(const std::vector<float>& x, int batch, int b) {
    const std::size_t per = x.size() / std::size_t(batch);
    return {x.begin() + long(per * b), x.begin() + long(per * (b + 1))};
}

// Direct convolution of one image in double (stride, padding at the top/left, zeros beyond).
std::vector<double> convDirect(const cpu::ConvShape& s, const float* x, const std::vector<float>& wt,
                               const std::vector<float>& b, const float* residual, float outScale) {
    std::vector<double> y(std::size_t(s.cout) * s.hout * s.wout);
    for (int o = 0; o < s.cout; ++o)
        for (int oy = 0; oy < s.hout; ++oy)
            for (int ox = 0; ox < s.wout; ++ox) {
                double acc = b[std::size_t(o)];
                for (int i = 0; i < s.cin; ++i)
                    for (int ky = 0; ky < s.kernel; ++ky)
                        for (int kx = 0; kx < s.kernel; ++kx) {
                            const int iy = oy * s.stride + ky - s.padTop, ix = ox * s.stride + kx - s.padLeft;
                            if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) continue;
                            acc += double(wt[((std::size_t(o) * s.cin + i) * s.kernel + ky) * s.kernel + kx]) *
                                   x[(std::size_t(i) * s.h + iy) * s.w + ix];
                        }
                const std::size_t at = (std::size_t(o) * s.hout + oy) * s.wout + ox;
                y[at] = (acc + (residual ? residual[at] : 0.0)) * outScale;
            }
    return y;
}

// Attention in double over one image's tokens x [N, C] (keys from ctx [M, Ckv], or x):
// (softmax(Q K^T / sqrt(d)) V Wo^T + bo + residual) * outScale, per head of d = C / heads.
std::vector<double> attentionDirect(const float* x, int N, int C, const float* ctx, int M, int Ckv, int heads,
                                    bool causal, const cpu::AttentionWeights& w, const float* residual,
                                    float outScale) {
    const float* kv = ctx ? ctx : x;
    auto project = [](const float* in, int rows, int cin, const float* W, const float* B, int cout) {
        std::vector<double> out(std::size_t(rows) * cout);
        for (int r = 0; r < rows; ++r)
            for (int o = 0; o < cout; ++o) {
                double acc = B ? B[o] : 0.0;
                for (int i = 0; i < cin; ++i) acc += double(in[std::size_t(r) * cin + i]) * W[std::size_t(o) * cin + i];
                out[std::size_t(r) * cout + o] = acc;
            }
        return out;
    };
    const auto q = project(x, N, C, w.wq, w.bq, C), k = project(kv, M, Ckv, w.wk, w.bk, C),
               v = project(kv, M, Ckv, w.wv, w.bv, C);
    const int d = C / heads;
    std::vector<double> o(std::size_t(N) * C, 0.0), p(static_cast<std::size_t>(M), 0.0);
    for (int h = 0; h < heads; ++h)
        for (int i = 0; i < N; ++i) {
            const int keys = causal ? std::min(M, i + 1) : M;
            double m = -1e300, sum = 0;
            for (int j = 0; j < keys; ++j) {
                double s = 0;
                for (int c = 0; c < d; ++c) s += q[std::size_t(i) * C + h * d + c] * k[std::size_t(j) * C + h * d + c];
                p[std::size_t(j)] = s / std::sqrt(double(d));
                m = std::max(m, p[std::size_t(j)]);
            }
            for (int j = 0; j < keys; ++j) sum += p[std::size_t(j)] = std::exp(p[std::size_t(j)] - m);
            for (int j = 0; j < keys; ++j)
                for (int c = 0; c < d; ++c)
                    o[std::size_t(i) * C + h * d + c] += p[std::size_t(j)] / sum * v[std::size_t(j) * C + h * d + c];
        }
    std::vector<double> y(std::size_t(N) * C);
    for (int r = 0; r < N; ++r)
        for (int c = 0; c < C; ++c) {
            double acc = w.bo[c];
            for (int i = 0; i < C; ++i) acc += o[std::size_t(r) * C + i] * w.wo[std::size_t(c) * C + i];
            y[std::size_t(r) * C + c] = (acc + (residual ? residual[std::size_t(r) * C + c] : 0.0)) * outScale;
        }
    return y;
}

struct RandomAttention {
    std::vector<float> W[4], B[4];
    cpu::AttentionWeights weights(bool qkvBias) const {
        cpu::AttentionWeights a;
        a.wq = W[0].data();
        a.wk = W[1].data();
        a.wv = W[2].data();
        a.wo = W[3].data();
        if (qkvBias) {
            a.bq = B[0].data();
            a.bk = B[1].data();
            a.bv = B[2].data();
        }
        a.bo = B[3].data();
        return a;
    }
};

RandomAttention randomAttention(int C, int Ckv, std::uint32_t seed) {
    RandomAttention r;
    for (int m = 0; m < 4; ++m) {
        const int in = m == 1 || m == 2 ? Ckv : C;
        r.W[m] = randomVector(std::size_t(C) * in, seed + m, 1.0f / std::sqrt(float(in)));
        r.B[m] = randomVector(std::size_t(C), seed + 10 + m, 0.1f);
    }
    return r;
}

nlohmann::json tinyCondConfig() {
    return nlohmann::json::parse(R"({"_class_name": "UNet2DConditionModel", "block_out_channels": [16, 32],
      "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"], "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D"],
      "layers_per_block": 1, "norm_num_groups": 8, "cross_attention_dim": 24, "attention_head_dim": [2, 4],
      "sample_size": 16})");
}

nlohmann::json tinyVaeConfig() {
    return nlohmann::json::parse(R"({"_class_name": "AutoencoderKL", "block_out_channels": [8, 16],
      "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D"],
      "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D"], "layers_per_block": 1, "norm_num_groups": 4,
      "latent_channels": 4})");
}

ClipTextConfig tinyClipConfig() {
    ClipTextConfig c;
    c.vocabSize = 64;
    c.hiddenSize = 16;
    c.intermediateSize = 32;
    c.numAttentionHeads = 2;
    c.numHiddenLayers = 2;
    c.maxPositionEmbeddings = kClipTextTokens;
    c.eosTokenId = 63;
    return c;
}

// The default model's shape (resources/models/default: 4 levels, 32..128 channels, attention at 1/4).
UNetConfig defaultShapeConfig() {
    return unetConfigFromJson(nlohmann::json::parse(R"({"_class_name": "UNet2DModel", "sample_size": 64,
      "in_channels": 3, "out_channels": 3, "freq_shift": 1, "flip_sin_to_cos": false,
      "down_block_types": ["DownBlock2D", "DownBlock2D", "AttnDownBlock2D", "DownBlock2D"],
      "up_block_types": ["UpBlock2D", "AttnUpBlock2D", "UpBlock2D", "UpBlock2D"],
      "block_out_channels": [32, 64, 128, 128], "layers_per_block": 1, "downsample_padding": 0,
      "attention_head_dim": 8, "norm_num_groups": 32, "norm_eps": 1e-6})"));
}

ModelGraph familyGraph(const QString& family) {
    if (family == "unet") return unet2DExecutionGraph(defaultShapeConfig());
    if (family == "unetcond") return unet2DConditionExecutionGraph(unetCondConfigFromJson(tinyCondConfig()), 7);
    if (family == "vae") return vaeDecoderExecutionGraph(vaeConfigFromJson(tinyVaeConfig()));
    return fuseForExecution(buildClipTextGraph(tinyClipConfig(), 2));
}

class NullObserver : public RunObserver {};

}  // namespace

class TestCpuThreads : public QObject {
    Q_OBJECT

private slots:
    // Which OPENBLAS_CORETYPE a CPU gets where OpenBLAS loaded older kernels, and what the device
    // line says after the front end restarted itself with it.
    void openblasCoreChoice() {
        QCOMPARE(openblasCoreTypeFor("Prescott", true, true), std::string("SkylakeX"));
        QCOMPARE(openblasCoreTypeFor("prescott", true, false), std::string("Haswell"));
        QCOMPARE(openblasCoreTypeFor("Sandybridge", true, false), std::string("Haswell"));
        QCOMPARE(openblasCoreTypeFor("Prescott", false, false), std::string());  // an SSE3 CPU: right
        QCOMPARE(openblasCoreTypeFor("Haswell", true, true), std::string());     // AVX2 kernels: left as they are
        QCOMPARE(openblasCoreTypeFor("SkylakeX", true, true), std::string());
        QCOMPARE(openblasCoreTypeFor("Zen", true, false), std::string());
        QCOMPARE(openblasCoreTypeFor("", true, true), std::string());
        // Already set (by the user or by the restart): nothing to do, the process goes on.
        qputenv(kOpenblasRestartVariable, "Prescott");
        char arg0[] = "tst";
        char* argv[] = {arg0, nullptr};
        restartWithOpenblasKernelsForThisCpu(argv);
        const std::string device = cpu::WorkerPool(1).threads() == 1 ? CpuBackend(1).info().device : std::string();
        qunsetenv(kOpenblasRestartVariable);
        QVERIFY2(device.find("(OPENBLAS_CORETYPE set by Tessera: OpenBLAS had loaded its Prescott kernels on this "
                             "CPU)") != std::string::npos,
                 device.c_str());
        QVERIFY(CpuBackend(1).info().device.find("set by Tessera") == std::string::npos);
    }

    // Every index once, each on a worker in range; back-to-back calls of few tasks (a worker that
    // wakes late must never take an index of a later call), inline pools of one thread.
    void workerPoolRunsEveryIndexOnce() {
        for (int threads : {1, 2, 3, 8}) {
            cpu::WorkerPool pool(threads);
            QCOMPARE(pool.threads(), threads);
            std::vector<std::atomic<int>> hits(1000);
            std::atomic<int> badWorker{0};
            pool.parallelFor(1000, [&](std::int64_t i, int worker) {
                hits[std::size_t(i)].fetch_add(1);
                if (worker < 0 || worker >= threads) badWorker.fetch_add(1);
            });
            for (const auto& h : hits) QCOMPARE(h.load(), 1);
            QCOMPARE(badWorker.load(), 0);
            std::int64_t sum = 0;
            for (int call = 0; call < 20000; ++call) {
                std::atomic<std::int64_t> s{0};
                const int n = call % 5;
                pool.parallelFor(n, [&](std::int64_t i) { s.fetch_add(i + 1); });
                QCOMPARE(s.load(), std::int64_t(n) * (n + 1) / 2);
                sum += s.load();
            }
            QVERIFY(sum > 0);
        }
        cpu::WorkerPool all(0);
        QCOMPARE(all.threads(), cpu::hardwareThreads());
    }

    void workerScratchIsPerWorkerAndGrows() {
        cpu::WorkerPool pool(3);
        pool.reserveScratch(100);
        QCOMPARE(pool.scratchFloats(), std::size_t(300));
        pool.reserveScratch(10);  // never shrinks
        QCOMPARE(pool.scratchFloats(), std::size_t(300));
        std::vector<float*> seen(3, nullptr);
        pool.parallelFor(64, [&](std::int64_t, int worker) { seen[std::size_t(worker)] = pool.scratch(worker); });
        for (int a = 0; a < 3; ++a)
            for (int b = a + 1; b < 3; ++b)
                if (seen[std::size_t(a)] && seen[std::size_t(b)]) QVERIFY(seen[std::size_t(a)] != seen[std::size_t(b)]);
    }

    // Helpers of a one-thread pool take tasks of its calls as workers threads() + slot, with
    // their slot's scratch; every index still runs once, calls of one task run inline, a
    // helper leaves when `busy` goes false, and a slot outside the table is refused.
    void helpersTakePartInAPoolsCalls() {
        cpu::WorkerPool pool(1);
        pool.reserveScratch(8);
        std::vector<std::vector<float>> slotScratch(3, std::vector<float>(8));
        pool.setHelperScratch({slotScratch[0].data(), slotScratch[1].data(), slotScratch[2].data()});
        QCOMPARE(pool.helperSlots(), 3);
        QVERIFY(pool.scratch(2) == slotScratch[1].data());
        QVERIFY_THROWS_EXCEPTION(std::out_of_range, pool.helpWhile(3, std::atomic<bool>{true}));
        std::atomic<bool> busy{true};
        std::atomic<int> byHelpers{0}, badWorker{0};
        std::vector<std::thread> helpers;
        for (int slot = 0; slot < 3; ++slot) helpers.emplace_back([&, slot] { pool.helpWhile(slot, busy); });
        std::int64_t total = 0;
        for (int call = 0; call < 2000; ++call) {
            const int n = 1 + call % 300;
            std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
            pool.parallelFor(n, [&](std::int64_t i, int worker) {
                hits[std::size_t(i)].fetch_add(1);
                if (worker < 0 || worker > 3) badWorker.fetch_add(1);
                if (worker > 0) {
                    byHelpers.fetch_add(1);
                    pool.scratch(worker)[0] += 1.0f;  // the slot's own scratch, no one else's
                    if (pool.scratch(worker) != slotScratch[std::size_t(worker - 1)].data()) badWorker.fetch_add(1);
                }
                // Work enough for the helpers to find some of it.
                volatile float sink = 0;
                for (int k = 0; k < 2000; ++k) sink = sink + float(k);
            });
            for (const auto& h : hits) QCOMPARE(h.load(), 1);
            total += n;
        }
        busy.store(false);
        for (std::thread& t : helpers) t.join();
        QCOMPARE(badWorker.load(), 0);
        QVERIFY2(byHelpers.load() > 0, "no helper took a task");
        float helped = 0;
        for (const auto& s : slotScratch) helped += s[0];
        QCOMPARE(int(helped), byHelpers.load());
        QVERIFY(total > byHelpers.load());
        // No helper left: calls run inline on the caller again.
        std::atomic<int> off{0};
        pool.parallelFor(50, [&](std::int64_t, int worker) { off.fetch_add(worker); });
        QCOMPARE(off.load(), 0);
    }

    // The blocks cover C, are at least 64 wide (or all of it), and the default model's GEMMs
    // give a batch of 4 tiles dozens of tasks at its large levels.
    void gemmBlocksCoverAndFeedTheCores() {
        for (auto [m, n, k] : {std::tuple{32, 4096, 288},
                               {64, 1024, 576},
                               {128, 256, 1152},
                               {128, 64, 2304},
                               {7, 5, 3},
                               {1280, 64, 11520},
                               {320, 4096, 2880}}) {
            const cpu::GemmBlocks b = cpu::gemmBlocks(m, n, k);
            QVERIFY(b.mc >= 1 && b.nc >= 1);
            QVERIFY(b.mBlocks * b.mc >= m && (b.mBlocks - 1) * b.mc < m);
            QVERIFY(b.nBlocks * b.nc >= n && (b.nBlocks - 1) * b.nc < n);
            QVERIFY(b.nc >= std::min(n, 64) && b.mc >= std::min(m, 64));
            // A block is one sgemm of at most a few tens of millions of multiply-adds.
            QVERIFY(std::int64_t(b.mc) * b.nc * k <= std::max<std::int64_t>(std::int64_t(64) * 64 * k, 8 << 20));
        }
        QVERIFY(cpu::gemmBlocks(32, 4096, 288).nBlocks >= 8);         // 64x64 tile, 32 channels
        const cpu::GemmBlocks mid = cpu::gemmBlocks(128, 256, 1152);  // 16x16, 128 channels
        QVERIFY(mid.mBlocks * mid.nBlocks >= 4);
    }

    // Convolutions in blocks that cut through output rows and (wide layers) through the output
    // channels, several images at once, with a residual and a stride: each image as the direct
    // loop, and the same bits as that image alone and on any thread count.
    void blockedConvMatchesDirectLoop_data() {
        QTest::addColumn<int>("cin");
        QTest::addColumn<int>("cout");
        QTest::addColumn<int>("h");
        QTest::addColumn<int>("w");
        QTest::addColumn<int>("stride");
        QTest::newRow("3x3, ragged column blocks and row blocks, residual") << 64 << 256 << 15 << 17 << 1;
        QTest::newRow("3x3 stride 2, padding 0") << 96 << 96 << 34 << 30 << 2;
        QTest::newRow("1x1 (a plain GEMM)") << 48 << 80 << 23 << 21 << 0;
    }
    void blockedConvMatchesDirectLoop() {
        QFETCH(int, cin);
        QFETCH(int, cout);
        QFETCH(int, h);
        QFETCH(int, w);
        QFETCH(int, stride);
        const cpu::ConvShape s = stride == 2 ? cpu::ConvShape::downsample(cin, h, w, 0)
                                             : cpu::ConvShape::same(cin, cout, h, w, stride == 0 ? 1 : 3);
        const std::size_t inImage = std::size_t(cin) * h * w, outImage = std::size_t(s.cout) * s.hout * s.wout;
        const int images = 3;
        const auto x = randomVector(inImage * images, 1);
        const auto wt = randomVector(std::size_t(s.cout) * cin * s.kernel * s.kernel, 2, 0.05f);
        const auto b = randomVector(std::size_t(s.cout), 3), res = randomVector(outImage * images, 4);
        const bool withResidual = stride == 1;
        const float scale = withResidual ? 0.5f : 1.0f;
        if (stride != 0) {
            const cpu::GemmBlocks bl = cpu::gemmBlocks(s.cout, s.hout * s.wout, int(s.colRows()));
            QVERIFY2(bl.nBlocks > 1 && bl.nc % s.wout != 0, "the blocks should cut through output rows");
            if (cout == 256) QVERIFY2(bl.mBlocks > 1, "the blocks should cut through the output channels");
        }
        auto run = [&](int threads, int count, const float* input, const float* residual) {
            cpu::WorkerPool pool(threads);
            pool.reserveScratch(cpu::convWorkerFloats(s));
            std::vector<float> y(outImage * std::size_t(count));
            cpu::conv2d(pool, s, count, input, wt.data(), b.data(), residual, scale, y.data());
            return y;
        };
        const auto y = run(3, images, x.data(), withResidual ? res.data() : nullptr);
        for (int i = 0; i < images; ++i) {
            const std::vector<float> yi(y.begin() + long(outImage * i), y.begin() + long(outImage * (i + 1)));
            const auto ref =
                convDirect(s, x.data() + inImage * i, wt, b, withResidual ? res.data() + outImage * i : nullptr, scale);
            QVERIFY2(maxAbs(yi, ref) < 1e-4, qPrintable(QString::number(maxAbs(yi, ref))));
            // The image alone, on one thread: the same bits.
            QCOMPARE(run(1, 1, x.data() + inImage * i, withResidual ? res.data() + outImage * i : nullptr), yi);
        }
        QCOMPARE(run(2, images, x.data(), withResidual ? res.data() : nullptr), y);
    }

    // Attention in tasks of (image, head, block of query rows): several blocks, the last ragged;
    // token sequences (self, causal, cross) and feature maps, against the direct loop.
    void blockedAttentionMatchesDirectLoop_data() {
        QTest::addColumn<bool>("featureMap");
        QTest::addColumn<bool>("causal");
        QTest::addColumn<int>("contextTokens");  // 0: self-attention
        QTest::newRow("tokens, self") << false << false << 0;
        QTest::newRow("tokens, causal (CLIP)") << false << true << 0;
        QTest::newRow("tokens, cross") << false << false << 9;
        QTest::newRow("feature map (pixel UNet, VAE)") << true << false << 0;
    }
    void blockedAttentionMatchesDirectLoop() {
        QFETCH(bool, featureMap);
        QFETCH(bool, causal);
        QFETCH(int, contextTokens);
        const int images = 2, N = 70, C = 8, heads = 2, Ckv = contextTokens ? 6 : C,
                  M = contextTokens ? contextTokens : N;
        const int queryBlock = cpu::attentionTaskRows(N, M, 1 << 18);
        QVERIFY2(queryBlock < N && N % queryBlock != 0, "the queries should make several blocks, the last ragged");
        const RandomAttention ra = randomAttention(C, Ckv, 40);
        const cpu::AttentionWeights aw = ra.weights(!featureMap || contextTokens == 0);
        const auto x = randomVector(std::size_t(images) * N * C, 50), res = randomVector(x.size(), 51);
        const auto ctx = randomVector(std::size_t(images) * M * Ckv, 52);
        const float outScale = 0.5f;
        auto run = [&](int threads) {
            cpu::WorkerPool pool(threads);
            pool.reserveScratch(std::size_t(queryBlock) * M);
            std::vector<float> y(x.size());
            if (featureMap) {
                std::vector<float> scratch(cpu::attentionScratchFloats(C, N) * images);
                cpu::attention(pool, images, C, N, heads, aw, x.data(), res.data(), outScale, y.data(), scratch.data(),
                               images, queryBlock);
            } else {
                cpu::TokenAttentionShape s{N, C, M, Ckv, heads, causal};
                std::vector<float> scratch(cpu::tokenAttentionScratchFloats(s));  // one image at a time
                cpu::tokenAttention(pool, images, s, aw, x.data(), contextTokens ? ctx.data() : nullptr, res.data(),
                                    outScale, y.data(), scratch.data(), 1, queryBlock);
            }
            return y;
        };
        const auto y = run(3);
        for (int i = 0; i < images; ++i) {
            const std::size_t per = std::size_t(N) * C;
            std::vector<float> tokens(per), residual(per);
            std::vector<double> ref;
            if (featureMap) {  // x [C, N] per image: attend its transpose, transpose back
                for (int c = 0; c < C; ++c)
                    for (int p = 0; p < N; ++p) {
                        tokens[std::size_t(p) * C + c] = x[per * i + std::size_t(c) * N + p];
                        residual[std::size_t(p) * C + c] = res[per * i + std::size_t(c) * N + p];
                    }
                const auto t =
                    attentionDirect(tokens.data(), N, C, nullptr, N, C, heads, false, aw, residual.data(), outScale);
                ref.resize(per);
                for (int c = 0; c < C; ++c)
                    for (int p = 0; p < N; ++p) ref[std::size_t(c) * N + p] = t[std::size_t(p) * C + c];
            } else {
                ref = attentionDirect(x.data() + per * i, N, C,
                                      contextTokens ? ctx.data() + std::size_t(M) * Ckv * i : nullptr, M, Ckv, heads,
                                      causal, aw, res.data() + per * i, outScale);
            }
            const std::vector<float> yi(y.begin() + long(per * i), y.begin() + long(per * (i + 1)));
            QVERIFY2(maxAbs(yi, ref) < 2e-5, qPrintable(QString::number(maxAbs(yi, ref))));
        }
        QCOMPARE(run(1), y);
        QCOMPARE(run(2), y);
    }

    // Whole graphs of every family on 1, 2 and 3 threads: the same bits; and a tile's result
    // is the same bits in a batch of 3 as alone.
    void graphsAreBitIdenticalForAnyThreadCount_data() {
        QTest::addColumn<QString>("family");
        QTest::addColumn<int>("tileH");
        QTest::addColumn<int>("tileW");
        QTest::newRow("pixel UNet (the default model's shape)") << "unet" << 64 << 40;
        QTest::newRow("SD UNet (cross attention, GEGLU)") << "unetcond" << 32 << 24;
        QTest::newRow("VAE decoder (mid attention)") << "vae" << 24 << 16;
        QTest::newRow("CLIP text (causal attention)") << "clip" << 1 << 1;
    }
    void graphsAreBitIdenticalForAnyThreadCount() {
        QFETCH(QString, family);
        QFETCH(int, tileH);
        QFETCH(int, tileW);
        const ModelGraph graph = familyGraph(family);
        const TensorMap weights = randomWeights(graph, 7);
        const int batch = 3;
        const auto inputs = randomInputs(graph, batch, tileH, tileW, 11);
        const auto y = runGraph(graph, weights, 1, batch, tileH, tileW, inputs);
        for (const auto& out : y)
            for (float v : out) QVERIFY(std::isfinite(v));
        QCOMPARE(runGraph(graph, weights, 2, batch, tileH, tileW, inputs), y);
        QCOMPARE(runGraph(graph, weights, 3, batch, tileH, tileW, inputs), y);
        std::vector<std::vector<float>> single;
        for (const auto& x : inputs) single.push_back(imageOf(x, batch, 1));
        const auto y1 = runGraph(graph, weights, 2, 1, tileH, tileW, single);
        for (std::size_t o = 0; o < y.size(); ++o) QCOMPARE(y1[o], imageOf(y[o], batch, 1));
    }

    // The one rule that spreads a call's images over the threads: several images on several
    // threads all run whole forwards, on a lane per thread or image (threads without an image
    // help the lanes); one image or one thread op by op.
    void splitImagesFollowsTheRule_data() {
        QTest::addColumn<int>("images");
        QTest::addColumn<int>("threads");
        QTest::addColumn<int>("whole");
        QTest::addColumn<int>("lanes");
        QTest::addColumn<int>("opByOp");
        QTest::newRow("one image on 16 threads") << 1 << 16 << 0 << 0 << 1;
        QTest::newRow("13 images on 1 thread") << 13 << 1 << 0 << 0 << 13;
        QTest::newRow("13 on 16: 13 lanes, 3 threads help") << 13 << 16 << 13 << 13 << 0;
        QTest::newRow("25 on 16") << 25 << 16 << 25 << 16 << 0;
        QTest::newRow("8 on 16") << 8 << 16 << 8 << 8 << 0;
        QTest::newRow("13 on 2") << 13 << 2 << 13 << 2 << 0;
        QTest::newRow("12 on 5") << 12 << 5 << 12 << 5 << 0;
        QTest::newRow("2 on 4") << 2 << 4 << 2 << 2 << 0;
        QTest::newRow("no images") << 0 << 4 << 0 << 0 << 0;
        QTest::newRow("negative") << -3 << 4 << 0 << 0 << 0;
    }
    void splitImagesFollowsTheRule() {
        QFETCH(int, images);
        QFETCH(int, threads);
        QFETCH(int, whole);
        QFETCH(int, lanes);
        QFETCH(int, opByOp);
        const cpu::ImageSplit split = cpu::splitImages(images, threads);
        QCOMPARE(split.wholeForwards, whole);
        QCOMPARE(split.lanes, lanes);
        QCOMPARE(split.opByOp, opByOp);
    }

    // Whole forwards make the same bits as op by op: every family, a backend prepared for 13
    // images on 1, 2, 3, 5 and 16 threads, calls of 13, 3 and 1 images (whole forwards with a
    // partial last round, helped lanes, op by op), against op by op on one thread; then the same
    // backend op by op.
    void wholeForwardsAreBitIdenticalToOpByOp_data() {
        QTest::addColumn<QString>("family");
        QTest::addColumn<int>("tileH");
        QTest::addColumn<int>("tileW");
        QTest::newRow("pixel UNet (the default model's shape)") << "unet" << 32 << 24;
        QTest::newRow("SD UNet (cross attention, GEGLU)") << "unetcond" << 16 << 24;
        QTest::newRow("VAE decoder (mid attention)") << "vae" << 16 << 8;
        QTest::newRow("CLIP text (causal attention)") << "clip" << 1 << 1;
    }
    void wholeForwardsAreBitIdenticalToOpByOp() {
        QFETCH(QString, family);
        QFETCH(int, tileH);
        QFETCH(int, tileW);
        const ModelGraph graph = familyGraph(family);
        const TensorMap weights = randomWeights(graph, 7);
        const int batch = 13;
        const auto inputs = randomInputs(graph, batch, tileH, tileW, 11);
        const auto reference = runGraph(graph, weights, 1, batch, tileH, tileW, inputs, false);
        for (int threads : {1, 2, 3, 5, 16}) {
            CpuBackend backend(threads);
            backend.prepareGraph(graph, weights, batch, tileH, tileW);
            QCOMPARE(backend.wholeForwardLanes(), threads == 1 ? 0 : std::min(threads, batch));
            for (int count : {13, 3, 1}) {
                const auto y = runPrepared(backend, graph, count, tileH, tileW, firstImages(inputs, batch, count));
                QVERIFY2(y == firstImages(reference, batch, count),
                         qPrintable(QString("%1 threads, %2 images").arg(threads).arg(count)));
            }
            backend.setWholeForwards(false);
            QCOMPARE(backend.wholeForwardLanes(), 0);
            QVERIFY(runPrepared(backend, graph, batch, tileH, tileW, inputs) == reference);
        }
    }

    // Whole forwards take their own activations only within the host memory they may take:
    // over it every call runs op by op (the same bits) and the backend says why; where they
    // need less than op by op (two lanes of one image against 13 images), they run even with
    // nothing to spare. The device line says how the prepared batch runs.
    void wholeForwardsFallBackWhenMemoryIsShort() {
        const ModelGraph graph = familyGraph("unet");
        const TensorMap weights = randomWeights(graph, 7);
        const int h = 32, w = 24;
        const auto inputs = randomInputs(graph, 3, h, w, 11);
        const auto reference = runGraph(graph, weights, 1, 3, h, w, inputs, false);
        CpuBackend backend(3);
        backend.setWholeForwardMemory(0);
        backend.prepareGraph(graph, weights, 3, h, w);
        QCOMPARE(backend.wholeForwardLanes(), 0);
        const std::string note = backend.parallelismNote();
        QVERIFY2(note.rfind("whole forwards on 3 threads would need ", 0) == 0, note.c_str());
        QVERIFY2(note.find(" of host memory (op by op ") != std::string::npos, note.c_str());
        QVERIFY2(note.find("), over the 0 bytes they may take") != std::string::npos, note.c_str());
        QVERIFY2(
            backend.info().device.find(": tile batch of 3 op by op (whole forwards on 3 threads") != std::string::npos,
            backend.info().device.c_str());
        QVERIFY(runPrepared(backend, graph, 3, h, w, inputs) == reference);
        backend.setWholeForwardMemory(std::uint64_t(1) << 30);
        QCOMPARE(backend.wholeForwardLanes(), 3);
        QVERIFY(backend.parallelismNote().empty());
        QVERIFY2(backend.info().device.find(" threads, OpenBLAS ") != std::string::npos, backend.info().device.c_str());
        QCOMPARE(backend.parallelism(),
                 std::string("tile batch of 3: 3 images in parallel, whole forwards; a thread without an image "
                             "helps another's"));
        QVERIFY(runPrepared(backend, graph, 3, h, w, inputs) == reference);
        backend.setProfiling(true);  // per-op times: op by op
        QCOMPARE(backend.wholeForwardLanes(), 0);
        QVERIFY(runPrepared(backend, graph, 3, h, w, inputs) == reference);
        QVERIFY(std::accumulate(backend.opMilliseconds().begin(), backend.opMilliseconds().end(), 0.0) > 0.0);
        backend.setProfiling(false);
        QCOMPARE(backend.wholeForwardLanes(), 3);
        const std::size_t held = backend.preparedFloats();
        backend.setThreads(1);  // one thread: op by op, no lanes held
        QCOMPARE(backend.wholeForwardLanes(), 0);
        QVERIFY(backend.preparedFloats() < held);
        QCOMPARE(backend.parallelism(), std::string("tile batch of 3 op by op"));

        const auto inputs13 = randomInputs(graph, 13, h, w, 12);
        CpuBackend two(2);
        two.setWholeForwardMemory(0);
        two.prepareGraph(graph, weights, 13, h, w);
        QCOMPARE(two.wholeForwardLanes(), 2);
        QVERIFY(two.parallelismNote().empty());
        QCOMPARE(two.parallelism(), std::string("tile batch of 13: 2 images in parallel, whole forwards; a thread "
                                                "without an image helps another's"));
        QVERIFY(runPrepared(two, graph, 13, h, w, inputs13) == runGraph(graph, weights, 1, 13, h, w, inputs13, false));
    }

    // A bad token id is refused with the same words (its row in the call) whether the call's
    // images run whole forwards or op by op, before any work.
    void badTokenIdsAreRefusedAlikeEitherWay() {
        const ModelGraph graph = familyGraph("clip");
        const TensorMap weights = randomWeights(graph, 7);
        auto inputs = randomInputs(graph, 3, 1, 1, 11);
        const std::vector<int>& graphInputs = graph.inputs();
        std::size_t ids = graphInputs.size();
        for (const GraphOp& op : graph.ops())
            if (op.kind == OpKind::TokenEmbedding)
                ids = std::size_t(std::find(graphInputs.begin(), graphInputs.end(), op.input) - graphInputs.begin());
        QVERIFY(ids < inputs.size());
        const std::size_t tokens = inputs[ids].size() / 3;
        inputs[ids][2 * tokens + 5] = 9999.0f;
        std::vector<std::string> messages;
        for (int threads : {1, 3}) {
            CpuBackend backend(threads);
            backend.prepareGraph(graph, weights, 3, 1, 1);
            QCOMPARE(backend.wholeForwardLanes(), threads == 1 ? 0 : 3);
            try {
                runPrepared(backend, graph, 3, 1, 1, inputs);
                QFAIL("a token id of 9999 was accepted");
            } catch (const std::out_of_range& e) {
                messages.push_back(e.what());
            }
        }
        QVERIFY2(messages[0].find("row 2 position 5 holds id 9999") != std::string::npos, messages[0].c_str());
        QCOMPARE(messages[1], messages[0]);
    }

    // A tiled run (tile batches that do not divide the tiles, both fusion rules, the seam
    // statistics of the last step) makes the same image on 1, 2, 3 and 5 threads (op by op,
    // whole forwards, helped lanes), and records the threads that computed and how a batch ran; with
    // whole forwards refused for memory, the same image, and the record says why.
    void tiledRunsAreBitIdenticalForAnyThreadCount_data() {
        QTest::addColumn<int>("fusion");
        QTest::newRow("sample fusion") << int(FusionRule::Sample);
        QTest::newRow("noise fusion") << int(FusionRule::Noise);
    }
    void tiledRunsAreBitIdenticalForAnyThreadCount() {
        QFETCH(int, fusion);
        const auto model = smallPixelUNet();
        RunConfig cfg = sixTileRun();
        cfg.tileBatch = 4;  // batches of 4 and 2
        cfg.steps = 3;
        cfg.seed = 5;
        cfg.fusion = FusionRule(fusion);
        cfg.scheduler = SchedulerKind::DDPM;  // noise each step
        cfg.previewEvery = 1;
        cfg.backend = BackendKind::CPU;
        std::vector<RunResult> results;
        const std::map<int, std::string> howBatchesRan{
            {1, ": tile batch of 4 op by op"},
            {2, ": tile batch of 4: 2 images in parallel, whole forwards"},
            {3, ": tile batch of 4: 3 images in parallel, whole forwards; a thread without an image helps"},
            {5, ": tile batch of 4: 4 images in parallel, whole forwards"},
            {-3, ": tile batch of 4 op by op (whole forwards on 3 threads would need "}};
        for (int threads : {1, 2, 3, 5, -3}) {  // -3: 3 threads, no memory for whole forwards
            cfg.threads = std::abs(threads);
            auto backend = std::make_unique<CpuBackend>();
            if (threads < 0) backend->setWholeForwardMemory(0);
            CpuEngine engine(std::move(backend));
            engine.setModel(model);
            NullObserver observer;
            results.push_back(engine.run(cfg, observer));
            const RunResult& r = results.back();
            QCOMPARE(std::string(toString(r.record.status)), std::string("finished"));
            QCOMPARE(r.record.environment.threads, cfg.threads);
            const QString device = QString::fromStdString(r.record.environment.device);
            QVERIFY2(device.contains(QString("(%1 threads, OpenBLAS ").arg(cfg.threads)), qPrintable(device));
            QVERIFY2(device.contains(QString::fromStdString(howBatchesRan.at(threads))), qPrintable(device));
            QCOMPARE(r.record.config.threads, cfg.threads);
            const auto& messages = r.record.messages;
            const bool noted = std::any_of(messages.begin(), messages.end(), [](const std::string& m) {
                return m.rfind("threads: tile batches ran op by op: whole forwards on 3 threads would need ", 0) == 0;
            });
            QCOMPARE(noted, threads < 0);
        }
        for (std::size_t i = 1; i < results.size(); ++i) {
            QCOMPARE(results[i].image.data, results[0].image.data);
            QCOMPARE(results[i].seamMap.data, results[0].seamMap.data);
            QCOMPARE(results[i].record.imageSha256, results[0].record.imageSha256);
        }
    }

    // The auto tile batch (0, the default) puts the six tiles in one call, records the batch that
    // ran (so the PNG's parameters and a re-run say 6) with a note of the choice, and draws the
    // same image as any asked-for batch.
    void autoTileBatchRunsEveryTileInOneCall() {
        const auto model = smallPixelUNet();
        RunConfig cfg = sixTileRun();
        cfg.steps = 2;
        cfg.seed = 11;
        cfg.backend = BackendKind::CPU;
        cfg.threads = 2;
        QCOMPARE(cfg.tileBatch, 0);
        std::vector<RunResult> results;
        for (int batch : {0, 1, 6, 4}) {
            cfg.tileBatch = batch;
            CpuEngine engine(std::make_unique<CpuBackend>());
            engine.setModel(model);
            NullObserver observer;
            results.push_back(engine.run(cfg, observer));
            const RunRecord& r = results.back().record;
            QCOMPARE(std::string(toString(r.status)), std::string("finished"));
            QCOMPARE(r.config.tileBatch, batch == 0 ? 6 : batch);
            const auto& m = r.messages;
            const auto notes =
                std::count_if(m.begin(), m.end(), [](const std::string& s) { return s.rfind("batch: auto", 0) == 0; });
            QCOMPARE(notes, std::ptrdiff_t(batch == 0 ? 1 : 0));
            if (batch == 0) {
                QVERIFY(std::find(m.begin(), m.end(), "batch: auto, 6 tiles per UNet call (6 tiles in one call)") !=
                        m.end());
                QVERIFY2(r.environment.device.find(": tile batch of 6: 2 images in parallel, whole forwards") !=
                             std::string::npos,
                         r.environment.device.c_str());
                QCOMPARE(r.batches.size(), std::size_t(cfg.steps));  // one call per step
            }
        }
        for (std::size_t i = 1; i < results.size(); ++i) {
            QCOMPARE(results[i].image.data, results[0].image.data);
            QCOMPARE(results[i].record.imageSha256, results[0].record.imageSha256);
        }
    }

    // threads: 0 (all cores) to kMaxThreads; anything else is refused naming the field.
    // A CPU run whose tile batch leaves most threads sharing a few tiles layer by layer says so,
    // with the batch that would give each thread a tile (at most the tiles there are); none where
    // half the threads or more have tiles of their own, below 4 threads, or when one call takes
    // every tile. A tiled run carries it in its record.
    void tileBatchHintNamesABetterBatch() {
        QCOMPARE(tileBatchHint(1, 25, 16),
                 std::string("threads: a tile batch of 1 gives the 16 threads 1 tile at a time to share layer by "
                             "layer; a tile batch of 16 would give each thread a tile of its own (the same image, "
                             "usually faster, with more host memory)"));
        QCOMPARE(tileBatchHint(4, 9, 16).rfind("threads: a tile batch of 4 gives the 16 threads 4 tiles at a time", 0),
                 std::size_t(0));
        QVERIFY(tileBatchHint(4, 9, 16).find("a tile batch of 9 would give") != std::string::npos);
        QCOMPARE(tileBatchHint(8, 25, 16), std::string());  // half the threads have a tile
        QVERIFY(!tileBatchHint(7, 25, 16).empty());
        QCOMPARE(tileBatchHint(13, 25, 16), std::string());
        QCOMPARE(tileBatchHint(1, 25, 3), std::string());  // fewer than 4 threads
        QCOMPARE(tileBatchHint(1, 1, 16), std::string());  // one call takes every tile
        QCOMPARE(tileBatchHint(4, 4, 16), std::string());

        const auto model = smallPixelUNet();
        RunConfig cfg = sixTileRun();
        cfg.steps = 1;
        cfg.backend = BackendKind::CPU;
        cfg.threads = 4;
        for (int batch : {1, 2, 4}) {
            cfg.tileBatch = batch;
            CpuEngine engine(std::make_unique<CpuBackend>());
            engine.setModel(model);
            NullObserver observer;
            const RunResult r = engine.run(cfg, observer);
            QCOMPARE(std::string(toString(r.record.status)), std::string("finished"));
            const auto& m = r.record.messages;
            const bool hinted = std::any_of(m.begin(), m.end(), [](const std::string& s) {
                return s.rfind("threads: a tile batch of 1 gives the 4 threads 1 tile at a time", 0) == 0 &&
                       s.find("a tile batch of 4 would give each thread a tile of its own") != std::string::npos;
            });
            QCOMPARE(hinted, batch == 1);
            const auto hints = std::count_if(m.begin(), m.end(),
                                             [](const std::string& s) { return s.rfind("threads: a tile", 0) == 0; });
            QCOMPARE(hints, std::ptrdiff_t(batch == 1 ? 1 : 0));
        }
    }

    void threadsSettingIsValidated() {
        RunConfig c;
        QCOMPARE(c.threads, 0);
        QVERIFY(validateAll(c).empty());
        c.threads = kMaxThreads;
        QVERIFY(validateAll(c).empty());
        for (int bad : {-1, kMaxThreads + 1}) {
            c.threads = bad;
            const auto problems = validateAll(c);
            QCOMPARE(problems.size(), std::size_t(1));
            QCOMPARE(problems[0].field(), std::string("threads"));
            const std::string text = problems[0].what();
            QVERIFY2(text.rfind("threads: " + std::to_string(bad) + " is not allowed", 0) == 0, text.c_str());
            QVERIFY2(text.find("0 to " + std::to_string(kMaxThreads)) != std::string::npos, text.c_str());
            QVERIFY2(text.find("0 = all cores") != std::string::npos, text.c_str());
        }
        c.threads = 6;
        QCOMPARE(toJson(c).at("threads").get<int>(), 6);
        QCOMPARE(runConfigFromJson(toJson(c)).threads, 6);
        QCOMPARE(runConfigFromJson(nlohmann::json{{"threads", 2}}).threads, 2);
        try {
            runConfigFromJson(nlohmann::json{{"threads", "many"}});
            QFAIL("threads 'many' accepted");
        } catch (const ValidationError& e) {
            QCOMPARE(e.field(), std::string("threads"));
        }
        // The backend takes the setting at once; 0 is every hardware thread.
        CpuBackend backend(2);
        QCOMPARE(backend.threads(), 2);
        backend.setThreads(3);
        QCOMPARE(backend.threads(), 3);
        backend.setThreads(0);
        QCOMPARE(backend.threads(), cpu::hardwareThreads());
    }

    // Milliseconds per op kind of the default model's forward (quick-cpu's 64x64 tiles, batch
    // TESSERA_CPU_BENCH_BATCH or 4) on TESSERA_CPU_BENCH_THREADS threads (default: all), op by
    // op (profiling runs that way), then the wall time of the same calls as the backend splits
    // them (whole forwards where cpu::splitImages says). Runs only with TESSERA_CPU_BENCH=1.
    void profileDefaultModel() {
        if (!qEnvironmentVariableIsSet("TESSERA_CPU_BENCH")) QSKIP("set TESSERA_CPU_BENCH=1 to measure");
        const UNetModel model = UNetModel::load(TESSERA_SOURCE_DIR "/resources/models/default");
        const int batch = envInt("TESSERA_CPU_BENCH_BATCH", 4), reps = std::max(1, envInt("TESSERA_CPU_BENCH_REPS", 5));
        const int H = 64, W = 64;
        CpuBackend backend(envInt("TESSERA_CPU_BENCH_THREADS", 0));
        backend.prepare(model, batch, H, W);
        backend.setProfiling(true);
        const std::size_t per = std::size_t(3) * H * W;
        const auto x = randomVector(per * std::size_t(batch), 90);
        const std::vector<float> t(std::size_t(batch), 500.0f);
        std::vector<float> out(per * std::size_t(batch));
        backend.forward(x.data(), t.data(), batch, out.data());  // warm-up
        std::map<std::string, double> byKind;
        double total = 0;
        const auto start = std::chrono::steady_clock::now();
        for (int r = 0; r < reps; ++r) {
            backend.forward(x.data(), t.data(), batch, out.data());
            const auto& ops = backend.graph().ops();
            for (std::size_t i = 0; i < ops.size(); ++i) {
                std::string key = toString(ops[i].kind);
                if (ops[i].kind == OpKind::Conv)
                    key += " 1/" + std::to_string(backend.graph().value(ops[i].output).divisor) + " " +
                           std::to_string(ops[i].kernel) + "x" + std::to_string(ops[i].kernel);
                byKind[key] += backend.opMilliseconds()[i] / reps;
                total += backend.opMilliseconds()[i] / reps;
            }
        }
        const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        qInfo("default model, 64x64, batch %d on %s: %.1f ms per forward (ops %.1f ms), %.2f tiles/s", batch,
              backend.info().device.c_str(), wall / reps, total, reps * batch * 1e3 / wall);
        for (const auto& [kind, ms] : byKind) qInfo("  %-22s %8.2f ms  %5.1f%%", kind.c_str(), ms, 100 * ms / total);
        backend.setProfiling(false);
        const auto split = std::chrono::steady_clock::now();
        for (int r = 0; r < reps; ++r) backend.forward(x.data(), t.data(), batch, out.data());
        const double splitWall =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - split).count();
        qInfo("as split (%s): %.1f ms per call, %.2f tiles/s", backend.parallelism().c_str(), splitWall / reps,
              reps * batch * 1e3 / splitWall);
    }
};

QTEST_GUILESS_MAIN(TestCpuThreads)
#include "tst_cputhreads.moc"
