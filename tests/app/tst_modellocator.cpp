// ModelLocator / ModelInspector with Stable Diffusion models: the limits of a pipeline folder,
// a .safetensors checkpoint and random:sd15 / random:sd21 / random:sdxl come from configuration
// files alone (never the weights), bad ones are refused with the file named, and the inspector
// caches an SD folder by the times of the files its limits come from.
#include <QDir>
#include <QFile>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QThread>
#include <QtTest>

#include "app/qt/ModelCatalog.h"
#include "app/qt/ModelInspector.h"
#include "app/qt/ModelLocator.h"
#include "app/qt/RunHistory.h"
#include "core/models/sd/SdModel.h"
#include "core/models/sd/SingleFileCheckpoint.h"
#include "tests/core/SingleFileTestSupport.h"

using namespace tessera;

namespace {

QString sdPipeline() { return QStringLiteral(TESSERA_TEST_DATA "/sdpipeline/sd1"); }

// A copy of the tiny SD pipeline's configuration files, with every weights file replaced by a
// few bytes of garbage: inspecting it must not touch (or need) the weights.
bool copyConfigsOnly(const QString& to) {
    QDir source(sdPipeline());
    for (const QString& part : {QString(), QStringLiteral("unet"), QStringLiteral("vae"),
                                QStringLiteral("text_encoder"), QStringLiteral("scheduler")}) {
        const QDir from(source.filePath(part));
        if (!QDir().mkpath(QDir(to).filePath(part))) return false;
        for (const QFileInfo& file : from.entryInfoList(QDir::Files)) {
            const QString target = QDir(QDir(to).filePath(part)).filePath(file.fileName());
            if (file.suffix() == QStringLiteral("safetensors")) {
                QFile garbage(target);
                if (!garbage.open(QIODevice::WriteOnly) || garbage.write("not weights") < 0) return false;
            } else if (!QFile::copy(file.filePath(), target)) {
                return false;
            }
        }
    }
    return true;
}

bool writeFile(const QString& path, const QByteArray& bytes) {
    QFile file(path);
    return file.open(QIODevice::WriteOnly | QIODevice::Truncate) && file.write(bytes) == bytes.size();
}

}  // namespace

class TestModelLocator : public QObject {
    Q_OBJECT

private:
    QTemporaryDir scratch_;

    static ModelInspection inspectAndWait(ModelInspector& inspector, const QString& path) {
        QSignalSpy spy(&inspector, &ModelInspector::inspected);
        inspector.inspect(path);
        if (!spy.wait(30000)) qFatal("no answer from the inspector");
        return spy.at(0).at(1).value<ModelInspection>();
    }

private slots:
    void initTestCase() { QVERIFY(scratch_.isValid()); }

    void pipelineFolderLimitsFromConfigsOnly() {
        const QString copy = scratch_.filePath(QStringLiteral("configs-only"));
        QVERIFY(copyConfigsOnly(copy));
        for (const QString& folder : {sdPipeline(), copy}) {
            QVERIFY(ModelLocator::isStableDiffusion(folder));
            int multiple = 0;
            QString error;
            const auto limits = ModelLocator::readSdLimits(folder, &multiple, &error);
            QVERIFY2(limits, qPrintable(error));
            QCOMPARE(limits->downsampleFactor, 16);  // 2 UNet levels (2x) over a 4-level VAE (8x)
            QCOMPARE(limits->inChannels, 3);
            QCOMPARE(limits->numTrainTimesteps, 1000);
            QCOMPARE(multiple, 8);
        }
        // An unconditional UNet2DModel folder is not Stable Diffusion.
        QVERIFY(!ModelLocator::isStableDiffusion(QStringLiteral(TESSERA_TEST_DATA "/models/cifar_like")));
    }

