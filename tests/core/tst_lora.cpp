// LoRA / LyCORIS (core/models/lora, core/text/ExtraNetworks.h): the fixtures of tests/data/lora
// (tools/reference/make_lora_fixtures.py: tiny SD 1.x / 2.x / XL-shaped models, LoRA files of every
// format, the merged weights the upstream formulas give in float64), key names round-tripped over
// real SD configurations, the family check, the hashes A1111 writes, the prompt tags, the set's
// digest and undo, and files that do not fit.
#include <QTemporaryDir>
#include <QtTest/QtTest>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/BoundedInput.h"
#include "core/base/Sha256.h"
#include "core/formats/ModelWeights.h"
#include "core/formats/Safetensors.h"
#include "core/models/clip/ClipTextConfig.h"
#include "core/models/clip/ClipTextModel.h"
#include "core/models/lora/LoraFile.h"
#include "core/models/lora/LoraFit.h"
#include "core/models/lora/LoraKeyMap.h"
#include "core/models/lora/LoraNetwork.h"
#include "core/models/lora/MergedLoraSet.h"
#include "core/models/sd/LdmNames.h"
#include "core/models/sd/SdModel.h"
#include "core/models/sd/UNetCondConfig.h"
#include "core/models/sd/UNetCondModel.h"
#include "core/text/ExtraNetworks.h"

using namespace tessera;

namespace {

const std::string kDir = std::string(TESSERA_TEST_DATA) + "/lora";
// Where make_lora_fixtures.py --check-diffusers writes diffusers' own merges, when it has been run.
const std::string kDiffusersDir = kDir + "/diffusers";

nlohmann::json cases() { return readBoundedJson(kDir + "/cases.json", "test"); }

std::uint32_t fnv1a32(const std::string& text) {
    std::uint32_t h = 0x811C9DC5u;
    for (const unsigned char c : text) h = (h ^ c) * 0x01000193u;
    return h;
}

// make_lora_fixtures.py base_tensor: ((fnv1a32(key) + i * 2654435761) mod 2^32 / 2^32 - 0.5) / 4,
// exact in double, rounded once to float.
std::vector<float> baseValues(const std::string& key, std::size_t n) {
    std::vector<float> v(n);
    const std::uint64_t h = fnv1a32(key);
    for (std::size_t i = 0; i < n; ++i) {
        const std::uint64_t k = (h + i * 2654435761ull) % (std::uint64_t{1} << 32);
        v[i] = static_cast<float>((static_cast<double>(k) / 4294967296.0 - 0.5) * 0.25);
    }
    return v;
}

SdFamily familyOf(const std::string& name) {
    return name == "sdxl" ? SdFamily::SDXL : name == "sd2" ? SdFamily::SD2 : SdFamily::SD1;
}

// A tiny model of cases.json's "models": random tensors (every one the graphs declare), key map.
struct TinyModel {
    SdFamily family = SdFamily::SD1;
    UNetCondConfig unetConfig;
    TensorList unetList, textList, text2List;
    std::map<std::string, HostTensor> unet, text, text2;

