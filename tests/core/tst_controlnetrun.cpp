// ControlNets in tiled Stable Diffusion runs: the controlled UNet graph (the ControlNets' residuals
// added to the UNet's skips in one graph) against the ControlNet and UNet graphs run apart; the
// hint crops and per-step scales a tile batch receives (a recording backend); weight 0 and steps
// outside start/end give the bits of a run without ControlNet; one tile over the canvas equals
// direct calls; tile batches give the same image; refusals of a ControlNet of another family, a
// missing or mis-sized control image and a file that is no ControlNet; tile_colorfix (one tile over
// the canvas equals the steps with the extension's correction done by hand on the whole canvas's
// hint latent, weight 0 gives the bits of no ControlNet, tiled runs pull the colours to the hint's)
// and its refusals.
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/ValidationError.h"
#include "core/cpu/CpuBackend.h"
#include "core/cpu/CpuTileDevice.h"
#include "core/formats/Safetensors.h"
#include "core/graph/ModelGraph.h"
#include "core/models/controlnet/ControlNetConfig.h"
#include "core/models/controlnet/ControlNetGraph.h"
#include "core/models/controlnet/ControlNetModel.h"
#include "core/models/controlnet/ControlledUNetGraph.h"
#include "core/models/sd/SdModel.h"
#include "core/models/sd/SdPipeline.h"
#include "core/models/sd/UNetCondGraph.h"
#include "core/models/sd/UNetCondModel.h"
#include "core/run/ControlNetUnit.h"
#include "core/run/Infotext.h"
#include "core/run/ModelFileLookup.h"
#include "core/run/RunConfigFields.h"
#include "core/sampling/ControlNetRun.h"
#include "core/sampling/ControlPreprocess.h"
#include "core/sampling/Scheduler.h"
#include "core/sampling/StepUpdate.h"
#include "core/sampling/TiledLoop.h"
#include "tests/core/GraphTestSupport.h"
#include "tests/core/NumericCompare.h"

using namespace tessera;
using graphtest::randomVector;
using graphtest::runCpu;
namespace fs = std::filesystem;

namespace {

const std::string kSdPipeline = std::string(TESSERA_TEST_DATA) + "/sdpipeline/sd1";
const std::string kPipelineFixtures = std::string(TESSERA_TEST_DATA) + "/controlnet/pipeline";
const std::string kVocabulary = std::string(TESSERA_SOURCE_DIR) + "/resources/clip/bpe_simple_vocab_16e6.txt.gz";

// A ControlNet of the test pipeline's UNet (16/32 wide, 1 layer per level, context 8) with an
// uneven hint encoder (4 widths: a hint 8x the latent, the VAE's factor).
nlohmann::json tinyControlNetJson() {
    return nlohmann::json::parse(R"({"_class_name": "ControlNetModel", "block_out_channels": [16, 32],
      "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"], "layers_per_block": 1, "norm_num_groups": 8,
      "cross_attention_dim": 8, "attention_head_dim": 2, "conditioning_embedding_out_channels": [4, 6, 8, 10]})");
}

// The same shaped as SDXL's (text-time embedding): another family.
nlohmann::json tinySdxlControlNetJson() {
    nlohmann::json j = tinyControlNetJson();
    j["addition_embed_type"] = "text_time";
    j["addition_time_embed_dim"] = 4;
    j["projection_class_embeddings_input_dim"] = 32;
    j["use_linear_projection"] = true;
    return j;
}

std::shared_ptr<const ControlNetModel> tinyControlNet(std::uint64_t seed) {
    return std::make_shared<const ControlNetModel>(
        ControlNetModel::random(controlNetConfigFromJson(tinyControlNetJson()), seed));
}

RunConfig tinyRun(int width, int height, int tile) {
    RunConfig config;
    config.width = width;
    config.height = height;
    config.tile = tile;
    config.overlapPx = 32;
    config.steps = 3;
    config.scheduler = SchedulerKind::DDIM;
    config.prompt = "a lighthouse at dusk";
    config.negativePrompt = "fog";
    config.cfgScale = 5.0;
    config.backend = BackendKind::CPU;
    config.previewEvery = 0;
    return config;
}

ImageTensor randomImage(int width, int height, std::uint32_t seed) {
    std::vector<float> v = randomVector(std::size_t(3) * width * height, seed);
    for (float& x : v) x = 0.5f + 0.25f * std::tanh(x);  // in [0, 1]
    return ImageTensor{3, height, width, v};
}

ControlNetRunUnit unitOf(std::shared_ptr<const ControlNetModel> model, ImageTensor image, float weight,
                         ControlMode mode = ControlMode::Balanced, double start = 0.0, double end = 1.0) {
    ControlNetRunUnit u;
    u.model = std::move(model);
    u.image = std::move(image);
    u.weight = weight;
    u.start = start;
    u.end = end;
    u.mode = mode;
    return u;
}

// FiLM scale vectors for one scale per row.
std::vector<std::vector<float>> films(const std::vector<int>& widths, const std::vector<float>& rowScales) {
    std::vector<std::vector<float>> out;
    for (const int C : widths) {
        std::vector<float> v;
        for (const float s : rowScales) {
            v.insert(v.end(), static_cast<std::size_t>(C), s - 1.0f);
            v.insert(v.end(), static_cast<std::size_t>(C), 0.0f);
        }
        out.push_back(std::move(v));
    }
    return out;
}

std::vector<int> scaleWidths(const ModelGraph& g, int net) {
    std::vector<int> widths;
    const std::string prefix = controlNetParamName(net, "conditioning_scale.");
    for (const int v : g.inputs())
        if (g.value(v).name.starts_with(prefix)) widths.push_back(g.value(v).channels / 2);
    return widths;
}

// Crops [c, y0 .. y0 + h, x0 .. x0 + w] of a C x H x W canvas.
std::vector<float> crop(const std::vector<float>& canvas, int channels, int height, int width, int y0, int x0, int h,
                        int w) {
    std::vector<float> out;
    for (int c = 0; c < channels; ++c)
        for (int y = 0; y < h; ++y) {
            const auto at = (static_cast<std::size_t>(c) * height + y0 + y) * width + x0;
            out.insert(out.end(), canvas.begin() + static_cast<std::ptrdiff_t>(at),
                       canvas.begin() + static_cast<std::ptrdiff_t>(at + w));
        }
    (void)height;
    return out;
}

