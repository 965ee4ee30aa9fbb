// tessera-cli info and plan with model folders that are broken or hostile, or that are one part of
// a Stable Diffusion pipeline: each is refused with exit 2 ("invalid input") and a short message
// naming the file and what is wrong (and, for a part, what to give instead), at once (no blocking
// on a FIFO, no stack overflow, no runaway allocation); warnings go to stderr as one summarised
// line and the report on stdout stays the report.
#include <QtTest/QtTest>

#include <sys/stat.h>

#include <cstring>
#include <filesystem>

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QTemporaryDir>

#include "core/models/sd/SdModel.h"
#include "core/text/ClipTokenizer.h"
#include "tests/app/CliRun.h"
#include "tests/core/SingleFileTestSupport.h"
#include "tests/core/TokenizerTestSupport.h"

using tessera::testing::CliRun;
using tessera::testing::describe;

namespace {

const QString kFixture = QStringLiteral(TESSERA_TEST_DATA "/models/cifar_like");
const QString kSdPipeline = QStringLiteral(TESSERA_TEST_DATA "/sdpipeline/sd1");
const std::string kVocabulary = TESSERA_SOURCE_DIR "/resources/clip/bpe_simple_vocab_16e6.txt.gz";

// Short: every refusal below must come back in well under this.
CliRun runCli(const QStringList& args) { return tessera::testing::runCli(args, 60000); }

void writeText(const QString& path, const QByteArray& text) {
    QFile file(path);
    QVERIFY(file.open(QIODevice::WriteOnly | QIODevice::Truncate));
    QCOMPARE(file.write(text), text.size());
}

QByteArray fixtureConfig() {
    QFile file(kFixture + "/config.json");
    return file.open(QIODevice::ReadOnly) ? file.readAll() : QByteArray();
}

}  // namespace

class TestBadModels : public QObject {
    Q_OBJECT

private:
    QTemporaryDir tmp_;
    int folders_ = 0;

    // A copy of the fixture model whose config.json is `config` (the fixture's when empty).
    QString modelFolder(const QByteArray& config = {}) {
        const QString dir = tmp_.filePath(QStringLiteral("model%1").arg(++folders_));
        QDir().mkpath(dir);
        QFile::copy(kFixture + "/diffusion_pytorch_model.safetensors", dir + "/diffusion_pytorch_model.safetensors");
        QFile::copy(kFixture + "/scheduler_config.json", dir + "/scheduler_config.json");
        writeText(dir + "/config.json", config.isEmpty() ? fixtureConfig() : config);
        return dir;
    }

    // The fixture config with `key` set to `json` (appended: the last of duplicate keys wins).
    QByteArray configWith(const char* key, const QByteArray& json) {
        QByteArray text = fixtureConfig().trimmed();
        text.chop(1);  // the closing brace
        return text + ", \"" + key + "\": " + json + "}";
    }

    // info DIR and plan --model DIR both exit 2 with `expected` in a short stderr.
    void expectRefused(const QString& dir, const QString& expected) {
        for (const QStringList& args : {QStringList{"info", dir}, QStringList{"plan", "--model", dir}}) {
            QElapsedTimer clock;
            clock.start();
            const CliRun r = runCli(args);
            QVERIFY2(r.exitCode == 2, qPrintable(args.join(' ').left(200) + "\n" + describe(r).left(2000)));
            QVERIFY2(r.err.contains(expected), qPrintable(expected + " not in:\n" + r.err.left(2000)));
            QVERIFY2(r.err.size() < 600, qPrintable(r.err.left(2000)));
            QVERIFY2(r.out.isEmpty(), qPrintable(r.out.left(2000)));
            QVERIFY2(clock.elapsed() < 20000, qPrintable(args.first() + " took too long"));
        }
    }

    // A copy of the SD 1.x fixture pipeline, for breaking one part of it.
    QString pipelineCopy() {
        const QString dir = tmp_.filePath(QStringLiteral("pipeline%1").arg(++folders_));
        std::filesystem::copy(kSdPipeline.toStdString(), dir.toStdString(), std::filesystem::copy_options::recursive);
        return dir;
    }

    // `file` with its first `from` replaced by `to`.
    static void edit(const QString& file, const QByteArray& from, const QByteArray& to) {
        QFile in(file);
        QVERIFY(in.open(QIODevice::ReadOnly));
        QByteArray text = in.readAll();
        in.close();
        QVERIFY2(text.contains(from), from.constData());
        writeText(file, text.replace(text.indexOf(from), from.size(), to));
    }

