// The one tiled loop (core/sampling/TiledLoop.h) on the CPU device with Stable Diffusion's stateful and
// ancestral samplers (Euler a, DPM++ 2M with and without Karras sigmas) against Scheduler::step
// on the whole canvas: one tile of a tiny random UNet, and any tiling of a per-pixel model (whose
// tiles agree wherever they overlap, so the blend must give the untiled result); both fusion
// rules, epsilon and v-prediction, text-to-image and image-to-image. So the x0 canvas the device
// keeps is the previous step's blended x0, the first step run has none, Euler a's noise is the
// canvas-keyed Philox draw of its step, and the x0 previews are the scheduler's x0.
#include <QtTest/QtTest>

#include <cmath>
#include <functional>
#include <memory>
#include <stdexcept>
#include <vector>

#include "core/base/CanvasShift.h"
#include "core/cpu/CpuBackend.h"
#include "core/cpu/CpuEngine.h"
#include "core/models/unet/UNetModel.h"
#include "core/sampling/BlendWindow.h"
#include "core/sampling/Philox.h"
#include "core/sampling/Scheduler.h"
#include "core/sampling/TilePlan.h"

using namespace tessera;

namespace {

// An SD-like latent UNet, tiny: 4 channels in and out, two levels.
UNetConfig latentConfig() {
    UNetConfig c;
    c.sampleSize = 16;
    c.inChannels = 4;
    c.outChannels = 4;
    c.blockOutChannels = {8, 16};
    c.downBlocks = {DownBlockType::Down, DownBlockType::AttnDown};
    c.upBlocks = {UpBlockType::AttnUp, UpBlockType::Up};
    c.layersPerBlock = 1;
    c.normNumGroups = 4;
    c.attentionHeadDim = 8;
    return c;
}

// diffusers' SD scheduler configuration (stable-diffusion-v1-5's scheduler/scheduler_config.json).
SchedulerOptions sdOptions(PredictionType prediction, bool karras) {
    SchedulerOptions o;
    o.betaStart = 0.00085f;
    o.betaEnd = 0.012f;
    o.betaSchedule = BetaSchedule::ScaledLinear;
    o.stepsOffset = 1;
    o.clipSample = false;
    o.setAlphaToOne = false;
    o.predictionType = prediction;
    o.karrasSigmas = karras;
    o.timestepSpacing = TimestepSpacing::Leading;
    return o;
}

std::shared_ptr<const UNetModel> sdModel(const SchedulerOptions& options) {
    const UNetConfig config = latentConfig();
    return std::make_shared<const UNetModel>(
        UNetModel::fromTensors(config, UNetModel::random(config, 4321).tensors(), options));
}

// eps = f(x, t) element by element: every tile sees the same value at a canvas pixel.
float perPixel(float x, float t) { return 0.6f * std::sin(1.3f * x) + 0.25f * x + 0.0004f * t; }

// The model's graph and weights are not used: only the tile shape (the tiled loop prepares the
// device's backend through prepareGraph).
class PerPixelBackend final : public Backend {
public:
    explicit PerPixelBackend(int channels) : channels_(channels) {}
    BackendInfo info() const override { return {"per-pixel", "eps = f(x, t) per element"}; }
    void prepareGraph(const ModelGraph&, const TensorMap&, int, int tileH, int tileW) override {
        perTile_ = static_cast<std::size_t>(channels_) * tileH * tileW;
    }
    void run(const std::vector<const float*>&, int, const std::vector<float*>&) override {
        throw std::logic_error("PerPixelBackend: only forward");
    }
    void prepare(const UNetModel&, int, int tileH, int tileW) override {
        perTile_ = static_cast<std::size_t>(channels_) * tileH * tileW;
    }
    void forward(const float* x, const float* timesteps, int batch, float* out) override {
        for (int b = 0; b < batch; ++b)
            for (std::size_t i = 0; i < perTile_; ++i) {
                const std::size_t j = static_cast<std::size_t>(b) * perTile_ + i;
                out[j] = perPixel(x[j], timesteps[b]);
            }
    }

private:
    int channels_;
    std::size_t perTile_ = 0;
};

// eps = perPixel(x, t) plus a ramp over the tile: the value at a canvas pixel depends on where
// the tile that covers it lies, so a run tells where its tiles were.
class TilePositionBackend final : public Backend {
public:
    explicit TilePositionBackend(int channels) : channels_(channels) {}
    BackendInfo info() const override { return {"tile-position", "eps = f(x, t) + a ramp over the tile"}; }
    void prepareGraph(const ModelGraph&, const TensorMap&, int, int tileH, int tileW) override {
        tileH_ = tileH;
        tileW_ = tileW;
    }
    void run(const std::vector<const float*>&, int, const std::vector<float*>&) override {
        throw std::logic_error("TilePositionBackend: only forward");
    }
    void prepare(const UNetModel&, int, int tileH, int tileW) override {
        tileH_ = tileH;
        tileW_ = tileW;
    }
    void forward(const float* x, const float* timesteps, int batch, float* out) override {
        const std::size_t plane = static_cast<std::size_t>(tileH_) * tileW_;
        for (int b = 0; b < batch; ++b)
            for (int c = 0; c < channels_; ++c)
                for (std::size_t i = 0; i < plane; ++i) {
                    const std::size_t j = (static_cast<std::size_t>(b) * channels_ + c) * plane + i;
                    out[j] =
                        ramp(perPixel(x[j], timesteps[b]), static_cast<int>(i / tileW_), static_cast<int>(i % tileW_));
                }
    }
    float ramp(float v, int y, int x) const {
        return v + 0.05f * static_cast<float>(x) / tileW_ - 0.03f * static_cast<float>(y) / tileH_;
    }

private:
    int channels_;
    int tileH_ = 0, tileW_ = 0;
};

RunConfig runConfig(SchedulerKind kind, FusionRule fusion) {
    RunConfig c;
    c.width = 32;
    c.height = 24;
    c.seed = 11;
    c.steps = 8;
    c.scheduler = kind;
    c.schedulerOptions.timestepSpacing = TimestepSpacing::Leading;  // the loop takes the spacing from the run
    c.tile = 16;
    c.overlapPx = 8;  // 3 x 2 tiles
    c.window = BlendWindowKind::Hann;
    c.fusion = fusion;
    c.tileBatch = 2;
    c.backend = BackendKind::CPU;
    c.previewEvery = 1;
    return c;
}

// The sampler on the whole canvas: x_T = z(0) σ_init (or the start image noised with
// Scheduler::addNoise at b = steps - int(steps strength) and z(kInitNoiseDraw)), then
// Scheduler::step with z(k + 1) and its history: the previous step's x0 and LMS's derivatives
// (none at the first step run).
struct Untiled {
    std::vector<float> image;
    std::vector<std::vector<float>> x0;  // per step run
};
using CanvasFunction = std::function<void(const std::vector<float>& in, float t, std::vector<float>& out)>;

Untiled untiled(const SchedulerOptions& options, const RunConfig& config, std::size_t n, const std::vector<float>* init,
                const CanvasFunction& model) {
    auto s = Scheduler::create(config.scheduler, options);
    s->setTimesteps(config.steps);
    int begin = 0;
    std::vector<float> x(n), in(n), eps(n), z(n), x0(n);
    Scheduler::StepHistory history;  // previous x0 and LMS's derivatives, empty before the first step run
    if (init) {
        begin = (config.steps - static_cast<int>(config.steps * config.strength)) * s->evaluationsPerStep();
        s->setBeginIndex(begin);
        const Scheduler::AddNoise c = s->addNoise(begin);
        for (std::size_t i = 0; i < n; ++i)
            x[i] = c.image * (*init)[i] + c.noise * philoxNormal(config.seed, kInitNoiseDraw, i);
    } else {
        for (std::size_t i = 0; i < n; ++i) x[i] = philoxNormal(config.seed, 0, i) * s->initNoiseSigma();
    }
    Untiled out;
    for (int k = begin; k < s->numSteps(); ++k) {
        const StepCoefficients K = s->coefficients(k);
        for (std::size_t i = 0; i < n; ++i) in[i] = x[i] * K.modelInputScale;
        model(in, K.timestep, eps);
        for (std::size_t i = 0; i < n; ++i) z[i] = philoxNormal(config.seed, static_cast<std::uint32_t>(k + 1), i);
        s->predictX0(k, eps.data(), x.data(), x0.data(), n);
        s->step(k, eps.data(), x.data(), z.data(), x.data(), n, history);
        out.x0.push_back(x0);
    }
    out.image = x;
    return out;
}

double relativeError(const std::vector<float>& got, const std::vector<float>& want) {
    if (got.size() != want.size()) return 1e30;
    double err = 0, scale = 1;
    for (std::size_t i = 0; i < got.size(); ++i) {
        err = std::max(err, std::fabs(static_cast<double>(got[i]) - want[i]));
        scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
    }
    return std::isfinite(err) ? err / scale : 1e30;
}

struct Previews : RunObserver {
    std::vector<int> steps;
    std::vector<std::vector<float>> images;
    void onPreview(const PreviewEvent& e) override {
        steps.push_back(e.step);
        images.push_back(e.image.data);
    }
};

std::vector<float> startImage(std::size_t n) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = 0.8f * std::sin(0.05f * static_cast<float>(i)) + 0.1f;
    return v;
}

