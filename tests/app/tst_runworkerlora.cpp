// LoRAs and a separate VAE in the window's worker (app/qt/RunWorker.h, app/qt/KeptSdModel.h) on the
// CPU with the tiny SD 1.x pipeline of tests/data/sdpipeline/sd1 and the LoRA made for it
// (tests/data/sdpipeline/lora/sd1_tiny.safetensors): the model is read once and kept while the
// LoRAs change (a prompt tag, the window's list, other weights, none), each set taken out of the
// weights bit for bit before the next is merged; the images are tessera-cli render's for the same
// settings; a LoRA made for another family is refused before any work; a separate VAE reads the
// model again once, then is kept with it. Parameters read from an image check its "Lora hashes" and
// "VAE hash" against the files found, and name what was not found.
#include <QtTest/QtTest>

#include <QCryptographicHash>
#include <QDir>
#include <QFile>
#include <QSignalSpy>
#include <QTemporaryDir>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "app/cli/InitImage.h"
#include "app/qt/ImportedParameters.h"
#include "app/qt/RunWorker.h"
#include "core/run/ModelFileLookup.h"
#include "core/sampling/ImageOps.h"
#include "tests/app/CliRun.h"
#include "tests/app/WorkerThread.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

const QString kModel = QStringLiteral(TESSERA_TEST_DATA "/sdpipeline/sd1");
const QString kLora = QStringLiteral(TESSERA_TEST_DATA "/sdpipeline/lora/sd1_tiny.safetensors");
const QString kSdxlLora = QStringLiteral(TESSERA_TEST_DATA "/lora/sdxl_kohya.safetensors");
const QString kVae = QStringLiteral(TESSERA_TEST_DATA "/sdfiles/vae/ldm.safetensors");

// The run tst_loracli renders: 64x64, one tile, 4 steps, seed 3, on the CPU.
RunConfig tinyRun(const std::string& prompt) {
    RunConfig c;
    c.model = kModel.toStdString();
    c.backend = BackendKind::CPU;
    c.precision = Precision::FP32;
    c.width = 64;
    c.height = 64;
    c.tile = 64;
    c.steps = 4;
    c.seed = 3;
    c.prompt = prompt;
    return c;
}

QStringList cliArgs(const QString& prompt, const QString& out) {
    return {"render", "--model", kModel, "--backend", "cpu", "--width",  "64",   "--height", "64", "--tile",
            "64",     "--steps", "4",    "--seed",    "3",   "--prompt", prompt, "--out",    out};
}

// image_sha256 of the one manifest tessera-cli wrote into `out`.
std::string cliImageSha(const QString& out) {
    const QStringList manifests = QDir(out).entryList({QStringLiteral("*.json")}, QDir::Files);
    if (manifests.size() != 1) return {};
    std::ifstream in(QDir(out).filePath(manifests.front()).toStdString());
    const nlohmann::json m = nlohmann::json::parse(in, nullptr, false);
    return m.is_object() ? m.value("image_sha256", std::string()) : std::string();
}

// "" when the window's run made tessera-cli's image (the PNG in `out`): the same bits, or, where this
// machine's OpenBLAS rounds the LoRA's double products differently between the two processes (seen
// with OpenBLAS 0.3.21's Sapphire Rapids kernels, not with its Haswell or SkylakeX ones), every 8-bit
// value within one level (warned); else what differs.
QString sameImageAsCli(const RunResult& window, const QString& out) {
    if (window.record.imageSha256 == cliImageSha(out)) return {};
    const QStringList pngs = QDir(out).entryList({QStringLiteral("*.png")}, QDir::Files);
    if (pngs.size() != 1) return QStringLiteral("tessera-cli wrote %1 PNGs").arg(pngs.size());
    const Rgb8Image cli = decodeImageFile(QDir(out).filePath(pngs.front()).toStdString());
    const Rgb8Image mine = toRgb8(window.image);
    if (cli.width != mine.width || cli.height != mine.height || cli.pixels.size() != mine.pixels.size())
        return QStringLiteral("the images differ in size");
    int worst = 0;
    for (std::size_t i = 0; i < cli.pixels.size(); ++i)
        worst = std::max(worst, std::abs(cli.pixels[i] - mine.pixels[i]));
    if (worst > 1) return QStringLiteral("the images differ by up to %1 levels").arg(worst);
    qWarning(
        "the window's and tessera-cli's images differ in their bits, by at most %d level: this machine's "
        "OpenBLAS rounds the LoRA's products differently in the two processes",
        worst);
    return {};
}

