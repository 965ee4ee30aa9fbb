// An A1111 user's setup through `tessera-cli render`, against whole diffusers pipelines run on the
// tiny SD 1.x pipeline of tests/data/sdpipeline/sd1 (tests/data/a1111png, made by
// tools/reference/make_a1111_png_fixtures.py with diffusers, transformers and peft):
//  - a kohya LoRA named by a prompt tag (or given with --lora), with A1111's CPU noise, equals
//    diffusers' load_lora_weights + fuse_lora image;
//  - a PNG as A1111 saves it, whose parameters name that LoRA, an embedding, a separate VAE, a seed and
//    A1111's default (GPU) noise source, read with --params-from from a models folder laid out as
//    A1111's (Lora/, VAE/, embeddings/), gives diffusers' image with all of them applied, with no note;
//    the same PNG with the LoRA's file missing is refused naming it.
// Every image within one 8-bit level of diffusers' float64 image, on the CPU engine and, where a
// device is present, on the CUDA engine in fp32.
#include <QtTest/QtTest>

#include <QDir>
#include <QFile>
#include <QTemporaryDir>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/cli/EngineFactory.h"
#include "app/cli/PngIO.h"
#include "core/formats/Safetensors.h"
#include "tests/app/CliRun.h"

using namespace tessera;
using tessera::testing::CliRun;
using tessera::testing::describe;

namespace {

const QString kData = QStringLiteral(TESSERA_TEST_DATA);
const QString kFixtures = kData + "/a1111png";
const QString kModel = kData + "/sdpipeline/sd1";
const QString kLora = kData + "/sdpipeline/lora/sd1_tiny.safetensors";

nlohmann::json fixtureCases() {
    std::ifstream in((kFixtures + "/cases.json").toStdString());
    return nlohmann::json::parse(in, nullptr, false);
}

std::vector<float> referenceImage(const QString& name, int& width, int& height) {
    const SafetensorsFile f((kFixtures + "/" + name + ".safetensors").toStdString());
    const SafetensorsTensorInfo* info = f.find("image");
    if (!info || info->shape.size() != 4)
        throw std::runtime_error("no image [1,3,H,W] in the fixture " + name.toStdString());
    height = static_cast<int>(info->shape[2]);
    width = static_cast<int>(info->shape[3]);
    return f.readFloat32(*info);
}

// The path after "image " on a render's stdout.
QString imagePath(const CliRun& r) {
    for (const QString& line : r.out.split('\n'))
        if (line.startsWith("image ")) return line.mid(5).trimmed();
    return {};
}

// max over pixels and channels of |png - 255 * clamp((x + 1) / 2)|, x diffusers' float64 image
// [1,3,H,W]; a rounding or truncating 8-bit conversion of the same image is within 1.
double levelsFromReference(const QString& png, const QString& name) {
    int width = 0, height = 0;
    const std::vector<float> ref = referenceImage(name, width, height);
    const PngFile file = readPng(png.toStdString());
    if (file.image.width != width || file.image.height != height) return INFINITY;
    double worst = 0;
    const std::size_t plane = static_cast<std::size_t>(width) * static_cast<std::size_t>(height);
    for (std::size_t p = 0; p < plane; ++p)
        for (std::size_t c = 0; c < 3; ++c) {
            const double want = 255.0 * std::clamp((static_cast<double>(ref[c * plane + p]) + 1.0) / 2.0, 0.0, 1.0);
            worst = std::max(worst, std::abs(file.image.pixels[p * 3 + c] - want));
        }
    return worst;
}

// Backends to run: the CPU engine always, the CUDA engine where a device can be used.
void backendRows() {
    QTest::addColumn<QString>("backend");
    QTest::newRow("cpu") << QStringLiteral("cpu");
    QTest::newRow("cuda") << QStringLiteral("cuda");
}

bool skipBackend(const QString& backend) { return backend == "cuda" && !probeDevices().cudaAvailable; }

// A models folder as A1111 keeps one: the model in Stable-diffusion/sd1 (outside tests/data, whose
// embeddings/ would otherwise be found beside the model), Lora/, VAE/ and embeddings/ (the LoRA left out
// when `withLora` is false).
QString a1111Models(const QTemporaryDir& dir, bool withLora) {
    const QString models = dir.filePath("models");
    for (const char* sub : {"Lora", "VAE", "embeddings", "Stable-diffusion"}) QDir().mkpath(models + "/" + sub);
    std::filesystem::copy(kModel.toStdString(), (models + "/Stable-diffusion/sd1").toStdString(),
                          std::filesystem::copy_options::recursive);
    if (withLora) QFile::copy(kLora, models + "/Lora/sd1_tiny.safetensors");
    QFile::copy(kData + "/sdfiles/vae/ldm.safetensors", models + "/VAE/ldm.safetensors");
    QFile::copy(kData + "/embeddings/good/ti-embparams.safetensors", models + "/embeddings/ti-embparams.safetensors");
    return models;
}

}  // namespace

