// Image-to-image start images (app/cli/InitImage.h): PNG and JPEG decoding, resampling to the run's
// size, the messages for files that cannot be used, and tessera-cli render --init end to end.
#include <QtTest/QtTest>

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QProcess>
#include <QTemporaryDir>

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "app/cli/InitImage.h"
#include "app/cli/PngIO.h"
#include "tests/app/CliRun.h"

using namespace tessera;
using tessera::testing::CliRun;
using tessera::testing::describe;

namespace {

CliRun runCli(const QStringList& args, int timeoutMs = 600000) { return tessera::testing::runCli(args, timeoutMs); }

const QString kImages = QStringLiteral(TESSERA_TEST_DATA "/images/");

std::string fixture(const char* name) { return (kImages + QLatin1String(name)).toStdString(); }

std::vector<unsigned char> fileBytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void writeBytes(const std::string& path, const std::vector<unsigned char>& bytes, std::size_t count) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(count));
}

// RGB of pixel (x, y).
std::array<int, 3> rgbAt(const Rgb8Image& image, int x, int y) {
    const std::size_t at = (static_cast<std::size_t>(y) * image.width + x) * 3;
    return {image.pixels[at], image.pixels[at + 1], image.pixels[at + 2]};
}

QString rgbText(const std::array<int, 3>& c) { return QStringLiteral("(%1, %2, %3)").arg(c[0]).arg(c[1]).arg(c[2]); }

bool near(const std::array<int, 3>& got, const std::array<int, 3>& want, int tolerance) {
    for (int c = 0; c < 3; ++c)
        if (std::abs(got[c] - want[c]) > tolerance) return false;
    return true;
}

Rgb8Image makeImage(int width, int height, const std::function<std::array<int, 3>(int, int)>& colour) {
    Rgb8Image image{width, height, std::vector<std::uint8_t>(static_cast<std::size_t>(width) * height * 3)};
    for (int y = 0; y < height; ++y)
        for (int x = 0; x < width; ++x) {
            const auto c = colour(x, y);
            for (int k = 0; k < 3; ++k)
                image.pixels[(static_cast<std::size_t>(y) * width + x) * 3 + k] = static_cast<std::uint8_t>(c[k]);
        }
    return image;
}

// Model-space value of channel c at (x, y) back in 0..255 units.
double level(const ImageTensor& t, int c, int x, int y) {
    return (t.data[(static_cast<std::size_t>(c) * t.height + y) * t.width + x] + 1.0) / 2.0 * 255.0;
}

// The one PNG a render wrote into `dir`.
Rgb8Image renderedImage(const QString& dir) {
    const QStringList pngs = QDir(dir).entryList({"*.png"}, QDir::Files);
    if (pngs.size() != 1) return {};
    return readPng(QDir(dir).filePath(pngs.front()).toStdString()).image;
}

}  // namespace

class TestInitImage : public QObject {
    Q_OBJECT

private slots:
    // ---- decoding -------------------------------------------------------------------------

