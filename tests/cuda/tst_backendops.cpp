// Per-op backend tests, in the manner of ggml's test-backend-ops: every op of the graphs the
// supported models build (google/ddpm-cifar10-32 at 32 x 32, google/ddpm-church-256 at
// 256 x 256: the fused graphs the backends run; plus a small model with the other branches,
// scale_shift, heads, centred input, symmetric downsample padding, a mid-block rescale, and
// the primitive graphs' unfused ops; Stable Diffusion 1.5 and 2.1's UNet2DConditionModel at
// 512 x 512 (latent tile 64: 4096 tokens, 77 context tokens) and the token ops of a CLIP-L
// text encoder layer (77 x 768: LayerNorm, causal attention with q/k/v biases, GELU,
// QuickGELU), the embeddings and pooling of CLIP-L (pooled at the largest id) and OpenCLIP-H
// (pooled at the first id 49407), the SD VAE's decoder and encoder at 256 x 256 (latent 32:
// the mid-block attention over 1,024 pixels, one head of 512), and the upscale models' graphs at a
// 128 x 128 output tile (ESRGAN 4x and Real-ESRGAN x2plus' pixel-unshuffled input at 64 features,
// Real-ESRGAN Compact 4x, SPAN 4x at 48 features), FLUX.1's transformer ops (one block of each kind
// at 24 heads of 128 over 512 text + 1,024 image tokens), each with random weights of its
// own), each on its own (ModelGraph::extract), on the CUDA backend in fp32, fp16 and bf16
// against the float32 CPU reference. Ids are integers in the vocabulary (TokenEmbedding) or
// small ones with ties and the pooled id at known places (EosPool). Attention large enough to
// be computed in query blocks: tests/cuda/tst_cudasd.cpp.
//
// Tolerances, per precision (relative L2 over the output, and max |d| <= 10 x that x max |ref|):
//   fp32 2e-5: cuDNN restricted to FMA kernels, cuBLAS pedantic; only summation order differs
//   fp16 4e-3: inputs, weights and outputs rounded to 11 significant bits, float32 accumulation
//   bf16 3e-2: the same with 8 significant bits
// Vector ops (time MLP, projections) run in float32 at every precision: fp32's tolerance. The
// sinusoid: 1e-3 at every precision (its float32 argument at t ~ 1000 carries ~1e-4 rad, and
// the device's expf/sinf are within 2 ulp where the host's are correctly rounded).
//
// TESSERA_BACKENDOPS_SHARD=i/n runs every n-th op from the i-th (parallel processes);
// TESSERA_BACKENDOPS_MODELS=vae-dec,clip-l-text keeps the ops of the models named, and
// TESSERA_BACKENDOPS_KINDS=attention,eos_pool the ops of the kinds named (ModelGraph's toString);
// the op kind coverage check then applies to the whole list only.
// Perf mode: TESSERA_BACKENDOPS_PERF=1 prints, per op and precision, the GPU time of the op
// (median of 20 replays, event nodes in a captured graph), the bytes it must move (inputs,
// output, parameters) as GB/s, and its FLOPs as TFLOP/s; attention ops name the path they took
// ([fused] / [blocked], by TESSERA_CUDA_FLASH, printed first; tst_flashattention's perf mode
// times the two paths apart). TESSERA_BACKENDOPS_BATCH sets the
// perf batch (default 8). Skips where no CUDA device is present.
#include <QtTest/QtTest>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "app/cli/BenchCommand.h"
#include "core/cpu/CpuBackend.h"
#include "core/graph/ModelGraph.h"
#include "core/models/clip/ClipTextGraph.h"
#include "core/models/flux/FluxGraph.h"
#include "core/models/sd/UNetCondGraph.h"
#include "core/models/unet/UNetGraph.h"
#include "core/models/unet/UNetModel.h"
#include "core/models/upscale/UpscaleModel.h"
#include "core/models/vae/VaeGraph.h"
#include "kernels/backend/CudaBackend.h"
#include "tests/cuda/OutputComparison.h"

