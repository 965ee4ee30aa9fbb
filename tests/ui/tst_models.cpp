// The model picker: a models folder's .safetensors checkpoints and diffusers
// folders are listed with family, size and details (a file that is no model says why); random
// weights are always offered; A1111's short hash (first 10 hex digits of SHA-256) is computed
// when a row is selected, off the GUI thread, once per file unless the file changes; a model
// picked goes into the model field; the models folder and the recently used models are kept in
// the window's settings.
#include <QCryptographicHash>
#include <QDialogButtonBox>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTreeWidget>
#include <QtTest>

#include "../core/SingleFileTestSupport.h"
#include "TinyRun.h"
#include "app/qt/ModelCatalog.h"
#include "ui/ConfigPanel.h"
#include "ui/MainWindow.h"
#include "ui/ModelPicker.h"

using namespace tessera;

namespace {

QString data(const char* path) { return QStringLiteral(TESSERA_TEST_DATA "/") + QString::fromLatin1(path); }

bool copyTree(const QString& from, const QString& to) {
    QDir().mkpath(to);
    const QDir source(from);
    for (const QFileInfo& info : source.entryInfoList(QDir::Files | QDir::Dirs | QDir::NoDotAndDotDot)) {
        const QString target = QDir(to).filePath(info.fileName());
        if (info.isDir() ? !copyTree(info.absoluteFilePath(), target) : !QFile::copy(info.absoluteFilePath(), target))
            return false;
    }
    return true;
}

QString shortSha256(const QString& path) {
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly)) return {};
    QCryptographicHash hash(QCryptographicHash::Sha256);
    hash.addData(&file);
    return QString::fromLatin1(hash.result().toHex().left(10));
}

// A full-size checkpoint of random:sd15 / random:sd21's shapes whose data is a sparse hole: its
// header is what a published checkpoint's is (the file reads as 2 GB; only the header is read).
void writeFullSizeCheckpoint(const QString& path, const char* shape) {
    const SdModelConfigs c = randomSdModelConfigs(shape);
    TensorList tensors = singleFileTensors(c.family, c.unet, c.vae, c.textEncoder);
    if (c.family == SdFamily::SD2) tensors = single_file_test::withDroppedOpenClipParts(tensors, 23, 1024);
    single_file_test::writeHeaderOnly(path.toStdString(), tensors);
}

// Waits for the picker's listing.
bool waitListed(ModelPicker& picker) {
    return QTest::qWaitFor([&picker] { return !picker.isScanning(); }, 60000);
}

}  // namespace

class TestModels : public QObject {
    Q_OBJECT

private:
    QTemporaryDir scratch_;
    QString models_;  // the models folder the tests list

private slots:
    void init() { testing::failOnGuiThreadIo(); }

    void initTestCase() {
        QVERIFY(scratch_.isValid());
        QStandardPaths::setTestModeEnabled(true);
        // A models folder as people keep one: checkpoints, a pipeline folder, a pixel model, a
        // nested checkpoint, a file that is no model, and files that are not listed.
        models_ = scratch_.filePath(QStringLiteral("models"));
        QVERIFY(QDir().mkpath(models_ + QStringLiteral("/sd2 models")));
        writeFullSizeCheckpoint(models_ + QStringLiteral("/v1-5.safetensors"), "random:sd15");
        writeFullSizeCheckpoint(models_ + QStringLiteral("/sd2 models/v2-1.safetensors"), "random:sd21");
        // A tiny test checkpoint: its shapes need a configuration folder, which the picker says.
        QVERIFY(QFile::copy(data("singlefile/sd1.safetensors"), models_ + QStringLiteral("/tiny-sd1.safetensors")));
        QVERIFY(copyTree(data("sdpipeline/sd1"), models_ + QStringLiteral("/pipeline-sd1")));
        QVERIFY(copyTree(data("sdpipeline/sd2"), models_ + QStringLiteral("/sd2 models/pipeline-sd2")));
        QVERIFY(copyTree(data("singlefile/sdxl"), models_ + QStringLiteral("/pipeline-sdxl")));
        QVERIFY(copyTree(data("models/cifar_like"), models_ + QStringLiteral("/cifar_like")));
        QFile junk(models_ + QStringLiteral("/lora.safetensors"));
        QVERIFY(junk.open(QIODevice::WriteOnly));
        junk.write("not a safetensors file at all");
        junk.close();
        QFile notes(models_ + QStringLiteral("/notes.txt"));
        QVERIFY(notes.open(QIODevice::WriteOnly));
        notes.close();
    }

