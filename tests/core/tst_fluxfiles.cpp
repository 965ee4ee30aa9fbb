// FLUX.1 from the files users have (core/models/flux/FluxFiles.h, core/formats/ScaledFp8.h): the
// 8-bit floats read exactly (every bit pattern against the formats' formulas), BFL single files
// written here (a transformer with FLUX.1's 128-wide heads but one head, one block of each kind and
// narrow text widths) in F32/F16/BF16, plain fp8 and ComfyUI's scaled fp8, bare or under
// "model.diffusion_model.", read back to the expected values exactly and to the diffusers
// conversion's forward; ae.safetensors' LDM names (the fixture's small 16-channel VAE) alone or
// inside an all-in-one file; refusals that name the file and the tensor.
#include <QtTest>

#include <QTemporaryDir>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ErrorText.h"
#include "SingleFileTestSupport.h"
#include "core/cpu/CpuBackend.h"
#include "core/formats/ModelWeights.h"
#include "core/formats/Safetensors.h"
#include "core/formats/ScaledFp8.h"
#include "core/formats/TensorFile.h"
#include "core/models/flux/FluxFiles.h"
#include "core/models/flux/FluxGraph.h"
#include "core/models/flux/FluxTextFiles.h"
#include "core/models/flux/FluxWeights.h"
#include "core/models/sd/LdmNames.h"
#include "core/models/sd/SdModel.h"
#include "core/models/sd/SingleFilePlan.h"
#include "core/models/t5/T5Model.h"
#include "core/models/vae/VaeModel.h"
#include "core/text/T5Tokenizer.h"

using namespace tessera;
using tessera::testing::errorOf;
using TensorBytes = std::map<std::string, SafetensorsTensorData>;

namespace {

const std::string kFixtures = std::string(TESSERA_TEST_DATA) + "/flux";
constexpr const char* kComfy = "model.diffusion_model.";

// FLUX.1's head width (the only one fluxConfigFromShapes accepts), one head, one block of each kind.
FluxConfig smallConfig(bool dev = true) {
    FluxConfig c;
    c.layers = 1;
    c.singleLayers = 1;
    c.heads = 1;
    c.headDim = 128;
    c.jointAttentionDim = 32;
    c.pooledProjectionDim = 24;
    c.guidanceEmbeds = dev;
    return c;
}

bool sameConfig(const FluxConfig& a, const FluxConfig& b) {
    return a.inChannels == b.inChannels && a.outChannels == b.outChannels && a.layers == b.layers &&
           a.singleLayers == b.singleLayers && a.headDim == b.headDim && a.heads == b.heads &&
           a.jointAttentionDim == b.jointAttentionDim && a.pooledProjectionDim == b.pooledProjectionDim &&
           a.guidanceEmbeds == b.guidanceEmbeds && a.axesDimsRope == b.axesDimsRope;
}

// The formats' definitions, written out independently of the reader's bit arithmetic.
double e4m3Value(std::uint8_t bits) {
    const int sign = bits >> 7, e = (bits >> 3) & 15, m = bits & 7;
    if (e == 15 && m == 7) return NAN;
    const double magnitude = e == 0 ? (m / 8.0) * std::pow(2.0, -6) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
    return sign ? -magnitude : magnitude;
}
double e5m2Value(std::uint8_t bits) {
    const int sign = bits >> 7, e = (bits >> 2) & 31, m = bits & 3;
    double magnitude = 0;
    if (e == 31)
        magnitude = m == 0 ? INFINITY : NAN;
    else
        magnitude = e == 0 ? (m / 4.0) * std::pow(2.0, -14) : (1.0 + m / 4.0) * std::pow(2.0, e - 15);
    return sign ? -magnitude : magnitude;
}
double fp8Value(SafetensorsDtype dtype, std::uint8_t bits) {
    return dtype == SafetensorsDtype::F8_E4M3 ? e4m3Value(bits) : e5m2Value(bits);
}

// Same float32 bits (so -0 differs from +0), or both NaN.
bool sameFloat(float a, float b) {
    return (std::isnan(a) && std::isnan(b)) || std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

std::int64_t numelOf(const std::vector<std::int64_t>& shape) {
    std::int64_t n = 1;
    for (const auto d : shape) n *= d;
    return n;
}

// A float32 value as it reads back from a file of `dtype`.
float storedAs(SafetensorsDtype dtype, float x) {
    return dtype == SafetensorsDtype::F16    ? halfToFloat(floatToHalf(x))
           : dtype == SafetensorsDtype::BF16 ? bfloat16ToFloat(floatToBfloat16(x))
                                             : x;
}

// Random fp8 bytes that are finite numbers in `dtype`.
std::vector<std::byte> finiteFp8(SafetensorsDtype dtype, std::size_t n, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<std::byte> bytes(n);
    for (auto& b : bytes) {
        std::uint8_t v = 0;
        do v = static_cast<std::uint8_t>(rng() & 0xff);
        while (!std::isfinite(fp8Value(dtype, v)));
        b = std::byte{v};
    }
    return bytes;
}

// A Linear's weight: what ComfyUI's fp8 files store as 8-bit floats.
bool isLinearWeight(const std::string& name, const std::vector<std::int64_t>& shape) {
    return shape.size() == 2 && name.ends_with(".weight");
}

TensorBytes encoded(const std::map<std::string, HostTensor>& tensors, SafetensorsDtype dtype,
                    const std::string& prefix = "") {
    TensorBytes out;
    for (const auto& [name, t] : tensors) out[prefix + name] = {dtype, t.shape, encodeFloats(dtype, t.data)};
    return out;
}

// The fixture's small FLUX VAE ([8, 8, 16, 16], 16 latent channels, no quant convs) and the SD one.
const VaeModel& fluxFixtureVae() {
    static const VaeModel vae = VaeModel::load(kFixtures + "/vae");
    return vae;
}
const VaeModel& sdFixtureVae() {
    static const VaeModel vae = VaeModel::load(std::string(TESSERA_TEST_DATA) + "/sdpipeline/sd1");
    return vae;
}

// A VAE's tensors under ae.safetensors' LDM names (attention projections as 1x1 convolutions).
TensorBytes ldmVae(const VaeModel& vae, const std::string& prefix) {
    TensorBytes out;
    for (const auto& [name, t] : vae.tensors()) {
        std::vector<std::int64_t> shape = t.shape;
        if (name.find(".attentions.") != std::string::npos && shape.size() == 2) shape.insert(shape.end(), {1, 1});
        const std::string ldm = single_file::vaeLdmName(name, vae.config());
        out[prefix + ldm] = {SafetensorsDtype::F32, shape, encodeFloats(SafetensorsDtype::F32, t.data)};
    }
    return out;
}

TensorBytes merged(TensorBytes a, const TensorBytes& b) {
    a.insert(b.begin(), b.end());
    return a;
}

FluxFilesOptions smallOptions() {
    FluxFilesOptions o;
    o.digest = FileDigest::Skip;
    o.vae = fluxFixtureVae().config();
    return o;
}

// One forward of the transformer over a 4 x 4 latent tile with 3 text tokens.
std::vector<float> forward(const FluxConfig& config, const std::map<std::string, HostTensor>& tensors) {
    constexpr int tokens = 3, h = 4, w = 4;
    ModelGraph g = buildFluxGraph(config, tokens);
    std::mt19937 rng(11);
    std::normal_distribution<float> n;
    std::vector<float> sample(16 * h * w), text(tokens * config.jointAttentionDim), vec(config.pooledProjectionDim);
    for (auto* v : {&sample, &text, &vec})
        for (float& x : *v) x = n(rng);
    vec.push_back(3.5f);  // dev's guidance
    std::vector<float> timestep{500.0f};
    CpuBackend cpu(2);
    cpu.prepareGraph(g, tensors, 1, h, w);
    std::vector<float> out(static_cast<std::size_t>(g.elements(g.outputs()[0], 1, h, w)), NAN);
    std::vector<float*> outs{out.data()};
    cpu.run({sample.data(), timestep.data(), text.data(), vec.data()}, 1, outs);
    return out;
}

}  // namespace

class TestFluxFiles : public QObject {
    Q_OBJECT

