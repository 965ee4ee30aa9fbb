// core/models/clip: ClipTextConfig, ClipTextGraph, ClipTextModel (transformers
// models/clip/configuration_clip.py and modeling_clip.py; A1111 modules/sd_hijack_clip.py and
// modules/sd_emphasis.py): config ranges, the graph's parameter list, the forward pass against
// a plain double-precision implementation written here from modeling_clip.py (every hidden
// state, both activations, both pooling rules, clip skip), loading (file + tensor named for
// every defect), A1111's emphasis on the encoder output, the row memo, and — when tests/data/clip
// exists — transformers' own outputs (tools/reference/make_clip_fixtures.py) within 1e-4 relative.
#include <QtTest/QtTest>

#include <QFile>
#include <QTemporaryDir>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/base/BoundedInput.h"
#include "core/cpu/CpuBackend.h"
#include "core/formats/Safetensors.h"
#include "core/models/clip/ClipTextConfig.h"
#include "core/models/clip/ClipTextGraph.h"
#include "core/models/clip/ClipTextModel.h"
#include "core/text/ClipTokenizer.h"
#include "tests/core/ErrorText.h"
#include "tests/core/NumericCompare.h"

using namespace tessera;
using tessera::testing::errorOf;
using Tensors = std::map<std::string, HostTensor>;
using Ids = std::vector<std::int32_t>;