using namespace tessera;
using tessera::testing::precisionName;

namespace {

// The branches the two DDPM configs do not take.
UNetConfig variantConfig() {
    UNetConfig c;
    c.blockOutChannels = {32, 48};
    c.downBlocks = {DownBlockType::AttnDown, DownBlockType::AttnDown};
    c.upBlocks = {UpBlockType::AttnUp, UpBlockType::AttnUp};
    c.layersPerBlock = 1;
    c.normNumGroups = 16;
    c.attentionHeadDim = 8;
    c.downsamplePadding = 1;
    c.resnetTimeScaleShift = TimeScaleShift::ScaleShift;
    c.midBlockScaleFactor = 1.41421356f;
    c.timeEmbeddingDim = 96;
    c.centerInputSample = true;
    return c;
}

struct ModelCase {
    std::string name;
    UNetConfig config;
    int tile = 32;
    bool primitive = false;  // also the primitive graph's ops that the fusion removes
    std::shared_ptr<const UNetModel> weights;
    // Graphs given directly (SD, CLIP layer): each op gets random weights of its own.
    std::vector<ModelGraph> graphs;
};

struct OpCase {
    std::string model;
    std::string key;   // description and shapes: one case per distinct key
    ModelGraph graph;  // the op alone
    int tile = 32;
    const TensorMap* weights = nullptr;
    std::shared_ptr<const TensorMap> ownWeights;  // for ops of the graphs given directly
    OpKind kind = OpKind::Conv;
    bool vectorOp = false;
};

// Stable Diffusion's published UNet configs (the UNet2DConditionModel config.json of SD 1.5 and
// SD 2.1), as bench runs them.
UNetCondConfig sdConfig(bool sd2) { return benchSdShapeConfig(sd2 ? "sd21" : "sd15"); }

// Stable Diffusion's VAE (diffusers AutoencoderKL of SD 1.x/2.x, its config.json).
VaeConfig sdVaeConfig() {
    VaeConfig c;
    c.blockOutChannels = {128, 256, 512, 512};
    c.layersPerBlock = 2;
    c.sampleSize = 512;
    return c;
}

// The text encoders' embeddings and pooling: one layer of CLIP-L (SD 1.x: pooled at the largest
// id) and of OpenCLIP-H (SD 2.x: GELU, pooled at the first id 49407).
ModelGraph clipTextGraph(bool openClip) {
    ClipTextConfig c;
    c.hiddenSize = openClip ? 1024 : 768;
    c.intermediateSize = 4 * c.hiddenSize;
    c.numAttentionHeads = openClip ? 16 : 12;
    c.hiddenAct = openClip ? ClipActivation::Gelu : ClipActivation::QuickGelu;
    c.eosTokenId = openClip ? 49407 : 2;
    return fuseForExecution(buildClipTextGraph(c, 1));
}

// FLUX.1's transformer at its own widths (24 heads of 128, T5's 4096, CLIP's 768; one block of
// each kind: the others repeat their ops) over a 512-px tile: 512 text + 1,024 image tokens.
ModelGraph fluxGraph() {
    FluxConfig c;
    c.layers = 1;
    c.singleLayers = 1;
    return fuseForExecution(buildFluxGraph(c, 512));
}

// The upscale families at the shapes of the files users have (core/models/upscale/UpscaleConfig.h):
// 4x-UltraSharp / RealESRGAN_x4plus (ESRGAN 64 features; one block: the others repeat its ops),
// RealESRGAN_x2plus (its pixel-unshuffled input), realesr-general-x4v3 (Compact 64 features) and a
// 48-feature SPAN (4x-ClearRealityV1's base).
// `primitive`: as built, before fuseForExecution (its LeakyReLUs apart).
ModelGraph upscaleGraph(UpscaleArchitecture a, int unshuffle = 1, bool primitive = false) {
    UpscaleConfig c;
    c.architecture = a;
    c.blocks = a == UpscaleArchitecture::Compact ? 4 : 1;
    c.features = a == UpscaleArchitecture::Span ? 48 : 64;
    c.unshuffle = unshuffle;
    c.scale = 4 / unshuffle;
    return primitive ? buildUpscaleGraph(c) : fuseForExecution(buildUpscaleGraph(c));
}

// One CLIP-L text encoder layer's token ops (77 x 768, 12 heads): layer norm, causal
// self-attention with q/k/v biases, the MLP with QuickGELU (SD 1.x) and exact/tanh GELU.
ModelGraph clipLayerGraph() {
    ModelGraph g;
    const int C = 768, T = 77;
    int x = g.addTokenInput("hidden_states", T, C);
    auto params = [&](const std::string& p, std::vector<std::vector<std::int64_t>> shapes,
                      std::vector<std::string> names) {
        std::vector<int> ids;
        for (std::size_t i = 0; i < shapes.size(); ++i) ids.push_back(g.addParam(p + names[i], shapes[i]));
        return ids;
    };
    GraphOp ln;
    ln.kind = OpKind::LayerNorm;
    ln.name = "layer_norm1";
    ln.input = x;
    ln.params = params("layer_norm1", {{C}, {C}}, {".weight", ".bias"});
    GraphOp attn;
    attn.kind = OpKind::Attention;
    attn.name = "self_attn";
    attn.input = g.addOp(ln);
    attn.heads = 12;
    attn.causal = true;
    attn.residual = x;
    attn.params =
        params("self_attn", {{C, C}, {C}, {C, C}, {C}, {C, C}, {C}, {C, C}, {C}},
               {".q.weight", ".q.bias", ".k.weight", ".k.bias", ".v.weight", ".v.bias", ".out.weight", ".out.bias"});
    x = g.addOp(attn);
    GraphOp fc1;
    fc1.kind = OpKind::Linear;
    fc1.name = "mlp.fc1";
    fc1.input = x;
    fc1.channels = 4 * C;
    fc1.params = params("mlp.fc1", {{4 * C, C}, {4 * C}}, {".weight", ".bias"});
    const int h = g.addOp(fc1);
    for (const auto& [kind, tanh, name] :
         {std::tuple{OpKind::QuickGELU, false, "quick_gelu"}, std::tuple{OpKind::GELU, false, "gelu"},
          std::tuple{OpKind::GELU, true, "gelu_tanh"}}) {
        GraphOp act;
        act.kind = kind;
        act.geluTanh = tanh;
        act.name = name;
        act.input = h;
        GraphOp fc2;
        fc2.kind = OpKind::Linear;
        fc2.name = std::string("mlp.fc2.") + name;
        fc2.input = g.addOp(act);
        fc2.channels = C;
        fc2.residual = x;
        fc2.params = params(fc2.name, {{C, 4 * C}, {C}}, {".weight", ".bias"});
        g.markOutput(g.addOp(fc2));
    }
    return g;
}

std::string shapeText(const std::vector<std::int64_t>& s) {
    std::string t;
    for (std::size_t i = 0; i < s.size(); ++i) t += (i ? "x" : "") + std::to_string(s[i]);
    return t;
}

// The op that reads `v` as ids (TokenEmbedding's input, EosPool's second operand), or null.
const GraphOp* idsReader(const ModelGraph& g, int v) {
    for (const GraphOp& op : g.ops())
        if ((op.kind == OpKind::TokenEmbedding && op.input == v) || (op.kind == OpKind::EosPool && op.input2 == v))
            return &op;
    return nullptr;
}

// Ids for `reader`: any id of the vocabulary for an embedding; for pooling small ids with ties
// (the first largest is pooled) and, for a pooled id, that id twice in row 0 (the first is
// pooled) and nowhere in row 1 (position 0 is).
std::vector<float> idsFor(const ModelGraph& g, const GraphOp& reader, int batch, int tokens, std::mt19937& rng) {
    std::vector<float> ids(static_cast<std::size_t>(batch) * tokens);
    const std::int64_t vocab = reader.kind == OpKind::TokenEmbedding ? g.param(reader.params[0]).shape[0] : 64;
    std::uniform_int_distribution<std::int64_t> id(0, vocab - 1);
    for (float& x : ids) x = static_cast<float>(id(rng));
    if (reader.kind == OpKind::EosPool && reader.token >= 0) {
        for (float& x : ids)
            if (x == static_cast<float>(reader.token)) x = 0.0f;
        ids[5] = ids[9] = static_cast<float>(reader.token);
    }
    return ids;
}

std::vector<std::vector<float>> inputsFor(const ModelGraph& g, int batch, int tile, unsigned seed) {
    std::vector<std::vector<float>> in;
    for (int v : g.inputs()) {
        std::mt19937 rng(seed++);
        if (const GraphOp* reader = idsReader(g, v)) {
            in.push_back(idsFor(g, *reader, batch, static_cast<int>(g.rows(v, tile, tile)), rng));
            continue;
        }
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::uniform_real_distribution<float> step(0.0f, 1000.0f);
        std::vector<float> x(static_cast<std::size_t>(g.elements(v, batch, tile, tile)));
        const bool timestep = g.value(v).kind == ValueKind::Vector && g.value(v).channels == 1;
        for (float& e : x)
            e = timestep ? step(rng) : (g.value(v).kind == ValueKind::Vector ? 0.5f : 1.0f) * normal(rng);
        in.push_back(std::move(x));
    }
    return in;
}

std::vector<const float*> pointers(const std::vector<std::vector<float>>& v) {
    std::vector<const float*> p;
    for (const auto& x : v) p.push_back(x.data());
    return p;
}

std::vector<float> runOn(Backend& b, const OpCase& c, int batch, const std::vector<std::vector<float>>& in) {
    b.prepareGraph(c.graph, *c.weights, batch, c.tile, c.tile);
    const int out = c.graph.outputs().at(0);
    std::vector<float> y(static_cast<std::size_t>(c.graph.elements(out, batch, c.tile, c.tile)),
                         std::numeric_limits<float>::quiet_NaN());
    b.run(pointers(in), batch, {y.data()});
    return y;
}

double tolerance(const OpCase& c, Precision p) {
    if (c.kind == OpKind::TimestepEmbedding) return 1e-3;
    return c.vectorOp ? 2e-5 : tessera::testing::opTolerance(p);
}

// Bytes an op must move at least: every input and the output once (activation type for
// feature maps, float32 for vectors) and its parameters (convolution and attention weights in
// the activation type, the rest float32).
double opBytes(const OpCase& c, int batch, Precision p) {
    const double act = p == Precision::FP32 ? 4.0 : 2.0;
    const ModelGraph& g = c.graph;
    double bytes = 0;
    auto valueBytes = [&](int v) {
        return double(g.elements(v, batch, c.tile, c.tile)) * (g.value(v).kind == ValueKind::Vector ? 4.0 : act);
    };
    for (int v : g.inputs()) bytes += valueBytes(v);
    bytes += valueBytes(g.outputs().at(0));
    const GraphOp& op = g.ops().at(0);
    for (std::size_t k = 0; k < op.params.size(); ++k) {
        const GraphParam& prm = g.param(op.params[k]);
        double n = 1;
        for (auto d : prm.shape) n *= double(d);
        const bool tokens = g.value(op.input).kind == ValueKind::Tokens;
        const bool matrix =
            prm.shape.size() >= 2 && (op.kind == OpKind::Conv || op.kind == OpKind::Attention ||
                                      op.kind == OpKind::GEGLU || (op.kind == OpKind::Linear && tokens));
        bytes += n * (matrix ? act : 4.0);
    }
    return bytes;
}

}  // namespace

