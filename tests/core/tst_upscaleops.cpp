// The ops the upscale families (ESRGAN, Real-ESRGAN Compact, SPAN) add to core/graph/ModelGraph.h:
// LeakyReLU, PReLU, PixelShuffle, PixelUnshuffle, nearest Upsample by any integer factor, Sigmoid
// and Mul, each as a one-op graph on the CPU reference backend against a double evaluation written
// here from PyTorch's definitions (nn.LeakyReLU, nn.PReLU, nn.PixelShuffle, F.pixel_unshuffle,
// F.interpolate(mode="nearest")), small cases worked by hand, their shape rules, and the Conv ->
// LeakyReLU fusion (same bits as the two ops apart; nothing fused after it).
#include <QtTest>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/cpu/CpuBackend.h"
#include "core/graph/ModelGraph.h"
#include "core/models/unet/UNetModel.h"

using namespace tessera;

namespace {

std::vector<float> randomVector(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

TensorMap randomWeights(const ModelGraph& g, std::uint32_t seed) {
    TensorMap w;
    for (const GraphParam& p : g.params()) {
        HostTensor t;
        t.shape = p.shape;
        t.data = randomVector(static_cast<std::size_t>(t.numel()), seed++, 0.5f);
        w[p.name] = std::move(t);
    }
    return w;
}

std::vector<float> runCpu(const ModelGraph& g, const TensorMap& w, int batch, int h, int wd,
                          const std::vector<std::vector<float>>& inputs, int threads = 2) {
    CpuBackend cpu(threads);
    cpu.prepareGraph(g, w, batch, h, wd);
    std::vector<const float*> in;
    for (const auto& x : inputs) in.push_back(x.data());
    std::vector<float> out(static_cast<std::size_t>(g.elements(g.outputs().at(0), batch, h, wd)), NAN);
    cpu.run(in, batch, {out.data()});
    return out;
}

GraphOp op(OpKind kind, const char* name, int input, int input2 = -1) {
    GraphOp o;
    o.kind = kind;
    o.name = name;
    o.input = input;
    o.input2 = input2;
    return o;
}

double maxAbsDiff(const std::vector<float>& a, const std::vector<double>& b) {
    double m = 0;
    for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
    return a.size() == b.size() ? m : INFINITY;
}

}  // namespace

class TestUpscaleOps : public QObject {
    Q_OBJECT

private slots:
    void leakyReluSigmoidMul() {
        const int batch = 2, C = 3, h = 5, w = 7;
        const auto n = std::size_t(batch) * C * h * w;
        for (const float slope : {0.2f, 0.05f, 0.01f}) {
            ModelGraph g;
            const int x = g.addInput("x", ValueKind::FeatureMap, C);
            GraphOp o = op(OpKind::LeakyReLU, "act", x);
            o.slope = slope;
            g.markOutput(g.addOp(o));
            const auto in = randomVector(n, 1);
            const auto y = runCpu(g, {}, batch, h, w, {in});
            for (std::size_t i = 0; i < n; ++i) QCOMPARE(y[i], in[i] >= 0 ? in[i] : float(double(slope) * in[i]));
        }
        {
            ModelGraph g;
            g.markOutput(g.addOp(op(OpKind::Sigmoid, "sig", g.addInput("x", ValueKind::FeatureMap, C))));
            const auto in = randomVector(n, 2, 4.0f);
            const auto y = runCpu(g, {}, batch, h, w, {in});
            std::vector<double> ref(n);
            for (std::size_t i = 0; i < n; ++i) ref[i] = 1.0 / (1.0 + std::exp(-double(in[i])));
            QVERIFY(maxAbsDiff(y, ref) < 1e-7);
        }
        {
            ModelGraph g;
            const int a = g.addInput("a", ValueKind::FeatureMap, C), b = g.addInput("b", ValueKind::FeatureMap, C);
            g.markOutput(g.addOp(op(OpKind::Mul, "mul", a, b)));
            const auto xa = randomVector(n, 3), xb = randomVector(n, 4);
            const auto y = runCpu(g, {}, batch, h, w, {xa, xb});
            for (std::size_t i = 0; i < n; ++i) QCOMPARE(y[i], xa[i] * xb[i]);
        }
    }

