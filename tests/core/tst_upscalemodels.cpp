// Upscale models (core/models/upscale/) against spandrel: each fixture of tests/data/upscale
// (tools/reference/make_upscale_fixtures.py: random-weight ESRGAN in its three layouts, ESRGAN+,
// pixel-unshuffled inputs, x8, Compact x3/x4, SPAN with and without normalisation and eval_conv) is
// detected with spandrel's hyperparameters and runs on the CPU engine to spandrel's float64 output
// (relative L2 <= 1e-5, unclamped; and to its clamped __call__). Refusals: families Tessera does not
// run, unknown keys, missing / mis-shaped / unexpected keys, wrappers. The tiler
// (core/sampling/UpscaleTiler.h): ComfyUI's tiled_scale_multidim reimplemented here in double over a
// position-dependent fake model, crop tiling equal to the untiled output (Compact with an overlap of
// twice its receptive radius), feathered tiling of a model without spatial context equal to it, the
// difference and the seam score of a feathered upscale of a real model, and the memory budget.
#include <QtTest/QtTest>

#include <cmath>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/FormatNumber.h"
#include "core/cpu/CpuUpscaler.h"
#include "core/formats/ModelWeights.h"
#include "core/formats/Safetensors.h"
#include "core/models/upscale/SpanGraph.h"
#include "core/models/upscale/StateDict.h"
#include "core/models/upscale/UpscaleModel.h"
#include "core/sampling/SeamScore.h"
#include "core/sampling/UpscaleTiler.h"
#include "tests/core/NumericCompare.h"

using namespace tessera;

namespace {

const std::string kFixtures = TESSERA_TEST_DATA "/upscale";
const char* kCases[] = {"esrgan_old_x4",
                        "esrgan_basicsr_x2_unshuffle",
                        "esrgan_basicsr_x1_unshuffle4",
                        "esrgan_trunk_x8",
                        "esrgan_plus_x4",
                        "compact_x4",
                        "compact_x3",
                        "span_x4",
                        "span_x2_nonorm_noeval"};

nlohmann::json meta(const std::string& name) {
    std::ifstream in(kFixtures + "/" + name + "/meta.json");
    return nlohmann::json::parse(in);
}

ImageTensor tensorImage(const SafetensorsFile& f, const char* name) {
    const SafetensorsTensorInfo* t = f.find(name);
    ImageTensor im;
    im.channels = static_cast<int>(t->shape[1]);
    im.height = static_cast<int>(t->shape[2]);
    im.width = static_cast<int>(t->shape[3]);
    im.data = f.readFloat32(*t);
    return im;
}

double maxAbs(const std::vector<float>& a, const std::vector<float>& b) {
    double m = 0;
    for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
    return a.size() == b.size() ? m : INFINITY;
}

ImageTensor randomImage(int channels, int h, int w, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    ImageTensor im{channels, h, w, std::vector<float>(std::size_t(channels) * h * w)};
    for (float& v : im.data) v = u(rng);
    return im;
}

UpscaleTiling untiled(bool clamp) {
    UpscaleTiling t;
    t.tile = 4096;
    t.overlap = 0;
    t.clamp = clamp;
    return t;
}

// The fixture's tensors as a map, to edit before loading.
TensorMap fileTensors(const std::string& path) {
    const SafetensorsFile f(path);
    TensorMap m;
    for (const SafetensorsTensorInfo& t : f.tensors()) m[t.name] = HostTensor{t.shape, f.readFloat32(t)};
    return m;
}

std::string loadError(TensorMap tensors) {
    try {
        UpscaleModel::load(StateDict::fromTensors(std::move(tensors), "edited.safetensors"));
    } catch (const ModelError& e) {
        return e.what();
    }
    return "";
}

// A backend that "upscales" by nearest neighbour plus a ramp of the tile-local position, so that
// overlapping tiles disagree and the blending shows; it counts its calls.
class PositionBackend : public Backend {
public:
    int scale = 1, channels = 1, h = 0, w = 0, calls = 0;
    BackendInfo info() const override { return {"fake", "position ramp"}; }
    void prepareGraph(const ModelGraph&, const TensorMap&, int, int tileH, int tileW) override {
        h = tileH;
        w = tileW;
    }
    static float value(float in, int y, int x) { return in + 0.01f * float(y % 7) - 0.02f * float(x % 5); }
    void run(const std::vector<const float*>& inputs, int, const std::vector<float*>& outputs) override {
        ++calls;
        const int ih = h / scale, iw = w / scale;
        for (int c = 0; c < channels; ++c)
            for (int y = 0; y < h; ++y)
                for (int x = 0; x < w; ++x)
                    outputs[0][(std::size_t(c) * h + y) * w + x] =
                        value(inputs[0][(std::size_t(c) * ih + y / scale) * iw + x / scale], y, x);
    }
    void prepare(const UNetModel&, int, int, int) override {}
    void forward(const float*, const float*, int, float*) override {}
};

class FakeDevice : public BackendUpscaleDevice {
public:
    PositionBackend fake;
    Backend& backend() override { return fake; }
    std::uint64_t tileBytes(const UpscaleModel&, int batch, int outH, int outW) const override {
        return std::uint64_t(outH) * outW * 1000 * batch;
    }
};

// A Compact model of random weights (or zero convolutions: then the output is the input upsampled
// nearest, a model without spatial context).
UpscaleModel compactModel(int features, int convs, int scale, bool zero, std::uint32_t seed) {
    UpscaleConfig c;
    c.architecture = UpscaleArchitecture::Compact;
    c.features = features;
    c.blocks = convs;
    c.scale = scale;
    const ModelGraph g = buildUpscaleGraph(c);
    std::mt19937 rng(seed);
    std::normal_distribution<float> n(0.0f, 0.15f);
    TensorMap w;
    for (const GraphParam& p : g.params()) {
        HostTensor t{p.shape, std::vector<float>(static_cast<std::size_t>(HostTensor{p.shape, {}}.numel()))};
        for (float& v : t.data) v = zero ? 0.0f : n(rng);
        w[p.name] = std::move(t);
    }
    return UpscaleModel(c, std::move(w), "compact");
}

}  // namespace