namespace {

const std::string kGz = TESSERA_SOURCE_DIR "/resources/clip/bpe_simple_vocab_16e6.txt.gz";
const std::string kFixtures = TESSERA_TEST_DATA "/clip";
constexpr int kT = kClipTextTokens;

ClipTextConfig tinyConfig(ClipActivation act, int vocab = 64, int layers = 2) {
    ClipTextConfig c;
    c.vocabSize = vocab;
    c.hiddenSize = 16;
    c.intermediateSize = 32;
    c.numAttentionHeads = 2;
    c.numHiddenLayers = layers;
    c.maxPositionEmbeddings = kT;
    c.hiddenAct = act;
    c.bosTokenId = vocab - 2;
    c.eosTokenId = vocab - 1;
    return c;
}

// Every parameter drawn at random (biases and norms non-trivial), seeded.
Tensors randomTensors(const ClipTextConfig& c, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    Tensors t;
    for (const auto& [name, shape] : buildClipTextGraph(c, c.numHiddenLayers).parameterList()) {
        HostTensor h{shape, {}};
        h.data.resize(static_cast<std::size_t>(h.numel()));
        const bool norm = name.find("norm") != std::string::npos;
        const float scale = shape.size() == 2 && name.find("embedding") == std::string::npos
                                ? 1.0f / std::sqrt(static_cast<float>(shape[1]))
                                : (norm ? 0.2f : 0.5f);
        for (float& v : h.data) v = (norm && name.ends_with(".weight") ? 1.0f : 0.0f) + scale * normal(rng);
        t.emplace(name, std::move(h));
    }
    return t;
}

// ---- The forward pass written plainly, in double, from modeling_clip.py (CLIPTextTransformer) ----

struct Reference {
    std::vector<std::vector<double>> hidden;  // hidden_states.0 .. .N, each [B, 77, D]
    std::vector<double> last, pooled;
};

std::vector<double> layerNormRows(const std::vector<double>& x, int d, const HostTensor& w, const HostTensor& b,
                                  double eps) {
    std::vector<double> y(x.size());
    for (std::size_t r = 0; r < x.size() / d; ++r) {
        double mean = 0, var = 0;
        for (int c = 0; c < d; ++c) mean += x[r * d + c] / d;
        for (int c = 0; c < d; ++c) var += (x[r * d + c] - mean) * (x[r * d + c] - mean) / d;
        for (int c = 0; c < d; ++c) y[r * d + c] = (x[r * d + c] - mean) / std::sqrt(var + eps) * w.data[c] + b.data[c];
    }
    return y;
}

// rows x [in] -> rows x [out]: x W^T + b.
std::vector<double> linearRows(const std::vector<double>& x, int in, const HostTensor& w, const HostTensor& b) {
    const int out = static_cast<int>(w.shape[0]);
    std::vector<double> y(x.size() / in * out);
    for (std::size_t r = 0; r < x.size() / in; ++r)
        for (int o = 0; o < out; ++o) {
            double s = b.data[o];
            for (int i = 0; i < in; ++i) s += x[r * in + i] * w.data[static_cast<std::size_t>(o) * in + i];
            y[r * out + o] = s;
        }
    return y;
}

Reference reference(const ClipTextConfig& c, const Tensors& t, const Ids& ids, int batch, int layers) {
    const int d = c.hiddenSize, heads = c.numAttentionHeads, dh = d / heads;
    auto T = [&](const std::string& n) -> const HostTensor& { return t.at("text_model." + n); };
    std::vector<double> h(static_cast<std::size_t>(batch) * kT * d);
    for (int r = 0; r < batch * kT; ++r)
        for (int k = 0; k < d; ++k)
            h[r * d + k] = double(T("embeddings.token_embedding.weight").data[ids[r] * d + k]) +
                           T("embeddings.position_embedding.weight").data[(r % kT) * d + k];
    Reference ref;
    ref.hidden.push_back(h);
    for (int l = 0; l < layers; ++l) {
        const std::string p = "encoder.layers." + std::to_string(l) + ".";
        const auto x = layerNormRows(h, d, T(p + "layer_norm1.weight"), T(p + "layer_norm1.bias"), c.layerNormEps);
        const auto q = linearRows(x, d, T(p + "self_attn.q_proj.weight"), T(p + "self_attn.q_proj.bias"));
        const auto k = linearRows(x, d, T(p + "self_attn.k_proj.weight"), T(p + "self_attn.k_proj.bias"));
        const auto v = linearRows(x, d, T(p + "self_attn.v_proj.weight"), T(p + "self_attn.v_proj.bias"));
        std::vector<double> o(h.size(), 0.0);
        for (int b = 0; b < batch; ++b)
            for (int hd = 0; hd < heads; ++hd)
                for (int i = 0; i < kT; ++i) {
                    std::vector<double> s(i + 1);  // causal: keys 0..i
                    double top = -1e300, sum = 0;
                    for (int j = 0; j <= i; ++j) {
                        for (int e = 0; e < dh; ++e)
                            s[j] += q[(b * kT + i) * d + hd * dh + e] * k[(b * kT + j) * d + hd * dh + e];
                        s[j] /= std::sqrt(double(dh));
                        top = std::max(top, s[j]);
                    }
                    for (double& e : s) sum += (e = std::exp(e - top));
                    for (int j = 0; j <= i; ++j)
                        for (int e = 0; e < dh; ++e)
                            o[(b * kT + i) * d + hd * dh + e] += s[j] / sum * v[(b * kT + j) * d + hd * dh + e];
                }
        const auto a = linearRows(o, d, T(p + "self_attn.out_proj.weight"), T(p + "self_attn.out_proj.bias"));
        for (std::size_t i = 0; i < h.size(); ++i) h[i] += a[i];
        const auto y = layerNormRows(h, d, T(p + "layer_norm2.weight"), T(p + "layer_norm2.bias"), c.layerNormEps);
        auto f = linearRows(y, d, T(p + "mlp.fc1.weight"), T(p + "mlp.fc1.bias"));
        for (double& e : f)
            e = c.hiddenAct == ClipActivation::QuickGelu ? e / (1 + std::exp(-1.702 * e))
                                                         : 0.5 * e * (1 + std::erf(e / std::sqrt(2.0)));
        const auto m = linearRows(f, c.intermediateSize, T(p + "mlp.fc2.weight"), T(p + "mlp.fc2.bias"));
        for (std::size_t i = 0; i < h.size(); ++i) h[i] += m[i];
        ref.hidden.push_back(h);
    }
    ref.last = layerNormRows(h, d, T("final_layer_norm.weight"), T("final_layer_norm.bias"), c.layerNormEps);
    for (int b = 0; b < batch; ++b) {
        const auto row = ids.begin() + b * kT;
        int at = 0;
        if (c.eosTokenId == 2)
            at = static_cast<int>(std::max_element(row, row + kT) - row);
        else if (const auto e = std::find(row, row + kT, c.eosTokenId); e != row + kT)
            at = static_cast<int>(e - row);
        ref.pooled.insert(ref.pooled.end(), ref.last.begin() + (b * kT + at) * d,
                          ref.last.begin() + (b * kT + at + 1) * d);
    }
    return ref;
}

// Rows framed as SD 1.x frames them (BOS, content, EOS, EOS padding) for a tiny vocabulary.
Ids framedRows(const ClipTextConfig& c, const std::vector<Ids>& contents, int pad) {
    Ids ids;
    for (const Ids& content : contents) {
        Ids row{c.bosTokenId};
        row.insert(row.end(), content.begin(), content.end());
        row.push_back(c.eosTokenId);
        row.resize(kT, pad);
        ids.insert(ids.end(), row.begin(), row.end());
    }
    return ids;
}

void writeText(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// A text_encoder/ folder holding `tensors` (renamed by `rename`), F32 unless dtype says otherwise.
void writeFolder(const std::string& dir, const ClipTextConfig& c, const Tensors& tensors,
                 const std::function<std::string(const std::string&)>& rename = {},
                 SafetensorsDtype dtype = SafetensorsDtype::F32) {
    std::map<std::string, SafetensorsTensorData> out;
    for (const auto& [name, t] : tensors)
        out.emplace(rename ? rename(name) : name, SafetensorsTensorData{dtype, t.shape, encodeFloats(dtype, t.data)});
    writeSafetensors(dir + "/model.safetensors", out, {{"format", "pt"}});
    writeText(dir + "/config.json", toJson(c).dump());
}

// The fixtures under `root` as tools/reference/make_clip_fixtures.py lays them out: every case's
// weights load, the graph's parameters are the file's tensors, and the outputs match. Returns
// the problems found (empty: none); errors while loading propagate.
QStringList checkFixtures(const std::string& root) {
    const nlohmann::json doc = readBoundedJson(root + "/clip_cases.json", "fixture", input_limits::kJsonBytes);
    qInfo("transformers %s, torch %s, %zu cases", doc.at("transformers").get<std::string>().c_str(),
          doc.at("torch").get<std::string>().c_str(), doc.at("cases").size());
    QStringList problems;
    auto check = [&problems](const QString& problem) {
        if (!problem.isEmpty()) problems << problem;
    };
    for (const auto& [name, c] : doc.at("cases").items()) {
        const std::string dir = root + "/" + name;
        const ClipTextModel model = ClipTextModel::load(dir + "/text_encoder");
        CpuBackend backend;
        const ClipTextConfig& config = model.config();
        if (config.numHiddenLayers != c.at("layers").get<int>())
            check(QString::fromStdString(name) + ": layers differ");
        // The graph's parameters are exactly the file's tensors (names and shapes).
        std::map<std::string, std::vector<std::int64_t>> graphParams, fileParams;
        for (const auto& [p, shape] : buildClipTextGraph(config, config.numHiddenLayers).parameterList())
            graphParams[p] = shape;
        for (const auto& [p, shape] : c.at("weights").items())
            if (!p.ends_with("embeddings.position_ids"))
                fileParams[p.rfind(kClipTextPrefix, 0) == 0 ? p : kClipTextPrefix + p] =
                    shape.get<std::vector<std::int64_t>>();
        if (graphParams != fileParams || !model.extraTensors().empty())
            check(QString::fromStdString(name) + ": the graph's parameters are not the file's tensors");

        Ids ids;
        for (const auto& row : c.at("input_ids")) {
            const Ids r = row.get<Ids>();
            ids.insert(ids.end(), r.begin(), r.end());
        }
        const int batch = static_cast<int>(ids.size() / kT);
        const ClipTextOutputs out = model.encode(backend, ids, batch, 0, ClipHiddenStates::All);
        const SafetensorsFile want(dir + "/outputs.safetensors");
        check(mismatch(name + " last_hidden_state", out.lastHiddenState, want.readFloat32("last_hidden_state")));
        check(mismatch(name + " pooler_output", out.pooled, want.readFloat32("pooler_output")));
        // modeling_clip.py: CLIP's last hidden_states entry is the last layer's output before the
        // final norm; a transformers that ties it to last_hidden_state is said so and compared as such.
        const bool untied = c.at("last_hidden_state_is_final_ln_of_last_hidden_states_entry").get<bool>();
        if (!untied) qWarning("%s: this transformers returns hidden_states[-1] after the final norm", name.c_str());
        for (std::size_t k = 0; k < out.hiddenStates.size(); ++k) {
            const std::string key = "hidden_states." + std::to_string(k);
            const bool tied = !untied && k + 1 == out.hiddenStates.size();
            check(mismatch(name + " " + key, tied ? out.lastHiddenState : out.hiddenStates[k], want.readFloat32(key)));
        }
        if (want.has("hidden_states." + std::to_string(out.hiddenStates.size())))
            check(QString::fromStdString(name) + ": more hidden states than layers + 1");
        // Clip skip 1 (diffusers) / 2 (A1111): final_layer_norm(hidden_states[-2]).
        check(mismatch(name + " skip1_normed",
                       model.encode(backend, ids, batch, config.numHiddenLayers - 1).lastHiddenState,
                       want.readFloat32("skip1_normed")));
        // transformers pooled where Tessera's rule says (recorded by the script).
        if (c.at("pool_index") != c.at("first_eos_index"))
            check(QString::fromStdString(name + ": transformers pooled at " + c.at("pool_index").dump() +
                                         ", the first EOS is at " + c.at("first_eos_index").dump()));
    }
    return problems;
}

}  // namespace

class TestClipText : public QObject {
    Q_OBJECT

