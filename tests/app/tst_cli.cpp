// tessera-cli as a user runs it (through QProcess), its option parser, and PNG IO.
#include <QtTest/QtTest>

#include <sys/types.h>
#include <QDir>
#include <QElapsedTimer>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <csignal>

#include "app/cli/CliOptions.h"
#include "app/cli/EngineFactory.h"
#include "app/cli/PngIO.h"
#include "core/base/Sha256.h"
#include "core/run/RunConfigFields.h"
#include "tests/app/CliRun.h"
#include "tests/core/SingleFileTestSupport.h"

using namespace tessera;
using tessera::testing::CliRun;
using tessera::testing::describe;

namespace {

CliRun runCli(const QStringList& args, int timeoutMs = 120000) { return tessera::testing::runCli(args, timeoutMs); }

QString presetPath(const char* name) {
    return QStringLiteral(TESSERA_SOURCE_DIR "/resources/presets/") + QLatin1String(name);
}

}  // namespace

class TestCli : public QObject {
    Q_OBJECT

private slots:
    // Ctrl-C (here SIGINT) during a render: the run stops between tile batches, says
    // "cancelled", still writes its (partial) outputs, and exits 1 — not killed mid-write.
    void interruptCancelsRender() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        QProcess process;
        process.start(QStringLiteral(TESSERA_BINARY_DIR "/app/tessera-cli"),
                      {"render",    "--model",  TESSERA_TEST_DATA "/models/cifar_like",
                       "--backend", "cpu",      "--width",
                       "256",       "--height", "256",
                       "--tile",    "32",       "--overlap",
                       "8",         "--batch",  "1",
                       "--steps",   "50",       "--precision",
                       "fp32",      "--out",    dir.path()});
        QVERIFY(process.waitForStarted());
        QString err;
        QElapsedTimer clock;
        clock.start();
        while (!err.contains(QStringLiteral("step 1/50")) && clock.elapsed() < 60000) {
            process.waitForReadyRead(200);
            err += QString::fromUtf8(process.readAllStandardError());
        }
        QVERIFY2(err.contains(QStringLiteral("step 1/50")), qPrintable(err));
        ::kill(static_cast<pid_t>(process.processId()), SIGINT);
        QVERIFY(process.waitForFinished(60000));
        const QString out = QString::fromUtf8(process.readAllStandardOutput());
        err += QString::fromUtf8(process.readAllStandardError());
        QCOMPARE(process.exitStatus(), QProcess::NormalExit);
        QVERIFY2(process.exitCode() == 1, qPrintable(out + err));
        QVERIFY2(out.startsWith(QStringLiteral("cancelled: ")), qPrintable(out));
        QVERIFY2(!err.contains(QStringLiteral("step 50/50")), qPrintable(err));
        QCOMPARE(QDir(dir.path()).entryList({QStringLiteral("*.png")}, QDir::Files).size(), 1);
        QCOMPARE(QDir(dir.path()).entryList({QStringLiteral("*.json")}, QDir::Files).size(), 1);
    }

    void binaryExists() {
        QVERIFY2(QFileInfo::exists(QStringLiteral(TESSERA_BINARY_DIR "/app/tessera-cli")),
                 "build the tessera-cli target first");
    }

    // tessera-cli links no Qt (app/CMakeLists.txt: tessera_cli_core), so a bare GPU server needs
    // no Qt, ICU or fontconfig for it: no libQt6 name in its dynamic section (nor anywhere else).
    void linksNoQt() {
        QFile binary(QStringLiteral(TESSERA_BINARY_DIR "/app/tessera-cli"));
        QVERIFY2(binary.open(QIODevice::ReadOnly), "build the tessera-cli target first");
        const QByteArray bytes = binary.readAll();
        QVERIFY(
            bytes.startsWith("\x7f"
                             "ELF"));
        for (const char* library : {"libQt6Core.so", "libQt6Gui.so", "libQt6Widgets.so", "libicu", "libfontconfig"})
            QVERIFY2(!bytes.contains(library), library);
        QVERIFY2(bytes.contains("libspdlog.so"), "the check reads the dynamic section's names");
    }

    void version() {
        const CliRun r = runCli({"--version"});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        QVERIFY2(r.out.startsWith(QStringLiteral("tessera-cli " TESSERA_VERSION)), qPrintable(describe(r)));
    }

    void helpForEverySubcommand_data() {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("usage");
        QTest::newRow("none") << QStringList{} << "Usage: tessera-cli <command>";
        QTest::newRow("--help") << QStringList{"--help"} << "Usage: tessera-cli <command>";
        QTest::newRow("plan") << QStringList{"plan", "--help"} << "Usage: tessera-cli plan";
        QTest::newRow("render") << QStringList{"render", "--help"} << "Usage: tessera-cli render";
        QTest::newRow("info") << QStringList{"info", "-h"} << "Usage: tessera-cli info";
    }
    void helpForEverySubcommand() {
        QFETCH(QStringList, args);
        QFETCH(QString, usage);
        const CliRun r = runCli(args);
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        QVERIFY2(r.out.startsWith(usage), qPrintable(describe(r)));
        if (!args.isEmpty() && args.front() != "--help")
            for (const char* option : {"--width", "--overlap", "--window", "--fusion", "--batch", "--graphs",
                                       "--preset", "--model", "--out", "--backend", "--strength"})
                QVERIFY2(r.out.contains(QLatin1String(option)), option);
    }

    void planPrintsTheGrid() {
        const CliRun r = runCli({"plan", "--width", "1024", "--height", "1024", "--tile", "64", "--overlap", "16"});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        // 1 + ceil((1024 - 64) / 48) = 21 tiles per axis.
        QVERIFY2(r.out.contains("21 cols x 21 rows"), qPrintable(r.out));
        QVERIFY2(r.out.contains(QRegularExpression("tile\\s+64 x 64 px")), qPrintable(r.out));
        QVERIFY2(r.out.contains(QRegularExpression("stride\\s+48 px")), qPrintable(r.out));
        QVERIFY2(r.out.contains(QRegularExpression("overlap\\s+16 px")), qPrintable(r.out));
        QVERIFY2(r.out.contains(QRegularExpression("tiles\\s+441\\n")), qPrintable(r.out));
        // 441 * 64^2 / 1024^2
        QVERIFY2(r.out.contains(QRegularExpression("redundancy\\s+1\\.723")), qPrintable(r.out));
        QVERIFY2(r.out.contains("441 per step, 8820 total (20 steps)"), qPrintable(r.out));
    }

    void planWithPercentOverlapAndPreset() {
        CliRun r = runCli({"plan", "--tile", "128", "--overlap", "25%", "--width", "512", "--height", "256"});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        QVERIFY2(r.out.contains(QRegularExpression("overlap\\s+32 px")), qPrintable(r.out));
        QVERIFY2(r.out.contains("5 cols x 3 rows"), qPrintable(r.out));

        // The preset sets 256x256 / tile 64 / batch 13; a flag after it overrides the width.
        r = runCli({"plan", "--preset", presetPath("quick-cpu.json"), "--width", "320"});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        QVERIFY2(r.out.contains("320 x 256 px"), qPrintable(r.out));
        QVERIFY2(r.out.contains(QRegularExpression("batch\\s+13 tiles")), qPrintable(r.out));
        // Flags win over the preset whatever their order.
        r = runCli({"plan", "--steps", "3", "--preset", presetPath("quick-cpu.json")});
        QVERIFY2(r.out.contains("(3 steps)"), qPrintable(describe(r)));
    }

    void planTakesAStableDiffusionModel() {
        // plan takes every SD model render takes, with render's checks, and says what guidance
        // doubles.
        const QString model = QStringLiteral(TESSERA_TEST_DATA "/sdpipeline/sd1");
        CliRun r = runCli({"plan", "--model", model, "--width", "1536", "--height", "1024", "--tile", "512",
                           "--overlap", "64", "--cfg", "7", "--steps", "20"});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        QVERIFY2(r.out.contains("4 cols x 3 rows"), qPrintable(r.out));
        QVERIFY2(r.out.contains("latent       192 x 128, tiles of 64 x 64"), qPrintable(r.out));
        QVERIFY2(r.out.contains("cfg 7.0: each tile evaluated twice"), qPrintable(r.out));
        r = runCli({"plan", "--model", "random:sdxl", "--cfg", "1", "--width", "2048", "--height", "2048", "--tile",
                    "1024", "--overlap", "128"});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        QVERIFY2(r.out.contains("cfg 1: the conditional row only"), qPrintable(r.out));
        // Render's checks: a size that is not a multiple of 8 is refused, naming the field.
        r = runCli({"plan", "--model", model, "--width", "1001", "--height", "512", "--tile", "512"});
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("width"), qPrintable(describe(r)));
        // render checks the same before it loads anything: random:sdxl would draw 14 GB of weights first.
        QElapsedTimer clock;
        clock.start();
        r = runCli({"render", "--model", "random:sdxl", "--width", "1001", "--height", "512", "--tile", "512",
                    "--backend", "cpu", "--out", QDir::temp().filePath(QStringLiteral("tessera-never-written"))});
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("width: 1001 is not a multiple of 8"), qPrintable(describe(r)));
        QVERIFY2(clock.elapsed() < 20000, qPrintable(QString::number(clock.elapsed())));
    }

    void everyPresetParses() {
        for (const char* name : {"quick-cpu.json", "2k-gpu.json", "4k-gpu-lowmem.json"}) {
            const CliRun r = runCli({"plan", "--preset", presetPath(name)});
            QVERIFY2(r.exitCode == 0, qPrintable(QLatin1String(name) + "\n" + describe(r)));
        }
    }

    void badInputExitsTwoNamingTheField_data() {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("field");
        QTest::newRow("tile 0") << QStringList{"plan", "--tile", "0"} << "tile:";
        QTest::newRow("tile not multiple") << QStringList{"plan", "--tile", "60"} << "tile:";
        QTest::newRow("width text") << QStringList{"plan", "--width", "abc"} << "width:";
        QTest::newRow("height negative") << QStringList{"plan", "--height", "-5"} << "height:";
        QTest::newRow("overlap too big") << QStringList{"plan", "--tile", "64", "--overlap", "64"} << "overlap:";
        QTest::newRow("overlap percent") << QStringList{"plan", "--overlap", "150%"} << "overlap:";
        QTest::newRow("scheduler") << QStringList{"plan", "--scheduler", "dpm2_a"} << "scheduler:";
        QTest::newRow("window") << QStringList{"render", "--window", "cosine"} << "window:";
        QTest::newRow("fusion") << QStringList{"plan", "--fusion", "latent"} << "fusion:";
        QTest::newRow("sdxl size conditioning") << QStringList{"plan", "--sdxl-size-conditioning", "crop"}
                                                << "sdxl_size_conditioning: 'crop' is not one of image or tile";
        QTest::newRow("batch") << QStringList{"plan", "--batch", "1025"} << "batch:";
        QTest::newRow("graphs") << QStringList{"plan", "--graphs", "always"} << "graphs:";
        QTest::newRow("precision") << QStringList{"plan", "--precision", "int8"} << "precision:";
        QTest::newRow("backend") << QStringList{"plan", "--backend", "metal"} << "backend:";
        QTest::newRow("threads negative") << QStringList{"plan", "--threads", "-2"} << "threads:";
        QTest::newRow("threads text") << QStringList{"plan", "--threads", "all"} << "threads:";
        QTest::newRow("vae tiling") << QStringList{"plan", "--vae-tiling", "sometimes"} << "vae_tiling:";
        QTest::newRow("seed") << QStringList{"plan", "--seed", "-1"} << "seed:";
        QTest::newRow("steps") << QStringList{"plan", "--steps", "0"} << "steps:";
        QTest::newRow("missing value") << QStringList{"plan", "--width"} << "width:";
        QTest::newRow("unknown option") << QStringList{"plan", "--colour", "red"} << "option:";
        QTest::newRow("unknown command") << QStringList{"paint"} << "command:";
        QTest::newRow("preset missing") << QStringList{"plan", "--preset", "/nonexistent/p.json"} << "preset:";
        QTest::newRow("model missing") << QStringList{"info", "/nonexistent/model-dir"} << "model:";
        QTest::newRow("tuning cache empty") << QStringList{"plan", "--tuning-cache", ""} << "tuning_cache:";
        QTest::newRow("tuning cache too long")
            << QStringList{"plan", "--tuning-cache", QString(5000, 'p')} << "tuning_cache:";
    }
    void badInputExitsTwoNamingTheField() {
        QFETCH(QStringList, args);
        QFETCH(QString, field);
        const CliRun r = runCli(args);
        QVERIFY2(r.exitCode == 2, qPrintable(describe(r)));
        QVERIFY2(r.err.contains(field), qPrintable(describe(r)));
        QVERIFY2(r.out.isEmpty(), qPrintable(describe(r)));
    }

    void cudaBackendWithoutCuda() {
        if (cudaBackendBuilt()) QSKIP("this build has the CUDA backend");
        const CliRun r = runCli({"render", "--backend", "cuda"});
        QVERIFY2(r.exitCode == 2, qPrintable(describe(r)));
        QVERIFY2(r.err.contains("backend: cuda: this build has no CUDA backend"), qPrintable(describe(r)));
    }

    void optionParserDirectly() {
        CliOptions o = parseCliOptions({"render", "--width=512", "--overlap", "0.25", "--batch", "8", "--eta", "0.5",
                                        "--label", "a b", "--preview-every", "0", "--out", "/tmp/x"});
        QVERIFY(o.command == CliCommand::Render);
        QCOMPARE(o.config.width, 512);
        QVERIFY(o.config.overlapFraction.has_value());
        QCOMPARE(*o.config.overlapFraction, 0.25);
        QCOMPARE(o.config.overlapPixels(), 16);  // of the default 64 tile
        QCOMPARE(o.config.tileBatch, 8);
        QCOMPARE(o.config.schedulerOptions.eta, 0.5f);
        QCOMPARE(o.config.label, std::string("a b"));
        QCOMPARE(o.config.previewEvery, 0);
        QCOMPARE(o.outDir, std::string("/tmp/x"));
        QVERIFY(o.config.vaeTiling == VaeTiling::Auto);
        QVERIFY(parseCliOptions({"render", "--vae-tiling", "off"}).config.vaeTiling == VaeTiling::Off);
        QCOMPARE(o.config.threads, 0);
        QCOMPARE(parseCliOptions({"render", "--threads", "3"}).config.threads, 3);
        QVERIFY(o.fieldsGiven.count("width") && o.fieldsGiven.count("batch") && !o.fieldsGiven.count("tile"));

        o = parseCliOptions({"render", "--tuning-cache", "off"});
        QCOMPARE(o.config.tuningCache, std::string("off"));
        o = parseCliOptions({"render", "--tuning-cache=/tmp/t.json"});
        QCOMPARE(o.config.tuningCache, std::string("/tmp/t.json"));
        QVERIFY(o.fieldsGiven.count("tuning_cache"));
        QVERIFY(QString::fromStdString(cliUsage(CliCommand::Render)).contains("--tuning-cache FILE|off"));
        QVERIFY(parseCliOptions({"render"}).config.sdxlSizeConditioning == SdxlSizeConditioning::Image);
        o = parseCliOptions({"render", "--sdxl-size-conditioning", "tile"});
        QVERIFY(o.config.sdxlSizeConditioning == SdxlSizeConditioning::Tile);
        QVERIFY(o.fieldsGiven.count("sdxl_size_conditioning"));

        o = parseCliOptions({"info", "/some/model", "--tile", "32"});
        QVERIFY(o.command == CliCommand::Info);
        QCOMPARE(o.infoDir, std::string("/some/model"));
        QCOMPARE(o.config.tile, 32);

        try {
            parseCliOptions({"plan", "--strength", "lots"});
            QFAIL("a bad number was accepted");
        } catch (const ValidationError& e) {
            QCOMPARE(e.field(), std::string("strength"));
        }
        QVERIFY(!defaultModelCandidates("/opt/tessera/bin").empty());
        QCOMPARE(defaultModelCandidates("/opt/tessera/bin").back(),
                 std::string("/opt/tessera/share/tessera/models/default"));
    }

    // Every run option comes from the field table (core/run/RunConfigFields.h): each row's flag with
    // its example sets what the row's own parser sets, is counted as given under the row's name,
    // reads back from the settings' JSON unchanged, and every subcommand's usage names the flag.
    void everyFieldRoundTripsTheCli() {
        for (const RunConfigField& field : runConfigFields()) {
            if (field.flag.empty()) continue;
            const std::string name(field.name), flag = "--" + std::string(field.flag);
            std::vector<std::string> args{"render", flag};
            if (!field.valueName.empty()) args.push_back(std::string(field.example));
            const CliOptions parsed = parseCliOptions(args);
            RunConfig expected;
            field.parse(expected, std::string(field.example));
            QVERIFY2(toJson(parsed.config) == toJson(expected), (flag + ": " + toJson(parsed.config).dump()).c_str());
            QVERIFY2(toJson(parsed.config) != toJson(RunConfig{}), flag.c_str());
            QVERIFY2(parsed.fieldsGiven.count(name), flag.c_str());
            QVERIFY2(toJson(runConfigFromJson(toJson(parsed.config))) == toJson(parsed.config), flag.c_str());
            QCOMPARE(cliOptionTakesValue(field.flag), std::optional<bool>(!field.valueName.empty()));
            if (!field.valueName.empty()) {  // --flag=value is the same
                const CliOptions inline_ = parseCliOptions({"render", flag + "=" + std::string(field.example)});
                QVERIFY2(toJson(inline_.config) == toJson(expected), flag.c_str());
            }
            for (CliCommand command : {CliCommand::Plan, CliCommand::Render, CliCommand::Info})
                QVERIFY2(cliUsage(command).find("  " + flag +
                                                (field.valueName.empty() ? " " : " " + std::string(field.valueName))) !=
                             std::string::npos,
                         flag.c_str());
        }
        // The CLI's own options are still there.
        for (const char* own : {"preset", "params-from", "out", "help"}) QVERIFY(cliOptionTakesValue(own).has_value());
        QVERIFY(!cliOptionTakesValue("scheduler_options").has_value());
    }

    void eulerOnTheDefaultModelIsNotSaturated_data() {
        QTest::addColumn<QString>("scheduler");
        QTest::newRow("euler") << "euler";
        QTest::newRow("ddim") << "ddim";
    }
    void eulerOnTheDefaultModelIsNotSaturated() {
        QFETCH(QString, scheduler);
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const CliRun r =
            runCli({"render", "--backend", "cpu", "--width", "64", "--height", "64", "--tile", "64", "--overlap", "0",
                    "--steps", "20", "--scheduler", scheduler, "--seed", "1", "--out", dir.path()});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        const QStringList pngs = QDir(dir.path()).entryList({QStringLiteral("*.png")});
        QCOMPARE(pngs.size(), 1);
        const Rgb8Image image = readPng(QDir(dir.path()).filePath(pngs.front()).toStdString()).image;
        std::size_t saturated = 0;
        double mean[3] = {0, 0, 0};
        for (std::size_t i = 0; i < image.pixels.size(); ++i) {
            saturated += image.pixels[i] == 0 || image.pixels[i] == 255;
            mean[i % 3] += image.pixels[i];
        }
        const double fraction = double(saturated) / double(image.pixels.size());
        QVERIFY2(fraction < 0.05, qPrintable(QString("%1 of the channel values are 0 or 255").arg(fraction)));
        for (double& m : mean) {
            m /= double(image.pixels.size() / 3);
            QVERIFY2(m > 30 && m < 225, qPrintable(QString("a channel mean of %1").arg(m)));
        }
    }

    void pngRoundTripWithTextChunks() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        Rgb8Image image;
        image.width = 5;
        image.height = 3;
        for (int i = 0; i < 5 * 3 * 3; ++i) image.pixels.push_back(static_cast<std::uint8_t>(i * 5));
        const std::string path = dir.filePath("a.png").toStdString();
        const std::string manifest = R"({"label":"caf\u00e9 ☕","runId":"x"})";
        writePng(path, image,
                 {{"parameters", "Steps: 20, Sampler: ddim", false},
                  {"tessera-manifest", manifest, true},
                  {"Comment", "naïve UTF-8 in tEXt goes to iTXt", false}});
        // Written atomically: no temporary file left behind.
        QCOMPARE(QDir(dir.path()).entryList(QDir::Files | QDir::Hidden).size(), 1);
        const PngFile back = readPng(path);
        QCOMPARE(back.image.width, 5);
        QCOMPARE(back.image.height, 3);
        QVERIFY(back.image.pixels == image.pixels);
        QCOMPARE(back.text("parameters"), std::string("Steps: 20, Sampler: ddim"));
        QCOMPARE(back.text("tessera-manifest"), manifest);
        QCOMPARE(back.text("Comment"), std::string("naïve UTF-8 in tEXt goes to iTXt"));
        QCOMPARE(back.text("missing"), std::string());

        QVERIFY_THROWS_EXCEPTION(PngError, readPng(dir.filePath("none.png").toStdString()));
        QFile notPng(dir.filePath("bad.png"));
        QVERIFY(notPng.open(QIODevice::WriteOnly));
        notPng.write("not a png at all");
        notPng.close();
        QVERIFY_THROWS_EXCEPTION(PngError, readPng(notPng.fileName().toStdString()));
        QVERIFY_THROWS_EXCEPTION(PngError, writePng(dir.filePath("nodir/x.png").toStdString(), image, {}));
        Rgb8Image wrong = image;
        wrong.pixels.pop_back();
        QVERIFY_THROWS_EXCEPTION(PngError, writePng(path, wrong, {}));
    }

    void infoOnFixture() {
        const QString model = QStringLiteral(TESSERA_TEST_DATA "/models/cifar_like");
        if (!QFileInfo::exists(model + "/config.json"))
            QSKIP("tests/data/models/cifar_like is not there yet (written by tools/reference)");
        const CliRun r = runCli({"info", model, "--tile", "32"});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        QVERIFY2(r.out.contains(QRegularExpression("tensors\\s+\\d+")), qPrintable(r.out));
        QVERIFY2(r.out.contains(QRegularExpression("parameters\\s+[\\d,]+")), qPrintable(r.out));
        QVERIFY2(r.out.contains("per evaluation of a 32 x 32 tile"), qPrintable(r.out));
    }

    // Stable Diffusion checkpoints and pipeline folders (app/cli/SdInfoCommand.h).
    void infoOnSdModels() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const std::string sd1 = single_file_test::writeSmall(dir, SdFamily::SD1);
        QFile file(QString::fromStdString(sd1));
        QVERIFY(file.open(QIODevice::ReadOnly));
        const QByteArray bytes = file.readAll();
        const std::string sha = sha256Hex(bytes.constData(), static_cast<std::size_t>(bytes.size()));
        CliRun r = runCli({"info", QString::fromStdString(sd1)});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        for (const QString& line :
             {QStringLiteral("format       single-file checkpoint (LDM layout)"),
              QStringLiteral("family       Stable Diffusion 1.x (sd1)"), QStringLiteral("stored F16"),
              QStringLiteral("prediction   epsilon"), QStringLiteral("scheduler    PNDMScheduler"),
              QStringLiteral("model hash   ") + QString::fromStdString(sha.substr(0, 10)) +
                  QStringLiteral(" (A1111's model hash; sha256 ") + QString::fromStdString(sha),
              QStringLiteral("ignored      none")})
            QVERIFY2(r.out.contains(line), qPrintable(line + QStringLiteral("\n") + r.out));
        QVERIFY2(r.out.contains(QRegularExpression("unet +[\\d,]+ parameters, \\d+ tensors")), qPrintable(r.out));
        QVERIFY2(r.out.contains(QRegularExpression("text encoder [\\d,]+ parameters")), qPrintable(r.out));
        // --model works too; SD 2.x keeps OpenCLIP parts no model reads.
        r = runCli({"info", "--model", QString::fromStdString(single_file_test::writeSmall(dir, SdFamily::SD2))});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        QVERIFY2(r.out.contains("Stable Diffusion 2.x (sd2)") &&
                     r.out.contains("prediction   v_prediction (the file cannot tell") &&
                     r.out.contains("ignored      13 tensors: cond_stage_model (13)"),
                 qPrintable(r.out));
        // A pipeline folder.
        r = runCli({"info", QStringLiteral(TESSERA_TEST_DATA "/sdpipeline/sd1")});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        QVERIFY2(r.out.contains("format       diffusers pipeline folder") && r.out.contains("(sd1)") &&
                     r.out.contains("model hash   none"),
                 qPrintable(r.out));
        // Invalid input, exit 2, naming the file: a checkpoint whose sizes do not fit its family, a pickle.
        r = runCli({"info", QStringLiteral(TESSERA_TEST_DATA "/singlefile/sd1.safetensors")});
        QVERIFY2(r.exitCode == 2 && r.err.contains("sd1.safetensors") && r.err.contains("GroupNorm groups 32"),
                 qPrintable(describe(r)));
        {
            QFile junk(dir.filePath("model.ckpt"));  // a .ckpt that is no checkpoint: the restricted reader says so
            QVERIFY(junk.open(QIODevice::WriteOnly) && junk.write("anything") == 8);
        }
        r = runCli({"info", dir.filePath("model.ckpt")});
        QVERIFY2(r.exitCode == 2 && r.err.contains("model.ckpt") && r.err.contains("not a PyTorch checkpoint") &&
                     r.err.contains("restricted reader"),
                 qPrintable(describe(r)));
    }

    void renderOnFixture() {
        const QString model = QStringLiteral(TESSERA_TEST_DATA "/models/cifar_like");
        if (!QFileInfo::exists(model + "/config.json"))
            QSKIP("tests/data/models/cifar_like is not there yet (written by tools/reference)");
        QTemporaryDir out;
        QVERIFY(out.isValid());
        const CliRun r =
            runCli({"render", "--model",   model, "--width", "48",       "--height", "40",      "--tile",
                    "32",     "--overlap", "16",  "--steps", "2",        "--batch",  "2",       "--backend",
                    "cpu",    "--seed",    "3",   "--label", "cli test", "--out",    out.path()},
                   600000);
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        QVERIFY2(r.out.contains("tile evals/s"), qPrintable(r.out));
        const QStringList pngs = QDir(out.path()).entryList({"*.png"}, QDir::Files);
        QCOMPARE(pngs.size(), 1);
        const QString runId = QFileInfo(pngs.front()).completeBaseName();
        QVERIFY(QFileInfo::exists(out.filePath(runId + ".csv")));
        QVERIFY(QFileInfo::exists(out.filePath(runId + ".json")));
        QVERIFY(QFileInfo(out.filePath(runId + ".csv")).size() > 0);

        const PngFile png = readPng(out.filePath(runId + ".png").toStdString());
        QCOMPARE(png.image.width, 48);
        QCOMPARE(png.image.height, 40);
        const QString parameters = QString::fromStdString(png.text("parameters"));
        QVERIFY2(parameters.contains("Seed: 3"), qPrintable(parameters));
        const QByteArray manifestText = QByteArray::fromStdString(png.text("tessera-manifest"));
        QJsonParseError error;
        const QJsonDocument manifest = QJsonDocument::fromJson(manifestText, &error);
        QVERIFY2(error.error == QJsonParseError::NoError, qPrintable(error.errorString()));
        QVERIFY(manifest.isObject());
        QVERIFY2(manifestText.contains(runId.toUtf8()), manifestText.constData());
        QFile json(out.filePath(runId + ".json"));
        QVERIFY(json.open(QIODevice::ReadOnly));
        QCOMPARE(json.readAll(), manifestText);
    }

    // A Stable Diffusion model's load reports on stderr by phase and tenths, ending at 100 %
    // before the first step (a multi-GB checkpoint takes a while); each line at most once.
    void renderShowsLoadProgress() {
        QTemporaryDir out;
        QVERIFY(out.isValid());
        const CliRun r = runCli({"render",    "--model", QStringLiteral(TESSERA_TEST_DATA "/sdpipeline/sd1"),
                                 "--width",   "64",      "--height",
                                 "64",        "--tile",  "64",
                                 "--overlap", "0",       "--steps",
                                 "1",         "--cfg",   "1",
                                 "--prompt",  "a cube",  "--backend",
                                 "cpu",       "--out",   out.path()});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        const QStringList lines = r.err.split('\n').filter(QRegularExpression("^loading: "));
        QVERIFY2(lines.size() >= 2, qPrintable(r.err));
        QVERIFY2(lines.last().contains(QRegularExpression(" 100% \\([0-9.]+ of [0-9.]+ MiB\\)$")), qPrintable(r.err));
        QCOMPARE(QSet<QString>(lines.begin(), lines.end()).size(), lines.size());
        QVERIFY2(r.err.indexOf(lines.last()) < r.err.indexOf("step 1/"), qPrintable(r.err));
    }

    // --preset takes a render's manifest: the same settings, the same image; a manifest whose
    // recorded tuning choices this run does not make gets a note (stderr and the new manifest).
    void renderFromManifest() {
        const QString model = QStringLiteral(TESSERA_TEST_DATA "/models/cifar_like");
        if (!QFileInfo::exists(model + "/config.json")) QSKIP("tests/data/models/cifar_like is not there");
        QTemporaryDir out;
        const auto manifestIn = [](const QString& dir) -> QJsonObject {
            const QStringList files = QDir(dir).entryList({"*.json"}, QDir::Files);
            if (files.size() != 1) return {};
            QFile f(dir + "/" + files.front());
            return f.open(QIODevice::ReadOnly) ? QJsonDocument::fromJson(f.readAll()).object() : QJsonObject{};
        };
        const CliRun first =
            runCli({"render", "--model", model, "--width", "40", "--height", "32", "--tile", "32", "--overlap", "8",
                    "--steps", "2", "--backend", "cpu", "--seed", "5", "--out", out.filePath("1")});
        QVERIFY2(first.exitCode == 0, qPrintable(describe(first)));
        QJsonObject manifest = manifestIn(out.filePath("1"));
        QVERIFY(manifest.contains("tuning"));
        QCOMPARE(manifest["tuning"].toObject()["digest"].toString(), QString());  // the CPU times nothing
        QFile saved(out.filePath("m.json"));
        QVERIFY(saved.open(QIODevice::WriteOnly));
        saved.write(QJsonDocument(manifest).toJson());
        saved.close();
        const CliRun again = runCli({"render", "--preset", out.filePath("m.json"), "--out", out.filePath("2")});
        QVERIFY2(again.exitCode == 0, qPrintable(describe(again)));
        QVERIFY2(!again.err.contains("tuning:"), qPrintable(describe(again)));
        QCOMPARE(manifestIn(out.filePath("2"))["image_sha256"].toString(), manifest["image_sha256"].toString());

        QJsonObject tuning = manifest["tuning"].toObject();
        tuning["digest"] = "00112233aabbccdd";
        manifest["tuning"] = tuning;
        QVERIFY(saved.open(QIODevice::WriteOnly | QIODevice::Truncate));
        saved.write(QJsonDocument(manifest).toJson());
        saved.close();
        const CliRun noted = runCli({"render", "--preset", out.filePath("m.json"), "--out", out.filePath("3")});
        QVERIFY2(noted.exitCode == 0, qPrintable(describe(noted)));
        QVERIFY2(noted.err.contains("note: tuning: this run's choices (digest none) differ from its manifest's "
                                    "(00112233aabbccdd)"),
                 qPrintable(describe(noted)));
        const QJsonObject third = manifestIn(out.filePath("3"));
        QCOMPARE(third["image_sha256"].toString(), manifest["image_sha256"].toString());
        QVERIFY(QJsonDocument(third["messages"].toArray()).toJson().contains("differ from its manifest"));

        // A damaged manifest is named as the preset (exit 2).
        manifest["tuning"] = QJsonArray{1};
        QVERIFY(saved.open(QIODevice::WriteOnly | QIODevice::Truncate));
        saved.write(QJsonDocument(manifest).toJson());
        saved.close();
        const CliRun bad = runCli({"render", "--preset", out.filePath("m.json"), "--out", out.filePath("4")});
        QVERIFY2(bad.exitCode == 2 && bad.err.contains("preset:") && bad.err.contains("tuning"),
                 qPrintable(describe(bad)));
    }

    // --strength outside 0..1 is refused with the allowed range whether or not the run starts
    // from an image (exit 0 with no word before); an in-range strength without --init is said
    // to be unused, as A1111's txt2img has no denoising strength of its own.
    void strengthOutOfRangeRefusedWithoutInit() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const QStringList tiny{"--model",   TESSERA_TEST_DATA "/models/cifar_like",
                               "--backend", "cpu",
                               "--width",   "32",
                               "--height",  "32",
                               "--tile",    "32",
                               "--steps",   "1",
                               "--out",     dir.path()};
        for (const char* value : {"2", "-0.5", "1.0000001"}) {
            for (const char* command : {"render", "plan"}) {
                const CliRun r = runCli(QStringList{command, "--strength", value} + tiny);
                QVERIFY2(r.exitCode == 2, qPrintable(describe(r)));
                QVERIFY2(r.err.contains(QStringLiteral("strength: %1 is not allowed; the strength must be 0 to 1")
                                            .arg(QLatin1String(value))),
                         qPrintable(describe(r)));
            }
        }
        QVERIFY(QDir(dir.path()).entryList(QDir::Files).isEmpty());
        // compare checks both sides the same way.
        const CliRun compared = runCli({"compare", "--model", TESSERA_TEST_DATA "/models/cifar_like", "--backend",
                                        "cpu", "--a", "strength=3", "--b", "seed=2"});
        QVERIFY2(compared.exitCode == 2 && compared.err.contains("A: strength: 3 is not allowed"),
                 qPrintable(describe(compared)));
        const CliRun unused = runCli(QStringList{"render", "--strength", "0.3"} + tiny);
        QVERIFY2(unused.exitCode == 0, qPrintable(describe(unused)));
        QVERIFY2(unused.err.contains("note: strength: 0.3 is unused: it applies to image-to-image runs (--init)"),
                 qPrintable(describe(unused)));
        const CliRun silent = runCli(QStringList{"render"} + tiny);
        QVERIFY2(silent.exitCode == 0 && !silent.err.contains("strength"), qPrintable(describe(silent)));
    }

    // A model path that is a symbolic-link loop, or a link to nothing, is said to be one (not
    // "does not exist" or "is not a folder"), in every subcommand that takes a model, exit 2,
    // and never with a raw "filesystem error: ...".
    void modelPathLinkLoopAndDanglingLink() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const QString loopFile = dir.filePath(QStringLiteral("loop.safetensors"));
        const QString loopFolder = dir.filePath(QStringLiteral("loop"));
        const QString dangling = dir.filePath(QStringLiteral("dangling.safetensors"));
        QVERIFY(QFile::link(loopFile, loopFile));
        QVERIFY(QFile::link(loopFolder, loopFolder));
        QVERIFY(QFile::link(dir.filePath(QStringLiteral("nothing.safetensors")), dangling));
        const QList<QStringList> commands{{"render", "--backend", "cpu", "--out", dir.filePath("out"), "--model"},
                                          {"plan", "--model"},
                                          {"info"},
                                          {"tokens", "a cat", "--model"}};
        for (const QString& path : {loopFile, loopFolder, dangling}) {
            for (const QStringList& command : commands) {
                const CliRun r = runCli(command + QStringList{path});
                QVERIFY2(r.exitCode == 2, qPrintable(command.first() + ": " + describe(r)));
                const QString expected = path == dangling ? QStringLiteral("' is a dangling symbolic link (to '") +
                                                                dir.filePath(QStringLiteral("nothing.safetensors")) +
                                                                QStringLiteral("', which does not exist)")
                                                          : QStringLiteral("' is a symbolic-link loop (");
                QVERIFY2(r.err.contains("model: '" + path + expected),
                         qPrintable(command.first() + ": " + describe(r)));
                QVERIFY2(!r.err.contains(QStringLiteral("does not exist'")) &&
                             !r.err.contains(QStringLiteral("is not a folder")) &&
                             !r.err.contains(QStringLiteral("filesystem error")),
                         qPrintable(describe(r)));
            }
        }
        const CliRun missing = runCli({"plan", "--model", dir.filePath(QStringLiteral("missing.safetensors"))});
        QVERIFY2(missing.exitCode == 2 && missing.err.contains("missing.safetensors' does not exist"),
                 qPrintable(describe(missing)));
        QVERIFY(!QFileInfo::exists(dir.filePath("out")));
    }

    // --upscale beyond its range quotes the value as given, with the range.
    void upscaleFactorEdgesQuotedAsGiven() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const QString init = QStringLiteral(TESSERA_TEST_DATA "/images/quadrants.jpg");
        for (const char* value : {"16.0000001", "0.999", "100"}) {
            const CliRun r = runCli({"render", "--model", TESSERA_TEST_DATA "/sdpipeline/sd1", "--backend", "cpu",
                                     "--init", init, "--upscale", value, "--out", dir.path()});
            QVERIFY2(r.exitCode == 2, qPrintable(describe(r)));
            QVERIFY2(r.err.contains(QStringLiteral("upscale: %1 is not allowed; the upscale factor must be 1 to 16")
                                        .arg(QLatin1String(value))),
                     qPrintable(describe(r)));
        }
    }
};

QTEST_GUILESS_MAIN(TestCli)
#include "tst_cli.moc"
