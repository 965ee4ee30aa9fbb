// The Upscaler in the window (ui/StartImageGroup.h, Run ▸ Upscale only): the models of the models
// folders' ESRGAN/ and upscale_models/ listed with their scale and family (headers read off the
// GUI thread), None naming the resize filter, Browse…'s file, a run PNG's name matched to the
// file; the choice in RunConfig::upscaleModel, kept in the settings and brought back by a run
// reopened from the history; unusable files and factors beyond the model marked and Run disabled;
// an image-to-image run with the model and the model alone from the window, with before/after.
// Offscreen, with the random-weight fixtures of tests/data/upscale and the tiny test model; every
// test fails if the window reads or writes a file on its thread.
#include <QAction>
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QLabel>
#include <QPushButton>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QToolButton>
#include <QtTest>

#include "TinyRun.h"
#include "app/cli/InitImage.h"
#include "app/qt/HistoryStore.h"
#include "core/sampling/ImageOps.h"
#include "ui/ConfigPanel.h"
#include "ui/HistoryPanel.h"
#include "ui/MainWindow.h"
#include "ui/StartImageGroup.h"
#include "ui/TileCanvas.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

const QString kUpscale = QStringLiteral(TESSERA_TEST_DATA "/upscale/");

QComboBox* upscalerOf(ConfigPanel& panel) { return child<QComboBox>(&panel, "upscaleModelCombo"); }

QStringList itemsOf(const QComboBox* combo) {
    QStringList items;
    for (int i = 0; i < combo->count(); ++i)
        if (!combo->itemText(i).isEmpty()) items << combo->itemText(i);  // separators have none
    return items;
}

// Waits until the list is read (and the model and start image are checked).
bool waitForUpscalers(ConfigPanel& panel) {
    return QTest::qWaitFor([&panel] { return !panel.startImageGroup()->isScanningUpscaleModels(); }, 60000) &&
           waitForModelCheck(panel);
}

// Selects item `text` as a click in the list does.
bool choose(QComboBox* combo, const QString& text) {
    const int index = combo->findText(text);
    if (index < 0) return false;
    combo->setCurrentIndex(index);
    emit combo->activated(index);
    return true;
}

bool copyFile(const QString& from, const QString& to) {
    QDir().mkpath(QFileInfo(to).path());
    return QFile::copy(from, to);
}

QString writeImage(const QString& path, QSize size) {
    QImage image(size, QImage::Format_RGB888);
    for (int y = 0; y < size.height(); ++y)
        for (int x = 0; x < size.width(); ++x) image.setPixelColor(x, y, QColor(8 * x % 256, 8 * y % 256, 90));
    if (!image.save(path)) qFatal("cannot write %s", qPrintable(path));
    return path;
}

}  // namespace

class TestUpscaler : public QObject {
    Q_OBJECT

private:
    QTemporaryDir scratch_;
    QString models_, compact_, esrgan_, span_, notAModel_, start_;
    int count_ = 0;

    std::unique_ptr<SettingsFile> freshSettings() {
        return std::make_unique<SettingsFile>(scratch_.filePath(QStringLiteral("upscaler-%1.ini").arg(++count_)));
    }
    QString freshFolder() {
        const QString folder = scratch_.filePath(QStringLiteral("folder-%1").arg(++count_));
        QDir().mkpath(folder);
        return folder;
    }
    // The tiny run from the 32 x 32 start image, x2 (64 x 64), with `upscaleModel`.
    RunConfig upscaleRun(const QString& upscaleModel) const {
        RunConfig c = tinyRunConfig(5, "x2 with an upscale model");
        c.initImage = start_.toStdString();
        c.upscale = 2;
        c.strength = 0.5;
        c.upscaleModel = upscaleModel.toStdString();
        return c;
    }

private slots:
    void init() { failOnGuiThreadIo(); }

