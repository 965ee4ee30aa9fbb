// Upscale models in the window's Qt layer (app/qt/UpscaleModelCatalog.h, app/qt/UpscaleModelPass.h,
// app/qt/RunWorker.h): the list of a models folder's ESRGAN/ and upscale_models/ described from
// headers as a run would read the files; the worker running an image-to-image run with a model
// first (the CLI's pixels, the record's upscale_model section, the pass's tiles reported, the start
// image for the before/after view resized alone) and the model alone (tessera-cli upscale's
// pixels); a stop between tiles; files that cannot be used refused with the CLI's words. On the
// CPU, with the random-weight fixtures of tests/data/upscale and the tiny test model.
#include <QtTest/QtTest>

#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QThread>

#include <random>
#include <sstream>

#include "app/cli/InitImage.h"
#include "app/cli/PngIO.h"
#include "app/cli/UpscaleCommand.h"
#include "app/qt/RunWorker.h"
#include "app/qt/UpscaleModelCatalog.h"
#include "core/models/upscale/UpscaleModel.h"
#include "core/run/UpscaleModelFile.h"
#include "core/sampling/ImageOps.h"
#include "tests/app/CliRun.h"
#include "tests/app/WorkerThread.h"

using namespace tessera;
using testing::Ended;
using testing::waitForEnd;
using testing::WorkerThread;

namespace {

const QString kUpscale = QStringLiteral(TESSERA_TEST_DATA "/upscale/");
const QString kCompactX4 = kUpscale + "compact_x4/model.safetensors";
const QString kNotAModel = kUpscale + "compact_x4/io.safetensors";  // tensors of no architecture
const QString kTestModel = QStringLiteral(TESSERA_TEST_DATA "/models/cifar_like");

// A PNG of random colours.
QString writeRandomPng(const QString& path, int width, int height, unsigned seed) {
    std::mt19937 random(seed);
    Rgb8Image image{width, height, std::vector<std::uint8_t>(std::size_t(width) * height * 3)};
    for (auto& v : image.pixels) v = static_cast<std::uint8_t>(random() & 0xff);
    writePng(path.toStdString(), image, {});
    return path;
}

bool copyFile(const QString& from, const QString& to) {
    QDir().mkpath(QFileInfo(to).path());
    return QFile::copy(from, to);
}

QJsonObject manifestIn(const QString& dir) {
    const QStringList files = QDir(dir).entryList({QStringLiteral("*.json")}, QDir::Files);
    if (files.size() != 1) return {};
    QFile f(dir + "/" + files.front());
    return f.open(QIODevice::ReadOnly) ? QJsonDocument::fromJson(f.readAll()).object() : QJsonObject{};
}

// 64 x 64 from a 32 x 32 start image with the tiny pixel model: 2 steps, tiles of 32.
RunConfig imageToImage(const QString& start, const QString& upscaleModel) {
    RunConfig c;
    c.model = kTestModel.toStdString();
    c.initImage = start.toStdString();
    c.upscaleModel = upscaleModel.toStdString();
    c.width = 64;
    c.height = 64;
    c.strength = 0.5;
    c.steps = 2;
    c.seed = 5;
    c.tile = 32;
    c.overlapPx = 8;
    c.tileBatch = 2;
    c.backend = BackendKind::CPU;
    c.precision = Precision::FP32;
    return c;
}

}  // namespace

class TestUpscaleWorker : public QObject {
    Q_OBJECT

private:
    QTemporaryDir scratch_;

private slots:
    void initTestCase() {
        QVERIFY(scratch_.isValid());
        qunsetenv(kModelsFolderVariable);
        registerRunMetaTypes();
    }