    explicit TinyModel(const nlohmann::json& m) {
        family = familyOf(m.at("family"));
        unetConfig = unetCondConfigFromJson(m.at("unet"));
        unetList = UNetCondModel::expectedTensors(unetConfig);
        textList = ClipTextModel::expectedTensors(clipTextConfigFromJson(m.at("text_encoder")));
        if (m.contains("text_encoder_2"))
            text2List = ClipTextModel::expectedTensors(clipTextConfigFromJson(m.at("text_encoder_2")));
        unet = randomTensors(unetList, 1);
        text = randomTensors(textList, 2);
        if (!text2List.empty()) text2 = randomTensors(text2List, 3);
    }
    LoraKeyMap keys() const { return LoraKeyMap(family, unetConfig, unetList, textList, text2List); }
    LoraWeights weights() { return LoraWeights{&unet, &text, text2List.empty() ? nullptr : &text2}; }
    std::map<std::string, HostTensor>& component(const std::string& name) {
        return name == "unet" ? unet : name == "text_encoder" ? text : text2;
    }
    // Every tensor of the model, for comparisons before and after.
    std::map<std::string, std::vector<float>> snapshot() const {
        std::map<std::string, std::vector<float>> all;
        for (const auto& [n, t] : unet) all["unet/" + n] = t.data;
        for (const auto& [n, t] : text) all["text_encoder/" + n] = t.data;
        for (const auto& [n, t] : text2) all["text_encoder_2/" + n] = t.data;
        return all;
    }
};

// The distance of two floats in units in the last place.
std::int64_t ulps(float a, float b) {
    std::int32_t ia = 0, ib = 0;
    std::memcpy(&ia, &a, 4);
    std::memcpy(&ib, &b, 4);
    if (ia < 0) ia = std::numeric_limits<std::int32_t>::min() - ia;
    if (ib < 0) ib = std::numeric_limits<std::int32_t>::min() - ib;
    return std::abs(static_cast<std::int64_t>(ia) - ib);
}

std::string messageOf(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "<no error>";
}

#define EXPECT_CONTAINS(text, part)                        \
    QVERIFY2(                                              \
        std::string(text).find(part) != std::string::npos, \
        qPrintable(QStringLiteral("'%1' not in: %2")       \
                       .arg(QString::fromStdString(std::string(part)), QString::fromStdString(std::string(text)))))

std::vector<std::string> strings(const nlohmann::json& j) { return j.get<std::vector<std::string>>(); }

// A LoRA file of tensors with the given shapes (values 0.01), written for a test.
void writeLora(const std::string& path, const std::vector<std::pair<std::string, std::vector<std::int64_t>>>& tensors,
               const std::map<std::string, std::string>& metadata = {}) {
    std::map<std::string, SafetensorsTensorData> out;
    for (const auto& [name, shape] : tensors) {
        std::int64_t n = 1;
        for (const auto d : shape) n *= d;
        out[name] = {SafetensorsDtype::F32, shape,
                     encodeFloats(SafetensorsDtype::F32, std::vector<float>(static_cast<std::size_t>(n), 0.01f))};
    }
    writeSafetensors(path, out, metadata);
}

// A fixture case merged: its model with the touched tensors at their base values, its files, the set.
struct CaseRun {
    TinyModel model;
    std::vector<LoraFile> files;
    std::vector<LoraApplication> loras;
    LoraMergeOptions options;
    std::map<std::string, std::vector<float>> before;
    MergedLoraSet set;
};

nlohmann::json caseNamed(const nlohmann::json& doc, const std::string& name) {
    for (const auto& c : doc.at("cases"))
        if (c.at("name") == name) return c;
    throw std::runtime_error("no case " + name);
}

std::unique_ptr<CaseRun> runCase(const nlohmann::json& doc, const nlohmann::json& c) {
    auto run = std::make_unique<CaseRun>(
        CaseRun{TinyModel(doc.at("models").at(c.at("model").get<std::string>())), {}, {}, {}, {}, {}});
    const SafetensorsFile expected(kDir + "/" + c.at("expected").get<std::string>());
    for (const auto& info : expected.tensors()) {
        const std::size_t slash = info.name.find('/');
        HostTensor& t = run->model.component(info.name.substr(0, slash)).at(info.name.substr(slash + 1));
        t.data = baseValues(info.name, t.data.size());
    }
    run->before = run->model.snapshot();
    run->files.reserve(c.at("loras").size());
    for (const auto& l : c.at("loras"))
        run->files.push_back(
            LoraFile::open(kDir + "/" + doc.at("loras").at(l.at(0).get<std::string>()).at("file").get<std::string>()));
    for (std::size_t i = 0; i < run->files.size(); ++i) {
        const auto& l = c.at("loras").at(i);
        LoraApplication a{&run->files[i], l.at(0), l.at(1), l.at(2), std::nullopt};
        if (c.contains("dyn")) a.dyn = c.at("dyn").get<std::int64_t>();
        run->loras.push_back(a);
    }
    run->options.dora = parseDoraConvention(c.at("dora").get<std::string>());
    run->set = MergedLoraSet::merge(run->model.weights(), run->model.keys(), run->loras, run->options);
    return run;
}

const HostTensor& tensorOf(TinyModel& model, const std::string& key) {
    const std::size_t slash = key.find('/');
    return model.component(key.substr(0, slash)).at(key.substr(slash + 1));
}

}  // namespace

class TestLora : public QObject {
    Q_OBJECT

private slots:
    void fixturesPresent() {
        QVERIFY2(std::filesystem::exists(kDir + "/cases.json"),
                 "tests/data/lora/cases.json is missing: run tools/reference/make_lora_fixtures.py tests/data/lora");
    }

