// tessera: the workbench window.
//
// Hidden options for documentation and smoke tests (they work with QT_QPA_PLATFORM=offscreen):
//   --screenshot PATH   save a picture of the window to PATH, then quit
//   --delay MS          wait this long after showing the window before the picture (default 1500)
//   --run               press Run at start; without --delay the picture is taken when the run
//                       ends, with it after MS (mid-run: progress, highlight, live charts)
//   --preset FILE       load a preset at start
//   --fresh             ignore (and do not change) the saved settings
#include <cstdio>
#include <fstream>
#include <memory>

#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QSettings>
#include <QTemporaryDir>
#include <QTimer>

#include <nlohmann/json.hpp>

#include "ui/ConfigPanel.h"
#include "ui/MainWindow.h"
#include "ui/TimingCharts.h"

#ifndef TESSERA_VERSION
#define TESSERA_VERSION "unknown"
#endif

int main(int argc, char** argv) {
    QApplication app(argc, argv);
    QApplication::setOrganizationName(QStringLiteral("Tessera"));
    QApplication::setApplicationName(QStringLiteral("tessera"));
    QApplication::setApplicationDisplayName(QStringLiteral("Tessera"));
    QApplication::setApplicationVersion(QStringLiteral(TESSERA_VERSION));
    QApplication::setDesktopFileName(QStringLiteral("tessera"));

    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral("Tiled high-resolution diffusion workbench"));
    parser.addHelpOption();
    parser.addVersionOption();
    QCommandLineOption screenshot(QStringLiteral("screenshot"), QStringLiteral("Save the window to PATH and quit."),
                                  QStringLiteral("PATH"));
    QCommandLineOption delay(QStringLiteral("delay"), QStringLiteral("Milliseconds before the screenshot."),
                             QStringLiteral("MS"), QStringLiteral("1500"));
    QCommandLineOption runAtStart(QStringLiteral("run"), QStringLiteral("Start a run at once."));
    QCommandLineOption preset(QStringLiteral("preset"), QStringLiteral("Load a preset at start."), QStringLiteral("FILE"));
    QCommandLineOption fresh(QStringLiteral("fresh"), QStringLiteral("Ignore the saved settings."));
    for (QCommandLineOption* option : {&screenshot, &delay, &runAtStart, &preset, &fresh}) {
        option->setFlags(QCommandLineOption::HiddenFromHelp);
        parser.addOption(*option);
    }
    parser.process(app);

    // --fresh: settings in a throw-away file, so screenshots never depend on (or touch) the user's.
    QTemporaryDir scratch;
    std::unique_ptr<QSettings> settings;
    if (parser.isSet(fresh))
        settings = std::make_unique<QSettings>(scratch.filePath(QStringLiteral("tessera.ini")), QSettings::IniFormat);

    tessera::MainWindow window(std::move(settings));
    if (parser.isSet(preset)) {
        try {
            std::ifstream file(parser.value(preset).toStdString());
            if (!file) throw std::runtime_error("cannot be opened");
            window.configPanel()->setConfig(tessera::runConfigFromJson(nlohmann::json::parse(file)));
        } catch (const std::exception& e) {
            std::fprintf(stderr, "tessera: preset %s: %s\n", qPrintable(parser.value(preset)), e.what());
            return 2;
        }
    }
    window.show();

    if (parser.isSet(screenshot)) {
        const QString path = parser.value(screenshot);
        const int delayMs = parser.value(delay).toInt();
        auto grab = [&window, path] {
            window.charts()->flush();
            // Let the queued replots and repaints land before grabbing.
            QTimer::singleShot(200, &window, [&window, path] {
                const bool saved = window.grab().save(path);
                if (!saved) std::fprintf(stderr, "tessera: cannot write %s\n", qPrintable(path));
                QApplication::exit(saved ? 0 : 1);
            });
        };
        if (parser.isSet(runAtStart) && !parser.isSet(delay)) {
            QObject::connect(&window, &tessera::MainWindow::runEnded, &window,
                             [grab, delayMs](bool) { QTimer::singleShot(delayMs, grab); });
        } else {
            QTimer::singleShot(delayMs, &window, grab);
        }
    }
    if (parser.isSet(runAtStart)) QTimer::singleShot(0, &window, &tessera::MainWindow::startRun);
    return QApplication::exec();
}