class TestBackendOps : public QObject {
    Q_OBJECT

    std::vector<OpCase> cases_;
    std::map<std::size_t, std::vector<float>> reference_;  // CPU output per case (batch 2)
    std::vector<ModelCase> models_;
    std::unique_ptr<CpuBackend> cpu_;
    std::map<Precision, std::unique_ptr<CudaBackend>> gpu_;  // one per precision, prepared per case

    CudaBackend& gpu(Precision p) {
        auto& b = gpu_[p];
        if (!b) b = std::make_unique<CudaBackend>(p);
        return *b;
    }

    void collect() {
        models_ = {{"cifar", benchShapeConfig("cifar"), 32, true, nullptr, {}},
                   {"church", benchShapeConfig("church"), 256, false, nullptr, {}},
                   {"variant", variantConfig(), 32, true, nullptr, {}},
                   {"sd15", {}, 64, false, nullptr, {unet2DConditionExecutionGraph(sdConfig(false))}},
                   {"sd21", {}, 64, false, nullptr, {unet2DConditionExecutionGraph(sdConfig(true))}},
                   {"clip-l", {}, 64, false, nullptr, {clipLayerGraph()}},
                   {"clip-l-text", {}, 64, false, nullptr, {clipTextGraph(false)}},
                   {"open-clip-h-text", {}, 64, false, nullptr, {clipTextGraph(true)}},
                   {"vae-dec", {}, 256, false, nullptr, {vaeDecoderExecutionGraph(sdVaeConfig())}},
                   {"vae-enc", {}, 256, false, nullptr, {vaeEncoderExecutionGraph(sdVaeConfig())}},
                   {"esrgan",
                    {},
                    128,
                    false,
                    nullptr,
                    {upscaleGraph(UpscaleArchitecture::Esrgan), upscaleGraph(UpscaleArchitecture::Esrgan, 1, true)}},
                   {"esrgan-x2plus", {}, 128, false, nullptr, {upscaleGraph(UpscaleArchitecture::Esrgan, 2)}},
                   {"compact", {}, 128, false, nullptr, {upscaleGraph(UpscaleArchitecture::Compact)}},
                   {"span", {}, 128, false, nullptr, {upscaleGraph(UpscaleArchitecture::Span)}},
                   {"flux", {}, 64, false, nullptr, {fluxGraph()}}};
        const QStringList only =
            QString::fromLocal8Bit(qgetenv("TESSERA_BACKENDOPS_MODELS")).split(',', Qt::SkipEmptyParts);
        if (!only.isEmpty())
            models_.erase(
                std::remove_if(models_.begin(), models_.end(),
                               [&](const ModelCase& m) { return !only.contains(QString::fromStdString(m.name)); }),
                models_.end());
        std::set<std::string> seen;
        const QStringList kinds =
            QString::fromLocal8Bit(qgetenv("TESSERA_BACKENDOPS_KINDS")).split(',', Qt::SkipEmptyParts);
        for (ModelCase& m : models_) {
            const bool given = !m.graphs.empty();
            if (!given) m.weights = std::make_shared<const UNetModel>(UNetModel::random(m.config, 17));
            std::vector<ModelGraph> graphs = given ? m.graphs : std::vector<ModelGraph>{unet2DExecutionGraph(m.config)};
            if (m.primitive) graphs.push_back(buildUNet2DGraph(m.config));
            for (std::size_t k = 0; k < graphs.size(); ++k)
                for (std::size_t i = 0; i < graphs[k].ops().size(); ++i) {
                    const ModelGraph& g = graphs[k];
                    const GraphOp& op = g.ops()[i];
                    // From the primitive graph only the kinds the fusion removes (the rest run
                    // unfused in the fused graphs too, where the model does not fuse them).
                    const bool fusedAway = op.kind == OpKind::SiLU || op.kind == OpKind::Add ||
                                           op.kind == OpKind::ScaleShift || op.kind == OpKind::Affine ||
                                           op.kind == OpKind::LeakyReLU;
                    if (k == 1 && !fusedAway) continue;
                    std::string key = g.describe(op) + " |";
                    for (int v : op.operands()) key += " " + shapeText(g.shape(v, 1, m.tile, m.tile));
                    key += " -> " + shapeText(g.shape(op.output, 1, m.tile, m.tile));
                    if (!seen.insert(key).second) continue;
                    if (!kinds.isEmpty() && !kinds.contains(QLatin1String(toString(op.kind)))) continue;
                    OpCase c;
                    c.model = m.name;
                    c.key = key;
                    c.graph = g.extract(i);
                    c.tile = m.tile;
                    if (given) {
                        c.ownWeights =
                            std::make_shared<const TensorMap>(randomTensors(c.graph.parameterList(), 17 + i));
                        c.weights = c.ownWeights.get();
                    } else {
                        c.weights = &m.weights->tensors();
                    }
                    c.kind = op.kind;
                    // Vector ops compute in float32; the pooling copies an activation-type token.
                    c.vectorOp = g.value(op.output).kind == ValueKind::Vector && op.kind != OpKind::EosPool;
                    cases_.push_back(std::move(c));
                }
        }
        // TESSERA_BACKENDOPS_SHARD=i/n keeps every n-th case from the i-th (0-based): the CPU
        // reference at SD shapes takes minutes on one core, so a GPU session runs n processes.
        const QByteArray shard = qgetenv("TESSERA_BACKENDOPS_SHARD");
        const int slash = shard.indexOf('/');
        if (slash > 0) {
            const int index = shard.left(slash).toInt(), count = shard.mid(slash + 1).toInt();
            if (count > 0 && index >= 0 && index < count) {
                std::vector<OpCase> kept;
                for (std::size_t i = 0; i < cases_.size(); ++i)
                    if (static_cast<int>(i % static_cast<std::size_t>(count)) == index)
                        kept.push_back(std::move(cases_[i]));
                cases_ = std::move(kept);
            }
        }
    }

private slots:
    void initTestCase() {
        std::string why;
        if (!cudaDeviceAvailable(&why)) QSKIP(why.c_str());
        collect();
        // Every op kind the graph declares is covered.
        std::set<OpKind> kinds;
        for (const OpCase& c : cases_) kinds.insert(c.kind);
        if (!qgetenv("TESSERA_BACKENDOPS_SHARD").isEmpty() || !qgetenv("TESSERA_BACKENDOPS_MODELS").isEmpty() ||
            !qgetenv("TESSERA_BACKENDOPS_KINDS").isEmpty()) {
            qInfo("shard %s, models %s, kinds %s: %zu ops", qgetenv("TESSERA_BACKENDOPS_SHARD").constData(),
                  qgetenv("TESSERA_BACKENDOPS_MODELS").constData(), qgetenv("TESSERA_BACKENDOPS_KINDS").constData(),
                  cases_.size());
            return;  // kind coverage is a property of the whole list
        }
        for (OpKind k : {OpKind::Affine, OpKind::SiLU, OpKind::Add, OpKind::ScaleShift, OpKind::TimestepEmbedding,
                         OpKind::Linear, OpKind::Conv, OpKind::GroupNorm, OpKind::Attention, OpKind::Concat,
                         OpKind::Upsample, OpKind::ToTokens, OpKind::ToFeatureMap, OpKind::LayerNorm, OpKind::GEGLU,
                         OpKind::GELU, OpKind::QuickGELU, OpKind::TokenEmbedding, OpKind::EosPool})
            QVERIFY2(kinds.count(k), toString(k));
        for (OpKind k : {OpKind::LeakyReLU, OpKind::PReLU, OpKind::PixelShuffle, OpKind::PixelUnshuffle,
                         OpKind::Sigmoid, OpKind::Mul})
            QVERIFY2(kinds.count(k), toString(k));
        for (OpKind k : {OpKind::ChannelSlice, OpKind::AdaLayerNorm, OpKind::GatedAdd, OpKind::QkNormRope,
                         OpKind::PackedAttention, OpKind::TokenConcat, OpKind::TokenSplit})
            QVERIFY2(kinds.count(k), toString(k));
        qInfo("%zu distinct ops", cases_.size());
    }

