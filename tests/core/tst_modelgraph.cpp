// ModelGraph: the UNet2D builder's primitive graph, the fusion rewrite (each rule, and where
// it must not apply), op extraction for per-op tests, the checks on malformed ops, and the CPU
// backend running primitive, fused and single-op graphs to the same numbers.
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>

#include "core/cpu/CpuBackend.h"
#include "core/graph/ModelGraph.h"
#include "core/models/sd/UNetCondGraph.h"
#include "core/models/sd/UNetCondModel.h"
#include "core/models/unet/UNetGraph.h"
#include "core/models/unet/UNetModel.h"
#include "tests/core/NumericCompare.h"

using namespace tessera;

namespace {

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

// Small, with attention everywhere it can be; `film` switches the other branches on.
UNetConfig smallConfig(bool film) {
    UNetConfig c;
    c.blockOutChannels = {16, 32};
    c.downBlocks = {DownBlockType::AttnDown, DownBlockType::Down};
    c.upBlocks = {UpBlockType::Up, UpBlockType::AttnUp};
    c.layersPerBlock = 1;
    c.normNumGroups = 8;
    c.attentionHeadDim = 8;
    c.downsamplePadding = 0;
    c.normEps = 1e-6f;
    if (film) {
        c.resnetTimeScaleShift = TimeScaleShift::ScaleShift;
        c.centerInputSample = true;
        c.downsamplePadding = 1;
        c.midBlockScaleFactor = 1.41421356f;
        c.attentionHeadDim.reset();
    }
    return c;
}

std::vector<float> randomVector(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

GraphOp op(OpKind kind, const std::string& name, int in, int in2 = -1) {
    GraphOp o;
    o.kind = kind;
    o.name = name;
    o.input = in;
    o.input2 = in2;
    return o;
}

int countKind(const ModelGraph& g, OpKind k) {
    return static_cast<int>(
        std::count_if(g.ops().begin(), g.ops().end(), [k](const GraphOp& op) { return op.kind == k; }));
}

bool anyFusion(const GraphOp& op) {
    return op.silu || op.preAdd >= 0 || op.scaleShift >= 0 || op.residual >= 0 || op.outputScale != 1.0f;
}

// Host inputs for a graph: feature maps and vectors ~N(0, 1); the timestep vector in [0, 1000).
std::vector<std::vector<float>> inputsFor(const ModelGraph& g, int batch, int h, int w, std::uint32_t seed) {
    std::vector<std::vector<float>> in;
    for (int v : g.inputs()) {
        auto x = randomVector(static_cast<std::size_t>(g.elements(v, batch, h, w)), seed++);
        if (g.value(v).name == "timestep")
            for (float& t : x) t = std::fabs(t) * 300.0f;
        in.push_back(std::move(x));
    }
    return in;
}

// Runs `g` on the CPU; returns every output.
std::vector<std::vector<float>> runCpu(const ModelGraph& g, const TensorMap& weights, int batch, int h, int w,
                                       const std::vector<std::vector<float>>& inputs) {
    CpuBackend cpu(2);
    cpu.prepareGraph(g, weights, batch, h, w);
    std::vector<const float*> in;
    for (const auto& x : inputs) in.push_back(x.data());
    std::vector<std::vector<float>> out;
    std::vector<float*> outPtr;
    for (int v : g.outputs()) out.emplace_back(static_cast<std::size_t>(g.elements(v, batch, h, w)), NAN);
    for (auto& o : out) outPtr.push_back(o.data());
    cpu.run(in, batch, outPtr);
    return out;
}

// A graph with input x [C=8] and vector v [8], for the fusion-rule tests.
struct Tiny {
    ModelGraph g;
    int x = -1, v = -1;
    Tiny() {
        x = g.addInput("x", ValueKind::FeatureMap, 8, 1);
        v = g.addInput("v", ValueKind::Vector, 8);
    }
    GraphOp op(OpKind kind, const std::string& name, int in, int in2 = -1) {
        GraphOp o;
        o.kind = kind;
        o.name = name;
        o.input = in;
        o.input2 = in2;
        return o;
    }
    int norm(int in) {
        GraphOp o = op(OpKind::GroupNorm, "gn", in);
        o.groups = 2;
        o.params = {g.addParam("gn.weight", {8}), g.addParam("gn.bias", {8})};
        return g.addOp(o);
    }
    int conv(const std::string& name, int in) {
        GraphOp o = op(OpKind::Conv, name, in);
        o.channels = 8;
        o.kernel = 3;
        o.padBegin = o.padEnd = 1;
        o.params = {g.addParam(name + ".weight", {8, 8, 3, 3}), g.addParam(name + ".bias", {8})};
        return g.addOp(o);
    }
};

}  // namespace

class TestModelGraph : public QObject {
    Q_OBJECT

private slots:
    void builderWritesPrimitiveOps() {
        const ModelGraph g = buildUNet2DGraph(cifar10Config());
        for (const GraphOp& op : g.ops()) QVERIFY2(!anyFusion(op), op.name.c_str());
        // 2 + 13 resnets (norm1, norm2 each) + 6 attentions + conv_norm_out; SiLUs: time MLP 2,
        // 2 per resnet, conv_norm_out.
        const int resnets = 4 * 2 + 2 + 4 * 3;
        QCOMPARE(countKind(g, OpKind::GroupNorm), 2 * resnets + 6 + 1);
        QCOMPARE(countKind(g, OpKind::SiLU), 2 + 2 * resnets + 1);
        QCOMPARE(countKind(g, OpKind::Add), resnets + resnets + 6);  // + temb, + skip, + attention residual
        QCOMPARE(countKind(g, OpKind::Concat), 4 * 3);
        QCOMPARE(countKind(g, OpKind::ScaleShift), 0);
        QCOMPARE(g.inputs().size(), std::size_t{2});
        QCOMPARE(g.outputs().size(), std::size_t{1});
        QCOMPARE(g.downsampleFactor(), 8);
        QCOMPARE(g.parameterCount(), std::int64_t{35'746'307});
        // Names are unique (they are module paths and CUDA op names).
        std::set<std::string> names;
        for (const GraphOp& op : g.ops()) QVERIFY2(names.insert(op.name).second, op.name.c_str());
    }

