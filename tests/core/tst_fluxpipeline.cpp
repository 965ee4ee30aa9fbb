// FLUX.1 text-to-image through the one tiled loop on the CPU engine against diffusers' FluxPipeline
// (tests/data/flux, tools/reference/make_flux_fixtures.py: the tiny dev-shaped transformer, a tiny
// 16-channel VAE with FLUX's scaling and shift, 4 steps of flow matching with dev's shift, guidance
// 3.5 embedded, the same start latents and text encodings): the final latents and the decoded
// image; FluxImg2ImgPipeline (strength 0.6 of 6 steps, guidance 2.5, portrait): the start image's
// latents after FLUX's shift and scale, then the run from the same start latents; a tiled run of the
// same model; random:flux-dev at its real shapes (counted) and tiny ones (run); what a FLUX run
// refuses before any work.
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "core/base/BoundedInput.h"
#include "core/cpu/CpuBackend.h"
#include "core/cpu/CpuEngine.h"
#include "core/formats/Safetensors.h"
#include "core/models/flux/FluxGraph.h"
#include "core/models/flux/FluxModel.h"
#include "core/models/sd/SdModel.h"
#include "core/models/vae/TiledVae.h"

using namespace tessera;

namespace {

const std::string kFixtures = std::string(TESSERA_TEST_DATA) + "/flux";
const std::string kVocabulary = TESSERA_SOURCE_DIR "/resources/clip/bpe_simple_vocab_16e6.txt.gz";

// The fixture transformer with random text encoders of its widths: CLIP 40 wide (its pooled input),
// T5 48 wide (its context) with the tiny SentencePiece model of tests/data/t5.
std::shared_ptr<FluxModel> withTextEncoders(int t5Width = 48) {
    auto m = std::make_shared<FluxModel>(*loadFluxModel(kFixtures));
    ClipTextConfig clip;
    clip.hiddenSize = 40;
    clip.intermediateSize = 64;
    clip.numHiddenLayers = 2;
    clip.numAttentionHeads = 4;
    clip.projectionDim = 40;
    auto t5Tokenizer = std::make_shared<const T5Tokenizer>(std::string(TESSERA_TEST_DATA) + "/t5/spiece.model");
    T5Config t5;
    t5.vocabSize = t5Tokenizer->vocabSize();
    t5.dModel = t5Width;
    t5.dKv = 8;
    t5.numHeads = 3;
    t5.dFf = 40;
    t5.numLayers = 2;
    setFluxTextEncoders(
        *m,
        std::make_shared<const ClipTextModel>(
            ClipTextModel::fromTensors(clip, randomTensors(ClipTextModel::expectedTensors(clip), 3))),
        bundledTokenizer(SdFamily::SD1),
        std::make_shared<const T5Model>(T5Model::fromTensors(t5, randomTensors(T5Model::expectedTensors(t5), 4))),
        t5Tokenizer, "test");
    return m;
}

class Silent : public RunObserver {};

const std::shared_ptr<const FluxModel>& model() {
    static const std::shared_ptr<const FluxModel> m = loadFluxModel(kFixtures);
    return m;
}

FluxConditioning fixtureText(const SafetensorsFile& file) {
    FluxConditioning c;
    c.text = file.readFloat32("prompt_embeds");
    c.tokens = static_cast<int>(file.find("prompt_embeds")->shape[1]);
    c.pooled = file.readFloat32("pooled");
    c.guidance = 3.5f;
    return c;
}

RunConfig fixtureConfig() {
    RunConfig config;
    config.model = kFixtures;
    config.width = 80;
    config.height = 48;
    config.steps = 4;
    config.scheduler = SchedulerKind::Euler;
    config.cfgScale = 1.0;
    config.tile = 80;
    config.overlapPx = 16;
    config.precision = Precision::FP32;
    config.backend = BackendKind::CPU;
    config.previewEvery = 0;
    return config;
}

ImageTensor startNoise(const SafetensorsFile& file) {
    const auto& s = file.find("start")->shape;
    return ImageTensor{static_cast<int>(s[1]), static_cast<int>(s[2]), static_cast<int>(s[3]),
                       file.readFloat32("start")};
}

double maxRelative(const std::vector<float>& got, const std::vector<float>& want) {
    if (got.size() != want.size()) return INFINITY;
    double err = 0, ref = 1e-30;
    for (std::size_t i = 0; i < got.size(); ++i) {
        err = std::max(err, std::fabs(double(got[i]) - want[i]));
        ref = std::max(ref, std::fabs(double(want[i])));
    }
    return std::isfinite(err) ? err / ref : INFINITY;
}

std::string errorOf(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "<no error>";
}

}  // namespace

