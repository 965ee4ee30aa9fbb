// ControlNet in the window: the ControlNet group lists the models folder's ControlNet/ and
// controlnet/ entries (off the GUI thread), writes its enabled units into RunConfig::controlNets and
// shows a configuration's units again (settings after a restart, pasted A1111 parameters); a run
// with the tiny SD 1.x pipeline and the tiny ControlNet finishes with the unit in its record and the
// hint it saw in the "ControlNet hint" view (tile_resample at rate 4 blurrier than none); a control
// image of another size than the run's is refused before any work, the window saying why. The GUI
// thread reads no file meanwhile.
#include <cmath>
#include <cstdlib>

#include <QCheckBox>
#include <QClipboard>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFile>
#include <QGuiApplication>
#include <QImage>
#include <QLabel>
#include <QLineEdit>
#include <QRandomGenerator>
#include <QSignalSpy>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QtTest>

#include "TinyRun.h"
#include "app/qt/SettingsFile.h"
#include "core/run/ModelFileLookup.h"
#include "ui/ConfigPanel.h"
#include "ui/ControlHintView.h"
#include "ui/ControlNetGroup.h"
#include "ui/MainWindow.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

const QString kSdModel = QStringLiteral(TESSERA_TEST_DATA "/sdpipeline/sd1");
const QString kControlNet = QStringLiteral(TESSERA_TEST_DATA "/controlnet/pipeline/net0");

// The tiny SD 1.x pipeline: 64 x 64, one tile, 2 steps, on the CPU.
RunConfig tinySdConfig(std::uint64_t seed) {
    RunConfig c;
    c.model = kSdModel.toStdString();
    c.backend = BackendKind::CPU;
    c.precision = Precision::FP32;
    c.width = 64;
    c.height = 64;
    c.tile = 64;
    c.overlapPx = 0;
    c.steps = 2;
    c.seed = seed;
    c.prompt = "a red cube";
    return c;
}

bool waitForCatalog(const ControlNetGroup& group) {
    return QTest::qWaitFor([&group] { return group.catalog().has_value() && !group.isScanning(); }, 60000);
}

QStringList itemTexts(const QComboBox* combo) {
    QStringList texts;
    for (int i = 0; i < combo->count(); ++i) texts << combo->itemText(i);
    return texts;
}

// A noisy RGB image (every pixel its own random colour): its detail is what a blurrier hint loses.
QImage noisyImage(int width, int height, quint32 seed) {
    QImage image(width, height, QImage::Format_RGB888);
    QRandomGenerator random(seed);
    for (int y = 0; y < height; ++y)
        for (int x = 0; x < width; ++x)
            image.setPixel(x, y, qRgb(random.bounded(256), random.bounded(256), random.bounded(256)));
    return image;
}

// The mean absolute difference of horizontally adjacent pixel values: lower is blurrier.
double detail(const QImage& image) {
    const QImage rgb = image.convertToFormat(QImage::Format_RGB888);
    double sum = 0;
    long count = 0;
    for (int y = 0; y < rgb.height(); ++y)
        for (int x = 0; x + 1 < rgb.width(); ++x) {
            const QRgb a = rgb.pixel(x, y), b = rgb.pixel(x + 1, y);
            sum += std::abs(qRed(a) - qRed(b)) + std::abs(qGreen(a) - qGreen(b)) + std::abs(qBlue(a) - qBlue(b));
            count += 3;
        }
    return count ? sum / static_cast<double>(count) : 0.0;
}

QString statusOf(const MainWindow& window) {
    return window.findChild<QLabel*>(QStringLiteral("statusText"))->toolTip();
}

}  // namespace

class TestControlNetUi : public QObject {
    Q_OBJECT

private:
    QTemporaryDir scratch_;
    QString models_;
    QString control64_, control32_, start64_;
    int count_ = 0;

    std::unique_ptr<SettingsFile> settingsAt(const QString& path) { return std::make_unique<SettingsFile>(path); }
    QString freshPath(const char* what) { return scratch_.filePath(QStringLiteral("%1-%2").arg(what).arg(++count_)); }