    void opMatchesCpu_data() {
        QTest::addColumn<int>("index");
        QTest::addColumn<int>("precision");
        for (std::size_t i = 0; i < cases_.size(); ++i)
            for (int p : {0, 1, 2})
                QTest::newRow(
                    (cases_[i].model + " " + cases_[i].key + " " + precisionName(static_cast<Precision>(p))).c_str())
                    << static_cast<int>(i) << p;
    }

    void opMatchesCpu() {
        QFETCH(int, index);
        QFETCH(int, precision);
        const OpCase& c = cases_[static_cast<std::size_t>(index)];
        const Precision prec = static_cast<Precision>(precision);
        const int batch = 2;
        const auto in = inputsFor(c.graph, batch, c.tile, 100 + static_cast<unsigned>(index));
        auto ref = reference_.find(static_cast<std::size_t>(index));
        if (ref == reference_.end()) {
            if (!cpu_) cpu_ = std::make_unique<CpuBackend>();
            ref = reference_.emplace(static_cast<std::size_t>(index), runOn(*cpu_, c, batch, in)).first;
        }
        const std::vector<float> out = runOn(gpu(prec), c, batch, in);
        const QString bad = tessera::testing::outputMismatch(ref->second, out, tolerance(c, prec), precisionName(prec));
        QVERIFY2(bad.isEmpty(), qPrintable(bad));
    }