    // A models folder as A1111 and ComfyUI keep one: ESRGAN/ then upscale_models/ (subfolders
    // too), each file described from its header as the run would read it, a file of no
    // architecture with the run's refusal, other files ignored; and files asked about by path.
    void catalogListsTheModelsFolders() {
        const QString models = scratch_.filePath("models");
        QVERIFY(copyFile(kCompactX4, models + "/ESRGAN/4x-compact.safetensors"));
        QVERIFY(copyFile(kUpscale + "compact_x4/model.pth", models + "/ESRGAN/4x-compact.pth"));
        QVERIFY(copyFile(kNotAModel, models + "/ESRGAN/not-a-model.safetensors"));
        QVERIFY(copyFile(kNotAModel, models + "/ESRGAN/notes.txt"));
        QVERIFY(
            copyFile(kUpscale + "esrgan_old_x4/model.safetensors", models + "/upscale_models/4x-esrgan.safetensors"));
        QVERIFY(copyFile(kUpscale + "span_x2_nonorm_noeval/model.safetensors",
                         models + "/upscale_models/fast/2x-span.safetensors"));
        const QString elsewhere = scratch_.filePath("elsewhere/x3.safetensors");
        QVERIFY(copyFile(kUpscale + "compact_x3/model.safetensors", elsewhere));

        UpscaleModelCatalog catalog;
        QSignalSpy scanned(&catalog, &UpscaleModelCatalog::scanned);
        catalog.scan({models}, {elsewhere, scratch_.filePath("missing.pth")});
        QVERIFY(scanned.wait(60000));
        const auto scan = scanned.at(0).at(1).value<UpscaleModelScan>();
        QCOMPARE(scan.folders, QStringList{models});
        QStringList names, folders;
        for (const UpscaleModelEntry& e : scan.found) {
            names << e.name;
            folders << e.folder;
        }
        // By folder, then by name; a .safetensors before the .pth of the same name.
        QCOMPARE(names, (QStringList{"4x-compact", "4x-compact", "not-a-model", "2x-span", "4x-esrgan"}));
        QCOMPARE(folders, (QStringList{"ESRGAN", "ESRGAN", "ESRGAN", "upscale_models", "upscale_models"}));
        QVERIFY(scan.found[0].path.endsWith(".safetensors") && !scan.found[0].pickle);
        QVERIFY(scan.found[1].path.endsWith(".pth") && scan.found[1].pickle);
        // What the run reads from the whole file, read from the header alone.
        for (const UpscaleModelEntry& e : scan.found) {
            if (!e.usable()) continue;
            const UpscaleModel model = UpscaleModel::loadFile(e.path.toStdString());
            QCOMPARE(e.architecture, QString::fromStdString(model.description()));
            QCOMPARE(e.scale, model.scale());
            QCOMPARE(e.family, QString::fromLatin1(toString(model.config().architecture)));
            QCOMPARE(e.bytes, QFileInfo(e.path).size());
        }
        QCOMPARE(scan.found[0].family, QString("Compact"));
        QCOMPARE(scan.found[3].scale, 2);
        QCOMPARE(scan.found[4].family, QString("ESRGAN"));
        // The refusal a run gives, without the field's name.
        const UpscaleModelEntry& bad = scan.found[2];
        QVERIFY(!bad.usable() && bad.scale == 0);
        QVERIFY2(bad.error.contains("no upscale architecture has these keys (4): clamped, input, output, output64; "
                                    "Tessera runs ESRGAN, Real-ESRGAN Compact and SPAN models"),
                 qPrintable(bad.error));
        QVERIFY(!bad.error.startsWith("upscale_model: "));
        // Paths asked about: described, a missing one with why.
        QCOMPARE(scan.others.size(), 2);
        QCOMPARE(scan.others[0].scale, 3);
        QVERIFY(scan.others[0].folder.isEmpty());
        QVERIFY2(!scan.others[1].usable() && scan.others[1].error.contains("missing.pth"),
                 qPrintable(scan.others[1].error));

        // The folders: $TESSERA_MODELS, the folder holding the model's folder, the window's;
        // each once.
        qputenv(kModelsFolderVariable, models.toUtf8());
        const QStringList listed = UpscaleModelCatalog::modelsFolders(
            scratch_.filePath("window-models"), (models + "/Stable-diffusion/sd15.safetensors").toStdString());
        qunsetenv(kModelsFolderVariable);
        QCOMPARE(listed, (QStringList{models, scratch_.filePath("window-models")}));
        QCOMPARE(UpscaleModelCatalog::modelsFolders({}, "random:sd15"), QStringList{});
    }

