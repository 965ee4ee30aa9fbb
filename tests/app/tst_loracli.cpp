// LoRAs where users use them (app/cli/LoraRun.h, core/run/LoraModelFile.h): `tessera-cli render` on
// the CPU with the tiny SD 1.x pipeline of tests/data/sdpipeline/sd1 and the LoRA made for it
// (tests/data/sdpipeline/lora/sd1_tiny.safetensors, tools/reference/make_sdpipeline_lora.py), named
// by a prompt tag as A1111 users write it (<lora:NAME:W>, looked up in the models folder's Lora/) or
// given with --lora: the tag changes the image, a weight of 0 leaves it bit for bit, --lora equals the
// tag; the manifest and the PNG's parameters name the LoRA as A1111 does ("Lora hashes") and read
// back through --params-from; every refusal (a name found nowhere, a LoRA for SDXL on an SD 1.x model,
// a hostile pickle, a bad tag) is invalid input (exit 2) before any work.
#include <QtTest/QtTest>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QProcess>
#include <QTemporaryDir>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "app/cli/PngIO.h"
#include "core/run/ModelFileLookup.h"
#include "tests/app/CliRun.h"

using namespace tessera;
using tessera::testing::CliRun;
using tessera::testing::describe;

namespace {

const QString kModel = QStringLiteral(TESSERA_TEST_DATA "/sdpipeline/sd1");
const QString kLora = QStringLiteral(TESSERA_TEST_DATA "/sdpipeline/lora/sd1_tiny.safetensors");
const QString kSdxlLora = QStringLiteral(TESSERA_TEST_DATA "/lora/sdxl_kohya.safetensors");
const QString kHostilePickle = QStringLiteral(TESSERA_TEST_DATA "/pickles/hostile/global_builtins_eval.pth");
// A1111's short hash of sd1_tiny.safetensors: its addnet hash (no sshs_model_hash in its metadata).
const QString kShortHash = QStringLiteral("ca9606b0539c");

// tessera-cli with $TESSERA_MODELS set to `models` (unset when empty).
CliRun runCli(const QStringList& args, const QString& models = {}) { return testing::runCliWithModels(args, models); }

// A render of the tiny pipeline: 64x64, one tile, 4 DDIM steps, seed 3, on the CPU.
QStringList renderArgs(const QString& prompt, const QString& out) {
    return {"render", "--model", kModel, "--backend", "cpu", "--width",  "64",   "--height", "64", "--tile",
            "64",     "--steps", "4",    "--seed",    "3",   "--prompt", prompt, "--out",    out};
}

// The path after "image     " on a render's stdout.
QString imagePath(const CliRun& r) {
    for (const QString& line : r.out.split('\n'))
        if (line.startsWith("image ")) return line.mid(5).trimmed();
    return {};
}

nlohmann::json manifestOf(const QString& png) {
    std::ifstream in((png.left(png.size() - 4) + ".json").toStdString());
    return nlohmann::json::parse(in, nullptr, false);
}

std::string imageSha(const CliRun& r) {
    const nlohmann::json m = manifestOf(imagePath(r));
    return m.is_object() ? m.value("image_sha256", std::string()) : std::string();
}

// A models folder with the LoRA in Lora/ under `name`.
QString modelsWithLora(const QTemporaryDir& dir, const QString& name = "sd1_tiny.safetensors") {
    const QString models = dir.filePath("models");
    QDir().mkpath(models + "/Lora");
    QFile::copy(kLora, models + "/Lora/" + name);
    return models;
}

}  // namespace

class TestLoraCli : public QObject {
    Q_OBJECT

private slots:
    void fixturesPresent() {
        QVERIFY2(QFileInfo::exists(kLora),
                 "tests/data/sdpipeline/lora/sd1_tiny.safetensors is missing: run "
                 "tools/reference/make_sdpipeline_lora.py tests/data/sdpipeline/lora");
        QVERIFY(QFileInfo::exists(kModel + "/model_index.json"));
    }

