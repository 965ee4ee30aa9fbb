// tessera-cli render --batch-count N: N images, seeds seed .. seed + N - 1, each its own output set
// and record; the count checked before any work.
#include <QtTest/QtTest>

#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>

#include <string>
#include <vector>

#include "app/cli/CliOptions.h"
#include "core/base/ValidationError.h"
#include "tests/app/CliRun.h"

using namespace tessera;
using tessera::testing::CliRun;
using tessera::testing::describe;

namespace {

QStringList renderArgs(const QString& out, const QString& seed, const QString& count) {
    return {"render",
            "--model",
            TESSERA_TEST_DATA "/models/cifar_like",
            "--backend",
            "cpu",
            "--width",
            "32",
            "--height",
            "32",
            "--tile",
            "32",
            "--steps",
            "2",
            "--seed",
            seed,
            "--batch-count",
            count,
            "--out",
            out};
}

// The manifests in `folder`, by seed.
QMap<qulonglong, QJsonObject> manifestsBySeed(const QString& folder) {
    QMap<qulonglong, QJsonObject> bySeed;
    for (const QString& name : QDir(folder).entryList({"*.json"}, QDir::Files)) {
        QFile file(QDir(folder).filePath(name));
        if (!file.open(QIODevice::ReadOnly)) continue;
        const QJsonObject manifest = QJsonDocument::fromJson(file.readAll()).object();
        const QJsonValue seed = manifest.value("config").toObject().value("seed");
        bySeed.insert(seed.toVariant().toULongLong(), manifest);
    }
    return bySeed;
}

}  // namespace

class TestBatchCount : public QObject {
    Q_OBJECT

private slots:
    void parsed() {
        QCOMPARE(parseCliOptions({"render"}).batchCount, 1);
        QCOMPARE(parseCliOptions({"render", "--batch-count", "3"}).batchCount, 3);
        QCOMPARE(parseCliOptions({"render", "--batch-count=100"}).batchCount, kMaxBatchCount);
        for (const std::string bad : {"0", "101", "-2", "two", ""}) {
            try {
                parseCliOptions({"render", "--batch-count", bad});
                QFAIL(qPrintable(QString::fromStdString("accepted --batch-count '" + bad + "'")));
            } catch (const ValidationError& e) {
                QCOMPARE(e.field(), std::string("batch-count"));
            }
        }
    }

    void imagesWithConsecutiveSeeds() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const CliRun r = tessera::testing::runCli(renderArgs(dir.path(), "41", "3"), 300000);
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        QCOMPARE(r.out.count(QStringLiteral("image     ")), 3);
        QCOMPARE(QDir(dir.path()).entryList({"*.png"}, QDir::Files).size(), 3);
        QCOMPARE(QDir(dir.path()).entryList({"*.csv"}, QDir::Files).size(), 3);
        const QMap<qulonglong, QJsonObject> bySeed = manifestsBySeed(dir.path());
        QCOMPARE(bySeed.keys(), (QList<qulonglong>{41, 42, 43}));
        QSet<QString> runIds, hashes;
        for (const QJsonObject& m : bySeed) {
            runIds.insert(m.value("run_id").toString());
            hashes.insert(m.value("image_sha256").toString());
        }
        QCOMPARE(runIds.size(), 3);
        QCOMPARE(hashes.size(), 3);  // three seeds, three images
        QVERIFY(!hashes.contains(QString()));

        // The second image is the image a single render with its seed makes.
        QTemporaryDir single;
        QVERIFY(single.isValid());
        const CliRun one = tessera::testing::runCli(renderArgs(single.path(), "42", "1"), 300000);
        QVERIFY2(one.exitCode == 0, qPrintable(describe(one)));
        const QMap<qulonglong, QJsonObject> alone = manifestsBySeed(single.path());
        QCOMPARE(alone.keys(), (QList<qulonglong>{42}));
        QCOMPARE(alone.value(42).value("image_sha256").toString(), bySeed.value(42).value("image_sha256").toString());
    }

    void seedsPastTheLargestAreRefused() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const QString out = dir.filePath("never-written");
        const CliRun r = tessera::testing::runCli(renderArgs(out, "18446744073709551614", "3"), 120000);
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("batch-count"), qPrintable(describe(r)));
        QVERIFY(!QDir(out).exists());
    }
};

QTEST_GUILESS_MAIN(TestBatchCount)
#include "tst_batchcount.moc"