    void jpegQuadrants() {
        const Rgb8Image image = decodeImageFile(fixture("quadrants.jpg"));
        QCOMPARE(image.width, 16);
        QCOMPARE(image.height, 16);
        const std::array<std::array<int, 3>, 4> want{{{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {255, 255, 255}}};
        for (int q = 0; q < 4; ++q)
            for (int y = 0; y < 8; ++y)
                for (int x = 0; x < 8; ++x) {
                    const auto got = rgbAt(image, x + 8 * (q % 2), y + 8 * (q / 2));
                    QVERIFY2(near(got, want[q], 4),
                             qPrintable(QStringLiteral("quadrant %1 pixel %2,%3 is %4, expected %5")
                                            .arg(q)
                                            .arg(x)
                                            .arg(y)
                                            .arg(rgbText(got), rgbText(want[q]))));
                }
    }

    void jpegGreyBecomesRgb() {
        const Rgb8Image image = decodeImageFile(fixture("grey.jpg"));
        QCOMPARE(image.width, 8);
        QCOMPARE(image.height, 8);
        for (int y = 0; y < 8; ++y)
            for (int x = 0; x < 8; ++x)
                QVERIFY2(near(rgbAt(image, x, y), {128, 128, 128}, 1), qPrintable(rgbText(rgbAt(image, x, y))));
    }

    void jpegCmykBecomesRgb() {
        // Pure cyan ink, written with Adobe's inverted convention: no red, full green and blue.
        const Rgb8Image image = decodeImageFile(fixture("cmyk.jpg"));
        QCOMPARE(image.width, 8);
        QVERIFY2(near(rgbAt(image, 3, 3), {0, 255, 255}, 4), qPrintable(rgbText(rgbAt(image, 3, 3))));
    }

    void pngExactPixels() {
        QTemporaryDir dir;
        const Rgb8Image written = makeImage(5, 3, [](int x, int y) {
            return std::array<int, 3>{x * 50, y * 100, 255 - x * y * 10};
        });
        const std::string path = dir.filePath("exact.png").toStdString();
        writePng(path, written, {});
        const Rgb8Image read = decodeImageFile(path);
        QCOMPARE(read.width, 5);
        QCOMPARE(read.height, 3);
        QVERIFY(read.pixels == written.pixels);
    }

    void pngAlphaOverWhite() {
        const Rgb8Image image = decodeImageFile(fixture("alpha.png"));
        QCOMPARE(image.width, 2);
        QCOMPARE(image.height, 1);
        QCOMPARE(rgbText(rgbAt(image, 0, 0)), rgbText({255, 0, 0}));
        QCOMPARE(rgbText(rgbAt(image, 1, 0)), rgbText({255, 255, 255}));  // transparent black -> white
    }

    void png16BitGreyIsTakenAsSrgb() {
        const Rgb8Image image = decodeImageFile(fixture("grey16.png"));
        QCOMPARE(image.width, 2);
        QCOMPARE(rgbText(rgbAt(image, 0, 0)), rgbText({0, 0, 0}));
        QCOMPARE(rgbText(rgbAt(image, 1, 0)), rgbText({255, 255, 255}));
        QCOMPARE(rgbText(rgbAt(image, 0, 1)), rgbText({128, 128, 128}));  // 32896 / 257, not brightened as linear light
    }

    void formatIsFoundByContentNotName() {
        QTemporaryDir dir;
        const std::string path = dir.filePath("really-a-jpeg.png").toStdString();
        const auto bytes = fileBytes(fixture("quadrants.jpg"));
        writeBytes(path, bytes, bytes.size());
        const Rgb8Image image = decodeImageFile(path);
        QCOMPARE(image.width, 16);
        QVERIFY(near(rgbAt(image, 2, 2), {255, 0, 0}, 4));
    }

    void badFiles_data() {
        QTest::addColumn<QString>("name");
        QTest::addColumn<QString>("problem");
        QTest::newRow("missing") << "missing.png"
                                 << "cannot open: No such file";
        QTest::newRow("empty") << "empty.png"
                               << "is empty";
        QTest::newRow("text renamed .png") << "notes.png"
                                           << "is neither a PNG nor a JPEG file";
        QTest::newRow("truncated png") << "cut.png"
                                       << "is a damaged or truncated PNG";
        QTest::newRow("png header only") << "header.png"
                                         << "is not a readable PNG";
        QTest::newRow("truncated jpeg") << "cut.jpg"
                                        << "is a damaged or truncated JPEG";
        QTest::newRow("jpeg marker only") << "marker.jpg"
                                          << "is not a readable JPEG";
        QTest::newRow("folder") << "folder.png"
                                << "is a folder";
    }
    void badFiles() {
        QFETCH(QString, name);
        QFETCH(QString, problem);
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const std::string path = dir.filePath(name).toStdString();
        if (name == "empty.png") {
            writeBytes(path, {}, 0);
        } else if (name == "notes.png") {
            const std::string text = "these are notes, not an image\n";
            writeBytes(path, std::vector<unsigned char>(text.begin(), text.end()), text.size());
        } else if (name == "cut.png") {
            // Noise compresses badly, so half the file cuts into the image data.
            std::uint32_t state = 1;
            const Rgb8Image noise = makeImage(64, 64, [&](int, int) {
                state = state * 1664525u + 1013904223u;
                return std::array<int, 3>{int(state >> 24), int((state >> 16) & 255), int((state >> 8) & 255)};
            });
            const std::string whole = dir.filePath("whole.png").toStdString();
            writePng(whole, noise, {});
            const auto bytes = fileBytes(whole);
            writeBytes(path, bytes, bytes.size() / 2);
        } else if (name == "header.png") {
            const auto bytes = fileBytes(fixture("alpha.png"));
            writeBytes(path, bytes, 12);
        } else if (name == "cut.jpg") {
            // Cut halfway into the entropy-coded scan that follows the SOS marker (FF DA).
            const auto bytes = fileBytes(fixture("quadrants.jpg"));
            std::size_t sos = 0;
            for (std::size_t i = 2; i + 1 < bytes.size() && !sos; ++i)
                if (bytes[i] == 0xff && bytes[i + 1] == 0xda) sos = i;
            QVERIFY2(sos > 0, "quadrants.jpg has no SOS marker");
            writeBytes(path, bytes, sos + (bytes.size() - sos) / 2);
        } else if (name == "marker.jpg") {
            writeBytes(path, {0xff, 0xd8, 0xff, 0xe0, 0x00}, 5);
        } else if (name == "folder.png") {
            QVERIFY(QDir(dir.path()).mkdir(name));
        }
        try {
            decodeImageFile(path);
            QFAIL(qPrintable(name + " was decoded; it should have been refused"));
        } catch (const InitImageError& e) {
            const QString message = QString::fromUtf8(e.what());
            QVERIFY2(message.startsWith("'" + QString::fromStdString(path) + "'"), qPrintable(message));
            QVERIFY2(message.contains(problem), qPrintable(message));
        }
        // loadInitImage reports the same way.
        QVERIFY_THROWS_EXCEPTION(InitImageError, loadInitImage(path, 8, 8, 3));
    }

    void everyTruncationIsRefusedOrDecoded() {
        // Each prefix of a PNG and a JPEG either decodes to the full size or throws
        // InitImageError naming the file: no crash, no other exception, no partial image.
        QTemporaryDir dir;
        for (const char* name : {"quadrants.jpg", "alpha.png", "cmyk.jpg"}) {
            const auto bytes = fileBytes(fixture(name));
            const Rgb8Image whole = decodeImageFile(fixture(name));
            const std::string path = dir.filePath("prefix").toStdString();
            int refused = 0;
            for (std::size_t n = 0; n < bytes.size(); ++n) {
                writeBytes(path, bytes, n);
                try {
                    const Rgb8Image image = decodeImageFile(path);
                    QCOMPARE(image.width, whole.width);
                    QCOMPARE(image.height, whole.height);
                } catch (const InitImageError& e) {
                    ++refused;
                    QVERIFY2(QString::fromUtf8(e.what()).startsWith("'" + QString::fromStdString(path) + "'"),
                             e.what());
                }
            }
            // A PNG whose image data is complete decodes without its 12-byte IEND chunk; a JPEG
            // must be whole (a missing end marker is what libjpeg calls a premature end).
            const int mustRefuse = static_cast<int>(bytes.size()) - (QByteArray(name).endsWith(".png") ? 12 : 0);
            QVERIFY2(
                refused >= mustRefuse,
                qPrintable(
                    QStringLiteral("%1: only %2 of %3 prefixes refused").arg(name).arg(refused).arg(bytes.size())));
        }
    }

    // ---- headers and damage ------------------------------------------------------------------

    // The header alone gives what decoding gives, without decoding.
    void headerMatchesDecoding() {
        for (const char* name : {"quadrants.jpg", "grey.jpg", "cmyk.jpg", "alpha.png", "grey16.png"}) {
            const ImageHeader header = readImageHeader(fixture(name));
            const Rgb8Image image = decodeImageFile(fixture(name));
            QCOMPARE(header.width, image.width);
            QCOMPARE(header.height, image.height);
            QCOMPARE(header.fileBytes, static_cast<std::uint64_t>(QFileInfo(kImages + name).size()));
            QCOMPARE(header.format == ImageHeader::Format::Jpeg, QByteArray(name).endsWith(".jpg"));
        }
    }

    // Real JPEGs carry large EXIF/ICC/XMP segments before the frame header: walked past, not read.
    void jpegHeaderAfterLargeSegments() {
        QTemporaryDir dir;
        auto bytes = fileBytes(fixture("quadrants.jpg"));
        std::vector<unsigned char> app(65535 + 2, 'x');
        app[0] = 0xff;
        app[1] = 0xe1;
        app[2] = 0xff;
        app[3] = 0xff;  // length 65535
        for (int i = 0; i < 4; ++i) bytes.insert(bytes.begin() + 2, app.begin(), app.end());
        const std::string path = dir.filePath("exif.jpg").toStdString();
        writeBytes(path, bytes, bytes.size());
        QCOMPARE(readImageHeader(path).width, 16);
        QCOMPARE(decodeImageFile(path).width, 16);
    }

    // libjpeg fills damaged entropy-coded data with grey and carries on; those images are refused.
    void damagedJpegData_data() {
        QTest::addColumn<QString>("damage");
        QTest::newRow("scan cut, end marker kept") << "cut+eoi";
        QTest::newRow("header claims 2000x2000") << "claims";
        QTest::newRow("scan overwritten") << "garbage";
    }
    void damagedJpegData() {
        QFETCH(QString, damage);
        QTemporaryDir dir;
        auto bytes = fileBytes(fixture("quadrants.jpg"));
        std::size_t sos = 0, sof = 0;
        for (std::size_t i = 2; i + 3 < bytes.size() && !sos;) {
            const unsigned marker = bytes[i + 1];
            if (marker == 0xc0 || marker == 0xc2) sof = i;
            if (marker == 0xda)
                sos = i;
            else
                i += 2 + ((bytes[i + 2] << 8) | bytes[i + 3]);
        }
        QVERIFY(sos > 0 && sof > 0);
        const std::size_t scan = sos + 2 + ((bytes[sos + 2] << 8) | bytes[sos + 3]);
        if (damage == "cut+eoi") {
            bytes.resize(scan + (bytes.size() - scan) / 3);
            bytes.insert(bytes.end(), {0xff, 0xd9});
        } else if (damage == "claims") {
            for (int k : {5, 7}) {  // height, then width
                bytes[sof + k] = 2000 >> 8;
                bytes[sof + k + 1] = 2000 & 255;
            }
        } else {
            // Entropy-coded bytes that hold no marker (no 0xFF): nothing but bad data.
            for (std::size_t i = scan + 4; i + 8 < bytes.size(); ++i)
                bytes[i] = static_cast<unsigned char>(0x12 + (i * 37) % 0xe0);
        }
        const std::string path = dir.filePath("damaged.jpg").toStdString();
        writeBytes(path, bytes, bytes.size());
        try {
            decodeImageFile(path);
            QFAIL("a damaged JPEG was decoded");
        } catch (const InitImageError& e) {
            QVERIFY2(QString::fromUtf8(e.what()).contains("is a damaged or truncated JPEG: "), e.what());
        }
    }

    // Harmless warnings do not refuse a file: extra bytes before a marker.
    void extraneousBytesStillDecode() {
        QTemporaryDir dir;
        auto bytes = fileBytes(fixture("quadrants.jpg"));
        const std::size_t firstSegmentEnd = 2 + 2 + ((bytes[4] << 8) | bytes[5]);
        bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(firstSegmentEnd), {0x00, 0x01, 0x02});
        const std::string path = dir.filePath("extra.jpg").toStdString();
        writeBytes(path, bytes, bytes.size());
        const Rgb8Image image = decodeImageFile(path);
        QCOMPARE(image.width, 16);
        QVERIFY(near(rgbAt(image, 2, 2), rgbAt(decodeImageFile(fixture("quadrants.jpg")), 2, 2), 0));
    }

