// PNG text chunks as A1111 and ComfyUI write them (tEXt Latin-1, iTXt UTF-8, zTXt), read with
// bounded memory, and tessera-cli's --params-from: the settings of an A1111, ComfyUI or Tessera
// PNG applied to a run, with what it cannot apply named on stderr.
#include <QtTest/QtTest>

#include <QDir>
#include <QFile>
#include <QRegularExpression>
#include <QTemporaryDir>

#include <string>

#include <sys/stat.h>
#include <zlib.h>

#include "app/cli/CliOptions.h"
#include "app/cli/PngIO.h"
#include "core/run/Infotext.h"
#include "tests/app/CliRun.h"

using namespace tessera;
using tessera::testing::CliRun;
using tessera::testing::describe;
using namespace std::string_literals;

namespace {

// Enums are compared by value: QTest's own toString would find tessera::toString by ADL.
template <typename E>
int n(E value) {
    return static_cast<int>(value);
}

std::string be32(std::uint32_t v) { return {char(v >> 24), char(v >> 16), char(v >> 8), char(v)}; }

// One PNG chunk: length, type, data, CRC.
std::string chunk(const std::string& type, const std::string& data) {
    const std::string typed = type + data;
    const auto crc = static_cast<std::uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(typed.data()), static_cast<uInt>(typed.size())));
    return be32(static_cast<std::uint32_t>(data.size())) + typed + be32(crc);
}

std::string deflated(const std::string& data) {
    uLongf size = compressBound(static_cast<uLong>(data.size()));
    std::string out(size, '\0');
    compress2(reinterpret_cast<Bytef*>(out.data()), &size, reinterpret_cast<const Bytef*>(data.data()),
              static_cast<uLong>(data.size()), 9);
    out.resize(size);
    return out;
}

// A 1x1 RGB PNG with `texts` (whole chunks) before its pixels, as Pillow and ComfyUI write them.
std::string pngWith(const std::string& texts) {
    const std::string ihdr = be32(1) + be32(1) + std::string("\x08\x02\x00\x00\x00", 5);
    return std::string("\x89PNG\r\n\x1a\n", 8) + chunk("IHDR", ihdr) + texts +
           chunk("IDAT", deflated(std::string("\x00\x10\x20\x30", 4))) + chunk("IEND", "");
}

std::string tEXt(const std::string& key, const std::string& latin1) { return chunk("tEXt", key + '\0' + latin1); }

void writeFile(const QString& path, const std::string& bytes) {
    QFile file(path);
    QVERIFY(file.open(QIODevice::WriteOnly));
    QCOMPARE(file.write(bytes.data(), static_cast<qint64>(bytes.size())), static_cast<qint64>(bytes.size()));
}

std::string readFile(const QString& path) {
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly)) return {};
    return file.readAll().toStdString();
}

Rgb8Image tinyImage() {
    Rgb8Image image;
    image.width = 2;
    image.height = 2;
    image.pixels.assign(12, 100);
    return image;
}

// ComfyUI's default text-to-image graph (its "prompt" chunk).
const char* const kComfyGraph = R"({"3": {"inputs": {"seed": 156680208700286, "steps": 20, "cfg": 8,
  "sampler_name": "euler", "scheduler": "normal", "denoise": 1, "model": ["4", 0], "positive": ["6", 0],
  "negative": ["7", 0], "latent_image": ["5", 0]}, "class_type": "KSampler"},
 "4": {"inputs": {"ckpt_name": "v1-5-pruned-emaonly.safetensors"}, "class_type": "CheckpointLoaderSimple"},
 "5": {"inputs": {"width": 512, "height": 768, "batch_size": 1}, "class_type": "EmptyLatentImage"},
 "6": {"inputs": {"text": "beautiful scenery", "clip": ["4", 1]}, "class_type": "CLIPTextEncode"},
 "7": {"inputs": {"text": "text, watermark", "clip": ["4", 1]}, "class_type": "CLIPTextEncode"}})";

