// Reading a model folder as untrusted input (readModelFolderConfig, UNetModel::load): folders
// and files that are not what they claim (link loops, FIFOs, /dev/zero, a folder named
// config.json, over-long paths), JSON nested 60,000 deep, structural values that would size
// huge allocations, and warnings that must stay one line however much a file holds. Every
// refusal is a ModelError (invalid input of "model") naming the file, and comes back at once.
#include <QtTest/QtTest>

#include <sys/stat.h>

#include <functional>
#include <sstream>
#include <string>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "core/formats/Safetensors.h"
#include "core/models/unet/UNetConfig.h"
#include "core/models/unet/UNetModel.h"

using namespace tessera;

namespace {

// A small valid config: attention in down, mid and up blocks.
nlohmann::json tinyConfig() {
    return nlohmann::json{{"_class_name", "UNet2DModel"},
                          {"block_out_channels", {32, 64}},
                          {"down_block_types", {"DownBlock2D", "AttnDownBlock2D"}},
                          {"up_block_types", {"AttnUpBlock2D", "UpBlock2D"}},
                          {"layers_per_block", 1},
                          {"norm_num_groups", 8},
                          {"attention_head_dim", nullptr},
                          {"sample_size", 16}};
}

void writeText(const QString& path, const std::string& text) {
    QFile file(path);
    QVERIFY(file.open(QIODevice::WriteOnly | QIODevice::Truncate));
    QCOMPARE(file.write(text.data(), static_cast<qint64>(text.size())), static_cast<qint64>(text.size()));
}

// The ModelError message of `f` (checking its field), or a marker that fails every check.
std::string modelErrorOf(const std::function<void()>& f) {
    try {
        f();
    } catch (const ModelError& e) {
        if (e.field() != "model") return "<field is not 'model'> " + std::string(e.what());
        return e.what();
    } catch (const std::exception& e) {
        return std::string("<not a ModelError> ") + e.what();
    }
    return "<no error>";
}

#define EXPECT_MESSAGE(message, part)                     \
    QVERIFY2((message).find(part) != std::string::npos,   \
             qPrintable(QStringLiteral("'%1' not in: %2") \
                            .arg(QString::fromStdString(std::string(part)), QString::fromStdString(message))))

// Captures spdlog's default logger while alive.
class LogCapture {
public:
    LogCapture() : previous_(spdlog::default_logger()) {
        auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(text_);
        sink->set_pattern("%l: %v");
        spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
    }
    ~LogCapture() { spdlog::set_default_logger(previous_); }
    std::string text() const { return text_.str(); }

private:
    std::shared_ptr<spdlog::logger> previous_;
    std::ostringstream text_;
};

}  // namespace

class TestModelInput : public QObject {
    Q_OBJECT

private:
    QTemporaryDir tmp_;
    int folders_ = 0;

    // A fresh folder holding config.json (and nothing else).
    QString folderWithConfig(const std::string& configText) {
        const QString dir = tmp_.filePath(QStringLiteral("m%1").arg(++folders_));
        QDir().mkpath(dir);
        writeText(dir + "/config.json", configText);
        return dir;
    }
    QString folderWithConfig(const nlohmann::json& config) { return folderWithConfig(config.dump(1)); }

    static std::string configError(const nlohmann::json& config) {
        try {
            (void)unetConfigFromJson(config);
        } catch (const std::exception& e) {
            return e.what();
        }
        return "<no error>";
    }

private slots:
    void initTestCase() { QVERIFY(tmp_.isValid()); }

    void readsFlatAndPipelineFolders() {
        const QString flat = folderWithConfig(tinyConfig());
        writeText(flat + "/scheduler_config.json", R"({"_class_name": "DDIMScheduler", "num_train_timesteps": 500})");
        const ModelFolderConfig a = readModelFolderConfig(flat.toStdString());
        QCOMPARE(a.unetDir, flat.toStdString());
        QCOMPARE(a.config.blockOutChannels, (std::vector<int>{32, 64}));
        QCOMPARE(a.schedulerClass, std::string("DDIMScheduler"));
        QCOMPARE(a.limits().downsampleFactor, 2);
        QCOMPARE(a.limits().numTrainTimesteps, 500);
        QCOMPARE(a.limits().inChannels, 3);

        const QString pipeline = tmp_.filePath(QStringLiteral("pipeline"));
        QDir().mkpath(pipeline + "/unet");
        QDir().mkpath(pipeline + "/scheduler");
        writeText(pipeline + "/unet/config.json", tinyConfig().dump());
        writeText(pipeline + "/scheduler/scheduler_config.json", R"({"num_train_timesteps": 250})");
        const ModelFolderConfig b = readModelFolderConfig(pipeline.toStdString());
        QCOMPARE(b.unetDir, (pipeline + "/unet").toStdString());
        QCOMPARE(b.limits().numTrainTimesteps, 250);
        QCOMPARE(b.schedulerClass, std::string("DDPMScheduler"));
    }