    void initTestCase() {
        QVERIFY(scratch_.isValid());
        QStandardPaths::setTestModeEnabled(true);
        qunsetenv("TESSERA_MODELS");
        models_ = scratch_.filePath("models");
        compact_ = models_ + "/ESRGAN/4x-compact.safetensors";
        esrgan_ = models_ + "/ESRGAN/4x-esrgan.safetensors";
        span_ = models_ + "/upscale_models/2x-span.safetensors";
        notAModel_ = models_ + "/ESRGAN/not-a-model.safetensors";
        QVERIFY(copyFile(kUpscale + "compact_x4/model.safetensors", compact_));
        QVERIFY(copyFile(kUpscale + "esrgan_old_x4/model.safetensors", esrgan_));
        QVERIFY(copyFile(kUpscale + "span_x2_nonorm_noeval/model.safetensors", span_));
        QVERIFY(copyFile(kUpscale + "compact_x4/io.safetensors", notAModel_));
        start_ = writeImage(scratch_.filePath("start.png"), QSize(32, 32));
    }

    // The list: None naming the filter a resize alone uses, the models found with scale and
    // family, and Browse…; the choice goes into the configuration, its description under it.
    void upscalerListsTheModelsFolders() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        ConfigPanel panel;
        panel.setModelsFolder(models_);
        RunConfig config = upscaleRun({});
        QVERIFY(setConfigAndWait(panel, config));
        QVERIFY(waitForUpscalers(panel));
        QComboBox* combo = upscalerOf(panel);
        QCOMPARE(itemsOf(combo),
                 (QStringList{"None (resize only: Catmull-Rom)", "4x-compact — 4× Compact", "4x-esrgan — 4× ESRGAN",
                              "not-a-model — cannot be used", "2x-span — 2× SPAN", "Browse…"}));
        QVERIFY(combo->isEnabled());
        QVERIFY(panel.config().upscaleModel.empty());

        QVERIFY(choose(combo, "4x-compact — 4× Compact"));
        QCOMPARE(QString::fromStdString(panel.config().upscaleModel), QFileInfo(compact_).absoluteFilePath());
        auto* info = child<QLabel>(&panel, "upscaleModelInfo");
        QVERIFY2(info->text().startsWith("Real-ESRGAN Compact 4x, 16 features"), qPrintable(info->text()));
        QVERIFY(panel.isValid());