void addRows() {
    QTest::addColumn<int>("kind");
    QTest::addColumn<bool>("karras");
    QTest::addColumn<int>("fusion");
    QTest::addColumn<int>("prediction");
    const struct {
        const char* name;
        SchedulerKind kind;
        bool karras;
    } samplers[] = {{"euler_a", SchedulerKind::EulerAncestral, false},
                    {"dpmpp_2m", SchedulerKind::DPMPP2M, false},
                    {"dpmpp_2m karras", SchedulerKind::DPMPP2M, true},
                    {"dpmpp_2m_sde", SchedulerKind::DPMPP2MSDE, false},
                    {"dpmpp_2m_sde karras", SchedulerKind::DPMPP2MSDE, true},
                    {"lms", SchedulerKind::LMS, false},
                    {"lms karras", SchedulerKind::LMS, true},
                    {"heun karras", SchedulerKind::Heun, true},
                    {"dpm2 karras", SchedulerKind::DPM2, true},
                    {"dpmpp_sde karras", SchedulerKind::DPMPPSDE, true},
                    {"unipc", SchedulerKind::UniPC, false},
                    {"unipc karras", SchedulerKind::UniPC, true}};
    for (const auto& s : samplers)
        for (const FusionRule fusion : {FusionRule::Sample, FusionRule::Noise})
            for (const PredictionType prediction : {PredictionType::Epsilon, PredictionType::VPrediction})
                QTest::newRow(qPrintable(
                    QStringLiteral("%1 %2 %3")
                        .arg(s.name, QString::fromUtf8(toString(fusion)), QString::fromUtf8(toString(prediction)))))
                    << int(s.kind) << s.karras << int(fusion) << int(prediction);
}

}  // namespace

