// tessera-cli bench: option parsing, the random-weight diffusers shapes, the GPU peak table,
// and a real (tiny, CPU) run whose CSV is read back and checked column by column; the Stable
// Diffusion shapes' options, configs, step arithmetic and CSV columns (their runs need a GPU:
// tests/cuda/tst_cudasd.cpp).
#include <QtTest/QtTest>

#include <QFile>
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>

#include <sstream>
#include <tuple>

#include "app/cli/BenchCommand.h"
#include "app/cli/EngineFactory.h"
#include "app/cli/ForwardProfile.h"
#include "core/models/sd/UNetCondGraph.h"
#include "core/models/sd/UNetCondModel.h"
#include "core/models/unet/UNetModel.h"
#include "tests/app/CliRun.h"
#include "tests/app/CsvRecord.h"

using namespace tessera;
using tessera::testing::CliRun;
using tessera::testing::describe;
using tessera::testing::runCli;
using tessera::testing::splitCsv;

namespace {

std::string expectValidationField(const std::vector<std::string>& args) {
    try {
        parseBenchOptions(args);
    } catch (const ValidationError& e) {
        return e.field();
    }
    return "(no error)";
}

}  // namespace

class TestBench : public QObject {
    Q_OBJECT

private slots:
    void parsesLists() {
        const BenchOptions o = parseBenchOptions(
            {"--shape", "church", "--size",      "512",       "--tile",   "256",           "--overlap", "32",
             "--batch", "1,4,16", "--precision", "fp16,bf16", "--graphs", "off,tile,step", "--lanes",   "0,1,8",
             "--steps", "5",      "--repeats",   "2",         "--csv",    "x.csv"});
        QCOMPARE(o.shape, std::string("church"));
        QCOMPARE(o.width, 512);
        QCOMPARE(o.height, 512);
        QCOMPARE(o.tile, 256);
        QCOMPARE(o.overlap, 32);
        QCOMPARE(o.batches, (std::vector<int>{1, 4, 16}));
        QCOMPARE(o.precisions, (std::vector<Precision>{Precision::FP16, Precision::BF16}));
        QCOMPARE(o.graphs, (std::vector<GraphMode>{GraphMode::Off, GraphMode::Tile, GraphMode::Step}));
        QCOMPARE(o.lanes, (std::vector<int>{0, 1, 8}));
        QCOMPARE(o.steps, 5);
        QCOMPARE(o.repeats, 2);
        QCOMPARE(o.csvPath, std::string("x.csv"));
        QCOMPARE(o.tuningCache, std::string());
        QCOMPARE(parseBenchOptions({"--shape", "cifar", "--tuning-cache", "off"}).tuningCache, std::string("off"));
        QCOMPARE(parseBenchOptions({"--shape", "cifar", "--tuning-cache=/t/c.json"}).tuningCache,
                 std::string("/t/c.json"));
    }

    void rejectsBadOptionsNamingTheField() {
        QCOMPARE(expectValidationField({"--shape", "imagenet"}), std::string("shape"));
        QCOMPARE(expectValidationField({"--tile", "64"}), std::string("shape"));  // neither --shape nor --model
        QCOMPARE(expectValidationField({"--shape", "cifar", "--model", "m"}), std::string("shape"));
        QCOMPARE(expectValidationField({"--shape", "cifar", "--batch", "1,x"}), std::string("batch"));
        QCOMPARE(expectValidationField({"--shape", "cifar", "--batch", "0"}), std::string("batch"));
        QCOMPARE(expectValidationField({"--shape", "cifar", "--graphs", "always"}), std::string("graphs"));
        QCOMPARE(expectValidationField({"--shape", "cifar", "--lanes", "9"}), std::string("lanes"));
        QCOMPARE(expectValidationField({"--shape", "cifar", "--lanes", "-1"}), std::string("lanes"));
        QCOMPARE(expectValidationField({"--shape", "cifar", "--precision", "fp8"}), std::string("precision"));
        QCOMPARE(expectValidationField({"--shape", "cifar", "--repeats", "0"}), std::string("repeats"));
        QCOMPARE(expectValidationField({"--shape", "cifar", "--size", "64", "--width", "64"}), std::string("size"));
        QCOMPARE(expectValidationField({"--shape", "cifar", "--frobnicate", "1"}), std::string("option"));
        QCOMPARE(expectValidationField({"--shape", "cifar", "--steps"}), std::string("steps"));
        QCOMPARE(expectValidationField({"--shape", "cifar", "--tuning-cache", ""}), std::string("tuning_cache"));
    }

