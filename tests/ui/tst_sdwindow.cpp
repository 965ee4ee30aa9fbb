// Stable Diffusion in the window: the Prompt group (prompt, negative prompt, CFG scale, clip
// skip, upscale) is enabled only for SD models, round trips through RunConfig and the saved
// settings, marks bad values; the sampler list shows A1111's names; the model field takes a
// pipeline folder, a .safetensors checkpoint and random:sd15; and a run of the tiny SD
// pipeline (tests/data/sdpipeline/sd1, no tokenizer/: the bundled CLIP vocabulary) finishes
// on the CPU from the window. A FLUX.1 model opens its own prompt fields and counts T5's tokens.
#include <filesystem>

#include <QAction>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFile>
#include <QLabel>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QScopeGuard>
#include <QSettings>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QThread>
#include <QtTest>

#include "TinyRun.h"
#include "app/qt/RunHistory.h"
#include "app/qt/RunWorker.h"
#include "core/text/ClipTokenizer.h"
#include "core/text/PromptParser.h"
#include "core/text/T5Tokenizer.h"
#include "ui/ConfigPanel.h"
#include "ui/HistoryPanel.h"
#include "ui/MainWindow.h"
#include "ui/TileCanvas.h"

using namespace tessera;
using testing::child;
using testing::offGuiThread;

namespace {

QString sdPipeline() { return QStringLiteral(TESSERA_TEST_DATA "/sdpipeline/sd1"); }

// 128 x 96 with one 128-px tile (96 high), 2 steps, on the CPU in fp32: about a second.
RunConfig sdConfig() {
    RunConfig c;
    c.model = sdPipeline().toStdString();
    c.width = 128;
    c.height = 96;
    c.tile = 128;
    c.overlapPx = 16;
    c.steps = 2;
    c.seed = 11;
    c.scheduler = SchedulerKind::EulerAncestral;
    c.backend = BackendKind::CPU;
    c.precision = Precision::FP32;
    c.prompt = "a (red:1.2) cube on a table";
    c.negativePrompt = "blurry";
    c.cfgScale = 5.5;
    c.clipSkip = 2;
    return c;
}

QList<QWidget*> sdEditors(ConfigPanel& panel) {
    return {child<QWidget>(&panel, "promptEdit"), child<QWidget>(&panel, "negativePromptEdit"),
            child<QWidget>(&panel, "cfgSpin"), child<QWidget>(&panel, "clipSkipSpin")};
}

}  // namespace

class TestSdWindow : public QObject {
    Q_OBJECT

private:
    QTemporaryDir scratch_;
    int settingsCount_ = 0;
    std::unique_ptr<SettingsFile> freshSettings() {
        return std::make_unique<SettingsFile>(scratch_.filePath(QStringLiteral("sd-%1.ini").arg(++settingsCount_)));
    }

private slots:
    void init() { testing::failOnGuiThreadIo(); }

    void initTestCase() {
        QVERIFY(scratch_.isValid());
        QStandardPaths::setTestModeEnabled(true);
    }