    // Every case: the merge equals the float64 reference rounded once (within one float32 ulp; the
    // products are summed in another order), touches nothing else, reports the keys that name nothing,
    // and restore() puts every tensor back bit for bit.
    void fixtureCases_data() {
        QTest::addColumn<QString>("name");
        const nlohmann::json doc = cases();
        for (const auto& c : doc.at("cases")) {
            const std::string n = c.at("name");
            QTest::newRow(n.c_str()) << QString::fromStdString(n);
        }
    }
    void fixtureCases() {
        QFETCH(QString, name);
        const nlohmann::json doc = cases();
        const nlohmann::json c = caseNamed(doc, name.toStdString());
        QVERIFY(TinyModel(doc.at("models").at(c.at("model").get<std::string>())).keys().ambiguousNames().empty());
        const std::unique_ptr<CaseRun> run = runCase(doc, c);
        const SafetensorsFile expected(kDir + "/" + c.at("expected").get<std::string>());

        std::int64_t worst = 0;
        std::size_t exact = 0, total = 0;
        std::set<std::string> touched;
        for (const auto& info : expected.tensors()) {
            touched.insert(info.name);
            const HostTensor& t = tensorOf(run->model, info.name);
            const std::vector<float> want = expected.readFloat32(info);
            QCOMPARE(t.data.size(), want.size());
            for (std::size_t i = 0; i < want.size(); ++i) {
                const std::int64_t d = ulps(t.data[i], want[i]);
                worst = std::max(worst, d);
                exact += d == 0 ? 1 : 0;
            }
            total += want.size();
        }
        qInfo("%s: %zu of %zu values bit-identical to the float64 reference, worst %lld ulp", qPrintable(name), exact,
              total, static_cast<long long>(worst));
        QVERIFY2(worst <= 1, qPrintable(QStringLiteral("worst %1 ulp").arg(worst)));
        QVERIFY(exact * 100 >= total * 99);
        const auto after = run->model.snapshot();
        for (const auto& [n, values] : run->before)
            if (!touched.count(n)) QVERIFY2(after.at(n) == values, n.c_str());
        QCOMPARE(run->set.tensorsChanged(), touched.size());

        QCOMPARE(run->set.reports().size(), run->loras.size());
        for (std::size_t i = 0; i < run->loras.size(); ++i) {
            const nlohmann::json& info = doc.at("loras").at(c.at("loras").at(i).at(0).get<std::string>());
            const LoraMergeReport& r = run->set.reports()[i];
            QCOMPARE(r.modulesMerged, info.at("modules").get<std::size_t>());
            QCOMPARE(r.unmatchedKeys, strings(info.at("unmatched")));
            QVERIFY(r.shapeMismatches.empty());
            QVERIFY(r.notMerged.empty());
        }
        QCOMPARE(run->set.digest(), loraSetDigest(run->loras, run->options));
        QVERIFY(!run->set.digest().empty());

        run->set.restore(run->model.weights());
        QVERIFY(run->set.empty());
        QVERIFY(run->model.snapshot() == run->before);
    }

    // diffusers' own merge (load_lora_weights + fuse_lora in float32, UNet modules; make_lora_fixtures.py
    // --check-diffusers, kept in tests/data/lora/diffusers) equals Tessera's where the semantics agree;
    // every tensor where they do not has a known cause (report.json "differ": diffusers' alpha of
    // attention projections, kohya dora_scale, use_dora for a whole adapter).
    void diffusersMerges() {
        if (!std::filesystem::exists(kDiffusersDir + "/report.json")) QSKIP("no diffusers check in tests/data/lora");
        const nlohmann::json report = readBoundedJson(kDiffusersDir + "/report.json", "test");
        const SafetensorsFile theirs(kDiffusersDir + "/merged.safetensors");
        const nlohmann::json doc = cases();
        std::size_t compared = 0;
        for (const auto& [name, r] : report.at("cases").items()) {
            QVERIFY2(r.contains("agree"), (name + ": " + r.dump()).c_str());
            const std::unique_ptr<CaseRun> run = runCase(doc, caseNamed(doc, name));
            for (const auto& key : r.at("agree")) {
                const std::vector<float> a = theirs.readFloat32(name + ":" + key.get<std::string>());
                const HostTensor& ours = tensorOf(run->model, key);
                QCOMPARE(a.size(), ours.data.size());
                for (std::size_t i = 0; i < a.size(); ++i)
                    QVERIFY2(std::abs(a[i] - ours.data[i]) <= 1e-6f * std::max(1.0f, std::abs(ours.data[i])),
                             qPrintable(QString::fromStdString(name + " " + key.get<std::string>())));
                ++compared;
            }
            for (const auto& [key, d] : r.at("differ").items()) {
                QVERIFY2(d.at("why") != "unexplained", (name + " " + key).c_str());
                qInfo("%s %s: diffusers differs by %.3g: %s", name.c_str(), key.c_str(),
                      d.at("max_abs_diff").get<double>(), d.at("why").get<std::string>().c_str());
            }
        }
        QVERIFY(compared >= 30);
    }

    // diffusers' conversion of kohya names (_maybe_map_sgm_blocks_to_diffusers +
    // _convert_non_diffusers_lora_to_diffusers) lands every sd-scripts module name where the key map does.
    void diffusersKeyConversion() {
        if (!std::filesystem::exists(kDiffusersDir + "/kohya_to_diffusers.json"))
            QSKIP("no diffusers check in tests/data/lora");
        const nlohmann::json conversion = readBoundedJson(kDiffusersDir + "/kohya_to_diffusers.json", "test");
        const nlohmann::json doc = cases();
        for (const auto& [model, stems] : conversion.items()) {
            const TinyModel m(doc.at("models").at(model));
            const LoraKeyMap keys = m.keys();
            QVERIFY(stems.size() > 20);
            for (const auto& [stem, target] : stems.items()) {
                const LoraTarget* t = keys.find(stem);
                QVERIFY2(t != nullptr, stem.c_str());
                QCOMPARE(std::string(toString(t->component)), target.at(0).get<std::string>());
                QCOMPARE(t->module, target.at(1).get<std::string>());
            }
        }
    }