    void oversizedHeadersAreRefusedBeforeDecoding() {
        QTemporaryDir dir;
        auto png = fileBytes(fixture("alpha.png"));
        for (int i = 16; i < 24; ++i) png[static_cast<std::size_t>(i)] = i % 4 == 1 ? 0x01 : 0x00;  // 65536 x 65536
        const std::string path = dir.filePath("wide.png").toStdString();
        writeBytes(path, png, png.size());
        for (const auto& read : {std::function<void()>([&] { readImageHeader(path); }),
                                 std::function<void()>([&] { decodeImageFile(path); })}) {
            try {
                read();
                QFAIL("a 65536 x 65536 PNG was accepted");
            } catch (const InitImageError& e) {
                QVERIFY2(QString::fromUtf8(e.what()).contains("is 65536x65536 pixels, more than the 150 megapixels"),
                         e.what());
            }
        }
    }

    // A FIFO is refused at once (opened without blocking), not waited on.
    void fifoIsRefusedWithoutBlocking() {
        QTemporaryDir dir;
        const QString fifo = dir.filePath("fifo.png");
        QCOMPARE(::mkfifo(fifo.toLocal8Bit().constData(), 0600), 0);
        QVERIFY_THROWS_EXCEPTION(InitImageError, readImageHeader(fifo.toStdString()));
        QVERIFY_THROWS_EXCEPTION(InitImageError, decodeImageFile(fifo.toStdString()));
    }

