// RunHistory with a hostile folder: manifests whose run_id leads outside the folder, file
// names that do not match their run_id, manifests too large, too deep or invalid, links and
// FIFOs. Each is skipped with a logged problem, nothing outside the folder is read, written or
// deleted (also when the history trims itself past its capacity), and the good runs load.
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest>

#include <array>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <png.h>
#include <sys/stat.h>
#include <unistd.h>

#include "HistoryFiles.h"
#include "app/qt/RunHistory.h"
#include "app/qt/RunWorker.h"
#include "core/base/SafeName.h"
#include "core/run/RunConfig.h"
#include "core/run/RunRecordIO.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

// A finished run with an 8 x 8 image and seam map.
RunResult resultOf(const std::string& id, const std::string& startedAt) {
    RunResult result;
    result.record.runId = id;
    result.record.startedAt = startedAt;
    result.record.totalMs = 12.5;
    result.image = ImageTensor{3, 8, 8, std::vector<float>(3 * 8 * 8, 0.25f)};
    result.seamMap = ImageTensor{1, 8, 8, std::vector<float>(8 * 8, 0.5f)};
    return result;
}

QStringList filesIn(const QString& folder) {
    return QDir(folder).entryList(QDir::Files | QDir::System | QDir::Hidden, QDir::Name);
}

// Writes a width x height PNG of one colour row by row (the file is small, and so is the memory
// writing it takes). False when it cannot be written.
bool writeSolidPng(const QString& path, int width, int height, const std::array<png_byte, 3>& rgb) {
    std::FILE* file = std::fopen(QFile::encodeName(path).constData(), "wb");
    if (!file) return false;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
    png_infop info = png ? png_create_info_struct(png) : nullptr;
    std::vector<png_byte> row(static_cast<std::size_t>(width) * 3);
    for (std::size_t x = 0; x < row.size(); ++x) row[x] = rgb[x % 3];
    bool ok = false;
    if (info && setjmp(png_jmpbuf(png)) == 0) {
        png_init_io(png, file);
        png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8,
                     PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
        png_write_info(png, info);
        for (int y = 0; y < height; ++y) png_write_row(png, row.data());
        png_write_end(png, nullptr);
        ok = true;
    }
    png_destroy_write_struct(&png, &info);
    return std::fclose(file) == 0 && ok;
}

// This process's resident memory (VmRSS) or its peak since resetPeakMemory (VmHWM), in bytes;
// -1 when /proc does not say.
qint64 memoryField(const char* name) {
    QFile status(QStringLiteral("/proc/self/status"));
    if (!status.open(QIODevice::ReadOnly)) return -1;
    for (const QByteArray& line : status.readAll().split('\n'))
        if (line.startsWith(name))
            return line.mid(static_cast<qsizetype>(std::strlen(name))).trimmed().split(' ').front().toLongLong() * 1024;
    return -1;
}

// Sets the peak (VmHWM) to what is resident now (Linux's clear_refs "5"); false where it cannot.
bool resetPeakMemory() {
    QFile clear(QStringLiteral("/proc/self/clear_refs"));
    return clear.open(QIODevice::WriteOnly) && clear.write("5") == 1;
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

}  // namespace

class TestRunHistory : public QObject {
    Q_OBJECT

private:
    // root/: the victims (outside the history); root/history/: the history folder.
    QTemporaryDir root_;
    QString history_;

    QString inRoot(const QString& name) const { return root_.filePath(name); }
    QString inHistory(const std::string& name) const {
        return history_ + QLatin1Char('/') + QString::fromStdString(name);
    }

    // victim.json / victim.png / victim.seam.json next to the history folder.
    void plantVictims() {
        writeFile(inRoot("victim.json"), manifestOf("victim", "1999-01-01T00:00:00.000Z"));
        QVERIFY(QImage(4, 4, QImage::Format_RGB888).save(inRoot("victim.png")));
        writeFile(inRoot("victim.seam.json"), R"({"mean": 1, "max": 2})");
    }
    void verifyVictims() {
        for (const char* name : {"victim.json", "victim.png", "victim.seam.json"})
            QVERIFY2(QFileInfo(inRoot(QString::fromLatin1(name))).isFile(), name);
    }

private slots:
    void init() {
        QVERIFY(root_.isValid());
        QDir(root_.path()).removeRecursively();
        QVERIFY(QDir().mkpath(root_.filePath("history")));
        history_ = root_.filePath("history");
    }