    QTemporaryDir dir_;
    std::string path(const char* name) const { return dir_.filePath(name).toStdString(); }

    // The small transformer's random weights and a separate ae.safetensors beside it.
    std::map<std::string, HostTensor> weights(const FluxConfig& c, std::uint64_t seed = 3) const {
        return randomTensors(fluxParameters(c), seed);
    }
    std::string aeFile() const {
        const std::string p = path("ae.safetensors");
        if (!std::filesystem::exists(p)) writeSafetensors(p, ldmVae(fluxFixtureVae(), ""));
        return p;
    }
    FluxFilesModel load(const std::string& transformer, const std::string& vae = "") const {
        return loadFluxFiles({transformer, vae, "", ""}, smallOptions());
    }
    // A BFL file of the small model (F32) with `edit` applied to its tensors first.
    std::string writeEdited(const char* name, const std::function<void(TensorBytes&)>& edit) const {
        TensorBytes t = encoded(weights(smallConfig()), SafetensorsDtype::F32);
        edit(t);
        writeSafetensors(path(name), t);
        return path(name);
    }

private slots:
    void initTestCase() { QVERIFY(dir_.isValid()); }

    // ---- 8-bit floats ----

    void fp8EveryBitPattern_data() {
        QTest::addColumn<int>("dtype");
        QTest::newRow("F8_E4M3") << int(SafetensorsDtype::F8_E4M3);
        QTest::newRow("F8_E5M2") << int(SafetensorsDtype::F8_E5M2);
    }
    void fp8EveryBitPattern() {
        QFETCH(int, dtype);
        const auto d = static_cast<SafetensorsDtype>(dtype);
        std::vector<std::byte> bytes(256);
        for (int i = 0; i < 256; ++i) bytes[static_cast<std::size_t>(i)] = std::byte(i);
        const std::string p = path("fp8.safetensors");
        writeSafetensors(p, {{"all", {d, {2, 128}, bytes}}});
        const SafetensorsFile file(p);
        const auto values = file.readFloat32("all");
        QCOMPARE(values.size(), std::size_t{256});
        for (int i = 0; i < 256; ++i) {
            const auto bits = static_cast<std::uint8_t>(i);
            const auto want = static_cast<float>(fp8Value(d, bits));
            const float direct = d == SafetensorsDtype::F8_E4M3 ? float8E4M3ToFloat(bits) : float8E5M2ToFloat(bits);
            QVERIFY2(sameFloat(values[static_cast<std::size_t>(i)], want),
                     qPrintable(QString("bits 0x%1: read %2, expected %3")
                                    .arg(i, 2, 16, QChar('0'))
                                    .arg(double(values[static_cast<std::size_t>(i)]))
                                    .arg(double(want))));
            QVERIFY(sameFloat(direct, want));
        }
        // A row block of the tensor, and the same through TensorFile.
        const auto block = file.readFloat32(*file.find("all"), 100, 50);
        for (std::size_t i = 0; i < block.size(); ++i) QVERIFY(sameFloat(block[i], values[100 + i]));
        const TensorFile tf(p);
        const auto viaTensorFile = tf.readFloat32(*tf.find("all"));
        for (std::size_t i = 0; i < 256; ++i) QVERIFY(sameFloat(viaTensorFile[i], values[i]));
    }

