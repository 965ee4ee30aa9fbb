// OutputSet and the fatal signals (SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGPIPE) at every step of
// a render's final write: image (kept if the set cannot complete), timings, manifest last. Each
// case runs in a forked child that raises the signal at one step (OutputSet's step observer,
// or between two adds) and must end by that signal; the parent then finds the complete set or
// only the kept image, never a temporary file, and for a kept image a line on stderr naming it.
#include <QtTest>

#include <QDir>
#include <QFile>
#include <QTemporaryDir>

#include <csignal>
#include <filesystem>
#include <string>
#include <thread>

#include <fcntl.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/run/OutputSet.h"

using namespace tessera;
using WriteStep = OutputSet::WriteStep;

namespace {

constexpr int kFatalSignals[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGPIPE};

const std::string kImage = std::string("\x89PNG\r\n\x1a\n", 8) + std::string(70000, 'i');
const std::string kTimings(20000, 't');
const std::string kManifest = "{\"schema_version\": 1}\n";

QStringList entries(const QString& dir) {
    return QDir(dir).entryList(QDir::AllEntries | QDir::Hidden | QDir::System | QDir::NoDotAndDotDot, QDir::Name);
}

QByteArray readAll(const QString& path) {
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) return {};
    return f.readAll();
}

// Where a signal is raised: at `step` of the file named `file` ("" for FoldersSyncing), or,
// with `afterAdd`, right after the add of `file` returned (no operation under way then).
struct Moment {
    const char* label;
    WriteStep step;
    const char* file;
    bool afterAdd;
    bool completes;  // what the folder then holds: the whole set, or only the kept image
};

const Moment kMoments[] = {
    {"png written", WriteStep::TemporaryWritten, "run.png", false, false},
    {"png synced", WriteStep::TemporarySynced, "run.png", false, false},
    {"after png", WriteStep::TemporaryWritten, "run.png", true, false},
    {"csv written", WriteStep::TemporaryWritten, "run.csv", false, false},
    {"csv synced", WriteStep::TemporarySynced, "run.csv", false, false},
    {"after csv", WriteStep::TemporaryWritten, "run.csv", true, false},
    {"json written", WriteStep::TemporaryWritten, "run.json", false, false},
    {"json synced", WriteStep::TemporarySynced, "run.json", false, false},
    {"after json", WriteStep::TemporaryWritten, "run.json", true, false},
    {"png renaming", WriteStep::Renaming, "run.png", false, true},
    {"png renamed", WriteStep::Renamed, "run.png", false, true},
    {"csv renaming", WriteStep::Renaming, "run.csv", false, true},
    {"csv renamed", WriteStep::Renamed, "run.csv", false, true},
    {"json renaming", WriteStep::Renaming, "run.json", false, true},
    {"json renamed", WriteStep::Renamed, "run.json", false, true},
    {"folders syncing", WriteStep::FoldersSyncing, "", false, true},
};

enum class Delivery {
    ToTheWriter,       // raise(): the writing thread takes it
    ToAnotherThread,   // kill(getpid()): the writer blocks it, another thread takes it meanwhile
    TwoSignalsInARow,  // raise(signal) and raise(SIGHUP): the lower number ends the process
};

// The render's set written in a forked child with stderr in `errFile`; `signal` raised at `moment`.
// Returns the child's wait status.
int writeInChild(const std::string& folder, const std::string& errFile, int signal, const Moment& moment,
                 Delivery delivery) {
    const pid_t pid = ::fork();
    if (pid != 0) {
        int status = 0;
        ::waitpid(pid, &status, 0);
        return status;
    }
    // Only async-signal-safe work until the set begins; the child never returns into QtTest.
    const int err = ::open(errFile.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (err >= 0) ::dup2(err, STDERR_FILENO);
    for (int s : kFatalSignals) std::signal(s, SIG_DFL);  // a plain process, not QtTest's handlers
    const struct rlimit noCore {};
    ::setrlimit(RLIMIT_CORE, &noCore);  // SIGQUIT dumps no core here
    if (delivery == Delivery::ToAnotherThread) {
        sigset_t fatal;
        sigemptyset(&fatal);
        for (int s : kFatalSignals) sigaddset(&fatal, s);
        std::thread([] {
            for (;;) ::pause();
        }).detach();
        ::pthread_sigmask(SIG_BLOCK, &fatal, nullptr);  // only the other thread can take them
    }
    const auto strike = [signal, delivery] {
        if (delivery == Delivery::ToAnotherThread) {
            ::kill(::getpid(), signal);
            ::usleep(20000);  // lets the other thread take it while this one writes
        } else {
            ::raise(signal);
            if (delivery == Delivery::TwoSignalsInARow) ::raise(SIGHUP);
        }
    };
    try {
        OutputSet set;
        set.setStepObserver([&moment, &strike](WriteStep step, const std::filesystem::path& target) {
            if (!moment.afterAdd && step == moment.step && target.filename() == moment.file) strike();
        });
        const auto added = [&moment, &strike](const char* name) {
            if (moment.afterAdd && std::string(name) == moment.file) strike();
        };
        set.add(folder + "/run.png", kImage, OutputSet::IfIncomplete::Keep);
        added("run.png");
        set.addText(folder + "/run.csv", kTimings);
        added("run.csv");
        set.addText(folder + "/run.json", kManifest);
        added("run.json");
        set.commit();
    } catch (...) {
        ::_exit(3);
    }
    ::_exit(0);  // the signal was lost: the parent sees exit 0
}

QString describeStatus(int status) {
    if (WIFSIGNALED(status)) return QStringLiteral("ended by signal %1").arg(WTERMSIG(status));
    return QStringLiteral("exited with %1").arg(WEXITSTATUS(status));
}

}  // namespace