    void fusionLeavesOnlyWhatTheBackendsRun_data() {
        QTest::addColumn<bool>("film");
        QTest::newRow("default time embedding") << false;
        QTest::newRow("scale_shift, centered input, mid rescale") << true;
    }
    void fusionLeavesOnlyWhatTheBackendsRun() {
        QFETCH(bool, film);
        const UNetConfig c = smallConfig(film);
        const ModelGraph prim = buildUNet2DGraph(c);
        const ModelGraph fused = fuseForExecution(prim);
        QCOMPARE(countKind(fused, OpKind::SiLU), 0);
        QCOMPARE(countKind(fused, OpKind::Add), 0);
        QCOMPARE(countKind(fused, OpKind::ScaleShift), 0);
        QCOMPARE(countKind(fused, OpKind::Affine), film ? 1 : 0);  // center_input_sample stays
        QCOMPARE(countKind(fused, OpKind::Conv), countKind(prim, OpKind::Conv));
        QCOMPARE(countKind(fused, OpKind::GroupNorm), countKind(prim, OpKind::GroupNorm));
        QCOMPARE(fused.flops(16, 16), prim.flops(16, 16));
        QVERIFY(fused.parameterList() == prim.parameterList());
        int norm2 = 0, conv2 = 0, scaled = 0;
        for (const GraphOp& op : fused.ops()) {
            if (op.name.ends_with(".norm2")) {
                ++norm2;
                QVERIFY(op.silu);
                QCOMPARE(op.preAdd >= 0, !film);
                QCOMPARE(op.scaleShift >= 0, film);
            }
            if (op.name.ends_with(".conv2")) {
                ++conv2;
                QVERIFY(op.residual >= 0);
            }
            if (op.name.ends_with(".norm1") || op.name == "conv_norm_out") QVERIFY(op.silu);
            if (op.name.rfind("mid_block.", 0) == 0 && (op.kind == OpKind::Conv || op.kind == OpKind::Attention) &&
                op.residual >= 0)
                scaled += op.outputScale == 1.0f / c.midBlockScaleFactor;
        }
        QCOMPARE(norm2, conv2);
        QCOMPARE(scaled, 3);  // both mid resnets and the mid attention carry 1/mid_block_scale_factor
        // The time MLP: linear_1 and linear_2 carry the SiLU; act(emb) is linear_2's output.
        for (const GraphOp& op : fused.ops())
            if (op.name.rfind("time_embedding.linear_", 0) == 0) QVERIFY(op.silu);
    }