const char* const kA1111Text =
    "a caf\xC3\xA9 at dusk, (golden light:1.2)\nNegative prompt: blurry\n"
    "Steps: 30, Sampler: DPM++ 2M Karras, CFG scale: 6, Seed: 77, Size: 256x192, Model hash: 6ce0161689, "
    "Clip skip: 2, Hires upscale: 2, Version: v1.6.0";

}  // namespace

class TestPngParams : public QObject {
    Q_OBJECT

private slots:
    // Pillow's rule: Latin-1 text as tEXt (in Latin-1 bytes), anything else as uncompressed iTXt;
    // `international` chunks as iTXt, compressed above 1 KiB. Every form reads back as UTF-8.
    void textChunkStorageAsPillow() {
        QTemporaryDir dir;
        const std::string latin1 = "caf\xC3\xA9 \xC2\xB1 plain";  // é ±: Latin-1 characters
        const std::string cjk = "\xE7\x8C\xAB \xE2\x98\x95 cat";  // 猫 ☕: not Latin-1
        const std::string manifest = std::string(3000, 'm') + " \xE2\x82\xAC";
        const QString path = dir.filePath("texts.png");
        writePng(path.toStdString(), tinyImage(),
                 {{"parameters", latin1, false}, {"Comment", cjk, false}, {"tessera-manifest", manifest, true}});
        const std::string bytes = readFile(path);
        QVERIFY(bytes.find("tEXtparameters\0caf\xE9 \xB1 plain"s) != std::string::npos);  // Latin-1 bytes
        QVERIFY(bytes.find("iTXtComment\0\0\0"s) != std::string::npos);                   // iTXt, uncompressed
        QVERIFY(bytes.find("iTXttessera-manifest\0\1\0"s) != std::string::npos);          // iTXt, compressed
        const PngFile back = readPng(path.toStdString());
        QCOMPARE(back.text("parameters"), latin1);
        QCOMPARE(back.text("Comment"), cjk);
        QCOMPARE(back.text("tessera-manifest"), manifest);
        QVERIFY(!back.texts[0].international);
        QVERIFY(back.texts[1].international);
    }

    // Foreign chunks: zTXt and tEXt hold Latin-1 (given back as UTF-8), an iTXt with bytes that
    // are not UTF-8 is escaped. Old code returned the raw Latin-1 byte (invalid UTF-8).
    void foreignTextChunksReadAsUtf8() {
        QTemporaryDir dir;
        const QString path = dir.filePath("foreign.png");
        writeFile(path, pngWith(tEXt("parameters", "caf\xE9") +
                                chunk("zTXt", std::string("Comment\0\0", 9) + deflated("na\xEFve \xB5")) +
                                chunk("iTXt", std::string("Title\0\0\0\0\0", 10) + "bad \xFF byte")));
        const PngFile png = readPng(path.toStdString());
        QCOMPARE(png.text("parameters"), std::string("caf\xC3\xA9"));
        QCOMPARE(png.text("Comment"), std::string("na\xC3\xAFve \xC2\xB5"));
        QCOMPARE(png.text("Title"), std::string("bad \\xFF byte"));
    }

