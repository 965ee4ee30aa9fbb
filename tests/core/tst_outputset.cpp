// OutputSet: files appear as a whole set or not at all — on commit, failure, destruction,
// a full disk (a small tmpfs where mounting works here; the file size limit always), a
// read-only folder and SIGINT/SIGTERM (every fatal signal at every step: tst_outputsignals) —
// a finished image marked to keep survives as "<stem>.incomplete<ext>", stale temporary files
// of killed writers are swept, and the output folder check made before any work.
// Mounts happen in forked children inside their own mount namespace, so nothing outlives them.
#include <QtTest>

#include <QDir>
#include <QFile>
#include <QRegularExpression>
#include <QTemporaryDir>

#include <atomic>
#include <csignal>
#include <ctime>
#include <functional>
#include <string>

#include <fcntl.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/base/BoundedInput.h"
#include "core/run/OutputSet.h"
#include "core/run/RunConfig.h"

using namespace tessera;

namespace {

QByteArray readAll(const QString& path) {
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) return {};
    return f.readAll();
}

QStringList entries(const QString& dir) {
    return QDir(dir).entryList(QDir::AllEntries | QDir::Hidden | QDir::System | QDir::NoDotAndDotDot, QDir::Name);
}

std::string path(const QTemporaryDir& dir, const char* name) { return dir.filePath(name).toStdString(); }

// A forked child: `body` runs there and reports through report(); the child then _exits, so a
// mount made in its own namespace, a changed rlimit or signal disposition never reach the tests.
int g_reportFd = -1;
void report(const std::string& text) {
    if (g_reportFd >= 0) (void)!::write(g_reportFd, text.data(), text.size());
}

struct Child {
    bool exited = false;
    int exitCode = -1;
    int signal = 0;
    QString report;
};

Child inChild(const std::function<void()>& body) {
    int fds[2];
    if (::pipe(fds) != 0) qFatal("pipe failed");
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::close(fds[0]);
        g_reportFd = fds[1];
        // A plain process: QtTest's crash handlers are not part of what is tested.
        std::signal(SIGINT, SIG_DFL);
        std::signal(SIGTERM, SIG_DFL);
        try {
            body();
        } catch (const std::exception& e) {
            report(std::string("exception: ") + e.what());
        }
        ::_exit(0);
    }
    ::close(fds[1]);
    std::string text;
    char buffer[4096];
    for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) > 0;) text.append(buffer, static_cast<std::size_t>(n));
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    Child child;
    child.exited = WIFEXITED(status);
    child.exitCode = child.exited ? WEXITSTATUS(status) : -1;
    child.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    child.report = QString::fromStdString(text);
    return child;
}

// In a child: a private mount namespace with a tmpfs of `size` at `dir`. Reports "SKIP: ..."
// and returns false where this machine does not allow it.
bool mountTmpfs(const std::string& dir, const char* options, unsigned long flags = 0) {
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", dir.c_str(), "tmpfs", flags, options) != 0) {
        report(std::string("SKIP: cannot mount a tmpfs here: ") + std::strerror(errno));
        return false;
    }
    return true;
}

#define SKIP_IF_CHILD_SKIPPED(child) \
    if ((child).report.startsWith("SKIP: ")) QSKIP(qPrintable((child).report))

std::string blob(std::size_t bytes) { return std::string(bytes, 'x'); }

// The message of the ValidationError `check` throws, and its field ("" when none is thrown).
std::pair<std::string, std::string> validationOf(const std::function<void()>& check) {
    try {
        check();
    } catch (const ValidationError& e) {
        return {e.field(), e.what()};
    }
    return {};
}

// A file `name` in `dir` holding "x", last written `ageSeconds` ago.
void makeAged(const QString& dir, const QString& name, int ageSeconds) {
    QFile f(dir + "/" + name);
    if (!f.open(QIODevice::WriteOnly) || f.write("x") != 1) qFatal("cannot create %s", qPrintable(name));
    f.close();
    const struct timespec times[2] = {{std::time(nullptr) - ageSeconds, 0}, {std::time(nullptr) - ageSeconds, 0}};
    ::utimensat(AT_FDCWD, (dir + "/" + name).toLocal8Bit().constData(), times, AT_SYMLINK_NOFOLLOW);
}