    CpuBackend cpu_;  // what the tests encode on, as an engine's TileDevice::textBackend

private slots:
    void configDefaultsAndRanges() {
        const ClipTextConfig d = clipTextConfigFromJson(nlohmann::json::object());
        QCOMPARE(d.vocabSize, 49408);
        QCOMPARE(d.hiddenSize, 512);
        QCOMPARE(d.numHiddenLayers, 12);
        QVERIFY(d.hiddenAct == ClipActivation::QuickGelu);
        QCOMPARE(d.eosTokenId, 49407);
        // SD 2.x's text encoder, as its config.json says it.
        const ClipTextConfig sd2 = clipTextConfigFromJson(nlohmann::json{{"architectures", {"CLIPTextModel"}},
                                                                         {"model_type", "clip_text_model"},
                                                                         {"hidden_size", 1024},
                                                                         {"intermediate_size", 4096},
                                                                         {"num_hidden_layers", 23},
                                                                         {"num_attention_heads", 16},
                                                                         {"hidden_act", "gelu"},
                                                                         {"eos_token_id", 2},
                                                                         {"projection_dim", 512},
                                                                         {"torch_dtype", "float32"}});
        QCOMPARE(sd2.numHiddenLayers, 23);
        QCOMPARE(sd2.headDim(), 64);
        QVERIFY(sd2.hiddenAct == ClipActivation::Gelu);
        QVERIFY(sd2.poolsAtArgmax());
        QVERIFY(!sd2.withProjection);
        QVERIFY(clipTextConfigFromJson({{"architectures", {"CLIPTextModelWithProjection"}}}).withProjection);
        // toJson reads back to the same values.
        const ClipTextConfig back = clipTextConfigFromJson(toJson(sd2));
        QCOMPARE(toJson(back), toJson(sd2));

        auto bad = [](const nlohmann::json& j) { return errorOf([&] { clipTextConfigFromJson(j); }); };
        EXPECT_MESSAGE(bad({{"vocab_size", 0}}), "vocab_size = 0: expected an integer from 1 to 262144");
        EXPECT_MESSAGE(bad({{"vocab_size", 1e30}}), "vocab_size");
        EXPECT_MESSAGE(bad({{"hidden_size", 100000}}), "hidden_size = 100000");
        EXPECT_MESSAGE(bad({{"hidden_size", "768"}}), "hidden_size = \"768\": expected an integer");
        EXPECT_MESSAGE(bad({{"num_hidden_layers", -1}}), "num_hidden_layers");
        EXPECT_MESSAGE(bad({{"num_hidden_layers", 1000}}), "num_hidden_layers = 1000");
        EXPECT_MESSAGE(bad({{"intermediate_size", 0}}), "intermediate_size");
        EXPECT_MESSAGE(bad({{"max_position_embeddings", 1u << 31}}), "max_position_embeddings");
        EXPECT_MESSAGE(bad({{"hidden_size", 30}, {"num_attention_heads", 4}}),
                       "num_attention_heads = 4: must divide hidden_size 30");
        EXPECT_MESSAGE(bad({{"hidden_act", "relu"}}), "hidden_act = \"relu\": not supported (quick_gelu");
        EXPECT_MESSAGE(bad({{"layer_norm_eps", 0}}), "layer_norm_eps");
        EXPECT_MESSAGE(bad({{"layer_norm_eps", "tiny"}}), "layer_norm_eps");
        EXPECT_MESSAGE(bad({{"vocab_size", 1000}, {"eos_token_id", 49407}}),
                       "eos_token_id = 49407: must be an id of the vocabulary (below vocab_size 1000)");
        EXPECT_MESSAGE(bad({{"bos_token_id", -5}}), "bos_token_id");
        EXPECT_MESSAGE(bad({{"model_type", "clip_vision_model"}}), "model_type = \"clip_vision_model\"");
        EXPECT_MESSAGE(bad({{"architectures", {"BertModel"}}}), "architectures");
        EXPECT_MESSAGE(bad({{"text_config", nlohmann::json::object()}}), "whole CLIPConfig");
        EXPECT_MESSAGE(bad(nlohmann::json::array()), "expected a JSON object");
    }

    void configFile() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const std::string d = dir.path().toStdString();
        EXPECT_MESSAGE(errorOf([&] { readClipTextConfig(d); }), "[model]");
        EXPECT_MESSAGE(errorOf([&] { readClipTextConfig(d); }), "config.json");
        writeText(d + "/config.json", "{\"hidden_act\": \"swish\"}");
        const std::string m = errorOf([&] { readClipTextConfig(d); });
        EXPECT_MESSAGE(m, "[model]");
        EXPECT_MESSAGE(m, d + "/config.json': hidden_act = \"swish\"");
        writeText(d + "/config.json", std::string(100, '[') + std::string(100, ']'));
        EXPECT_MESSAGE(errorOf([&] { readClipTextConfig(d); }), "[model]");
    }

    // Names, shapes and order of transformers' state dict; the count; clip skip's bounds.
    void graphParameters() {
        const ClipTextConfig c = tinyConfig(ClipActivation::QuickGelu, 64, 3);
        const ModelGraph g = buildClipTextGraph(c, 3);
        const auto params = g.parameterList();
        QCOMPARE(params.size(), std::size_t{2 + 16 * 3 + 2});
        QCOMPARE(params[0].first, std::string("text_model.embeddings.token_embedding.weight"));
        QCOMPARE(params[1].first, std::string("text_model.embeddings.position_embedding.weight"));
        QCOMPARE(params[2].first, std::string("text_model.encoder.layers.0.self_attn.k_proj.weight"));
        QCOMPARE(params[10].first, std::string("text_model.encoder.layers.0.layer_norm1.weight"));
        QCOMPARE(params[12].first, std::string("text_model.encoder.layers.0.mlp.fc1.weight"));
        QCOMPARE(params[12].second, (std::vector<std::int64_t>{32, 16}));
        QCOMPARE(params.back().first, std::string("text_model.final_layer_norm.bias"));
        const std::int64_t d = 16, i = 32, v = 64, p = 77;
        const std::int64_t perLayer = 4 * (d * d + d) + 4 * d + (d * i + i) + (i * d + d);
        QCOMPARE(g.parameterCount(), v * d + p * d + 3 * perLayer + 2 * d);
        // SD 1.x's real size (openai/clip-vit-large-patch14's text model): 123,060,480 parameters
        // in 196 tensors.
        ClipTextConfig sd1 = clipTextConfigFromJson(
            {{"hidden_size", 768}, {"intermediate_size", 3072}, {"num_attention_heads", 12}, {"eos_token_id", 2}});
        const ModelGraph real = buildClipTextGraph(sd1, 12);
        QCOMPARE(real.parameterCount(), std::int64_t{123060480});
        QCOMPARE(real.parameterList().size(), std::size_t{196});
        // Clip skip keeps a prefix of the layers; outputs: last, pooled (+ taps).
        QCOMPARE(buildClipTextGraph(c, 1).parameterList().size(), std::size_t{2 + 16 + 2});
        QCOMPARE(buildClipTextGraph(c, 2, ClipHiddenStates::All).outputs().size(), std::size_t{2 + 3});
        EXPECT_MESSAGE(errorOf([&] { buildClipTextGraph(c, 0); }), "clip skip: the text encoder has 3 layers");
        EXPECT_MESSAGE(errorOf([&] { buildClipTextGraph(c, 4); }), "1 to 3");
        ClipTextConfig shortContext = c;
        shortContext.maxPositionEmbeddings = 16;
        EXPECT_MESSAGE(errorOf([&] { buildClipTextGraph(shortContext, 1); }), "max_position_embeddings: 16");
    }

