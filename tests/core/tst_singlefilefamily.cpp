// Single-file checkpoints with a part missing are named by the family their UNet says they are
// (diffusers' loaders/single_file_utils.py infer_diffusers_model_type tells SDXL by its second
// text encoder; a file without one is SDXL still when its UNet has SGM's text-time embedding),
// and the message says which part that family needs. Only headers are written (sparse files).
#include <QtTest/QtTest>

#include <QElapsedTimer>
#include <QTemporaryDir>

#include <algorithm>
#include <string>

#include "ModelTestSupport.h"
#include "SingleFileTestSupport.h"
#include "core/models/sd/SdModel.h"
#include "core/models/sd/SingleFileCheckpoint.h"

using namespace tessera;
using model_test::errorOf;

namespace {

bool startsWith(const std::string& name, const char* prefix) { return name.rfind(prefix, 0) == 0; }

// SDXL base at full size with the tensors under `dropped` prefixes left out.
TensorList sdxlWithout(std::initializer_list<const char*> dropped) {
    const SdModelConfigs c = randomSdModelConfigs("random:sdxl");
    TensorList tensors = singleFileTensors(SdFamily::SDXL, c.unet, c.vae, c.textEncoder, c.textEncoder2);
    tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                                 [&](const auto& tensor) {
                                     return std::any_of(dropped.begin(), dropped.end(), [&](const char* prefix) {
                                         return startsWith(tensor.first, prefix);
                                     });
                                 }),
                  tensors.end());
    return tensors;
}

// The ModelError inspecting `tensors` as a file gives, within a second.
std::string inspectionError(const QTemporaryDir& dir, const TensorList& tensors, QElapsedTimer& clock) {
    const std::string path = dir.filePath("model.safetensors").toStdString();
    single_file_test::writeHeaderOnly(path, tensors);
    SingleFileOptions options;
    options.digest = FileDigest::Skip;
    clock.start();
    return errorOf([&] { (void)inspectSingleFileCheckpoint(path, options); });
}

}  // namespace

class TestSingleFileFamily : public QObject {
    Q_OBJECT

private slots:
    void sdxlWithoutItsSecondTextEncoder() {
        const QTemporaryDir dir;
        QElapsedTimer clock;
        const std::string m = inspectionError(dir, sdxlWithout({"conditioner.embedders.1."}), clock);
        QVERIFY2(clock.elapsed() < 1000, m.c_str());
        EXPECT_MESSAGE(m,
                       "model.safetensors': an SDXL checkpoint by its UNet (it has "
                       "'model.diffusion_model.label_emb.0.0.weight', the text-time embedding only SDXL's UNet has) "
                       "without its second text encoder (OpenCLIP bigG under 'conditioner.embedders.1.model.'; "
                       "looked for 'conditioner.embedders.1.model.token_embedding.weight')");
        QVERIFY2(m.find("SD 1.x") == std::string::npos, m.c_str());
        QVERIFY2(m.find("first text encoder") == std::string::npos, m.c_str());
    }

    void sdxlWithoutEitherTextEncoder() {
        const QTemporaryDir dir;
        QElapsedTimer clock;
        const std::string m = inspectionError(dir, sdxlWithout({"conditioner."}), clock);
        EXPECT_MESSAGE(m, "an SDXL checkpoint by its UNet");
        EXPECT_MESSAGE(m,
                       "without its first text encoder (CLIP ViT-L under 'conditioner.embedders.0.transformer.') "
                       "and its second text encoder");
        EXPECT_MESSAGE(m, "both text encoders of SDXL base");
    }

    // A refiner's UNet takes five size ids (2560 values): named a refiner, not a base model.
    void refinerUNetWithoutItsTextEncoder() {
        TensorList tensors = sdxlWithout({"conditioner."});
        for (auto& [name, shape] : tensors)
            if (name == "model.diffusion_model.label_emb.0.0.weight") shape.back() = 2560;
        const QTemporaryDir dir;
        QElapsedTimer clock;
        const std::string m = inspectionError(dir, tensors, clock);
        EXPECT_MESSAGE(m, "an SDXL refiner checkpoint by its UNet");
    }

    // SD 1.x without its text encoder is still named SD 1.x (no text-time embedding).
    void sd1WithoutItsTextEncoderStaysSd1() {
        const single_file_test::SmallModel small = single_file_test::smallModel(SdFamily::SD1);
        TensorList tensors = singleFileTensors(SdFamily::SD1, small.unet, small.vae, small.text);
        tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                                     [](const auto& t) { return startsWith(t.first, "cond_stage_model."); }),
                      tensors.end());
        const QTemporaryDir dir;
        QElapsedTimer clock;
        const std::string m = inspectionError(dir, tensors, clock);
        EXPECT_MESSAGE(m, "no text encoder: an SD 1.x checkpoint holds CLIP ViT-L");
        QVERIFY2(m.find("SDXL") == std::string::npos, m.c_str());
    }
};

QTEST_GUILESS_MAIN(TestSingleFileFamily)
#include "tst_singlefilefamily.moc"