    void fp8Landmarks() {
        QCOMPARE(float8E4M3ToFloat(0x7e), 448.0f);                // the largest
        QCOMPARE(float8E4M3ToFloat(0x01), std::ldexp(1.0f, -9));  // the smallest subnormal
        QCOMPARE(float8E4M3ToFloat(0x08), std::ldexp(1.0f, -6));  // the smallest normal
        QCOMPARE(float8E4M3ToFloat(0x38), 1.0f);
        QCOMPARE(float8E4M3ToFloat(0xb8), -1.0f);
        QVERIFY(std::isnan(float8E4M3ToFloat(0x7f)) && std::isnan(float8E4M3ToFloat(0xff)));
        QVERIFY(std::isfinite(float8E4M3ToFloat(0x78)));  // no infinity: 256
        QCOMPARE(float8E5M2ToFloat(0x7b), 57344.0f);
        QVERIFY(std::isinf(float8E5M2ToFloat(0x7c)) && std::isnan(float8E5M2ToFloat(0x7d)));
        QCOMPARE(float8E5M2ToFloat(0x01), std::ldexp(1.0f, -16));
        // Other 8-bit formats are still refused by name.
        const std::string p = path("fnuz.safetensors");
        writeSafetensors(p, {{"w", {SafetensorsDtype::F8_E4M3FNUZ, {4}, std::vector<std::byte>(4)}}});
        EXPECT_MESSAGE(errorOf([&] { (void)SafetensorsFile(p).readFloat32("w"); }), "has dtype F8_E4M3FNUZ");
    }

    // ---- BFL single files ----

    void detection() {
        const FluxConfig c = smallConfig();
        writeSafetensors(path("bare.safetensors"), encoded(weights(c), SafetensorsDtype::BF16));
        writeSafetensors(path("comfy.safetensors"), encoded(weights(c), SafetensorsDtype::BF16, kComfy));
        QVERIFY(isFluxSingleFile(path("bare.safetensors")));
        QVERIFY(isFluxSingleFile(path("comfy.safetensors")));
        QVERIFY(!isFluxSingleFile(aeFile()));
        QVERIFY(!isFluxSingleFile(kFixtures + "/transformer/diffusion_pytorch_model.safetensors"));
        QVERIFY(!isFluxSingleFile(kFixtures + "/transformer/config.json"));
        QVERIFY(!isFluxSingleFile(kFixtures));
        QVERIFY(!isFluxSingleFile(path("absent.safetensors")));
        QVERIFY(!isFluxSingleFile(""));
        const FluxSingleFileInfo info = inspectFluxSingleFile(path("comfy.safetensors"));
        QCOMPARE(info.prefix, std::string(kComfy));
        QVERIFY(sameConfig(info.config, c));
        QVERIFY(!info.hasVae);
    }

    void readsStoredValues_data() {
        QTest::addColumn<int>("dtype");
        QTest::addColumn<QString>("prefix");
        QTest::addColumn<bool>("dev");
        for (const auto d : {SafetensorsDtype::F32, SafetensorsDtype::F16, SafetensorsDtype::BF16})
            for (const char* prefix : {"", kComfy}) {
                const QString row = QString("%1 %2").arg(toString(d).data(), *prefix ? "comfy" : "bare");
                QTest::newRow(qPrintable(row + " dev")) << int(d) << QString(prefix) << true;
            }
        QTest::newRow("BF16 bare schnell") << int(SafetensorsDtype::BF16) << QString() << false;
    }
    void readsStoredValues() {
        QFETCH(int, dtype);
        QFETCH(QString, prefix);
        QFETCH(bool, dev);
        const auto d = static_cast<SafetensorsDtype>(dtype);
        const FluxConfig c = smallConfig(dev);
        const auto w = weights(c);
        writeSafetensors(path("t.safetensors"), encoded(w, d, prefix.toStdString()));
        const FluxFilesModel m = load(path("t.safetensors"), aeFile());
        QVERIFY(sameConfig(m.model->config, c));
        QCOMPARE(m.info.prefix, prefix.toStdString());
        QCOMPARE(m.model->tensors.size(), w.size());
        for (const auto& [name, t] : w) {
            const HostTensor& got = m.model->tensors.at(name);
            QCOMPARE(got.shape, t.shape);
            for (std::size_t i = 0; i < t.data.size(); ++i)
                QVERIFY2(got.data[i] == storedAs(d, t.data[i]), name.c_str());
        }
        QCOMPARE(m.transformer.storedDtypes.at(std::string(toString(d))), w.size());
        QVERIFY(m.transformer.fp8.empty() && m.transformer.scaled.empty());
        QCOMPARE(m.model->name, std::string("t"));
        QCOMPARE(m.files.vae, aeFile());
    }