class TestUpscaleModels : public QObject {
    Q_OBJECT

private slots:
    void detectsAsSpandrel_data() {
        QTest::addColumn<QString>("name");
        for (const char* c : kCases) QTest::newRow(c) << QString(c);
    }
    void detectsAsSpandrel() {
        QFETCH(QString, name);
        const nlohmann::json m = meta(name.toStdString());
        const UpscaleModel model = UpscaleModel::loadFile(kFixtures + "/" + name.toStdString() + "/model.safetensors");
        const UpscaleConfig& c = model.config();
        const nlohmann::json& built = m["built_with"];
        QCOMPARE(std::string(toString(c.architecture)), m["architecture"].get<std::string>());
        QCOMPARE(c.scale, m["scale"].get<int>());
        QCOMPARE(c.inChannels, m["input_channels"].get<int>());
        QCOMPARE(c.outChannels, m["output_channels"].get<int>());
        QCOMPARE(c.features, built["nf"].get<int>());
        QCOMPARE(c.unshuffle, built.value("shuffle", 1));
        QCOMPARE(model.sizeRequirements().padded(1), std::max(1, m["size_requirements"]["minimum"].get<int>()));
        QCOMPARE(model.sizeRequirements().multipleOf, m["size_requirements"]["multiple_of"].get<int>());
        if (c.architecture == UpscaleArchitecture::Esrgan) {
            QCOMPARE(c.blocks, built["nb"].get<int>());
            QCOMPARE(c.plus, built["arch"] == "ESRGAN+");
            const std::string layout = built.value("layout", "old");
            QCOMPARE(c.layout, layout == "basicsr"      ? EsrganLayout::BasicSr
                               : layout == "RRDB_trunk" ? EsrganLayout::Kair
                                                        : EsrganLayout::Original);
        }
        if (c.architecture == UpscaleArchitecture::Compact) QCOMPARE(c.blocks, built["num_conv"].get<int>());
        if (c.architecture == UpscaleArchitecture::Span) QCOMPARE(c.norm, built["norm"].get<bool>());
        qInfo("%s: %s", qPrintable(name), model.description().c_str());
    }