    void addWritesTheRunAndReloadReadsItBack() {
        RunHistory history(history_, 2);
        QVERIFY(history.entries().empty());
        for (int i = 0; i < 3; ++i) history.add(resultOf(runIdOf(i), startOf(i)));
        // Capacity 2: the oldest run is gone, on disk too.
        QCOMPARE(history.entries().size(), std::size_t(2));
        QCOMPARE(filesIn(history_),
                 QStringList({QString::fromStdString(runIdOf(1) + ".json"), QString::fromStdString(runIdOf(1) + ".png"),
                              QString::fromStdString(runIdOf(1) + ".seam.json"),
                              QString::fromStdString(runIdOf(2) + ".json"), QString::fromStdString(runIdOf(2) + ".png"),
                              QString::fromStdString(runIdOf(2) + ".seam.json")}));
        RunHistory again(history_);
        QVERIFY2(again.problems().isEmpty(), qPrintable(again.problems().join('\n')));
        QCOMPARE(again.entries().size(), std::size_t(2));
        const HistoryEntry& newest = again.entries().back();
        QCOMPARE(newest.id(), QString::fromStdString(runIdOf(2)));
        QCOMPARE(newest.record.totalMs, 12.5);
        QCOMPARE(newest.seamMean, 0.5);
        QCOMPARE(newest.seamMax, 0.5);
        QCOMPARE(newest.thumbnail.size(), QSize(RunHistory::kThumbnailSize, RunHistory::kThumbnailSize));
        QCOMPARE(newest.loadImage().size(), QSize(8, 8));
        QVERIFY(again.remove(newest.id()));
        QVERIFY(!QFileInfo::exists(inHistory(runIdOf(2) + ".png")));
        QVERIFY(!again.remove(QString::fromStdString(runIdOf(2))));
    }

    void thumbnailComesFromTheResultAndImageReadsThePng() {
        // Left half black, right half white (model space -1 and 1).
        RunResult result = resultOf(runIdOf(0), startOf(0));
        for (int c = 0; c < 3; ++c)
            for (int y = 0; y < 8; ++y)
                for (int x = 0; x < 8; ++x)
                    result.image.data[static_cast<std::size_t>((c * 8 + y) * 8 + x)] = x < 4 ? -1.f : 1.f;
        RunHistory history(history_);
        const HistoryEntry& entry = history.add(result);
        const QImage thumb = entry.thumbnail;
        QCOMPARE(thumb.size(), QSize(RunHistory::kThumbnailSize, RunHistory::kThumbnailSize));
        QCOMPARE(qGray(thumb.pixel(2, 32)), 0);
        QCOMPARE(qGray(thumb.pixel(RunHistory::kThumbnailSize - 3, 32)), 255);
        // image(): the full-size run PNG, read from disk; null for an unknown run or a PNG gone.
        const QImage full = history.image(entry.id());
        QCOMPARE(full.size(), QSize(8, 8));
        QCOMPARE(qGray(full.pixel(0, 0)), 0);
        QCOMPARE(qGray(full.pixel(7, 7)), 255);
        QVERIFY(history.image(QString::fromStdString(runIdOf(9))).isNull());
        QVERIFY(QFile::remove(inHistory(runIdOf(0) + ".png")));
        QVERIFY(history.image(entry.id()).isNull());
    }

