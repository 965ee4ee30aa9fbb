// The CPU engine (CpuEngine) against docs/ENGINE_SEMANTICS.md, on a tiny random UNet and the CPU
// backend; the one tiled loop (core/sampling/TiledLoop.h) with its device calls in the documented
// order, a device that captures each step variant once and replays it (the CUDA step graphs'
// contract, on the host), and map passes of any per-tile function over any canvas (larger or
// smaller, other channels, guidance).
#include <QtTest/QtTest>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "core/cpu/CpuBackend.h"
#include "core/cpu/CpuEngine.h"
#include "core/models/unet/UNetModel.h"
#include "core/run/NonFiniteError.h"
#include "core/sampling/ImageOps.h"
#include "core/sampling/Philox.h"
#include "core/sampling/Scheduler.h"
#include "core/sampling/SeamScore.h"
#include "core/sampling/StepUpdate.h"
#include "core/sampling/TileDevice.h"
#include "core/sampling/TilePlan.h"
#include "core/sampling/TiledLoop.h"

using namespace tessera;

namespace {

// Two levels (downsample factor 2), narrow channels: a forward pass on a 16x16 tile takes
// well under a millisecond, yet every block type (resnet, attention, down/up) is exercised.
UNetConfig tinyConfig() {
    UNetConfig c;
    c.sampleSize = 16;
    c.inChannels = 3;
    c.outChannels = 3;
    c.blockOutChannels = {8, 16};
    c.downBlocks = {DownBlockType::Down, DownBlockType::AttnDown};
    c.upBlocks = {UpBlockType::AttnUp, UpBlockType::Up};
    c.layersPerBlock = 1;
    c.normNumGroups = 4;
    c.attentionHeadDim = 8;
    return c;
}

std::shared_ptr<const UNetModel> tinyModel() {
    return std::make_shared<const UNetModel>(UNetModel::random(tinyConfig(), 1234));
}

RunConfig baseConfig() {
    RunConfig c;
    c.width = 32;
    c.height = 24;
    c.seed = 7;
    c.steps = 4;
    c.scheduler = SchedulerKind::DDIM;
    c.tile = 16;
    c.overlapPx = 8;  // 3 columns x 2 rows = 6 tiles
    c.window = BlendWindowKind::Hann;
    c.tileBatch = 1;
    c.backend = BackendKind::CPU;
    c.precision = Precision::FP32;
    c.previewEvery = 0;
    return c;
}

std::unique_ptr<CpuEngine> makeEngine(std::shared_ptr<const UNetModel> model) {
    auto engine = std::make_unique<CpuEngine>(std::make_unique<CpuBackend>());
    engine->setModel(std::move(model));
    return engine;
}

// Counts events; optionally cancels its engine after `cancelAfterBatches` tile batches.
class CountingObserver : public RunObserver {
public:
    Engine* engine = nullptr;
    int cancelAfterBatches = -1;
    int started = 0, batches = 0, steps = 0, previews = 0, memory = 0;
    std::vector<int> tileOrder;
    std::vector<int> batchSizes;
    std::vector<int> previewSteps;

