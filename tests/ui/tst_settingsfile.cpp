// The window's settings file is input like any other (app/qt/SettingsFile.h): read through the
// bounded reader, never by QSettings. A FIFO, a folder, a symbolic-link loop or an oversized
// file there gives the window's status line a message naming the file, the window comes up at
// once with the default settings, and the file is left as it was (never replaced or removed).
// A usable file is read and written back whole.
#include <atomic>
#include <chrono>
#include <thread>

#include <QCoreApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QLabel>
#include <QSettings>
#include <QTemporaryDir>
#include <QtTest>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "TinyRun.h"
#include "app/qt/SettingsFile.h"
#include "ui/ConfigPanel.h"
#include "ui/MainWindow.h"

using namespace tessera;

namespace {

QString statusOf(const MainWindow& window) { return window.findChild<QLabel*>(QStringLiteral("statusText"))->text(); }

bool isFifo(const QString& path) {
    struct stat info {};
    return ::lstat(QFile::encodeName(path).constData(), &info) == 0 && S_ISFIFO(info.st_mode);
}

// Keeps a test that would block on a FIFO from hanging the suite: after `unblockAfter` it opens
// the FIFO's write end and closes it again (a reader blocked in open() then reads an empty file),
// and if the test is still not done after `giveUpAfter` it ends the process.
class FifoWatchdog {
public:
    FifoWatchdog(const QString& fifo, std::chrono::milliseconds unblockAfter, std::chrono::milliseconds giveUpAfter)
        : thread_([this, path = QFile::encodeName(fifo), unblockAfter, giveUpAfter] {
              const auto start = std::chrono::steady_clock::now();
              while (!done_.load()) {
                  const auto waited = std::chrono::steady_clock::now() - start;
                  if (waited > giveUpAfter) qFatal("the window blocked on the settings FIFO");
                  if (waited > unblockAfter) {
                      // Succeeds only while a reader has the FIFO open (ENXIO otherwise).
                      const int fd = ::open(path.constData(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
                      if (fd >= 0) {
                          ::close(fd);
                          unblocked_.store(true);
                      }
                  }
                  std::this_thread::sleep_for(std::chrono::milliseconds(20));
              }
          }) {}
    ~FifoWatchdog() {
        done_.store(true);
        thread_.join();
    }
    FifoWatchdog(const FifoWatchdog&) = delete;
    FifoWatchdog& operator=(const FifoWatchdog&) = delete;
    // True when something had opened the FIFO for reading and was let go.
    bool unblocked() const { return unblocked_.load(); }

private:
    std::atomic<bool> done_{false}, unblocked_{false};
    std::thread thread_;
};

}  // namespace

class TestSettingsFile : public QObject {
    Q_OBJECT

private:
    QTemporaryDir scratch_;
    int count_ = 0;

    QString freshFolder() {
        const QString path = scratch_.filePath(QStringLiteral("case-%1").arg(++count_));
        if (!QDir().mkpath(path)) qFatal("cannot create %s", qPrintable(path));
        return path;
    }

private slots:
    void init() { testing::failOnGuiThreadIo(); }

    void initTestCase() {
        QVERIFY(scratch_.isValid());
        // Where the application keeps its settings: XDG_CONFIG_HOME/Tessera/tessera.conf.
        QCoreApplication::setOrganizationName(QStringLiteral("Tessera"));
        QCoreApplication::setApplicationName(QStringLiteral("tessera"));
    }

    // The window as gui_main builds it (the user's settings file) with a FIFO there.
    void fifoSettingsFileDoesNotBlockTheWindow() {
        const QString config = freshFolder();
        const QByteArray before = qgetenv("XDG_CONFIG_HOME");
        qputenv("XDG_CONFIG_HOME", QFile::encodeName(config));
        const QString path = SettingsFile::defaultPath();
        QCOMPARE(path, config + QStringLiteral("/Tessera/tessera.conf"));
        QVERIFY(QDir().mkpath(QFileInfo(path).absolutePath()));
        QCOMPARE(::mkfifo(QFile::encodeName(path).constData(), 0600), 0);
        QTest::ignoreMessage(QtWarningMsg, QRegularExpression("tessera\\.conf.* is a FIFO"));
        qint64 constructedMs = 0;
        bool waitedForAWriter = false;
        {
            const FifoWatchdog watchdog(path, std::chrono::seconds(3), std::chrono::seconds(30));
            QElapsedTimer clock;
            clock.start();
            MainWindow window(nullptr, config + QStringLiteral("/history"));
            constructedMs = clock.elapsed();
            waitedForAWriter = watchdog.unblocked();
            window.show();
            QVERIFY(QTest::qWaitForWindowExposed(&window));
            QVERIFY2(statusOf(window).contains(QStringLiteral("is a FIFO")) && statusOf(window).contains(path) &&
                         statusOf(window).contains(QStringLiteral("default settings")),
                     qPrintable(statusOf(window)));
            QCOMPARE(window.configPanel()->config().tile, RunConfig().tile);
            window.close();  // saves the settings where it can: not into the FIFO
        }
        if (before.isNull())
            qunsetenv("XDG_CONFIG_HOME");
        else
            qputenv("XDG_CONFIG_HOME", before);
        QVERIFY2(!waitedForAWriter, "the settings FIFO was opened for reading");
        QVERIFY2(constructedMs < 1000, qPrintable(QStringLiteral("the window took %1 ms").arg(constructedMs)));
        QVERIFY(isFifo(path));  // left as it was
    }