    // A large run PNG (here 6000 x 6000; the window was seen taking 2.7 GB for a 12000 x 12000 one)
    // is decoded once, straight into the 8-bit image shown: reading the history (its thumbnail)
    // and reopening the run each peak at well under 5 bytes a pixel above what was resident.
    void reopeningALargeImageStaysWithinFiveBytesAPixel() {
        if (kAddressSanitizer) QSKIP("AddressSanitizer's shadow memory and quarantine distort resident memory");
        constexpr int kSide = 6000;
        constexpr qint64 kPixels = qint64{kSide} * kSide;
        const std::string id = runIdOf(0);
        writeFile(inHistory(id + ".json"), manifestOf(id, startOf(0)));
        QVERIFY(writeSolidPng(inHistory(id + ".png"), kSide, kSide, {40, 120, 200}));
        QVERIFY(QFileInfo(inHistory(id + ".png")).size() < (qint64{1} << 20));  // the file is small
        if (!resetPeakMemory() || memoryField("VmHWM:") < 0) QSKIP("no /proc/self/clear_refs to measure peak memory");

        qint64 before = memoryField("VmRSS:");
        const RunHistory history(history_);
        const qint64 loadPeak = memoryField("VmHWM:") - before;
        QCOMPARE(history.entries().size(), std::size_t(1));
        const QImage thumbnail = history.entries().front().thumbnail;
        QCOMPARE(thumbnail.size(), QSize(RunHistory::kThumbnailSize, RunHistory::kThumbnailSize));
        QCOMPARE(thumbnail.pixelColor(32, 32), QColor(40, 120, 200));

        QVERIFY(resetPeakMemory());
        before = memoryField("VmRSS:");
        const FinishedRun run = history.open(QString::fromStdString(id));
        const qint64 openPeak = memoryField("VmHWM:") - before;
        QCOMPARE(run.image.size(), QSize(kSide, kSide));
        QCOMPARE(run.image.pixelColor(kSide - 1, kSide - 1), QColor(40, 120, 200));
        qInfo("peak above resident: %.2f bytes a pixel reading the history, %.2f reopening the run",
              double(loadPeak) / double(kPixels), double(openPeak) / double(kPixels));
        QVERIFY2(loadPeak < 5 * kPixels, qPrintable(QStringLiteral("%1 MB").arg(loadPeak >> 20)));
        QVERIFY2(openPeak < 5 * kPixels, qPrintable(QStringLiteral("%1 MB").arg(openPeak >> 20)));
        // The image reopened exports as a fresh run's: the model-space image is made on export.
        QVERIFY(run.result && run.result->image.data.empty());
    }

    void traversalRunIdIsSkippedAndNothingOutsideIsTouched_data() {
        QTest::addColumn<QString>("fileName");
        QTest::addColumn<QString>("runId");
        // As in the issue: a planted manifest whose run_id walks out of the folder.
        QTest::newRow("relative, any name") << "evil.json"
                                            << "../victim";
        QTest::newRow("relative, a run id's name") << QString::fromStdString(runIdOf(50) + ".json") << "../victim";
        QTest::newRow("deep relative") << "evil.json"
                                       << QString(QStringLiteral("../").repeated(30) + root_.filePath("victim"));
        QTest::newRow("absolute") << QString::fromStdString(runIdOf(51) + ".json") << root_.filePath("victim");
    }

    void traversalRunIdIsSkippedAndNothingOutsideIsTouched() {
        QFETCH(QString, fileName);
        QFETCH(QString, runId);
        plantVictims();
        // Oldest of all, so the old code's trim() removed it (and its victims) first.
        writeFile(history_ + QLatin1Char('/') + fileName, manifestOf(runId.toStdString(), "1999-01-01T00:00:00.000Z"));
        RunHistory history(history_, 2);
        QVERIFY(history.entries().empty());
        QCOMPARE(history.problems().size(), 1);
        QVERIFY2(history.problems().front().contains(fileName) && history.problems().front().contains("skipped"),
                 qPrintable(history.problems().front()));
        QVERIFY(!history.find(runId));
        QVERIFY(!history.remove(runId));
        // Past its capacity: only its own runs are trimmed.
        for (int i = 0; i < 4; ++i) history.add(resultOf(runIdOf(i), startOf(i)));
        QCOMPARE(history.entries().size(), std::size_t(2));
        verifyVictims();
        // The planted manifest is reported, not deleted.
        QVERIFY(QFileInfo(history_ + QLatin1Char('/') + fileName).isFile());
        QCOMPARE(filesIn(root_.path()), QStringList({"victim.json", "victim.png", "victim.seam.json"}));
    }