    // The graph on the CPU backend against the plain implementation above: every hidden state,
    // quick_gelu and gelu, both pooling rules, clip skip.
    void forwardMatchesPlainImplementation() {
        for (const ClipActivation act : {ClipActivation::QuickGelu, ClipActivation::Gelu}) {
            const ClipTextConfig c = tinyConfig(act, 64, 3);
            const Tensors t = randomTensors(c, 7);
            const ClipTextModel model = ClipTextModel::fromTensors(c, t);
            const Ids ids =
                framedRows(c, {{5, 9, 17}, {}, Ids(75, 33)}, act == ClipActivation::Gelu ? 0 : c.eosTokenId);
            const ClipTextOutputs out = model.encode(cpu_, ids, 3, 0, ClipHiddenStates::All);
            const Reference ref = reference(c, t, ids, 3, 3);
            QCOMPARE(out.hiddenStates.size(), std::size_t{4});
            for (std::size_t k = 0; k < 4; ++k)
                EXPECT_CLOSE("hidden_states." + std::to_string(k), out.hiddenStates[k], ref.hidden[k]);
            EXPECT_CLOSE("last_hidden_state", out.lastHiddenState, ref.last);
            EXPECT_CLOSE("pooler_output", out.pooled, ref.pooled);
            // Clip skip: 2 of 3 layers, then the final norm, = the norm of hidden_states[-2].
            const ClipTextOutputs skip = model.encode(cpu_, ids, 3, 2);
            EXPECT_CLOSE("clip skip", skip.lastHiddenState, reference(c, t, ids, 3, 2).last);
        }
    }

    // CLIPTextTransformer.forward: eos_token_id 2 (legacy configs) pools at the first largest id;
    // otherwise at the first eos_token_id, position 0 when there is none.
    void poolingRules() {
        ClipTextConfig c = tinyConfig(ClipActivation::QuickGelu, 64, 1);
        const Tensors t = randomTensors(c, 11);
        c.eosTokenId = 40;  // not the largest id
        Ids ids = framedRows(c, {{50, 61, 7}, {3, 4}}, 0);
        ids[kT + 10] = 63;  // row 1: the largest id after its EOS
        Ids noEos(kT, 5);
        noEos[0] = c.bosTokenId;
        ids.insert(ids.end(), noEos.begin(), noEos.end());
        auto pooledRows = [&](const ClipTextConfig& config) {
            const ClipTextOutputs out = ClipTextModel::fromTensors(config, t).encode(cpu_, ids, 3);
            std::vector<int> at;
            for (int b = 0; b < 3; ++b)
                for (int j = 0; j < kT; ++j)
                    if (std::equal(out.pooled.begin() + b * 16, out.pooled.begin() + (b + 1) * 16,
                                   out.lastHiddenState.begin() + (b * kT + j) * 16)) {
                        at.push_back(j);
                        break;
                    }
            return at;
        };
        QCOMPARE(pooledRows(c), (std::vector<int>{4, 3, 0}));
        ClipTextConfig legacy = c;
        legacy.eosTokenId = 2;
        // Argmax: row 0's 62 (BOS) at 0, row 1's 63 at 10, row 2's BOS at 0.
        QCOMPARE(pooledRows(legacy), (std::vector<int>{0, 10, 0}));
        QVERIFY(legacy.poolsAtArgmax());
        EXPECT_CLOSE("legacy pooled", ClipTextModel::fromTensors(legacy, t).encode(cpu_, ids, 3).pooled,
                     reference(legacy, t, ids, 3, 1).pooled);
    }

    // The two CLIP ops refuse shapes they cannot run, and ids that are no vocabulary entry.
    void embeddingAndPoolingOps() {
        ModelGraph g;
        const int ids = g.addTokenInput("ids", 4, 1);
        GraphOp e;
        e.kind = OpKind::TokenEmbedding;
        e.name = "emb";
        e.input = ids;
        e.channels = 3;
        e.params = {g.addParam("tok", {10, 3}), g.addParam("pos", {3, 3})};
        EXPECT_MESSAGE(errorOf([&] { g.addOp(e); }), "position table of at least 4 rows");
        e.params[1] = g.addParam("pos4", {4, 3});
        const int h = g.addOp(e);
        QCOMPARE(g.value(h).tokens, 4);
        QCOMPARE(g.value(h).channels, 3);
        GraphOp pool;
        pool.kind = OpKind::EosPool;
        pool.name = "pool";
        pool.input = h;
        pool.input2 = h;  // not ids
        EXPECT_MESSAGE(errorOf([&] { g.addOp(pool); }), "their ids [B, N, 1]");
        pool.input2 = ids;
        pool.token = 7;
        QVERIFY(g.value(g.addOp(pool)).kind == ValueKind::Vector);
        QCOMPARE(g.describe(g.ops().back()), std::string("eos_pool 3ch at id 7"));
        // The CPU functions: embedding rows, pooling rules, bad ids refused before anything is written.
        cpu::WorkerPool workers(1);
        const std::vector<float> table{0, 1, 2, 10, 11, 12}, positions{100, 200, 300, 400, 500, 600};
        std::vector<float> y(6, -1.0f);
        cpu::tokenEmbedding(workers, 1, 2, 3, 2, std::vector<float>{1, 0}.data(), table.data(), positions.data(),
                            y.data());
        QCOMPARE(y, (std::vector<float>{110, 211, 312, 400, 501, 602}));
        for (const float bad : {2.0f, -1.0f, 0.5f, std::nanf("")}) {
            std::vector<float> z(6, -1.0f);
            EXPECT_MESSAGE(errorOf([&] {
                               cpu::tokenEmbedding(workers, 1, 2, 3, 2, std::vector<float>{0, bad}.data(), table.data(),
                                                   positions.data(), z.data());
                           }),
                           "row 0 position 1 holds id");
            QCOMPARE(z, std::vector<float>(6, -1.0f));
        }
        const std::vector<float> x{1, 2, 3, 4, 5, 6, 7, 8};  // 4 tokens of 2 channels
        const std::vector<float> rowIds{5, 9, 3, 9};
        std::vector<float> pooled(2);
        cpu::eosPool(1, 4, 2, x.data(), rowIds.data(), -1, pooled.data());  // first largest id: position 1
        QCOMPARE(pooled, (std::vector<float>{3, 4}));
        cpu::eosPool(1, 4, 2, x.data(), rowIds.data(), 3, pooled.data());
        QCOMPARE(pooled, (std::vector<float>{5, 6}));
        cpu::eosPool(1, 4, 2, x.data(), rowIds.data(), 42, pooled.data());  // absent: position 0
        QCOMPARE(pooled, (std::vector<float>{1, 2}));
    }

    void encodeRefusesBadIds() {
        const ClipTextConfig c = tinyConfig(ClipActivation::QuickGelu);
        const ClipTextModel model = ClipTextModel::fromTensors(c, randomTensors(c, 3));
        Ids ids = framedRows(c, {{1, 2}}, c.eosTokenId);
        ids[5] = 64;
        EXPECT_MESSAGE(errorOf([&] { model.encode(cpu_, ids, 1); }),
                       "row 0 position 5 holds id 64; this text encoder's vocabulary has ids 0 to 63");
        ids[5] = -1;
        EXPECT_MESSAGE(errorOf([&] { model.encode(cpu_, ids, 1); }), "holds id -1");
        EXPECT_MESSAGE(errorOf([&] { model.encode(cpu_, ids, 2); }), "77 ids for a batch of 2 rows of 77");
        EXPECT_MESSAGE(errorOf([&] { model.encode(cpu_, Ids(kT, 1), 1, 3); }), "clip skip");
    }