    void unusableSettingsFilesAreNamedAndLeftAlone_data() {
        QTest::addColumn<QString>("kind");
        QTest::addColumn<QString>("message");
        QTest::newRow("folder") << "folder"
                                << "is a folder, not a regular file";
        QTest::newRow("link loop") << "loop"
                                   << "is a symbolic-link loop";
        QTest::newRow("dangling link") << "dangling"
                                       << "is a dangling symbolic link";
        QTest::newRow("too large") << "large"
                                   << "bytes are allowed";
        QTest::newRow("unreadable") << "unreadable"
                                    << "could not be read";
    }

    void unusableSettingsFilesAreNamedAndLeftAlone() {
        QFETCH(QString, kind);
        QFETCH(QString, message);
        const QString folder = freshFolder(), path = folder + QStringLiteral("/tessera.conf");
        if (kind == QLatin1String("folder")) {
            QVERIFY(QDir().mkpath(path));
        } else if (kind == QLatin1String("loop")) {
            QVERIFY(QFile::link(path, path));
        } else if (kind == QLatin1String("dangling")) {
            QVERIFY(QFile::link(folder + QStringLiteral("/gone.conf"), path));
        } else if (kind == QLatin1String("large")) {
            QFile file(path);
            QVERIFY(file.open(QIODevice::WriteOnly) && file.resize(qint64(SettingsFile::kMaxBytes) + 1));
        } else {
            QFile file(path);
            QVERIFY(file.open(QIODevice::WriteOnly) && file.write("[run]\nlastConfig=x\n") > 0);
            file.close();
            QVERIFY(QFile::setPermissions(path, QFileDevice::WriteOwner));
            if (QFile(path).open(QIODevice::ReadOnly)) QSKIP("files are readable regardless of permissions here");
        }
        const QFileInfo before(path);
        auto settings = std::make_unique<SettingsFile>(path);
        QVERIFY2(settings->problem().contains(message), qPrintable(settings->problem()));
        QVERIFY(!settings->savesChanges());
        QTest::ignoreMessage(QtWarningMsg, QRegularExpression(QRegularExpression::escape(message)));
        {
            MainWindow window(std::move(settings), folder + QStringLiteral("/history"));
            window.show();
            QVERIFY(QTest::qWaitForWindowExposed(&window));
            QVERIFY2(
                statusOf(window).contains(message) && statusOf(window).contains(QStringLiteral("default settings")),
                qPrintable(statusOf(window)));
            window.close();
        }
        const QFileInfo after(path);
        QCOMPARE(after.isSymLink(), before.isSymLink());
        QCOMPARE(after.isDir(), before.isDir());
        QCOMPARE(after.size(), before.size());
        QCOMPARE(after.lastModified(), before.lastModified());
        QCOMPARE(QDir(folder).entryList(QDir::Files | QDir::Dirs | QDir::System | QDir::Hidden | QDir::NoDotAndDotDot),
                 QStringList{QStringLiteral("tessera.conf")});  // no temporary file left beside it
    }

    void usableSettingsFileIsReadAndWrittenWhole() {
        const QString folder = freshFolder(), path = folder + QStringLiteral("/Tessera/tessera.conf");
        {
            // As an earlier Tessera (QSettings itself) wrote it.
            QSettings earlier(path, QSettings::IniFormat);
            earlier.setValue(QStringLiteral("models/folder"), folder);
            earlier.setValue(QStringLiteral("unknown/key"), QStringLiteral("kept"));
        }
        {
            MainWindow window(std::make_unique<SettingsFile>(path), folder + QStringLiteral("/history"));
            QCOMPARE(window.configPanel()->modelsFolder(), folder);
            RunConfig config = window.configPanel()->config();
            config.seed = 4242;
            window.configPanel()->setConfig(config);
            window.close();
        }
        const QSettings saved(path, QSettings::IniFormat);
        QCOMPARE(saved.value(QStringLiteral("unknown/key")).toString(), QStringLiteral("kept"));
        QCOMPARE(saved.value(QStringLiteral("models/folder")).toString(), folder);
        QVERIFY(saved.contains(QStringLiteral("window/geometry")));
        // Written whole: the file and nothing else beside it (no temporary, no lock file).
        QCOMPARE(QDir(QFileInfo(path).absolutePath()).entryList(QDir::Files | QDir::Hidden | QDir::System),
                 QStringList{QStringLiteral("tessera.conf")});
        MainWindow again(std::make_unique<SettingsFile>(path), folder + QStringLiteral("/history"));
        QCOMPARE(again.configPanel()->config().seed, std::uint64_t{4242});
    }
};

QTEST_MAIN(TestSettingsFile)
#include "tst_settingsfile.moc"