    void fusedGraphComputesWhatThePrimitiveGraphDoes_data() { fusionLeavesOnlyWhatTheBackendsRun_data(); }
    void fusedGraphComputesWhatThePrimitiveGraphDoes() {
        QFETCH(bool, film);
        const UNetConfig c = smallConfig(film);
        const UNetModel model = UNetModel::random(c, 4);
        const ModelGraph prim = buildUNet2DGraph(c);
        const int batch = 2, h = 8, w = 16;
        const auto in = inputsFor(prim, batch, h, w, 3);
        const auto a = runCpu(prim, model.tensors(), batch, h, w, in);
        const auto b = runCpu(fuseForExecution(prim), model.tensors(), batch, h, w, in);
        // Same arithmetic up to rounding order (bias + residual before the GEMM's sum, etc.).
        QVERIFY2(relativeL2(b[0], a[0]) < 1e-5, qPrintable(QString::number(relativeL2(b[0], a[0]))));
        // The UNet entry point runs the fused graph: bit for bit.
        CpuBackend cpu(2);
        cpu.prepare(model, batch, h, w);
        std::vector<float> out(a[0].size());
        cpu.forward(in[0].data(), in[1].data(), batch, out.data());
        QCOMPARE(out, b[0]);
    }

    // Every op of the fused graph alone, given the whole graph's values as inputs, gives the
    // whole graph's value bit for bit: what per-op tests rely on.
    void extractedOpsReproduceTheWholeGraph_data() {
        QTest::addColumn<bool>("conditional");
        QTest::newRow("UNet2DModel") << false;
        QTest::newRow("UNet2DConditionModel (token ops)") << true;
    }
    void extractedOpsReproduceTheWholeGraph() {
        QFETCH(bool, conditional);
        UNetCondConfig cond;
        cond.blockOutChannels = {16, 32};
        cond.downBlocks = {CondDownBlock::CrossAttnDown, CondDownBlock::Down};
        cond.upBlocks = {CondUpBlock::Up, CondUpBlock::CrossAttnUp};
        cond.layersPerBlock = 1;
        cond.normNumGroups = 8;
        cond.crossAttentionDim = 12;
        cond.attentionHeads = {2, 4};
        cond.transformerLayers = {1, 1};
        const UNetConfig c = smallConfig(true);
        const TensorMap weights =
            conditional ? UNetCondModel::random(cond, 6).tensors() : UNetModel::random(c, 6).tensors();
        const ModelGraph fused = conditional ? unet2DConditionExecutionGraph(cond, 5) : unet2DExecutionGraph(c);
        ModelGraph all = fused;  // every value an output, so the CPU keeps them all
        for (const GraphOp& op : fused.ops()) all.markOutput(op.output);
        const int batch = 2, h = 8, w = 8;
        const auto in = inputsFor(fused, batch, h, w, 9);
        const auto values = runCpu(all, weights, batch, h, w, in);
        std::map<int, const std::vector<float>*> byValue;
        for (std::size_t k = 0; k < all.outputs().size(); ++k) byValue[all.outputs()[k]] = &values[k];
        for (std::size_t k = 0; k < fused.inputs().size(); ++k) byValue[fused.inputs()[k]] = &in[k];
        for (std::size_t i = 0; i < fused.ops().size(); ++i) {
            const GraphOp& op = fused.ops()[i];
            const ModelGraph one = fused.extract(i);
            QCOMPARE(one.ops().size(), std::size_t{1});
            QCOMPARE(one.inputs().size(), [&] {
                auto ids = op.operands();
                std::sort(ids.begin(), ids.end());
                return static_cast<std::size_t>(std::unique(ids.begin(), ids.end()) - ids.begin());
            }());
            QCOMPARE(one.params().size(), op.params.size());
            std::vector<std::vector<float>> opIn;
            std::vector<int> seen;
            for (int v : op.operands())
                if (std::find(seen.begin(), seen.end(), v) == seen.end()) {
                    seen.push_back(v);
                    opIn.push_back(*byValue.at(v));
                }
            const auto out = runCpu(one, weights, batch, h, w, opIn);
            QVERIFY2(out[0] == *byValue.at(op.output), op.name.c_str());
        }
    }

