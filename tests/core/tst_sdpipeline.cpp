// Stable Diffusion text-to-image through the one tiled loop on the CPU engine, against complete
// diffusers StableDiffusionPipeline runs (tests/data/sdpipeline, made by
// tools/reference/make_sd_pipeline_fixtures.py): prompt conditioning, guidance, the latent canvas,
// the samplers and the VAE decode, per family (SD 1.x epsilon, SD 2.x v-prediction). Also what a
// Stable Diffusion run refuses before any work, and pipeline-folder errors.
#include <QtTest/QtTest>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "ModelTestSupport.h"
#include "TokenizerTestSupport.h"
#include "core/base/LoadProgress.h"
#include "core/cpu/CpuBackend.h"
#include "core/cpu/CpuEngine.h"
#include "core/formats/Safetensors.h"
#include "core/models/sd/SdModel.h"
#include "core/models/sd/SdPipeline.h"
#include "core/run/NonFiniteError.h"

using namespace tessera;
using model_test::errorOf;

namespace {

const std::string kFixtures = std::string(TESSERA_TEST_DATA) + "/sdpipeline";
const std::string kVocabulary = std::string(TESSERA_SOURCE_DIR) + "/resources/clip/bpe_simple_vocab_16e6.txt.gz";

bool fixturesPresent() { return std::ifstream(kFixtures + "/cases.json").good(); }

nlohmann::json cases() {
    std::ifstream in(kFixtures + "/cases.json");
    return nlohmann::json::parse(in)["cases"];
}

std::vector<float> readTensor(const std::string& file, const std::string& name) {
    const SafetensorsFile f(file);
    const SafetensorsTensorInfo* info = f.find(name);
    if (!info) throw std::runtime_error(file + ": no tensor " + name);
    return f.readFloat32(*info);
}

// max |got - want| / max |want|.
double relativeError(const std::vector<float>& got, const std::vector<float>& want) {
    if (got.size() != want.size()) return INFINITY;
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
        diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
        scale = std::max(scale, std::abs(static_cast<double>(want[i])));
    }
    return diff / std::max(scale, 1e-30);
}

RunConfig configOf(const nlohmann::json& c, const std::string& name) {
    RunConfig config;
    config.model = kFixtures + "/" + c["family"].get<std::string>();
    config.width = c["width"];
    config.height = c["height"];
    config.steps = c["steps"];
    config.scheduler = parseScheduler(c["scheduler"].get<std::string>());
    config.schedulerOptions.karrasSigmas = false;
    config.schedulerOptions.timestepSpacing = TimestepSpacing::Leading;
    config.prompt = c["prompt"];
    config.negativePrompt = c["negative_prompt"];
    config.cfgScale = c["cfg"];
    config.tile = 128;  // one tile over the whole canvas: the untiled pipeline
    config.overlapPx = 16;
    config.precision = Precision::FP32;
    config.backend = BackendKind::CPU;
    config.previewEvery = 0;
    config.label = name;
    return config;
}

class Silent : public RunObserver {};

}  // namespace

class TestSdPipeline : public QObject {
    Q_OBJECT

private slots:
    // One engine: a run of a pixel-space model, a Stable Diffusion run, then the pixel model again
    // with the same settings: the third run is the first one again (the pixel model stayed loaded;
    // the Stable Diffusion run's tile function, device graph and canvases must not serve it).
    void modelFamilySwitchReusesNothingStale() {
        const std::string pixel = std::string(TESSERA_TEST_DATA) + "/models/cifar_like";
        if (!std::filesystem::exists(pixel + "/config.json")) QSKIP("tests/data/models/cifar_like is missing");
        RunConfig p;
        p.model = pixel;
        p.width = 64;
        p.height = 64;
        p.tile = 32;
        p.overlapPx = 8;
        p.steps = 2;
        p.seed = 5;
        p.backend = BackendKind::CPU;
        p.precision = Precision::FP32;
        RunConfig sd = p;
        sd.model = kFixtures + "/sd1";
        sd.tile = 64;
        sd.prompt = "a red cube";
        CpuEngine engine(std::make_unique<CpuBackend>());
        Silent observer;
        const RunResult first = engine.run(p, observer);
        QCOMPARE(engine.run(sd, observer).image.channels, 3);
        const RunResult again = engine.run(p, observer);
        QCOMPARE(again.image.channels, first.image.channels);
        QVERIFY2(again.image.data == first.image.data, "the pixel model's second run differs from its first");
    }

