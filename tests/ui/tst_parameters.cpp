// Generation settings from other tools in the window (app/qt/ImportedParameters.h): an A1111 PNG
// opened as a preset or loaded with File ▸ Load parameters from PNG/JPEG…, a JPEG whose EXIF
// UserComment holds them (as A1111 writes it with piexif), a ComfyUI PNG, A1111's text pasted with
// Edit ▸ Paste parameters, and a dropped PNG that asks whether it is the start image or its
// parameters are wanted. Every setting that could not be applied is named; the window's device
// choices stay. The files are read off the GUI thread.
#include <QAction>
#include <QBuffer>
#include <QClipboard>
#include <QDropEvent>
#include <QGuiApplication>
#include <QImage>
#include <QLabel>
#include <QMessageBox>
#include <QMimeData>
#include <QPushButton>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QUrl>
#include <QtTest>

#include <future>

#include "TinyRun.h"
#include "app/cli/PngIO.h"
#include "app/qt/Exporters.h"
#include "app/qt/ImportedParameters.h"
#include "ui/ConfigPanel.h"
#include "ui/MainWindow.h"

using namespace tessera;
using testing::offGuiThread;

namespace {

QString sdPipeline() { return QStringLiteral(TESSERA_TEST_DATA "/sdpipeline/sd1"); }

// What A1111 1.10 writes for a txt2img run with a hires fix.
const std::string kA1111Text =
    "a cat in a hat, (masterpiece:1.2)\n"
    "Negative prompt: blurry, lowres\n"
    "Steps: 28, Sampler: DPM++ 2M, Schedule type: Karras, CFG scale: 6.5, Seed: 1234, Size: 512x768, "
    "Model hash: 6ce0161689, Model: v1-5-pruned-emaonly, Denoising strength: 0.4, Hires upscale: 2, "
    "Hires upscaler: Latent, Version: v1.10.1";

Rgb8Image grey(int w, int h) { return Rgb8Image{w, h, std::vector<std::uint8_t>(std::size_t(w) * h * 3, 128)}; }

// A PNG as A1111 saves it: a "parameters" tEXt chunk and no manifest.
QString writeA1111Png(const QString& path, const std::string& text = kA1111Text) {
    offGuiThread([&] { writePng(path.toStdString(), grey(8, 8), {{"parameters", text, false}}); });
    return path;
}

// The EXIF block piexif.dump({"Exif": {UserComment: UserComment.dump(text, encoding="unicode")}})
// makes: big-endian TIFF, IFD0 with the Exif IFD pointer, the Exif IFD with the UserComment.
QByteArray a1111Exif(const QString& text) {
    QByteArray comment("UNICODE\0", 8);
    for (const QChar c : text) {
        comment.append(static_cast<char>(c.unicode() >> 8));
        comment.append(static_cast<char>(c.unicode() & 0xff));
    }
    auto u16 = [](QByteArray& b, int v) {
        b.append(static_cast<char>((v >> 8) & 0xff));
        b.append(static_cast<char>(v & 0xff));
    };
    auto u32 = [&u16](QByteArray& b, qint64 v) {
        u16(b, static_cast<int>((v >> 16) & 0xffff));
        u16(b, static_cast<int>(v & 0xffff));
    };
    QByteArray tiff("MM\0\x2a", 4);
    u32(tiff, 8);
    // IFD0 at 8: one entry, the Exif IFD pointer (LONG) to 26.
    u16(tiff, 1);
    u16(tiff, 0x8769);
    u16(tiff, 4);
    u32(tiff, 1);
    u32(tiff, 26);
    u32(tiff, 0);
    // Exif IFD at 26: one entry, UserComment (UNDEFINED) at 44.
    u16(tiff, 1);
    u16(tiff, 0x9286);
    u16(tiff, 7);
    u32(tiff, comment.size());
    u32(tiff, 44);
    u32(tiff, 0);
    tiff.append(comment);
    return QByteArray("Exif\0\0", 6) + tiff;
}

// A JPEG with that EXIF block as its first APP1 segment, as A1111 saves a .jpg.
QString writeA1111Jpeg(const QString& path, const QString& text) {
    QImage image(16, 16, QImage::Format_RGB888);
    image.fill(QColor(30, 90, 160));
    QByteArray jpeg;
    QBuffer buffer(&jpeg);
    buffer.open(QIODevice::WriteOnly);
    image.save(&buffer, "JPEG");
    const QByteArray exif = a1111Exif(text);
    QByteArray segment("\xff\xe1", 2);
    const int length = static_cast<int>(exif.size()) + 2;
    segment.append(static_cast<char>(length >> 8));
    segment.append(static_cast<char>(length & 0xff));
    segment.append(exif);
    jpeg.insert(2, segment);
    offGuiThread([&] {
        QFile file(path);
        return file.open(QIODevice::WriteOnly) && file.write(jpeg) == jpeg.size();
    });
    return path;
}

QString statusOf(const MainWindow& window) {
    return window.findChild<QLabel*>(QStringLiteral("statusText"))->toolTip();
}

// A window on the tiny SD pipeline (prompts apply), on the CPU.
void showSdSettings(MainWindow& window) {
    RunConfig c;
    c.model = sdPipeline().toStdString();
    c.backend = BackendKind::CPU;
    c.threads = 3;
    c.width = 128;
    c.height = 128;
    QVERIFY(testing::setConfigAndWait(*window.configPanel(), c));
}

}  // namespace

