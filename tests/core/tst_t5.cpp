// core/models/t5 and core/text/T5Tokenizer (transformers models/t5/configuration_t5.py,
// modeling_t5.py, tokenization_t5.py): the relative position buckets against the FLUX
// specification's test vector, the RMSNorm and attention ops, config ranges and refusals, the
// graph's parameter list, the forward pass against a plain double-precision implementation written
// here from modeling_t5.py, loading (folder, single file, ComfyUI prefix; file and tensor named for
// every defect), the tokenizer's framing, and — when tests/data/t5 holds them — transformers' own
// outputs and token ids (tools/reference/make_t5_fixtures.py).
#include <QtTest/QtTest>

#include <QFile>
#include <QTemporaryDir>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numbers>
#include <numeric>
#include <random>

#include <nlohmann/json.hpp>

#include "core/base/BoundedInput.h"
#include "core/cpu/CpuBackend.h"
#include "core/cpu/CpuOps.h"
#include "core/formats/Safetensors.h"
#include "core/graph/RelativePositionBucket.h"
#include "core/models/t5/T5Config.h"
#include "core/models/t5/T5Graph.h"
#include "core/models/t5/T5Model.h"
#include "core/text/T5Tokenizer.h"
#include "tests/core/ErrorText.h"
#include "tests/core/NumericCompare.h"

using namespace tessera;
using tessera::testing::errorOf;
using Tensors = std::map<std::string, HostTensor>;
using Ids = std::vector<std::int32_t>;