    // Image-to-image with an upscale model: the model over the start image first (its tiles
    // reported), the same pixels as tessera-cli render --upscale-model, the record's
    // upscale_model section and line, and the start image for before/after resized alone.
    void imageToImageRunsTheModelFirst() {
        if (!QFileInfo::exists(kTestModel + "/config.json")) QSKIP("tests/data/models/cifar_like is missing");
        const QString start = writeRandomPng(scratch_.filePath("start32.png"), 32, 32, 7);
        const RunConfig config = imageToImage(start, kCompactX4);
        WorkerThread thread;
        QSignalSpy progress(thread.worker, &RunWorker::upscaleModelProgress);
        QSignalSpy messages(thread.worker, &RunWorker::message);
        const Ended ended = waitForEnd(thread.worker, [&] { thread.start(config, 1); });
        QVERIFY2(ended.run, qPrintable(ended.error));
        const RunRecord& record = ended.run->result->record;
        QVERIFY(record.status == RunStatus::Finished);
        QVERIFY(record.upscaleModel);
        const UpscaleModelRecord& u = *record.upscaleModel;
        QCOMPARE(u.name, std::string("model"));
        QCOMPARE(u.scale, 4);
        QCOMPARE(u.outputW, 128);
        QCOMPARE(u.resizedW, 64);
        QCOMPARE(u.resizeFilter, std::string("area average"));
        QVERIFY(!u.alone);
        QCOMPARE(u.sha256.size(), std::size_t(64));
        QCOMPARE(record.config.upscaleModel, config.upscaleModel);
        QCOMPARE(record.messages.back(), describe(u));
        // The pass's tiles: 0 of n when it starts, n of n at its end.
        QVERIFY(progress.size() >= 2);
        QCOMPARE(progress.front().at(1).toInt(), 0);
        QCOMPARE(progress.back().at(1).toInt(), u.tiles);
        QCOMPARE(progress.back().at(2).toInt(), u.tiles);
        bool said = false;
        for (const QList<QVariant>& m : messages)
            said = said || m.at(1).toString().startsWith("upscale model: model (");
        QVERIFY(said);
        // Before/after: the start image resized alone, as a reopened run shows it.
        const Rgb8Image decoded = decodeImageFile(start.toStdString());
        QCOMPARE(ended.run->startImage, toQImage(resampleToModelSpace(decoded, 64, 64, 3)));
        QVERIFY(ended.run->startFile);

        // tessera-cli renders the same image from the same settings.
        QTemporaryDir out;
        const testing::CliRun cli = testing::runCli(
            {"render", "--model",     kTestModel, "--init",     start,     "--upscale-model", kCompactX4, "--width",
             "64",     "--height",    "64",       "--strength", "0.5",     "--steps",         "2",        "--seed",
             "5",      "--tile",      "32",       "--overlap",  "8",       "--batch",         "2",        "--backend",
             "cpu",    "--precision", "fp32",     "--out",      out.path()});
        QVERIFY2(cli.exitCode == 0, qPrintable(testing::describe(cli)));
        QCOMPARE(manifestIn(out.path())["image_sha256"].toString().toStdString(), record.imageSha256);

        // Without the model the run starts from another image, and names none.
        const Ended plain = waitForEnd(thread.worker, [&] { thread.start(imageToImage(start, {}), 2); });
        QVERIFY2(plain.run, qPrintable(plain.error));
        QVERIFY(!plain.run->result->record.upscaleModel);
        QVERIFY(plain.run->result->record.imageSha256 != record.imageSha256);

        // A run from noise ignores the setting: the window keeps it for the next start image.
        RunConfig noise = imageToImage(start, kCompactX4);
        noise.initImage.clear();
        const Ended fromNoise = waitForEnd(thread.worker, [&] { thread.start(noise, 3); });
        QVERIFY2(fromNoise.run, qPrintable(fromNoise.error));
        QVERIFY(fromNoise.run->result->record.config.upscaleModel.empty());
        QVERIFY(!fromNoise.run->result->record.upscaleModel);
    }

