// Runs that reproduce across processes: `tessera-cli render` twice, as two
// processes, with one config and a fresh tuning cache file (the first fills it, the second
// takes every choice from it) must give the same image_sha256; graphs off/step/tile and lanes
// 1/2 must give that same image too. Skips without a CUDA device. tessera-cli is taken from
// $TESSERA_CLI, else beside this test (the GPU machine's bin/), else the build tree; the model
// from $TESSERA_TEST_DATA_DIR or the compiled-in tests/data.
#include <QtTest>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>

#include "kernels/backend/CudaBackend.h"

using namespace tessera;

namespace {

QString cliPath() {
    const QString env = qEnvironmentVariable("TESSERA_CLI");
    if (!env.isEmpty()) return env;
    const QString beside = QCoreApplication::applicationDirPath() + "/tessera-cli";
    if (QFileInfo(beside).isExecutable()) return beside;
    return QStringLiteral(TESSERA_BINARY_DIR "/app/tessera-cli");
}

QString modelPath() {
    const QString env = qEnvironmentVariable("TESSERA_TEST_DATA_DIR");
    return (env.isEmpty() ? QStringLiteral(TESSERA_TEST_DATA) : env) + "/models/cifar_like";
}

struct Render {
    int exitCode = -1;
    QString log;
    QJsonObject manifest;
    QString sha() const { return manifest.value("image_sha256").toString(); }
    QJsonObject tuning() const { return manifest.value("tuning").toObject(); }
    int hits() const { return tuning().value("hits").toInt(-1); }
    int misses() const { return tuning().value("misses").toInt(-1); }
    QString digest() const { return tuning().value("digest").toString(); }
    double prepareMs() const { return manifest.value("prepare_ms").toDouble(); }
};

// One `tessera-cli render` process of the session-5 config (cifar_like, 512x384, tile 64/16,
// batch 8, fp16, 10 DDIM steps, seed 7) with `graphs` and `lanes`, using the tuning cache `cache`.
Render render(const QString& cache, const QString& graphs, int lanes) {
    Render r;
    QTemporaryDir out;
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.remove("TESSERA_TUNING_CACHE");
    p.setProcessEnvironment(env);
    p.start(cliPath(), {"render",
                        "--backend",
                        "cuda",
                        "--model",
                        modelPath(),
                        "--width",
                        "512",
                        "--height",
                        "384",
                        "--tile",
                        "64",
                        "--overlap",
                        "16",
                        "--batch",
                        "8",
                        "--precision",
                        "fp16",
                        "--steps",
                        "10",
                        "--seed",
                        "7",
                        "--graphs",
                        graphs,
                        "--lanes",
                        QString::number(lanes),
                        "--tuning-cache",
                        cache,
                        "--out",
                        out.path()});
    if (!p.waitForFinished(300000)) {
        p.kill();
        p.waitForFinished();
        r.log = "timed out";
        return r;
    }
    r.exitCode = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
    r.log = QString::fromUtf8(p.readAllStandardOutput() + p.readAllStandardError());
    const QStringList manifests = QDir(out.path()).entryList({"*.json"}, QDir::Files);
    if (manifests.size() != 1) return r;
    QFile f(out.filePath(manifests.front()));
    if (f.open(QIODevice::ReadOnly)) r.manifest = QJsonDocument::fromJson(f.readAll()).object();
    return r;
}

QString describe(const Render& r) {
    return QStringLiteral("exit %1, sha %2, tuning %3\n%4")
        .arg(r.exitCode)
        .arg(r.sha(), QString::fromUtf8(QJsonDocument(r.tuning()).toJson(QJsonDocument::Compact)), r.log.right(3000));
}

}  // namespace

class TestReproducible : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() {
        std::string why;
        if (!cudaDeviceAvailable(&why)) QSKIP(why.c_str());
        if (!QFileInfo(cliPath()).isExecutable()) QSKIP(qPrintable("no tessera-cli at " + cliPath()));
        if (!QFileInfo::exists(modelPath() + "/config.json")) QSKIP(qPrintable("no model at " + modelPath()));
    }

    void twoProcessesOneImage() {
        QTemporaryDir dir;
        const QString cache = dir.filePath("fresh/tuning.json");
        const Render first = render(cache, "off", 1);
        QVERIFY2(first.exitCode == 0 && !first.sha().isEmpty(), qPrintable(describe(first)));
        QVERIFY2(QFileInfo::exists(cache), qPrintable(describe(first)));
        QCOMPARE(first.tuning().value("cache").toString(), cache);
        QCOMPARE(first.hits(), 0);
        QVERIFY2(first.misses() > 0, qPrintable(describe(first)));
        QVERIFY(first.tuning().value("settings").toObject().contains("TESSERA_CUDNN_FIND"));

        const Render second = render(cache, "off", 1);
        QVERIFY2(second.exitCode == 0, qPrintable(describe(second)));
        QCOMPARE(second.misses(), 0);
        QCOMPARE(second.tuning().value("rejected").toInt(-1), 0);
        QCOMPARE(second.hits(), first.misses());
        QCOMPARE(second.digest(), first.digest());
        QVERIFY2(second.sha() == first.sha(), qPrintable(describe(first) + "\n---\n" + describe(second)));
        qInfo("prepare: cold cache %.0f ms, warm cache %.0f ms (%d choices timed, then %d from the cache)",
              first.prepareMs(), second.prepareMs(), first.misses(), second.hits());
    }

    void graphModesAndLanesOneImage() {
        QTemporaryDir dir;
        const QString cache = dir.filePath("tuning.json");
        const Render base = render(cache, "off", 1);
        QVERIFY2(base.exitCode == 0 && !base.sha().isEmpty(), qPrintable(describe(base)));
        for (const QString& graphs : {QStringLiteral("off"), QStringLiteral("tile"), QStringLiteral("step")})
            for (int lanes : {1, 2}) {
                const Render r = render(cache, graphs, lanes);
                const QString what = "graphs " + graphs + " lanes " + QString::number(lanes) + ": ";
                QVERIFY2(r.exitCode == 0, qPrintable(what + describe(r)));
                QVERIFY2(r.misses() == 0 && r.digest() == base.digest(), qPrintable(what + describe(r)));
                QVERIFY2(r.sha() == base.sha(),
                         qPrintable(what + describe(r) + "\n--- graphs off lanes 1:\n" + describe(base)));
            }
    }
};

QTEST_GUILESS_MAIN(TestReproducible)
#include "tst_reproducible.moc"
