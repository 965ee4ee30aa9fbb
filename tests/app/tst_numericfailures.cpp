// No success reported for garbage: tessera-cli as a user runs it. Scheduler
// values outside their ranges (a model's scheduler_config.json, --eta) are invalid input (exit 2,
// the field named, nothing rendered), and a run whose values stop being finite is a failure
// while running (exit 1, the step and tile batch named, no image written), never exit 0.
#include <QtTest/QtTest>

#include <QDir>
#include <QFile>
#include <QTemporaryDir>

#include <map>
#include <span>
#include <string>

#include "core/formats/Safetensors.h"
#include "core/models/unet/UNetModel.h"
#include "tests/app/CliRun.h"

using namespace tessera;
using tessera::testing::CliRun;
using tessera::testing::describe;

namespace {

const QString kFixture = QStringLiteral(TESSERA_TEST_DATA "/models/cifar_like");

// A quick CPU render: one 32x32 tile, two steps.
QStringList renderArgs(const QString& model, const QString& out) {
    return {"render", "--model",   model, "--backend", "cpu", "--width",     "32",   "--height", "32", "--tile",
            "32",     "--overlap", "0",   "--steps",   "2",   "--precision", "fp32", "--out",    out};
}

int pngCount(const QString& folder) {
    return static_cast<int>(QDir(folder).entryList({QStringLiteral("*.png")}, QDir::Files).size());
}

bool copyFile(const QString& from, const QString& to) { return QFile::copy(from, to); }

// A model folder with the fixture's config.json and weights and the given scheduler_config.json.
bool schedulerModel(const QString& dir, const QByteArray& schedulerJson) {
    QFile file(dir + "/scheduler_config.json");
    return copyFile(kFixture + "/config.json", dir + "/config.json") &&
           copyFile(kFixture + "/diffusion_pytorch_model.safetensors", dir + "/diffusion_pytorch_model.safetensors") &&
           file.open(QIODevice::WriteOnly) && file.write(schedulerJson) == schedulerJson.size();
}

}  // namespace

class TestGarbage : public QObject {
    Q_OBJECT

private slots:
    void schedulerConfigOutOfRangeExits2_data() {
        QTest::addColumn<QByteArray>("json");
        QTest::addColumn<QString>("field");
        // Every beta 0, every alphas_cumprod 1: it would render black (the first bound it breaks is named).
        QTest::newRow("beta_start = beta_end = 0")
            << QByteArray(R"({"beta_start": 0.0, "beta_end": 0.0})") << "beta_end";
        QTest::newRow("beta_end below beta_start")
            << QByteArray(R"({"beta_start": 0.02, "beta_end": 0.0001})") << "beta_end";
        QTest::newRow("beta_end 1") << QByteArray(R"({"beta_end": 1.0})") << "beta_end";
        QTest::newRow("betas below float32's resolution")
            << QByteArray(R"({"beta_start": 1e-9, "beta_end": 1e-9})") << "beta_start";
        QTest::newRow("a million training timesteps")
            << QByteArray(R"({"num_train_timesteps": 1000000})") << "num_train_timesteps";
        QTest::newRow("clip_sample_range 0")
            << QByteArray(R"({"clip_sample": true, "clip_sample_range": 0})") << "clip_sample_range";
    }

    void schedulerConfigOutOfRangeExits2() {
        QFETCH(QByteArray, json);
        QFETCH(QString, field);
        QTemporaryDir model, out;
        QVERIFY(model.isValid() && out.isValid());
        QVERIFY(schedulerModel(model.path(), json));
        const CliRun r = tessera::testing::runCli(renderArgs(model.path(), out.path()));
        QVERIFY2(r.exitCode == 2, qPrintable(describe(r)));
        // The message names the field, then its value as written ("beta_end = 0.0: ...") or not.
        QVERIFY2(r.err.contains(field + ":") || r.err.contains(field + " = "), qPrintable(describe(r)));
        QVERIFY2(!r.out.contains("finished"), qPrintable(describe(r)));
        QCOMPARE(pngCount(out.path()), 0);
    }

    // DDIM's eta weighs the noise of each step from 0 (deterministic) to 1 (as DDPM); 1e30 was
    // accepted and rendered pure noise. (1e300 is not even a float: it was read as infinity.)
    void etaOutOfRangeExits2_data() {
        QTest::addColumn<QString>("eta");
        for (const char* eta : {"1e30", "1e300", "1.5", "-0.1"}) QTest::newRow(eta) << QString(eta);
    }

    void etaOutOfRangeExits2() {
        QFETCH(QString, eta);
        QTemporaryDir out;
        QVERIFY(out.isValid());
        const CliRun r = tessera::testing::runCli(renderArgs(kFixture, out.path()) << "--eta" << eta);
        QVERIFY2(r.exitCode == 2, qPrintable(describe(r)));
        QVERIFY2(r.err.contains("eta: ") && r.err.contains("at most 1"), qPrintable(describe(r)));
        QCOMPARE(pngCount(out.path()), 0);
    }

    void etaLimitsAccepted() {
        for (const char* eta : {"0", "1"}) {
            QTemporaryDir out;
            QVERIFY(out.isValid());
            const CliRun r = tessera::testing::runCli(renderArgs(kFixture, out.path()) << "--eta" << eta);
            QVERIFY2(r.exitCode == 0 && r.out.startsWith("finished: "), qPrintable(describe(r)));
            QCOMPARE(pngCount(out.path()), 1);
        }
    }

    // The fixture's weights x 1e30: the time embedding overflows float32 and the UNet output is
    // NaN. The render stops at the first tile batch (exit 1, the step and tile named) instead of
    // writing a saturated image with exit 0.
    void overflowingWeightsExit1() {
        QTemporaryDir model, out;
        QVERIFY(model.isValid() && out.isValid());
        const UNetModel fixture = UNetModel::load(kFixture.toStdString());
        std::map<std::string, SafetensorsTensorData> scaled;
        for (const auto& [name, tensor] : fixture.tensors()) {
            std::vector<float> values = tensor.data;
            for (float& v : values) v *= 1e30f;
            scaled[name] = SafetensorsTensorData{SafetensorsDtype::F32, tensor.shape,
                                                 encodeFloats(SafetensorsDtype::F32, std::span<const float>(values))};
        }
        writeSafetensors((model.path() + "/diffusion_pytorch_model.safetensors").toStdString(), scaled);
        QVERIFY(copyFile(kFixture + "/config.json", model.path() + "/config.json"));
        QVERIFY(copyFile(kFixture + "/scheduler_config.json", model.path() + "/scheduler_config.json"));

        const CliRun r = tessera::testing::runCli(renderArgs(model.path(), out.path()));
        QVERIFY2(r.exitCode == 1, qPrintable(describe(r)));
        QVERIFY2(r.err.contains("non-finite values (NaN or infinity) in the UNet output at step 1/2 (timestep 500), "
                                "tile batch 1/1 (tile 0)"),
                 qPrintable(describe(r)));
        QVERIFY2(!r.out.contains("finished"), qPrintable(describe(r)));
        QCOMPARE(pngCount(out.path()), 0);
    }
};

QTEST_GUILESS_MAIN(TestGarbage)
#include "tst_numericfailures.moc"