    void initTestCase() { setBundledClipVocabulary(kVocabulary); }

    // Every case: the conditioning and the decoded image of a whole 10-step run within 1e-4 of
    // diffusers (float64 reference; float32 runs there differ by less, cases.json says by how much).
    void matchesDiffusersEndToEnd() {
        if (!fixturesPresent())
            QSKIP("tests/data/sdpipeline is not there yet (tools/reference/make_sd_pipeline_fixtures.py)");
        const nlohmann::json all = cases();
        CpuBackend textBackend;
        for (const auto& [name, c] : all.items()) {
            const RunConfig config = configOf(c, name);
            const std::string file = kFixtures + "/" + name + ".safetensors";
            const SdModel sd = loadSdModel(config.model);
            const SdConditioning text = encodeSdPrompts(sd, textBackend, config);
            const double condError = relativeError(text.cond, readTensor(file, "prompt_embeds"));
            QVERIFY2(condError < 1e-4,
                     qPrintable(QString::fromStdString(name) + " prompt_embeds " + QString::number(condError)));
            if (config.cfgScale != 1.0) {
                const double uncondError = relativeError(text.uncond, readTensor(file, "negative_prompt_embeds"));
                QVERIFY2(uncondError < 1e-4,
                         qPrintable(QString::fromStdString(name) + " negative " + QString::number(uncondError)));
            }
            // The decoder alone, on the reference's final latents.
            const auto shape = c["shapes"]["latents"];
            CpuBackend backend;
            const ImageTensor latents{shape[1], shape[2], shape[3], readTensor(file, "latents")};
            const ImageTensor decoded = decodeLatents(sd, backend, latents);
            const double decodeError = relativeError(decoded.data, readTensor(file, "image"));
            QVERIFY2(decodeError < 1e-4,
                     qPrintable(QString::fromStdString(name) + " decode " + QString::number(decodeError)));

            CpuEngine engine(std::make_unique<CpuBackend>());
            engine.setStartNoise(ImageTensor{shape[1], shape[2], shape[3], readTensor(file, "start_noise")});
            Silent observer;
            const RunResult result = engine.run(config, observer);
            QCOMPARE(std::string(toString(result.record.status)), std::string("finished"));
            QVERIFY(!result.record.flowMatching);
            QCOMPARE(result.image.channels, 3);
            QCOMPARE(result.image.width, config.width);
            QCOMPARE(result.image.height, config.height);
            const double imageError = relativeError(result.image.data, readTensor(file, "image"));
            qInfo("%s: prompt %.2g, decode %.2g, image %.2g (max |diff| / max |ref|)", name.c_str(), condError,
                  decodeError, imageError);
            QVERIFY2(imageError < 1e-4,
                     qPrintable(QString::fromStdString(name) + " image " + QString::number(imageError)));
        }
    }

    // Tiles over the latent canvas: a 3x2 tile run finishes, is deterministic in the seed, and
    // differs from the one-tile run only where tiles meet (not a different picture).
    void tiledRunIsDeterministic() {
        if (!fixturesPresent()) QSKIP("tests/data/sdpipeline is not there yet");
        RunConfig config = configOf(cases()["sd1_ddim_cfg"], "tiled");
        config.tile = 64;
        config.overlapPx = 32;
        config.steps = 4;
        config.tileBatch = 3;
        Silent observer;
        CpuEngine a(std::make_unique<CpuBackend>()), b(std::make_unique<CpuBackend>());
        const RunResult first = a.run(config, observer);
        const RunResult second = b.run(config, observer);
        QCOMPARE(std::string(toString(first.record.status)), std::string("finished"));
        QCOMPARE(first.record.tileCount, 6);  // 128x96: 3 x 2 tiles of 64 at stride 32
        QCOMPARE(first.record.imageSha256, second.record.imageSha256);
        QCOMPARE(first.seamMap.width, config.width);
        config.seed = 1;
        QVERIFY(a.run(config, observer).record.imageSha256 != first.record.imageSha256);
    }