// A backend that records the control inputs of every call and returns zeros.
class RecordingBackend : public Backend {
public:
    struct Call {
        int batch = 0;
        std::vector<std::vector<float>> inputs;  // every input, batch rows
    };
    BackendInfo info() const override { return {"recording", "records its inputs"}; }
    void prepareGraph(const ModelGraph& graph, const TensorMap&, int batch, int tileH, int tileW) override {
        graph_ = std::make_unique<ModelGraph>(graph);
        batch_ = batch;
        tileH_ = tileH;
        tileW_ = tileW;
    }
    void run(const std::vector<const float*>& inputs, int batch, const std::vector<float*>& outputs) override {
        Call call;
        call.batch = batch;
        for (std::size_t i = 0; i < inputs.size(); ++i) {
            const auto n = static_cast<std::size_t>(graph_->elements(graph_->inputs()[i], batch, tileH_, tileW_));
            call.inputs.emplace_back(inputs[i], inputs[i] + n);
        }
        calls.push_back(std::move(call));
        const auto n = static_cast<std::size_t>(graph_->elements(graph_->outputs()[0], batch, tileH_, tileW_));
        std::fill_n(outputs[0], n, 0.0f);
    }
    void prepare(const UNetModel&, int, int, int) override { throw std::logic_error("not used"); }
    void forward(const float*, const float*, int, float*) override { throw std::logic_error("not used"); }

    std::vector<Call> calls;
    std::unique_ptr<ModelGraph> graph_;
    int batch_ = 0, tileH_ = 0, tileW_ = 0;
};

class Silent : public RunObserver {};

RunResult runLoop(TiledLoop& loop, TileDevice& device, const RunConfig& config) {
    Silent observer;
    return loop.run(config, observer, device, [] { return false; });
}

// The mean of the (2k + 1)^2 box around each pixel of every h x w plane, edge pixels replicated,
// summed directly over the box (an independent transcription of the extension's blur).
std::vector<double> boxBlurReference(const std::vector<double>& v, int planes, int h, int w, int k) {
    std::vector<double> out(v.size());
    for (int p = 0; p < planes; ++p)
        for (int y = 0; y < h; ++y)
            for (int x = 0; x < w; ++x) {
                double s = 0;
                for (int dy = -k; dy <= k; ++dy)
                    for (int dx = -k; dx <= k; ++dx)
                        s += v[(static_cast<std::size_t>(p) * h + std::clamp(y + dy, 0, h - 1)) * w +
                               std::clamp(x + dx, 0, w - 1)];
                out[(static_cast<std::size_t>(p) * h + y) * w + x] = s / ((2.0 * k + 1) * (2.0 * k + 1));
            }
    return out;
}

// sd-webui-controlnet scripts/hook.py "Post-processing for color fix" on one row of C x h x w, in
// double: x0 = a x_t - b eps (a, b the DDPM table at round(t)), x0 - blur(x0) + blur(z), +sharp's
// blend on the unconditional row, back to the noise, weighted.
std::vector<float> colorFixReference(const std::vector<float>& eps, const std::vector<float>& xt,
                                     const std::vector<float>& z, float timestep, bool conditional, int channels, int h,
                                     int w, const ColorFixSettings& s) {
    const std::vector<float> table = colorFixDdpmTable();
    const auto t = static_cast<std::size_t>(std::nearbyint(static_cast<double>(timestep)));
    const double a = table[t], b = table[1000 + t];
    std::vector<double> x0(eps.size()), zd(z.begin(), z.end());
    for (std::size_t i = 0; i < x0.size(); ++i) x0[i] = a * xt[i] - b * eps[i];
    const std::vector<double> bx = boxBlurReference(x0, channels, h, w, s.radius);
    const std::vector<double> bz = boxBlurReference(zd, channels, h, w, s.radius);
    for (std::size_t i = 0; i < x0.size(); ++i) x0[i] = x0[i] - bx[i] + bz[i];
    if (s.sharpness >= 0 && !conditional) {
        const std::vector<double> blurred = boxBlurReference(x0, channels, h, w, s.radius);
        for (std::size_t i = 0; i < x0.size(); ++i) x0[i] = s.sharpness * blurred[i] + (1 - s.sharpness) * x0[i];
    }
    std::vector<float> out(eps.size());
    for (std::size_t i = 0; i < out.size(); ++i)
        out[i] = static_cast<float>((a * xt[i] - x0[i]) / b * s.weight + eps[i] * (1.0 - s.weight));
    return out;
}

}  // namespace