    void preluPerChannel() {
        // nn.PReLU(num_parameters=3) with weight [0.25, -1, 2]: channel c's negative values times w[c].
        ModelGraph g;
        const int x = g.addInput("x", ValueKind::FeatureMap, 3);
        GraphOp o = op(OpKind::PReLU, "body.1", x);
        o.params = {g.addParam("body.1.weight", {3})};
        g.markOutput(g.addOp(o));
        TensorMap w;
        w["body.1.weight"] = HostTensor{{3}, {0.25f, -1.0f, 2.0f}};
        // [1, 3, 1, 2]: per channel (-4, 3), (-2, 0), (-0.5, 1).
        const std::vector<float> in{-4, 3, -2, 0, -0.5f, 1};
        const auto y = runCpu(g, w, 1, 1, 2, {in});
        const std::vector<float> want{-1, 3, 2, 0, -1, 1};
        QCOMPARE(y, want);
        // And a random case at batch 2 against the definition.
        const auto in2 = randomVector(2 * 3 * 4 * 5, 5);
        const auto y2 = runCpu(g, w, 2, 4, 5, {in2});
        for (std::size_t i = 0; i < in2.size(); ++i) {
            const float wc = w["body.1.weight"].data[i / 20 % 3];
            QCOMPARE(y2[i], in2[i] >= 0 ? in2[i] : wc * in2[i]);
        }
        QVERIFY_THROWS_EXCEPTION(std::logic_error, [] {
            ModelGraph bad;
            GraphOp p = op(OpKind::PReLU, "p", bad.addInput("x", ValueKind::FeatureMap, 3));
            p.params = {bad.addParam("p.weight", {4})};
            bad.addOp(p);
        }());
    }

    void pixelShuffleByHand() {
        // nn.PixelShuffle(2) of [1, 4, 1, 1] = (1, 2, 3, 4) is the 2 x 2 image [[1, 2], [3, 4]];
        // the graph runs at the output's (finest) size, 2 x 2, the input at divisor 2.
        ModelGraph g;
        const int x = g.addInput("x", ValueKind::FeatureMap, 4, 2);
        GraphOp o = op(OpKind::PixelShuffle, "shuffle", x);
        o.factor = 2;
        const int y = g.addOp(o);
        g.markOutput(y);
        QCOMPARE(g.value(y).channels, 1);
        QCOMPARE(g.value(y).divisor, 1);
        QCOMPARE(runCpu(g, {}, 1, 2, 2, {{1, 2, 3, 4}}), (std::vector<float>{1, 2, 3, 4}));
        // [1, 4, 1, 2]: input channel k holds (10k, 10k + 1) at x = 0, 1; out [1, 1, 2, 4]
        // row i, column 2 * x + j = in[2 i + j][x].
        QCOMPARE(runCpu(g, {}, 1, 2, 4, {{0, 1, 10, 11, 20, 21, 30, 31}}),
                 (std::vector<float>{0, 10, 1, 11, 20, 30, 21, 31}));
        // F.pixel_unshuffle(2) of that 2 x 4 image gives the channels back.
        ModelGraph u;
        GraphOp d = op(OpKind::PixelUnshuffle, "unshuffle", u.addInput("img", ValueKind::FeatureMap, 1));
        d.factor = 2;
        const int z = u.addOp(d);
        u.markOutput(z);
        QCOMPARE(u.value(z).channels, 4);
        QCOMPARE(u.value(z).divisor, 2);
        QCOMPARE(runCpu(u, {}, 1, 2, 4, {{0, 10, 1, 11, 20, 30, 21, 31}}),
                 (std::vector<float>{0, 1, 10, 11, 20, 21, 30, 31}));
    }

    void pixelShuffleMatchesDefinition_data() {
        QTest::addColumn<int>("factor");
        QTest::addColumn<int>("channels");  // of the shuffled (fine) map
        QTest::newRow("x2, 3 channels (ESRGAN x2plus input)") << 2 << 3;
        QTest::newRow("x3, 1 channel (Compact upscale 3)") << 3 << 1;
        QTest::newRow("x4, 4 channels (SPAN, RGBA)") << 4 << 4;
    }
    void pixelShuffleMatchesDefinition() {
        QFETCH(int, factor);
        QFETCH(int, channels);
        const int r = factor, batch = 2, h = 3, w = 5;  // coarse size
        ModelGraph g;
        GraphOp o = op(OpKind::PixelShuffle, "s", g.addInput("x", ValueKind::FeatureMap, channels * r * r, r));
        o.factor = r;
        g.markOutput(g.addOp(o));
        const auto in = randomVector(std::size_t(batch) * channels * r * r * h * w, 7);
        const auto y = runCpu(g, {}, batch, h * r, w * r, {in});
        for (int b = 0; b < batch; ++b)
            for (int c = 0; c < channels; ++c)
                for (int oy = 0; oy < h * r; ++oy)
                    for (int ox = 0; ox < w * r; ++ox) {
                        const int src =
                            ((b * channels * r * r + c * r * r + (oy % r) * r + ox % r) * h + oy / r) * w + ox / r;
                        QCOMPARE(y[std::size_t(((b * channels + c) * h * r + oy) * w * r + ox)], in[std::size_t(src)]);
                    }
        // Unshuffle undoes it exactly.
        ModelGraph u;
        GraphOp d = op(OpKind::PixelUnshuffle, "u", u.addInput("img", ValueKind::FeatureMap, channels));
        d.factor = r;
        u.markOutput(u.addOp(d));
        QCOMPARE(runCpu(u, {}, batch, h * r, w * r, {y}), in);
    }