    // Stop while the model loads (the window's Stop, Ctrl-C): the load ends between tensors with
    // LoadCancelled saying where it was, no partial model is kept, and the next run loads again
    // and finishes with the image of a run that was never stopped.
    void cancelWhileLoading() {
        if (!fixturesPresent()) QSKIP("tests/data/sdpipeline is not there yet");
        RunConfig config = configOf(cases()["sd1_ddim_cfg"], "stopped");
        config.steps = 2;
        CpuEngine engine(std::make_unique<CpuBackend>());
        class StopOnSecondReport : public RunObserver {
        public:
            explicit StopOnSecondReport(Engine& e) : engine(e) {}
            void onLoadProgress(const LoadProgress&) override {
                if (++reports == 2) engine.requestCancel();
            }
            void onStarted(const RunRecord&) override { started = true; }
            Engine& engine;
            int reports = 0;
            bool started = false;
        } observer(engine);
        try {
            (void)engine.run(config, observer);
            QFAIL("the run went on after the stop");
        } catch (const LoadCancelled& e) {
            QVERIFY2(QString(e.what()).startsWith("stopped while loading the model (") &&
                         QString(e.what()).endsWith("MiB); nothing was run"),
                     e.what());
        }
        QCOMPARE(observer.reports, 2);
        QVERIFY(!observer.started);
        engine.resetCancel();
        StopOnSecondReport again(engine);
        again.reports = 100;  // never stops
        const RunResult result = engine.run(config, again);
        QCOMPARE(std::string(toString(result.record.status)), std::string("finished"));
        QVERIFY(again.reports > 102);  // loaded again, from the start
        CpuEngine fresh(std::make_unique<CpuBackend>());
        Silent silent;
        QCOMPARE(fresh.run(config, silent).record.imageSha256, result.record.imageSha256);
    }

    void refusedBeforeWork_data() {
        QTest::addColumn<QString>("field");
        QTest::addColumn<int>("width");
        QTest::addColumn<int>("tile");
        QTest::addColumn<int>("overlap");
        QTest::addColumn<int>("clipSkip");
        QTest::newRow("width not a multiple of 8") << "width" << 100 << 128 << 16 << 1;
        QTest::newRow("tile not a multiple of 16") << "tile" << 128 << 72 << 16 << 1;
        QTest::newRow("overlap not a multiple of 8") << "overlap" << 128 << 64 << 12 << 1;
        QTest::newRow("clip skip beyond the layers") << "clip skip" << 128 << 128 << 16 << 5;
    }
    void refusedBeforeWork() {
        if (!fixturesPresent()) QSKIP("tests/data/sdpipeline is not there yet");
        QFETCH(QString, field);
        QFETCH(int, width);
        QFETCH(int, tile);
        QFETCH(int, overlap);
        QFETCH(int, clipSkip);
        RunConfig config = configOf(cases()["sd1_ddim_cfg"], "bad");
        config.width = width;
        config.tile = tile;
        config.overlapPx = overlap;
        config.clipSkip = clipSkip;
        CpuEngine engine(std::make_unique<CpuBackend>());
        Silent observer;
        try {
            engine.run(config, observer);
            QFAIL("the run was not refused");
        } catch (const ValidationError& e) {
            QCOMPARE(QString::fromStdString(e.field()), field);
        }
    }

    void unconditionalModelRefusesAPrompt() {
        RunConfig config;
        config.model = std::string(TESSERA_SOURCE_DIR) + "/resources/models/default";
        if (!std::filesystem::exists(config.model + "/config.json")) QSKIP("no bundled default model");
        config.prompt = "a cat";
        CpuEngine engine(std::make_unique<CpuBackend>());
        Silent observer;
        try {
            engine.run(config, observer);
            QFAIL("the prompt was accepted");
        } catch (const ValidationError& e) {
            QCOMPARE(e.field(), std::string("prompt"));
            EXPECT_MESSAGE(std::string(e.what()), "unconditional");
        }
    }