bool hasMessage(const RunRecord& record, const std::string& part) {
    for (const std::string& m : record.messages)
        if (m.find(part) != std::string::npos) return true;
    return false;
}

QString unmappedOf(const ImportedParameters& imported) {
    QStringList lines;
    for (const UnmappedSetting& u : imported.unmapped) lines << QString::fromStdString(u.message());
    return lines.join('\n');
}

QString messagesOf(const RunRecord& record) {
    QStringList lines;
    for (const std::string& m : record.messages) lines << QString::fromStdString(m);
    return lines.join('\n');
}

}  // namespace

class TestRunWorkerLora : public QObject {
    Q_OBJECT

private:
    QTemporaryDir scratch_;
    QString models_;  // a models folder with the LoRA in Lora/

    Ended run(WorkerThread& thread, const RunConfig& config, quint64 id) {
        return waitForEnd(thread.worker, [&] { thread.start(config, id); });
    }

private slots:
    void initTestCase() {
        QVERIFY(scratch_.isValid());
        QVERIFY2(QFile::exists(kLora), "tests/data/sdpipeline/lora (tools/reference/make_sdpipeline_lora.py)");
        registerRunMetaTypes();
        // A developer's own models folder must not leak into the lookups.
        qunsetenv(kModelsFolderVariable);
        models_ = scratch_.filePath(QStringLiteral("models"));
        QVERIFY(QDir().mkpath(models_ + "/Lora"));
        QVERIFY(QFile::copy(kLora, models_ + "/Lora/sd1_tiny.safetensors"));
    }

    void changingLorasKeepsTheModel() {
        WorkerThread thread;
        thread.worker->setModelsFolder(models_.toStdString());
        QSignalSpy loads(thread.worker, &RunWorker::modelLoadProgress);

        const Ended plain = run(thread, tinyRun("a red cube"), 1);
        QVERIFY2(plain.run, qPrintable(plain.error));
        QCOMPARE(thread.worker->sdModelReads(), 1);
        QVERIFY(!loads.isEmpty());
        loads.clear();

        // A prompt tag: merged into the kept model, nothing read.
        const Ended tagged = run(thread, tinyRun("a red cube <lora:sd1_tiny:1>"), 2);
        QVERIFY2(tagged.run, qPrintable(tagged.error));
        const RunRecord& t = tagged.run->result->record;
        QCOMPARE(thread.worker->sdModelReads(), 1);
        QVERIFY(loads.isEmpty());
        QVERIFY(t.imageSha256 != plain.run->result->record.imageSha256);
        QCOMPARE(t.loras.size(), std::size_t{1});
        QCOMPARE(t.loras[0].name, std::string("sd1_tiny"));
        QVERIFY(t.loras[0].modulesMerged > 0);
        QVERIFY2(hasMessage(t, "merged into the model's float32 weights"), qPrintable(messagesOf(t)));

        // The window's list with other weights: the tag's set taken out, this one merged.
        RunConfig listed = tinyRun("a red cube");
        listed.loras.push_back(LoraSetting{(models_ + "/Lora/sd1_tiny.safetensors").toStdString(), 0.5, 0.5});
        const Ended fromList = run(thread, listed, 3);
        QVERIFY2(fromList.run, qPrintable(fromList.error));
        const RunRecord& l = fromList.run->result->record;
        QCOMPARE(thread.worker->sdModelReads(), 1);
        QVERIFY(l.imageSha256 != t.imageSha256 && l.imageSha256 != plain.run->result->record.imageSha256);
        QVERIFY2(hasMessage(l, "taken out of the kept model"), qPrintable(messagesOf(l)));
        QCOMPARE(l.loras.size(), std::size_t{1});
        QCOMPARE(l.loras[0].unetMultiplier, 0.5);

        // No LoRA: the file's own weights again, bit for bit.
        const Ended again = run(thread, tinyRun("a red cube"), 4);
        QVERIFY2(again.run, qPrintable(again.error));
        QCOMPARE(again.run->result->record.imageSha256, plain.run->result->record.imageSha256);
        QVERIFY(again.run->result->record.loras.empty());

        // The tag again, twice: the same image; the second run keeps the merged set.
        const Ended retag = run(thread, tinyRun("a red cube <lora:sd1_tiny:1>"), 5);
        QVERIFY2(retag.run, qPrintable(retag.error));
        QCOMPARE(retag.run->result->record.imageSha256, t.imageSha256);
        const Ended kept = run(thread, tinyRun("a red cube <lora:sd1_tiny:1>"), 6);
        QVERIFY2(kept.run, qPrintable(kept.error));
        QCOMPARE(kept.run->result->record.imageSha256, t.imageSha256);
        QVERIFY2(hasMessage(kept.run->result->record, "kept: the same set"),
                 qPrintable(messagesOf(kept.run->result->record)));
        QCOMPARE(kept.run->result->record.loras.size(), std::size_t{1});
        QCOMPARE(kept.run->result->record.loras[0].modulesMerged, t.loras[0].modulesMerged);
        QCOMPARE(thread.worker->sdModelReads(), 1);
        QVERIFY(loads.isEmpty());
    }