namespace {

const std::string kData = TESSERA_TEST_DATA "/t5";

// The FLUX specification's reference-check config (vocab 101, d_model 40, d_kv 12, 5 heads: inner
// 60 != d_model, d_ff 72, 3 layers), as tools/reference/make_t5_fixtures.py builds it.
T5Config tinyConfig() {
    T5Config c;
    c.vocabSize = 101;
    c.dModel = 40;
    c.dKv = 12;
    c.numHeads = 5;
    c.dFf = 72;
    c.numLayers = 3;
    return c;
}

// Every parameter drawn at random (RMSNorm weights around 1, a strong position bias), seeded.
Tensors randomTensors(const T5Config& c, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    Tensors t;
    for (const auto& [name, shape] : T5Model::expectedTensors(c)) {
        HostTensor h{shape, {}};
        h.data.resize(static_cast<std::size_t>(h.numel()));
        const bool norm = name.find("layer_norm") != std::string::npos;
        const bool table = name == kT5SharedEmbedding || name.find("relative_attention_bias") != std::string::npos;
        const float scale = norm ? 0.2f : table ? 0.5f : 1.0f / std::sqrt(static_cast<float>(shape[1]));
        for (float& v : h.data) v = (norm ? 1.0f : 0.0f) + scale * normal(rng);
        t.emplace(name, std::move(h));
    }
    return t;
}

Ids randomIds(int batch, int tokens, int vocab, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> id(0, vocab - 1);
    Ids ids(static_cast<std::size_t>(batch) * tokens);
    for (auto& v : ids) v = id(rng);
    return ids;
}

// ---- The forward pass written plainly, in double, from modeling_t5.py (T5Stack, T5Block) ----

// transformers' bucket rule in double (the library takes the log in float32; at the exact
// boundaries, powers of two, both are exact).
int plainBucket(int r) {
    const int base = r > 0 ? 16 : 0;
    const int a = std::abs(r);
    if (a < 8) return base + a;
    return base + std::min(15, 8 + static_cast<int>(std::log(a / 8.0) / std::log(128.0 / 8.0) * 8.0));
}

std::vector<double> plainRms(const std::vector<double>& x, const std::vector<float>& w, int rows, int d, double eps) {
    std::vector<double> y(x.size());
    for (int r = 0; r < rows; ++r) {
        double ms = 0;
        for (int c = 0; c < d; ++c) ms += x[r * d + c] * x[r * d + c];
        const double inv = 1.0 / std::sqrt(ms / d + eps);
        for (int c = 0; c < d; ++c) y[r * d + c] = x[r * d + c] * inv * w[c];
    }
    return y;
}

// y [rows, out] = x [rows, in] W^T, W [out, in].
std::vector<double> plainLinear(const std::vector<double>& x, const std::vector<float>& w, int rows, int in, int out) {
    std::vector<double> y(static_cast<std::size_t>(rows) * out);
    for (int r = 0; r < rows; ++r)
        for (int o = 0; o < out; ++o) {
            double s = 0;
            for (int i = 0; i < in; ++i) s += x[r * in + i] * w[static_cast<std::size_t>(o) * in + i];
            y[static_cast<std::size_t>(r) * out + o] = s;
        }
    return y;
}

// last_hidden_state [B, S, d_model] of `ids` ([B, S]).
std::vector<double> plainT5(const T5Config& c, const Tensors& t, const Ids& ids, int batch) {
    const int S = static_cast<int>(ids.size()) / batch, D = c.dModel, I = c.innerDim(), H = c.numHeads, K = c.dKv;
    const double eps = c.layerNormEpsilon;
    auto w = [&t](const std::string& n) -> const std::vector<float>& { return t.at(n).data; };
    std::vector<double> out;
    for (int b = 0; b < batch; ++b) {
        std::vector<double> h(static_cast<std::size_t>(S) * D);
        for (int s = 0; s < S; ++s)
            for (int d = 0; d < D; ++d) h[s * D + d] = w("shared.weight")[ids[b * S + s] * D + d];
        const std::vector<float>& table = w("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight");
        for (int l = 0; l < c.numLayers; ++l) {
            const std::string p = "encoder.block." + std::to_string(l) + ".layer.";
            const std::vector<double> n = plainRms(h, w(p + "0.layer_norm.weight"), S, D, eps);
            const auto q = plainLinear(n, w(p + "0.SelfAttention.q.weight"), S, D, I);
            const auto k = plainLinear(n, w(p + "0.SelfAttention.k.weight"), S, D, I);
            const auto v = plainLinear(n, w(p + "0.SelfAttention.v.weight"), S, D, I);
            std::vector<double> o(static_cast<std::size_t>(S) * I, 0.0), row(S);
            for (int hd = 0; hd < H; ++hd)
                for (int i = 0; i < S; ++i) {
                    double m = -INFINITY, sum = 0;
                    for (int j = 0; j < S; ++j) {
                        double s = table[plainBucket(j - i) * H + hd];  // no 1/sqrt(d_kv)
                        for (int e = 0; e < K; ++e) s += q[i * I + hd * K + e] * k[j * I + hd * K + e];
                        row[j] = s;
                        m = std::max(m, s);
                    }
                    for (int j = 0; j < S; ++j) sum += (row[j] = std::exp(row[j] - m));
                    for (int j = 0; j < S; ++j)
                        for (int e = 0; e < K; ++e) o[i * I + hd * K + e] += row[j] / sum * v[j * I + hd * K + e];
                }
            const auto a = plainLinear(o, w(p + "0.SelfAttention.o.weight"), S, I, D);
            for (std::size_t x = 0; x < h.size(); ++x) h[x] += a[x];
            const std::vector<double> n2 = plainRms(h, w(p + "1.layer_norm.weight"), S, D, eps);
            auto g = plainLinear(n2, w(p + "1.DenseReluDense.wi_0.weight"), S, D, c.dFf);
            const auto u = plainLinear(n2, w(p + "1.DenseReluDense.wi_1.weight"), S, D, c.dFf);
            for (std::size_t x = 0; x < g.size(); ++x) {
                const double z = g[x];  // gelu_new
                g[x] =
                    0.5 * z * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (z + 0.044715 * z * z * z))) * u[x];
            }
            const auto f = plainLinear(g, w(p + "1.DenseReluDense.wo.weight"), S, c.dFf, D);
            for (std::size_t x = 0; x < h.size(); ++x) h[x] += f[x];
        }
        const std::vector<double> last = plainRms(h, w("encoder.final_layer_norm.weight"), S, D, eps);
        out.insert(out.end(), last.begin(), last.end());
    }
    return out;
}

void writeText(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// `tensors` as one safetensors file, each renamed by `rename` (F32).
void writeTensors(const std::string& path, const Tensors& tensors,
                  const std::function<std::string(const std::string&)>& rename = {}) {
    std::map<std::string, SafetensorsTensorData> out;
    for (const auto& [name, t] : tensors)
        out.emplace(rename ? rename(name) : name,
                    SafetensorsTensorData{SafetensorsDtype::F32, t.shape, encodeFloats(SafetensorsDtype::F32, t.data)});
    writeSafetensors(path, out, {{"format", "pt"}});
}

nlohmann::json tinyConfigJson() {
    nlohmann::json j = toJson(tinyConfig());
    j["dense_act_fn"] = "gelu_new";
    j["is_gated_act"] = true;
    j["num_decoder_layers"] = 3;  // decoder keys are ignored
    return j;
}

double maxAbs(const std::vector<float>& got, const std::vector<float>& want) {
    double worst = got.size() == want.size() ? 0.0 : INFINITY;
    for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i)
        worst = std::max(worst, std::abs(double(got[i]) - double(want[i])));
    return worst;
}