class TestA1111Png : public QObject {
    Q_OBJECT

private slots:
    void fixturesPresent() {
        const nlohmann::json meta = fixtureCases();
        QVERIFY2(meta.is_object() && meta["cases"].contains("lora_cpu") && meta["cases"].contains("a1111_gpu"),
                 "tests/data/a1111png/cases.json (tools/reference/make_a1111_png_fixtures.py)");
        QVERIFY(QFile::exists(kFixtures + "/a1111.png"));
    }

    // The LoRA by its tag (found in the models folder's Lora/) and by --lora: diffusers' fused image.
    void loraEqualsDiffusers_data() {
        QTest::addColumn<QString>("backend");
        QTest::addColumn<QString>("lora");  // "tag", "--lora" or "none" (far from the reference)
        for (const char* backend : {"cpu", "cuda"})
            for (const char* lora : {"tag", "--lora", "none"})
                QTest::addRow("%s %s", backend, lora) << QString::fromLatin1(backend) << QString::fromLatin1(lora);
    }
    void loraEqualsDiffusers() {
        QFETCH(QString, backend);
        QFETCH(QString, lora);
        if (skipBackend(backend)) QSKIP("no CUDA device");
        const nlohmann::json c = fixtureCases()["cases"]["lora_cpu"];
        QTemporaryDir dir;
        const QString models = dir.filePath("models");
        QDir().mkpath(models + "/Lora");
        QFile::copy(kLora, models + "/Lora/sd1_tiny.safetensors");
        const std::string width = std::to_string(c["width"].get<int>());
        QStringList args{"render",
                         "--model",
                         kModel,
                         "--backend",
                         backend,
                         "--negative-prompt",
                         QString::fromStdString(c["negative_prompt"].get<std::string>()),
                         "--sampler",
                         "Euler",
                         "--cfg",
                         QString::number(c["cfg"].get<double>()),
                         "--steps",
                         QString::number(c["steps"].get<int>()),
                         "--seed",
                         QString::number(c["seed"].get<long long>()),
                         "--noise-source",
                         QString::fromStdString(c["noise_source"].get<std::string>()),
                         "--width",
                         QString::fromStdString(width),
                         "--height",
                         QString::number(c["height"].get<int>()),
                         "--tile",
                         QString::fromStdString(width),
                         "--precision",
                         "fp32",
                         "--out",
                         dir.filePath("out")};
        if (lora == "tag") {
            args << "--prompt" << QString::fromStdString(c["tessera_prompt"].get<std::string>());
        } else if (lora == "none") {
            args << "--prompt" << QString::fromStdString(c["prompt"].get<std::string>());
        } else {
            args << "--prompt" << QString::fromStdString(c["prompt"].get<std::string>()) << "--lora"
                 << kLora + ":" + QString::number(c["lora_weight"].get<double>());
        }
        const CliRun r = testing::runCliWithModels(args, models);
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        const double levels = levelsFromReference(imagePath(r), "lora_cpu");
        qInfo("%s: %.3f 8-bit levels from diffusers' float64 image", qPrintable(backend), levels);
        if (lora == "none")
            QVERIFY2(levels > 8.0, qPrintable(QString::number(levels) + " levels without the LoRA"));
        else
            QVERIFY2(levels <= 1.0, qPrintable(QString::number(levels) + " levels\n" + describe(r)));
    }

