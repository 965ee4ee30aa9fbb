// The window with hostile files around it (offscreen): saved settings and history manifests
// nested 60,000 levels deep, too large or invalid (the window comes up with defaults and the
// good runs; a warning is logged), a history manifest whose run_id leads outside the folder
// (the row is absent, and when the history trims past its capacity the victim next to the
// folder survives), and presets opened from the window or `tessera --preset` that are deep,
// huge, FIFOs or folders (refused with a message, never read without bound).
#include <memory>
#include <string>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QLabel>
#include <QProcess>
#include <QRegularExpression>
#include <QSettings>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include <sys/stat.h>

#include "../app/HistoryFiles.h"
#include "TinyRun.h"
#include "app/qt/RunHistory.h"
#include "core/run/RunConfig.h"
#include "ui/ConfigPanel.h"
#include "ui/HistoryPanel.h"
#include "ui/MainWindow.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

// MainWindow's key for the last configuration (ui/MainWindow.cpp).
const QString kLastConfigKey = QStringLiteral("run/lastConfig");

std::string deepJson(int levels) {
    const auto n = static_cast<std::size_t>(levels);
    return R"({"width": )" + std::string(n, '[') + std::string(n, ']') + "}";
}

QString statusOf(const MainWindow& window) { return window.findChild<QLabel*>(QStringLiteral("statusText"))->text(); }

}  // namespace

class TestUntrustedFiles : public QObject {
    Q_OBJECT

private:
    QTemporaryDir scratch_;
    int count_ = 0;

    // A fresh folder under scratch_ for one test.
    QString freshFolder() {
        const QString path = scratch_.filePath(QStringLiteral("case-%1").arg(++count_));
        if (!QDir().mkpath(path)) qFatal("cannot create %s", qPrintable(path));
        return path;
    }
    // A settings file whose saved configuration is `json`.
    static std::unique_ptr<SettingsFile> settingsWith(const QString& folder, const std::string& json) {
        const QString path = folder + QStringLiteral("/tessera.ini");
        {
            QSettings settings(path, QSettings::IniFormat);
            settings.setValue(kLastConfigKey, QString::fromStdString(json));
        }
        return std::make_unique<SettingsFile>(path);
    }

private slots:
    void init() { testing::failOnGuiThreadIo(); }

    void initTestCase() {
        QVERIFY(scratch_.isValid());
        QStandardPaths::setTestModeEnabled(true);
    }

    void windowComesUpWithDeepSettingsAndDeepHistory() {
        const QString folder = freshFolder(), history = folder + QStringLiteral("/history");
        QVERIFY(QDir().mkpath(history));
        writeFile(history + QStringLiteral("/%1.json").arg(QString::fromStdString(runIdOf(0))),
                  manifestOf(runIdOf(0), startOf(0)));
        writeFile(history + QStringLiteral("/%1.json").arg(QString::fromStdString(runIdOf(1))), deepManifest(60000));
        QTest::ignoreMessage(QtWarningMsg,
                             QRegularExpression("saved settings are ignored.*nested deeper than 64 levels"));
        QTest::ignoreMessage(QtWarningMsg, QRegularExpression(QString::fromStdString(runIdOf(1)) +
                                                              "\\.json.*nested deeper than 64 levels.*; skipped"));
        MainWindow window(settingsWith(folder, deepJson(60000)), history);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QVERIFY(waitForHistory(window));
        QCOMPARE(window.configPanel()->config().width, RunConfig().width);  // the defaults
        QCOMPARE(window.history().entries().size(), std::size_t(1));
        QCOMPARE(window.historyPanel()->rowCount(), 1);
        QVERIFY2(statusOf(window).contains("could not be used") &&
                     statusOf(window).contains(QString::fromStdString(runIdOf(1))),
                 qPrintable(statusOf(window)));
        QVERIFY(QFileInfo::exists(history +
                                  QStringLiteral("/%1.json").arg(QString::fromStdString(runIdOf(1)))));  // not deleted
    }

