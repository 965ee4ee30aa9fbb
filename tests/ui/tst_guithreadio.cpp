// The GUI thread reads and writes no file and encodes no image. The guard
// (app/qt/GuiThreadGuard.h) fires on a QApplication's thread and nowhere else; a finished run, a
// history reload, a model change, a delete, a comparison and a preset reach the window by
// queued signal, with the IO done elsewhere, and the guard never fires while they do (every
// test fails on its warning: init() and cleanup()). Answers to superseded requests are
// dropped by job id, and model inspection is cached per folder and file times.
#include <future>
#include <string>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>

#include "../app/HistoryFiles.h"
#include "TinyRun.h"
#include "app/qt/GuiThreadGuard.h"
#include "app/qt/HistoryStore.h"
#include "app/qt/ModelInspector.h"
#include "app/qt/ModelLocator.h"
#include "app/qt/RunHistory.h"
#include "ui/ConfigPanel.h"
#include "ui/HistoryPanel.h"
#include "ui/MainWindow.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

// A run with an 8 x 8 image, as RunHistory stores it.
std::shared_ptr<const RunResult> resultOf(int i) {
    auto result = std::make_shared<RunResult>();
    result->record.runId = runIdOf(i);
    result->record.startedAt = startOf(i);
    result->record.totalMs = 100.0 + i;  // tells the runs apart in a compare view
    result->image = ImageTensor{3, 8, 8, std::vector<float>(3 * 8 * 8, 0.25f)};
    result->seamMap = ImageTensor{1, 8, 8, std::vector<float>(8 * 8, 0.5f)};
    return result;
}

// A model folder with the test model's config.json (no weights: inspection reads only the
// configuration), with "in_channels" set to `channels`.
void writeModelFolder(const QString& folder, int channels) {
    QFile source(testModelFolder() + QStringLiteral("/config.json"));
    QVERIFY(source.open(QIODevice::ReadOnly));
    QString text = QString::fromUtf8(source.readAll());
    text.replace(QStringLiteral("\"in_channels\": 3"), QStringLiteral("\"in_channels\": %1").arg(channels));
    QVERIFY(QDir().mkpath(folder));
    writeFile(folder + QStringLiteral("/config.json"), text.toStdString());
}

}  // namespace

class TestGuiThreadIo : public QObject {
    Q_OBJECT

private:
    QTemporaryDir scratch_;
    int count_ = 0;

    QString freshFolder() {
        const QString path = scratch_.filePath(QStringLiteral("case-%1").arg(++count_));
        if (!QDir().mkpath(path)) qFatal("cannot create %s", qPrintable(path));
        return path;
    }
    std::unique_ptr<SettingsFile> freshSettings() {
        return std::make_unique<SettingsFile>(scratch_.filePath(QStringLiteral("io-%1.ini").arg(++count_)));
    }

private slots:
    void initTestCase() {
        QVERIFY(scratch_.isValid());
        QStandardPaths::setTestModeEnabled(true);
    }

    void init() {
        resetGuiThreadViolations();
        if (QByteArray(QTest::currentTestFunction()) != "guardFiresOnTheGuiThreadOnly") failOnGuiThreadIo();
    }

    void cleanup() {
        if (QByteArray(QTest::currentTestFunction()) != "guardFiresOnTheGuiThreadOnly")
            QVERIFY2(guiThreadViolations() == 0, lastGuiThreadViolation());
    }

    void guardFiresOnTheGuiThreadOnly() {
        // The history's reader on this (the GUI) thread: one violation, named, logged.
        const QString folder = freshFolder();
        QTest::ignoreMessage(QtWarningMsg, "file IO on the GUI thread: RunHistory::reload");
        { RunHistory history(folder); }
        QCOMPARE(guiThreadViolations(), 1);
        QCOMPARE(QByteArray(lastGuiThreadViolation()), QByteArray("RunHistory::reload"));
        // The same on another thread: nothing.
        std::async(std::launch::async, [&folder] {
            RunHistory history(folder);
            history.add(*resultOf(0));
        }).get();
        QCOMPARE(guiThreadViolations(), 1);
        // The model readers too.
        QTest::ignoreMessage(QtWarningMsg, "file IO on the GUI thread: ModelLocator::readLimits");
        QVERIFY(ModelLocator::readLimits(folder) == std::nullopt);
        QCOMPARE(guiThreadViolations(), 2);
        QCOMPARE(QByteArray(lastGuiThreadViolation()), QByteArray("ModelLocator::readLimits"));
    }