    // Random diffusers weights converted to BFL's names (the mapping checked against diffusers in
    // tst_fluxtransformer), written as a BFL file and loaded: the same tensors, the same forward.
    void matchesTheDiffusersConversion() {
        const FluxConfig c = smallConfig();
        auto bfl = fluxTensorsFromDiffusers(c, randomTensors(fluxDiffusersTensors(c), 19));
        writeSafetensors(path("converted.safetensors"), encoded(bfl, SafetensorsDtype::F32, kComfy));
        const FluxFilesModel m = load(path("converted.safetensors"), aeFile());
        for (const auto& [name, t] : bfl) QVERIFY2(m.model->tensors.at(name).data == t.data, name.c_str());
        const auto expected = forward(c, bfl), got = forward(m.model->config, m.model->tensors);
        QVERIFY(std::all_of(expected.begin(), expected.end(), [](float x) { return std::isfinite(x); }));
        QVERIFY(expected == got);
    }

    void plainFp8() {
        const FluxConfig c = smallConfig();
        const auto w = weights(c);
        TensorBytes t;
        std::map<std::string, std::vector<float>> expected;
        std::uint32_t seed = 1;
        std::size_t fp8 = 0;
        for (const auto& [name, h] : w) {
            if (!isLinearWeight(name, h.shape)) {
                t[name] = {SafetensorsDtype::BF16, h.shape, encodeFloats(SafetensorsDtype::BF16, h.data)};
                continue;
            }
            // Kijai's files are E4M3; one E5M2 weight shows that each tensor's own dtype decides.
            const auto d = name == "txt_in.weight" ? SafetensorsDtype::F8_E5M2 : SafetensorsDtype::F8_E4M3;
            auto bytes = finiteFp8(d, h.data.size(), seed++);
            std::vector<float>& e = expected[name];
            for (const std::byte b : bytes)
                e.push_back(static_cast<float>(fp8Value(d, std::to_integer<std::uint8_t>(b))));
            t[name] = {d, h.shape, std::move(bytes)};
            ++fp8;
        }
        writeSafetensors(path("fp8.safetensors"), t);
        const FluxFilesModel m = load(path("fp8.safetensors"), aeFile());
        for (const auto& [name, values] : expected) QVERIFY2(m.model->tensors.at(name).data == values, name.c_str());
        for (const auto& [name, h] : w)
            if (!expected.contains(name))
                QVERIFY(m.model->tensors.at(name).data[0] == storedAs(SafetensorsDtype::BF16, h.data[0]));
        const WeightsReading& r = m.transformer;
        QCOMPARE(r.fp8.size(), fp8);
        QVERIFY(r.scaled.empty() && !r.scaledFp8);
        QCOMPARE(r.storedDtypes.at("F8_E5M2"), std::size_t{1});
        QCOMPARE(r.storedDtypes.at("F8_E4M3"), fp8 - 1);
        EXPECT_MESSAGE(r.describe(), std::to_string(fp8) + " fp8 tensors upcast as stored");
        EXPECT_MESSAGE(r.describe(), std::to_string(w.size()) + " tensors: ");
    }

    void scaledFp8() {
        const FluxConfig c = smallConfig();
        const auto w = weights(c);
        TensorBytes t;
        std::map<std::string, std::vector<float>> expected;
        std::mt19937 rng(5);
        std::uniform_real_distribution<float> scales(1e-3f, 0.1f);
        std::size_t fp8 = 0, scaled = 0, inputs = 0;
        for (const auto& [name, h] : w) {
            const std::string stored = kComfy + name;
            if (!isLinearWeight(name, h.shape)) {
                t[stored] = {SafetensorsDtype::BF16, h.shape, encodeFloats(SafetensorsDtype::BF16, h.data)};
                continue;
            }
            auto bytes = finiteFp8(SafetensorsDtype::F8_E4M3, h.data.size(), static_cast<std::uint32_t>(fp8 + 100));
            ++fp8;
            // ComfyUI's default for a missing scale is 1: one weight goes without.
            const bool hasScale = name != "img_in.weight";
            const float scale = hasScale ? scales(rng) : 1.0f;
            const std::string module = stored.substr(0, stored.size() - std::strlen(".weight"));
            if (hasScale) {
                t[module + ".scale_weight"] = {
                    SafetensorsDtype::F32, {}, encodeFloats(SafetensorsDtype::F32, {&scale, 1})};
                ++scaled;
            }
            if (name.starts_with("double_blocks.")) {
                const float in = 2.0f;
                t[module + ".scale_input"] = {SafetensorsDtype::F32, {}, encodeFloats(SafetensorsDtype::F32, {&in, 1})};
                ++inputs;
            }
            std::vector<float>& e = expected[name];
            for (const std::byte b : bytes)
                e.push_back(static_cast<float>(e4m3Value(std::to_integer<std::uint8_t>(b))) * scale);
            t[stored] = {SafetensorsDtype::F8_E4M3, h.shape, std::move(bytes)};
        }
        t[std::string(kComfy) + "scaled_fp8"] = {SafetensorsDtype::F8_E4M3, {0}, {}};
        writeSafetensors(path("scaled.safetensors"), merged(t, ldmVae(fluxFixtureVae(), "vae.")));
        const FluxFilesModel m = load(path("scaled.safetensors"));
        for (const auto& [name, values] : expected) QVERIFY2(m.model->tensors.at(name).data == values, name.c_str());
        const WeightsReading& r = m.transformer;
        QVERIFY(r.scaledFp8);
        QCOMPARE(r.markerDtype, std::string("F8_E4M3"));
        QCOMPARE(r.fp8.size(), fp8);
        QCOMPARE(r.scaled.size(), scaled);
        QCOMPARE(r.scaleInputsIgnored, inputs);
        QVERIFY(std::find(r.scaled.begin(), r.scaled.end(), "img_in.weight") == r.scaled.end());
        const std::string text = r.describe();
        EXPECT_MESSAGE(text, std::to_string(scaled) + " multiplied by their scale_weight");
        EXPECT_MESSAGE(text, "ComfyUI scaled fp8, marker F8_E4M3");
        EXPECT_MESSAGE(text, std::to_string(inputs) + " scale_inputs ignored");
        // Neither the marker nor the scales count as tensors outside the transformer.
        for (const auto& name : m.info.ignored) QVERIFY2(name.starts_with("vae."), name.c_str());
    }

