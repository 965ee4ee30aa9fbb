// The token-sequence ops of core/graph/ModelGraph.h (ToTokens, ToFeatureMap, LayerNorm, Linear over
// tokens, Attention over tokens with context / causal mask / no q,k,v bias, GEGLU, GELU,
// QuickGELU) on the CPU reference backend, each as a one-op graph, against a double-precision
// evaluation written here from the op's definition (no code shared with core/cpu/CpuBackend.cpp).
// Also: a tile batch gives every image the bits it gets alone.
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/cpu/CpuBackend.h"
#include "core/graph/ModelGraph.h"
#include "core/models/unet/UNetModel.h"

using namespace tessera;

namespace {

using Values = std::vector<double>;

std::vector<float> randomVector(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

// Every parameter of `g` ~N(0, scale^2).
TensorMap randomWeights(const ModelGraph& g, std::uint32_t seed, float scale = 0.5f) {
    TensorMap w;
    for (const GraphParam& p : g.params()) {
        HostTensor t;
        t.shape = p.shape;
        t.data = randomVector(static_cast<std::size_t>(t.numel()), seed++, scale);
        w[p.name] = std::move(t);
    }
    return w;
}

const std::vector<float>& param(const TensorMap& w, const std::string& name) { return w.at(name).data; }

std::vector<float> runCpu(const ModelGraph& g, const TensorMap& w, int batch, int h, int wd,
                          const std::vector<std::vector<float>>& inputs) {
    CpuBackend cpu(2);
    cpu.prepareGraph(g, w, batch, h, wd);
    std::vector<const float*> in;
    for (const auto& x : inputs) in.push_back(x.data());
    std::vector<float> out(static_cast<std::size_t>(g.elements(g.outputs().at(0), batch, h, wd)), NAN);
    cpu.run(in, batch, {out.data()});
    return out;
}

std::vector<std::vector<float>> inputsFor(const ModelGraph& g, int batch, int h, int w, std::uint32_t seed) {
    std::vector<std::vector<float>> in;
    for (int v : g.inputs()) in.push_back(randomVector(static_cast<std::size_t>(g.elements(v, batch, h, w)), seed++));
    return in;
}

// max |a - b| <= tol * max(1, max |b|)
void expectClose(const std::vector<float>& a, const Values& b, double tol) {
    QCOMPARE(a.size(), b.size());
    double worst = 0, scale = 1;
    for (std::size_t i = 0; i < b.size(); ++i) {
        worst = std::max(worst, std::abs(double(a[i]) - b[i]));
        scale = std::max(scale, std::abs(b[i]));
    }
    QVERIFY2(worst <= tol * scale, qPrintable(QString("max |diff| %1 > %2").arg(worst).arg(tol * scale)));
}

// rows x [rows, in] -> [rows, out]: x W^T + b (b may be empty).
Values linearRows(const float* x, int rows, int in, const std::vector<float>& W, const std::vector<float>* b, int out) {
    Values y(static_cast<std::size_t>(rows) * out);
    for (int r = 0; r < rows; ++r)
        for (int o = 0; o < out; ++o) {
            double s = b ? (*b)[o] : 0.0;
            for (int i = 0; i < in; ++i) s += double(x[r * in + i]) * W[std::size_t(o) * in + i];
            y[std::size_t(r) * out + o] = s;
        }
    return y;
}

double geluExact(double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); }

GraphOp makeOp(OpKind kind, const std::string& name, int input, int input2 = -1) {
    GraphOp op;
    op.kind = kind;
    op.name = name;
    op.input = input;
    op.input2 = input2;
    return op;
}

std::vector<int> params(ModelGraph& g, const std::string& prefix,
                        const std::vector<std::pair<const char*, std::vector<std::int64_t>>>& list) {
    std::vector<int> ids;
    for (const auto& [name, shape] : list) ids.push_back(g.addParam(prefix + name, shape));
    return ids;
}

// Attention over tokens in double: one image, queries x [N, C], keys/values from ctx [M, Ckv].
Values attentionRef(const float* x, int N, int C, const float* ctx, int M, int Ckv, int heads, bool causal,
                    const TensorMap& w, const std::string& p, bool bias) {
    auto get = [&](const char* n) { return &param(w, p + n); };
    const Values q = linearRows(x, N, C, *get(".to_q.weight"), bias ? get(".to_q.bias") : nullptr, C);
    const Values k = linearRows(ctx, M, Ckv, *get(".to_k.weight"), bias ? get(".to_k.bias") : nullptr, C);
    const Values v = linearRows(ctx, M, Ckv, *get(".to_v.weight"), bias ? get(".to_v.bias") : nullptr, C);
    const int d = C / heads;
    std::vector<float> o(static_cast<std::size_t>(N) * C);
    for (int h = 0; h < heads; ++h)
        for (int i = 0; i < N; ++i) {
            const int keys = causal ? i + 1 : M;
            Values s(static_cast<std::size_t>(keys));
            double m = -1e300, sum = 0;
            for (int j = 0; j < keys; ++j) {
                double dot = 0;
                for (int c = 0; c < d; ++c)
                    dot += q[std::size_t(i) * C + h * d + c] * k[std::size_t(j) * C + h * d + c];
                s[j] = dot / std::sqrt(double(d));
                m = std::max(m, s[j]);
            }
            for (double& e : s) sum += (e = std::exp(e - m));
            for (int c = 0; c < d; ++c) {
                double acc = 0;
                for (int j = 0; j < keys; ++j) acc += s[j] / sum * v[std::size_t(j) * C + h * d + c];
                o[std::size_t(i) * C + h * d + c] = static_cast<float>(acc);  // the output GEMM's input precision
            }
        }
    return linearRows(o.data(), N, C, param(w, p + ".to_out.0.weight"), &param(w, p + ".to_out.0.bias"), C);
}

}  // namespace