    // A copy of the SD 1.x fixture pipeline broken one way: each is a ModelError naming the folder
    // or file and what is allowed, within a second (before any weights are read).
    void hostileComponentFolders() {
        if (!fixturesPresent()) QSKIP("fixtures missing");
        namespace fs = std::filesystem;
        const QTemporaryDir tmp;
        int copies = 0;
        const auto copy = [&] {
            const fs::path dir = fs::path(tmp.path().toStdString()) / ("p" + std::to_string(++copies));
            fs::copy(kFixtures + "/sd1", dir, fs::copy_options::recursive);
            return dir;
        };
        const auto edit = [](const fs::path& file, const std::string& from, const std::string& to) {
            std::ifstream in(file);
            std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
            const auto at = text.find(from);
            QVERIFY2(at != std::string::npos, from.c_str());
            text.replace(at, from.size(), to);
            std::ofstream(file, std::ios::trunc) << text;
        };
        // Refusals that took 5 s or more: a refusal comes before the weights are read. Reading the
        // 49,408-entry vocabulary alone took just over 1 s in the sanitizer build on a 2-core machine.
        std::string slow;
        const auto refusal = [&slow](const fs::path& dir) {
            QElapsedTimer clock;
            clock.start();
            std::string message = errorOf([&] { loadSdModel(dir.string()); });
            if (clock.elapsed() >= 5000) slow += message + "\n";
            return message;
        };

        // A component folder, the tokenizer or the scheduler that is a link to itself.
        for (const char* component : {"text_encoder", "unet", "tokenizer", "scheduler"}) {
            const fs::path dir = copy();
            fs::remove_all(dir / component);
            fs::create_directory_symlink(component, dir / component);
            const std::string message = refusal(dir);
            EXPECT_MESSAGE(message, "'" + (dir / component).string() + "': is a symbolic-link loop");
        }
        // A link to nothing, and a file where a folder belongs.
        fs::path dir = copy();
        fs::remove_all(dir / "vae");
        fs::create_directory_symlink("gone", dir / "vae");
        EXPECT_MESSAGE(refusal(dir), "vae': is a symbolic link to something that does not exist");
        dir = copy();
        fs::remove_all(dir / "unet");
        std::ofstream(dir / "unet") << "x";
        EXPECT_MESSAGE(refusal(dir), "unet': is not a folder");
        // The pipeline folder itself a loop.
        const fs::path loop = fs::path(tmp.path().toStdString()) / "loop";
        fs::create_directory_symlink("loop", loop);
        EXPECT_MESSAGE(refusal(loop), "'" + loop.string() + "': is a symbolic-link loop");
        // A component that links outside the pipeline folder (a shared VAE) is followed.
        dir = copy();
        fs::remove_all(dir / "vae");
        fs::create_directory_symlink(fs::absolute(kFixtures + "/sd1/vae"), dir / "vae");
        QCOMPARE(std::string(toString(loadSdModel(dir.string()).family)), std::string("sd1"));

        // Text encoder values no prompt can run with, named with the file and the range.
        dir = copy();
        edit(dir / "text_encoder/config.json", "\"max_position_embeddings\": 77", "\"max_position_embeddings\": 1");
        EXPECT_MESSAGE(refusal(dir),
                       "text_encoder/config.json': max_position_embeddings = 1: expected an integer "
                       "from 77 to 4096");
        for (const auto& [from, to, expected] : std::vector<std::tuple<std::string, std::string, std::string>>{
                 {"\"vocab_size\": 49408", "\"vocab_size\": 1e9",
                  "vocab_size = 1000000000.0: expected an integer from 1"},
                 {"\"num_hidden_layers\": 2", "\"num_hidden_layers\": -2",
                  "num_hidden_layers = -2: expected an integer from 1 to 128"},
                 {"\"hidden_size\": 8", "\"hidden_size\": \"8\"",
                  "hidden_size = \"8\": expected an integer from 1 to 8192"},
                 {"\"num_attention_heads\": 2", "\"num_attention_heads\": 18446744073709551615",
                  "num_attention_heads = 18446744073709551615: expected an integer from 1 to 256"},
                 {"\"layer_norm_eps\": 1e-05", "\"layer_norm_eps\": 1e-300",
                  "layer_norm_eps = 1e-300: expected a number from"},
             }) {
            dir = copy();
            edit(dir / "text_encoder/config.json", from, to);
            EXPECT_MESSAGE(refusal(dir), "text_encoder/config.json': " + expected);
        }
        // Scheduler values that would wrap or read as 0.
        for (const auto& [from, to, expected] : std::vector<std::tuple<std::string, std::string, std::string>>{
                 {"\"beta_start\": 0.00085", "\"beta_start\": 1e-300",
                  "beta_start = 1e-300: expected a number above 0 and below 1"},
                 {"\"num_train_timesteps\": 1000", "\"num_train_timesteps\": 18446744073709551615",
                  "num_train_timesteps = 18446744073709551615: expected an integer from 1 to 100000"},
                 {"\"num_train_timesteps\": 1000", "\"num_train_timesteps\": 1000000000",
                  "num_train_timesteps = 1000000000: expected an integer from 1 to 100000"},
             }) {
            dir = copy();
            edit(dir / "scheduler/scheduler_config.json", from, to);
            EXPECT_MESSAGE(refusal(dir), "scheduler_config.json': " + expected);
        }

        // A tokenizer of another model: refused with both folders named, before the weights are
        // read (the UNet's weights are cut short here, which a load would name first).
        dir = copy();
        fs::create_directory(dir / "tokenizer");
        const ClipTokenizer bundled = ClipTokenizer::fromMergesGz(kVocabulary);
        tokenizer_test::writeFolder((dir / "tokenizer").string(), bundled, tokenizer_test::unpackedMerges(kVocabulary));
        QCOMPARE(std::string(toString(loadSdModel(dir.string()).family)), std::string("sd1"));  // it fits
        edit(dir / "text_encoder/config.json", "\"vocab_size\": 49408", "\"vocab_size\": 1000");
        edit(dir / "text_encoder/config.json", "\"eos_token_id\": 49407", "\"eos_token_id\": 2");
        fs::resize_file(dir / "unet/diffusion_pytorch_model.safetensors", 100);
        const std::string tokens = refusal(dir);
        EXPECT_MESSAGE(tokens, "'" + (dir / "tokenizer").string() +
                                   "': its vocabulary (vocab.json) gives token ids up "
                                   "to 49407, but the text encoder in '" +
                                   (dir / "text_encoder").string() + "' has vocab_size 1000 (ids 0 to 999");

        // model_index.json keys of the wrong type: named with the key and the type expected.
        for (const auto& [from, to, expected] : std::vector<std::tuple<std::string, std::string, std::string>>{
                 {"\"_class_name\": \"StableDiffusionPipeline\"", "\"_class_name\": 42",
                  "model_index.json': _class_name = 42: expected a string"},
                 {"\"_class_name\": \"StableDiffusionPipeline\"", "\"_class_name\": [\"StableDiffusionPipeline\"]",
                  "_class_name = [\"StableDiffusionPipeline\"]: expected a string"},
                 {"\"requires_safety_checker\": false", "\"requires_aesthetics_score\": \"yes\"",
                  "requires_aesthetics_score = \"yes\": expected true or false"},
                 {"\"unet\": [", "\"unet\": 7, \"x\": [", "unet = 7: expected [library, class name]"},
             }) {
            dir = copy();
            edit(dir / "model_index.json", from, to);
            EXPECT_MESSAGE(refusal(dir), expected);
        }
        QVERIFY2(slow.empty(), slow.c_str());
    }

