// tessera: the workbench window.
//
// Hidden options for documentation and smoke tests (they work with QT_QPA_PLATFORM=offscreen):
//   --screenshot PATH   save a picture of the window to PATH, then quit; may be repeated, each
//                       picture paired in order with a --show VIEW (default "window")
//   --show VIEW         what the matching --screenshot shows: window (the default overlays),
//                       seam (the seam-map overlay), blend (blend weights of a middle tile) or
//                       compare (the compare window of the two newest runs in the history),
//                       graphs (the window with the graphs-versus-eager tab in front),
//                       compare-graphs (the compare window that --compare-graphs opened),
//                       before-after (the before/after split of the run just made from a
//                       start image, the settings scrolled to the Start image group),
//                       reopened (the newest run of the history opened again, as after a
//                       restart), models (the model picker, once it has listed
//                       the models folder, with its first checkpoint selected and hashed)
//                       or noise (the window, the settings scrolled so that the seed and the
//                       Noise group end the view), tiling (likewise the Tiling group), controlnet (the before/after split of a run
//                       with a ControlNet, the settings scrolled to the ControlNet group and the
//                       hint it saw in the charts' "ControlNet hint" tab)
//   --models DIR        the models folder the picker lists (default: the saved setting)
//   --history DIR       keep the run history in DIR (default: the user's; with --fresh, a
//                       throw-away folder)
//   --delay MS          wait this long after showing the window before the picture (default 1500)
//   --run               press Run at start; without --delay the picture is taken when the run
//                       ends, with it after MS (mid-run: progress, highlight, live charts)
//   --compare-graphs    press Compare graphs at start; without --delay the picture is taken
//                       when the comparison ends
//   --preset FILE       load a preset (or a run manifest or run PNG) at start; exit 2 if unusable
//   --parameters FILE   then apply an image's generation parameters (File > Load parameters from
//                       PNG/JPEG…: an A1111 or ComfyUI PNG, an A1111 JPEG); exit 2 if unusable
//   --fresh             ignore (and do not change) the saved settings
#include <cstdio>
#include <functional>
#include <memory>
#include <stdexcept>
#include <vector>

#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QScrollArea>
#include <QScrollBar>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTimer>
#include <QTreeWidget>

#include "app/qt/JobQueue.h"
#include "core/cpu/CpuBackend.h"
#include "ui/CompareView.h"
#include "ui/ConfigPanel.h"
#include "ui/ControlHintView.h"
#include "ui/ControlNetGroup.h"
#include "ui/GraphsPanel.h"
#include "ui/MainWindow.h"
#include "ui/ModelPicker.h"
#include "ui/TileCanvas.h"
#include "ui/TimingCharts.h"

#if __has_include("app/qt/BundleEnvironment.h")
#include "app/qt/BundleEnvironment.h"
#define TESSERA_HAVE_BUNDLE_ENVIRONMENT 1
#endif

#ifndef TESSERA_VERSION
#define TESSERA_VERSION "unknown"
#endif