    void onStarted(const RunRecord&) override { ++started; }
    void onTileBatch(const TileBatchEvent& e) override {
        ++batches;
        batchSizes.push_back(static_cast<int>(e.tileIds.size()));
        tileOrder.insert(tileOrder.end(), e.tileIds.begin(), e.tileIds.end());
        QVERIFY(e.timing.hostMs >= 0.0);
        if (engine && batches == cancelAfterBatches) engine->requestCancel();
    }
    void onStep(const StepEvent&) override { ++steps; }
    void onPreview(const PreviewEvent& e) override {
        ++previews;
        previewSteps.push_back(e.step);
    }
    void onMemory(const MemorySample&) override { ++memory; }
};

// Untiled sampling written out independently: the whole canvas through the UNet each step.
std::vector<float> untiledSample(const UNetModel& model, const RunConfig& config) {
    SchedulerOptions options = model.schedulerOptions();
    options.eta = config.schedulerOptions.eta;
    options.timestepSpacing = config.schedulerOptions.timestepSpacing;
    auto scheduler = Scheduler::create(config.scheduler, options);
    scheduler->setTimesteps(config.steps);
    const int C = model.config().inChannels, H = config.height, W = config.width;
    const std::size_t n = static_cast<std::size_t>(C) * H * W;
    std::vector<float> x(n), in(n), eps(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = philoxNormal(config.seed, 0, i) * scheduler->initNoiseSigma();
    CpuBackend backend;
    backend.prepare(model, 1, H, W);
    for (int k = 0; k < config.steps; ++k) {
        const StepCoefficients K = scheduler->coefficients(k);
        for (std::size_t i = 0; i < n; ++i) in[i] = x[i] * K.modelInputScale;
        const float t = K.timestep;
        backend.forward(in.data(), &t, 1, eps.data());
        for (std::size_t i = 0; i < n; ++i)
            x[i] = applyStep(K, x[i], eps[i], philoxNormal(config.seed, static_cast<std::uint32_t>(k + 1), i), 0.0f);
    }
    return x;
}

// Forwards every call to a CpuTileDevice and logs it. With `lanes` > 1 it asks the loop for that
// many lanes. With `replay`, it behaves like a device that captures steps (the CUDA engine's
// step graphs): the first step of each variant records the loop's body (body(true)) as a list of
// calls, and every step of that variant then runs that list without calling the body; it is
// asynchronous (batches, timings and non-finite sites come with endStep).
class RecordingDevice : public TileDevice {
public:
    RecordingDevice(Backend& backend, int lanes, bool replay) : inner_(backend), lanes_(lanes), replay_(replay) {}

    std::vector<std::string> log;
    int captures = 0, replays = 0;
    std::vector<int> batchLanes;

    DevicePlan prepare(const DevicePrepare& request, RunRecord& record) override {
        DevicePlan plan = inner_.prepare(request, record);
        plan.lanes = lanes_;
        return plan;
    }
    void beginRun(const TiledPass& pass, RunRecord& record, std::function<void(const std::string&)> say) override {
        pass_ = &pass;
        for (const TileBatch& b : pass.batches) batchLanes.push_back(b.lane);
        inner_.beginRun(pass, record, std::move(say));
    }
    void startCanvas(const CanvasStart& start) override { inner_.startCanvas(start); }
    void beginStep(int step, const StepVariant& variant) override {
        log.push_back("beginStep " + std::to_string(step) + " " + variant.name());
        step_ = step;
        bad_.reset();
        captured_ = false;
        inner_.beginStep(step, variant);
    }
    bool runStep(const StepVariant& variant, const std::function<bool(bool)>& body) override {
        if (!replay_) return inner_.runStep(variant, body);
        std::vector<std::function<void()>>& calls = graphs_[variant.name()];
        if (calls.empty()) {
            recording_ = &calls;
            const bool done = body(true);
            recording_ = nullptr;
            if (!done) throw std::logic_error("a captured body stopped");
            ++captures;
            captured_ = true;
        } else {
            ++replays;
        }
        for (const auto& call : calls) call();
        return true;
    }
    StepReport endStep() override {
        StepReport report = inner_.endStep();
        if (replay_) {
            report.nonFinite = bad_;
            report.batches.assign(pass_->batches.size(), BatchReport{});
            report.graph = captured_ ? "capture" : "replay";
        }
        return report;
    }
    bool synchronous() const override { return !replay_; }

    void forkLanes() override {
        issue("forkLanes", [] {});
    }
    void beginBatch(const TileBatch& b) override {
        issue("beginBatch " + std::to_string(b.index), [] {});
    }
    void gather(const TileBatch& b) override {
        issue("gather", [this, b] { inner_.gather(b); });
    }
    void evaluate(const TileBatch& b, Branch branch) override {
        issue(branch == Branch::Conditional ? "evaluate" : "evaluate unconditional",
              [this, b, branch] { inner_.evaluate(b, branch); });
    }
    void combineGuidance(const TileBatch& b, float scale) override {
        issue("combineGuidance", [this, b, scale] { inner_.combineGuidance(b, scale); });
    }
    void joinBatch(const TileBatch&) override {
        issue("joinBatch", [] {});
    }
    bool checkOutput(const TileBatch& b) override {
        if (!replay_) {
            log.push_back("checkOutput");
            return inner_.checkOutput(b);
        }
        issue("checkOutput", [this, b] { note(inner_.checkOutput(b), b.index); });
        return false;
    }
    void scatter(const TileBatch& b, const StepVariant& v) override {
        issue("scatter", [this, b, v] { inner_.scatter(b, v); });
    }
    void endBatch(const TileBatch& b) override {
        issue("endBatch " + std::to_string(b.index), [] {});
    }
    void fuse(const StepVariant& v) override {
        issue("fuse", [this, v] { inner_.fuse(v); });
    }
    bool checkCanvas() override {
        if (!replay_) {
            log.push_back("checkCanvas");
            return inner_.checkCanvas();
        }
        issue("checkCanvas", [this] { note(inner_.checkCanvas(), -1); });
        return false;
    }
    void abandonStep() override { log.push_back("abandonStep"); }
    std::vector<float> readPreview(bool x0) override { return inner_.readPreview(x0); }
    std::vector<float> readCanvas() override { return inner_.readCanvas(); }
    SeamSums readSeams() override { return inner_.readSeams(); }
    void finishRun(RunRecord& record) override { inner_.finishRun(record); }

private:
    // Logs the call; while recording, keeps it for the replays, else runs it now.
    void issue(const std::string& name, std::function<void()> call) {
        log.push_back(name);
        if (recording_)
            recording_->push_back(std::move(call));
        else if (!replay_)
            call();
    }
    void note(bool found, int batch) {
        if (found && !bad_) bad_ = NonFiniteAt{step_, batch};
    }

    CpuTileDevice inner_;
    int lanes_;
    bool replay_;
    const TiledPass* pass_ = nullptr;
    int step_ = 0;
    bool captured_ = false;
    std::optional<NonFiniteAt> bad_;
    std::map<std::string, std::vector<std::function<void()>>> graphs_;
    std::vector<std::function<void()>>* recording_ = nullptr;
};

// A local function with another output size and channel count, like a VAE's decoder (larger) or
// encoder (smaller): resampling by up / down (nearest-neighbour up, block mean down, one of them
// 1) and a fixed channel mix, out(o) = bias(o) + sum_c m(o, c) in(c). Branch Unconditional mixes
// with other numbers (guidance tests).
struct ResampleMix {
    int inChannels = 3, outChannels = 4, up = 2, down = 1, tileH = 0, tileW = 0;
    float weight(int o, int c, Branch branch) const {
        return (branch == Branch::Conditional ? 0.25f : -0.5f) * static_cast<float>(1 + o - c) +
               0.1f * static_cast<float>(c);
    }
    float bias(int o, Branch branch) const {
        return branch == Branch::Conditional ? 0.1f * static_cast<float>(o) : -0.3f;
    }
    // Input channel c at output pixel (y, x).
    float sample(const float* in, int h, int w, int c, int y, int x) const {
        const float* plane = in + static_cast<std::size_t>(c) * h * w;
        if (down == 1) return plane[static_cast<std::size_t>(y / up) * w + x / up];
        float sum = 0;
        for (int i = 0; i < down; ++i)
            for (int q = 0; q < down; ++q) sum += plane[static_cast<std::size_t>(y * down + i) * w + x * down + q];
        return sum / static_cast<float>(down * down);
    }
    // One C x h x w image into outChannels x (h*up/down) x (w*up/down).
    void apply(const float* in, int h, int w, float* out, Branch branch) const {
        const int oh = h / down * up, ow = w / down * up;
        for (int o = 0; o < outChannels; ++o)
            for (int y = 0; y < oh; ++y)
                for (int x = 0; x < ow; ++x) {
                    float v = bias(o, branch);
                    for (int c = 0; c < inChannels; ++c) v += weight(o, c, branch) * sample(in, h, w, c, y, x);
                    out[(static_cast<std::size_t>(o) * oh + y) * ow + x] = v;
                }
    }
    HostTileFunction tiles() const {
        return [*this](const float* in, const float*, int count, float* out, Branch branch) {
            const std::size_t inElems = static_cast<std::size_t>(inChannels) * tileH * tileW;
            const std::size_t outElems =
                static_cast<std::size_t>(outChannels) * (tileH / down * up) * (tileW / down * up);
            for (int b = 0; b < count; ++b) apply(in + b * inElems, tileH, tileW, out + b * outElems, branch);
        };
    }
};

ImageTensor testCanvas(int channels, int height, int width) {
    ImageTensor t{channels, height, width, std::vector<float>(static_cast<std::size_t>(channels) * height * width)};
    for (std::size_t i = 0; i < t.data.size(); ++i)
        t.data[i] = std::sin(0.37f * static_cast<float>(i)) + 0.01f * float(i % 7);
    return t;
}

const CancelCheck kNeverCancel = [] { return false; };

float maxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
    float m = 0;
    for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
}

}  // namespace