    // The run record's words for each way a file can be read.
    void readingDescriptions() {
        WeightsReading plain;
        plain.storedDtypes = {{"BF16", 3}};
        QCOMPARE(plain.describe(), std::string("3 tensors: 3 BF16"));
        WeightsReading cast = plain;
        cast.storedDtypes["F8_E4M3"] = 2;
        cast.fp8 = {"a.weight", "b.weight"};
        QCOMPARE(cast.describe(), std::string("5 tensors: 3 BF16, 2 F8_E4M3; 2 fp8 tensors upcast as stored"));
        WeightsReading scaled = cast;
        scaled.scaled = {"a.weight"};
        scaled.scaledFp8 = true;
        scaled.markerDtype = "F32";
        scaled.scaleInputsIgnored = 1;
        QCOMPARE(scaled.describe(),
                 std::string("5 tensors: 3 BF16, 2 F8_E4M3; 2 fp8 tensors, 1 multiplied by their "
                             "scale_weight (ComfyUI scaled fp8, marker F32); 1 scale_input ignored"));
    }

    // ---- refusals of transformer files ----

    void transformerRefusals_data() {
        QTest::addColumn<QString>("case_");
        QTest::addColumn<QString>("message");
        QTest::newRow("missing") << "missing"
                                 << "missing tensor 'double_blocks.0.txt_attn.proj.bias', expected shape [128]";
        QTest::newRow("shape") << "shape"
                               << "tensor 'double_blocks.0.txt_mlp.0.weight': expected [512, 128], found [511, 128]";
        QTest::newRow("fill") << "fill"
                              << "'img_in.weight' takes 384 features per token";
        QTest::newRow("dtype") << "dtype"
                               << "tensor 'final_layer.linear.bias' has dtype I32; FLUX.1 weights must be F32, F16, "
                                  "BF16, F8_E4M3 or F8_E5M2";
        QTest::newRow("unknown") << "unknown"
                                 << "tensor 'double_blocks.0.img_attn.extra.weight' [4] belongs to no part of a "
                                    "flux-dev transformer";
        QTest::newRow("blocks") << "blocks"
                                << "block count 10000 is outside 1..256";
        QTest::newRow("scale shape") << "scale shape"
                                     << "tensor 'img_in.scale_weight' has shape [2]; a scaled-fp8 scale is one value";
        QTest::newRow("scale nan") << "scale nan"
                                   << "tensor 'img_in.scale_weight' holds NaN";
        QTest::newRow("fp8 nan") << "fp8 nan"
                                 << "tensor 'txt_in.weight' (F8_E4M3) holds a non-finite value (NaN) at element 5";
        QTest::newRow("no head") << "no head"
                                 << "no tensor 'img_in.weight'";
        QTest::newRow("no width") << "no width"
                                  << "head count 0 is outside 1..256";
    }
    void transformerRefusals() {
        QFETCH(QString, case_);
        QFETCH(QString, message);
        const std::string k = case_.toStdString();
        const std::string p = writeEdited("bad.safetensors", [&](TensorBytes& t) {
            auto f32 = [](std::vector<std::int64_t> shape, float v = 0.5f) {
                return SafetensorsTensorData{
                    SafetensorsDtype::F32, shape,
                    encodeFloats(SafetensorsDtype::F32,
                                 std::vector<float>(static_cast<std::size_t>(numelOf(shape)), v))};
            };
            if (k == "missing") t.erase("double_blocks.0.txt_attn.proj.bias");
            if (k == "shape") t["double_blocks.0.txt_mlp.0.weight"] = f32({511, 128});
            if (k == "fill") t["img_in.weight"] = f32({128, 384});
            if (k == "dtype") t["final_layer.linear.bias"] = {SafetensorsDtype::I32, {64}, std::vector<std::byte>(256)};
            if (k == "unknown") t["double_blocks.0.img_attn.extra.weight"] = f32({4});
            if (k == "blocks") t["double_blocks.9999.img_attn.extra.weight"] = f32({4});
            if (k == "scale shape") t["img_in.scale_weight"] = f32({2});
            if (k == "scale nan") t["img_in.scale_weight"] = f32({}, NAN);
            if (k == "fp8 nan") {
                std::vector<std::byte> bytes(128 * 32, std::byte{0x38});
                bytes[5] = std::byte{0x7f};
                t["txt_in.weight"] = {SafetensorsDtype::F8_E4M3, {128, 32}, bytes};
            }
            if (k == "no head") t.erase("img_in.weight");
            if (k == "no width") {
                t["img_in.weight"] = f32({0, 64});
                t["img_in.bias"] = f32({0});
            }
        });
        const std::string error = errorOf([&] { (void)load(p, aeFile()); });
        qInfo("%s", error.c_str());
        EXPECT_MESSAGE(error, "bad.safetensors");
        EXPECT_MESSAGE(error, message.toStdString());
        QVERIFY2(error.starts_with("[model] "), error.c_str());
    }