    void shuffleShapeRules() {
        // Shuffling needs the divisor and the channels to divide; the output follows the factor.
        QVERIFY_THROWS_EXCEPTION(std::logic_error, [] {
            ModelGraph g;
            GraphOp o = op(OpKind::PixelShuffle, "s", g.addInput("x", ValueKind::FeatureMap, 12, 1));
            o.factor = 2;
            g.addOp(o);
        }());
        QVERIFY_THROWS_EXCEPTION(std::logic_error, [] {
            ModelGraph g;
            GraphOp o = op(OpKind::PixelShuffle, "s", g.addInput("x", ValueKind::FeatureMap, 10, 2));
            o.factor = 2;
            g.addOp(o);
        }());
        QVERIFY_THROWS_EXCEPTION(std::logic_error, [] {
            ModelGraph g;
            GraphOp o = op(OpKind::Upsample, "up", g.addInput("x", ValueKind::FeatureMap, 3, 4));
            o.factor = 3;
            g.addOp(o);
        }());
        QVERIFY_THROWS_EXCEPTION(std::logic_error, [] {
            ModelGraph g;
            const int a = g.addInput("a", ValueKind::FeatureMap, 3), b = g.addInput("b", ValueKind::FeatureMap, 4);
            g.addOp(op(OpKind::Mul, "m", a, b));
        }());
        // An ESRGAN x2plus input: unshuffled to divisor 4 (12 channels), so tiles are multiples of 4.
        ModelGraph g;
        GraphOp o = op(OpKind::PixelUnshuffle, "u", g.addInput("image", ValueKind::FeatureMap, 3, 2));
        o.factor = 2;
        const int y = g.addOp(o);
        QCOMPARE(g.value(y).channels, 12);
        QCOMPARE(g.value(y).divisor, 4);
        QCOMPARE(g.downsampleFactor(), 4);
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, g.checkTileSize(6, 8));
        QCOMPARE(g.describe(g.ops()[0]), std::string("pixel_unshuffle x2 3->12 @1/4"));
    }

    void upsampleAnyFactor_data() {
        QTest::addColumn<int>("factor");
        QTest::newRow("x2") << 2;
        QTest::newRow("x3") << 3;
        QTest::newRow("x4") << 4;
        QTest::newRow("x8") << 8;
    }
    void upsampleAnyFactor() {
        QFETCH(int, factor);
        const int C = 3, h = 3, w = 4;
        ModelGraph g;
        GraphOp o = op(OpKind::Upsample, "up", g.addInput("x", ValueKind::FeatureMap, C, factor));
        o.factor = factor;
        const int y = g.addOp(o);
        g.markOutput(y);
        QCOMPARE(g.value(y).divisor, 1);
        const auto in = randomVector(std::size_t(2) * C * h * w, 9);
        const auto out = runCpu(g, {}, 2, h * factor, w * factor, {in});
        const int H = h * factor, W = w * factor;
        for (int p = 0; p < 2 * C; ++p)
            for (int oy = 0; oy < H; ++oy)
                for (int ox = 0; ox < W; ++ox)
                    QCOMPARE(out[std::size_t((p * H + oy) * W + ox)],
                             in[std::size_t((p * h + oy / factor) * w + ox / factor)]);
        // The default factor keeps the former description ("upsample 3ch @1/1").
        if (factor == 2) QCOMPARE(g.describe(g.ops()[0]), std::string("upsample 3ch @1/1"));
    }

