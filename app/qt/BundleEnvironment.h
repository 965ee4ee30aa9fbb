// BundleEnvironment: lets `tessera` run from the relocatable bundle (packaging/bundle) and from an
// install, on a machine that may have another Qt, no fonts and no fontconfig set-up.
//
// Layouts, found from the folder of the running executable (<prefix>/bin):
//   bundle   <prefix>/plugins/platforms (Qt plugins shipped with the bundle's own Qt libraries)
//            <prefix>/share/tessera/fonts (DejaVu Sans and a fonts.conf)
//   install  <prefix>/share/tessera/fonts when present (a .deb uses fonts-dejavu-core instead)
// A development build has neither, and both functions then change nothing.
#pragma once

#include <QString>

namespace tessera {

// Call first thing in main(), before QApplication exists: Qt reads these variables while it
// starts. In a bundle it makes the bundle's plugins folder Qt's only plugin path for this
// process (QCoreApplication::setLibraryPaths; QT_PLUGIN_PATH and QT_QPA_PLATFORM_PLUGIN_PATH are
// unset: a system Qt's plugins would not match the bundled Qt libraries), falls back to xcb
// where the session asks for a platform the bundle lacks (Wayland), sets QT_QPA_FONTDIR to the
// bundled fonts (read by Qt builds without fontconfig), and, when the machine has no fontconfig
// configuration (/etc/fonts/fonts.conf) and FONTCONFIG_FILE is unset, sets FONTCONFIG_FILE to
// the bundled fonts.conf so fontconfig finds the bundled and system fonts instead of none.
// argv0 is used only when /proc/self/exe cannot be read. Never throws.
void setupBundledEnvironment(const char* argv0);

// Call right after QApplication is constructed. Registers every bundled .ttf/.otf with
// QFontDatabase::addApplicationFont, and when the application's default font does not resolve
// to a family the system itself provides (a machine with no fonts draws empty boxes otherwise),
// makes the first bundled family the application font. Returns the family now used as the
// application font when it was changed, else an empty string. GUI thread only.
QString registerBundledFonts();

// The bundled fonts folder (<exe dir>/../share/tessera/fonts), or empty when there is none.
// executableDir: QCoreApplication::applicationDirPath() or the folder of argv[0].
QString bundledFontsFolder(const QString& executableDir);

}  // namespace tessera
