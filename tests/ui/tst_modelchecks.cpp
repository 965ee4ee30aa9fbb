// What the window says about a model and a run before and after Run, where a person on a machine
// without a GPU would otherwise find out late: a file that is no safetensors file is marked when it
// is chosen (its header read off the GUI thread); SDXL is named as such and its clip skip box,
// which it ignores, is disabled and says why; the precision follows what the device computes; a
// tile longer than the image is said to be clamped; a run that fails keeps the image shown before
// it, and a stopped run keeps the last preview (canvas, history) rather than the noisy canvas.
#include <QComboBox>
#include <QFile>
#include <QLabel>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include <future>

#include "TinyRun.h"
#include "app/qt/HistoryStore.h"
#include "ui/ConfigPanel.h"
#include "ui/MainWindow.h"
#include "ui/TileCanvas.h"

using namespace tessera;
using namespace tessera::testing;

class TestModelChecks : public QObject {
    Q_OBJECT

private:
    WindowScratch scratch_;
    QString freshPath(const QString& what) { return scratch_.freshPath(what); }
    std::unique_ptr<SettingsFile> freshSettings() { return scratch_.freshSettings(); }

private slots:
    void init() { failOnGuiThreadIo(); }

    void initTestCase() {
        QVERIFY(scratch_.isValid());
        QStandardPaths::setTestModeEnabled(true);
    }

    void fileThatIsNoSafetensorsIsMarkedWhenChosen() {
        const QString fake = scratch_.filePath(QStringLiteral("dreamshaper_8.safetensors"));
        QVERIFY(offGuiThread([&] {
            QFile file(fake);
            return file.open(QIODevice::WriteOnly) &&
                   file.write("This is the model card, saved as text by the browser.\nLicense: CreativeML\n") > 0;
        }));
        MainWindow window(freshSettings(), freshPath("history"));
        RunConfig c = tinyRunConfig(1);
        c.model = fake.toStdString();
        QVERIFY(setConfigAndWait(*window.configPanel(), c));
        const QString problem = window.configPanel()->problemFor(QStringLiteral("model"));
        QVERIFY2(problem.contains("header length") && problem.contains("dreamshaper_8.safetensors"),
                 qPrintable(problem));
        QVERIFY(!window.runAction()->isEnabled());
        QVERIFY(!child<QLabel>(window.configPanel(), "modelError")->isHidden());
    }

    void sdxlIsNamedAndItsClipSkipDisabled() {
        ConfigPanel panel;
        RunConfig c;
        c.model = "random:sdxl";
        c.width = c.height = 256;
        c.tile = 128;
        QVERIFY(setConfigAndWait(panel, c));
        auto* info = child<QLabel>(&panel, "modelInfo");
        QVERIFY2(info->text().contains("Stable Diffusion XL"), qPrintable(info->text()));
        auto* clipSkip = child<QSpinBox>(&panel, "clipSkipSpin");
        QVERIFY(!clipSkip->isEnabled());
        QVERIFY2(clipSkip->toolTip().contains("ignores clip skip"), qPrintable(clipSkip->toolTip()));
        QVERIFY(child<QWidget>(&panel, "promptEdit")->isEnabled());

        c.model = "random:sd15";
        QVERIFY(setConfigAndWait(panel, c));
        QVERIFY2(info->text().contains("Stable Diffusion 1"), qPrintable(info->text()));
        QVERIFY(clipSkip->isEnabled());
        QVERIFY(!clipSkip->toolTip().contains("ignores"));
    }

    void precisionFollowsWhatTheDeviceComputes() {
        ConfigPanel panel;
        auto* precision = child<QComboBox>(&panel, "precisionCombo");
        QCOMPARE(panel.config().precision == Precision::FP16, true);  // RunConfig's default
        DeviceReport cpuOnly;
        cpuOnly.cudaReason = "no NVIDIA driver";
        panel.setDeviceReport(cpuOnly);
        QCOMPARE(precision->currentText(), QStringLiteral("FP32"));
        QVERIFY(child<QLabel>(&panel, "computeNote")->isHidden());  // nothing asked that will not run
        // A precision the person picks stays.
        precision->setCurrentIndex(precision->findText(QStringLiteral("BF16")));
        emit precision->activated(precision->currentIndex());
        panel.setDeviceReport(cpuOnly);
        QCOMPARE(precision->currentText(), QStringLiteral("BF16"));

        // The window on this machine (the tests run without CUDA): FP32 once the devices are known.
        MainWindow window(freshSettings(), freshPath("history"));
        auto* shown = child<QComboBox>(window.configPanel(), "precisionCombo");
        QTRY_VERIFY_WITH_TIMEOUT(!window.configPanel()->graphsUnavailableReason().startsWith("Looking"), 60000);
        if (window.configPanel()->graphsUnavailableReason().isEmpty()) QSKIP("a CUDA device is usable here");
        QCOMPARE(shown->currentText(), QStringLiteral("FP32"));
    }