    void startImageHeaderForARun() {
        RunConfig config;
        QVERIFY(!checkStartImageHeader(config, 3).has_value());
        config.initImage = fixture("quadrants.jpg");
        const auto size = checkStartImageHeader(config, 3);
        QVERIFY(size.has_value());
        QCOMPARE(size->width, 16);
        QCOMPARE(size->fileBytes, static_cast<std::uint64_t>(QFileInfo(kImages + "quadrants.jpg").size()));
        try {
            checkStartImageHeader(config, 4);
            QFAIL("a 4-channel model was given a start image");
        } catch (const ValidationError& e) {
            QCOMPARE(e.field(), std::string("init"));
        }
        config.initImage = "/nonexistent/start.png";
        try {
            checkStartImageHeader(config, 3);
            QFAIL("a missing start image was accepted");
        } catch (const ValidationError& e) {
            QCOMPARE(e.field(), std::string("init"));
            QVERIFY2(QString::fromUtf8(e.what()).startsWith("init: '/nonexistent/start.png': cannot open"), e.what());
        }
    }

    // ---- resampling -----------------------------------------------------------------------

    void constantStaysConstant_data() {
        QTest::addColumn<int>("inW");
        QTest::addColumn<int>("inH");
        QTest::addColumn<int>("outW");
        QTest::addColumn<int>("outH");
        QTest::newRow("same") << 7 << 5 << 7 << 5;
        QTest::newRow("up") << 3 << 5 << 17 << 11;
        QTest::newRow("down") << 40 << 30 << 7 << 9;
        QTest::newRow("down x, up y") << 41 << 3 << 6 << 20;
        QTest::newRow("1x1 to 9x4") << 1 << 1 << 9 << 4;
    }
    void constantStaysConstant() {
        QFETCH(int, inW);
        QFETCH(int, inH);
        QFETCH(int, outW);
        QFETCH(int, outH);
        const Rgb8Image image = makeImage(inW, inH, [](int, int) { return std::array<int, 3>{200, 17, 90}; });
        const ImageTensor t = resampleToModelSpace(image, outW, outH, 3);
        QCOMPARE(t.channels, 3);
        QCOMPARE(t.width, outW);
        QCOMPARE(t.height, outH);
        QCOMPARE(t.data.size(), std::size_t(3) * outW * outH);
        const double want[3] = {200, 17, 90};
        for (int c = 0; c < 3; ++c)
            for (int y = 0; y < outH; ++y)
                for (int x = 0; x < outW; ++x)
                    QVERIFY2(
                        std::abs(level(t, c, x, y) - want[c]) < 1e-3,
                        qPrintable(
                            QStringLiteral("channel %1 at %2,%3: %4").arg(c).arg(x).arg(y).arg(level(t, c, x, y))));
    }