    // info DIR and render --model DIR both exit 2 ("invalid input") with `expected` on stderr, at
    // once: the refusal itself takes milliseconds (tests/core/tst_sdpipeline bounds it to a second in
    // process); the bound here leaves room for starting a sanitized process on a loaded machine.
    void expectModelRefused(const QString& model, const QString& expected) {
        for (const QStringList& args :
             {QStringList{"info", model}, QStringList{"render", "--model", model, "--out", tmp_.filePath("out"),
                                                      "--width", "64", "--height", "64", "--steps", "1"}}) {
            QElapsedTimer clock;
            clock.start();
            const CliRun r = runCli(args);
            const qint64 ms = clock.elapsed();
            QVERIFY2(r.exitCode == 2, qPrintable(args.join(' ').left(300) + "\n" + describe(r).left(2000)));
            QVERIFY2(r.err.contains(expected), qPrintable(expected + " not in:\n" + r.err.left(2000)));
            QVERIFY2(!r.err.contains(QStringLiteral("failed:")), qPrintable(r.err.left(2000)));
            QVERIFY2(ms < 3000, qPrintable(args.first() + QStringLiteral(" took %1 ms").arg(ms)));
        }
    }

private slots:
    void initTestCase() { QVERIFY(tmp_.isValid()); }

    // A pipeline component folder that is a symbolic-link loop: named, exit 2 (the raw
    // "filesystem error: ... Too many levels of symbolic links" exited 1).
    void pipelineComponentLinkLoop() {
        const QString dir = pipelineCopy();
        QVERIFY(QDir(dir + "/text_encoder").removeRecursively());
        std::filesystem::create_directory_symlink("text_encoder", (dir + "/text_encoder").toStdString());
        expectModelRefused(dir, "model: '" + dir + "/text_encoder': is a symbolic-link loop");
    }

    // Text encoder values no prompt can run with: the file, the key and the range (max_position_embeddings 1
    // failed at the first prompt, exit 1, naming no file).
    void textEncoderConfigOutOfRange() {
        const QString dir = pipelineCopy();
        edit(dir + "/text_encoder/config.json", "\"max_position_embeddings\": 77", "\"max_position_embeddings\": 1");
        expectModelRefused(dir, "model: '" + dir +
                                    "/text_encoder/config.json': max_position_embeddings = 1: expected an integer from "
                                    "77 to 4096");
    }

    // A tokenizer/ of another model (ids beyond the text encoder's vocab_size): both folders named
    // when the pipeline is opened, not at the first prompt.
    void tokenizerBeyondTheTextEncodersVocabulary() {
        const QString dir = pipelineCopy();
        QVERIFY(QDir().mkpath(dir + "/tokenizer"));
        tokenizer_test::writeFolder((dir + "/tokenizer").toStdString(),
                                    tessera::ClipTokenizer::fromMergesGz(kVocabulary),
                                    tokenizer_test::unpackedMerges(kVocabulary));
        edit(dir + "/text_encoder/config.json", "\"vocab_size\": 49408", "\"vocab_size\": 1000");
        edit(dir + "/text_encoder/config.json", "\"eos_token_id\": 49407", "\"eos_token_id\": 2");
        expectModelRefused(dir, "model: '" + dir +
                                    "/tokenizer': its vocabulary (vocab.json) gives token ids up to 49407, "
                                    "but the text encoder in '" +
                                    dir + "/text_encoder' has vocab_size 1000 (ids 0 to 999");
    }

    // "_class_name": 42 was read as no class name.
    void modelIndexClassNameOfTheWrongType() {
        const QString dir = pipelineCopy();
        edit(dir + "/model_index.json", "\"_class_name\": \"StableDiffusionPipeline\"", "\"_class_name\": 42");
        expectModelRefused(dir, "model: '" + dir +
                                    "/model_index.json': _class_name = 42: expected a string (the pipeline class, e.g. "
                                    "\"StableDiffusionPipeline\")");
    }

    // An SDXL single file without its second text encoder was called an SD 1.x file with no text encoder.
    void sdxlSingleFileMissingItsSecondTextEncoder() {
        using namespace tessera;
        const SdModelConfigs c = randomSdModelConfigs("random:sdxl");
        TensorList tensors;
        for (auto& tensor : singleFileTensors(SdFamily::SDXL, c.unet, c.vae, c.textEncoder, c.textEncoder2))
            if (tensor.first.rfind("conditioner.embedders.1.", 0) != 0) tensors.push_back(tensor);
        const QString file = tmp_.filePath(QStringLiteral("sdxl_no_bigg.safetensors"));
        single_file_test::writeHeaderOnly(file.toStdString(), tensors);
        expectModelRefused(file, "an SDXL checkpoint by its UNet");
        const CliRun r = runCli({"info", file});
        QVERIFY2(r.err.contains(QStringLiteral("without its second text encoder (OpenCLIP bigG")), qPrintable(r.err));
        QVERIFY2(!r.err.contains(QStringLiteral("SD 1.x")), qPrintable(r.err));
    }

