// A run's noise from torch's generators (RunConfig::noiseSource, core/sampling/LatentNoise.h) on the
// CPU engine, against tests/data/noise (tools/reference/make_noise_fixtures.py: torch itself and
// A1111's modules/rng.py ImageRNG mirrored in torch):
//  - the start latent of a run (the canvas a run cancelled before its first step holds) is
//    A1111's ImageRNG.first() times the scheduler's initial sigma, for the cpu and nv sources,
//    with variation seeds, seed resize and ENSD: bit for bit (a variation: to float rounding);
//  - the ancestral steps take ImageRNG.next(), one draw per step with noise: a per-pixel model's
//    run equals the whole-canvas scheduler with the fixture's draws;
//  - the gpu source on the CPU engine is A1111's NV emulation, and the record says so;
//  - two tile plans draw the same noise (the whole canvas's, as an untiled run);
//  - image-to-image noises the start image with the first draw;
//  - Tessera's own noise is untouched, and A1111's settings beside it are named as ignored.
#include <QtTest/QtTest>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/cpu/CpuTileDevice.h"
#include "core/models/unet/UNetModel.h"
#include "core/sampling/LatentNoise.h"
#include "core/sampling/Philox.h"
#include "core/sampling/Scheduler.h"
#include "core/sampling/TiledLoop.h"

using namespace tessera;
using nlohmann::json;

