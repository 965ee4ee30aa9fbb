// SDXL ControlNet runs against diffusers: StableDiffusionXLControlNetImg2ImgPipeline (DDIM, strength
// 0.6, scale 0.7, the window 0.1 to 0.8, the start image as the control image) and
// StableDiffusionXLControlNetPipeline (Euler and DDIM, scale 1.2, end 0.6; portrait and landscape;
// scale 1 throughout) on the tiny SDXL test pipeline with a tiny random ControlNet of its shape
// (tests/data/controlnet/sdxlpipeline, made by tools/reference/make_controlnet_sdxl_pipeline_fixtures.py):
// the CPU engine's latents after every step and at the end over one tile within 1e-4 of diffusers'
// float64 run, and far from the run without the ControlNet.
#include <QtTest>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/BoundedInput.h"
#include "core/cpu/CpuBackend.h"
#include "core/cpu/CpuTileDevice.h"
#include "core/formats/Safetensors.h"
#include "core/models/controlnet/ControlNetModel.h"
#include "core/models/sd/SdModel.h"
#include "core/models/sd/SdPipeline.h"
#include "core/sampling/ControlNetRun.h"
#include "core/sampling/TiledLoop.h"
#include "tests/core/NumericCompare.h"

using namespace tessera;
namespace fs = std::filesystem;

namespace {

const std::string kFixtures = std::string(TESSERA_TEST_DATA) + "/controlnet/sdxlpipeline";
const std::string kPipeline = std::string(TESSERA_TEST_DATA) + "/sdxlpipeline/pipeline";
const std::string kVocabulary = std::string(TESSERA_SOURCE_DIR) + "/resources/clip/bpe_simple_vocab_16e6.txt.gz";

class Silent : public RunObserver {};

// The CPU device, keeping the latent canvas after every step (diffusers' callback_on_step_end).
class StepRecordingDevice : public CpuTileDevice {
public:
    using CpuTileDevice::CpuTileDevice;
    StepReport endStep() override {
        StepReport report = CpuTileDevice::endStep();
        latents.push_back(readPreview(false));
        return report;
    }
    std::vector<std::vector<float>> latents;
};

RunResult runLoop(TiledLoop& loop, TileDevice& device, const RunConfig& config) {
    Silent observer;
    return loop.run(config, observer, device, [] { return false; });
}

}  // namespace

class TestControlNetSdxl : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() { setBundledClipVocabulary(kVocabulary); }

    void pipelineMatchesDiffusers_data() {
        QTest::addColumn<QString>("name");
        if (!fs::exists(kFixtures + "/cases.json")) {
            QTest::newRow("fixtures") << QString();
            return;
        }
        const nlohmann::json cases = readBoundedJson(kFixtures + "/cases.json", "test");
        for (const auto& [name, info] : cases.at("cases").items())
            QTest::newRow(name.c_str()) << QString::fromStdString(name);
    }
    void pipelineMatchesDiffusers() {
        if (!fs::exists(kFixtures + "/cases.json"))
            QSKIP("tests/data/controlnet/sdxlpipeline is missing (make_controlnet_sdxl_pipeline_fixtures.py)");
        QFETCH(QString, name);
        const nlohmann::json cases = readBoundedJson(kFixtures + "/cases.json", "test");
        const nlohmann::json& info = cases.at("cases").at(name.toStdString());
        SafetensorsFile io(kFixtures + "/" + name.toStdString() + ".safetensors");
        const int width = info.at("width"), height = info.at("height");
        RunConfig config;
        config.model = kPipeline;
        config.width = width;
        config.height = height;
        config.tile = std::max(width, height);  // one tile: the untiled pipeline
        config.overlapPx = 32;
        config.steps = info.at("steps");
        config.scheduler = parseScheduler(info.at("scheduler").get<std::string>());
        config.schedulerOptions.timestepSpacing = TimestepSpacing::Leading;
        config.schedulerOptions.karrasSigmas = false;  // EulerDiscreteScheduler's own σ, as the pipelines ran
        config.prompt = info.at("prompt");
        config.negativePrompt = info.at("negative_prompt");
        config.cfgScale = info.at("cfg");
        config.precision = Precision::FP32;
        config.backend = BackendKind::CPU;
        config.sdxlSizeConditioning = SdxlSizeConditioning::Image;
        config.previewEvery = 0;
        const bool img2img = info.at("pipeline") == "img2img";
        auto sd = std::make_shared<SdModel>(loadSdModel(kPipeline));
        QVERIFY(sd->family == SdFamily::SDXL);
        CpuBackend backend(2);
        StepRecordingDevice device(backend);
        TiledLoop loop;
        loop.setSdModel(sd);
        const ImageTensor start{4, height / 8, width / 8, io.readFloat32("start")};
        const nlohmann::json& net = info.at("controlnet");
        ControlNetRunUnit unit;
        unit.model = std::make_shared<const ControlNetModel>(
            ControlNetModel::load(kFixtures + "/" + net.at("folder").get<std::string>()));
        unit.weight = net.at("scale").get<float>();
        unit.start = net.at("start").get<double>();
        unit.end = net.at("end").get<double>();
        if (!img2img) unit.image = ImageTensor{3, height, width, io.readFloat32("control_image")};
        loop.setControlNets({unit});
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
        QCOMPARE(std::string(toString(result.record.status)), std::string("finished"));
        QCOMPARE(result.record.tileCount, 1);
        const std::vector<float> want = io.readFloat32("latents");
        const double e = maxRelativeError(result.latents.data, want);
        qInfo("%s: latents max |diff| / max |ref| %.2e", qPrintable(name), e);
        QVERIFY2(e < 1e-4, qPrintable(QString::number(e)));
        // Every step on the way (a difference that later steps shrink shows here).
        const std::vector<float> steps = io.readFloat32("step_latents");
        QCOMPARE(device.latents.size() * want.size(), steps.size());
        for (std::size_t k = 0; k < device.latents.size(); ++k) {
            const auto first = steps.begin() + static_cast<std::ptrdiff_t>(k * want.size());
            const std::vector<float> step(first, first + static_cast<std::ptrdiff_t>(want.size()));
            const double d = maxRelativeError(device.latents[k], step);
            QVERIFY2(d < 1e-4, qPrintable(QString("step %1: %2").arg(k).arg(d)));
        }
        // Without the ControlNet the run ends elsewhere: the residuals mattered.
        loop.setControlNets({});
        device.latents.clear();
        QVERIFY(maxRelativeError(runLoop(loop, device, config).latents.data, want) > 1e-3);
    }
};

QTEST_GUILESS_MAIN(TestControlNetSdxl)
#include "tst_controlnetsdxl.moc"