    void imagesAreTheClis() {
        // The same settings through tessera-cli render: the same bits, with a tag, with the list's
        // LoRA (--lora) and with a separate VAE.
        WorkerThread thread;
        thread.worker->setModelsFolder(models_.toStdString());
        const QString prompt = QStringLiteral("a red cube <lora:sd1_tiny:0.8>");
        const Ended tagged = run(thread, tinyRun(prompt.toStdString()), 1);
        QVERIFY2(tagged.run, qPrintable(tagged.error));
        const QString out1 = scratch_.filePath(QStringLiteral("cli-tag"));
        const CliRun cli1 = runCliWithModels(cliArgs(prompt, out1), models_);
        QVERIFY2(cli1.exitCode == 0, qPrintable(describe(cli1)));
        const QString differs1 = sameImageAsCli(*tagged.run->result, out1);
        QVERIFY2(differs1.isEmpty(), qPrintable(differs1));

        RunConfig listed = tinyRun("a red cube");
        listed.loras.push_back(LoraSetting{kLora.toStdString(), 0.6, 0.9});
        listed.vae = kVae.toStdString();
        const Ended withVae = run(thread, listed, 2);
        QVERIFY2(withVae.run, qPrintable(withVae.error));
        const RunRecord& v = withVae.run->result->record;
        QVERIFY(v.vaeFile.has_value());
        QCOMPARE(v.vaeFile->name, std::string("ldm.safetensors"));
        QCOMPARE(thread.worker->sdModelReads(), 2);  // another VAE: the model read with it
        const QString out2 = scratch_.filePath(QStringLiteral("cli-vae"));
        const CliRun cli2 = runCliWithModels(
            cliArgs(QStringLiteral("a red cube"), out2) + QStringList{"--lora", kLora + ":0.6:0.9", "--vae", kVae},
            models_);
        QVERIFY2(cli2.exitCode == 0, qPrintable(describe(cli2)));
        const QString differs2 = sameImageAsCli(*withVae.run->result, out2);
        QVERIFY2(differs2.isEmpty(), qPrintable(differs2));

        // The LoRA removed, the VAE kept: no read.
        listed.loras.clear();
        const Ended vaeOnly = run(thread, listed, 3);
        QVERIFY2(vaeOnly.run, qPrintable(vaeOnly.error));
        QCOMPARE(thread.worker->sdModelReads(), 2);
        QVERIFY(vaeOnly.run->result->record.vaeFile.has_value());
    }

