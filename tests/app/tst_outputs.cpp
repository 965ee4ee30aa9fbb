// Outputs are all-or-nothing and their text is always valid UTF-8, as a user meets them:
// tessera-cli render/bench/compare (through QProcess; Latin-1 bytes passed through /bin/sh's
// printf, as QString arguments are always UTF-8), the exporters and the run history.
// Full and read-only disks are real tmpfs mounts made by util-linux `unshare` in a private
// mount namespace (the tests skip where that is not allowed; tests run as root, which chmod
// does not stop); the file size limit (RLIMIT_FSIZE) and a path under a regular file work
// everywhere.
#include <QtTest/QtTest>

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRandomGenerator>
#include <QTemporaryDir>

#include <sys/resource.h>
#include <sys/types.h>
#include <csignal>
#include <filesystem>

#include "app/cli/PngIO.h"
#include "app/qt/Exporters.h"
#include "app/qt/RunHistory.h"
#include "core/base/BoundedInput.h"
#include "core/run/RunRecordIO.h"
#include "core/sampling/TilePlan.h"
#include "tests/app/CliRun.h"

using namespace tessera;
using tessera::testing::CliRun;
using tessera::testing::describe;
using tessera::testing::runCli;

namespace {

const QString kCli = QStringLiteral(TESSERA_BINARY_DIR "/app/tessera-cli");
const QString kModel = QStringLiteral(TESSERA_TEST_DATA "/models/cifar_like");

// A small CPU render of the fixture model; `more` are added after.
QStringList smallRender(const QStringList& more) {
    return QStringList{"render", "--model", kModel,      "--backend", "cpu",     "--width", "48",      "--height", "40",
                       "--tile", "32",      "--overlap", "16",        "--steps", "2",       "--batch", "2"} +
           more;
}

// `script` run by /bin/sh with $1... = args (and, with `unshare`, in a private mount namespace).
CliRun runShell(const QString& script, const QStringList& args, bool unshare = false, int timeoutMs = 300000) {
    QProcess process;
    const QStringList shArgs = QStringList{"-c", script, "sh"} + args;
    if (unshare)
        process.start(QStringLiteral("unshare"),
                      QStringList{"--mount", "--propagation", "private", "/bin/sh"} + shArgs);
    else
        process.start(QStringLiteral("/bin/sh"), shArgs);
    CliRun run;
    if (!process.waitForFinished(timeoutMs)) {
        process.kill();
        process.waitForFinished();
        run.err = QStringLiteral("timed out");
        return run;
    }
    run.exitCode = process.exitStatus() == QProcess::NormalExit ? process.exitCode() : -1;
    run.out = QString::fromUtf8(process.readAllStandardOutput());
    run.err = QString::fromUtf8(process.readAllStandardError());
    return run;
}

// Whether this machine lets `unshare` mount a tmpfs (root with CAP_SYS_ADMIN, no seccomp veto).
bool canMountTmpfs() {
    static const bool can = [] {
        QTemporaryDir dir;
        return runShell(QStringLiteral("mount -t tmpfs -o size=64k tmpfs \"$1\""), {dir.path()}, true).exitCode == 0;
    }();
    return can;
}

QStringList entries(const QString& dir) {
    return QDir(dir).entryList(QDir::AllEntries | QDir::Hidden | QDir::System | QDir::NoDotAndDotDot, QDir::Name);
}

QByteArray readAll(const QString& path) {
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

bool validUtf8(const QByteArray& bytes) { return isValidUtf8(std::string_view(bytes.constData(), bytes.size())); }

// A render's files in `dir`: exactly one <id>.png, .csv and .json (returns the id) or none.
QString completeSetIn(const QString& dir) {
    const QStringList pngs = QDir(dir).entryList({"*.png"}, QDir::Files);
    if (pngs.size() != 1) return {};
    const QString id = QFileInfo(pngs.front()).completeBaseName();
    return entries(dir) == QStringList{id + ".csv", id + ".json", id + ".png"} ? id : QString();
}

// A record shaped as an engine writes it for `config` (every step, tile batch, memory sample),
// with numbers printed at full length and a full graph cache, for the output size bound.
RunRecord engineLikeRecord(const RunConfig& config) {
    RunRecord r;
    r.runId = newRunId();
    r.startedAt = isoUtcNow();
    r.status = RunStatus::Finished;
    r.config = config;
    r.modelName = std::filesystem::path(config.model).filename().string();
    r.modelHash = std::string(64, 'a');
    r.imageSha256 = std::string(64, 'b');
    r.environment = {"0.1.0",     "cuda", "NVIDIA H100 80GB HBM3", "CUDA 12.4, cuDNN 9.1, driver 550.54.15",
                     "host-name", 16};
    const TilePlan plan = TilePlan::fromConfig(config);
    r.tileCount = plan.count();
    r.tileW = plan.tileW();
    r.tileH = plan.tileH();
    r.stepsRun = config.steps;
    const int batch = resolveTileBatch(config.tileBatch, plan.count());  // a record holds the batch that ran
    r.config.tileBatch = batch;
    const double ms = 0.30000000000000004;  // 17 significant digits, as printed
    for (int k = 0; k < config.steps; ++k) {
        r.timesteps.push_back(999.123f - k);
        r.steps.push_back({k, 999.123f - k, 12 + ms, 1 + ms, 13 + ms, "replay", false});
        for (int b = 0; b * batch < plan.count(); ++b) {
            TileBatchTiming t{k, 999.123f - k, b, {}, 1 + ms, 2 + ms, 81234 + ms};
            for (int id = b * batch; id < std::min(plan.count(), (b + 1) * batch); ++id) t.tileIds.push_back(id);
            r.batches.push_back(std::move(t));
        }
        r.memory.push_back({100000 + ms, 81234 + ms, 8123 + ms});
    }
    for (int g = 0; g < 16; ++g)
        r.graphs.used.push_back({"tile forward x" + std::to_string(batch) + " 64x64 fp16 lane " + std::to_string(g),
                                 1234, 12 + ms, 3 + ms, ms, 1 + ms, 100000, true, false});
    r.messages = {std::string(200, 'm'), std::string(200, 'n'), std::string(200, 'o')};
    return r;
}

Rgb8Image noiseImage(int width, int height) {
    Rgb8Image image;
    image.width = width;
    image.height = height;
    image.pixels.resize(static_cast<std::size_t>(width) * height * 3);
    for (auto& p : image.pixels) p = static_cast<std::uint8_t>(QRandomGenerator::global()->bounded(256));
    return image;
}

RunResult smallResult(const std::string& label) {
    RunResult result;
    result.record = engineLikeRecord([&] {
        RunConfig c;
        c.width = 8;
        c.height = 6;
        c.tile = 8;
        c.overlapPx = 0;
        c.steps = 2;
        c.label = label;
        return c;
    }());
    result.record.runId = "20261124-000000-0000beef";
    result.image = {3, 6, 8, std::vector<float>(3 * 6 * 8, 0.25f)};
    result.seamMap = {1, 6, 8, std::vector<float>(6 * 8, 0.5f)};
    return result;
}

}  // namespace

class TestOutputs : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() {
        QVERIFY2(QFileInfo::exists(kCli), "build the tessera-cli target first");
        if (!QFileInfo::exists(kModel + "/config.json")) QSKIP("the cifar_like fixture model is missing");
    }