    void refusesFoldersThatAreNotFolders() {
        EXPECT_MESSAGE(modelErrorOf([&] { (void)readModelFolderConfig(""); }), "no model folder given");
        const std::string missing = tmp_.filePath(QStringLiteral("missing")).toStdString();
        EXPECT_MESSAGE(modelErrorOf([&] { (void)readModelFolderConfig(missing); }), "no such folder");

        const QString loop = tmp_.filePath(QStringLiteral("loop"));
        QVERIFY(QFile::link(loop, loop));
        const std::string m1 = modelErrorOf([&] { (void)readModelFolderConfig(loop.toStdString()); });
        EXPECT_MESSAGE(m1, loop.toStdString());
        EXPECT_MESSAGE(m1, "too many levels of symbolic links");

        const std::string longPath = "/tmp/" + std::string(10000, 'x');
        const std::string m2 = modelErrorOf([&] { (void)readModelFolderConfig(longPath); });
        EXPECT_MESSAGE(m2, "the path is 10005 characters long; at most 4096 are allowed");
        QVERIFY2(m2.size() < 400, m2.c_str());

        const QString file = tmp_.filePath(QStringLiteral("plain-file"));
        writeText(file, "x");
        EXPECT_MESSAGE(modelErrorOf([&] { (void)readModelFolderConfig(file.toStdString()); }), "not a folder");
        // Loading goes through the same checks.
        EXPECT_MESSAGE(modelErrorOf([&] { (void)UNetModel::load(loop.toStdString()); }),
                       "too many levels of symbolic links");
    }

    void configFilesNeverBlockOrRunAway() {
        QElapsedTimer timer;
        timer.start();
        // A FIFO with no writer: opening it plainly would wait forever.
        const QString fifoDir = tmp_.filePath(QStringLiteral("fifo"));
        QDir().mkpath(fifoDir);
        QCOMPARE(::mkfifo(qPrintable(fifoDir + "/config.json"), 0600), 0);
        const std::string m1 = modelErrorOf([&] { (void)readModelFolderConfig(fifoDir.toStdString()); });
        EXPECT_MESSAGE(m1, (fifoDir + "/config.json").toStdString());
        EXPECT_MESSAGE(m1, "is not a regular file");
        // /dev/zero would read without end.
        const QString zeroDir = tmp_.filePath(QStringLiteral("zero"));
        QDir().mkpath(zeroDir);
        QVERIFY(QFile::link(QStringLiteral("/dev/zero"), zeroDir + "/config.json"));
        EXPECT_MESSAGE(modelErrorOf([&] { (void)readModelFolderConfig(zeroDir.toStdString()); }),
                       "is not a regular file");
        // A folder named config.json is named as a folder, not as "unexpected end of input".
        const QString folderDir = tmp_.filePath(QStringLiteral("folder"));
        QDir().mkpath(folderDir + "/config.json");
        EXPECT_MESSAGE(modelErrorOf([&] { (void)readModelFolderConfig(folderDir.toStdString()); }),
                       "config.json': is a folder; a regular file is needed");
        // A config.json link loop is reported as one, not as "not found".
        const QString loopDir = tmp_.filePath(QStringLiteral("configloop"));
        QDir().mkpath(loopDir);
        QVERIFY(QFile::link(loopDir + "/config.json", loopDir + "/config.json"));
        EXPECT_MESSAGE(modelErrorOf([&] { (void)readModelFolderConfig(loopDir.toStdString()); }),
                       "too many levels of symbolic links");
        // scheduler_config.json is read the same way.
        const QString schedulerDir = folderWithConfig(tinyConfig());
        QCOMPARE(::mkfifo(qPrintable(schedulerDir + "/scheduler_config.json"), 0600), 0);
        EXPECT_MESSAGE(modelErrorOf([&] { (void)readModelFolderConfig(schedulerDir.toStdString()); }),
                       "scheduler_config.json': is not a regular file");
        // So are the weights (FIFO named like them).
        const QString weightsDir = folderWithConfig(tinyConfig());
        QCOMPARE(::mkfifo(qPrintable(weightsDir + "/diffusion_pytorch_model.safetensors"), 0600), 0);
        EXPECT_MESSAGE(modelErrorOf([&] { (void)UNetModel::load(weightsDir.toStdString()); }), "is not a regular file");
        QVERIFY2(timer.elapsed() < 20000, "a refusal waited");
    }