    // A window on the tiny SD pipeline with the scratch models folder, its history ready.
    std::unique_ptr<MainWindow> sdWindow() {
        const QString history = freshPath("history");
        if (!QDir().mkpath(history)) return nullptr;
        auto window = std::make_unique<MainWindow>(settingsAt(freshPath("settings") + ".ini"), history);
        window->configPanel()->setModelsFolder(models_);
        if (!waitForHistory(*window)) return nullptr;
        return window;
    }

private slots:
    void init() { failOnGuiThreadIo(); }

    void initTestCase() {
        QVERIFY(scratch_.isValid());
        QStandardPaths::setTestModeEnabled(true);
        qunsetenv(kModelsFolderVariable);
        models_ = scratch_.filePath(QStringLiteral("models"));
        // A1111's models/ControlNet with a diffusers folder, ComfyUI's models/controlnet with a file.
        QVERIFY(QDir().mkpath(models_ + "/ControlNet/tile_test"));
        QVERIFY(QDir().mkpath(models_ + "/controlnet/sub"));
        QVERIFY(QDir().mkpath(models_ + "/ControlNet/not_a_model"));
        for (const char* file : {"config.json", "diffusion_pytorch_model.safetensors"})
            QVERIFY(QFile::copy(kControlNet + "/" + file, models_ + "/ControlNet/tile_test/" + file));
        QVERIFY(QFile::copy(kControlNet + "/diffusion_pytorch_model.safetensors",
                            models_ + "/controlnet/sub/comfy_tile.safetensors"));
        QFile notes(models_ + "/ControlNet/not_a_model/readme.txt");
        QVERIFY(notes.open(QIODevice::WriteOnly));
        notes.close();
        control64_ = scratch_.filePath(QStringLiteral("control64.png"));
        control32_ = scratch_.filePath(QStringLiteral("control32.png"));
        start64_ = scratch_.filePath(QStringLiteral("start64.png"));
        QVERIFY(noisyImage(64, 64, 1).save(control64_));
        QVERIFY(noisyImage(32, 32, 2).save(control32_));
        QVERIFY(noisyImage(64, 64, 3).save(start64_));
    }

