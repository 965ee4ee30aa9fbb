// What users coming from A1111 expect of the window's settings: Edit ▸ Paste parameters checks the
// LoRA, VAE and embedding files the text names off the GUI thread and names what is missing or
// differs, as a dropped PNG does; the prompt's "n/75" counts a textual-inversion embedding's
// vectors; the Noise group (source, variation seed and strength, resize seed from, ENSD) writes
// and shows RunConfig's noise fields, is kept with the window's settings and a run's record (a
// reopened run shows its noise) and follows a pasted infotext's "RNG".
#include <QAction>
#include <QClipboard>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFile>
#include <QGuiApplication>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStandardPaths>
#include <QToolButton>
#include <QtTest>

#include "TinyRun.h"
#include "app/qt/PromptTokenCounter.h"
#include "ui/ConfigPanel.h"
#include "ui/MainWindow.h"

using namespace tessera;
using testing::child;
using testing::offGuiThread;

namespace {

QString sdPipeline() { return QStringLiteral(TESSERA_TEST_DATA "/sdpipeline/sd1"); }

RunConfig sdSettings() {
    RunConfig c;
    c.model = sdPipeline().toStdString();
    c.backend = BackendKind::CPU;
    c.threads = 2;
    c.width = 128;
    c.height = 128;
    return c;
}

QString statusOf(const MainWindow& window) {
    return window.findChild<QLabel*>(QStringLiteral("statusText"))->toolTip();
}

bool copyFile(const QString& from, const QString& to) {
    return offGuiThread([&] { return QDir().mkpath(QFileInfo(to).absolutePath()) && QFile::copy(from, to); });
}

// The text the token label shows once the counter answered (empty while none came).
QString countedText(const ConfigPanel& panel, const QString& field, const QString& expected) {
    if (!QTest::qWaitFor([&] { return panel.tokenCountText(field) == expected; }, 60000))
        qWarning("no count %s for %s", qPrintable(expected), qPrintable(field));
    return panel.tokenCountText(field);
}

}  // namespace

class TestA1111Settings : public QObject {
    Q_OBJECT

private:
    testing::WindowScratch scratch_;

private slots:
    void init() { testing::failOnGuiThreadIo(); }

    void initTestCase() {
        QVERIFY(scratch_.isValid());
        QStandardPaths::setTestModeEnabled(true);
    }