    void fixtureIsAccepted() {
        const CliRun r = runCli({"info", modelFolder()});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        QVERIFY(r.out.contains(QStringLiteral("layers per block")));
    }

    void foldersThatAreNotModelFolders() {
        const QString loop = tmp_.filePath(QStringLiteral("loop"));
        QVERIFY(QFile::link(loop, loop));
        expectRefused(loop, QStringLiteral("Too many levels of symbolic links"));
        expectRefused(QStringLiteral("/tmp/") + QString(10000, 'x'),
                      QStringLiteral("a model folder path may be at most 4096 bytes long"));
        const QString folderConfig = modelFolder();
        QFile::remove(folderConfig + "/config.json");
        QVERIFY(QDir().mkpath(folderConfig + "/config.json"));
        expectRefused(folderConfig, QStringLiteral("config.json': is a folder; a regular file is needed"));
    }

    void filesThatWouldBlockOrNeverEnd() {
        const QString fifoConfig = modelFolder();
        QFile::remove(fifoConfig + "/config.json");
        QCOMPARE(::mkfifo(qPrintable(fifoConfig + "/config.json"), 0600), 0);
        expectRefused(fifoConfig, QStringLiteral("config.json': is not a regular file"));
        const QString zeroConfig = modelFolder();
        QFile::remove(zeroConfig + "/config.json");
        QVERIFY(QFile::link(QStringLiteral("/dev/zero"), zeroConfig + "/config.json"));
        expectRefused(zeroConfig, QStringLiteral("config.json': is not a regular file"));
        const QString fifoWeights = modelFolder();
        QFile::remove(fifoWeights + "/diffusion_pytorch_model.safetensors");
        QCOMPARE(::mkfifo(qPrintable(fifoWeights + "/diffusion_pytorch_model.safetensors"), 0600), 0);
        expectRefused(fifoWeights, QStringLiteral("diffusion_pytorch_model.safetensors': is not a regular file"));
    }

    void deepNestingAndHugeValues() {
        // ~60,000 levels in config.json crashed with exit 139.
        const QByteArray deep = QByteArray(60000, '[') + QByteArray(60000, ']');
        expectRefused(modelFolder("{\"block_out_channels\": " + deep + "}"),
                      QStringLiteral("JSON nested deeper than 64 levels"));
        // ... and in a safetensors shape.
        const QString deepShape = modelFolder();
        const QByteArray header = "{\"t\":{\"dtype\":\"F32\",\"shape\":" + deep + ",\"data_offsets\":[0,4]}}";
        QByteArray bytes(8, '\0');
        const quint64 length = static_cast<quint64>(header.size());
        std::memcpy(bytes.data(), &length, 8);
        writeText(deepShape + "/diffusion_pytorch_model.safetensors", bytes + header + QByteArray(4, '\0'));
        expectRefused(deepShape, QStringLiteral("nested deeper than 3 levels"));
        // A 100 KB value is quoted as an excerpt.
        expectRefused(modelFolder(configWith("act_fn", "\"" + QByteArray(100000, 'g') + "\"")),
                      QStringLiteral("... (100002 bytes)"));
    }

    void structuralValuesRefusedBeforeAllocating() {
        // layers_per_block 1e9 grew `info` past 8 GB while it listed the expected tensors.
        expectRefused(modelFolder(configWith("layers_per_block", "1000000000")),
                      QStringLiteral("layers_per_block = 1000000000: expected an integer from 1 to 8"));
        expectRefused(modelFolder(configWith("block_out_channels", "[1000000000, 32, 32]")),
                      QStringLiteral("block_out_channels = 1000000000: expected an integer from 1 to 4096"));
        // downsample_padding 1e9 was accepted by info and plan, then refused by render.
        expectRefused(modelFolder(configWith("downsample_padding", "1000000000")),
                      QStringLiteral("downsample_padding = 1000000000: expected an integer from 0 to 1"));
    }

