// Model-load progress (core/base/LoadProgress.h):
//  - LoadMeter: phases take their share of a fixed total, advances are clamped to it, done never
//    goes back and ends at the total;
//  - loadSdModel of a diffusers folder (SD 1.x, SDXL) and of a single .safetensors file (SD 1.x,
//    SDXL): the reports are monotone, their total is fixed from the first and is the bytes of every
//    tensor the load reads (a folder: every tensor of its weight files; a single file: every
//    tensor its models use), each phase reports once per tensor it reads, in the family's phases,
//    and the last report has done == total;
//  - randomTensors counts each drawn tensor's float32 bytes;
//  - through the engine: the first run of a model reports its load before onStarted, a second run
//    of the same model (kept by the engine) reports none.
#include <QtTest/QtTest>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/base/LoadProgress.h"
#include "core/cpu/CpuBackend.h"
#include "core/cpu/CpuEngine.h"
#include "core/formats/ModelWeights.h"
#include "core/formats/Safetensors.h"
#include "core/models/sd/SdModel.h"
#include "core/models/sd/SingleFileCheckpoint.h"

using namespace tessera;

namespace {

const std::string kData = TESSERA_TEST_DATA;
const std::string kVocabulary = TESSERA_SOURCE_DIR "/resources/clip/bpe_simple_vocab_16e6.txt.gz";

std::vector<LoadProgress> loadReports(const std::string& path) {
    std::vector<LoadProgress> reports;
    (void)loadSdModel(path, [&reports](const LoadProgress& p) { reports.push_back(p); });
    return reports;
}

std::uint64_t tensorBytes(const std::string& file) {
    const SafetensorsFile st(file);
    std::uint64_t bytes = 0;
    for (const SafetensorsTensorInfo& info : st.tensors()) bytes += info.byteSize();
    return bytes;
}

// Reports per phase, in the order the phases came.
std::vector<std::pair<std::string, int>> phasesOf(const std::vector<LoadProgress>& reports) {
    std::vector<std::pair<std::string, int>> phases;
    for (const LoadProgress& p : reports) {
        if (phases.empty() || phases.back().first != p.phase) phases.emplace_back(p.phase, 0);
        ++phases.back().second;
    }
    return phases;
}

// Monotone, one total from the first report on, starting at 0, ending at the total.
void checkMonotone(const std::vector<LoadProgress>& reports) {
    QVERIFY(!reports.empty());
    const std::uint64_t total = reports.front().total;
    QVERIFY(total > 0);
    QCOMPARE(reports.front().done, std::uint64_t{0});
    for (std::size_t i = 0; i < reports.size(); ++i) {
        QCOMPARE(reports[i].total, total);
        QVERIFY(reports[i].done <= total);
        if (i > 0) QVERIFY2(reports[i].done >= reports[i - 1].done, qPrintable(QString::number(i)));
    }
    QCOMPARE(reports.back().done, total);
    QCOMPARE(reports.back().fraction(), 1.0);
}

class Recorder : public RunObserver {
public:
    std::vector<std::string> events;  // "load" or "started", in order
    void onLoadProgress(const LoadProgress&) override { events.push_back("load"); }
    void onStarted(const RunRecord&) override { events.push_back("started"); }
};

}  // namespace