    void pasteChecksTheFilesItNames() {
        // A models folder with one LoRA (another file than the text's hash) and one embedding.
        const QString models = scratch_.filePath(QStringLiteral("models"));
        QVERIFY(copyFile(QStringLiteral(TESSERA_TEST_DATA "/lora/sd1_kohya.safetensors"),
                         models + QStringLiteral("/Lora/sd1_kohya.safetensors")));
        QVERIFY(copyFile(QStringLiteral(TESSERA_TEST_DATA "/embeddings/good/ti-a1111.pt"),
                         models + QStringLiteral("/embeddings/painterly.pt")));
        MainWindow window(scratch_.freshSettings(), scratch_.freshPath(QStringLiteral("history")));
        window.configPanel()->setModelsFolder(models);
        RunConfig base = sdSettings();
        base.embeddingsDir = (models + QStringLiteral("/embeddings")).toStdString();
        QVERIFY(testing::setConfigAndWait(*window.configPanel(), base));

        QGuiApplication::clipboard()->setText(
            QStringLiteral("a cat <lora:sd1_kohya:0.8> <lora:not_here:1>, painterly\n"
                           "Steps: 9, Sampler: Euler a, CFG scale: 5, Seed: 42, Size: 128x128, "
                           "Lora hashes: \"sd1_kohya: 000000000000, not_here: 111111111111\", "
                           "TI hashes: \"painterly: 222222222222, nowhere: 333333333333\", Version: v1.10.1"));
        QSignalSpy applied(&window, &MainWindow::parametersApplied);
        window.pasteParametersAction()->trigger();
        // The files are looked at off this thread: the answer comes later.
        QVERIFY(applied.wait(60000));
        QCOMPARE(applied.size(), 1);
        QVERIFY2(applied.at(0).at(1).toBool(), qPrintable(applied.at(0).at(2).toString()));
        const QString notes = applied.at(0).at(3).toStringList().join(QLatin1Char('\n'));
        QVERIFY2(notes.contains(QStringLiteral("'<lora:sd1_kohya>' is")) &&
                     notes.contains(QStringLiteral("the image was made with hash 000000000000")),
                 qPrintable(notes));
        QVERIFY2(notes.contains(QStringLiteral("'<lora:not_here>' names no LoRA found here")), qPrintable(notes));
        QVERIFY2(notes.contains(QStringLiteral("'TI hashes: painterly' is")) &&
                     notes.contains(QStringLiteral("hash 222222222222")),
                 qPrintable(notes));
        QVERIFY2(notes.contains(QStringLiteral("'TI hashes: nowhere' names an embedding found in no")),
                 qPrintable(notes));
        // The hashes themselves were read, not left out as settings.
        QVERIFY2(!notes.contains(QStringLiteral("'Lora hashes:")), qPrintable(notes));
        // Told where a dropped PNG's notes are told: the status line.
        const QString status = statusOf(window);
        QVERIFY2(
            status.contains(QStringLiteral("<lora:not_here>")) && status.contains(QStringLiteral("<lora:sd1_kohya>")),
            qPrintable(status));
        // The settings are applied, the window's device choices kept.
        const RunConfig c = window.configPanel()->config();
        QCOMPARE(c.steps, 9);
        QCOMPARE(c.seed, std::uint64_t(42));
        QCOMPARE(c.threads, 2);
        QVERIFY(c.prompt.find("<lora:sd1_kohya:0.8>") != std::string::npos);

        // A text without settings still answers at once, and changes nothing.
        QGuiApplication::clipboard()->setText(QStringLiteral("   "));
        applied.clear();
        window.pasteParametersAction()->trigger();
        QCOMPARE(applied.size(), 1);
        QVERIFY(!applied.at(0).at(1).toBool());
        QCOMPARE(window.configPanel()->config().seed, std::uint64_t(42));
    }

    void tokenCountIncludesEmbeddingVectors() {
        // "cat" names an embedding of 3 vectors here: "a cat" is 1 + 3 tokens, as A1111 counts it.
        const QString embeddings = scratch_.filePath(QStringLiteral("embeddings-count"));
        QVERIFY(copyFile(QStringLiteral(TESSERA_TEST_DATA "/embeddings/good/ti-a1111.pt"),
                         embeddings + QStringLiteral("/cat.pt")));
        ConfigPanel panel;
        RunConfig c = sdSettings();
        c.prompt = "a dog";
        c.negativePrompt = "a cat";
        QVERIFY(testing::setConfigAndWait(panel, c));
        // Without the folder: plain words.
        QCOMPARE(countedText(panel, QStringLiteral("negative_prompt"), QStringLiteral("2/75")), QStringLiteral("2/75"));
        const int scansBefore = panel.tokenCounter().embeddingScans();

        c.embeddingsDir = embeddings.toStdString();
        QVERIFY(testing::setConfigAndWait(panel, c));
        QCOMPARE(countedText(panel, QStringLiteral("negative_prompt"), QStringLiteral("4/75")), QStringLiteral("4/75"));
        QCOMPARE(countedText(panel, QStringLiteral("prompt"), QStringLiteral("2/75")), QStringLiteral("2/75"));
        auto* label = child<QLabel>(&panel, "negativePromptTokens");
        QVERIFY2(label->toolTip().contains(QStringLiteral("embedding")), qPrintable(label->toolTip()));
        QCOMPARE(panel.tokenCounter().embeddingScans(), scansBefore + 1);

        // Typing reads nothing again: the folder's embeddings are kept.
        auto* prompt = child<QPlainTextEdit>(&panel, "promptEdit");
        for (const char* text : {"a cat", "a cat, a cat", "cat"}) prompt->setPlainText(QString::fromLatin1(text));
        QCOMPARE(countedText(panel, QStringLiteral("prompt"), QStringLiteral("3/75")), QStringLiteral("3/75"));
        QTRY_COMPARE(panel.tokenCounter().pendingJobs(), 0);
        QCOMPARE(panel.tokenCounter().embeddingScans(), scansBefore + 1);

        // 73 words and the embedding: its 3 vectors do not fit the first chunk, which is closed
        // (padded to 75) first, so A1111 shows 78/150.
        QString words;
        for (int i = 0; i < 73; ++i) words += QStringLiteral("dog ");
        prompt->setPlainText(words + QStringLiteral("cat"));
        QCOMPARE(countedText(panel, QStringLiteral("prompt"), QStringLiteral("78/150")), QStringLiteral("78/150"));
    }