    void problemsAreLoggedAsWarnings() {
        writeFile(inHistory("evil.json"), manifestOf("../victim", startOf(0)));
        QTest::ignoreMessage(QtWarningMsg, QRegularExpression("evil\\.json: not a history manifest name .*; skipped"));
        RunHistory history(history_);
        QCOMPARE(history.problems().size(), 1);
    }

    void fileNameMustMatchRunId() {
        // A good run under another run's name is not that run (its files would be another's).
        writeFile(inHistory(runIdOf(1) + ".json"), manifestOf(runIdOf(2), startOf(1)));
        // No run_id: the file name is the id.
        writeFile(inHistory(runIdOf(3) + ".json"), manifestOf("", startOf(3)));
        RunHistory history(history_);
        QCOMPARE(history.entries().size(), std::size_t(1));
        QCOMPARE(history.entries().front().id(), QString::fromStdString(runIdOf(3)));
        QCOMPARE(history.problems().size(), 1);
        QVERIFY2(history.problems().front().contains("does not match the file name"),
                 qPrintable(history.problems().front()));
    }

    void badManifestsAreSkipped_data() {
        QTest::addColumn<QByteArray>("contents");
        QTest::addColumn<qint64>("sparseSize");  // > 0: a file of this many (zero) bytes instead
        QTest::addColumn<QString>("reason");
        // About 120 KB: enough to overflow the stack of a recursive reader.
        QTest::newRow("60,000 levels deep")
            << QByteArray::fromStdString(deepManifest(60000)) << qint64(0) << "nested deeper than 64 levels";
        QTest::newRow("65 levels deep") << QByteArray::fromStdString(deepManifest(63)) << qint64(0)
                                        << "nested deeper than 64 levels";
        // At the bound the manifest is parsed; the reader then refuses the width.
        QTest::newRow("64 levels deep") << QByteArray::fromStdString(deepManifest(62)) << qint64(0) << "width";
        QTest::newRow("too large") << QByteArray() << qint64(17 << 20) << "at most 16777216 bytes";
        QTest::newRow("not JSON") << QByteArray("{\"schema_version\": 1,") << qint64(0) << "not valid JSON";
        QTest::newRow("not an object") << QByteArray("[1, 2]") << qint64(0) << "must be an object";
        QTest::newRow("wrong type") << QByteArray(R"({"schema_version": 1, "total_ms": "fast"})") << qint64(0)
                                    << "total_ms";
        QTest::newRow("newer schema") << QByteArray(R"({"schema_version": 99})") << qint64(0) << "schema_version";
    }

    void badManifestsAreSkipped() {
        QFETCH(QByteArray, contents);
        QFETCH(qint64, sparseSize);
        QFETCH(QString, reason);
        RunHistory(history_).add(resultOf(runIdOf(0), startOf(0)));
        const QString bad = inHistory(runIdOf(1) + ".json");
        if (sparseSize > 0) {
            QFile file(bad);
            QVERIFY(file.open(QIODevice::WriteOnly));
            QVERIFY(file.resize(sparseSize));
        } else {
            writeFile(bad, contents.toStdString());
        }
        RunHistory history(history_);
        QCOMPARE(history.entries().size(), std::size_t(1));
        QCOMPARE(history.entries().front().id(), QString::fromStdString(runIdOf(0)));
        QCOMPARE(history.problems().size(), 1);
        const QString& problem = history.problems().front();
        QVERIFY2(problem.contains(QString::fromStdString(runIdOf(1) + ".json")) && problem.contains(reason),
                 qPrintable(problem));
        QVERIFY2(problem.size() < 800, qPrintable(problem));  // an excerpt, never the file
        QVERIFY(QFileInfo::exists(bad));                      // skipped, not deleted
    }

