// The window's worker (app/qt/RunWorker.h) across several runs on one thread, as a session drives
// it: image-to-image with the tiny pixel model, then with the tiny Stable Diffusion pipeline, then
// the pixel model again, each run from its own start image and canvas (nothing one run's engine
// kept for its model reaches the next); and a run stopped after a step, whose image is the last
// preview the window showed rather than the noisy canvas. On the CPU, with the test fixtures.
#include <QtTest/QtTest>

#include <QImage>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QThread>

#include <functional>
#include <optional>

#include "app/qt/RunWorker.h"
#include "core/sampling/ImageOps.h"
#include "tests/app/WorkerThread.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

const QString kPixelModel = QStringLiteral(TESSERA_TEST_DATA "/models/cifar_like");
const QString kSdPipeline = QStringLiteral(TESSERA_TEST_DATA "/sdpipeline/sd1");

// A photo-like start image: a smooth gradient with a bright square.
QString writeStartImage(const QString& path, int width, int height) {
    QImage image(width, height, QImage::Format_RGB888);
    for (int y = 0; y < height; ++y)
        for (int x = 0; x < width; ++x) image.setPixelColor(x, y, QColor(x * 255 / width, y * 255 / height, 90));
    for (int y = height / 4; y < height / 2; ++y)
        for (int x = width / 4; x < width / 2; ++x) image.setPixelColor(x, y, QColor(250, 240, 200));
    return image.save(path) ? path : QString();
}

// The tiny pixel model over `start` at twice its 32 x 32 size (the window's x2: the Size fields
// show 64 x 64), 2 steps, tiles of 32.
RunConfig pixelImageToImage(const QString& start) {
    RunConfig c;
    c.model = kPixelModel.toStdString();
    c.initImage = start.toStdString();
    c.upscale = 2.0;
    c.width = 64;
    c.height = 64;
    c.strength = 0.5;
    c.steps = 2;
    c.seed = 5;
    c.tile = 32;
    c.overlapPx = 8;
    c.tileBatch = 2;
    c.backend = BackendKind::CPU;
    c.precision = Precision::FP32;
    return c;
}

// The tiny SD pipeline over `start` (64 x 48) at x2: a 128 x 96 canvas, one 128-px tile.
RunConfig sdImageToImage(const QString& start) {
    RunConfig c = pixelImageToImage(start);
    c.model = kSdPipeline.toStdString();
    c.width = 512;  // the worker sizes the canvas from the start image and the factor
    c.height = 512;
    c.tile = 128;
    c.overlapPx = 16;
    c.prompt = "a red cube";
    c.cfgScale = 5.0;
    return c;
}

Ended runAndWait(WorkerThread& thread, const RunConfig& config, quint64 runId,
                 const std::function<void()>& whileRunning = {}) {
    return waitForEnd(thread.worker, [&] {
        thread.start(config, runId);
        if (whileRunning) whileRunning();
    });
}

}  // namespace

class TestRunWorker : public QObject {
    Q_OBJECT

private:
    QTemporaryDir scratch_;

private slots:
    void initTestCase() {
        QVERIFY(scratch_.isValid());
        registerRunMetaTypes();
    }

    void modelChangesNeverReachTheLastModelsCanvas() {
        // Upscale a photo x2 with the pixel model, the same through the SD pipeline, then the
        // pixel model again with the same settings: the third run is the first one again.
        const QString small = writeStartImage(scratch_.filePath(QStringLiteral("photo32.png")), 32, 32);
        const QString sdStart = writeStartImage(scratch_.filePath(QStringLiteral("photo64x48.png")), 64, 48);
        QVERIFY(!small.isEmpty() && !sdStart.isEmpty());
        WorkerThread thread;

        const Ended first = runAndWait(thread, pixelImageToImage(small), 1);
        QVERIFY2(first.run, qPrintable(first.error));
        QCOMPARE(first.run->image.size(), QSize(64, 64));

        const Ended sd = runAndWait(thread, sdImageToImage(sdStart), 2);
        QVERIFY2(sd.run, qPrintable(sd.error));
        QCOMPARE(sd.run->image.size(), QSize(128, 96));

        const Ended again = runAndWait(thread, pixelImageToImage(small), 3);
        QVERIFY2(again.run, qPrintable(again.error));
        QCOMPARE(again.run->image.size(), QSize(64, 64));
        // The same settings make the same image as the first run.
        QCOMPARE(again.run->result->record.imageSha256, first.run->result->record.imageSha256);

        // Another start image and size with the SD pipeline after the pixel model, then text to
        // image with the pixel model: each run has its own canvas.
        RunConfig other = sdImageToImage(small);  // 32 x 32 x2: 64 x 64
        other.tile = 64;
        const Ended sdSmall = runAndWait(thread, other, 4);
        QVERIFY2(sdSmall.run, qPrintable(sdSmall.error));
        QCOMPARE(sdSmall.run->image.size(), QSize(64, 64));
        RunConfig noise = pixelImageToImage({});
        noise.upscale = 1.0;
        noise.width = 96;
        noise.height = 64;
        const Ended fromNoise = runAndWait(thread, noise, 5);
        QVERIFY2(fromNoise.run, qPrintable(fromNoise.error));
        QCOMPARE(fromNoise.run->image.size(), QSize(96, 64));
    }

    void stoppedRunKeepsTheLastPreview() {
        // Stopped after its first step's preview, a run's image (the canvas and what the history
        // keeps) is that preview, the estimate the window showed, not the noisy canvas x_t.
        WorkerThread thread;
        RunConfig config = pixelImageToImage({});
        config.upscale = 1.0;
        config.steps = 6;
        config.previewEvery = 1;
        RunWorker* worker = thread.worker;
        QSignalSpy previews(worker, &RunWorker::previewReady);
        // Stop pressed as the first preview is sent: on the worker's thread, before the next batch.
        QObject::connect(
            worker, &RunWorker::previewReady, worker,
            [worker](quint64 runId, int, const QImage&) { worker->cancel(runId); }, Qt::DirectConnection);
        const Ended ended = runAndWait(thread, config, 1);
        QVERIFY2(ended.run, qPrintable(ended.error));
        const RunRecord& record = ended.run->result->record;
        QVERIFY(record.status == RunStatus::Cancelled);
        QCOMPARE(record.stepsRun, 1);
        QCOMPARE(previews.size(), 1);
        // The preview sent is the image.
        const QImage last = previews.last().at(2).value<QImage>();
        QVERIFY(!last.isNull());
        QCOMPARE(ended.run->image.convertToFormat(QImage::Format_RGB888), last.convertToFormat(QImage::Format_RGB888));
        const QImage kept = toQImage(ended.run->result->image);
        QCOMPARE(kept.convertToFormat(QImage::Format_RGB888), last.convertToFormat(QImage::Format_RGB888));
        QCOMPARE(record.imageSha256, imageSha256(rgb8Of(last)));
        bool said = false;
        for (const std::string& message : record.messages)
            if (message.find("preview") != std::string::npos) said = true;
        QVERIFY2(said, "the record says that its image is the last preview");
    }
};

QTEST_MAIN(TestRunWorker)
#include "tst_runworker.moc"
