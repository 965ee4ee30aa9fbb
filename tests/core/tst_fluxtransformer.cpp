// The FLUX.1 transformer (core/models/flux/) on the CPU backend against diffusers'
// FluxTransformer2DModel (fixtures of tools/reference/make_flux_fixtures.py: a tiny dev-shaped model of
// 3 heads of 20 with rope axes 4 + 8 + 8, 2 double and 2 single blocks, run in float64): the output
// and the conditioning vector, each block's streams, the final norm; the same weights as schnell
// (no guidance embedding); the diffusers-to-BFL weight names; config refusals.
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/cpu/CpuBackend.h"
#include "core/formats/ModelWeights.h"
#include "core/formats/Safetensors.h"
#include "core/models/flux/FluxConfig.h"
#include "core/models/flux/FluxGraph.h"
#include "core/models/flux/FluxWeights.h"

using namespace tessera;

namespace {

const std::string kFixtures = std::string(TESSERA_TEST_DATA) + "/flux";
constexpr int kTextTokens = 7;

FluxConfig fixtureConfig() { return parseFluxConfig(readModelJson(kFixtures + "/transformer/config.json")); }

std::map<std::string, HostTensor> fixtureTensors(const FluxConfig& config) {
    FluxConfig dev = config;
    dev.guidanceEmbeds = true;  // the file holds the dev model; schnell drops guidance_in
    ModelWeights w =
        ModelWeights::load(kFixtures + "/transformer", fluxDiffusersTensors(dev), LegacyAttentionNames::NotAccepted);
    auto tensors = fluxTensorsFromDiffusers(dev, std::move(w.tensors));
    if (!config.guidanceEmbeds)
        for (auto it = tensors.begin(); it != tensors.end();)
            it = it->first.rfind("guidance_in.", 0) == 0 ? tensors.erase(it) : std::next(it);
    return tensors;
}

int valueNamed(const ModelGraph& g, const std::string& name) {
    for (std::size_t i = 0; i < g.values().size(); ++i)
        if (g.values()[i].name == name) return static_cast<int>(i);
    return -1;
}

// max |a - b| / max(1, max |b|).
double relativeError(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return INFINITY;
    double err = 0, scale = 1;
    for (std::size_t i = 0; i < a.size(); ++i) {
        err = std::max(err, std::fabs(double(a[i]) - b[i]));
        scale = std::max(scale, std::fabs(double(b[i])));
    }
    return std::isfinite(err) ? err / scale : INFINITY;
}

// The fixture's [B, 7, C] text rows then [B, N, C] image rows, joined per image.
std::vector<float> joined(const std::vector<float>& text, const std::vector<float>& image, int batch) {
    std::vector<float> out;
    const std::size_t t = text.size() / batch, i = image.size() / batch;
    for (int b = 0; b < batch; ++b) {
        out.insert(out.end(), text.begin() + b * t, text.begin() + (b + 1) * t);
        out.insert(out.end(), image.begin() + b * i, image.begin() + (b + 1) * i);
    }
    return out;
}

}  // namespace

class TestFluxTransformer : public QObject {
    Q_OBJECT

private slots:
    void forwardMatchesDiffusers_data() {
        QTest::addColumn<QString>("input");
        QTest::addColumn<bool>("dev");
        QTest::newRow("square dev") << "square" << true;
        QTest::newRow("square schnell") << "square" << false;
        QTest::newRow("wide dev") << "wide" << true;
        QTest::newRow("wide schnell") << "wide" << false;
    }