class TestLoadProgress : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() { setBundledClipVocabulary(kVocabulary); }

    void meterClampsAndEndsAtTheTotal() {
        std::vector<LoadProgress> reports;
        LoadMeter meter([&reports](const LoadProgress& p) { reports.push_back(p); }, 100);
        meter.beginPhase("a", 40);
        meter.advance(15);
        meter.advance(30);  // past the phase's 40: clamped
        QCOMPARE(meter.progress().done, std::uint64_t{40});
        meter.beginPhase("b", 80);  // more than is left: 60
        meter.advance(10);
        meter.endPhase();  // the rest of b counted, not reported
        QCOMPARE(meter.progress().done, std::uint64_t{100});
        QCOMPARE(reports.back().done, std::uint64_t{50});
        meter.advance(5);  // nothing left
        meter.finish("done");
        checkMonotone(reports);
        QCOMPARE(reports.size(), std::size_t{7});
        QCOMPARE(reports.back().phase, std::string("done"));
        // Without a callback: counts, reports nothing, does not fail.
        LoadMeter silent({}, 10);
        silent.beginPhase("x", 10);
        silent.advance(4);
        QCOMPARE(silent.progress().done, std::uint64_t{4});
    }

    void folderLoadCoversEveryTensor_data() {
        QTest::addColumn<QString>("folder");
        QTest::addColumn<QStringList>("components");  // in load order
        const QStringList sd{"unet", "vae", "text_encoder"};
        QTest::newRow("sd1") << QString::fromStdString(kData + "/sdpipeline/sd1") << sd;
        QTest::newRow("sdxl") << QString::fromStdString(kData + "/sdxlpipeline/pipeline")
                              << (sd + QStringList{"text_encoder_2"});
    }
    void folderLoadCoversEveryTensor() {
        QFETCH(QString, folder);
        QFETCH(QStringList, components);
        const std::string root = folder.toStdString();
        const std::vector<LoadProgress> reports = loadReports(root);
        checkMonotone(reports);
        const SdModel model = loadSdModel(root);
        const std::map<QString, std::pair<std::string, std::size_t>> parts{
            {"unet", {"reading the UNet", model.unet->tensors().size()}},
            {"vae", {"reading the VAE", model.vae->tensors().size()}},
            {"text_encoder", {"reading the text encoder", model.textEncoder->tensors().size()}},
            {"text_encoder_2",
             {"reading the second text encoder", model.textEncoder2 ? model.textEncoder2->tensors().size() : 0}}};
        std::uint64_t total = 0;
        for (const QString& component : components) {
            const std::string stem =
                component.startsWith("text_encoder") ? "/model.safetensors" : "/diffusion_pytorch_model.safetensors";
            total += tensorBytes(root + "/" + component.toStdString() + stem);
        }
        QCOMPARE(reports.front().total, total);
        // Each phase: its first report, then one per tensor read (the finish report joins the last).
        const auto phases = phasesOf(reports);
        QCOMPARE(phases.size(), static_cast<std::size_t>(components.size()));
        for (int i = 0; i < components.size(); ++i) {
            const auto& [name, tensors] = parts.at(components[i]);
            QCOMPARE(phases[static_cast<std::size_t>(i)].first, name);
            const int finish = i + 1 == components.size() ? 1 : 0;
            QCOMPARE(phases[static_cast<std::size_t>(i)].second, 1 + static_cast<int>(tensors) + finish);
        }
    }

    void singleFileLoadCoversEveryTensor_data() {
        QTest::addColumn<QString>("layout");
        QTest::newRow("sd1") << QStringLiteral("sd1");
        QTest::newRow("sd2") << QStringLiteral(
            "sd2");  // OpenCLIP's fused q/k/v: one tensor read three times, counted once
        QTest::newRow("sdxl") << QStringLiteral("sdxl");
    }
    void singleFileLoadCoversEveryTensor() {
        QFETCH(QString, layout);
        const std::string path = kData + "/singlefile/" + layout.toStdString() + ".safetensors";
        // The tiny fixtures' shapes need their configuration folders (tst_singlefile).
        SingleFileOptions options;
        options.configFolder = kData + "/singlefile/" + layout.toStdString();
        std::vector<LoadProgress> reports;
        options.progress = [&reports](const LoadProgress& p) { reports.push_back(p); };
        (void)loadSingleFileCheckpoint(path, options);
        checkMonotone(reports);
        options.digest = FileDigest::Skip;
        options.progress = {};
        const SingleFileCheckpointInfo info = inspectSingleFileCheckpoint(path, options);
        // Every tensor of the file but those no model uses.
        std::uint64_t total = tensorBytes(path);
        const SafetensorsFile st(path);
        for (const std::string& name : info.ignored) total -= st.find(name)->byteSize();
        QCOMPARE(reports.front().total, total);
        const auto phase = [](const char* name, std::size_t tensors) {
            return std::pair<std::string, int>{name, 1 + static_cast<int>(tensors)};
        };
        std::vector<std::pair<std::string, int>> want{phase("reading the UNet", info.unetPart.tensors),
                                                      phase("reading the VAE", info.vaePart.tensors),
                                                      phase("reading the text encoder", info.textEncoderPart.tensors)};
        if (info.textEncoder2) want.push_back(phase("reading the second text encoder", info.textEncoder2Part.tensors));
        want.emplace_back("hashing the file", 1);  // the digest (A1111's model hash) is computed by default
        QCOMPARE(phasesOf(reports), want);
        QCOMPARE(layout == "sdxl", info.textEncoder2.has_value());
    }

    void randomTensorsCountFloat32Bytes() {
        const TensorList list{{"a.weight", {4, 3}}, {"a.bias", {4}}, {"norm.weight", {2, 2, 2}}};
        QCOMPARE(float32Bytes(list), std::uint64_t{(12 + 4 + 8) * 4});
        std::vector<LoadProgress> reports;
        LoadMeter meter([&reports](const LoadProgress& p) { reports.push_back(p); }, float32Bytes(list));
        meter.beginPhase("random", float32Bytes(list));
        const auto tensors = randomTensors(list, 7, &meter);
        QCOMPARE(reports.size(), std::size_t{4});
        QCOMPARE(reports.back().done, float32Bytes(list));
        // The values do not depend on the meter.
        const auto plain = randomTensors(list, 7);
        for (const auto& [name, t] : plain) QVERIFY(tensors.at(name).data == t.data);
    }

    void engineReportsTheLoadOnlyWhenItLoads() {
        RunConfig config;
        config.model = kData + "/sdpipeline/sd1";
        config.width = config.height = config.tile = 64;
        config.overlapPx = 16;
        config.steps = 1;
        config.backend = BackendKind::CPU;
        config.precision = Precision::FP32;
        config.prompt = "a cube";
        CpuEngine engine(std::make_unique<CpuBackend>());
        Recorder first;
        QVERIFY(engine.run(config, first).record.status == RunStatus::Finished);
        QVERIFY(first.events.size() > 2);
        QCOMPARE(first.events.back(), std::string("started"));
        QCOMPARE(std::count(first.events.begin(), first.events.end(), std::string("started")), 1L);
        // The model is kept: the next run reads nothing.
        Recorder second;
        config.seed = 5;
        QVERIFY(engine.run(config, second).record.status == RunStatus::Finished);
        QCOMPARE(second.events, std::vector<std::string>{"started"});
    }
};

QTEST_APPLESS_MAIN(TestLoadProgress)
#include "tst_loadprogress.moc"