    void noiseWidgetsWriteAndShowTheConfig() {
        ConfigPanel panel;
        QVERIFY(testing::setConfigAndWait(panel, sdSettings()));
        auto* source = child<QComboBox>(&panel, "noiseSourceCombo");
        auto* extra = child<QToolButton>(&panel, "noiseExtraButton");
        auto* variationSeed = child<QLineEdit>(&panel, "variationSeedEdit");
        auto* strength = child<QDoubleSpinBox>(&panel, "variationStrengthSpin");
        auto* resizeW = child<QSpinBox>(&panel, "seedResizeWidthSpin");
        auto* resizeH = child<QSpinBox>(&panel, "seedResizeHeightSpin");
        auto* ensd = child<QLineEdit>(&panel, "ensdEdit");
        // Defaults: Tessera's noise, the extras closed and off.
        QCOMPARE(source->currentData().toString(), QStringLiteral("tessera"));
        QVERIFY(!extra->isChecked());
        QVERIFY(!variationSeed->isVisibleTo(&panel));
        // Every source says what it is for.
        QCOMPARE(source->count(), 5);
        for (int i = 0; i < source->count(); ++i)
            QVERIFY2(!source->itemData(i, Qt::ToolTipRole).toString().isEmpty(), qPrintable(source->itemText(i)));
        QVERIFY(source->toolTip().contains(QStringLiteral("A1111")));

        // Widgets -> config.
        source->setCurrentIndex(source->findData(QStringLiteral("nv")));
        extra->click();
        QVERIFY(variationSeed->isVisibleTo(&panel));
        variationSeed->setText(QStringLiteral("18446744073709551615"));
        strength->setValue(0.35);
        resizeW->setValue(640);
        resizeH->setValue(512);
        ensd->setText(QStringLiteral("-31337"));
        RunConfig c = panel.config();
        QCOMPARE(std::string(toString(c.noiseSource)), std::string("nv"));
        QCOMPARE(c.variationSeed, std::uint64_t(18446744073709551615ULL));
        QCOMPARE(c.variationStrength, 0.35);
        QCOMPARE(c.seedResizeFromWidth, 640);
        QCOMPARE(c.seedResizeFromHeight, 512);
        QCOMPARE(c.etaNoiseSeedDelta, std::int64_t(-31337));
        QVERIFY(panel.isValid());
        // The JSON the settings file and run records hold has them.
        const RunConfig back = runConfigFromJson(toJson(c));
        QCOMPARE(std::string(toString(back.noiseSource)), std::string(toString(RngSource::NV)));
        QCOMPARE(back.variationStrength, 0.35);
        QCOMPARE(back.seedResizeFromWidth, 640);
        QCOMPARE(back.etaNoiseSeedDelta, std::int64_t(-31337));
        // Half a resize size is marked beside the field.
        resizeH->setValue(0);
        QTRY_VERIFY(!panel.problemFor(QStringLiteral("seed_resize_from")).isEmpty());
        QVERIFY(child<QLabel>(&panel, "seed_resize_fromError")->isVisibleTo(&panel));
        resizeH->setValue(512);
        QTRY_VERIFY(panel.problemFor(QStringLiteral("seed_resize_from")).isEmpty());

        // Config -> widgets, the extras opened because they are set (a reopened run, a pasted text).
        extra->click();
        QVERIFY(!extra->isChecked());
        QVERIFY(extra->text().contains(QStringLiteral("set")));  // closed, it says extras act
        RunConfig shown = sdSettings();
        shown.noiseSource = RngSource::ComfyUI;
        shown.variationSeed = 77;
        shown.variationStrength = 0.5;
        shown.seedResizeFromWidth = 320;
        shown.seedResizeFromHeight = 256;
        shown.etaNoiseSeedDelta = 31337;
        QVERIFY(testing::setConfigAndWait(panel, shown));
        QCOMPARE(source->currentData().toString(), QStringLiteral("comfyui"));
        QCOMPARE(variationSeed->text(), QStringLiteral("77"));
        QCOMPARE(strength->value(), 0.5);
        QCOMPARE(resizeW->value(), 320);
        QCOMPARE(resizeH->value(), 256);
        QCOMPARE(ensd->text(), QStringLiteral("31337"));
        QVERIFY(extra->isChecked());
        // ComfyUI's noise ignores A1111's extras: the group says so.
        QVERIFY(child<QLabel>(&panel, "noiseExtrasIgnored")->isVisibleTo(&panel));
        source->setCurrentIndex(source->findData(QStringLiteral("cpu")));
        QVERIFY(!child<QLabel>(&panel, "noiseExtrasIgnored")->isVisibleTo(&panel));
        const RunConfig read = panel.config();
        QCOMPARE(std::string(toString(read.noiseSource)), std::string(toString(RngSource::CPU)));
        QCOMPARE(read.variationSeed, std::uint64_t(77));
        QCOMPARE(read.etaNoiseSeedDelta, std::int64_t(31337));
    }

