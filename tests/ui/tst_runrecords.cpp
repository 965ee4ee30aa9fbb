// What a window run's record holds and how the window gives it back: a run from noise records no
// start-image setting (strength, upscale, upscale model, preserve colour), so two such runs compare
// as the same work and its PNG parameters name no upscale; a reopened run restores the settings it
// asked for (tile batch "auto", the window's device), the history selects the run just made and
// names each run's model, and the prompt typed survives a restart with a model that takes none.
// On the CPU with the tiny test model.
#include <QComboBox>
#include <QDir>
#include <QPlainTextEdit>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>

#include "TinyRun.h"
#include "app/qt/HistoryStore.h"
#include "core/run/ConfigDiff.h"
#include "core/run/Infotext.h"
#include "ui/ConfigPanel.h"
#include "ui/HistoryPanel.h"
#include "ui/MainWindow.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

QString sdPipeline() { return QStringLiteral(TESSERA_TEST_DATA "/sdpipeline/sd1"); }

QStringList differenceKeys(const RunConfig& a, const RunConfig& b) {
    QStringList keys;
    for (const SettingDifference& d : configDifferences(a, b)) keys << QString::fromStdString(d.key);
    return keys;
}

}  // namespace

class TestRunRecords : public QObject {
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
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
    }

    void runsFromNoiseRecordNoStartImageSettings() {
        MainWindow window(freshSettings(), freshPath("history"));
        // Start-image settings left in the panel from an earlier image-to-image session.
        RunConfig a = tinyRunConfig(3, "a");
        a.strength = 0.3;
        a.upscale = 2.0;
        a.preserveColor = true;
        QVERIFY(runOnce(window, a));
        const RunRecord first = window.lastRun()->result->record;
        QCOMPARE(first.config.strength, RunConfig{}.strength);
        QCOMPARE(first.config.upscale, 1.0);
        QVERIFY(!first.config.preserveColor);
        QVERIFY(first.config.upscaleModel.empty());
        // The panel still shows what was typed.
        QCOMPARE(window.configPanel()->config().upscale, 2.0);
        // Its PNG's parameters say nothing of an upscale.
        const QString parameters = QString::fromStdString(infotext(first.config, infotextExtras(first)));
        QVERIFY2(!parameters.contains("Upscale") && !parameters.contains("Denoising strength"), qPrintable(parameters));

        // A second run with another tile: the two did the same work, only the tile differs.
        RunConfig b = tinyRunConfig(3, "b");
        b.tile = 64;
        QVERIFY(runOnce(window, b));
        const RunRecord second = window.lastRun()->result->record;
        const QStringList keys = differenceKeys(first.config, second.config);
        QVERIFY2(!keys.contains("strength") && !keys.contains("upscale") && !keys.contains("preserve_color"),
                 qPrintable(keys.join(", ")));
        QVERIFY2(keys.contains("tile"), qPrintable(keys.join(", ")));
        for (const SettingDifference& d : configDifferences(first.config, second.config))
            QVERIFY2(!d.changesWork, d.key.c_str());
    }

    void reopenedRunRestoresTheSettingsItAskedFor() {
        MainWindow window(freshSettings(), freshPath("history"));
        RunConfig c = tinyRunConfig(5, "auto batch");
        c.tileBatch = 0;  // auto
        c.backend = BackendKind::Auto;
        QVERIFY(runOnce(window, c));
        const RunRecord record = window.lastRun()->result->record;
        QVERIFY(record.config.tileBatch > 0);  // the record says what auto chose
        QCOMPARE(QString::fromStdString(std::string(toString(record.config.backend))), QStringLiteral("cpu"));
        const QString id = QString::fromStdString(record.runId);

        // Other settings in the panel, then the run reopened: auto again, the window's backend.
        RunConfig other = c;
        other.tileBatch = 4;
        other.seed = 99;
        QVERIFY(setConfigAndWait(*window.configPanel(), other));
        QSignalSpy opened(&window, &MainWindow::historyRunOpened);
        QVERIFY(window.openFromHistory(id));
        QVERIFY(opened.wait(60000));
        const RunConfig shown = window.configPanel()->config();
        QCOMPARE(shown.seed, std::uint64_t(5));
        QCOMPARE(shown.tileBatch, 0);
        QCOMPARE(child<QSpinBox>(window.configPanel(), "tileBatchSpin")->text(), QStringLiteral("auto"));
        QCOMPARE(QString::fromStdString(std::string(toString(shown.backend))), QStringLiteral("auto"));
    }

    void newestRunIsSelectedAndRowsNameTheirModel() {
        MainWindow window(freshSettings(), freshPath("history"));
        QVERIFY(runOnce(window, tinyRunConfig(1, "one")));
        const QString one = QString::fromStdString(window.lastRun()->result->record.runId);
        // Reopen it: its row is selected.
        QSignalSpy opened(&window, &MainWindow::historyRunOpened);
        QVERIFY(window.openFromHistory(one));
        QVERIFY(opened.wait(60000));
        QCOMPARE(window.historyPanel()->selectedIds(), QStringList({one}));
        // A new run ends: its row, the newest, is selected, not the one opened before.
        QVERIFY(runOnce(window, tinyRunConfig(2, "two")));
        const QString two = QString::fromStdString(window.lastRun()->result->record.runId);
        QVERIFY(waitForHistory(window));
        QCOMPARE(window.historyPanel()->selectedIds(), QStringList({two}));

        // Each row names its model.
        QTableWidget* table = window.historyPanel()->table();
        QCOMPARE(table->horizontalHeaderItem(HistoryPanel::ModelColumn)->text(), QStringLiteral("Model"));
        QCOMPARE(table->item(0, HistoryPanel::ModelColumn)->text(), QStringLiteral("cifar_like"));
        // A run that failed before it loaded its model names the file it was given.
        RunRecord failed;
        failed.runId = "20250101-000000-00000001";
        failed.status = RunStatus::Failed;
        failed.error = "model: the header length exceeds the limit";
        failed.config.model = "/models/Stable-diffusion/dreamshaper_8.safetensors";
        HistoryEntry entry;
        entry.record = failed;
        RunRecord sd;
        sd.runId = "20250101-000000-00000002";
        sd.modelName = "sd1";
        sd.config.model = sdPipeline().toStdString();
        HistoryEntry sdEntry;
        sdEntry.record = sd;
        RunRecord byDefault;
        byDefault.runId = "20250101-000000-00000003";
        HistoryEntry defaultEntry;
        defaultEntry.record = byDefault;
        HistoryPanel panel;
        panel.setEntries({entry, sdEntry, defaultEntry});
        QCOMPARE(panel.table()->item(2, HistoryPanel::ModelColumn)->text(), QStringLiteral("dreamshaper_8"));
        QCOMPARE(panel.table()->item(1, HistoryPanel::ModelColumn)->text(), QStringLiteral("sd1"));
        QCOMPARE(panel.table()->item(0, HistoryPanel::ModelColumn)->text(), QStringLiteral("default"));
    }

    void promptSurvivesARestartWithAModelThatTakesNone() {
        const QString settings = freshPath("prompt.ini");
        const std::string prompt = "a lighthouse at dusk, (storm:1.2)";
        {
            MainWindow window(std::make_unique<SettingsFile>(settings), freshPath("history"));
            RunConfig sd = tinyRunConfig(1);
            sd.model = sdPipeline().toStdString();
            sd.tile = 64;
            sd.prompt = prompt;
            sd.negativePrompt = "fog";
            QVERIFY(setConfigAndWait(*window.configPanel(), sd));
            QCOMPARE(window.configPanel()->config().prompt, prompt);
            // The pixel model takes no prompt: the editors keep the text, runs get none.
            RunConfig pixel = window.configPanel()->shownSettings();
            pixel.model = testModelFolder().toStdString();
            QVERIFY(setConfigAndWait(*window.configPanel(), pixel));
            QVERIFY(window.configPanel()->config().prompt.empty());
            window.show();
            window.close();  // saves the settings
        }
        MainWindow again(std::make_unique<SettingsFile>(settings), freshPath("history"));
        QVERIFY(waitForModelCheck(*again.configPanel()));
        QCOMPARE(child<QPlainTextEdit>(again.configPanel(), "promptEdit")->toPlainText().toStdString(), prompt);
        QCOMPARE(child<QPlainTextEdit>(again.configPanel(), "negativePromptEdit")->toPlainText(),
                 QStringLiteral("fog"));
        // Back on an SD model, the runs get it again.
        RunConfig sd = again.configPanel()->shownSettings();
        sd.model = sdPipeline().toStdString();
        QVERIFY(setConfigAndWait(*again.configPanel(), sd));
        QCOMPARE(again.configPanel()->config().prompt, prompt);
    }
};

QTEST_MAIN(TestRunRecords)
#include "tst_runrecords.moc"
