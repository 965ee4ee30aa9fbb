// Hostile and mistaken input to tessera-cli: every one is refused with exit 2 naming the field,
// quickly, before any work (no decoding, no engine, no output), quoting at most a short
// excerpt of what was given, never blocking on a FIFO and never crashing.
#include <QtTest/QtTest>

#include <QDir>
#include <QFile>
#include <QTemporaryDir>

#include <sys/stat.h>

#include "tests/app/CliRun.h"

using tessera::testing::CliRun;
using tessera::testing::describe;

namespace {

const QString kModel = QStringLiteral(TESSERA_TEST_DATA "/models/cifar_like");
const QString kJpeg = QStringLiteral(TESSERA_TEST_DATA "/images/quadrants.jpg");

// Runs tessera-cli and checks the refusal: exit 2, the field named at the start of the
// message, nothing on stdout, a short stderr, within `seconds` (or it is killed: exit -1).
CliRun refused(const QStringList& args, const QString& field, int seconds = 20) {
    const CliRun r = tessera::testing::runCli(args, seconds * 1000);
    const QString what = describe(r).left(2000);
    if (r.exitCode != 2)
        QTest::qFail(qPrintable("expected exit 2\n" + what), __FILE__, __LINE__);
    else if (!r.err.contains(field + ":"))
        QTest::qFail(qPrintable("field '" + field + "' not named\n" + what), __FILE__, __LINE__);
    else if (!r.out.isEmpty())
        QTest::qFail(qPrintable("something was printed on stdout\n" + what), __FILE__, __LINE__);
    else if (r.err.size() > 1500)
        QTest::qFail(qPrintable(QStringLiteral("stderr is %1 characters").arg(r.err.size())), __FILE__, __LINE__);
    return r;
}

void writeFile(const QString& path, const QByteArray& bytes) {
    QFile file(path);
    QVERIFY(file.open(QIODevice::WriteOnly | QIODevice::Truncate));
    QCOMPARE(file.write(bytes), static_cast<qint64>(bytes.size()));
}

QByteArray deepJson(const QByteArray& key, int depth) {
    return "{\"" + key + "\": " + QByteArray(depth, '[') + QByteArray(depth, ']') + "}";
}

// A copy of quadrants.jpg whose frame header claims width x height.
QByteArray jpegClaiming(int width, int height) {
    QFile file(kJpeg);
    if (!file.open(QIODevice::ReadOnly)) return {};
    QByteArray bytes = file.readAll();
    for (int i = 2; i + 9 < bytes.size();) {
        const auto marker = static_cast<unsigned char>(bytes[i + 1]);
        const int length = (static_cast<unsigned char>(bytes[i + 2]) << 8) | static_cast<unsigned char>(bytes[i + 3]);
        if (marker >= 0xc0 && marker <= 0xcf && marker != 0xc4 && marker != 0xc8 && marker != 0xcc) {
            bytes[i + 5] = static_cast<char>(height >> 8);
            bytes[i + 6] = static_cast<char>(height & 255);
            bytes[i + 7] = static_cast<char>(width >> 8);
            bytes[i + 8] = static_cast<char>(width & 255);
            return bytes;
        }
        i += 2 + length;
    }
    return {};
}

// PNG chunk CRC (ISO 3309 CRC-32 over type and data), so a hand-made header is a valid one.
quint32 crc32(const QByteArray& bytes) {
    quint32 crc = 0xffffffffu;
    for (const char c : bytes) {
        crc ^= static_cast<unsigned char>(c);
        for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

QStringList tinyRender(const QString& out) {
    return {"render", "--model", kModel, "--backend", "cpu", "--width", "32", "--height",
            "32",     "--tile",  "32",   "--steps",   "1",   "--out",   out};
}

}  // namespace

class TestBadInputs : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() {
        QVERIFY2(QFileInfo::exists(QStringLiteral(TESSERA_BINARY_DIR "/app/tessera-cli")), "build tessera-cli first");
        QVERIFY2(QFileInfo::exists(kModel + "/config.json"), "tests/data/models/cifar_like is missing");
    }

    // The crash: a value nested 70,000 levels deep overflowed the parser's stack (exit 139).
    void deepJsonPresetAndCompareFiles() {
        QTemporaryDir dir;
        const QString deep = dir.filePath("deep.json");
        writeFile(deep, deepJson("width", 70000));
        CliRun r = refused({"plan", "--preset", deep}, "preset");
        QVERIFY2(r.err.contains("nested deeper than 64 levels"), qPrintable(r.err));
        r = refused({"compare", deep, deep}, "a");
        QVERIFY2(r.err.contains("nested deeper"), qPrintable(r.err));
        // --a KEY=VALUE values are JSON too: deep ones stay text and are named by their key
        // (60,000 levels: one argument may hold at most 128 KiB).
        r = refused({"compare", "--model", kModel, "--a", "width=" + QString(60000, '[') + QString(60000, ']')},
                    "width");
        QVERIFY2(r.err.contains("expected a whole number"), qPrintable(r.err));
    }

    // A folder or a FIFO where a file is expected: named as such at once, never read or waited on.
    void foldersAndFifosAreNotFiles() {
        QTemporaryDir dir;
        const QString folder = dir.filePath("preset-dir");
        QVERIFY(QDir(dir.path()).mkdir("preset-dir"));
        CliRun r = refused({"plan", "--preset", folder}, "preset");
        QVERIFY2(r.err.contains("is a folder; a regular file is needed"), qPrintable(r.err));
        const QString fifo = dir.filePath("fifo");
        QCOMPARE(::mkfifo(fifo.toLocal8Bit().constData(), 0600), 0);
        r = refused({"plan", "--preset", fifo}, "preset", 10);
        QVERIFY2(r.err.contains("is not a regular file"), qPrintable(r.err));
        r = refused({"compare", fifo, fifo}, "a", 10);
        r = refused(tinyRender(dir.path()) + QStringList{"--init", fifo}, "init", 10);
        QVERIFY2(r.err.contains("is not a regular file"), qPrintable(r.err));
    }

    // Paths longer than PATH_MAX: exit 2 naming the option (the model's was exit 1, a
    // filesystem_error), with the path shown as a short excerpt.
    void overlongPaths_data() {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("field");
        const QString path = "/tmp/" + QString(10000, 'a');
        QTest::newRow("render --model") << QStringList{"render", "--model", path} << "model";
        QTest::newRow("info DIR") << QStringList{"info", path} << "model";
        QTest::newRow("plan --preset") << QStringList{"plan", "--preset", path} << "preset";
        QTest::newRow("render --init") << QStringList{"render", "--model", kModel, "--init", path} << "init";
        QTest::newRow("render --out") << QStringList{"render", "--model", kModel, "--out", path} << "out";
        QTest::newRow("bench --model") << QStringList{"bench", "--model", path} << "model";
        QTest::newRow("bench --csv") << QStringList{"bench", "--shape", "cifar", "--csv", path} << "csv";
        QTest::newRow("compare --json") << QStringList{"compare", "--json", path} << "json";
        QTest::newRow("compare file") << QStringList{"compare", path, path} << "a";
    }
    void overlongPaths() {
        QFETCH(QStringList, args);
        QFETCH(QString, field);
        const CliRun r = refused(args, field);
        QVERIFY2(!r.err.contains(QString(300, 'a')), "the whole path was echoed");
    }

    // Huge values are quoted as an excerpt with their length, never echoed whole.
    void hugeValuesAreQuotedShort() {
        QTemporaryDir dir;
        const QString preset = dir.filePath("big.json");
        writeFile(preset, "{\"window\": \"" + QByteArray(15000000, 'x') + "\"}");
        CliRun r = refused({"plan", "--preset", preset}, "window");
        QVERIFY2(r.err.contains("(15000000 bytes)"), qPrintable(r.err));
        writeFile(preset, "{\"width\": [" + QByteArray("1,").repeated(1000000) + "1]}");
        r = refused({"plan", "--preset", preset}, "width");
        QVERIFY2(r.err.contains("expected a whole number"), qPrintable(r.err));
        // A number beyond double's range: nlohmann threw out_of_range, which nothing caught (abort).
        writeFile(preset, "{\"width\": " + QByteArray(5000000, '1') + "}");
        r = refused({"plan", "--preset", preset}, "preset");
        QVERIFY2(r.err.contains("not valid JSON: [json.exception.out_of_range.406] number overflow"),
                 qPrintable(r.err));
        const QString digits(100000, '9');
        refused({"plan", "--width", digits}, "width");
        refused({"plan", "--scheduler", digits}, "scheduler");
        refused({"plan", "--" + digits}, "option");
        refused({"bench", "--shape", digits}, "shape");
        refused({"compare", "--repeats", digits}, "repeats");
        const CliRun key = refused({"compare", "--a", digits + "=1"}, digits.left(60) + "... (100000 bytes)");
        QVERIFY2(key.err.contains("unknown key"), qPrintable(key.err));
        refused({"compare", "--a", digits + ".x=1"}, digits.left(60) + "... (100002 bytes)");
        refused({"render", "--label", QString(5000, 'l'), "--model", kModel}, "label");
        refused({"paint" + digits}, "command");
    }

    // Every subcommand names an unknown option as such (bench said it "needs a value").
    void unknownOptions_data() {
        QTest::addColumn<QString>("command");
        for (const char* command : {"plan", "render", "info", "bench", "compare"}) QTest::newRow(command) << command;
    }
    void unknownOptions() {
        QFETCH(QString, command);
        const CliRun r = refused({command, "--zzz"}, "option");
        QVERIFY2(r.err.contains("unknown option '--zzz'"), qPrintable(r.err));
    }

    // Fields are checked before the start image is touched: 20000x20000 decoded and resized the
    // image for 12 s and 4.9 GB before exit 2; -64 was exit 1 "cannot resample"; 100000 bad_alloc.
    void fieldsBeforeTheStartImage_data() {
        QTest::addColumn<QStringList>("size");
        QTest::newRow("20000") << QStringList{"--width", "20000", "--height", "20000"};
        QTest::newRow("-64") << QStringList{"--width", "-64"};
        QTest::newRow("100000") << QStringList{"--width", "100000", "--height", "100000"};
    }
    void fieldsBeforeTheStartImage() {
        QFETCH(QStringList, size);
        QTemporaryDir dir;
        const CliRun r = refused(
            QStringList{"render", "--model", kModel, "--backend", "cpu", "--init", kJpeg, "--out", dir.path()} + size,
            "width", 5);
        QVERIFY2(!r.err.contains("resized"), qPrintable(r.err));
        QVERIFY(QDir(dir.path()).entryList(QDir::Files).isEmpty());
    }

    // A JPEG whose header claims 12000x12000 over a few hundred bytes of data decoded to grey
    // and rendered (exit 0). Now the damaged data stops the decode at once: exit 2 naming it.
    void damagedJpegIsRefused() {
        QTemporaryDir dir;
        const QString jpeg = dir.filePath("claims-12000.jpg");
        writeFile(jpeg, jpegClaiming(12000, 12000));
        const CliRun r = refused(tinyRender(dir.path()) + QStringList{"--init", jpeg}, "init", 10);
        QVERIFY2(r.err.contains("'" + jpeg + "' is a damaged or truncated JPEG"), qPrintable(r.err));
        QVERIFY(QDir(dir.path()).entryList({"*.png"}, QDir::Files).isEmpty());
    }

    // The header alone refuses an image over the pixel limit: nothing is decoded.
    void oversizedImageRefusedFromItsHeader() {
        QTemporaryDir dir;
        const QString jpeg = dir.filePath("huge.jpg");
        writeFile(jpeg, jpegClaiming(60000, 60000));
        CliRun r = refused(tinyRender(dir.path()) + QStringList{"--init", jpeg}, "init", 5);
        QVERIFY2(r.err.contains("is 60000x60000 pixels, more than the 150 megapixels"), qPrintable(r.err));
        // A PNG whose (valid) IHDR says 100000 x 100000, and nothing after it.
        QByteArray ihdr("IHDR", 4);
        for (int side = 0; side < 2; ++side) ihdr += QByteArray("\x00\x01\x86\xa0", 4);
        ihdr += QByteArray("\x08\x02\x00\x00\x00", 5);
        const quint32 crc = crc32(ihdr);
        QByteArray png = QByteArray("\x89PNG\r\n\x1a\n\0\0\0\x0d", 12) + ihdr;
        for (int shift = 24; shift >= 0; shift -= 8) png += static_cast<char>((crc >> shift) & 255);
        const QString pngPath = dir.filePath("huge.png");
        writeFile(pngPath, png);
        r = refused(tinyRender(dir.path()) + QStringList{"--init", pngPath}, "init", 5);
        QVERIFY2(r.err.contains("is 100000x100000 pixels"), qPrintable(r.err));
    }

    // A run the machine cannot hold is refused before an engine exists, naming what to lower:
    // 169 tiles of 4096 x 4096 in one batch need terabytes of activations on the CPU.
    void hostMemoryRefusedBeforeWork() {
        QTemporaryDir dir;
        const QStringList huge{"--model", kModel,   "--backend", "cpu",       "--width", "16384",   "--height",
                               "16384",   "--tile", "4096",      "--overlap", "3072",    "--batch", "169"};
        CliRun r = refused(QStringList{"render", "--out", dir.path()} + huge, "batch", 10);
        QVERIFY2(r.err.contains("of host memory while sampling, more than the"), qPrintable(r.err));
        QVERIFY2(r.err.contains("UNet activations for a batch of 169 tiles of 4096x4096"), qPrintable(r.err));
        QVERIFY2(r.err.contains("lower batch (at most ") || r.err.contains("lower batch or the tile size"),
                 qPrintable(r.err));
        QVERIFY(QDir(dir.path()).entryList(QDir::Files).isEmpty());
        r = refused(QStringList{"compare", "--repeats", "1", "--warmup", "0"} + huge, "batch", 10);
        r = refused({"bench", "--model", kModel, "--backend", "cpu", "--size", "16384", "--tile", "4096", "--overlap",
                     "3072", "--batch", "169", "--steps", "1"},
                    "batch", 10);
        // plan states the need and what is available.
        const CliRun plan = tessera::testing::runCli(QStringList{"plan"} + huge);
        QCOMPARE(plan.exitCode, 0);
        QVERIFY2(
            plan.out.contains(QRegularExpression(
                "host memory  about [0-9.]+ GiB at the peak with the cpu engine, [0-9.]+ GiB with the cuda engine")),
            qPrintable(plan.out));
    }
};

QTEST_GUILESS_MAIN(TestBadInputs)
#include "tst_badinputs.moc"