    // sd-scripts' names of every module of real SD 1.5, 2.1 and XL base configurations resolve to that
    // module (no underscore ambiguity), as do the diffusers / PEFT names; no name is claimed twice.
    void keyMapRoundTrip_data() {
        QTest::addColumn<QString>("model");
        QTest::newRow("sd15") << "random:sd15";
        QTest::newRow("sd21") << "random:sd21";
        QTest::newRow("sdxl") << "random:sdxl";
    }
    void keyMapRoundTrip() {
        QFETCH(QString, model);
        const SdModelConfigs c = randomSdModelConfigs(model.toStdString());
        const TensorList unet = UNetCondModel::expectedTensors(c.unet);
        const TensorList text = ClipTextModel::expectedTensors(c.textEncoder);
        const TensorList text2 = c.textEncoder2 ? ClipTextModel::expectedTensors(*c.textEncoder2) : TensorList{};
        const LoraKeyMap keys(c.family, c.unet, unet, text, text2);
        QVERIFY2(keys.ambiguousNames().empty(), qPrintable(QString::fromStdString(excerptList(keys.ambiguousNames()))));
        const bool xl = c.family == SdFamily::SDXL;
        std::size_t checked = 0;
        for (const auto& [name, shape] : unet) {
            if (!name.ends_with(".weight")) continue;
            const std::string path = name.substr(0, name.size() - 7);
            const auto expectModule = [&](const std::string& stem) {
                const LoraTarget* t = keys.find(stem);
                QVERIFY2(t != nullptr && t->module == path && t->component == LoraComponent::UNet, stem.c_str());
            };
            const std::string ldm = single_file::unetLdmName(name, c.unet);
            // sd-scripts: SD 1.x / 2.x on the diffusers UNet, SDXL on the SGM one.
            if (xl && !ldm.empty())
                expectModule("lora_unet_" + underscored(ldm.substr(0, ldm.size() - 7)));
            else
                expectModule("lora_unet_" + underscored(path));
            expectModule("unet." + path);
            ++checked;
        }
        for (const auto& [list, prefix, component] :
             {std::tuple{&text, xl ? "lora_te1_" : "lora_te_", LoraComponent::TextEncoder},
              std::tuple{&text2, "lora_te2_", LoraComponent::TextEncoder2}})
            for (const auto& [name, shape] : *list) {
                if (!name.ends_with(".weight")) continue;
                const std::string path = name.substr(0, name.size() - 7);
                const LoraTarget* t = keys.find(prefix + underscored(path));
                QVERIFY2(t != nullptr && t->module == path && t->component == component, name.c_str());
                ++checked;
            }
        QVERIFY(checked > 200);
        // The diffusers attention-processor spellings.
        const LoraTarget* q =
            keys.find(xl ? "unet.down_blocks.1.attentions.0.transformer_blocks.1.attn2.processor.to_out"
                         : "unet.down_blocks.0.attentions.0.transformer_blocks.0.attn2.processor.to_out");
        QVERIFY(q != nullptr && q->module.ends_with("attn2.to_out.0"));
        QVERIFY(keys.find("text_encoder.text_model.encoder.layers.3.self_attn.to_k") != nullptr);
        QCOMPARE(keys.find("text_encoder.text_model.encoder.layers.3.self_attn.to_k")->module,
                 std::string("text_model.encoder.layers.3.self_attn.k_proj"));
    }

    void keySplitting() {
        const auto split = [](const char* key) {
            const auto s = splitLoraKey(key);
            return s ? s->stem : std::string("<none>");
        };
        QCOMPARE(split("lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight"),
                 std::string("lora_unet_down_blocks_0_attentions_0_proj_in"));
        QCOMPARE(split("unet.down_blocks.0.attentions.0.proj_in.lora_A.weight"),
                 std::string("unet.down_blocks.0.attentions.0.proj_in"));
        QCOMPARE(split("unet.mid_block.attentions.0.transformer_blocks.0.attn1.processor.to_q_lora.up.weight"),
                 std::string("unet.mid_block.attentions.0.transformer_blocks.0.attn1.processor.to_q"));
        QCOMPARE(split("text_encoder.text_model.encoder.layers.0.mlp.fc1.lora_linear_layer.down.weight"),
                 std::string("text_encoder.text_model.encoder.layers.0.mlp.fc1"));
        QCOMPARE(split("lora_unet_conv_in.lokr_w1_a"), std::string("lora_unet_conv_in"));
        QCOMPARE(split("lora_unet_conv_in.hada_t1"), std::string("lora_unet_conv_in"));
        QCOMPARE(split("lora_unet_conv_in.alpha"), std::string("lora_unet_conv_in"));
        QCOMPARE(split("lora_unet_conv_in.weight"), std::string("<none>"));
    }