    void pipelineFolderErrors() {
        const QTemporaryDir tmp;
        const std::string root = tmp.path().toStdString();
        auto write = [&](const std::string& rel, const std::string& text) {
            std::filesystem::create_directories(std::filesystem::path(root + "/" + rel).parent_path());
            std::ofstream(root + "/" + rel) << text;
        };
        // SDXL pipeline: recognised and refused.
        write("xl/model_index.json",
              R"({"_class_name": "StableDiffusionXLPipeline", "unet": ["diffusers", "UNet2DConditionModel"]})");
        EXPECT_MESSAGE(errorOf([&] { loadSdModel(root + "/xl"); }), "SDXL");
        // No text encoder listed.
        write(
            "notext/model_index.json",
            R"({"_class_name": "StableDiffusionPipeline", "unet": ["diffusers", "UNet2DConditionModel"], "vae": ["diffusers", "AutoencoderKL"]})");
        EXPECT_MESSAGE(errorOf([&] { loadSdModel(root + "/notext"); }), "text_encoder");
        // Listed but missing on disk.
        write(
            "missing/model_index.json",
            R"({"_class_name": "StableDiffusionPipeline", "unet": ["diffusers", "UNet2DConditionModel"], "vae": ["diffusers", "AutoencoderKL"], "text_encoder": ["transformers", "CLIPTextModel"]})");
        EXPECT_MESSAGE(errorOf([&] { loadSdModel(root + "/missing"); }), "unet");
        // Not JSON.
        write("broken/model_index.json", "{not json");
        EXPECT_MESSAGE(errorOf([&] { loadSdModel(root + "/broken"); }), "model_index.json");
        // A damaged pickle: the restricted reader's words.
        write("model.ckpt", "PK\x03\x04 pickle");
        const std::string pickle = errorOf([&] { loadSdModel(root + "/model.ckpt"); });
        EXPECT_MESSAGE(pickle, "model.ckpt");
        EXPECT_MESSAGE(pickle, "restricted reader");
        QVERIFY(isSdModelPath(root + "/xl"));
        QVERIFY(isSdModelPath(root + "/model.ckpt"));
        QVERIFY(!isSdModelPath(root));
    }
};

QTEST_GUILESS_MAIN(TestSdPipeline)
#include "tst_sdpipeline.moc"
