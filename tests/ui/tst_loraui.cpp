// LoRAs, a separate VAE and the batch count in the window: the LoRA and VAE group lists the models
// folder's Lora/, LyCORIS/ and VAE/ files (off the GUI thread), adds a LoRA to the run's list with
// a weight, removes it, and puts <lora:name:weight> into the prompt (or takes it out) as A1111's
// Extra Networks tab does; a run with a LoRA and a VAE keeps both in its record, shows them again
// when reopened and after a restart (the settings); a batch count of N makes N runs with seeds
// seed .. seed + N - 1, each its own history row. The GUI thread reads no file meanwhile.
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFile>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QTreeWidget>
#include <QtTest>

#include "TinyRun.h"
#include "app/qt/HistoryStore.h"
#include "app/qt/SettingsFile.h"
#include "core/run/ModelFileLookup.h"
#include "ui/ConfigPanel.h"
#include "ui/HistoryPanel.h"
#include "ui/LoraGroup.h"
#include "ui/MainWindow.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

const QString kSdModel = QStringLiteral(TESSERA_TEST_DATA "/sdpipeline/sd1");
const QString kLora = QStringLiteral(TESSERA_TEST_DATA "/sdpipeline/lora/sd1_tiny.safetensors");
const QString kVae = QStringLiteral(TESSERA_TEST_DATA "/sdfiles/vae/ldm.safetensors");

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

bool waitForCatalog(const LoraGroup& group) {
    return QTest::qWaitFor([&group] { return group.catalog().has_value() && !group.isScanning(); }, 60000);
}

QStringList itemTexts(const QComboBox* combo) {
    QStringList texts;
    for (int i = 0; i < combo->count(); ++i) texts << combo->itemText(i);
    return texts;
}

}  // namespace

class TestLoraUi : public QObject {
    Q_OBJECT

private:
    QTemporaryDir scratch_;
    QString models_;
    int count_ = 0;

    std::unique_ptr<SettingsFile> settingsAt(const QString& path) { return std::make_unique<SettingsFile>(path); }
    QString freshPath(const char* what) { return scratch_.filePath(QStringLiteral("%1-%2").arg(what).arg(++count_)); }

private slots:
    void init() { failOnGuiThreadIo(); }

    void initTestCase() {
        QVERIFY(scratch_.isValid());
        QStandardPaths::setTestModeEnabled(true);
        qunsetenv(kModelsFolderVariable);
        models_ = scratch_.filePath(QStringLiteral("models"));
        QVERIFY(QDir().mkpath(models_ + "/Lora"));
        QVERIFY(QDir().mkpath(models_ + "/LyCORIS/styles"));
        QVERIFY(QDir().mkpath(models_ + "/VAE"));
        QVERIFY(QFile::copy(kLora, models_ + "/Lora/sd1_tiny.safetensors"));
        QVERIFY(QFile::copy(kLora, models_ + "/LyCORIS/styles/other.safetensors"));
        QVERIFY(QFile::copy(kVae, models_ + "/VAE/ldm.safetensors"));
        // FLUX.1's separate text encoders where ComfyUI keeps them (any safetensors: only listed here).
        QVERIFY(QDir().mkpath(models_ + "/text_encoders"));
        QVERIFY(QDir().mkpath(models_ + "/clip"));
        QVERIFY(QFile::copy(kLora, models_ + "/text_encoders/clip_l.safetensors"));
        QVERIFY(QFile::copy(kLora, models_ + "/clip/t5xxl_fp16.safetensors"));
    }