    // The same whole model both ways, compared value by value: the graph's names tie a CUDA
    // layer's output to the CPU's value, so a disagreement names its first layer.
    void layerByLayer_data() {
        QTest::addColumn<int>("precision");
        QTest::newRow("fp32") << 0;
        QTest::newRow("fp16") << 1;
    }
    void layerByLayer() {
        const QByteArray shard = qgetenv("TESSERA_BACKENDOPS_SHARD");
        if (!shard.isEmpty() && !shard.startsWith("0/")) QSKIP("runs in shard 0 only");
        QFETCH(int, precision);
        const Precision prec = static_cast<Precision>(precision);
        // The variant: every branch, centred input included.
        const auto variant =
            std::find_if(models_.begin(), models_.end(), [](const ModelCase& c) { return c.name == "variant"; });
        if (variant == models_.end()) QSKIP("the variant model is not among TESSERA_BACKENDOPS_MODELS");
        const ModelCase& m = *variant;
        const ModelGraph fused = unet2DExecutionGraph(m.config);
        ModelGraph all = fused;
        for (const GraphOp& op : fused.ops()) all.markOutput(op.output);
        const int batch = 2, tile = m.tile;
        const auto in = inputsFor(fused, batch, tile, 7);
        CpuBackend cpu;
        cpu.prepareGraph(all, m.weights->tensors(), batch, tile, tile);
        std::vector<std::vector<float>> values;
        std::vector<float*> outs;
        for (int v : all.outputs()) values.emplace_back(static_cast<std::size_t>(all.elements(v, batch, tile, tile)));
        for (auto& v : values) outs.push_back(v.data());
        cpu.run(pointers(in), batch, outs);
        std::map<std::string, std::size_t> byName;
        for (std::size_t k = 0; k < all.outputs().size(); ++k) byName[all.value(all.outputs()[k]).name] = k;

        CudaBackend& cuda = gpu(prec);
        cuda.prepare(*m.weights, batch, tile, tile);
        const auto trace = cuda.traceForward(in[0].data(), in[1].data(), batch);
        int compared = 0;
        double worst = 0;
        std::string worstName;
        for (const auto& layer : trace) {
            if (layer.value.empty() || layer.values.empty()) continue;
            const auto it = byName.find(layer.value);
            QVERIFY2(it != byName.end(), layer.value.c_str());
            const int v = all.outputs()[it->second];
            const GraphValue& gv = all.value(v);
            if (gv.kind != ValueKind::FeatureMap) continue;
            const int C = gv.channels, hw = (tile / gv.divisor) * (tile / gv.divisor);
            const std::vector<float>& ref = values[it->second];
            double num = 0, den = 0;
            for (int b = 0; b < batch; ++b)
                for (int p = 0; p < hw; ++p)
                    for (int ch = 0; ch < C; ++ch) {
                        const double r = ref[(std::size_t(b) * C + ch) * hw + p];
                        const double d = layer.values[(std::size_t(b) * hw + p) * layer.channels + ch] - r;
                        num += d * d;
                        den += r * r;
                    }
            const double rel = std::sqrt(num / std::max(den, 1e-30));
            if (rel > worst) {
                worst = rel;
                worstName = layer.name;
            }
            ++compared;
        }
        qInfo("%s: %d layers compared, worst %s at %.3e", precisionName(prec), compared, worstName.c_str(), worst);
        QVERIFY(compared > 20);
        QVERIFY2(worst < (prec == Precision::FP32 ? 1e-4 : 1e-2), worstName.c_str());
    }