class TestTokenOps : public QObject {
    Q_OBJECT

private slots:
    // [B, C, H, W] <-> [B, H*W, C], token index y * W + x, at a tile divisor of 2.
    void tokensAndFeatureMaps() {
        ModelGraph g;
        const int x = g.addInput("x", ValueKind::FeatureMap, 3, 2);
        const int t = g.addOp(makeOp(OpKind::ToTokens, "tokens", x));
        QCOMPARE(g.value(t).kind, ValueKind::Tokens);
        g.markOutput(t);
        const int batch = 2, h = 4, w = 6, H = 2, W = 3, C = 3;
        QCOMPARE(g.shape(t, batch, h, w), (std::vector<std::int64_t>{batch, H * W, C}));
        const auto in = inputsFor(g, batch, h, w, 1);
        const auto y = runCpu(g, {}, batch, h, w, in);
        for (int b = 0; b < batch; ++b)
            for (int c = 0; c < C; ++c)
                for (int p = 0; p < H * W; ++p)
                    QCOMPARE(y[(std::size_t(b) * H * W + p) * C + c], in[0][(std::size_t(b) * C + c) * H * W + p]);

        ModelGraph back;
        const int tok = back.addInput("t", ValueKind::Tokens, 3, 2);
        const int res = back.addInput("r", ValueKind::FeatureMap, 3, 2);
        GraphOp op = makeOp(OpKind::ToFeatureMap, "map", tok);
        op.residual = res;
        back.markOutput(back.addOp(op));
        const auto in2 = inputsFor(back, batch, h, w, 5);
        const auto m = runCpu(back, {}, batch, h, w, in2);
        for (int b = 0; b < batch; ++b)
            for (int c = 0; c < C; ++c)
                for (int p = 0; p < H * W; ++p) {
                    const std::size_t nchw = (std::size_t(b) * C + c) * H * W + p;
                    QCOMPARE(m[nchw], in2[0][(std::size_t(b) * H * W + p) * C + c] + in2[1][nchw]);
                }
    }

    void layerNorm() {
        ModelGraph g;
        const int x = g.addTokenInput("x", 5, 6);
        GraphOp op = makeOp(OpKind::LayerNorm, "ln", x);
        op.eps = 1e-5f;
        op.params = params(g, "ln", {{".weight", {6}}, {".bias", {6}}});
        g.markOutput(g.addOp(op));
        const TensorMap w = randomWeights(g, 3);
        const int batch = 2;
        auto in = inputsFor(g, batch, 8, 8, 4);
        for (float& v : in[0]) v = v * 3.0f + 2.0f;  // a mean and a scale to remove
        Values ref;
        for (int r = 0; r < batch * 5; ++r) {
            const float* v = in[0].data() + r * 6;
            double mean = 0, var = 0;
            for (int c = 0; c < 6; ++c) mean += v[c] / 6.0;
            for (int c = 0; c < 6; ++c) var += (v[c] - mean) * (v[c] - mean) / 6.0;
            for (int c = 0; c < 6; ++c)
                ref.push_back((v[c] - mean) / std::sqrt(var + 1e-5) * param(w, "ln.weight")[c] +
                              param(w, "ln.bias")[c]);
        }
        expectClose(runCpu(g, w, batch, 8, 8, in), ref, 1e-6);
    }