namespace {

// An SD-like latent UNet, tiny: 4 channels in and out, two levels (its weights are not used).
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
SchedulerOptions sdOptions() {
    SchedulerOptions o;
    o.betaStart = 0.00085f;
    o.betaEnd = 0.012f;
    o.betaSchedule = BetaSchedule::ScaledLinear;
    o.stepsOffset = 1;
    o.clipSample = false;
    o.setAlphaToOne = false;
    o.karrasSigmas = false;
    o.timestepSpacing = TimestepSpacing::Leading;
    return o;
}

std::shared_ptr<const UNetModel> sdModel() {
    const UNetConfig config = latentConfig();
    return std::make_shared<const UNetModel>(
        UNetModel::fromTensors(config, UNetModel::random(config, 4321).tensors(), sdOptions()));
}

// eps = f(x, t) element by element: every tile sees the same value at a canvas pixel.
float perPixel(float x, float t) { return 0.6f * std::sin(1.3f * x) + 0.25f * x + 0.0004f * t; }

class PerPixelBackend final : public Backend {
public:
    BackendInfo info() const override { return {"per-pixel", "eps = f(x, t) per element"}; }
    void prepareGraph(const ModelGraph&, const TensorMap&, int, int tileH, int tileW) override {
        perTile_ = 4u * static_cast<std::size_t>(tileH) * static_cast<std::size_t>(tileW);
    }
    void run(const std::vector<const float*>&, int, const std::vector<float*>&) override {
        throw std::logic_error("PerPixelBackend: only forward");
    }
    void prepare(const UNetModel&, int, int tileH, int tileW) override {
        perTile_ = 4u * static_cast<std::size_t>(tileH) * static_cast<std::size_t>(tileW);
    }
    void forward(const float* x, const float* timesteps, int batch, float* out) override {
        for (int b = 0; b < batch; ++b)
            for (std::size_t i = 0; i < perTile_; ++i) {
                const std::size_t j = static_cast<std::size_t>(b) * perTile_ + i;
                out[j] = perPixel(x[j], timesteps[b]);
            }
    }

private:
    std::size_t perTile_ = 0;
};

// The fixtures' latent is [4, 10, 8]: a canvas 8 wide and 10 high of this image-space model.
RunConfig runConfig() {
    RunConfig c;
    c.width = 8;
    c.height = 10;
    c.steps = 3;  // Euler a: two steps with noise, the last without
    c.scheduler = SchedulerKind::EulerAncestral;
    c.schedulerOptions.timestepSpacing = TimestepSpacing::Leading;
    c.tile = 8;
    c.overlapPx = 4;
    c.tileBatch = 1;
    c.backend = BackendKind::CPU;
    c.previewEvery = 0;
    return c;
}

std::uint32_t bitsOf(float v) {
    std::uint32_t b = 0;
    std::memcpy(&b, &v, sizeof b);
    return b;
}

struct Messages : RunObserver {
    std::vector<std::string> seen;
    void onMessage(const std::string& m) override { seen.push_back(m); }
};

bool mentions(const std::vector<std::string>& messages, const std::string& part) {
    for (const std::string& m : messages)
        if (m.find(part) != std::string::npos) return true;
    return false;
}

// One run on a fresh CPU device; `cancelFirst`: cancelled before its first step, so the result holds
// the start canvas.
RunResult runOnCpu(const RunConfig& config, bool cancelFirst, const ImageTensor* init = nullptr) {
    PerPixelBackend backend;
    CpuTileDevice device(backend);
    TiledLoop loop;
    loop.setModel(sdModel());
    if (init) loop.setInitImage(*init);
    RunObserver quiet;
    return loop.run(config, quiet, device, [cancelFirst] { return cancelFirst; });
}

// The whole-canvas sampler with the given noise: x_T = z[0] * sigma_init, step k with z[draw]
// where draws count the steps with noise.
std::vector<float> untiled(const RunConfig& config, const std::vector<std::vector<float>>& z) {
    auto s = Scheduler::create(config.scheduler, sdOptions());
    s->setTimesteps(config.steps);
    const std::size_t n = z.front().size();
    std::vector<float> x(n), in(n), eps(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = z[0][i] * s->initNoiseSigma();
    std::size_t draw = 1;
    for (int k = 0; k < config.steps; ++k) {
        const StepCoefficients K = s->coefficients(k);
        for (std::size_t i = 0; i < n; ++i) in[i] = x[i] * K.modelInputScale;
        for (std::size_t i = 0; i < n; ++i) eps[i] = perPixel(in[i], K.timestep);
        const float* noise = nullptr;
        if (K.sigma != 0.0f) noise = z.at(draw++).data();
        s->step(k, eps.data(), x.data(), noise, x.data(), n);
    }
    return x;
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

}  // namespace

class TestNoiseSource : public QObject {
    Q_OBJECT

    json doc_;
    std::vector<float> data_;

    const json& fixture(const std::string& name) const {
        for (const json& c : doc_["cases"])
            if (c["kind"] == "a1111" && c["name"] == name) return c;
        throw std::runtime_error("no fixture " + name);
    }

    // Image 0 of output `k` of an A1111 case (per-image generators: the batch's first image is
    // a batch of one's).
    std::vector<float> image0(const json& c, std::size_t k) const {
        const json& out = c["outputs"][k];
        const std::size_t per = out["count"].get<std::size_t>() / c["batch"].get<std::size_t>();
        const float* first = data_.data() + out["offset"].get<std::size_t>();
        return std::vector<float>(first, first + per);
    }

    // The run's settings of an A1111 case (image 0 of its job; seed resize in this model's pixels,
    // which are latent pixels: the fixture's size / 8).
    static RunConfig configOf(const json& c) {
        RunConfig config = runConfig();
        config.noiseSource = c["source"] == "NV" ? RngSource::NV : RngSource::CPU;
        config.seed = c["seed"].get<std::uint64_t>();
        config.variationSeed = c["subseed"].get<std::uint64_t>();
        config.variationStrength = c["subseed_strength"].get<double>();
        config.seedResizeFromWidth = c["seed_resize_from_w"].get<int>() / 8;
        config.seedResizeFromHeight = c["seed_resize_from_h"].get<int>() / 8;
        config.etaNoiseSeedDelta = c["ensd"].get<std::int64_t>();
        return config;
    }

    static float initSigma() {
        auto s = Scheduler::create(SchedulerKind::EulerAncestral, sdOptions());
        s->setTimesteps(runConfig().steps);
        return s->initNoiseSigma();
    }

private slots:
    void initTestCase() {
        const std::string dir = std::string(TESSERA_TEST_DATA) + "/noise/";
        std::ifstream js(dir + "fixtures.json");
        QVERIFY2(js, "tests/data/noise/fixtures.json is missing (tools/reference/make_noise_fixtures.py)");
        doc_ = json::parse(js);
        std::ifstream bin(dir + "fixtures.bin", std::ios::binary | std::ios::ate);
        QVERIFY(bin);
        data_.resize(static_cast<std::size_t>(bin.tellg()) / sizeof(float));
        bin.seekg(0);
        bin.read(reinterpret_cast<char*>(data_.data()), static_cast<std::streamsize>(data_.size() * sizeof(float)));
        QVERIFY(bin);
    }

    void startLatentIsTorchs_data() {
        QTest::addColumn<QString>("name");
        for (const char* source : {"CPU", "NV"})
            for (const char* what : {"plain batch 2", "variation 0.3", "seed resize pad", "seed resize crop odd",
                                     "variation, resize, ENSD", "ENSD", "variation 1.0"}) {
                const QString name = QString("%1 %2").arg(source, what);
                QTest::newRow(qPrintable(name)) << name;
            }
    }
    void startLatentIsTorchs() {
        QFETCH(QString, name);
        const json& c = fixture(name.toStdString());
        const json& shape = c["shape"];
        RunConfig config = configOf(c);
        config.height = shape[1].get<int>();
        config.width = shape[2].get<int>();
        const RunResult start = runOnCpu(config, true);
        QCOMPARE(std::string(toString(start.record.status)), std::string("cancelled"));
        const std::vector<float> z = image0(c, 0);
        QCOMPARE(start.image.data.size(), z.size());
        const float sigma = initSigma();
        const bool variation = config.variationStrength != 0.0 && config.variationStrength != 1.0;
        std::size_t differ = 0;
        for (std::size_t i = 0; i < z.size(); ++i) {
            const float want = z[i] * sigma;
            if (variation) {
                // The slerp's angles: to float rounding (tst_torchnoise).
                QVERIFY2(std::fabs(start.image.data[i] - want) <= 2e-6 * sigma * std::max(1.0f, std::fabs(z[i])),
                         qPrintable(QString("at %1").arg(i)));
            } else if (bitsOf(start.image.data[i]) != bitsOf(want)) {
                ++differ;
            }
        }
        QVERIFY2(differ == 0, qPrintable(QString("%1 of %2 start values differ").arg(differ).arg(z.size())));
        QVERIFY(mentions(start.record.messages, "noise: " + std::string(toString(config.noiseSource))));
    }

    // The ancestral steps take ImageRNG.next(): the fixture's second and third draws (after ENSD,
    // from seed + ENSD).
    void ancestralStepsTakeTheNextDraws_data() {
        QTest::addColumn<QString>("name");
        for (const char* name : {"CPU plain batch 2", "CPU ENSD", "NV plain batch 2", "NV variation, resize, ENSD"})
            QTest::newRow(name) << QString(name);
    }
    void ancestralStepsTakeTheNextDraws() {
        QFETCH(QString, name);
        const json& c = fixture(name.toStdString());
        const RunConfig config = configOf(c);
        const RunResult run = runOnCpu(config, false);
        QCOMPARE(std::string(toString(run.record.status)), std::string("finished"));
        const std::vector<float> want = untiled(config, {image0(c, 0), image0(c, 1), image0(c, 2)});
        const double err = relativeError(run.image.data, want);
        QVERIFY2(err < 1e-5, qPrintable(QString("run vs the scheduler with the fixture's draws: %1").arg(err)));
        // Other draws give another image: the test can fail.
        const std::vector<float> other = untiled(config, {image0(c, 0), image0(c, 2), image0(c, 1)});
        QVERIFY(relativeError(run.image.data, other) > 1e-3);
    }

    // ComfyUI's noise: the start latent is torch's CPU randn seeded with the seed (A1111's CPU
    // source's first draw of the same seed), the ancestral steps the device generator's draws from a
    // fresh generator seeded with the seed (on the CPU engine NV's emulation: the NV case's first and
    // second draws); A1111's seed settings are ignored and said so.
    void comfyuiRunDrawsComfysNoise() {
        const json& cpu = fixture("CPU plain batch 2");
        const json& nv = fixture("NV plain batch 2");
        QCOMPARE(cpu["seed"], nv["seed"]);
        RunConfig config = configOf(cpu);
        config.noiseSource = RngSource::ComfyUI;
        config.etaNoiseSeedDelta = 31337;
        const RunResult run = runOnCpu(config, false);
        QCOMPARE(std::string(toString(run.record.status)), std::string("finished"));
        const std::vector<float> want = untiled(config, {image0(cpu, 0), image0(nv, 0), image0(nv, 1)});
        const double err = relativeError(run.image.data, want);
        QVERIFY2(err < 1e-5, qPrintable(QString("run vs the scheduler with ComfyUI's draws: %1").arg(err)));
        // A1111's NV source of the same seed continues its generator after the start: another image.
        const std::vector<float> a1111 = untiled(config, {image0(cpu, 0), image0(nv, 1), image0(nv, 2)});
        QVERIFY(relativeError(run.image.data, a1111) > 1e-3);
        QVERIFY(mentions(run.record.messages, "eta_noise_seed_delta: ignored with noise_source comfyui"));
        QVERIFY(mentions(run.record.messages, "noise: comfyui, ComfyUI's"));
    }

    // The CPU engine has no CUDA generator: A1111's "GPU" noise is its NV emulation, and the
    // record says that it is not the GPU's bits.
    void gpuOnTheCpuEngineIsNv() {
        const json& c = fixture("NV plain batch 2");
        RunConfig config = configOf(c);
        config.noiseSource = RngSource::GPU;
        const RunResult start = runOnCpu(config, true);
        const std::vector<float> z = image0(c, 0);
        const float sigma = initSigma();
        for (std::size_t i = 0; i < z.size(); ++i) QCOMPARE(bitsOf(start.image.data[i]), bitsOf(z[i] * sigma));
        QVERIFY2(mentions(start.record.messages, "not bit for bit"), start.record.messages.front().c_str());
    }

    // The noise is the whole canvas's, as an untiled run draws it: tile plans do not change it.
    void tilePlansDrawTheSameNoise() {
        RunConfig config = runConfig();
        config.noiseSource = RngSource::CPU;
        config.width = 24;
        config.height = 16;
        config.seed = 31337;
        RunConfig other = config;
        other.tile = 16;
        other.overlapPx = 8;
        other.tileBatch = 2;
        config.tile = 8;
        config.overlapPx = 2;
        const RunResult a = runOnCpu(config, true), b = runOnCpu(other, true);
        QVERIFY(a.record.tileCount != b.record.tileCount);
        QVERIFY(a.image.data == b.image.data);
        // The start is torch.randn of the whole [4, 16, 24] latent.
        TorchCpuGenerator torch(config.seed);
        std::vector<float> z = torch.randn(a.image.data.size());
        for (float& v : z) v *= initSigma();
        QVERIFY(a.image.data == z);
        // And every step's noise: the whole runs agree (a per-pixel model).
        const RunResult fullA = runOnCpu(config, false), fullB = runOnCpu(other, false);
        const double err = relativeError(fullA.image.data, fullB.image.data);
        QVERIFY2(err < 1e-6, qPrintable(QString("tile plans differ by %1").arg(err)));
        std::vector<std::vector<float>> draws(3, std::vector<float>(z.size()));
        TorchCpuGenerator again(config.seed);
        for (auto& d : draws) again.randn(d.data(), d.size());
        QVERIFY(relativeError(fullA.image.data, untiled(config, draws)) < 1e-5);
    }

    // Image-to-image: the start image noised to the first step run's level with the first draw.
    void imageToImageUsesTheFirstDraw() {
        const json& c = fixture("CPU plain batch 2");
        RunConfig config = configOf(c);
        config.steps = 10;
        config.initImage = "in-memory";
        config.strength = 0.6;
        ImageTensor init{4, config.height, config.width, std::vector<float>(4u * 80u)};
        for (std::size_t i = 0; i < init.data.size(); ++i) init.data[i] = 0.5f * std::sin(0.1f * static_cast<float>(i));
        const RunResult start = runOnCpu(config, true, &init);
        auto s = Scheduler::create(config.scheduler, sdOptions());
        s->setTimesteps(config.steps);
        const Scheduler::AddNoise noised = s->addNoise(firstStepRun(config, true));
        const std::vector<float> z = image0(c, 0);
        for (std::size_t i = 0; i < z.size(); ++i) {
            const double want =
                static_cast<double>(noised.image) * init.data[i] + static_cast<double>(noised.noise) * z[i];
            QVERIFY2(std::fabs(start.image.data[i] - want) <= 1e-5 * std::max(1.0, std::fabs(want)),
                     qPrintable(QString("at %1: %2 vs %3").arg(i).arg(start.image.data[i]).arg(want)));
        }
    }

    // Tessera's Philox noise is what it was (draw 0 keyed by canvas element), and A1111's settings
    // beside it are named as ignored.
    void tesseraNoiseIsUntouched() {
        RunConfig config = runConfig();
        config.seed = 11;
        config.variationStrength = 0.5;
        config.etaNoiseSeedDelta = 31337;
        const RunResult start = runOnCpu(config, true);
        const float sigma = initSigma();
        for (std::size_t i = 0; i < start.image.data.size(); ++i)
            QCOMPARE(bitsOf(start.image.data[i]), bitsOf(philoxNormal(config.seed, 0, i) * sigma));
        QVERIFY(mentions(start.record.messages,
                         "variation_strength, eta_noise_seed_delta: ignored with noise_source tessera"));
        QVERIFY(!mentions(start.record.messages, "noise: "));
        RunConfig plain = runConfig();
        plain.seed = 11;
        QVERIFY(runOnCpu(config, false).image.data == runOnCpu(plain, false).image.data);
    }
};

QTEST_GUILESS_MAIN(TestNoiseSource)
#include "tst_noisesource.moc"