    void groupWritesAndShowsUnits() {
        ConfigPanel panel;
        panel.setModelsFolder(models_);
        QVERIFY(setConfigAndWait(panel, tinySdConfig(1)));
        ControlNetGroup* group = panel.controlNetGroup();
        QVERIFY(waitForCatalog(*group));
        QCOMPARE(group->unitCount(), ControlNetGroup::kUnits);
        auto* model = child<QComboBox>(group, "controlNetModelCombo");
        // None, then the models folders' entries in lookup order: those of the folder above the model's
        // (tests/data/controlnet) first, the window's models folder (ControlNet/, then controlnet/) last.
        const QStringList listed = itemTexts(model);
        QCOMPARE(listed.front(), QString("None"));
        QCOMPARE(listed.mid(listed.size() - 2), (QStringList{"tile_test", "comfy_tile"}));
        QVERIFY2(!listed.contains("not_a_model") && !listed.contains("readme"), qPrintable(listed.join(", ")));
        QVERIFY(panel.config().controlNets.empty());

        // Unit 0 enabled: the first ControlNet listed, the editors' values.
        child<QCheckBox>(group, "controlNetEnabled")->setChecked(true);
        QCOMPARE(panel.config().controlNets.size(), std::size_t{1});
        QCOMPARE(QString::fromStdString(panel.config().controlNets[0].model), model->itemData(1).toString());
        const int ours = model->findText("tile_test");
        model->setCurrentIndex(ours);
        emit model->activated(ours);
        QCOMPARE(QString::fromStdString(panel.config().controlNets[0].model), models_ + "/ControlNet/tile_test");
        auto* rate = child<QDoubleSpinBox>(group, "controlNetRateSpin");
        QVERIFY(rate->isHidden());  // none has no setting
        child<QDoubleSpinBox>(group, "controlNetWeightSpin")->setValue(0.7);
        child<QDoubleSpinBox>(group, "controlNetStartSpin")->setValue(0.1);
        child<QDoubleSpinBox>(group, "controlNetEndSpin")->setValue(0.8);
        auto* mode = child<QComboBox>(group, "controlNetModeCombo");
        QCOMPARE(itemTexts(mode),
                 (QStringList{"Balanced", "My prompt is more important", "ControlNet is more important"}));
        mode->setCurrentIndex(1);
        auto* preprocessor = child<QComboBox>(group, "controlNetPreprocessorCombo");
        QCOMPARE(itemTexts(preprocessor),
                 (QStringList{"none", "tile_resample", "tile_colorfix", "tile_colorfix+sharp"}));
        // tile_colorfix+sharp: its variation and sharpness; then tile_resample: its rate alone.
        auto* variation = child<QDoubleSpinBox>(group, "controlNetVariationSpin");
        auto* sharpness = child<QDoubleSpinBox>(group, "controlNetSharpnessSpin");
        preprocessor->setCurrentIndex(3);
        QVERIFY(rate->isHidden() && !variation->isHidden() && !sharpness->isHidden());
        variation->setValue(12);
        sharpness->setValue(0.5);
        QCOMPARE(panel.config().controlNets[0].preprocessor, std::string("tile_colorfix+sharp"));
        QCOMPARE(panel.config().controlNets[0].colorfixVariation, 12.0);
        QCOMPARE(panel.config().controlNets[0].colorfixSharpness, 0.5);
        variation->setValue(8);
        sharpness->setValue(1);
        preprocessor->setCurrentIndex(1);
        QVERIFY(!rate->isHidden() && variation->isHidden() && sharpness->isHidden());
        rate->setValue(4);
        ControlNetUnit want;
        want.model = (models_ + "/ControlNet/tile_test").toStdString();
        want.weight = 0.7;
        want.start = 0.1;
        want.end = 0.8;
        want.mode = ControlMode::Prompt;
        want.preprocessor = "tile_resample";
        want.downSampling = 4;
        QCOMPARE(panel.config().controlNets, std::vector<ControlNetUnit>{want});

        // Unit 2: another model from the list and an image file; unit 1 stays off.
        group->selectUnit(2);
        QCOMPARE(child<QCheckBox>(group, "controlNetEnabled")->isChecked(), false);
        child<QCheckBox>(group, "controlNetEnabled")->setChecked(true);
        const int comfy = model->findText("comfy_tile");
        model->setCurrentIndex(comfy);
        emit model->activated(comfy);
        auto* image = child<QLineEdit>(group, "controlNetImageEdit");
        image->setText(control64_);
        emit image->editingFinished();
        std::vector<ControlNetUnit> units = panel.config().controlNets;
        QCOMPARE(units.size(), std::size_t{2});
        QCOMPARE(units[0], want);
        QCOMPARE(QString::fromStdString(units[1].model), models_ + "/controlnet/sub/comfy_tile.safetensors");
        QCOMPARE(QString::fromStdString(units[1].image), control64_);
        QCOMPARE(units[1].weight, 1.0);
        QVERIFY(panel.problems().isEmpty());

        // A configuration shown (a reopened run): its units, enabled, in order; a model named but not
        // listed stays named; a name that is listed is shown as that entry.
        RunConfig shown = tinySdConfig(2);
        ControlNetUnit named;
        named.model = "tile_test";
        ControlNetUnit elsewhere;
        elsewhere.model = "/elsewhere/control_v11f1e_sd15_tile.pth";
        elsewhere.preprocessor = "tile_colorfix";
        shown.controlNets = {named, elsewhere};
        panel.setConfig(shown);
        QCOMPARE(panel.config().controlNets, shown.controlNets);
        QVERIFY(group->isExpanded());
        group->selectUnit(0);
        QCOMPARE(model->currentText(), QString("tile_test"));
        group->selectUnit(1);
        QCOMPARE(model->currentText(), QString("control_v11f1e_sd15_tile"));
        QCOMPARE(preprocessor->currentText(), QString("tile_colorfix"));
        group->selectUnit(2);
        QVERIFY(!child<QCheckBox>(group, "controlNetEnabled")->isChecked());

        // A weight out of range is marked under the group.
        group->selectUnit(0);
        auto* weight = child<QDoubleSpinBox>(group, "controlNetWeightSpin");
        QCOMPARE(weight->maximum(), 2.0);
        shown.controlNets[0].weight = 3;
        panel.setConfig(shown);
        QVERIFY2(!panel.problemFor("control_weight").isEmpty(), qPrintable(panel.problems().join("; ")));
        QVERIFY(!child<QLabel>(group, "control_weightError")->isHidden());

        // A model that takes no prompt takes no ControlNet either.
        QVERIFY(setConfigAndWait(panel, tinyRunConfig(3)));
        QVERIFY(!child<QCheckBox>(group, "controlNetEnabled")->isEnabled());
        QVERIFY(!child<QLabel>(group, "controlNetReason")->isHidden());
    }