class TestSamplerLoop : public QObject {
    Q_OBJECT

private slots:
    void oneTileEqualsSchedulerStep_data() { addRows(); }
    void oneTileEqualsSchedulerStep() {
        QFETCH(int, kind);
        QFETCH(bool, karras);
        QFETCH(int, fusion);
        QFETCH(int, prediction);
        const SchedulerOptions options = sdOptions(PredictionType(prediction), karras);
        const auto model = sdModel(options);
        RunConfig config = runConfig(SchedulerKind(kind), FusionRule(fusion));
        config.width = config.height = 16;  // one tile
        config.steps = 6;
        CpuEngine sampler(std::make_unique<CpuBackend>());
        sampler.setModel(model);
        Previews seen;
        const RunResult result = sampler.run(config, seen);
        QCOMPARE(result.record.tileCount, 1);
        QCOMPARE(std::string(toString(result.record.status)), std::string("finished"));

        CpuBackend backend;
        backend.prepare(*model, 1, 16, 16);
        const Untiled ref = untiled(options, config, result.image.data.size(), nullptr,
                                    [&](const std::vector<float>& in, float t, std::vector<float>& out) {
                                        backend.forward(in.data(), &t, 1, out.data());
                                    });
        const double err = relativeError(result.image.data, ref.image);
        QVERIFY2(err < 1e-5, qPrintable(QStringLiteral("tiled vs Scheduler::step: %1").arg(err)));
        QCOMPARE(seen.images.size(), ref.x0.size());  // one step per model evaluation
        for (std::size_t k = 0; k + 1 < ref.x0.size(); ++k) {
            const double previewErr = relativeError(seen.images[k], ref.x0[k]);
            QVERIFY2(previewErr < 1e-5,
                     qPrintable(QStringLiteral("step %1 x0 preview: %2").arg(int(k)).arg(previewErr)));
        }
    }