class TestParameters : public QObject {
    Q_OBJECT

private:
    QTemporaryDir scratch_;
    int settingsCount_ = 0;
    std::unique_ptr<SettingsFile> freshSettings() {
        return std::make_unique<SettingsFile>(scratch_.filePath(QStringLiteral("p-%1.ini").arg(++settingsCount_)));
    }
    QString freshHistory() { return scratch_.filePath(QStringLiteral("history-%1").arg(++settingsCount_)); }

    static void checkA1111Applied(const RunConfig& c) {
        QCOMPARE(c.prompt, std::string("a cat in a hat, (masterpiece:1.2)"));
        QCOMPARE(c.negativePrompt, std::string("blurry, lowres"));
        QCOMPARE(c.steps, 28);
        QCOMPARE(std::string(toString(c.scheduler)), std::string(toString(SchedulerKind::DPMPP2M)));
        QCOMPARE(c.cfgScale, 6.5);
        QCOMPARE(c.seed, std::uint64_t(1234));
        QCOMPARE(c.width, 512);
        QCOMPARE(c.height, 768);
        // The window's device choices stay: a file says where a run computed, not where this one will.
        QCOMPARE(std::string(toString(c.backend)), std::string(toString(BackendKind::CPU)));
        QCOMPARE(c.threads, 3);
        QCOMPARE(c.model, sdPipeline().toStdString());
    }

private slots:
    void init() { testing::failOnGuiThreadIo(); }

    void initTestCase() {
        QVERIFY(scratch_.isValid());
        QStandardPaths::setTestModeEnabled(true);
    }

    void a1111PngOpensAsAPresetNamingWhatItLeftOut() {
        const QString png = writeA1111Png(scratch_.filePath(QStringLiteral("a1111.png")));
        MainWindow window(freshSettings(), freshHistory());
        showSdSettings(window);
        QString error;
        QVERIFY2(testing::restoreAndWait(window, png, &error), qPrintable(error));
        checkA1111Applied(window.configPanel()->config());
        // The settings that were not applied are named.
        const QString status = statusOf(window);
        for (const char* named : {"Hires upscale: 2", "Hires upscaler: Latent", "Model: v1-5-pruned-emaonly"})
            QVERIFY2(status.contains(QLatin1String(named)), qPrintable(status));
    }