    void historyLoadsAndReloadsBySignal() {
        const QString folder = freshFolder();
        for (int i = 0; i < 3; ++i)
            writeFile(folder + QStringLiteral("/%1.json").arg(QString::fromStdString(runIdOf(i))),
                      manifestOf(runIdOf(i), startOf(i)));
        HistoryStore store(folder);
        QSignalSpy loaded(&store, &HistoryStore::loaded);
        // Nothing read on this thread: nothing known before the answer.
        QVERIFY(!store.isLoaded());
        QVERIFY(store.entries().empty());
        QVERIFY(loaded.wait(60000));
        QCOMPARE(store.entries().size(), std::size_t(3));
        QCOMPARE(store.entries().back().id(), QString::fromStdString(runIdOf(2)));

        // Two reloads in a row: the first's answer is stale and dropped; the second sees the
        // run written in between.
        writeFile(folder + QStringLiteral("/%1.json").arg(QString::fromStdString(runIdOf(3))),
                  manifestOf(runIdOf(3), startOf(3)));
        const quint64 first = store.reload();
        const quint64 second = store.reload();
        QVERIFY(second > first);
        QVERIFY(QTest::qWaitFor([&] { return store.pendingJobs() == 0; }, 60000));
        QCOMPARE(loaded.count(), 2);  // the first load and the second reload, not the first reload
        QCOMPARE(store.entries().size(), std::size_t(4));
    }