    void descriptions() {
        const UpscaleModel old = UpscaleModel::loadFile(kFixtures + "/esrgan_old_x4/model.safetensors");
        QCOMPARE(old.description(), std::string("ESRGAN 4x, 8 features, 2 blocks"));
        QCOMPARE(UpscaleModel::loadFile(kFixtures + "/esrgan_basicsr_x2_unshuffle/model.safetensors").description(),
                 std::string("ESRGAN 2x, 8 features, 1 blocks, pixel-unshuffle 2"));
        QCOMPARE(UpscaleModel::loadFile(kFixtures + "/compact_x3/model.safetensors").description(),
                 std::string("Real-ESRGAN Compact 3x, 8 features, 3 convolutions"));
        QCOMPARE(UpscaleModel::loadFile(kFixtures + "/span_x2_nonorm_noeval/model.safetensors").description(),
                 std::string("SPAN 2x, 8 features, no input normalisation"));
        UpscaleConfig ultra;  // 4x-UltraSharp's shape
        QCOMPARE(ultra.describe(), std::string("ESRGAN 4x, 64 features, 23 blocks"));
    }

    void matchesSpandrel_data() { detectsAsSpandrel_data(); }
    void matchesSpandrel() {
        QFETCH(QString, name);
        const std::string dir = kFixtures + "/" + name.toStdString();
        const UpscaleModel model = UpscaleModel::loadFile(dir + "/model.safetensors");
        const SafetensorsFile io(dir + "/io.safetensors");
        const ImageTensor input = tensorImage(io, "input");
        const ImageTensor want64 = tensorImage(io, "output64"), clamped = tensorImage(io, "clamped");
        CpuUpscaler cpu(2);
        const ImageTensor out = cpu.upscale(model, input, untiled(false));
        QCOMPARE(out.height, want64.height);
        QCOMPARE(out.width, want64.width);
        const double rel = relativeL2(out.data, want64.data);
        qInfo("%s: relative L2 vs spandrel float64 %.3g (spandrel float32 vs float64 %.3g)", qPrintable(name), rel,
              meta(name.toStdString())["relative_l2_output64_vs_output"].get<double>());
        QVERIFY2(rel <= 1e-5, qPrintable(QString::number(rel)));
        const ImageTensor outClamped = cpu.upscale(model, input, untiled(true));
        QVERIFY(maxAbs(outClamped.data, clamped.data) < 1e-4);
        for (float v : outClamped.data) QVERIFY(v >= 0.0f && v <= 1.0f);
    }

    void halfPrecisionFile() {
        const UpscaleModel half = UpscaleModel::loadFile(kFixtures + "/esrgan_old_x4/model_fp16.safetensors");
        QCOMPARE(half.description(), std::string("ESRGAN 4x, 8 features, 2 blocks"));
        const SafetensorsFile io(kFixtures + "/esrgan_old_x4/io.safetensors");
        CpuUpscaler cpu(2);
        const ImageTensor out = cpu.upscale(half, tensorImage(io, "input"), untiled(false));
        QVERIFY(relativeL2(out.data, tensorImage(io, "output64").data) < 1e-2);  // weights rounded to fp16
        // The same model from zip and legacy PyTorch checkpoints, read by the restricted reader:
        // the weights bit-equal to the safetensors file's, and the run record told how it was read.
        const UpscaleModel fromSafetensors = UpscaleModel::loadFile(kFixtures + "/compact_x4/model.safetensors");
        QVERIFY(fromSafetensors.readNote().empty());
        for (const char* name : {"/compact_x4/model.pth", "/compact_x4/model_legacy.pth"}) {
            const UpscaleModel fromPickle = UpscaleModel::loadFile(kFixtures + name);
            QVERIFY2(fromPickle.readNote().find("restricted reader") != std::string::npos,
                     fromPickle.readNote().c_str());
            QCOMPARE(fromPickle.description(), fromSafetensors.description());
            for (const auto& [key, tensor] : fromSafetensors.tensors()) {
                const auto it = fromPickle.tensors().find(key);
                QVERIFY2(it != fromPickle.tensors().end(), key.c_str());
                QVERIFY2(it->second.data == tensor.data, key.c_str());
            }
        }
        const UpscaleModel wrapped = UpscaleModel::loadFile(kFixtures + "/esrgan_basicsr_x2_unshuffle/model.pth");
        QCOMPARE(wrapped.scale(), 2);
    }