    void forwardMatchesDiffusers() {
        QFETCH(QString, input);
        QFETCH(bool, dev);
        FluxConfig config = fixtureConfig();
        config.guidanceEmbeds = dev;
        const auto tensors = fixtureTensors(config);
        SafetensorsFile file(kFixtures + "/transformer_" + input.toStdString() + ".safetensors");
        const auto sample = file.readFloat32("sample");
        const auto sigma = file.readFloat32("sigma"), guidance = file.readFloat32("guidance");
        const auto text = file.readFloat32("text"), pooled = file.readFloat32("pooled");
        const auto& shape = file.find("sample")->shape;
        const int batch = static_cast<int>(shape[0]), h = static_cast<int>(shape[2]), w = static_cast<int>(shape[3]);

        ModelGraph g = buildFluxGraph(config, kTextTokens);
        // Intermediates diffusers' hooks saw (square dev only), as extra outputs.
        const bool hooks = dev && input == "square";
        std::vector<std::pair<std::string, std::vector<float>>> expected;
        if (hooks) {
            auto hook = [&](const char* value, std::vector<float> want) {
                const int id = valueNamed(g, value);
                QVERIFY2(id >= 0, value);
                g.markOutput(id);
                expected.emplace_back(value, std::move(want));
            };
            hook("vec", file.readFloat32("hook.time_text_embed"));
            for (int k = 0; k < 2; ++k) {
                const std::string b = "hook.transformer_blocks." + std::to_string(k);
                hook(("double_blocks." + std::to_string(k) + ".txt_mlp.residual").c_str(), file.readFloat32(b + ".0"));
                hook(("double_blocks." + std::to_string(k) + ".img_mlp.residual").c_str(), file.readFloat32(b + ".1"));
                const std::string s = "hook.single_transformer_blocks." + std::to_string(k);
                hook(("single_blocks." + std::to_string(k) + ".residual").c_str(),
                     joined(file.readFloat32(s + ".0"), file.readFloat32(s + ".1"), batch));
            }
            hook("final_layer.norm_final", file.readFloat32("hook.norm_out"));
        }

        std::vector<float> timestep(sigma.size()), vector;
        std::transform(sigma.begin(), sigma.end(), timestep.begin(), [](float s) { return 1000.0f * s; });
        const int pooledDim = config.pooledProjectionDim;
        for (int b = 0; b < batch; ++b) {
            vector.insert(vector.end(), pooled.begin() + b * pooledDim, pooled.begin() + (b + 1) * pooledDim);
            if (dev) vector.push_back(guidance[static_cast<std::size_t>(b)]);
        }
        CpuBackend cpu(2);
        cpu.prepareGraph(g, tensors, batch, h, w);
        std::vector<std::vector<float>> out;
        for (int v : g.outputs()) out.emplace_back(static_cast<std::size_t>(g.elements(v, batch, h, w)), NAN);
        std::vector<float*> outPtrs;
        for (auto& o : out) outPtrs.push_back(o.data());
        cpu.run({sample.data(), timestep.data(), text.data(), vector.data()}, batch, outPtrs);

        const double err = relativeError(out[0], file.readFloat32(dev ? "output" : "schnell_output"));
        qInfo("%s: output max error %.3g (relative to max(1, max |output|))", qPrintable(input), err);
        QVERIFY2(err < 2e-5, qPrintable(QString("output error %1").arg(err)));
        for (std::size_t k = 0; k < expected.size(); ++k) {
            const double e = relativeError(out[k + 1], expected[k].second);
            qInfo("  %s: %.3g", expected[k].first.c_str(), e);
            QVERIFY2(e < 2e-5, qPrintable(QString::fromStdString(expected[k].first) + QString(" error %1").arg(e)));
        }
    }