    void truncatedAndForeignFiles() {
        const std::string p = writeEdited("cut.safetensors", [](TensorBytes&) {});
        std::filesystem::resize_file(p, std::filesystem::file_size(p) - 100);
        EXPECT_MESSAGE(errorOf([&] { (void)load(p, aeFile()); }), "truncated");
        QVERIFY(!isFluxSingleFile(p));

        // ae.safetensors given as the transformer; diffusers' transformer file; a folder.
        EXPECT_MESSAGE(errorOf([&] { (void)load(aeFile(), aeFile()); }),
                       "not a FLUX.1 transformer: no 'double_blocks.0.img_attn.norm.key_norm.scale'");
        EXPECT_MESSAGE(errorOf([&] { (void)load(kFixtures + "/transformer/diffusion_pytorch_model.safetensors"); }),
                       "a FLUX transformer under diffusers' names; give the FluxPipeline folder");
        EXPECT_MESSAGE(errorOf([&] { (void)load(kFixtures); }), "a folder");
        EXPECT_MESSAGE(errorOf([&] { (void)load(path("absent.safetensors")); }), "absent.safetensors");
    }

    // FLUX.1's real widths (from the spec's table of BFL shapes) with one block of each kind: the
    // header alone is read (the data is a sparse hole).
    void fullWidthHeaderOnly_data() {
        QTest::addColumn<bool>("dev");
        QTest::newRow("dev") << true;
        QTest::newRow("schnell") << false;
    }
    void fullWidthHeaderOnly() {
        QFETCH(bool, dev);
        FluxConfig full;
        full.layers = full.singleLayers = 1;
        full.guidanceEmbeds = dev;
        const auto params = fluxParameters(full);
        const std::map<std::string, std::vector<std::int64_t>> table{
            {"img_in.weight", {3072, 64}},
            {"txt_in.weight", {3072, 4096}},
            {"vector_in.in_layer.weight", {3072, 768}},
            {"double_blocks.0.img_mod.lin.weight", {18432, 3072}},
            {"double_blocks.0.txt_attn.qkv.weight", {9216, 3072}},
            {"double_blocks.0.img_attn.norm.key_norm.scale", {128}},
            {"double_blocks.0.img_mlp.2.weight", {3072, 12288}},
            {"single_blocks.0.linear1.weight", {21504, 3072}},
            {"single_blocks.0.linear2.weight", {3072, 15360}},
            {"single_blocks.0.modulation.lin.weight", {9216, 3072}},
            {"final_layer.adaLN_modulation.1.weight", {6144, 3072}},
            {"final_layer.linear.weight", {64, 3072}},
        };
        for (const auto& wanted : table) {
            const std::string& name = wanted.first;  // clang 14 lambdas cannot capture structured bindings
            const auto it = std::find_if(params.begin(), params.end(), [&](const auto& p) { return p.first == name; });
            QVERIFY2(it != params.end() && it->second == wanted.second, name.c_str());
        }
        TensorList prefixed;
        for (const auto& [name, shape] : params) prefixed.emplace_back(kComfy + name, shape);
        single_file_test::writeHeaderOnly(path("full.safetensors"), prefixed);
        QVERIFY(isFluxSingleFile(path("full.safetensors")));
        const FluxSingleFileInfo info = inspectFluxSingleFile(path("full.safetensors"));
        QCOMPARE(info.config.heads, 24);
        QCOMPARE(info.config.hidden(), 3072);
        QCOMPARE(info.config.mlpHidden(), 12288);
        QCOMPARE(info.config.jointAttentionDim, 4096);
        QCOMPARE(info.config.pooledProjectionDim, 768);
        QCOMPARE(info.config.guidanceEmbeds, dev);
        QCOMPARE(info.config.variant(), std::string(dev ? "flux-dev" : "flux-schnell"));
        std::filesystem::remove(path("full.safetensors"));
    }

    // ---- the VAE ----