    // A text_encoder/ folder: loaded as written (F32 and F16, either name spelling), and every
    // defect refused naming the file and the tensor.
    void loadFolder() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const std::string d = dir.path().toStdString();
        const ClipTextConfig c = tinyConfig(ClipActivation::Gelu);
        Tensors t = randomTensors(c, 5);
        writeFolder(d, c, t);
        const ClipTextModel m = ClipTextModel::load(d);
        QCOMPARE(toJson(m.config()), toJson(c));
        for (const auto& [name, tensor] : t) QVERIFY2(m.tensors().at(name).data == tensor.data, name.c_str());
        QVERIFY(m.extraTensors().empty());
        QCOMPARE(m.parameterCount(), buildClipTextGraph(c, 2).parameterCount());

        // Without the text_model. prefix (transformers >= 5.6), with position_ids and an extra tensor.
        Tensors more = t;
        more.emplace("text_model.embeddings.position_ids", HostTensor{{1, 77}, std::vector<float>(77, 0.0f)});
        more.emplace("text_projection.weight", HostTensor{{16, 16}, std::vector<float>(256, 0.5f)});
        writeFolder(d, c, more,
                    [](const std::string& n) { return n.rfind("text_model.encoder", 0) == 0 ? n.substr(11) : n; });
        const ClipTextModel flat = ClipTextModel::load(d);
        QVERIFY(flat.tensors().at("text_model.encoder.layers.1.mlp.fc2.bias").data ==
                t.at("text_model.encoder.layers.1.mlp.fc2.bias").data);
        QCOMPARE(flat.extraTensors(), std::vector<std::string>{"text_projection.weight"});

        // Sharded as transformers shards (model.safetensors.index.json + its files).
        {
            std::map<std::string, SafetensorsTensorData> a, b;
            nlohmann::json weightMap = nlohmann::json::object();
            for (const auto& [name, tensor] : t) {
                const bool first = name.find("layers.1.") == std::string::npos;
                (first ? a : b)
                    .emplace(name, SafetensorsTensorData{SafetensorsDtype::F32, tensor.shape,
                                                         encodeFloats(SafetensorsDtype::F32, tensor.data)});
                weightMap[name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
            }
            QVERIFY(QFile::remove(QString::fromStdString(d + "/model.safetensors")));
            writeSafetensors(d + "/model-00001-of-00002.safetensors", a);
            writeSafetensors(d + "/model-00002-of-00002.safetensors", b);
            writeText(d + "/model.safetensors.index.json", nlohmann::json{{"weight_map", weightMap}}.dump());
            writeText(d + "/config.json", toJson(c).dump());
            const ClipTextModel sharded = ClipTextModel::load(d);
            QVERIFY(sharded.tensors().at("text_model.encoder.layers.1.mlp.fc1.weight").data ==
                    t.at("text_model.encoder.layers.1.mlp.fc1.weight").data);
            for (const char* f : {"/model-00001-of-00002.safetensors", "/model-00002-of-00002.safetensors",
                                  "/model.safetensors.index.json"})
                QVERIFY(QFile::remove(QString::fromStdString(d + f)));
        }

        // F16 weights are upcast.
        writeFolder(d, c, t, {}, SafetensorsDtype::F16);
        const ClipTextModel half = ClipTextModel::load(d);
        const auto& w = half.tensors().at("text_model.final_layer_norm.weight").data;
        QCOMPARE(w[3], halfToFloat(floatToHalf(t.at("text_model.final_layer_norm.weight").data[3])));

        const std::string file = d + "/model.safetensors";
        auto failure = [&](Tensors broken) {
            writeFolder(d, c, broken);
            return errorOf([&] { ClipTextModel::load(d); });
        };
        Tensors missing = t;
        missing.erase("text_model.encoder.layers.1.self_attn.v_proj.bias");
        std::string msg = failure(missing);
        EXPECT_MESSAGE(msg, "[model] " + file + ": missing tensor 'text_model.encoder.layers.1.self_attn.v_proj.bias'");
        EXPECT_MESSAGE(msg, "expected shape [16]");
        Tensors shaped = t;
        shaped["text_model.final_layer_norm.bias"] = HostTensor{{17}, std::vector<float>(17, 0.0f)};
        EXPECT_MESSAGE(failure(shaped),
                       file + ": tensor 'text_model.final_layer_norm.bias': expected [16], found [17]");
        Tensors nan = t;
        nan["text_model.encoder.layers.0.mlp.fc1.weight"].data[9] = std::nanf("");
        EXPECT_MESSAGE(
            failure(nan),
            file + ": tensor 'text_model.encoder.layers.0.mlp.fc1.weight' holds a non-finite value (NaN) at element 9");
        Tensors inf = t;
        inf["text_model.embeddings.token_embedding.weight"].data[0] = INFINITY;
        EXPECT_MESSAGE(failure(inf), "'text_model.embeddings.token_embedding.weight' holds a non-finite value (Inf)");
        // A truncated file, a pickle, no weights at all, a config of another model.
        writeFolder(d, c, t);
        {
            std::ifstream in(file, std::ios::binary);
            std::string bytes((std::istreambuf_iterator<char>(in)), {});
            writeText(file, bytes.substr(0, bytes.size() - 100));
        }
        EXPECT_MESSAGE(errorOf([&] { ClipTextModel::load(d); }), "[model] " + file);
        QVERIFY(QFile::remove(QString::fromStdString(file)));
        EXPECT_MESSAGE(errorOf([&] { ClipTextModel::load(d); }), file + ": not found");
        writeText(d + "/pytorch_model.bin", "PK");
        EXPECT_MESSAGE(errorOf([&] { ClipTextModel::load(d); }), "pickle weights are not read");
        writeText(d + "/config.json", R"({"model_type": "t5"})");
        EXPECT_MESSAGE(errorOf([&] { ClipTextModel::load(d); }), "model_type = \"t5\"");
        // In memory: the same checks.
        EXPECT_MESSAGE(errorOf([&] { ClipTextModel::fromTensors(c, missing); }),
                       "missing tensor 'text_model.encoder.layers.1.self_attn.v_proj.bias'");
        EXPECT_MESSAGE(errorOf([&] { ClipTextModel::fromTensors(c, nan); }), "non-finite");
    }

    // A1111's "Original" emphasis (modules/sd_emphasis.py, EmphasisOriginal) on explicit numbers:
    // z * w, then * mean(z) / mean(z * w) over the whole chunk batch.
    void emphasisRuleByHand() {
        // 2 tokens x 2 channels: z = [1 2; 3 4], weights [1, 2]: z*w = [1 2; 6 8], mean 2.5 -> 4.25.
        std::vector<float> z{1, 2, 3, 4};
        const std::vector<float> w{1, 2};
        applyEmphasis(z, w, 1, 2, 2, EmphasisMode::Original);
        const std::vector<double> want{2.5 / 4.25, 2 * 2.5 / 4.25, 6 * 2.5 / 4.25, 8 * 2.5 / 4.25};
        EXPECT_CLOSE("original", z, want);
    }