    // A LoRA for another family is told before any merge, with the evidence.
    void familyCheck() {
        const nlohmann::json doc = cases();
        const TinyModel sd1(doc.at("models").at("sd1")), sd2(doc.at("models").at("sd2")),
            xl(doc.at("models").at("sdxl"));
        const LoraFile xlFile = LoraFile::open(kDir + "/sdxl_kohya.safetensors");
        const LoraFile sd1File = LoraFile::open(kDir + "/sd1_kohya.safetensors");
        const LoraNetwork xlNet = buildLoraNetwork(xlFile), sd1Net = buildLoraNetwork(sd1File);

        const LoraFit xlOnXl = checkLoraFit(xlFile, xlNet, xl.keys());
        QVERIFY2(xlOnXl.fits(SdFamily::SDXL), xlOnXl.verdict(SdFamily::SDXL).c_str());
        QCOMPARE(xlOnXl.matched, xlOnXl.modules);
        EXPECT_CONTAINS(xlOnXl.verdict(SdFamily::SDXL), "fits Stable Diffusion XL: 13 of 13 modules");

        const LoraFit xlOnSd1 = checkLoraFit(xlFile, xlNet, sd1.keys());
        QVERIFY(!xlOnSd1.fits(SdFamily::SD1));
        QVERIFY(xlOnSd1.fileFamily == SdFamily::SDXL);
        const std::string v = xlOnSd1.verdict(SdFamily::SD1);
        EXPECT_CONTAINS(v, "this LoRA is for Stable Diffusion XL (");
        EXPECT_CONTAINS(v, "two text encoders");
        EXPECT_CONTAINS(v, "SGM layout");
        EXPECT_CONTAINS(v, "sdxl_base_v1-0");
        EXPECT_CONTAINS(v, "the model is Stable Diffusion 1.x");

        const LoraFit sd1OnSd1 = checkLoraFit(sd1File, sd1Net, sd1.keys());
        QVERIFY(sd1OnSd1.fits(SdFamily::SD1));
        QCOMPARE(sd1OnSd1.unmatchedKeys.size(), std::size_t{3});
        const LoraFit sd1OnSd2 = checkLoraFit(sd1File, sd1Net, sd2.keys());
        QVERIFY(!sd1OnSd2.fits(SdFamily::SD2));
        QVERIFY(!sd1OnSd2.shapeMismatches.empty());  // a 32-wide text encoder LoRA on a 48-wide one
        EXPECT_CONTAINS(sd1OnSd2.verdict(SdFamily::SD2), "Stable Diffusion 1.x");
    }

    // Real widths decide the family where metadata is silent: the context width of attn2.to_k and the
    // text encoders' widths.
    void familyFromWidths_data() {
        QTest::addColumn<QString>("stem");
        QTest::addColumn<int>("width");
        QTest::addColumn<int>("family");
        QTest::addColumn<QString>("evidence");
        const char* attn = "lora_unet_down_blocks_1_attentions_0_transformer_blocks_0_attn2_to_k";
        QTest::newRow("sd1 context") << attn << 768 << int(SdFamily::SD1) << "768-wide text";
        QTest::newRow("sd2 context") << attn << 1024 << int(SdFamily::SD2) << "OpenCLIP ViT-H";
        QTest::newRow("sdxl context") << "lora_unet_input_blocks_4_1_transformer_blocks_0_attn2_to_k" << 2048
                                      << int(SdFamily::SDXL) << "two encoders";
        QTest::newRow("sd2 text") << "lora_te_text_model_encoder_layers_0_self_attn_q_proj" << 1024
                                  << int(SdFamily::SD2) << "1024 wide";
        QTest::newRow("sdxl text 2") << "lora_te2_text_model_encoder_layers_0_mlp_fc1" << 1280 << int(SdFamily::SDXL)
                                     << "1280 wide";
    }
    void familyFromWidths() {
        QFETCH(QString, stem);
        QFETCH(int, width);
        QFETCH(int, family);
        QFETCH(QString, evidence);
        QTemporaryDir dir;
        const std::string path = dir.filePath("w.safetensors").toStdString();
        writeLora(path, {{stem.toStdString() + ".lora_down.weight", {1, width}},
                         {stem.toStdString() + ".lora_up.weight", {8, 1}}});
        const LoraFile f = LoraFile::open(path);
        const TinyModel sd1(cases().at("models").at("sd1"));
        const LoraFit fit = checkLoraFit(f, buildLoraNetwork(f), sd1.keys());
        QVERIFY(fit.fileFamily.has_value());
        QCOMPARE(int(*fit.fileFamily), family);
        EXPECT_CONTAINS(fit.verdict(SdFamily(family == int(SdFamily::SD1) ? SdFamily::SD2 : SdFamily::SD1)),
                        evidence.toStdString());
    }