    // <lora:sd1_tiny:1> changes the image; :0 merges nothing and leaves it bit for bit; --lora NAME
    // and --lora FILE:1 are the tag's LoRA, the same image.
    void tagChangesTheImageAndWeightZeroDoesNot() {
        QTemporaryDir dir;
        const QString models = modelsWithLora(dir);
        const QString out = dir.filePath("out");
        const CliRun plain = runCli(renderArgs("a photo of a cat", out), models);
        QVERIFY2(plain.exitCode == 0, qPrintable(describe(plain)));
        const CliRun tagged = runCli(renderArgs("a photo of a cat <lora:sd1_tiny:1>", out), models);
        QVERIFY2(tagged.exitCode == 0, qPrintable(describe(tagged)));
        const CliRun zero = runCli(renderArgs("a photo of a cat <lora:sd1_tiny:0>", out), models);
        QVERIFY2(zero.exitCode == 0, qPrintable(describe(zero)));
        const CliRun byName = runCli(renderArgs("a photo of a cat", out) << "--lora"
                                                                         << "sd1_tiny",
                                     models);
        QVERIFY2(byName.exitCode == 0, qPrintable(describe(byName)));
        const CliRun byPath = runCli(renderArgs("a photo of a cat", out) << "--lora" << kLora + ":1");
        QVERIFY2(byPath.exitCode == 0, qPrintable(describe(byPath)));

        QVERIFY(!imageSha(plain).empty());
        QVERIFY2(imageSha(tagged) != imageSha(plain), "the LoRA left the image as it was");
        QCOMPARE(imageSha(zero), imageSha(plain));
        QCOMPARE(imageSha(byName), imageSha(tagged));
        QCOMPARE(imageSha(byPath), imageSha(tagged));
        // The PNGs themselves, pixel for pixel.
        QVERIFY(readPng(imagePath(zero).toStdString()).image.pixels ==
                readPng(imagePath(plain).toStdString()).image.pixels);
        QVERIFY(readPng(imagePath(byName).toStdString()).image.pixels ==
                readPng(imagePath(tagged).toStdString()).image.pixels);
    }

    // The manifest lists the LoRA (name, file, hashes, multipliers, what merged) and the notes; the
    // PNG's parameters keep the tag in the prompt and write A1111's "Lora hashes"; keys that name
    // nothing in the model are a note on stderr and in the messages.
    void recordAndParametersNameTheLora() {
        QTemporaryDir dir;
        const QString models = modelsWithLora(dir);
        const CliRun r = runCli(renderArgs("a cat <lora:sd1_tiny:0.5:1>", dir.filePath("out")), models);
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        QVERIFY2(r.err.contains("note: lora: 'sd1_tiny': 3 keys name nothing in the model and were not merged "
                                "(lora_unet_down_blocks_7_attentions_0_proj_in.alpha"),
                 qPrintable(r.err));
        QVERIFY2(r.err.contains("extra-network tag(s) taken out of the prompt"), qPrintable(r.err));
        const nlohmann::json m = manifestOf(imagePath(r));
        QVERIFY2(m.contains("loras") && m["loras"].size() == 1, m.dump(1).c_str());
        const nlohmann::json& l = m["loras"][0];
        QCOMPARE(l["name"].get<std::string>(), std::string("sd1_tiny"));
        QCOMPARE(l["file"].get<std::string>(), std::string("sd1_tiny.safetensors"));
        QCOMPARE(QString::fromStdString(l["short_hash"].get<std::string>()), kShortHash);
        QCOMPARE(l["sha256"].get<std::string>().size(), std::size_t(64));
        QCOMPARE(l["te"].get<double>(), 0.5);
        QCOMPARE(l["unet"].get<double>(), 1.0);
        QCOMPARE(l["modules_merged"].get<int>(), 68);
        QCOMPARE(l["keys_unmatched"].get<int>(), 3);
        const std::string messages = m["messages"].dump();
        QVERIFY2(messages.find("lora: sd1_tiny (sd1_tiny.safetensors, hash " + kShortHash.toStdString() +
                               "), te 0.5, unet 1: 68 modules merged") != std::string::npos,
                 messages.c_str());
        QVERIFY2(messages.find("3 keys name nothing in the model") != std::string::npos, messages.c_str());
        QCOMPARE(m["config"]["prompt"].get<std::string>(), std::string("a cat <lora:sd1_tiny:0.5:1>"));

        const std::string parameters = readPng(imagePath(r).toStdString()).text("parameters");
        QVERIFY2(parameters.rfind("a cat <lora:sd1_tiny:0.5:1>\n", 0) == 0, parameters.c_str());
        QVERIFY2(
            parameters.find(", Lora hashes: \"sd1_tiny: " + kShortHash.toStdString() + "\", ") != std::string::npos,
            parameters.c_str());
    }