    void refusesOtherFamilies() {
        TensorMap swinir;
        for (const char* k : {"layers.0.residual_group.blocks.0.norm1.weight", "conv_first.weight",
                              "layers.0.residual_group.blocks.0.mlp.fc1.bias",
                              "layers.0.residual_group.blocks.0.attn.relative_position_index"})
            swinir[k] = HostTensor{{1}, {0.0f}};
        QVERIFY(loadError(swinir).find("a SwinIR model") != std::string::npos);
        TensorMap dat = swinir;
        dat.clear();
        for (const char* k : {"conv_first.weight", "before_RG.1.weight", "layers.0.blocks.0.attn.attns.0.rpe_biases",
                              "layers.0.blocks.0.ffn.sg.conv.weight"})
            dat[k] = HostTensor{{1}, {0.0f}};
        QVERIFY(loadError(dat).find("a DAT model") != std::string::npos);
        TensorMap omni{{"residual_layer.0.residual_layer.0.layer.0.fn.0.weight", HostTensor{{1}, {0.0f}}},
                       {"input.weight", HostTensor{{1}, {0.0f}}},
                       {"up.0.weight", HostTensor{{1}, {0.0f}}}};
        QVERIFY(loadError(omni).find("a OmniSR model") != std::string::npos);
        TensorMap unknown{{"encoder.weight", HostTensor{{1}, {0.0f}}}, {"decoder.bias", HostTensor{{1}, {0.0f}}}};
        const std::string e = loadError(unknown);
        QVERIFY2(
            e.find("no upscale architecture has these keys (2): decoder.bias, encoder.weight") != std::string::npos,
            e.c_str());
    }

    void refusesWrongKeys() {
        const TensorMap good = fileTensors(kFixtures + "/esrgan_old_x4/model.safetensors");
        TensorMap missing = good;
        missing.erase("model.1.sub.1.RDB2.conv3.0.bias");
        std::string e = loadError(missing);
        QVERIFY2(e.find("missing 1 key(s): model.1.sub.1.RDB2.conv3.0.bias") != std::string::npos, e.c_str());
        TensorMap extra = good;
        extra["model.1.sub.0.RDB1.conv6.0.weight"] = HostTensor{{1}, {0.0f}};
        e = loadError(extra);
        QVERIFY2(e.find("1 unexpected key(s): model.1.sub.0.RDB1.conv6.0.weight") != std::string::npos, e.c_str());
        TensorMap shaped = good;
        shaped["model.8.bias"] = HostTensor{{7}, std::vector<float>(7)};
        e = loadError(shaped);
        QVERIFY2(e.find("model.8.bias [7] (expected [8])") != std::string::npos, e.c_str());
        // SPAN: a missing sk is refused; eval_conv may be there or not (checked by the fixtures).
        TensorMap span = fileTensors(kFixtures + "/span_x4/model.safetensors");
        span.erase("block_3.c2_r.sk.bias");
        e = loadError(span);
        QVERIFY2(e.find("block_3.c2_r.sk.bias") != std::string::npos && e.find("SPAN") != std::string::npos, e.c_str());
    }

    void unwrapsTrainingWrappers() {
        // BasicSR's checkpoints hold params and params_ema: the EMA weights are taken (RealESRGANer).
        const TensorMap inner = fileTensors(kFixtures + "/esrgan_basicsr_x2_unshuffle/model.safetensors");
        TensorMap both;
        for (const auto& [k, t] : inner) {
            both["params_ema." + k] = t;
            HostTensor zero = t;
            std::fill(zero.data.begin(), zero.data.end(), 0.0f);
            both["params." + k] = zero;
        }
        const StateDict dict = StateDict::fromTensors(both, "wrapped");
        QCOMPARE(dict.prefix(), std::string("params_ema."));
        QCOMPARE(dict.droppedCount(), inner.size());
        const UpscaleModel model = UpscaleModel::load(dict);
        QCOMPARE(model.tensors().at("conv_first.weight").data, inner.at("conv_first.weight").data);
        TensorMap module;
        for (const auto& [k, t] : inner) module["module." + k] = t;
        QCOMPARE(UpscaleModel::load(StateDict::fromTensors(module)).description(),
                 std::string("ESRGAN 2x, 8 features, 1 blocks, pixel-unshuffle 2"));
    }

