// A LoRA merged into a loaded Stable Diffusion model (core/models/lora/SdModelLoras.h over
// SdModel::changeWeights): the tiny SD 1.x pipeline of tests/data/sdpipeline/sd1 and the kohya LoRA
// made for it (tests/data/sdpipeline/lora/sd1_tiny.safetensors). The merge changes the UNet's and the
// text encoder's weights and their fingerprint, the text encoder forgets the rows it encoded, a
// restore gives the file's weights and fingerprint back bit for bit, weight 0 changes nothing, a model
// that shares its parts with a copy leaves the copy alone, and the prompt's tags never reach the
// tokenizer; on the CPU engine the merged model changes the image and the weight-0 one does not.
#include <QtTest/QtTest>

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/cpu/CpuBackend.h"
#include "core/cpu/CpuEngine.h"
#include "core/models/lora/LoraFile.h"
#include "core/models/lora/MergedLoraSet.h"
#include "core/models/lora/SdModelLoras.h"
#include "core/models/sd/SdModel.h"
#include "core/models/sd/SdPipeline.h"

using namespace tessera;

namespace {

const std::string kModel = std::string(TESSERA_TEST_DATA) + "/sdpipeline/sd1";
const std::string kLora = std::string(TESSERA_TEST_DATA) + "/sdpipeline/lora/sd1_tiny.safetensors";
const std::string kVocabulary = std::string(TESSERA_SOURCE_DIR) + "/resources/clip/bpe_simple_vocab_16e6.txt.gz";

// Every tensor of the UNet, the text encoder and the VAE, by "<part>/<name>".
std::map<std::string, std::vector<float>> snapshot(const SdModel& m) {
    std::map<std::string, std::vector<float>> all;
    for (const auto& [n, t] : m.unet->tensors()) all["unet/" + n] = t.data;
    for (const auto& [n, t] : m.textEncoder->tensors()) all["text_encoder/" + n] = t.data;
    for (const auto& [n, t] : m.vae->tensors()) all["vae/" + n] = t.data;
    return all;
}

// The names whose values differ between two snapshots.
std::vector<std::string> changed(const std::map<std::string, std::vector<float>>& a,
                                 const std::map<std::string, std::vector<float>>& b) {
    std::vector<std::string> names;
    for (const auto& [n, v] : a)
        if (b.at(n) != v) names.push_back(n);
    return names;
}

RunConfig tinyRun(const std::string& prompt) {
    RunConfig c;
    c.model = kModel;
    c.width = c.height = 64;
    c.tile = 64;
    c.steps = 3;
    c.seed = 5;
    c.prompt = prompt;
    c.negativePrompt = "blurry";
    c.backend = BackendKind::CPU;
    return c;
}

class Silent : public RunObserver {};

std::vector<float> render(const std::shared_ptr<const SdModel>& model, const RunConfig& config) {
    CpuEngine engine(std::make_unique<CpuBackend>());
    engine.setSdModel(model);
    Silent observer;
    return engine.run(config, observer).image.data;
}

}  // namespace