    // A tall, narrow image widened and made shorter is resized columns first (so that only
    // height x its width is held in between; core/sampling/ImageOps.h resizeColumnsFirst): each
    // output row is the area average of its source rows, the same across the row.
    void tallImageWidenedAndShortened() {
        const int inH = 1000, outW = 50, outH = 10;
        const Rgb8Image image = makeImage(1, inH, [](int, int y) { return std::array<int, 3>{y / 4, 255 - y / 4, 7}; });
        const ImageTensor t = resampleToModelSpace(image, outW, outH, 3);
        QCOMPARE(t.width, outW);
        QCOMPARE(t.height, outH);
        for (int y = 0; y < outH; ++y) {
            double mean = 0;  // rows [100 y, 100 y + 100) of the ramp
            for (int i = 100 * y; i < 100 * y + 100; ++i) mean += i / 4;
            mean /= 100;
            for (int x = 0; x < outW; ++x) {
                QVERIFY2(std::abs(level(t, 0, x, y) - mean) < 1e-3,
                         qPrintable(QStringLiteral("red at %1,%2: %3, expected %4")
                                        .arg(x)
                                        .arg(y)
                                        .arg(level(t, 0, x, y))
                                        .arg(mean)));
                QVERIFY(std::abs(level(t, 1, x, y) - (255 - mean)) < 1e-3);
                QVERIFY(std::abs(level(t, 2, x, y) - 7) < 1e-3);
            }
        }
    }