    void checkpointsAndRandomModels() {
        int multiple = 0;
        QString error;
        for (const QString& name : {QStringLiteral("random:sd15"), QStringLiteral("random:sd21")}) {
            QVERIFY(ModelLocator::isStableDiffusion(name));
            const auto limits = ModelLocator::readSdLimits(name, &multiple, &error);
            QVERIFY2(limits, qPrintable(error));
            QCOMPARE(limits->downsampleFactor, 64);
            QCOMPARE(multiple, 8);
        }
        // SDXL base: a 3-level UNet (4x) over the 8x VAE.
        QVERIFY(ModelLocator::isStableDiffusion(QStringLiteral("random:sdxl")));
        const auto xl = ModelLocator::readSdLimits(QStringLiteral("random:sdxl"), &multiple, &error);
        QVERIFY2(xl, qPrintable(error));
        QCOMPARE(xl->downsampleFactor, 32);
        QCOMPARE(xl->numTrainTimesteps, 1000);
        QCOMPARE(multiple, 8);
        QVERIFY(!ModelLocator::readSdLimits(QStringLiteral("random:sd3"), &multiple, &error));
        QVERIFY2(error.contains("'random:sd3' is not a random model") &&
                     error.contains("random:sd15, random:sd21 or random:sdxl"),
                 qPrintable(error));

        // A .safetensors file that is no safetensors file (its header cannot be read) cannot be
        // used: said when the model is chosen, naming the file and the header's fault.
        const QString checkpoint = scratch_.filePath(QStringLiteral("v1-5.safetensors"));
        QVERIFY(writeFile(checkpoint, "whatever: a text file renamed"));
        QVERIFY(!ModelLocator::readSdLimits(checkpoint, &multiple, &error));
        QVERIFY2(error.contains("v1-5.safetensors") && error.contains("header length"), qPrintable(error));
        // A checkpoint's header tells its family: SDXL base's 3-level UNet takes tiles in multiples
        // of 32, SD 1.5's 4 levels 64 (full-size headers; the data is a sparse hole, never read).
        for (const auto& [shape, factor] : {std::pair{"random:sdxl", 32}, std::pair{"random:sd15", 64}}) {
            const SdModelConfigs c = randomSdModelConfigs(shape);
            const QString file =
                scratch_.filePath(QStringLiteral("%1.safetensors").arg(QString::fromLatin1(shape + 7)));
            single_file_test::writeHeaderOnly(
                file.toStdString(), singleFileTensors(c.family, c.unet, c.vae, c.textEncoder, c.textEncoder2));
            multiple = 0;
            SdFamily family = c.family == SdFamily::SDXL ? SdFamily::SD1 : SdFamily::SDXL;
            const auto found = ModelLocator::readSdLimits(file, &multiple, &error, &family);
            QVERIFY2(found, qPrintable(error));
            QCOMPARE(found->downsampleFactor, factor);
            QVERIFY(family == c.family);  // the family the window names
            QCOMPARE(multiple, 8);
        }

        QVERIFY(
            !ModelLocator::readSdLimits(scratch_.filePath(QStringLiteral("absent.safetensors")), &multiple, &error));
        QVERIFY2(error.contains("absent.safetensors' does not exist"), qPrintable(error));
        const QString pickle = scratch_.filePath(QStringLiteral("model.ckpt"));
        QVERIFY(writeFile(pickle, "PK"));
        QVERIFY(ModelLocator::isStableDiffusion(pickle));
        QVERIFY(!ModelLocator::readSdLimits(pickle, &multiple, &error));
        QVERIFY2(error.contains("model.ckpt' is a pickled PyTorch checkpoint") && error.contains(".safetensors"),
                 qPrintable(error));
    }

    void badPipelineConfigsNameTheFile() {
        const QString copy = scratch_.filePath(QStringLiteral("bad-unet"));
        QVERIFY(copyConfigsOnly(copy));
        QVERIFY(writeFile(copy + QStringLiteral("/unet/config.json"),
                          "{\"block_out_channels\": [16, 32], \"in_channels\": "));
        int multiple = 0;
        QString error;
        QVERIFY(!ModelLocator::readSdLimits(copy, &multiple, &error));
        QVERIFY2(error.contains("unet/config.json"), qPrintable(error));
        QVERIFY2(!error.startsWith("model: "), qPrintable(error));

        QVERIFY(QFile::remove(copy + QStringLiteral("/unet/config.json")));
        QVERIFY(!ModelLocator::readSdLimits(copy, &multiple, &error));
        QVERIFY2(error.contains("unet/config.json"), qPrintable(error));

        const QString noVae = scratch_.filePath(QStringLiteral("no-vae"));
        QVERIFY(copyConfigsOnly(noVae));
        QVERIFY(QDir(noVae + QStringLiteral("/vae")).removeRecursively());
        QVERIFY(!ModelLocator::readSdLimits(noVae, &multiple, &error));
        QVERIFY2(error.contains("vae"), qPrintable(error));
    }