    void warningsSummarisedOnStderr() {
        // 5,000 tensors the config does not use: one warning line on stderr, none on stdout.
        const QString dir = modelFolder();
        QFile weights(dir + "/diffusion_pytorch_model.safetensors");
        QVERIFY(weights.open(QIODevice::ReadOnly));
        QByteArray bytes = weights.readAll();
        weights.close();
        quint64 length = 0;
        std::memcpy(&length, bytes.constData(), 8);
        QByteArray header = bytes.mid(8, static_cast<int>(length)).trimmed();
        const QByteArray data = bytes.mid(8 + static_cast<int>(length));
        header.chop(1);  // the closing brace
        for (int i = 0; i < 5000; ++i)
            header += ",\"ema." + QByteArray::number(i) + "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[" +
                      QByteArray::number(data.size() + i) + "," + QByteArray::number(data.size() + i + 1) + "]}";
        header += "}";
        length = static_cast<quint64>(header.size());
        bytes = QByteArray(8, '\0');
        std::memcpy(bytes.data(), &length, 8);
        writeText(dir + "/diffusion_pytorch_model.safetensors", bytes + header + data + QByteArray(5000, '\0'));

        const CliRun r = runCli({"info", dir});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r).left(3000)));
        QVERIFY2(!r.out.contains(QStringLiteral("ema.")), qPrintable(r.out.left(3000)));
        QVERIFY2(r.out.contains(QStringLiteral("5000 tensors in the file are not used")), qPrintable(r.out));
        QCOMPARE(r.err.count(QStringLiteral("ema.")), 5);
        QVERIFY2(r.err.contains(QStringLiteral("5000 tensors are not used by this config: 'ema.0'")),
                 qPrintable(r.err));
        QVERIFY2(r.err.contains(QStringLiteral("and 4995 more")), qPrintable(r.err));
        QCOMPARE(r.err.count('\n'), 1);
    }

    // A Stable Diffusion pipeline's unet/, vae/, text_encoder/, scheduler/ or tokenizer/ folder
    // given as the model: refused (exit 2) naming the part it is and what to point --model at
    // instead.
    void pipelinePartsSayWhatToGive() {
        const QString data = QStringLiteral(TESSERA_TEST_DATA);
        const QString sd1 = data + "/sdpipeline/sd1";
        const auto refusal = [](const QString& dir, const QString& part, const QString& pipeline) {
            return "tessera-cli: model: '" + dir + "' is one part (" + part +
                   ") of a Stable Diffusion pipeline, not a model of its own; point --model at the pipeline folder "
                   "that holds model_index.json" +
                   (pipeline.isEmpty() ? QString() : " (here the folder above, '" + pipeline + "')") +
                   ", or at a single-file checkpoint (.safetensors)\n";
        };
        const auto expectRefusal = [](const QStringList& args, const QString& expected) {
            const CliRun r = runCli(args);
            QVERIFY2(r.exitCode == 2, qPrintable(args.join(' ') + "\n" + describe(r).left(2000)));
            QCOMPARE(r.err, expected);
            QVERIFY2(r.out.isEmpty(), qPrintable(r.out.left(2000)));
        };
        // The UNet of SDXL's fixture has no model_index.json above it.
        expectRefusal(
            {"info", data + "/sdxlunet/unet"},
            refusal(data + "/sdxlunet/unet", "the UNet: config.json's _class_name is 'UNet2DConditionModel'", {}));
        expectRefusal({"info", "--model", sd1 + "/unet"},
                      refusal(sd1 + "/unet", "the UNet: config.json's _class_name is 'UNet2DConditionModel'", sd1));
        expectRefusal({"render", "--model", sd1 + "/vae", "--out", tmp_.filePath(QStringLiteral("out"))},
                      refusal(sd1 + "/vae", "the VAE: config.json's _class_name is 'AutoencoderKL'", sd1));
        expectRefusal(
            {"plan", "--model", sd1 + "/text_encoder"},
            refusal(sd1 + "/text_encoder", "the text encoder: config.json's architectures names 'CLIPTextModel'", sd1));
        expectRefusal({"render", "--model", sd1 + "/scheduler", "--out", tmp_.filePath(QStringLiteral("out"))},
                      refusal(sd1 + "/scheduler", "the scheduler: scheduler_config.json and no config.json", sd1));
        expectRefusal({"tokens", "--model", sd1 + "/unet", "a cat"},
                      refusal(sd1 + "/unet", "the UNet: config.json's _class_name is 'UNet2DConditionModel'", sd1));

        const QString pipeline = tmp_.filePath(QStringLiteral("pipeline"));
        QVERIFY(QDir().mkpath(pipeline + "/tokenizer_2"));
        writeText(pipeline + "/model_index.json", "{\"_class_name\": \"StableDiffusionXLPipeline\"}");
        writeText(pipeline + "/tokenizer_2/vocab.json", "{}");
        writeText(pipeline + "/tokenizer_2/merges.txt", "#version: 0.2\n");
        expectRefusal({"info", pipeline + "/tokenizer_2/"},
                      refusal(pipeline + "/tokenizer_2/",
                              "the second tokenizer: vocab.json and merges.txt and no config.json", pipeline));
    }
};

QTEST_GUILESS_MAIN(TestBadModels)
#include "tst_badmodels.moc"