    // A FLUX.1 model: the CLIP-L and T5 rows appear with the files of text_encoders/ and clip/, the
    // choice becomes RunConfig::textEncoders (and is shown again from a configuration, each file in
    // its row); the LoRA rows are disabled saying why, the VAE row stays. Back on a Stable Diffusion
    // model the rows hide and the run names no text encoder.
    void fluxModelTakesTextEncoderFiles() {
        ConfigPanel panel;
        panel.setModelsFolder(models_);
        RunConfig c = tinySdConfig(1);
        c.model = TESSERA_TEST_DATA "/flux";
        c.width = 80;
        c.height = 48;
        c.tile = 32;
        c.overlapPx = 16;
        QVERIFY(setConfigAndWait(panel, c));
        LoraGroup* group = panel.loraGroup();
        QVERIFY(waitForCatalog(*group));
        auto* clip = child<QComboBox>(group, "clipEncoderCombo");
        auto* t5 = child<QComboBox>(group, "t5EncoderCombo");
        QVERIFY(!clip->isHidden() && clip->isEnabled() && !t5->isHidden() && t5->isEnabled());
        QVERIFY(child<QComboBox>(group, "vaeCombo")->isEnabled());
        QVERIFY(!child<QComboBox>(group, "loraAvailableCombo")->isEnabled());
        QVERIFY(!child<QPushButton>(group, "loraAdd")->isEnabled());
        QVERIFY2(child<QLabel>(group, "loraReason")->text().contains("FLUX.1 LoRAs"),
                 qPrintable(child<QLabel>(group, "loraReason")->text()));
        QCOMPARE(clip->itemData(0).toString(), QString());  // the model's own first
        const int clipAt = clip->findData(models_ + "/text_encoders/clip_l.safetensors");
        const int t5At = t5->findData(models_ + "/clip/t5xxl_fp16.safetensors");
        QVERIFY2(clipAt > 0 && t5At > 0, qPrintable(itemTexts(clip).join(", ")));
        QCOMPARE(clip->itemText(clipAt), QString("clip_l.safetensors (text_encoders)"));
        QVERIFY(panel.config().textEncoders.empty());
        clip->setCurrentIndex(clipAt);
        emit clip->activated(clipAt);
        t5->setCurrentIndex(t5At);
        emit t5->activated(t5At);
        const std::vector<std::string> chosen{(models_ + "/text_encoders/clip_l.safetensors").toStdString(),
                                              (models_ + "/clip/t5xxl_fp16.safetensors").toStdString()};
        QCOMPARE(panel.config().textEncoders, chosen);

        // From a configuration (T5 named first): each file in its own row.
        c.textEncoders = {chosen[1], chosen[0]};
        QVERIFY(setConfigAndWait(panel, c));
        QCOMPARE(clip->currentData().toString().toStdString(), chosen[0]);
        QCOMPARE(t5->currentData().toString().toStdString(), chosen[1]);

        // Stable Diffusion again.
        QVERIFY(setConfigAndWait(panel, tinySdConfig(1)));
        QVERIFY(clip->isHidden() && t5->isHidden());
        QVERIFY(panel.config().textEncoders.empty());
        QVERIFY(child<QComboBox>(group, "loraAvailableCombo")->isEnabled());
    }

    void groupListsAddsRemovesAndInsertsTags() {
        ConfigPanel panel;
        panel.setModelsFolder(models_);
        QVERIFY(setConfigAndWait(panel, tinySdConfig(1)));
        LoraGroup* group = panel.loraGroup();
        QVERIFY(waitForCatalog(*group));
        auto* available = child<QComboBox>(group, "loraAvailableCombo");
        QCOMPARE(itemTexts(available), (QStringList{"sd1_tiny", "other"}));
        // The VAEs: Automatic first, then the files (also those of the folder above the model's,
        // tests/data, as a run looks names up there too).
        auto* vae = child<QComboBox>(group, "vaeCombo");
        QCOMPARE(vae->itemData(0).toString(), QString());
        const int ours = vae->findData(models_ + "/VAE/ldm.safetensors");
        QVERIFY2(ours > 0, qPrintable(itemTexts(vae).join(", ")));
        QCOMPARE(vae->itemText(ours), QString("ldm.safetensors (VAE)"));
        QVERIFY(vae->isEnabled());

        // Add with a weight: the run's list.
        QVERIFY(group->selectAvailable("sd1_tiny"));
        child<QDoubleSpinBox>(group, "loraWeightSpin")->setValue(0.7);
        child<QPushButton>(group, "loraAdd")->click();
        QCOMPARE(panel.config().loras.size(), std::size_t{1});
        QCOMPARE(QString::fromStdString(panel.config().loras[0].file), models_ + "/Lora/sd1_tiny.safetensors");
        QCOMPARE(panel.config().loras[0].unetMultiplier, 0.7);
        QCOMPARE(group->listedLoras(), QStringList{"sd1_tiny ×0.7"});

        // Insert tag: into the prompt; again: out of it.
        child<QPushButton>(group, "loraInsertTag")->click();
        QCOMPARE(panel.config().prompt, std::string("a red cube <lora:sd1_tiny:0.7>"));
        child<QPushButton>(group, "loraInsertTag")->click();
        QCOMPARE(panel.config().prompt, std::string("a red cube"));

        // The VAE chosen.
        vae->setCurrentIndex(ours);
        emit vae->activated(ours);
        QCOMPARE(QString::fromStdString(panel.config().vae), models_ + "/VAE/ldm.safetensors");

        // Remove.
        child<QPushButton>(group, "loraRemove")->click();
        QVERIFY(panel.config().loras.empty());

        // A configuration shown (a reopened run): its list and its VAE, one not listed too.
        RunConfig shown = tinySdConfig(2);
        shown.loras.push_back(LoraSetting{kLora.toStdString(), 0.5, 0.25});
        shown.vae = "elsewhere.safetensors";
        panel.setConfig(shown);
        QCOMPARE(group->listedLoras(), QStringList{"sd1_tiny ×0.5 / 0.25"});
        QCOMPARE(vae->currentText(), QString("elsewhere.safetensors"));
        QCOMPARE(panel.config().vae, std::string("elsewhere.safetensors"));
        QCOMPARE(panel.config().loras, shown.loras);

        // A model that takes no prompt takes no LoRA either.
        QVERIFY(setConfigAndWait(panel, tinyRunConfig(3)));
        QVERIFY(!vae->isEnabled());
        QVERIFY(!child<QPushButton>(group, "loraAdd")->isEnabled());
    }

