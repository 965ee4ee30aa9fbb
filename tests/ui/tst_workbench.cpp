// The workbench beyond a single run: canvas overlays, exports read back, configuration restored
// from an exported PNG (open and drop), the run history across window instances, the compare
// view's numbers, and the charts' tile heat map, tooltips and PNG/PDF export. Offscreen; the
// history lives in QStandardPaths' test-mode folder, emptied at the start.
#include <cmath>
#include <fstream>
#include <future>
#include <iterator>

#include <QAction>
#include <QDialogButtonBox>
#include <QDir>
#include <QDropEvent>
#include <QFile>
#include <QMessageBox>
#include <QMimeData>
#include <QPushButton>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QUrl>
#include <QtTest>

#include <qcustomplot.h>
#include <nlohmann/json.hpp>

#include "TinyRun.h"
#include "app/cli/PngIO.h"
#include "app/qt/Exporters.h"
#include "app/qt/HistoryStore.h"
#include "core/run/RunRecordIO.h"
#include "core/sampling/BlendWindow.h"
#include "ui/CompareView.h"
#include "ui/ConfigPanel.h"
#include "ui/HeatMap.h"
#include "ui/HistoryPanel.h"
#include "ui/MainWindow.h"
#include "ui/TileCanvas.h"
#include "ui/TimingCharts.h"

using namespace tessera;

namespace {

using testing::haveTestModel;
using testing::runOnce;

RunConfig tinyConfig(std::uint64_t seed) { return testing::tinyRunConfig(seed, "seed " + std::to_string(seed)); }

std::string readAll(const QString& path) {
    std::ifstream file(path.toStdString(), std::ios::binary);
    return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

// `read` run on a thread of its own: the suite's GUI thread must not read files (GuiThreadGuard).
template <typename Read>
auto offGuiThread(Read read) {
    return std::async(std::launch::async, read).get();
}

QString historyFolder() {
    return QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/history");
}

// Fraction of pixels that differ between two grabs of the same size.
double changedFraction(const QImage& a, const QImage& b) {
    if (a.size() != b.size()) return 1.0;
    const QImage x = a.convertToFormat(QImage::Format_RGB32), y = b.convertToFormat(QImage::Format_RGB32);
    qint64 changed = 0;
    for (int row = 0; row < x.height(); ++row) {
        const auto* px = reinterpret_cast<const QRgb*>(x.constScanLine(row));
        const auto* py = reinterpret_cast<const QRgb*>(y.constScanLine(row));
        for (int col = 0; col < x.width(); ++col) changed += px[col] != py[col];
    }
    return double(changed) / (double(x.width()) * x.height());
}

}  // namespace

class TestWorkbench : public QObject {
    Q_OBJECT

private:
    QTemporaryDir scratch_;
    int settingsCount_ = 0;
    std::unique_ptr<MainWindow> window_;
    QStringList runIds_;  // the two runs of initTestCase, in order

    std::unique_ptr<SettingsFile> freshSettings() {
        return std::make_unique<SettingsFile>(
            scratch_.filePath(QStringLiteral("workbench-%1.ini").arg(++settingsCount_)));
    }

private slots:
    void init() { testing::failOnGuiThreadIo(); }

    void initTestCase() {
        QVERIFY(scratch_.isValid());
        QStandardPaths::setTestModeEnabled(true);
        QDir(historyFolder()).removeRecursively();
        if (!haveTestModel()) return;
        window_ = std::make_unique<MainWindow>(freshSettings());
        window_->resize(1200, 800);
        window_->show();
        QVERIFY(QTest::qWaitForWindowExposed(window_.get()));
        QVERIFY(runOnce(*window_, tinyConfig(7)));
        QVERIFY(runOnce(*window_, tinyConfig(8)));
        for (const HistoryEntry& entry : window_->history().entries()) runIds_ << entry.id();
    }