bool haveFixtures() { return QFile::exists(QString::fromStdString(kData + "/t5_cases.json")); }

std::string idsText(const std::vector<std::int32_t>& ids) {
    std::string s;
    for (std::size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
    return s;
}

}  // namespace

class TestT5 : public QObject {
    Q_OBJECT

    CpuBackend cpu_;

private slots:
    // The FLUX specification's test vector (32 buckets, max distance 128), and the shape of the rule.
    void bucketTestVector() {
        const std::vector<std::pair<int, int>> vector = {
            {-200, 15}, {-128, 15}, {-64, 14}, {-32, 12}, {-16, 10}, {-9, 8},   {-8, 8},
            {-7, 7},    {-1, 1},    {0, 0},    {1, 17},   {7, 23},   {8, 24},   {11, 24},
            {12, 25},   {16, 26},   {23, 27},  {32, 28},  {64, 30},  {127, 31}, {511, 31}};
        for (const auto& [r, bucket] : vector)
            QVERIFY2(relativePositionBucket(r, 32, 128) == bucket,
                     qPrintable(QStringLiteral("r %1: bucket %2, expected %3")
                                    .arg(r)
                                    .arg(relativePositionBucket(r, 32, 128))
                                    .arg(bucket)));
        for (int r = -600; r <= 600; ++r) QCOMPARE(relativePositionBucket(r, 32, 128), plainBucket(r));
        const std::vector<int> table = relativePositionBuckets(3, 4, 32, 128);
        QCOMPARE(table, (std::vector<int>{0, 17, 18, 19, 1, 0, 17, 18, 2, 1, 0, 17}));
    }

    // transformers' own [S, S] table (T5Attention._relative_position_bucket on memory - query).
    void bucketTableMatchesTransformers() {
        if (!haveFixtures()) QSKIP("tests/data/t5/t5_cases.json is not there: run tools/reference/make_t5_fixtures.py");
        const SafetensorsFile f(kData + "/t5_outputs.safetensors");
        const std::vector<float> want = f.readFloat32("buckets");
        const auto n = static_cast<int>(f.find("buckets")->shape[0]);
        const std::vector<int> got = relativePositionBuckets(n, n, 32, 128);
        QCOMPARE(got.size(), want.size());
        for (std::size_t i = 0; i < got.size(); ++i)
            QVERIFY2(float(got[i]) == want[i], qPrintable(QStringLiteral("row %1 column %2: %3, transformers %4")
                                                              .arg(i / n)
                                                              .arg(i % n)
                                                              .arg(got[i])
                                                              .arg(want[i])));
        const nlohmann::json doc = readBoundedJson(kData + "/t5_cases.json", "fixture");
        const auto& v = doc.at("encoder").at("bucket_vector");
        for (std::size_t i = 0; i < v.at("relative").size(); ++i)
            QCOMPARE(relativePositionBucket(v["relative"][i].get<int>(), 32, 128), v["bucket"][i].get<int>());
    }

    void rmsNormOp() {
        cpu::WorkerPool pool(2);
        const std::vector<float> x{3.0f, -4.0f, 0.0f, 1.0f, 1.0f, 1.0f};
        const std::vector<float> w{1.0f, 2.0f, 0.5f};
        std::vector<float> y(6);
        cpu::rmsNorm(pool, 2, 3, 1e-6f, x.data(), w.data(), y.data());
        const double inv0 = 1.0 / std::sqrt(25.0 / 3 + 1e-6), inv1 = 1.0 / std::sqrt(1.0 + 1e-6);
        const std::vector<double> want{3 * inv0, -8 * inv0, 0.0, inv1, 2 * inv1, 0.5 * inv1};
        QVERIFY(mismatch("rms", y, want, 1e-6).isEmpty());
    }

