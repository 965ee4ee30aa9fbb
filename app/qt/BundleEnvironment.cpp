#include "app/qt/BundleEnvironment.h"

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QFont>
#include <QFontDatabase>
#include <QFontInfo>
#include <QGuiApplication>
#include <QStringList>
#include <QtGlobal>

namespace tessera {

namespace {

// The folder of the running executable. /proc/self/exe is right even when the binary was found
// through PATH or started through a symlink, where argv[0] says little.
QString executableDir(const char* argv0) {
    const QFileInfo self(QStringLiteral("/proc/self/exe"));
    const QString target = self.symLinkTarget();
    if (!target.isEmpty()) return QFileInfo(target).absolutePath();
    if (argv0 != nullptr && argv0[0] != '\0') return QFileInfo(QString::fromLocal8Bit(argv0)).absolutePath();
    return {};
}

// True when the bundle ships a platform plugin for `platform` (libq<name>*.so, so "wayland"
// matches libqwayland-generic.so).
bool hasPlatformPlugin(const QDir& platformsDir, const QString& platform) {
    const QString name = platform.section(QLatin1Char(':'), 0, 0).trimmed();  // drop ":arguments"
    if (name.isEmpty()) return false;
    return !platformsDir.entryList({QStringLiteral("libq") + name + QStringLiteral("*.so")}, QDir::Files).isEmpty();
}

void setIfUnset(const char* name, const QString& value) {
    if (!qEnvironmentVariableIsSet(name)) qputenv(name, QFile::encodeName(value));
}

}  // namespace

QString bundledFontsFolder(const QString& executableDir) {
    if (executableDir.isEmpty()) return {};
    const QString fonts = QDir::cleanPath(executableDir + QStringLiteral("/../share/tessera/fonts"));
    return QFileInfo(fonts).isDir() ? fonts : QString();
}

void setupBundledEnvironment(const char* argv0) {
    const QString binDir = executableDir(argv0);
    if (binDir.isEmpty()) return;
    const QString prefix = QDir::cleanPath(binDir + QStringLiteral("/.."));

    const QDir platformsDir(prefix + QStringLiteral("/plugins/platforms"));
    if (platformsDir.exists()) {
        // The bundle's Qt libraries must load the bundle's plugins: plugins of a system Qt of
        // another version refuse to load or, for private-API ones (xcb), abort. Set for this
        // process only, not through QT_PLUGIN_PATH, which programs started from the window
        // (xdg-open, a file manager built on the system's Qt) would inherit and then load these
        // plugins into the wrong Qt. Qt keeps paths set before QApplication and adds the
        // executable's folder. A QT_PLUGIN_PATH or QT_QPA_PLATFORM_PLUGIN_PATH already set
        // points at another Qt's plugins: it is dropped for the same reason.
        qunsetenv("QT_PLUGIN_PATH");
        qunsetenv("QT_QPA_PLATFORM_PLUGIN_PATH");
        QCoreApplication::setLibraryPaths({prefix + QStringLiteral("/plugins")});
        // The bundle has xcb and offscreen only. A session that asks for another platform
        // (QT_QPA_PLATFORM=wayland, or Qt's own pick on a KDE Wayland session) would stop with
        // "no Qt platform plugin could be initialized"; XWayland serves xcb there.
        const QString requested = qEnvironmentVariable("QT_QPA_PLATFORM");
        if (requested.isEmpty()) {
            if (qEnvironmentVariable("XDG_SESSION_TYPE") == QLatin1String("wayland") &&
                !hasPlatformPlugin(platformsDir, QStringLiteral("wayland")))
                qputenv("QT_QPA_PLATFORM", "xcb");
        } else {
            bool available = false;
            for (const QString& platform : requested.split(QLatin1Char(';'), Qt::SkipEmptyParts))
                available = available || hasPlatformPlugin(platformsDir, platform);
            if (!available) qputenv("QT_QPA_PLATFORM", QFile::encodeName(requested + QStringLiteral(";xcb")));
        }
    }

    const QString fonts = bundledFontsFolder(binDir);
    if (fonts.isEmpty()) return;
    // Read by Qt's font database when Qt was built without fontconfig.
    setIfUnset("QT_QPA_FONTDIR", fonts);
    // Without /etc/fonts/fonts.conf fontconfig knows no font folder at all (and says so on
    // stderr); the bundled configuration lists the system folders and the bundled one.
    const QString fontsConf = fonts + QStringLiteral("/fonts.conf");
    if (!QFileInfo::exists(QStringLiteral("/etc/fonts/fonts.conf")) && QFileInfo::exists(fontsConf))
        setIfUnset("FONTCONFIG_FILE", fontsConf);
}

QString registerBundledFonts() {
    const QString fonts = bundledFontsFolder(QCoreApplication::applicationDirPath());
    if (fonts.isEmpty()) return {};

    // What the system offers before the bundled fonts join: on a machine with no fonts this is
    // empty, and the default font resolves to nothing that can draw text.
    const QStringList systemFamilies = QFontDatabase::families();
    QStringList bundledFamilies;
    const QDir dir(fonts);
    for (const QString& file :
         dir.entryList({QStringLiteral("*.ttf"), QStringLiteral("*.otf")}, QDir::Files, QDir::Name)) {
        const int id = QFontDatabase::addApplicationFont(dir.filePath(file));
        if (id < 0) {
            qWarning("tessera: the bundled font %s cannot be loaded", qPrintable(dir.filePath(file)));
            continue;
        }
        for (const QString& family : QFontDatabase::applicationFontFamilies(id))
            if (!bundledFamilies.contains(family)) bundledFamilies << family;
    }
    if (bundledFamilies.isEmpty()) return {};

    QFont font = QGuiApplication::font();
    if (systemFamilies.contains(QFontInfo(font).family(), Qt::CaseInsensitive)) return {};
    font.setFamily(bundledFamilies.front());
    QGuiApplication::setFont(font);
    return bundledFamilies.front();
}

}  // namespace tessera