    // Per token, with a residual; the tokens follow the tile (2 x 3 at divisor 1).
    void linearOverTokens() {
        ModelGraph g;
        const int x = g.addInput("x", ValueKind::Tokens, 4, 1);
        const int r = g.addInput("r", ValueKind::Tokens, 5, 1);
        GraphOp op = makeOp(OpKind::Linear, "fc", x);
        op.channels = 5;
        op.residual = r;
        op.params = params(g, "fc", {{".weight", {5, 4}}, {".bias", {5}}});
        const int y = g.addOp(op);
        QCOMPARE(g.value(y).kind, ValueKind::Tokens);
        g.markOutput(y);
        const TensorMap w = randomWeights(g, 7);
        const int batch = 2, h = 2, wd = 3;
        const auto in = inputsFor(g, batch, h, wd, 8);
        Values ref = linearRows(in[0].data(), batch * 6, 4, param(w, "fc.weight"), &param(w, "fc.bias"), 5);
        for (std::size_t i = 0; i < ref.size(); ++i) ref[i] += in[1][i];
        expectClose(runCpu(g, w, batch, h, wd, in), ref, 1e-6);
        QCOMPARE(g.flops(g.ops()[0], h, wd), 2.0 * 4 * 5 * 6);
    }

    void activations_data() {
        QTest::addColumn<int>("kind");
        QTest::addColumn<bool>("tanhApproximation");
        QTest::newRow("gelu exact") << int(OpKind::GELU) << false;
        QTest::newRow("gelu tanh") << int(OpKind::GELU) << true;
        QTest::newRow("quick_gelu") << int(OpKind::QuickGELU) << false;
    }
    void activations() {
        QFETCH(int, kind);
        QFETCH(bool, tanhApproximation);
        ModelGraph g;
        const int x = g.addTokenInput("x", 7, 9);
        GraphOp op = makeOp(static_cast<OpKind>(kind), "act", x);
        op.geluTanh = tanhApproximation;
        g.markOutput(g.addOp(op));
        auto in = inputsFor(g, 2, 8, 8, 11);
        for (float& v : in[0]) v *= 3.0f;
        Values ref;
        for (float v : in[0]) {
            const double d = v;
            if (static_cast<OpKind>(kind) == OpKind::QuickGELU)
                ref.push_back(d / (1.0 + std::exp(-1.702 * d)));
            else if (tanhApproximation)
                ref.push_back(0.5 * d * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (d + 0.044715 * d * d * d))));
            else
                ref.push_back(geluExact(d));
        }
        expectClose(runCpu(g, {}, 2, 8, 8, in), ref, 2e-6);
    }

    // proj [2 * inner, C]: the first half of the rows is the value, the second the gate.
    void geglu() {
        ModelGraph g;
        const int x = g.addInput("x", ValueKind::Tokens, 4, 1);
        GraphOp op = makeOp(OpKind::GEGLU, "ff.net.0", x);
        op.channels = 3;
        op.params = params(g, "ff.net.0.proj", {{".weight", {6, 4}}, {".bias", {6}}});
        g.markOutput(g.addOp(op));
        const TensorMap w = randomWeights(g, 13, 1.0f);
        const int batch = 2, h = 2, wd = 2;
        const auto in = inputsFor(g, batch, h, wd, 14);
        const Values p = linearRows(in[0].data(), batch * 4, 4, param(w, "ff.net.0.proj.weight"),
                                    &param(w, "ff.net.0.proj.bias"), 6);
        Values ref;
        for (int r = 0; r < batch * 4; ++r)
            for (int o = 0; o < 3; ++o)
                ref.push_back(p[std::size_t(r) * 6 + o] * geluExact(p[std::size_t(r) * 6 + 3 + o]));
        expectClose(runCpu(g, w, batch, h, wd, in), ref, 1e-6);
        QCOMPARE(g.flops(g.ops()[0], h, wd), 2.0 * 4 * 6 * 4);
    }

    void attention_data() {
        QTest::addColumn<bool>("context");
        QTest::addColumn<bool>("causal");
        QTest::addColumn<bool>("bias");
        QTest::addColumn<bool>("residual");
        QTest::newRow("self, tile tokens, no bias (SD attn1)") << false << false << false << true;
        QTest::newRow("cross, 9 context tokens of 5 (SD attn2)") << true << false << false << true;
        QTest::newRow("self causal with q/k/v bias (CLIP)") << false << true << true << false;
        QTest::newRow("self with q/k/v bias, no residual") << false << false << true << false;
    }
    void attention() {
        QFETCH(bool, context);
        QFETCH(bool, causal);
        QFETCH(bool, bias);
        QFETCH(bool, residual);
        const int C = 8, heads = 2, M = 9, Ckv = 5;
        ModelGraph g;
        // CLIP's sequence is a fixed 7 tokens; SD's the 3 x 4 pixels of the tile
        const int x = causal ? g.addTokenInput("x", 7, C) : g.addInput("x", ValueKind::Tokens, C, 1);
        const int ctx = context ? g.addTokenInput("ctx", M, Ckv) : -1;
        GraphOp op = makeOp(OpKind::Attention, "attn", x, ctx);
        op.heads = heads;
        op.causal = causal;
        op.qkvBias = bias;
        const std::int64_t kv = context ? Ckv : C;
        std::vector<std::pair<const char*, std::vector<std::int64_t>>> list{{".to_q.weight", {C, C}}};
        if (bias) list.push_back({".to_q.bias", {C}});
        list.push_back({".to_k.weight", {C, kv}});
        if (bias) list.push_back({".to_k.bias", {C}});
        list.push_back({".to_v.weight", {C, kv}});
        if (bias) list.push_back({".to_v.bias", {C}});
        list.push_back({".to_out.0.weight", {C, C}});
        list.push_back({".to_out.0.bias", {C}});
        op.params = params(g, "attn", list);
        if (residual) op.residual = x;
        g.markOutput(g.addOp(op));
        const TensorMap w = randomWeights(g, 21, 0.8f);
        const int batch = 2, h = 3, wd = 4;
        const int N = static_cast<int>(g.rows(x, h, wd));
        const auto in = inputsFor(g, batch, h, wd, 22);
        Values ref;
        for (int b = 0; b < batch; ++b) {
            const float* xb = in[0].data() + std::size_t(b) * N * C;
            const float* cb = context ? in[1].data() + std::size_t(b) * M * Ckv : xb;
            Values one = attentionRef(xb, N, C, cb, context ? M : N, context ? Ckv : C, heads, causal, w, "attn", bias);
            for (std::size_t i = 0; i < one.size(); ++i) ref.push_back(one[i] + (residual ? xb[i] : 0.0));
        }
        const auto y = runCpu(g, w, batch, h, wd, in);
        expectClose(y, ref, 2e-6);
        // A tile batch gives each image the bits it gets alone.
        std::vector<std::vector<float>> first;
        for (std::size_t k = 0; k < in.size(); ++k)
            first.emplace_back(in[k].begin(), in[k].begin() + static_cast<std::ptrdiff_t>(in[k].size() / batch));
        const auto alone = runCpu(g, w, 1, h, wd, first);
        QVERIFY(std::equal(alone.begin(), alone.end(), y.begin()));
        if (causal) {  // the mask matters: without it the first query sees every key
            GraphOp open = g.ops()[0];
            open.causal = false;
            ModelGraph g2;
            g2.addTokenInput("x", 7, C);
            for (const GraphParam& p : g.params()) g2.addParam(p.name, p.shape);
            g2.markOutput(g2.addOp(open));
            const auto y2 = runCpu(g2, w, batch, h, wd, in);
            QVERIFY(std::abs(y2[0] - y[0]) > 1e-3);
            QVERIFY(std::equal(y2.end() - C, y2.end(), y.end() - C));  // the last query sees all keys either way
        }
    }
};

QTEST_GUILESS_MAIN(TestTokenOps)
#include "tst_tokenops.moc"