    void upscaledRampStaysRamp() {
        // v(x) = 10 x + 5 at pixel centres. Catmull-Rom reproduces a linear function wherever its
        // four taps are inside the image.
        const int inW = 16, outW = 40;
        const Rgb8Image image = makeImage(inW, 3, [](int x, int) {
            return std::array<int, 3>{10 * x + 5, 10 * x + 5, 250 - 10 * x};
        });
        const ImageTensor t = resampleToModelSpace(image, outW, 3, 3);
        int checked = 0;
        for (int x = 0; x < outW; ++x) {
            const double u = (x + 0.5) * inW / outW - 0.5;  // source coordinate of this output centre
            if (u < 1 || u > inW - 2) continue;
            ++checked;
            QVERIFY2(std::abs(level(t, 0, x, 1) - (10 * u + 5)) < 1e-3,
                     qPrintable(QStringLiteral("x %1: %2 vs %3").arg(x).arg(level(t, 0, x, 1)).arg(10 * u + 5)));
            QVERIFY2(std::abs(level(t, 2, x, 1) - (250 - 10 * u)) < 1e-3, qPrintable(QString::number(x)));
        }
        QVERIFY(checked >= 30);
        // Near the edges the ramp flattens (edge pixels repeat) but stays monotonic.
        for (int x = 1; x < outW; ++x) QVERIFY(level(t, 0, x, 1) >= level(t, 0, x - 1, 1) - 1e-4);
    }

    void downscaledRampIsAreaAverage() {
        // 32 -> 8: every output pixel is the mean of 4 source pixels, exactly the ramp at its centre.
        const Rgb8Image image = makeImage(32, 2, [](int x, int) { return std::array<int, 3>{7 * x + 3, 0, 0}; });
        const ImageTensor t = resampleToModelSpace(image, 8, 2, 3);
        for (int x = 0; x < 8; ++x) {
            const double want = 7 * (4 * x + 1.5) + 3;
            QVERIFY2(std::abs(level(t, 0, x, 0) - want) < 1e-3,
                     qPrintable(QStringLiteral("x %1: %2 vs %3").arg(x).arg(level(t, 0, x, 0)).arg(want)));
        }
        // A non-integer factor (30 -> 7) keeps the ramp within a fraction of one source step.
        const Rgb8Image odd = makeImage(30, 1, [](int x, int) { return std::array<int, 3>{8 * x, 0, 0}; });
        const ImageTensor s = resampleToModelSpace(odd, 7, 1, 3);
        for (int x = 0; x < 7; ++x) {
            const double centre = (x + 0.5) * 30.0 / 7.0 - 0.5;
            QVERIFY2(std::abs(level(s, 0, x, 0) - 8 * centre) < 8 * 0.25, qPrintable(QString::number(x)));
        }
    }

    void twoByTwoToFourByFour() {
        // Catmull-Rom weights of the two source pixels for output centres at source -0.25, 0.25,
        // 0.75, 1.25 (edge pixels repeated), worked out by hand from the kernel:
        const double w[4][2] = {
            {1.0703125, -0.0703125}, {0.796875, 0.203125}, {0.203125, 0.796875}, {-0.0703125, 1.0703125}};
        const double m[2][2] = {{0, 255}, {255, 60}};  // [y][x], red channel; green = 255 - red
        const Rgb8Image image = makeImage(2, 2, [&](int x, int y) {
            const int v = static_cast<int>(m[y][x]);
            return std::array<int, 3>{v, 255 - v, 128};
        });
        const ImageTensor t = resampleToModelSpace(image, 4, 4, 3);
        for (int y = 0; y < 4; ++y)
            for (int x = 0; x < 4; ++x) {
                double v = 0;
                for (int i = 0; i < 2; ++i)
                    for (int j = 0; j < 2; ++j) v += w[y][i] * w[x][j] * m[i][j];
                const double red = std::clamp(v, 0.0, 255.0), green = std::clamp(255.0 - v, 0.0, 255.0);
                QVERIFY2(
                    std::abs(level(t, 0, x, y) - red) < 1e-3,
                    qPrintable(
                        QStringLiteral("red at %1,%2: %3, expected %4").arg(x).arg(y).arg(level(t, 0, x, y)).arg(red)));
                QVERIFY2(std::abs(level(t, 1, x, y) - green) < 1e-3,
                         qPrintable(QStringLiteral("green at %1,%2").arg(x).arg(y)));
                QVERIFY(std::abs(level(t, 2, x, y) - 128) < 1e-3);
            }
        // Spot values: row 1 (weights 0.797/0.203 both ways) and the clamped corner.
        QVERIFY(std::abs(level(t, 0, 1, 0) - std::clamp(1.0703125 * (0.796875 * 0 + 0.203125 * 255) -
                                                            0.0703125 * (0.796875 * 255 + 0.203125 * 60),
                                                        0.0, 255.0)) < 1e-3);
        QCOMPARE(level(t, 0, 0, 0), 0.0);  // undershoot clamped
    }

