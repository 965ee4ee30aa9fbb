// Runs you can reopen, and image-to-image / upscaling in the window.
// The Start image group (open, drop on the group or the canvas, clear, strength, scale x1/x2/x4
// or target size, the plan following the canvas size), the start image stored with the run,
// the before/after split at 1:1, reopening a run after a restart (image at full resolution,
// charts, settings, Export), delete to the trash with undo (and the trash purged at exit and
// past its depth), cancelled and failed runs kept and marked, copy parameters, show in
// folder, and the finished image kept under the plan while settings change. Offscreen, with
// real tiny CPU renders; every test fails if the window reads or writes a file on its thread.
#include <future>

#include <QAction>
#include <QClipboard>
#include <QComboBox>
#include <QDesktopServices>
#include <QDir>
#include <QDoubleSpinBox>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFile>
#include <QGroupBox>
#include <QGuiApplication>
#include <QLabel>
#include <QMessageBox>
#include <QMimeData>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QToolButton>
#include <QUrl>
#include <QtTest>

#include <qcustomplot.h>

#include "../app/HistoryFiles.h"
#include "TinyRun.h"
#include "app/cli/PngIO.h"
#include "app/qt/HistoryStore.h"
#include "app/qt/RunHistory.h"
#include "core/sampling/ImageOps.h"
#include "ui/ConfigPanel.h"
#include "ui/HistoryPanel.h"
#include "ui/MainWindow.h"
#include "ui/TileCanvas.h"
#include "ui/TimingCharts.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

// `read` run on a thread of its own: the suite's GUI thread must not read files (GuiThreadGuard).

QByteArray bytesOf(const QString& path) {
    return offGuiThread([path] {
        QFile file(path);
        return file.open(QIODevice::ReadOnly) ? file.readAll() : QByteArray();
    });
}

QImage imageOf(const QString& path) {
    return offGuiThread([path] { return QImage(path).convertToFormat(QImage::Format_RGB888); });
}

// A start image: left half `left`, right half `right`, written as PNG.
QString writeStartImage(const QString& path, QSize size, QColor left, QColor right) {
    QImage image(size, QImage::Format_RGB888);
    image.fill(right);
    for (int y = 0; y < size.height(); ++y)
        for (int x = 0; x < size.width() / 2; ++x) image.setPixelColor(x, y, left);
    if (!image.save(path)) qFatal("cannot write %s", qPrintable(path));
    return path;
}