    void loadParametersFromPngAndJpeg() {
        MainWindow window(freshSettings(), freshHistory());
        showSdSettings(window);
        QVERIFY(window.findChild<QAction*>(QStringLiteral("actionLoadParameters")));

        const QString png = writeA1111Png(scratch_.filePath(QStringLiteral("load.png")));
        QSignalSpy applied(&window, &MainWindow::parametersApplied);
        window.loadParametersFrom(png);
        QVERIFY(applied.wait(60000));
        QVERIFY2(applied.at(0).at(1).toBool(), qPrintable(applied.at(0).at(2).toString()));
        checkA1111Applied(window.configPanel()->config());
        const QStringList notApplied = applied.at(0).at(3).toStringList();
        QVERIFY2(notApplied.join('\n').contains("Hires upscale: 2"), qPrintable(notApplied.join('\n')));
        QVERIFY2(statusOf(window).contains("Hires upscale: 2"), qPrintable(statusOf(window)));
        // The menu's load tells the same in a message too.
        QTRY_VERIFY(window.findChild<QMessageBox*>(QStringLiteral("notAppliedMessage")));
        window.findChild<QMessageBox*>(QStringLiteral("notAppliedMessage"))->close();

        // A JPEG as A1111 writes it: the infotext in the EXIF UserComment, UTF-16.
        showSdSettings(window);
        const QString text = QStringLiteral(
            "a lighthouse at dusk, ünïcode ✓\nSteps: 12, Sampler: Euler a, "
            "CFG scale: 4, Seed: 77, Size: 640x384, Version: v1.10.1");
        const QString jpeg = writeA1111Jpeg(scratch_.filePath(QStringLiteral("a1111.jpg")), text);
        applied.clear();
        window.loadParametersFrom(jpeg);
        QVERIFY(applied.wait(60000));
        QVERIFY2(applied.at(0).at(1).toBool(), qPrintable(applied.at(0).at(2).toString()));
        const RunConfig c = window.configPanel()->config();
        QCOMPARE(QString::fromStdString(c.prompt), QStringLiteral("a lighthouse at dusk, ünïcode ✓"));
        QCOMPARE(c.steps, 12);
        QCOMPARE(std::string(toString(c.scheduler)), std::string(toString(SchedulerKind::EulerAncestral)));
        QCOMPARE(c.seed, std::uint64_t(77));
        QCOMPARE(c.width, 640);
        QCOMPARE(c.height, 384);

        // The reader alone, on the bytes: the comment (COM) segment when there is no EXIF.
        QCOMPARE(jpegParametersText(std::string("\xff\xd8\xff\xfe\x00\x07Steps\xff\xd9", 12)), std::string("Steps"));
        QCOMPARE(jpegParametersText(std::string("\xff\xd8\xff\xe1\xff\xff", 6)), std::string());  // cut short
        QCOMPARE(jpegParametersText(std::string("not a jpeg")), std::string());

        // An image without parameters changes nothing and says why.
        const QString plain = scratch_.filePath(QStringLiteral("plain.jpg"));
        QImage(4, 4, QImage::Format_RGB888).save(plain);
        applied.clear();
        window.loadParametersFrom(plain);
        QVERIFY(applied.wait(60000));
        QVERIFY(!applied.at(0).at(1).toBool());
        QVERIFY2(applied.at(0).at(2).toString().contains("plain.jpg"), qPrintable(applied.at(0).at(2).toString()));
        QCOMPARE(window.configPanel()->config().seed, std::uint64_t(77));
    }

