// The tiny CPU render the window suites run, and a helper that runs it in a window.
// Header-only (not a suite: no tst_ prefix).
#pragma once

#include <cstdint>
#include <string>

#include <QAction>
#include <QFileInfo>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QString>
#include <QtTest>

#include "app/GuiThreadGuard.h"
#include "core/RunConfig.h"
#include "ui/ConfigPanel.h"
#include "ui/MainWindow.h"

namespace tessera::testing {

// Makes the running test function fail if the window's code reads or writes a file on the GUI
// thread (app/GuiThreadGuard.h). Every window suite calls it from init().
inline void failOnGuiThreadIo() {
    QTest::failOnWarning(QRegularExpression(QRegularExpression::escape(QString::fromLatin1(kGuiThreadViolationPrefix))));
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

// Puts `config` in the window, presses Run and waits for the end; true when the run finished.
inline bool runOnce(MainWindow& window, const RunConfig& config) {
    window.configPanel()->setConfig(config);
    if (!window.runAction()->isEnabled()) return false;
    QSignalSpy ended(&window, &MainWindow::runEnded);
    window.runAction()->trigger();
    return ended.wait(300000) && ended.at(0).at(0).toBool();
}

}  // namespace tessera::testing