// One local file dragged onto `target`: whether the drag was accepted, and the drop sent.
bool dropFile(QWidget* target, const QString& path) {
    QMimeData mime;
    mime.setUrls({QUrl::fromLocalFile(path)});
    QDragEnterEvent enter(QPoint(20, 20), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(target, &enter);
    if (!enter.isAccepted()) return false;
    QDropEvent drop(QPointF(20, 20), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(target, &drop);
    return drop.isAccepted();
}

bool waitForStartImage(const ConfigPanel& panel) {
    return QTest::qWaitFor([&panel] { return !panel.isCheckingStartImage(); }, 60000);
}

// Opens run `id` from the history as the Open button does; true when it is shown.
bool openAndWait(MainWindow& window, const QString& id, QString* error) {
    QSignalSpy opened(&window, &MainWindow::historyRunOpened);
    window.historyPanel()->selectIds({id});
    child<QPushButton>(window.historyPanel(), "historyOpen")->click();
    if (opened.isEmpty() && !opened.wait(60000)) {
        *error = QStringLiteral("no historyRunOpened signal");
        return false;
    }
    *error = opened.at(0).at(2).toString();
    return opened.at(0).at(1).toBool();
}

QString statusOf(const MainWindow& window) { return window.findChild<QLabel*>(QStringLiteral("statusText"))->text(); }

// The history row of run `id`, or -1.
int rowOf(HistoryPanel* panel, const QString& id) {
    for (int row = 0; row < panel->rowCount(); ++row)
        if (panel->table()->item(row, HistoryPanel::LabelColumn)->data(Qt::UserRole + 1).toString() == id) return row;
    return -1;
}

}  // namespace

class TestRuns : public QObject {
    Q_OBJECT

private:
    QTemporaryDir scratch_;
    int count_ = 0;

    std::unique_ptr<SettingsFile> freshSettings() {
        return std::make_unique<SettingsFile>(scratch_.filePath(QStringLiteral("runs-%1.ini").arg(++count_)));
    }
    QString freshFolder() {
        const QString folder = scratch_.filePath(QStringLiteral("folder-%1").arg(++count_));
        QDir().mkpath(folder);
        return folder;
    }

public slots:
    // QDesktopServices' handler for file: URLs while a test captures them (Show in folder).
    void captureUrl(const QUrl& url) { openedUrls_ << url; }

private:
    QList<QUrl> openedUrls_;

private slots:
    void init() { failOnGuiThreadIo(); }

    void initTestCase() {
        QVERIFY(scratch_.isValid());
        QStandardPaths::setTestModeEnabled(true);
    }

    void startImageSizesTheCanvasAndThePlan() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        MainWindow window(freshSettings(), freshFolder());
        ConfigPanel* panel = window.configPanel();
        QVERIFY(setConfigAndWait(*panel, tinyRunConfig(1)));
        QVERIFY(!child<QDoubleSpinBox>(panel, "strengthSpin")->isEnabled());  // nothing to start from yet
        QVERIFY(!child<QComboBox>(panel, "scaleCombo")->isEnabled());

        // Open: the header is read off this thread; until then Run waits.
        const QString start = writeStartImage(scratch_.filePath("start-48x40.png"), QSize(48, 40), Qt::red, Qt::blue);
        QSignalSpy checked(panel, &ConfigPanel::startImageChecked);
        panel->setStartImage(start);
        QVERIFY(panel->isCheckingStartImage());
        QVERIFY(!panel->isValid());
        QVERIFY2(panel->problemFor("init").contains("reading"), qPrintable(panel->problemFor("init")));
        QVERIFY(!window.runAction()->isEnabled());
        QVERIFY(checked.wait(60000));
        QVERIFY2(panel->isValid(), qPrintable(panel->problems().join('\n')));
        QVERIFY(window.runAction()->isEnabled());
        QCOMPARE(child<QLabel>(panel, "startImageName")->text(), QStringLiteral("start-48x40.png — 48 × 40 px, 1 KiB"));

        // x1: the image's size (in multiples of 8); the plan follows at once.
        auto* scale = child<QComboBox>(panel, "scaleCombo");
        auto* width = child<QSpinBox>(panel, "widthSpin");
        QCOMPARE(scale->currentText(), QStringLiteral("×1"));
        QCOMPARE(panel->config().width, 48);
        QCOMPARE(panel->config().height, 40);
        QVERIFY(width->isReadOnly());
        QCOMPARE(window.canvas()->canvasSize(), QSize(48, 40));
        // x2 and x4.
        scale->setCurrentIndex(scale->findText(QStringLiteral("×2")));
        QCOMPARE(panel->config().upscale, 2.0);
        QCOMPARE(QSize(panel->config().width, panel->config().height), QSize(96, 80));
        QCOMPARE(window.canvas()->canvasSize(), QSize(96, 80));
        QVERIFY2(child<QLabel>(panel, "costTiles")->text().startsWith("12 (4 × 3)"),
                 qPrintable(child<QLabel>(panel, "costTiles")->text()));
        scale->setCurrentIndex(scale->findText(QStringLiteral("×4")));
        QCOMPARE(window.canvas()->canvasSize(), QSize(192, 160));
        QVERIFY2(child<QLabel>(panel, "startCanvasSize")->text().contains("192 × 160"),
                 qPrintable(child<QLabel>(panel, "startCanvasSize")->text()));
        // Any factor: rounded down to multiples of 8, as tessera-cli render does (48 x 1.5 = 72, 40 x 1.5 = 60 -> 56).
        child<QDoubleSpinBox>(panel, "upscaleSpin")->setValue(1.5);
        QCOMPARE(scale->currentText(), QStringLiteral("Factor"));
        QCOMPARE(window.canvas()->canvasSize(), QSize(72, 56));
        // Target size: the Size fields decide, the image is stretched to them; upscale 1.
        scale->setCurrentIndex(scale->findText(QStringLiteral("Target size")));
        QVERIFY(!width->isReadOnly());
        width->setValue(128);
        QCOMPARE(panel->config().width, 128);
        QCOMPARE(panel->config().upscale, 1.0);
        QCOMPARE(window.canvas()->canvasSize(), QSize(128, 56));
        // Strength goes into the run.
        child<QDoubleSpinBox>(panel, "strengthSpin")->setValue(0.35);
        QCOMPARE(panel->config().strength, 0.35);
        QCOMPARE(QString::fromStdString(window.runnableConfig().initImage), start);

        // A round trip through setConfig (a reopened run) keeps the mode: with a factor the
        // canvas follows the image again, without one (upscale 1) the Size fields stand.
        RunConfig c = panel->config();
        c.upscale = 2;
        c.width = c.height = 512;
        QVERIFY(setConfigAndWait(*panel, c));
        QCOMPARE(scale->currentText(), QStringLiteral("×2"));
        QCOMPARE(QSize(panel->config().width, panel->config().height), QSize(96, 80));
        c.upscale = 1;
        QVERIFY(setConfigAndWait(*panel, c));
        QCOMPARE(scale->currentText(), QStringLiteral("Target size"));
        QCOMPARE(panel->config().width, 512);

        // A file that is no image is named and blocks Run.
        const QString bogus = scratch_.filePath("not-an-image.png");
        writeFile(bogus, "hello, this is text");
        panel->setStartImage(bogus);
        QVERIFY(waitForStartImage(*panel));
        QVERIFY(!panel->isValid());
        QVERIFY2(panel->problemFor("init").contains("not-an-image.png") &&
                     panel->problemFor("init").contains("neither a PNG nor a JPEG"),
                 qPrintable(panel->problemFor("init")));
        QVERIFY(!child<QLabel>(panel, "initError")->isHidden());
        QVERIFY(!window.runAction()->isEnabled());

        // Clear: from noise again; the size fields are editable, the start image controls not.
        child<QToolButton>(panel, "startImageClear")->click();
        QVERIFY(panel->config().initImage.empty());
        QVERIFY(panel->isValid());
        QVERIFY(!width->isReadOnly());
        QVERIFY(!child<QDoubleSpinBox>(panel, "strengthSpin")->isEnabled());
    }

    void droppedImagesBecomeTheStartImage() {
        MainWindow window(freshSettings(), freshFolder());
        ConfigPanel* panel = window.configPanel();
        const QString png = writeStartImage(scratch_.filePath("dropped.png"), QSize(16, 16), Qt::green, Qt::green);
        // On the canvas: the window asks whether it is the start image or its settings are wanted.
        QVERIFY(dropFile(window.canvas(), png));
        QVERIFY(window.dropQuestion());
        QVERIFY(panel->config().initImage.empty());
        child<QPushButton>(window.dropQuestion(), "dropAsStartImage")->click();
        QCOMPARE(QString::fromStdString(panel->config().initImage), png);
        QVERIFY2(statusOf(window).contains("dropped.png"), qPrintable(statusOf(window)));
        QTRY_VERIFY(!window.dropQuestion());
        // On the Start image group: no question, it is the start image.
        panel->setStartImage({});
        QVERIFY(dropFile(child<QGroupBox>(panel, "startGroup"), png));
        QCOMPARE(QString::fromStdString(panel->config().initImage), png);
        // A preset is no image: the canvas and the group leave it to the window, which
        // restores the settings it holds.
        const QString preset = scratch_.filePath("preset.json");
        RunConfig other;
        other.seed = 4242;
        writeFile(preset, toJson(other).dump());
        for (QWidget* target :
             {static_cast<QWidget*>(window.canvas()), static_cast<QWidget*>(child<QGroupBox>(panel, "startGroup"))}) {
            QSignalSpy restored(&window, &MainWindow::configurationRestored);
            QVERIFY(dropFile(target, preset));
            QVERIFY(restored.wait(60000));
            QCOMPARE(panel->config().seed, std::uint64_t(4242));
            QVERIFY(panel->config().initImage.empty());
            panel->setStartImage(png);
        }
    }

    // Shifted tiles: the grid and the tiles under way are drawn where the step put them, the plan
    // rolled by the event's shift; a tile crossing the image's edge is drawn on both sides.
    void shiftedTilesAreDrawnWhereTheyLie() {
        TileCanvas canvas;
        canvas.setPlan(TilePlan::make(96, 64, 32, 0));
        canvas.setTileShift(CanvasShift{8, 20});
        QVERIFY(canvas.tileShift() == (CanvasShift{8, 20}));
        // Tile 2 (x 64..96, y 0..32): x 44..76, y 56..64 and 0..24.
        QVERIFY(canvas.rolledTileRects(2) == (std::vector<QRectF>{QRectF(44, 56, 32, 8), QRectF(44, 0, 32, 24)}));
        // Tile 3 (x 0..32, y 32..64): x 76..96 and 0..12, y 24..56.
        QVERIFY(canvas.rolledTileRects(3) == (std::vector<QRectF>{QRectF(76, 24, 20, 32), QRectF(0, 24, 12, 32)}));
        canvas.setPlan(TilePlan::make(96, 64, 32, 0));  // the same plan again (settings re-applied) keeps it
        QVERIFY(canvas.tileShift() == (CanvasShift{8, 20}));
        canvas.setPlan(TilePlan::make(96, 64, 48, 0));  // another plan starts unshifted
        QVERIFY(canvas.tileShift() == CanvasShift{});
        canvas.setPlan(TilePlan::make(96, 64, 32, 0));
        QVERIFY(canvas.rolledTileRects(2) == (std::vector<QRectF>{QRectF(64, 0, 32, 32)}));
    }

    void beforeAfterSplitsAtOneToOneAndDrags() {
        TileCanvas canvas;
        canvas.resize(300, 220);
        canvas.show();
        QVERIFY(QTest::qWaitForWindowExposed(&canvas));
        QCOMPARE(canvas.size(), QSize(300, 220));
        QImage after(64, 64, QImage::Format_RGB888), before(64, 64, QImage::Format_RGB888);
        after.fill(Qt::blue);
        before.fill(Qt::red);
        canvas.setImage(after);
        canvas.setBeforeAfterVisible(true);
        QVERIFY(!canvas.isBeforeAfterShown());  // no start image: the plain canvas
        canvas.setBeforeImage(before);
        canvas.setBeforeAfterVisible(true);
        QVERIFY(canvas.isBeforeAfterShown());
        QCOMPARE(canvas.zoom(), 1.0);  // 1:1, centred: image pixel (0, 0) at (118, 78)
        const int left = 118, top = 78;
        QCOMPARE(canvas.splitX(), left + 32.0);
        // Image row 56: clear of the split's grip (mid-height) and its labels (at the top).
        const auto at = [&canvas](int x) { return canvas.grab().toImage().pixelColor(left + x, top + 56); };
        QCOMPARE(at(10), QColor(Qt::red));
        QCOMPARE(at(54), QColor(Qt::blue));

        // Dragging the line moves the split; dragging elsewhere pans.
        QSignalSpy moved(&canvas, &TileCanvas::splitMoved);
        const auto drag = [&canvas](QPoint from, QPoint to) {
            QTest::mousePress(&canvas, Qt::LeftButton, {}, from);
            QMouseEvent move(QEvent::MouseMove, QPointF(to), canvas.mapToGlobal(QPointF(to)), Qt::NoButton,
                             Qt::LeftButton, Qt::NoModifier);
            QApplication::sendEvent(&canvas, &move);
            QTest::mouseRelease(&canvas, Qt::LeftButton, {}, to);
        };
        drag(QPoint(left + 32, 110), QPoint(left + 16, 110));
        QVERIFY(!moved.isEmpty());
        QCOMPARE(canvas.splitPosition(), 0.25);
        QCOMPARE(at(10), QColor(Qt::red));
        QCOMPARE(at(20), QColor(Qt::blue));                    // right of the new split: the result
        drag(QPoint(left + 40, 110), QPoint(left + 50, 120));  // not on the line: a pan
        QCOMPARE(moved.count(), 1);
        QCOMPARE(canvas.splitPosition(), 0.25);
        QCOMPARE(canvas.splitX(), left + 10 + 16.0);

        // Off: the result alone, whatever the split.
        canvas.setBeforeAfterVisible(false);
        QCOMPARE(canvas.grab().toImage().pixelColor(left + 10 + 10, top + 10 + 56), QColor(Qt::blue));
    }

    void imageToImageRunKeepsItsStartImageAndOpensBeforeAfter() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        const QString history = freshFolder();
        const QString start =
            writeStartImage(scratch_.filePath("photo.png"), QSize(32, 32), QColor(220, 40, 40), QColor(40, 40, 220));
        RunConfig config = tinyRunConfig(5, "upscale x2");
        config.initImage = start.toStdString();
        config.strength = 0.5;
        config.upscale = 2;
        QString runId;
        QImage startSeen, result;
        {
            MainWindow window(freshSettings(), history);
            window.show();
            QVERIFY(runOnce(window, config));
            const FinishedRun& run = *window.lastRun();
            const RunRecord& record = run.result->record;
            runId = QString::fromStdString(record.runId);
            QCOMPARE(QSize(record.config.width, record.config.height), QSize(64, 64));  // 32 px x 2
            QCOMPARE(record.config.upscale, 2.0);
            QCOMPARE(record.config.initImage, config.initImage);
            // The start image as the engine took it: resampled to the canvas.
            QCOMPARE(run.startImage.size(), QSize(64, 64));
            QCOMPARE(run.startImage.pixelColor(4, 32), QColor(220, 40, 40));
            QCOMPARE(run.startImage.pixelColor(60, 32), QColor(40, 40, 220));
            startSeen = run.startImage;
            result = run.image;
            // Strength 0.5 of 2 steps runs the schedule's second step only: the timing chart
            // shows it where it is (step 2), not off its axis.
            QCOMPARE(record.stepsRun, 1);
            window.charts()->flush();
            const QCPRange steps = window.charts()->plot(TimingCharts::Chart::Steps)->xAxis->range();
            QVERIFY2(steps.contains(record.steps.front().step + 1),
                     qPrintable(QStringLiteral("%1 .. %2").arg(steps.lower).arg(steps.upper)));
            // The step bar counts the steps the run evaluated: 1 of 1, not "step 1/2" (seen on the
            // H100 as "step 7/20" after a finished x8 upscale at strength 0.35).
            const auto* stepBar = window.findChild<QProgressBar*>(QStringLiteral("stepProgress"));
            QVERIFY(stepBar);
            QCOMPARE(stepBar->maximum(), 1);
            QCOMPARE(stepBar->value(), 1);
            // Before/after opens by itself, at 1:1.
            QVERIFY(window.beforeAfterAction()->isEnabled());
            QVERIFY(window.beforeAfterAction()->isChecked());
            QVERIFY(window.canvas()->isBeforeAfterShown());
            QCOMPARE(window.canvas()->zoom(), 1.0);
            window.beforeAfterAction()->trigger();
            QVERIFY(!window.canvas()->isBeforeAfterShown());
            // The start image is stored with the run: the very bytes it decoded.
            const HistoryEntry* entry = window.history().find(runId);
            QVERIFY(entry);
            QCOMPARE(entry->startImagePath, history + "/" + runId + ".init.png");
            QCOMPARE(bytesOf(entry->startImagePath), bytesOf(start));
            QVERIFY2(window.historyPanel()
                         ->table()
                         ->item(0, HistoryPanel::ConfigColumn)
                         ->text()
                         .contains("from an image, strength 0.5"),
                     qPrintable(window.historyPanel()->table()->item(0, HistoryPanel::ConfigColumn)->text()));

            // A run from noise afterwards: no start image, no before/after.
            QVERIFY(runOnce(window, tinyRunConfig(6)));
            QVERIFY(window.lastRun()->startImage.isNull());
            QVERIFY(!window.beforeAfterAction()->isEnabled());
            QVERIFY(!window.canvas()->isBeforeAfterShown());
        }
        // The original may go: the history has its copy, and reopening shows before/after.
        QVERIFY(QFile::remove(start));
        MainWindow again(freshSettings(), history);
        again.show();
        QVERIFY(waitForHistory(again));
        QString error;
        QVERIFY2(openAndWait(again, runId, &error), qPrintable(error));
        QCOMPARE(again.canvas()->image(), result);
        QCOMPARE(again.canvas()->beforeImage(), startSeen);
        QVERIFY(!again.findChild<QProgressBar*>(QStringLiteral("stepProgress"))
                     ->isVisible());  // a reopened run shows no bars
        QVERIFY(again.beforeAfterAction()->isChecked());
        QVERIFY(again.canvas()->isBeforeAfterShown());
    }

    void reopenAfterRestartShowsTheImageAndEnablesExport() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        const QString history = freshFolder();
        QString older, newer;
        QImage olderImage;
        {
            MainWindow window(freshSettings(), history);
            QVERIFY(runOnce(window, tinyRunConfig(7, "seven")));
            older = QString::fromStdString(window.lastRun()->result->record.runId);
            olderImage = window.lastRun()->image;
            QVERIFY(runOnce(window, tinyRunConfig(8, "eight")));
            newer = QString::fromStdString(window.lastRun()->result->record.runId);
        }
        // A new window (a restart): nothing shown, nothing to export.
        MainWindow window(freshSettings(), history);
        window.show();
        QVERIFY(waitForHistory(window));
        QVERIFY(window.canvas()->image().isNull());
        for (ExportFormat format :
             {ExportFormat::ImagePng, ExportFormat::TimingsCsv, ExportFormat::ManifestJson, ExportFormat::ChromeTrace})
            QVERIFY(!window.exportAction(format)->isEnabled());

        // Open the older run: its settings at once, its image once read off this thread.
        QString error;
        QVERIFY2(openAndWait(window, older, &error), qPrintable(error));
        const QString png = history + "/" + older + ".png";
        QCOMPARE(window.canvas()->image().size(), QSize(64, 64));
        QCOMPARE(window.canvas()->image(), imageOf(png));  // full resolution, the stored pixels
        QCOMPARE(window.canvas()->image(), olderImage);
        QCOMPARE(window.configPanel()->config().seed, std::uint64_t(7));
        QCOMPARE(window.configPanel()->config().label, std::string("seven"));
        QCOMPARE(window.charts()->stepCount(), 2);
        QCOMPARE(window.charts()->timedTileCount(), 9);
        for (ExportFormat format :
             {ExportFormat::ImagePng, ExportFormat::TimingsCsv, ExportFormat::ManifestJson, ExportFormat::ChromeTrace})
            QVERIFY(window.exportAction(format)->isEnabled());
        QVERIFY2(statusOf(window).contains(older) && statusOf(window).contains("reopened"),
                 qPrintable(statusOf(window)));
        // The settings shown are the run's: the image stays (the plan matches it).
        QVERIFY(window.canvas()->imageMatchesPlan());

        // Exports act on the reopened run: the same pixels, its parameters and manifest.
        const QString exported = scratch_.filePath("reopened.png");
        QVERIFY2(exportAndWait(window, ExportFormat::ImagePng, exported, MainWindow::Overwrite::Replace, &error),
                 qPrintable(error));
        QCOMPARE(imageOf(exported), imageOf(png));
        const PngFile file = offGuiThread([&] { return readPng(exported.toStdString()); });
        QVERIFY2(QString::fromStdString(file.text("parameters")).contains("Seed: 7"), file.text("parameters").c_str());
        QVERIFY(QString::fromStdString(file.text("tessera-manifest")).contains(older));
        const QString manifest = scratch_.filePath("reopened.json");
        QVERIFY(exportAndWait(window, ExportFormat::ManifestJson, manifest, MainWindow::Overwrite::Replace, &error));
        QVERIFY(bytesOf(manifest).contains(older.toUtf8()));

        // Double-click opens too; the newer answer wins over an older one still in flight.
        QSignalSpy opened(&window, &MainWindow::historyRunOpened);
        QVERIFY(window.openFromHistory(older));
        QVERIFY(window.openFromHistory(newer));
        QVERIFY(QTest::qWaitFor([&] { return !opened.isEmpty(); }, 60000));
        QVERIFY(waitForHistory(window));
        QCOMPARE(opened.count(), 1);
        QCOMPARE(opened.at(0).at(0).toString(), newer);
        QCOMPARE(window.historyPanel()->selectedIds(), QStringList({newer}));  // its row is the one selected
        QCOMPARE(window.configPanel()->config().seed, std::uint64_t(8));
        QCOMPARE(window.canvas()->image(), imageOf(history + "/" + newer + ".png"));
        QVERIFY(!window.openFromHistory(QStringLiteral("20990101-000000-00000000"), &error));
        QVERIFY2(error.contains("not in the history"), qPrintable(error));
    }

    void finishedImageStaysWhileSettingsChange() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        MainWindow window(freshSettings(), freshFolder());
        window.resize(1200, 800);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QVERIFY(runOnce(window, tinyRunConfig(9)));
        const QImage image = window.lastRun()->image;
        QCOMPARE(window.canvas()->image(), image);

        // Another tile size: the same canvas; the image stays, the new plan over it.
        child<QSpinBox>(window.configPanel(), "tileSpin")->setValue(48);
        QCOMPARE(window.canvas()->image(), image);
        QVERIFY(window.canvas()->imageMatchesPlan());
        // Another size: the image still shows (stretched under the new plan, and said so).
        child<QSpinBox>(window.configPanel(), "widthSpin")->setValue(128);
        QCOMPARE(window.canvas()->canvasSize(), QSize(128, 64));
        QCOMPARE(window.canvas()->image(), image);
        QVERIFY(!window.canvas()->imageMatchesPlan());
        const QImage shown = window.canvas()->grab().toImage();
        window.canvas()->setImage({});
        const QImage empty = window.canvas()->grab().toImage();
        window.canvas()->setImage(image);
        int differing = 0;
        for (int y = 0; y < shown.height(); y += 4)
            for (int x = 0; x < shown.width(); x += 4) differing += shown.pixel(x, y) != empty.pixel(x, y);
        QVERIFY2(differing > (shown.width() / 4) * (shown.height() / 4) / 5, qPrintable(QString::number(differing)));
        // An invalid setting (no plan): still the image, not "Fix the settings".
        child<QSpinBox>(window.configPanel(), "tileSpin")->setValue(0);
        QVERIFY(!window.configPanel()->isValid());
        QCOMPARE(window.canvas()->image(), image);
        QCOMPARE(window.canvas()->canvasSize(), QSize(64, 64));
        QVERIFY(window.exportAction(ExportFormat::ImagePng)->isEnabled());
    }

    void cancelledAndFailedRunsAreKeptAndMarked() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        const QString history = freshFolder();
        MainWindow window(freshSettings(), history);
        window.show();
        QVERIFY(waitForHistory(window));

        // Cancelled after its first step: kept, with the partial image, marked in the row.
        RunConfig slow = tinyRunConfig(10, "stopped");
        slow.width = slow.height = 128;
        slow.steps = 50;
        QVERIFY(setConfigAndWait(*window.configPanel(), slow));
        QSignalSpy ended(&window, &MainWindow::runEnded);
        QSignalSpy added(&window.history(), &HistoryStore::entryAdded);
        window.runAction()->trigger();
        auto* steps = child<QProgressBar>(&window, "stepProgress");
        QVERIFY(QTest::qWaitFor([&] { return steps->value() >= 2 || !ended.isEmpty(); }, 300000));  // step 1 done
        window.stopAction()->trigger();
        QVERIFY(QTest::qWaitFor([&] { return !ended.isEmpty(); }, 300000));
        QCOMPARE(ended.at(0).at(0).toBool(), false);
        QVERIFY(QTest::qWaitFor([&] { return !added.isEmpty(); }, 60000));
        const QString cancelledId = added.at(0).at(1).toString();
        const HistoryEntry* cancelled = window.history().find(cancelledId);
        QVERIFY(cancelled);
        QCOMPARE(std::string(toString(cancelled->record.status)), std::string("cancelled"));
        QVERIFY(cancelled->record.stepsRun >= 1 && cancelled->record.stepsRun < 50);
        QVERIFY(!cancelled->thumbnail.isNull());
        QCOMPARE(window.historyPanel()
                     ->table()
                     ->item(rowOf(window.historyPanel(), cancelledId), HistoryPanel::StatusColumn)
                     ->text(),
                 QStringLiteral("cancelled at step %1 of 50").arg(cancelled->record.stepsRun));

        // Failed: the start image was replaced by junk after the panel read it; the worker
        // refuses it. The run is kept with its error; the status line says why and the canvas
        // keeps the image it showed.
        const QString start = writeStartImage(scratch_.filePath("spoiled.png"), QSize(32, 32), Qt::gray, Qt::gray);
        RunConfig config = tinyRunConfig(11, "spoiled");
        config.initImage = start.toStdString();
        QVERIFY(setConfigAndWait(*window.configPanel(), config));
        QVERIFY(window.runAction()->isEnabled());
        writeFile(start, "junk, not a picture");
        const QImage shownBefore = window.canvas()->image();
        QVERIFY(!shownBefore.isNull());
        ended.clear();
        added.clear();
        window.runAction()->trigger();
        QVERIFY(QTest::qWaitFor([&] { return !ended.isEmpty(); }, 300000));
        QCOMPARE(ended.at(0).at(0).toBool(), false);
        QVERIFY2(window.canvas()->image() == shownBefore, "a failed run leaves the image shown before it");
        QVERIFY2(statusOf(window).contains("spoiled.png"), qPrintable(statusOf(window)));
        QVERIFY(QTest::qWaitFor([&] { return !added.isEmpty(); }, 60000));
        const QString failedId = added.at(0).at(1).toString();
        const HistoryEntry* failed = window.history().find(failedId);
        QVERIFY(failed);
        QCOMPARE(std::string(toString(failed->record.status)), std::string("failed"));
        QVERIFY2(QString::fromStdString(failed->record.error).contains("spoiled.png"), failed->record.error.c_str());
        QCOMPARE(failed->record.config.label, std::string("spoiled"));
        QVERIFY(failed->imagePath.isEmpty());
        QTableWidgetItem* status =
            window.historyPanel()->table()->item(rowOf(window.historyPanel(), failedId), HistoryPanel::StatusColumn);
        QCOMPARE(status->text(), QStringLiteral("failed"));
        QVERIFY2(status->toolTip().contains("spoiled.png"), qPrintable(status->toolTip()));
        QCOMPARE(window.historyPanel()->table()->item(status->row(), HistoryPanel::TimeColumn)->text(),
                 QStringLiteral("—"));

        // Both are listed after a restart and open: the failed one with its record, no image.
        MainWindow again(freshSettings(), history);
        QVERIFY(waitForHistory(again));
        QCOMPARE(again.historyPanel()->rowCount(), 2);
        QString error;
        QVERIFY2(openAndWait(again, failedId, &error), qPrintable(error));
        QVERIFY(again.canvas()->image().isNull());
        QVERIFY(!again.exportAction(ExportFormat::ImagePng)->isEnabled());
        QVERIFY(again.exportAction(ExportFormat::ManifestJson)->isEnabled());
        QVERIFY2(openAndWait(again, cancelledId, &error), qPrintable(error));
        QCOMPARE(again.canvas()->image().size(), QSize(128, 128));
        QVERIFY(again.exportAction(ExportFormat::ImagePng)->isEnabled());
    }

    void deleteGoesToTheTrashAndUndoBringsItBack() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        const QString history = freshFolder();
        QStringList ids;
        {
            MainWindow window(freshSettings(), history);
            window.show();
            for (int seed : {21, 22, 23}) {
                QVERIFY(runOnce(window, tinyRunConfig(seed)));
                ids << QString::fromStdString(window.lastRun()->result->record.runId);
            }
            QVERIFY(!window.undoDeleteAction()->isEnabled());
            HistoryPanel* panel = window.historyPanel();
            QSignalSpy removed(&window.history(), &HistoryStore::entryRemoved);
            QSignalSpy restored(&window.history(), &HistoryStore::entryRestored);

            // Delete: the files go to the trash, on the history's thread.
            panel->selectIds({ids.at(0), ids.at(2)});
            child<QPushButton>(panel, "historyDelete")->click();
            QCOMPARE(panel->rowCount(), 3);  // not yet: nothing was moved on this thread
            QVERIFY(QTest::qWaitFor([&] { return removed.count() == 2; }, 60000));
            QCOMPARE(panel->rowCount(), 1);
            for (const QString& id : {ids.at(0), ids.at(2)})
                for (const char* suffix : {".json", ".png", ".seam.json"}) {
                    QVERIFY2(!QFileInfo::exists(history + "/" + id + suffix), suffix);
                    QVERIFY2(QFileInfo(history + "/trash/" + id + suffix).isFile(), suffix);
                }
            QVERIFY(window.undoDeleteAction()->isEnabled());
            QVERIFY2(window.undoDeleteAction()->text().contains("2 runs"),
                     qPrintable(window.undoDeleteAction()->text()));
            QVERIFY(child<QPushButton>(panel, "historyUndo")->isEnabled());
            QVERIFY2(statusOf(window).contains("Undo"), qPrintable(statusOf(window)));

            // Undo (Ctrl+Z): both back, in their places, files and rows.
            window.undoDeleteAction()->trigger();
            QVERIFY(QTest::qWaitFor([&] { return restored.count() == 2; }, 60000));
            QCOMPARE(panel->rowCount(), 3);
            QStringList listed;
            for (const HistoryEntry& entry : window.history().entries()) listed << entry.id();
            QCOMPARE(listed, ids);
            for (const QString& id : ids) QVERIFY(QFileInfo(history + "/" + id + ".png").isFile());
            QVERIFY(!window.undoDeleteAction()->isEnabled());
            QVERIFY(!child<QPushButton>(panel, "historyUndo")->isEnabled());

            // Delete (the Delete key) again and close: the trash is emptied at exit.
            window.activateWindow();
            QVERIFY(QTest::qWaitForWindowActive(&window));
            panel->selectIds({ids.at(1)});
            panel->table()->setFocus();
            QTest::keyClick(panel->table(), Qt::Key_Delete);
            QVERIFY(QTest::qWaitFor([&] { return removed.count() == 3; }, 60000));
            QVERIFY(QFileInfo(history + "/trash/" + ids.at(1) + ".json").isFile());
        }
        QVERIFY(QDir(history + "/trash").entryList(QDir::Files).isEmpty());
        MainWindow again(freshSettings(), history);
        QVERIFY(waitForHistory(again));
        QCOMPARE(again.historyPanel()->rowCount(), 2);
        QVERIFY(!again.history().find(ids.at(1)));
    }

    void trashKeepsItsDepthAndOnlyRunFiles() {
        // Through the store: a trash of depth 2 forgets the oldest deleted run.
        const QString folder = freshFolder();
        {
            HistoryStore store(folder, RunHistory::kDefaultCapacity, 2);
            QSignalSpy added(&store, &HistoryStore::entryAdded);
            for (int i = 0; i < 3; ++i) {
                auto result = std::make_shared<RunResult>();
                result->record.runId = runIdOf(i);
                result->record.startedAt = startOf(i);
                result->image = ImageTensor{3, 8, 8, std::vector<float>(3 * 8 * 8, 0.25f)};
                store.add(result);
            }
            QVERIFY(QTest::qWaitFor([&] { return added.count() == 3; }, 60000));
            QSignalSpy removed(&store, &HistoryStore::entryRemoved);
            for (int i = 0; i < 3; ++i) store.remove(QString::fromStdString(runIdOf(i)));
            QVERIFY(QTest::qWaitFor([&] { return removed.count() == 3; }, 60000));
            QVERIFY(!QFileInfo::exists(folder + "/trash/" + QString::fromStdString(runIdOf(0)) + ".json"));  // purged
            QCOMPARE(store.undoableRemoval(), QStringList({QString::fromStdString(runIdOf(2))}));
            QSignalSpy restored(&store, &HistoryStore::entryRestored);
            QVERIFY(store.undoRemove() != 0);
            QVERIFY(store.undoRemove() != 0);
            QCOMPARE(store.undoRemove(), quint64(0));  // run 0 is gone for good
            QVERIFY(QTest::qWaitFor([&] { return restored.count() == 2; }, 60000));
            QCOMPARE(store.entries().size(), std::size_t(2));
            QCOMPARE(store.entries().front().id(), QString::fromStdString(runIdOf(1)));
        }
        // On the history's own thread: a trash that is a link is refused and nothing moves;
        // purging leaves files that are not run files alone.
        const QString linked = freshFolder(), elsewhere = freshFolder();
        const QString id = QString::fromStdString(runIdOf(5));
        QVERIFY(QDir().mkpath(linked));
        QVERIFY(QFile::link(elsewhere, linked + "/trash"));
        struct Outcome {
            QString refusal;
            bool movedAfterwards = false;
        };
        const Outcome outcome = offGuiThread([&] {
            Outcome o;
            RunHistory history(linked);
            RunResult result;
            result.record.runId = id.toStdString();
            result.record.startedAt = startOf(5);
            history.add(result);
            try {
                history.moveToTrash(id);
            } catch (const std::runtime_error& e) {
                o.refusal = QString::fromUtf8(e.what());
            }
            if (!QFile::remove(linked + "/trash") || !QDir().mkpath(linked + "/trash")) return o;
            QFile notes(linked + "/trash/notes.txt");
            if (!notes.open(QIODevice::WriteOnly) || notes.write("mine") != 4) return o;
            notes.close();
            o.movedAfterwards = history.moveToTrash(id);
            history.purgeTrash();
            return o;
        });
        QVERIFY2(outcome.refusal.contains("not a plain folder"), qPrintable(outcome.refusal));
        QVERIFY(QDir(elsewhere).entryList(QDir::Files).isEmpty());  // nothing went through the link
        QVERIFY(outcome.movedAfterwards);
        QVERIFY(!QFileInfo::exists(linked + "/" + id + ".json"));
        QCOMPARE(QDir(linked + "/trash").entryList(QDir::Files), QStringList({"notes.txt"}));
    }

    void copyParametersAndShowInFolder() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        const QString history = freshFolder();
        MainWindow window(freshSettings(), history);
        QVERIFY(runOnce(window, tinyRunConfig(31)));
        const QString id = QString::fromStdString(window.lastRun()->result->record.runId);
        HistoryPanel* panel = window.historyPanel();
        panel->selectIds({id});
        QGuiApplication::clipboard()->clear();
        child<QPushButton>(panel, "historyCopyParameters")->click();
        const QString text = QGuiApplication::clipboard()->text();
        QVERIFY2(text.contains("Steps: 2") && text.contains("Seed: 31") && text.contains("Size: 64x64") &&
                     text.contains("Tile: 32"),
                 qPrintable(text));

        openedUrls_.clear();
        QDesktopServices::setUrlHandler(QStringLiteral("file"), this, "captureUrl");
        child<QPushButton>(panel, "historyShowInFolder")->click();
        QDesktopServices::unsetUrlHandler(QStringLiteral("file"));
        QCOMPARE(openedUrls_.size(), 1);
        QCOMPARE(openedUrls_.front().toLocalFile(), QDir::cleanPath(history));
        // One run at a time for these; two selected: only Compare and Delete.
        panel->selectIds({});
        QVERIFY(!child<QPushButton>(panel, "historyCopyParameters")->isEnabled());
        QVERIFY(!child<QPushButton>(panel, "historyShowInFolder")->isEnabled());
        QVERIFY(!child<QPushButton>(panel, "historyOpen")->isEnabled());
    }
};

QTEST_MAIN(TestRuns)
#include "tst_runs.moc"