    void spanFusionIgnoresStoredEvalConv() {
        // span_x4's file holds stale eval_conv tensors; the fused ones come from sk and conv.*.
        const TensorMap file = fileTensors(kFixtures + "/span_x4/model.safetensors");
        const UpscaleModel model = UpscaleModel::loadFile(kFixtures + "/span_x4/model.safetensors");
        QVERIFY(maxAbs(model.tensors().at("block_2.c1_r.eval_conv.weight").data,
                       file.at("block_2.c1_r.eval_conv.weight").data) > 1e-3);
        // The fusion of a 1-channel Conv3XC by hand: w1 = [2, 3], b1 = [1, -1]; w2 taps t and t2 of
        // 2 x 2 middle channels (all zero but the centre: [[1, 0], [0, 1]] and bias b2 = [0.5, 0]);
        // w3 = [1, 2], b3 = 0.25; sk = 4, bias 1. Centre: 1*1*2 + 2*1*3 + 4 = 12; bias:
        // 1*(0.5 + 1) + 2*(0 - 1) + 0.25 + 1 = 0.75.
        std::vector<float> w2(2 * 2 * 9, 0.0f);
        w2[0 * 18 + 0 * 9 + 4] = 1.0f;
        w2[1 * 18 + 1 * 9 + 4] = 1.0f;
        const FusedConv f = fuseConv3XC(1, 1, {2, 3}, {1, -1}, w2, {0.5f, 0.0f}, {1, 2}, {0.25f}, {4}, {1});
        QCOMPARE(f.weight, (std::vector<float>{0, 0, 0, 0, 12, 0, 0, 0, 0}));
        QCOMPARE(f.bias, std::vector<float>{0.75f});
    }

    void paddingAsSpandrel() {
        // F.pad(reflect) reaches n - 1 pixels without repeating the edge; replicate does the rest.
        QCOMPARE(paddedIndices(5, 8), (std::vector<int>{0, 1, 2, 3, 4, 3, 2, 1}));
        QCOMPARE(paddedIndices(2, 4), (std::vector<int>{0, 1, 0, 0}));
        QCOMPARE(paddedIndices(1, 4), (std::vector<int>{0, 0, 0, 0}));
        QCOMPARE(paddedIndices(3, 3), (std::vector<int>{0, 1, 2}));
        SizeRequirements r{2, 4};
        QCOMPARE(r.padded(1), 4);
        QCOMPARE(r.padded(9), 12);
        QCOMPARE(r.padded(12), 12);
    }

    void tilingAsComfyUI() {
        // ComfyUI tiled_scale_multidim in double, verbatim, over the same position-dependent model:
        // sizes where its tiles are all full (so its positions are ours), scale 2, tile 40, overlap 8.
        constexpr int W = 104, H = 72, s = 2, t = 40, o = 8;
        const UpscaleModel model = compactModel(4, 1, s, true, 1);
        FakeDevice device;
        device.fake.scale = s;
        device.fake.channels = 3;
        UpscaleTiling tiling;
        tiling.tile = t;
        tiling.overlap = o;
        tiling.clamp = false;
        UpscaleTiler tiler(model, device, tiling);
        const ImageTensor in = randomImage(3, H, W, 5);
        const ImageTensor got = tiler.upscale(in);
        QCOMPARE(device.fake.calls, 3 * 2);
        std::vector<double> out(std::size_t(3) * H * s * W * s, 0.0), div(out.size(), 0.0);
        auto range = [](int S, int tile, int overlap) {
            std::vector<int> p;
            for (int v = 0; v < S - overlap; v += tile - overlap) p.push_back(v);
            if (p.back() + tile < S) p.push_back(S - tile);
            return p;
        };
        for (int py : range(H, t, o))
            for (int px : range(W, t, o)) {
                const int y0 = std::max(0, std::min(H - o, py)), x0 = std::max(0, std::min(W - o, px));
                const int lh = std::min(t, H - y0), lw = std::min(t, W - x0), eh = lh * s, ew = lw * s;
                constexpr int F = o * s;
                auto mask = [](int k, int extent) {
                    double m = 1.0;
                    if (F >= extent) return m;
                    if (k < F) m *= double(k + 1) / F;
                    if (extent - 1 - k < F) m *= double(extent - k) / F;
                    return m;
                };
                for (int c = 0; c < 3; ++c)
                    for (int y = 0; y < eh; ++y)
                        for (int x = 0; x < ew; ++x) {
                            const float v = PositionBackend::value(
                                in.data[(std::size_t(c) * H + y0 + y / s) * W + x0 + x / s], y, x);
                            const double m = mask(y, eh) * mask(x, ew);
                            const std::size_t i = (std::size_t(c) * H * s + y0 * s + y) * W * s + x0 * s + x;
                            out[i] += v * m;
                            div[i] += m;
                        }
            }
        double worst = 0;
        for (std::size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::fabs(got.data[i] - out[i] / div[i]));
        QVERIFY2(worst < 2e-6, qPrintable(QString::number(worst)));
        // One tile: one run, no blending.
        device.fake.calls = 0;
        const ImageTensor small = randomImage(3, 30, 37, 6);
        const ImageTensor one = tiler.upscale(small);
        QCOMPARE(device.fake.calls, 1);
        for (int y = 0; y < 60; ++y)
            for (int x = 0; x < 74; ++x)
                QCOMPARE(one.data[std::size_t(y) * 74 + x],
                         PositionBackend::value(small.data[(y / 2) * 37 + x / 2], y, x));
    }