    void fusionRules() {
        {  // GroupNorm -> SiLU, read once: fused
            Tiny t;
            const int y = t.g.addOp(t.op(OpKind::SiLU, "act", t.norm(t.x)));
            t.g.markOutput(y);
            const ModelGraph f = fuseForExecution(t.g);
            QCOMPARE(f.ops().size(), std::size_t{1});
            QVERIFY(f.ops()[0].silu && f.ops()[0].kind == OpKind::GroupNorm);
            QCOMPARE(f.value(f.outputs()[0]).name, std::string("act"));
        }
        {  // GroupNorm read twice (SiLU and an output): not fused
            Tiny t;
            const int n = t.norm(t.x);
            t.g.markOutput(t.g.addOp(t.op(OpKind::SiLU, "act", n)));
            t.g.markOutput(n);
            QCOMPARE(fuseForExecution(t.g).ops().size(), std::size_t{2});
        }
        {  // Add(x, vector) -> GroupNorm -> ScaleShift? no: pre-add then SiLU
            Tiny t;
            const int a = t.g.addOp(t.op(OpKind::Add, "add", t.x, t.v));
            t.g.markOutput(t.g.addOp(t.op(OpKind::SiLU, "act", t.norm(a))));
            const ModelGraph f = fuseForExecution(t.g);
            QCOMPARE(f.ops().size(), std::size_t{1});
            QVERIFY(f.ops()[0].preAdd == f.inputs()[1] && f.ops()[0].input == f.inputs()[0] && f.ops()[0].silu);
        }
        {  // Add(x, x) of feature maps before a norm is not a pre-add
            Tiny t;
            t.g.markOutput(t.norm(t.g.addOp(t.op(OpKind::Add, "add", t.x, t.x))));
            QCOMPARE(fuseForExecution(t.g).ops().size(), std::size_t{2});
        }
        {  // Conv -> Add(other) -> Affine(0.5): residual and scale; a shift stops the chain
            Tiny t;
            const int s = t.g.addOp(t.op(OpKind::Add, "sum", t.conv("c", t.x), t.x));
            GraphOp scale = t.op(OpKind::Affine, "scale", s);
            scale.scale = 0.5f;
            GraphOp shifted = t.op(OpKind::Affine, "shifted", t.g.addOp(scale));
            shifted.scale = 0.5f;
            shifted.shift = 1.0f;
            t.g.markOutput(t.g.addOp(shifted));
            const ModelGraph f = fuseForExecution(t.g);
            QCOMPARE(f.ops().size(), std::size_t{2});
            QVERIFY(f.ops()[0].kind == OpKind::Conv && f.ops()[0].residual == f.inputs()[0] &&
                    f.ops()[0].outputScale == 0.5f);
            QVERIFY(f.ops()[1].kind == OpKind::Affine);
        }
        {  // A scaled conv takes no residual afterwards ((c + b) * s + r is not (c + b + r) * s)
            Tiny t;
            GraphOp scale = t.op(OpKind::Affine, "scale", t.conv("c", t.x));
            scale.scale = 0.5f;
            t.g.markOutput(t.g.addOp(t.op(OpKind::Add, "sum", t.g.addOp(scale), t.x)));
            const ModelGraph f = fuseForExecution(t.g);
            QCOMPARE(f.ops().size(), std::size_t{2});
            QVERIFY(f.ops()[0].outputScale == 0.5f && f.ops()[0].residual < 0);
        }
        {  // Two convs into one Add: the first one takes it, the other stays plain
            Tiny t;
            const int a = t.conv("a", t.x), b = t.conv("b", t.x);
            t.g.markOutput(t.g.addOp(t.op(OpKind::Add, "sum", b, a)));
            const ModelGraph f = fuseForExecution(t.g);
            QCOMPARE(f.ops().size(), std::size_t{2});
            QCOMPARE(f.ops()[0].name, std::string("b"));
            QVERIFY(f.ops()[1].name == "a" && f.ops()[1].residual == f.ops()[0].output);
        }
    }