    void fourByFourToTwoByTwoAveragesBlocks() {
        const int v[4][4] = {{0, 10, 200, 220}, {20, 30, 240, 250}, {1, 2, 3, 4}, {5, 6, 7, 8}};
        const Rgb8Image image = makeImage(4, 4, [&](int x, int y) { return std::array<int, 3>{v[y][x], 0, 0}; });
        const ImageTensor t = resampleToModelSpace(image, 2, 2, 3);
        QVERIFY(std::abs(level(t, 0, 0, 0) - 15.0) < 1e-3);
        QVERIFY(std::abs(level(t, 0, 1, 0) - 227.5) < 1e-3);
        QVERIFY(std::abs(level(t, 0, 0, 1) - 3.5) < 1e-3);
        QVERIFY(std::abs(level(t, 0, 1, 1) - 5.5) < 1e-3);
    }

    void oneChannelIsMeanOfRgb() {
        const Rgb8Image image = makeImage(2, 1, [](int x, int) {
            return x ? std::array<int, 3>{255, 0, 0} : std::array<int, 3>{30, 60, 90};
        });
        const ImageTensor t = resampleToModelSpace(image, 2, 1, 1);
        QCOMPARE(t.channels, 1);
        QVERIFY(std::abs(level(t, 0, 0, 0) - 60.0) < 1e-3);
        QVERIFY(std::abs(level(t, 0, 1, 0) - 85.0) < 1e-3);
    }