    // The attention op's new attributes are checked where the graph is built.
    void attentionAttributesChecked() {
        ModelGraph g;
        const int x = g.addTokenInput("x", 8, 40);
        const int q = g.addParam("q", {60, 40}), k = g.addParam("k", {60, 40}), v = g.addParam("v", {60, 40});
        const int o = g.addParam("o", {40, 60}), table = g.addParam("table", {32, 5});
        GraphOp a;
        a.kind = OpKind::Attention;
        a.name = "attn";
        a.input = x;
        a.heads = 5;
        a.innerChannels = 60;
        a.qkvBias = false;
        a.bias = false;
        a.scoreScale = 1.0f;
        a.buckets = 32;
        a.maxDistance = 128;
        a.params = {q, k, v, o, table};
        g.addOp(a, "first");
        a.name = "attn2";
        g.addOp(a, "second");  // one table read by two ops (T5: block 0's, every block)
        QCOMPARE(g.describe(g.ops()[0]), std::string("attention 40ch 5h inner 60 nobias nooutbias scale 1 relbias "
                                                     "32/128 tokens 8"));
        GraphOp bad = a;
        bad.name = "odd";
        bad.buckets = 31;
        EXPECT_MESSAGE(errorOf([&] { g.addOp(bad); }), "even bucket count");
        bad = a;
        bad.name = "shape";
        bad.params = {q, k, v, o, q};
        EXPECT_MESSAGE(errorOf([&] { g.addOp(bad); }), "q has shape [60, 40], expected [32, 5]");
        bad = a;
        bad.name = "heads";
        bad.heads = 7;
        EXPECT_MESSAGE(errorOf([&] { g.addOp(bad); }), "the heads divide");
        bad = a;
        bad.name = "causal";
        bad.causal = true;
        EXPECT_MESSAGE(errorOf([&] { g.addOp(bad); }), "relative position bias needs tokens without context or causal");
        GraphOp lin;
        lin.kind = OpKind::Linear;
        lin.name = "lin";
        lin.input = x;
        lin.channels = 60;
        lin.bias = false;
        lin.params = {q};
        g.addOp(lin);
        lin.name = "lin2";
        lin.params = {q, o};
        EXPECT_MESSAGE(errorOf([&] { g.addOp(lin); }), "takes 1 parameters, has 2");
    }

    void configDefaultsAndRefusals() {
        const T5Config c = t5ConfigFromJson(tinyConfigJson());
        QCOMPARE(toJson(c), toJson(tinyConfig()));
        QCOMPARE(c.innerDim(), 60);
        // transformers' defaults for missing keys (T5 v1.1 XXL's config lists them all).
        const T5Config d = t5ConfigFromJson(nlohmann::json{{"feed_forward_proj", "gated-gelu"}});
        QCOMPARE(d.vocabSize, 32128);
        QCOMPARE(d.relativeAttentionNumBuckets, 32);
        QCOMPARE(d.relativeAttentionMaxDistance, 128);
        QCOMPARE(d.layerNormEpsilon, 1e-6f);
        auto refusal = [](const std::function<void(nlohmann::json&)>& change) {
            nlohmann::json j = tinyConfigJson();
            change(j);
            return errorOf([&] { (void)t5ConfigFromJson(j); });
        };
        const std::string relu = refusal([](nlohmann::json& j) { j["feed_forward_proj"] = "relu"; });
        EXPECT_MESSAGE(relu, "feed_forward_proj = \"relu\"");
        EXPECT_MESSAGE(relu, "only \"gated-gelu\"");
        EXPECT_MESSAGE(refusal([](nlohmann::json& j) { j.erase("feed_forward_proj"); }),
                       "feed_forward_proj = null: missing: T5Config's default \"relu\"");
        EXPECT_MESSAGE(refusal([](nlohmann::json& j) { j["d_model"] = "forty"; }), "d_model");
        EXPECT_MESSAGE(refusal([](nlohmann::json& j) { j["num_heads"] = 0; }), "num_heads = 0");
        EXPECT_MESSAGE(refusal([](nlohmann::json& j) { j["d_kv"] = 1 << 20; }), "d_kv");
        EXPECT_MESSAGE(refusal([](nlohmann::json& j) { j["relative_attention_num_buckets"] = 33; }),
                       "relative_attention_num_buckets = 33: must be even");
        EXPECT_MESSAGE(refusal([](nlohmann::json& j) { j["relative_attention_max_distance"] = 8; }),
                       "relative_attention_max_distance = 8");
        EXPECT_MESSAGE(refusal([](nlohmann::json& j) { j["dense_act_fn"] = "relu"; }), "dense_act_fn");
        EXPECT_MESSAGE(refusal([](nlohmann::json& j) { j["model_type"] = "umt5"; }), "expected t5");
        EXPECT_MESSAGE(refusal([](nlohmann::json& j) { j["architectures"] = {"BertModel"}; }), "T5EncoderModel");
        EXPECT_MESSAGE(refusal([](nlohmann::json& j) { j["layer_norm_epsilon"] = -1; }), "layer_norm_epsilon");
    }

