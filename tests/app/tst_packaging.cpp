// Packaging: packaging/bundle turns this build's binaries into the relocatable tarball, and the
// programs run from it, unpacked in a temporary folder, with nothing of the system's Qt on
// their way: an environment with only PATH and HOME, LD_LIBRARY_PATH empty, QT_PLUGIN_PATH
// unset. Every library the dynamic loader starts (LD_DEBUG=libs) must come from the bundle,
// except glibc, libstdc++/libgcc_s and NVIDIA's libraries. Also: the desktop entry and the
// AppStream metainfo validate, and `cpack -G DEB` in this build folder makes a .deb with the
// expected files and dependencies.
//
// Needs patchelf, tar, strip and qtpaths6 (tools/install-deps.sh installs them); for the
// validators appstreamcli and desktop-file-validate, for the .deb cpack, dpkg-deb and
// dpkg-shlibdeps. A missing tool skips only the test that needs it, saying which.
#include <QDir>
#include <QDirIterator>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QImage>
#include <QProcess>
#include <QRegularExpression>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

namespace {

const QString kSourceDir = QStringLiteral(TESSERA_SOURCE_DIR);
const QString kBinaryDir = QStringLiteral(TESSERA_BINARY_DIR);
const QString kAppId = QStringLiteral("io.github.tessera.Tessera");
// The bundle must stay well under 60 MB compressed. The xz tarball of a CUDA build is about 40 MB;
// as .tar.gz it comes near 60 MB, which is why xz is the default.
constexpr qint64 kBundleLimitBytes = 50'000'000;

struct Outcome {
    bool started = false;
    bool finished = false;  // false: timed out (and killed)
    int exitCode = -1;
    QString out;
    QString err;
    QString describe() const {
        return QStringLiteral("exit %1%2\n--- stdout\n%3\n--- stderr\n%4")
            .arg(exitCode)
            .arg(!started    ? QStringLiteral(" (did not start)")
                 : !finished ? QStringLiteral(" (timed out)")
                             : QString())
            .arg(out.right(3000), err.right(3000));
    }
    bool ok() const { return started && finished && exitCode == 0; }
};

Outcome runProcess(const QString& program, const QStringList& args, int timeoutMs, const QString& workDir = QString(),
                   const QProcessEnvironment& env = QProcessEnvironment::systemEnvironment()) {
    QProcess process;
    process.setProcessEnvironment(env);
    if (!workDir.isEmpty()) process.setWorkingDirectory(workDir);
    process.start(program, args);
    Outcome outcome;
    outcome.started = process.waitForStarted(30'000);
    if (outcome.started) {
        outcome.finished = process.waitForFinished(timeoutMs);
        if (!outcome.finished) {
            process.kill();
            process.waitForFinished(5'000);
        }
        outcome.exitCode = process.exitStatus() == QProcess::NormalExit ? process.exitCode() : -1;
    }
    outcome.out = QString::fromLocal8Bit(process.readAllStandardOutput());
    outcome.err = QString::fromLocal8Bit(process.readAllStandardError());
    return outcome;
}

QString missingTool(const QStringList& tools) {
    for (const QString& tool : tools)
        if (QStandardPaths::findExecutable(tool).isEmpty()) return tool;
    return {};
}

// Libraries a bundled program may load from outside the bundle: the base system (glibc and the
// C++ runtime, which every glibc >= 2.36 system has at least as new) and NVIDIA's (driver,
// CUDA, cuDNN, cuBLAS), which the target machine provides.
const QRegularExpression kSystemLibrary(
    QStringLiteral("^(ld-linux.*|lib(c|m|mvec|dl|rt|pthread|resolv|util|anl|nsl)\\.so.*|libnss_.*|libstdc\\+\\+\\.so.*|"
                   "libgcc_s\\.so.*|"
                   "libcuda\\.so.*|libcudnn.*|libcublas.*|libcudart.*|libnvidia.*|libnvrtc.*|libnvJitLink.*)$"));

}  // namespace

class TestPackaging : public QObject {
    Q_OBJECT

private:
    QTemporaryDir work_;
    QString bundle_;  // the unpacked bundle's top folder (canonical path)
    QString tarball_;
    QString skipReason_;  // set when the bundle cannot be made here for a reason outside it
    QString failure_;     // set when packaging/bundle or unpacking failed
    int ldDebugRuns_ = 0;

    // Skips or fails the calling test when initTestCase could not make the bundle.
    bool bundleReady() {
        if (!skipReason_.isEmpty()) {
            QTest::qSkip(qPrintable(skipReason_), __FILE__, __LINE__);
            return false;
        }
        if (!failure_.isEmpty()) {
            QTest::qFail(qPrintable(failure_), __FILE__, __LINE__);
            return false;
        }
        return true;
    }

    // The environment of a bare machine: no LD_LIBRARY_PATH content, no QT_* variables, no
    // fonts configuration from the test's environment. The loader logs into *ldLog.<pid>.
    QProcessEnvironment bareEnvironment(QString* ldLog) {
        QProcessEnvironment env;
        env.insert(QStringLiteral("PATH"), QStringLiteral("/usr/bin:/bin"));
        env.insert(QStringLiteral("HOME"), work_.filePath(QStringLiteral("home")));
        env.insert(QStringLiteral("XDG_RUNTIME_DIR"), work_.filePath(QStringLiteral("runtime")));
        env.insert(QStringLiteral("LD_LIBRARY_PATH"), QString());
        env.insert(QStringLiteral("LD_DEBUG"), QStringLiteral("libs"));
        *ldLog = work_.filePath(QStringLiteral("ld/run%1").arg(++ldDebugRuns_));
        env.insert(QStringLiteral("LD_DEBUG_OUTPUT"), *ldLog);
        return env;
    }

    Outcome runBundled(const QString& relativeProgram, const QStringList& args, QString* ldLog,
                       const QStringList& extraEnv = {}, int timeoutMs = 120'000) {
        QProcessEnvironment env = bareEnvironment(ldLog);
        for (const QString& assignment : extraEnv)
            env.insert(assignment.section(QLatin1Char('='), 0, 0), assignment.section(QLatin1Char('='), 1));
        return runProcess(QDir(bundle_).filePath(relativeProgram), args, timeoutMs, work_.path(), env);
    }

    // Every library the loader started in the run logged at ldLog, as a canonical path.
    static QStringList loadedLibraries(const QString& ldLog) {
        QStringList libraries;
        const QFileInfo logInfo(ldLog);
        const QDir dir = logInfo.dir();
        for (const QString& name : dir.entryList({logInfo.fileName() + QStringLiteral(".*")}, QDir::Files)) {
            QFile file(dir.filePath(name));
            if (!file.open(QIODevice::ReadOnly | QIODevice::Text)) continue;
            static const QRegularExpression init(QStringLiteral("calling init: (\\S+)"));
            for (auto it = init.globalMatch(QString::fromLocal8Bit(file.readAll())); it.hasNext();) {
                const QString path = QFileInfo(it.next().captured(1)).canonicalFilePath();
                if (!path.isEmpty() && !libraries.contains(path)) libraries << path;
            }
        }
        return libraries;
    }

    // Fails unless every library the run loaded is the bundle's or a system/NVIDIA one, and
    // each of `expected` (file names under lib/) was loaded from the bundle.
    void verifyLoadedFromBundle(const QString& ldLog, const QString& what, const QStringList& expected) {
        const QStringList libraries = loadedLibraries(ldLog);
        QStringList fromBundle, foreign;
        for (const QString& path : libraries) {
            if (path.startsWith(bundle_ + QLatin1Char('/')))
                fromBundle << path;
            else if (!kSystemLibrary.match(QFileInfo(path).fileName()).hasMatch())
                foreign << path;
        }
        QVERIFY2(!fromBundle.isEmpty(),
                 qPrintable(what + QStringLiteral(": LD_DEBUG=libs logged no library from the bundle at ") + ldLog +
                            QStringLiteral("; loaded:\n") + libraries.join(QLatin1Char('\n'))));
        for (const QString& name : expected)
            QVERIFY2(fromBundle.contains(bundle_ + QStringLiteral("/lib/") + name),
                     qPrintable(what + QStringLiteral(": ") + name +
                                QStringLiteral(" was not loaded from the bundle; from it came:\n") +
                                fromBundle.join(QLatin1Char('\n'))));
        QVERIFY2(foreign.isEmpty(), qPrintable(what + QStringLiteral(" loaded libraries from outside the bundle ") +
                                               bundle_ + QStringLiteral(":\n") + foreign.join(QLatin1Char('\n'))));
    }

    QString writeFontsConf(const QString& name, const QString& dirs) {
        const QString path = work_.filePath(name);
        QFile file(path);
        if (!file.open(QIODevice::WriteOnly | QIODevice::Text)) return {};
        file.write(QStringLiteral("<?xml version=\"1.0\"?>\n<fontconfig>%1<cachedir>%2</cachedir></fontconfig>\n")
                       .arg(dirs, work_.filePath(QStringLiteral("fontcache")))
                       .toUtf8());
        return path;
    }

private slots:
    void initTestCase() {
        QVERIFY2(work_.isValid(), qPrintable(work_.errorString()));
        QVERIFY(QDir().mkpath(work_.filePath(QStringLiteral("home"))));
        QVERIFY(QDir().mkpath(work_.filePath(QStringLiteral("ld"))));
        QVERIFY(QDir().mkpath(work_.filePath(QStringLiteral("runtime"))));
        QFile::setPermissions(work_.filePath(QStringLiteral("runtime")),
                              QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ExeOwner);

        const QString cli = kBinaryDir + QStringLiteral("/app/tessera-cli");
        const QString gui = kBinaryDir + QStringLiteral("/ui/tessera");
        if (!QFileInfo(cli).isExecutable() || !QFileInfo(gui).isExecutable()) {
            skipReason_ = QStringLiteral("the bundle needs both %1 and %2 built (is TESSERA_GUI off?)").arg(cli, gui);
            return;
        }
        if (const QString tool = missingTool({QStringLiteral("bash"), QStringLiteral("patchelf"),
                                              QStringLiteral("strip"), QStringLiteral("ldd"), QStringLiteral("tar"),
                                              QStringLiteral("xz"), QStringLiteral("qtpaths6")});
            !tool.isEmpty()) {
            skipReason_ = tool + QStringLiteral(" is missing; tools/install-deps.sh installs it");
            return;
        }

        // --no-build: take this build's binaries as they are (ctest must not rebuild).
        QElapsedTimer timer;
        timer.start();
        const Outcome made = runProcess(QStringLiteral("bash"),
                                        {kSourceDir + QStringLiteral("/packaging/bundle"), QStringLiteral("--no-build"),
                                         kBinaryDir, work_.filePath(QStringLiteral("dist"))},
                                        600'000);
        if (!made.ok()) {
            failure_ = QStringLiteral("packaging/bundle failed: ") + made.describe();
            return;
        }
        qInfo("packaging/bundle took %.1f s: %s", double(timer.elapsed()) / 1000.0, qPrintable(made.err.trimmed()));
        tarball_ = made.out.trimmed().section(QLatin1Char('\n'), -1);
        if (!QFileInfo(tarball_).isFile() || !tarball_.endsWith(QStringLiteral(".tar.xz"))) {
            failure_ = QStringLiteral("packaging/bundle did not print the tarball's path last: ") + made.describe();
            return;
        }

        const QString unpacked = work_.filePath(QStringLiteral("unpacked"));
        QDir().mkpath(unpacked);
        const Outcome untar = runProcess(QStringLiteral("tar"),
                                         {QStringLiteral("-xJf"), tarball_, QStringLiteral("-C"), unpacked}, 120'000);
        if (!untar.ok()) {
            failure_ = QStringLiteral("tar could not unpack ") + tarball_ + QStringLiteral(": ") + untar.describe();
            return;
        }
        const QStringList top = QDir(unpacked).entryList(QDir::Dirs | QDir::NoDotAndDotDot);
        if (top.size() != 1) {
            failure_ =
                QStringLiteral("the tarball should hold one top folder, it holds: ") + top.join(QStringLiteral(", "));
            return;
        }
        bundle_ = QFileInfo(QDir(unpacked).filePath(top.front())).canonicalFilePath();
    }

    void tarballIsSmallEnough() {
        if (!bundleReady()) return;
        const qint64 size = QFileInfo(tarball_).size();
        QVERIFY2(size < kBundleLimitBytes,
                 qPrintable(
                     QStringLiteral("%1 is %2 bytes, the limit is %3").arg(tarball_).arg(size).arg(kBundleLimitBytes)));
        QVERIFY2(QFileInfo(tarball_).fileName().startsWith(QStringLiteral("tessera-" TESSERA_VERSION "-linux-x86_64-")),
                 qPrintable(tarball_));
    }

    void layout() {
        if (!bundleReady()) return;
        const QDir root(bundle_);
        for (const char* path : {"bin/tessera", "bin/tessera-cli", "bin/qt.conf", "plugins/platforms/libqxcb.so",
                                 "plugins/platforms/libqoffscreen.so", "lib/libQt6Core.so.6", "lib/libQt6Gui.so.6",
                                 "lib/libQt6Widgets.so.6", "lib/libQCustomPlotQt6.so.2.1",
                                 "share/tessera/fonts/DejaVuSans.ttf", "share/tessera/fonts/fonts.conf",
                                 "share/tessera/presets/quick-cpu.json", "share/tessera/models/default/config.json",
                                 "share/tessera/models/default/diffusion_pytorch_model.safetensors"})
            QVERIFY2(QFileInfo::exists(root.filePath(QString::fromLatin1(path))),
                     qPrintable(QStringLiteral("the bundle lacks ") + QString::fromLatin1(path)));

        // NVIDIA's libraries come from the target machine; the CUDA runtime is linked statically.
        const QStringList nvidia = QDir(root.filePath(QStringLiteral("lib")))
                                       .entryList({QStringLiteral("libcud*"), QStringLiteral("libcublas*"),
                                                   QStringLiteral("libnvidia*"), QStringLiteral("libnvrtc*")});
        QVERIFY2(nvidia.isEmpty(),
                 qPrintable(QStringLiteral("NVIDIA libraries were bundled: ") + nvidia.join(QStringLiteral(", "))));

        // Every ELF file finds its libraries relative to itself.
        QStringList files;
        for (const QString& dir : {QStringLiteral("bin"), QStringLiteral("lib"), QStringLiteral("plugins")}) {
            QDirIterator it(root.filePath(dir), {QStringLiteral("*.so*"), QStringLiteral("tessera*")}, QDir::Files,
                            QDirIterator::Subdirectories);
            while (it.hasNext()) files << it.next();
        }
        QVERIFY(files.size() > 20);
        for (const QString& file : files) {
            const Outcome rpath =
                runProcess(QStringLiteral("patchelf"), {QStringLiteral("--print-rpath"), file}, 30'000);
            QVERIFY2(rpath.ok(), qPrintable(file + QStringLiteral(": ") + rpath.describe()));
            QVERIFY2(rpath.out.startsWith(QStringLiteral("$ORIGIN")),
                     qPrintable(file + QStringLiteral(" has RUNPATH '") + rpath.out.trimmed() +
                                QStringLiteral("', not $ORIGIN-relative")));
        }
    }

    void cliVersion() {
        if (!bundleReady()) return;
        QString ldLog;
        const Outcome version = runBundled(QStringLiteral("bin/tessera-cli"), {QStringLiteral("--version")}, &ldLog);
        QVERIFY2(version.ok(), qPrintable(version.describe()));
        QCOMPARE(version.out.trimmed(), QStringLiteral("tessera-cli " TESSERA_VERSION));
        verifyLoadedFromBundle(ldLog, QStringLiteral("tessera-cli --version"), {QStringLiteral("libspdlog.so.1.10")});
    }

    void cliPlan() {
        if (!bundleReady()) return;
        QString ldLog;
        const Outcome plan = runBundled(QStringLiteral("bin/tessera-cli"),
                                        {QStringLiteral("plan"), QStringLiteral("--width"), QStringLiteral("256"),
                                         QStringLiteral("--height"), QStringLiteral("256"), QStringLiteral("--tile"),
                                         QStringLiteral("64"), QStringLiteral("--overlap"), QStringLiteral("16")},
                                        &ldLog);
        QVERIFY2(plan.ok(), qPrintable(plan.describe()));
        QVERIFY2(plan.out.contains(QRegularExpression(QStringLiteral("tiles\\s+25\\b"))), qPrintable(plan.out));
        verifyLoadedFromBundle(ldLog, QStringLiteral("tessera-cli plan"), {QStringLiteral("libspdlog.so.1.10")});
    }

    void cliRenderWithBundledModel() {
        if (!bundleReady()) return;
        const QString model = QDir(bundle_).filePath(QStringLiteral("share/tessera/models/default"));
        const QString out = work_.filePath(QStringLiteral("render"));
        QVERIFY(QDir().mkpath(out));
        QString ldLog;
        const Outcome render = runBundled(
            QStringLiteral("bin/tessera-cli"),
            {QStringLiteral("render"), QStringLiteral("--model"), model, QStringLiteral("--width"),
             QStringLiteral("64"), QStringLiteral("--height"), QStringLiteral("64"), QStringLiteral("--tile"),
             QStringLiteral("64"), QStringLiteral("--overlap"), QStringLiteral("16"), QStringLiteral("--steps"),
             QStringLiteral("2"), QStringLiteral("--backend"), QStringLiteral("cpu"), QStringLiteral("--precision"),
             QStringLiteral("fp32"), QStringLiteral("--out"), out},
            &ldLog, {}, 300'000);
        QVERIFY2(render.ok(), qPrintable(render.describe()));
        const QStringList pngs = QDir(out).entryList({QStringLiteral("*.png")}, QDir::Files);
        QCOMPARE(pngs.size(), 1);
        const QImage image(QDir(out).filePath(pngs.front()));
        QCOMPARE(image.size(), QSize(64, 64));
        verifyLoadedFromBundle(ldLog, QStringLiteral("tessera-cli render"),
                               {QStringLiteral("libspdlog.so.1.10"), QStringLiteral("libopenblas.so.0"),
                                QStringLiteral("libpng16.so.16")});
    }

    void windowScreenshotOffscreen() {
        if (!bundleReady()) return;
        const QString shot = work_.filePath(QStringLiteral("window.png"));
        QString ldLog;
        const Outcome window = runBundled(QStringLiteral("bin/tessera"),
                                          {QStringLiteral("--fresh"), QStringLiteral("--screenshot"), shot,
                                           QStringLiteral("--delay"), QStringLiteral("300")},
                                          &ldLog, {QStringLiteral("QT_QPA_PLATFORM=offscreen")});
        QVERIFY2(window.ok(), qPrintable(window.describe()));
        const QImage image(shot);
        QVERIFY2(!image.isNull(), qPrintable(shot + QStringLiteral(" is not an image")));
        QVERIFY2(image.width() >= 600 && image.height() >= 400,
                 qPrintable(QStringLiteral("window picture is only %1x%2").arg(image.width()).arg(image.height())));
        verifyLoadedFromBundle(
            ldLog, QStringLiteral("tessera (offscreen)"),
            {QStringLiteral("libQt6Core.so.6"), QStringLiteral("libQt6Gui.so.6"), QStringLiteral("libQt6Widgets.so.6"),
             QStringLiteral("libQCustomPlotQt6.so.2.1"), QStringLiteral("libfontconfig.so.1")});
        const QStringList loaded = loadedLibraries(ldLog);
        QVERIFY2(loaded.contains(bundle_ + QStringLiteral("/plugins/platforms/libqoffscreen.so")),
                 qPrintable(QStringLiteral("the offscreen platform plugin was not the bundle's; loaded:\n") +
                            loaded.join(QLatin1Char('\n'))));
    }

    // On a machine without fonts Qt draws every glyph as an empty box unless the window registers
    // the bundled font. The same window drawn with fontconfig seeing no font at all must look
    // exactly as it does with fontconfig seeing only the bundled DejaVu fonts.
    void windowTextRendersWithoutSystemFonts() {
        if (!bundleReady()) return;
        const QString onlyBundled = writeFontsConf(
            QStringLiteral("only-bundled-fonts.conf"),
            QStringLiteral("<dir>%1</dir>").arg(QDir(bundle_).filePath(QStringLiteral("share/tessera/fonts"))));
        const QString noFonts = writeFontsConf(QStringLiteral("no-fonts.conf"), QString());
        QVERIFY(!onlyBundled.isEmpty() && !noFonts.isEmpty());

        QImage pictures[2];
        const QString configs[2] = {onlyBundled, noFonts};
        for (int i = 0; i < 2; ++i) {
            const QString shot = work_.filePath(QStringLiteral("fonts-%1.png").arg(i));
            QString ldLog;
            const Outcome window = runBundled(
                QStringLiteral("bin/tessera"),
                {QStringLiteral("--fresh"), QStringLiteral("--screenshot"), shot, QStringLiteral("--delay"),
                 QStringLiteral("300")},
                &ldLog, {QStringLiteral("QT_QPA_PLATFORM=offscreen"), QStringLiteral("FONTCONFIG_FILE=") + configs[i]});
            QVERIFY2(window.ok(), qPrintable(configs[i] + QStringLiteral(": ") + window.describe()));
            pictures[i] = QImage(shot).convertToFormat(QImage::Format_RGB32);
            QVERIFY2(!pictures[i].isNull(), qPrintable(shot));
        }
        QCOMPARE(pictures[1].size(), pictures[0].size());
        qint64 differing = 0;
        for (int y = 0; y < pictures[0].height(); ++y) {
            const auto* a = reinterpret_cast<const QRgb*>(pictures[0].constScanLine(y));
            const auto* b = reinterpret_cast<const QRgb*>(pictures[1].constScanLine(y));
            for (int x = 0; x < pictures[0].width(); ++x) differing += a[x] != b[x] ? 1 : 0;
        }
        const qint64 total = qint64(pictures[0].width()) * pictures[0].height();
        QVERIFY2(differing * 1000 < total,  // empty boxes instead of text change a few percent of the pixels
                 qPrintable(QStringLiteral(
                                "without system fonts %1 of %2 pixels differ from the picture with the bundled font: "
                                "text is not drawn with the bundled font (does ui/gui_main.cpp call "
                                "tessera::registerBundledFonts() after creating QApplication?); pictures: %3, %4")
                                .arg(differing)
                                .arg(total)
                                .arg(work_.filePath(QStringLiteral("fonts-0.png")),
                                     work_.filePath(QStringLiteral("fonts-1.png")))));
    }

    void desktopFileValidates() {
        if (const QString tool = missingTool({QStringLiteral("desktop-file-validate")}); !tool.isEmpty())
            QSKIP("desktop-file-validate is missing (package desktop-file-utils; tools/install-deps.sh installs it)");
        const QString desktop = kSourceDir + QStringLiteral("/packaging/") + kAppId + QStringLiteral(".desktop");
        const Outcome check = runProcess(QStringLiteral("desktop-file-validate"), {desktop}, 60'000);
        QVERIFY2(check.ok(), qPrintable(check.describe()));
        // Hints are not errors, but this file is meant to have none.
        QVERIFY2(check.out.trimmed().isEmpty(), qPrintable(check.out));
    }

    void metainfoValidates() {
        if (const QString tool = missingTool({QStringLiteral("appstreamcli")}); !tool.isEmpty())
            QSKIP("appstreamcli is missing (package appstream; tools/install-deps.sh installs it)");
        const QString metainfo = kSourceDir + QStringLiteral("/packaging/") + kAppId + QStringLiteral(".metainfo.xml");
        const Outcome check = runProcess(QStringLiteral("appstreamcli"),
                                         {QStringLiteral("validate"), QStringLiteral("--no-net"), metainfo}, 120'000);
        QVERIFY2(check.ok(), qPrintable(check.describe()));
    }

    // cpack in this build folder (it installs this build's binaries, building nothing new when
    // the build is up to date) into a scratch folder; then the package's fields and files.
    void debPackage() {
        if (const QString tool = missingTool({QStringLiteral("cpack"), QStringLiteral("dpkg-deb"),
                                              QStringLiteral("dpkg-shlibdeps"), QStringLiteral("dpkg")});
            !tool.isEmpty())
            QSKIP(qPrintable(tool + QStringLiteral(" is missing (cpack: cmake; dpkg-shlibdeps: dpkg-dev)")));
        const QString config = kBinaryDir + QStringLiteral("/CPackConfig.cmake");
        if (!QFileInfo::exists(config)) QSKIP("this build folder has no CPackConfig.cmake (TESSERA_CORE_ONLY?)");
        const QString cli = kBinaryDir + QStringLiteral("/app/tessera-cli");
        const QString gui = kBinaryDir + QStringLiteral("/ui/tessera");
        const bool withGui = QFileInfo(gui).isExecutable();

        const QString debDir = work_.filePath(QStringLiteral("deb"));
        QElapsedTimer timer;
        timer.start();
        const Outcome cpack = runProcess(QStringLiteral("cpack"),
                                         {QStringLiteral("-G"), QStringLiteral("DEB"), QStringLiteral("-B"), debDir,
                                          QStringLiteral("--config"), config},
                                         300'000, kBinaryDir);
        QVERIFY2(cpack.ok(), qPrintable(cpack.describe()));
        qInfo("cpack -G DEB took %.1f s", double(timer.elapsed()) / 1000.0);
        const QStringList debs = QDir(debDir).entryList({QStringLiteral("tessera_*.deb")}, QDir::Files);
        QCOMPARE(debs.size(), 1);
        const QString deb = QDir(debDir).filePath(debs.front());

        const Outcome arch = runProcess(QStringLiteral("dpkg"), {QStringLiteral("--print-architecture")}, 30'000);
        QVERIFY2(arch.ok(), qPrintable(arch.describe()));
        auto field = [&deb](const QString& name) {
            const Outcome f = runProcess(QStringLiteral("dpkg-deb"), {QStringLiteral("-f"), deb, name}, 60'000);
            return f.ok() ? f.out.trimmed() : QStringLiteral("<dpkg-deb failed: %1>").arg(f.describe());
        };
        QCOMPARE(field(QStringLiteral("Package")), QStringLiteral("tessera"));
        QCOMPARE(field(QStringLiteral("Version")), QStringLiteral(TESSERA_VERSION));
        QCOMPARE(field(QStringLiteral("Architecture")), arch.out.trimmed());
        QCOMPARE(field(QStringLiteral("Section")), QStringLiteral("graphics"));
        const QString depends = field(QStringLiteral("Depends"));

        // Every package dpkg-shlibdeps finds for the binaries must be declared (the list is
        // written out by hand; see packaging/CMakeLists.txt). NVIDIA libraries have no Debian
        // package: --ignore-missing-info leaves them out.
        const QString shlibDir = work_.filePath(QStringLiteral("shlibdeps"));
        QVERIFY(QDir().mkpath(shlibDir + QStringLiteral("/debian")));
        {
            QFile control(shlibDir + QStringLiteral("/debian/control"));
            QVERIFY(control.open(QIODevice::WriteOnly | QIODevice::Text));
            control.write("Source: tessera\n\nPackage: tessera\nArchitecture: any\n");
        }
        QStringList binaries{cli};
        if (withGui) binaries << gui;
        const Outcome shlibs = runProcess(
            QStringLiteral("dpkg-shlibdeps"),
            QStringList{QStringLiteral("--ignore-missing-info"), QStringLiteral("-O")} + binaries, 120'000, shlibDir);
        QVERIFY2(shlibs.ok(), qPrintable(shlibs.describe()));
        const QString found = shlibs.out.section(QStringLiteral("shlibs:Depends="), 1).trimmed();
        QVERIFY2(!found.isEmpty(), qPrintable(shlibs.describe()));
        static const QRegularExpression separators(QStringLiteral("[,|]"));
        for (const QString& entry : found.split(separators, Qt::SkipEmptyParts)) {
            const QString package = entry.trimmed().section(QLatin1Char(' '), 0, 0);
            const QRegularExpression declared(QStringLiteral("(^|[,|]\\s*)") + QRegularExpression::escape(package) +
                                              QStringLiteral("(\\s|,|$)"));
            QVERIFY2(
                declared.match(depends).hasMatch(),
                qPrintable(QStringLiteral("the binaries need %1 (dpkg-shlibdeps: %2) but the .deb's Depends is: %3")
                               .arg(package, found, depends)));
        }
        for (const char* package : {"qt6-qpa-plugins", "fonts-dejavu-core"})
            QVERIFY2(depends.contains(QLatin1String(package)),
                     qPrintable(QStringLiteral("Depends lacks ") + QLatin1String(package)));

        const Outcome contents = runProcess(QStringLiteral("dpkg-deb"), {QStringLiteral("-c"), deb}, 60'000);
        QVERIFY2(contents.ok(), qPrintable(contents.describe()));
        QStringList expected{
            QStringLiteral("./usr/bin/tessera-cli"),
            QStringLiteral("./usr/share/applications/") + kAppId + QStringLiteral(".desktop"),
            QStringLiteral("./usr/share/metainfo/") + kAppId + QStringLiteral(".metainfo.xml"),
            QStringLiteral("./usr/share/icons/hicolor/scalable/apps/") + kAppId + QStringLiteral(".svg"),
            QStringLiteral("./usr/share/tessera/presets/quick-cpu.json"),
            QStringLiteral("./usr/share/tessera/models/default/config.json"),
            QStringLiteral("./usr/share/tessera/models/default/diffusion_pytorch_model.safetensors")};
        for (const char* size : {"48x48", "128x128", "256x256"})
            expected << QStringLiteral("./usr/share/icons/hicolor/%1/apps/%2.png").arg(QLatin1String(size), kAppId);
        if (withGui) expected << QStringLiteral("./usr/bin/tessera");
        for (const QString& path : expected)
            QVERIFY2(
                contents.out.contains(QLatin1Char(' ') + path + QLatin1Char('\n')) ||
                    contents.out.endsWith(QLatin1Char(' ') + path),
                qPrintable(QStringLiteral("the .deb lacks ") + path + QStringLiteral("; it holds:\n") + contents.out));
    }
};

QTEST_GUILESS_MAIN(TestPackaging)
#include "tst_packaging.moc"