    void badResampleArguments() {
        const Rgb8Image image = makeImage(2, 2, [](int, int) { return std::array<int, 3>{0, 0, 0}; });
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, resampleToModelSpace(image, 4, 4, 4));
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, resampleToModelSpace(image, 0, 4, 3));
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, resampleToModelSpace(Rgb8Image{}, 4, 4, 3));
        Rgb8Image wrongSize = image;
        wrongSize.pixels.pop_back();
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, resampleToModelSpace(wrongSize, 4, 4, 3));
    }

    void loadJpegToRunSize() {
        const ImageTensor t = loadInitImage(fixture("quadrants.jpg"), 40, 24, 3);
        QCOMPARE(t.channels, 3);
        QCOMPARE(t.width, 40);
        QCOMPARE(t.height, 24);
        // Deep inside the red and the white quadrant.
        QVERIFY(std::abs(level(t, 0, 5, 4) - 255) < 5 && level(t, 1, 5, 4) < 5 && level(t, 2, 5, 4) < 5);
        for (int c = 0; c < 3; ++c) QVERIFY(std::abs(level(t, c, 35, 20) - 255) < 5);
    }

    // ---- tessera-cli render --init --------------------------------------------------------

    void cliRenderWithInitOfAnotherSize() {
        const QString model = QStringLiteral(TESSERA_TEST_DATA "/models/cifar_like");
        if (!QFileInfo::exists(model + "/config.json")) QSKIP("tests/data/models/cifar_like is missing");
        QVERIFY2(QFileInfo::exists(QStringLiteral(TESSERA_BINARY_DIR "/app/tessera-cli")), "build tessera-cli first");
        const QString init = kImages + "quadrants.jpg";  // 16x16 JPEG; the run is 48x40
        const QStringList common{"render", "--model",   model,       "--width", "48",      "--height", "40",
                                 "--tile", "32",        "--overlap", "16",      "--steps", "4",        "--batch",
                                 "2",      "--backend", "cpu",       "--seed",  "5"};

        QTemporaryDir plainDir, initDir, zeroDir;
        const CliRun plain = runCli(common + QStringList{"--out", plainDir.path()});
        QVERIFY2(plain.exitCode == 0, qPrintable(describe(plain)));
        const CliRun withInit =
            runCli(common + QStringList{"--init", init, "--strength", "0.5", "--out", initDir.path()});
        QVERIFY2(withInit.exitCode == 0, qPrintable(describe(withInit)));
        QVERIFY2(withInit.err.contains("is 16x16, resized to 48x40 (stretched"), qPrintable(describe(withInit)));

        const Rgb8Image a = renderedImage(plainDir.path()), b = renderedImage(initDir.path());
        QCOMPARE(a.width, 48);
        QCOMPARE(b.width, 48);
        QCOMPARE(b.height, 40);
        long long differing = 0;
        for (std::size_t i = 0; i < a.pixels.size(); ++i) differing += a.pixels[i] != b.pixels[i];
        QVERIFY2(differing > static_cast<long long>(a.pixels.size() / 4),
                 qPrintable(QStringLiteral("only %1 of %2 values differ from the run without --init")
                                .arg(differing)
                                .arg(a.pixels.size())));

        // A strength under one step (0.1 of 4 steps) denoises nothing: the PNG is the resampled
        // start image itself, which pins the CLI's decode + resize to loadInitImage's.
        const CliRun zero = runCli(common + QStringList{"--init", init, "--strength", "0.1", "--out", zeroDir.path()});
        QVERIFY2(zero.exitCode == 0, qPrintable(describe(zero)));
        const Rgb8Image start = toRgb8(loadInitImage(init.toStdString(), 48, 40, 3));
        const Rgb8Image got = renderedImage(zeroDir.path());
        QCOMPARE(got.width, 48);
        QVERIFY2(got.pixels == start.pixels, "strength 0.1 output differs from the resampled start image");
    }

    // Files that claim more than they hold are refused from the header, before libpng allocates
    // what they claim (fuzz findings, tests/fuzz/corpus/fuzz_png_read/huge_*.png).
    void readPngRefusesHugeClaims_data() {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QString>("expected");
        QTest::newRow("100000x100000 pixels") << "huge_header.png"
                                              << "Invalid IHDR data";
        QTest::newRow("1.9 GB text chunk") << "huge_text_chunk.png"
                                           << "claims 1935998995 bytes";
    }
    void readPngRefusesHugeClaims() {
        QFETCH(QString, file);
        QFETCH(QString, expected);
        const std::string path = TESSERA_SOURCE_DIR "/tests/fuzz/corpus/fuzz_png_read/" + file.toStdString();
        QVERIFY2(QFileInfo::exists(QString::fromStdString(path)), path.c_str());
        QElapsedTimer clock;
        clock.start();
        try {
            (void)readPng(path);
            QFAIL("accepted");
        } catch (const PngError& e) {
            QVERIFY2(std::string(e.what()).find(expected.toStdString()) != std::string::npos, e.what());
            QVERIFY2(std::string(e.what()).size() < 600, e.what());
        }
        QVERIFY2(clock.elapsed() < 2000, qPrintable(QString::number(clock.elapsed()) + " ms"));
    }

    // The start-image reader (libpng's simplified API) must not allocate a text chunk's claimed
    // 1.7 GB (a file the fuzzer found, kept as a seed).
    void decodeRefusesOverlongTextChunk() {
        const std::string path = TESSERA_SOURCE_DIR "/tests/fuzz/corpus/fuzz_init_image/huge_text_chunk_oom.png";
        QElapsedTimer clock;
        clock.start();
        try {
            (void)decodeImageFile(path);
            QFAIL("accepted");
        } catch (const InitImageError& e) {
            QVERIFY2(std::string(e.what()).find("claims 1767135348 bytes") != std::string::npos, e.what());
        }
        QVERIFY2(clock.elapsed() < 2000, qPrintable(QString::number(clock.elapsed()) + " ms"));
    }

    void cliRefusesUnreadableInit() {
        const QString model = QStringLiteral(TESSERA_TEST_DATA "/models/cifar_like");
        if (!QFileInfo::exists(model + "/config.json")) QSKIP("tests/data/models/cifar_like is missing");
        QTemporaryDir dir;
        const QString bad = dir.filePath("notes.png");
        QFile file(bad);
        QVERIFY(file.open(QIODevice::WriteOnly));
        file.write("not an image");
        file.close();
        const CliRun r = runCli({"render", "--model", model, "--width", "32", "--height", "32", "--tile", "32",
                                 "--steps", "1", "--backend", "cpu", "--init", bad, "--out", dir.path()});
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("init: '" + bad + "' is neither a PNG nor a JPEG file"), qPrintable(describe(r)));
    }
};

QTEST_GUILESS_MAIN(TestInitImage)
#include "tst_initimage.moc"