    // A few KB of zTXt may inflate to gigabytes: libpng's allocations for one file are bounded
    // (256 MiB), so six 60 MiB texts are not all kept. Old code kept all 360 MiB.
    void compressedTextIsBounded() {
        const std::string bomb = deflated(std::string(60u << 20, 'a'));
        QVERIFY(bomb.size() < 100000);
        std::string texts;
        for (int i = 0; i < 6; ++i) texts += chunk("zTXt", "Bomb" + std::to_string(i) + std::string("\0\0", 2) + bomb);
        QTemporaryDir dir;
        const QString path = dir.filePath("bomb.png");
        writeFile(path, pngWith(texts));
        try {
            const PngFile png = readPng(path.toStdString());
            std::size_t total = 0;
            for (const PngTextChunk& t : png.texts) total += t.text.size();
            qInfo("read %zu text chunks, %zu MiB of text", png.texts.size(), total >> 20);
            QVERIFY2(total <= (256u << 20), std::to_string(total).c_str());
            QVERIFY(png.texts.size() < 6);
        } catch (const PngError& e) {
            qInfo("refused: %s", e.what());  // refusing the file is bounded too
        }
        // One text over the 64 MiB per-chunk limit is dropped, the image still read.
        writeFile(path, pngWith(chunk("zTXt", std::string("Big\0\0", 5) + deflated(std::string(70u << 20, 'b')))));
        const PngFile png = readPng(path.toStdString());
        QCOMPARE(png.image.width, 1);
        QCOMPARE(png.text("Big"), std::string());
    }

    // A FIFO given as a PNG is refused without waiting for a writer.
    void fifoIsRefusedWithoutBlocking() {
        QTemporaryDir dir;
        const std::string fifo = dir.filePath("fifo.png").toStdString();
        QCOMPARE(::mkfifo(fifo.c_str(), 0600), 0);
        try {
            readPng(fifo);
            QFAIL("a FIFO was read");
        } catch (const PngError& e) {
            QVERIFY2(std::string(e.what()).find("is not a regular file") != std::string::npos, e.what());
        }
    }

    // ---- --params-from ----

    void paramsFromA1111Png() {
        QTemporaryDir dir;
        const QString path = dir.filePath("a1111.png");
        writePng(path.toStdString(), tinyImage(), {{"parameters", kA1111Text, false}});
        const CliOptions o = parseCliOptions({"render", "--params-from", path.toStdString(), "--steps", "5"});
        QCOMPARE(o.config.prompt, std::string("a caf\xC3\xA9 at dusk, (golden light:1.2)"));
        QCOMPARE(o.config.negativePrompt, std::string("blurry"));
        QCOMPARE(o.config.steps, 5);  // the flag wins
        QCOMPARE(n(o.config.scheduler), n(SchedulerKind::DPMPP2M));
        QVERIFY(o.config.schedulerOptions.karrasSigmas);
        QCOMPARE(o.config.cfgScale, 6.0);
        QCOMPARE(o.config.seed, std::uint64_t{77});
        QCOMPARE(o.config.width, 256);
        QCOMPARE(o.config.height, 192);
        QCOMPARE(o.config.clipSkip, 2);
        for (const char* field :
             {"prompt", "negative_prompt", "steps", "scheduler", "cfg", "seed", "width", "height", "clip_skip"})
            QVERIFY2(o.fieldsGiven.count(field), field);
        const std::vector<std::string> notes{
            "params-from: 'Model hash: 6ce0161689' is not applied: Tessera picks the model by its path",
            "params-from: 'Hires upscale: 2' is not supported; ignored"};
        QCOMPARE(o.paramsFromNotes, notes);

        // After a preset, before the flags.
        const QString preset = dir.filePath("preset.json");
        writeFile(preset, R"({"seed": 1, "tile": 32, "cfg": 3})");
        const CliOptions p = parseCliOptions(
            {"plan", "--cfg", "9", "--params-from", path.toStdString(), "--preset", preset.toStdString()});
        QCOMPARE(p.config.seed, std::uint64_t{77});
        QCOMPARE(p.config.tile, 32);
        QCOMPARE(p.config.cfgScale, 9.0);

        // As a user runs it: the notes on stderr, exit 0.
        const CliRun r = tessera::testing::runCli({"plan", "--params-from", path, "--tile", "64"});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        QVERIFY2(r.out.contains("256 x 192 px"), qPrintable(r.out));
        QVERIFY2(r.err.contains("params-from: 'Hires upscale: 2' is not supported; ignored\n"), qPrintable(r.err));
    }