    // The model alone (Upscale only): tessera-cli upscale's pixels and record; a factor below
    // the model's shrinks its output; no diffusion model is needed.
    void upscaleAloneIsTheCliUpscale() {
        const QString start = writeRandomPng(scratch_.filePath("alone.png"), 24, 20, 9);
        RunConfig config;
        config.model = scratch_.filePath("no-such-diffusion-model").toStdString();
        config.initImage = start.toStdString();
        config.upscaleModel = kCompactX4.toStdString();
        config.upscale = 4;
        config.backend = BackendKind::CPU;
        WorkerThread thread;
        QSignalSpy started(thread.worker, &RunWorker::runStarted);
        const Ended ended = waitForEnd(thread.worker, [&] { thread.startUpscale(config, 1); });
        QVERIFY2(ended.run, qPrintable(ended.error));
        const RunRecord& record = ended.run->result->record;
        QVERIFY(record.status == RunStatus::Finished);
        QCOMPARE(QSize(record.config.width, record.config.height), QSize(96, 80));
        QCOMPARE(ended.run->image.size(), QSize(96, 80));
        QVERIFY(record.upscaleModel && record.upscaleModel->alone);
        QVERIFY(!record.upscaleModel->resized());
        QCOMPARE(record.stepsRun, 0);
        QVERIFY(started.isEmpty());  // no diffusion run started
        QCOMPARE(imageSha256(rgb8Of(ended.run->image)), record.imageSha256);
        QCOMPARE(toRgb8(ended.run->result->image).pixels, rgb8Of(ended.run->image).pixels);  // what exports write
        QCOMPARE(ended.run->startImage.size(), QSize(96, 80));

        std::ostringstream out, err;
        const QString cliOut = scratch_.filePath("cli-alone");
        QCOMPARE(runUpscaleCommand({"--upscale-model", kCompactX4.toStdString(), "--init", start.toStdString(),
                                    "--upscale", "4", "--backend", "cpu", "--out", cliOut.toStdString()},
                                   out, err),
                 0);
        QCOMPARE(manifestIn(cliOut)["image_sha256"].toString().toStdString(), record.imageSha256);

        // x2 with a 4x model: the output shrunk (area average), as A1111's extras tab sizes it.
        config.upscale = 2.5;
        const Ended shrunk = waitForEnd(thread.worker, [&] { thread.startUpscale(config, 2); });
        QVERIFY2(shrunk.run, qPrintable(shrunk.error));
        QCOMPARE(shrunk.run->image.size(), QSize(60, 50));
        QCOMPARE(shrunk.run->result->record.upscaleModel->resizeFilter, std::string("area average"));
    }

    // Files that cannot be used are refused before any work, in the CLI's words.
    void unusableModelsAreRefusedWithTheirReason_data() {
        QTest::addColumn<QString>("model");
        QTest::addColumn<double>("factor");
        QTest::addColumn<QString>("message");
        QTest::newRow("no architecture") << kNotAModel << 4.0
                                         << "io.safetensors: no upscale architecture has these keys (4): clamped, "
                                            "input, output, output64; Tessera runs ESRGAN, Real-ESRGAN Compact and "
                                            "SPAN models";
        QTest::newRow("missing") << kUpscale + "none.safetensors" << 4.0
                                 << "upscale_model: '" + kUpscale + "none.safetensors' does not exist";
        QTest::newRow("a folder") << kUpscale + "compact_x4" << 4.0 << "is a folder, not an upscale model file";
        QTest::newRow("unknown name") << "no-such-upscaler" << 4.0 << "no upscale model named 'no-such-upscaler'";
        QTest::newRow("beyond the scale")
            << kCompactX4 << 8.0 << "upscale: 24x20 upscaled to 192x160 needs more than model gives (4x";
    }
    void unusableModelsAreRefusedWithTheirReason() {
        QFETCH(QString, model);
        QFETCH(double, factor);
        QFETCH(QString, message);
        const QString start = writeRandomPng(scratch_.filePath("refused.png"), 24, 20, 3);
        RunConfig config;
        config.model = kTestModel.toStdString();
        config.initImage = start.toStdString();
        config.upscaleModel = model.toStdString();
        config.upscale = factor;
        config.backend = BackendKind::CPU;
        WorkerThread thread;
        QSignalSpy progress(thread.worker, &RunWorker::upscaleModelProgress);
        const Ended alone = waitForEnd(thread.worker, [&] { thread.startUpscale(config, 1); });
        QVERIFY(!alone.run);
        QVERIFY2(alone.error.contains(message), qPrintable(alone.error));
        // The setting named first, as tessera-cli names it.
        QVERIFY2(alone.error.startsWith(factor == 4.0 ? "upscale_model: " : "upscale: "), qPrintable(alone.error));
        // And the same in front of an image-to-image run, before the diffusion model is touched.
        if (QFileInfo::exists(kTestModel + "/config.json") && factor == 4.0) {
            RunConfig run = imageToImage(start, model);
            const Ended refused = waitForEnd(thread.worker, [&] { thread.start(run, 2); });
            QVERIFY(!refused.run);
            QVERIFY2(refused.error.contains(message), qPrintable(refused.error));
        }
        QVERIFY(progress.isEmpty());  // nothing ran
    }

