// The tiny CPU render the window suites run, a helper that runs it in a window, and helpers
// that wait for the answers the window gets off the GUI thread (model checks, history, files).
// Header-only (not a suite: no tst_ prefix).
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <string>

#include <QAction>
#include <QFileInfo>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QString>
#include <QTemporaryDir>
#include <QtTest>

#include "app/qt/Exporters.h"
#include "app/qt/GuiThreadGuard.h"
#include "app/qt/SettingsFile.h"
#include "core/run/RunConfig.h"
#include "ui/CompareView.h"
#include "ui/ConfigPanel.h"
#include "ui/MainWindow.h"

namespace tessera::testing {

// The child of `parent` named `name`; a missing one ends the suite (a renamed widget, not a
// failed behaviour).
template <typename T>
T* child(QObject* parent, const char* name) {
    T* found = parent->findChild<T*>(QString::fromLatin1(name));
    if (!found) qFatal("no child named %s", name);
    return found;
}

// Runs `work` on another thread and waits for its result: the suites' own file IO, which the
// GUI-thread guard would otherwise count against the window.
template <typename Work>
auto offGuiThread(Work work) {
    return std::async(std::launch::async, work).get();
}

// A scratch folder for the window suites: fresh settings files and history folders, so that no
// window a test opens starts from what an earlier test left.
class WindowScratch {
public:
    bool isValid() const { return dir_.isValid(); }
    QString filePath(const QString& name) const { return dir_.filePath(name); }
    QString freshPath(const QString& what) { return dir_.filePath(QStringLiteral("%1-%2").arg(what).arg(++count_)); }
    std::unique_ptr<SettingsFile> freshSettings() {
        return std::make_unique<SettingsFile>(freshPath(QStringLiteral("s.ini")));
    }

private:
    QTemporaryDir dir_;
    int count_ = 0;
};

// Makes the running test function fail if the window's code reads or writes a file on the GUI
// thread (app/qt/GuiThreadGuard.h). Every window suite calls it from init().
inline void failOnGuiThreadIo() {
    QTest::failOnWarning(
        QRegularExpression(QRegularExpression::escape(QString::fromLatin1(kGuiThreadViolationPrefix))));
}

inline QString testModelFolder() { return QStringLiteral(TESSERA_TEST_DATA "/models/cifar_like"); }

inline bool haveTestModel() {
    return QFileInfo(testModelFolder() + QStringLiteral("/diffusion_pytorch_model.safetensors")).isFile();
}

// 64 x 64, 2 steps, 3 x 3 tiles of 32 px (overlap 8) in batches of 2 (5 batches a step), on
// the CPU in fp32 with the test model.
inline RunConfig tinyRunConfig(std::uint64_t seed, std::string label = {}) {
    RunConfig c;
    c.width = 64;
    c.height = 64;
    c.seed = seed;
    c.steps = 2;
    c.tile = 32;
    c.overlapPx = 8;
    c.tileBatch = 2;
    c.model = testModelFolder().toStdString();
    c.backend = BackendKind::CPU;
    c.precision = Precision::FP32;
    c.label = std::move(label);
    return c;
}

// Waits until the panel has its answers about the model and the start image (found off the
// GUI thread); true when they came within the time.
inline bool waitForModelCheck(const ConfigPanel& panel) {
    return QTest::qWaitFor([&panel] { return !panel.isCheckingModel() && !panel.isCheckingStartImage(); }, 60000);
}

// Puts `config` in the panel and waits for the model folder's answer.
inline bool setConfigAndWait(ConfigPanel& panel, const RunConfig& config) {
    panel.setConfig(config);
    return waitForModelCheck(panel);
}

// Waits until the history is loaded and every request sent to it is answered.
inline bool waitForHistory(const MainWindow& window) {
    return QTest::qWaitFor([&window] { return window.history().isLoaded() && window.history().pendingJobs() == 0; },
                           60000);
}

// Puts `config` in the window, presses Run and waits for the end, and for a finished run to
// be in the history; true when the run finished.
inline bool runOnce(MainWindow& window, const RunConfig& config) {
    if (!setConfigAndWait(*window.configPanel(), config) || !window.runAction()->isEnabled()) return false;
    QSignalSpy ended(&window, &MainWindow::runEnded);
    window.runAction()->trigger();
    if (!ended.wait(300000) || !ended.at(0).at(0).toBool()) return false;
    const QString id = QString::fromStdString(window.lastRun()->result->record.runId);
    return QTest::qWaitFor([&window, &id] { return window.history().find(id) != nullptr; }, 60000);
}

// restoreConfigurationFrom, waited for: true when the file's configuration is in the panel,
// else false with *error set.
inline bool restoreAndWait(MainWindow& window, const QString& path, QString* error) {
    QSignalSpy restored(&window, &MainWindow::configurationRestored);
    window.restoreConfigurationFrom(path);
    if (!restored.wait(60000)) {
        *error = QStringLiteral("no configurationRestored signal");
        return false;
    }
    *error = restored.at(0).at(2).toString();
    return restored.at(0).at(1).toBool() && waitForModelCheck(*window.configPanel());
}

// exportTo, waited for: true when written, else false with *error set.
inline bool exportAndWait(MainWindow& window, ExportFormat format, const QString& path, MainWindow::Overwrite overwrite,
                          QString* error) {
    QSignalSpy finished(&window, &MainWindow::exportFinished);
    window.exportTo(format, path, overwrite);
    if (finished.isEmpty() && !finished.wait(60000)) {
        *error = QStringLiteral("no exportFinished signal");
        return false;
    }
    *error = finished.at(0).at(2).toString();
    return finished.at(0).at(1).toBool();
}

// compareRuns, waited for: the compare window once open, else null with *error set.
inline CompareView* compareAndWait(MainWindow& window, const QString& idA, const QString& idB, QString* error) {
    QSignalSpy opened(&window, &MainWindow::compareViewOpened);
    if (!window.compareRuns(idA, idB, error)) return nullptr;
    if (!opened.wait(60000)) {
        *error = QStringLiteral("no compareViewOpened signal");
        return nullptr;
    }
    return window.compareView();
}

}  // namespace tessera::testing