    void settingsKeepTheUnits() {
        const QString history = freshPath("history");
        QVERIFY(QDir().mkpath(history));
        const QString settings = freshPath("settings") + ".ini";
        RunConfig config = tinySdConfig(4);
        ControlNetUnit a;
        a.model = "tile_test";
        a.weight = 0.55;
        a.end = 0.75;
        a.mode = ControlMode::ControlNet;
        a.preprocessor = "tile_resample";
        a.downSampling = 2.5;
        ControlNetUnit b;
        b.model = (models_ + "/controlnet/sub/comfy_tile.safetensors").toStdString();
        b.image = control64_.toStdString();
        config.controlNets = {a, b};
        {
            MainWindow window(settingsAt(settings), history);
            QVERIFY(setConfigAndWait(*window.configPanel(), config));
            QCOMPARE(window.configPanel()->config().controlNets, config.controlNets);
            QVERIFY(waitForHistory(window));
            window.close();  // saves the settings
        }
        MainWindow again(settingsAt(settings), history);
        QCOMPARE(again.configPanel()->config().controlNets, config.controlNets);
        ControlNetGroup* group = again.configPanel()->controlNetGroup();
        QVERIFY(group->isUnitEnabled(0) && group->isUnitEnabled(1) && !group->isUnitEnabled(2));
        QVERIFY(waitForHistory(again));
    }

    // A unit switched off keeps its model and settings across a restart (the configuration holds
    // the enabled units only; the window keeps the others beside it); a damaged list is ignored.
    void settingsKeepSwitchedOffUnits() {
        const QString history = freshPath("history");
        QVERIFY(QDir().mkpath(history));
        const QString settings = freshPath("settings") + ".ini";
        RunConfig config = tinySdConfig(4);
        ControlNetUnit a;
        a.model = "tile_test";
        a.weight = 0.55;
        ControlNetUnit b;
        b.model = (models_ + "/controlnet/sub/comfy_tile.safetensors").toStdString();
        b.weight = 1.25;
        b.preprocessor = "tile_resample";
        b.downSampling = 3.0;
        config.controlNets = {a, b};
        {
            MainWindow window(settingsAt(settings), history);
            QVERIFY(setConfigAndWait(*window.configPanel(), config));
            ControlNetGroup* group = window.configPanel()->controlNetGroup();
            group->selectUnit(1);
            child<QCheckBox>(group, "controlNetEnabled")->setChecked(false);
            QCOMPARE(window.configPanel()->config().controlNets, std::vector<ControlNetUnit>{a});
            QVERIFY(waitForHistory(window));
            window.close();  // saves the settings
        }
        {
            MainWindow again(settingsAt(settings), history);
            QCOMPARE(again.configPanel()->config().controlNets, std::vector<ControlNetUnit>{a});
            ControlNetGroup* group = again.configPanel()->controlNetGroup();
            QVERIFY(group->isUnitEnabled(0) && !group->isUnitEnabled(1));
            QCOMPARE(group->unit(1), b);
            QVERIFY(waitForHistory(again));
        }
        {
            SettingsFile damaged(settings);
            damaged.values().setValue("window/controlNetUnits", "[{\"enabled\": 7}]");
            QVERIFY(damaged.save());
        }
        MainWindow third(settingsAt(settings), history);
        QCOMPARE(third.configPanel()->config().controlNets, std::vector<ControlNetUnit>{a});
        QVERIFY(third.configPanel()->controlNetGroup()->unit(1).model.empty());
        QVERIFY(waitForHistory(third));
    }