    void cropTilingEqualsUntiled() {
        // Compact, 3 convs: a receptive radius of 5 input pixels; overlap 12, so each owned pixel
        // sits 6 or more pixels inside its tile: the tiled output is the untiled one.
        const UpscaleModel model = compactModel(8, 3, 2, false, 7);
        const ImageTensor in = randomImage(3, 53, 61, 8);
        CpuUpscaler cpu(2);
        const ImageTensor whole = cpu.upscale(model, in, untiled(false));
        UpscaleTiling crop;
        crop.tile = 24;
        crop.overlap = 12;
        crop.blend = UpscaleBlend::Crop;
        crop.clamp = false;
        UpscaleTiler tiler(model, cpu, crop);
        const ImageTensor tiled = tiler.upscale(in);
        QVERIFY(tiler.plan(61, 53).tiles() > 9);
        const double diff = maxAbs(tiled.data, whole.data);
        qInfo("crop tiling vs untiled: max |diff| %.3g over %d tiles", diff, tiler.plan(61, 53).tiles());
        QVERIFY2(diff < 1e-5, qPrintable(QString::number(diff)));
    }

    void featherTiling() {
        // A model without spatial context: feathered tiles blend to the untiled output exactly.
        const ImageTensor in = randomImage(3, 45, 70, 9);
        CpuUpscaler cpu(2);
        const UpscaleModel nearest = compactModel(4, 1, 4, true, 1);
        UpscaleTiling feather;
        feather.tile = 32;
        feather.overlap = 8;
        UpscaleTiler tiler(nearest, cpu, feather);
        QVERIFY(maxAbs(tiler.upscale(in).data, cpu.upscale(nearest, in, untiled(true)).data) < 1e-6);
        // A real model: the difference to the untiled output and the seam score, measured.
        const UpscaleModel model = UpscaleModel::loadFile(kFixtures + "/compact_x4/model.safetensors");
        UpscaleTiler real(model, cpu, feather);
        const ImageTensor tiled = real.upscale(in), whole = cpu.upscale(model, in, untiled(true));
        const UpscalePlan plan = real.plan(in.width, in.height);
        const SeamScore seams = seamScore(tiled, plan.outputTiles());
        const SeamScore reference = seamScore(whole, plan.outputTiles());
        const double rel = relativeL2(tiled.data, whole.data);
        qInfo(
            "feathered %d tiles (tile 32, overlap 8) vs untiled: relative L2 %.3g, max |diff| %.3g; seam score "
            "%.3f (worst %.3f), untiled image at the same lines %.3f",
            plan.tiles(), rel, maxAbs(tiled.data, whole.data), seams.score, seams.worst, reference.score);
        QVERIFY(rel < 1e-2);
        QVERIFY(seams.score > 0 && seams.score < 1.5);
    }

