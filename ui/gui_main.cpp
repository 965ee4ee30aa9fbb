// tessera: the workbench window.
//
// Hidden options for documentation and smoke tests (they work with QT_QPA_PLATFORM=offscreen):
//   --screenshot PATH   save a picture of the window to PATH, then quit; may be repeated, each
//                       picture paired in order with a --show VIEW (default "window")
//   --show VIEW         what the matching --screenshot shows: window (the default overlays),
//                       seam (the seam-map overlay), blend (blend weights of a middle tile) or
//                       compare (the compare window of the two newest runs in the history),
//                       graphs (the window with the graphs-versus-eager tab in front) or
//                       compare-graphs (the compare window that --compare-graphs opened)
//   --history DIR       keep the run history in DIR (default: the user's; with --fresh, a
//                       throw-away folder)
//   --delay MS          wait this long after showing the window before the picture (default 1500)
//   --run               press Run at start; without --delay the picture is taken when the run
//                       ends, with it after MS (mid-run: progress, highlight, live charts)
//   --compare-graphs    press Compare graphs at start; without --delay the picture is taken
//                       when the comparison ends
//   --preset FILE       load a preset (or a run manifest or run PNG) at start; exit 2 if unusable
//   --fresh             ignore (and do not change) the saved settings
#include <cstdio>
#include <memory>

#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QSettings>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTimer>

#include "app/RunHistory.h"
#include "ui/CompareView.h"
#include "ui/ConfigPanel.h"
#include "ui/GraphsPanel.h"
#include "ui/MainWindow.h"
#include "ui/TileCanvas.h"
#include "ui/TimingCharts.h"

#if __has_include("app/BundleEnvironment.h")
#include "app/BundleEnvironment.h"
#define TESSERA_HAVE_BUNDLE_ENVIRONMENT 1
#endif

#ifndef TESSERA_VERSION
#define TESSERA_VERSION "unknown"
#endif

namespace {

// Sets the window up for one screenshot view; returns the widget to grab (null: unknown view).
QWidget* prepareView(tessera::MainWindow& window, const QString& view) {
    using tessera::CanvasOverlay;
    if (view == QLatin1String("compare-graphs")) {
        // The compare window the comparison opened, with its note; nothing else changes.
        if (!window.compareView()) std::fprintf(stderr, "tessera: --show compare-graphs needs --compare-graphs\n");
        return window.compareView();
    }
    if (tessera::CompareView* open = window.compareView()) open->close();
    window.chartTabs()->setCurrentWidget(view == QLatin1String("graphs") ? static_cast<QWidget*>(window.graphsPanel())
                                                                          : static_cast<QWidget*>(window.charts()));
    window.overlayAction(CanvasOverlay::TileGrid)->setChecked(view != QLatin1String("seam"));
    window.overlayAction(CanvasOverlay::BlendWeights)->setChecked(view == QLatin1String("blend"));
    window.overlayAction(CanvasOverlay::SeamMap)->setChecked(view == QLatin1String("seam"));
    if (view == QLatin1String("window") || view == QLatin1String("seam") || view == QLatin1String("graphs")) return &window;
    if (view == QLatin1String("blend")) {
        const int tiles = window.lastRun() && window.lastRun()->result ? window.lastRun()->result->record.tileCount : 0;
        window.canvas()->setHoveredTile(tiles / 2);
        return &window;
    }
    if (view == QLatin1String("compare")) {
        const auto& entries = window.history().entries();
        if (entries.size() < 2) {
            std::fprintf(stderr, "tessera: --show compare needs two runs in the history (it has %zu)\n", entries.size());
            return nullptr;
        }
        QString error;
        tessera::CompareView* compare = window.compareRuns(entries[entries.size() - 2].id(), entries.back().id(), &error);
        if (!compare) std::fprintf(stderr, "tessera: %s\n", qPrintable(error));
        return compare;
    }
    std::fprintf(stderr, "tessera: unknown --show view '%s' (window, seam, blend, compare, graphs, compare-graphs)\n", qPrintable(view));
    return nullptr;
}

// Takes screenshot `index` of `paths` (view views[index]), then the next; quits after the last.
void takeScreenshots(tessera::MainWindow& window, QStringList views, QStringList paths, int index) {
    if (index >= paths.size()) {
        QApplication::exit(0);
        return;
    }
    window.charts()->flush();
    const QString view = index < views.size() ? views.at(index) : QStringLiteral("window");
    QWidget* target = prepareView(window, view);
    if (!target) {
        QApplication::exit(1);
        return;
    }
    // Let the queued replots and repaints land before grabbing.
    QTimer::singleShot(300, &window, [&window, target, views, paths, index] {
        const QString& path = paths.at(index);
        if (!target->grab().save(path)) {
            std::fprintf(stderr, "tessera: cannot write %s\n", qPrintable(path));
            QApplication::exit(1);
            return;
        }
        takeScreenshots(window, views, paths, index + 1);
    });
}

}  // namespace