class TestControlNetRun : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() { setBundledClipVocabulary(kVocabulary); }

    // The controlled graph's residuals are the ControlNet graphs' on the same hint crops, and its
    // output the UNet's with those residuals added; scale 0 gives the UNet's bits; two
    // ControlNets add their sum.
    void controlledGraph() {
        const SdModel sd = loadSdModel(kSdPipeline);
        const UNetCondConfig& unet = sd.unet->config();
        const auto net0 = tinyControlNet(3), net1 = tinyControlNet(4);
        const ControlNetConfig& c = net0->config();
        const int batch = 2, h = 8, w = 12, f = c.hintFactor(), tokens = 5;
        QCOMPARE(f, 8);
        const std::vector<ControlledNet> nets{{c, {}}};
        const ModelGraph g = controlledUNetExecutionGraph(unet, nets, {tokens, true});
        const TensorMap weights = controlledUNetWeights(sd.unet->tensors(), {&net0->tensors()});
        QCOMPARE(g.inputs().size(), std::size_t(3 + 1 + scaleWidths(g, 0).size()));

        // Two tiles' hint crops cut from one canvas (32 x 40 latent pixels).
        const std::vector<float> canvas = randomImage(40 * f, 32 * f, 9).data;
        std::vector<float> hint = crop(canvas, 3, 32 * f, 40 * f, 0, 0, h * f, w * f);
        const std::vector<float> second = crop(canvas, 3, 32 * f, 40 * f, 16 * f, 24 * f, h * f, w * f);
        hint.insert(hint.end(), second.begin(), second.end());
        const auto x = randomVector(std::size_t(batch) * 4 * h * w, 1);
        const std::vector<float> t{500.0f, 500.0f};
        const auto text = randomVector(std::size_t(batch) * tokens * 8, 2);
        auto inputsWith = [&](const std::vector<float>& scales) {
            std::vector<std::vector<float>> in{x, t, text, hint};
            for (auto& v : films(scaleWidths(g, 0), scales)) in.push_back(std::move(v));
            return in;
        };
        const auto out = runCpu(g, weights, batch, h * f, w * f, inputsWith({0.7f, 0.4f}));
        const int N = c.downResiduals();
        QCOMPARE(int(out.size()), 1 + N + 1);

        // The ControlNet's own graphs on the crops (tst_controlnet matches them to diffusers).
        const auto embedding = runCpu(controlNetHintExecutionGraph(c), net0->tensors(), batch, h * f, w * f, {hint})[0];
        const ModelGraph trunk = controlNetExecutionGraph(c, {tokens, {}});
        std::vector<std::vector<float>> tin{x, t, text, embedding};
        for (auto& v : conditioningScaleInputs(trunk, {0.7f, 0.4f})) tin.push_back(std::move(v));
        const auto residuals = runCpu(trunk, net0->tensors(), batch, h, w, tin);
        for (int k = 0; k <= N; ++k) {
            const QString e =
                mismatch("residual " + std::to_string(k), out[std::size_t(1 + k)], residuals[std::size_t(k)], 1e-6);
            QVERIFY2(e.isEmpty(), qPrintable(e));
        }
        // The UNet given those residuals.
        const ModelGraph withInputs = fuseForExecution(buildUNetWithResidualInputs(unet, tokens));
        std::vector<std::vector<float>> uin{x, t, text};
        for (const auto& r : residuals) uin.push_back(r);
        const auto reference = runCpu(withInputs, sd.unet->tensors(), batch, h, w, uin)[0];
        QString e = mismatch("controlled UNet", out[0], reference, 1e-6);
        QVERIFY2(e.isEmpty(), qPrintable(e));
        // ...which differs from the UNet alone.
        const ModelGraph plain = unet2DConditionExecutionGraph(unet, tokens);
        const auto alone = runCpu(plain, sd.unet->tensors(), batch, h, w, {x, t, text})[0];
        QVERIFY(maxRelativeError(out[0], alone) > 1e-4);
        // Scale 0: the UNet's bits; zero residual inputs likewise.
        const auto off = runCpu(g, weights, batch, h * f, w * f, inputsWith({0.0f, 0.0f}));
        QVERIFY(off[0] == alone);
        for (auto& r : uin)
            if (&r - uin.data() >= 3) std::fill(r.begin(), r.end(), 0.0f);
        QVERIFY(runCpu(withInputs, sd.unet->tensors(), batch, h, w, uin)[0] == alone);

        // Two ControlNets: the UNet gets the sum of their residuals.
        const std::vector<ControlledNet> two{{c, {}}, {net1->config(), softInjectionScales(N)}};
        const ModelGraph g2 = controlledUNetExecutionGraph(unet, two, {tokens, true});
        const TensorMap w2 = controlledUNetWeights(sd.unet->tensors(), {&net0->tensors(), &net1->tensors()});
        std::vector<std::vector<float>> in2{x, t, text, hint};
        for (auto& v : films(scaleWidths(g2, 0), {0.7f, 0.4f})) in2.push_back(std::move(v));
        in2.push_back(hint);
        for (auto& v : films(scaleWidths(g2, 1), {0.5f, 0.5f})) in2.push_back(std::move(v));
        const auto out2 = runCpu(g2, w2, batch, h * f, w * f, in2);
        QCOMPARE(int(out2.size()), 1 + 2 * (N + 1));
        std::vector<std::vector<float>> sum{x, t, text};
        for (int k = 0; k <= N; ++k) {
            std::vector<float> r = out2[std::size_t(1 + k)];
            const std::vector<float>& r1 = out2[std::size_t(1 + N + 1 + k)];
            for (std::size_t i = 0; i < r.size(); ++i) r[i] += r1[i];
            sum.push_back(std::move(r));
        }
        e = mismatch("two ControlNets", out2[0], runCpu(withInputs, sd.unet->tensors(), batch, h, w, sum)[0], 1e-6);
        QVERIFY2(e.isEmpty(), qPrintable(e));
        // The soft weights of the second reach its residuals: 0.825^(12 - k) x 0.5 of its plain ones.
        const ModelGraph g1 = controlledUNetExecutionGraph(unet, {{net1->config(), {}}}, {tokens, true});
        const TensorMap w1 = controlledUNetWeights(sd.unet->tensors(), {&net1->tensors()});
        std::vector<std::vector<float>> in1{x, t, text, hint};
        for (auto& v : films(scaleWidths(g1, 0), {1.0f, 1.0f})) in1.push_back(std::move(v));
        const auto plain1 = runCpu(g1, w1, batch, h * f, w * f, in1);
        const std::vector<float> soft = softInjectionScales(N);
        for (int k = 0; k <= N; ++k) {
            std::vector<float> want = plain1[std::size_t(1 + k)];
            for (float& v : want) v *= 0.5f * soft[std::size_t(k)];
            e = mismatch("soft " + std::to_string(k), out2[std::size_t(1 + N + 1 + k)], want, 1e-6);
            QVERIFY2(e.isEmpty(), qPrintable(e));
        }
    }

    void softInjection() {
        const std::vector<float> sd15 = softInjectionScales(12);
        QCOMPARE(sd15.size(), std::size_t(13));
        QVERIFY(std::abs(sd15[0] - 0.0994f) < 1e-4f);
        QVERIFY(std::abs(sd15[11] - 0.825f) < 1e-6f);
        QCOMPARE(sd15[12], 1.0f);
        const std::vector<float> sdxl = softInjectionScales(9);  // A1111's 13-list, first 10
        QCOMPARE(sdxl.size(), std::size_t(10));
        QVERIFY(std::abs(sdxl[9] - 0.5615f) < 1e-4f);
        QCOMPARE(sdxl[0], sd15[0]);
        // diffusers' keep table: 4 steps, start 0.25, end 0.75: steps 1 and 2.
        QVERIFY(!controlActive(0, 4, 0.25, 0.75));
        QVERIFY(controlActive(1, 4, 0.25, 0.75));
        QVERIFY(controlActive(2, 4, 0.25, 0.75));
        QVERIFY(!controlActive(3, 4, 0.25, 0.75));
        QCOMPARE(controlModeFromString("My prompt is more important"), std::optional(ControlMode::Prompt));
        QCOMPARE(controlModeFromString("controlnet"), std::optional(ControlMode::ControlNet));
        QVERIFY(!controlModeFromString("strong"));
    }

    // What a tile batch receives: per row its tile's hint crop (the canvas at 8x the tile's
    // position) and per step and branch the unit's scale (0 outside start/end; the unconditional
    // half 0 in "ControlNet is more important" mode); the graph prepared at 8x the tile.
    void tileBatchInputs_data() {
        QTest::addColumn<int>("mode");
        QTest::addColumn<int>("tileBatch");
        QTest::newRow("controlnet, batch 2") << int(ControlMode::ControlNet) << 2;
        QTest::newRow("balanced, batch 1") << int(ControlMode::Balanced) << 1;
        QTest::newRow("prompt, batch 3") << int(ControlMode::Prompt) << 3;
    }
    void tileBatchInputs() {
        QFETCH(int, mode);
        QFETCH(int, tileBatch);
        const auto controlMode = static_cast<ControlMode>(mode);
        auto sd = std::make_shared<SdModel>(loadSdModel(kSdPipeline));
        RunConfig config = tinyRun(128, 64, 64);  // latent 16 x 8: tiles of 8 at x = 0, 4, 8
        config.steps = 4;
        config.tileBatch = tileBatch;
        const ImageTensor hint = randomImage(128, 64, 5);
        RecordingBackend backend;
        CpuTileDevice device(backend);
        TiledLoop loop;
        loop.setSdModel(sd);
        loop.setControlNets({unitOf(tinyControlNet(1), hint, 0.6f, controlMode, 0.25f, 0.75f)});
        const RunResult result = runLoop(loop, device, config);
        QCOMPARE(std::string(toString(result.record.status)), std::string("finished"));
        QCOMPARE(result.record.tileCount, 3);
        QCOMPARE(backend.tileH_, 64);
        QCOMPARE(backend.tileW_, 64);
        const std::vector<int> widths = scaleWidths(*backend.graph_, 0);
        const int batches = (3 + tileBatch - 1) / tileBatch;
        QCOMPARE(int(backend.calls.size()), config.steps * batches * 2);
        std::size_t call = 0;
        const std::vector<int> xs{0, 4, 8};
        for (int k = 0; k < config.steps; ++k) {
            const bool on = k == 1 || k == 2;
            for (int b = 0; b < batches; ++b) {
                for (const bool conditional : {true, false}) {
                    const RecordingBackend::Call& c = backend.calls.at(call++);
                    const int first = b * tileBatch;
                    QCOMPARE(c.batch, std::min(tileBatch, 3 - first));
                    const std::vector<float>& hints = c.inputs.at(3);
                    for (int r = 0; r < c.batch; ++r) {
                        const auto want = crop(hint.data, 3, 64, 128, 0, 8 * xs[std::size_t(first + r)], 64, 64);
                        QVERIFY2(std::equal(want.begin(), want.end(),
                                            hints.begin() + static_cast<std::ptrdiff_t>(r * want.size())),
                                 qPrintable(QString("step %1 tile %2").arg(k).arg(first + r)));
                    }
                    const float s = on && (conditional || controlMode != ControlMode::ControlNet) ? 0.6f : 0.0f;
                    std::vector<float> rows(static_cast<std::size_t>(c.batch), s);
                    const auto want = films(widths, rows);
                    for (std::size_t i = 0; i < widths.size(); ++i)
                        QVERIFY2(c.inputs.at(4 + i) == want[i],
                                 qPrintable(QString("step %1 batch %2 %3").arg(k).arg(b).arg(conditional)));
                }
            }
        }
    }

    // (a) weight 0, or start/end outside every step: the image of a run without ControlNet, bit for
    // bit; a weight inside them changes it. Tile batches 1 and 3 give the same image.
    void offIsBitIdentical() {
        auto sd = std::make_shared<SdModel>(loadSdModel(kSdPipeline));
        const RunConfig config = tinyRun(128, 64, 64);
        const ImageTensor hint = randomImage(128, 64, 6);
        CpuBackend backend(2);
        CpuTileDevice device(backend);
        TiledLoop loop;
        loop.setSdModel(sd);
        const RunResult plain = runLoop(loop, device, config);
        loop.setControlNets({unitOf(tinyControlNet(2), hint, 0.0f)});
        const RunResult zero = runLoop(loop, device, config);
        QVERIFY(zero.latents.data == plain.latents.data);
        QVERIFY(zero.image.data == plain.image.data);
        loop.setControlNets({unitOf(tinyControlNet(2), hint, 0.9f, ControlMode::Balanced, 0.9f, 1.0f)});
        const RunResult outside = runLoop(loop, device, config);
        QVERIFY(outside.image.data == plain.image.data);
        loop.setControlNets({unitOf(tinyControlNet(2), hint, 0.9f)});
        const RunResult on = runLoop(loop, device, config);
        QVERIFY(maxRelativeError(on.latents.data, plain.latents.data) > 1e-4);
        RunConfig batched = config;
        batched.tileBatch = 3;
        const RunResult together = runLoop(loop, device, batched);
        QVERIFY(together.image.data == on.image.data);
        // And without ControlNets again, the plain bits.
        loop.setControlNets({});
        QVERIFY(runLoop(loop, device, config).image.data == plain.image.data);
    }

    // (b) One tile over the whole canvas: the loop's latents are those of direct calls of the
    // controlled graph on the whole latent and the whole hint (CFG, DDIM).
    void oneTileEqualsDirectCalls() {
        auto sd = std::make_shared<SdModel>(loadSdModel(kSdPipeline));
        RunConfig config = tinyRun(96, 64, 96);  // latent 12 x 8: one tile
        config.steps = 2;
        const ImageTensor hint = randomImage(96, 64, 7);
        const auto net = tinyControlNet(8);
        const std::vector<float> z = randomVector(4 * 8 * 12, 6);
        CpuBackend backend(2);
        CpuTileDevice device(backend);
        TiledLoop loop;
        loop.setSdModel(sd);
        loop.setStartNoise(ImageTensor{4, 8, 12, z});
        loop.setControlNets({unitOf(net, hint, 0.7f, ControlMode::Prompt)});
        const RunResult result = runLoop(loop, device, config);
        QCOMPARE(result.record.tileCount, 1);

        const SdConditioning text = encodeSdPrompts(*sd, device.textBackend(), config);
        const std::vector<ControlledNet> nets{{net->config(), softInjectionScales(net->config().downResiduals())}};
        const ModelGraph g = controlledUNetExecutionGraph(sd->unet->config(), nets, {text.tokens, false});
        const TensorMap weights = controlledUNetWeights(sd->unet->tensors(), {&net->tensors()});
        SchedulerOptions options = sd->scheduler;
        options.eta = config.schedulerOptions.eta;
        options.timestepSpacing = config.schedulerOptions.timestepSpacing;
        options.karrasSigmas = config.schedulerOptions.karrasSigmas;
        auto scheduler = Scheduler::create(config.scheduler, options);
        scheduler->setTimesteps(config.steps);
        std::vector<float> x = z;
        for (float& v : x) v *= scheduler->initNoiseSigma();
        for (int k = 0; k < config.steps; ++k) {
            const StepCoefficients K = withoutPreviousX0(scheduler->coefficients(k));
            std::vector<float> in = x;
            for (float& v : in) v *= K.modelInputScale;
            const std::vector<float> t{K.timestep};
            auto call = [&](const std::vector<float>& context) {
                std::vector<std::vector<float>> inputs{in, t, context, hint.data};
                for (auto& v : films(scaleWidths(g, 0), {0.7f})) inputs.push_back(std::move(v));
                return runCpu(g, weights, 1, 64, 96, inputs)[0];
            };
            const auto c = call(text.cond), u = call(text.uncond);
            for (std::size_t i = 0; i < x.size(); ++i) {
                const float eps = u[i] + static_cast<float>(config.cfgScale) * (c[i] - u[i]);
                x[i] = applyStep(K, x[i], eps, 0.0f, 0.0f);
            }
        }
        const QString e = mismatch("latents", result.latents.data, x, 1e-6);
        QVERIFY2(e.isEmpty(), qPrintable(e));
    }

    // tile_colorfix, one tile over the canvas: the loop's latents are those of direct calls of the
    // controlled graph without the correction, each output corrected by hand (colorFixReference)
    // towards the VAE latent of the hint (the posterior mean of hint * 2 - 1), CFG, the step.
    // DDIM (integer timesteps, x_t the latent) and Euler with Karras sigmas (fractional timesteps
    // rounded, x_t = x * c_in: what the hook sees under A1111's k-diffusion samplers).
    void colorFixOneTileEqualsHandSteps_data() {
        QTest::addColumn<bool>("sharp");
        QTest::addColumn<bool>("euler");
        QTest::newRow("colorfix ddim") << false << false;
        QTest::newRow("colorfix+sharp euler karras") << true << true;
    }
    void colorFixOneTileEqualsHandSteps() {
        QFETCH(bool, sharp);
        QFETCH(bool, euler);
        auto sd = std::make_shared<SdModel>(loadSdModel(kSdPipeline));
        RunConfig config = tinyRun(96, 64, 96);  // latent 12 x 8: one tile
        config.steps = 3;
        if (euler) {
            config.scheduler = SchedulerKind::Euler;
            config.schedulerOptions.karrasSigmas = true;
        }
        const ImageTensor hint = randomImage(96, 64, 17);
        const auto net = tinyControlNet(18);
        const std::vector<float> z = randomVector(4 * 8 * 12, 19);
        CpuBackend backend(2);
        CpuTileDevice device(backend);
        TiledLoop loop;
        loop.setSdModel(sd);
        loop.setStartNoise(ImageTensor{4, 8, 12, z});
        ControlNetRunUnit unit = unitOf(net, hint, 0.8f);
        unit.preprocessor = sharp ? "tile_colorfix+sharp" : "tile_colorfix";
        unit.colorfixVariation = sharp ? 4 : 3;
        unit.colorfixSharpness = 2.0;
        loop.setControlNets({unit});
        const RunResult result = runLoop(loop, device, config);
        QCOMPARE(result.record.tileCount, 1);

        ImageTensor image = hint;
        for (float& v : image.data) v = v * 2.0f - 1.0f;
        CpuBackend vaeBackend(2);
        const std::vector<float> zHint = encodeImage(*sd, vaeBackend, image).data;
        QCOMPARE(zHint.size(), z.size());
        const ColorFixSettings settings = colorFixSettings(unit);
        QCOMPARE(settings.sharpness, sharp ? 0.02f : -1.0f);
        const SdConditioning text = encodeSdPrompts(*sd, device.textBackend(), config);
        const std::vector<ControlledNet> nets{{net->config(), {}}};
        const ModelGraph g = controlledUNetExecutionGraph(sd->unet->config(), nets, {text.tokens, false});
        const TensorMap weights = controlledUNetWeights(sd->unet->tensors(), {&net->tensors()});
        SchedulerOptions options = sd->scheduler;
        options.eta = config.schedulerOptions.eta;
        options.timestepSpacing = config.schedulerOptions.timestepSpacing;
        options.karrasSigmas = config.schedulerOptions.karrasSigmas;
        auto scheduler = Scheduler::create(config.scheduler, options);
        scheduler->setTimesteps(config.steps);
        std::vector<float> x = z;
        for (float& v : x) v *= scheduler->initNoiseSigma();
        bool fractional = false;
        for (int k = 0; k < config.steps; ++k) {
            const StepCoefficients K = withoutPreviousX0(scheduler->coefficients(k));
            fractional = fractional || K.timestep != std::floor(K.timestep);
            std::vector<float> in = x;
            for (float& v : in) v *= K.modelInputScale;
            const std::vector<float> t{K.timestep};
            auto call = [&](const std::vector<float>& context, bool conditional) {
                std::vector<std::vector<float>> inputs{in, t, context, hint.data};
                for (auto& v : films(scaleWidths(g, 0), {0.8f})) inputs.push_back(std::move(v));
                const std::vector<float> eps = runCpu(g, weights, 1, 64, 96, inputs)[0];
                return colorFixReference(eps, in, zHint, K.timestep, conditional, 4, 8, 12, settings);
            };
            const auto c = call(text.cond, true), u = call(text.uncond, false);
            for (std::size_t i = 0; i < x.size(); ++i) {
                const float eps = u[i] + static_cast<float>(config.cfgScale) * (c[i] - u[i]);
                x[i] = applyStep(K, x[i], eps, 0.0f, 0.0f);
            }
        }
        QCOMPARE(fractional, euler);
        const QString e = mismatch("latents", result.latents.data, x, 1e-5);
        QVERIFY2(e.isEmpty(), qPrintable(e));
        // The correction mattered: the same unit without it ends elsewhere.
        unit.preprocessor = "none";
        loop.setControlNets({unit});
        QVERIFY(maxRelativeError(runLoop(loop, device, config).latents.data, x) > 1e-3);
    }

    // tile_colorfix over several tiles: weight 0 gives the bits of no ControlNet; tile batches 1
    // and 3 the same bits; the result is finite and its colours (per-channel latent means) lie
    // nearer the hint latent's than the same ControlNet's without the correction; the record
    // says the hint was encoded once.
    void colorFixTiledRuns() {
        auto sd = std::make_shared<SdModel>(loadSdModel(kSdPipeline));
        const RunConfig config = tinyRun(128, 96, 64);  // latent 16 x 12, tiles of 8 x 8
        const ImageTensor hint = randomImage(128, 96, 21);
        const auto net = tinyControlNet(22);
        CpuBackend backend(2);
        CpuTileDevice device(backend);
        TiledLoop loop;
        loop.setSdModel(sd);
        const RunResult plain = runLoop(loop, device, config);
        QVERIFY(plain.record.tileCount > 1);
        ControlNetRunUnit unit = unitOf(net, hint, 0.0f);
        unit.preprocessor = "tile_colorfix+sharp";
        loop.setControlNets({unit});
        const RunResult zero = runLoop(loop, device, config);
        QVERIFY(zero.latents.data == plain.latents.data);
        QVERIFY(zero.image.data == plain.image.data);
        unit.weight = 1.0f;
        unit.preprocessor = "tile_colorfix";
        loop.setControlNets({unit});
        const RunResult fixed = runLoop(loop, device, config);
        for (const float v : fixed.latents.data) QVERIFY(std::isfinite(v));
        RunConfig batched = config;
        batched.tileBatch = 3;
        QVERIFY(runLoop(loop, device, batched).latents.data == fixed.latents.data);
        bool said = false;
        for (const std::string& m : fixed.record.messages) said = said || m.starts_with("tile_colorfix:");
        QVERIFY(said);
        unit.preprocessor = "none";
        loop.setControlNets({unit});
        const RunResult unfixed = runLoop(loop, device, config);
        ImageTensor image = hint;
        for (float& v : image.data) v = v * 2.0f - 1.0f;
        CpuBackend vaeBackend(2);
        const std::vector<float> zHint = encodeImage(*sd, vaeBackend, image).data;
        auto colourDistance = [&](const std::vector<float>& latents) {
            const std::size_t plane = latents.size() / 4;
            double d = 0;
            for (std::size_t c = 0; c < 4; ++c) {
                double a = 0, b = 0;
                for (std::size_t i = 0; i < plane; ++i) a += latents[c * plane + i], b += zHint[c * plane + i];
                d += std::abs(a - b) / static_cast<double>(plane);
            }
            return d;
        };
        qInfo("colour distance to the hint latent: %.4f fixed, %.4f without", colourDistance(fixed.latents.data),
              colourDistance(unfixed.latents.data));
        QVERIFY(colourDistance(fixed.latents.data) < 0.5 * colourDistance(unfixed.latents.data));
    }

    // Image-to-image: the start image is the default control image (mapped to [0, 1]).
    void startImageIsTheDefaultHint() {
        auto sd = std::make_shared<SdModel>(loadSdModel(kSdPipeline));
        RunConfig config = tinyRun(64, 64, 64);
        config.strength = 0.7;
        const ImageTensor image = randomImage(64, 64, 11);
        ImageTensor init = image;
        for (float& v : init.data) v = 2.0f * v - 1.0f;
        RecordingBackend backend;
        CpuTileDevice device(backend);
        TiledLoop loop;
        loop.setSdModel(sd);
        loop.setInitImage(init);
        loop.setControlNets({unitOf(tinyControlNet(1), ImageTensor{}, 1.0f)});
        config.initImage = "start.png";
        (void)runLoop(loop, device, config);
        QVERIFY(!backend.calls.empty());
        const QString e = mismatch("hint", backend.calls.front().inputs.at(3), image.data, 1e-6);
        QVERIFY2(e.isEmpty(), qPrintable(e));
    }

    // diffusers' StableDiffusionControlNet(Img2Img)Pipeline, whole runs in float64 on the test
    // pipeline with tiny random ControlNets (tests/data/controlnet/pipeline,
    // tools/reference/make_controlnet_pipeline_fixtures.py): one tile over the canvas, the same
    // start latents, scale, start and end, one ControlNet or two.
    void pipelineMatchesDiffusers_data() {
        QTest::addColumn<QString>("name");
        if (!fs::exists(kPipelineFixtures + "/cases.json")) {
            QTest::newRow("fixtures") << QString();
            return;
        }
        const nlohmann::json cases = nlohmann::json::parse(std::ifstream(kPipelineFixtures + "/cases.json"));
        for (const auto& [name, info] : cases.at("cases").items())
            QTest::newRow(name.c_str()) << QString::fromStdString(name);
    }
    void pipelineMatchesDiffusers() {
        if (!fs::exists(kPipelineFixtures + "/cases.json"))
            QSKIP("tests/data/controlnet/pipeline is missing (tools/reference/make_controlnet_pipeline_fixtures.py)");
        QFETCH(QString, name);
        const nlohmann::json cases = nlohmann::json::parse(std::ifstream(kPipelineFixtures + "/cases.json"));
        const nlohmann::json& info = cases.at("cases").at(name.toStdString());
        SafetensorsFile io(kPipelineFixtures + "/" + name.toStdString() + ".safetensors");
        const int width = info.at("width"), height = info.at("height");
        RunConfig config = tinyRun(width, height, std::max(width, height));
        config.prompt = info.at("prompt");
        config.negativePrompt = info.at("negative_prompt");
        config.cfgScale = info.at("cfg");
        config.steps = info.at("steps");
        const bool img2img = info.at("pipeline") == "img2img";
        auto sd = std::make_shared<SdModel>(loadSdModel(kSdPipeline));
        CpuBackend backend(2);
        CpuTileDevice device(backend);
        TiledLoop loop;
        loop.setSdModel(sd);
        const ImageTensor start{4, height / 8, width / 8, io.readFloat32("start")};
        std::vector<ControlNetRunUnit> units;
        int k = 0;
        for (const auto& net : info.at("controlnets")) {
            auto model = std::make_shared<const ControlNetModel>(
                ControlNetModel::load(kPipelineFixtures + "/" + net.at("folder").get<std::string>()));
            ImageTensor image;
            if (!img2img)
                image = ImageTensor{3, height, width,
                                    io.readFloat32(k == 0 ? "control_image" : "control_image." + std::to_string(k))};
            units.push_back(
                unitOf(model, image, net.at("scale"), ControlMode::Balanced, net.at("start"), net.at("end")));
            ++k;
        }
        loop.setControlNets(units);
        if (img2img) {
            ImageTensor init{3, height, width, io.readFloat32("init_image")};
            for (float& v : init.data) v = 2.0f * v - 1.0f;
            loop.setInitImage(init);
            loop.setStartLatents(start);
            config.initImage = "init.png";
            config.strength = info.at("strength");
        } else {
            loop.setStartNoise(start);
        }
        const RunResult result = runLoop(loop, device, config);
        QCOMPARE(result.record.tileCount, 1);
        const std::vector<float> want = io.readFloat32("latents");
        const double e = maxRelativeError(result.latents.data, want);
        qInfo("%s: latents max |diff| / max |ref| %.2e", qPrintable(name), e);
        QVERIFY2(e < 1e-4, qPrintable(QString::number(e)));
        // Without the ControlNets the run ends elsewhere: the residuals mattered.
        loop.setControlNets({});
        QVERIFY(maxRelativeError(runLoop(loop, device, config).latents.data, want) > 1e-3);
    }

    // The controlled graph and its merged weights are kept across runs of the same UNet and
    // ControlNets (another prompt, weight or window: the same graph), so that a device keeps its
    // plan; the second run's bits equal a fresh loop's; another control mode is another graph.
    void controlledModelKeptAcrossRuns() {
        auto sd = std::make_shared<SdModel>(loadSdModel(kSdPipeline));
        RunConfig config = tinyRun(128, 64, 64);
        const ImageTensor hint = randomImage(128, 64, 21);
        const auto net = tinyControlNet(22);
        const auto kept = [](const RunResult& r) {
            for (const std::string& m : r.record.messages)
                if (m.find("kept from the last run") != std::string::npos) return true;
            return false;
        };
        CpuBackend backend(2);
        CpuTileDevice device(backend);
        TiledLoop loop;
        loop.setSdModel(sd);
        loop.setControlNets({unitOf(net, hint, 0.8f, ControlMode::Balanced, 0.0, 0.6)});
        QVERIFY(!kept(runLoop(loop, device, config)));
        config.prompt = "a harbour at night";
        loop.setControlNets({unitOf(net, hint, 1.1f, ControlMode::Balanced, 0.2, 1.0)});
        const RunResult second = runLoop(loop, device, config);
        QVERIFY(kept(second));
        TiledLoop fresh;
        fresh.setSdModel(sd);
        fresh.setControlNets({unitOf(net, hint, 1.1f, ControlMode::Balanced, 0.2, 1.0)});
        QVERIFY(second.image.data == runLoop(fresh, device, config).image.data);
        loop.setControlNets({unitOf(net, hint, 1.1f, ControlMode::Prompt, 0.2, 1.0)});
        QVERIFY(!kept(runLoop(loop, device, config)));
    }

    // RunConfig::controlNets: a NAME found in controlnet/ (ComfyUI's) of $TESSERA_MODELS (a diffusers
    // folder), its image handed over decoded, gives the bits of the same unit pinned; a unit
    // without a model is refused.
    void configUnits() {
        auto sd = std::make_shared<SdModel>(loadSdModel(kSdPipeline));
        const RunConfig plain = tinyRun(128, 64, 64);
        const ImageTensor hint = randomImage(128, 64, 12);
        const auto net = tinyControlNet(13);
        const fs::path models = fs::temp_directory_path() / "tessera-controlnetrun-models";
        fs::remove_all(models);
        fs::create_directories(models / "controlnet");
        std::map<std::string, SafetensorsTensorData> tensors;
        for (const auto& [name, t] : net->tensors())
            tensors[name] = {SafetensorsDtype::F32, t.shape, encodeFloats(SafetensorsDtype::F32, t.data)};
        fs::create_directories(models / "controlnet" / "tiny_tile");
        writeSafetensors((models / "controlnet" / "tiny_tile" / "diffusion_pytorch_model.safetensors").string(),
                         tensors, {{"format", "pt"}});
        std::ofstream(models / "controlnet" / "tiny_tile" / "config.json") << tinyControlNetJson().dump();
        qputenv(kModelsFolderVariable, QByteArray::fromStdString(models.string()));
        CpuBackend backend(2);
        CpuTileDevice device(backend);
        TiledLoop loop;
        loop.setSdModel(sd);
        loop.setControlNets({unitOf(net, hint, 0.8f, ControlMode::Prompt, 0.0f, 0.6f)});
        const RunResult pinned = runLoop(loop, device, plain);
        loop.setControlNets({});
        RunConfig config = plain;
        ControlNetUnit unit;
        unit.model = "tiny_tile";
        unit.image = "hint.png";
        unit.weight = 0.8;
        unit.end = 0.6;
        unit.mode = ControlMode::Prompt;
        config.controlNets = {unit};
        loop.setControlImages({hint});
        const RunResult named = runLoop(loop, device, config);
        QVERIFY(named.image.data == pinned.image.data);
        // tile_resample: the control image shrunk and brought back to the canvas (its own image:
        // "Crop and Resize"), the run the one given that hint; below 1.1 the bits of none.
        config.controlNets.front().preprocessor = "tile_resample";
        config.controlNets.front().downSampling = 1.05;
        QVERIFY(runLoop(loop, device, config).image.data == pinned.image.data);
        config.controlNets.front().downSampling = 2.5;
        const RunResult resampled = runLoop(loop, device, config);
        ImageTensor blurred = hint;
        blurred.data = tileResampleHint(hint.data, 3, hint.height, hint.width, 2.5, ControlResizeMode::CropAndResize);
        QVERIFY(blurred.data != hint.data);
        loop.setControlImages({blurred});
        config.controlNets.front().preprocessor = "none";
        QVERIFY(runLoop(loop, device, config).image.data == resampled.image.data);
        QVERIFY(resampled.image.data != pinned.image.data);
        loop.setControlImages({hint});
        // A preprocessor this version does not have: refused, naming the field.
        config.controlNets.front().preprocessor = "canny";
        try {
            (void)runLoop(loop, device, config);
            QFAIL("canny was accepted");
        } catch (const ValidationError& e) {
            QCOMPARE(e.field(), std::string("control_preprocessor"));
        }
        config.controlNets.front().preprocessor = "none";
        // Not decoded by the front end: refused.
        loop.setControlImages({});
        QVERIFY_THROWS_EXCEPTION(ValidationError, (void)runLoop(loop, device, config));
        config.controlNets.front().model.clear();
        try {
            (void)runLoop(loop, device, config);
            QFAIL("a unit without a model was accepted");
        } catch (const ValidationError& e) {
            QCOMPARE(e.field(), std::string("controlnet"));
            QVERIFY2(std::string(e.what()).find("--controlnet") != std::string::npos, e.what());
        }
        qunsetenv(kModelsFolderVariable);
        fs::remove_all(models);
    }

    // PNG parameters: each unit as sd-webui-controlnet writes it ("ControlNet <i>: \"Module: ...,
    // Model: name [hash], ...\""), read back into the same units (not the image: none is written).
    void infotextEntries() {
        RunConfig config = tinyRun(128, 64, 64);
        ControlNetUnit tile;
        tile.model = "/models/ControlNet/control_v11f1e_sd15_tile.pth";
        tile.image = "hint.png";
        tile.weight = 0.75;
        tile.start = 0.1;
        tile.end = 0.9;
        tile.mode = ControlMode::ControlNet;
        tile.preprocessor = "tile_resample";
        tile.downSampling = 2;
        ControlNetUnit second;
        second.model = "xinsir-tile";
        second.mode = ControlMode::Prompt;
        config.controlNets = {tile, second};
        InfotextExtras extras = infotextExtras(config);
        extras.controlNetHashes = {"a371b31b0123456789", ""};
        const std::string text = infotext(config, extras);
        QVERIFY2(text.find("ControlNet 0: \"Module: tile_resample, Model: control_v11f1e_sd15_tile [a371b31b], "
                           "Weight: 0.75, Resize Mode: Crop and Resize, Processor Res: 512, Threshold A: 2, "
                           "Threshold B: 0.5, Guidance Start: 0.1, Guidance End: 0.9, Pixel Perfect: False, "
                           "Control Mode: ControlNet is more important\"") != std::string::npos,
                 text.c_str());
        QVERIFY2(text.find("ControlNet 1: \"Module: none, Model: xinsir-tile, Weight: 1,") != std::string::npos,
                 text.c_str());
        RunConfig back = tinyRun(128, 64, 64);
        const ImportedSettings imported = applyInfotext(parseInfotext(text), back);
        QCOMPARE(back.controlNets.size(), std::size_t(2));
        QCOMPARE(back.controlNets[0].model, std::string("control_v11f1e_sd15_tile"));
        QCOMPARE(back.controlNets[0].weight, 0.75);
        QCOMPARE(back.controlNets[0].downSampling, 2.0);
        QCOMPARE(back.controlNets[0].mode, ControlMode::ControlNet);
        QVERIFY(back.controlNets[0].image.empty());
        QCOMPARE(back.controlNets[1].mode, ControlMode::Prompt);
        QVERIFY(std::find(imported.fields.begin(), imported.fields.end(), "controlnet") != imported.fields.end());
        const std::vector<std::string> differ = mappedFieldDifferences(config, back);
        QVERIFY(std::find(differ.begin(), differ.end(), "controlnet") == differ.end());
        // tile_colorfix(+sharp): Threshold A the Variation, Threshold B the Sharpness, read back.
        ControlNetUnit fix;
        fix.model = "control_v11f1e_sd15_tile";
        fix.preprocessor = "tile_colorfix+sharp";
        fix.colorfixVariation = 12;
        fix.colorfixSharpness = 1.5;
        ControlNetUnit plainFix = fix;
        plainFix.preprocessor = "tile_colorfix";
        plainFix.colorfixVariation = 5;
        config.controlNets = {fix, plainFix};
        const std::string fixText = infotext(config, infotextExtras(config));
        QVERIFY2(
            fixText.find("Module: tile_colorfix+sharp, Model: control_v11f1e_sd15_tile, Weight: 1, Resize Mode: "
                         "Just Resize, Processor Res: 512, Threshold A: 12, Threshold B: 1.5,") != std::string::npos,
            fixText.c_str());
        QVERIFY2(fixText.find("Module: tile_colorfix, Model: control_v11f1e_sd15_tile, Weight: 1, Resize Mode: Just "
                              "Resize, Processor Res: 512, Threshold A: 5, Threshold B: 0.5,") != std::string::npos,
                 fixText.c_str());
        RunConfig fixBack = tinyRun(128, 64, 64);
        (void)applyInfotext(parseInfotext(fixText), fixBack);
        QCOMPARE(fixBack.controlNets.size(), std::size_t(2));
        QCOMPARE(fixBack.controlNets[0].preprocessor, std::string("tile_colorfix+sharp"));
        QCOMPARE(fixBack.controlNets[0].colorfixVariation, 12.0);
        QCOMPARE(fixBack.controlNets[0].colorfixSharpness, 1.5);
        QCOMPARE(fixBack.controlNets[1].colorfixVariation, 5.0);
        QCOMPARE(fixBack.controlNets[1].colorfixSharpness, 1.0);  // its Threshold B is no setting of it
        // An A1111 unit without a model is listed, not applied.
        RunConfig none = tinyRun(128, 64, 64);
        const ImportedSettings listed = applyInfotext(
            parseInfotext(
                "a cat\nSteps: 20, Seed: 1, CFG scale: 7, ControlNet 0: \"Module: none, Model: None, Weight: 1\""),
            none);
        QVERIFY(none.controlNets.empty());
        QCOMPARE(listed.unmapped.size(), std::size_t(1));
    }

    // --control-preprocessor tile_colorfix[:VARIATION] / tile_colorfix+sharp[:VARIATION[:SHARPNESS]], the
    // JSON keys colorfix_variation / colorfix_sharpness, and the extension's ranges.
    void colorFixSettingsText() {
        const RunConfigField* field = findRunConfigField("control-preprocessor");
        QVERIFY(field);
        RunConfig config = tinyRun(128, 64, 64);
        config.controlNets = {ControlNetUnit{}};
        config.controlNets.front().model = "tile";
        field->parse(config, "tile_colorfix+sharp:12:0.25");
        QCOMPARE(config.controlNets.front().preprocessor, std::string("tile_colorfix+sharp"));
        QCOMPARE(config.controlNets.front().colorfixVariation, 12.0);
        QCOMPARE(config.controlNets.front().colorfixSharpness, 0.25);
        QCOMPARE(config.controlNets.front().downSampling, 1.0);
        const RunConfig back = runConfigFromJson(toJson(config));
        QVERIFY(back.controlNets == config.controlNets);
        field->parse(config, "tile_colorfix:6");
        QCOMPARE(config.controlNets.front().colorfixVariation, 6.0);
        QVERIFY(validateAll(config).empty());
        for (const char* wrong :
             {"tile_colorfix:2", "tile_colorfix:33", "tile_colorfix:7.5", "tile_colorfix+sharp:8:2.5"}) {
            RunConfig bad = config;
            field->parse(bad, wrong);
            const std::vector<ValidationError> problems = validateAll(bad);
            QVERIFY2(problems.size() == 1 && problems.front().field() == "control_preprocessor", wrong);
        }
    }

    // (d) Refusals before any work, naming the fix.
    void refusals() {
        auto sd = std::make_shared<SdModel>(loadSdModel(kSdPipeline));
        const RunConfig config = tinyRun(128, 64, 64);
        RecordingBackend backend;
        CpuTileDevice device(backend);
        TiledLoop loop;
        loop.setSdModel(sd);
        auto refusal = [&](const char* field) -> std::string {
            try {
                (void)runLoop(loop, device, config);
            } catch (const ValidationError& e) {
                if (e.field() != field) return "field " + e.field() + ": " + e.what();
                return e.what();
            }
            return "no refusal";
        };
        const auto sdxl = std::make_shared<const ControlNetModel>(
            ControlNetModel::random(controlNetConfigFromJson(tinySdxlControlNetJson()), 1));
        loop.setControlNets({unitOf(sdxl, randomImage(128, 64, 1), 1.0f)});
        std::string m = refusal("controlnet");
        QVERIFY2(m.find("sdxl") != std::string::npos && m.find("sd1") != std::string::npos, m.c_str());
        loop.setControlNets({unitOf(tinyControlNet(1), ImageTensor{}, 1.0f)});
        m = refusal("control_image");
        QVERIFY2(m.find("--control-image") != std::string::npos, m.c_str());
        loop.setControlNets({unitOf(tinyControlNet(1), randomImage(120, 64, 1), 1.0f)});
        m = refusal("control_image");
        QVERIFY2(m.find("120x64") != std::string::npos && m.find("resize") != std::string::npos, m.c_str());
        QVERIFY(backend.calls.empty());
        // A file that is no ControlNet (a pickle calling a global outside the reader's list).
        const fs::path dir = fs::temp_directory_path() / "tessera-controlnetrun";
        fs::create_directories(dir);
        const fs::path hostile = dir / "hostile.pth";
        {
            std::ofstream out(hostile, std::ios::binary);
            out << "\x80\x02"
                << "cos\nsystem\n"
                << "X\x02\x00\x00\x00"
                << "ls"
                << "\x85R.";
        }
        QVERIFY_THROWS_EXCEPTION(InputFileError, (void)ControlNetModel::load(hostile.string()));
        fs::remove_all(dir);
        // tile_colorfix with a v-prediction model or one without a VAE, naming what is allowed.
        ControlNetRunUnit colorFix = unitOf(tinyControlNet(1), randomImage(128, 64, 1), 1.0f);
        colorFix.preprocessor = "tile_colorfix";
        loop.setControlNets({colorFix});
        auto vModel = std::make_shared<SdModel>(*sd);
        vModel->scheduler.predictionType = PredictionType::VPrediction;
        loop.setSdModel(vModel);
        m = refusal("control_preprocessor");
        QVERIFY2(m.find("epsilon") != std::string::npos && m.find("tile_resample") != std::string::npos, m.c_str());
        auto noVae = std::make_shared<SdModel>(*sd);
        noVae->vae = nullptr;
        loop.setSdModel(noVae);
        m = refusal("control_preprocessor");
        QVERIFY2(m.find("VAE") != std::string::npos && m.find("tile_resample") != std::string::npos, m.c_str());
        QVERIFY(backend.calls.empty());
    }
};

QTEST_GUILESS_MAIN(TestControlNetRun)
#include "tst_controlnetrun.moc"