class TestFluxPipeline : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() { setBundledClipVocabulary(kVocabulary); }

    void folderIsFlux() {
        QVERIFY(isFluxModelPath(kFixtures));
        QVERIFY(!isFluxModelPath(std::string(TESSERA_TEST_DATA) + "/sdpipeline/sd1"));
        QCOMPARE(model()->config.variant(), std::string("flux-dev"));
        QCOMPARE(model()->vae->config().latentChannels, 16);
        QVERIFY(!model()->sha256.empty());
    }

    void textToImageMatchesDiffusers() {
        const SafetensorsFile file(kFixtures + "/pipeline_t2i.safetensors");
        CpuEngine engine(std::make_unique<CpuBackend>(2));
        engine.setFluxConditioning(fixtureText(file));
        engine.setStartNoise(startNoise(file));
        Silent observer;
        const RunResult result = engine.run(fixtureConfig(), observer);
        QCOMPARE(std::string(toString(result.record.status)), std::string("finished"));
        QVERIFY(result.record.flowMatching);  // what the window counts and summarises by
        QCOMPARE(result.record.tileCount, 1);
        QCOMPARE(result.latents.channels, 16);
        const double latents = maxRelative(result.latents.data, file.readFloat32("latents"));
        // diffusers' image is in [0, 1]; Tessera's decoder output in [-1, 1].
        std::vector<float> image = result.image.data;
        for (float& v : image) v = std::clamp(v * 0.5f + 0.5f, 0.0f, 1.0f);
        const double pixels = maxRelative(image, file.readFloat32("image"));
        qInfo("latents %.3g, image %.3g (max |diff| / max |reference|)", latents, pixels);
        QVERIFY2(latents < 2e-5, qPrintable(QString("latents %1").arg(latents)));
        QVERIFY2(pixels < 2e-5, qPrintable(QString("image %1").arg(pixels)));
        bool said = false;
        for (const std::string& m : result.record.messages) said = said || m.find("flux-dev: flow matching") == 0;
        QVERIFY(said);
    }

    // The same model tiled: 32-px tiles with 16 px of overlap over 80 x 48 (several tiles, each
    // with its own position grid): it runs, stays finite, and is near the untiled run.
    void tiledRun() {
        const SafetensorsFile file(kFixtures + "/pipeline_t2i.safetensors");
        CpuEngine engine(std::make_unique<CpuBackend>(2));
        engine.setFluxConditioning(fixtureText(file));
        engine.setStartNoise(startNoise(file));
        RunConfig config = fixtureConfig();
        config.tile = 32;
        config.overlapPx = 16;
        Silent observer;
        const RunResult tiled = engine.run(config, observer);
        QCOMPARE(std::string(toString(tiled.record.status)), std::string("finished"));
        QVERIFY(tiled.record.tileCount > 1);
        for (float v : tiled.latents.data) QVERIFY(std::isfinite(v));
        const double apart = maxRelative(tiled.latents.data, file.readFloat32("latents"));
        qInfo("tiles %d: latents %.3g from the untiled reference", tiled.record.tileCount, apart);
        QVERIFY(apart > 1e-4);  // tiling changes what each token attends to
    }

    // A prompt through the model's text encoders: the same image as the encodings computed apart
    // and given to the run; the record says what ran.
    void promptThroughTextEncoders() {
        const auto m = withTextEncoders();
        QCOMPARE(m->textTokens(), 512);
        const SafetensorsFile file(kFixtures + "/pipeline_t2i.safetensors");
        RunConfig config = fixtureConfig();
        config.prompt = "a lighthouse on a cliff at dusk";
        config.negativePrompt = "fog";
        config.guidance = 4.0;
        Silent observer;
        CpuEngine engine(std::make_unique<CpuBackend>(2));
        engine.setFluxModel(m);
        engine.setStartNoise(startNoise(file));
        const RunResult fromPrompt = engine.run(config, observer);
        QCOMPARE(std::string(toString(fromPrompt.record.status)), std::string("finished"));
        bool said = false, negative = false;
        for (const std::string& msg : fromPrompt.record.messages) {
            said = said || msg.find("T5's 512 token states") != std::string::npos;
            negative = negative || msg.find("negative_prompt: not used") == 0;
        }
        QVERIFY(said && negative);
        CpuBackend text(2);
        const FluxConditioning c = encodeFluxPrompt(*m, text, config.prompt, 4.0f);
        QCOMPARE(c.tokens, 512);
        QCOMPARE(c.pooled.size(), std::size_t{40});
        QCOMPARE(c.text.size(), std::size_t{512 * 48});
        engine.setFluxConditioning(c);
        const RunResult given = engine.run(config, observer);
        QVERIFY(given.latents.data == fromPrompt.latents.data);
        // Another prompt or guidance is another image.
        engine.setFluxConditioning(std::nullopt);
        config.guidance = 1.0;
        const RunResult other = engine.run(config, observer);
        QVERIFY(other.latents.data != fromPrompt.latents.data);
    }

    // diffusers' image-to-image: Tessera's encoding of the start image (its latent mean, FLUX's shift
    // and scale: what strength 0 returns) equals the pipeline's, and from the pipeline's start
    // latents (that mean noised to the first executed sigma) the remaining steps end where diffusers
    // ends, latents and decoded image.
    void imageToImageMatchesDiffusers() {
        const SafetensorsFile file(kFixtures + "/pipeline_i2i.safetensors");
        const nlohmann::json c = readBoundedJson(kFixtures + "/cases.json", "test").at("pipeline_i2i");
        CpuEngine engine(std::make_unique<CpuBackend>(2));
        FluxConditioning text = fixtureText(file);
        text.guidance = c.at("guidance_scale").get<float>();
        engine.setFluxConditioning(text);
        const int height = c.at("height"), width = c.at("width");
        ImageTensor init{3, height, width, file.readFloat32("init_image")};
        for (float& v : init.data) v = 2.0f * v - 1.0f;
        engine.setInitImage(init);
        RunConfig config = fixtureConfig();
        config.width = width;
        config.height = height;
        config.tile = std::max(width, height);
        config.steps = c.at("steps");
        config.initImage = "start.png";
        Silent observer;

        // The encoding as runFlux makes it.
        CpuBackend vaeBackend(2);
        std::string described;
        const HostTensor moments = runVaePass(vaeBackend, *model()->vae, HostTensor{{1, 3, height, width}, init.data},
                                              false, VaeTiling::Off, std::nullopt, &described);
        const double mean = maxRelative(fluxLatentsFromEncoder(model()->vae->config(), posteriorMean(moments)).data,
                                        file.readFloat32("init_latents"));

        config.strength = c.at("strength");
        const auto& s = file.find("start")->shape;
        engine.setStartLatents(ImageTensor{static_cast<int>(s[1]), static_cast<int>(s[2]), static_cast<int>(s[3]),
                                           file.readFloat32("start")});
        const RunResult result = engine.run(config, observer);
        QCOMPARE(std::string(toString(result.record.status)), std::string("finished"));
        QCOMPARE(result.record.stepsRun, c.at("executed_steps").get<int>());
        const double latents = maxRelative(result.latents.data, file.readFloat32("latents"));
        std::vector<float> image = result.image.data;
        for (float& v : image) v = std::clamp(v * 0.5f + 0.5f, 0.0f, 1.0f);
        const double pixels = maxRelative(image, file.readFloat32("image"));
        qInfo("init latents %.3g, latents %.3g, image %.3g (max |diff| / max |reference|)", mean, latents, pixels);
        QVERIFY2(mean < 2e-5, qPrintable(QString("init latents %1").arg(mean)));
        QVERIFY2(latents < 2e-5, qPrintable(QString("latents %1").arg(latents)));
        QVERIFY2(pixels < 2e-5, qPrintable(QString("image %1").arg(pixels)));
        // The start latents mattered: from Tessera's own noise the run ends elsewhere.
        engine.setStartLatents({});
        QVERIFY(maxRelative(engine.run(config, observer).latents.data, file.readFloat32("latents")) > 1e-3);
    }

    // Image-to-image: the start image VAE-encoded with FLUX's shift, noised to the first step run's
    // sigma ((1 - sigma_b) image + sigma_b z, diffusers' scale_noise; sigma_0 = 1 at strength 1),
    // then the remaining steps: strength 1 and 0.5 both finish, and differ.
    void imageToImage() {
        const SafetensorsFile file(kFixtures + "/pipeline_t2i.safetensors");
        Silent observer;
        CpuEngine engine(std::make_unique<CpuBackend>(2));
        engine.setFluxConditioning(fixtureText(file));
        const ImageTensor z = startNoise(file);
        engine.setStartNoise(z);
        RunConfig config = fixtureConfig();
        const RunResult t2i = engine.run(config, observer);
        // A start image: the text-to-image result itself (model space, [-1, 1]).
        ImageTensor init = t2i.image;
        for (float& v : init.data) v = std::clamp(v, -1.0f, 1.0f);
        engine.setInitImage(init);
        config.initImage = "start.png";
        config.strength = 1.0;
        const RunResult full = engine.run(config, observer);
        QCOMPARE(std::string(toString(full.record.status)), std::string("finished"));
        config.strength = 0.5;
        const RunResult half = engine.run(config, observer);
        QCOMPARE(std::string(toString(half.record.status)), std::string("finished"));
        QVERIFY(half.latents.data != full.latents.data);
        bool encoded = false;
        for (const std::string& m : half.record.messages)
            encoded = encoded || m.find("FLUX's shift") != std::string::npos;
        QVERIFY(encoded);
    }

    // The live preview maps the 16 latent channels with ComfyUI's published FLUX.1 factors: a unit
    // latent in channel c shows row c plus the bias, an all-zero latent the bias; each latent pixel
    // an 8 x 8 block of the image.
    void latentPreviewUsesFluxFactors() {
        const float row0[3] = {-0.0346f, 0.0244f, 0.0681f}, row9[3] = {0.1008f, 0.0755f, -0.0421f};
        const float row15[3] = {-0.1262f, -0.0982f, -0.0778f}, bias[3] = {-0.0329f, -0.0718f, -0.0851f};
        ImageTensor latents{16, 1, 4, std::vector<float>(64, 0.0f)};
        latents.data[0 * 4 + 0] = 1.0f;   // channel 0, pixel 0
        latents.data[9 * 4 + 1] = 1.0f;   // channel 9, pixel 1
        latents.data[15 * 4 + 2] = 1.0f;  // channel 15, pixel 2
        const ImageTensor rgb = fluxLatentPreview(latents);
        QCOMPARE(rgb.channels, 3);
        QCOMPARE(rgb.height, 8);
        QCOMPARE(rgb.width, 32);
        const auto at = [&rgb](int o, int x, int y) {
            return rgb.data[(static_cast<std::size_t>(o) * rgb.height + y) * rgb.width + x];
        };
        for (int o = 0; o < 3; ++o)
            for (int y : {0, 7}) {
                QVERIFY(std::fabs(at(o, 0, y) - (row0[o] + bias[o])) < 1e-6f);
                QVERIFY(std::fabs(at(o, 15, y) - (row9[o] + bias[o])) < 1e-6f);
                QVERIFY(std::fabs(at(o, 16, y) - (row15[o] + bias[o])) < 1e-6f);
                QVERIFY(std::fabs(at(o, 31, y) - bias[o]) < 1e-6f);
            }
    }

    // random:flux-dev / random:flux-schnell: FLUX.1's real shapes (counted, not allocated: 67 GB);
    // the same construction at tiny shapes runs a prompt through its folded T5 ids, deterministically.
    void randomModels() {
        QVERIFY(isFluxModelPath("random:flux-dev") && isFluxModelPath("random:flux-schnell"));
        QVERIFY(!isFluxModelPath("random:flux-pro") && !isFluxModelPath("random:sd15"));
        const RandomFluxShapes dev = randomFluxShapes("random:flux-dev");
        QCOMPARE(dev.transformer.variant(), std::string("flux-dev"));
        QCOMPARE(randomFluxShapes("random:flux-schnell").transformer.variant(), std::string("flux-schnell"));
        auto params = [](const TensorList& list) {
            std::uint64_t n = 0;
            for (const auto& [name, shape] : list) {
                std::uint64_t e = 1;
                for (const std::int64_t d : shape) e *= static_cast<std::uint64_t>(d);
                n += e;
            }
            return n;
        };
        // Published sizes: the transformer 11.90 G (11,901,408,320), T5-XXL's encoder 4.76 G, CLIP-L's
        // text encoder 123.1 M, FLUX's VAE 83.8 M.
        QCOMPARE(params(fluxParameters(dev.transformer)), std::uint64_t{11901408320});
        QVERIFY(std::llabs(static_cast<long long>(params(T5Model::expectedTensors(dev.t5))) - 4762310656LL) < 5000000);
        QVERIFY(std::llabs(static_cast<long long>(params(ClipTextModel::expectedTensors(dev.clip))) - 123060480LL) <
                1000000);
        QVERIFY(std::llabs(static_cast<long long>(params(VaeModel::expectedTensors(dev.vae))) - 83819683LL) < 1000000);
        QCOMPARE(dev.vae.latentChannels, 16);
        QVERIFY(randomFluxBytes(dev) > 60'000'000'000ULL);
        QVERIFY(errorOf([] { randomFluxShapes("random:flux-pro"); }).find("random:flux-dev and random:flux-schnell") !=
                std::string::npos);

        // Tiny shapes through the same construction (the fixture's transformer and VAE configs).
        RandomFluxShapes tiny = dev;
        tiny.name = "random:flux-dev";
        tiny.transformer = model()->config;
        tiny.vae = model()->vae->config();
        tiny.clip.hiddenSize = 40;
        tiny.clip.intermediateSize = 64;
        tiny.clip.numHiddenLayers = 2;
        tiny.clip.numAttentionHeads = 4;
        tiny.clip.projectionDim = 40;
        tiny.t5.dModel = 48;
        tiny.t5.dKv = 8;
        tiny.t5.numHeads = 3;
        tiny.t5.dFf = 40;
        tiny.t5.numLayers = 2;
        auto run = [&](std::uint64_t seed) {
            CpuEngine engine(std::make_unique<CpuBackend>(2));
            engine.setFluxModel(randomFluxModel(tiny, seed));
            RunConfig config = fixtureConfig();
            config.model = "random:flux-dev";
            config.prompt = "a lighthouse on a cliff at dusk";
            Silent observer;
            return engine.run(config, observer);
        };
        const RunResult a = run(5), b = run(5), c = run(6);
        QCOMPARE(std::string(toString(a.record.status)), std::string("finished"));
        QVERIFY(a.image.data == b.image.data);
        QVERIFY(a.image.data != c.image.data);
        for (const float v : a.image.data) QVERIFY(std::isfinite(v));

        // The folded ids: T5's framing (EOS, then padding), every id a piece.
        const auto ids = foldedT5Ids(*bundledTokenizer(SdFamily::SD1), "a lighthouse on a cliff", 16, 32128);
        QCOMPARE(ids.size(), std::size_t{16});
        const auto eos = std::find(ids.begin(), ids.end(), T5Tokenizer::kEosId);
        QCOMPARE(eos - ids.begin(), std::ptrdiff_t{5});  // a lighthouse on a cliff: 5 CLIP tokens
        for (auto it = ids.begin(); it != eos; ++it) QVERIFY(*it >= 3 && *it < 32128 - T5Tokenizer::kExtraIds);
        for (auto it = eos + 1; it != ids.end(); ++it) QCOMPARE(*it, T5Tokenizer::kPadId);
        const auto cut = foldedT5Ids(*bundledTokenizer(SdFamily::SD1), std::string(300, 'x') + " y z", 4, 32128);
        QCOMPARE(cut.size(), std::size_t{4});
        QCOMPARE(cut.back(), T5Tokenizer::kEosId);
    }

    void textEncoderRefusals() {
        std::string what = errorOf([] { withTextEncoders(64); });
        QVERIFY2(what.find("the T5 encoder is 64 wide; the transformer reads 48") != std::string::npos, what.c_str());
        auto m = std::make_shared<FluxModel>(*model());
        what = errorOf([&] {
            setFluxTextEncoders(*m, withTextEncoders()->clip, bundledTokenizer(SdFamily::SD1), nullptr, nullptr,
                                "half");
        });
        QVERIFY2(what.find("half: no T5 text encoder") != std::string::npos, what.c_str());
    }

    void refusals() {
        const SafetensorsFile file(kFixtures + "/pipeline_t2i.safetensors");
        CpuEngine engine(std::make_unique<CpuBackend>(2));
        Silent observer;
        RunConfig config = fixtureConfig();
        QVERIFY(errorOf([&] { engine.run(config, observer); }).find("has no text encoders") != std::string::npos);
        engine.setFluxConditioning(fixtureText(file));
        config.width = 88;
        std::string what = errorOf([&] { engine.run(config, observer); });
        QVERIFY2(what.find("width: 88 is not a multiple of 16") != std::string::npos, what.c_str());
        config = fixtureConfig();
        config.tile = 40;
        what = errorOf([&] { engine.run(config, observer); });
        QVERIFY2(what.find("tile: 40 is not a multiple of 16") != std::string::npos, what.c_str());
        FluxConditioning wrong = fixtureText(file);
        wrong.pooled.resize(12);
        engine.setFluxConditioning(wrong);
        what = errorOf([&] { engine.run(fixtureConfig(), observer); });
        QVERIFY2(what.find("the pooled text holds 12 values; the transformer reads 40") != std::string::npos,
                 what.c_str());
        // An SD VAE (4 latent channels) beside the FLUX transformer.
        const VaeModel sdVae = VaeModel::load(std::string(TESSERA_TEST_DATA) + "/sdpipeline/sd1");
        what = errorOf([&] {
            makeFluxModel(model()->config, model()->tensors, std::make_shared<const VaeModel>(sdVae), "mixed");
        });
        QVERIFY2(what.find("the VAE has 4 latent channels; the transformer reads 16") != std::string::npos,
                 what.c_str());
    }
};

QTEST_APPLESS_MAIN(TestFluxPipeline)
#include "tst_fluxpipeline.moc"
