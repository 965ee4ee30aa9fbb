// Upscale models where users use them (app/cli/UpscaleCommand.h, app/cli/UpscaleModelRun.h,
// core/run/UpscaleModelFile.h): `tessera-cli upscale` on the CPU writes the model's output (the CPU
// upscaler's pixels) with A1111's parameters that read back; a NAME is looked up in a models
// folder's ESRGAN/ then upscale_models/; every refusal is invalid input (exit 2) with a message that
// says what to do, before any work; `render --init --upscale --upscale-model` runs the model first
// and its manifest and parameters name it.
#include <QtTest/QtTest>

#include <QCryptographicHash>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>

#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "app/cli/CliOptions.h"
#include "app/cli/InitImage.h"
#include "app/cli/PngIO.h"
#include "app/cli/UpscaleCommand.h"
#include "core/cpu/CpuUpscaler.h"
#include "core/formats/Safetensors.h"
#include "core/models/upscale/UpscaleModel.h"
#include "core/run/UpscaleModelFile.h"
#include "tests/app/CliRun.h"

using namespace tessera;
using tessera::testing::CliRun;
using tessera::testing::describe;

namespace {

const QString kUpscale = QStringLiteral(TESSERA_TEST_DATA "/upscale/");
const QString kCompactX4 = kUpscale + "compact_x4/model.safetensors";
const QString kCompactX3 = kUpscale + "compact_x3/model.safetensors";
const std::string kVersion = std::string("Version: tessera-") + TESSERA_VERSION;
// Whether this build reads PyTorch checkpoints (core/formats/TorchCheckpoint.h), as UpscaleModelRun does.
#if __has_include("core/formats/TorchCheckpoint.h")
constexpr bool kReadsCheckpoints = true;
#else
constexpr bool kReadsCheckpoints = false;
#endif

// A .pth file holding a pickle's first opcode and nothing more, written once per process.
QString damagedPickle() {
    static QTemporaryDir dir;
    const QString path = dir.filePath("cut.pth");
    if (!QFileInfo::exists(path)) {
        QFile f(path);
        if (f.open(QIODevice::WriteOnly)) f.write(QByteArray("\x80\x02", 2));
    }
    return path;
}

// tessera-cli with $TESSERA_MODELS set to `models` (unset when empty); upscales of large images take minutes.
CliRun runCli(const QStringList& args, const QString& models = {}) {
    return testing::runCliWithModels(args, models, 600000);
}

// A PNG of random colours.
void writeRandomPng(const QString& path, int width, int height, unsigned seed) {
    std::mt19937 random(seed);
    Rgb8Image image{width, height, std::vector<std::uint8_t>(std::size_t(width) * height * 3)};
    for (auto& v : image.pixels) v = static_cast<std::uint8_t>(random() & 0xff);
    writePng(path.toStdString(), image, {});
}

bool copyFile(const QString& from, const QString& to) {
    QDir().mkpath(QFileInfo(to).path());
    return QFile::copy(from, to);
}

// What the CPU upscaler makes of `imagePath` with the model in `modelPath`: each value
// round(255 v) of the clamped output.
Rgb8Image expectedUpscale(const QString& modelPath, const QString& imagePath, int tile, int overlap) {
    const SafetensorsFile file(modelPath.toStdString());
    const UpscaleModel model = UpscaleModel::load(StateDict::fromFile(file));
    const Rgb8Image in = decodeImageFile(imagePath.toStdString());
    const std::size_t plane = std::size_t(in.width) * in.height;
    ImageTensor tensor{3, in.height, in.width, std::vector<float>(plane * 3)};
    for (std::size_t p = 0; p < plane; ++p)
        for (std::size_t c = 0; c < 3; ++c) tensor.data[c * plane + p] = in.pixels[3 * p + c] / 255.0f;
    CpuUpscaler cpu;
    UpscaleTiling tiling;
    tiling.tile = tile;
    tiling.overlap = overlap;
    const ImageTensor out = cpu.upscale(model, tensor, tiling);
    const std::size_t outPlane = std::size_t(out.width) * out.height;
    Rgb8Image bytes{out.width, out.height, std::vector<std::uint8_t>(outPlane * 3)};
    for (std::size_t p = 0; p < outPlane; ++p)
        for (std::size_t c = 0; c < 3; ++c)
            bytes.pixels[3 * p + c] =
                static_cast<std::uint8_t>(std::lround(static_cast<double>(255.0f * out.data[c * outPlane + p])));
    return bytes;
}

// The one run's PNG (or manifest) in `dir`.
QString onlyFile(const QString& dir, const QString& pattern) {
    const QStringList files = QDir(dir).entryList({pattern}, QDir::Files);
    return files.size() == 1 ? dir + "/" + files.front() : QString();
}

QJsonObject manifestIn(const QString& dir) {
    QFile f(onlyFile(dir, "*.json"));
    return f.open(QIODevice::ReadOnly) ? QJsonDocument::fromJson(f.readAll()).object() : QJsonObject{};
}

QString sha256Of(const QString& path) {
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) return {};
    return QString::fromLatin1(QCryptographicHash::hash(f.readAll(), QCryptographicHash::Sha256).toHex());
}