    void tileLongerThanTheImageIsSaidToBeClamped() {
        ConfigPanel panel;
        RunConfig c = tinyRunConfig(1);
        c.width = c.height = 256;
        c.tile = 512;
        c.overlapPx = 16;
        QVERIFY(setConfigAndWait(panel, c));
        auto* note = child<QLabel>(&panel, "tileClampNote");
        QVERIFY(!note->isHidden());
        QVERIFY2(note->text().contains("clamped to 256 × 256") && note->text().contains("one tile"),
                 qPrintable(note->text()));
        c.width = 512;
        QVERIFY(setConfigAndWait(panel, c));
        QVERIFY2(note->text().contains("clamped to 512 × 256"), qPrintable(note->text()));
        c.tile = 128;
        QVERIFY(setConfigAndWait(panel, c));
        QVERIFY(note->isHidden());
    }

    void failedRunKeepsTheImageShown() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        MainWindow window(freshSettings(), freshPath("history"));
        QVERIFY(runOnce(window, tinyRunConfig(4)));
        const QImage shown = window.canvas()->image();
        QVERIFY(!shown.isNull());
        // A start image that is gone by the time the run reads it: the run fails.
        const QString start = scratch_.filePath(QStringLiteral("gone.png"));
        QImage(32, 32, QImage::Format_RGB888).save(start);
        RunConfig c = tinyRunConfig(5);
        c.initImage = start.toStdString();
        c.upscale = 2.0;
        QVERIFY(setConfigAndWait(*window.configPanel(), c));
        QVERIFY(window.runAction()->isEnabled());
        QVERIFY(offGuiThread([&] { return QFile::remove(start); }));
        QSignalSpy ended(&window, &MainWindow::runEnded);
        window.runAction()->trigger();
        QVERIFY(ended.wait(300000));
        QVERIFY(!ended.at(0).at(0).toBool());
        QCOMPARE(window.canvas()->image(), shown);
    }

    void stoppedRunKeepsTheLastPreviewShown() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        MainWindow window(freshSettings(), freshPath("history"));
        RunConfig c = tinyRunConfig(6);
        c.steps = 40;
        c.previewEvery = 1;
        QVERIFY(setConfigAndWait(*window.configPanel(), c));
        QImage lastPreview;
        connect(&window, &MainWindow::previewShown, &window, [&](int, const QImage& image) {
            lastPreview = image;
            window.stopAction()->trigger();  // Stop as soon as a preview has content
        });
        QSignalSpy ended(&window, &MainWindow::runEnded);
        window.runAction()->trigger();
        QVERIFY(ended.wait(300000));
        QVERIFY(!ended.at(0).at(0).toBool());
        const RunRecord& record = window.lastRun()->result->record;
        QVERIFY(record.status == RunStatus::Cancelled);
        QVERIFY(!lastPreview.isNull());
        QCOMPARE(window.canvas()->image().convertToFormat(QImage::Format_RGB888),
                 lastPreview.convertToFormat(QImage::Format_RGB888));
        // The history keeps that image, not the noise.
        const QString id = QString::fromStdString(record.runId);
        QVERIFY(QTest::qWaitFor([&] { return window.history().find(id) != nullptr; }, 60000));
        const QString png = window.history().find(id)->imagePath;
        const QImage kept = offGuiThread([&] { return QImage(png).convertToFormat(QImage::Format_RGB888); });
        QCOMPARE(kept, lastPreview.convertToFormat(QImage::Format_RGB888));
    }
};

QTEST_MAIN(TestModelChecks)
#include "tst_modelchecks.moc"