    void cleanupTestCase() {
        QDir(QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/history"))
            .removeRecursively();
    }

    void promptFieldsAreEnabledOnlyForSdModels() {
        ConfigPanel panel;
        QVERIFY(testing::setConfigAndWait(panel, testing::tinyRunConfig(3)));  // a UNet2DModel folder
        QVERIFY2(panel.isValid(), qPrintable(panel.problems().join('\n')));
        for (QWidget* editor : sdEditors(panel)) {
            QVERIFY2(!editor->isEnabled(), qPrintable(editor->objectName()));
            QVERIFY2(editor->toolTip().contains("unconditional UNet2DModel"), qPrintable(editor->toolTip()));
        }
        QVERIFY(panel.promptUnavailableReason().contains("cifar_like"));
        QVERIFY(!child<QLabel>(&panel, "promptReason")->isHidden());

        // Stable Diffusion in each form the picker takes: the fields open, the reason goes.
        // (A checkpoint is a safetensors file: its header is read when it is chosen.)
        const QString checkpoint = QStringLiteral(TESSERA_TEST_DATA "/singlefile/sd1.safetensors");
        for (const QString& model :
             {sdPipeline(), QStringLiteral("random:sd15"), QStringLiteral("random:sd21"), checkpoint}) {
            RunConfig c = sdConfig();
            c.model = model.toStdString();
            QVERIFY(testing::setConfigAndWait(panel, c));
            QVERIFY2(panel.promptUnavailableReason().isEmpty(), qPrintable(model));
            for (QWidget* editor : sdEditors(panel))
                QVERIFY2(editor->isEnabled(), qPrintable(model + editor->objectName()));
            QVERIFY(child<QLabel>(&panel, "promptReason")->isHidden());
            QCOMPARE(panel.config().prompt, sdConfig().prompt);
            QVERIFY2(child<QLabel>(&panel, "modelInfo")->text().contains("Stable Diffusion"),
                     qPrintable(child<QLabel>(&panel, "modelInfo")->text()));
        }

        // While another model is checked, the last answer stands: no flicker as a path is typed.
        RunConfig other = sdConfig();
        other.model = "random:sd21";
        panel.setConfig(other);
        QVERIFY(panel.isCheckingModel());
        QVERIFY(child<QWidget>(&panel, "promptEdit")->isEnabled());
        QVERIFY(testing::waitForModelCheck(panel));
        QVERIFY(child<QWidget>(&panel, "promptEdit")->isEnabled());

        // Back to the UNet2DModel: disabled again, and its runs carry no prompt (it would refuse
        // one), while the text stays in the editor for the next SD model.
        RunConfig unet = panel.config();
        unet.model = testing::testModelFolder().toStdString();
        unet.width = unet.height = 64;
        unet.tile = 32;
        unet.overlapPx = 8;
        QVERIFY(testing::setConfigAndWait(panel, unet));
        QVERIFY(!child<QWidget>(&panel, "promptEdit")->isEnabled());
        QVERIFY(panel.config().prompt.empty());
        QVERIFY(panel.config().negativePrompt.empty());
        QCOMPARE(child<QPlainTextEdit>(&panel, "promptEdit")->toPlainText().toStdString(), sdConfig().prompt);
        QVERIFY2(panel.isValid(), qPrintable(panel.problems().join('\n')));
    }

    // A FLUX.1 folder: the prompt opens; the negative prompt, CFG and clip skip are disabled saying
    // why (guidance distillation), the Guidance box shows and reaches the config; ControlNets are off.
    void fluxModelShowsItsPromptFields() {
        ConfigPanel panel;
        RunConfig c = sdConfig();
        c.model = TESSERA_TEST_DATA "/flux";
        c.width = 80;
        c.height = 48;
        c.tile = 32;
        c.overlapPx = 16;
        c.guidance = 4.5;
        QVERIFY(testing::setConfigAndWait(panel, c));
        QVERIFY2(panel.promptUnavailableReason().isEmpty(), qPrintable(panel.promptUnavailableReason()));
        QVERIFY(child<QWidget>(&panel, "promptEdit")->isEnabled());
        for (const char* name : {"negativePromptEdit", "cfgSpin", "clipSkipSpin"}) {
            QWidget* w = child<QWidget>(&panel, name);
            QVERIFY2(!w->isEnabled(), name);
            QVERIFY2(w->toolTip().contains("FLUX.1"), qPrintable(w->toolTip()));
        }
        auto* guidance = child<QDoubleSpinBox>(&panel, "guidanceSpin");
        QVERIFY(!guidance->isHidden() && guidance->isEnabled());
        QCOMPARE(guidance->value(), 4.5);
        guidance->setValue(2.5);
        QCOMPARE(panel.config().guidance, 2.5);
        QVERIFY2(child<QLabel>(&panel, "modelInfo")->text().contains("FLUX.1-dev transformer"),
                 qPrintable(child<QLabel>(&panel, "modelInfo")->text()));
        QVERIFY2(panel.isValid(), qPrintable(panel.problems().join('\n')));
        // The counter counts T5's tokens against dev's 512; this folder has no tokenizer_2/.
        QTRY_COMPARE_WITH_TIMEOUT(panel.tokenCountText("prompt"), QStringLiteral("?/512"), 30000);
        QCOMPARE(panel.tokenCountText("negative_prompt"), QString());
        {
            // The same model with T5's tokenizer: the prompt's SentencePiece pieces.
            const std::filesystem::path copy = scratch_.filePath("flux-with-tokenizer").toStdString();
            std::filesystem::copy(TESSERA_TEST_DATA "/flux", copy, std::filesystem::copy_options::recursive);
            std::filesystem::create_directories(copy / "tokenizer_2");
            std::filesystem::copy_file(TESSERA_TEST_DATA "/t5/spiece.model", copy / "tokenizer_2" / "spiece.model");
            RunConfig withTokenizer = c;
            withTokenizer.model = copy.string();
            withTokenizer.prompt = "a lighthouse on a cliff at dusk";
            QVERIFY(testing::setConfigAndWait(panel, withTokenizer));
            const auto pieces = T5Tokenizer(TESSERA_TEST_DATA "/t5/spiece.model").tokenize(withTokenizer.prompt);
            QTRY_COMPARE_WITH_TIMEOUT(panel.tokenCountText("prompt"), QStringLiteral("%1/512").arg(pieces.size()),
                                      30000);
            QVERIFY(child<QLabel>(&panel, "promptTokens")->toolTip().contains("T5 tokens"));
            QVERIFY(testing::setConfigAndWait(panel, c));
        }
        // Random weights at FLUX.1-schnell's shapes: nothing read, the same fields (no guidance input).
        {
            RunConfig random = c;
            random.model = "random:flux-schnell";
            QVERIFY(testing::setConfigAndWait(panel, random));
            QVERIFY2(child<QLabel>(&panel, "modelInfo")->text().contains("FLUX.1-schnell transformer"),
                     qPrintable(child<QLabel>(&panel, "modelInfo")->text()));
            QVERIFY(!guidance->isEnabled());
            QVERIFY2(panel.isValid(), qPrintable(panel.problems().join('\n')));
            // Its T5 reads the bundled CLIP tokenizer's ids; schnell reads 256.
            useBundledClipVocabulary();
            QTRY_COMPARE_WITH_TIMEOUT(
                panel.tokenCountText("prompt"),
                QStringLiteral("%1/256").arg(bundledTokenizer(SdFamily::SD1)->encode(random.prompt).size()), 30000);
            QVERIFY(testing::setConfigAndWait(panel, c));
        }
        // Sizes in 16-px cells.
        c.width = 88;
        QVERIFY(testing::setConfigAndWait(panel, c));
        QVERIFY(!panel.isValid());
        // Back to Stable Diffusion: everything open again, Guidance hidden.
        QVERIFY(testing::setConfigAndWait(panel, sdConfig()));
        for (QWidget* editor : sdEditors(panel)) QVERIFY2(editor->isEnabled(), qPrintable(editor->objectName()));
        QVERIFY(guidance->isHidden());
    }

    void samplerListShowsA1111Names() {
        ConfigPanel panel;
        auto* combo = child<QComboBox>(&panel, "schedulerCombo");
        QStringList names;
        for (int i = 0; i < combo->count(); ++i) names << combo->itemText(i);
        QCOMPARE(names,
                 QStringList({"Euler", "Euler Karras", "Euler a", "DPM++ 2M", "DPM++ 2M Karras", "DPM++ 2M SDE",
                              "DPM++ 2M SDE Karras", "DPM++ SDE", "DPM++ SDE Karras", "LMS", "LMS Karras", "Heun",
                              "Heun Karras", "DPM2", "DPM2 Karras", "UniPC", "UniPC Karras", "DDIM", "DDPM"}));

        combo->setCurrentIndex(names.indexOf("DPM++ 2M Karras"));
        QVERIFY(panel.config().scheduler == SchedulerKind::DPMPP2M);
        QVERIFY(panel.config().schedulerOptions.karrasSigmas);
        combo->setCurrentIndex(names.indexOf("DPM++ 2M"));
        QVERIFY(panel.config().scheduler == SchedulerKind::DPMPP2M);
        QVERIFY(!panel.config().schedulerOptions.karrasSigmas);

        // setConfig shows the entry of the kind and its Karras setting.
        RunConfig c = sdConfig();
        c.scheduler = SchedulerKind::Euler;
        c.schedulerOptions.karrasSigmas = true;
        panel.setConfig(c);
        QCOMPARE(combo->currentText(), QStringLiteral("Euler Karras"));
        c.schedulerOptions.karrasSigmas = false;
        panel.setConfig(c);
        QCOMPARE(combo->currentText(), QStringLiteral("Euler"));
        QVERIFY(!panel.config().schedulerOptions.karrasSigmas);
        c.scheduler = SchedulerKind::EulerAncestral;
        panel.setConfig(c);
        QCOMPARE(combo->currentText(), QStringLiteral("Euler a"));
    }

    void sdFieldsRoundTripThroughConfigAndSettings() {
        RunConfig config = sdConfig();
        config.upscale = 2.5;
        config.scheduler = SchedulerKind::DPMPP2M;
        config.schedulerOptions.karrasSigmas = true;
        const QString path = scratch_.filePath(QStringLiteral("persist-sd.ini"));
        {
            MainWindow window(std::make_unique<SettingsFile>(path));
            QVERIFY(testing::setConfigAndWait(*window.configPanel(), config));
            const RunConfig shown = window.configPanel()->config();
            QCOMPARE(shown.prompt, config.prompt);
            QCOMPARE(shown.negativePrompt, config.negativePrompt);
            QCOMPARE(shown.cfgScale, 5.5);
            QCOMPARE(shown.clipSkip, 2);
            QCOMPARE(shown.upscale, 2.5);
            window.close();
        }
        MainWindow again(std::make_unique<SettingsFile>(path));
        QVERIFY(testing::waitForModelCheck(*again.configPanel()));
        const RunConfig restored = again.configPanel()->config();
        QCOMPARE(restored.model, config.model);
        QCOMPARE(restored.prompt, config.prompt);
        QCOMPARE(restored.negativePrompt, config.negativePrompt);
        QCOMPARE(restored.cfgScale, 5.5);
        QCOMPARE(restored.clipSkip, 2);
        QCOMPARE(restored.upscale, 2.5);
        QVERIFY(restored.scheduler == SchedulerKind::DPMPP2M);
        QVERIFY(restored.schedulerOptions.karrasSigmas);
        QCOMPARE(child<QPlainTextEdit>(again.configPanel(), "promptEdit")->toPlainText().toStdString(), config.prompt);
        QCOMPARE(child<QComboBox>(again.configPanel(), "schedulerCombo")->currentText(),
                 QStringLiteral("DPM++ 2M Karras"));
    }

    void badSdValuesAreMarked() {
        ConfigPanel panel;
        QVERIFY(testing::setConfigAndWait(panel, sdConfig()));
        QVERIFY2(panel.isValid(), qPrintable(panel.problems().join('\n')));

        child<QDoubleSpinBox>(&panel, "cfgSpin")->setValue(200);
        child<QSpinBox>(&panel, "clipSkipSpin")->setValue(0);
        child<QDoubleSpinBox>(&panel, "upscaleSpin")->setValue(20);
        QVERIFY(!panel.isValid());
        QVERIFY2(panel.problemFor("cfg").contains("0 to 100"), qPrintable(panel.problemFor("cfg")));
        QVERIFY2(panel.problemFor("clip_skip").contains("1 to 12"), qPrintable(panel.problemFor("clip_skip")));
        QVERIFY2(panel.problemFor("upscale").contains("1 to 16"), qPrintable(panel.problemFor("upscale")));
        for (const char* name : {"cfgSpin", "clipSkipSpin", "upscaleSpin"})
            QVERIFY2(child<QWidget>(&panel, name)->property("invalid").toBool(), name);
        QVERIFY(!child<QLabel>(&panel, "cfgError")->isHidden());
        QVERIFY(!child<QLabel>(&panel, "clip_skipError")->isHidden());

        // The pipeline's limits, from its config files: tiles in multiples of 16 (a 2-level UNet
        // over an 8x VAE), sides and overlap in multiples of 8 (core/models/sd/SdPipeline.h checkSdRun).
        RunConfig c = sdConfig();
        c.width = 124;
        c.overlapPx = 12;
        c.tile = 120;
        QVERIFY(testing::setConfigAndWait(panel, c));
        QVERIFY2(panel.problemFor("width").contains("not a multiple of 8"), qPrintable(panel.problemFor("width")));
        QVERIFY2(panel.problemFor("width").contains("use 120 or 128"), qPrintable(panel.problemFor("width")));
        QVERIFY2(panel.problemFor("overlap").contains("not a multiple of 8"), qPrintable(panel.problemFor("overlap")));
        QVERIFY2(panel.problemFor("tile").contains("not a multiple of 16"), qPrintable(panel.problemFor("tile")));
        QVERIFY(panel.problemFor("height").isEmpty());

        // random:sd15 has SD 1.5's shapes: a 4-level UNet over an 8x VAE, tiles in multiples of 64.
        c = sdConfig();
        c.model = "random:sd15";
        QVERIFY(testing::setConfigAndWait(panel, c));
        QVERIFY2(panel.problemFor("tile").isEmpty(), qPrintable(panel.problemFor("tile")));
        c.tile = 96;
        QVERIFY(testing::setConfigAndWait(panel, c));
        QVERIFY2(panel.problemFor("tile").contains("not a multiple of 64"), qPrintable(panel.problemFor("tile")));
    }

    void badSdModelsAreMarked() {
        ConfigPanel panel;
        RunConfig c = sdConfig();
        c.model = "random:sd99";
        QVERIFY(testing::setConfigAndWait(panel, c));
        QVERIFY2(panel.problemFor("model").contains("random:sd15, random:sd21 or random:sdxl"),
                 qPrintable(panel.problemFor("model")));
        c.model = scratch_.filePath(QStringLiteral("absent.safetensors")).toStdString();
        QVERIFY(testing::setConfigAndWait(panel, c));
        QVERIFY2(panel.problemFor("model").contains("does not exist"), qPrintable(panel.problemFor("model")));
        for (QWidget* editor : sdEditors(panel)) QVERIFY(!editor->isEnabled());
        QVERIFY(panel.promptUnavailableReason().contains("until the model is known"));
    }

    void tokenCountsAreShownForSdModels() {
        // Counted on the inspector's pool (failOnGuiThreadIo: reading the tokenizer on this
        // thread would fail the test), as core's chunkPrompt counts them.
        const ClipTokenizer tokenizer =
            ClipTokenizer::fromMergesGz(TESSERA_SOURCE_DIR "/resources/clip/bpe_simple_vocab_16e6.txt.gz");
        RunConfig c = sdConfig();
        c.negativePrompt.clear();
        for (int i = 0; i < 40; ++i) c.negativePrompt += "blurry, lowres, ";
        const int promptTokens = chunkPrompt(tokenizer, c.prompt).tokenCount;
        const int negativeTokens = chunkPrompt(tokenizer, c.negativePrompt).tokenCount;
        QVERIFY(promptTokens > 0 && promptTokens < 75);
        QVERIFY(negativeTokens > 75);
        ConfigPanel panel;
        QVERIFY(testing::setConfigAndWait(panel, c));
        QTRY_COMPARE_WITH_TIMEOUT(panel.tokenCountText("prompt"), QStringLiteral("%1/75").arg(promptTokens), 30000);
        QTRY_COMPARE_WITH_TIMEOUT(panel.tokenCountText("negative_prompt"),
                                  QStringLiteral("%1/%2").arg(negativeTokens).arg((negativeTokens + 74) / 75 * 75),
                                  30000);
        // Typing updates it; a prompt A1111 refuses says why.
        child<QPlainTextEdit>(&panel, "promptEdit")->setPlainText(QStringLiteral("a red cube"));
        QTRY_COMPARE_WITH_TIMEOUT(panel.tokenCountText("prompt"), QStringLiteral("3/75"), 30000);
        child<QPlainTextEdit>(&panel, "promptEdit")->setPlainText(QStringLiteral("(cube:1.2.3)"));
        QTRY_COMPARE_WITH_TIMEOUT(panel.tokenCountText("prompt"), QStringLiteral("?/75"), 30000);
        QVERIFY(!child<QLabel>(&panel, "promptTokens")->toolTip().isEmpty());
        // A UNet2DModel counts nothing.
        QVERIFY(testing::setConfigAndWait(panel, testing::tinyRunConfig(1)));
        QTRY_VERIFY(panel.tokenCountText("prompt").isEmpty());
    }

    void runnableConfigKeepsRandomModelNames() {
        // The engine loads files by absolute path, but random:sd15 names no file: it must reach
        // the engine as typed, not as "<working folder>/random:sd15".
        MainWindow window(freshSettings());
        RunConfig c = sdConfig();
        c.model = "random:sd15";
        QVERIFY(testing::setConfigAndWait(*window.configPanel(), c));
        QCOMPARE(window.runnableConfig().model, std::string("random:sd15"));
        c.model = QDir::current().relativeFilePath(sdPipeline()).toStdString();
        QVERIFY(testing::setConfigAndWait(*window.configPanel(), c));
        QCOMPARE(QString::fromStdString(window.runnableConfig().model), QFileInfo(sdPipeline()).absoluteFilePath());
    }

    void sdRunFromTheWindowFinishesOnTheCpu() {
        MainWindow window(freshSettings());
        window.show();
        const RunConfig config = sdConfig();
        // No tokenizer/ in the pipeline: the run needs the bundled CLIP vocabulary, which the
        // worker sets itself (as tessera-cli does).
        QVERIFY(!QFileInfo::exists(sdPipeline() + QStringLiteral("/tokenizer")));
        QVERIFY(testing::setConfigAndWait(*window.configPanel(), config));
        QVERIFY2(window.configPanel()->isValid(), qPrintable(window.configPanel()->problems().join('\n')));
        QVERIFY(window.runAction()->isEnabled());
        QSignalSpy ended(&window, &MainWindow::runEnded);
        window.runAction()->trigger();
        QVERIFY(ended.wait(300000));
        QVERIFY2(ended.at(0).at(0).toBool(), qPrintable(child<QLabel>(&window, "statusText")->text()));
        QVERIFY(window.lastRun());
        const RunRecord& record = window.lastRun()->result->record;
        QCOMPARE(QString::fromStdString(std::string(toString(record.status))), QStringLiteral("finished"));
        QCOMPARE(record.stepsRun, 2);
        QCOMPARE(record.config.prompt, config.prompt);
        QCOMPARE(record.config.cfgScale, 5.5);
        QCOMPARE(record.config.clipSkip, 2);
        QCOMPARE(window.canvas()->image().size(), QSize(128, 96));

        // The history shows the run's guidance, clip skip and prompt with its settings.
        const QString id = QString::fromStdString(record.runId);
        QString historyError;
        connect(&window.history(), &HistoryStore::failed, this,
                [&historyError](quint64, const QString& e) { historyError = e; });
        QVERIFY2(QTest::qWaitFor([&window, &id] { return window.history().find(id) != nullptr; }, 60000),
                 qPrintable(historyError));
        const QString summary = configSummary(record.config);
        QVERIFY2(summary.contains("Euler a") && summary.contains("cfg 5.5") && summary.contains("clip skip 2") &&
                     summary.contains("a (red:1.2) cube"),
                 qPrintable(summary));
        auto* table = window.historyPanel()->findChild<QTableWidget*>();
        QVERIFY(table);
        bool shown = false;
        for (int row = 0; row < table->rowCount(); ++row)
            for (int col = 0; col < table->columnCount(); ++col)
                if (table->item(row, col) && table->item(row, col)->text().contains("cfg 5.5")) shown = true;
        QVERIFY(shown);
    }

    void sdRunShowsLatentPreviewsEveryStep() {
        // Live previews: an SD run sends A1111's "Approx cheap" preview of the
        // latents after every `preview_every` steps (the panel's Preview field), at the image's
        // size, and the canvas shows each as it comes; the finished run shows the VAE's decode.
        struct Case {
            int previewEvery;
            QList<int> steps;  // 0-based steps previewed in a 3-step run
        };
        for (const Case& c : {Case{1, {0, 1, 2}}, Case{2, {1, 2}}, Case{0, {}}}) {
            MainWindow window(freshSettings());
            window.show();
            RunConfig config = sdConfig();
            config.steps = 3;
            config.previewEvery = c.previewEvery;
            QVERIFY(testing::setConfigAndWait(*window.configPanel(), config));
            QCOMPARE(window.configPanel()->config().previewEvery, c.previewEvery);
            QCOMPARE(child<QSpinBox>(&window, "previewEverySpin")->value(), c.previewEvery);
            QList<int> steps;
            QImage lastPreview;
            connect(&window, &MainWindow::previewShown, this, [&](int step, const QImage& image) {
                steps << step;
                QCOMPARE(image.size(), QSize(128, 96));
                QCOMPARE(window.canvas()->image(), image);  // on the canvas as it comes
                lastPreview = image;
            });
            QSignalSpy ended(&window, &MainWindow::runEnded);
            window.runAction()->trigger();
            // Busy until the worker reports the model load (stepBarShowsTheModelLoad).
            QCOMPARE(child<QProgressBar>(&window, "stepProgress")->maximum(), 0);
            QVERIFY(ended.wait(300000));
            QVERIFY(ended.at(0).at(0).toBool());
            QCOMPARE(steps, c.steps);
            QVERIFY(child<QProgressBar>(&window, "stepProgress")->maximum() > 0);
            // The end: the decoded image, not the last approximation.
            QCOMPARE(window.canvas()->image().size(), QSize(128, 96));
            if (!lastPreview.isNull()) QVERIFY(window.canvas()->image() != lastPreview);
        }
    }

    void sdRunReportsTheModelLoadBeforeTheFirstStep() {
        // The worker forwards the engine's load progress (bytes of weights read,
        // by phase) before the run starts; a model kept from the last run reports none.
        QThread thread;
        auto* worker = new RunWorker;
        worker->moveToThread(&thread);
        connect(&thread, &QThread::finished, worker, &QObject::deleteLater);
        thread.start();
        const auto stopThread = qScopeGuard([&thread] {
            thread.quit();
            thread.wait();
        });
        QSignalSpy loads(worker, &RunWorker::modelLoadProgress);
        QSignalSpy finished(worker, &RunWorker::runFinished);
        QStringList order;  // "load", "started", "step": as the GUI thread receives them
        connect(worker, &RunWorker::modelLoadProgress, this, [&order] { order << QStringLiteral("load"); });
        connect(worker, &RunWorker::runStarted, this, [&order] { order << QStringLiteral("started"); });
        connect(worker, &RunWorker::stepFinished, this, [&order] { order << QStringLiteral("step"); });
        const RunConfig config = sdConfig();
        QMetaObject::invokeMethod(
            worker, [worker, config] { worker->start(config, 1); }, Qt::QueuedConnection);
        QVERIFY(finished.wait(300000));
        // One per phase at least (UNet, VAE, text encoder), fractions never going back, ending at 1.
        QVERIFY2(loads.count() >= 3, qPrintable(QString::number(loads.count())));
        double last = -1;
        QStringList phases;
        for (const QList<QVariant>& signal : loads) {
            QCOMPARE(signal.at(0).value<quint64>(), quint64(1));
            const auto progress = signal.at(1).value<LoadProgress>();
            QVERIFY(progress.fraction() >= last);
            last = progress.fraction();
            const QString phase = QString::fromStdString(progress.phase);
            if (phases.isEmpty() || phases.back() != phase) phases << phase;
        }
        QCOMPARE(last, 1.0);
        QVERIFY(loads.at(0).at(1).value<LoadProgress>().fraction() < 1.0);
        QCOMPARE(phases, (QStringList{"reading the UNet", "reading the VAE", "reading the text encoder"}));
        const qsizetype started = order.indexOf(QStringLiteral("started"));
        QVERIFY(started > 0 && order.lastIndexOf(QStringLiteral("load")) < started);
        QVERIFY(order.indexOf(QStringLiteral("step")) > started);

        // The same model again: kept by the engine, nothing to load.
        loads.clear();
        finished.clear();
        QMetaObject::invokeMethod(
            worker, [worker, config] { worker->start(config, 2); }, Qt::QueuedConnection);
        QVERIFY(finished.wait(300000));
        QCOMPARE(loads.count(), 0);
    }

    void stepBarShowsTheModelLoad() {
        // The window's step bar shows the load's fraction and phase as it comes, busy while the
        // engine prepares (the load done), then the steps; a second run of the same model shows
        // no load.
        MainWindow window(freshSettings());
        window.show();
        QVERIFY(testing::setConfigAndWait(*window.configPanel(), sdConfig()));
        auto* bar = child<QProgressBar>(&window, "stepProgress");
        QList<double> fractions;
        bool previewed = false, loadAfterPreview = false;
        connect(&window, &MainWindow::previewShown, this, [&previewed] { previewed = true; });
        connect(&window, &MainWindow::loadProgressShown, this, [&](double fraction, const QString& phase) {
            fractions << fraction;
            loadAfterPreview = loadAfterPreview || previewed;
            if (fraction < 1.0) {
                QCOMPARE(bar->maximum(), 1000);
                QCOMPARE(bar->value(), static_cast<int>(fraction * 1000));
                QVERIFY2(bar->format().contains(phase), qPrintable(bar->format()));
            } else {
                QCOMPARE(bar->maximum(), 0);  // preparing
            }
        });
        QSignalSpy ended(&window, &MainWindow::runEnded);
        window.runAction()->trigger();
        QVERIFY(ended.wait(300000));
        QVERIFY(ended.at(0).at(0).toBool());
        QVERIFY(fractions.size() >= 3);
        QVERIFY(std::is_sorted(fractions.begin(), fractions.end()));
        QCOMPARE(fractions.back(), 1.0);
        QVERIFY(!loadAfterPreview);
        QCOMPARE(bar->format(), QStringLiteral("step %v/%m"));
        QCOMPARE(bar->maximum(), 2);

        fractions.clear();
        window.runAction()->trigger();
        QVERIFY(ended.wait(300000));
        QVERIFY(fractions.isEmpty());
    }

    void upscaleSizesTheCanvasFromTheStartImage() {
        // Image-to-image: the canvas is the start image's size times the upscale factor (rounded
        // down to multiples of 8), whatever the size fields say, as tessera-cli render does.
        QImage start(64, 52, QImage::Format_RGB888);
        start.fill(QColor(200, 60, 40));
        const QString path = scratch_.filePath(QStringLiteral("start.png"));
        QVERIFY(start.save(path));
        MainWindow window(freshSettings());
        RunConfig config = sdConfig();
        config.initImage = path.toStdString();
        config.upscale = 2.0;
        config.width = 512;  // not used: the start image and the factor decide
        config.height = 512;
        config.tile = 64;
        QVERIFY(testing::runOnce(window, config));
        const RunRecord& record = window.lastRun()->result->record;
        QCOMPARE(record.config.width, 128);
        QCOMPARE(record.config.height, 104);
        QCOMPARE(window.lastRun()->image.size(), QSize(128, 104));
    }
};

QTEST_MAIN(TestSdWindow)
#include "tst_sdwindow.moc"