int differingBytes(const Rgb8Image& a, const Rgb8Image& b) {
    if (a.width != b.width || a.height != b.height) return -1;
    int n = 0;
    for (std::size_t i = 0; i < a.pixels.size(); ++i) n += a.pixels[i] != b.pixels[i];
    return n;
}

// `tessera-cli upscale` in this process: exit status and both streams.
struct InProcess {
    int exitCode = -1;
    std::string out, err;
    qint64 ms = 0;
};
InProcess upscaleInProcess(const std::vector<std::string>& args) {
    std::ostringstream out, err;
    QElapsedTimer timer;
    timer.start();
    InProcess r;
    r.exitCode = runUpscaleCommand(args, out, err);
    r.ms = timer.elapsed();
    r.out = out.str();
    r.err = err.str();
    return r;
}

}  // namespace

class TestUpscaleCli : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() { qunsetenv(kModelsFolderVariable); }

    // The model alone on a PNG of the test images: 4x its size, the CPU upscaler's pixels, the
    // extras tab's parameters, the manifest naming the file by its SHA-256.
    void upscalesAFixtureImage() {
        QTemporaryDir dir;
        const QString model = dir.filePath("compact_x4.safetensors");
        QVERIFY(copyFile(kCompactX4, model));
        const QString image = QStringLiteral(TESSERA_TEST_DATA "/images/alpha.png");
        const CliRun r = runCli(
            {"upscale", "--upscale-model", model, "--init", image, "--backend", "cpu", "--out", dir.filePath("out")});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        QVERIFY2(r.out.startsWith("finished: 2x1 upscaled to 8x4 with compact_x4"), qPrintable(r.out));
        const PngFile png = readPng(onlyFile(dir.filePath("out"), "*.png").toStdString());
        QCOMPARE(png.image.width, 8);
        QCOMPARE(png.image.height, 4);
        QCOMPARE(differingBytes(png.image, expectedUpscale(model, image, 512, 32)), 0);
        QCOMPARE(png.text("parameters"), "Postprocess upscale by: 4, Postprocess upscaler: compact_x4, " + kVersion);
    }

    // Tiles of 32 input pixels overlapping by 8 over a 70x50 image: the tiled CPU upscaler's output
    // to the byte; the manifest records the model, the tiling and the run.
    void upscalesInTilesAndRecordsTheModel() {
        QTemporaryDir dir;
        const QString model = dir.filePath("compact_x4.safetensors");
        QVERIFY(copyFile(kCompactX4, model));
        const QString image = dir.filePath("photo.png");
        writeRandomPng(image, 70, 50, 7);
        const CliRun r = runCli({"upscale", "--upscale-model", model, "--init", image, "--tile", "32", "--tile-overlap",
                                 "8", "--backend", "cpu", "--out", dir.filePath("out")});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        const QString pngPath = onlyFile(dir.filePath("out"), "*.png");
        const PngFile png = readPng(pngPath.toStdString());
        QCOMPARE(png.image.width, 280);
        QCOMPARE(png.image.height, 200);
        QCOMPARE(differingBytes(png.image, expectedUpscale(model, image, 32, 8)), 0);

        const QJsonObject manifest = manifestIn(dir.filePath("out"));
        QFile manifestFile(onlyFile(dir.filePath("out"), "*.json"));
        QVERIFY(manifestFile.open(QIODevice::ReadOnly));
        QCOMPARE(QByteArray::fromStdString(png.text("tessera-manifest")), manifestFile.readAll());
        const QJsonObject u = manifest["upscale_model"].toObject();
        QCOMPARE(u["file"].toString(), QString("compact_x4.safetensors"));
        QCOMPARE(u["name"].toString(), QString("compact_x4"));
        QCOMPARE(u["sha256"].toString(), sha256Of(model));
        QCOMPARE(u["architecture"].toString(), QString("Real-ESRGAN Compact 4x, 16 features, 5 convolutions"));
        QCOMPARE(u["scale"].toInt(), 4);
        QCOMPARE(u["pickle"].toBool(), false);
        QCOMPARE(u["precision"].toString(), QString("fp32"));
        QCOMPARE(u["backend"].toString(), QString("cpu"));
        // Tiles of at most 32 input pixels, shrunk to the least that keeps three across 70 pixels.
        QCOMPARE(u["tile"].toInt(), 29);
        QCOMPARE(u["overlap"].toInt(), 8);
        QVERIFY(u["tiles"].toInt() > 1);
        QVERIFY(u["alone"].toBool());
        QCOMPARE(u["resize_filter"].toString(), QString());
        QCOMPARE(manifest["config"].toObject()["upscale"].toDouble(), 4.0);
        QCOMPARE(manifest["config"].toObject()["width"].toInt(), 280);
        QCOMPARE(manifest["status"].toString(), QString("finished"));
        QCOMPARE(manifest["model_name"].toString(), QString());  // no diffusion model
        QVERIFY(!manifest["image_sha256"].toString().isEmpty());

        // The PNG's settings read back: the upscaler by name, the factor.
        const CliOptions back = parseCliOptions({"render", "--params-from", pngPath.toStdString()});
        QCOMPARE(back.config.upscaleModel, std::string("compact_x4"));
        QCOMPARE(back.config.upscale, 4.0);
        QVERIFY(back.fieldsGiven.count("upscale_model"));
        std::string notes;
        for (const std::string& note : back.paramsFromNotes) notes += note + "\n";
        QVERIFY2(notes.empty(), notes.c_str());
    }

    // A factor below the model's scale: its output shrunk to the asked size by area average.
    void smallerFactorShrinksTheOutput() {
        QTemporaryDir dir;
        const QString image = dir.filePath("photo.png");
        writeRandomPng(image, 21, 17, 3);
        const CliRun r = runCli({"upscale", "--upscale-model", kCompactX4, "--init", image, "--upscale", "2.5", "--out",
                                 dir.filePath("out")});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        QVERIFY2(r.err.contains("resized to 52x42 (area average)"), qPrintable(r.err));
        const PngFile png = readPng(onlyFile(dir.filePath("out"), "*.png").toStdString());
        const Rgb8Image full = expectedUpscale(kCompactX4, image, 512, 32);
        QCOMPARE(differingBytes(png.image, toRgb8(resampleToModelSpace(full, 52, 42, 3))), 0);
        QCOMPARE(png.text("parameters"), "Postprocess upscale by: 2.5, Postprocess upscaler: model, " + kVersion);
        QCOMPARE(manifestIn(dir.filePath("out"))["upscale_model"].toObject()["resize_filter"].toString(),
                 QString("area average"));
    }

    // A PyTorch checkpoint (zip and legacy) is read as data by the restricted reader: the same
    // model, the same pixels as its safetensors file; the manifest says it was a pickle.
    void checkpointsAreReadWithoutExecuting() {
        if (!kReadsCheckpoints) QSKIP("this build has no PyTorch checkpoint reader");
        QTemporaryDir dir;
        const QString image = dir.filePath("photo.png");
        writeRandomPng(image, 23, 19, 13);
        const Rgb8Image expected = expectedUpscale(kCompactX4, image, 512, 32);
        for (const char* file : {"model.pth", "model_legacy.pth"}) {
            const QString out = dir.filePath(file);
            const CliRun r =
                runCli({"upscale", "--upscale-model", kUpscale + "compact_x4/" + file, "--init", image, "--out", out});
            QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
            QVERIFY2(r.err.contains("a PyTorch checkpoint read without executing it"), qPrintable(r.err));
            QCOMPARE(differingBytes(readPng(onlyFile(out, "*.png").toStdString()).image, expected), 0);
            const QJsonObject u = manifestIn(out)["upscale_model"].toObject();
            QCOMPARE(u["pickle"].toBool(), true);
            QCOMPARE(u["sha256"].toString(), sha256Of(kUpscale + "compact_x4/" + file));
        }
    }

    // A NAME: ESRGAN/ before upscale_models/, .safetensors before .pth; the folder from
    // $TESSERA_MODELS; not found: every place looked in, and how to point Tessera at a folder.
    void namesAreLookedUpInTheModelsFolder() {
        QTemporaryDir dir;
        const QString models = dir.filePath("models");
        QVERIFY(copyFile(kCompactX4, models + "/ESRGAN/a.safetensors"));
        QVERIFY(copyFile(kCompactX3, models + "/upscale_models/b.safetensors"));
        QVERIFY(copyFile(kCompactX3, models + "/ESRGAN/c.safetensors"));
        QVERIFY(copyFile(kCompactX4, models + "/upscale_models/c.safetensors"));
        QVERIFY(copyFile(kUpscale + "compact_x4/model.pth", models + "/ESRGAN/d.pth"));
        QVERIFY(copyFile(kCompactX3, models + "/ESRGAN/d.safetensors"));
        const QString image = dir.filePath("photo.png");
        writeRandomPng(image, 9, 7, 5);
        const auto scaleOf = [&](const QString& name, const QString& out) {
            const CliRun r = runCli({"upscale", "--upscale-model", name, "--init", image, "--out", out}, models);
            if (r.exitCode != 0) return describe(r);
            const QJsonObject u = manifestIn(out)["upscale_model"].toObject();
            return QString("%1 %2").arg(u["file"].toString()).arg(u["scale"].toInt());
        };
        QCOMPARE(scaleOf("a", dir.filePath("a")), QString("a.safetensors 4"));
        QCOMPARE(scaleOf("b", dir.filePath("b")), QString("b.safetensors 3"));
        QCOMPARE(scaleOf("c", dir.filePath("c")), QString("c.safetensors 3"));  // ESRGAN/ first
        QCOMPARE(scaleOf("d", dir.filePath("d")), QString("d.safetensors 3"));  // not the pickle
        QCOMPARE(scaleOf("b.safetensors", dir.filePath("b2")), QString("b.safetensors 3"));

        const CliRun missing =
            runCli({"upscale", "--upscale-model", "zzz", "--init", image, "--out", dir.filePath("z")}, models);
        QCOMPARE(missing.exitCode, 2);
        QVERIFY2(missing.err.contains("upscale_model: no upscale model named 'zzz' ('zzz.safetensors', 'zzz.pth' or "
                                      "'zzz.pt') in '" +
                                      models + "/ESRGAN' or '" + models +
                                      "/upscale_models'; give the file's path, "
                                      "or set TESSERA_MODELS"),
                 qPrintable(missing.err));
        const CliRun nowhere = runCli({"upscale", "--upscale-model", "a", "--init", image, "--out", dir.filePath("n")});
        QCOMPARE(nowhere.exitCode, 2);
        QVERIFY2(nowhere.err.contains("no models folder is known to look the name up in"), qPrintable(nowhere.err));
        QVERIFY(!QFileInfo::exists(dir.filePath("z")) && !QFileInfo::exists(dir.filePath("n")));
    }

    // The models folders: $TESSERA_MODELS, then the folder holding the diffusion model's folder
    // (A1111's models/Stable-diffusion/x.safetensors, ComfyUI's models/checkpoints/) without
    // repeats; random weights have no folder.
    void modelsFoldersFromTheEnvironmentAndTheModel() {
        using Folders = std::vector<std::string>;
        QCOMPARE(upscaleModelsFolders("", ""), Folders{});
        QCOMPARE(upscaleModelsFolders("/srv/models", ""), Folders{"/srv/models"});
        QCOMPARE(upscaleModelsFolders("", "/a1111/models/Stable-diffusion/v1-5.safetensors"), Folders{"/a1111/models"});
        QCOMPARE(upscaleModelsFolders("/srv/models", "/comfy/models/checkpoints/sd15/"),
                 (Folders{"/srv/models", "/comfy/models"}));
        QCOMPARE(upscaleModelsFolders("/a1111/models", "/a1111/models/Stable-diffusion/v1-5.safetensors"),
                 Folders{"/a1111/models"});
        QCOMPARE(upscaleModelsFolders("", "random:sd15"), Folders{});
        QCOMPARE(upscalerName("/x/ESRGAN/4x-UltraSharp.pth"), std::string("4x-UltraSharp"));
        QCOMPARE(upscalerName("RealESRGAN_x4plus.safetensors"), std::string("RealESRGAN_x4plus"));
        QCOMPARE(upscalerName("4x_NMKD-Siax_200k"), std::string("4x_NMKD-Siax_200k"));
        QCOMPARE(upscalerName("model.v2"), std::string("model.v2"));
    }

    // Each refusal: exit 2, the setting named, what to do, within a second, nothing written.
    void refusalsAreClearAndQuick_data() {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("message");
        const QString image = QStringLiteral(TESSERA_TEST_DATA "/images/alpha.png");
        const QStringList base{"--init", image};
        QTest::newRow("missing file") << (QStringList{"--upscale-model", kUpscale + "none.safetensors"} + base)
                                      << "upscale_model: '" + kUpscale + "none.safetensors' does not exist";
        QTest::newRow("a folder") << (QStringList{"--upscale-model", kUpscale + "compact_x4"} + base)
                                  << "is a folder, not an upscale model file";
        QTest::newRow("unknown architecture")
            << (QStringList{"--upscale-model", kUpscale + "compact_x4/io.safetensors"} + base)
            << "no upscale architecture has these keys (4): clamped, input, output, output64; Tessera runs ESRGAN, "
               "Real-ESRGAN Compact and SPAN models";
        if (kReadsCheckpoints) {
            QTest::newRow("damaged pickle")
                << (QStringList{"--upscale-model", damagedPickle()} + base) << "upscale_model: " + damagedPickle();
            const QString hostile = QStringLiteral(TESSERA_TEST_DATA "/pickles/hostile/global_os_system.pth");
            if (QFileInfo::exists(hostile))
                QTest::newRow("code in a pickle")
                    << (QStringList{"--upscale-model", hostile} + base)
                    << "refused: the pickle names the global 'os.system', which a state dict does not need";
        } else {
            QTest::newRow("pickle") << (QStringList{"--upscale-model", kUpscale + "compact_x4/model.pth"} + base)
                                    << "model.pth' is a PyTorch checkpoint (a pickle). Tessera never executes a "
                                       "pickle, and this build has no restricted reader for one";
        }
        QTest::newRow("scale") << (QStringList{"--upscale-model", kCompactX4, "--upscale", "8"} + base)
                               << "upscale: 2x1 upscaled to 16x8 needs more than model gives (4x: 8x4); a model's "
                                  "output is only ever shrunk to the asked size, never enlarged: ask for 4 or less";
        QTest::newRow("factor below 1") << (QStringList{"--upscale-model", kCompactX4, "--upscale", "0.5"} + base)
                                        << "upscale: 0.5 is not allowed; the upscale factor must be 1 to 16";
        QTest::newRow("tile small") << (QStringList{"--upscale-model", kCompactX4, "--tile", "8"} + base)
                                    << "tile: 8 is not allowed; the upscale tile must be 32 to 4096 input pixels";
        QTest::newRow("tile large") << (QStringList{"--upscale-model", kCompactX4, "--tile", "5000"} + base)
                                    << "tile: 5000 is not allowed; the upscale tile must be 32 to 4096";
        QTest::newRow("tile text") << (QStringList{"--upscale-model", kCompactX4, "--tile", "big"} + base)
                                   << "tile: 'big' is not a whole number";
        QTest::newRow("overlap large")
            << (QStringList{"--upscale-model", kCompactX4, "--tile", "64", "--tile-overlap", "40"} + base)
            << "tile_overlap: 40 is not allowed; the tile overlap must be 0 to 32 input pixels (half the tile, 64)";
        QTest::newRow("overlap negative") << (QStringList{"--upscale-model", kCompactX4, "--tile-overlap", "-1"} + base)
                                          << "tile_overlap: '-1' is not allowed; it must be at least 0";
        QTest::newRow("no model") << base << "upscale_model: upscale needs a model: --upscale-model FILE|NAME";
        QTest::newRow("no image") << QStringList{"--upscale-model", kCompactX4}
                                  << "init: upscale needs an image: --init FILE";
        QTest::newRow("bad image") << QStringList{"--upscale-model", kCompactX4, "--init", kCompactX4}
                                   << "is neither a PNG nor a JPEG file";
        QTest::newRow("unknown option") << (QStringList{"--upscale-model", kCompactX4, "--steps", "3"} + base)
                                        << "option: unknown option '--steps'; upscale takes --upscale-model";
        QTest::newRow("stray word") << (QStringList{"--upscale-model", kCompactX4, "photo.png"} + base)
                                    << "option: unexpected argument 'photo.png'; options start with --";
    }
    void refusalsAreClearAndQuick() {
        QFETCH(QStringList, args);
        QFETCH(QString, message);
        QTemporaryDir dir;
        std::vector<std::string> words;
        for (const QString& a : args) words.push_back(a.toStdString());
        words.push_back("--out");
        words.push_back(dir.filePath("out").toStdString());
        const InProcess r = upscaleInProcess(words);
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(QString::fromStdString(r.err).contains(message), r.err.c_str());
        QVERIFY2(r.err.rfind("tessera-cli: ", 0) == 0, r.err.c_str());
        QVERIFY2(r.ms < 1000, qPrintable(QString("%1 ms").arg(r.ms)));
        QVERIFY(r.out.empty());
        QVERIFY(!QFileInfo::exists(dir.filePath("out")));
    }

    // The command as a user runs it: its usage, its place in the overview, exit 2 from the binary.
    void commandIsRegistered() {
        const CliRun help = runCli({"upscale", "--help"});
        QCOMPARE(help.exitCode, 0);
        for (const char* text : {"Usage: tessera-cli upscale --upscale-model FILE|NAME --init IMAGE",
                                 "  --tile-overlap PX", "ESRGAN/", "upscale_models/", "$TESSERA_MODELS"})
            QVERIFY2(help.out.contains(text), qPrintable(help.out));
        const CliRun overview = runCli({"--help"});
        QVERIFY2(overview.out.contains("  upscale   an upscale model alone over an image"), qPrintable(overview.out));
        QVERIFY2(runCli({"render", "--help"}).out.contains("  --upscale-model FILE|NAME"), "render --help");
        const CliRun refused = runCli({"upscale", "--upscale-model", kUpscale + "none.safetensors", "--init",
                                       QStringLiteral(TESSERA_TEST_DATA "/images/alpha.png")});
        QCOMPARE(refused.exitCode, 2);
        QVERIFY2(refused.err.contains("does not exist"), qPrintable(describe(refused)));
    }

    // render --init --upscale 2 --upscale-model: the model first (4x, shrunk to the 2x canvas),
    // then the tiled diffusion pass; the manifest and the parameters name the model.
    void renderRunsTheModelFirst() {
        QTemporaryDir dir;
        const QString model = dir.filePath("compact_x4.safetensors");
        QVERIFY(copyFile(kCompactX4, model));
        const QString image = dir.filePath("start.png");
        writeRandomPng(image, 32, 32, 11);
        const QString sd = QStringLiteral(TESSERA_TEST_DATA "/sdpipeline/sd1");
        const QStringList run{"--model", sd,  "--init", image, "--tile",   "64",     "--overlap", "0",
                              "--steps", "2", "--cfg",  "1",   "--prompt", "a cube", "--backend", "cpu"};
        const CliRun r = runCli(QStringList{"render", "--upscale", "2", "--upscale-model", model} + run +
                                QStringList{"--out", dir.filePath("out")});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        QVERIFY2(r.err.contains("note: upscale model: compact_x4 (Real-ESRGAN Compact 4x"), qPrintable(r.err));
        const QJsonObject manifest = manifestIn(dir.filePath("out"));
        const QJsonObject u = manifest["upscale_model"].toObject();
        QCOMPARE(u["name"].toString(), QString("compact_x4"));
        QCOMPARE(u["sha256"].toString(), sha256Of(model));
        QCOMPARE(u["output_w"].toInt(), 128);
        QCOMPARE(u["resized_w"].toInt(), 64);
        QCOMPARE(u["resize_filter"].toString(), QString("area average"));
        QCOMPARE(u["alone"].toBool(), false);
        QCOMPARE(manifest["config"].toObject()["upscale_model"].toString(), model);
        QCOMPARE(manifest["config"].toObject()["width"].toInt(), 64);
        const PngFile png = readPng(onlyFile(dir.filePath("out"), "*.png").toStdString());
        QVERIFY2(png.text("parameters").find(", Upscale: 2, SD upscale upscaler: compact_x4, ") != std::string::npos,
                 png.text("parameters").c_str());

        // The same run without the model starts from another image.
        const CliRun plain =
            runCli(QStringList{"render", "--upscale", "2"} + run + QStringList{"--out", dir.filePath("plain")});
        QVERIFY2(plain.exitCode == 0, qPrintable(describe(plain)));
        QVERIFY(manifestIn(dir.filePath("plain"))["image_sha256"] != manifest["image_sha256"]);
        QVERIFY(!manifestIn(dir.filePath("plain")).contains("upscale_model"));

        // Refused before any work: no start image; a canvas beyond the model's output.
        const CliRun noInit = runCli({"render", "--model", sd, "--upscale-model", model, "--width", "64", "--height",
                                      "64", "--tile", "64", "--steps", "1", "--out", dir.filePath("x")});
        QCOMPARE(noInit.exitCode, 2);
        QVERIFY2(noInit.err.contains("upscale_model: an upscale model runs on a start image: give --init FILE"),
                 qPrintable(describe(noInit)));
        const CliRun beyond = runCli(QStringList{"render", "--upscale", "8", "--upscale-model", model} + run +
                                     QStringList{"--out", dir.filePath("y")});
        QCOMPARE(beyond.exitCode, 2);
        QVERIFY2(beyond.err.contains("upscale: 32x32 upscaled to 256x256 needs more than compact_x4 gives (4x"),
                 qPrintable(describe(beyond)));
        QVERIFY(!QFileInfo::exists(dir.filePath("x")) && !QFileInfo::exists(dir.filePath("y")));

        // plan names the pass it would run; compare runs it on each side.
        const CliRun plan = runCli(QStringList{"plan", "--upscale", "2", "--upscale-model", model} + run);
        QVERIFY2(plan.exitCode == 0, qPrintable(describe(plan)));
        QVERIFY2(plan.out.contains("upscaler     compact_x4 (Real-ESRGAN Compact 4x") &&
                     plan.out.contains("32 x 32 -> 128 x 128 in one tile, then area average to 64 x 64"),
                 qPrintable(plan.out));
        // (compare runs the default model, which takes the canvas as given)
        const CliRun compared =
            runCli({"compare",         "--init", image,     "--width",  "64",        "--height",  "64",
                    "--upscale-model", model,    "--steps", "2",        "--backend", "cpu",       "--a",
                    "tile=32",         "--b",    "tile=64", "--warmup", "0",         "--repeats", "1"});
        QVERIFY2(compared.exitCode == 0, qPrintable(describe(compared)));
        QCOMPARE(compared.err.count("note: upscale model: compact_x4"), 2);
    }
};

QTEST_GUILESS_MAIN(TestUpscaleCli)
#include "tst_upscalecli.moc"