    void fluxVaeConfigIsAeSafetensors() {
        const VaeConfig c = fluxVaeConfig();
        QCOMPARE(c.blockOutChannels, (std::vector<int>{128, 256, 512, 512}));
        QCOMPARE(c.layersPerBlock, 2);
        QCOMPARE(c.latentChannels, 16);
        QCOMPARE(c.normNumGroups, 32);
        QCOMPARE(c.scalingFactor, 0.3611f);
        QCOMPARE(c.shiftFactor.value_or(0.0f), 0.1159f);
        QVERIFY(!c.useQuantConv && !c.usePostQuantConv);
        QCOMPARE(c.scaleFactor(), 8);
        // ae.safetensors' names and shapes (BFL modules/autoencoder.py), 83,819,683 parameters.
        const single_file::SingleFilePlan plan = single_file::ldmVaePlan("", c);
        std::map<std::string, std::vector<std::int64_t>> stored;
        std::int64_t parameters = 0;
        for (const auto& b : plan.bindings) {
            stored[b.stored] = b.shape;
            parameters += numelOf(b.shape);
        }
        QCOMPARE(parameters, std::int64_t{83'819'683});
        QCOMPARE(stored.at("encoder.conv_out.weight"), (std::vector<std::int64_t>{32, 512, 3, 3}));
        QCOMPARE(stored.at("decoder.conv_in.weight"), (std::vector<std::int64_t>{512, 16, 3, 3}));
        QCOMPARE(stored.at("decoder.up.0.block.2.conv2.weight"), (std::vector<std::int64_t>{128, 128, 3, 3}));
        QVERIFY(stored.contains("encoder.mid.attn_1.q.weight"));
        QVERIFY(!stored.contains("quant_conv.weight") && !stored.contains("post_quant_conv.weight"));
    }

    void aeSafetensorsLoads() {
        writeSafetensors(path("t.safetensors"), encoded(weights(smallConfig()), SafetensorsDtype::BF16));
        const FluxFilesModel m = load(path("t.safetensors"), aeFile());
        QCOMPARE(m.vaePrefix, std::string());
        const VaeModel& vae = *m.model->vae;
        QCOMPARE(vae.config().latentChannels, 16);
        QCOMPARE(vae.config().shiftFactor.value_or(0.0f), 0.1159f);
        for (const auto& [name, t] : fluxFixtureVae().tensors())
            QVERIFY2(vae.tensors().at(name).data == t.data, name.c_str());
    }

    // A ComfyUI all-in-one file: transformer, VAE and text encoders in one; the text encoders'
    // files are recorded for their loader.
    void allInOneFile() {
        TensorBytes t = encoded(weights(smallConfig()), SafetensorsDtype::BF16, kComfy);
        t = merged(t, ldmVae(fluxFixtureVae(), "vae."));
        t["text_encoders.clip_l.transformer.text_model.final_layer_norm.weight"] = {
            SafetensorsDtype::F32, {4}, encodeFloats(SafetensorsDtype::F32, std::vector<float>(4, 1.0f))};
        writeSafetensors(path("aio.safetensors"), t);
        FluxFilesOptions o = smallOptions();
        o.digest = FileDigest::Compute;
        std::vector<LoadProgress> seen;
        o.progress = [&](const LoadProgress& p) { seen.push_back(p); };
        const FluxFilesModel m =
            loadFluxFiles({path("aio.safetensors"), "", "clip_l.safetensors", "t5xxl.safetensors"}, o);
        QVERIFY(inspectFluxSingleFile(path("aio.safetensors")).hasVae);
        QCOMPARE(m.files.vae, path("aio.safetensors"));
        QCOMPARE(m.files.clip, std::string("clip_l.safetensors"));
        QCOMPARE(m.files.t5, std::string("t5xxl.safetensors"));
        QCOMPARE(m.vaePrefix, std::string("vae."));
        QCOMPARE(m.vaePart.tensors, fluxFixtureVae().tensors().size());
        QCOMPARE(m.vaePart.storedDtypes.at("F32"), m.vaePart.tensors);
        QCOMPARE(m.model->sha256.size(), std::size_t{64});
        QVERIFY(m.vaeSha256.empty());  // the same file
        for (const auto& [name, v] : fluxFixtureVae().tensors())
            QVERIFY2(m.model->vae->tensors().at(name).data == v.data, name.c_str());
        QVERIFY(std::find(m.info.ignored.begin(), m.info.ignored.end(),
                          "text_encoders.clip_l.transformer.text_model.final_layer_norm.weight") !=
                m.info.ignored.end());
        QVERIFY(!seen.empty());
        for (std::size_t i = 1; i < seen.size(); ++i) QVERIFY(seen[i].done >= seen[i - 1].done);
        QCOMPARE(seen.back().done, seen.back().total);
        QVERIFY(std::any_of(seen.begin(), seen.end(), [](const auto& p) { return p.phase == "reading the VAE"; }));
        // A separate VAE given beside an all-in-one file is the one read.
        const FluxFilesModel separate = loadFluxFiles({path("aio.safetensors"), aeFile(), "", ""}, o);
        QCOMPARE(separate.files.vae, aeFile());
        QCOMPARE(separate.vaeSha256.size(), std::size_t{64});
    }