    // The hashes A1111 writes: kohya's addnet hash of a safetensors file (the bytes after the header),
    // the whole file's SHA-256 for a pickle, sshs_model_hash from the metadata when present.
    void hashes() {
        const nlohmann::json doc = cases();
        for (const auto& [name, info] : doc.at("loras").items()) {
            const std::string path = kDir + "/" + info.at("file").get<std::string>();
            const LoraFile f = LoraFile::open(path);
            QCOMPARE(f.sha256(), info.at("sha256").get<std::string>());
            const std::string bytes = readBoundedFile(path, "test", 1u << 24);
            QCOMPARE(f.sha256(), sha256Hex(bytes.data(), bytes.size()));
            if (f.container() == LoraContainer::Safetensors) {
                std::uint64_t n = 0;
                std::memcpy(&n, bytes.data(), 8);
                const std::string addnet = sha256Hex(bytes.data() + 8 + n, bytes.size() - 8 - n);
                QCOMPARE(f.addnetHash(), addnet);
                QCOMPARE(f.addnetHash(), info.at("addnet").get<std::string>());
                const auto& meta = info.at("metadata");
                const std::string want =
                    meta.contains("sshs_model_hash") ? meta.at("sshs_model_hash").get<std::string>() : addnet;
                QCOMPARE(f.a1111ShortHash(), want.substr(0, 12));
            } else {
                QVERIFY(f.addnetHash().empty());
                QCOMPARE(f.a1111ShortHash(), f.sha256().substr(0, 12));
            }
        }
        const LoraFile xl = LoraFile::open(kDir + "/sdxl_kohya.safetensors");
        QCOMPARE(xl.a1111ShortHash(), std::string("0123456789ab"));
        const LoraFile sd1 = LoraFile::open(kDir + "/sd1_kohya.safetensors");
        QCOMPARE(sd1.alias(), std::string("sd1_kohya_alias"));
        QCOMPARE(sd1.stem(), std::string("sd1_kohya"));
    }

    // A pickle in a "state_dict" wrapper lists its keys without it.
    void pickleWrapper() {
        const LoraFile f = LoraFile::open(kDir + "/sd1_kohya_wrapped.pt");
        QVERIFY(f.container() == LoraContainer::TorchPickle);
        QVERIFY(f.find("lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn2_to_q.lora_up.weight") !=
                nullptr);
        QVERIFY(f.metadata().empty());
    }

    void promptTags() {
        const ExtraNetworkPrompt p = parseExtraNetworks("a, <lora:x:1>, b <lyco:y:0.5:0.25> <hypernet:h:1>");
        QCOMPARE(p.prompt, std::string("a, , b  "));
        QCOMPARE(p.tags.size(), std::size_t{3});
        QCOMPARE(p.tags[0].kind, std::string("lora"));
        QCOMPARE(p.tags[0].items, (std::vector<std::string>{"x", "1"}));
        QCOMPARE(p.tags[2].kind, std::string("hypernet"));

        // Not tags: no word before ':', nothing after it, no '>', a space in the kind.
        for (const char* text : {"<:x:1>", "<lora:>", "<lora:x", "<lo ra:x>", "a < b > c", "<lora>"}) {
            const ExtraNetworkPrompt q = parseExtraNetworks(text);
            QVERIFY2(q.tags.empty(), text);
            QCOMPARE(q.prompt, std::string(text));
        }
        // The first '>' closes; a tag may span lines; Unicode letters are word characters; '<' before a
        // tag stays.
        QCOMPARE(parseExtraNetworks("<<lora:a:1>>").prompt, std::string("<>"));
        QCOMPARE(parseExtraNetworks("<lora:a\nb:1>").tags.at(0).items.at(0), std::string("a\nb"));
        QCOMPARE(parseExtraNetworks("<l\xc3\xb6ra:x>").tags.at(0).kind, std::string("l\xc3\xb6ra"));
        QCOMPARE(parseExtraNetworks("x<lora:a:1>y<lora:b>z").prompt, std::string("xyz"));
    }