    void refusesDeepAndOversizedJson() {
        // ~60,000 levels (a 120 KB file) must not overflow the stack (exit 139).
        const std::string deep = R"({"block_out_channels": )" + std::string(60000, '[') + std::string(60000, ']') + "}";
        const QString deepDir = folderWithConfig(deep);
        const std::string m1 = modelErrorOf([&] { (void)readModelFolderConfig(deepDir.toStdString()); });
        EXPECT_MESSAGE(m1, "config.json': JSON nested deeper than 64 levels");
        QVERIFY2(m1.size() < 400, m1.c_str());
        const QString schedulerDir = folderWithConfig(tinyConfig());
        writeText(schedulerDir + "/scheduler_config.json", deep);
        EXPECT_MESSAGE(modelErrorOf([&] { (void)readModelFolderConfig(schedulerDir.toStdString()); }),
                       "scheduler_config.json': JSON nested deeper than 64 levels");
        // Larger than any real config by far. (Plain literals: moc misreads raw strings ending in a quote.)
        const QString bigDir = folderWithConfig("{\"_pad\": \"" + std::string(17u << 20, ' ') + "\"}");
        EXPECT_MESSAGE(modelErrorOf([&] { (void)readModelFolderConfig(bigDir.toStdString()); }),
                       "bytes are allowed for this kind of file");
        // Invalid JSON is named with an excerpt, not nlohmann's whole token.
        const QString badDir = folderWithConfig("{\"sample_size\": \"" + std::string(1 << 20, 'x') + "\x01\"}");
        const std::string m2 = modelErrorOf([&] { (void)readModelFolderConfig(badDir.toStdString()); });
        EXPECT_MESSAGE(m2, "not valid JSON at byte");
        QVERIFY2(m2.size() < 400, m2.c_str());
    }

    void structuralValuesBounded_data() {
        QTest::addColumn<QString>("key");
        QTest::addColumn<QString>("value");  // JSON
        QTest::addColumn<QString>("expected");
        // The 700-byte config that grew `info` past 8 GB: refused before any tensor is listed.
        QTest::newRow("layers 1e9") << "layers_per_block"
                                    << "1000000000"
                                    << "layers_per_block = 1000000000: expected an integer from 1 to 8";
        QTest::newRow("layers 9") << "layers_per_block"
                                  << "9"
                                  << "from 1 to 8";
        QTest::newRow("layers 0") << "layers_per_block"
                                  << "0"
                                  << "from 1 to 8";
        QTest::newRow("channels 1e9") << "block_out_channels"
                                      << "[1000000000, 64]"
                                      << "expected an integer from 1 to 4096";
        QTest::newRow("9 levels") << "block_out_channels"
                                  << "[32,32,32,32,32,32,32,32,32]"
                                  << "has 9 entries; at most 8 levels";
        QTest::newRow("9 down blocks")
            << "down_block_types"
            << R"(["DownBlock2D","DownBlock2D","DownBlock2D","DownBlock2D","DownBlock2D","DownBlock2D","DownBlock2D","DownBlock2D","DownBlock2D"])"
            << "has 9 entries; at most 8 levels";
        QTest::newRow("in 65") << "in_channels"
                               << "65"
                               << "in_channels = 65: expected an integer from 1 to 64";
        QTest::newRow("out 1e6") << "out_channels"
                                 << "1000000"
                                 << "from 1 to 64";
        QTest::newRow("sample 2048") << "sample_size"
                                     << "2048"
                                     << "sample_size = 2048: expected an integer from 1 to 1024";
        QTest::newRow("sample hw") << "sample_size"
                                   << "[32, 4096]"
                                   << "from 1 to 1024";
        QTest::newRow("time dim") << "time_embedding_dim"
                                  << "1000000000"
                                  << "from 1 to 16384";
        QTest::newRow("freq shift") << "freq_shift"
                                    << "1000000"
                                    << "freq_shift = 1000000: expected an integer from 0 to 1";
        QTest::newRow("freq shift neg") << "freq_shift"
                                        << "-1"
                                        << "from 0 to 1";
        // Accepted by info and plan, then refused by render: now refused up front.
        QTest::newRow("padding 1e9") << "downsample_padding"
                                     << "1000000000"
                                     << "downsample_padding = 1000000000: expected an integer from 0 to 1";
        QTest::newRow("padding 2") << "downsample_padding"
                                   << "2"
                                   << "from 0 to 1";
        QTest::newRow("head dim") << "attention_head_dim"
                                  << "1000000000"
                                  << "from 1 to 4096";
        QTest::newRow("groups") << "norm_num_groups"
                                << "1000000000"
                                << "from 1 to 4096";
        QTest::newRow("attn groups") << "attn_norm_num_groups"
                                     << "1000000000"
                                     << "from 1 to 4096";
        QTest::newRow("scale huge") << "mid_block_scale_factor"
                                    << "1e30"
                                    << "expected a number from 0.01 to 100.0";
        QTest::newRow("scale negative") << "mid_block_scale_factor"
                                        << "-1"
                                        << "expected a number from 0.01 to 100.0";
        QTest::newRow("eps tiny") << "norm_eps"
                                  << "1e-50"
                                  << "norm_eps = 1e-50: expected a number from 1e-12 to 1.0";
        QTest::newRow("eps big") << "norm_eps"
                                 << "10"
                                 << "from 1e-12 to 1.0";
        QTest::newRow("dropout") << "dropout"
                                 << "2"
                                 << "from 0.0 to 1.0";
        QTest::newRow("train steps") << "num_train_timesteps"
                                     << "1000000000000"
                                     << "from 1 to 100000";
        QTest::newRow("u64 max") << "layers_per_block"
                                 << "18446744073709551615"
                                 << "from 1 to 8";
        QTest::newRow("long string") << "act_fn" << (QStringLiteral("\"") + QString(100000, 'g') + "\"")
                                     << "... (100002 bytes)";
    }
    void structuralValuesBounded() {
        QFETCH(QString, key);
        QFETCH(QString, value);
        QFETCH(QString, expected);
        nlohmann::json config = tinyConfig();
        config[key.toStdString()] = nlohmann::json::parse(value.toStdString());
        const std::string m = configError(config);
        EXPECT_MESSAGE(m, expected.toStdString());
        QVERIFY2(m.size() < 400, m.c_str());
        // Through the folder reader: the same message, naming the file.
        const QString dir = folderWithConfig(config);
        const std::string m2 = modelErrorOf([&] { (void)readModelFolderConfig(dir.toStdString()); });
        EXPECT_MESSAGE(m2, (dir + "/config.json'").toStdString());
        EXPECT_MESSAGE(m2, expected.toStdString());
    }