    // State-dict order and shapes; block 0 alone owns the position-bias table, read by every block.
    void graphParameters() {
        const T5Config c = tinyConfig();
        const TensorList list = T5Model::expectedTensors(c);
        QCOMPARE(list.size(), std::size_t(1 + 3 * 9 + 1 + 1));
        QCOMPARE(list[0].first, std::string("shared.weight"));
        QCOMPARE(list[0].second, (std::vector<std::int64_t>{101, 40}));
        const std::vector<std::string> block0 = {"encoder.block.0.layer.0.SelfAttention.q.weight",
                                                 "encoder.block.0.layer.0.SelfAttention.k.weight",
                                                 "encoder.block.0.layer.0.SelfAttention.v.weight",
                                                 "encoder.block.0.layer.0.SelfAttention.o.weight",
                                                 "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                                                 "encoder.block.0.layer.0.layer_norm.weight",
                                                 "encoder.block.0.layer.1.DenseReluDense.wi_0.weight",
                                                 "encoder.block.0.layer.1.DenseReluDense.wi_1.weight",
                                                 "encoder.block.0.layer.1.DenseReluDense.wo.weight",
                                                 "encoder.block.0.layer.1.layer_norm.weight"};
        for (std::size_t i = 0; i < block0.size(); ++i) QCOMPARE(list[1 + i].first, block0[i]);
        QCOMPARE(list[1].second, (std::vector<std::int64_t>{60, 40}));
        QCOMPARE(list[4].second, (std::vector<std::int64_t>{40, 60}));
        QCOMPARE(list[5].second, (std::vector<std::int64_t>{32, 5}));
        QCOMPARE(list[7].second, (std::vector<std::int64_t>{72, 40}));
        QCOMPARE(list[9].second, (std::vector<std::int64_t>{40, 72}));
        QCOMPARE(list.back().first, std::string("encoder.final_layer_norm.weight"));
        for (const auto& [name, shape] : list)
            if (name.find("relative_attention_bias") != std::string::npos)
                QVERIFY(name.find("block.0.") != std::string::npos);
        const ModelGraph g = buildT5EncoderGraph(c, 16);
        std::set<int> tables;
        int attentions = 0;
        for (const GraphOp& op : g.ops())
            if (op.kind == OpKind::Attention) {
                ++attentions;
                tables.insert(op.params.back());
            }
        QCOMPARE(attentions, 3);
        QCOMPARE(tables.size(), std::size_t(1));
        // FLOPs of one attention at the inner width: Q, K, V and the output projection (2 x 4 x C x I
        // x S), Q K^T and A V (2 x 2 x S^2 x I); the table counts once among the parameters.
        for (const GraphOp& op : g.ops())
            if (op.kind == OpKind::Attention)
                QCOMPARE(g.flops(op, 1, 1), 2.0 * 4 * 40 * 60 * 16 + 2.0 * 2 * 16 * 16 * 60);
        std::int64_t listed = 0;
        for (const auto& [name, shape] : list)
            listed += std::accumulate(shape.begin(), shape.end(), std::int64_t(1), std::multiplies<>());
        QCOMPARE(g.parameterCount(), listed);
        EXPECT_MESSAGE(errorOf([&] { (void)buildT5EncoderGraph(c, 513); }), "1 to 512");
    }

    // The CPU backend against the plain implementation, at a length that reaches the logarithmic
    // and saturated buckets.
    void forwardMatchesPlainImplementation() {
        const T5Config c = tinyConfig();
        const Tensors t = randomTensors(c, 11);
        const T5Model m = T5Model::fromTensors(c, t);
        const int batch = 2, S = 300;
        const Ids ids = randomIds(batch, S, c.vocabSize, 3);
        const std::vector<float> got = m.encode(cpu_, ids, batch);
        const std::vector<double> want = plainT5(c, t, ids, batch);
        double worst = 0, scale = 0;
        for (std::size_t i = 0; i < want.size(); ++i) {
            worst = std::max(worst, std::abs(got[i] - want[i]));
            scale = std::max(scale, std::abs(want[i]));
        }
        qInfo("CPU float32 vs plain double: max abs error %.3g (max |value| %.3g)", worst, scale);
        QVERIFY(mismatch("last_hidden_state", got, want, 2e-5).isEmpty());
        // A row's result does not depend on its batch.
        const std::vector<float> alone = m.encode(cpu_, std::span<const std::int32_t>(ids).subspan(S, S), 1);
        QVERIFY(std::equal(alone.begin(), alone.end(), got.begin() + S * c.dModel));
    }