    // The conditioning of a prompt: chunks encoded, emphasis per chunk, concatenated; clip skip;
    // padding chunks; the limits.
    void promptConditioning() {
        ClipTextConfig c = tinyConfig(ClipActivation::QuickGelu, 49408, 3);
        c.bosTokenId = 49406;
        c.eosTokenId = 49407;
        const ClipTextModel model = ClipTextModel::fromTensors(c, randomTensors(c, 21));
        const ClipTokenizer tok = ClipTokenizer::fromMergesGz(kGz);
        const std::string prompt = "a (red:1.5) fox, [snow]";
        const PromptChunks chunks = chunkPrompt(tok, prompt);
        QCOMPARE(chunks.chunks.size(), std::size_t{1});
        const PromptChunk& chunk = chunks.chunks[0];
        const std::vector<float> z = model.encode(cpu_, chunk.ids, 1).lastHiddenState;
        // The rule computed here in double: scale by the weights, restore the chunk's mean.
        double before = 0, after = 0;
        std::vector<double> want(z.size());
        for (std::size_t i = 0; i < z.size(); ++i) {
            want[i] = double(z[i]) * chunk.weights[i / 16];
            before += z[i];
            after += want[i];
        }
        for (double& v : want) v *= before / after;
        const PromptConditioning cond = encodePrompt(model, cpu_, tok, prompt);
        QCOMPARE(cond.chunks, 1);
        QCOMPARE(cond.channels, 16);
        EXPECT_CLOSE("emphasis", cond.values, want);
        QVERIFY(std::abs(before / after - 1.0) > 1e-3);  // the case exercises the mean restoration
        // NoNorm: the weights only; Ignore: the encoder output as it is.
        PromptConditioningOptions o;
        o.emphasis = EmphasisMode::NoNorm;
        std::vector<double> scaled(z.size());
        for (std::size_t i = 0; i < z.size(); ++i) scaled[i] = double(z[i]) * chunk.weights[i / 16];
        EXPECT_CLOSE("no norm", encodePrompt(model, cpu_, tok, prompt, o).values, scaled);
        o.emphasis = EmphasisMode::Ignore;
        EXPECT_CLOSE("ignore", encodePrompt(model, cpu_, tok, prompt, o).values, z);

        // Two chunks (BREAK), a third empty one asked for: each chunk as encoded alone.
        o = {};
        o.minChunks = 3;
        const PromptConditioning three = encodePrompt(model, cpu_, tok, "red fox BREAK snow", o);
        QCOMPARE(three.chunks, 3);
        QCOMPARE(three.values.size(), std::size_t{3 * 77 * 16});
        const std::vector<float> empty = encodePrompt(model, cpu_, tok, "").values;
        const std::vector<float> snow = encodePrompt(model, cpu_, tok, "snow").values;
        EXPECT_CLOSE("chunk 2", std::vector<float>(three.values.begin() + 77 * 16, three.values.begin() + 2 * 77 * 16),
                     snow);
        EXPECT_CLOSE("padding chunk", std::vector<float>(three.values.begin() + 2 * 77 * 16, three.values.end()),
                     empty);

        // Clip skip 2 (A1111): layer 2 of 3, then the final norm.
        o = {};
        o.clipSkip = 2;
        o.emphasis = EmphasisMode::Ignore;
        EXPECT_CLOSE("clip skip 2", encodePrompt(model, cpu_, tok, "red fox", o).values,
                     model.encode(cpu_, chunkPrompt(tok, "red fox").chunks[0].ids, 1, 2).lastHiddenState);
        o.clipSkip = 4;
        EXPECT_MESSAGE(
            errorOf([&] { encodePrompt(model, cpu_, tok, "x", o); }),
            "[clip skip] clip skip: 4 is not allowed; this text encoder has 3 layers, so 1 (the last layer) to 3");
        o.clipSkip = 0;
        EXPECT_MESSAGE(errorOf([&] { encodePrompt(model, cpu_, tok, "x", o); }), "[clip skip]");
        // Texts in one call: the shorter padded with empty chunks; chunk i of both is one batch
        // with one emphasis mean (computed here in double).
        const PromptConditioning pair = encodePrompts(model, cpu_, tok, {"a (red:1.5) fox BREAK snow", "[blurry]"});
        QCOMPARE(pair.chunks, 2);
        QCOMPARE(pair.values.size(), std::size_t{2 * 2 * 77 * 16});
        const PromptChunks first = chunkPrompt(tok, "a (red:1.5) fox BREAK snow"),
                           second = chunkPrompt(tok, "[blurry]");
        const PromptChunk blank = chunkPrompt(tok, "").chunks[0];
        for (std::size_t i = 0; i < 2; ++i) {
            const PromptChunk& b = i == 0 ? second.chunks[0] : blank;
            Ids ids(first.chunks[i].ids.begin(), first.chunks[i].ids.end());
            ids.insert(ids.end(), b.ids.begin(), b.ids.end());
            std::vector<float> w(first.chunks[i].weights.begin(), first.chunks[i].weights.end());
            w.insert(w.end(), b.weights.begin(), b.weights.end());
            const std::vector<float> zz = model.encode(cpu_, ids, 2).lastHiddenState;
            double m0 = 0, m1 = 0;
            std::vector<double> joint(zz.size());
            for (std::size_t k = 0; k < zz.size(); ++k) {
                joint[k] = double(zz[k]) * w[k / 16];
                m0 += zz[k];
                m1 += joint[k];
            }
            for (double& v : joint) v *= m0 / m1;
            const std::size_t chunkFloats = 77 * 16;
            for (std::size_t row = 0; row < 2; ++row)
                EXPECT_CLOSE(
                    "pair row " + std::to_string(row) + " chunk " + std::to_string(i),
                    std::vector<float>(pair.values.begin() + (row * 2 + i) * chunkFloats,
                                       pair.values.begin() + (row * 2 + i + 1) * chunkFloats),
                    std::vector<double>(joint.begin() + row * chunkFloats, joint.begin() + (row + 1) * chunkFloats));
        }
        EXPECT_MESSAGE(errorOf([&] { encodePrompts(model, cpu_, tok, {}); }), "0 prompts");
        std::string huge;
        for (int i = 0; i < 65; ++i) huge += "x BREAK ";
        EXPECT_MESSAGE(errorOf([&] { encodePrompt(model, cpu_, tok, huge); }),
                       "[prompt] prompt: 65 chunks of 75 tokens; at most 64");
        EXPECT_MESSAGE(errorOf([&] { encodePrompt(model, cpu_, tok, "(x:1.2.3)"); }), "[prompt]");
    }