struct sigaction currentAction(int signal) {
    struct sigaction action {};
    ::sigaction(signal, nullptr, &action);
    return action;
}

}  // namespace

class TestOutputSet : public QObject {
    Q_OBJECT

private slots:
    void setAppearsOnlyOnCommit() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        OutputSet set;
        set.add(path(dir, "run.png"), std::string("\x89PNG\0bytes", 10));
        set.addText(path(dir, "run.csv"), "a,b\n");
        set.addText(path(dir, "run.json"), "{}\n");
        QCOMPARE(set.size(), std::size_t(3));
        // Before commit: only temporary files, none under a target's name.
        const QStringList staged = entries(dir.path());
        QCOMPARE(staged.size(), 3);
        for (const QString& name : staged)
            QVERIFY2(QRegularExpression("^run\\.(png|csv|json)\\.tmp-[0-9a-f]{8}$").match(name).hasMatch(),
                     qPrintable(name));
        set.commit();
        QCOMPARE(entries(dir.path()), (QStringList{"run.csv", "run.json", "run.png"}));
        QCOMPARE(readAll(dir.filePath("run.png")), QByteArray("\x89PNG\0bytes", 10));
        QCOMPARE(readAll(dir.filePath("run.csv")), QByteArray("a,b\n"));
        // Files already there are replaced whole.
        writeFileAtomically(path(dir, "run.csv"), "new");
        QCOMPARE(readAll(dir.filePath("run.csv")), QByteArray("new"));
        QCOMPARE(entries(dir.path()).size(), 3);
    }

    // The renames happen in the order of add: the manifest, added last, appears last.
    void renamesInOrderManifestLast() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const int watch = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        QVERIFY(watch >= 0);
        QVERIFY(::inotify_add_watch(watch, dir.path().toLocal8Bit().constData(), IN_MOVED_TO) >= 0);
        OutputSet set;
        for (const char* name : {"b.png", "c.csv", "a.json"}) set.add(path(dir, name), "x");
        set.commit();
        alignas(inotify_event) char buffer[4096];
        const ssize_t n = ::read(watch, buffer, sizeof buffer);
        ::close(watch);
        QStringList order;
        for (ssize_t at = 0; at < n;) {
            const auto* event = reinterpret_cast<const inotify_event*>(buffer + at);
            order << QString::fromUtf8(event->name);
            at += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
        }
        QCOMPARE(order, (QStringList{"b.png", "c.csv", "a.json"}));
    }

    void uncommittedSetLeavesNothing() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        QVERIFY(QDir(dir.path()).mkdir("existing"));
        {
            OutputSet set;
            set.createFolders(path(dir, "new/deeper"));
            set.createFolders(path(dir, "existing"));
            set.add(path(dir, "new/deeper/a.png"), "x");
            set.add(path(dir, "existing/b.json"), "y");
            QVERIFY(QFileInfo(dir.filePath("new/deeper")).isDir());
        }                                                        // destroyed without commit
        QCOMPARE(entries(dir.path()), QStringList{"existing"});  // created folders gone, the old one kept
        QVERIFY(entries(dir.filePath("existing")).isEmpty());
        // Committed: the created folders stay.
        OutputSet set;
        set.createFolders(path(dir, "new/deeper"));
        set.add(path(dir, "new/deeper/a.png"), "x");
        set.commit();
        QCOMPARE(readAll(dir.filePath("new/deeper/a.png")), QByteArray("x"));
    }

    void failedAddRemovesTheWholeSet() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        OutputSet set;
        set.add(path(dir, "a.png"), "x");
        set.add(path(dir, "a.csv"), "y");
        const std::string missing = path(dir, "no/such/a.json");
        try {
            set.add(missing, "z");
            QFAIL("adding into a missing folder succeeded");
        } catch (const OutputError& e) {
            QVERIFY2(QString(e.what()).contains(QString::fromStdString(missing)), e.what());
            QVERIFY2(QString(e.what()).contains("No such file or directory"), e.what());
        }
        QVERIFY(entries(dir.path()).isEmpty());
        QVERIFY_THROWS_EXCEPTION(OutputError, set.commit());  // a discarded set stays discarded
        QVERIFY(entries(dir.path()).isEmpty());
        QVERIFY_THROWS_EXCEPTION(OutputError, OutputSet().add(path(dir, ".."), "x"));
        QVERIFY_THROWS_EXCEPTION(OutputError, OutputSet().add(path(dir, "") + std::string(250, 'n'), "x"));
    }

    // A rename that fails half-way (the second target is a non-empty folder): the first file,
    // already renamed, is removed again; what was there before is left alone.
    void failedRenameRemovesTheWholeSet() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        QVERIFY(QDir(dir.path()).mkpath("busy.json/inside"));
        OutputSet set;
        set.add(path(dir, "run.png"), "x");
        set.add(path(dir, "busy.json"), "y");
        set.add(path(dir, "run.csv"), "z");
        try {
            set.commit();
            QFAIL("renaming over a non-empty folder succeeded");
        } catch (const OutputError& e) {
            QVERIFY2(QString(e.what()).contains("busy.json"), e.what());
            QVERIFY2(QString(e.what()).contains("nothing of this output set was kept"), e.what());
        }
        QCOMPARE(entries(dir.path()), QStringList{"busy.json"});
        QCOMPARE(entries(dir.filePath("busy.json")), QStringList{"inside"});
    }

    // A finished image marked IfIncomplete::Keep survives a set that cannot complete, under a
    // name that says so, and the error says where: a later file over the file size limit.
    void keptImageWhenALaterFileFails() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const std::string folder = dir.path().toStdString();
        const Child child = inChild([&] {
            std::signal(SIGXFSZ, SIG_IGN);
            const struct rlimit limit { 64 * 1024, RLIM_INFINITY };
            ::setrlimit(RLIMIT_FSIZE, &limit);
            OutputSet set;
            set.add(folder + "/run.png", blob(10000), OutputSet::IfIncomplete::Keep);
            try {
                set.addText(folder + "/run.csv", blob(100 * 1024));
                report("no error");
            } catch (const OutputError& e) {
                report(std::string(e.what()) + "\nkept: " + set.keptFiles().at(0).string());
            }
        });
        QCOMPARE(child.report, "cannot write '" + dir.filePath("run.csv") +
                                   "': File too large (the file needs 100.0 KiB (102400 bytes); the file size "
                                   "limit, ulimit -f, is 64.0 KiB (65536 bytes)); this output set is incomplete: its "
                                   "finished 'run.png' was kept as '" +
                                   dir.filePath("run.incomplete.png") +
                                   "'; nothing else of it was kept\nkept: " + dir.filePath("run.incomplete.png"));
        QCOMPARE(entries(dir.path()), QStringList{"run.incomplete.png"});
        QCOMPARE(readAll(dir.filePath("run.incomplete.png")).size(), 10000);
        // The image itself not written whole: nothing to keep.
        const Child whole = inChild([&] {
            std::signal(SIGXFSZ, SIG_IGN);
            const struct rlimit limit { 64 * 1024, RLIM_INFINITY };
            ::setrlimit(RLIMIT_FSIZE, &limit);
            OutputSet set;
            try {
                set.add(folder + "/big.png", blob(100 * 1024), OutputSet::IfIncomplete::Keep);
            } catch (const OutputError& e) {
                report(e.what());
            }
        });
        QVERIFY2(whole.report.endsWith("; nothing of this output set was kept"), qPrintable(whole.report));
        QCOMPARE(entries(dir.path()), QStringList{"run.incomplete.png"});
    }

    // A rename that fails after the image is in place: the image moves to its incomplete name.
    void keptImageWhenARenameFails() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        QVERIFY(QDir(dir.path()).mkpath("run.json/inside"));
        OutputSet set;
        set.add(path(dir, "run.png"), "image", OutputSet::IfIncomplete::Keep);
        set.add(path(dir, "run.csv"), "timings");
        set.add(path(dir, "run.json"), "manifest");
        try {
            set.commit();
            QFAIL("renaming over a non-empty folder succeeded");
        } catch (const OutputError& e) {
            QVERIFY2(QString(e.what()).contains("its finished 'run.png' was kept as '" +
                                                dir.filePath("run.incomplete.png") + "'"),
                     e.what());
        }
        QCOMPARE(entries(dir.path()), (QStringList{"run.incomplete.png", "run.json"}));
        QCOMPARE(readAll(dir.filePath("run.incomplete.png")), QByteArray("image"));
        // Dropped without commit: kept too; a file not marked is not.
        {
            OutputSet dropped;
            dropped.add(path(dir, "b.png"), "image b", OutputSet::IfIncomplete::Keep);
            dropped.add(path(dir, "b.csv"), "timings");
        }
        QCOMPARE(entries(dir.path()), (QStringList{"b.incomplete.png", "run.incomplete.png", "run.json"}));
        QCOMPARE(OutputSet::incompletePath("/a/x.tar.gz").string(), std::string("/a/x.tar.incomplete.gz"));
        QCOMPARE(OutputSet::incompletePath("noext").string(), std::string("noext.incomplete"));
    }

    // Temporary files of a killed writer (exactly "<name>.tmp-" and eight lowercase hex digits,
    // unlocked, older than kStaleTemporarySeconds) are removed by the next set written into
    // their folder; files of other names, young ones and those a live writer locks are not.
    void staleTemporariesAreSwept() {
        QTemporaryDir dir, elsewhere;
        QVERIFY(dir.isValid() && elsewhere.isValid());
        const QString d = dir.path();
        const int old = OutputSet::kStaleTemporarySeconds + 60;
        const QStringList stale{"old.png.tmp-0123abcd", "a.json.tmp-89abcdef", ".tessera-probe.tmp-00ff00ff"};
        const QStringList similar{"old.png.tmp-0123abc",  "old.png.tmp-0123abcde", "old.png.tmp-0123ABCD",
                                  "old.png.tmp-0123abcg", "old.png.tmp_0123abcd",  ".tmp-0123abcd",
                                  "old.png.TMP-0123abcd", "old.png.tmp-0123abcd~", "old.png.tmp-0123abcd.bak",
                                  "old.png.tmp--123abcd", "old.incomplete.png",    "target"};
        for (const QString& name : stale + similar) makeAged(d, name, old);
        makeAged(d, "young.png.tmp-00000000", 5);
        QVERIFY(QDir(d).mkdir("folder.tmp-11111111"));
        QVERIFY(QFile::link(d + "/target", d + "/link.tmp-22222222"));
        makeAged(d, "locked.png.tmp-33333333", old);
        QVERIFY(OutputSet::isTemporaryName("old.png.tmp-0123abcd"));
        for (const QString& name : similar) QVERIFY2(!OutputSet::isTemporaryName(name.toStdString()), qPrintable(name));

        // A live writer (another process) holds its lock until told to go, or until this
        // process ends (a failed check returns early: the guard then lets it go).
        int toChild[2], fromChild[2];
        QVERIFY(::pipe2(toChild, O_CLOEXEC) == 0 && ::pipe2(fromChild, O_CLOEXEC) == 0);
        const pid_t holder = ::fork();
        if (holder == 0) {
            ::close(toChild[1]);
            ::close(fromChild[0]);
            const int fd = ::open((d + "/locked.png.tmp-33333333").toLocal8Bit().constData(), O_RDONLY | O_CLOEXEC);
            const bool locked = fd >= 0 && ::flock(fd, LOCK_EX) == 0;
            (void)!::write(fromChild[1], locked ? "L" : "-", 1);
            char go = 0;
            (void)!::read(toChild[0], &go, 1);
            ::_exit(0);
        }
        ::close(toChild[0]);
        ::close(fromChild[1]);
        bool holderGone = false;
        const auto letHolderGo = [&] {
            if (holderGone) return;
            ::close(toChild[1]);
            ::close(fromChild[0]);
            ::waitpid(holder, nullptr, 0);
            holderGone = true;
        };
        const auto guard = qScopeGuard(letHolderGo);
        char state = 0;
        QCOMPARE(::read(fromChild[0], &state, 1), ssize_t(1));
        QCOMPARE(state, 'L');

        writeFileAtomically(elsewhere.filePath("other.json").toStdString(), "{}");  // another folder: no sweep here
        QCOMPARE(entries(d).size(), stale.size() + similar.size() + 4);
        OutputSet set;
        set.add(path(dir, "new.png"), "x");
        QStringList expected = similar + QStringList{"young.png.tmp-00000000", "folder.tmp-11111111",
                                                     "link.tmp-22222222", "locked.png.tmp-33333333"};
        QStringList now = entries(d);
        QCOMPARE(now.filter(QRegularExpression("^new\\.png\\.tmp-[0-9a-f]{8}$")).size(), 1);
        now.removeIf([](const QString& name) { return name.startsWith("new.png."); });
        expected.sort();
        QCOMPARE(now, expected);
        set.commit();
        QCOMPARE(readAll(d + "/target"), QByteArray("x"));  // the link's target untouched

        // The writer is gone: its file goes with the next set.
        letHolderGo();
        writeFileAtomically(path(dir, "next.json"), "{}");
        QVERIFY(!QFileInfo::exists(d + "/locked.png.tmp-33333333"));
        QVERIFY(QFileInfo::exists(d + "/young.png.tmp-00000000"));
    }

    void textIsStoredAsValidUtf8() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        OutputSet set;
        set.addText(path(dir, "t.csv"), "label,caf\xE9\n");
        set.add(path(dir, "b.bin"), "caf\xE9");
        set.commit();
        QCOMPARE(readAll(dir.filePath("t.csv")), QByteArray("label,caf\\xE9\n"));
        QCOMPARE(readAll(dir.filePath("b.bin")), QByteArray("caf\xE9"));  // bytes stay bytes
        writeTextFileAtomically(path(dir, "t.csv"), "ok \xC3\xA9");
        QCOMPARE(readAll(dir.filePath("t.csv")), QByteArray("ok \xC3\xA9"));  // valid UTF-8 untouched
    }

    // A real full disk: a 64 KiB tmpfs. The message names the file and the bytes it needed;
    // nothing of the set remains.
    void diskFullOnTmpfs() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const std::string mount = dir.path().toStdString();
        const Child child = inChild([&] {
            if (!mountTmpfs(mount, "size=64k")) return;
            OutputSet set;
            set.add(mount + "/small.csv", blob(1000));
            try {
                set.add(mount + "/big.png", blob(200 * 1024));
                report("no error");
            } catch (const OutputError& e) {
                report(e.what());
            }
            report(QString("\nleft: %1").arg(entries(QString::fromStdString(mount)).join(',')).toStdString());
        });
        SKIP_IF_CHILD_SKIPPED(child);
        QVERIFY2(child.report.contains("big.png") && child.report.contains("No space left on device"),
                 qPrintable(child.report));
        QVERIFY2(child.report.contains("the file needs 200.0 KiB (204800 bytes)"), qPrintable(child.report));
        QVERIFY2(child.report.contains("was free"), qPrintable(child.report));
        QVERIFY2(child.report.endsWith("\nleft: "), qPrintable(child.report));
    }

    // The file size limit (ulimit -f) fails a write like a full disk (EFBIG); works everywhere.
    void fileSizeLimitIsReportedLikeAFullDisk() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const std::string folder = dir.path().toStdString();
        const Child child = inChild([&] {
            std::signal(SIGXFSZ, SIG_IGN);
            const struct rlimit limit { 64 * 1024, RLIM_INFINITY };
            ::setrlimit(RLIMIT_FSIZE, &limit);
            OutputSet set;
            set.add(folder + "/a.csv", blob(1000));
            try {
                set.add(folder + "/a.png", blob(100 * 1024));
                report("no error");
            } catch (const OutputError& e) {
                report(e.what());
            }
        });
        QVERIFY2(child.report.contains("a.png") && child.report.contains("File too large"), qPrintable(child.report));
        QVERIFY2(child.report.contains("the file needs 100.0 KiB (102400 bytes)"), qPrintable(child.report));
        QVERIFY2(child.report.contains("ulimit -f, is 64.0 KiB"), qPrintable(child.report));
        QVERIFY(entries(dir.path()).isEmpty());
    }

    // Root ignores permission bits, so a read-only folder is a read-only tmpfs mount (where
    // mounting works) or, everywhere, a path under a regular file.
    void readOnlyFolder() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const std::string mount = dir.path().toStdString();
        const Child child = inChild([&] {
            if (!mountTmpfs(mount, "size=64k", MS_RDONLY)) return;
            const auto [field, message] = validationOf([&] { checkOutputFolder(mount + "/sub", "out", {}); });
            report(field + "|" + message + "\n");
            try {
                writeFileAtomically(mount + "/x.json", "{}");
                report("no error");
            } catch (const OutputError& e) {
                report(e.what());
            }
        });
        SKIP_IF_CHILD_SKIPPED(child);
        const QStringList lines = child.report.split('\n');
        QCOMPARE(lines.size(), 2);
        QVERIFY2(lines[0].startsWith("out|out: '" + dir.path() + "/sub': no file can be created in '" + dir.path() +
                                     "' (where the folder would be created): Read-only file system"),
                 qPrintable(lines[0]));
        QVERIFY2(lines[1].contains("x.json") && lines[1].contains("Read-only file system"), qPrintable(lines[1]));
    }

    void checkBeforeWork() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const QStringList before = entries(dir.path());
        // A folder that does not exist yet is fine (created when writing) and is not created now.
        QCOMPARE(validationOf([&] {
                     checkOutputFolder(path(dir, "new/deeper"), "out", {1024, 1024, {}});
                 }).first,
                 std::string());
        QCOMPARE(validationOf([&] { checkOutputFolder("", "out", {}); }).first, std::string());  // "" is "."
        QCOMPARE(entries(dir.path()), before);  // the probe left nothing
        // A path under a regular file.
        QFile file(dir.filePath("file"));
        QVERIFY(file.open(QIODevice::WriteOnly));
        file.close();
        auto [field, message] = validationOf([&] { checkOutputFolder(path(dir, "file/sub"), "out", {}); });
        QCOMPARE(field, std::string("out"));
        QCOMPARE(message, "out: '" + path(dir, "file/sub") + "': '" + path(dir, "file") + "' is a file, not a folder");
        std::tie(field, message) = validationOf([&] { checkOutputFolder(path(dir, "file"), "out", {}); });
        QCOMPARE(message, "out: '" + path(dir, "file") + "': it is a file, not a folder");
        // More than is free: says what is free and what was needed.
        const OutputNeeds huge{std::uintmax_t(1) << 60, 1024, "image up to 1 EiB"};
        std::tie(field, message) = validationOf([&] { checkOutputFolder(dir.path().toStdString(), "out", huge); });
        QCOMPARE(field, std::string("out"));
        QVERIFY2(QRegularExpression(" free in it; these outputs need about 1024\\.0 PiB \\(1152921504606846976 "
                                    "bytes\\) \\(image up to 1 EiB\\)$")
                     .match(QString::fromStdString(message))
                     .hasMatch(),
                 message.c_str());
        // A path longer than any the system takes.
        std::tie(field, message) = validationOf([&] { checkOutputFolder(std::string(5000, 'a'), "out", {}); });
        QVERIFY2(QString::fromStdString(message).contains("5000 characters long; at most 4096"), message.c_str());
        // Output files: the folder must exist, the name must not be a folder.
        std::tie(field, message) = validationOf([&] { checkOutputFile(dir.path().toStdString(), "csv", {}); });
        QCOMPARE(field, std::string("csv"));
        QVERIFY2(QString::fromStdString(message).endsWith("it is a folder; a file name is needed"), message.c_str());
        std::tie(field, message) = validationOf([&] { checkOutputFile(path(dir, "none/x.csv"), "json", {}); });
        QCOMPARE(field, std::string("json"));
        QCOMPARE(message, "json: cannot write '" + path(dir, "none/x.csv") + "': its folder '" + path(dir, "none") +
                              "' cannot be used: No such file or directory");
        std::tie(field, message) = validationOf([&] { checkOutputFile(path(dir, "x.csv"), "csv", huge); });
        QVERIFY2(QString::fromStdString(message).startsWith(
                     QString::fromStdString("csv: cannot write '" + path(dir, "x.csv") + "': ")) &&
                     QString::fromStdString(message).contains(QString::fromStdString(
                         " free in its folder '" + dir.path().toStdString() + "'; these outputs need about")),
                 message.c_str());
        QCOMPARE(validationOf([&] { checkOutputFile(path(dir, "x.csv"), "csv", {}); }).first, std::string());
        // Names are quoted as short escaped excerpts.
        std::tie(field, message) =
            validationOf([&] { checkOutputFolder(dir.path().toStdString() + "/file/caf\xE9", "out", {}); });
        QVERIFY2(isValidUtf8(message) && QString::fromStdString(message).contains("caf\\xE9"), message.c_str());
    }

    void checkSeesTheFileSizeLimit() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const std::string folder = dir.path().toStdString();
        const Child child = inChild([&] {
            const struct rlimit limit { 16 * 1024, RLIM_INFINITY };
            ::setrlimit(RLIMIT_FSIZE, &limit);
            report(validationOf([&] {
                       checkOutputFolder(folder, "out", {40000, 32768, "image up to 32 KiB"});
                   }).second);
        });
        QCOMPARE(child.report, "out: '" + dir.path() +
                                   "': the file size limit (ulimit -f) is 16.0 KiB (16384 bytes); "
                                   "the largest output file needs about 32.0 KiB (32768 bytes) (image up to 32 KiB)");
    }

    // SIGINT/SIGTERM while a set is being written: its files are removed, then the signal's
    // default action ends the process.
    void signalRemovesTheSet_data() {
        QTest::addColumn<int>("signal");
        QTest::newRow("SIGINT") << int(SIGINT);
        QTest::newRow("SIGTERM") << int(SIGTERM);
    }
    void signalRemovesTheSet() {
        QFETCH(int, signal);
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const std::string folder = dir.path().toStdString();
        const Child child = inChild([&] {
            OutputSet set;
            set.add(folder + "/run.png", blob(8 << 20));
            set.add(folder + "/run.json", "{}");
            ::raise(signal);
            report("survived");
        });
        QCOMPARE(child.signal, signal);
        QVERIFY2(child.report.isEmpty(), qPrintable(child.report));
        QVERIFY(entries(dir.path()).isEmpty());
    }

    // Signals at any moment of a set's life leave the whole set or nothing, never temporary files.
    void signalAtAnyMomentLeavesAllOrNothing() {
        QStringList outcomes;
        for (int delayMs : {0, 10, 40, 80, 120, 160, 240, 400}) {
            QTemporaryDir dir;
            QVERIFY(dir.isValid());
            const std::string folder = dir.path().toStdString();
            int fds[2];
            QVERIFY(::pipe(fds) == 0);
            const pid_t pid = ::fork();
            if (pid == 0) {
                ::close(fds[0]);
                std::signal(SIGTERM, SIG_DFL);
                OutputSet set;
                (void)!::write(fds[1], "s", 1);  // handlers are in place
                for (const char* name : {"/a.png", "/a.csv", "/a.json"}) set.add(folder + name, blob(6 << 20));
                set.commit();
                ::_exit(0);
            }
            ::close(fds[1]);
            char started = 0;
            QCOMPARE(::read(fds[0], &started, 1), ssize_t(1));
            ::close(fds[0]);
            QTest::qSleep(delayMs);
            ::kill(pid, SIGTERM);
            int status = 0;
            ::waitpid(pid, &status, 0);
            const QStringList left = entries(dir.path());
            const bool whole = left == QStringList{"a.csv", "a.json", "a.png"};
            QVERIFY2(left.isEmpty() || whole, qPrintable(QString("after %1 ms: %2").arg(delayMs).arg(left.join(','))));
            if (whole)
                for (const QString& name : left) QCOMPARE(QFileInfo(dir.filePath(name)).size(), qint64(6 << 20));
            if (!whole) QVERIFY(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
            outcomes << QString("%1 ms: %2").arg(delayMs).arg(whole ? "whole set" : "nothing");
        }
        qInfo("%s", qPrintable(outcomes.join(", ")));
    }

    // An ignored signal (nohup) stays ignored: the set is written.
    void ignoredSignalStaysIgnored() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const std::string folder = dir.path().toStdString();
        const Child child = inChild([&] {
            std::signal(SIGINT, SIG_IGN);
            OutputSet set;
            set.add(folder + "/a.json", "{}");
            ::raise(SIGINT);
            set.commit();
            report("committed");
        });
        QCOMPARE(child.report, QString("committed"));
        QCOMPARE(entries(dir.path()), QStringList{"a.json"});
    }

    // A handler that was there before runs after the set's files are removed; the process goes
    // on, and the set refuses to go on.
    void earlierHandlerRunsAndTheSetStops() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const std::string folder = dir.path().toStdString();
        static std::atomic<int> calls{0};
        const Child child = inChild([&] {
            std::signal(SIGTERM, [](int) { calls.fetch_add(1); });
            OutputSet set;
            set.add(folder + "/a.png", "x");
            ::raise(SIGTERM);
            report("handler calls " + std::to_string(calls.load()) + ", left " +
                   std::to_string(entries(QString::fromStdString(folder)).size()) + "\n");
            try {
                set.add(folder + "/a.json", "{}");
                report("added");
            } catch (const OutputError& e) {
                report(e.what());
            }
            report(std::string("\nafter: ") +
                   (currentAction(SIGTERM).sa_handler == SIG_DFL ? "default" : "the earlier handler"));
        });
        QCOMPARE(child.report, QString("handler calls 1, left 0\n"
                                       "writing was interrupted by a signal; nothing of this output set was kept\n"
                                       "after: the earlier handler"));
        QVERIFY(entries(dir.path()).isEmpty());
    }

    // The handlers are in place only while a set is alive; then whatever was there is back
    // (here QtTest's own crash handlers, or the default action).
    void handlersOnlyWhileASetIsAlive() {
        const auto handlerOf = [](int signal) {
            const struct sigaction action = currentAction(signal);
            return (action.sa_flags & SA_SIGINFO) ? reinterpret_cast<void*>(action.sa_sigaction)
                                                  : reinterpret_cast<void*>(action.sa_handler);
        };
        const int fatal[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGPIPE};
        void* before[5] = {};
        for (int i = 0; i < 5; ++i) before[i] = handlerOf(fatal[i]);
        QVERIFY(before[1] != reinterpret_cast<void*>(SIG_IGN));
        {
            OutputSet first;
            void* const ours = handlerOf(SIGINT);
            QVERIFY(ours != before[1]);
            for (int i = 0; i < 5; ++i)
                QCOMPARE(handlerOf(fatal[i]), before[i] == reinterpret_cast<void*>(SIG_IGN) ? before[i] : ours);
            {
                OutputSet second;
                QCOMPARE(handlerOf(SIGINT), ours);
            }
            QCOMPARE(handlerOf(SIGINT), ours);  // still one set alive
        }
        for (int i = 0; i < 5; ++i) QCOMPARE(handlerOf(fatal[i]), before[i]);
    }

    void byteCounts() {
        QCOMPARE(byteCountText(0), std::string("0 bytes"));
        QCOMPARE(byteCountText(1), std::string("1 byte"));
        QCOMPARE(byteCountText(1023), std::string("1023 bytes"));
        QCOMPARE(byteCountText(1536), std::string("1.5 KiB (1536 bytes)"));
        QCOMPARE(byteCountText(3u << 20), std::string("3.0 MiB (3145728 bytes)"));
    }
};

QTEST_GUILESS_MAIN(TestOutputSet)
#include "tst_outputset.moc"