class TestSdLora : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() {
        setBundledClipVocabulary(kVocabulary);
        QVERIFY2(std::ifstream(kLora).good(),
                 "tests/data/sdpipeline/lora/sd1_tiny.safetensors is missing: run "
                 "tools/reference/make_sdpipeline_lora.py tests/data/sdpipeline/lora");
    }

    // The merge writes the UNet's and text encoder's weights (not the VAE's), keys the UNet's
    // fingerprint by the set's digest and empties the text encoder's row memo; the restore puts
    // back every bit and the file's fingerprint.
    void mergeAndRestore() {
        SdModel model = loadSdModel(kModel);
        const auto before = snapshot(model);
        const std::string fileSha = model.unet->weightsSha256();
        const std::string modelHash = model.sha256;
        QVERIFY(!fileSha.empty());
        CpuBackend text;
        (void)encodeSdPrompts(model, text, tinyRun("a cat"));
        QVERIFY(model.textEncoder->rowMemoStats().rows > 0);
        const ClipTextModel* encoder = model.textEncoder.get();

        const LoraFile file = LoraFile::open(kLora);
        const std::vector<LoraApplication> loras{{&file, "sd1_tiny", 1.0, 1.0, std::nullopt}};
        MergedLoraSet set = mergeLoras(model, loras);
        QCOMPARE(model.textEncoder.get(), encoder);  // not shared: changed in place, not copied
        QCOMPARE(set.reports().size(), std::size_t(1));
        QCOMPARE(set.reports().front().modulesMerged, std::size_t(68));
        QCOMPARE(model.weightsVariant(), loraSetDigest(loras));
        QVERIFY(!model.weightsVariant().empty());
        QVERIFY(model.unet->weightsSha256() != fileSha);
        QCOMPARE(model.sha256, modelHash);  // A1111's "Model hash" is the checkpoint's
        QCOMPARE(model.textEncoder->rowMemoStats().rows, std::size_t(0));
        const std::vector<std::string> merged = changed(before, snapshot(model));
        const auto starts = [&merged](const std::string& part) {
            return std::count_if(merged.begin(), merged.end(),
                                 [&part](const std::string& n) { return n.rfind(part, 0) == 0; });
        };
        QCOMPARE(starts("unet/"), 56);          // 56 UNet modules, one weight each
        QCOMPARE(starts("text_encoder/"), 12);  // 2 layers x (q, k, v, out, fc1, fc2)
        QCOMPARE(starts("vae/"), 0);
        const std::string mergedSha = model.unet->weightsSha256();

        restoreLoras(model, set);
        QVERIFY(changed(before, snapshot(model)).empty());
        QCOMPARE(model.unet->weightsSha256(), fileSha);
        QCOMPARE(model.weightsVariant(), std::string());
        QVERIFY(set.empty());

        // The same set again: the same weights and fingerprint.
        MergedLoraSet again = mergeLoras(model, loras);
        QCOMPARE(model.unet->weightsSha256(), mergedSha);
        QCOMPARE(changed(before, snapshot(model)), merged);
        QVERIFY_THROWS_EXCEPTION(std::logic_error, (void)mergeLoras(model, loras));  // restore first
        restoreLoras(model, again);
    }

    // Weight 0 merges nothing: every bit stays (the fingerprint still names the set).
    void zeroWeightChangesNoBit() {
        SdModel model = loadSdModel(kModel);
        const auto before = snapshot(model);
        const LoraFile file = LoraFile::open(kLora);
        const MergedLoraSet set = mergeLoras(model, {{&file, "sd1_tiny", 0.0, 0.0, std::nullopt}});
        QCOMPARE(set.reports().front().modulesMerged, std::size_t(0));
        QCOMPARE(set.reports().front().modulesSkipped, std::size_t(68));
        QVERIFY(changed(before, snapshot(model)).empty());
    }

    // A copy of the model shares its parts; merging into one copies the parts it changes first, so
    // the other keeps the file's weights and fingerprint.
    void sharedPartsAreCopiedFirst() {
        SdModel model = loadSdModel(kModel);
        const SdModel other = model;
        const auto before = snapshot(other);
        const LoraFile file = LoraFile::open(kLora);
        MergedLoraSet set = mergeLoras(model, {{&file, "sd1_tiny", 1.0, 1.0, std::nullopt}});
        QVERIFY(model.unet.get() != other.unet.get());
        QVERIFY(model.textEncoder.get() != other.textEncoder.get());
        QCOMPARE(model.vae.get(), other.vae.get());  // not changed, still shared
        QVERIFY(changed(before, snapshot(other)).empty());
        QVERIFY(!changed(before, snapshot(model)).empty());
        QVERIFY(other.unet->weightsSha256() != model.unet->weightsSha256());
        QCOMPARE(other.weightsVariant(), std::string());
        restoreLoras(model, set);
        QVERIFY(changed(before, snapshot(model)).empty());
    }

    // A1111 takes the tags out of the prompt before tokenizing and leaves the negative prompt as
    // written: the conditioning of "a cat <lora:x:1>" is that of "a cat", bit for bit.
    void promptTagsAreNotText() {
        const SdModel model = loadSdModel(kModel);
        CpuBackend text;
        const SdConditioning plain = encodeSdPrompts(model, text, tinyRun("a cat"));
        const SdConditioning tagged = encodeSdPrompts(model, text, tinyRun("a cat <lora:sd1_tiny:1><hypernet:h:2>"));
        QVERIFY(plain.cond == tagged.cond);
        QVERIFY(plain.uncond == tagged.uncond);
        bool said = false;
        for (const std::string& m : tagged.messages)
            said = said || m.find(
                               "2 extra-network tag(s) taken out of the prompt before tokenizing, as A1111 does "
                               "(<lora:sd1_tiny>, <hypernet:h>)") != std::string::npos;
        QVERIFY2(said, tagged.messages.back().c_str());
        RunConfig negative = tinyRun("a cat");
        negative.negativePrompt = "<lora:sd1_tiny:1>";
        QVERIFY(encodeSdPrompts(model, text, negative).uncond != plain.uncond);
    }

    // On the CPU engine: the merged model's image differs from the file's; the weight-0 model's is
    // the same floats.
    void engineRunsTheMergedModel() {
        const RunConfig config = tinyRun("a cat");
        const std::vector<float> plain = render(std::make_shared<const SdModel>(loadSdModel(kModel)), config);
        const LoraFile file = LoraFile::open(kLora);
        for (const double weight : {1.0, 0.0}) {
            SdModel model = loadSdModel(kModel);
            (void)mergeLoras(model, {{&file, "sd1_tiny", weight, weight, std::nullopt}});
            const std::vector<float> image = render(std::make_shared<const SdModel>(std::move(model)), config);
            QCOMPARE(image.size(), plain.size());
            if (weight == 0.0)
                QVERIFY(image == plain);
            else
                QVERIFY(image != plain);
        }
    }
};

QTEST_GUILESS_MAIN(TestSdLora)
#include "tst_sdlora.moc"