    void cleanupTestCase() {
        window_.reset();
        QDir(historyFolder()).removeRecursively();
    }

    void heatRampIsOrderedAndLegendScales() {
        // Darkest at 0, lightest at 1, luminance never falls along the ramp.
        double previous = -1;
        for (int i = 0; i <= 20; ++i) {
            const QColor c = heatColor(i / 20.0);
            const double lightness = 0.2126 * c.red() + 0.7152 * c.green() + 0.0722 * c.blue();
            QVERIFY2(lightness >= previous, qPrintable(QString::number(i)));
            previous = lightness;
        }
        const float values[4] = {0.f, 1.f, 2.f, 4.f};
        const QImage image = heatImage(values, 2, 2, 0.0, 4.0);
        QCOMPARE(image.size(), QSize(2, 2));
        QCOMPARE(QColor(image.pixel(0, 0)), heatColor(0.0));
        QCOMPARE(QColor(image.pixel(1, 1)), heatColor(1.0));
    }

    void historyStoresAndCapsRuns() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        QCOMPARE(runIds_.size(), 2);
        const HistoryEntry* entry = window_->history().find(runIds_.at(0));
        QVERIFY(entry);
        QCOMPARE(entry->record.config.seed, std::uint64_t(7));
        QVERIFY(QFileInfo(historyFolder() + "/" + runIds_.at(0) + ".json").isFile());
        QVERIFY(QFileInfo(historyFolder() + "/" + runIds_.at(0) + ".png").isFile());
        QCOMPARE(entry->thumbnail.width(), RunHistory::kThumbnailSize);
        QCOMPARE(QImage(entry->imagePath).size(), QSize(64, 64));
        QVERIFY(entry->seamMean > 0);
        QVERIFY(entry->seamMax >= entry->seamMean);
        // The panel lists newest first.
        QCOMPARE(window_->historyPanel()->rowCount(), 2);
        window_->historyPanel()->selectIds({runIds_.at(1)});
        QCOMPARE(window_->historyPanel()->selectedIds(), QStringList({runIds_.at(1)}));
        QCOMPARE(window_->historyPanel()->table()->currentRow() >= 0 ||
                     window_->historyPanel()->table()->selectionModel()->isRowSelected(0, {}),
                 true);

        // A capacity of 1 keeps only the newest run, on disk too; the store says which run went.
        QTemporaryDir folder;
        HistoryStore small(folder.path(), 1);
        QSignalSpy added(&small, &HistoryStore::entryAdded);
        auto result = std::make_shared<RunResult>();
        result->record = entry->record;
        result->record.runId = "20260101-000000-aaaaaaaa";
        result->record.startedAt = "2026-01-01T00:00:00Z";
        small.add(std::make_shared<const RunResult>(*result));
        result->record.runId = "20260101-000001-bbbbbbbb";
        result->record.startedAt = "2026-01-01T00:00:01Z";
        small.add(result);
        QVERIFY(QTest::qWaitFor([&] { return added.count() == 2; }, 60000));
        QCOMPARE(added.at(1).at(2).toStringList(), QStringList({"20260101-000000-aaaaaaaa"}));
        QCOMPARE(small.entries().size(), std::size_t(1));
        QCOMPARE(small.entries().front().id(), QStringLiteral("20260101-000001-bbbbbbbb"));
        // The Graphs column names the lanes when more than one tile batch was in flight.
        {
            std::vector<HistoryEntry> entries = small.entries();
            entries.front().record.graphs.mode = "step";
            entries.front().record.graphs.lanes = 3;
            HistoryPanel panel;
            panel.setEntries(entries);
            QCOMPARE(panel.table()->item(0, panel.table()->columnCount() - 1)->text(),
                     QStringLiteral("step · 3 lanes"));
            entries.front().record.graphs.lanes = 1;
            panel.setEntries(entries);
            QCOMPARE(panel.table()->item(0, panel.table()->columnCount() - 1)->text(), QStringLiteral("step"));
        }
        QVERIFY(!QFileInfo(folder.filePath("20260101-000000-aaaaaaaa.json")).exists());
        // A broken manifest is reported by name, not fatal (tests/app/tst_runhistory has the rest).
        QFile broken(folder.filePath("20260101-000002-cccccccc.json"));
        QVERIFY(broken.open(QIODevice::WriteOnly));
        broken.write("{\"schema_version\": 1, \"total_ms\": \"fast\"}");
        broken.close();
        HistoryStore reread(folder.path());
        QSignalSpy loaded(&reread, &HistoryStore::loaded);
        QVERIFY(loaded.wait(60000));
        QCOMPARE(reread.entries().size(), std::size_t(1));
        QCOMPARE(reread.problems().size(), 1);
        QVERIFY2(reread.problems().front().contains("20260101-000002-cccccccc.json") &&
                     reread.problems().front().contains("total_ms"),
                 qPrintable(reread.problems().front()));
    }

