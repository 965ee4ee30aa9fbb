// tessera-cli's host memory: every model family's run is checked before anything that grows with
// the request is allocated, against what the machine and the process's own limits (RLIMIT_AS,
// `ulimit -v`) leave; a start image is resized without holding more than the larger of the
// source and the result. Each run is a child process, so its peak memory is its own
// (wait4's ru_maxrss) and a limit set in it binds nothing else.
#include <QtTest/QtTest>

#include <QDir>
#include <QFile>
#include <QTemporaryDir>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <thread>
#include <vector>

namespace {

const QString kCli = QStringLiteral(TESSERA_BINARY_DIR "/app/tessera-cli");
const QString kSdModel = QStringLiteral(TESSERA_TEST_DATA "/sdpipeline/sd1");
const QString kPixelModel = QStringLiteral(TESSERA_TEST_DATA "/models/cifar_like");
constexpr rlim_t kGiB = rlim_t{1} << 30;

// AddressSanitizer reserves terabytes of address space for its shadow: it cannot run under an
// RLIMIT_AS, and its resident memory is the program's and more.
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

struct ChildRun {
    int exitCode = -1;  // -1: killed by a signal, or by the timeout
    bool timedOut = false;
    long peakKiB = 0;  // ru_maxrss
    double seconds = 0;
    QString err;
};

QString describe(const ChildRun& r) {
    return QStringLiteral("exit %1%2, %3 s, peak %4 MiB\nstderr:\n%5")
        .arg(r.exitCode)
        .arg(r.timedOut ? QStringLiteral(" (timed out)") : QString())
        .arg(r.seconds, 0, 'f', 2)
        .arg(r.peakKiB / 1024)
        .arg(r.err.right(3000));
}

// tessera-cli with `args` in a child, under an address-space limit when one is given; stdout
// discarded, stderr kept. Killed after `timeoutS` seconds.
ChildRun runChild(const QStringList& args, std::optional<rlim_t> addressSpace, int timeoutS) {
    QTemporaryDir dir;
    const QByteArray errPath = dir.filePath(QStringLiteral("stderr")).toLocal8Bit();
    std::vector<QByteArray> words{kCli.toLocal8Bit()};
    for (const QString& arg : args) words.push_back(arg.toLocal8Bit());
    std::vector<char*> argv;
    for (QByteArray& word : words) argv.push_back(word.data());
    argv.push_back(nullptr);

    ChildRun run;
    const auto start = std::chrono::steady_clock::now();
    const pid_t pid = ::fork();
    if (pid == 0) {  // only async-signal-safe calls from here
        const int err = ::open(errPath.constData(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        const int null = ::open("/dev/null", O_RDWR);
        if (err < 0 || null < 0) ::_exit(126);
        ::dup2(null, 0);
        ::dup2(null, 1);
        ::dup2(err, 2);
        if (addressSpace) {
            const rlimit limit{*addressSpace, *addressSpace};
            if (::setrlimit(RLIMIT_AS, &limit) != 0) ::_exit(125);
        }
        ::execv(argv[0], argv.data());
        ::_exit(127);
    }
    if (pid < 0) return run;
    int status = 0;
    rusage usage{};
    for (;;) {
        const pid_t done = ::wait4(pid, &status, WNOHANG, &usage);
        if (done == pid) break;
        if (std::chrono::steady_clock::now() - start > std::chrono::seconds(timeoutS)) {
            ::kill(pid, SIGKILL);
            ::wait4(pid, &status, 0, &usage);
            run.timedOut = true;
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    run.exitCode = !run.timedOut && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    run.peakKiB = usage.ru_maxrss;
    QFile err(QString::fromLocal8Bit(errPath));
    if (err.open(QIODevice::ReadOnly)) run.err = QString::fromUtf8(err.readAll());
    return run;
}

// PNG chunk CRC (ISO 3309 CRC-32 over type and data).
quint32 crc32(const QByteArray& bytes) {
    quint32 crc = 0xffffffffu;
    for (const char c : bytes) {
        crc ^= static_cast<unsigned char>(c);
        for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

QByteArray bigEndian(quint32 value) {
    QByteArray bytes;
    for (int shift = 24; shift >= 0; shift -= 8) bytes += static_cast<char>((value >> shift) & 255);
    return bytes;
}

QByteArray chunk(const QByteArray& type, const QByteArray& data) {
    return bigEndian(static_cast<quint32>(data.size())) + type + data + bigEndian(crc32(type + data));
}

// An 8-bit RGB PNG of width x height in one colour: a few hundred bytes for 1 x 65535.
QByteArray flatPng(int width, int height) {
    QByteArray row(1 + 3 * width, '\0');  // filter byte 0, then the pixels
    for (int x = 0; x < width; ++x) {
        row[1 + 3 * x] = static_cast<char>(200);
        row[2 + 3 * x] = 100;
        row[3 + 3 * x] = 50;
    }
    const QByteArray zlib = qCompress(row.repeated(height), 9).mid(4);  // qCompress prefixes the length
    const QByteArray ihdr = bigEndian(static_cast<quint32>(width)) + bigEndian(static_cast<quint32>(height)) +
                            QByteArray("\x08\x02\x00\x00\x00", 5);
    return QByteArray("\x89PNG\r\n\x1a\n", 8) + chunk("IHDR", ihdr) + chunk("IDAT", zlib) + chunk("IEND", {});
}

QString writeTallPng(const QTemporaryDir& dir) {
    const QString path = dir.filePath(QStringLiteral("tall.png"));
    QFile file(path);
    if (file.open(QIODevice::WriteOnly)) file.write(flatPng(1, 65535));
    return path;
}

QStringList sdRender(const QString& out) {
    return {"render", "--model", kSdModel, "--backend", "cpu", "--steps", "1", "--threads", "1", "--out", out};
}

}  // namespace

class TestMemoryLimits : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() {
        QVERIFY2(QFileInfo::exists(kCli), "build tessera-cli first");
        QVERIFY2(QFileInfo::exists(kSdModel + "/model_index.json"), "tests/data/sdpipeline/sd1 is missing");
        QVERIFY2(QFileInfo::exists(kPixelModel + "/config.json"), "tests/data/models/cifar_like is missing");
    }

    // A 1 x 65535 start image widened to 4096 x 64: its resize held every source row at the run's
    // width (65535 x 4096 x 3 floats, 3.2 GB; 12.9 GB and std::bad_alloc at 16384) before any
    // check. Columns first, it holds 64 x 1 pixels in between, and the run takes little memory.
    void tallStartImageResizedInBoundedMemory() {
        QTemporaryDir dir;
        const QString tall = writeTallPng(dir);
        QVERIFY(QFileInfo(tall).size() < 1000);
        const ChildRun r = runChild(sdRender(dir.path()) + QStringList{"--init", tall, "--width", "4096", "--height",
                                                                       "64", "--vae-tiling", "off"},
                                    std::nullopt, 300);
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        QVERIFY2(r.err.contains("is 1x65535, resized to 4096x64"), qPrintable(describe(r)));
        const long boundKiB = (kAddressSanitizer ? 2048L : 1024L) * 1024;
        QVERIFY2(r.peakKiB < boundKiB, qPrintable(describe(r)));
        QCOMPARE(QDir(dir.path()).entryList({"*.png"}, QDir::Files).size(), 2);  // tall.png and the image
    }

    // Under an address-space limit, every model family's run is refused before any work when it
    // cannot fit, naming the limit: a Stable Diffusion run (no host check at all before) went on
    // to load and sample until an allocation failed; a pixel model's was checked against
    // MemAvailable alone.
    void addressSpaceLimitRefusesBeforeWork_data() {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("field");
        QTest::newRow("sd 16384x16384") << QStringList{"render",   "--model", kSdModel, "--width", "16384",
                                                       "--height", "16384",   "--tile", "512"}
                                        << "width";
        // About 1.4 GiB: within what most machines have free, refused only by the limit.
        QTest::newRow("pixel 2048x2048") << QStringList{"render", "--model", kPixelModel, "--width", "2048", "--height",
                                                        "2048",   "--tile",  "512",       "--batch", "4"}
                                         << "batch";
    }
    void addressSpaceLimitRefusesBeforeWork() {
        if (kAddressSanitizer) QSKIP("AddressSanitizer cannot run under RLIMIT_AS");
        QFETCH(QStringList, args);
        QFETCH(QString, field);
        QTemporaryDir dir;
        const ChildRun r =
            runChild(args + QStringList{"--backend", "cpu", "--steps", "1", "--out", dir.path()}, kGiB, 30);
        QVERIFY2(r.exitCode == 2, qPrintable(describe(r)));
        QVERIFY2(r.seconds < 10, qPrintable(describe(r)));
        QVERIFY2(r.err.contains("tessera-cli: " + field + ": the run needs about "), qPrintable(describe(r)));
        QVERIFY2(r.err.contains("of host memory while"), qPrintable(describe(r)));
        QVERIFY2(r.err.contains("the process's address-space limit (RLIMIT_AS, ulimit -v) of 1.0 GiB less the"),
                 qPrintable(describe(r)));
        QVERIFY(QDir(dir.path()).entryList(QDir::Files).isEmpty());
    }

    // The start image under a 1 GiB address-space limit: the run fits and finishes, or is
    // refused up front with the memory message; never std::bad_alloc, a crash or a hang (OpenBLAS
    // retries a buffer it cannot map without end).
    void tallStartImageUnderAnAddressSpaceLimit() {
        if (kAddressSanitizer) QSKIP("AddressSanitizer cannot run under RLIMIT_AS");
        QTemporaryDir dir;
        const QString tall = writeTallPng(dir);
        for (const char* width : {"4096", "16384"}) {
            const ChildRun r = runChild(
                sdRender(dir.path()) + QStringList{"--init", tall, "--width", width, "--height", "64"}, kGiB, 120);
            QVERIFY2(r.exitCode == 0 || r.exitCode == 2, qPrintable(describe(r)));
            QVERIFY2(!r.err.contains("bad_alloc"), qPrintable(describe(r)));
            if (r.exitCode == 2) {
                QVERIFY2(r.err.contains("of host memory while") && r.err.contains("RLIMIT_AS"),
                         qPrintable(describe(r)));
                QVERIFY2(r.seconds < 5, qPrintable(describe(r)));
            }
        }
    }

    // plan states the host memory of a Stable Diffusion run too.
    void planStatesStableDiffusionMemory() {
        QProcess plan;
        plan.start(kCli, {"plan", "--model", kSdModel, "--width", "512", "--height", "512"});
        QVERIFY(plan.waitForFinished(60000));
        QCOMPARE(plan.exitCode(), 0);
        const QString out = QString::fromUtf8(plan.readAllStandardOutput());
        QVERIFY2(out.contains(QRegularExpression("host memory  about [0-9.]+ [MG]iB at the peak with the cpu engine, "
                                                 "[0-9.]+ [MG]iB with the cuda engine")),
                 qPrintable(out));
    }
};

QTEST_GUILESS_MAIN(TestMemoryLimits)
#include "tst_memorylimits.moc"