    void addOpRejectsMalformedOps() {
        Tiny t;
        auto rejects = [&](GraphOp op, const char* part) {
            try {
                t.g.addOp(std::move(op));
                QFAIL(qPrintable(QString("accepted: ") + part));
            } catch (const std::logic_error& e) {
                QVERIFY2(QString(e.what()).contains(part), e.what());
            }
        };
        GraphOp conv = t.op(OpKind::Conv, "c", t.x);
        conv.channels = 8;
        conv.kernel = 3;
        conv.padBegin = 1;
        conv.padEnd = 0;
        conv.params = {t.g.addParam("c.weight", {8, 8, 3, 3}), t.g.addParam("c.bias", {8})};
        rejects(conv, "does not keep or halve");
        conv.padEnd = 1;
        conv.params = {t.g.addParam("w", {8, 4, 3, 3}), t.g.addParam("b", {8})};
        rejects(conv, "w has shape [8, 4, 3, 3], expected [8, 8, 3, 3]");
        GraphOp norm = t.op(OpKind::GroupNorm, "n", t.x);
        norm.groups = 3;
        norm.params = {t.g.addParam("n.weight", {8}), t.g.addParam("n.bias", {8})};
        rejects(norm, "groups divide");
        rejects(t.op(OpKind::Add, "a", t.x, t.g.addInput("y", ValueKind::FeatureMap, 8, 2)), "differ in shape");
        GraphOp silu = t.op(OpKind::SiLU, "s", t.x);
        silu.residual = t.x;
        rejects(silu, "cannot carry a residual");
        rejects(t.op(OpKind::Upsample, "u", t.x), "even divisor");
        rejects(t.op(OpKind::Concat, "k", t.x, t.v), "two feature maps");
        rejects(t.op(OpKind::SiLU, "bad", 99), "input is not a value");
    }

    // Token values: fixed counts ignore the tile, tile tokens follow it; extract keeps both.
    void tokenValues() {
        ModelGraph g;
        const int x = g.addInput("x", ValueKind::FeatureMap, 8, 4);
        const int ctx = g.addTokenInput("encoder_hidden_states", 77, 5);
        const int t = g.addOp(op(OpKind::ToTokens, "t", x));
        QCOMPARE(g.shape(ctx, 2, 16, 32), (std::vector<std::int64_t>{2, 77, 5}));
        QCOMPARE(g.shape(ctx, 2, 64, 64), (std::vector<std::int64_t>{2, 77, 5}));
        QCOMPARE(g.shape(t, 2, 16, 32), (std::vector<std::int64_t>{2, 32, 8}));
        QCOMPARE(g.rows(x, 16, 32), std::int64_t{32});
        QCOMPARE(g.downsampleFactor(), 4);
        ModelGraph onlyTokens;
        onlyTokens.addInput("t", ValueKind::Tokens, 8, 8);
        QCOMPARE(onlyTokens.downsampleFactor(), 8);  // tile tokens set the factor too
        GraphOp attn = op(OpKind::Attention, "attn2", t, ctx);
        attn.heads = 2;
        attn.qkvBias = false;
        attn.params = {g.addParam("q", {8, 8}), g.addParam("k", {8, 5}), g.addParam("v", {8, 5}),
                       g.addParam("o", {8, 8}), g.addParam("ob", {8})};
        g.markOutput(g.addOp(attn));
        QCOMPARE(g.describe(g.ops()[1]), std::string("attention 8ch 2h ctx 5ch nobias @1/4 tokens"));
        // q and out over 32 tokens, k and v over 77 context tokens, Q K^T and A V
        QCOMPARE(g.flops(g.ops()[1], 16, 32), 2.0 * 2 * 8 * 8 * 32 + 2.0 * 2 * 5 * 8 * 77 + 2.0 * 2 * 32 * 77 * 8);
        const ModelGraph one = g.extract(1);
        QCOMPARE(one.value(one.inputs()[1]).tokens, 77);
        QCOMPARE(one.value(one.inputs()[0]).divisor, 4);
        const ModelGraph fused = fuseForExecution(g);
        QCOMPARE(fused.value(fused.inputs()[1]).tokens, 77);
    }