    void inspectorAnswersAndCachesSdModels() {
        const QString copy = scratch_.filePath(QStringLiteral("cached"));
        QVERIFY(copyConfigsOnly(copy));
        ModelInspector inspector;
        ModelInspection first = inspectAndWait(inspector, copy);
        QVERIFY2(first.limits, qPrintable(first.error));
        QVERIFY(first.stableDiffusion);
        QCOMPARE(first.pixelMultiple, 8);
        QCOMPARE(first.limits->downsampleFactor, 16);
        const int reads = inspector.configurationReads();
        QVERIFY(inspectAndWait(inspector, copy).limits);
        QCOMPARE(inspector.configurationReads(), reads);  // unchanged files: the cache answers

        // A changed vae/config.json (one more level: 16x) is read again.
        QFile vaeFile(copy + QStringLiteral("/vae/config.json"));
        QVERIFY(vaeFile.open(QIODevice::ReadOnly));
        QByteArray vae = vaeFile.readAll();
        vaeFile.close();
        vae.replace("\"block_out_channels\": [\n    8,\n    8,", "\"block_out_channels\": [\n    8,\n    8,\n    8,");
        vae.replace("\"DownEncoderBlock2D\",\n    \"DownEncoderBlock2D\",",
                    "\"DownEncoderBlock2D\",\n    \"DownEncoderBlock2D\",\n    \"DownEncoderBlock2D\",");
        vae.replace("\"UpDecoderBlock2D\",\n    \"UpDecoderBlock2D\",",
                    "\"UpDecoderBlock2D\",\n    \"UpDecoderBlock2D\",\n    \"UpDecoderBlock2D\",");
        QThread::msleep(20);  // a different modification time
        QVERIFY(writeFile(copy + QStringLiteral("/vae/config.json"), vae));
        const ModelInspection again = inspectAndWait(inspector, copy);
        QVERIFY2(again.limits, qPrintable(again.error));
        QCOMPARE(inspector.configurationReads(), reads + 1);
        QCOMPARE(again.pixelMultiple, 16);
        QCOMPARE(again.limits->downsampleFactor, 32);

        const ModelInspection random = inspectAndWait(inspector, QStringLiteral("random:sd21"));
        QVERIFY(random.stableDiffusion);
        QVERIFY(random.limits);
        const ModelInspection unet = inspectAndWait(inspector, QStringLiteral(TESSERA_TEST_DATA "/models/cifar_like"));
        QVERIFY(!unet.stableDiffusion);
        QVERIFY(unet.limits);
        const ModelInspection plainFile =
            inspectAndWait(inspector, QStringLiteral(TESSERA_TEST_DATA "/sdpipeline/sd1/model_index.json"));
        QVERIFY(!plainFile.limits);
        QVERIFY2(plainFile.error.contains("neither a model folder nor a .safetensors checkpoint"),
                 qPrintable(plainFile.error));
    }

    // The window's model field given a pipeline's unet/ folder: no limits, and the reason says
    // which part it is and what to choose instead.
    void pipelinePartSaysWhatToGive() {
        const QString unet = sdPipeline() + QStringLiteral("/unet");
        const QString expected = "'" + unet +
                                 "' is one part (the UNet: config.json's _class_name is 'UNet2DConditionModel') of a "
                                 "Stable Diffusion pipeline, not a model of its own; point the model at the pipeline "
                                 "folder that holds model_index.json (here the folder above, '" +
                                 sdPipeline() + "'), or at a single-file checkpoint (.safetensors)";
        QString error;
        QVERIFY(!ModelLocator::readLimits(unet, &error));
        QCOMPARE(error, expected);
        ModelInspector inspector;
        const ModelInspection inspection = inspectAndWait(inspector, unet);
        QVERIFY(!inspection.stableDiffusion);
        QVERIFY(!inspection.limits);
        QCOMPARE(inspection.error, expected);
    }