    // Stop: the pass ends between two tiles and the run is cancelled, saying where it stopped.
    void stopEndsThePassBetweenTiles() {
        if (!QFileInfo::exists(kTestModel + "/config.json")) QSKIP("tests/data/models/cifar_like is missing");
        // 560 px wide: two tiles (the tile is 512 at most).
        const QString start = writeRandomPng(scratch_.filePath("wide.png"), 560, 24, 5);
        WorkerThread thread;
        thread.worker->setTileBatchSignalInterval(0);  // every tile reported
        RunWorker* worker = thread.worker;
        // Stop once the first tile is done: from the worker's thread, as a Stop would at that time.
        quint64 stopping = 0;
        connect(
            worker, &RunWorker::upscaleModelProgress, worker,
            [worker, &stopping](quint64 runId, int done, int) {
                if (runId == stopping && done == 1) worker->cancel(runId);
            },
            Qt::DirectConnection);

        RunConfig alone;
        alone.initImage = start.toStdString();
        alone.upscaleModel = kCompactX4.toStdString();
        alone.upscale = 2;
        alone.backend = BackendKind::CPU;
        stopping = 1;
        const Ended stopped = waitForEnd(worker, [&] { thread.startUpscale(alone, 1); });
        QVERIFY2(stopped.run, qPrintable(stopped.error));
        const RunRecord& record = stopped.run->result->record;
        QVERIFY(record.status == RunStatus::Cancelled);
        QVERIFY(stopped.run->image.isNull());
        QVERIFY(record.upscaleModel && record.upscaleModel->alone);
        QCOMPARE(record.upscaleModel->tiles, 2);
        QCOMPARE(QString::fromStdString(record.messages.back()), QString("upscale model: stopped after 1 of 2 tiles"));

        // In front of image-to-image: cancelled before the diffusion model runs a step.
        RunConfig run = imageToImage(start, kCompactX4);
        run.width = 560;
        run.height = 24;
        run.tile = 24;
        run.overlapPx = 8;
        stopping = 2;
        const Ended cancelled = waitForEnd(worker, [&] { thread.start(run, 2); });
        QVERIFY2(cancelled.run, qPrintable(cancelled.error));
        QVERIFY(cancelled.run->result->record.status == RunStatus::Cancelled);
        QCOMPARE(cancelled.run->result->record.stepsRun, 0);
        QVERIFY(!cancelled.run->result->record.upscaleModel->alone);
        QVERIFY(cancelled.run->startFile);  // the history keeps what it started from

        // Stopped before it began: no tile runs.
        worker->cancel(3);
        stopping = 0;
        const Ended before = waitForEnd(worker, [&] { thread.startUpscale(alone, 3); });
        QVERIFY2(before.run, qPrintable(before.error));
        QCOMPARE(QString::fromStdString(before.run->result->record.messages.back()),
                 QString("upscale model: stopped after 0 of 2 tiles"));
    }
};

QTEST_GUILESS_MAIN(TestUpscaleWorker)
#include "tst_upscaleworker.moc"