    // The diffusers google/ddpm models: 35,746,307 and 113,673,219 parameters.
    void shapesMatchDiffusers() {
        const UNetModel cifar = UNetModel::random(benchShapeConfig("cifar"), 0);
        QCOMPARE(cifar.parameterCount(), std::int64_t{35746307});
        const double gflop = cifar.flopsPerEvaluation(64, 64) / 1e9;
        QVERIFY2(gflop > 50 && gflop < 58, qPrintable(QString::number(gflop)));
        const UNetConfig church = benchShapeConfig("church");
        QCOMPARE(church.blockOutChannels, (std::vector<int>{128, 128, 256, 256, 512, 512}));
        QCOMPARE(church.downBlocks[4], DownBlockType::AttnDown);
        QCOMPARE(church.upBlocks[1], UpBlockType::AttnUp);
        QCOMPARE(church.normEps, 1e-6f);
        QCOMPARE(church.freqShift, 1);
        QVERIFY(!church.flipSinToCos);
        QCOMPARE(church.downsamplePadding, 0);
        QVERIFY(!church.attentionHeadDim.has_value());
        std::int64_t params = 0;
        for (const auto& [name, shape] : UNetModel::expectedTensors(church)) {
            std::int64_t n = 1;
            for (auto d : shape) n *= d;
            params += n;
        }
        QCOMPARE(params, std::int64_t{113673219});
    }

    void peakTable() {
        QCOMPARE(denseTensorPeakTflops("NVIDIA H100 80GB HBM3").value_or(0), 989.0);
        QCOMPARE(denseTensorPeakTflops("NVIDIA H100 PCIe").value_or(0), 756.0);
        QCOMPARE(denseTensorPeakTflops("NVIDIA H200").value_or(0), 989.0);
        QVERIFY(!denseTensorPeakTflops("AMD EPYC 7B13").has_value());
    }

    // The first columns are the PyTorch script's, in its order.
    void csvHeaderSharesThePyTorchColumns() {
        QFile script(QStringLiteral(TESSERA_SOURCE_DIR "/bench/pytorch/torch_tiled_ddim.py"));
        QVERIFY(script.open(QIODevice::ReadOnly));
        const QString text = QString::fromUtf8(script.readAll());
        const auto match = QRegularExpression(QStringLiteral("cols = \\[([^\\]]*)\\]")).match(text);
        QVERIFY2(match.hasMatch(), "cols = [...] not found in bench/pytorch/torch_tiled_ddim.py");
        QStringList torchCols;
        auto names = QRegularExpression(QStringLiteral("\"([a-z_]+)\"")).globalMatch(match.captured(1));
        while (names.hasNext()) torchCols << names.next().captured(1);
        // The script's 17th column, device_used_mib (the process's device memory in use, as
        // Tessera's peak_mib), has no twin: its peak_mib is PyTorch's max_memory_allocated.
        QCOMPARE(torchCols.size(), 17);
        QCOMPARE(torchCols.last(), QStringLiteral("device_used_mib"));
        const QStringList ours = QString::fromStdString(benchCsvHeader()).split(',');
        QCOMPARE(ours.mid(0, 16), torchCols.mid(0, 16));
        for (const char* extra : {"graphs", "fraction_of_peak", "first_run_s", "graph_mib", "graph_nodes", "capture_ms",
                                  "step_gpu_ms", "lanes", "lanes_requested"})
            QVERIFY2(ours.contains(QLatin1String(extra)), extra);
    }