    void reopenedRunShowsItsNoise() {
        MainWindow window(scratch_.freshSettings(), scratch_.freshPath(QStringLiteral("history")));
        RunConfig c = sdSettings();
        c.prompt = "a red cube";
        c.width = 64;
        c.height = 64;
        c.tile = 64;
        c.overlapPx = 0;
        c.steps = 2;
        c.seed = 3;
        c.scheduler = SchedulerKind::EulerAncestral;
        c.precision = Precision::FP32;
        c.noiseSource = RngSource::NV;
        c.variationSeed = 11;
        c.variationStrength = 0.2;
        c.seedResizeFromWidth = 96;
        c.seedResizeFromHeight = 80;
        c.etaNoiseSeedDelta = 31337;
        QVERIFY(testing::runOnce(window, c));
        const RunRecord record = window.lastRun()->result->record;
        QCOMPARE(std::string(toString(record.config.noiseSource)), std::string("nv"));
        const QString id = QString::fromStdString(record.runId);

        // Other noise in the panel, then the run reopened: its noise again, the extras open.
        RunConfig other = c;
        other.noiseSource = RngSource::Tessera;
        other.variationStrength = 0;
        other.seedResizeFromWidth = other.seedResizeFromHeight = 0;
        other.etaNoiseSeedDelta = 0;
        QVERIFY(testing::setConfigAndWait(*window.configPanel(), other));
        auto* extra = child<QToolButton>(window.configPanel(), "noiseExtraButton");
        extra->setChecked(false);
        QSignalSpy opened(&window, &MainWindow::historyRunOpened);
        QVERIFY(window.openFromHistory(id));
        QVERIFY(opened.wait(60000));
        QVERIFY2(opened.at(0).at(1).toBool(), qPrintable(opened.at(0).at(2).toString()));
        const RunConfig shown = window.configPanel()->config();
        QCOMPARE(child<QComboBox>(window.configPanel(), "noiseSourceCombo")->currentData().toString(),
                 QStringLiteral("nv"));
        QCOMPARE(shown.variationSeed, std::uint64_t(11));
        QCOMPARE(shown.variationStrength, 0.2);
        QCOMPARE(shown.seedResizeFromWidth, 96);
        QCOMPARE(shown.seedResizeFromHeight, 80);
        QCOMPARE(shown.etaNoiseSeedDelta, std::int64_t(31337));
        QVERIFY(extra->isChecked());
    }