    // A1111's PNG applied as it is: LoRA, embedding, VAE, seed and GPU noise all taken from it.
    void a1111PngReproducesDiffusers_data() { backendRows(); }
    void a1111PngReproducesDiffusers() {
        QFETCH(QString, backend);
        if (skipBackend(backend)) QSKIP("no CUDA device");
        QTemporaryDir dir;
        const QString models = a1111Models(dir, true);
        const CliRun r = testing::runCliWithModels(
            {"render", "--params-from", kFixtures + "/a1111.png", "--model", models + "/Stable-diffusion/sd1",
             "--backend", backend, "--precision", "fp32", "--tile", "64", "--out", dir.filePath("out")},
            models);
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        // Everything the PNG names was found and applied: no params-from note, and the run says so.
        QVERIFY2(!r.err.contains("params-from"), qPrintable(describe(r)));
        QVERIFY2(r.out.contains("ti-embparams") || r.err.contains("ti-embparams"), qPrintable(describe(r)));
        const QString png = imagePath(r);
        const double levels = levelsFromReference(png, "a1111_gpu");
        qInfo("%s: %.3f 8-bit levels from diffusers' float64 image", qPrintable(backend), levels);
        QVERIFY2(levels <= 1.0, qPrintable(QString::number(levels) + " levels\n" + describe(r)));
        // The new PNG names the same LoRA, embedding, VAE, seed and source as the one it came from.
        const std::string parameters = readPng(png.toStdString()).text("parameters");
        const nlohmann::json meta = fixtureCases();
        const std::string loraHash = meta["hashes"]["lora"].get<std::string>().substr(0, 12);
        const std::string tiHash = meta["hashes"]["embedding"].get<std::string>().substr(0, 12);
        for (const std::string& want : {std::string("Seed: 1234567,"), "Lora hashes: \"sd1_tiny: " + loraHash + "\"",
                                        "TI hashes: \"ti-embparams: " + tiHash + "\"",
                                        std::string("VAE: ldm.safetensors"), std::string("RNG: GPU")})
            QVERIFY2(parameters.find(want) != std::string::npos, (want + " not in:\n" + parameters).c_str());
    }

    // Each part the PNG names shows in the image: without the embedding's file (its name read as
    // words, with a note) or with another noise source the image is far from diffusers'.
    void a1111PngPartsMatter_data() {
        QTest::addColumn<bool>("withEmbedding");
        QTest::addColumn<QString>("noiseSource");
        QTest::newRow("no embedding") << false << QString();
        QTest::newRow("cpu noise") << true << QStringLiteral("cpu");
    }
    void a1111PngPartsMatter() {
        QFETCH(bool, withEmbedding);
        QFETCH(QString, noiseSource);
        QTemporaryDir dir;
        const QString models = a1111Models(dir, true);
        if (!withEmbedding) QFile::remove(models + "/embeddings/ti-embparams.safetensors");
        QStringList args{"render",
                         "--params-from",
                         kFixtures + "/a1111.png",
                         "--model",
                         models + "/Stable-diffusion/sd1",
                         "--backend",
                         "cpu",
                         "--tile",
                         "64",
                         "--out",
                         dir.filePath("out")};
        if (!noiseSource.isEmpty()) args << "--noise-source" << noiseSource;
        const CliRun r = testing::runCliWithModels(args, models);
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        if (!withEmbedding) QVERIFY2(r.err.contains("found in no embeddings folder"), qPrintable(describe(r)));
        const double levels = levelsFromReference(imagePath(r), "a1111_gpu");
        QVERIFY2(levels > 8.0, qPrintable(QString::number(levels) + " levels\n" + describe(r)));
    }

    // The LoRA the PNG names is in no folder: refused before any work, naming it.
    void a1111PngWithoutItsLoraIsRefused() {
        QTemporaryDir dir;
        const QString models = a1111Models(dir, false);
        const CliRun r = testing::runCliWithModels(
            {"render", "--params-from", kFixtures + "/a1111.png", "--model", models + "/Stable-diffusion/sd1",
             "--backend", "cpu", "--out", dir.filePath("out")},
            models);
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("sd1_tiny"), qPrintable(describe(r)));
        QVERIFY2(!r.out.contains("step "), qPrintable(describe(r)));
        QVERIFY(!QDir(dir.filePath("out")).exists() || QDir(dir.filePath("out")).isEmpty());
    }
};

QTEST_GUILESS_MAIN(TestA1111Png)
#include "tst_a1111png.moc"