    void loraTagValues() {
        const auto tags = [](const char* prompt) { return loraTags(parseExtraNetworks(prompt).tags); };
        std::vector<LoraTag> t = tags("<lora:n:0.8>");
        QCOMPARE(t.size(), std::size_t{1});
        QCOMPARE(t[0].name, std::string("n"));
        QCOMPARE(t[0].teMultiplier, 0.8);
        QCOMPARE(t[0].unetMultiplier, 0.8);
        t = tags("<lora:n:1:0.5>");
        QCOMPARE(t[0].teMultiplier, 1.0);
        QCOMPARE(t[0].unetMultiplier, 0.5);
        t = tags("<lora:n:te=0:unet=1>");
        QCOMPARE(t[0].teMultiplier, 0.0);
        QCOMPARE(t[0].unetMultiplier, 1.0);
        t = tags("<lora:n:0.5:te=0.25>");  // unet defaults to te after te= replaced it
        QCOMPARE(t[0].teMultiplier, 0.25);
        QCOMPARE(t[0].unetMultiplier, 0.25);
        t = tags("<lora:n:0.5:unet=0.75>");
        QCOMPARE(t[0].teMultiplier, 0.5);
        QCOMPARE(t[0].unetMultiplier, 0.75);
        t = tags("<lora:n>");
        QCOMPARE(t[0].teMultiplier, 1.0);
        QVERIFY(!t[0].dyn);
        t = tags("<lora:n:1:1:16> <lora:m:dyn=8: 1_0.5e-1 >");
        QCOMPARE(t[0].dyn.value(), std::int64_t{16});
        QCOMPARE(t[1].dyn.value(), std::int64_t{8});
        QCOMPARE(t[1].teMultiplier, 1.05);
        // lookup_extra_networks: the kind seen first goes first, lyco being lora's alias.
        t = tags("<lyco:a> <lora:b> <hypernet:h> <lyco:c> <lora:d>");
        QCOMPARE(t.size(), std::size_t{4});
        QCOMPARE(t[0].name + t[1].name + t[2].name + t[3].name, std::string("acbd"));
        // '=' twice is positional, as split('=', 2) gives three parts.
        QCOMPARE(tags("<lora:a=b=c:1>")[0].name, std::string("a=b=c"));
        for (const char* bad : {"<lora:n:abc>", "<lora:n:1:x>", "<lora:n:te=>", "<lora:n:inf>", "<lora:n:1:1:2.5>",
                                "<lora:te=1>", "<lora::1>", "<lora:n:1e999>", "<lora:n:1__0>"}) {
            const std::string m = messageOf([&] { (void)tags(bad); });
            QVERIFY2(m.starts_with("prompt: "), (std::string(bad) + " -> " + m).c_str());
        }
    }

    void loraHashesValue() {
        QCOMPARE(loraHashesInfotext({{"add_detail", "7c6bad76eb54"}, {"more:, details", "3b8aa1d351ef"}}),
                 std::string("add_detail: 7c6bad76eb54, more details: 3b8aa1d351ef"));
        QCOMPARE(loraHashesInfotext({{"a", "111"}, {"b", "222"}, {"a", "333"}, {"", "444"}, {"c", ""}}),
                 std::string("a: 333, b: 222"));
        QCOMPARE(loraHashesInfotext({}), std::string());
    }

    // The digest follows the files' contents, the multipliers and the order; the set's is the same.
    void digest() {
        const LoraFile a = LoraFile::open(kDir + "/sd1_kohya.safetensors");
        const LoraFile b = LoraFile::open(kDir + "/sd1_lokr.safetensors");
        const std::vector<LoraApplication> ab{{&a, "a", 1.0, 0.5, std::nullopt}, {&b, "b", 1.0, 1.0, std::nullopt}};
        std::vector<LoraApplication> renamed = ab;
        renamed[0].name = "other";
        QCOMPARE(loraSetDigest(ab), loraSetDigest(renamed));
        std::vector<LoraApplication> ba{ab[1], ab[0]};
        QVERIFY(loraSetDigest(ab) != loraSetDigest(ba));
        std::vector<LoraApplication> weaker = ab;
        weaker[0].unetMultiplier = 0.5000000001;
        QVERIFY(loraSetDigest(ab) != loraSetDigest(weaker));
        LoraMergeOptions comfy;
        comfy.dora = DoraConvention::ComfyUI;
        QVERIFY(loraSetDigest(ab) != loraSetDigest(ab, comfy));
        QVERIFY(loraSetDigest({}).empty());
        QCOMPARE(loraSetDigest(ab).size(), std::size_t{64});
    }

    // A multiplier of 0 leaves its component alone; the modules are counted as skipped.
    void zeroMultiplier() {
        TinyModel model(cases().at("models").at("sd1"));
        const auto before = model.snapshot();
        const LoraFile f = LoraFile::open(kDir + "/sd1_kohya.safetensors");
        MergedLoraSet set = MergedLoraSet::merge(model.weights(), model.keys(), {{&f, "k", 0.0, 1.0, std::nullopt}});
        QCOMPARE(set.reports().at(0).modulesSkipped, std::size_t{5});
        QCOMPARE(set.reports().at(0).modulesMerged, std::size_t{11});
        const auto after = model.snapshot();
        for (const auto& [n, v] : before)
            if (n.starts_with("text_encoder/")) QVERIFY(after.at(n) == v);
        QCOMPARE(set.tensorsChanged(), std::size_t{11});
        QVERIFY(set.backupBytes() > 0);
    }