    void noiseIsKeptWithTheSettingsAndFollowsPastedRng() {
        const QString settings = scratch_.freshPath(QStringLiteral("noise.ini"));
        const QString history = scratch_.freshPath(QStringLiteral("history"));
        {
            MainWindow window(std::make_unique<SettingsFile>(settings), history);
            RunConfig c = sdSettings();
            c.noiseSource = RngSource::GPU;
            c.variationSeed = 5;
            c.variationStrength = 0.25;
            c.etaNoiseSeedDelta = 31337;
            QVERIFY(testing::setConfigAndWait(*window.configPanel(), c));
            window.close();  // saves the settings
        }
        MainWindow window(std::make_unique<SettingsFile>(settings), history);
        QVERIFY(testing::waitForModelCheck(*window.configPanel()));
        RunConfig c = window.configPanel()->config();
        QCOMPARE(std::string(toString(c.noiseSource)), std::string(toString(RngSource::GPU)));
        QCOMPARE(c.variationSeed, std::uint64_t(5));
        QCOMPARE(c.variationStrength, 0.25);
        QCOMPARE(c.etaNoiseSeedDelta, std::int64_t(31337));
        auto* source = child<QComboBox>(window.configPanel(), "noiseSourceCombo");
        QCOMPARE(source->currentData().toString(), QStringLiteral("gpu"));

        // A pasted infotext with "RNG: CPU" selects the CPU source, and its seed extras are shown.
        QGuiApplication::clipboard()->setText(QStringLiteral(
            "a lighthouse\nSteps: 12, Sampler: Euler a, CFG scale: 4, Seed: 77, Size: 128x128, Variation seed: 9, "
            "Variation seed strength: 0.4, Seed resize from: 256x192, ENSD: 31337, RNG: CPU, Version: v1.10.1"));
        QSignalSpy applied(&window, &MainWindow::parametersApplied);
        window.pasteParametersAction()->trigger();
        QVERIFY(applied.wait(60000));
        QVERIFY2(applied.at(0).at(1).toBool(), qPrintable(applied.at(0).at(2).toString()));
        QCOMPARE(source->currentData().toString(), QStringLiteral("cpu"));
        c = window.configPanel()->config();
        QCOMPARE(std::string(toString(c.noiseSource)), std::string(toString(RngSource::CPU)));
        QCOMPARE(c.variationSeed, std::uint64_t(9));
        QCOMPARE(c.variationStrength, 0.4);
        QCOMPARE(c.seedResizeFromWidth, 256);
        QCOMPARE(c.seedResizeFromHeight, 192);
        QCOMPARE(c.etaNoiseSeedDelta, std::int64_t(31337));
        QVERIFY(child<QToolButton>(window.configPanel(), "noiseExtraButton")->isChecked());
        // Without "RNG", an A1111 text means its default: the GPU source.
        QGuiApplication::clipboard()->setText(
            QStringLiteral("a lighthouse\nSteps: 12, Sampler: Euler a, Seed: 77, Size: 128x128, Version: v1.10.1"));
        applied.clear();
        window.pasteParametersAction()->trigger();
        QVERIFY(applied.wait(60000));
        QCOMPARE(source->currentData().toString(), QStringLiteral("gpu"));
    }
};

QTEST_MAIN(TestA1111Settings)
#include "tst_a1111settings.moc"