    void finishedRunReachesTheHistoryBySignal() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        const QString history = freshFolder();
        MainWindow window(freshSettings(), history);
        window.show();
        QVERIFY(waitForHistory(window));
        QVERIFY(setConfigAndWait(*window.configPanel(), tinyRunConfig(3)));
        QSignalSpy ended(&window, &MainWindow::runEnded);
        QSignalSpy added(&window.history(), &HistoryStore::entryAdded);
        window.runAction()->trigger();
        QVERIFY(ended.wait(300000));
        QVERIFY(ended.at(0).at(0).toBool());
        const QString id = QString::fromStdString(window.lastRun()->result->record.runId);
        // The PNG is encoded and written on the history's thread: the row comes with the signal.
        if (added.isEmpty()) {
            QVERIFY(!window.history().find(id));
            QCOMPARE(window.historyPanel()->rowCount(), 0);
            QVERIFY(added.wait(60000));
        }
        QCOMPARE(added.at(0).at(1).toString(), id);
        QVERIFY(added.at(0).at(2).toStringList().isEmpty());
        const HistoryEntry* entry = window.history().find(id);
        QVERIFY(entry);
        QCOMPARE(entry->thumbnail.size(), QSize(RunHistory::kThumbnailSize, RunHistory::kThumbnailSize));
        QCOMPARE(QImage(entry->imagePath).size(), QSize(64, 64));
        QCOMPARE(window.historyPanel()->rowCount(), 1);
        QVERIFY(QFileInfo(history + QLatin1Char('/') + id + QStringLiteral(".json")).isFile());
    }

    void deleteAndCompareAnswerBySignal() {
        const QString history = freshFolder();
        {
            // Three runs with images, written off this thread as the window would.
            HistoryStore store(history);
            for (int i = 0; i < 3; ++i) store.add(resultOf(i));
            QVERIFY(QTest::qWaitFor([&] { return store.pendingJobs() == 0; }, 60000));
            QCOMPARE(store.entries().size(), std::size_t(3));
        }
        MainWindow window(freshSettings(), history);
        window.show();
        QVERIFY(waitForHistory(window));
        QCOMPARE(window.historyPanel()->rowCount(), 3);

        // Compare: the images are read on the history's thread; the view opens on the signal.
        QSignalSpy opened(&window, &MainWindow::compareViewOpened);
        QString error;
        QVERIFY2(window.compareRuns(QString::fromStdString(runIdOf(0)), QString::fromStdString(runIdOf(1)), &error),
                 qPrintable(error));
        QVERIFY(!window.compareView());
        QVERIFY(opened.wait(60000));
        QVERIFY(window.compareView());
        QCOMPARE(window.compareView()->deltas().maxPixelDiff, 0);  // both images read: same pixels
        QCOMPARE(window.compareView()->deltas().totalMsB, 101.0);
        window.compareView()->close();
        // Two requests in a row: only the newer one opens a view.
        QVERIFY(window.compareRuns(QString::fromStdString(runIdOf(0)), QString::fromStdString(runIdOf(1)), &error));
        QVERIFY(window.compareRuns(QString::fromStdString(runIdOf(1)), QString::fromStdString(runIdOf(2)), &error));
        QVERIFY(waitForHistory(window));  // both answered (the view opens in the answer itself)
        QCOMPARE(opened.count(), 2);
        QCOMPARE(window.compareView()->deltas().totalMsA, 101.0);
        QCOMPARE(window.compareView()->deltas().totalMsB, 102.0);
        window.compareView()->close();

        // Delete: the files go on the history's thread; the row goes with entryRemoved.
        const QString victim = QString::fromStdString(runIdOf(1));
        QSignalSpy removed(&window.history(), &HistoryStore::entryRemoved);
        window.historyPanel()->selectIds({victim});
        window.historyPanel()->findChild<QPushButton*>(QStringLiteral("historyDelete"))->click();
        QCOMPARE(window.historyPanel()->rowCount(), 3);  // not yet: nothing was deleted on this thread
        QVERIFY(removed.wait(60000));
        QCOMPARE(removed.at(0).at(1).toString(), victim);
        QCOMPARE(window.historyPanel()->rowCount(), 2);
        QVERIFY(!window.history().find(victim));
        for (const char* suffix : {".json", ".png", ".seam.json"})
            QVERIFY2(!QFileInfo::exists(history + QLatin1Char('/') + victim + QLatin1String(suffix)), suffix);
    }

    void modelChangeIsInspectedOffThreadAndCached() {
        const QString a = freshFolder() + QStringLiteral("/model-a"), b = freshFolder() + QStringLiteral("/model-b");
        writeModelFolder(a, 3);
        writeModelFolder(b, 3);
        MainWindow window(freshSettings(), freshFolder());
        ConfigPanel* panel = window.configPanel();
        const ModelInspector& inspector = panel->modelInspector();
        QVERIFY(waitForModelCheck(*panel));
        const int readsBefore = inspector.configurationReads();

        // A new folder: not valid until the answer arrives, then valid by signal.
        RunConfig config = tinyRunConfig(1);
        config.model = a.toStdString();
        QSignalSpy checked(panel, &ConfigPanel::modelChecked);
        panel->setConfig(config);
        QVERIFY(panel->isCheckingModel());
        QVERIFY(!panel->isValid());
        QCOMPARE(panel->problemFor(QStringLiteral("model")), QStringLiteral("checking the model folder…"));
        QVERIFY(!window.runAction()->isEnabled());
        QVERIFY(checked.wait(60000));
        QVERIFY2(panel->isValid(), qPrintable(panel->problems().join('\n')));
        QVERIFY(window.runAction()->isEnabled());
        QCOMPARE(inspector.configurationReads(), readsBefore + 1);
        QVERIFY2(panel->findChild<QLabel*>(QStringLiteral("modelInfo"))
                     ->text()
                     .startsWith(QStringLiteral("model-a: 3 input channels")),
                 qPrintable(panel->findChild<QLabel*>(QStringLiteral("modelInfo"))->text()));

        // Edits of other fields read nothing and ask nothing: valid at once.
        auto* tile = panel->findChild<QSpinBox*>(QStringLiteral("tileSpin"));
        for (int value : {40, 48, 32}) {
            tile->setValue(value);
            QVERIFY(!panel->isCheckingModel());
            QCOMPARE(inspector.pendingJobs(), 0);
        }
        QVERIFY(panel->isValid());
        QCOMPARE(inspector.configurationReads(), readsBefore + 1);

        // A -> B -> A: B is read; A again only has its file times looked at (cached).
        auto* edit = panel->findChild<QLineEdit*>(QStringLiteral("modelEdit"));
        edit->setText(b);
        QVERIFY(waitForModelCheck(*panel));
        edit->setText(a);
        QVERIFY(waitForModelCheck(*panel));
        QVERIFY(panel->isValid());
        QCOMPARE(inspector.configurationReads(), readsBefore + 2);

        // A changed on disk (new time and size): read again, its new limits shown.
        edit->setText(b);
        QVERIFY(waitForModelCheck(*panel));
        writeModelFolder(a, 1);  // the same size: only the time tells
        QFile changed(a + QStringLiteral("/config.json"));
        QVERIFY(changed.open(QIODevice::ReadWrite));
        QVERIFY(changed.setFileTime(QDateTime::currentDateTime().addSecs(10), QFileDevice::FileModificationTime));
        changed.close();
        edit->setText(a);
        QVERIFY(waitForModelCheck(*panel));
        QCOMPARE(inspector.configurationReads(), readsBefore + 3);
        QVERIFY2(panel->findChild<QLabel*>(QStringLiteral("modelInfo"))
                     ->text()
                     .startsWith(QStringLiteral("model-a: 1 input channels")),
                 qPrintable(panel->findChild<QLabel*>(QStringLiteral("modelInfo"))->text()));

        // Typed letter by letter: only the last folder's answer is used.
        QSignalSpy inspected(&inspector, &ModelInspector::inspected);
        for (int n = 1; n <= b.size(); ++n) edit->setText(b.left(n));
        QVERIFY(waitForModelCheck(*panel));
        QVERIFY(QTest::qWaitFor([&] { return inspector.pendingJobs() == 0; }, 60000));
        QCOMPARE(inspected.count(), 1);
        QCOMPARE(inspected.at(0).at(1).value<ModelInspection>().folder, b);
        QVERIFY(panel->isValid());
        // A folder that is not one: the same message as before, found off this thread.
        edit->setText(b + QStringLiteral("/missing"));
        QVERIFY(waitForModelCheck(*panel));
        QVERIFY2(panel->problemFor(QStringLiteral("model")).contains(QStringLiteral("is not a folder")),
                 qPrintable(panel->problemFor(QStringLiteral("model"))));
    }

    void presetAndExportAnswerBySignal() {
        const QString folder = freshFolder();
        RunConfig preset = tinyRunConfig(4242);
        writeFile(folder + QStringLiteral("/preset.json"), toJson(preset).dump());
        MainWindow window(freshSettings(), freshFolder());
        QSignalSpy restored(&window, &MainWindow::configurationRestored);
        window.restoreConfigurationFrom(folder + QStringLiteral("/preset.json"));
        QCOMPARE(restored.count(), 0);  // read off this thread: the answer comes later
        QVERIFY(restored.wait(60000));
        QVERIFY(restored.at(0).at(1).toBool());
        QCOMPARE(window.configPanel()->config().seed, std::uint64_t(4242));
        // Two in a row: only the newer file counts.
        writeFile(folder + QStringLiteral("/other.json"), toJson(tinyRunConfig(7)).dump());
        restored.clear();
        window.restoreConfigurationFrom(folder + QStringLiteral("/preset.json"));
        window.restoreConfigurationFrom(folder + QStringLiteral("/other.json"));
        // One file at a time, in order: the stale answer comes (and is dropped) first.
        QVERIFY(QTest::qWaitFor([&] { return !restored.isEmpty(); }, 60000));
        QCOMPARE(restored.count(), 1);
        QCOMPARE(restored.at(0).at(0).toString(), folder + QStringLiteral("/other.json"));
        QCOMPARE(window.configPanel()->config().seed, std::uint64_t(7));

        // Nothing to export yet: said by the same signal, at once.
        QString error;
        QVERIFY(!exportAndWait(window, ExportFormat::ManifestJson, folder + QStringLiteral("/m.json"),
                               MainWindow::Overwrite::Refuse, &error));
        QVERIFY2(error.contains(QStringLiteral("no finished run")), qPrintable(error));
    }
};

QTEST_MAIN(TestGuiThreadIo)
#include "tst_guithreadio.moc"