    void boundsAdmitPublishedAndLargerConfigs() {
        // google/ddpm-*-256: six levels up to 512 channels.
        nlohmann::json ddpm256 = tinyConfig();
        ddpm256["block_out_channels"] = {128, 128, 256, 256, 512, 512};
        ddpm256["down_block_types"] = {"DownBlock2D", "DownBlock2D",     "DownBlock2D",
                                       "DownBlock2D", "AttnDownBlock2D", "DownBlock2D"};
        ddpm256["up_block_types"] = {"UpBlock2D", "AttnUpBlock2D", "UpBlock2D", "UpBlock2D", "UpBlock2D", "UpBlock2D"};
        ddpm256["layers_per_block"] = 2;
        ddpm256["norm_num_groups"] = 32;
        ddpm256["sample_size"] = 256;
        ddpm256["freq_shift"] = 1;
        ddpm256["downsample_padding"] = 0;
        QCOMPARE(unetConfigFromJson(ddpm256).levels(), 6);
        // SD-sized widths (the UNet2DConditionModel family keeps these ranges).
        nlohmann::json sd = tinyConfig();
        sd["block_out_channels"] = {320, 640, 1280, 1280};
        sd["down_block_types"] = {"AttnDownBlock2D", "AttnDownBlock2D", "AttnDownBlock2D", "DownBlock2D"};
        sd["up_block_types"] = {"UpBlock2D", "AttnUpBlock2D", "AttnUpBlock2D", "AttnUpBlock2D"};
        sd["layers_per_block"] = 2;
        sd["norm_num_groups"] = 32;
        sd["attention_head_dim"] = 8;
        sd["in_channels"] = 4;
        sd["out_channels"] = 4;
        sd["sample_size"] = 64;
        QCOMPARE(unetConfigFromJson(sd).timeEmbedDim(), 1280);
        // Every bound itself is allowed.
        nlohmann::json edge = tinyConfig();
        edge["block_out_channels"] = std::vector<int>(8, 4096);
        edge["down_block_types"] = std::vector<std::string>(8, "DownBlock2D");
        edge["up_block_types"] = std::vector<std::string>(8, "UpBlock2D");
        edge["layers_per_block"] = 8;
        edge["in_channels"] = 64;
        edge["out_channels"] = 64;
        edge["sample_size"] = 1024;
        edge["time_embedding_dim"] = 16384;
        edge["norm_num_groups"] = 4096;
        const UNetConfig c = unetConfigFromJson(edge);
        QCOMPARE(c.downsampleFactor(), 128);
        // At the bounds the tensor list stays short: it is sized by levels x layers, not values.
        QVERIFY(UNetModel::expectedTensors(c).size() < 2000);
    }

