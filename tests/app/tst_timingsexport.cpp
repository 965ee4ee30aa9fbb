// The window's timings CSV (File > Export > Timings): steps and tile batches numbered from 1 as the
// step chart and the status line number them, and the memory the record holds (device memory per
// batch, its peak per step, the run's peak; host RSS on the CPU engine) in columns of their own.
// `tessera-cli render` writes the same file, byte for byte, as its <run-id>.csv.
#include <QtTest/QtTest>

#include <QDir>
#include <QFile>
#include <QTemporaryDir>

#include <clocale>
#include <string>

#include "app/qt/Exporters.h"
#include "core/base/BoundedInput.h"
#include "core/run/Engine.h"
#include "core/run/RunRecordIO.h"
#include "tests/app/CliRun.h"

using namespace tessera;

namespace {

QStringList csvLines(const std::string& text) { return QString::fromStdString(text).split('\n', Qt::SkipEmptyParts); }

std::string readAll(const QString& path) {
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly)) return {};
    return file.readAll().toStdString();
}

const QString kHeader = QStringLiteral(
    "run_id,step,timestep,batch,tile_ids,gpu_ms,host_ms,device_mib,step_peak_device_mib,run_peak_device_mib,"
    "run_peak_host_rss_mib");

TileBatchTiming batch(int step, int index, std::vector<int> tiles, double gpuMs, double hostMs, double deviceMiB) {
    TileBatchTiming b;
    b.step = step;
    b.timestep = step == 0 ? 981.0f : 491.0f;
    b.batchIndex = index;
    b.tileIds = std::move(tiles);
    b.gpuMs = gpuMs;
    b.hostMs = hostMs;
    b.deviceMiB = deviceMiB;
    return b;
}

// Two steps of two tile batches on a CUDA device: device memory after every batch.
RunResult deviceRun() {
    RunResult result;
    RunRecord& r = result.record;
    r.runId = "20261122-061500-3f2a";
    r.environment.backend = "cuda";
    r.tileCount = 3;
    r.batches = {batch(0, 0, {0, 1}, 2.5, 0.125, 812.5), batch(0, 1, {2}, 1.5, 0.1, 830.25),
                 batch(1, 0, {0, 1}, 2.25, 0.12, 845.0), batch(1, 1, {2}, 1.25, 0.1, 820.0)};
    r.peakDeviceMiB = 901.75;
    return result;
}

// The CPU engine: no device time or memory; host RSS sampled over the run.
RunResult cpuRun() {
    RunResult result;
    RunRecord& r = result.record;
    r.runId = "cpu-run";
    r.environment.backend = "cpu";
    r.tileCount = 2;
    r.batches = {batch(0, 0, {0, 1}, -1, 40.0, -1), batch(1, 0, {0, 1}, -1, 41.5, -1)};
    r.memory = {{0.0, 310.0, 0.0}, {50.0, 355.5, 0.0}, {90.0, 340.0, 0.0}};
    return result;
}

}  // namespace

class TestTimingsExport : public QObject {
    Q_OBJECT
private slots:
    void stepsAndBatchesCountFromOne() {
        const RunResult result = deviceRun();
        const QStringList rows = csvLines(exportBytes(result, ExportFormat::TimingsCsv, "t.csv"));
        QCOMPARE(rows.size(), 5);
        QCOMPARE(rows[0], kHeader);
        for (const QString& row : rows) QCOMPARE(row.split(',').size(), 11);
        const QStringList first = rows[1].split(',');
        QCOMPARE(first[0], QStringLiteral("20261122-061500-3f2a"));
        QCOMPARE(first[1], QStringLiteral("1"));  // the first step, as the chart and "step 1/2" number it
        QCOMPARE(first[2].toDouble(), 981.0);
        QCOMPARE(first[3], QStringLiteral("1"));  // its first tile batch, as "batch 1/2 of step 1/2"
        QCOMPARE(first[4], QStringLiteral("0;1"));
        QCOMPARE(first[5].toDouble(), 2.5);
        QCOMPARE(first[6].toDouble(), 0.125);
        const QStringList last = rows[4].split(',');
        QCOMPARE(last[1], QStringLiteral("2"));
        QCOMPARE(last[3], QStringLiteral("2"));
        QCOMPARE(last[4], QStringLiteral("2"));
    }