    void anyTilingEqualsUntiledForPerPixelModel_data() { addRows(); }
    void anyTilingEqualsUntiledForPerPixelModel() {
        QFETCH(int, kind);
        QFETCH(bool, karras);
        QFETCH(int, fusion);
        QFETCH(int, prediction);
        const SchedulerOptions options = sdOptions(PredictionType(prediction), karras);
        const RunConfig config = runConfig(SchedulerKind(kind), FusionRule(fusion));
        const std::size_t n = 4u * static_cast<std::size_t>(config.width) * config.height;
        const CanvasFunction pixels = [](const std::vector<float>& in, float t, std::vector<float>& out) {
            for (std::size_t i = 0; i < in.size(); ++i) out[i] = perPixel(in[i], t);
        };
        CpuEngine sampler(std::make_unique<PerPixelBackend>(4));
        sampler.setModel(sdModel(options));

        for (const bool fromImage : {false, true})
            for (const TileShift shift : {TileShift::Off, TileShift::Random}) {
                RunConfig c = config;
                c.tileShift = shift;  // every tile sees the same value at a canvas pixel wherever it lies
                const std::vector<float> init = startImage(n);
                if (fromImage) {
                    c.initImage = "in-memory";
                    c.strength = 0.6;  // begins at step 8 - int(4.8) = 4: a second-order step for DPM++ 2M
                    sampler.setInitImage(ImageTensor{4, c.height, c.width, init});
                } else {
                    sampler.setInitImage(ImageTensor{});
                }
                Previews seen;
                const RunResult result = sampler.run(c, seen);
                QCOMPARE(result.record.tileCount, 6);
                const Untiled ref = untiled(options, c, n, fromImage ? &init : nullptr, pixels);
                const double err = relativeError(result.image.data, ref.image);
                QVERIFY2(err < 1e-5,
                         qPrintable(QStringLiteral("%1, tile shift %2: tiled vs untiled %3")
                                        .arg(fromImage ? "img2img" : "txt2img", QString::fromUtf8(toString(shift)))
                                        .arg(err)));
                QCOMPARE(seen.images.size(), ref.x0.size());
                for (std::size_t k = 0; k + 1 < ref.x0.size(); ++k) {
                    const double previewErr = relativeError(seen.images[k], ref.x0[k]);
                    QVERIFY2(previewErr < 1e-5, qPrintable(QStringLiteral("preview %1: %2").arg(k).arg(previewErr)));
                }
            }
    }