    void tokenFusionRules() {
        ModelGraph g;
        const int x = g.addInput("x", ValueKind::FeatureMap, 8, 1);
        const int t = g.addOp(op(OpKind::ToTokens, "t", x));
        auto linear = [&](const std::string& name, int in) {
            GraphOp l = op(OpKind::Linear, name, in);
            l.channels = 8;
            l.params = {g.addParam(name + ".weight", {8, 8}), g.addParam(name + ".bias", {8})};
            return g.addOp(l);
        };
        GraphOp attn = op(OpKind::Attention, "attn", t);
        attn.heads = 2;
        attn.qkvBias = false;
        attn.params = {g.addParam("q", {8, 8}), g.addParam("k", {8, 8}), g.addParam("v", {8, 8}),
                       g.addParam("o", {8, 8}), g.addParam("ob", {8})};
        const int h1 = g.addOp(op(OpKind::Add, "attn.residual", g.addOp(attn), t));    // fused
        const int h2 = g.addOp(op(OpKind::Add, "ff.residual", h1, linear("ff", h1)));  // fused
        const int s = g.addOp(op(OpKind::SiLU, "act", linear("proj", h2)));            // not: tokens
        GraphOp ge = op(OpKind::GEGLU, "geglu", s);
        ge.channels = 8;
        ge.params = {g.addParam("geglu.weight", {16, 8}), g.addParam("geglu.bias", {8 * 2})};
        const int h3 = g.addOp(op(OpKind::Add, "geglu.residual", g.addOp(ge), s));  // not: GEGLU
        const int m = g.addOp(op(OpKind::ToFeatureMap, "map", h3));
        g.markOutput(g.addOp(op(OpKind::Add, "out", m, x)));  // fused
        const ModelGraph f = fuseForExecution(g);
        std::vector<std::string> names;
        for (const GraphOp& o : f.ops())
            names.push_back(o.name + (o.residual >= 0 ? "+r" : "") + (o.silu ? "+silu" : ""));
        QCOMPARE(names,
                 (std::vector<std::string>{"t", "attn+r", "ff+r", "proj", "act", "geglu", "geglu.residual", "map+r"}));
        QCOMPARE(f.value(f.outputs()[0]).name, std::string("out"));
    }

    void tokenOpsRejectMalformedOps() {
        ModelGraph g;
        const int x = g.addInput("x", ValueKind::FeatureMap, 8, 1);
        const int t = g.addInput("t", ValueKind::Tokens, 8, 1);
        const int ctx = g.addTokenInput("ctx", 77, 4);
        const int v = g.addInput("v", ValueKind::Vector, 8);
        auto rejects = [&](GraphOp o, const char* part) {
            try {
                g.addOp(std::move(o));
                QFAIL(qPrintable(QString("accepted: ") + part));
            } catch (const std::logic_error& e) {
                QVERIFY2(QString(e.what()).contains(part), e.what());
            }
        };
        auto attention = [&](int in, int context, bool bias, std::int64_t kv) {
            GraphOp a = op(OpKind::Attention, "a", in, context);
            a.heads = 2;
            a.qkvBias = bias;
            a.params = {g.addParam("q", {8, 8}), g.addParam("k", {8, kv}), g.addParam("v", {8, kv}),
                        g.addParam("o", {8, 8}), g.addParam("ob", {8})};
            return a;
        };
        rejects(attention(x, ctx, false, 4), "takes a context only for tokens");
        rejects(attention(t, ctx, true, 4), "takes 8 parameters, has 5");
        rejects(attention(t, ctx, false, 8), "k has shape [8, 8], expected [8, 4]");
        GraphOp causal = attention(t, ctx, false, 4);
        causal.causal = true;
        rejects(causal, "causal mask needs tokens and no context");
        rejects(op(OpKind::ToFeatureMap, "m", ctx), "follow the tile");
        rejects(op(OpKind::ToTokens, "tt", t), "needs a feature map");
        GraphOp ln = op(OpKind::LayerNorm, "ln", x);
        ln.params = {g.addParam("ln.weight", {8}), g.addParam("ln.bias", {8})};
        rejects(ln, "needs tokens");
        GraphOp ge = op(OpKind::GEGLU, "ge", t);
        ge.channels = 16;
        ge.params = {g.addParam("ge.weight", {16, 8}), g.addParam("ge.bias", {16})};
        rejects(ge, "ge.weight has shape [16, 8], expected [32, 8]");
        GraphOp gelu = op(OpKind::GELU, "gelu", t);
        gelu.residual = t;
        rejects(gelu, "cannot carry a residual");
        GraphOp silu = op(OpKind::Linear, "fc", t);
        silu.channels = 8;
        silu.silu = true;
        silu.params = {g.addParam("fc.weight", {8, 8}), g.addParam("fc.bias", {8})};
        rejects(silu, "cannot carry a SiLU");
        GraphOp res = op(OpKind::Linear, "fc2", v);
        res.channels = 8;
        res.residual = v;
        res.params = {g.addParam("fc2.weight", {8, 8}), g.addParam("fc2.bias", {8})};
        rejects(res, "cannot carry a residual");  // over vectors: no residual
        GraphOp wrongResidual = op(OpKind::ToFeatureMap, "m2", t);
        wrongResidual.residual = t;
        rejects(wrongResidual, "residual 't' differs in shape");
        rejects(op(OpKind::Add, "add", t, ctx), "differ in shape");
    }