int main(int argc, char** argv) {
#ifdef TESSERA_HAVE_BUNDLE_ENVIRONMENT
    // Before QApplication: Qt reads the plugin and font variables while it starts.
    tessera::setupBundledEnvironment(argc > 0 ? argv[0] : nullptr);
#endif
    QApplication app(argc, argv);
#ifdef TESSERA_HAVE_BUNDLE_ENVIRONMENT
    tessera::registerBundledFonts();
#endif
    QApplication::setOrganizationName(QStringLiteral("Tessera"));
    QApplication::setApplicationName(QStringLiteral("tessera"));
    QApplication::setApplicationDisplayName(QStringLiteral("Tessera"));
    QApplication::setApplicationVersion(QStringLiteral(TESSERA_VERSION));
    QApplication::setDesktopFileName(QStringLiteral("io.github.tessera.Tessera"));

    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral("Tiled high-resolution diffusion workbench"));
    parser.addHelpOption();
    parser.addVersionOption();
    QCommandLineOption screenshot(QStringLiteral("screenshot"), QStringLiteral("Save the window to PATH and quit."),
                                  QStringLiteral("PATH"));
    QCommandLineOption delay(QStringLiteral("delay"), QStringLiteral("Milliseconds before the screenshot."),
                             QStringLiteral("MS"), QStringLiteral("1500"));
    QCommandLineOption runAtStart(QStringLiteral("run"), QStringLiteral("Start a run at once."));
    QCommandLineOption compareAtStart(QStringLiteral("compare-graphs"), QStringLiteral("Start Compare graphs at once."));
    QCommandLineOption preset(QStringLiteral("preset"), QStringLiteral("Load a preset at start."), QStringLiteral("FILE"));
    QCommandLineOption fresh(QStringLiteral("fresh"), QStringLiteral("Ignore the saved settings."));
    QCommandLineOption show(QStringLiteral("show"), QStringLiteral("What the matching screenshot shows."), QStringLiteral("VIEW"));
    QCommandLineOption historyDir(QStringLiteral("history"), QStringLiteral("Run history folder."), QStringLiteral("DIR"));
    for (QCommandLineOption* option : {&screenshot, &delay, &runAtStart, &compareAtStart, &preset, &fresh, &show, &historyDir}) {
        option->setFlags(QCommandLineOption::HiddenFromHelp);
        parser.addOption(*option);
    }
    parser.process(app);

    // --fresh: settings in a throw-away file, so screenshots never depend on (or touch) the user's.
    QTemporaryDir scratch;
    std::unique_ptr<QSettings> settings;
    QString history = parser.value(historyDir);
    if (parser.isSet(fresh)) {
        settings = std::make_unique<QSettings>(scratch.filePath(QStringLiteral("tessera.ini")), QSettings::IniFormat);
        if (history.isEmpty()) history = scratch.filePath(QStringLiteral("history"));
    }

    tessera::MainWindow window(std::move(settings), history);
    if (parser.isSet(preset)) {
        // The same reader as File > Open preset (bounded, through core/BoundedInput); its
        // message names the file.
        QString error;
        if (!window.restoreConfigurationFrom(parser.value(preset), &error)) {
            std::fprintf(stderr, "tessera: preset: %s\n", qPrintable(error));
            return 2;
        }
    }
    window.show();

    if (parser.isSet(screenshot)) {
        const QStringList paths = parser.values(screenshot);
        const QStringList views = parser.values(show);
        const int delayMs = parser.value(delay).toInt();
        auto grab = [&window, paths, views] { takeScreenshots(window, views, paths, 0); };
        if (parser.isSet(compareAtStart) && !parser.isSet(delay)) {
            QObject::connect(&window, &tessera::MainWindow::graphComparisonEnded, &window,
                             [grab, delayMs](bool) { QTimer::singleShot(delayMs, grab); });
        } else if (parser.isSet(runAtStart) && !parser.isSet(delay)) {
            QObject::connect(&window, &tessera::MainWindow::runEnded, &window,
                             [grab, delayMs](bool) { QTimer::singleShot(delayMs, grab); });
        } else {
            QTimer::singleShot(delayMs, &window, grab);
        }
    }
    if (parser.isSet(runAtStart)) QTimer::singleShot(0, &window, &tessera::MainWindow::startRun);
    else if (parser.isSet(compareAtStart)) QTimer::singleShot(0, &window, &tessera::MainWindow::startGraphComparison);
    return QApplication::exec();
}