    // The row memo: a row's outputs depend on its ids alone, so rows seen before are not run
    // again, a row repeated in one batch runs once, and every output has the bits a model
    // without the memo gives (all hidden states, clip skip, the projection included).
    void rowMemo() {
        ClipTextConfig c = tinyConfig(ClipActivation::QuickGelu, 64, 3);
        c.withProjection = true;
        c.projectionDim = 8;
        Tensors t = randomTensors(c, 41);
        HostTensor proj{{8, 16}, std::vector<float>(8 * 16)};
        for (std::size_t i = 0; i < proj.data.size(); ++i) proj.data[i] = std::sin(0.7f * float(i)) * 0.3f;
        t.emplace(kClipTextProjection, proj);
        const ClipTextModel model = ClipTextModel::fromTensors(c, t);
        ClipTextModel plain = ClipTextModel::fromTensors(c, t);
        plain.setRowMemoBytes(0);
        auto row = [&](int seed) {
            Ids ids(kT);
            for (int i = 0; i < kT; ++i) ids[i] = (seed * 7 + i * 3) % 62;
            return ids;
        };
        auto join = [](std::initializer_list<Ids> rows) {
            Ids all;
            for (const Ids& r : rows) all.insert(all.end(), r.begin(), r.end());
            return all;
        };
        auto same = [](const ClipTextOutputs& a, const ClipTextOutputs& b) {
            QCOMPARE(a.lastHiddenState, b.lastHiddenState);
            QCOMPARE(a.pooled, b.pooled);
            QCOMPARE(a.textEmbeds, b.textEmbeds);
            QCOMPARE(a.hiddenStates, b.hiddenStates);
        };
        const Ids a = row(1), b = row(2), cc = row(3);
        // A row repeated within one batch runs once.
        const ClipTextOutputs aba = model.encode(cpu_, join({a, b, a}), 3, 0, ClipHiddenStates::All);
        same(aba, plain.encode(cpu_, join({a, b, a}), 3, 0, ClipHiddenStates::All));
        QCOMPARE(aba.hiddenStates.size(), std::size_t{4});
        QCOMPARE(aba.textEmbeds.size(), std::size_t{3 * 8});
        ClipTextModel::RowMemoStats s = model.rowMemoStats();
        QCOMPARE(s.rowsEncoded, std::uint64_t{2});
        QCOMPARE(s.rowsRemembered, std::uint64_t{1});
        QCOMPARE(s.rows, std::size_t{2});
        // Seen and new rows in one batch: only the new one runs; the same bits as without memo.
        const ClipTextOutputs bc = model.encode(cpu_, join({b, cc}), 2, 0, ClipHiddenStates::All);
        same(bc, plain.encode(cpu_, join({b, cc}), 2, 0, ClipHiddenStates::All));
        s = model.rowMemoStats();
        QCOMPARE(s.rowsEncoded, std::uint64_t{3});
        QCOMPARE(s.rowsRemembered, std::uint64_t{2});
        // Other layers (clip skip) or other hidden states are other rows.
        same(model.encode(cpu_, b, 1, 2), plain.encode(cpu_, b, 1, 2));
        same(model.encode(cpu_, b, 1, 0, ClipHiddenStates::Penultimate),
             plain.encode(cpu_, b, 1, 0, ClipHiddenStates::Penultimate));
        QCOMPARE(model.rowMemoStats().rowsEncoded, std::uint64_t{5});
        same(model.encode(cpu_, b, 1, 2), plain.encode(cpu_, b, 1, 2));
        QCOMPARE(model.rowMemoStats().rowsEncoded, std::uint64_t{5});
        // The model without memo ran every row and holds none.
        QCOMPARE(plain.rowMemoStats().rows, std::size_t{0});
        QCOMPARE(plain.rowMemoStats().rowsEncoded, std::uint64_t{2 + 2 + 1 + 1 + 1});
        // Bad ids are refused before the memo is asked, hit or not.
        Ids bad = a;
        bad[5] = 64;
        EXPECT_MESSAGE(errorOf([&] {
                           model.encode(cpu_, join({a, bad}), 2);
                       }),
                       "input ids: row 1 position 5 holds id 64");
        EXPECT_MESSAGE(errorOf([&] { model.encode(cpu_, a, 1, 4); }), "clip skip");

        // The bound: the least recently used rows go; what stays is still right.
        ClipTextModel small = ClipTextModel::fromTensors(c, t);
        small.encode(cpu_, a, 1);
        const std::size_t one = small.rowMemoStats().bytes;
        QCOMPARE(one, (kT * 16 + 16 + 8) * sizeof(float));  // last hidden state, pooled, projected
        small.setRowMemoBytes(2 * one);
        small.encode(cpu_, b, 1);
        small.encode(cpu_, a, 1);   // a is now the most recent
        small.encode(cpu_, cc, 1);  // b goes
        QCOMPARE(small.rowMemoStats().rows, std::size_t{2});
        QCOMPARE(small.rowMemoStats().bytes, 2 * one);
        const std::uint64_t ran = small.rowMemoStats().rowsEncoded;
        same(small.encode(cpu_, a, 1), plain.encode(cpu_, a, 1));
        QCOMPARE(small.rowMemoStats().rowsEncoded, ran);
        same(small.encode(cpu_, b, 1), plain.encode(cpu_, b, 1));
        QCOMPARE(small.rowMemoStats().rowsEncoded, ran + 1);
        small.setRowMemoBytes(0);
        QCOMPARE(small.rowMemoStats().rows, std::size_t{0});
        QCOMPARE(small.rowMemoStats().bytes, std::size_t{0});

        // Threads sharing one model: every result as without memo.
        const ClipTextModel shared = ClipTextModel::fromTensors(c, t);
        std::vector<ClipTextOutputs> got(6);
        std::vector<std::thread> threads;
        for (int i = 0; i < 6; ++i)
            threads.emplace_back([&, i] {
                CpuBackend own(1);  // each run its own backend
                got[i] = shared.encode(own, join({row(i % 3), row(10 + i)}), 2);
            });
        for (std::thread& th : threads) th.join();
        for (int i = 0; i < 6; ++i) same(got[i], plain.encode(cpu_, join({row(i % 3), row(10 + i)}), 2));
    }

    // encodeEachPrompt: each text as encodePrompt gives it alone with the chunk counts equalised,
    // in one batch (the prompt and negative prompt of a run), bit for bit.
    void eachPromptAsAlone() {
        ClipTextConfig c = tinyConfig(ClipActivation::QuickGelu, 49408, 3);
        c.bosTokenId = 49406;
        c.eosTokenId = 49407;
        const Tensors t = randomTensors(c, 23);
        const ClipTokenizer tok = ClipTokenizer::fromMergesGz(kGz);
        for (const bool penultimate : {false, true}) {
            const ClipTextModel model = ClipTextModel::fromTensors(c, t);
            ClipTextModel alone = ClipTextModel::fromTensors(c, t);
            alone.setRowMemoBytes(0);
            PromptConditioningOptions o;
            if (penultimate)
                o.layer = PromptLayer::Penultimate;
            else
                o.clipSkip = 2;
            const std::vector<std::string> texts{"a (red:1.5) fox BREAK [snow], (night:1.2)", "(blurry:1.3), ugly",
                                                 "a (red:1.5) fox BREAK [snow], (night:1.2)"};
            const std::vector<PromptConditioning> each = encodeEachPrompt(model, cpu_, tok, texts, o);
            QCOMPARE(each.size(), std::size_t{3});
            o.minChunks = 2;
            for (std::size_t i = 0; i < texts.size(); ++i) {
                const PromptConditioning want = encodePrompt(alone, cpu_, tok, texts[i], o);
                QCOMPARE(each[i].chunks, 2);
                QCOMPARE(each[i].channels, want.channels);
                QCOMPARE(each[i].values, want.values);
                QCOMPARE(each[i].pooledWidth, want.pooledWidth);
                QCOMPARE(each[i].pooled, want.pooled);
            }
            // Six rows asked, four distinct (the third text is the first; the second's padding chunk
            // is the empty prompt's): four ran.
            QCOMPARE(model.rowMemoStats().rowsEncoded, std::uint64_t{4});
            // minChunks above every text's count pads each; bad options as encodePrompts says.
            o.minChunks = 3;
            QCOMPARE(encodeEachPrompt(model, cpu_, tok, {"fox"}, o).front().values,
                     encodePrompt(alone, cpu_, tok, "fox", o).values);
            EXPECT_MESSAGE(errorOf([&] { encodeEachPrompt(model, cpu_, tok, {}, o); }), "0 prompts");
        }
    }

