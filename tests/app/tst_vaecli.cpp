// `render --vae` and `plan --vae` as users run them (app/cli/VaeReplacement.h,
// core/models/sd/SingleFileVae.h, core/run/VaeFile.h), on tests/data/sdpipeline/sd1 and the VAE
// files of tests/data/sdfiles (tools/reference/make_sd_ckpt_fixtures.py):
//  - a separate VAE changes the image, to the image of a pipeline whose vae/ holds its weights;
//    the .pt and the .safetensors give the same image; a NAME is found in a models folder's VAE/;
//  - the manifest records it and the PNG's parameters name it as A1111 does ("VAE hash: <10 hex>,
//    VAE: <file name>"), which --params-from reads back to the same image where the name is found,
//    and leaves out with a note where it is not;
//  - a VAE that does not fit the model is refused before any work (exit 2), naming both.
#include <QtTest/QtTest>

#include <QCryptographicHash>
#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "app/cli/PngIO.h"
#include "app/cli/VaeReplacement.h"
#include "core/run/ModelFileLookup.h"
#include "core/run/RunRecordIO.h"
#include "tests/app/CliRun.h"

using namespace tessera;
using tessera::testing::CliRun;
using tessera::testing::describe;

namespace {

const QString kData = QStringLiteral(TESSERA_TEST_DATA);
const QString kPipeline = kData + "/sdpipeline/sd1";
const QString kVae = kData + "/sdfiles/vae/";

// tessera-cli with $TESSERA_MODELS set to `models` (unset when empty).
CliRun runCli(const QStringList& args, const QString& models = {}) { return testing::runCliWithModels(args, models); }

// The small run every case renders, into `out`.
QStringList renderArgs(const QString& model, const QString& out) {
    return {"render", "--model", model, "--width",  "64",     "--height",  "64",  "--tile", "64", "--steps",
            "2",      "--seed",  "5",   "--prompt", "a cube", "--backend", "cpu", "--out",  out};
}

QString onlyFile(const QString& dir, const char* pattern) {
    const QStringList files = QDir(dir).entryList({QString::fromLatin1(pattern)}, QDir::Files);
    return files.size() == 1 ? QDir(dir).filePath(files.front()) : QString();
}

QJsonObject manifestIn(const QString& dir) {
    QFile file(onlyFile(dir, "*.json"));
    if (!file.open(QIODevice::ReadOnly)) return {};
    return QJsonDocument::fromJson(file.readAll()).object();
}

QString sha256Of(const QString& path) {
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly)) return {};
    return QString::fromLatin1(QCryptographicHash::hash(file.readAll(), QCryptographicHash::Sha256).toHex());
}

bool copyTree(const QString& from, const QString& to) {
    std::error_code ec;
    std::filesystem::copy(from.toStdString(), to.toStdString(), std::filesystem::copy_options::recursive, ec);
    return !ec;
}

}  // namespace