    void linksAreNotFollowed() {
        plantVictims();
        // A manifest that is a link to a manifest outside.
        writeFile(inRoot("outside.json"), manifestOf(runIdOf(1), startOf(1)));
        QVERIFY(QFile::link(inRoot("outside.json"), inHistory(runIdOf(1) + ".json")));
        // A good manifest whose image and seam file are links to files outside.
        writeFile(inHistory(runIdOf(2) + ".json"), manifestOf(runIdOf(2), startOf(2)));
        QVERIFY(QFile::link(inRoot("victim.png"), inHistory(runIdOf(2) + ".png")));
        QVERIFY(QFile::link(inRoot("victim.seam.json"), inHistory(runIdOf(2) + ".seam.json")));
        // A dangling link.
        QVERIFY(QFile::link(inRoot("nowhere.json"), inHistory(runIdOf(3) + ".json")));
        RunHistory history(history_);
        QCOMPARE(history.entries().size(), std::size_t(1));
        const HistoryEntry& entry = history.entries().front();
        QCOMPARE(entry.id(), QString::fromStdString(runIdOf(2)));
        QVERIFY(entry.imagePath.isEmpty());
        QVERIFY(entry.thumbnail.isNull());
        QCOMPARE(entry.seamMean, -1.0);
        QCOMPARE(history.problems().size(), 4);
        QCOMPARE(history.problems().filter("is a symbolic link").size(), 4);
        // Removing the run removes the links, never what they point to.
        QVERIFY(history.remove(entry.id()));
        QVERIFY(!QFileInfo(inHistory(runIdOf(2) + ".png")).isSymLink());
        verifyVictims();
    }

    void fifoIsSkippedWithoutBlocking() {
        const QString fifo = inHistory(runIdOf(1) + ".json");
        QCOMPARE(::mkfifo(QFile::encodeName(fifo).constData(), 0600), 0);
        QCOMPARE(::mkfifo(QFile::encodeName(inHistory(runIdOf(2) + ".seam.json")).constData(), 0600), 0);
        writeFile(inHistory(runIdOf(2) + ".json"), manifestOf(runIdOf(2), startOf(2)));
        RunHistory history(history_);
        QCOMPARE(history.entries().size(), std::size_t(1));
        QCOMPARE(history.entries().front().seamMean, -1.0);
        QCOMPARE(history.problems().filter("is not a regular file").size(), 2);
    }

    void badSeamFileKeepsTheRun_data() {
        QTest::addColumn<QByteArray>("seam");
        QTest::newRow("strings") << QByteArray(R"({"mean": "x", "max": 1})");
        QTest::newRow("array") << QByteArray("[0.5, 1]");
        QTest::newRow("large and deep") << QByteArray::fromStdString(std::string(70000, '[') + std::string(70000, ']'));
        QTest::newRow("not JSON") << QByteArray("{");
    }

    void badSeamFileKeepsTheRun() {
        QFETCH(QByteArray, seam);
        RunHistory(history_).add(resultOf(runIdOf(0), startOf(0)));
        writeFile(inHistory(runIdOf(0) + ".seam.json"), seam.toStdString());
        RunHistory history(history_);
        QCOMPARE(history.entries().size(), std::size_t(1));
        QCOMPARE(history.entries().front().seamMean, -1.0);
        QVERIFY(!history.entries().front().thumbnail.isNull());
        QCOMPARE(history.problems().size(), 1);
        QVERIFY2(history.problems().front().contains("without seam statistics"),
                 qPrintable(history.problems().front()));
    }

    void addRefusesAnUnsafeRunId() {
        plantVictims();
        RunHistory history(history_);
        for (const std::string& id : {std::string("../victim"), root_.filePath("victim").toStdString(),
                                      std::string("a/b"), std::string("20260101-000000-ABCDEF12")}) {
            try {
                history.add(resultOf(id, startOf(0)));
                QFAIL(("add accepted the run id " + id).c_str());
            } catch (const ValidationError& e) {
                QCOMPARE(QString::fromStdString(e.field()), QStringLiteral("history"));
                QVERIFY2(std::string(e.what()).find(kRunIdRule) != std::string::npos, e.what());
            }
        }
        QVERIFY(history.entries().empty());
        QVERIFY(filesIn(history_).isEmpty());
        QCOMPARE(filesIn(root_.path()), QStringList({"victim.json", "victim.png", "victim.seam.json"}));
        QVERIFY(!QFileInfo::exists(root_.filePath("a")));
        // An empty run id gets a fresh one.
        const HistoryEntry& added = history.add(resultOf("", startOf(0)));
        QVERIFY(isSafeRunId(added.record.runId));
        verifyVictims();
    }
};

QTEST_GUILESS_MAIN(TestRunHistory)
#include "tst_runhistory.moc"