    // A number its setting cannot take is not applied, whatever its size, and the note says the
    // range: Steps 2147483648 was "not a whole number" and ran 20 steps while Steps 1000000000
    // was refused; both are now the same note, and the run keeps the steps it had.
    void paramsFromNumbersOutOfRange() {
        QTemporaryDir dir;
        const QString path = dir.filePath("steps.png");
        for (const std::string steps : {"2147483648", "1000000000", "-1", "99999999999999999999999"}) {
            writeFile(path, pngWith(tEXt("parameters", "a cat\nSteps: " + steps + ", Seed: 4, Size: 64x64")));
            const CliOptions o = parseCliOptions({"plan", "--params-from", path.toStdString()});
            QCOMPARE(o.config.steps, RunConfig{}.steps);
            const std::vector<std::string> notes{"params-from: 'Steps: " + steps +
                                                 "' is out of range, allowed 1 to 1000; ignored"};
            QCOMPARE(o.paramsFromNotes, notes);
            QVERIFY(o.fieldsGiven.count("steps") == 0);
        }
        const CliRun r = tessera::testing::runCli({"plan", "--params-from", path, "--steps", "5"});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        QVERIFY2(r.err.contains("params-from: 'Steps: 99999999999999999999999' is out of range, allowed 1 to 1000; "
                                "ignored\n"),
                 qPrintable(r.err));
        // On the command line the same number is refused, with the same range (exit 2).
        const CliRun flag = tessera::testing::runCli({"plan", "--steps", "2147483648"});
        QCOMPARE(flag.exitCode, 2);
        QVERIFY2(flag.err.contains("steps: '2147483648' is out of range; allowed 1 to 1000"), qPrintable(flag.err));
    }

    void paramsFromComfyUiPng() {
        QTemporaryDir dir;
        const QString path = dir.filePath("comfy.png");
        // As ComfyUI's Save Image writes it: "prompt" (API graph) and "workflow" (editor graph), tEXt.
        writeFile(path, pngWith(tEXt("prompt", kComfyGraph) + tEXt("workflow", R"({"nodes": []})")));
        const CliOptions o = parseCliOptions({"render", "--params-from", path.toStdString()});
        QCOMPARE(o.config.prompt, std::string("beautiful scenery"));
        QCOMPARE(o.config.negativePrompt, std::string("text, watermark"));
        QCOMPARE(o.config.seed, std::uint64_t{156680208700286});
        QCOMPARE(o.config.steps, 20);
        QCOMPARE(o.config.cfgScale, 8.0);
        QCOMPARE(n(o.config.scheduler), n(SchedulerKind::Euler));
        QVERIFY(!o.config.schedulerOptions.karrasSigmas);
        QCOMPARE(o.config.width, 512);
        QCOMPARE(o.config.height, 768);
        const std::vector<std::string> notes{
            "params-from: 'ckpt_name: v1-5-pruned-emaonly.safetensors' is not applied: Tessera picks the model by its "
            "path"};
        QCOMPARE(o.paramsFromNotes, notes);
        // A "parameters" chunk is read first.
        writeFile(path, pngWith(tEXt("prompt", kComfyGraph) + tEXt("parameters", "x\nSteps: 3, Seed: 4, Size: 64x64")));
        QCOMPARE(parseCliOptions({"plan", "--params-from", path.toStdString()}).config.steps, 3);
    }