    void unshuffledInputTiles() {
        // x2plus' shape: tiles are multiples of 4 input pixels; an axis shorter than a tile (10 rows)
        // is padded to 12 (reflect, replicate) and cropped back in every tile of its row.
        const UpscaleModel model = UpscaleModel::loadFile(kFixtures + "/esrgan_basicsr_x2_unshuffle/model.safetensors");
        CpuUpscaler cpu(2);
        UpscaleTiling tiling;
        tiling.tile = 18;  // rounded down to 16
        tiling.overlap = 4;
        UpscaleTiler tiler(model, cpu, tiling);
        const UpscalePlan plan = tiler.plan(37, 10);
        QCOMPARE(plan.tile, 16);
        QCOMPARE(plan.paddedH, 12);
        QCOMPARE(plan.paddedW, 16);
        QCOMPARE(plan.xs, (std::vector<int>{0, 12, 21}));
        int calls = 0;
        const ImageTensor in = randomImage(3, 10, 37, 12);
        std::vector<int> rows;
        const UpscalePlan ran = tiler.run(
            in, [&rows](int first, int n, const float*) { rows.push_back(first + n); },
            [&calls](int done, int total) {
                ++calls;
                QCOMPARE(total, 3);
                QCOMPARE(done, calls);
            });
        QCOMPARE(ran.tiles(), 3);
        QCOMPARE(rows.back(), 20);
        const ImageTensor out = tiler.upscale(in);
        QCOMPARE(out.width, 74);
        for (float v : out.data) QVERIFY(v >= 0.0f && v <= 1.0f);
    }

