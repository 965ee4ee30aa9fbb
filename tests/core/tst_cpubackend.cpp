// CpuBackend: every primitive against a direct double-precision implementation written here,
// the graph against google/ddpm-cifar10-32's tensor list, and whole forwards against the PyTorch
// goldens.
#include <QtTest>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "core/cpu/CpuBackend.h"
#include "core/formats/Safetensors.h"
#include "core/graph/TimestepEmbedding.h"
#include "core/models/unet/UNetGraph.h"
#include "core/models/unet/UNetModel.h"
#include "tests/core/NumericCompare.h"

using namespace tessera;

namespace {

std::vector<float> randomVector(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

double maxAbs(const std::vector<float>& a, const std::vector<double>& b) {
    double m = 0;
    for (std::size_t i = 0; i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
}

double siluD(double v) { return v / (1.0 + std::exp(-v)); }

// Direct convolution in double: out[o, oy, ox] = b[o] + sum w[o, i, ky, kx] * in[i, iy, ix], with
// iy = oy*stride + ky - padTop; positions outside the input read 0.
std::vector<double> convDirect(const std::vector<float>& x, int cin, int h, int w, const std::vector<float>& wt,
                               const std::vector<float>& b, int cout, int k, int stride, int padTop, int hout,
                               int wout) {
    std::vector<double> y(static_cast<std::size_t>(cout) * hout * wout);
    for (int o = 0; o < cout; ++o)
        for (int oy = 0; oy < hout; ++oy)
            for (int ox = 0; ox < wout; ++ox) {
                double s = b[static_cast<std::size_t>(o)];
                for (int i = 0; i < cin; ++i)
                    for (int ky = 0; ky < k; ++ky)
                        for (int kx = 0; kx < k; ++kx) {
                            const int iy = oy * stride + ky - padTop, ix = ox * stride + kx - padTop;
                            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                            s += double(wt[((std::size_t(o) * cin + i) * k + ky) * k + kx]) *
                                 x[(std::size_t(i) * h + iy) * w + ix];
                        }
                y[(std::size_t(o) * hout + oy) * wout + ox] = s;
            }
    return y;
}

std::vector<double> groupNormDirect(const std::vector<float>& x, int batch, int C, int P, int G, double eps,
                                    const std::vector<float>& gamma, const std::vector<float>& beta,
                                    const float* preAdd, const float* scaleShift, bool silu) {
    std::vector<double> y(x.size());
    const int cpg = C / G;
    for (int b = 0; b < batch; ++b)
        for (int g = 0; g < G; ++g) {
            auto v = [&](int c, int p) {
                return double(x[(std::size_t(b) * C + c) * P + p]) + (preAdd ? preAdd[b * C + c] : 0.0);
            };
            double mean = 0, var = 0;
            for (int c = g * cpg; c < (g + 1) * cpg; ++c)
                for (int p = 0; p < P; ++p) mean += v(c, p);
            mean /= double(cpg) * P;
            for (int c = g * cpg; c < (g + 1) * cpg; ++c)
                for (int p = 0; p < P; ++p) var += (v(c, p) - mean) * (v(c, p) - mean);
            var /= double(cpg) * P;
            for (int c = g * cpg; c < (g + 1) * cpg; ++c)
                for (int p = 0; p < P; ++p) {
                    double r = (v(c, p) - mean) / std::sqrt(var + eps) * gamma[std::size_t(c)] + beta[std::size_t(c)];
                    if (scaleShift) r = r * (1.0 + scaleShift[b * 2 * C + c]) + scaleShift[b * 2 * C + C + c];
                    y[(std::size_t(b) * C + c) * P + p] = silu ? siluD(r) : r;
                }
        }
    return y;
}

// Spatial self-attention (diffusers models/attention_processor.py, AttnProcessor on a feature map)
// in double with tokens as rows: X [N, C] = x^T.
std::vector<double> attentionDirect(const std::vector<float>& x, int C, int N, int heads, const float* gamma,
                                    const float* beta, int groups, double eps, const std::vector<float>* W,
                                    const std::vector<float>* B, double outScale) {
    std::vector<double> xn(x.begin(), x.end());
    if (gamma) {
        std::vector<float> g(gamma, gamma + C), bt(beta, beta + C);
        xn = groupNormDirect(x, 1, C, N, groups, eps, g, bt, nullptr, nullptr, false);
    }
    // proj[m][n][c] = sum_k W_m[c, k] xn[k, n] + B_m[c]
    std::vector<std::vector<double>> proj(3, std::vector<double>(std::size_t(N) * C));
    for (int m = 0; m < 3; ++m)
        for (int n = 0; n < N; ++n)
            for (int c = 0; c < C; ++c) {
                double s = B[m][std::size_t(c)];
                for (int k = 0; k < C; ++k) s += double(W[m][std::size_t(c) * C + k]) * xn[std::size_t(k) * N + n];
                proj[std::size_t(m)][std::size_t(n) * C + c] = s;
            }
    const int d = C / heads;
    std::vector<double> o(std::size_t(N) * C);
    for (int h = 0; h < heads; ++h)
        for (int i = 0; i < N; ++i) {
            std::vector<double> s(static_cast<std::size_t>(N));
            double m = -1e300;
            for (int j = 0; j < N; ++j) {
                double dot = 0;
                for (int c = h * d; c < (h + 1) * d; ++c)
                    dot += proj[0][std::size_t(i) * C + c] * proj[1][std::size_t(j) * C + c];
                s[std::size_t(j)] = dot / std::sqrt(double(d));
                m = std::max(m, s[std::size_t(j)]);
            }
            double sum = 0;
            for (double& e : s) sum += (e = std::exp(e - m));
            for (int c = h * d; c < (h + 1) * d; ++c) {
                double acc = 0;
                for (int j = 0; j < N; ++j) acc += s[std::size_t(j)] / sum * proj[2][std::size_t(j) * C + c];
                o[std::size_t(i) * C + c] = acc;
            }
        }
    std::vector<double> y(std::size_t(C) * N);
    for (int c = 0; c < C; ++c)
        for (int n = 0; n < N; ++n) {
            double s = B[3][std::size_t(c)];
            for (int k = 0; k < C; ++k) s += double(W[3][std::size_t(c) * C + k]) * o[std::size_t(n) * C + k];
            y[std::size_t(c) * N + n] = (s + x[std::size_t(c) * N + n]) * outScale;
        }
    return y;
}

// A small model with every structural feature: attention down, up and mid, several heads,
// shortcuts, both resampler kinds.
UNetConfig smallConfig() {
    UNetConfig c;
    c.blockOutChannels = {16, 32, 32};
    c.downBlocks = {DownBlockType::Down, DownBlockType::AttnDown, DownBlockType::Down};
    c.upBlocks = {UpBlockType::Up, UpBlockType::AttnUp, UpBlockType::Up};
    c.layersPerBlock = 1;
    c.normNumGroups = 8;
    c.attentionHeadDim = 8;
    c.downsamplePadding = 0;
    c.freqShift = 1;
    c.flipSinToCos = false;
    c.normEps = 1e-6f;
    return c;
}

UNetConfig cifar10Config() {
    UNetConfig c;
    c.sampleSize = 32;
    c.blockOutChannels = {128, 256, 256, 256};
    c.downBlocks = {DownBlockType::Down, DownBlockType::AttnDown, DownBlockType::Down, DownBlockType::Down};
    c.upBlocks = {UpBlockType::Up, UpBlockType::Up, UpBlockType::AttnUp, UpBlockType::Up};
    c.attentionHeadDim.reset();
    c.normEps = 1e-6f;
    c.downsamplePadding = 0;
    c.freqShift = 1;
    c.flipSinToCos = false;
    return c;
}

std::vector<float> forwardOnce(CpuBackend& backend, const std::vector<float>& x, const std::vector<float>& t, int batch,
                               std::size_t outPerImage) {
    std::vector<float> out(outPerImage * std::size_t(batch));
    backend.forward(x.data(), t.data(), batch, out.data());
    return out;
}

}  // namespace

class TestCpuBackend : public QObject {
    Q_OBJECT

private slots:
    // Blocks of the output cut through rows: tests/core/tst_cputhreads.cpp.
    void conv3x3MatchesDirectLoop_data() {
        QTest::addColumn<bool>("withResidual");
        QTest::newRow("no residual") << false;
        QTest::newRow("residual") << true;
    }
    void conv3x3MatchesDirectLoop() {
        QFETCH(bool, withResidual);
        const int cin = 5, cout = 7, h = 9, w = 11;
        const auto s = cpu::ConvShape::same(cin, cout, h, w, 3);
        QCOMPARE(s.hout, h);
        auto x = randomVector(std::size_t(cin) * h * w, 1), wt = randomVector(std::size_t(cout) * cin * 9, 2, 0.3f),
             b = randomVector(std::size_t(cout), 3), res = randomVector(std::size_t(cout) * h * w, 4);
        std::vector<float> y(std::size_t(cout) * h * w);
        cpu::WorkerPool pool(3);
        const float scale = withResidual ? 0.5f : 1.0f;
        cpu::conv2d(pool, s, x.data(), wt.data(), b.data(), withResidual ? res.data() : nullptr, scale, y.data());
        auto ref = convDirect(x, cin, h, w, wt, b, cout, 3, 1, 1, h, w);
        if (withResidual)
            for (std::size_t i = 0; i < ref.size(); ++i) ref[i] = (ref[i] + res[i]) * scale;
        QVERIFY2(maxAbs(y, ref) < 1e-5, qPrintable(QString::number(maxAbs(y, ref))));
    }

    void conv1x1IsAPlainGemm() {
        const int cin = 6, cout = 4, h = 5, w = 3;
        const auto s = cpu::ConvShape::same(cin, cout, h, w, 1);
        QCOMPARE(cpu::convWorkerFloats(s), std::size_t(0));
        auto x = randomVector(std::size_t(cin) * h * w, 5), wt = randomVector(std::size_t(cout) * cin, 6),
             b = randomVector(std::size_t(cout), 7);
        std::vector<float> y(std::size_t(cout) * h * w);
        cpu::WorkerPool pool(2);
        cpu::conv2d(pool, s, x.data(), wt.data(), b.data(), nullptr, 1.0f, y.data());
        QVERIFY(maxAbs(y, convDirect(x, cin, h, w, wt, b, cout, 1, 1, 0, h, w)) < 1e-5);
    }

    void downsampleBothPaddings_data() {
        QTest::addColumn<int>("padding");
        QTest::newRow("downsample_padding 0 (right/bottom)") << 0;
        QTest::newRow("downsample_padding 1 (symmetric)") << 1;
    }
    void downsampleBothPaddings() {
        QFETCH(int, padding);
        const int c = 4, h = 8, w = 10;
        const auto s = cpu::ConvShape::downsample(c, h, w, padding);
        QCOMPARE(s.hout, h / 2);
        QCOMPARE(s.wout, w / 2);
        auto x = randomVector(std::size_t(c) * h * w, 8), wt = randomVector(std::size_t(c) * c * 9, 9, 0.3f),
             b = randomVector(std::size_t(c), 10);
        std::vector<double> ref;
        if (padding == 0) {
            // Downsample2D literally (diffusers models/downsampling.py, F.pad(x, (0, 1, 0, 1))): pad
            // one zero column right and one zero row at the bottom, then a valid (unpadded)
            // stride-2 convolution.
            std::vector<float> padded(std::size_t(c) * (h + 1) * (w + 1), 0.0f);
            for (int ch = 0; ch < c; ++ch)
                for (int yy = 0; yy < h; ++yy)
                    for (int xx = 0; xx < w; ++xx)
                        padded[(std::size_t(ch) * (h + 1) + yy) * (w + 1) + xx] =
                            x[(std::size_t(ch) * h + yy) * w + xx];
            ref = convDirect(padded, c, h + 1, w + 1, wt, b, c, 3, 2, 0, h / 2, w / 2);
        } else {
            ref = convDirect(x, c, h, w, wt, b, c, 3, 2, 1, h / 2, w / 2);
        }
        std::vector<float> y(std::size_t(c) * s.hout * s.wout);
        cpu::WorkerPool pool(2);
        cpu::conv2d(pool, s, x.data(), wt.data(), b.data(), nullptr, 1.0f, y.data());
        QVERIFY2(maxAbs(y, ref) < 1e-5, qPrintable(QString::number(maxAbs(y, ref))));
        // The two paddings must really differ (the test would be blind otherwise).
        const auto other = padding == 0 ? convDirect(x, c, h, w, wt, b, c, 3, 2, 1, h / 2, w / 2) : ref;
        if (padding == 0) QVERIFY(maxAbs(y, other) > 1e-2);
    }

    void groupNormMatchesDouble_data() {
        QTest::addColumn<bool>("preAdd");
        QTest::addColumn<bool>("film");
        QTest::addColumn<bool>("silu");
        QTest::newRow("plain") << false << false << false;
        QTest::newRow("silu") << false << false << true;
        QTest::newRow("pre-add (time embedding), silu") << true << false << true;
        QTest::newRow("scale_shift, silu") << false << true << true;
    }
    void groupNormMatchesDouble() {
        QFETCH(bool, preAdd);
        QFETCH(bool, film);
        QFETCH(bool, silu);
        const int batch = 2, C = 12, P = 35, G = 4;
        auto x = randomVector(std::size_t(batch) * C * P, 11, 2.0f);
        for (float& v : x) v += 3.0f;  // a large mean exercises the two-pass variance
        auto gamma = randomVector(C, 12), beta = randomVector(C, 13), add = randomVector(std::size_t(batch) * C, 14),
             ss = randomVector(std::size_t(batch) * 2 * C, 15, 0.5f);
        std::vector<float> y(x.size());
        cpu::WorkerPool pool(3);
        cpu::groupNorm(pool, batch, C, P, G, 1e-6f, x.data(), gamma.data(), beta.data(), preAdd ? add.data() : nullptr,
                       film ? ss.data() : nullptr, silu, y.data());
        const auto ref = groupNormDirect(x, batch, C, P, G, 1e-6, gamma, beta, preAdd ? add.data() : nullptr,
                                         film ? ss.data() : nullptr, silu);
        QVERIFY2(maxAbs(y, ref) < 2e-5, qPrintable(QString::number(maxAbs(y, ref))));
        // In place (y aliasing x) is allowed.
        cpu::groupNorm(pool, batch, C, P, G, 1e-6f, x.data(), gamma.data(), beta.data(), preAdd ? add.data() : nullptr,
                       film ? ss.data() : nullptr, silu, x.data());
        QCOMPARE(x, y);
    }

    void attentionMatchesDouble_data() {
        QTest::addColumn<int>("heads");
        QTest::addColumn<bool>("norm");
        QTest::addColumn<int>("queryBlock");
        QTest::newRow("1 head, group norm") << 1 << true << 0;
        QTest::newRow("4 heads, group norm, query blocks of 7") << 4 << true << 7;
        QTest::newRow("2 heads, no group norm, rescale") << 2 << false << 0;
    }
    void attentionMatchesDouble() {
        QFETCH(int, heads);
        QFETCH(bool, norm);
        QFETCH(int, queryBlock);
        const int C = 16, N = 30, groups = 4;
        const float outScale = norm ? 1.0f : 0.5f;
        auto x = randomVector(std::size_t(C) * N, 20);
        std::vector<float> W[4], B[4];
        for (int m = 0; m < 4; ++m) {
            W[m] = randomVector(std::size_t(C) * C, 21 + m, 0.4f);
            B[m] = randomVector(C, 31 + m, 0.1f);
        }
        auto gamma = randomVector(C, 40), beta = randomVector(C, 41);
        // The primitive reads the normalised input and adds the raw one (the graph's GroupNorm
        // op runs before it).
        std::vector<float> xn(x);
        if (norm) {
            cpu::WorkerPool gnPool(1);
            cpu::groupNorm(gnPool, 1, C, N, groups, 1e-6f, x.data(), gamma.data(), beta.data(), nullptr, nullptr, false,
                           xn.data());
        }
        cpu::AttentionWeights aw;
        aw.wq = W[0].data();
        aw.bq = B[0].data();
        aw.wk = W[1].data();
        aw.bk = B[1].data();
        aw.wv = W[2].data();
        aw.bv = B[2].data();
        aw.wo = W[3].data();
        aw.bo = B[3].data();
        if (queryBlock == 0) queryBlock = cpu::attentionQueryBlock(N, 1 << 20);
        std::vector<float> scratch(cpu::attentionScratchFloats(C, N)), y(x.size());
        cpu::WorkerPool pool(2);
        cpu::attention(pool, C, N, heads, aw, xn.data(), x.data(), outScale, y.data(), scratch.data(), queryBlock);
        const auto ref =
            attentionDirect(x, C, N, heads, norm ? gamma.data() : nullptr, beta.data(), groups, 1e-6, W, B, outScale);
        QVERIFY2(maxAbs(y, ref) < 2e-5, qPrintable(QString::number(maxAbs(y, ref))));
        // Heads matter: a different head count gives a different result.
        const auto other = attentionDirect(x, C, N, heads == 1 ? 4 : 1, norm ? gamma.data() : nullptr, beta.data(),
                                           groups, 1e-6, W, B, outScale);
        QVERIFY(maxAbs(y, other) > 1e-3);
    }

    void elementwiseOps() {
        const int batch = 2, C = 5;
        const std::int64_t P = 7;
        const std::size_t n = std::size_t(batch) * C * P;
        const auto x = randomVector(n, 60), other = randomVector(n, 61),
                   v = randomVector(std::size_t(batch) * 2 * C, 62);
        cpu::WorkerPool pool(3);
        std::vector<float> y(n);
        cpu::affine(pool, std::int64_t(n), x.data(), 2.0f, -1.0f, y.data());
        for (std::size_t i = 0; i < n; ++i) QCOMPARE(y[i], x[i] * 2.0f - 1.0f);
        cpu::silu(pool, std::int64_t(n), x.data(), y.data());
        for (std::size_t i = 0; i < n; ++i) QVERIFY(std::fabs(y[i] - siluD(x[i])) < 1e-6);
        cpu::add(pool, batch, C, P, x.data(), other.data(), false, y.data());
        for (std::size_t i = 0; i < n; ++i) QCOMPARE(y[i], x[i] + other[i]);
        cpu::add(pool, batch, C, P, x.data(), v.data(), true, y.data());  // v read as [batch, C]
        for (std::size_t i = 0; i < n; ++i) QCOMPARE(y[i], x[i] + v[i / std::size_t(P)]);
        cpu::scaleShift(pool, batch, C, P, x.data(), v.data(), y.data());
        for (int b = 0; b < batch; ++b)
            for (int c = 0; c < C; ++c)
                for (std::int64_t p = 0; p < P; ++p) {
                    const std::size_t i = (std::size_t(b) * C + c) * std::size_t(P) + std::size_t(p);
                    const double want =
                        double(x[i]) * (1.0 + v[std::size_t(b * 2 * C + c)]) + v[std::size_t(b * 2 * C + C + c)];
                    QVERIFY(std::fabs(y[i] - want) < 1e-5);
                }
        // In place.
        std::vector<float> z(x);
        cpu::silu(pool, std::int64_t(n), z.data(), z.data());
        for (std::size_t i = 0; i < n; ++i) QVERIFY(std::fabs(z[i] - siluD(x[i])) < 1e-6);
    }

    void upsampleNearest() {
        const int planes = 3, h = 4, w = 5;
        auto x = randomVector(std::size_t(planes) * h * w, 50);
        std::vector<float> y(x.size() * 4);
        cpu::WorkerPool pool(2);
        cpu::upsampleNearest2x(pool, planes, h, w, x.data(), y.data());
        for (int p = 0; p < planes; ++p)
            for (int oy = 0; oy < 2 * h; ++oy)
                for (int ox = 0; ox < 2 * w; ++ox)
                    QCOMPARE(y[(std::size_t(p) * 2 * h + oy) * 2 * w + ox],
                             x[(std::size_t(p) * h + oy / 2) * w + ox / 2]);
    }

    void linearMatchesDouble() {
        const int batch = 3, in = 9, out = 5;
        auto x = randomVector(std::size_t(batch) * in, 60), wt = randomVector(std::size_t(out) * in, 61),
             b = randomVector(out, 62);
        std::vector<float> y(std::size_t(batch) * out);
        cpu::linear(batch, in, out, x.data(), wt.data(), b.data(), true, y.data());
        std::vector<double> ref(y.size());
        for (int r = 0; r < batch; ++r)
            for (int o = 0; o < out; ++o) {
                double s = b[std::size_t(o)];
                for (int k = 0; k < in; ++k) s += double(x[std::size_t(r) * in + k]) * wt[std::size_t(o) * in + k];
                ref[std::size_t(r) * out + o] = siluD(s);
            }
        QVERIFY(maxAbs(y, ref) < 1e-5);
    }

    void timestepEmbeddingMatchesDouble_data() {
        QTest::addColumn<bool>("flip");
        QTest::addColumn<int>("shift");
        QTest::addColumn<int>("dim");
        QTest::newRow("google/ddpm: sin first, freq_shift 1") << false << 1 << 128;
        QTest::newRow("diffusers default: cos first, freq_shift 0") << true << 0 << 128;
        QTest::newRow("odd width pads a zero") << true << 1 << 9;
    }
    void timestepEmbeddingMatchesDouble() {
        QFETCH(bool, flip);
        QFETCH(int, shift);
        QFETCH(int, dim);
        const std::vector<float> t{0.0f, 1.0f, 10.5f, 999.0f};
        std::vector<float> e(t.size() * std::size_t(dim), -7.0f);
        timestepEmbedding(t.data(), int(t.size()), dim, shift, flip, e.data());
        const int half = dim / 2;
        for (std::size_t b = 0; b < t.size(); ++b) {
            for (int i = 0; i < half; ++i) {
                const double arg = double(t[b]) * std::exp(-std::log(10000.0) * i / double(half - shift));
                const double first = flip ? std::cos(arg) : std::sin(arg),
                             second = flip ? std::sin(arg) : std::cos(arg);
                // float32 arguments up to ~1000 carry ~1e-4 absolute error (2 ulp of the argument).
                const double tol = 1e-6 + 3e-7 * std::fabs(arg);
                QVERIFY2(std::fabs(e[b * dim + i] - first) < tol,
                         qPrintable(QString("t=%1 i=%2: %3 vs %4").arg(t[b]).arg(i).arg(e[b * dim + i]).arg(first)));
                QVERIFY(std::fabs(e[b * dim + half + i] - second) < tol);
            }
            if (dim % 2) QCOMPARE(e[b * dim + dim - 1], 0.0f);
        }
        // t = 0: the sin half is exactly 0 and the cos half exactly 1, in the configured order.
        QCOMPARE(e[0], flip ? 1.0f : 0.0f);
        QCOMPARE(e[std::size_t(half)], flip ? 0.0f : 1.0f);
    }

    void graphMatchesTheCheckpointTensorList() {
        // tests/data/ddpm_cifar10_32_keys.txt: google/ddpm-cifar10-32's state dict (name [shape]).
        std::ifstream in(TESSERA_TEST_DATA "/ddpm_cifar10_32_keys.txt");
        QVERIFY(in.good());
        std::set<std::string> expected;
        std::string line;
        while (std::getline(in, line))
            if (!line.empty()) expected.insert(line);
        QCOMPARE(expected.size(), std::size_t(328));
        const ModelGraph g = unet2DExecutionGraph(cifar10Config());
        std::set<std::string> got;
        for (const auto& [name, shape] : g.parameterList()) {
            std::ostringstream s;
            s << name << " [";
            for (std::size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
            s << "]";
            QVERIFY2(got.insert(s.str()).second, s.str().c_str());
        }
        for (const auto& e : expected) QVERIFY2(got.count(e), ("graph lacks " + e).c_str());
        QCOMPARE(got.size(), expected.size());
        // Shapes of a few activations at 32 x 32.
        QCOMPARE(g.shape(g.outputs().at(0), 2, 32, 32), (std::vector<std::int64_t>{2, 3, 32, 32}));
        int attnValues = 0;
        for (const GraphOp& op : g.ops())
            if (op.kind == OpKind::Attention) {
                ++attnValues;
                QCOMPARE(op.heads, 1);
                QVERIFY(op.residual >= 0 && op.residual != op.input);  // + the input before its GroupNorm
                const auto norm = std::find_if(g.ops().begin(), g.ops().end(),
                                               [&](const GraphOp& o) { return o.output == op.input; });
                QVERIFY(norm != g.ops().end() && norm->kind == OpKind::GroupNorm && norm->groups == 32 &&
                        norm->input == op.residual && !norm->silu);
            }
        QCOMPARE(attnValues, 2 + 1 + 3);
        // FLOPs agree with the model's own count.
        const double flops = g.flops(32, 32);
        QVERIFY(flops > 1e9);
        QVERIFY2(std::fabs(flops - UNetModel::random(cifar10Config(), 1).flopsPerEvaluation(32, 32)) < 1e-6 * flops,
                 qPrintable(QString("graph %1 vs model %2")
                                .arg(flops)
                                .arg(UNetModel::random(cifar10Config(), 1).flopsPerEvaluation(32, 32))));
    }

    void graphRejectsBadConfigs() {
        UNetConfig c = smallConfig();
        c.normNumGroups = 5;
        try {
            (void)buildUNet2DGraph(c);
            QFAIL("groups 5 accepted");
        } catch (const std::invalid_argument& e) {
            QVERIFY2(QString(e.what()).startsWith("norm_num_groups"), e.what());
        }
        c = smallConfig();
        c.downsamplePadding = 2;
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, (void)buildUNet2DGraph(c));
        c = smallConfig();
        c.attentionHeadDim = 12;
        try {
            (void)buildUNet2DGraph(c);
            QFAIL("head dim 12 accepted for 32 channels");
        } catch (const std::invalid_argument& e) {
            QVERIFY2(QString(e.what()).startsWith("attention_head_dim"), e.what());
        }
        const ModelGraph g = buildUNet2DGraph(smallConfig());
        try {
            g.checkTileSize(34, 32);
            QFAIL("tile 34 accepted with downsampling factor 4");
        } catch (const std::invalid_argument& e) {
            QVERIFY2(QString(e.what()).contains("tile height 34"), e.what());
        }
    }

    void forwardIsDeterministicAndBatchIndependent() {
        const UNetModel model = UNetModel::random(smallConfig(), 5);
        const int H = 16, W = 24, C = 3;
        const std::size_t per = std::size_t(C) * H * W;
        const auto x = randomVector(2 * per, 70);
        const std::vector<float> t{3.0f, 700.0f};
        CpuBackend two(2);
        two.prepare(model, 2, H, W);
        QVERIFY(QString::fromStdString(two.info().device).contains("(2 threads, OpenBLAS "));
        const auto y = forwardOnce(two, x, t, 2, per);
        QCOMPARE(forwardOnce(two, x, t, 2, per), y);  // repeatable, bit for bit
        double norm = 0;
        for (float v : y) {
            QVERIFY(std::isfinite(v));
            norm += double(v) * v;
        }
        QVERIFY(norm > 1e-3 * y.size());

        // One thread: the same bits.
        CpuBackend one(1);
        one.prepare(model, 2, H, W);
        QCOMPARE(forwardOnce(one, x, t, 2, per), y);

        // Batch of 2 == two batches of 1 (a backend prepared for 2 running 1 as well).
        for (int b = 0; b < 2; ++b) {
            const std::vector<float> xb(x.begin() + b * long(per), x.begin() + (b + 1) * long(per));
            const std::vector<float> tb{t[std::size_t(b)]};
            const std::vector<float> yb(y.begin() + b * long(per), y.begin() + (b + 1) * long(per));
            CpuBackend single(2);
            single.prepare(model, 1, H, W);
            const auto ys = forwardOnce(single, xb, tb, 1, per);
            QVERIFY2(relativeL2(ys, yb) < 1e-6, qPrintable(QString::number(relativeL2(ys, yb))));
            QVERIFY(relativeL2(forwardOnce(two, xb, tb, 1, per), yb) < 1e-6);
        }
        // The timestep reaches the output.
        const std::vector<float> swapped{700.0f, 3.0f};
        QVERIFY(relativeL2(forwardOnce(two, x, swapped, 2, per), y) > 1e-3);
    }

    void scaleShiftAndCenteredModelsRun() {
        UNetConfig c = smallConfig();
        // Mid attention without group norm (diffusers UNetMidBlock2D: attn_groups None unless
        // resnet_time_scale_shift is "default").
        c.resnetTimeScaleShift = TimeScaleShift::ScaleShift;
        c.centerInputSample = true;
        c.downsamplePadding = 1;
        c.layersPerBlock = 2;
        const ModelGraph g = unet2DExecutionGraph(c);
        bool midHasNoNorm = false;
        for (const GraphOp& op : g.ops())
            if (op.name == "mid_block.attentions.0") midHasNoNorm = op.input == op.residual;
        QVERIFY(midHasNoNorm);
        const UNetModel model = UNetModel::random(c, 9);
        CpuBackend backend(2);
        backend.prepare(model, 1, 8, 8);
        const auto x = randomVector(3 * 64, 80);
        const std::vector<float> t{42.0f};
        const auto y = forwardOnce(backend, x, t, 1, 3 * 64);
        for (float v : y) QVERIFY(std::isfinite(v));
    }

    void rejectsMisuse() {
        CpuBackend backend(1);
        std::vector<float> x(3 * 64), out(3 * 64);
        const float t = 1.0f;
        QVERIFY_THROWS_EXCEPTION(std::logic_error, backend.forward(x.data(), &t, 1, out.data()));
        const UNetModel model = UNetModel::random(smallConfig(), 1);
        try {
            backend.prepare(model, 1, 8, 10);
            QFAIL("tile width 10 accepted");
        } catch (const std::invalid_argument& e) {
            QVERIFY2(QString(e.what()).contains("tile width 10"), e.what());
        }
        backend.prepare(model, 1, 8, 8);
        try {
            backend.forward(x.data(), &t, 2, out.data());
            QFAIL("batch 2 accepted after prepare(batch 1)");
        } catch (const std::invalid_argument& e) {
            QVERIFY2(QString(e.what()).startsWith("batch: 2"), e.what());
        }
    }

    void matchesPyTorchGoldens_data() {
        QTest::addColumn<QString>("name");
        QTest::newRow("cifar_like (1 head, padding 0, sin first)") << "cifar_like";
        QTest::newRow("heads_pad1 (heads of 8, padding 1, scale_shift, cos first)") << "heads_pad1";
        QTest::newRow("legacy_names (query/key/value/proj_attn)") << "legacy_names";
    }
    void matchesPyTorchGoldens() {
        QFETCH(QString, name);
        const std::string model = std::string(TESSERA_TEST_DATA "/models/") + name.toStdString();
        const std::string golden =
            std::string(TESSERA_TEST_DATA "/golden/forward_") + name.toStdString() + ".safetensors";
        if (!std::ifstream(golden).good()) QSKIP("golden fixture not present (tools/reference/make_fixtures.py)");
        const UNetModel m = UNetModel::load(model);
        const SafetensorsFile file(golden);
        const auto x = file.readFloat32("input"), t = file.readFloat32("timesteps"), ref = file.readFloat32("output");
        const auto* info = file.find("input");
        QVERIFY(info && info->shape.size() == 4);
        const int batch = int(info->shape[0]), H = int(info->shape[2]), W = int(info->shape[3]);
        CpuBackend backend(2);
        backend.prepare(m, batch, H, W);
        std::vector<float> out(ref.size());
        backend.forward(x.data(), t.data(), batch, out.data());
        const double err = relativeL2(out, ref);
        qInfo("%s: relative L2 error %.3g", qPrintable(name), err);
        QVERIFY2(err < 1e-4, qPrintable(QString("relative L2 error %1").arg(err)));
    }

    // Tile evaluations per second of the cifar10-32 network at 64 x 64 (random weights).
    // Runs only with TESSERA_CPU_BENCH=1 (slow on small machines).
    void benchmarkCifar10Tiles() {
        if (!qEnvironmentVariableIsSet("TESSERA_CPU_BENCH")) QSKIP("set TESSERA_CPU_BENCH=1 to measure");
        const UNetModel model = UNetModel::random(cifar10Config(), 1);
        const int H = 64, W = 64;
        CpuBackend backend;
        for (int batch : {1, 4}) {
            backend.prepare(model, batch, H, W);
            const std::size_t per = std::size_t(3) * H * W;
            const auto x = randomVector(per * std::size_t(batch), 90);
            const std::vector<float> t(std::size_t(batch), 500.0f);
            std::vector<float> out(per * std::size_t(batch));
            backend.forward(x.data(), t.data(), batch, out.data());  // warm-up
            const int reps = std::max(2, qEnvironmentVariableIntValue("TESSERA_CPU_BENCH_REPS"));
            const auto start = std::chrono::steady_clock::now();
            for (int r = 0; r < reps; ++r) backend.forward(x.data(), t.data(), batch, out.data());
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            const double tilesPerSecond = reps * batch / s;
            qInfo("cifar10-32 net, 64x64, batch %d on %s: %.3f tiles/s, %.1f ms/tile, %.1f GFLOP/s, %.0f MiB", batch,
                  backend.info().device.c_str(), tilesPerSecond, 1e3 / tilesPerSecond,
                  tilesPerSecond * backend.graph().flops(H, W) * 1e-9,
                  double(backend.preparedFloats()) * 4 / (1 << 20));
        }
    }
};

QTEST_GUILESS_MAIN(TestCpuBackend)
#include "tst_cpubackend.moc"