    // A real run of the CLI on the CPU: 64x64, tile 32, overlap 8 -> 3 x 3 = 9 tiles, 1 step.
    void cpuRunWritesCsv() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const QString csvPath = dir.filePath(QStringLiteral("bench.csv"));
        const CliRun r = runCli({"bench", "--model", TESSERA_TEST_DATA "/models/cifar_like", "--backend", "cpu",
                                 "--size", "64", "--tile", "32", "--overlap", "8", "--batch", "1,4", "--steps", "1",
                                 "--repeats", "2", "--csv", csvPath});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        QVERIFY2(r.out.contains(QStringLiteral("s/image")) && r.out.contains(QStringLiteral("tessera-cpu")),
                 qPrintable(describe(r)));
        QVERIFY2(r.out.contains(QStringLiteral("peak: unknown")), qPrintable(r.out));

        QFile file(csvPath);
        QVERIFY(file.open(QIODevice::ReadOnly));
        const QStringList lines = QString::fromUtf8(file.readAll()).split('\n', Qt::SkipEmptyParts);
        QCOMPARE(lines.size(), 3);
        const QStringList header = lines[0].split(',');
        QCOMPARE(lines[0], QString::fromStdString(benchCsvHeader()));
        const int batchesExpected[] = {1, 4};
        for (int i = 1; i < 3; ++i) {
            const QStringList f = splitCsv(lines[i]);
            QCOMPARE(f.size(), header.size());
            auto col = [&](const char* name) {
                const int c = header.indexOf(QLatin1String(name));
                return c >= 0 ? f[c] : QStringLiteral("<no column %1>").arg(QLatin1String(name));
            };
            QCOMPARE(col("engine"), QStringLiteral("tessera-cpu"));
            QCOMPARE(col("shape"), QStringLiteral("cifar_like"));
            QCOMPARE(col("size"), QStringLiteral("64"));
            QCOMPARE(col("tile"), QStringLiteral("32"));
            QCOMPARE(col("overlap"), QStringLiteral("8"));
            QCOMPARE(col("batch").toInt(), batchesExpected[i - 1]);
            QCOMPARE(col("precision"), QStringLiteral("fp16"));
            QCOMPARE(col("steps"), QStringLiteral("1"));
            QCOMPARE(col("tiles"), QStringLiteral("9"));
            QCOMPARE(col("graphs"), QStringLiteral("off"));
            QCOMPARE(col("lanes"), QStringLiteral("1"));            // the CPU engine runs one batch at a time
            QCOMPARE(col("lanes_requested"), QStringLiteral("0"));  // auto
            QCOMPARE(col("repeats"), QStringLiteral("2"));
            bool ok = false;
            const double seconds = col("seconds_per_image").toDouble(&ok);
            QVERIFY2(ok && seconds > 0, qPrintable(lines[i]));
            const double evalsPerS = col("tile_evals_per_s").toDouble(&ok);
            QVERIFY2(ok, qPrintable(lines[i]));
            QVERIFY2(std::abs(evalsPerS * seconds - 9.0) < 0.01, qPrintable(lines[i]));  // 9 tiles x 1 step
            const double gflop = col("gflop_per_eval").toDouble(&ok);
            QVERIFY2(ok && gflop > 0, qPrintable(lines[i]));
            const double tflops = col("tflops").toDouble(&ok);
            QVERIFY2(ok && std::abs(tflops - gflop * 9 / seconds / 1000) <= 0.002 * tflops + 1e-6,
                     qPrintable(lines[i]));
            QVERIFY2(col("host_enqueue_ms_per_step").toDouble(&ok) > 0 && ok, qPrintable(lines[i]));
            QVERIFY2(col("first_run_s").toDouble(&ok) > 0 && ok, qPrintable(lines[i]));
            QVERIFY2(col("prepare_s").toDouble(&ok) >= 0 && ok, qPrintable(lines[i]));
            QCOMPARE(col("fraction_of_peak"), QString());  // no GPU peak on the CPU
            QCOMPARE(col("peak_mib"), QString());          // no device memory on the CPU
        }
    }

    // sd15/sd21: their own defaults where nothing was given (a 2048 job in native tiles), the
    // given values where something was.
    void parsesSdOptions() {
        const BenchOptions sd15 = parseBenchOptions({"--shape", "sd15"});
        QCOMPARE(sd15.width, 2048);
        QCOMPARE(sd15.height, 2048);
        QCOMPARE(sd15.tile, 512);
        QCOMPARE(sd15.overlap, 64);
        QCOMPARE(sd15.batches, (std::vector<int>{1, 2, 4}));
        QCOMPARE(sd15.repeats, 20);
        QCOMPARE(sd15.cfg, 7.0);
        const BenchOptions sd21 = parseBenchOptions({"--shape", "sd21", "--cfg", "1", "--overlap", "128", "--size",
                                                     "1536", "--batch", "3", "--repeats", "5", "--graphs", "off,tile"});
        QCOMPARE(sd21.tile, 768);
        QCOMPARE(sd21.overlap, 128);
        QCOMPARE(sd21.width, 1536);
        QCOMPARE(sd21.batches, (std::vector<int>{3}));
        QCOMPARE(sd21.repeats, 5);
        QCOMPARE(sd21.cfg, 1.0);
        QCOMPARE(sd21.graphs, (std::vector<GraphMode>{GraphMode::Off, GraphMode::Tile}));
        const BenchOptions sdxl = parseBenchOptions({"--shape", "sdxl", "--cfg", "1"});
        QCOMPARE(sdxl.tile, 1024);
        QCOMPARE(sdxl.overlap, 128);
        QCOMPARE(sdxl.width, 2048);
        QCOMPARE(sdxl.cfg, 1.0);
        // The pixel shapes keep theirs.
        const BenchOptions cifar = parseBenchOptions({"--shape", "cifar"});
        QCOMPARE(cifar.tile, 64);
        QCOMPARE(cifar.batches, (std::vector<int>{1, 8, 32}));
        QCOMPARE(cifar.repeats, 3);
    }

    void rejectsSdOptionsNamingTheField() {
        QCOMPARE(expectValidationField({"--shape", "sd16"}), std::string("shape"));
        QCOMPARE(expectValidationField({"--shape", "cifar", "--cfg", "7"}), std::string("cfg"));  // no guidance there
        QCOMPARE(expectValidationField({"--shape", "sd15", "--cfg", "seven"}), std::string("cfg"));
        QCOMPARE(expectValidationField({"--shape", "sd15", "--cfg", "100.5"}), std::string("cfg"));
        QCOMPARE(expectValidationField({"--shape", "sd15", "--cfg", "-1"}), std::string("cfg"));
        QCOMPARE(expectValidationField({"--shape", "sd15", "--graphs", "off,step"}), std::string("graphs"));
        QCOMPARE(expectValidationField({"--shape", "sd15", "--lanes", "1"}), std::string("lanes"));
        QCOMPARE(expectValidationField({"--shape", "sd15", "--tile", "500"}), std::string("tile"));
        QCOMPARE(expectValidationField({"--shape", "sd21", "--size", "512"}), std::string("tile"));  // 768 > 512
        QCOMPARE(expectValidationField({"--shape", "sd15", "--overlap", "12"}), std::string("overlap"));
        QCOMPARE(expectValidationField({"--shape", "sd15", "--overlap", "512"}), std::string("overlap"));
        QCOMPARE(expectValidationField({"--shape", "sd15", "--width", "1001"}), std::string("width"));
        QCOMPARE(expectValidationField({"--shape", "sd15", "--height", "2044"}), std::string("height"));
        try {
            parseBenchOptions({"--shape", "sd15", "--tile", "500"});
        } catch (const ValidationError& e) {
            QVERIFY2(QString(e.what()).contains("multiple of 64 pixels"), e.what());
        }
    }

    // diffusers' SD 1.5, 2.1 and XL base UNets: 859,520,964, 865,910,724 and 2,567,463,684 parameters
    // (UNet2DConditionModel of their unet/config.json), and the FLOPs of one evaluation from the graph (SD 1.5 at latent 64: about 0.8 TFLOP).
    void sdShapesMatchDiffusers() {
        for (const auto& [shape, params, latent] :
             {std::tuple{"sd15", std::int64_t{859520964}, 64}, std::tuple{"sd21", std::int64_t{865910724}, 96},
              std::tuple{"sdxl", std::int64_t{2567463684}, 128}}) {
            const UNetCondConfig c = benchSdShapeConfig(shape);
            std::int64_t n = 0;
            for (const auto& [name, dims] : UNetCondModel::expectedTensors(c)) {
                std::int64_t k = 1;
                for (auto d : dims) k *= d;
                n += k;
            }
            QCOMPARE(n, params);
            QCOMPARE(c.sampleSize, latent);
            const double gflop = unet2DConditionExecutionGraph(c).flops(latent, latent) / 1e9;
            qInfo("%s: %.1f GFLOP per evaluation at latent %d", shape, gflop, latent);
            // SDXL at latent 128: about 6.6 TFLOP (3.3 T multiply-adds), mostly its depth-10 transformers.
            const double low = latent == 64 ? 600 : (latent == 96 ? 1400 : 5000);
            const double high = latent == 64 ? 900 : (latent == 96 ? 2400 : 8500);
            QVERIFY2(gflop > low && gflop < high, qPrintable(QString::number(gflop)));
        }
        const UNetCondConfig sd21 = benchSdShapeConfig("sd21");
        QCOMPARE(sd21.attentionHeads, (std::vector<int>{5, 10, 20, 20}));
        QCOMPARE(sd21.crossAttentionDim, 1024);
        QVERIFY(sd21.useLinearProjection && sd21.upcastAttention);
        const UNetCondConfig sdxl = benchSdShapeConfig("sdxl");
        QCOMPARE(sdxl.textTimeDim(), 2816);
        QCOMPARE(sdxl.crossAttentionDim, 2048);
        QCOMPARE(sdxl.transformerLayers, (std::vector<int>{1, 2, 10}));
        const UNetCondConfig sd15 = benchSdShapeConfig("sd15");
        QCOMPARE(sd15.attentionHeads, (std::vector<int>{8, 8, 8, 8}));
        QCOMPARE(sd15.crossAttentionDim, 768);
        QVERIFY(!sd15.useLinearProjection && !sd15.upcastAttention);
        bool refused = false;
        try {
            benchSdShapeConfig("cifar");
        } catch (const ValidationError& e) {
            refused = e.field() == "shape";
        }
        QVERIFY(refused);
    }

    // 25 tiles in calls of 4: six full calls and one of the last tile; guidance doubles the
    // evaluations, not the calls.
    void unetStepTimingFromForwards() {
        const UNetStepTiming g = unetStepTiming(25, 4, true, 100.0, 30.0, 2.0, 1.5, 800.0);
        QCOMPARE(g.forwardsPerStep, 7);
        QCOMPARE(g.evaluationsPerStep, 50);
        QVERIFY(std::abs(g.secondsPerStep - 0.63) < 1e-12);
        QVERIFY(std::abs(g.hostEnqueueMsPerStep - 13.5) < 1e-12);
        QVERIFY(std::abs(g.unetEvalsPerS - 50 / 0.63) < 1e-9);
        QVERIFY(std::abs(g.tflops - 800e9 * 50 / 0.63 / 1e12) < 1e-9);
        const UNetStepTiming one = unetStepTiming(25, 5, false, 100.0, 999.0, 2.0, 999.0, 800.0);  // no remainder
        QCOMPARE(one.forwardsPerStep, 5);
        QCOMPARE(one.evaluationsPerStep, 25);
        QVERIFY(std::abs(one.secondsPerStep - 0.5) < 1e-12);
        QVERIFY(std::abs(one.hostEnqueueMsPerStep - 10.0) < 1e-12);
        QVERIFY(std::abs(one.unetEvalsPerS - 50.0) < 1e-9);
    }

    // bench/pytorch/torch_sd_unet.py prints exactly the SD rows' columns.
    void sdCsvHeaderIsTheTorchScripts() {
        QFile script(QStringLiteral(TESSERA_SOURCE_DIR "/bench/pytorch/torch_sd_unet.py"));
        QVERIFY(script.open(QIODevice::ReadOnly));
        const QString text = QString::fromUtf8(script.readAll());
        const auto match = QRegularExpression(QStringLiteral("COLS = \\[([^\\]]*)\\]")).match(text);
        QVERIFY2(match.hasMatch(), "COLS = [...] not found in bench/pytorch/torch_sd_unet.py");
        QStringList torchCols;
        auto names = QRegularExpression(QStringLiteral("\"([a-z_]+)\"")).globalMatch(match.captured(1));
        while (names.hasNext()) torchCols << names.next().captured(1);
        QCOMPARE(torchCols.join(','), QString::fromStdString(sdBenchCsvHeader()));
    }

    // The SD shapes run on the CUDA backend only: refused (exit 2, naming the backend) before
    // any weights are drawn.
    void sdBenchRefusesCpu() {
        const CliRun cpu = runCli({"bench", "--shape", "sd15", "--backend", "cpu"});
        QCOMPARE(cpu.exitCode, 2);
        QVERIFY2(cpu.err.contains(QStringLiteral("backend: cpu is not allowed for sd15")), qPrintable(describe(cpu)));
        const CliRun xl = runCli({"bench", "--shape", "sdxl", "--backend", "cpu", "--cfg", "1"});
        QCOMPARE(xl.exitCode, 2);
        QVERIFY2(xl.err.contains(QStringLiteral("backend: cpu is not allowed for sdxl")), qPrintable(describe(xl)));
        const DeviceReport report = probeDevices();
        if (report.cudaAvailable) QSKIP("a CUDA device is present: auto would run sd15");
        const CliRun automatic = runCli({"bench", "--shape", "sd21", "--steps", "1"});
        QCOMPARE(automatic.exitCode, 2);
        QVERIFY2(automatic.err.contains(QStringLiteral("backend: auto found no CUDA backend to time sd21")),
                 qPrintable(describe(automatic)));
    }

    // --job: whole SD jobs; step graphs, tile batch 4, 3 timed jobs after a full-length warm-up by
    // default; given values kept; refused for the DDPM shapes, with --profile and with --lanes.
    void parsesJob() {
        const BenchOptions o = parseBenchOptions({"--shape", "sd15", "--job"});
        QVERIFY(o.job);
        QCOMPARE(o.batches, (std::vector<int>{4}));
        QVERIFY(o.graphs == (std::vector<GraphMode>{GraphMode::Step}));
        QCOMPARE(o.repeats, 3);
        QCOMPARE(o.warmupSteps, 0);
        QCOMPARE(o.width, 2048);
        QCOMPARE(o.tile, 512);
        const BenchOptions given = parseBenchOptions(
            {"--job", "--shape", "sdxl", "--batch", "1,2", "--graphs", "off", "--repeats", "2", "--warmup-steps", "5"});
        QCOMPARE(given.batches, (std::vector<int>{1, 2}));
        QVERIFY(given.graphs == (std::vector<GraphMode>{GraphMode::Off}));
        QCOMPARE(given.repeats, 2);
        QCOMPARE(given.warmupSteps, 5);
        QCOMPARE(given.tile, 1024);
        for (const auto& [args, field, words] :
             {std::tuple{std::vector<std::string>{"--job", "--shape", "cifar"}, "job",
                         "give --shape sd15, sd21 or sdxl"},
              {{"--job", "--profile", "--shape", "sd15"}, "job", "give --job or --profile, not both"},
              {{"--job", "--shape", "sd15", "--lanes", "2"}, "lanes", "--lanes does not apply to --job"}}) {
            try {
                (void)parseBenchOptions(args);
                QFAIL("accepted");
            } catch (const ValidationError& e) {
                QCOMPARE(QString::fromStdString(e.field()), QString(field));
                QVERIFY2(QString(e.what()).contains(words), e.what());
            }
        }
    }

    // --profile: a flag without a value; options of whole runs refused.
    void parsesProfile() {
        const BenchOptions o = parseBenchOptions({"--profile", "--shape", "cifar", "--tile", "64", "--batch", "1,32"});
        QVERIFY(o.profile);
        QCOMPARE(o.batches, (std::vector<int>{1, 32}));
        QCOMPARE(o.repeats, 20);  // timed forwards, not runs
        QCOMPARE(parseBenchOptions({"--shape", "church", "--profile", "--repeats", "5"}).repeats, 5);
        QVERIFY(!parseBenchOptions({"--shape", "cifar"}).profile);
        QVERIFY(parseBenchOptions({"--shape", "sd15", "--profile"}).profile);
        for (const char* field : {"graphs", "lanes", "csv", "steps"}) {
            const std::string value =
                std::string(field) == "graphs" ? "tile" : (std::string(field) == "csv" ? "x.csv" : "1");
            QCOMPARE(expectValidationField({"--shape", "cifar", "--profile", std::string("--") + field, value}),
                     std::string(field));
        }
        try {
            parseBenchOptions({"--shape", "cifar", "--profile", "--lanes", "2"});
        } catch (const ValidationError& e) {
            QVERIFY2(QString(e.what()).contains("--lanes does not apply to --profile"), e.what());
        }
    }

    // Ops grouped by kind: the last part of the name, attention blocks together (their group norm
    // apart, SD transformer blocks and FLUX.1's blocks by part), largest total first.
    void opsGroupByKind() {
        QCOMPARE(opKind("down_blocks.0.resnets.1.conv1"), std::string("conv1"));
        QCOMPARE(opKind("mid_block.attentions.0.to_q"), std::string("attention"));
        QCOMPARE(opKind("mid_block.attentions.0.group_norm"), std::string("attention.group_norm"));
        QCOMPARE(opKind("down_blocks.1.attn1.softmax"), std::string("attention"));
        QCOMPARE(opKind("conv_in"), std::string("conv_in"));
        QCOMPARE(opKind("down_blocks.1.attentions.0.transformer_blocks.1.ff.net.0"),
                 std::string("transformer.ff.net.0"));
        QCOMPARE(opKind("mid_block.attentions.0.transformer_blocks.9.attn2"), std::string("transformer.attn2"));
        QCOMPARE(opKind("up_blocks.1.attentions.2.proj_out"), std::string("attention"));
        // FLUX.1's blocks by part, whatever the block's index.
        QCOMPARE(opKind("double_blocks.7.img_attn.qkv"), std::string("double_blocks.img_attn.qkv"));
        QCOMPARE(opKind("double_blocks.18.txt_mlp.0"), std::string("double_blocks.txt_mlp.0"));
        QCOMPARE(opKind("single_blocks.30.linear1"), std::string("single_blocks.linear1"));
        const std::vector<OpTiming> ops{{"a.resnets.0.conv1", 1.0},          {"a.attentions.0.to_q", 0.5},
                                        {"a.attentions.0.group_norm", 0.25}, {"b.resnets.0.conv1", 2.0},
                                        {"a.attentions.0.to_k", 0.75},       {"conv_out", 0.125}};
        const std::vector<OpKindTime> kinds = opTimesByKind(ops);
        QCOMPARE(kinds.size(), std::size_t{4});
        QCOMPARE(kinds[0].kind, std::string("conv1"));
        QCOMPARE(kinds[0].ms, 3.0);
        QCOMPARE(kinds[0].ops, 2);
        QCOMPARE(kinds[1].kind, std::string("attention"));
        QCOMPARE(kinds[1].ms, 1.25);
        QCOMPARE(kinds[1].ops, 2);
        QCOMPARE(kinds[2].kind, std::string("attention.group_norm"));
        QCOMPARE(kinds[3].kind, std::string("conv_out"));
        std::ostringstream text;
        printOpProfile(text, "profile x", ops, 4.5, 2);
        const QString printed = QString::fromStdString(text.str());
        QVERIFY2(printed.startsWith("profile x: 6 ops, sum of op times 4.625 ms (1.0 TFLOP/s)\n"), qPrintable(printed));
        QVERIFY2(printed.contains(QRegularExpression("kind conv1 +2 ops +3.000 ms +64.9%")), qPrintable(printed));
        // The two slowest ops, slowest first, and no third.
        QVERIFY2(printed.contains(
                     QRegularExpression("op b.resnets.0.conv1 +2.0000 ms\n  op a.resnets.0.conv1 +1.0000 ms\n$")),
                 qPrintable(printed));
    }

    // --profile times the CUDA backend: refused on the CPU (exit 2, naming the backend) before any
    // weights are loaded or drawn.
    void profileRefusesCpu() {
        const CliRun cpu = runCli({"bench", "--profile", "--shape", "church", "--backend", "cpu"});
        QCOMPARE(cpu.exitCode, 2);
        QVERIFY2(cpu.err.contains(QStringLiteral("backend: cpu is not allowed for --profile")),
                 qPrintable(describe(cpu)));
        const CliRun sd = runCli({"bench", "--profile", "--shape", "sd15", "--backend", "cpu"});
        QCOMPARE(sd.exitCode, 2);
        QVERIFY2(sd.err.contains(QStringLiteral("backend: cpu is not allowed for --profile")),
                 qPrintable(describe(sd)));
        if (probeDevices().cudaAvailable) QSKIP("a CUDA device is present: auto would profile");
        const CliRun automatic = runCli({"bench", "--profile", "--model", TESSERA_TEST_DATA "/models/cifar_like"});
        QCOMPARE(automatic.exitCode, 2);
        QVERIFY2(automatic.err.contains(QStringLiteral("backend: auto found no CUDA backend to time --profile")),
                 qPrintable(describe(automatic)));
    }

    // --shape vae: its own options, each bad one refused with exit 2 naming it; its help; without
    // a CUDA device, refused naming the backend.
    void vaeBenchOptions() {
        const std::vector<std::pair<std::vector<QString>, QString>> bad{
            {{"--size", "300"}, "bench: size: '300' is not allowed; use 512, 1024, 2048 or 4096"},
            {{"--tiling", "sideways"}, "bench: tiling"},
            {{"--repeats", "0"}, "bench: repeats"},
            {{"--budget-mib", "x"}, "bench: budget-mib: 'x' is not a whole number"},
            {{"--precision", "fp8"}, "bench: precision"},
            {{"--frobnicate", "1"}, "bench: option: '--frobnicate' is not an option of bench --shape vae"},
            {{"--size"}, "bench: size: option '--size' needs a value"},
            // --name=value as every other subcommand reads it.
            {{"--size=300"}, "bench: size: '300' is not allowed; use 512, 1024, 2048 or 4096"},
        };
        for (const auto& [args, message] : bad) {
            QStringList all{"bench", "--shape", "vae"};
            for (const QString& a : args) all << a;
            const CliRun r = runCli(all);
            QCOMPARE(r.exitCode, 2);
            QVERIFY2(r.err.contains(message), qPrintable(describe(r)));
        }
        const CliRun help = runCli({"bench", "--shape", "vae", "--help"});
        QCOMPARE(help.exitCode, 0);
        QVERIFY2(help.out.contains(QStringLiteral("Usage: tessera-cli bench --shape vae")), qPrintable(describe(help)));
        QVERIFY(runCli({"bench", "--help"}).out.contains(QStringLiteral("bench --shape vae --help")));
        if (probeDevices().cudaAvailable) QSKIP("a CUDA device is present: the VAE bench would run");
        const CliRun none = runCli({"bench", "--shape", "vae", "--size", "512"});
        QCOMPARE(none.exitCode, 2);
        QVERIFY2(none.err.contains(QStringLiteral("bench: backend: bench --shape vae times the CUDA backend")),
                 qPrintable(describe(none)));
    }

    void badInputExitsWithTwo() {
        // The fixture has 3 levels: tiles must be multiples of 4.
        const CliRun r = runCli({"bench", "--model", TESSERA_TEST_DATA "/models/cifar_like", "--backend", "cpu",
                                 "--size", "64", "--tile", "30", "--steps", "1"});
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains(QStringLiteral("bench: tile")), qPrintable(describe(r)));
        const CliRun missing = runCli({"bench", "--model", "/nonexistent/model"});
        QCOMPARE(missing.exitCode, 2);
        QVERIFY2(missing.err.contains(QStringLiteral("model")), qPrintable(describe(missing)));
    }
};

QTEST_GUILESS_MAIN(TestBench)
#include "tst_bench.moc"
