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

#include "core/cpu/CpuBackend.h"
#include "core/cpu/CpuEngine.h"
#include "core/models/unet/UNetModel.h"
#include "core/sampling/Philox.h"
#include "core/sampling/Scheduler.h"

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

        for (const bool fromImage : {false, true}) {
            RunConfig c = config;
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
            QVERIFY2(
                err < 1e-5,
                qPrintable(QStringLiteral("%1: tiled vs untiled %2").arg(fromImage ? "img2img" : "txt2img").arg(err)));
            QCOMPARE(seen.images.size(), ref.x0.size());
            for (std::size_t k = 0; k + 1 < ref.x0.size(); ++k) {
                const double previewErr = relativeError(seen.images[k], ref.x0[k]);
                QVERIFY2(previewErr < 1e-5, qPrintable(QStringLiteral("preview %1: %2").arg(k).arg(previewErr)));
            }
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