    // Shifted tiles: each step's tiles lie over the canvas rolled by tileShifts' offset (torch.roll,
    // as ComfyUI-TiledDiffusion's SpotDiffusion rolls the latent): a model whose output depends on the
    // position inside its tile, against the rolled canvas tiled and blended by hand, step by step
    // (DDIM: first order, no noise). 40 x 24 with 16-pixel tiles and no overlap: the last column
    // overlaps its neighbour by 8, so the blend's normalizer is read in plan coordinates too.
    void shiftedTilesRollTheCanvas_data() {
        QTest::addColumn<int>("fusion");
        QTest::newRow("sample") << int(FusionRule::Sample);
        QTest::newRow("noise") << int(FusionRule::Noise);
    }
    void shiftedTilesRollTheCanvas() {
        QFETCH(int, fusion);
        const SchedulerOptions options = sdOptions(PredictionType::Epsilon, false);
        RunConfig config = runConfig(SchedulerKind::DDIM, FusionRule(fusion));
        config.width = 40;
        config.overlapPx = 0;
        config.tileShift = TileShift::Random;
        config.previewEvery = 0;
        config.schedulerOptions.eta = 0.0f;
        const int C = 4, H = config.height, W = config.width;
        const std::size_t plane = static_cast<std::size_t>(H) * W, n = C * plane;
        CpuEngine sampler(std::make_unique<TilePositionBackend>(C));
        sampler.setModel(sdModel(options));
        RunObserver quiet;
        const RunResult shifted = sampler.run(config, quiet);
        config.tileShift = TileShift::Off;
        const RunResult still = sampler.run(config, quiet);

        const TilePlan plan = TilePlan::make(W, H, config.tile, 0);
        QCOMPARE(plan.count(), 6);
        const BlendWeights weights(plan, config.window, 0);
        const std::vector<CanvasShift> shifts = tileShifts(config.seed, config.steps, plan);
        bool moved = false;
        for (const CanvasShift& sh : shifts) moved = moved || sh != CanvasShift{};
        QVERIFY(moved);
        TilePositionBackend model(C);
        model.prepare(*sdModel(options), 1, 16, 16);
        auto s = Scheduler::create(SchedulerKind::DDIM, options);
        s->setTimesteps(config.steps);
        std::vector<float> x(n), rolled(n), eps(n), tile(C * 16 * 16), tileEps(tile.size());
        for (std::size_t i = 0; i < n; ++i) x[i] = philoxNormal(config.seed, 0, i) * s->initNoiseSigma();
        for (int k = 0; k < s->numSteps(); ++k) {
            const CanvasShift sh = shifts[static_cast<std::size_t>(k)];
            // torch.roll(x, (dy, dx)): rolled[y][x] = x[(y - dy) mod H][(x - dx) mod W].
            for (int c = 0; c < C; ++c)
                for (int y = 0; y < H; ++y)
                    for (int q = 0; q < W; ++q)
                        rolled[c * plane + y * W + q] = x[c * plane + ((y - sh.dy + H) % H) * W + (q - sh.dx + W) % W];
            const StepCoefficients K = s->coefficients(k);
            std::fill(eps.begin(), eps.end(), 0.0f);
            for (const TileRect& r : plan.tiles()) {
                for (int c = 0; c < C; ++c)
                    for (int i = 0; i < 16; ++i)
                        for (int q = 0; q < 16; ++q)
                            tile[(c * 16 + i) * 16 + q] =
                                rolled[c * plane + (r.y + i) * W + r.x + q] * K.modelInputScale;
                const float t = K.timestep;
                model.forward(tile.data(), &t, 1, tileEps.data());
                for (int c = 0; c < C; ++c)
                    for (int i = 0; i < 16; ++i)
                        for (int q = 0; q < 16; ++q) {
                            const std::size_t pix = static_cast<std::size_t>(r.y + i) * W + r.x + q;
                            eps[c * plane + pix] += weights.tileWeights(r.id)[i * 16 + q] *
                                                    tileEps[(c * 16 + i) * 16 + q] / weights.normalizer()[pix];
                        }
            }
            s->step(k, eps.data(), rolled.data(), nullptr, rolled.data(), n);
            for (int c = 0; c < C; ++c)
                for (int y = 0; y < H; ++y)
                    for (int q = 0; q < W; ++q)
                        x[c * plane + ((y - sh.dy + H) % H) * W + (q - sh.dx + W) % W] = rolled[c * plane + y * W + q];
        }
        const double err = relativeError(shifted.image.data, x);
        QVERIFY2(err < 1e-5, qPrintable(QStringLiteral("shifted run vs the rolled canvas by hand: %1").arg(err)));
        const double apart = relativeError(still.image.data, x);
        QVERIFY2(apart > 1e-3, qPrintable(QStringLiteral("the run without shifts is %1 away").arg(apart)));
        QCOMPARE(toString(shifted.record.config.tileShift), std::string_view("random"));
        bool said = false;
        for (const std::string& m : shifted.record.messages) said = said || m.starts_with("tile_shift: random");
        QVERIFY(said);
    }