    void loraOfAnotherFamilyIsRefusedBeforeAnyWork() {
        QVERIFY2(QFile::exists(kSdxlLora), "tests/data/lora");
        WorkerThread thread;
        QSignalSpy loads(thread.worker, &RunWorker::modelLoadProgress);
        QSignalSpy started(thread.worker, &RunWorker::runStarted);
        RunConfig config = tinyRun("a red cube");
        config.loras.push_back(LoraSetting{kSdxlLora.toStdString(), 1.0, 1.0});
        const Ended refused = run(thread, config, 1);
        QVERIFY(!refused.run);
        QVERIFY2(refused.error.startsWith(QStringLiteral("lora: ")), qPrintable(refused.error));
        QVERIFY2(refused.error.contains(QStringLiteral("does not fit the model")), qPrintable(refused.error));
        QVERIFY(loads.isEmpty());
        QVERIFY(started.isEmpty());
        QCOMPARE(thread.worker->sdModelReads(), 0);

        // A name found nowhere: the folders looked in are named.
        const Ended missing = run(thread, tinyRun("a red cube <lora:no_such_lora:1>"), 2);
        QVERIFY(!missing.run);
        QVERIFY2(missing.error.contains(QStringLiteral("no_such_lora")), qPrintable(missing.error));
        QCOMPARE(thread.worker->sdModelReads(), 0);
    }

    void parametersCheckLoraAndVaeFiles() {
        // A1111's short hash of sd1_tiny.safetensors (its addnet hash) and the VAE's "VAE hash".
        const std::string loraHash = "ca9606b0539c";
        QFile vaeFile(kVae);
        QVERIFY(vaeFile.open(QIODevice::ReadOnly));
        const std::string vaeHash =
            QCryptographicHash::hash(vaeFile.readAll(), QCryptographicHash::Sha256).toHex().left(10).toStdString();
        const QString vaeFolder = scratch_.filePath(QStringLiteral("models/VAE"));
        QVERIFY(QDir().mkpath(vaeFolder));
        QVERIFY(QFile::exists(vaeFolder + "/ldm.safetensors") || QFile::copy(kVae, vaeFolder + "/ldm.safetensors"));
        const std::vector<std::string> folders{models_.toStdString()};

        // As made here: nothing to say; the VAE found is set by its path.
        const std::string same = "a red cube <lora:sd1_tiny:0.8>\nSteps: 4, Seed: 3, VAE hash: " + vaeHash +
                                 ", VAE: ldm.safetensors, Lora hashes: \"sd1_tiny: " + loraHash + "\"";
        ImportedParameters matching = parametersFromText(same, tinyRun(""));
        QVERIFY2(matching.unmapped.empty(), qPrintable(unmappedOf(matching)));  // "Lora hashes" is read, not left out
        QCOMPARE(matching.loraHashes.size(), std::size_t{1});
        QCOMPARE(matching.vaeHash, vaeHash);
        checkModelFiles(matching, folders);
        QVERIFY2(matching.unmapped.empty(), qPrintable(unmappedOf(matching)));
        QCOMPARE(QString::fromStdString(matching.config.vae), vaeFolder + "/ldm.safetensors");

        // Another hash, a LoRA found nowhere, another VAE hash: each named.
        const std::string other =
            "a red cube <lora:sd1_tiny:0.8> <lora:not_here:1>\nSteps: 4, VAE hash: 0123456789, VAE: ldm.safetensors, "
            "Lora hashes: \"sd1_tiny: 000000000000, not_here: 111111111111\"";
        ImportedParameters differing = parametersFromText(other, tinyRun(""));
        checkModelFiles(differing, folders);
        const QString notes = unmappedOf(differing);
        QVERIFY2(notes.contains("'<lora:sd1_tiny>' is") && notes.contains("hash 000000000000"), qPrintable(notes));
        QVERIFY2(notes.contains("'<lora:not_here>' names no LoRA found here"), qPrintable(notes));
        QVERIFY2(notes.contains("'VAE hash: 0123456789' is not that of"), qPrintable(notes));

        // A VAE found nowhere: the model's own, said so.
        ImportedParameters missing =
            parametersFromText("a cube\nSteps: 4, Seed: 3, Size: 64x64, VAE: elsewhere.safetensors", tinyRun(""));
        QCOMPARE(missing.config.vae, std::string("elsewhere.safetensors"));
        checkModelFiles(missing, folders);
        QVERIFY(missing.config.vae.empty());
        QVERIFY2(unmappedOf(missing).contains("'VAE: elsewhere.safetensors' is not applied: the model's own VAE"),
                 qPrintable(unmappedOf(missing)));
    }
};

QTEST_MAIN(TestRunWorkerLora)
#include "tst_runworkerlora.moc"