    // A transformer file, ae.safetensors and the text encoders' files (CLIP-L under "text_model.",
    // T5 under transformers' names with spiece.model beside it), either order: the model's text
    // encoders hold the files' values and encode a prompt to the transformer's widths.
    void textEncoderFiles() {
        setBundledClipVocabulary(TESSERA_SOURCE_DIR "/resources/clip/bpe_simple_vocab_16e6.txt.gz");
        const FluxConfig config = smallConfig();
        writeSafetensors(path("te.safetensors"), encoded(weights(config), SafetensorsDtype::BF16));
        ClipTextConfig clip;
        clip.hiddenSize = config.pooledProjectionDim;
        clip.intermediateSize = 32;
        clip.numHiddenLayers = 2;
        clip.numAttentionHeads = 1;
        clip.projectionDim = clip.hiddenSize;
        clip.eosTokenId = 2;
        const auto clipTensors = randomTensors(ClipTextModel::expectedTensors(clip), 11);
        writeSafetensors(path("clip_l.safetensors"), encoded(clipTensors, SafetensorsDtype::F32));
        const std::string spiece = std::string(TESSERA_TEST_DATA) + "/t5/spiece.model";
        T5Config t5;
        t5.vocabSize = T5Tokenizer(spiece).vocabSize();
        t5.dModel = config.jointAttentionDim;
        t5.dKv = 8;
        t5.numHeads = 2;
        t5.dFf = 24;
        t5.numLayers = 2;
        std::filesystem::create_directories(path("t5"));
        writeSafetensors(path("t5/t5xxl.safetensors"),
                         encoded(randomTensors(T5Model::expectedTensors(t5), 12), SafetensorsDtype::F16));
        QVERIFY(QFile::copy(QString::fromStdString(spiece), QString::fromStdString(path("t5/spiece.model"))));
        QCOMPARE(textEncoderFileKind(path("clip_l.safetensors")), TextEncoderFileKind::ClipL);
        QCOMPARE(textEncoderFileKind(path("t5/t5xxl.safetensors")), TextEncoderFileKind::T5);
        const auto m = loadFluxFromFiles(path("te.safetensors"), aeFile(),
                                         {path("t5/t5xxl.safetensors"), path("clip_l.safetensors")}, smallOptions());
        QVERIFY(m->hasTextEncoders());
        for (const auto& [name, t] : clipTensors) QVERIFY2(m->clip->tensors().at(name).data == t.data, name.c_str());
        CpuBackend cpu(2);
        const FluxConditioning c = encodeFluxPrompt(*m, cpu, "a red fox in the snow", 3.5f);
        QCOMPARE(c.pooled.size(), std::size_t(24));
        QCOMPARE(c.text.size(), std::size_t(512) * 32);

        auto errorOf = [](const std::function<void()>& f) {
            try {
                f();
            } catch (const std::exception& e) {
                return std::string(e.what());
            }
            return std::string("<no error>");
        };
        std::string what = errorOf(
            [&] { loadFluxFromFiles(path("te.safetensors"), aeFile(), {path("clip_l.safetensors")}, smallOptions()); });
        QVERIFY2(what.find("no T5 text encoder file") != std::string::npos, what.c_str());
        what = errorOf([&] {
            loadFluxFromFiles(path("te.safetensors"), aeFile(),
                              {path("clip_l.safetensors"), path("clip_l.safetensors")}, smallOptions());
        });
        QVERIFY2(what.find("a second CLIP text encoder") != std::string::npos, what.c_str());
        what = errorOf([&] {
            loadFluxFromFiles(path("te.safetensors"), aeFile(), {aeFile(), path("clip_l.safetensors")}, smallOptions());
        });
        QVERIFY2(what.find("neither a CLIP-L nor a T5") != std::string::npos, what.c_str());
        QVERIFY(QFile::remove(QString::fromStdString(path("t5/spiece.model"))));
        what = errorOf([&] {
            loadFluxFromFiles(path("te.safetensors"), aeFile(),
                              {path("clip_l.safetensors"), path("t5/t5xxl.safetensors")}, smallOptions());
        });
        QVERIFY2(what.find("no T5 tokenizer beside it") != std::string::npos, what.c_str());
    }

    void vaeRefusals() {
        writeSafetensors(path("t.safetensors"), encoded(weights(smallConfig()), SafetensorsDtype::BF16));
        const std::string t = path("t.safetensors");
        EXPECT_MESSAGE(errorOf([&] { (void)load(t); }),
                       "t.safetensors': no VAE; give --vae ae.safetensors (the 16-channel FLUX.1 VAE)");
        // An SD VAE (4 latent channels, quant convs) beside the transformer.
        writeSafetensors(path("sd_vae.safetensors"), ldmVae(sdFixtureVae(), ""));
        const std::string sd = errorOf([&] { (void)load(t, path("sd_vae.safetensors")); });
        qInfo("%s", sd.c_str());
        EXPECT_MESSAGE(sd, "sd_vae.safetensors");
        EXPECT_MESSAGE(sd, "the VAE has 4 latent channels; the transformer reads 16");
        // A tensor missing from ae.safetensors; a file without a VAE.
        TensorBytes vae = ldmVae(fluxFixtureVae(), "");
        vae.erase("decoder.conv_out.bias");
        writeSafetensors(path("cut_ae.safetensors"), vae);
        const std::string missing = errorOf([&] { (void)load(t, path("cut_ae.safetensors")); });
        qInfo("%s", missing.c_str());
        EXPECT_MESSAGE(missing, "cut_ae.safetensors': does not fit the FLUX.1 VAE");
        EXPECT_MESSAGE(missing, "decoder.conv_out.bias");
        EXPECT_MESSAGE(errorOf([&] { (void)load(t, t); }), "not a VAE: no 'encoder.down.0.block.0.conv1.weight'");
    }
};

QTEST_GUILESS_MAIN(TestFluxFiles)
#include "tst_fluxfiles.moc"