    void badSavedSettingsAreIgnored_data() {
        QTest::addColumn<QByteArray>("json");
        QTest::addColumn<QString>("reason");
        QTest::newRow("just too deep") << QByteArray::fromStdString(deepJson(64)) << "nested deeper than 64 levels";
        QTest::newRow("too large") << QByteArray::fromStdString("{\"label\": \"" + std::string((16u << 20) + 1, 'x') +
                                                                "\"}")
                                   << "at most 16777216";
        QTest::newRow("not JSON") << QByteArray("{\"width\": 64,") << "not valid JSON";
        QTest::newRow("wrong type") << QByteArray("{\"tile\": \"wide\"}") << "tile";
        QTest::newRow("not an object") << QByteArray("[64]") << "config";
    }

    void badSavedSettingsAreIgnored() {
        QFETCH(QByteArray, json);
        QFETCH(QString, reason);
        const QString folder = freshFolder();
        QTest::ignoreMessage(QtWarningMsg,
                             QRegularExpression("saved settings are ignored.*" + QRegularExpression::escape(reason)));
        MainWindow window(settingsWith(folder, json.toStdString()), folder + QStringLiteral("/history"));
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QCOMPARE(window.configPanel()->config().tile, RunConfig().tile);
        QCOMPARE(window.configPanel()->config().label, RunConfig().label);
        QVERIFY2(statusOf(window).contains("saved settings could not be read") && statusOf(window).contains(reason) &&
                     statusOf(window).size() < 1000,
                 qPrintable(statusOf(window).left(2000)));
    }

    void traversalRunIdInHistoryTouchesNothingOutside() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        // root/victim.* next to root/history; a full history plus a manifest whose run_id is
        // "../victim", the oldest of all (the old code listed it, then deleted it and the
        // victim's files when the first run pushed the history past its capacity).
        const QString root = freshFolder(), history = root + QStringLiteral("/history");
        QVERIFY(QDir().mkpath(history));
        writeFile(root + QStringLiteral("/victim.json"), manifestOf("victim", "1999-01-01T00:00:00.000Z"));
        QVERIFY(QImage(4, 4, QImage::Format_RGB888).save(root + QStringLiteral("/victim.png")));
        writeFile(root + QStringLiteral("/victim.seam.json"), R"({"mean": 1, "max": 2})");
        writeFile(history + QStringLiteral("/evil.json"), manifestOf("../victim", "1999-01-01T00:00:00.000Z"));
        writeFile(history + QStringLiteral("/%1.json").arg(QString::fromStdString(runIdOf(999))),
                  manifestOf("../../../../../../../.." + root.toStdString() + "/victim", "1999-01-01T00:00:01.000Z"));
        for (int i = 0; i < RunHistory::kDefaultCapacity; ++i)
            writeFile(history + QStringLiteral("/%1.json").arg(QString::fromStdString(runIdOf(i))),
                      manifestOf(runIdOf(i), startOf(i)));

        MainWindow window(settingsWith(root, {}), history);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QVERIFY(waitForHistory(window));
        QCOMPARE(window.history().problems().size(), 2);
        QCOMPARE(window.historyPanel()->rowCount(), RunHistory::kDefaultCapacity);  // the planted rows are absent
        for (const HistoryEntry& entry : window.history().entries())
            QVERIFY2(!entry.id().contains("victim"), qPrintable(entry.id()));

