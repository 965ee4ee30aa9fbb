// TuningCache (core/formats/TuningCache.h): keys, where the file lives, the round trip, bad files
// ignored with one warning and rebuilt, a newer format left alone, atomic and merged saves
// (two objects, and several processes at once), a failed write leaving the old file intact.
#include <QtTest>

#include <QTemporaryDir>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/formats/TuningCache.h"

using namespace tessera;

namespace {

const std::string kCtx = "GPU X | sm 9.0 | driver 13000 | runtime 13000 | cudnn 91400 | fp16";

std::string path(const QTemporaryDir& dir, const char* name) { return dir.filePath(name).toStdString(); }

void writeFile(const std::string& p, const std::string& bytes) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f << bytes;
}

std::string readFile(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

QStringList entries(const QTemporaryDir& dir) {
    return QDir(dir.path())
        .entryList(QDir::AllEntries | QDir::Hidden | QDir::System | QDir::NoDotAndDotDot, QDir::Name);
}

// Sets (or, with nullptr, unsets) an environment variable for a scope.
class EnvScope {
public:
    EnvScope(const char* name, const char* value) : name_(name) {
        if (const char* old = std::getenv(name)) old_ = old, had_ = true;
        if (value)
            ::setenv(name, value, 1);
        else
            ::unsetenv(name);
    }
    ~EnvScope() {
        if (had_)
            ::setenv(name_, old_.c_str(), 1);
        else
            ::unsetenv(name_);
    }
    EnvScope(const EnvScope&) = delete;
    EnvScope& operator=(const EnvScope&) = delete;

private:
    const char* name_;
    std::string old_;
    bool had_ = false;
};

// Runs `body` in a forked child; returns its exit code (-1 when it did not exit).
int inChild(const std::function<int()>& body) {
    const pid_t pid = ::fork();
    if (pid == 0) {
        int code = 99;
        try {
            code = body();
        } catch (...) {}
        ::_exit(code);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string validFile(const std::string& op, const std::string& choice) {
    return nlohmann::json{{"format", "tessera-tuning"}, {"version", 1}, {"contexts", {{kCtx, {{op, choice}}}}}}.dump();
}

}  // namespace

class TestTuningCache : public QObject {
    Q_OBJECT

private slots:
    void contextKeyNamesEveryPart() {
        TuningContext c{"NVIDIA H100 80GB HBM3", "9.0", 13000, 13000, 91400, "fp16"};
        QCOMPARE(QString::fromStdString(c.key()),
                 QStringLiteral("NVIDIA H100 80GB HBM3 | sm 9.0 | driver 13000 | runtime 13000 | cudnn 91400 | fp16"));
        // Each part changes the key.
        const std::string base = c.key();
        std::vector<TuningContext> others(6, c);
        others[0].device = "NVIDIA H200";
        others[1].computeCapability = "8.0";
        others[2].driverVersion = 12080;
        others[3].runtimeVersion = 12080;
        others[4].cudnnVersion = 91000;
        others[5].precision = "bf16";
        for (const TuningContext& other : others) QVERIFY(other.key() != base);
    }

    void resolvePath() {
        const EnvScope env("TESSERA_TUNING_CACHE", nullptr);
        QCOMPARE(QString::fromStdString(TuningCache::resolvePath("off")), QString());
        QCOMPARE(QString::fromStdString(TuningCache::resolvePath("/x/t.json")), QStringLiteral("/x/t.json"));
        {
            const EnvScope xdg("XDG_CACHE_HOME", "/xdg");
            const EnvScope home("HOME", "/home/u");
            QCOMPARE(QString::fromStdString(TuningCache::resolvePath("")), QStringLiteral("/xdg/tessera/tuning.json"));
        }
        {
            // XDG_CACHE_HOME must be absolute (XDG base directory spec); else ~/.cache.
            const EnvScope xdg("XDG_CACHE_HOME", "relative");
            const EnvScope home("HOME", "/home/u");
            QCOMPARE(QString::fromStdString(TuningCache::resolvePath("")),
                     QStringLiteral("/home/u/.cache/tessera/tuning.json"));
        }
        {
            const EnvScope xdg("XDG_CACHE_HOME", nullptr);
            const EnvScope home("HOME", nullptr);
            QCOMPARE(QString::fromStdString(TuningCache::resolvePath("")), QString());
        }
        {
            const EnvScope t("TESSERA_TUNING_CACHE", "/env/t.json");
            const EnvScope xdg("XDG_CACHE_HOME", "/xdg");
            QCOMPARE(QString::fromStdString(TuningCache::resolvePath("")), QStringLiteral("/env/t.json"));
            // The run setting wins over the environment.
            QCOMPARE(QString::fromStdString(TuningCache::resolvePath("/x/t.json")), QStringLiteral("/x/t.json"));
        }
        {
            const EnvScope t("TESSERA_TUNING_CACHE", "off");
            const EnvScope xdg("XDG_CACHE_HOME", "/xdg");
            QCOMPARE(QString::fromStdString(TuningCache::resolvePath("")), QString());
        }
    }

    void roundTrip() {
        QTemporaryDir dir;
        const std::string p = path(dir, "sub/dir/tuning.json");  // folders are created
        {
            TuningCache c(p);
            QVERIFY(c.enabled());
            QVERIFY(c.warnings().empty());  // a missing file is an empty cache, not a problem
            QVERIFY(!c.find(kCtx, "conv a").has_value());
            c.store(kCtx, "conv a", "algo=1 math=1");
            c.store(kCtx, "conv b n8", "engine=12");
            c.store("other", "conv a", "algo=6 math=0");
            QCOMPARE(QString::fromStdString(*c.find(kCtx, "conv a")), QStringLiteral("algo=1 math=1"));
            QVERIFY(c.save());
            QVERIFY(c.warnings().empty());
        }
        const nlohmann::json j = nlohmann::json::parse(readFile(p));
        QCOMPARE(j.at("format").get<std::string>(), std::string("tessera-tuning"));
        QCOMPARE(j.at("version").get<int>(), TuningCache::kFormatVersion);
        TuningCache again(p);
        QVERIFY(again.warnings().empty());
        QCOMPARE(again.size(), std::size_t(3));
        QCOMPARE(QString::fromStdString(*again.find(kCtx, "conv b n8")), QStringLiteral("engine=12"));
        QCOMPARE(QString::fromStdString(*again.find("other", "conv a")), QStringLiteral("algo=6 math=0"));
        QVERIFY(!again.find("other", "conv b n8").has_value());  // contexts do not mix
    }

    void disabled() {
        QTemporaryDir dir;
        TuningCache c;
        QVERIFY(!c.enabled());
        c.store(kCtx, "conv a", "x");
        QVERIFY(c.save());
        QVERIFY(entries(dir).isEmpty());
        TuningCache empty("");
        QVERIFY(!empty.enabled());
        QVERIFY(!empty.find(kCtx, "conv a").has_value());
    }

    void badFilesIgnoredWithOneWarningAndRebuilt_data() {
        QTest::addColumn<QByteArray>("bytes");
        QTest::addColumn<QString>("why");
        QTest::newRow("not json") << QByteArray("{\"format\": tessera") << "not valid JSON";
        QTest::newRow("empty") << QByteArray("") << "";
        QTest::newRow("binary") << QByteArray("\xff\xfe\x00\x01garbage", 11) << "";
        QTest::newRow("huge") << QByteArray(int((4u << 20) + 10), ' ') << "";
        QTest::newRow("deep") << QByteArray(100, '[') + QByteArray(100, ']') << "";
        QTest::newRow("array") << QByteArray("[1, 2]") << "not a JSON object";
        QTest::newRow("wrong format") << QByteArray(R"({"format": "x", "version": 1, "contexts": {}})") << "format";
        QTest::newRow("version string") << QByteArray(R"({"format": "tessera-tuning", "version": "1", "contexts": {}})")
                                        << "version";
        QTest::newRow("old version") << QByteArray(R"({"format": "tessera-tuning", "version": 0, "contexts": {}})")
                                     << "not supported";
        QTest::newRow("contexts array") << QByteArray(R"({"format": "tessera-tuning", "version": 1, "contexts": []})")
                                        << "contexts";
        QTest::newRow("context not object")
            << QByteArray(R"({"format": "tessera-tuning", "version": 1, "contexts": {"c": 5}})") << "not an object";
        QTest::newRow("choice number")
            << QByteArray(R"({"format": "tessera-tuning", "version": 1, "contexts": {"c": {"op": 7}}})")
            << "not a string";
        QTest::newRow("choice too long") << QByteArray::fromStdString(
                                                nlohmann::json{{"format", "tessera-tuning"},
                                                               {"version", 1},
                                                               {"contexts", {{"c", {{"op", std::string(600, 'a')}}}}}}
                                                    .dump())
                                         << "longer than";
    }
    void badFilesIgnoredWithOneWarningAndRebuilt() {
        QFETCH(QByteArray, bytes);
        QFETCH(QString, why);
        QTemporaryDir dir;
        const std::string p = path(dir, "tuning.json");
        writeFile(p, bytes.toStdString());
        TuningCache c(p);
        QCOMPARE(c.warnings().size(), std::size_t(1));
        const QString warning = QString::fromStdString(c.warnings().front());
        QVERIFY2(
            warning.contains(QString::fromStdString(p)) && warning.contains("ignored") && warning.contains("rebuilt"),
            qPrintable(warning));
        if (!why.isEmpty()) QVERIFY2(warning.contains(why), qPrintable(warning));
        QVERIFY2(warning.size() < 600, qPrintable(warning));  // never the file's contents
        QCOMPARE(c.size(), std::size_t(0));
        c.store(kCtx, "conv a", "algo=1 math=1");
        QVERIFY(c.save());
        QCOMPARE(c.warnings().size(), std::size_t(1));  // the save adds none
        TuningCache rebuilt(p);
        QVERIFY(rebuilt.warnings().empty());
        QCOMPARE(rebuilt.size(), std::size_t(1));
        QCOMPARE(QString::fromStdString(*rebuilt.find(kCtx, "conv a")), QStringLiteral("algo=1 math=1"));
    }

    void notARegularFile() {
        QTemporaryDir dir;
        // A FIFO is refused without blocking; a folder is refused too. Neither throws.
        const std::string fifo = path(dir, "fifo.json");
        QCOMPARE(::mkfifo(fifo.c_str(), 0600), 0);
        TuningCache f(fifo);
        QCOMPARE(f.warnings().size(), std::size_t(1));
        const std::string folder = path(dir, "folder.json");
        QVERIFY(QDir().mkpath(QString::fromStdString(folder)));
        TuningCache d(folder);
        QCOMPARE(d.warnings().size(), std::size_t(1));
        d.store(kCtx, "conv a", "x");
        QVERIFY(!d.save());  // cannot replace a folder: a second warning, no exception
        QCOMPARE(d.warnings().size(), std::size_t(2));
        QVERIFY(QString::fromStdString(d.warnings().back()).contains("could not write"));
    }

    void newerFormatLeftAlone() {
        QTemporaryDir dir;
        const std::string p = path(dir, "tuning.json");
        const std::string newer = R"({"format": "tessera-tuning", "version": 2, "contexts": {"c": {"op": {"x": 1}}}})";
        writeFile(p, newer);
        TuningCache c(p);
        QCOMPARE(c.warnings().size(), std::size_t(1));
        QVERIFY(QString::fromStdString(c.warnings().front()).contains("newer"));
        c.store(kCtx, "conv a", "algo=1 math=1");
        QVERIFY(c.save());
        QCOMPARE(readFile(p), newer);
    }

    void saveLeavesNoTemporaryFile() {
        QTemporaryDir dir;
        const std::string p = path(dir, "tuning.json");
        TuningCache c(p);
        c.store(kCtx, "conv a", "algo=1 math=1");
        QVERIFY(c.save());
        QCOMPARE(entries(dir), QStringList({"tuning.json", "tuning.json.lock"}));
        // Nothing new: no write at all (the file's time does not move).
        struct stat before {
        }, after{};
        QCOMPARE(::stat(p.c_str(), &before), 0);
        TuningCache same(p);
        QVERIFY(same.save());
        QCOMPARE(::stat(p.c_str(), &after), 0);
        QCOMPARE(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
        QCOMPARE(after.st_ino, before.st_ino);
    }

    void failedWriteKeepsOldFile() {
        QTemporaryDir dir;
        const std::string p = path(dir, "tuning.json");
        const std::string old = validFile("conv old", "algo=0 math=0");
        writeFile(p, old);
        // In a child: a file size limit below the new file's size makes the write fail (EFBIG),
        // as a full disk would; this works as root too (a read-only folder would not).
        const int code = inChild([&] {
            std::signal(SIGXFSZ, SIG_IGN);
            TuningCache c(p);
            for (int i = 0; i < 50; ++i) c.store(kCtx, "conv " + std::to_string(i), "algo=1 math=1");
            struct rlimit limit {};
            limit.rlim_cur = limit.rlim_max = 200;
            if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return 3;
            if (c.save()) return 1;  // must report the failure
            if (c.warnings().size() != 1 || c.warnings().front().find("could not write") == std::string::npos) return 2;
            return 0;
        });
        QCOMPARE(code, 0);
        QCOMPARE(readFile(p), old);
        QCOMPARE(entries(dir), QStringList({"tuning.json", "tuning.json.lock"}));  // no temporary file left
        TuningCache c(p);
        QVERIFY(c.warnings().empty());
        QVERIFY(c.find(kCtx, "conv old").has_value());
    }

    void unwritableFolder() {
        QTemporaryDir dir;
        writeFile(path(dir, "file"), "x");
        TuningCache c(path(dir, "file/tuning.json"));  // its folder is a file
        QVERIFY(c.warnings().empty());
        c.store(kCtx, "conv a", "x");
        QVERIFY(!c.save());
        QCOMPARE(c.warnings().size(), std::size_t(1));
        QVERIFY(QString::fromStdString(c.warnings().front()).contains("could not write"));
    }

    void twoWritersMerge() {
        QTemporaryDir dir;
        const std::string p = path(dir, "tuning.json");
        writeFile(p, validFile("conv old", "algo=0 math=0"));
        TuningCache a(p), b(p);  // both loaded the same file
        a.store(kCtx, "conv a", "algo=1 math=1");
        a.store(kCtx, "conv shared", "from a");
        b.store(kCtx, "conv b", "algo=2 math=1");
        b.store(kCtx, "conv shared", "from b");
        QVERIFY(a.save());
        QVERIFY(b.save());
        TuningCache merged(p);
        QVERIFY(merged.warnings().empty());
        QCOMPARE(merged.size(), std::size_t(4));
        QCOMPARE(QString::fromStdString(*merged.find(kCtx, "conv old")), QStringLiteral("algo=0 math=0"));
        QCOMPARE(QString::fromStdString(*merged.find(kCtx, "conv a")), QStringLiteral("algo=1 math=1"));
        QCOMPARE(QString::fromStdString(*merged.find(kCtx, "conv b")), QStringLiteral("algo=2 math=1"));
        QCOMPARE(QString::fromStdString(*merged.find(kCtx, "conv shared")), QStringLiteral("from b"));  // last wins
    }

    void processesWritingAtOnce() {
        QTemporaryDir dir;
        const std::string p = path(dir, "tuning.json");
        constexpr int kWriters = 8, kRounds = 5;
        std::vector<pid_t> pids;
        for (int w = 0; w < kWriters; ++w) {
            const pid_t pid = ::fork();
            if (pid == 0) {
                int code = 0;
                for (int r = 0; r < kRounds; ++r) {
                    TuningCache c(p);
                    if (!c.warnings().empty()) {  // a torn file would warn here
                        std::fprintf(stderr, "%s\n", c.warnings().front().c_str());
                        code = 1;
                    }
                    c.store(kCtx, "writer " + std::to_string(w) + " round " + std::to_string(r), "x");
                    if (!c.save()) code = 2;
                }
                ::_exit(code);
            }
            pids.push_back(pid);
        }
        for (pid_t pid : pids) {
            int status = 0;
            ::waitpid(pid, &status, 0);
            QVERIFY(WIFEXITED(status));
            QCOMPARE(WEXITSTATUS(status), 0);
        }
        TuningCache all(p);
        QVERIFY(all.warnings().empty());
        QCOMPARE(all.size(), std::size_t(kWriters * kRounds));
        QCOMPARE(entries(dir), QStringList({"tuning.json", "tuning.json.lock"}));
    }

    void storeRefusesLongKeys() {
        TuningCache c;
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, c.store(kCtx, std::string(600, 'k'), "x"));
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, c.store(kCtx, "op", std::string(600, 'c')));
    }

    void digest() {
        QCOMPARE(QString::fromStdString(tuningDigest({})), QString());
        const std::map<std::string, std::string> a{{"conv a", "algo=1"}, {"conv b", "engine=3"}};
        const std::string d = tuningDigest(a);
        QCOMPARE(d.size(), std::size_t(16));
        QCOMPARE(tuningDigest(a), d);
        auto b = a;
        b["conv b"] = "engine=4";
        QVERIFY(tuningDigest(b) != d);
        auto c = a;
        c["conv c"] = "algo=1";
        QVERIFY(tuningDigest(c) != d);
        // Not confused by where a key ends and its choice starts.
        QVERIFY(tuningDigest({{"a", "b=c"}}) != tuningDigest({{"a=b", "c"}}));
    }
};

QTEST_GUILESS_MAIN(TestTuningCache)
#include "tst_tuningcache.moc"