class TestVaeCli : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() {
        QVERIFY2(QFileInfo::exists(kVae + "ldm.safetensors"),
                 "tests/data/sdfiles (tools/reference/make_sd_ckpt_fixtures.py)");
    }

    void separateVaeReplacesTheModelsOwn() {
        QTemporaryDir dir;
        const CliRun own = runCli(renderArgs(kPipeline, dir.filePath("own")));
        QVERIFY2(own.exitCode == 0, qPrintable(describe(own)));
        const CliRun withVae =
            runCli(renderArgs(kPipeline, dir.filePath("vae")) + QStringList{"--vae", kVae + "ldm.safetensors"});
        QVERIFY2(withVae.exitCode == 0, qPrintable(describe(withVae)));
        const QJsonObject manifest = manifestIn(dir.filePath("vae"));
        const QString image = manifest["image_sha256"].toString();
        QVERIFY(!image.isEmpty());
        QVERIFY(image != manifestIn(dir.filePath("own"))["image_sha256"].toString());
        QVERIFY(!manifestIn(dir.filePath("own")).contains("vae_file"));

        // The manifest and the PNG name the VAE as A1111 does.
        const QString hash = sha256Of(kVae + "ldm.safetensors");
        const QJsonObject v = manifest["vae_file"].toObject();
        QCOMPARE(v["name"].toString(), QString("ldm.safetensors"));
        QCOMPARE(v["sha256"].toString(), hash);
        QCOMPARE(v["layout"].toString(), QString("LDM"));
        QCOMPARE(v["pickle"].toBool(), false);
        QCOMPARE(manifest["config"].toObject()["vae"].toString(), kVae + "ldm.safetensors");
        const std::string parameters = readPng(onlyFile(dir.filePath("vae"), "*.png").toStdString()).text("parameters");
        const std::string keys = ", Model: sd1, VAE hash: " + hash.left(10).toStdString() + ", VAE: ldm.safetensors, ";
        QVERIFY2(parameters.find(keys) != std::string::npos, parameters.c_str());
        QVERIFY2(withVae.err.contains("note: vae: ldm.safetensors (LDM names, safetensors, VAE hash " + hash.left(10)),
                 qPrintable(withVae.err));

        // The same weights in a pipeline folder's vae/: the same image.
        const QString pipeline = dir.filePath("pipeline");
        QVERIFY(copyTree(kPipeline, pipeline));
        QVERIFY(QFile::remove(pipeline + "/vae/diffusion_pytorch_model.safetensors"));
        QVERIFY(QFile::copy(kVae + "diffusers/diffusion_pytorch_model.safetensors",
                            pipeline + "/vae/diffusion_pytorch_model.safetensors"));
        const CliRun folder = runCli(renderArgs(pipeline, dir.filePath("folder")));
        QVERIFY2(folder.exitCode == 0, qPrintable(describe(folder)));
        QCOMPARE(manifestIn(dir.filePath("folder"))["image_sha256"].toString(), image);

        // The .pt, read by the restricted reader, found by its name in a models folder's VAE/.
        const QString models = dir.filePath("models");
        QVERIFY(QDir().mkpath(models + "/VAE"));
        QVERIFY(QFile::copy(kVae + "ldm.pt", models + "/VAE/mse.pt"));
        const CliRun byName = runCli(renderArgs(kPipeline, dir.filePath("pt")) + QStringList{"--vae", "mse"}, models);
        QVERIFY2(byName.exitCode == 0, qPrintable(describe(byName)));
        const QJsonObject pt = manifestIn(dir.filePath("pt"));
        QCOMPARE(pt["image_sha256"].toString(), image);
        QCOMPARE(pt["vae_file"].toObject()["name"].toString(), QString("mse.pt"));
        QCOMPARE(pt["vae_file"].toObject()["pickle"].toBool(), true);
        QVERIFY2(byName.err.contains("restricted reader (nothing executed)"), qPrintable(byName.err));

        // plan names it.
        const CliRun plan = runCli({"plan", "--model", kPipeline, "--width", "64", "--height", "64", "--tile", "64",
                                    "--vae", kVae + "diffusers"});
        QVERIFY2(plan.exitCode == 0, qPrintable(describe(plan)));
        QVERIFY2(plan.out.contains("vae          diffusers (diffusers names, safetensors) in place of the model's own"),
                 qPrintable(plan.out));
    }

    // The PNG's "VAE" read back: the same image where the name is found; a note and the model's own
    // VAE where it is not (as A1111 when its VAE list lacks the name).
    void pngParametersReadBack() {
        QTemporaryDir dir;
        const QString models = dir.filePath("models");
        QVERIFY(QDir().mkpath(models + "/VAE"));
        QVERIFY(QFile::copy(kVae + "ldm.safetensors", models + "/VAE/ldm.safetensors"));
        const CliRun first =
            runCli(renderArgs(kPipeline, dir.filePath("a")) + QStringList{"--vae", "ldm.safetensors"}, models);
        QVERIFY2(first.exitCode == 0, qPrintable(describe(first)));
        const QString png = onlyFile(dir.filePath("a"), "*.png");
        const QString image = manifestIn(dir.filePath("a"))["image_sha256"].toString();

        const QStringList again{"render", "--params-from", png, "--model", kPipeline, "--backend", "cpu"};
        const CliRun found = runCli(again + QStringList{"--out", dir.filePath("b")}, models);
        QVERIFY2(found.exitCode == 0, qPrintable(describe(found)));
        QCOMPARE(manifestIn(dir.filePath("b"))["image_sha256"].toString(), image);
        QCOMPARE(manifestIn(dir.filePath("b"))["config"].toObject()["vae"].toString(), QString("ldm.safetensors"));
        QVERIFY2(!found.err.contains("the PNG's VAE"), qPrintable(found.err));

        const CliRun missing = runCli(again + QStringList{"--out", dir.filePath("c")});
        QVERIFY2(missing.exitCode == 0, qPrintable(describe(missing)));
        QVERIFY2(missing.err.contains("note: params-from: the PNG's VAE is not used, the model's own is: vae: no VAE "
                                      "named 'ldm.safetensors'"),
                 qPrintable(missing.err));
        QVERIFY(!manifestIn(dir.filePath("c")).contains("vae_file"));
        QVERIFY(manifestIn(dir.filePath("c"))["image_sha256"].toString() != image);

        // Another file under the PNG's name: its hash is not the PNG's, and the note says so.
        QVERIFY(QFile::remove(models + "/VAE/ldm.safetensors"));
        QVERIFY(QFile::copy(kVae + "diffusers/diffusion_pytorch_model.safetensors", models + "/VAE/ldm.safetensors"));
        const CliRun other = runCli(again + QStringList{"--out", dir.filePath("d")}, models);
        QVERIFY2(other.exitCode == 0, qPrintable(describe(other)));
        QVERIFY2(other.err.contains("note: params-from: the PNG's VAE hash "), qPrintable(other.err));
    }

    void refusedBeforeAnyWork() {
        QTemporaryDir dir;
        const QString out = dir.filePath("out");
        // Sizes that do not fit: a folder (its config.json) and a checkpoint's own VAE (its tensors).
        CliRun r = runCli(renderArgs(kPipeline, out) + QStringList{"--vae", kData + "/singlefile/sd1/vae"});
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("vae: '") &&
                     r.err.contains("singlefile/sd1/vae' does not fit the VAE of 'sd1' "
                                    "(block_out_channels [8, 8, 16, 16]") &&
                     r.err.contains("its config.json has block_out_channels [4, 8]"),
                 qPrintable(describe(r)));
        r = runCli(renderArgs(kPipeline, out) + QStringList{"--vae", kData + "/singlefile/sd1.safetensors"});
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("sd1.safetensors' does not fit the VAE of 'sd1'") &&
                     r.err.contains("'first_stage_model.encoder.conv_in.weight'") &&
                     r.err.contains("found [4, 3, 3, 3]"),
                 qPrintable(describe(r)));
        // A checkpoint that would run a command; a name found nowhere; a UNet2DModel.
        r = runCli(renderArgs(kPipeline, out) + QStringList{"--vae", kData + "/sdfiles/hostile.ckpt"});
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("'posix.system'"), qPrintable(describe(r)));
        r = runCli(renderArgs(kPipeline, out) + QStringList{"--vae", "nowhere"});
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("vae: no VAE named 'nowhere'"), qPrintable(describe(r)));
        r = runCli(renderArgs(kData + "/models/cifar_like", out) + QStringList{"--vae", kVae + "ldm.safetensors"});
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("vae: a separate VAE replaces a Stable Diffusion model's own"),
                 qPrintable(describe(r)));
        QVERIFY(!QFileInfo::exists(out));
        r = runCli({"plan", "--model", kPipeline, "--vae", kVae + "../hostile.ckpt"});
        QCOMPARE(r.exitCode, 2);
    }

    // A pickled model file: the record (and so the manifest) says the restricted reader read it.
    void pickledModelIsRecorded() {
        RunRecord record;
        const std::string note = recordModelReader(kData.toStdString() + "/sdfiles/sd1.ckpt", record);
        QVERIFY(record.modelPickle);
        QVERIFY2(note.find("sd1.ckpt' is a PyTorch checkpoint (zip") != std::string::npos &&
                     note.find("restricted reader (nothing executed)") != std::string::npos &&
                     note.find("the state dict under 'state_dict'") != std::string::npos,
                 note.c_str());
        QCOMPARE(record.messages.back(), note);
        QCOMPARE(manifestJson(record)["model_pickle"].get<bool>(), true);
        QCOMPARE(runRecordFromManifest(manifestJson(record)).modelPickle, true);
        RunRecord plain;
        QVERIFY(recordModelReader(kData.toStdString() + "/singlefile/sd1.safetensors", plain).empty());
        QVERIFY(recordModelReader(kPipeline.toStdString(), plain).empty());
        QVERIFY(!plain.modelPickle && plain.messages.empty() && !manifestJson(plain).contains("model_pickle"));
        // tessera-cli info reads the .ckpt (it needs its config folder to fit a family: GroupNorm 4).
        const CliRun r = runCli({"info", kData + "/sdfiles/sd1.ckpt"});
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("sd1.ckpt") && r.err.contains("GroupNorm groups 32") && !r.err.contains("unpickl"),
                 qPrintable(describe(r)));
    }
};

QTEST_GUILESS_MAIN(TestVaeCli)
#include "tst_vaecli.moc"
