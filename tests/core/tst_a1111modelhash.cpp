// A1111's old model hash (core/formats/A1111ModelHash.h), which sd-webui-controlnet shows beside a
// ControlNet's name and writes in its infotext: the expected values are Python's
// hashlib.sha256(data[0x100000:0x110000]).hexdigest()[:8] of the same bytes.
#include <QtTest/QtTest>

#include <QTemporaryDir>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/formats/A1111ModelHash.h"

using namespace tessera;

namespace {

// `size` bytes, byte i = i % 251.
void writePattern(const std::string& path, std::size_t size) {
    std::ofstream out(path, std::ios::binary);
    for (std::size_t i = 0; i < size; ++i) out.put(static_cast<char>(i % 251));
}

}  // namespace

class TestA1111ModelHash : public QObject {
    Q_OBJECT

private slots:
    void hashesTheBlockAtOneMebibyte_data() {
        QTest::addColumn<qint64>("size");
        QTest::addColumn<QString>("hash");
        QTest::newRow("whole block") << qint64(0x110000) << QStringLiteral("15ffd73b");
        QTest::newRow("100 bytes past 1 MiB") << qint64(0x100000 + 100) << QStringLiteral("19966557");
        QTest::newRow("under 1 MiB: nothing") << qint64(226132) << QStringLiteral("e3b0c442");
        QTest::newRow("empty") << qint64(0) << QStringLiteral("e3b0c442");
    }
    void hashesTheBlockAtOneMebibyte() {
        QFETCH(qint64, size);
        QFETCH(QString, hash);
        QTemporaryDir dir;
        const std::string file = dir.filePath("net.safetensors").toStdString();
        writePattern(file, static_cast<std::size_t>(size));
        QCOMPARE(QString::fromStdString(a1111ModelHash(file)), hash);
    }

    // A diffusers folder: its weights file's hash; a folder without one, or no file: "".
    void foldersAndMissingFiles() {
        QTemporaryDir dir;
        const std::string folder = dir.filePath("net").toStdString();
        std::filesystem::create_directories(folder);
        QCOMPARE(a1111ModelHash(folder), std::string());
        writePattern(folder + "/diffusion_pytorch_model.safetensors", 0x110000);
        QCOMPARE(a1111ModelHash(folder), std::string("15ffd73b"));
        QCOMPARE(a1111ModelHash(dir.filePath("missing.pth").toStdString()), std::string());
    }
};

QTEST_GUILESS_MAIN(TestA1111ModelHash)
#include "tst_a1111modelhash.moc"
