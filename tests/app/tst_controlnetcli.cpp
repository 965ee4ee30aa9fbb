// ControlNet at tessera-cli's edge: --control-image FILE reaches the engine (another image gives
// another picture) and the PNG names the unit as A1111 does; a control image of another size, one
// that does not exist, and a ControlNet of another family are refused before any work, naming the fix.
#include <QtTest/QtTest>

#include <QDir>
#include <QTemporaryDir>

#include <random>
#include <string>

#include "app/cli/PngIO.h"
#include "core/sampling/ImageOps.h"
#include "tests/app/CliRun.h"

using namespace tessera;
using tessera::testing::CliRun;
using tessera::testing::describe;
using tessera::testing::runCli;

namespace {

const QString kData = QStringLiteral(TESSERA_TEST_DATA);
const QString kPipeline = kData + "/sdpipeline/sd1";
const QString kControlNet = kData + "/controlnet/pipeline/net0";  // a tiny SD 1.x ControlNet
const QString kSdxlControlNet = kData + "/controlnet/sdxl/control_tiny_xl.safetensors";

// A PNG of random colours.
void writeRandomPng(const QString& path, int width, int height, unsigned seed) {
    std::mt19937 random(seed);
    Rgb8Image image;
    image.width = width;
    image.height = height;
    image.pixels.resize(static_cast<std::size_t>(width) * height * 3);
    for (std::uint8_t& p : image.pixels) p = static_cast<std::uint8_t>(random() & 0xff);
    writePng(path.toStdString(), image, {});
}

// A 64 x 64 text-to-image render of the tiny pipeline, one tile, 2 steps, on the CPU.
QStringList renderArgs(const QString& out) {
    return {"render", "--model", kPipeline, "--backend", "cpu", "--width",  "64",     "--height", "64", "--tile",
            "64",     "--steps", "2",       "--seed",    "4",   "--prompt", "a cube", "--out",    out};
}

// The only PNG in `folder`, or an empty string.
QString onlyPng(const QString& folder) {
    const QStringList pngs = QDir(folder).entryList({"*.png"}, QDir::Files);
    return pngs.size() == 1 ? QDir(folder).filePath(pngs.front()) : QString();
}

}  // namespace

class TestControlNetCli : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() {
        if (!QFileInfo::exists(kControlNet + "/config.json")) QSKIP("tests/data/controlnet/pipeline is missing");
    }

    void controlImageFileSteersTheRun() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        writeRandomPng(dir.filePath("a.png"), 64, 64, 1);
        writeRandomPng(dir.filePath("b.png"), 64, 64, 2);
        QStringList images;
        for (const char* name : {"a", "b"}) {
            const QString out = dir.filePath(QStringLiteral("out-%1").arg(name));
            const CliRun r = runCli(renderArgs(out) + QStringList{"--controlnet", kControlNet, "--control-image",
                                                                  dir.filePath(QString::fromLatin1(name) + ".png"),
                                                                  "--control-weight", "1.5"});
            QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
            images << onlyPng(out);
            QVERIFY(!images.back().isEmpty());
        }
        const PngFile a = readPng(images[0].toStdString()), b = readPng(images[1].toStdString());
        const std::string parameters = a.text("parameters");
        // net0's weights file is under 1 MiB: A1111's model hash of it hashes nothing (e3b0c442).
        QVERIFY2(parameters.find("ControlNet 0: \"Module: none, Model: net0 [e3b0c442], Weight") != std::string::npos,
                 parameters.c_str());
        QVERIFY2(parameters.find("Weight: 1.5") != std::string::npos, parameters.c_str());
        QVERIFY2(a.image.pixels != b.image.pixels, "another control image gave the same picture");
    }

    void controlImageOfAnotherSizeRefusedBeforeWork() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        writeRandomPng(dir.filePath("small.png"), 32, 48, 3);
        const CliRun r = runCli(renderArgs(dir.filePath("out")) +
                                QStringList{"--controlnet", kControlNet, "--control-image", dir.filePath("small.png")});
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("is 32x48; the run's image is 64x64: resize the control image to 64x64"),
                 qPrintable(describe(r)));
        QVERIFY2(!r.err.contains("step 1/") && !QFileInfo::exists(dir.filePath("out")), qPrintable(describe(r)));
    }

    void missingControlImageRefusedBeforeWork() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const CliRun r = runCli(renderArgs(dir.filePath("out")) +
                                QStringList{"--controlnet", kControlNet, "--control-image", dir.filePath("no.png")});
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("control_image") && r.err.contains(dir.filePath("no.png")), qPrintable(describe(r)));
        QVERIFY2(!r.err.contains("step 1/"), qPrintable(describe(r)));
    }

    void controlNetOfAnotherFamilyRefusedBeforeWork() {
        if (!QFileInfo::exists(kSdxlControlNet)) QSKIP("the SDXL ControlNet fixture is missing");
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        writeRandomPng(dir.filePath("hint.png"), 64, 64, 5);
        const CliRun r =
            runCli(renderArgs(dir.filePath("out")) +
                   QStringList{"--controlnet", kSdxlControlNet, "--control-image", dir.filePath("hint.png")});
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("SDXL") && r.err.contains("controlnet"), qPrintable(describe(r)));
        QVERIFY2(!r.err.contains("step 1/"), qPrintable(describe(r)));
    }
};

QTEST_GUILESS_MAIN(TestControlNetCli)
#include "tst_controlnetcli.moc"