        QVERIFY(runOnce(window, tinyRunConfig(5)));
        QCOMPARE(window.historyPanel()->rowCount(), RunHistory::kDefaultCapacity);
        QVERIFY(!QFileInfo::exists(
            history + QStringLiteral("/%1.json").arg(QString::fromStdString(runIdOf(0)))));  // the oldest run went
        for (const char* name : {"victim.json", "victim.png", "victim.seam.json"})
            QVERIFY2(QFileInfo(root + QLatin1Char('/') + QLatin1String(name)).isFile(), name);
        QVERIFY(QFileInfo::exists(history + QStringLiteral("/evil.json")));  // reported, not deleted
        QVERIFY(QFileInfo::exists(history + QStringLiteral("/%1.json").arg(QString::fromStdString(runIdOf(999)))));
    }

    void unusablePresetIsRefusedByTheWindow_data() {
        QTest::addColumn<QString>("kind");
        QTest::addColumn<QString>("reason");
        QTest::newRow("deep") << "deep"
                              << "nested deeper than 64 levels";
        QTest::newRow("deep run PNG manifest") << "png"
                                               << "nested deeper than 64 levels";
        QTest::newRow("too large") << "large"
                                   << "at most 16777216 bytes";
        QTest::newRow("FIFO") << "fifo"
                              << "not a regular file";
        QTest::newRow("FIFO named .png") << "fifo-png"
                                         << "not a regular file";
        QTest::newRow("folder") << "folder"
                                << "is a folder";
    }

    void unusablePresetIsRefusedByTheWindow() {
        QFETCH(QString, kind);
        QFETCH(QString, reason);
        const QString folder = freshFolder(),
                      path = folder + QStringLiteral("/preset.") + (kind.contains("png") ? "png" : "json");
        if (kind == "deep") writeFile(path, deepJson(60000));
        if (kind == "png") {
            QImage image(2, 2, QImage::Format_RGB888);
            image.fill(Qt::black);
            image.setText(QStringLiteral("tessera-manifest"), QString::fromStdString(deepManifest(60000)));
            QVERIFY(image.save(path));
        }
        if (kind == "large") {
            QFile file(path);
            QVERIFY(file.open(QIODevice::WriteOnly) && file.resize(qint64(17) << 20));
        }
        if (kind.startsWith("fifo"))
            QCOMPARE(::mkfifo(QFile::encodeName(path).constData(), 0600),
                     0);  // no writer: a blocking open waits forever
        if (kind == "folder") QVERIFY(QDir().mkpath(path));
        MainWindow window(settingsWith(folder, {}), folder + QStringLiteral("/history"));
        RunConfig config = window.configPanel()->config();
        config.seed = 4242;
        QVERIFY(testing::setConfigAndWait(*window.configPanel(), config));
        QString error;
        QVERIFY(!restoreAndWait(window, path, &error));
        QVERIFY2(error.contains("preset.") && error.contains(reason) && error.size() < 600,
                 qPrintable(error.left(1000)));
        QCOMPARE(window.configPanel()->config().seed, std::uint64_t(4242));  // unchanged
    }

    void presetOptionGoesThroughTheSameReader() {
        const QString gui = QStringLiteral(TESSERA_BINARY_DIR "/ui/tessera");
        if (!QFileInfo::exists(gui)) QSKIP("the tessera executable is not built in this build folder");
        const QString folder = freshFolder();
        writeFile(folder + QStringLiteral("/deep.json"), deepJson(60000));
        RunConfig good;
        good.seed = 31;
        writeFile(folder + QStringLiteral("/good.json"), toJson(good).dump());
        const auto run = [&](const QString& preset, QString* err) {
            QProcess process;
            process.setProcessEnvironment([] {
                QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
                env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
                return env;
            }());
            process.start(
                gui, {QStringLiteral("--fresh"), QStringLiteral("--preset"), preset, QStringLiteral("--screenshot"),
                      folder + QStringLiteral("/shot.png"), QStringLiteral("--delay"), QStringLiteral("0")});
            if (!process.waitForFinished(120000)) return -1;
            *err = QString::fromUtf8(process.readAllStandardError());
            return process.exitStatus() == QProcess::NormalExit ? process.exitCode() : -1;
        };
        QString err;
        QCOMPARE(run(folder + QStringLiteral("/deep.json"), &err), 2);
        QVERIFY2(err.contains("deep.json") && err.contains("nested deeper than 64 levels") && err.size() < 1000,
                 qPrintable(err));
        QVERIFY(!QFileInfo::exists(folder + QStringLiteral("/shot.png")));
        QCOMPARE(run(folder + QStringLiteral("/good.json"), &err), 0);
        QVERIFY(QFileInfo(folder + QStringLiteral("/shot.png")).size() > 0);
    }
};

QTEST_MAIN(TestUntrustedFiles)
#include "tst_untrustedfiles.moc"