    void builderRejectsConfigsItCannotBuild() {
        UNetConfig c = smallConfig(false);
        c.blockOutChannels.assign(17, 32);
        c.downBlocks.assign(17, DownBlockType::Down);
        c.upBlocks.assign(17, UpBlockType::Up);
        try {
            (void)buildUNet2DGraph(c);
            QFAIL("17 levels accepted");
        } catch (const std::invalid_argument& e) {
            QVERIFY2(QString(e.what()).startsWith("block_out_channels: 17 levels"), e.what());
        }
        c = smallConfig(false);
        c.upBlocks.pop_back();
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, (void)buildUNet2DGraph(c));
        c = smallConfig(false);
        c.attnNormNumGroups = 5;  // the mid attention's 32 channels
        try {
            (void)buildUNet2DGraph(c);
            QFAIL("attn_norm_num_groups 5 accepted");
        } catch (const std::invalid_argument& e) {
            QVERIFY2(QString(e.what()).startsWith("attn_norm_num_groups: 5 does not divide 32 channels of "
                                                  "mid_block.attentions.0.group_norm"),
                     e.what());
        }
    }

    void describeAndTileChecks() {
        const ModelGraph g = unet2DExecutionGraph(cifar10Config());
        std::set<std::string> d;
        for (const GraphOp& op : g.ops()) d.insert(g.describe(op));
        QVERIFY(d.count("conv 3x3/2 pad 0+1 128->128 @1/2"));
        QVERIFY(d.count("conv 3x3/1 pad 1+1 256->256 @1/2 +residual"));
        QVERIFY(d.count("group_norm 32g 256ch @1/2 +preadd +silu"));
        QVERIFY(d.count("attention 256ch 1h @1/2 +residual"));
        QVERIFY(d.count("linear 512->256"));
        try {
            g.checkTileSize(36, 32);
            QFAIL("tile 36 accepted");
        } catch (const std::invalid_argument& e) {
            QCOMPARE(QString(e.what()),
                     QString("tile height 36 is not a positive multiple of 8, the model's downsampling factor"));
        }
    }

    void cpuRunChecksItsArguments() {
        const UNetConfig c = smallConfig(false);
        const UNetModel model = UNetModel::random(c, 1);
        CpuBackend cpu(1);
        const ModelGraph g = unet2DExecutionGraph(c);
        std::vector<float> x(3 * 64), out(3 * 64);
        const float t = 1.0f;
        QVERIFY_THROWS_EXCEPTION(std::logic_error, cpu.run({x.data(), &t}, 1, {out.data()}));
        cpu.prepareGraph(g, model.tensors(), 1, 8, 8);
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, cpu.run({x.data()}, 1, {out.data()}));
        TensorMap missing = model.tensors();
        missing.erase("conv_in.bias");
        try {
            cpu.prepareGraph(g, missing, 1, 8, 8);
            QFAIL("missing tensor accepted");
        } catch (const ModelError& e) {
            QVERIFY2(QString(e.what()).contains("'conv_in.bias'"), e.what());
        }
        TensorMap wrong = model.tensors();
        wrong["conv_out.bias"].shape = {1, 3};
        try {
            cpu.prepareGraph(g, wrong, 1, 8, 8);
            QFAIL("mis-shaped tensor accepted");
        } catch (const ModelError& e) {
            QVERIFY2(QString(e.what()).contains("conv_out.bias: expected [3], found [1, 3]"), e.what());
        }
    }
};

QTEST_GUILESS_MAIN(TestModelGraph)
#include "tst_modelgraph.moc"