    void cleanupTestCase() {
        QDir(QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/history"))
            .removeRecursively();
    }

    void listsTheModelsFolderWithFamiliesAndSizes() {
        ModelCatalog catalog;
        ModelPicker picker(&catalog, models_, {});
        QVERIFY(waitListed(picker));
        QTreeWidgetItem* sd1 = picker.rowOf(models_ + QStringLiteral("/v1-5.safetensors"), 1);
        QTreeWidgetItem* sd2 = picker.rowOf(models_ + QStringLiteral("/sd2 models/v2-1.safetensors"), 1);
        QTreeWidgetItem* tiny = picker.rowOf(models_ + QStringLiteral("/tiny-sd1.safetensors"), 1);
        QTreeWidgetItem* pipeline = picker.rowOf(models_ + QStringLiteral("/pipeline-sd1"), 1);
        QTreeWidgetItem* pixel = picker.rowOf(models_ + QStringLiteral("/cifar_like"), 1);
        QTreeWidgetItem* junk = picker.rowOf(models_ + QStringLiteral("/lora.safetensors"), 1);
        QTreeWidgetItem* pipeline2 = picker.rowOf(models_ + QStringLiteral("/sd2 models/pipeline-sd2"), 1);
        QTreeWidgetItem* pipelineXl = picker.rowOf(models_ + QStringLiteral("/pipeline-sdxl"), 1);
        QVERIFY(sd1 && sd2 && tiny && pipeline && pipeline2 && pipelineXl && pixel && junk);
        QCOMPARE(picker.tree()->topLevelItem(1)->childCount(), 8);  // notes.txt is not listed
        QCOMPARE(pipeline2->text(ModelPicker::FamilyColumn), QStringLiteral("SD2"));
        QCOMPARE(pipelineXl->text(ModelPicker::FamilyColumn), QStringLiteral("SDXL"));
        QCOMPARE(sd1->text(ModelPicker::FamilyColumn), QStringLiteral("SD1"));
        QCOMPARE(sd2->text(ModelPicker::FamilyColumn), QStringLiteral("SD2"));
        QCOMPARE(sd2->text(ModelPicker::NameColumn), QStringLiteral("sd2 models/v2-1.safetensors"));
        QCOMPARE(pipeline->text(ModelPicker::FamilyColumn), QStringLiteral("SD1"));
        QCOMPARE(pixel->text(ModelPicker::FamilyColumn), QStringLiteral("pixel"));
        QCOMPARE(junk->text(ModelPicker::FamilyColumn), QStringLiteral("?"));
        QCOMPARE(tiny->text(ModelPicker::FamilyColumn), QStringLiteral("?"));
        QVERIFY2(tiny->toolTip(0).contains("does not fit this file"), qPrintable(tiny->toolTip(0)));
        // Sizes: the file (SD 1.5 in FP16: 2.13 GB), or every file of the folder.
        QCOMPARE(sd1->text(ModelPicker::SizeColumn), QStringLiteral("2.13 GB"));
        QCOMPARE(tiny->text(ModelPicker::SizeColumn), QStringLiteral("155 KB"));
        QCOMPARE(pixel->text(ModelPicker::SizeColumn), QStringLiteral("1.1 MB"));
        // Details in the tooltip, info-style; the junk file says what is wrong with it.
        QVERIFY2(sd1->toolTip(0).contains("1066.2 M parameters") && sd1->toolTip(0).contains("prediction epsilon"),
                 qPrintable(sd1->toolTip(0)));
        QVERIFY2(sd2->toolTip(0).contains("prediction v_prediction"), qPrintable(sd2->toolTip(0)));
        QVERIFY2(pipeline->toolTip(0).contains("diffusers pipeline folder"), qPrintable(pipeline->toolTip(0)));
        QVERIFY2(pixel->toolTip(0).contains("input channels"), qPrintable(pixel->toolTip(0)));
        QVERIFY2(junk->toolTip(0).contains("lora.safetensors"), qPrintable(junk->toolTip(0)));
        // No hash before a row is selected: hashing is lazy.
        QCOMPARE(catalog.hashesComputed(), 0);
        QVERIFY(sd1->text(ModelPicker::HashColumn).isEmpty());
        QCOMPARE(pipeline->text(ModelPicker::HashColumn), QStringLiteral("—"));  // A1111 hashes single files
        // Random weights are always there.
        for (const auto& [path, family] :
             {std::pair{"random:sd15", "SD1"}, std::pair{"random:sd21", "SD2"}, std::pair{"random:sdxl", "SDXL"}}) {
            QTreeWidgetItem* row = picker.rowOf(QString::fromLatin1(path), 2);
            QVERIFY2(row, path);
            QCOMPARE(row->text(ModelPicker::FamilyColumn), QString::fromLatin1(family));
        }
    }

    void missingFolderSaysSo() {
        ModelCatalog catalog;
        ModelPicker picker(&catalog, scratch_.filePath(QStringLiteral("nowhere")), {});
        QVERIFY(waitListed(picker));
        QVERIFY2(picker.findChild<QLabel*>(QStringLiteral("modelsFolderNote"))->text().contains("is not a folder"),
                 qPrintable(picker.findChild<QLabel*>(QStringLiteral("modelsFolderNote"))->text()));
        QCOMPARE(picker.tree()->topLevelItem(1)->childCount(), 0);
        QVERIFY(picker.rowOf(QStringLiteral("random:sd15"), 2));
    }

    void hashIsLazyCachedAndFollowsTheFile() {
        const QString file = models_ + QStringLiteral("/tiny-sd1.safetensors");
        ModelCatalog catalog;
        {
            ModelPicker picker(&catalog, models_, {});
            QVERIFY(waitListed(picker));
            QSignalSpy hashed(&catalog, &ModelCatalog::hashed);
            picker.tree()->setCurrentItem(picker.rowOf(file, 1));
            QVERIFY(hashed.wait(60000));
            QCOMPARE(hashed.at(0).at(0).toString(), file);
            QCOMPARE(hashed.at(0).at(1).toString(), shortSha256(file));
            QCOMPARE(picker.rowOf(file, 1)->text(ModelPicker::HashColumn), shortSha256(file));
            QCOMPARE(catalog.hashesComputed(), 1);
        }
        {
            // A new picker on the same catalog shows it at once, hashing nothing.
            ModelPicker picker(&catalog, models_, {});
            QVERIFY(waitListed(picker));
            QCOMPARE(picker.rowOf(file, 1)->text(ModelPicker::HashColumn), shortSha256(file));
            picker.tree()->setCurrentItem(picker.rowOf(file, 1));
            QTest::qWait(50);
            QCOMPARE(catalog.hashesComputed(), 1);
        }
        // The file changes: listed again, it is hashed again.
        const QString copy = models_ + QStringLiteral("/changing.safetensors");
        QVERIFY(QFile::copy(file, copy));
        ModelPicker picker(&catalog, models_, {});
        QVERIFY(waitListed(picker));
        QSignalSpy hashed(&catalog, &ModelCatalog::hashed);
        picker.tree()->setCurrentItem(picker.rowOf(copy, 1));
        QVERIFY(hashed.wait(60000));
        QCOMPARE(catalog.hashesComputed(), 2);
        // Its last byte of tensor data changes (bytes appended would break its header: a file
        // whose header does not read is not hashed at all), and so does its time.
        QFile change(copy);
        QVERIFY(change.open(QIODevice::ReadWrite));
        QVERIFY(change.seek(change.size() - 1));
        char last = 0;
        QVERIFY(change.getChar(&last));
        QVERIFY(change.seek(change.size() - 1));
        QVERIFY(change.putChar(static_cast<char>(last ^ 1)));
        QVERIFY(change.setFileTime(change.fileTime(QFileDevice::FileModificationTime).addSecs(2),
                                   QFileDevice::FileModificationTime));
        change.close();
        picker.setModelsFolder(models_ + QStringLiteral("/"));  // the same folder, written differently: no rescan
        picker.setModelsFolder(scratch_.path());
        picker.setModelsFolder(models_);
        QVERIFY(waitListed(picker));
        // The row stays selected across the listing, so its new hash is computed at once.
        QTRY_COMPARE_WITH_TIMEOUT(catalog.hashesComputed(), 3, 60000);
        QTRY_COMPARE_WITH_TIMEOUT(picker.rowOf(copy, 1)->text(ModelPicker::HashColumn), shortSha256(copy), 60000);
        QVERIFY(shortSha256(copy) != shortSha256(file));
        QVERIFY(QFile::remove(copy));
    }

    // A 1 TB sparse x.safetensors whose header does not read (bytes after its last tensor): the
    // picker says why, and selecting it starts no hash (the old picker read the whole terabyte).
    void brokenHeaderIsNeverHashed() {
        const QString folder = scratch_.filePath(QStringLiteral("broken"));
        QVERIFY(QDir().mkpath(folder));
        const QString file = folder + QStringLiteral("/x.safetensors");
        QVERIFY(QFile::copy(data("singlefile/sd1.safetensors"), file));
        {
            QFile sparse(file);
            QVERIFY(sparse.open(QIODevice::ReadWrite));
            if (!sparse.resize(qint64{1} << 40)) QSKIP("no 1 TB sparse files on this file system");
        }
        ModelCatalog catalog;
        ModelPicker picker(&catalog, folder, {});
        QVERIFY(waitListed(picker));
        QTreeWidgetItem* row = picker.rowOf(file, 1);
        QVERIFY(row);
        QCOMPARE(row->text(ModelPicker::FamilyColumn), QStringLiteral("?"));
        QVERIFY2(row->toolTip(0).contains("x.safetensors"), qPrintable(row->toolTip(0)));
        picker.tree()->setCurrentItem(row);
        QTest::qWait(300);
        QCOMPARE(catalog.hashesStarted(), 0);
        QCOMPARE(catalog.pendingJobs(), 0);
        QCOMPARE(row->text(ModelPicker::HashColumn), QStringLiteral("—"));  // no hash, not "hashing…"
        QVERIFY(QFile::remove(file));
    }

    // A hash in progress (a 2 GB checkpoint) stops when another row is selected and when the
    // picker closes; selected again, it starts over.
    void hashStopsWhenTheSelectionMovesOrThePickerCloses() {
        const QString big = models_ + QStringLiteral("/v1-5.safetensors");
        ModelCatalog catalog;
        ModelPicker picker(&catalog, models_, {});
        QVERIFY(waitListed(picker));
        QSignalSpy stopped(&catalog, &ModelCatalog::hashStopped);
        QSignalSpy hashed(&catalog, &ModelCatalog::hashed);
        picker.tree()->setCurrentItem(picker.rowOf(big, 1));
        QCOMPARE(picker.rowOf(big, 1)->text(ModelPicker::HashColumn), QStringLiteral("hashing…"));
        QTRY_COMPARE_WITH_TIMEOUT(catalog.hashesStarted(), 1, 10000);
        QElapsedTimer clock;
        clock.start();
        picker.tree()->setCurrentItem(picker.rowOf(models_ + QStringLiteral("/pipeline-sd1"), 1));
        QVERIFY(stopped.wait(5000));
        QVERIFY2(clock.elapsed() < 1000, qPrintable(QString::number(clock.elapsed())));
        QCOMPARE(stopped.at(0).at(0).toString(), big);
        QCOMPARE(catalog.hashesComputed(), 0);
        QCOMPARE(hashed.count(), 0);
        QVERIFY(picker.rowOf(big, 1)->text(ModelPicker::HashColumn).isEmpty());  // asked again when selected
        // Selected again: hashed from the start; closing the picker stops it too.
        picker.show();
        QVERIFY(QTest::qWaitForWindowExposed(&picker));
        picker.tree()->setCurrentItem(picker.rowOf(big, 1));
        QTRY_COMPARE_WITH_TIMEOUT(catalog.hashesStarted(), 2, 10000);
        picker.close();
        QVERIFY(stopped.wait(5000));
        QCOMPARE(stopped.count(), 2);
        QCOMPARE(catalog.hashesComputed(), 0);
        QTRY_COMPARE(catalog.pendingJobs(), 0);
    }

    void pickedModelGoesIntoTheField() {
        ConfigPanel panel;
        panel.setModelsFolder(models_);
        ModelPicker* picker = panel.openModelPicker();
        QVERIFY(picker);
        QVERIFY(waitListed(*picker));
        auto* use = picker->findChild<QDialogButtonBox*>()->button(QDialogButtonBox::Ok);
        QVERIFY(!use->isEnabled());  // nothing selected yet
        picker->tree()->setCurrentItem(picker->rowOf(models_ + QStringLiteral("/pipeline-sd1"), 1));
        QVERIFY(use->isEnabled());
        use->click();
        QCOMPARE(QString::fromStdString(panel.config().model), models_ + QStringLiteral("/pipeline-sd1"));
        QVERIFY(testing::waitForModelCheck(panel));
        // Random weights by double-click.
        picker = panel.openModelPicker();
        QVERIFY(waitListed(*picker));
        QTreeWidgetItem* random = picker->rowOf(QStringLiteral("random:sd21"), 2);
        QSignalSpy chosen(picker, &ModelPicker::modelChosen);
        QVERIFY(QTest::qWaitForWindowExposed(picker));
        picker->tree()->scrollToItem(random);
        const QPoint at = picker->tree()->visualItemRect(random).center();
        // QTest's double click in an item view needs the press that comes before it.
        QTest::mousePress(picker->tree()->viewport(), Qt::LeftButton, {}, at);
        QTest::mouseDClick(picker->tree()->viewport(), Qt::LeftButton, {}, at);
        QCOMPARE(chosen.count(), 1);
        QCOMPARE(panel.config().model, std::string("random:sd21"));
        QVERIFY(testing::waitForModelCheck(panel));
    }

    void recentModelsAndFolderAreRemembered() {
        const QString ini = scratch_.filePath(QStringLiteral("models.ini"));
        const QString pipeline = models_ + QStringLiteral("/pipeline-sd1");
        {
            MainWindow window(std::make_unique<SettingsFile>(ini), scratch_.filePath(QStringLiteral("h1")));
            ConfigPanel& panel = *window.configPanel();
            QVERIFY(panel.recentModels().isEmpty());
            ModelPicker* picker = panel.openModelPicker();
            QSignalSpy changed(&panel, &ConfigPanel::modelsFolderChanged);
            picker->setModelsFolder(models_);
            QCOMPARE(changed.count(), 1);
            QCOMPARE(panel.modelsFolder(), models_);
            QVERIFY(waitListed(*picker));
            picker->close();
            panel.noteModelUsed(QStringLiteral("random:sd15"));
            panel.noteModelUsed(pipeline);
            panel.noteModelUsed(QStringLiteral("random:sd15"));  // again: moves to the front, once
            QCOMPARE(panel.recentModels(), (QStringList{QStringLiteral("random:sd15"), pipeline}));
            window.close();
        }
        MainWindow again(std::make_unique<SettingsFile>(ini), scratch_.filePath(QStringLiteral("h2")));
        QCOMPARE(again.configPanel()->modelsFolder(), models_);
        QCOMPARE(again.configPanel()->recentModels(), (QStringList{QStringLiteral("random:sd15"), pipeline}));
        // The picker lists them under Recent, described like the folder's.
        ModelPicker* picker = again.configPanel()->openModelPicker();
        QVERIFY(waitListed(*picker));
        QTreeWidgetItem* recent = picker->rowOf(pipeline, 0);
        QVERIFY(recent);
        QCOMPARE(recent->text(ModelPicker::FamilyColumn), QStringLiteral("SD1"));
        QCOMPARE(picker->tree()->topLevelItem(0)->child(0)->data(0, ModelPicker::kPathRole).toString(),
                 QStringLiteral("random:sd15"));
        picker->close();
    }

    void runningAModelPutsItFirstInRecent() {
        if (!testing::haveTestModel()) QSKIP("test model not present");
        MainWindow window(std::make_unique<SettingsFile>(scratch_.filePath(QStringLiteral("run.ini"))),
                          scratch_.filePath(QStringLiteral("h3")));
        QVERIFY(testing::runOnce(window, testing::tinyRunConfig(5)));
        QCOMPARE(window.configPanel()->recentModels().value(0),
                 QFileInfo(testing::testModelFolder()).absoluteFilePath());
    }
};

QTEST_MAIN(TestModels)
#include "tst_models.moc"