class TestOutputSignals : public QObject {
    Q_OBJECT

    // Checks one case: the exit status names `expected`, the folder holds the whole set or only
    // the kept image, and stderr names the kept image exactly when there is one.
    static void check(int signal, const Moment& moment, Delivery delivery, int expected) {
        QTemporaryDir dir, logs;
        QVERIFY(dir.isValid() && logs.isValid());
        const std::string folder = dir.path().toStdString();
        const QString errFile = logs.filePath("stderr");
        const int status = writeInChild(folder, errFile.toStdString(), signal, moment, delivery);
        QVERIFY2(WIFSIGNALED(status) && WTERMSIG(status) == expected, qPrintable(describeStatus(status)));
        const QStringList left = entries(dir.path());
        const QString err = QString::fromUtf8(readAll(errFile));
        if (moment.completes) {
            QCOMPARE(left, (QStringList{"run.csv", "run.json", "run.png"}));
            QCOMPARE(readAll(dir.filePath("run.png")), QByteArray::fromStdString(kImage));
            QCOMPARE(readAll(dir.filePath("run.csv")), QByteArray::fromStdString(kTimings));
            QCOMPARE(readAll(dir.filePath("run.json")), QByteArray::fromStdString(kManifest));
            QVERIFY2(err.isEmpty(), qPrintable(err));
        } else {
            QCOMPARE(left, QStringList{"run.incomplete.png"});
            QCOMPARE(readAll(dir.filePath("run.incomplete.png")), QByteArray::fromStdString(kImage));
            const QString name = QString::fromUtf8(::sigabbrev_np(expected));
            QVERIFY2(err.contains(": SIG" + name +
                                  " while writing output files: the set is incomplete; its finished "
                                  "'run.png' is kept as '" +
                                  dir.filePath("run.incomplete.png") + "', the rest was removed\n"),
                     qPrintable(err));
        }
    }

private slots:
    void signalAtEachStep_data() {
        QTest::addColumn<int>("signal");
        QTest::addColumn<int>("moment");
        for (int signal : kFatalSignals)
            for (int m = 0; m < int(std::size(kMoments)); ++m)
                QTest::addRow("%s, %s", ::sigabbrev_np(signal), kMoments[m].label) << signal << m;
    }
    void signalAtEachStep() {
        QFETCH(int, signal);
        QFETCH(int, moment);
        check(signal, kMoments[moment], Delivery::ToTheWriter, signal);
    }

    // A process-directed signal goes to any thread that does not block it: taken by another
    // thread while this one writes, it still waits for the operation under way.
    void signalTakenByAnotherThread_data() {
        QTest::addColumn<int>("signal");
        QTest::addColumn<int>("moment");
        for (int signal : kFatalSignals)
            for (int m : {4, 11})  // csv synced (an add), csv renaming (the commit)
                QTest::addRow("%s, %s", ::sigabbrev_np(signal), kMoments[m].label) << signal << m;
    }
    void signalTakenByAnotherThread() {
        QFETCH(int, signal);
        QFETCH(int, moment);
        check(signal, kMoments[moment], Delivery::ToAnotherThread, signal);
    }

    // Two signals held together: both are passed on, the lower-numbered first.
    void twoSignalsDuringTheCommit() {
        check(SIGTERM, kMoments[11], Delivery::TwoSignalsInARow, SIGHUP);
        check(SIGTERM, kMoments[4], Delivery::TwoSignalsInARow, SIGHUP);
    }
};

QTEST_GUILESS_MAIN(TestOutputSignals)
#include "tst_outputsignals.moc"