namespace {

// Calls `then` once nothing about the model or the start image is being looked up any more
// (the default model is located, the folder shown inspected and the start image's header read,
// off the GUI thread), so Run is enabled if it can be.
void whenModelChecked(tessera::MainWindow& window, const std::function<void()>& then) {
    tessera::ConfigPanel* panel = window.configPanel();
    const auto checking = [panel] { return panel->isCheckingModel() || panel->isCheckingStartImage(); };
    if (!checking()) return then();
    auto connections = std::make_shared<std::vector<QMetaObject::Connection>>();
    const auto answered = [checking, connections, then] {
        if (checking()) return;
        for (const QMetaObject::Connection& c : *connections) QObject::disconnect(c);
        then();
    };
    connections->push_back(QObject::connect(panel, &tessera::ConfigPanel::modelChecked, &window, answered));
    connections->push_back(QObject::connect(panel, &tessera::ConfigPanel::startImageChecked, &window, answered));
}

// Opens the newest run of the history (once loaded), then calls `ready` with the window (null
// when there is none or it cannot be opened).
void openNewestRun(tessera::MainWindow& window, const std::function<void(QWidget*)>& ready) {
    const tessera::HistoryStore& history = window.history();
    if (!history.isLoaded() || history.pendingJobs() > 0) {
        QTimer::singleShot(50, &window, [&window, ready] { openNewestRun(window, ready); });
        return;
    }
    if (history.entries().empty()) {
        std::fprintf(stderr, "tessera: --show reopened needs a run in the history\n");
        return ready(nullptr);
    }
    QObject::connect(
        &window, &tessera::MainWindow::historyRunOpened, &window,
        [&window, ready](const QString&, bool ok, const QString& error) {
            if (!ok) std::fprintf(stderr, "tessera: %s\n", qPrintable(error));
            ready(ok ? &window : nullptr);
        },
        Qt::SingleShotConnection);
    QString error;
    if (!window.openFromHistory(history.entries().back().id(), &error)) {
        std::fprintf(stderr, "tessera: %s\n", qPrintable(error));
        ready(nullptr);
    }
}

// Opens the model picker; once it has listed the models folder, selects its first checkpoint
// and calls `ready` with the picker when that row's hash is shown.
void showModelPicker(tessera::MainWindow& window, const std::function<void(QWidget*)>& ready) {
    tessera::ModelPicker* picker = window.configPanel()->openModelPicker();
    QObject::connect(
        picker, &tessera::ModelPicker::listed, picker,
        [&window, picker, ready] {
            QTreeWidgetItem* folder = picker->tree()->topLevelItem(1);
            for (int i = 0; i < folder->childCount(); ++i) {
                if (folder->child(i)->text(tessera::ModelPicker::HashColumn) == QStringLiteral("—")) continue;
                picker->tree()->setCurrentItem(folder->child(i));
                QObject::connect(
                    &window.configPanel()->modelCatalog(), &tessera::ModelCatalog::hashed, picker,
                    [picker, ready](const QString&, const QString&, const QString&) { ready(picker); },
                    Qt::SingleShotConnection);
                return;
            }
            ready(picker);
        },
        Qt::SingleShotConnection);
}

// Sets the window up for one screenshot view, then calls `ready` with the widget to grab (null:
// unknown view or nothing to show) — at once, or for "compare" when the history is loaded and
// the compare window has read its images.
void prepareView(tessera::MainWindow& window, const QString& view, const std::function<void(QWidget*)>& ready) {
    using tessera::CanvasOverlay;
    if (view == QLatin1String("compare-graphs")) {
        // The compare window the comparison opened, with its note; nothing else changes.
        if (!window.compareView()) std::fprintf(stderr, "tessera: --show compare-graphs needs --compare-graphs\n");
        return ready(window.compareView());
    }
    if (tessera::CompareView* open = window.compareView()) open->close();
    window.chartTabs()->setCurrentWidget(view == QLatin1String("graphs") ? static_cast<QWidget*>(window.graphsPanel())
                                                                         : static_cast<QWidget*>(window.charts()));
    window.overlayAction(CanvasOverlay::TileGrid)->setChecked(view != QLatin1String("seam"));
    window.overlayAction(CanvasOverlay::BlendWeights)->setChecked(view == QLatin1String("blend"));
    window.overlayAction(CanvasOverlay::SeamMap)->setChecked(view == QLatin1String("seam"));
    if (view == QLatin1String("window") || view == QLatin1String("seam") || view == QLatin1String("graphs"))
        return ready(&window);
    if (view == QLatin1String("before-after")) {
        if (!window.beforeAfterAction()->isEnabled()) {
            std::fprintf(stderr,
                         "tessera: --show before-after needs a run from a start image (--preset with init, --run)\n");
            return ready(nullptr);
        }
        window.beforeAfterAction()->setChecked(true);
        // The settings it was made with in view: the Start image group (image, scale, upscaler)
        // at the top of the settings.
        QWidget* group = window.configPanel()->startImageGroup();
        for (QWidget* up = group->parentWidget(); up; up = up->parentWidget())
            if (auto* scroll = qobject_cast<QScrollArea*>(up)) {
                scroll->verticalScrollBar()->setValue(group->mapTo(scroll->widget(), QPoint(0, 0)).y());
                break;
            }
        return ready(&window);
    }
    if (view == QLatin1String("controlnet")) {
        // The ControlNet group at the top of the settings, the hint beside the before/after split.
        if (window.beforeAfterAction()->isEnabled()) window.beforeAfterAction()->setChecked(true);
        window.chartTabs()->setCurrentWidget(window.controlHintView());
        QWidget* group = window.configPanel()->controlNetGroup();
        for (QWidget* up = group->parentWidget(); up; up = up->parentWidget())
            if (auto* scroll = qobject_cast<QScrollArea*>(up)) {
                scroll->verticalScrollBar()->setValue(group->mapTo(scroll->widget(), QPoint(0, 0)).y());
                break;
            }
        return ready(&window);
    }
    if (view == QLatin1String("noise") || view == QLatin1String("tiling")) {
        // The seed and the noise settings (source, A1111's extra seed settings), or the tiling settings
        // (tile, overlap, window, fusion, tile shift), at the foot of the view.
        auto* group = window.configPanel()->findChild<QWidget*>(
            view == QLatin1String("noise") ? QStringLiteral("noiseGroup") : QStringLiteral("tilingGroup"));
        for (QWidget* up = group ? group->parentWidget() : nullptr; up; up = up->parentWidget())
            if (auto* scroll = qobject_cast<QScrollArea*>(up)) {
                const int bottom = group->mapTo(scroll->widget(), QPoint(0, group->height())).y();
                scroll->verticalScrollBar()->setValue(bottom + 6 - scroll->viewport()->height());
                break;
            }
        return ready(&window);
    }
    if (view == QLatin1String("reopened")) return openNewestRun(window, ready);
    if (view == QLatin1String("models")) return showModelPicker(window, ready);
    if (view == QLatin1String("blend")) {
        const int tiles = window.lastRun() && window.lastRun()->result ? window.lastRun()->result->record.tileCount : 0;
        window.canvas()->setHoveredTile(tiles / 2);
        return ready(&window);
    }
    if (view == QLatin1String("compare")) {
        const tessera::HistoryStore& history = window.history();
        if (!history.isLoaded() || history.pendingJobs() > 0) {
            // The history is still being read or written: ask again once it has settled.
            QTimer::singleShot(50, &window, [&window, view, ready] { prepareView(window, view, ready); });
            return;
        }
        const auto& entries = history.entries();
        if (entries.size() < 2) {
            std::fprintf(stderr, "tessera: --show compare needs two runs in the history (it has %zu)\n",
                         entries.size());
            return ready(nullptr);
        }
        QObject::connect(&window, &tessera::MainWindow::compareViewOpened, &window, ready, Qt::SingleShotConnection);
        QString error;
        if (!window.compareRuns(entries[entries.size() - 2].id(), entries.back().id(), &error)) {
            std::fprintf(stderr, "tessera: %s\n", qPrintable(error));
            ready(nullptr);
        }
        return;
    }
    std::fprintf(
        stderr,
        "tessera: unknown --show view '%s' (window, seam, blend, compare, graphs, compare-graphs, before-after, "
        "reopened, models, noise, tiling, controlnet)\n",
        qPrintable(view));
    ready(nullptr);
}

// Takes screenshot `index` of `paths` (view views[index]), then the next; quits after the last.
// The pictures are encoded and written on `files`, off the GUI thread.
void takeScreenshots(tessera::MainWindow& window, tessera::JobQueue& files, const QStringList& views,
                     const QStringList& paths, int index) {
    if (index >= paths.size()) {
        QApplication::exit(0);
        return;
    }
    window.charts()->flush();
    const QString view = index < views.size() ? views.at(index) : QStringLiteral("window");
    prepareView(window, view, [&window, &files, views, paths, index](QWidget* target) {
        if (!target) {
            QApplication::exit(1);
            return;
        }
        // Let the queued replots and repaints land before grabbing.
        QTimer::singleShot(300, &window, [&window, &files, target, views, paths, index] {
            const QString& path = paths.at(index);
            files.start(
                [image = target->grab().toImage(), path] {
                    if (!image.save(path)) throw std::runtime_error("cannot write " + path.toStdString());
                    return true;
                },
                [&window, &files, views, paths, index](quint64, bool) {
                    takeScreenshots(window, files, views, paths, index + 1);
                },
                [](quint64, const QString& error) {
                    std::fprintf(stderr, "tessera: %s\n", qPrintable(error));
                    QApplication::exit(1);
                });
        });
    });
}

// The command line's options; the hidden ones serve documentation and smoke tests.
struct GuiOptions {
    QCommandLineOption screenshot{QStringLiteral("screenshot"), QStringLiteral("Save the window to PATH and quit."),
                                  QStringLiteral("PATH")};
    QCommandLineOption delay{QStringLiteral("delay"), QStringLiteral("Milliseconds before the screenshot."),
                             QStringLiteral("MS"), QStringLiteral("1500")};
    QCommandLineOption runAtStart{QStringLiteral("run"), QStringLiteral("Start a run at once.")};
    QCommandLineOption compareAtStart{QStringLiteral("compare-graphs"),
                                      QStringLiteral("Start Compare graphs at once.")};
    QCommandLineOption preset{QStringLiteral("preset"), QStringLiteral("Load a preset at start."),
                              QStringLiteral("FILE")};
    QCommandLineOption fresh{QStringLiteral("fresh"), QStringLiteral("Ignore the saved settings.")};
    QCommandLineOption show{QStringLiteral("show"), QStringLiteral("What the matching screenshot shows."),
                            QStringLiteral("VIEW")};
    QCommandLineOption historyDir{QStringLiteral("history"), QStringLiteral("Run history folder."),
                                  QStringLiteral("DIR")};
    QCommandLineOption modelsDir{QStringLiteral("models"), QStringLiteral("Models folder the picker lists."),
                                 QStringLiteral("DIR")};
    QCommandLineOption parameters{QStringLiteral("parameters"),
                                  QStringLiteral("Apply an image's generation parameters at start."),
                                  QStringLiteral("FILE")};