    void perf() {
        if (!qEnvironmentVariableIsSet("TESSERA_BACKENDOPS_PERF")) QSKIP("set TESSERA_BACKENDOPS_PERF=1 to measure");
        const int batch = qEnvironmentVariableIsSet("TESSERA_BACKENDOPS_BATCH")
                              ? std::max(1, qEnvironmentVariableIntValue("TESSERA_BACKENDOPS_BATCH"))
                              : 8;
        // The attention path is a setting (TESSERA_CUDA_FLASH, default auto: timed per shape);
        // each attention row names the path its op took.
        const QByteArray flash = qgetenv("TESSERA_CUDA_FLASH");
        std::printf("TESSERA_CUDA_FLASH=%s\n", flash.isEmpty() ? "auto (not set)" : flash.constData());
        std::printf("%-8s %-52s %-34s %-5s %9s %9s %9s\n", "model", "op", "output", "prec", "ms", "GB/s", "TFLOP/s");
        for (const OpCase& c : cases_)
            for (Precision p : {Precision::FP16, Precision::BF16, Precision::FP32}) {
                CudaBackend& cuda = gpu(p);
                (void)runOn(cuda, c, batch, inputsFor(c.graph, batch, c.tile, 5));
                double ms = 0;
                for (const auto& t : cuda.profileOps(batch, 20, true)) ms += t.ms;
                const GraphOp& op = c.graph.ops().at(0);
                const double flops = c.graph.flops(op, c.tile, c.tile) * batch;
                const std::string out = shapeText(c.graph.shape(c.graph.outputs().at(0), batch, c.tile, c.tile));
                std::string name = c.key.substr(0, c.key.find(" |"));
                for (const auto& path : cuda.attentionPaths()) name += path.fused ? " [fused]" : " [blocked]";
                std::printf("%-8s %-52s %-34s %-5s %9.4f %9.1f %9.2f\n", c.model.c_str(), name.c_str(), out.c_str(),
                            precisionName(p), ms, ms > 0 ? opBytes(c, batch, p) / (ms * 1e-3) / 1e9 : 0.0,
                            ms > 0 ? flops / (ms * 1e-3) / 1e12 : 0.0);
            }
    }
};

QTEST_GUILESS_MAIN(TestBackendOps)
#include "tst_backendops.moc"