    // The shifts: one per step, each axis below the tile, none on an axis one tile covers, keyed by
    // the seed.
    void tileShiftsFollowTheirRule() {
        const TilePlan plan = TilePlan::make(96, 40, 32, 0);  // 3 x 2 tiles of 32 (the last row overlaps)
        const std::vector<CanvasShift> a = tileShifts(7, 50, plan), b = tileShifts(7, 50, plan);
        QCOMPARE(a.size(), std::size_t{50});
        QVERIFY(a == b);
        QVERIFY(a != tileShifts(8, 50, plan));
        int distinctX = 0, distinctY = 0;
        for (std::size_t k = 0; k < a.size(); ++k) {
            QVERIFY(a[k].dx >= 0 && a[k].dx < 32 && a[k].dy >= 0 && a[k].dy < 32);
            if (k > 0 && a[k].dx != a[k - 1].dx) ++distinctX;
            if (k > 0 && a[k].dy != a[k - 1].dy) ++distinctY;
        }
        QVERIFY(distinctX > 40 && distinctY > 40);
        for (const CanvasShift& s : tileShifts(7, 20, TilePlan::make(96, 32, 32, 0))) QCOMPARE(s.dy, 0);
        for (const CanvasShift& s : tileShifts(7, 20, TilePlan::make(32, 96, 64, 0))) QCOMPARE(s.dx, 0);
        // The mapping both engines share: a roll and its inverse.
        for (int f = 0; f < 10; ++f) {
            QCOMPARE(rolledPlace(rolledSource(f, 3, 10), 3, 10), f);
            QCOMPARE(rolledSource(f, 3, 10), (f - 3 + 10) % 10);
        }
    }

    // The x0 canvas belongs to its run: a second run on the same device (image-to-image after
    // text-to-image) is the one a fresh device makes, bit for bit.
    void nothingCarriesOverBetweenRuns() {
        const SchedulerOptions options = sdOptions(PredictionType::Epsilon, true);
        RunConfig config = runConfig(SchedulerKind::DPMPP2M, FusionRule::Sample);
        config.previewEvery = 0;
        const std::size_t n = 4u * static_cast<std::size_t>(config.width) * config.height;
        CpuEngine used(std::make_unique<PerPixelBackend>(4)), fresh(std::make_unique<PerPixelBackend>(4));
        used.setModel(sdModel(options));
        fresh.setModel(sdModel(options));
        RunObserver quiet;
        used.run(config, quiet);
        config.initImage = "in-memory";
        config.strength = 0.6;
        used.setInitImage(ImageTensor{4, config.height, config.width, startImage(n)});
        fresh.setInitImage(ImageTensor{4, config.height, config.width, startImage(n)});
        QVERIFY(used.run(config, quiet).image.data == fresh.run(config, quiet).image.data);
    }

    // DPM++ 2M's second-order steps change the image (the previous x0 is read, not ignored).
    void secondOrderStepsMatter() {
        const SchedulerOptions options = sdOptions(PredictionType::Epsilon, true);
        const RunConfig config = runConfig(SchedulerKind::DPMPP2M, FusionRule::Sample);
        const std::size_t n = 4u * static_cast<std::size_t>(config.width) * config.height;
        CpuEngine sampler(std::make_unique<PerPixelBackend>(4));
        sampler.setModel(sdModel(options));
        RunObserver quiet;
        const RunResult result = sampler.run(config, quiet);
        // The same run with every step first order (x0Prev never given).
        auto s = Scheduler::create(SchedulerKind::DPMPP2M, options);
        s->setTimesteps(config.steps);
        std::vector<float> x(n), eps(n);
        for (std::size_t i = 0; i < n; ++i) x[i] = philoxNormal(config.seed, 0, i);
        for (int k = 0; k < config.steps; ++k) {
            for (std::size_t i = 0; i < n; ++i) eps[i] = perPixel(x[i], s->coefficients(k).timestep);
            s->step(k, eps.data(), x.data(), nullptr, x.data(), n);
        }
        QVERIFY(relativeError(result.image.data, x) > 1e-3);
    }
};

QTEST_GUILESS_MAIN(TestSamplerLoop)
#include "tst_samplerloop.moc"