    // encode runs the rows it has not seen on the backend it is given, prepared for the text
    // graph even when it last ran another graph; rows it remembers touch no backend.
    void encodesOnTheGivenBackend() {
        const ClipTextConfig c = tinyConfig(ClipActivation::QuickGelu, 64, 2);
        const Tensors t = randomTensors(c, 43);
        const ClipTextModel model = ClipTextModel::fromTensors(c, t);
        ClipTextModel plain = ClipTextModel::fromTensors(c, t);
        plain.setRowMemoBytes(0);
        const Ids ids = framedRows(c, {{5, 9, 17}}, c.eosTokenId);
        // A backend prepared for another graph (the VAE's or the UNet's, in a run) first.
        CpuBackend backend(2);
        const ClipTextConfig other = tinyConfig(ClipActivation::Gelu, 64, 1);
        const Tensors otherWeights = randomTensors(other, 44);
        backend.prepareGraph(fuseForExecution(buildClipTextGraph(other, 1)), otherWeights, 3, 1, 1);
        const ClipTextOutputs got = model.encode(backend, ids, 1);
        QCOMPARE(got.lastHiddenState, plain.encode(cpu_, ids, 1).lastHiddenState);
        QCOMPARE(backend.graph().ops().size(), fuseForExecution(buildClipTextGraph(c, 2)).ops().size());
        // A remembered row: the same bits, and an unprepared backend stays unprepared.
        CpuBackend untouched(1);
        QCOMPARE(model.encode(untouched, ids, 1).lastHiddenState, got.lastHiddenState);
        QVERIFY(untouched.graph().ops().empty());
        QCOMPARE(model.rowMemoStats().rowsEncoded, std::uint64_t{1});
    }

    // transformers' own outputs (tools/reference/make_clip_fixtures.py -> tests/data/clip).
    void transformersFixtures() {
        if (!QFile::exists(QString::fromStdString(kFixtures + "/clip_cases.json")))
            QSKIP(
                "tests/data/clip is not there yet: the lead runs tools/reference/make_clip_fixtures.py on the GPU "
                "machine; the plain implementation above checks the forward pass meanwhile");
        const QStringList problems = checkFixtures(kFixtures);
        QVERIFY2(problems.isEmpty(), qPrintable(problems.join('\n')));
    }

    // The fixture reader on cases laid out as the script lays them out, with the outputs of the
    // plain implementation above (both name spellings), so a reader bug shows before the
    // fixtures land.
    void fixtureReaderOnSyntheticCases() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const std::string root = dir.path().toStdString();
        nlohmann::json doc{
            {"transformers", "none (synthetic)"}, {"torch", "none"}, {"cases", nlohmann::json::object()}};
        for (const bool flat : {false, true})
            for (const ClipActivation act : {ClipActivation::QuickGelu, ClipActivation::Gelu}) {
                const std::string name =
                    std::string(flat ? "flat_" : "") + (act == ClipActivation::Gelu ? "gelu" : "quick");
                const ClipTextConfig c = tinyConfig(act, 64, 2);
                const Tensors t = randomTensors(c, 31);
                QVERIFY(QDir().mkpath(QString::fromStdString(root + "/" + name + "/text_encoder")));
                writeFolder(root + "/" + name + "/text_encoder", c, t,
                            [flat](const std::string& n) { return flat ? n.substr(11) : n; });
                const Ids ids = framedRows(c, {{1, 2, 3}, Ids(75, 9)}, c.eosTokenId);
                const Reference ref = reference(c, t, ids, 2, 2);
                std::map<std::string, SafetensorsTensorData> outputs;
                auto put = [&](const std::string& key, const std::vector<double>& v, std::vector<std::int64_t> shape) {
                    outputs.emplace(key, SafetensorsTensorData{SafetensorsDtype::F32, std::move(shape),
                                                               encodeFloats(SafetensorsDtype::F32,
                                                                            std::vector<float>(v.begin(), v.end()))});
                };
                put("last_hidden_state", ref.last, {2, kT, 16});
                put("pooler_output", ref.pooled, {2, 16});
                put("skip1_normed", reference(c, t, ids, 2, 1).last, {2, kT, 16});
                for (std::size_t k = 0; k < ref.hidden.size(); ++k)
                    put("hidden_states." + std::to_string(k), ref.hidden[k], {2, kT, 16});
                writeSafetensors(root + "/" + name + "/outputs.safetensors", outputs);
                nlohmann::json weights = nlohmann::json::object();
                for (const auto& [n, tensor] : t) weights[flat ? n.substr(11) : n] = tensor.shape;
                doc["cases"][name] = {
                    {"layers", 2},
                    {"weights", weights},
                    {"input_ids", {Ids(ids.begin(), ids.begin() + kT), Ids(ids.begin() + kT, ids.end())}},
                    {"pool_index", {4, 76}},
                    {"first_eos_index", {4, 76}},
                    {"last_hidden_state_is_final_ln_of_last_hidden_states_entry", true}};
            }
        writeText(root + "/clip_cases.json", doc.dump());
        const QStringList problems = checkFixtures(root);
        QVERIFY2(problems.isEmpty(), qPrintable(problems.join('\n')));
        // The reader notices a wrong output.
        const std::string file = root + "/gelu/outputs.safetensors";
        std::map<std::string, SafetensorsTensorData> broken;
        const SafetensorsFile original(file);
        for (const auto& info : original.tensors()) {
            std::vector<float> v = original.readFloat32(info);
            if (info.name == "hidden_states.1") v[100] += 0.01f;
            broken.emplace(info.name, SafetensorsTensorData{SafetensorsDtype::F32, info.shape,
                                                            encodeFloats(SafetensorsDtype::F32, v)});
        }
        writeSafetensors(file + ".tmp", broken);
        QVERIFY(QFile::remove(QString::fromStdString(file)));
        QVERIFY(QFile::rename(QString::fromStdString(file + ".tmp"), QString::fromStdString(file)));
        const QStringList found = checkFixtures(root);
        QCOMPARE(found.size(), 1);
        QVERIFY2(found[0].startsWith("gelu hidden_states.1: element 100 is"), qPrintable(found[0]));
    }
};

QTEST_GUILESS_MAIN(TestClipText)
#include "tst_cliptext.moc"