    void paramsFromBadFiles_data() {
        QTest::addColumn<QString>("name");
        QTest::addColumn<QByteArray>("bytes");
        QTest::addColumn<QString>("message");
        QTest::newRow("missing") << "missing.png" << QByteArray() << "cannot open";
        QTest::newRow("not a PNG") << "text.png" << QByteArray("Steps: 20, Sampler: Euler") << "not a PNG file";
        QTest::newRow("no settings") << "bare.png" << QByteArray::fromStdString(pngWith(tEXt("Comment", "hello")))
                                     << "has no 'parameters' text chunk (A1111, Tessera) and no 'prompt' chunk";
        QTest::newRow("bad ComfyUI JSON")
            << "comfy.png" << QByteArray::fromStdString(pngWith(tEXt("prompt", "{\"3\": [")))
            << "its ComfyUI prompt chunk";
        QTest::newRow("deep ComfyUI JSON")
            << "deep.png" << QByteArray::fromStdString(pngWith(tEXt("prompt", std::string(5000, '['))))
            << "its ComfyUI prompt chunk";
        QTest::newRow("truncated") << "cut.png"
                                   << QByteArray::fromStdString(pngWith(tEXt("parameters", "x")).substr(0, 50))
                                   << "truncated or corrupt";
    }
    void paramsFromBadFiles() {
        QFETCH(QString, name);
        QFETCH(QByteArray, bytes);
        QFETCH(QString, message);
        QTemporaryDir dir;
        const QString path = dir.filePath(name);
        if (!bytes.isEmpty()) writeFile(path, bytes.toStdString());
        const CliRun r = tessera::testing::runCli({"plan", "--params-from", path});
        QVERIFY2(r.exitCode == 2, qPrintable(describe(r)));
        QVERIFY2(r.err.startsWith("tessera-cli: params-from: "), qPrintable(r.err));
        QVERIFY2(r.err.contains(message), qPrintable(r.err));
        QVERIFY2(r.err.contains(name), qPrintable(r.err));  // names the file
    }

    // render writes the new infotext, with the model's hash; --params-from reads its settings back.
    void renderInfotextRoundTrip() {
        const QString model = QStringLiteral(TESSERA_TEST_DATA "/models/cifar_like");
        if (!QFileInfo::exists(model + "/config.json")) QSKIP("tests/data/models/cifar_like is not there");
        QTemporaryDir out;
        const CliRun r = tessera::testing::runCli(
            {"render",    "--model",  model,     "--width", "40",      "--height", "32",        "--tile", "32",
             "--overlap", "8",        "--steps", "2",       "--batch", "2",        "--backend", "cpu",    "--seed",
             "11",        "--window", "linear",  "--eta",   "0.5",     "--out",    out.path()},
            600000);
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        const QStringList pngs = QDir(out.path()).entryList({"*.png"}, QDir::Files);
        QCOMPARE(pngs.size(), 1);
        const std::string png = out.filePath(pngs.front()).toStdString();
        const std::string parameters = readPng(png).text("parameters");
        QVERIFY2(QString::fromStdString(parameters)
                     .contains(QRegularExpression(
                         "^Steps: 2, Sampler: DDIM, Schedule type: Automatic, Seed: 11, Size: 40x32, Model hash: "
                         "[0-9a-f]{10}, Model: cifar_like, Tile: 32, Overlap: 8, Window: "
                         "linear, .*, Eta DDIM: 0.5, Version: tessera-")),
                 parameters.c_str());
        const CliOptions back = parseCliOptions({"render", "--params-from", png});
        QCOMPARE(back.config.steps, 2);
        QCOMPARE(back.config.seed, std::uint64_t{11});
        QCOMPARE(back.config.width, 40);
        QCOMPARE(back.config.height, 32);
        QCOMPARE(back.config.tile, 32);
        QCOMPARE(back.config.overlapPx, 8);
        QCOMPARE(n(back.config.window), n(BlendWindowKind::Linear));
        QCOMPARE(back.config.tileBatch, 2);
        QCOMPARE(n(back.config.backend), n(BackendKind::CPU));
        QCOMPARE(back.config.schedulerOptions.eta, 0.5f);
        QCOMPARE(back.paramsFromNotes.size(), std::size_t{2});  // Model hash, Model: reported only
    }
};

QTEST_GUILESS_MAIN(TestPngParams)
#include "tst_pngparams.moc"