    void pastedParametersSetTheGroup() {
        const auto window = sdWindow();
        QVERIFY(window);
        QVERIFY(setConfigAndWait(*window->configPanel(), tinySdConfig(5)));
        QGuiApplication::clipboard()->setText(QStringLiteral(
            "a red cube\nSteps: 2, Sampler: DDIM, CFG scale: 7, Seed: 5, Size: 64x64, ControlNet 0: \"Module: "
            "tile_resample, Model: tile_test [0123abcd], Weight: 0.6, Resize Mode: Crop and Resize, Processor Res: "
            "512, Threshold A: 2, Threshold B: 0.5, Guidance Start: 0.1, Guidance End: 0.9, Pixel Perfect: False, "
            "Control Mode: My prompt is more important\""));
        QSignalSpy applied(window.get(), &MainWindow::parametersApplied);
        window->pasteParametersAction()->trigger();
        QVERIFY(!applied.isEmpty() || applied.wait(60000));
        QVERIFY2(applied.at(0).at(1).toBool(), qPrintable(statusOf(*window)));
        const std::vector<ControlNetUnit> units = window->configPanel()->config().controlNets;
        QCOMPARE(units.size(), std::size_t{1});
        QCOMPARE(units[0].model, std::string("tile_test"));
        QCOMPARE(units[0].weight, 0.6);
        QCOMPARE(units[0].start, 0.1);
        QCOMPARE(units[0].end, 0.9);
        QCOMPARE(units[0].mode, ControlMode::Prompt);
        QCOMPARE(units[0].preprocessor, std::string("tile_resample"));
        QCOMPARE(units[0].downSampling, 2.0);
        ControlNetGroup* group = window->configPanel()->controlNetGroup();
        QVERIFY(waitForCatalog(*group));
        QVERIFY(group->isUnitEnabled(0));
        group->selectUnit(0);
        QCOMPARE(child<QComboBox>(group, "controlNetModelCombo")->currentText(), QString("tile_test"));
        QCOMPARE(child<QComboBox>(group, "controlNetModeCombo")->currentText(), QString("My prompt is more important"));
        QCOMPARE(child<QDoubleSpinBox>(group, "controlNetRateSpin")->value(), 2.0);

        // A ControlNet found nowhere: set as named, and the window says a run would refuse it.
        QGuiApplication::clipboard()->setText(QStringLiteral(
            "a red cube\nSteps: 2, Sampler: DDIM, CFG scale: 7, Seed: 5, Size: 64x64, ControlNet 0: \"Module: none, "
            "Model: control_missing [0123abcd], Weight: 1, Guidance Start: 0, Guidance End: 1, Control Mode: "
            "Balanced\""));
        applied.clear();
        window->pasteParametersAction()->trigger();
        QVERIFY(!applied.isEmpty() || applied.wait(60000));
        QVERIFY(applied.at(0).at(1).toBool());
        QCOMPARE(window->configPanel()->config().controlNets.at(0).model, std::string("control_missing"));
        QVERIFY2(statusOf(*window).contains("ControlNet 0: control_missing") &&
                     statusOf(*window).contains("names no ControlNet found here"),
                 qPrintable(statusOf(*window)));
    }