    // A Latin-1 label, init file name and model folder name do not throw the finished render
    // away (exit 1, nothing written); they are stored escaped.
    void latin1StringsDoNotLoseARun() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const QString script = QStringLiteral(
            "set -e; m=\"$4/$(printf 'mod\\351le')\"; ln -s \"$2\" \"$m\"; i=\"$4/$(printf 'init\\351.png')\"; cp "
            "\"$3\" \"$i\";"
            "set +e; \"$1\" render --model \"$m\" --init \"$i\" --label \"$(printf 'caf\\351')\" --backend cpu --width "
            "48"
            " --height 40 --tile 32 --overlap 16 --steps 2 --batch 2 --seed 3 --out \"$4/out\"; rc=$?;"
            " rm -f \"$m\" \"$i\"; exit $rc");  // Qt cannot name, so cannot remove, non-UTF-8 file names
        const CliRun r = runShell(script, {kCli, kModel, TESSERA_TEST_DATA "/images/alpha.png", dir.path()});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        const QString out = dir.filePath("out");
        const QString id = completeSetIn(out);
        QVERIFY2(!id.isEmpty(), qPrintable(entries(out).join(',')));
        const QByteArray json = readAll(out + "/" + id + ".json");
        QVERIFY(validUtf8(json));
        QVERIFY(validUtf8(readAll(out + "/" + id + ".csv")));
        const QJsonObject manifest = QJsonDocument::fromJson(json).object();
        const QJsonObject config = manifest["config"].toObject();
        QCOMPARE(config["label"].toString(), QString("caf\\xE9"));
        QVERIFY2(config["model"].toString().endsWith("/mod\\xE9le"), qPrintable(config["model"].toString()));
        QVERIFY2(config["init"].toString().endsWith("/init\\xE9.png"), qPrintable(config["init"].toString()));
        QCOMPARE(manifest["model_name"].toString(), QString("mod\\xE9le"));
        const PngFile png = readPng((out + "/" + id + ".png").toStdString());
        QVERIFY(isValidUtf8(png.text("parameters")));
        QVERIFY2(QString::fromStdString(png.text("parameters")).contains("Model: mod\\xE9le"),
                 png.text("parameters").c_str());
        QCOMPARE(QByteArray::fromStdString(png.text("tessera-manifest")), json);
    }

    // A rejected render does not create its --out folder.
    void rejectedRenderCreatesNoFolder() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const CliRun r = runCli(smallRender({"--tile", "30", "--out", dir.filePath("new/deeper")}));
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("tile: 30"), qPrintable(describe(r)));
        QVERIFY(entries(dir.path()).isEmpty());
    }

    // The output folder is checked before any work: a path under a regular file.
    void outUnderAFileRefusedBeforeWork() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        QFile plain(dir.filePath("plain"));
        QVERIFY(plain.open(QIODevice::WriteOnly));
        plain.close();
        const CliRun r = runCli(smallRender({"--out", dir.filePath("plain/sub")}));
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("out: '" + dir.filePath("plain/sub") + "': '" + dir.filePath("plain") +
                                "' is a file, not a folder"),
                 qPrintable(describe(r)));
        QVERIFY2(!r.err.contains("step 1/"), qPrintable(describe(r)));
    }

    // The file size limit (ulimit -f) below what the image needs: refused before work, not
    // after it (EFBIG while writing). Works without any mount.
    void fileSizeLimitRefusedBeforeWork() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        QProcess process;
        process.setChildProcessModifier([] {
            std::signal(SIGXFSZ, SIG_IGN);
            const struct rlimit limit { 16 * 1024, RLIM_INFINITY };
            ::setrlimit(RLIMIT_FSIZE, &limit);
        });
        process.start(kCli, smallRender({"--out", dir.path()}));
        QVERIFY(process.waitForFinished(300000));
        const QString err = QString::fromUtf8(process.readAllStandardError());
        QCOMPARE(process.exitCode(), 2);
        QVERIFY2(err.contains("out: '" + dir.path() +
                              "': the file size limit (ulimit -f) is 16.0 KiB (16384 bytes); "
                              "the largest output file needs about"),
                 qPrintable(err));
        QVERIFY2(!err.contains("step 1/"), qPrintable(err));
        QVERIFY(entries(dir.path()).isEmpty());
    }

    // A full disk (a 64 KiB tmpfs): refused before work, saying what is free and what is needed.
    void fullDiskRefusedBeforeWork() {
        if (!canMountTmpfs()) QSKIP("no tmpfs mounts here (unshare --mount failed)");
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const CliRun r = runShell(QStringLiteral("mount -t tmpfs -o size=64k tmpfs \"$1\" && shift && exec \"$@\""),
                                  QStringList{dir.path(), kCli} +
                                      smallRender({"--width", "128", "--height", "128", "--out", dir.filePath("out")}),
                                  true);
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("out: '" + dir.filePath("out") + "': 64.0 KiB (65536 bytes) free in '" + dir.path() +
                                "' (where the folder would be created); these outputs need about"),
                 qPrintable(describe(r)));
        QVERIFY2(r.err.contains("(image up to") && !r.err.contains("step 1/"), qPrintable(describe(r)));
    }

    // A read-only folder (a read-only tmpfs: chmod does not stop root): refused before work.
    void readOnlyFolderRefusedBeforeWork() {
        if (!canMountTmpfs()) QSKIP("no tmpfs mounts here (unshare --mount failed)");
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const CliRun r = runShell(QStringLiteral("mount -t tmpfs -o ro,size=1m tmpfs \"$1\" && shift && exec \"$@\""),
                                  QStringList{dir.path(), kCli} + smallRender({"--out", dir.path()}), true);
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("out: '" + dir.path() + "': no file can be created in it: Read-only file system"),
                 qPrintable(describe(r)));
        QVERIFY2(!r.err.contains("step 1/"), qPrintable(describe(r)));
    }

    // The disk fills up during the run (after the check; the render is stopped meanwhile, so
    // it cannot finish first; 40 steps leave seconds between the first step line and the end,
    // even on a loaded machine): the write fails naming the file and the bytes it needed, exit 1,
    // and nothing of the set (not even the new folder) remains.
    void diskFullWhileWritingKeepsNothing() {
        if (!canMountTmpfs()) QSKIP("no tmpfs mounts here (unshare --mount failed)");
        QTemporaryDir dir, logs;
        QVERIFY(dir.isValid() && logs.isValid());
        const QString script = QStringLiteral(
            "mount -t tmpfs -o size=1m tmpfs \"$1\" || exit 77\n"
            "\"$2\" render --model \"$3\" --backend cpu --width 64 --height 64 --tile 32 --overlap 8 --steps 40 "
            "--batch "
            "1"
            " --out \"$1/out\" 2>\"$4/err\" >\"$4/out\" &\n"
            "pid=$!; n=0\n"
            "while ! grep -q 'step 1/' \"$4/err\" && [ $n -lt 3000 ]; do sleep 0.02; n=$((n+1)); done\n"
            "kill -STOP $pid || exit 78\n"
            "dd if=/dev/zero of=\"$1/filler\" bs=4k 2>/dev/null; kill -CONT $pid\n"
            "wait $pid; echo \"rc=$?\"; echo \"left: $(ls -A \"$1\" | tr '\\n' ' ')\"; cat \"$4/err\"");
        const CliRun r = runShell(script, {dir.path(), kCli, kModel, logs.path()}, true);
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        QVERIFY2(r.out.contains("rc=1\nleft: filler \n"), qPrintable(describe(r)));
        QVERIFY2(r.out.contains("cannot write '" + dir.filePath("out/")) &&
                     r.out.contains(".png': No space left on device (the file needs"),
                 qPrintable(r.out));
        QVERIFY2(r.out.contains("nothing of this output set was kept"), qPrintable(r.out));
    }

    // Ctrl-C cancels the run; a second Ctrl-C, possibly while the outputs are written, ends the
    // process: the folder then holds the whole set or nothing, never a temporary file.
    void secondInterruptLeavesAllOrNothing() {
        for (int delayMs : {0, 30, 100, 300}) {
            QTemporaryDir dir;
            QVERIFY(dir.isValid());
            QProcess process;
            process.start(kCli, QStringList{"render", "--model", kModel, "--backend", "cpu", "--width", "256",
                                            "--height", "256", "--tile", "32", "--overlap", "8", "--batch", "1",
                                            "--steps", "50", "--out", dir.path()});
            QVERIFY(process.waitForStarted());
            QString err;
            QElapsedTimer clock;
            clock.start();
            while (!err.contains("step 1/50") && clock.elapsed() < 120000) {
                process.waitForReadyRead(100);
                err += QString::fromUtf8(process.readAllStandardError());
            }
            QVERIFY2(err.contains("step 1/50"), qPrintable(err));
            ::kill(static_cast<pid_t>(process.processId()), SIGINT);
            QTest::qSleep(delayMs);
            ::kill(static_cast<pid_t>(process.processId()), SIGINT);
            QVERIFY(process.waitForFinished(120000));
            // Nothing, the whole set, or (the second signal landing inside the final write) the
            // finished image alone as <id>.incomplete.png, the set's other files removed
            // (core/run/OutputSet.h IfIncomplete::Keep).
            const QStringList left = entries(dir.path());
            const bool keptImage = left.size() == 1 && left.front().endsWith(".incomplete.png");
            QVERIFY2(left.isEmpty() || !completeSetIn(dir.path()).isEmpty() || keptImage,
                     qPrintable(QString("after %1 ms: %2").arg(delayMs).arg(left.join(','))));
        }
    }

    // bench and compare check their files before any work; messages say what is wrong.
    void benchAndCompareCheckTheirFilesBeforeWork() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        QFile plain(dir.filePath("plain"));
        QVERIFY(plain.open(QIODevice::WriteOnly));
        plain.close();
        const CliRun bench = runCli({"bench", "--model", kModel, "--backend", "cpu", "--size", "64", "--tile", "32",
                                     "--steps", "1", "--repeats", "1", "--csv", dir.filePath("plain/b.csv")});
        QCOMPARE(bench.exitCode, 2);
        QVERIFY2(bench.err.contains("bench: csv: cannot write '" + dir.filePath("plain/b.csv") + "': its folder '" +
                                    dir.filePath("plain") + "' is a file, not a folder"),
                 qPrintable(describe(bench)));
        QVERIFY2(!bench.err.contains("s/image"), qPrintable(describe(bench)));
        const CliRun compare =
            runCli({"compare",  "--model",  kModel,   "--backend", "cpu",     "--width", "48",
                    "--height", "48",       "--tile", "32",        "--steps", "1",       "--repeats",
                    "1",        "--warmup", "0",      "--b",       "seed=2",  "--json",  dir.filePath("plain/s.json")});
        QCOMPARE(compare.exitCode, 2);
        QVERIFY2(compare.err.contains("json: cannot write '" + dir.filePath("plain/s.json") + "': its folder '" +
                                      dir.filePath("plain") + "' is a file, not a folder"),
                 qPrintable(describe(compare)));
        QVERIFY2(!compare.out.contains("pair"), qPrintable(describe(compare)));
        QCOMPARE(entries(dir.path()), QStringList{"plain"});
    }

    // bench's CSV (written whole at the end) stores a Latin-1 model folder name escaped.
    void benchCsvIsValidUtf8() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const CliRun r = runShell(
            QStringLiteral(
                "set -e; m=\"$3/$(printf 'mod\\351le')\"; ln -s \"$2\" \"$m\"; set +e; \"$1\" bench --model \"$m\""
                " --backend cpu --size 32 --tile 32 --batch 1 --steps 1 --repeats 1 --csv \"$3/b.csv\";"
                " rc=$?; rm -f \"$m\"; exit $rc"),
            {kCli, kModel, dir.path()});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        const QByteArray csv = readAll(dir.filePath("b.csv"));
        QVERIFY2(validUtf8(csv), csv.constData());
        QVERIFY2(csv.contains(",mod\\xE9le,"), csv.constData());
        QCOMPARE(QString::fromUtf8(csv).count('\n'), 2);  // header and the one row
        QCOMPARE(entries(dir.path()).filter("tmp"), QStringList());
    }

    // The window's exporters: every format stores valid UTF-8; a failed export leaves nothing.
    void exportsAreValidUtf8AndAllOrNothing() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const RunResult result = smallResult("caf\xE9");
        for (ExportFormat format : {ExportFormat::ImagePng, ExportFormat::TimingsCsv, ExportFormat::ManifestJson,
                                    ExportFormat::ChromeTrace}) {
            const QString path = dir.filePath(suggestedExportName(result.record, format));
            exportRun(result, format, path.toStdString());
            const QByteArray bytes = readAll(path);
            QVERIFY2(!bytes.isEmpty(), qPrintable(path));
            if (format == ExportFormat::ImagePng) {
                const PngFile png = readPng(path.toStdString());
                QVERIFY(isValidUtf8(png.text("tessera-manifest")));
                QVERIFY(png.text("tessera-manifest").find("caf\\\\xE9") != std::string::npos);
            } else {
                QVERIFY2(validUtf8(bytes), qPrintable(path));
            }
        }
        QVERIFY(readAll(dir.filePath(suggestedExportName(result.record, ExportFormat::ManifestJson)))
                    .contains("\"label\": \"caf\\\\xE9\""));
        QCOMPARE(entries(dir.path()).size(), 4);
        const std::string missing = dir.filePath("no/such/x.json").toStdString();
        QVERIFY_THROWS_EXCEPTION(std::runtime_error, exportRun(result, ExportFormat::ManifestJson, missing));
        QCOMPARE(entries(dir.path()).size(), 4);
    }

    // The history writes a run's PNG, seam statistics and manifest as one set, manifest last.
    void historyAddIsAllOrNothing() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const RunResult result = smallResult("caf\xE9");
        const QString id = QString::fromStdString(result.record.runId);
        QVERIFY(QDir(dir.path()).mkpath(id + ".json/blocker"));  // the manifest cannot be renamed into place
        {
            RunHistory history(dir.path(), 10);
            QVERIFY_THROWS_EXCEPTION(std::runtime_error, history.add(result));
            QCOMPARE(entries(dir.path()), QStringList{id + ".json"});  // no PNG, no seam file
            QVERIFY(history.entries().empty());
        }
        QVERIFY(QDir(dir.filePath(id + ".json")).removeRecursively());
        RunHistory history(dir.path(), 10);
        history.add(result);
        QCOMPARE(entries(dir.path()), (QStringList{id + ".json", id + ".png", id + ".seam.json"}));
        QVERIFY(validUtf8(readAll(dir.filePath(id + ".json"))));
        RunHistory reloaded(dir.path(), 10);
        QCOMPARE(reloaded.entries().size(), std::size_t(1));
        QCOMPARE(reloaded.entries().front().record.config.label, std::string("caf\\xE9"));
    }

    // renderOutputNeeds bounds what a render really writes (incompressible pixels, every
    // batch and step, long escaped strings), and not by orders of magnitude.
    void outputNeedsBoundRealOutputs_data() {
        QTest::addColumn<int>("width");
        QTest::addColumn<int>("height");
        QTest::addColumn<int>("tile");
        QTest::addColumn<int>("overlap");
        QTest::addColumn<int>("batch");
        QTest::addColumn<int>("steps");
        QTest::addColumn<int>("stringBytes");
        QTest::newRow("tiny") << 48 << 40 << 32 << 16 << 2 << 2 << 0;
        QTest::newRow("many steps") << 256 << 256 << 32 << 8 << 1 << 50 << 20;
        QTest::newRow("wide batches") << 512 << 256 << 64 << 16 << 8 << 10 << 300;
        QTest::newRow("many tiles, long strings") << 1024 << 1024 << 64 << 32 << 4 << 5 << 3000;
    }
    void outputNeedsBoundRealOutputs() {
        QFETCH(int, width);
        QFETCH(int, height);
        QFETCH(int, tile);
        QFETCH(int, overlap);
        QFETCH(int, batch);
        QFETCH(int, steps);
        QFETCH(int, stringBytes);
        RunConfig c;
        c.width = width;
        c.height = height;
        c.tile = tile;
        c.overlapPx = overlap;
        c.tileBatch = batch;
        c.steps = steps;
        c.label = std::string(static_cast<std::size_t>(stringBytes), '\xE9');  // each byte stored as 5 ("\\xE9")
        c.model = "/models/" + std::string(static_cast<std::size_t>(stringBytes), '\x01');  // 6 each ("\u0001")
        c.initImage = std::string(static_cast<std::size_t>(stringBytes), '"');
        const RunRecord record = engineLikeRecord(c);
        const std::string manifest = jsonText(manifestJson(record), 2);
        const std::size_t png = encodeRunPng("x.png", noiseImage(width, height), c, manifest).size();
        const std::size_t csv = timingsCsv(record).size();
        const OutputNeeds needs = renderOutputNeeds(c);
        const std::uintmax_t actual = png + csv + manifest.size();
        QVERIFY2(needs.totalBytes >= actual, qPrintable(QString("needs %1 < actual %2 (png %3, csv %4, manifest %5)")
                                                            .arg(needs.totalBytes)
                                                            .arg(actual)
                                                            .arg(png)
                                                            .arg(csv)
                                                            .arg(manifest.size())));
        QVERIFY(needs.largestBytes >= std::max({png, csv, manifest.size()}));
        QVERIFY2(needs.totalBytes <= 2 * actual + (128u << 10),
                 qPrintable(QString("needs %1 for actual %2").arg(needs.totalBytes).arg(actual)));
    }
};

QTEST_GUILESS_MAIN(TestOutputs)
#include "tst_outputs.moc"