    void memoryColumnsOnDevice() {
        const QStringList rows = csvLines(exportBytes(deviceRun(), ExportFormat::TimingsCsv, "t.csv"));
        // device_mib per batch; the step's peak over its batches; the run's peak on every row.
        const double expected[4][3] = {
            {812.5, 830.25, 901.75}, {830.25, 830.25, 901.75}, {845.0, 845.0, 901.75}, {820.0, 845.0, 901.75}};
        for (int i = 0; i < 4; ++i) {
            const QStringList f = rows[i + 1].split(',');
            QCOMPARE(f[7].toDouble(), expected[i][0]);
            QCOMPARE(f[8].toDouble(), expected[i][1]);
            QCOMPARE(f[9].toDouble(), expected[i][2]);
            QCOMPARE(f[10], QString());  // no host RSS on a device run
        }
        // No peakDeviceMiB recorded: the largest device memory sample is the run's figure.
        RunResult noPeak = deviceRun();
        noPeak.record.peakDeviceMiB = -1;
        noPeak.record.memory = {{0.0, 700.0, 0.0}, {10.0, 910.5, 0.0}};
        const QStringList again = csvLines(exportBytes(noPeak, ExportFormat::TimingsCsv, "t.csv"));
        QCOMPARE(again[1].split(',')[9].toDouble(), 910.5);
    }

    void memoryColumnsOnCpu() {
        const QStringList rows = csvLines(exportBytes(cpuRun(), ExportFormat::TimingsCsv, "t.csv"));
        QCOMPARE(rows.size(), 3);
        for (int i = 1; i < 3; ++i) {
            const QStringList f = rows[i].split(',');
            QCOMPARE(f[1], QString::number(i));
            QCOMPARE(f[5], QString());  // no device time
            QCOMPARE(f[7], QString());  // no device memory, per batch, per step or per run
            QCOMPARE(f[8], QString());
            QCOMPARE(f[9], QString());
            QCOMPARE(f[10].toDouble(), 355.5);  // the run's peak host RSS
        }
        RunResult empty;
        QCOMPARE(csvLines(exportBytes(empty, ExportFormat::TimingsCsv, "t.csv")), QStringList{kHeader});
    }

    void numbersIgnoreTheLocale() {
        const char* previous = std::setlocale(LC_NUMERIC, nullptr);
        const std::string saved = previous ? previous : "C";
        const bool switched = std::setlocale(LC_NUMERIC, "de_DE.UTF-8") != nullptr;
        const std::string csv = exportBytes(deviceRun(), ExportFormat::TimingsCsv, "t.csv");
        std::setlocale(LC_NUMERIC, saved.c_str());
        QVERIFY2(QString::fromStdString(csv).contains(QStringLiteral(",2.5000,0.1250,812.50,830.25,901.75,\n")),
                 csv.c_str());
        if (!switched) qInfo("de_DE.UTF-8 is not installed; checked in the current locale only");
    }

    // A tiny render on the CPU engine (two steps of two tile batches): its <run-id>.csv is the
    // window's export of the run's record (read back from its manifest), byte for byte.
    void cliRenderWritesTheWindowsCsv() {
        const QString model = QStringLiteral(TESSERA_TEST_DATA "/models/cifar_like");
        if (!QFileInfo::exists(model + "/config.json")) QSKIP("tests/data/models/cifar_like is not there");
        QTemporaryDir out;
        QVERIFY(out.isValid());
        const testing::CliRun r =
            testing::runCli({"render", "--model",   model,       "--width", "48",      "--height", "40",
                             "--tile", "32",        "--overlap", "16",      "--steps", "2",        "--batch",
                             "2",      "--backend", "cpu",       "--seed",  "3",       "--out",    out.path()});
        QVERIFY2(r.exitCode == 0, qPrintable(testing::describe(r)));
        const QStringList manifests = QDir(out.path()).entryList({"*.json"}, QDir::Files);
        QCOMPARE(manifests.size(), 1);
        const QString runId = QFileInfo(manifests.front()).completeBaseName();
        const std::string cliCsv = readAll(out.filePath(runId + ".csv"));
        RunResult result;
        result.record = runRecordFromManifest(
            parseBoundedJson(readAll(out.filePath(runId + ".json")), "manifest", runId.toStdString() + ".json"));
        QCOMPARE(result.record.batches.size(), std::size_t(4));
        QCOMPARE(QString::fromStdString(cliCsv),
                 QString::fromStdString(exportBytes(result, ExportFormat::TimingsCsv, "t.csv")));
        const QStringList rows = csvLines(cliCsv);
        QCOMPARE(rows.size(), 5);
        QCOMPARE(rows[0], kHeader);
        QCOMPARE(rows[1].split(',')[1], QStringLiteral("1"));  // steps counted from 1
        QCOMPARE(rows[1].split(',')[3], QStringLiteral("1"));  // and batches
        QCOMPARE(rows[4].split(',')[1], QStringLiteral("2"));
        QCOMPARE(rows[4].split(',')[3], QStringLiteral("2"));
    }
};

QTEST_MAIN(TestTimingsExport)
#include "tst_timingsexport.moc"