    void addTo(QCommandLineParser& parser) {
        parser.setApplicationDescription(
            QStringLiteral("Tiled high-resolution diffusion workbench: the window. tessera-cli renders, benchmarks and "
                           "compares without one (tessera-cli --help)."));
        parser.addHelpOption();
        parser.addVersionOption();
        for (QCommandLineOption* option : {&screenshot, &delay, &runAtStart, &compareAtStart, &preset, &fresh, &show,
                                           &historyDir, &modelsDir, &parameters}) {
            option->setFlags(QCommandLineOption::HiddenFromHelp);
            parser.addOption(*option);
        }
    }
};

void setApplicationNames() {
    QCoreApplication::setOrganizationName(QStringLiteral("Tessera"));
    QCoreApplication::setApplicationName(QStringLiteral("tessera"));
    QCoreApplication::setApplicationVersion(QStringLiteral(TESSERA_VERSION));
}

// --help and --version answer on the terminal: they need no display, so they are answered before
// the window's QApplication (which needs one) exists.
bool asksForHelpOrVersion(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        const QByteArray arg(argv[i]);
        if (arg == "--") return false;
        if (arg == "-h" || arg == "--help" || arg == "-?" || arg == "--help-all" || arg == "-v" || arg == "--version")
            return true;
    }
    return false;
}

}  // namespace