    void encodeRefusesBadIds() {
        const T5Config c = tinyConfig();
        const T5Model m = T5Model::fromTensors(c, randomTensors(c, 2));
        Ids ids = randomIds(2, 8, c.vocabSize, 1);
        ids[11] = 101;
        EXPECT_MESSAGE(errorOf([&] { (void)m.encode(cpu_, ids, 2); }), "row 1 position 3 holds id 101");
        EXPECT_MESSAGE(errorOf([&] { (void)m.encode(cpu_, ids, 3); }), "16 ids for a batch of 3 rows");
        const Ids tooLong(513, 0);
        EXPECT_MESSAGE(errorOf([&] { (void)m.encode(cpu_, tooLong, 1); }), "1 to 512");
        ids[11] = -1;
        EXPECT_MESSAGE(errorOf([&] { (void)m.encode(cpu_, ids, 2); }), "holds id -1");
    }

    void loadFolderAndSingleFiles() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const std::string d = dir.path().toStdString();
        const T5Config c = tinyConfig();
        const Tensors t = randomTensors(c, 5);
        writeText(d + "/config.json", tinyConfigJson().dump());
        // transformers' save_pretrained keeps shared.weight; encoder.embed_tokens.weight is its alias.
        writeTensors(d + "/model.safetensors", t, [](const std::string& n) {
            return n == kT5SharedEmbedding ? std::string(kT5EmbedTokensAlias) : n;
        });
        const T5Model folder = T5Model::load(d);
        QCOMPARE(toJson(folder.config()), toJson(c));
        for (const auto& [name, tensor] : t) QVERIFY2(folder.tensors().at(name).data == tensor.data, name.c_str());
        QVERIFY(folder.extraTensors().empty());
        QCOMPARE(folder.parameterCount(), buildT5EncoderGraph(c, 1).parameterCount());

        // One file: plain names, and ComfyUI's prefix; the sizes read from the shapes.
        writeTensors(d + "/t5.safetensors", t);
        const T5Model plain = T5Model::loadSingleFile(d + "/t5.safetensors");
        QCOMPARE(toJson(plain.config()), toJson(c));
        writeTensors(d + "/comfy.safetensors", t, [](const std::string& n) { return kT5ComfyPrefix + n; });
        const T5Model comfy = T5Model::loadSingleFile(d + "/comfy.safetensors");
        QCOMPARE(toJson(comfy.config()), toJson(c));
        for (const auto& [name, tensor] : t) QVERIFY2(comfy.tensors().at(name).data == tensor.data, name.c_str());
        const Ids ids = randomIds(1, 20, c.vocabSize, 9);
        QCOMPARE(comfy.encode(cpu_, ids, 1), folder.encode(cpu_, ids, 1));

        // A missing tensor, a wrong shape: the file and the tensor named.
        Tensors missing = t;
        missing.erase("encoder.block.2.layer.1.DenseReluDense.wo.weight");
        writeTensors(d + "/model.safetensors", missing);
        const std::string m1 = errorOf([&] { (void)T5Model::load(d); });
        EXPECT_MESSAGE(m1, "model.safetensors");
        EXPECT_MESSAGE(m1, "missing tensor 'encoder.block.2.layer.1.DenseReluDense.wo.weight'");
        Tensors wrong = t;
        wrong.at("encoder.block.1.layer.0.SelfAttention.o.weight").shape = {60, 40};
        writeTensors(d + "/model.safetensors", wrong);
        const std::string m2 = errorOf([&] { (void)T5Model::load(d); });
        EXPECT_MESSAGE(m2,
                       "tensor 'encoder.block.1.layer.0.SelfAttention.o.weight': expected [40, 60], found [60, 40]");
        writeTensors(d + "/model.safetensors", t);
        writeText(d + "/config.json", nlohmann::json{{"feed_forward_proj", "relu"}, {"d_model", 40}}.dump());
        const std::string m3 = errorOf([&] { (void)T5Model::load(d); });
        EXPECT_MESSAGE(m3, "config.json");
        EXPECT_MESSAGE(m3, "feed_forward_proj = \"relu\"");