    // A model path that is a symbolic-link loop says so (ELOOP), naming the path, and so does a
    // dangling link (naming where it points), in the model field's check and in the picker;
    // neither is "does not exist".
    void linkLoopsAndDanglingLinksSaySo() {
        const QString loop = scratch_.filePath(QStringLiteral("loop.safetensors"));
        const QString loopFolder = scratch_.filePath(QStringLiteral("loop-pipeline"));
        const QString dangling = scratch_.filePath(QStringLiteral("dangling.safetensors"));
        QVERIFY(QFile::link(loop, loop));
        QVERIFY(QFile::link(loopFolder, loopFolder));
        QVERIFY(QFile::link(scratch_.filePath(QStringLiteral("gone.safetensors")), dangling));
        int multiple = 0;
        QString error;
        QVERIFY(!ModelLocator::readSdLimits(loop, &multiple, &error));
        QVERIFY2(error.contains("loop.safetensors' is a symbolic-link loop") &&
                     error.contains("too many levels of symbolic links") && !error.contains("does not exist"),
                 qPrintable(error));
        QVERIFY(!ModelLocator::readSdLimits(dangling, &multiple, &error));
        QVERIFY2(
            error.contains("dangling.safetensors' is a dangling symbolic link") && error.contains("gone.safetensors"),
            qPrintable(error));
        QVERIFY2(ModelLocator::whyNotThere(scratch_.filePath(QStringLiteral("absent"))).endsWith("' does not exist"),
                 qPrintable(ModelLocator::whyNotThere(scratch_.filePath(QStringLiteral("absent")))));
        QVERIFY(ModelLocator::whyNotThere(scratch_.path()).isEmpty());
        // The picker's description of each.
        const CatalogEntry loopEntry = ModelCatalog::describe(loop);
        QVERIFY2(loopEntry.error.contains("is a symbolic-link loop"), qPrintable(loopEntry.error));
        QVERIFY(!loopEntry.checkpoint);
        const CatalogEntry danglingEntry = ModelCatalog::describe(dangling);
        QVERIFY2(danglingEntry.error.contains("is a dangling symbolic link"), qPrintable(danglingEntry.error));
        // The model field's check of a folder path that loops.
        ModelInspector inspector;
        const ModelInspection inspection = inspectAndWait(inspector, loopFolder);
        QVERIFY(!inspection.limits);
        QVERIFY2(inspection.error.contains("loop-pipeline' is a symbolic-link loop"), qPrintable(inspection.error));
    }

    void summaryShowsSamplerNamesAndPrompts() {
        RunConfig c;
        c.scheduler = SchedulerKind::DPMPP2M;
        c.schedulerOptions.karrasSigmas = true;
        QVERIFY2(configSummary(c).contains("20 DPM++ 2M Karras"), qPrintable(configSummary(c)));
        QVERIFY(!configSummary(c).contains("cfg"));  // no prompt: an unconditional run
        c.tileShift = TileShift::Random;
        QVERIFY2(configSummary(c).contains("hann shifted"), qPrintable(configSummary(c)));
        c.tileShift = TileShift::Off;
        c.prompt = "a lighthouse at dusk, (oil painting:1.3)";
        c.cfgScale = 7.5;
        c.clipSkip = 2;
        const QString summary = configSummary(c);
        QVERIFY2(summary.endsWith("cfg 7.5 · clip skip 2 · “a lighthouse at dusk, (oil painting:1.3)”"),
                 qPrintable(summary));
        // A long prompt is cut to one short line.
        c.prompt = std::string(50, 'a') + "\n" + std::string(50, 'b');
        QVERIFY2(configSummary(c).endsWith("“" + QString(50, 'a') + " " + QString(8, 'b') + "…”"),
                 qPrintable(configSummary(c)));
    }

    // A FLUX.1 run's record (RunRecord::flowMatching): flow Euler and the embedded
    // guidance, no cfg or clip skip (FLUX uses neither); an SD run's record reads as its config.
    void fluxRunSummaryShowsFlowMatching() {
        RunRecord r;
        r.config.prompt = "a lighthouse";
        r.config.guidance = 3.5;
        r.config.cfgScale = 7;
        QCOMPARE(configSummary(r), configSummary(r.config));
        QVERIFY(!ranFlowMatching(r));
        r.flowMatching = true;
        QVERIFY(ranFlowMatching(r));
        const QString summary = configSummary(r);
        QVERIFY2(summary.contains("20 flow Euler") && summary.endsWith("guidance 3.5 · “a lighthouse”"),
                 qPrintable(summary));
        QVERIFY2(!summary.contains("cfg") && !summary.contains("clip skip") && !summary.contains("Karras"),
                 qPrintable(summary));
    }
};

QTEST_GUILESS_MAIN(TestModelLocator)
#include "tst_modellocator.moc"