        // The image's own size (Target size 32 x 32): nothing to resize; without a start image the
        // list is disabled (the choice stays).
        config.upscale = 1;
        config.width = 32;
        config.height = 32;
        QVERIFY(setConfigAndWait(panel, config));
        QCOMPARE(combo->itemText(0), QString("None (no resize)"));
        config.initImage.clear();
        config.upscaleModel = compact_.toStdString();
        QVERIFY(setConfigAndWait(panel, config));
        QVERIFY(!combo->isEnabled());
        QCOMPARE(combo->itemText(0), QString("None (resize only)"));
        QCOMPARE(panel.config().upscaleModel, config.upscaleModel);
        QVERIFY(panel.isValid());  // not used without a start image: nothing to check
    }

    // A model's name (a run PNG's "SD upscale upscaler") selects the model of that name; a
    // name found nowhere, a file of no architecture and a factor beyond the model's scale are
    // marked, and Run and Upscale only are disabled with the reason.
    void namesAndProblems() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        MainWindow window(freshSettings(), freshFolder());
        ConfigPanel& panel = *window.configPanel();
        panel.setModelsFolder(models_);
        QVERIFY(setConfigAndWait(panel, upscaleRun(QStringLiteral("4x-esrgan"))));
        QVERIFY(waitForUpscalers(panel));
        QCOMPARE(upscalerOf(panel)->currentText(), QString("4x-esrgan — 4× ESRGAN"));
        QCOMPARE(QString::fromStdString(panel.config().upscaleModel), QFileInfo(esrgan_).absoluteFilePath());
        QVERIFY2(panel.isValid(), qPrintable(panel.problems().join('\n')));
        QVERIFY(window.runAction()->isEnabled());
        QVERIFY(window.upscaleOnlyAction()->isEnabled());
        QVERIFY(child<QToolButton>(&panel, "upscaleOnlyButton")->isEnabled());

        QVERIFY(setConfigAndWait(panel, upscaleRun(QStringLiteral("4x-nowhere"))));
        QVERIFY(waitForUpscalers(panel));
        QCOMPARE(upscalerOf(panel)->currentText(), QString("4x-nowhere — not found"));
        QVERIFY2(panel.problemFor("upscale_model").startsWith("no upscale model named '4x-nowhere'"),
                 qPrintable(panel.problemFor("upscale_model")));
        QVERIFY(child<QLabel>(&panel, "upscale_modelError")->isVisibleTo(&panel));
        QVERIFY(!window.runAction()->isEnabled());
        QVERIFY(!window.upscaleOnlyAction()->isEnabled());

        QVERIFY(setConfigAndWait(panel, upscaleRun(notAModel_)));
        QVERIFY(waitForUpscalers(panel));
        QVERIFY2(panel.problemFor("upscale_model")
                     .contains("no upscale architecture has these keys (4): clamped, input, output, output64"),
                 qPrintable(panel.problemFor("upscale_model")));
        QVERIFY(!window.runAction()->isEnabled());
        QVERIFY2(window.upscaleOnlyAction()->toolTip().contains("no upscale architecture"),
                 qPrintable(window.upscaleOnlyAction()->toolTip()));

        RunConfig beyond = upscaleRun(span_);  // x4 with a 2x model
        beyond.upscale = 4;
        QVERIFY(setConfigAndWait(panel, beyond));
        QVERIFY(waitForUpscalers(panel));
        QVERIFY2(panel.problemFor("upscale").startsWith("32×32 upscaled to 128×128 needs more than 2x-span gives (2×"),
                 qPrintable(panel.problemFor("upscale")));
        QVERIFY(!window.runAction()->isEnabled());
        QVERIFY(!window.upscaleOnlyAction()->isEnabled());

        // None: nothing to check, and Upscale only says what it needs.
        QVERIFY(setConfigAndWait(panel, upscaleRun({})));
        QVERIFY(panel.isValid());
        QVERIFY(!window.upscaleOnlyAction()->isEnabled());
        QVERIFY(window.upscaleOnlyAction()->toolTip().contains("Choose an upscale model"));
    }

    // Browse…'s file joins the list (described off the GUI thread) and is chosen; the choice is
    // kept in the settings and comes back after a restart, with the models folder.
    void browsedFileAndSettingsRoundTrip() {
        const QString path = scratch_.filePath("settings-roundtrip.ini");
        const QString elsewhere = scratch_.filePath("downloads/2x-elsewhere.safetensors");
        QVERIFY(copyFile(kUpscale + "span_x2_nonorm_noeval/model.safetensors", elsewhere));
        {
            MainWindow window(std::make_unique<SettingsFile>(path), freshFolder());
            ConfigPanel& panel = *window.configPanel();
            panel.setModelsFolder(models_);
            QVERIFY(setConfigAndWait(panel, upscaleRun({})));
            panel.startImageGroup()->chooseUpscaleModelFile(elsewhere);
            QVERIFY(waitForUpscalers(panel));
            QCOMPARE(upscalerOf(panel)->currentText(), QString("2x-elsewhere — 2× SPAN"));
            QCOMPARE(QString::fromStdString(panel.config().upscaleModel), elsewhere);
            QVERIFY(panel.isValid());
            window.close();
        }
        MainWindow again(std::make_unique<SettingsFile>(path), freshFolder());
        ConfigPanel& panel = *again.configPanel();
        QVERIFY(waitForUpscalers(panel));
        QCOMPARE(panel.modelsFolder(), models_);
        QCOMPARE(QString::fromStdString(panel.config().upscaleModel), elsewhere);
        QCOMPARE(upscalerOf(panel)->currentText(), QString("2x-elsewhere — 2× SPAN"));
        QVERIFY(itemsOf(upscalerOf(panel)).contains("4x-compact — 4× Compact"));
    }

    // Image-to-image with the model from the window: the record names it, before/after shows
    // the start image resized alone, and reopening the run from the history brings the choice back.
    void runWithTheModelAndReopenIt() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        const QString history = freshFolder();
        QString runId;
        QImage before, result;
        {
            MainWindow window(freshSettings(), history);
            window.show();
            window.configPanel()->setModelsFolder(models_);
            QVERIFY(runOnce(window, upscaleRun(compact_)));
            const FinishedRun& run = *window.lastRun();
            const RunRecord& record = run.result->record;
            runId = QString::fromStdString(record.runId);
            QVERIFY(record.upscaleModel);
            QCOMPARE(record.upscaleModel->name, std::string("4x-compact"));
            QCOMPARE(record.config.upscaleModel, QFileInfo(compact_).absoluteFilePath().toStdString());
            QVERIFY(window.canvas()->isBeforeAfterShown());
            const Rgb8Image decoded = decodeImageFile(start_.toStdString());
            QCOMPARE(window.canvas()->beforeImage(), toQImage(resampleToModelSpace(decoded, 64, 64, 3)));
            const QString status = child<QLabel>(&window, "statusText")->toolTip();
            QVERIFY2(status.contains("upscale model: 4x-compact (Real-ESRGAN Compact 4x"), qPrintable(status));
            before = window.canvas()->beforeImage();
            result = run.image;
            QVERIFY(waitForHistory(window));
            const QString row = window.historyPanel()->table()->item(0, HistoryPanel::ConfigColumn)->text();
            QVERIFY2(row.endsWith("from an image, strength 0.5 · upscaler 4x-compact"), qPrintable(row));
            // Another choice meanwhile, which the reopened run replaces.
            window.configPanel()->setConfig(upscaleRun({}));
        }
        MainWindow again(freshSettings(), history);
        again.show();
        again.configPanel()->setModelsFolder(models_);
        QVERIFY(waitForHistory(again));
        QVERIFY(again.history().find(runId)->record.upscaleModel);
        QString error;
        QSignalSpy opened(&again, &MainWindow::historyRunOpened);
        QVERIFY2(again.openFromHistory(runId, &error), qPrintable(error));
        QVERIFY(opened.wait(60000));
        QVERIFY(waitForUpscalers(*again.configPanel()));
        QCOMPARE(QString::fromStdString(again.configPanel()->config().upscaleModel),
                 QFileInfo(compact_).absoluteFilePath());
        QCOMPARE(upscalerOf(*again.configPanel())->currentText(), QString("4x-compact — 4× Compact"));
        QCOMPARE(again.canvas()->image(), result);
        QCOMPARE(again.canvas()->beforeImage(), before);
        QVERIFY(again.canvas()->isBeforeAfterShown());
    }

    // Run ▸ Upscale only: the model alone over the start image, no diffusion; shown with
    // before/after and kept in the history as `tessera-cli upscale` records it.
    void upscaleOnlyFromTheWindow() {
        MainWindow window(freshSettings(), freshFolder());
        window.show();
        ConfigPanel& panel = *window.configPanel();
        panel.setModelsFolder(models_);
        RunConfig config = upscaleRun(compact_);
        config.upscale = 4;
        config.model = scratch_.filePath("no-diffusion-model-here").toStdString();  // not needed
        QVERIFY(setConfigAndWait(panel, config));
        QVERIFY(waitForUpscalers(panel));
        QVERIFY(!window.runAction()->isEnabled());  // the diffusion model is missing
        QVERIFY2(window.upscaleOnlyAction()->isEnabled(), qPrintable(window.upscaleOnlyAction()->toolTip()));
        QSignalSpy ended(&window, &MainWindow::runEnded);
        child<QToolButton>(&panel, "upscaleOnlyButton")->click();
        QVERIFY(ended.wait(120000));
        QVERIFY(ended.at(0).at(0).toBool());
        const RunRecord& record = window.lastRun()->result->record;
        QVERIFY(record.upscaleModel && record.upscaleModel->alone);
        QCOMPARE(window.canvas()->image().size(), QSize(128, 128));
        QVERIFY(window.canvas()->isBeforeAfterShown());
        QCOMPARE(window.canvas()->beforeImage().size(), QSize(128, 128));
        const QString status = child<QLabel>(&window, "statusText")->text();
        QVERIFY2(status.startsWith("Upscaled 32 × 32 px to 128 × 128 px in "), qPrintable(status));
        const QString id = QString::fromStdString(record.runId);
        QVERIFY(QTest::qWaitFor([&] { return window.history().find(id) != nullptr; }, 60000));
        QVERIFY(!window.history().find(id)->imagePath.isEmpty());
        QVERIFY(waitForHistory(window));
        const QString row = window.historyPanel()->table()->item(0, HistoryPanel::ConfigColumn)->text();
        QVERIFY2(row.startsWith("128×128 · upscale model 4x-compact alone · Real-ESRGAN Compact 4x"), qPrintable(row));
        QVERIFY(window.upscaleOnlyAction()->isEnabled());  // again, once it ended
    }
};

QTEST_MAIN(TestUpscaler)
#include "tst_upscaler.moc"