    // A --lora is written into the PNG's prompt as A1111's "Append LoRA to prompt" setting writes its
    // tag, so the PNG reads back (--params-from) as the same run: the same image, and no note. Where
    // the file found under the name has another hash than the PNG's "Lora hashes", a note says so.
    void parametersReadBackAsTheSameRun() {
        QTemporaryDir dir;
        const QString models = modelsWithLora(dir);
        const CliRun first = runCli(renderArgs("a photo of a cat", dir.filePath("a")) << "--lora"
                                                                                      << "sd1_tiny:0.75",
                                    models);
        QVERIFY2(first.exitCode == 0, qPrintable(describe(first)));
        const std::string parameters = readPng(imagePath(first).toStdString()).text("parameters");
        QVERIFY2(parameters.rfind("a photo of a cat<lora:sd1_tiny:0.75>\n", 0) == 0, parameters.c_str());

        const QStringList again{"render",        "--model",        kModel,  "--backend",      "cpu",
                                "--params-from", imagePath(first), "--out", dir.filePath("b")};
        const CliRun second = runCli(again, models);
        QVERIFY2(second.exitCode == 0, qPrintable(describe(second)));
        QVERIFY2(!second.err.contains("Lora hashes"), qPrintable(second.err));
        QCOMPARE(imageSha(second), imageSha(first));
        QCOMPARE(manifestOf(imagePath(second))["config"]["loras"].size(), std::size_t(0));

        // Another file under the same name: one byte of its tensor data changed (its addnet hash with it).
        QFile lora(models + "/Lora/sd1_tiny.safetensors");
        QVERIFY(lora.open(QIODevice::ReadWrite));
        QByteArray bytes = lora.readAll();
        bytes[bytes.size() - 2] = static_cast<char>(bytes[bytes.size() - 2] ^ 0x01);
        QVERIFY(lora.seek(0) && lora.write(bytes) == bytes.size());
        lora.close();
        const CliRun third = runCli(QStringList(again) << "--out" << dir.filePath("c"), models);
        QVERIFY2(third.exitCode == 0, qPrintable(describe(third)));
        QVERIFY2(third.err.contains("note: lora: 'sd1_tiny' is Lora/sd1_tiny.safetensors here (hash ") &&
                     third.err.contains("the PNG was made with hash " + kShortHash),
                 qPrintable(third.err));
        QVERIFY2(
            manifestOf(imagePath(third))["messages"].dump().find("the PNG was made with hash") != std::string::npos,
            qPrintable(third.err));
    }