    void freqShiftMustLeaveADivisor() {
        // The sinusoid divides by (block_out_channels[0] / 2 - freq_shift): 0 would give NaN.
        nlohmann::json config = tinyConfig();
        config["block_out_channels"] = {2, 4};
        config["norm_num_groups"] = 2;
        config["freq_shift"] = 1;
        EXPECT_MESSAGE(configError(config), "freq_shift = 1: must be less than block_out_channels[0] / 2 = 1");
        config["freq_shift"] = 0;
        QCOMPARE(unetConfigFromJson(config).freqShift, 0);
    }

    void warningsAreOneSummarisedLine() {
        // 5,000 unknown keys: one warning with the count and the first few names.
        nlohmann::json config = tinyConfig();
        for (int i = 0; i < 5000; ++i) config["unknown_" + std::to_string(i)] = i;
        {
            LogCapture log;
            (void)unetConfigFromJson(config);
            const std::string text = log.text();
            QCOMPARE(std::count(text.begin(), text.end(), '\n'), 1);
            EXPECT_MESSAGE(text, "warning: config.json: ignoring 5000 unknown keys: 'unknown_0', 'unknown_1'");
            EXPECT_MESSAGE(text, "and 4995 more");
        }
        // 5,000 tensors the config does not use (the `info` report printed one line each).
        const UNetConfig tiny = unetConfigFromJson(tinyConfig());
        std::map<std::string, SafetensorsTensorData> tensors;
        const UNetModel weights = UNetModel::random(tiny, 1);
        for (const auto& [name, t] : weights.tensors())
            tensors[name] = {SafetensorsDtype::F32, t.shape, encodeFloats(SafetensorsDtype::F32, t.data)};
        for (int i = 0; i < 5000; ++i)
            tensors["ema." + std::to_string(i)] = {
                SafetensorsDtype::F32, {1}, encodeFloats(SafetensorsDtype::F32, std::vector<float>{0.5f})};
        const QString dir = folderWithConfig(tinyConfig());
        writeSafetensors((dir + "/diffusion_pytorch_model.safetensors").toStdString(), tensors);
        LogCapture log;
        const UNetModel model = UNetModel::load(dir.toStdString());
        QCOMPARE(model.extraTensors().size(), std::size_t{5000});
        const std::string text = log.text();
        QCOMPARE(std::count(text.begin(), text.end(), '\n'), 1);
        EXPECT_MESSAGE(
            text, "diffusion_pytorch_model.safetensors: 5000 tensors are not used by this config: 'ema.0', 'ema.1'");
        EXPECT_MESSAGE(text, "and 4995 more");
    }

    void shardIndexIsBounded() {
        // A weight_map of many distinct shard names is refused before any is opened (and without
        // a linear search of the shard list for every entry).
        const QString dir = folderWithConfig(tinyConfig());
        nlohmann::json map = nlohmann::json::object();
        for (int i = 0; i < 2000; ++i) map["t" + std::to_string(i)] = "shard-" + std::to_string(i) + ".safetensors";
        writeText(dir + "/diffusion_pytorch_model.safetensors.index.json", nlohmann::json{{"weight_map", map}}.dump());
        EXPECT_MESSAGE(modelErrorOf([&] { (void)UNetModel::load(dir.toStdString()); }), "more than 1024 shard files");
        // The index is read like every other JSON file of the folder.
        QFile::remove(dir + "/diffusion_pytorch_model.safetensors.index.json");
        QVERIFY(QDir().mkpath(dir + "/diffusion_pytorch_model.safetensors.index.json"));
        EXPECT_MESSAGE(modelErrorOf([&] { (void)UNetModel::load(dir.toStdString()); }), "is a folder");
    }

    void flopCountRefusesOverflowingSides() {
        const UNetModel model = UNetModel::random(unetConfigFromJson(tinyConfig()), 1);
        QVERIFY(model.flopsPerEvaluation(64, 64) > 0.0);
        try {
            (void)model.flopsPerEvaluation(2147483646, 2147483646);
            QFAIL("a side of 2^31 was counted");
        } catch (const ValidationError& e) {
            QCOMPARE(e.field(), std::string("tile"));
            EXPECT_MESSAGE(std::string(e.what()), "each side must be from 1 to 1048576");
        }
    }
};

QTEST_GUILESS_MAIN(TestModelInput)
#include "tst_modelinput.moc"