class TestCpuEngine : public QObject {
    Q_OBJECT

private:
    std::shared_ptr<const UNetModel> model_ = tinyModel();

private slots:
    void imageOpsConvertLikeDiffusers() {
        ImageTensor t{3, 1, 2, {-1.0f, 1.0f, 0.0f, 2.0f, -3.0f, 0.003f}};
        const Rgb8Image rgb = toRgb8(t);
        QCOMPARE(rgb.width, 2);
        QCOMPARE(rgb.height, 1);
        // clamp(x/2 + 0.5) then round(255 v); planar R(-1, 1) G(0, 2) B(-3, 0.003) -> interleaved.
        const std::vector<std::uint8_t> expected{0, 128, 0, 255, 255, 128};
        QCOMPARE(rgb.pixels, expected);
        const ImageTensor back = fromRgb8(rgb);
        QCOMPARE(back.channels, 3);
        QCOMPARE(back.data[0], -1.0f);
        QCOMPARE(back.data[1], 1.0f);
        QVERIFY(std::fabs(back.data[2] - (128.0f / 255.0f * 2.0f - 1.0f)) < 1e-7f);
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, fromRgb8(rgb, 2));
        ImageTensor bad{3, 2, 2, {0.0f}};
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, toRgb8(bad));
        QCOMPARE(imageSha256(rgb).size(), std::size_t(64));
    }

    void oneTileEqualsUntiled_data() {
        QTest::addColumn<int>("scheduler");
        QTest::addColumn<int>("fusion");
        QTest::newRow("ddim-sample") << int(SchedulerKind::DDIM) << int(FusionRule::Sample);
        QTest::newRow("ddim-noise") << int(SchedulerKind::DDIM) << int(FusionRule::Noise);
        QTest::newRow("ddpm-sample") << int(SchedulerKind::DDPM) << int(FusionRule::Sample);
        QTest::newRow("ddpm-noise") << int(SchedulerKind::DDPM) << int(FusionRule::Noise);
        QTest::newRow("euler-sample") << int(SchedulerKind::Euler) << int(FusionRule::Sample);
    }
    void oneTileEqualsUntiled() {
        QFETCH(int, scheduler);
        QFETCH(int, fusion);
        RunConfig config = baseConfig();
        config.width = config.height = 16;  // one 16x16 tile covers the image
        config.scheduler = static_cast<SchedulerKind>(scheduler);
        config.fusion = static_cast<FusionRule>(fusion);
        auto engine = makeEngine(model_);
        CountingObserver observer;
        const RunResult result = engine->run(config, observer);
        QCOMPARE(result.record.tileCount, 1);
        QCOMPARE(std::string(toString(result.record.status)), std::string("finished"));
        const std::vector<float> reference = untiledSample(*model_, config);
        QCOMPARE(result.image.data.size(), reference.size());
        // x = (w x') / w differs from x' by at most one rounding per step.
        const float diff = maxAbsDiff(result.image.data, reference);
        QVERIFY2(diff < 1e-4f, qPrintable(QStringLiteral("max |tiled - untiled| = %1").arg(diff)));
    }

    void tileBatchDoesNotChangeTheImage_data() {
        QTest::addColumn<int>("fusion");
        QTest::newRow("sample") << int(FusionRule::Sample);
        QTest::newRow("noise") << int(FusionRule::Noise);
    }
    void tileBatchDoesNotChangeTheImage() {
        QFETCH(int, fusion);
        RunConfig config = baseConfig();
        config.fusion = static_cast<FusionRule>(fusion);
        config.scheduler = SchedulerKind::DDPM;  // noise added each step: exercises the canvas-keyed draws
        CountingObserver o1, o3;
        config.tileBatch = 1;
        const RunResult one = makeEngine(model_)->run(config, o1);
        config.tileBatch = 3;
        const RunResult three = makeEngine(model_)->run(config, o3);
        QCOMPARE(one.record.tileCount, 6);
        QVERIFY(one.image.data == three.image.data);  // bit-identical
        QCOMPARE(one.record.imageSha256, three.record.imageSha256);
        QVERIFY(one.seamMap.data == three.seamMap.data);
    }

    // The record says what ran (the CPU computes in fp32 whatever was asked), with a note of what
    // was asked.
    void recordSaysWhatRan() {
        RunConfig config = baseConfig();
        config.backend = BackendKind::Auto;
        config.precision = Precision::FP16;
        CountingObserver observer;
        const RunResult r = makeEngine(model_)->run(config, observer);
        QCOMPARE(std::string(toString(r.record.status)), std::string("finished"));
        QCOMPARE(std::string(toString(r.record.config.backend)), std::string("cpu"));
        QCOMPARE(std::string(toString(r.record.config.precision)), std::string("fp32"));
        QCOMPARE(r.record.environment.backend, std::string("cpu"));
        bool noted = false;
        for (const std::string& m : r.record.messages)
            noted = noted || (m.find("precision: fp32") == 0 && m.find("fp16 was asked") != std::string::npos);
        QVERIFY(noted);

        config.precision = Precision::FP32;  // nothing to say when the request is what ran
        CountingObserver o2;
        const RunResult same = makeEngine(model_)->run(config, o2);
        for (const std::string& m : same.record.messages) QVERIFY2(m.find("precision:") != 0, m.c_str());
        QCOMPARE(same.record.imageSha256, r.record.imageSha256);
    }

    // The seam score measures how visible the tile borders are in the image (1 = not
    // at all). Tiles that disagree (each adds its own mean level, as tiles of a real model drift
    // apart) through the same tiled pass: `none` hands pixels over with a hard step and reads
    // clearly above Hann, which crosses over smoothly; one tile is not measured. A run records it.
    void seamScoreOfNoneIsAboveHann() {
        const int w = 128, h = 96;
        ImageTensor input{3, h, w, std::vector<float>(static_cast<std::size_t>(3 * w * h))};
        for (int c = 0; c < 3; ++c)
            for (int y = 0; y < h; ++y)
                for (int x = 0; x < w; ++x)
                    input.data[(static_cast<std::size_t>(c) * h + y) * w + x] =
                        0.5f * std::sin(0.05f * x * (c + 1)) * std::cos(0.04f * y) + 0.003f * x;
        const auto disagreeing = [](const float* in, const float*, int count, float* out, Branch) {
            const std::size_t per = 3u * 32u * 32u;
            for (int t = 0; t < count; ++t) {
                double mean = 0;
                for (std::size_t i = 0; i < per; ++i) mean += in[t * per + i];
                mean /= static_cast<double>(per);
                for (std::size_t i = 0; i < per; ++i)
                    out[t * per + i] = in[t * per + i] + 4.0f * static_cast<float>(mean);
            }
        };
        MapSpec spec;
        spec.tile = 32;
        spec.overlap = 12;
        spec.batch = 4;
        spec.outChannels = 3;
        const auto scoreOf = [&](BlendWindowKind window) {
            spec.window = window;
            CpuTileDevice device(disagreeing);
            CountingObserver observer;
            const std::optional<ImageTensor> out = TiledLoop::map(device, input, spec, observer, kNeverCancel);
            return seamScore(*out, TilePlan::make(w, h, spec.tile, spec.overlap));
        };
        const SeamScore none = scoreOf(BlendWindowKind::None), hann = scoreOf(BlendWindowKind::Hann);
        qInfo("seam score: none %.3f (worst %.3f), hann %.3f (worst %.3f)", none.score, none.worst, hann.score,
              hann.worst);
        QVERIFY2(none.score > 1.5 * hann.score,
                 qPrintable(QString::number(none.score) + " vs " + QString::number(hann.score)));
        QVERIFY(none.worst > hann.worst);
        QVERIFY(hann.score > 0);

        RunConfig config = baseConfig();  // 6 tiles: measured and recorded
        CountingObserver o;
        const RunResult run = makeEngine(model_)->run(config, o);
        QVERIFY(run.record.seamScore > 0 && run.record.seamWorst >= run.record.seamScore);
        config.width = config.height = config.tile;
        const RunResult single = makeEngine(model_)->run(config, o);
        QCOMPARE(single.record.seamScore, -1.0);
    }

    void sameSeedSameImageOtherSeedOther() {
        RunConfig config = baseConfig();
        auto engine = makeEngine(model_);
        CountingObserver o;
        const RunResult a = engine->run(config, o);
        const RunResult b = engine->run(config, o);  // reuses the prepared backend
        QVERIFY(a.image.data == b.image.data);
        QVERIFY(a.record.runId != b.record.runId);
        config.seed = 8;
        const RunResult c = engine->run(config, o);
        QVERIFY(a.image.data != c.image.data);
    }

    void observerEventCounts_data() {
        QTest::addColumn<int>("batch");
        QTest::addColumn<int>("expectedBatchesPerStep");
        QTest::newRow("batch 1") << 1 << 6;
        QTest::newRow("batch 4") << 4 << 2;
        QTest::newRow("batch 6") << 6 << 1;
        QTest::newRow("batch 10") << 10 << 1;
    }
    void observerEventCounts() {
        QFETCH(int, batch);
        QFETCH(int, expectedBatchesPerStep);
        RunConfig config = baseConfig();
        config.steps = 5;
        config.tileBatch = batch;
        config.previewEvery = 2;
        CountingObserver observer;
        const RunResult result = makeEngine(model_)->run(config, observer);
        QCOMPARE(observer.started, 1);
        QCOMPARE(observer.steps, 5);
        QCOMPARE(observer.batches, 5 * expectedBatchesPerStep);
        QCOMPARE(observer.memory, 5);
        // Previews after steps 2 and 4 (1-based) and the final image.
        QCOMPARE(observer.previewSteps, (std::vector<int>{1, 3, 4}));
        // Tiles in id order within every step, all batches full except possibly the last.
        QCOMPARE(static_cast<int>(observer.tileOrder.size()), 5 * 6);
        for (std::size_t i = 0; i < observer.tileOrder.size(); ++i) QCOMPARE(observer.tileOrder[i], int(i % 6));
        for (std::size_t i = 0; i < observer.batchSizes.size(); ++i)
            if (i % expectedBatchesPerStep != std::size_t(expectedBatchesPerStep - 1))
                QCOMPARE(observer.batchSizes[i], std::min(batch, 6));
        QCOMPARE(result.record.stepsRun, 5);
        QCOMPARE(result.record.steps.size(), std::size_t(5));
        QCOMPARE(result.record.batches.size(), std::size_t(5 * expectedBatchesPerStep));
        QCOMPARE(result.record.timesteps.size(), std::size_t(5));
        QVERIFY(result.record.totalMs > 0);
        QCOMPARE(result.record.environment.backend, std::string("cpu"));
        QCOMPARE(result.record.imageSha256.size(), std::size_t(64));
        QCOMPARE(result.record.tileW, 16);
        QCOMPARE(result.record.tileH, 16);
    }

    void cancelBetweenTileBatches() {
        RunConfig config = baseConfig();
        config.steps = 4;
        config.tileBatch = 2;  // 3 batches per step
        auto engine = makeEngine(model_);
        CountingObserver observer;
        observer.engine = engine.get();
        observer.cancelAfterBatches = 4;  // during step 2 (index 1)
        const RunResult result = engine->run(config, observer);
        QCOMPARE(std::string(toString(result.record.status)), std::string("cancelled"));
        QCOMPARE(observer.batches, 4);
        QCOMPARE(result.record.stepsRun, 1);
        QCOMPARE(observer.steps, 1);
        QCOMPARE(result.image.data.size(), std::size_t(3 * 24 * 32));
        for (float v : result.image.data) QVERIFY(std::isfinite(v));
        // The flag stays set until reset: the next run is cancelled before its first batch.
        CountingObserver second;
        QCOMPARE(engine->run(config, second).record.stepsRun, 0);
        engine->resetCancel();
        CountingObserver third;
        QCOMPARE(std::string(toString(engine->run(config, third).record.status)), std::string("finished"));
    }

    void bothFusionRulesRun() {
        RunConfig config = baseConfig();
        CountingObserver o;
        config.fusion = FusionRule::Sample;
        const RunResult sample = makeEngine(model_)->run(config, o);
        config.fusion = FusionRule::Noise;
        const RunResult noise = makeEngine(model_)->run(config, o);
        for (float v : sample.image.data) QVERIFY(std::isfinite(v));
        for (float v : noise.image.data) QVERIFY(std::isfinite(v));
        // With DDIM (eta 0, clipping) the two rules differ where tiles overlap.
        QVERIFY(maxAbsDiff(sample.image.data, noise.image.data) > 0.0f);
        QCOMPARE(toString(noise.record.config.fusion), std::string_view("noise"));
    }

    void seamMap() {
        RunConfig config = baseConfig();
        CountingObserver o;
        {
            RunConfig single = config;
            single.width = single.height = 16;
            const RunResult r = makeEngine(model_)->run(single, o);
            QCOMPARE(r.seamMap.channels, 1);
            QCOMPARE(r.seamMap.data.size(), std::size_t(16 * 16));
            for (float v : r.seamMap.data) QCOMPARE(v, 0.0f);
        }
        for (FusionRule rule : {FusionRule::Sample, FusionRule::Noise}) {
            config.fusion = rule;
            const RunResult r = makeEngine(model_)->run(config, o);
            QCOMPARE(r.seamMap.height, 24);
            QCOMPARE(r.seamMap.width, 32);
            float maxSeam = 0;
            for (float v : r.seamMap.data) {
                QVERIFY(v >= 0.0f);
                maxSeam = std::max(maxSeam, v);
            }
            QVERIFY(maxSeam > 0.0f);
            // Pixel (0,0) lies in tile 0 only; pixel (12, 12) in tiles 0, 1, 3 and 4.
            QCOMPARE(r.seamMap.data[0], 0.0f);
            QVERIFY(r.seamMap.data[12 * 32 + 12] > 0.0f);
        }
    }

    void windowNoneMatchesOwnership() {
        // Hard boundaries: every pixel has one owner, so the seam map is zero everywhere.
        RunConfig config = baseConfig();
        config.window = BlendWindowKind::None;
        CountingObserver o;
        const RunResult r = makeEngine(model_)->run(config, o);
        for (float v : r.seamMap.data) QCOMPARE(v, 0.0f);
    }

    void badConfigRejected_data() {
        QTest::addColumn<QString>("field");
        QTest::newRow("tile 0") << "tile";
        QTest::newRow("tile odd") << "tile";
        QTest::newRow("overlap >= tile") << "overlap";
        QTest::newRow("width 0") << "width";
        QTest::newRow("batch -1") << "batch";
        QTest::newRow("steps 0") << "steps";
    }
    void badConfigRejected() {
        QFETCH(QString, field);
        RunConfig config = baseConfig();
        const QString row = QString::fromLatin1(QTest::currentDataTag());
        if (row == "tile 0") config.tile = 0;
        if (row == "tile odd") config.tile = 15;  // the tiny model halves once: multiples of 2
        if (row == "overlap >= tile") config.overlapPx = 16;
        if (row == "width 0") config.width = 0;
        if (row == "batch -1") config.tileBatch = -1;  // 0 is auto
        if (row == "steps 0") config.steps = 0;
        auto engine = makeEngine(model_);
        CountingObserver observer;
        try {
            engine->run(config, observer);
            QFAIL("run() accepted a bad configuration");
        } catch (const ValidationError& e) {
            QCOMPARE(QString::fromStdString(e.field()), field);
            QVERIFY2(QString::fromUtf8(e.what()).startsWith(field + ":"), e.what());
        }
        QCOMPARE(observer.started, 0);
    }

    void missingModelFolderNamed() {
        CpuEngine engine(std::make_unique<CpuBackend>());
        RunConfig config = baseConfig();
        config.model = "/nonexistent/tessera-model";
        CountingObserver observer;
        try {
            engine.run(config, observer);
            QFAIL("run() accepted a missing model folder");
        } catch (const std::exception& e) {
            QVERIFY2(QString::fromUtf8(e.what()).contains("tessera-model"), e.what());
        }
    }

    void imageToImage() {
        RunConfig config = baseConfig();
        config.steps = 6;
        config.initImage = "in-memory";
        config.strength = 0.5;
        ImageTensor init{3, 24, 32, std::vector<float>(3 * 24 * 32)};
        for (std::size_t i = 0; i < init.data.size(); ++i) init.data[i] = std::sin(0.01f * float(i));
        auto engine = makeEngine(model_);
        CountingObserver observer;
        QVERIFY_THROWS_EXCEPTION(ValidationError, engine->run(config, observer));  // not loaded yet
        engine->setInitImage(init);
        const RunResult r = engine->run(config, observer);
        QCOMPARE(r.record.stepsRun, 3);  // starts at step index 6 - int(6 * 0.5) = 3
        QCOMPARE(observer.steps, 3);
        for (float v : r.image.data) QVERIFY(std::isfinite(v));
        // Deterministic, and not the same as a run from pure noise.
        QVERIFY(engine->run(config, observer).image.data == r.image.data);
        RunConfig fromNoise = config;
        fromNoise.initImage.clear();
        auto plain = makeEngine(model_);
        QVERIFY(plain->run(fromNoise, observer).image.data != r.image.data);
        // int(6 * 0.1) = 0 steps to run: the start image comes back unchanged.
        config.strength = 0.1;
        const RunResult none = engine->run(config, observer);
        QCOMPARE(none.record.stepsRun, 0);
        QVERIFY(none.image.data == init.data);
        // preserve_color: each channel keeps the start image's mean.
        config.strength = 0.5;
        config.preserveColor = true;
        const RunResult kept = engine->run(config, observer);
        const std::size_t plane = 24 * 32;
        for (int c = 0; c < 3; ++c) {
            double a = 0, b = 0;
            for (std::size_t p = 0; p < plane; ++p) {
                a += kept.image.data[c * plane + p];
                b += init.data[c * plane + p];
            }
            QVERIFY2(std::fabs(a - b) / plane < 1e-4, qPrintable(QString::number((a - b) / plane)));
        }
        QVERIFY(kept.image.data != r.image.data);
        config.preserveColor = false;
        // A start image of the wrong size is named.
        engine->setInitImage(ImageTensor{3, 16, 16, std::vector<float>(3 * 16 * 16)});
        try {
            engine->run(config, observer);
            QFAIL("a mis-sized init image was accepted");
        } catch (const ValidationError& e) {
            QCOMPARE(e.field(), std::string("init"));
        }
    }

    // Weights scaled by 1e30 must not render saturated noise as a finished run: here the time
    // embedding's second linear layer reaches ~1e59, past float32, so the run stops at the first
    // tile batch of the first step, and its record says it failed, and why.
    void overflowingWeightsStopTheRun() {
        std::map<std::string, HostTensor> tensors = model_->tensors();
        for (auto& entry : tensors)
            for (float& v : entry.second.data) v *= 1e30f;
        auto engine =
            makeEngine(std::make_shared<const UNetModel>(UNetModel::fromTensors(tinyConfig(), std::move(tensors))));
        CountingObserver observer;
        try {
            engine->run(baseConfig(), observer);
            QFAIL("a run whose UNet output is not finite finished");
        } catch (const NonFiniteError& e) {
            const QString what = QString::fromUtf8(e.what());
            QVERIFY2(what.startsWith("non-finite values (NaN or infinity) in the UNet output at step 1/4 (timestep "
                                     "750), tile batch 1/6 (tile 0); the UNet computed in fp32"),
                     e.what());
            QCOMPARE(e.site().step, 0);
            QCOMPARE(e.site().batch, 0);
            QCOMPARE(std::string(toString(e.record().status)), std::string("failed"));
            QCOMPARE(e.record().error, std::string(e.what()));
            QCOMPARE(e.record().stepsRun, 0);
            QVERIFY(!e.record().runId.empty());
        }
        QCOMPARE(observer.started, 1);
        QCOMPARE(observer.steps, 0);
        QCOMPARE(observer.batches, 0);
    }

    // A NaN in one pixel of the start image, covered by one tile only: the run stops at the first
    // step it runs, in the tile batch holding that tile (the batches before it ran).
    void poisonedLatentNamesStepAndTile_data() {
        QTest::addColumn<int>("batch");
        QTest::newRow("batch 1") << 1;
        QTest::newRow("batch 4") << 4;
    }

    void poisonedLatentNamesStepAndTile() {
        QFETCH(int, batch);
        RunConfig config = baseConfig();
        config.tileBatch = batch;
        config.initImage = "in-memory";
        config.strength = 0.5;  // starts at step index 4 - int(4 * 0.5) = 2
        const int y = 23, x = 31;
        ImageTensor init{3, 24, 32, std::vector<float>(3 * 24 * 32, 0.25f)};
        init.data[(1 * 24 + y) * 32 + x] = std::numeric_limits<float>::quiet_NaN();
        const TilePlan plan = TilePlan::fromConfig(config);
        std::vector<int> covering;
        for (const TileRect& r : plan.tiles())
            if (y >= r.y && y < r.y + plan.tileH() && x >= r.x && x < r.x + plan.tileW()) covering.push_back(r.id);
        QCOMPARE(covering.size(), std::size_t(1));
        const int tile = covering.front(), batches = (plan.count() + batch - 1) / batch, j = tile / batch;
        const int first = j * batch, last = std::min(plan.count(), first + batch) - 1;
        const QString tiles =
            first == last ? QString("tile %1").arg(first) : QString("tiles %1-%2").arg(first).arg(last);

        auto engine = makeEngine(model_);
        engine->setInitImage(init);
        CountingObserver observer;
        try {
            engine->run(config, observer);
            QFAIL("a run with a NaN in its latents finished");
        } catch (const NonFiniteError& e) {
            const QString want =
                QString("at step 3/4 (timestep 250), tile batch %1/%2 (%3);").arg(j + 1).arg(batches).arg(tiles);
            QVERIFY2(QString::fromUtf8(e.what()).contains(want), qPrintable(QString(e.what()) + "\nwanted: " + want));
            QCOMPARE(e.site().step, 2);
            QCOMPARE(e.site().batch, j);
            QCOMPARE(static_cast<int>(e.record().batches.size()), j);
        }
        QCOMPARE(observer.batches, j);
        QCOMPARE(observer.steps, 0);
        // The same engine runs a clean start image to the end afterwards.
        engine->setInitImage(ImageTensor{3, 24, 32, std::vector<float>(3 * 24 * 32, 0.25f)});
        QCOMPARE(std::string(toString(engine->run(config, observer).record.status)), std::string("finished"));
    }

    // The message both engines give: the tiles of the batch, and per precision what to change.
    void nonFiniteMessageAndCheck() {
        NonFiniteSite site{4, 20, 799.5f, 2, 9, 7, 1, Precision::FP16};
        QCOMPARE(nonFiniteMessage(site),
                 std::string("non-finite values (NaN or infinity) in the UNet output at step 5/20 (timestep 799.5), "
                             "tile batch 3/9 (tile 7); the UNet computed in fp16, which overflows above 65504: run "
                             "again with precision bf16 or fp32 (float32's range)"));
        site.tileCount = 4;
        site.precision = Precision::BF16;
        QVERIFY2(nonFiniteMessage(site).find("(tiles 7-10); the UNet computed in bf16") != std::string::npos,
                 nonFiniteMessage(site).c_str());
        QVERIFY(nonFiniteMessage(site).find("run again with precision fp32") != std::string::npos);
        site.precision = Precision::FP32;
        QVERIFY(nonFiniteMessage(site).find("fp32, which overflows above 3.4e38") != std::string::npos);
        const float values[] = {0.0f, -1.0f, std::numeric_limits<float>::max(),
                                std::numeric_limits<float>::denorm_min()};
        QVERIFY(allFinite(values, 4));
        for (const float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()}) {
            std::vector<float> v(37, 1.0f);
            v[29] = bad;
            QVERIFY(!allFinite(v.data(), v.size()));
            QVERIFY(allFinite(v.data(), 29));
        }
    }

    // Finite UNet outputs whose scheduler update overflows (conv_out predicts 1e38 everywhere and
    // clipping is off, so x0 = ax x + ae eps passes float32's range): the check after the update
    // names the step and the latents, not a tile.
    void overflowingUpdateNamesTheLatents() {
        std::map<std::string, HostTensor> tensors = model_->tensors();
        std::fill(tensors.at("conv_out.weight").data.begin(), tensors.at("conv_out.weight").data.end(), 0.0f);
        std::fill(tensors.at("conv_out.bias").data.begin(), tensors.at("conv_out.bias").data.end(), 1e38f);
        SchedulerOptions noClip;
        noClip.clipSample = false;
        auto engine = makeEngine(
            std::make_shared<const UNetModel>(UNetModel::fromTensors(tinyConfig(), std::move(tensors), noClip)));
        CountingObserver observer;
        try {
            engine->run(baseConfig(), observer);
            QFAIL("a run whose latents overflowed finished");
        } catch (const NonFiniteError& e) {
            QVERIFY2(QString::fromUtf8(e.what()).startsWith(
                         "non-finite values (NaN or infinity) in the latents after the scheduler update of step 1/4 "
                         "(timestep 750), although every tile's UNet output was finite"),
                     e.what());
            QCOMPARE(e.site().batch, -1);
            QCOMPARE(std::string(toString(e.record().status)), std::string("failed"));
        }
        QCOMPARE(observer.batches, 6);  // every tile batch of the step ran
        QCOMPARE(observer.steps, 0);
    }

    // The loop issues a step as TileDevice calls in the order TileDevice.h documents, batches
    // round robin on the lanes the device asked for; a step's calls do not depend on lanes.
    void loopIssuesTheDocumentedCalls() {
        RunConfig config = baseConfig();
        config.steps = 2;
        config.tileBatch = 2;  // 6 tiles: 3 batches
        CpuBackend backend;
        RecordingDevice device(backend, 2, false);
        TiledLoop loop;
        loop.setModel(model_);
        CountingObserver observer;
        const RunResult r = loop.run(config, observer, device, kNeverCancel);
        QCOMPARE(device.batchLanes, (std::vector<int>{0, 1, 0}));
        std::vector<std::string> want;
        for (int k = 0; k < 2; ++k) {
            want.push_back("beginStep " + std::to_string(k) + (k == 1 ? " last" : " normal"));
            want.push_back("forkLanes");
            for (int j = 0; j < 3; ++j)
                for (const std::string& call :
                     {"beginBatch " + std::to_string(j), std::string("gather"), std::string("evaluate"),
                      std::string("joinBatch"), std::string("checkOutput"), std::string("scatter"),
                      "endBatch " + std::to_string(j)})
                    want.push_back(call);
            want.push_back("fuse");
            want.push_back("checkCanvas");
        }
        QCOMPARE(device.log, want);
        QCOMPARE(r.record.stepsRun, 2);
        QCOMPARE(observer.batches, 6);
        const RunResult direct = makeEngine(model_)->run(config, observer);
        QVERIFY(r.image.data == direct.image.data);
        QVERIFY(r.seamMap.data == direct.seamMap.data);
    }

    // A device that captures each step variant once and replays the recording (what the CUDA
    // engine's step graphs do) makes the same bits as one that runs every call: the loop's step
    // depends on the step only through the device's per-step scalars. The loop reports the
    // batches with the step, and previews and the seam map from the replayed steps.
    void replayedStepsAreBitIdentical_data() {
        QTest::addColumn<int>("fusion");
        QTest::newRow("sample") << int(FusionRule::Sample);
        QTest::newRow("noise") << int(FusionRule::Noise);
    }
    void replayedStepsAreBitIdentical() {
        QFETCH(int, fusion);
        RunConfig config = baseConfig();
        config.fusion = static_cast<FusionRule>(fusion);
        config.scheduler = SchedulerKind::DDPM;  // noise every step: the draw follows the step index
        config.steps = 5;                        // normal, preview, normal, preview, last
        config.previewEvery = 2;
        config.tileBatch = 4;  // batches of 4 and 2
        CountingObserver direct, replayed;
        const RunResult want = makeEngine(model_)->run(config, direct);
        CpuBackend backend;
        RecordingDevice device(backend, 1, true);
        TiledLoop loop;
        loop.setModel(model_);
        const RunResult got = loop.run(config, replayed, device, kNeverCancel);
        QCOMPARE(device.captures, 3);
        QCOMPARE(device.replays, 2);
        QVERIFY2(got.image.data == want.image.data, "replayed steps changed the image");
        QVERIFY2(got.seamMap.data == want.seamMap.data, "replayed steps changed the seam map");
        QCOMPARE(replayed.previewSteps, direct.previewSteps);
        QCOMPARE(replayed.tileOrder, direct.tileOrder);
        QCOMPARE(got.record.batches.size(), want.record.batches.size());
        const std::vector<std::string> graphs{"capture", "capture", "replay", "replay", "capture"};
        for (std::size_t k = 0; k < graphs.size(); ++k) {
            QCOMPARE(got.record.steps[k].graph, graphs[k]);
            QCOMPARE(got.record.steps[k].captured, graphs[k] == "capture");
        }
        // The body ran on the three capture steps only: 2 batches x 7 calls + forkLanes, fuse, checkCanvas.
        QCOMPARE(static_cast<int>(device.log.size()), 5 + 3 * (2 * 7 + 3));
    }

    // With replayed steps the non-finite site still names the step and the tile batch (read back
    // with the step), and the batches before it are not reported as finished.
    void replayedStepsStopAtNonFinite() {
        RunConfig config = baseConfig();
        config.tileBatch = 2;
        config.initImage = "in-memory";
        config.strength = 0.75;  // starts at step index 4 - int(4 * 0.75) = 1: steps 2 and 3 replay
        ImageTensor init{3, 24, 32, std::vector<float>(3 * 24 * 32, 0.25f)};
        CpuBackend backend;
        RecordingDevice device(backend, 1, true);
        TiledLoop loop;
        loop.setModel(model_);
        loop.setInitImage(init);
        CountingObserver observer;
        QCOMPARE(std::string(toString(loop.run(config, observer, device, kNeverCancel).record.status)),
                 std::string("finished"));
        init.data[(2 * 24 + 23) * 32 + 31] = std::numeric_limits<float>::quiet_NaN();  // tile 5 only: batch 3/3
        loop.setInitImage(init);
        CountingObserver failing;
        try {
            loop.run(config, failing, device, kNeverCancel);
            QFAIL("a replayed run with a NaN in its latents finished");
        } catch (const NonFiniteError& e) {
            QVERIFY2(QString::fromUtf8(e.what()).contains("at step 2/4 (timestep 500), tile batch 3/3 (tiles 4-5);"),
                     e.what());
            QCOMPARE(e.site().batch, 2);
            QCOMPARE(e.record().batches.size(), std::size_t(0));
        }
        QCOMPARE(failing.batches, 0);
        QVERIFY(device.replays > 0);
    }

    // Cancellation: between tile batches where the body runs, before the next step where a
    // device replays it (a replayed step is never cut short).
    void cancellationWithRecordedDevices() {
        RunConfig config = baseConfig();
        config.tileBatch = 2;
        CpuBackend backend;
        TiledLoop loop;
        loop.setModel(model_);
        bool cancel = false;
        const CancelCheck check = [&cancel] { return cancel; };
        struct CancelAfter : CountingObserver {
            bool* flag = nullptr;
            int afterBatches = -1, afterSteps = -1;
            void onTileBatch(const TileBatchEvent& e) override {
                CountingObserver::onTileBatch(e);
                if (batches == afterBatches) *flag = true;
            }
            void onStep(const StepEvent& e) override {
                CountingObserver::onStep(e);
                if (steps == afterSteps) *flag = true;
            }
        };
        RecordingDevice eager(backend, 1, false);
        CancelAfter o1;
        o1.flag = &cancel;
        o1.afterBatches = 4;  // step 2's first batch
        const RunResult a = loop.run(config, o1, eager, check);
        QCOMPARE(std::string(toString(a.record.status)), std::string("cancelled"));
        QCOMPARE(a.record.stepsRun, 1);
        QCOMPARE(o1.batches, 4);
        QCOMPARE(std::count(eager.log.begin(), eager.log.end(), std::string("abandonStep")), 1);
        cancel = false;
        RecordingDevice replaying(backend, 1, true);
        CancelAfter o2;
        o2.flag = &cancel;
        o2.afterBatches = 4;  // during step 2's reports: the step has run; step 3 does not start
        const RunResult b = loop.run(config, o2, replaying, check);
        QCOMPARE(std::string(toString(b.record.status)), std::string("cancelled"));
        QCOMPARE(b.record.stepsRun, 2);
        QCOMPARE(o2.batches, 6);
        QCOMPARE(std::count(replaying.log.begin(), replaying.log.end(), std::string("abandonStep")), 0);
        for (float v : b.image.data) QVERIFY(std::isfinite(v));
    }

    // A map pass tiles any function over any canvas: a pointwise function gives the same values
    // tiled as applied to the whole canvas (blending equal values changes them by rounding only),
    // with another output size and channel count, for every window and tile batch.
    void mapTilesAnyFunction_data() {
        QTest::addColumn<int>("up");
        QTest::addColumn<int>("down");
        QTest::addColumn<int>("outChannels");
        QTest::addColumn<int>("window");
        QTest::addColumn<int>("batch");
        QTest::newRow("x1, 3 -> 3, hann, batch 1") << 1 << 1 << 3 << int(BlendWindowKind::Hann) << 1;
        QTest::newRow("x2, 3 -> 4, hann, batch 3") << 2 << 1 << 4 << int(BlendWindowKind::Hann) << 3;
        QTest::newRow("x3, 3 -> 1, linear, batch 2") << 3 << 1 << 1 << int(BlendWindowKind::Linear) << 2;
        QTest::newRow("x2, 3 -> 4, none, batch 20") << 2 << 1 << 4 << int(BlendWindowKind::None) << 20;
        QTest::newRow("x2, 3 -> 4, gaussian, batch 4") << 2 << 1 << 4 << int(BlendWindowKind::Gaussian) << 4;
        QTest::newRow("/2, 3 -> 4, hann, batch 2") << 1 << 2 << 4 << int(BlendWindowKind::Hann) << 2;
        QTest::newRow("/4, 3 -> 2, linear, batch 1") << 1 << 4 << 2 << int(BlendWindowKind::Linear) << 1;
    }
    void mapTilesAnyFunction() {
        QFETCH(int, up);
        QFETCH(int, down);
        QFETCH(int, outChannels);
        QFETCH(int, window);
        QFETCH(int, batch);
        const ImageTensor input = testCanvas(3, 20, 28);
        MapSpec spec;
        spec.tile = 8;
        spec.overlap = 4;
        spec.window = static_cast<BlendWindowKind>(window);
        spec.batch = batch;
        spec.upscale = up;
        spec.downscale = down;
        spec.outChannels = outChannels;
        ResampleMix f;
        f.outChannels = outChannels;
        f.up = up;
        f.down = down;
        f.tileH = f.tileW = 8;
        CpuTileDevice device(f.tiles());
        CountingObserver observer;
        const std::optional<ImageTensor> out = TiledLoop::map(device, input, spec, observer, kNeverCancel);
        QVERIFY(out.has_value());
        QCOMPARE(out->channels, outChannels);
        QCOMPARE(out->height, 20 / down * up);
        QCOMPARE(out->width, 28 / down * up);
        std::vector<float> whole(static_cast<std::size_t>(outChannels) * out->height * out->width);
        f.apply(input.data.data(), 20, 28, whole.data(), Branch::Conditional);
        const float diff = maxAbsDiff(out->data, whole);
        QVERIFY2(diff < 2e-5f, qPrintable(QString("max |tiled - whole| = %1").arg(diff)));
        const TilePlan plan = TilePlan::make(28, 20, 8, 4);
        QCOMPARE(observer.steps, 1);
        QCOMPARE(observer.batches, (plan.count() + batch - 1) / batch);
        QCOMPARE(static_cast<int>(observer.tileOrder.size()), plan.count());
    }

    // The guidance hook: two evaluations per batch, blended as u + s (c - u) before the scatter.
    void mapGuidance() {
        const ImageTensor input = testCanvas(3, 16, 24);
        MapSpec spec;
        spec.tile = 8;
        spec.overlap = 2;
        spec.batch = 2;
        spec.upscale = 2;
        spec.outChannels = 4;
        spec.guidance = Guidance{3.5f};
        ResampleMix f;
        f.tileH = f.tileW = 8;
        CpuTileDevice device(f.tiles());
        RunObserver quiet;
        const std::optional<ImageTensor> out = TiledLoop::map(device, input, spec, quiet, kNeverCancel);
        QVERIFY(out.has_value());
        std::vector<float> c(out->data.size()), u(out->data.size()), want(out->data.size());
        f.apply(input.data.data(), 16, 24, c.data(), Branch::Conditional);
        f.apply(input.data.data(), 16, 24, u.data(), Branch::Unconditional);
        for (std::size_t i = 0; i < want.size(); ++i) want[i] = u[i] + 3.5f * (c[i] - u[i]);
        const float diff = maxAbsDiff(out->data, want);
        QVERIFY2(diff < 1e-4f, qPrintable(QString("max |guided - expected| = %1").arg(diff)));
        QVERIFY(maxAbsDiff(out->data, c) > 0.1f);  // not the conditional evaluation alone
    }

    // A map pass stops like a run: cancelled (no image), a NaN named by its tile batch, a bad spec
    // or canvas named by field.
    void mapStopsAndRefuses() {
        ImageTensor input = testCanvas(3, 16, 24);
        MapSpec spec;
        spec.tile = 8;
        spec.overlap = 2;
        spec.upscale = 2;
        spec.outChannels = 4;
        ResampleMix f;
        f.tileH = f.tileW = 8;
        CpuTileDevice device(f.tiles());
        CountingObserver observer;
        int checks = 0;
        QVERIFY(!TiledLoop::map(device, input, spec, observer, [&checks] { return ++checks > 2; }).has_value());
        QCOMPARE(observer.batches, 1);  // checked before the step and the first batch, stopped before the second
        QCOMPARE(observer.steps, 0);

        input.data[(1 * 16 + 15) * 24 + 0] = std::numeric_limits<float>::quiet_NaN();  // bottom-left tile only
        const TilePlan plan = TilePlan::make(24, 16, 8, 2);
        const int tile = (plan.rows() - 1) * plan.cols();
        try {
            (void)TiledLoop::map(device, input, spec, observer, kNeverCancel);
            QFAIL("a map pass with a NaN in its input finished");
        } catch (const NonFiniteError& e) {
            const QString want = QString("at step 1/1 (timestep 0), tile batch %1/%2 (tile %3);")
                                     .arg(tile + 1)
                                     .arg(plan.count())
                                     .arg(tile);
            QVERIFY2(QString::fromUtf8(e.what()).contains(want), qPrintable(QString(e.what()) + "\nwanted: " + want));
            QCOMPARE(e.site().batch, tile);
        }

        for (const auto& [up, down] :
             {std::pair{0, 1}, std::pair{1, 0}, std::pair{1, 3}}) {  // 3 does not divide 16x24 tile 8
            spec.upscale = up;
            spec.downscale = down;
            try {
                (void)TiledLoop::map(device, input, spec, observer, kNeverCancel);
                QFAIL(qPrintable(QString("upscale %1, downscale %2 was accepted").arg(up).arg(down)));
            } catch (const ValidationError& e) {
                QCOMPARE(e.field(), std::string("map"));
                QVERIFY2(QString::fromUtf8(e.what()).startsWith("map: "), e.what());
            }
        }
        spec.upscale = 2;
        spec.downscale = 1;
        input.data.pop_back();
        try {
            (void)TiledLoop::map(device, input, spec, observer, kNeverCancel);
            QFAIL("a canvas whose data does not match its shape was accepted");
        } catch (const ValidationError& e) {
            QCOMPARE(e.field(), std::string("input"));
        }
    }
};

QTEST_GUILESS_MAIN(TestCpuEngine)
#include "tst_cpuengine.moc"