    // A NAME found nowhere: refused before any work, naming every folder looked in.
    void missingNameNamesWhereItLooked() {
        QTemporaryDir dir;
        const QString models = modelsWithLora(dir);
        const QString out = dir.filePath("out");
        const CliRun r = runCli(renderArgs("a cat <lora:not_there:1>", out), models);
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("lora: no LoRA named 'not_there' ('not_there.safetensors', 'not_there.pt' or "
                                "'not_there.ckpt') in '" +
                                models + "/Lora', '" + models + "/LyCORIS', '" + models + "/loras'"),
                 qPrintable(r.err));
        QVERIFY2(r.err.contains("set TESSERA_MODELS to the models folder that holds Lora/, LyCORIS/ or loras/"),
                 qPrintable(r.err));
        QVERIFY(!QFileInfo::exists(out));  // nothing written
    }

    // A1111 keeps LoRAs in subfolders of models/Lora and names them by their stem; LyCORIS/ too.
    void namesAreFoundInSubfoldersAndLyCORIS() {
        QTemporaryDir dir;
        const QString models = dir.filePath("models");
        QDir().mkpath(models + "/Lora/styles/old");
        QDir().mkpath(models + "/LyCORIS");
        QVERIFY(QFile::copy(kLora, models + "/Lora/styles/old/deep_one.safetensors"));
        QVERIFY(QFile::copy(kLora, models + "/LyCORIS/lyco_one.safetensors"));
        const CliRun plan = runCli({"plan", "--model", kModel, "--width", "64", "--height", "64", "--tile", "64",
                                    "--prompt", "x <lora:deep_one:0.5> <lyco:lyco_one:1:0.25>"},
                                   models);
        QVERIFY2(plan.exitCode == 0, qPrintable(describe(plan)));
        QVERIFY2(plan.out.contains("lora         deep_one: old/deep_one.safetensors (hash " + kShortHash +
                                   "), te 0.5, unet 0.5; fits Stable Diffusion 1.x: 68 of 69 modules"),
                 qPrintable(plan.out));
        QVERIFY2(plan.out.contains("lora         lyco_one: LyCORIS/lyco_one.safetensors (hash " + kShortHash +
                                   "), te 1, unet 0.25"),
                 qPrintable(plan.out));
    }

    // A LoRA for SDXL on an SD 1.x model is refused before any work, naming both families; so are a
    // hostile pickle, a tag whose weight is no number, and a LoRA for a model without a text encoder.
    void refusalsAreInvalidInput() {
        QTemporaryDir dir;
        const QString out = dir.filePath("out");
        const CliRun sdxl = runCli(renderArgs("a cat", out) << "--lora" << kSdxlLora);
        QCOMPARE(sdxl.exitCode, 2);
        QVERIFY2(sdxl.err.contains("lora: 'sdxl_kohya'") &&
                     sdxl.err.contains("does not fit the model: this LoRA is "
                                       "for Stable Diffusion XL") &&
                     sdxl.err.contains("the model is Stable Diffusion 1.x"),
                 qPrintable(sdxl.err));
        QVERIFY(!QFileInfo::exists(out));

        const QString evil = dir.filePath("evil.pt");
        QVERIFY(QFile::copy(kHostilePickle, evil));
        const CliRun pickle = runCli(renderArgs("a cat", out) << "--lora" << evil);
        QCOMPARE(pickle.exitCode, 2);
        QVERIFY2(pickle.err.contains("tessera-cli: lora: 'evil': ") && pickle.err.contains("builtins.eval") &&
                     pickle.err.contains("nothing is imported or called"),
                 qPrintable(pickle.err));

        const CliRun badTag = runCli(renderArgs("a cat <lora:sd1_tiny:lots>", out));
        QCOMPARE(badTag.exitCode, 2);
        QVERIFY2(badTag.err.contains("prompt: <lora:...>: 'lots' is not a number"), qPrintable(badTag.err));

        const CliRun unconditional = runCli({"render", "--backend", "cpu", "--lora", kLora, "--out", out});
        QCOMPARE(unconditional.exitCode, 2);
        QVERIFY2(unconditional.err.contains("lora: LoRAs are merged into a Stable Diffusion model"),
                 qPrintable(unconditional.err));

        const CliRun noFile = runCli(renderArgs("a cat", out) << "--lora" << dir.filePath("nothing.safetensors"));
        QCOMPARE(noFile.exitCode, 2);
        QVERIFY2(noFile.err.contains("lora: ") && noFile.err.contains("does not exist"), qPrintable(noFile.err));
        QVERIFY(!QFileInfo::exists(out));
    }
};

QTEST_GUILESS_MAIN(TestLoraCli)
#include "tst_loracli.moc"