int main(int argc, char** argv) {
    if (asksForHelpOrVersion(argc, argv)) {
        QCoreApplication terminal(argc, argv);
        setApplicationNames();
        QCommandLineParser parser;
        GuiOptions options;
        options.addTo(parser);
        parser.process(terminal);  // prints the help or the version and exits
        return 0;
    }
    // OpenBLAS's kernels for this CPU where it loaded older ones (a restart, before Qt starts).
    tessera::restartWithOpenblasKernelsForThisCpu(argv);
#ifdef TESSERA_HAVE_BUNDLE_ENVIRONMENT
    // Before QApplication: Qt reads the plugin and font variables while it starts.
    tessera::setupBundledEnvironment(argc > 0 ? argv[0] : nullptr);
#endif
    QApplication app(argc, argv);
#ifdef TESSERA_HAVE_BUNDLE_ENVIRONMENT
    tessera::registerBundledFonts();
#endif
    setApplicationNames();
    QApplication::setApplicationDisplayName(QStringLiteral("Tessera"));
    QApplication::setDesktopFileName(QStringLiteral("io.github.tessera.Tessera"));

    QCommandLineParser parser;
    GuiOptions options;
    options.addTo(parser);
    parser.process(app);
    const QCommandLineOption& screenshot = options.screenshot;
    const QCommandLineOption& delay = options.delay;
    const QCommandLineOption& runAtStart = options.runAtStart;
    const QCommandLineOption& compareAtStart = options.compareAtStart;
    const QCommandLineOption& preset = options.preset;
    const QCommandLineOption& fresh = options.fresh;
    const QCommandLineOption& show = options.show;
    const QCommandLineOption& historyDir = options.historyDir;
    const QCommandLineOption& modelsDir = options.modelsDir;
    const QCommandLineOption& parameters = options.parameters;

    // --fresh: settings in a throw-away file, so screenshots never depend on (or touch) the user's.
    QTemporaryDir scratch;
    std::unique_ptr<tessera::SettingsFile> settings;
    QString history = parser.value(historyDir);
    if (parser.isSet(fresh)) {
        settings = std::make_unique<tessera::SettingsFile>(scratch.filePath(QStringLiteral("tessera.conf")));
        if (history.isEmpty()) history = scratch.filePath(QStringLiteral("history"));
    }

    tessera::JobQueue files(1);
    tessera::MainWindow window(std::move(settings), history);
    if (parser.isSet(modelsDir)) window.configPanel()->setModelsFolder(parser.value(modelsDir));
    const auto showWindow = [&] {
        window.show();
        if (parser.isSet(screenshot)) {
            const QStringList paths = parser.values(screenshot);
            const QStringList views = parser.values(show);
            const int delayMs = parser.value(delay).toInt();
            auto grab = [&window, &files, paths, views] { takeScreenshots(window, files, views, paths, 0); };
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
        // Run is enabled once the model is known to be usable (checked off the GUI thread).
        if (parser.isSet(runAtStart))
            whenModelChecked(window, [&window] { window.startRun(); });
        else if (parser.isSet(compareAtStart))
            whenModelChecked(window, [&window] { window.startGraphComparison(); });
    };
    // --parameters after --preset: as File > Load parameters does it (read off the GUI thread).
    const auto begin = [&] {
        if (!parser.isSet(parameters)) return showWindow();
        QObject::connect(
            &window, &tessera::MainWindow::parametersApplied, &window,
            [&showWindow](const QString&, bool ok, const QString& error, const QStringList&) {
                if (ok) return showWindow();
                std::fprintf(stderr, "tessera: parameters: %s\n", qPrintable(error));
                QApplication::exit(2);
            },
            Qt::SingleShotConnection);
        window.loadParametersFrom(parser.value(parameters));
    };
    if (parser.isSet(preset)) {
        // The same reader as File > Open preset (bounded, through core/base/BoundedInput.h, off the GUI
        // thread); its message names the file. The window shows once the preset is in.
        QObject::connect(
            &window, &tessera::MainWindow::configurationRestored, &window,
            [begin](const QString&, bool ok, const QString& error) {
                if (ok) return begin();
                std::fprintf(stderr, "tessera: preset: %s\n", qPrintable(error));
                QApplication::exit(2);
            },
            Qt::SingleShotConnection);
        window.restoreConfigurationFrom(parser.value(preset));
    } else {
        begin();
    }
    return QApplication::exec();
}