    void runRecordsAndRestoresLoraAndVae() {
        const QString history = freshPath("history");
        QVERIFY(QDir().mkpath(history));
        const QString settings = freshPath("settings") + ".ini";
        RunConfig config = tinySdConfig(5);
        config.loras.push_back(LoraSetting{(models_ + "/Lora/sd1_tiny.safetensors").toStdString(), 0.8, 0.8});
        config.vae = (models_ + "/VAE/ldm.safetensors").toStdString();
        QString runId;
        {
            MainWindow window(settingsAt(settings), history);
            window.configPanel()->setModelsFolder(models_);
            QVERIFY(runOnce(window, config));
            const RunRecord& record = window.lastRun()->result->record;
            runId = QString::fromStdString(record.runId);
            QCOMPARE(record.loras.size(), std::size_t{1});
            QCOMPARE(record.loras[0].name, std::string("sd1_tiny"));
            QVERIFY(record.vaeFile.has_value());
            QCOMPARE(record.vaeFile->name, std::string("ldm.safetensors"));
            QCOMPARE(record.config.loras, config.loras);

            // Other settings, then the run reopened: its LoRA and VAE are back.
            window.configPanel()->setConfig(tinySdConfig(6));
            QVERIFY(window.configPanel()->config().loras.empty());
            QSignalSpy opened(&window, &MainWindow::historyRunOpened);
            window.historyPanel()->selectIds({runId});
            child<QPushButton>(window.historyPanel(), "historyOpen")->click();
            QVERIFY(!opened.isEmpty() || opened.wait(60000));
            QVERIFY2(opened.at(0).at(1).toBool(), qPrintable(opened.at(0).at(2).toString()));
            QCOMPARE(window.configPanel()->config().loras, config.loras);
            QCOMPARE(window.configPanel()->config().vae, config.vae);
            window.close();  // saves the settings
        }
        // A restart: the settings bring them back.
        MainWindow again(settingsAt(settings), history);
        QCOMPARE(again.configPanel()->config().loras, config.loras);
        QCOMPARE(again.configPanel()->config().vae, config.vae);
        QVERIFY(waitForHistory(again));
    }

    void batchCountMakesOneRunPerSeed() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        const QString history = freshPath("history");
        QVERIFY(QDir().mkpath(history));
        MainWindow window(settingsAt(freshPath("settings") + ".ini"), history);
        QVERIFY(setConfigAndWait(*window.configPanel(), tinyRunConfig(40)));
        QVERIFY(waitForHistory(window));
        window.configPanel()->setBatchCount(3);
        QCOMPARE(child<QSpinBox>(window.configPanel(), "batchCountSpin")->value(), 3);
        QSignalSpy ended(&window, &MainWindow::runEnded);
        window.runAction()->trigger();
        QVERIFY(QTest::qWaitFor([&ended] { return ended.size() >= 3; }, 300000));
        for (const QList<QVariant>& end : ended) QVERIFY(end.at(0).toBool());
        QVERIFY(QTest::qWaitFor([&window] { return window.history().entries().size() == 3; }, 60000));
        std::vector<std::uint64_t> seeds;
        for (const HistoryEntry& entry : window.history().entries()) seeds.push_back(entry.record.config.seed);
        std::sort(seeds.begin(), seeds.end());
        QCOMPARE(seeds, (std::vector<std::uint64_t>{40, 41, 42}));
        QTest::qWait(200);  // no fourth run
        QCOMPARE(ended.size(), 3);
        QVERIFY(!window.isRunning());
    }
};

QTEST_MAIN(TestLoraUi)
#include "tst_loraui.moc"