    // Modules whose factors do not fit their target are reported and not merged; a key that names
    // nothing is listed; an integer tensor is skipped by name.
    void misfits() {
        QTemporaryDir dir;
        const std::string path = dir.filePath("bad.safetensors").toStdString();
        const std::string q = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q";
        const std::string k = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_k";
        std::map<std::string, SafetensorsTensorData> t;
        const auto add = [&](const std::string& name, std::vector<std::int64_t> shape) {
            std::int64_t n = 1;
            for (const auto d : shape) n *= d;
            t[name] = {SafetensorsDtype::F32, shape,
                       encodeFloats(SafetensorsDtype::F32, std::vector<float>(static_cast<std::size_t>(n), 0.5f))};
        };
        add(q + ".lora_down.weight", {4, 16});
        add(q + ".lora_up.weight", {12, 4});  // to_q is [16, 16]
        add(k + ".lora_down.weight", {4, 16});
        add(k + ".lora_up.weight", {16, 3});  // rank 3 does not follow rank 4
        add("lora_unet_nothing.lora_down.weight", {1, 1});
        add("lora_unet_nothing.lora_up.weight", {1, 1});
        const std::string v = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_v";
        add(v + ".oft_blocks", {2, 8, 8});
        add(q + ".hada_w1_a", {16, 2});                    // a LoHa part beside a LoRA: not read, so reported
        add("lora_unet_conv_in.lora_up.weight", {16, 1});  // without its down
        t["steps"] = {SafetensorsDtype::I64, {}, std::vector<std::byte>(8)};
        writeSafetensors(path, t);
        TinyModel model(cases().at("models").at("sd1"));
        const auto before = model.snapshot();
        const LoraFile f = LoraFile::open(path);
        QCOMPARE(f.skipped().size(), std::size_t{1});
        EXPECT_CONTAINS(f.skipped()[0], "steps: dtype I64");
        MergedLoraSet set = MergedLoraSet::merge(model.weights(), model.keys(), {{&f, "bad", 1.0, 1.0, std::nullopt}});
        const LoraMergeReport& r = set.reports().at(0);
        QCOMPARE(r.modulesMerged, std::size_t{0});
        QCOMPARE(r.shapeMismatches.size(), std::size_t{2});
        EXPECT_CONTAINS(r.shapeMismatches[0] + r.shapeMismatches[1], "a delta of 12 rows and 192 elements for");
        EXPECT_CONTAINS(r.shapeMismatches[0] + r.shapeMismatches[1], "does not follow");
        QCOMPARE(r.unmatchedKeys,
                 (std::vector<std::string>{"lora_unet_conv_in.lora_up.weight", q + ".hada_w1_a",
                                           "lora_unet_nothing.lora_down.weight", "lora_unet_nothing.lora_up.weight"}));
        QCOMPARE(r.notMerged, (std::vector<std::string>{v + " (OFT)"}));
        QCOMPARE(r.skippedEntries.size(), std::size_t{1});
        QVERIFY(model.snapshot() == before);
    }

    // A file that changes under the merge: the error names it, and every tensor already changed is put
    // back.
    void failedReadRestores() {
        QTemporaryDir dir;
        const std::string path = dir.filePath("cut.safetensors").toStdString();
        std::filesystem::copy_file(kDir + "/sd1_kohya.safetensors", path);
        const LoraFile f = LoraFile::open(path);
        std::filesystem::resize_file(path, std::filesystem::file_size(path) - 64);
        TinyModel model(cases().at("models").at("sd1"));
        const auto before = model.snapshot();
        const std::string m = messageOf([&] {
            (void)MergedLoraSet::merge(model.weights(), model.keys(), {{&f, "cut", 1.0, 1.0, std::nullopt}});
        });
        EXPECT_CONTAINS(m, "cut.safetensors");
        QVERIFY(model.snapshot() == before);
    }

    void unreadableFiles() {
        QTemporaryDir dir;
        const std::string text = dir.filePath("text.safetensors").toStdString();
        std::ofstream(text) << "not a safetensors file";
        EXPECT_CONTAINS(messageOf([&] { (void)LoraFile::open(text); }), "text.safetensors");
        try {
            (void)LoraFile::open(dir.filePath("missing.pt").toStdString());
            QFAIL("opened a missing file");
        } catch (const LoraFileError& e) {
            QCOMPARE(e.field(), std::string("lora"));
        }
        QCOMPARE(std::string(toString(LoraContainer::TorchPickle)), std::string("pickle"));
        QVERIFY(parseDoraConvention("a1111") == DoraConvention::A1111);
        EXPECT_CONTAINS(messageOf([] { (void)parseDoraConvention("peft"); }), "lycoris, a1111, comfyui");
    }
};

QTEST_GUILESS_MAIN(TestLora)
#include "tst_lora.moc"