    // The joined sequence follows the tile: 7 text tokens + (h / 2)(w / 2) image tokens.
    void joinedSequenceFollowsTheTile() {
        const ModelGraph g = buildFluxGraph(fixtureConfig(), kTextTokens);
        const int joint = valueNamed(g, "single_blocks.0.residual");
        QVERIFY(joint >= 0);
        QCOMPARE(g.rows(joint, 6, 10), std::int64_t{7 + 15});
        QCOMPARE(g.rows(joint, 32, 32), std::int64_t{7 + 256});
        QCOMPARE(g.downsampleFactor(), 2);
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, g.checkTileSize(6, 9));
        // dev: pooled + guidance; schnell: pooled alone.
        QCOMPARE(g.value(g.inputs()[3]).channels, 41);
        FluxConfig schnell = fixtureConfig();
        schnell.guidanceEmbeds = false;
        const ModelGraph s = buildFluxGraph(schnell, kTextTokens);
        QCOMPARE(s.value(s.inputs()[3]).channels, 40);
        QVERIFY(s.parameterCount() < g.parameterCount());
    }

    // Every diffusers tensor of the file is used, and the BFL parameters are as many values.
    void diffusersNamesCoverTheFile() {
        const FluxConfig config = fixtureConfig();
        const TensorList diffusers = fluxDiffusersTensors(config);
        SafetensorsFile file(kFixtures + "/transformer/diffusion_pytorch_model.safetensors");
        QCOMPARE(file.tensors().size(), diffusers.size());
        std::int64_t a = 0, b = 0;
        for (const auto& [name, shape] : diffusers) {
            QVERIFY2(file.has(name), name.c_str());
            std::int64_t n = 1;
            for (auto d : shape) n *= d;
            a += n;
        }
        for (const auto& [name, shape] : fluxParameters(config)) {
            std::int64_t n = 1;
            for (auto d : shape) n *= d;
            b += n;
        }
        QCOMPARE(a, b);
        // norm_out's [scale; shift] becomes LastLayer's [shift; scale].
        const auto tensors = fixtureTensors(config);
        const auto diffusersBias = file.readFloat32("norm_out.linear.bias");
        const auto& bfl = tensors.at("final_layer.adaLN_modulation.1.bias").data;
        const std::size_t half = bfl.size() / 2;
        QCOMPARE(bfl[0], diffusersBias[half]);
        QCOMPARE(bfl[half], diffusersBias[0]);
    }

    void configRefusals_data() {
        QTest::addColumn<QString>("json");
        QTest::addColumn<QString>("message");
        QTest::newRow("patch 2") << R"({"patch_size": 2})"
                                 << "patch_size = 2";
        QTest::newRow("odd axis") << R"({"attention_head_dim": 20, "axes_dims_rope": [4, 7, 9]})"
                                  << "even sizes";
        QTest::newRow("axes sum") << R"({"attention_head_dim": 20, "axes_dims_rope": [4, 8, 10]})"
                                  << "must sum to attention_head_dim (20)";
        QTest::newRow("out differs") << R"({"out_channels": 32})"
                                     << "out_channels = 32";
        QTest::newRow("in not 4n") << R"({"in_channels": 66, "out_channels": 66})"
                                   << "a multiple of 4";
        QTest::newRow("heads 0") << R"({"num_attention_heads": 0})"
                                 << "num_attention_heads = 0";
        QTest::newRow("not object") << "[1]"
                                    << "expected a JSON object";
    }

    void configRefusals() {
        QFETCH(QString, json);
        QFETCH(QString, message);
        std::string what = "<no error>";
        try {
            parseFluxConfig(nlohmann::json::parse(json.toStdString()));
        } catch (const std::exception& e) {
            what = e.what();
        }
        QVERIFY2(what.find(message.toStdString()) != std::string::npos, what.c_str());
    }

    // BFL single files: FLUX.1's own shapes only, dev by guidance_in.
    void configFromShapes() {
        std::map<std::string, std::vector<std::int64_t>> shapes{
            {"img_in.weight", {3072, 64}},
            {"txt_in.weight", {3072, 4096}},
            {"vector_in.in_layer.weight", {3072, 768}},
            {"double_blocks.0.img_attn.norm.query_norm.scale", {128}},
            {"double_blocks.18.img_mod.lin.weight", {18432, 3072}},
            {"single_blocks.37.linear1.weight", {21504, 3072}},
        };
        FluxConfig c = fluxConfigFromShapes(shapes);
        QCOMPARE(c.layers, 19);
        QCOMPARE(c.singleLayers, 38);
        QCOMPARE(c.heads, 24);
        QVERIFY(!c.guidanceEmbeds);
        shapes["guidance_in.in_layer.weight"] = {3072, 256};
        QVERIFY(fluxConfigFromShapes(shapes).guidanceEmbeds);
        shapes["img_in.weight"] = {3072, 384};
        std::string what;
        try {
            fluxConfigFromShapes(shapes);
        } catch (const std::exception& e) {
            what = e.what();
        }
        QVERIFY2(what.find("Fill, Depth and Canny") != std::string::npos, what.c_str());
        shapes.erase("txt_in.weight");
        try {
            fluxConfigFromShapes(shapes);
            what.clear();
        } catch (const std::exception& e) {
            what = e.what();
        }
        QVERIFY2(what.find("no tensor 'txt_in.weight'") != std::string::npos, what.c_str());
    }
};

QTEST_APPLESS_MAIN(TestFluxTransformer)
#include "tst_fluxtransformer.moc"