    void comfyUiPngGivesItsSampler() {
        const std::string graph = R"({
            "3": {"class_type": "KSampler", "inputs": {"seed": 99, "steps": 14, "cfg": 5.0,
                  "sampler_name": "euler", "scheduler": "normal", "denoise": 1.0,
                  "model": ["4", 0], "positive": ["6", 0], "negative": ["7", 0], "latent_image": ["5", 0]}},
            "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "v1-5.safetensors"}},
            "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 384, "height": 256, "batch_size": 1}},
            "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "a red barn", "clip": ["4", 1]}},
            "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "fog", "clip": ["4", 1]}}})";
        const QString png = scratch_.filePath(QStringLiteral("comfy.png"));
        offGuiThread([&] { writePng(png.toStdString(), grey(8, 8), {{"prompt", graph, false}}); });
        MainWindow window(freshSettings(), freshHistory());
        showSdSettings(window);
        QSignalSpy applied(&window, &MainWindow::parametersApplied);
        window.loadParametersFrom(png);
        QVERIFY(applied.wait(60000));
        QVERIFY2(applied.at(0).at(1).toBool(), qPrintable(applied.at(0).at(2).toString()));
        const RunConfig c = window.configPanel()->config();
        QCOMPARE(c.prompt, std::string("a red barn"));
        QCOMPARE(c.seed, std::uint64_t(99));
        QCOMPARE(c.steps, 14);
        QCOMPARE(c.width, 384);
    }

    void pasteParametersFromTheClipboard() {
        MainWindow window(freshSettings(), freshHistory());
        showSdSettings(window);
        QAction* paste = window.pasteParametersAction();
        QVERIFY(paste && paste->isEnabled());
        QCOMPARE(paste->shortcut(), QKeySequence(QStringLiteral("Ctrl+Shift+V")));
        QGuiApplication::clipboard()->setText(QString::fromStdString(kA1111Text));
        QSignalSpy applied(&window, &MainWindow::parametersApplied);
        paste->trigger();
        // The files the text names are checked off the GUI thread (tst_a1111settings): the answer follows.
        QVERIFY(applied.wait(60000));
        QCOMPARE(applied.size(), 1);
        QVERIFY(applied.at(0).at(1).toBool());
        checkA1111Applied(window.configPanel()->config());
        QVERIFY2(statusOf(window).contains("Hires upscale: 2"), qPrintable(statusOf(window)));

        // Nothing to paste: nothing changes, and the status line says so.
        QGuiApplication::clipboard()->setText(QStringLiteral("  "));
        applied.clear();
        paste->trigger();
        QCOMPARE(applied.size(), 1);
        QVERIFY(!applied.at(0).at(1).toBool());
        QCOMPARE(window.configPanel()->config().seed, std::uint64_t(1234));
    }

    void droppedPngAsksStartImageOrParameters() {
        const QString png = writeA1111Png(scratch_.filePath(QStringLiteral("dropped.png")));
        MainWindow window(freshSettings(), freshHistory());
        showSdSettings(window);
        auto drop = [&window, &png] {
            QMimeData mime;
            mime.setUrls({QUrl::fromLocalFile(png)});
            QDragEnterEvent enter(QPoint(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
            QApplication::sendEvent(&window, &enter);
            if (!enter.isAccepted()) return false;
            QDropEvent event(QPointF(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
            QApplication::sendEvent(&window, &event);
            return window.dropQuestion() != nullptr;
        };
        // Its parameters.
        QVERIFY(drop());
        QSignalSpy restored(&window, &MainWindow::configurationRestored);
        window.dropQuestion()->findChild<QPushButton*>(QStringLiteral("dropAsParameters"))->click();
        QVERIFY(restored.wait(60000));
        QVERIFY2(restored.at(0).at(1).toBool(), qPrintable(restored.at(0).at(2).toString()));
        checkA1111Applied(window.configPanel()->config());
        QVERIFY(window.configPanel()->config().initImage.empty());
        // The start image.
        QTRY_VERIFY(!window.dropQuestion());
        QVERIFY(drop());
        window.dropQuestion()->findChild<QPushButton*>(QStringLiteral("dropAsStartImage"))->click();
        QCOMPARE(QString::fromStdString(window.configPanel()->config().initImage), png);
        // Cancel leaves everything.
        QTRY_VERIFY(!window.dropQuestion());
        window.configPanel()->setStartImage({});
        QVERIFY(drop());
        window.dropQuestion()->button(QMessageBox::Cancel)->click();
        QVERIFY(window.configPanel()->config().initImage.empty());
    }
};

QTEST_MAIN(TestParameters)
#include "tst_parameters.moc"