    void historyPersistsAcrossWindows() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        MainWindow again(freshSettings());
        QCOMPARE(again.history().folder(), historyFolder());
        QVERIFY(testing::waitForHistory(again));
        QCOMPARE(again.history().entries().size(), std::size_t(2));
        QCOMPARE(again.history().entries().at(0).id(), runIds_.at(0));
        QCOMPARE(again.history().entries().at(1).id(), runIds_.at(1));
        QCOMPARE(again.historyPanel()->rowCount(), 2);
        QCOMPARE(again.history().entries().at(1).record.totalMs, window_->history().entries().at(1).record.totalMs);
        QVERIFY(!again.history().entries().at(1).thumbnail.isNull());
        // The second window's charts show the earlier runs in grey.
        QCOMPARE(again.charts()->earlierRunCount(), 2);
    }

    void exportsEveryFormatAndReadsBack() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        const RunRecord& record = window_->lastRun()->result->record;
        QCOMPARE(record.config.seed, std::uint64_t(8));
        for (const char* name :
             {"actionExportImage", "actionExportTimings", "actionExportManifest", "actionExportTrace"})
            QVERIFY2(window_->findChild<QAction*>(QString::fromLatin1(name))->isEnabled(), name);
        QString error;

        const QString png = scratch_.filePath("run.png");
        QVERIFY2(testing::exportAndWait(*window_, ExportFormat::ImagePng, png, MainWindow::Overwrite::Refuse, &error),
                 qPrintable(error));
        const PngFile file = readPng(png.toStdString());
        QCOMPARE(file.image.width, 64);
        QVERIFY2(QString::fromStdString(file.text("parameters")).contains("Seed: 8"), file.text("parameters").c_str());
        const RunRecord fromPng = runRecordFromManifest(nlohmann::json::parse(file.text("tessera-manifest")));
        QCOMPARE(fromPng.runId, record.runId);
        QCOMPARE(fromPng.imageSha256, imageSha256(file.image));

        const QString csv = scratch_.filePath("timings.csv");
        QVERIFY2(testing::exportAndWait(*window_, ExportFormat::TimingsCsv, csv, MainWindow::Overwrite::Refuse, &error),
                 qPrintable(error));
        const QStringList lines = QString::fromStdString(readAll(csv)).split('\n', Qt::SkipEmptyParts);
        QCOMPARE(lines.front(), QStringLiteral("run_id,step,timestep,batch,tile_ids,gpu_ms,host_ms,device_mib,"
                                               "step_peak_device_mib,run_peak_device_mib,run_peak_host_rss_mib"));
        QCOMPARE(lines.size(), static_cast<int>(record.batches.size()) + 1);
        QCOMPARE(lines.size(), 1 + 2 * 5);  // 2 steps x 5 batches (9 tiles, batch 2)
        QVERIFY2(lines.at(1).startsWith(QString::fromStdString(record.runId) + ",1,"), qPrintable(lines.at(1)));

        const QString manifest = scratch_.filePath("manifest.json");
        QVERIFY2(testing::exportAndWait(*window_, ExportFormat::ManifestJson, manifest, MainWindow::Overwrite::Refuse,
                                        &error),
                 qPrintable(error));
        const RunRecord fromManifest = runRecordFromManifest(nlohmann::json::parse(readAll(manifest)));
        QCOMPARE(fromManifest.runId, record.runId);
        QCOMPARE(fromManifest.batches.size(), record.batches.size());
        QCOMPARE(fromManifest.config.tile, 32);

        const QString trace = scratch_.filePath("trace.json");
        QVERIFY2(
            testing::exportAndWait(*window_, ExportFormat::ChromeTrace, trace, MainWindow::Overwrite::Refuse, &error),
            qPrintable(error));
        const nlohmann::json events = nlohmann::json::parse(readAll(trace)).at("traceEvents");
        QVERIFY(events.is_array());
        int steps = 0, batches = 0;
        bool prepare = false;
        for (const auto& event : events) {
            const std::string name = event.value("name", "");
            prepare |= name == "prepare";
            steps += name.rfind("step ", 0) == 0;
            batches += name.rfind("batch ", 0) == 0;
        }
        QVERIFY(prepare);
        QCOMPARE(steps, 2);
        QCOMPARE(batches, 10);

        // Existing files: refused unless replacing is allowed; the old bytes stay.
        const std::string before = readAll(csv);
        QVERIFY(
            !testing::exportAndWait(*window_, ExportFormat::ManifestJson, csv, MainWindow::Overwrite::Refuse, &error));
        QVERIFY2(error.contains("timings.csv") && error.contains("not replaced"), qPrintable(error));
        QCOMPARE(readAll(csv), before);
        QVERIFY(
            testing::exportAndWait(*window_, ExportFormat::ManifestJson, csv, MainWindow::Overwrite::Replace, &error));
        QVERIFY(readAll(csv) != before);
        // No temporary files left behind by the atomic writes.
        QCOMPARE(QDir(scratch_.path()).entryList({"*.tmp-*"}, QDir::Files).size(), 0);
    }

    void restoresConfigurationFromPngDropAndManifest() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        const QString png = scratch_.filePath("restore.png");
        QString error;
        QVERIFY2(testing::exportAndWait(*window_, ExportFormat::ImagePng, png, MainWindow::Overwrite::Replace, &error),
                 qPrintable(error));
        const QString manifest = scratch_.filePath("restore.json");
        QVERIFY(testing::exportAndWait(*window_, ExportFormat::ManifestJson, manifest, MainWindow::Overwrite::Replace,
                                       &error));

        MainWindow other(freshSettings());
        QCOMPARE(other.configPanel()->config().seed, RunConfig{}.seed);
        QVERIFY2(testing::restoreAndWait(other, png, &error), qPrintable(error));
        QCOMPARE(other.configPanel()->config().seed, std::uint64_t(8));
        QCOMPARE(other.configPanel()->config().tile, 32);
        QCOMPARE(other.configPanel()->config().width, 64);
        QCOMPARE(other.configPanel()->config().steps, 2);

        // Dropping the PNG on the window and answering "Use its parameters" does the same.
        QVERIFY(testing::setConfigAndWait(*other.configPanel(), RunConfig{}));
        QMimeData mime;
        mime.setUrls({QUrl::fromLocalFile(png)});
        QDragEnterEvent enter(QPoint(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
        QApplication::sendEvent(&other, &enter);
        QVERIFY(enter.isAccepted());
        QDropEvent drop(QPointF(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
        QSignalSpy restored(&other, &MainWindow::configurationRestored);
        QApplication::sendEvent(&other, &drop);
        QVERIFY(other.dropQuestion());
        other.dropQuestion()->findChild<QPushButton*>(QStringLiteral("dropAsParameters"))->click();
        QVERIFY(restored.wait(60000));
        QCOMPARE(restored.at(0).at(1).toBool(), true);
        QCOMPARE(other.configPanel()->config().seed, std::uint64_t(8));
        QCOMPARE(other.configPanel()->config().overlapPixels(), 8);

        // A manifest JSON and a preset JSON work too; the source is told apart.
        QCOMPARE(offGuiThread([&] { return configurationFromFile(manifest.toStdString()); }).source,
                 ConfigSource::Manifest);
        QCOMPARE(offGuiThread([&] { return configurationFromFile(png.toStdString()); }).source, ConfigSource::RunPng);
        const QString preset = scratch_.filePath("preset.json");
        writeFileAtomically(preset.toStdString(), toJson(tinyConfig(99)).dump());
        QVERIFY(testing::restoreAndWait(other, preset, &error));
        QCOMPARE(other.configPanel()->config().seed, std::uint64_t(99));

        // An A1111 PNG (tests/data/a1111png) naming a LoRA, a VAE and an embedding: looked up in the
        // window's models folder too, so a LoRA kept only there is found (a note names it otherwise).
        const QString a1111 = QStringLiteral(TESSERA_TEST_DATA "/a1111png/a1111.png");
        const auto namesTheLora = [](const RestoredConfig& r) {
            for (const UnmappedSetting& u : r.unmapped)
                if (u.message().find("sd1_tiny") != std::string::npos) return true;
            return false;
        };
        QVERIFY(namesTheLora(offGuiThread([&] { return configurationFromFile(a1111.toStdString()); })));
        const QString models = scratch_.filePath("a1111-models");
        for (const char* sub : {"Lora", "VAE", "embeddings"}) QVERIFY(QDir().mkpath(models + "/" + sub));
        QVERIFY(QFile::copy(QStringLiteral(TESSERA_TEST_DATA "/sdpipeline/lora/sd1_tiny.safetensors"),
                            models + "/Lora/sd1_tiny.safetensors"));
        const RestoredConfig found =
            offGuiThread([&] { return configurationFromFile(a1111.toStdString(), RunConfig{}, models.toStdString()); });
        QCOMPARE(found.source, ConfigSource::ImageParameters);
        QVERIFY(!namesTheLora(found));

        // A PNG with neither a manifest nor another tool's parameters is refused, naming the file
        // and the reason.
        const QString plain = scratch_.filePath("plain.png");
        writePng(plain.toStdString(), Rgb8Image{2, 2, std::vector<std::uint8_t>(12, 0)}, {});
        QVERIFY(!testing::restoreAndWait(other, plain, &error));
        QVERIFY2(error.contains("plain.png") && error.contains("'parameters'"), qPrintable(error));
        QCOMPARE(other.configPanel()->config().seed, std::uint64_t(99));  // unchanged
    }

    void compareViewShowsDeltas() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        QString error;
        QVERIFY(!testing::compareAndWait(*window_, runIds_.at(0), QStringLiteral("no-such-run"), &error));
        QVERIFY(error.contains("no-such-run"));
        CompareView* view = testing::compareAndWait(*window_, runIds_.at(1), runIds_.at(0), &error);
        QVERIFY2(view, qPrintable(error));
        const HistoryEntry& a = window_->history().entries().at(0);  // older run is A
        const HistoryEntry& b = window_->history().entries().at(1);
        const CompareDeltas& d = view->deltas();
        QCOMPARE(d.totalMsA, a.record.totalMs);
        QCOMPARE(d.totalMsB, b.record.totalMs);
        QVERIFY(std::abs(d.speedup - a.record.totalMs / b.record.totalMs) < 1e-12);
        QCOMPARE(d.peakMiBA, peakMemoryMiB(a.record));
        QCOMPARE(d.seamMeanA, a.seamMean);
        QCOMPARE(d.seamMeanB, b.seamMean);
        // Different seeds: different pixels. Check the maximum independently.
        const QImage ia = QImage(a.imagePath).convertToFormat(QImage::Format_RGB888);
        const QImage ib = QImage(b.imagePath).convertToFormat(QImage::Format_RGB888);
        int maxDiff = 0;
        for (int y = 0; y < 64; ++y)
            for (int x = 0; x < 64 * 3; ++x)
                maxDiff = std::max(maxDiff, std::abs(int(ia.constScanLine(y)[x]) - int(ib.constScanLine(y)[x])));
        QVERIFY(maxDiff > 0);
        QCOMPARE(d.maxPixelDiff, maxDiff);

        QTableWidget* table = view->deltaTable();
        QCOMPARE(table->item(0, 0)->text(), QString::number(a.record.totalMs / 1000.0, 'f', 2));
        QCOMPARE(table->item(1, 1)->text(), QStringLiteral("%1×").arg(d.speedup, 0, 'f', 2));
        QCOMPARE(table->item(3, 2)->text(), QString::number(maxDiff));
        QCOMPARE(table->verticalHeaderItem(5)->text(), QStringLiteral("Seam visibility (1 = invisible)"));
        QCOMPARE(table->item(5, 0)->text(), QString::number(a.record.seamScore, 'f', 2));
        QVERIFY(a.record.seamScore > 0);  // two tiles: measured
        QCOMPARE(table->verticalHeaderItem(6)->text(), QStringLiteral("Tile disagreement (mean)"));
        QCOMPARE(table->item(6, 0)->text(), QString::number(a.seamMean, 'f', 5));

        // One view for all panes: zooming A zooms B and the difference.
        QVERIFY(!view->differencePane()->image().isNull());
        const double before = view->paneB()->zoom();
        QWheelEvent wheel(QPointF(100, 100), view->paneA()->mapToGlobal(QPointF(100, 100)), QPoint(), QPoint(0, 240),
                          Qt::NoButton, Qt::NoModifier, Qt::NoScrollPhase, false);
        QApplication::sendEvent(view->paneA(), &wheel);
        QVERIFY(view->paneB()->zoom() > before * 1.5);
        QCOMPARE(view->paneB()->zoom(), view->paneA()->zoom());
        QCOMPARE(view->differencePane()->centre(), view->paneA()->centre());

        // The history's Compare button opens the same comparison.
        view->close();
        HistoryPanel* panel = window_->historyPanel();
        panel->selectIds(runIds_);
        auto* compareButton = panel->findChild<QPushButton*>(QStringLiteral("historyCompare"));
        QVERIFY(compareButton && compareButton->isEnabled());
        QVERIFY(!panel->findChild<QPushButton*>(QStringLiteral("historyOpen"))->isEnabled());
        QSignalSpy opened(window_.get(), &MainWindow::compareViewOpened);
        compareButton->click();
        QVERIFY(opened.wait(60000));
        QVERIFY(window_->compareView());
        QCOMPARE(window_->compareView()->deltas().maxPixelDiff, maxDiff);
        window_->compareView()->close();
        panel->selectIds({});

        // A run against itself: no difference.
        const CompareDeltas same = compareRuns({a.record, ia, a.seamMean}, {a.record, ia, a.seamMean});
        QCOMPARE(same.maxPixelDiff, 0);
        QCOMPARE(same.speedup, 1.0);
        QVERIFY(same.differences.empty() && same.sameWork);

        // The two runs differ in their seed only: the same work, so a speedup, and the
        // view says which setting differs.
        QVERIFY(d.sameWork);
        QStringList keys;
        for (const SettingDifference& x : d.differences) keys << QString::fromStdString(x.key);
        QCOMPARE(keys, QStringList({"label", "seed"}));
        QCOMPARE(table->verticalHeaderItem(1)->text(), QStringLiteral("Speedup (A time / B time)"));
        // 20 steps against 10 is not a speedup: the row says so, the caption names the setting.
        RunRecord fewer = b.record;
        fewer.config.steps = a.record.config.steps / 2;
        CompareView other({a.record, ia, a.seamMean}, {fewer, ib, b.seamMean});
        QVERIFY(!other.deltas().sameWork);
        // A difference that rounds to zero reads 0.00, not -0.00 (equal peak memory read "-0.0").
        RunRecord near = a.record;
        near.seamScore = a.record.seamScore - 0.001;
        CompareView rounding({a.record, ia, a.seamMean}, {near, ib, b.seamMean});
        QCOMPARE(rounding.deltaTable()->item(5, 2)->text(), QStringLiteral("0.00"));
        QVERIFY2(other.deltaTable()->verticalHeaderItem(1)->text().contains("not a speedup"),
                 qPrintable(other.deltaTable()->verticalHeaderItem(1)->text()));
        auto* differences = other.findChild<QLabel*>(QStringLiteral("compareDifferences"));
        QVERIFY(differences);
        QVERIFY2(differences->text().contains(
                     QStringLiteral("steps %1 -> %2").arg(a.record.config.steps).arg(fewer.config.steps)),
                 qPrintable(differences->text()));
        // A Close button and Escape both close it.
        other.show();
        QVERIFY(QTest::qWaitForWindowExposed(&other));
        QTest::keyClick(&other, Qt::Key_Escape);
        QVERIFY(!other.isVisible());
        other.show();
        auto* buttons = other.findChild<QDialogButtonBox*>(QStringLiteral("compareButtons"));
        QVERIFY(buttons && buttons->button(QDialogButtonBox::Close));
        buttons->button(QDialogButtonBox::Close)->click();
        QVERIFY(!other.isVisible());
    }

    void overlayTogglesChangeWhatIsPainted() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        TileCanvas* canvas = window_->canvas();
        for (CanvasOverlay o : {CanvasOverlay::TileGrid, CanvasOverlay::BlendWeights, CanvasOverlay::SeamMap})
            window_->overlayAction(o)->setChecked(false);
        QVERIFY(canvas->hasSeamMap());
        const QImage plain = canvas->grab().toImage();

        window_->overlayAction(CanvasOverlay::TileGrid)->setChecked(true);
        QVERIFY(canvas->isOverlayEnabled(CanvasOverlay::TileGrid));
        const QImage grid = canvas->grab().toImage();
        QVERIFY(changedFraction(plain, grid) > 0.01);
        window_->overlayAction(CanvasOverlay::TileGrid)->setChecked(false);
        QCOMPARE(changedFraction(plain, canvas->grab().toImage()), 0.0);

        // Blend weights: N over the image (hann, 32 px tiles, overlap 8), scale from 0 to max N.
        window_->overlayAction(CanvasOverlay::BlendWeights)->setChecked(true);
        canvas->setHoveredTile(-1);
        const QImage normaliser = canvas->grab().toImage();
        QVERIFY(changedFraction(plain, normaliser) > 0.3);
        const BlendWeights weights(TilePlan::fromConfig(tinyConfig(8)), BlendWindowKind::Hann, 8);
        const double maxN = *std::max_element(weights.normalizer().begin(), weights.normalizer().end());
        QCOMPARE(canvas->legendRange().first, 0.0);
        QVERIFY(std::abs(canvas->legendRange().second - maxN) < 1e-6);
        // A hovered tile shows its normalised weight (0..1) instead.
        QCOMPARE(canvas->tileAt(QPointF(1, 1)), 0);
        QCOMPARE(canvas->tileAt(QPointF(63, 63)), 8);
        // The cursor picks the tile: move over the image centre (pixel 32, 32: tile 4 of 3 x 3).
        const QPointF centre = canvas->rect().center();
        QMouseEvent move(QEvent::MouseMove, centre, canvas->mapToGlobal(centre), Qt::NoButton, Qt::NoButton,
                         Qt::NoModifier);
        QApplication::sendEvent(canvas, &move);
        QCOMPARE(canvas->hoveredTile(), 4);
        const QImage tile = canvas->grab().toImage();
        QVERIFY(changedFraction(normaliser, tile) > 0.05);
        QCOMPARE(canvas->legendRange(), std::make_pair(0.0, 1.0));
        canvas->setHoveredTile(-1);
        window_->overlayAction(CanvasOverlay::BlendWeights)->setChecked(false);

        // Seam map: its own scale, 0 to the map's maximum.
        window_->overlayAction(CanvasOverlay::SeamMap)->setChecked(true);
        const QImage seam = canvas->grab().toImage();
        QVERIFY(changedFraction(plain, seam) > 0.3);
        const double seamMax = seamStats(window_->lastRun()->result->seamMap).max;
        QVERIFY(seamMax > 0);
        QCOMPARE(canvas->seamMax(), seamMax);
        QCOMPARE(canvas->legendRange(), std::make_pair(0.0, seamMax));
        window_->overlayAction(CanvasOverlay::SeamMap)->setChecked(false);
        QCOMPARE(changedFraction(plain, canvas->grab().toImage()), 0.0);
    }

    void chartsShowTilesEarlierRunsTooltipsAndSave() {
        if (!haveTestModel()) QSKIP("tests/data/models/cifar_like is missing");
        TimingCharts* charts = window_->charts();
        charts->flush();
        const RunRecord& record = window_->lastRun()->result->record;
        // Tile 8 is alone in the last batch of each step: its time is that batch's host time.
        double expected = 0;
        int n = 0;
        for (const TileBatchTiming& b : record.batches)
            if (b.tileIds == std::vector<int>{8}) {
                expected += b.hostMs;
                ++n;
            }
        QCOMPARE(n, 2);
        QVERIFY(std::abs(charts->tileTimeMs(8) - expected / n) < 1e-9);
        QCOMPARE(charts->tileTimeMs(9), -1.0);
        QCOMPARE(charts->earlierRunCount(), 1);  // the seed-7 run, behind the seed-8 one

        QCustomPlot* steps = charts->plot(TimingCharts::Chart::Steps);
        steps->replot(QCustomPlot::rpImmediateRefresh);
        const StepTiming& last = record.steps.back();
        const QPointF at(steps->xAxis->coordToPixel(last.step + 1), steps->yAxis->coordToPixel(last.wallMs));
        const QString text = charts->hoverText(TimingCharts::Chart::Steps, at);
        QVERIFY2(text.contains(QStringLiteral("step 2")) && text.contains(QString::number(last.wallMs, 'f', 2)),
                 qPrintable(text));
        QVERIFY(charts->hoverText(TimingCharts::Chart::Steps, QPointF(-100, -100)).isEmpty());
        QCustomPlot* tiles = charts->plot(TimingCharts::Chart::Tiles);
        tiles->replot(QCustomPlot::rpImmediateRefresh);
        const QString tileText = charts->hoverText(
            TimingCharts::Chart::Tiles, QPointF(tiles->xAxis->coordToPixel(2), tiles->yAxis->coordToPixel(2)));
        QVERIFY2(tileText.startsWith(QStringLiteral("tile 8 (column 2, row 2)")), qPrintable(tileText));

        const QString png = scratch_.filePath("steps.png"), pdf = scratch_.filePath("tiles.pdf");
        QVERIFY(charts->saveChart(TimingCharts::Chart::Steps, png));
        QVERIFY(charts->saveChart(TimingCharts::Chart::Tiles, pdf));
        QCOMPARE(readAll(png).substr(1, 3), std::string("PNG"));
        QCOMPARE(readAll(pdf).substr(0, 4), std::string("%PDF"));
    }
};

QTEST_MAIN(TestWorkbench)
#include "tst_workbench.moc"