    void wholeImageTile() {
        // Tile 0: one run over the whole image, unless the budget needs tiles (halved from its longer side).
        const UpscaleModel model = UpscaleModel::loadFile(kFixtures + "/compact_x4/model.safetensors");
        CpuUpscaler cpu(2);
        UpscaleTiling whole;
        whole.tile = 0;
        UpscaleTiler tiler(model, cpu, whole);
        const UpscalePlan one = tiler.plan(200, 130);
        QVERIFY(one.single);
        QCOMPARE(one.tile, 200);
        QCOMPARE(one.tiles(), 1);
        QVERIFY(one.note.empty());
        const ImageTensor in = randomImage(3, 45, 70, 4);
        QCOMPARE(tiler.upscale(in).data, cpu.upscale(model, in, untiled(true)).data);
        whole.memoryBudget = one.bytes() / 2;
        UpscaleTiler tight(model, cpu, whole);
        const UpscalePlan halved = tight.plan(200, 130);
        QVERIFY(!halved.single);
        QVERIFY(halved.tile <= 100);
        QVERIFY2(halved.note.find("the whole image lowered to tiles of") == 0, halved.note.c_str());
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, UpscaleTiler(model, cpu, UpscaleTiling{-1, 0}));
    }

    // runInto writes what run hands its sink, whole image or tiled, feathered or cropped.
    void runIntoEqualsTheSinksBands() {
        const UpscaleModel model = UpscaleModel::loadFile(kFixtures + "/esrgan_old_x4/model.safetensors");
        CpuUpscaler cpu(2);
        ImageTensor in{3, 37, 53, std::vector<float>(std::size_t(3) * 37 * 53)};
        for (std::size_t i = 0; i < in.data.size(); ++i) in.data[i] = float((i * 7919) % 256) / 255.0f;
        for (const UpscaleTiling& t :
             {UpscaleTiling{0, 0}, UpscaleTiling{24, 8}, UpscaleTiling{24, 8, UpscaleBlend::Crop}}) {
            UpscaleTiler tiler(model, cpu, t);
            ImageTensor banded{3, 37 * 4, 53 * 4, std::vector<float>(std::size_t(3) * 148 * 212, -1.0f)};
            tiler.run(in, [&banded](int first, int rows, const float* band) {
                for (int r = 0; r < rows; ++r)
                    for (int c = 0; c < 3; ++c)
                        std::copy(band + (std::size_t(r) * 3 + c) * 212, band + (std::size_t(r) * 3 + c + 1) * 212,
                                  banded.data.begin() +
                                      static_cast<std::ptrdiff_t>((std::size_t(c) * 148 + first + r) * 212));
            });
            ImageTensor direct;
            direct.data.assign(5, 9.0f);  // resized by runInto
            tiler.runInto(in, direct);
            QCOMPARE(direct.width, 212);
            QCOMPARE(direct.height, 148);
            QVERIFY(direct.data == banded.data);
        }
    }

    // The asked tile is the largest: tiles shrink to the least that covers each side with as many.
    void tilesShrinkToCoverEvenly() {
        const UpscaleModel model = UpscaleModel::loadFile(kFixtures + "/esrgan_old_x4/model.safetensors");
        CpuUpscaler cpu(2);
        for (const int side : {1024, 1000, 700, 513, 4000}) {
            UpscaleTiler tiler(model, cpu, UpscaleTiling{512, 32});
            const UpscalePlan p = tiler.plan(side, side);
            const auto n = static_cast<int>(TilePlan::axisPositions(side, 512, 32).size());
            QCOMPARE(static_cast<int>(p.xs.size()), n);
            QVERIFY(p.tile <= 512);
            QVERIFY(n * p.tile - (n - 1) * 32 >= side);       // covers the side
            QVERIFY(n * (p.tile - 1) - (n - 1) * 32 < side);  // and one pixel less would not
            QCOMPARE(p.xs.back() + p.tile, side);
        }
        UpscaleTiler tiler(model, cpu, UpscaleTiling{512, 32});
        QCOMPARE(tiler.plan(1024, 1024).tile, 363);  // three of 363, not three of 512 (2.25x the pixels)
        QCOMPARE(tiler.plan(512, 300).single, true);
    }

    void memoryBudget() {
        const UpscaleModel model = UpscaleModel::loadFile(kFixtures + "/esrgan_old_x4/model.safetensors");
        CpuUpscaler cpu(2);
        UpscaleTiling tiling;
        UpscaleTiler roomy(model, cpu, tiling);
        const UpscalePlan big = roomy.plan(4000, 3000);
        // At most the asked 512, shrunk to the least that keeps nine tiles across 4000 pixels:
        // (4000 + 8 x 32) / 9 rounded up.
        QCOMPARE(big.tile, 473);
        QCOMPARE(big.xs.size(), std::size_t(9));
        QVERIFY(big.note.empty());
        QVERIFY(big.bytes() <= big.budget);
        // The band is one tile row of output: bounded by the largest tile whatever the image height.
        QCOMPARE(big.bandBytes, std::uint64_t(473) * 4 * 3 * 4000 * 4 * 4);
        QVERIFY(roomy.plan(4000, 30000).bandBytes <= std::uint64_t(512) * 4 * 3 * 4000 * 4 * 4);
        tiling.memoryBudget = big.bytes() / 3;
        UpscaleTiler tight(model, cpu, tiling);
        const UpscalePlan smaller = tight.plan(4000, 3000);
        QVERIFY(smaller.tile < big.tile);
        QVERIFY(smaller.bytes() <= smaller.budget);
        QVERIFY(!smaller.note.empty());
        qInfo("%s", smaller.note.c_str());
        tiling.memoryBudget = 1 << 20;
        UpscaleTiler impossible(model, cpu, tiling);
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, impossible.plan(4000, 3000));
        // 4x-UltraSharp's shape (ESRGAN 64 features, 23 blocks) on a 1024 x 1024 image: what one
        // 512 tile takes on the CPU engine, and what the default budget makes of it.
        UpscaleConfig ultra;
        TensorMap zeros;
        const ModelGraph ultraGraph = buildUpscaleGraph(ultra);
        for (const GraphParam& p : ultraGraph.params())
            zeros[p.name] =
                HostTensor{p.shape, std::vector<float>(static_cast<std::size_t>(HostTensor{p.shape, {}}.numel()))};
        const UpscaleModel ultraSharp(ultra, std::move(zeros), "4x-UltraSharp shape");
        const UpscalePlan fit = UpscaleTiler(ultraSharp, cpu).plan(1024, 1024);
        qInfo("%s, 1024 x 1024 on the CPU: tile %d (%d tiles), device %s, buffers %s, band %s, budget %s%s%s",
              ultraSharp.description().c_str(), fit.tile, fit.tiles(), formatBytes(fit.deviceBytes).c_str(),
              formatBytes(fit.bufferBytes).c_str(), formatBytes(fit.bandBytes).c_str(), formatBytes(fit.budget).c_str(),
              fit.note.empty() ? "" : "; ", fit.note.c_str());
        QVERIFY(fit.bytes() <= fit.budget);
        // And it runs within what it planned: a small budget, a tiled image equal in size.
        tiling.memoryBudget = smaller.bytes();
        tiling.tile = 16;
        tiling.overlap = 4;
        UpscaleTiler run(model, cpu, tiling);
        const ImageTensor out = run.upscale(randomImage(3, 40, 33, 3));
        QCOMPARE(out.width, 33 * 4);
        QCOMPARE(out.height, 40 * 4);
    }
};

QTEST_APPLESS_MAIN(TestUpscaleModels)
#include "tst_upscalemodels.moc"