    void runRecordsTheUnitAndShowsItsHint() {
        const auto window = sdWindow();
        QVERIFY(window);
        // Image-to-image, the start image as the control image, the ControlNet by its name in the
        // window's models folder (the engine alone would not find it there).
        RunConfig config = tinySdConfig(6);
        config.initImage = start64_.toStdString();
        config.strength = 0.6;
        ControlNetUnit unit;
        unit.model = "tile_test";
        unit.weight = 0.8;
        config.controlNets = {unit};
        QVERIFY(runOnce(*window, config));
        const RunRecord& record = window->lastRun()->result->record;
        const RunRecord firstRecord = record;
        QCOMPARE(record.config.controlNets.size(), std::size_t{1});
        QCOMPARE(QString::fromStdString(record.config.controlNets[0].model), models_ + "/ControlNet/tile_test");
        QCOMPARE(record.config.controlNets[0].weight, 0.8);
        QCOMPARE(record.controlNetHashes.size(), std::size_t{1});
        ControlHintView* hints = window->controlHintView();
        QCOMPARE(hints->hintCount(), 1);
        const QImage plain = hints->shownHint();
        QCOMPARE(plain.size(), QSize(64, 64));
        QVERIFY2(hints->caption().contains("tile_test") && hints->caption().contains("the start image"),
                 qPrintable(hints->caption()));
        // The hint of the start image with no preprocessor is the start image as the run took it.
        QCOMPARE(plain.convertToFormat(QImage::Format_RGB888),
                 window->lastRun()->startImage.convertToFormat(QImage::Format_RGB888));
        QVERIFY(window->chartTabs()->indexOf(hints) >= 0);

        // tile_resample at rate 4 over the same image: a blurrier hint.
        config.controlNets[0].preprocessor = "tile_resample";
        config.controlNets[0].downSampling = 4;
        config.seed = 7;
        QVERIFY(runOnce(*window, config));
        QCOMPARE(window->lastRun()->result->record.config.controlNets[0].preprocessor, std::string("tile_resample"));
        const QImage resampled = hints->shownHint();
        QCOMPARE(resampled.size(), QSize(64, 64));
        QVERIFY2(detail(resampled) < 0.5 * detail(plain),
                 qPrintable(QStringLiteral("%1 vs %2").arg(detail(resampled)).arg(detail(plain))));
        QVERIFY(hints->caption().contains("rate 4"));

        // A control image of its own, two units: one hint each.
        ControlNetUnit own = unit;
        own.image = control64_.toStdString();
        config.controlNets.push_back(own);
        config.seed = 8;
        QVERIFY(runOnce(*window, config));
        QCOMPARE(hints->hintCount(), 2);
        QCOMPARE(window->lastRun()->result->record.controlNetHashes.size(), std::size_t{2});
        hints->selectUnit(1);
        QCOMPARE(hints->shownHint().convertToFormat(QImage::Format_RGB888),
                 QImage(control64_).convertToFormat(QImage::Format_RGB888));

        // The first run reopened from the history: its unit is back in the group; the history keeps
        // no hint, and the view says so.
        const QString first = QString::fromStdString(firstRecord.runId);
        window->configPanel()->setConfig(tinySdConfig(10));
        QVERIFY(window->configPanel()->config().controlNets.empty());
        QSignalSpy opened(window.get(), &MainWindow::historyRunOpened);
        QString error;
        QVERIFY2(window->openFromHistory(first, &error), qPrintable(error));
        QVERIFY(!opened.isEmpty() || opened.wait(60000));
        QVERIFY2(opened.at(0).at(1).toBool(), qPrintable(opened.at(0).at(2).toString()));
        QCOMPARE(window->configPanel()->config().controlNets, firstRecord.config.controlNets);
        QVERIFY(window->configPanel()->controlNetGroup()->isUnitEnabled(0));
        QCOMPARE(hints->hintCount(), 0);
        QVERIFY2(hints->caption().contains("keeps no hint"), qPrintable(hints->caption()));
    }

    void wrongSizeControlImageIsRefused() {
        const auto window = sdWindow();
        QVERIFY(window);
        RunConfig config = tinySdConfig(9);
        ControlNetUnit unit;
        unit.model = "tile_test";
        unit.image = control32_.toStdString();
        config.controlNets = {unit};
        QVERIFY(setConfigAndWait(*window->configPanel(), config));
        QVERIFY(window->runAction()->isEnabled());
        QSignalSpy ended(window.get(), &MainWindow::runEnded);
        window->runAction()->trigger();
        QVERIFY(ended.wait(120000));
        QVERIFY(!ended.at(0).at(0).toBool());
        const QString status = statusOf(*window);
        QVERIFY2(status.contains("control32.png") && status.contains("64x64"), qPrintable(status));
        // Refused before any work: no step ran.
        QVERIFY(!window->lastRun() || !window->lastRun()->result || window->lastRun()->result->record.stepsRun == 0);

        // A file that is no image: refused with the decoder's reason, naming it.
        const QString broken = scratch_.filePath(QStringLiteral("broken.png"));
        QFile file(broken);
        QVERIFY(file.open(QIODevice::WriteOnly));
        file.write("\x89PNG\r\n\x1a\n not really");
        file.close();
        config.controlNets[0].image = broken.toStdString();
        config.seed = 11;
        QVERIFY(setConfigAndWait(*window->configPanel(), config));
        ended.clear();
        window->runAction()->trigger();
        QVERIFY(ended.wait(120000));
        QVERIFY(!ended.at(0).at(0).toBool());
        QVERIFY2(statusOf(*window).contains("broken.png"), qPrintable(statusOf(*window)));
    }
};

QTEST_MAIN(TestControlNetUi)
#include "tst_controlnetui.moc"