    void convLeakyReluFusion() {
        // conv -> LeakyReLU(0.2) fuses into the conv's epilogue with the same bits; a 1x1 conv
        // (the pointwise GEMM path) and a 3x3 (im2col) both.
        for (const int kernel : {1, 3}) {
            ModelGraph g;
            const int x = g.addInput("x", ValueKind::FeatureMap, 5);
            GraphOp c = op(OpKind::Conv, "conv", x);
            c.channels = 6;
            c.kernel = kernel;
            c.padBegin = c.padEnd = kernel / 2;
            c.params = {g.addParam("conv.weight", {6, 5, kernel, kernel}), g.addParam("conv.bias", {6})};
            const int cv = g.addOp(c);
            GraphOp a = op(OpKind::LeakyReLU, "act", cv);
            a.slope = 0.2f;
            g.markOutput(g.addOp(a));
            const ModelGraph f = fuseForExecution(g);
            QCOMPARE(f.ops().size(), std::size_t(1));
            QVERIFY(f.ops()[0].leakyRelu);
            QCOMPARE(f.ops()[0].slope, 0.2f);
            QVERIFY(f.describe(f.ops()[0]).find("+lrelu 0.2") != std::string::npos);
            const TensorMap w = randomWeights(g, 20);
            const auto in = randomVector(std::size_t(2) * 5 * 9 * 11, 21);
            const auto apart = runCpu(g, w, 2, 9, 11, {in});
            const auto fused = runCpu(f, w, 2, 9, 11, {in}, 3);
            QCOMPARE(fused, apart);
            std::size_t negatives = 0;
            for (float v : apart) negatives += v < 0 ? 1 : 0;
            QVERIFY(negatives > apart.size() / 10);  // the slope mattered
        }
    }

    void fusionOrder() {
        // conv -> add(r) -> LeakyReLU: lrelu(conv + b + r), one op; conv -> LeakyReLU -> add: the
        // add stays apart (the residual would otherwise be added before the activation), and so
        // does a scale after the activation.
        ModelGraph g;
        const int x = g.addInput("x", ValueKind::FeatureMap, 4), r = g.addInput("r", ValueKind::FeatureMap, 4);
        auto conv = [&](const char* name, int in) {
            GraphOp c = op(OpKind::Conv, name, in);
            c.channels = 4;
            c.kernel = 3;
            c.padBegin = c.padEnd = 1;
            c.params = {g.addParam(std::string(name) + ".weight", {4, 4, 3, 3}),
                        g.addParam(std::string(name) + ".bias", {4})};
            return g.addOp(c);
        };
        auto lrelu = [&](const char* name, int in) {
            GraphOp a = op(OpKind::LeakyReLU, name, in);
            a.slope = 0.2f;
            return g.addOp(a);
        };
        const int a = lrelu("a.act", g.addOp(op(OpKind::Add, "a.add", conv("a", x), r)));
        const int b = g.addOp(op(OpKind::Add, "b.add", lrelu("b.act", conv("b", a)), r));
        GraphOp s = op(OpKind::Affine, "c.scale", lrelu("c.act", conv("c", b)));
        s.scale = 0.5f;
        g.markOutput(g.addOp(s));
        const ModelGraph f = fuseForExecution(g);
        QCOMPARE(f.ops().size(), std::size_t(5));
        QVERIFY(f.ops()[0].leakyRelu && f.ops()[0].residual >= 0);
        QVERIFY(f.ops()[1].leakyRelu && f.ops()[1].residual < 0);
        QCOMPARE(f.ops()[2].kind, OpKind::Add);
        QVERIFY(f.ops()[3].leakyRelu && f.ops()[3].outputScale == 1.0f);
        QCOMPARE(f.ops()[4].kind, OpKind::Affine);
        const TensorMap w = randomWeights(g, 30);
        const auto in = randomVector(4 * 6 * 7, 31), res = randomVector(4 * 6 * 7, 32);
        // The fused residual is added with the bias before the GEMM: equal within rounding.
        const auto fused = runCpu(f, w, 1, 6, 7, {in, res}), apart = runCpu(g, w, 1, 6, 7, {in, res});
        QCOMPARE(maxAbsDiff(fused, std::vector<double>(apart.begin(), apart.end())) < 1e-5, true);
        // A LeakyReLU cannot ride on anything but a conv.
        QVERIFY_THROWS_EXCEPTION(std::logic_error, [] {
            ModelGraph bad;
            GraphOp o = op(OpKind::SiLU, "s", bad.addInput("x", ValueKind::FeatureMap, 3));
            o.leakyRelu = true;
            bad.addOp(o);
        }());
    }
};

QTEST_APPLESS_MAIN(TestUpscaleOps)
#include "tst_upscaleops.moc"