        // A ComfyUI-prefixed file without one tensor: both spellings named whole.
        Tensors partial = t;
        partial.erase("encoder.block.1.layer.1.layer_norm.weight");
        writeTensors(d + "/partial.safetensors", partial, [](const std::string& n) { return kT5ComfyPrefix + n; });
        const std::string m4 = errorOf([&] { (void)T5Model::loadSingleFile(d + "/partial.safetensors"); });
        EXPECT_MESSAGE(m4, "partial.safetensors");
        EXPECT_MESSAGE(m4, "'text_encoders.t5xxl.transformer.encoder.block.1.layer.1.layer_norm.weight'");
        // T5 1.0's feed-forward in a single file, and a file without an encoder.
        writeTensors(d + "/relu.safetensors", t, [](std::string n) {
            const auto at = n.find("wi_0");
            return at == std::string::npos ? n : n.replace(at, 4, "wi");
        });
        EXPECT_MESSAGE(errorOf([&] { (void)T5Model::loadSingleFile(d + "/relu.safetensors"); }),
                       "T5 1.0's feed-forward");
        writeTensors(d + "/other.safetensors", {{"x", HostTensor{{1}, {0.0f}}}});
        EXPECT_MESSAGE(errorOf([&] { (void)T5Model::loadSingleFile(d + "/other.safetensors"); }), "no T5 encoder");
        EXPECT_MESSAGE(errorOf([&] { (void)T5Model::loadSingleFile(d + "/absent.safetensors"); }),
                       "absent.safetensors");
    }

    // transformers' T5EncoderModel on the tiny config, float64 forward, stored F32.
    void transformersEncoderFixture() {
        if (!haveFixtures()) QSKIP("tests/data/t5/t5_cases.json is not there: run tools/reference/make_t5_fixtures.py");
        const T5Model model = T5Model::load(kData + "/encoder");
        QCOMPARE(toJson(model.config()), toJson(tinyConfig()));
        const SafetensorsFile f(kData + "/t5_outputs.safetensors");
        const std::vector<float> idsF = f.readFloat32("input_ids");
        const auto batch = static_cast<int>(f.find("input_ids")->shape[0]);
        const Ids ids(idsF.begin(), idsF.end());
        const std::vector<std::vector<float>> out = model.encodeWithHiddenStates(cpu_, ids, batch);
        const std::vector<float> want = f.readFloat32("last_hidden_state");
        const double err = maxAbs(out[0], want);
        qInfo("last_hidden_state [%d, %zu, 40] vs transformers (float64): max abs error %.3g, max relative %.3g", batch,
              ids.size() / batch, err, maxRelativeError(out[0], want));
        QVERIFY2(err < 1e-4, qPrintable(mismatch("last_hidden_state", out[0], want, 1e-5)));
        QVERIFY(mismatch("last_hidden_state", out[0], want, 2e-5).isEmpty());
        for (std::size_t k = 1; k < out.size(); ++k) {
            const std::string key = "hidden_states." + std::to_string(k - 1);
            if (!f.has(key)) continue;
            QVERIFY2(mismatch(key, out[k], f.readFloat32(key), 2e-5).isEmpty(),
                     qPrintable(mismatch(key, out[k], f.readFloat32(key), 2e-5)));
        }
    }

    void tokenizerFraming() {
        const T5Tokenizer tok(kData + "/spiece.model");
        QCOMPARE(tok.pieceCount(), 400);
        QCOMPARE(tok.vocabSize(), 500);
        Ids empty(16, T5Tokenizer::kPadId);
        empty[0] = T5Tokenizer::kEosId;
        QCOMPARE(tok.encode("", 16), empty);
        QCOMPARE(tok.encode("<extra_id_0>", 4), (Ids{499, 1, 0, 0}));
        QCOMPARE(tok.encode("<extra_id_99></s>", 4), (Ids{400, 1, 1, 0}));
        const Ids pieces = tok.tokenize("A lighthouse stands on a rocky cape");
        QVERIFY(pieces.size() > 4);
        const Ids cut = tok.encode("A lighthouse stands on a rocky cape", 4);
        QCOMPARE(cut, (Ids{pieces[0], pieces[1], pieces[2], 1}));
        QCOMPARE(tok.encode("x", 1), (Ids{1}));
        // After a special token only a stretch that starts with a space is a word start (the fast
        // tokenizer's Metaspace prepend_scheme "first"); the text's first stretch always is.
        const T5WordStart first = T5WordStart::First;
        const Ids glued = tok.tokenize("<extra_id_0>y", first), spaced = tok.tokenize("<extra_id_0> y", first);
        QCOMPARE(glued.front(), 499);
        QVERIFY(glued != spaced);
        QCOMPARE(Ids(spaced.begin() + 1, spaced.end()), tok.tokenize("y", first));
        QCOMPARE(tok.tokenize("<extra_id_0>\ty", first), spaced);
        // "always" (transformers' default) marks every stretch as a word start.
        QCOMPARE(tok.tokenize("<extra_id_0>y"), spaced);
        QCOMPARE(tok.tokenize("y", first), tok.tokenize("y"));
        EXPECT_MESSAGE(errorOf([&] { (void)tok.encode("x", 0); }), "1 to 512");
        EXPECT_MESSAGE(errorOf([&] { (void)tok.encode("x", 513); }), "1 to 512");
        EXPECT_MESSAGE(errorOf([&] { (void)tok.encode(std::string((1 << 20) + 1, 'a'), 8); }), "bytes of text");
        // Bytes that are not UTF-8 are tokenized (as unknown pieces), not refused.
        const Ids broken = tok.encode("caf\xe9 \xff\xfe", 16);
        QCOMPARE(broken.size(), std::size_t(16));
        QVERIFY(std::count(broken.begin(), broken.end(), T5Tokenizer::kEosId) == 1);
    }

    void tokenizerRefusesBadFiles() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const std::string d = dir.path().toStdString();
        const std::string missing = errorOf([&] { T5Tokenizer t(d + "/spiece.model"); });
        EXPECT_MESSAGE(missing, "[model]");
        EXPECT_MESSAGE(missing, "spiece.model");
        writeText(d + "/garbage.model", "this is not a protobuf \x01\x02\x03");
        const std::string garbage = errorOf([&] { T5Tokenizer t(d + "/garbage.model"); });
        EXPECT_MESSAGE(garbage, "garbage.model");
        EXPECT_MESSAGE(garbage, "not a SentencePiece model");
        EXPECT_MESSAGE(errorOf([&] { T5Tokenizer t(d); }), "[model]");
        {  // larger than any SentencePiece model read (sparse: no bytes written)
            std::ofstream(d + "/huge.model", std::ios::binary) << "x";
            std::filesystem::resize_file(d + "/huge.model", t5_tokenizer_limits::kMaxModelBytes + 1);
        }
        EXPECT_MESSAGE(errorOf([&] { T5Tokenizer t(d + "/huge.model"); }), "huge.model");
        // A model whose special ids are not T5's: a CLIP-like vocabulary would shift every id.
        EXPECT_MESSAGE(errorOf([&] { (void)T5Tokenizer::fromSerializedModel("", "empty bytes"); }), "empty bytes");
    }

    // Every held-out prompt as the fast T5 tokenizer frames it, with Metaspace's prepend_scheme
    // "always" (transformers' default: BFL's and diffusers' FLUX) and "first" (ComfyUI's tokenizer.json).
    void tokenizerMatchesTransformers() {
        if (!haveFixtures()) QSKIP("tests/data/t5/t5_cases.json is not there: run tools/reference/make_t5_fixtures.py");
        const nlohmann::json doc = readBoundedJson(kData + "/t5_cases.json", "fixture");
        const auto& cases = doc.at("tokenizer");
        qInfo("transformers %s: %s", doc.at("transformers").get<std::string>().c_str(),
              cases.at("classes").dump().c_str());
        const T5Tokenizer tok(kData + "/spiece.model");
        QStringList problems;
        int compared = 0;
        for (const auto& c : cases.at("cases")) {
            const std::string prompt = c.at("prompt").get<std::string>();
            for (const auto& [length, variants] : c.at("ids").items())
                for (const auto& [key, wordStart] :
                     {std::pair{"fast_always", T5WordStart::Always}, std::pair{"fast_first", T5WordStart::First}}) {
                    const Ids want = variants.at(key).get<Ids>();
                    const Ids got = tok.encode(prompt, std::stoi(length), wordStart);
                    ++compared;
                    if (got != want)
                        problems << QString::fromStdString(excerpt(prompt, 40) + " at " + length + " (" + key +
                                                           "): got " + idsText(got) + ", transformers " +
                                                           idsText(want));
                }
            // transformers' own classes, where the installed version read spiece.model, frame as one
            // of the two (5.x: "always").
            for (const auto& [name, ids] : c.at("ids").at("64").items())
                if (ids.is_array() && name.rfind("transformers_", 0) == 0 &&
                    ids != c.at("ids").at("64").at("fast_always") && ids != c.at("ids").at("64").at("fast_first"))
                    problems << QString::fromStdString(excerpt(prompt, 40) + ": " + name + " frames otherwise");
        }
        qInfo("%d framings compared", compared);
        QVERIFY2(problems.isEmpty(), qPrintable(problems.join('\n')));
    }
};

QTEST_GUILESS_MAIN(TestT5)
#include "tst_t5.moc"
