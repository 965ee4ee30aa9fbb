// Pickled Stable Diffusion checkpoints and separate VAE files (tests/data/sdfiles, made by
// tools/reference/make_sd_ckpt_fixtures.py with torch.save):
//  - core/formats/TensorFile.h: either container behind one listing, a checkpoint's "state_dict"
//    wrapper descended into, the whole file for its digest;
//  - core/models/sd/SingleFileCheckpoint.h: sd1.ckpt (tests/data/singlefile/sd1.safetensors saved
//    by torch.save under "state_dict") loads to the bit-identical model and renders the same image;
//    a checkpoint that would run a command is refused with the restricted reader's words;
//  - core/models/sd/SingleFileVae.h: the same VAE weights in LDM names (.safetensors, .pt with a
//    training run's extras, under "first_stage_model."), in diffusers names (a file, a folder)
//    load to the same tensors; in place of tests/data/sdpipeline/sd1's VAE they change the image,
//    to the image of a pipeline whose vae/ holds those weights; a VAE of other sizes is refused
//    naming both;
//  - core/run/VaeFile.h: names looked up in a models folder's VAE/ and vae/.
#include <QtTest>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "ErrorText.h"
#include "core/base/Sha256.h"
#include "core/base/UnicodeText.h"
#include "core/cpu/CpuBackend.h"
#include "core/cpu/CpuEngine.h"
#include "core/formats/Safetensors.h"
#include "core/formats/TensorFile.h"
#include "core/models/sd/SdModel.h"
#include "core/models/sd/SingleFileCheckpoint.h"
#include "core/models/sd/SingleFileVae.h"
#include "core/models/vae/VaeModel.h"
#include "core/run/VaeFile.h"
#include "core/text/ClipTokenizer.h"

using namespace tessera;
using tessera::testing::errorOf;
namespace fs = std::filesystem;

namespace {

const std::string kData = TESSERA_TEST_DATA;
const std::string kFiles = kData + "/sdfiles";
const std::string kPipeline = kData + "/sdpipeline/sd1";
const std::string kVocabulary = std::string(TESSERA_SOURCE_DIR) + "/resources/clip/bpe_simple_vocab_16e6.txt.gz";

std::string readAll(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string fileSha256(const std::string& path) {
    const std::string bytes = readAll(path);
    return sha256Hex(bytes.data(), bytes.size());
}

// The same names, shapes and float bits.
void compareTensors(const std::map<std::string, HostTensor>& got, const std::map<std::string, HostTensor>& want,
                    const char* what) {
    QVERIFY2(got.size() == want.size(), what);
    for (const auto& [name, tensor] : want) {
        const auto it = got.find(name);
        QVERIFY2(it != got.end(), qPrintable(QString(what) + ": missing " + QString::fromStdString(name)));
        QVERIFY2(it->second.shape == tensor.shape, qPrintable(QString::fromStdString(name)));
        QVERIFY2(std::equal(tensor.data.begin(), tensor.data.end(), it->second.data.begin(), it->second.data.end(),
                            [](float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }),
                 qPrintable(QString(what) + ": values of " + QString::fromStdString(name)));
    }
}

SingleFileOptions sd1Configs() {
    SingleFileOptions options;
    options.digest = FileDigest::Skip;
    options.configFolder = kData + "/singlefile/sd1";
    return options;
}

class Silent : public RunObserver {};

// A tokenizer within tests/data/singlefile/sd1's 64-token text encoder: single letters as words,
// BOS and EOS at the end of the table.
std::shared_ptr<const ClipTokenizer> tinyTokenizer(const std::string& dir) {
    nlohmann::json vocab = nlohmann::json::object();
    for (int i = 0; i < 26; ++i) vocab[std::string(1, static_cast<char>('a' + i)) + "</w>"] = i;
    // Every byte's symbol (openai's bytes_to_unicode), which a vocabulary must hold, at ids the
    // prompts never reach; and the one merge a merges file must hold.
    int extra = 256;
    for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        const char32_t symbol = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(extra++);
        const std::string spelling = unicode::encodeUtf8(std::u32string(1, symbol));
        vocab[spelling] = 100 + b;
        if (!vocab.contains(spelling + "</w>")) vocab[spelling + "</w>"] = 400 + b;
    }
    vocab["xy</w>"] = 700;
    vocab["<|startoftext|>"] = 62;
    vocab["<|endoftext|>"] = 63;
    fs::create_directories(dir);
    std::ofstream(dir + "/vocab.json") << vocab.dump();
    std::ofstream(dir + "/merges.txt") << "#version: 0.2\nx y</w>\n";
    return std::make_shared<const ClipTokenizer>(ClipTokenizer::fromDiffusersFolder(dir));
}

// A small CPU render of a pinned model.
ImageTensor render(std::shared_ptr<const SdModel> model, int size, int tile, const char* prompt = "a red fox",
                   const char* negative = "blurry") {
    RunConfig config;
    config.width = config.height = size;
    config.tile = tile;
    config.overlapPx = 0;
    config.steps = 3;
    config.scheduler = SchedulerKind::Euler;
    config.prompt = prompt;
    config.negativePrompt = negative;
    config.precision = Precision::FP32;
    config.backend = BackendKind::CPU;
    config.previewEvery = 0;
    config.seed = 11;
    CpuEngine engine(std::make_unique<CpuBackend>());
    engine.setSdModel(std::move(model));
    Silent observer;
    const RunResult result = engine.run(config, observer);
    if (result.record.status != RunStatus::Finished) throw std::runtime_error("the render did not finish");
    return result.image;
}

bool sameBits(const ImageTensor& a, const ImageTensor& b) {
    return a.channels == b.channels && a.width == b.width && a.height == b.height &&
           std::equal(a.data.begin(), a.data.end(), b.data.begin(), b.data.end(),
                      [](float x, float y) { return std::memcmp(&x, &y, sizeof x) == 0; });
}

}  // namespace

class TestSdCkpt : public QObject {
    Q_OBJECT

private:
    QTemporaryDir dir_;
    std::string tmp(const std::string& name) const { return (fs::path(dir_.path().toStdString()) / name).string(); }

    // `source`'s tensors (safetensors) written again with `rename` applied to every name.
    std::string renamed(const std::string& source, const std::string& name,
                        const std::function<std::string(const std::string&)>& rename) const {
        const SafetensorsFile file(source);
        std::map<std::string, SafetensorsTensorData> out;
        for (const auto& info : file.tensors()) out[rename(info.name)] = {info.dtype, info.shape, file.readBytes(info)};
        writeSafetensors(tmp(name), out);
        return tmp(name);
    }

private slots:
    void initTestCase() {
        QVERIFY(dir_.isValid());
        QVERIFY2(fs::exists(kFiles + "/sd1.ckpt"), "tests/data/sdfiles (tools/reference/make_sd_ckpt_fixtures.py)");
        setBundledClipVocabulary(kVocabulary);
    }

    // ---- core/formats/TensorFile.h

    void tensorFileListsBothContainers() {
        const TensorFile ckpt(kFiles + "/sd1.ckpt");
        const TensorFile safetensors(kData + "/singlefile/sd1.safetensors");
        QVERIFY(ckpt.pickle() && !safetensors.pickle());
        QVERIFY(TensorFile::containerOf(kFiles + "/sd1.ckpt") == TensorContainer::TorchCheckpoint);
        QVERIFY(TensorFile::containerOf(kData + "/singlefile/sd1.safetensors") == TensorContainer::Safetensors);
        QCOMPARE(ckpt.wrapper(), std::string("state_dict."));
        QVERIFY(safetensors.wrapper().empty());
        EXPECT_MESSAGE(ckpt.description(), "restricted reader");
        EXPECT_MESSAGE(ckpt.description(), "the state dict under 'state_dict'");
        QCOMPARE(safetensors.description(), std::string("safetensors"));
        // Every tensor of the safetensors file, by the same name, dtype, shape and values.
        QCOMPARE(ckpt.tensors().size(), safetensors.tensors().size());
        for (const TensorFileEntry& want : safetensors.tensors()) {
            const TensorFileEntry* got = ckpt.find(want.name);
            QVERIFY2(got != nullptr, want.name.c_str());
            QCOMPARE(got->dtype, want.dtype);
            QVERIFY(got->shape == want.shape);
            QCOMPARE(got->bytes, want.bytes);
            if (want.dtype == "I64") continue;  // position_ids: not a float
            QVERIFY(ckpt.readFloat32(*got) == safetensors.readFloat32(want));
        }
        // Kept, the wrapper stays in the names, beside the run's other entries.
        const TensorFile kept(kFiles + "/sd1.ckpt", StateDictWrapper::Keep);
        QVERIFY(kept.wrapper().empty() && kept.has("state_dict.model.diffusion_model.input_blocks.0.0.weight"));
        // The whole file for the digest, in either container.
        for (const TensorFile* file : {&ckpt, &safetensors}) {
            Sha256 hash;
            QVERIFY(file->readFileInChunks([&](std::span<const std::byte> chunk) {
                hash.update(chunk.data(), chunk.size());
                return true;
            }));
            QCOMPARE(hash.hexDigest(), fileSha256(file->path()));
        }
    }

    void tensorFileNamesWhatItRefuses() {
        // A pickle's extension with bytes of neither container: the restricted reader says what it found.
        std::ofstream(tmp("junk.ckpt")) << "anything";
        const std::string junk = errorOf([&] { TensorFile file(tmp("junk.ckpt")); });
        EXPECT_MESSAGE(junk, "junk.ckpt");
        EXPECT_MESSAGE(junk, "not a PyTorch checkpoint");
        // A zip under a safetensors name is read as the checkpoint it is.
        fs::copy_file(kFiles + "/sd1.ckpt", tmp("renamed.safetensors"));
        QVERIFY(TensorFile(tmp("renamed.safetensors")).pickle());
        EXPECT_MESSAGE(errorOf([&] { TensorFile file(tmp("absent.pt")); }), "absent.pt");
    }

    // ---- .ckpt Stable Diffusion checkpoints

    void ckptEqualsSafetensors() {
        const SdModel fromCkpt = loadSingleFileCheckpoint(kFiles + "/sd1.ckpt", sd1Configs());
        const SdModel fromSafetensors = loadSingleFileCheckpoint(kData + "/singlefile/sd1.safetensors", sd1Configs());
        QVERIFY(fromCkpt.family == SdFamily::SD1);
        compareTensors(fromCkpt.unet->tensors(), fromSafetensors.unet->tensors(), "unet");
        compareTensors(fromCkpt.vae->tensors(), fromSafetensors.vae->tensors(), "vae");
        compareTensors(fromCkpt.textEncoder->tensors(), fromSafetensors.textEncoder->tensors(), "text encoder");
        QCOMPARE(fromCkpt.name, std::string("sd1"));

        // The header pass: the reader, and A1111's model hash of the .ckpt file itself.
        SingleFileOptions hashed = sd1Configs();
        hashed.digest = FileDigest::Compute;
        const SingleFileCheckpointInfo info = inspectSingleFileCheckpoint(kFiles + "/sd1.ckpt", hashed);
        QVERIFY(info.container == TensorContainer::TorchCheckpoint);
        EXPECT_MESSAGE(info.reader, "restricted reader (nothing executed)");
        QCOMPARE(info.sha256, fileSha256(kFiles + "/sd1.ckpt"));
        QCOMPARE(info.unetPart.parameters, fromCkpt.unet->parameterCount());
        // Beside the state dict, the run's counters are no tensors: nothing about them is ignored.
        QVERIFY(std::none_of(info.ignored.begin(), info.ignored.end(),
                             [](const std::string& n) { return n.find("global_step") != std::string::npos; }));

        // The same image, bit for bit.
        const std::shared_ptr<const ClipTokenizer> tokenizer = tinyTokenizer(tmp("tokenizer"));
        auto withTokenizer = [&](SdModel m) {
            m.tokenizer = tokenizer;
            return std::make_shared<const SdModel>(std::move(m));
        };
        const ImageTensor a = render(withTokenizer(fromCkpt), 16, 16, "a b c", "d");
        const ImageTensor b = render(withTokenizer(fromSafetensors), 16, 16, "a b c", "d");
        QVERIFY(sameBits(a, b));
    }

    void hostileCkptRefused() {
        for (const auto& load : std::vector<std::function<void()>>{
                 [] { (void)loadSingleFileCheckpoint(kFiles + "/hostile.ckpt", sd1Configs()); },
                 [] { (void)loadSdModel(kFiles + "/hostile.ckpt"); },
                 [] { (void)inspectSingleFileCheckpoint(kFiles + "/hostile.ckpt", sd1Configs()); }}) {
            const std::string m = errorOf(load);
            EXPECT_MESSAGE(m, "[model]");
            EXPECT_MESSAGE(m, "hostile.ckpt");
            EXPECT_MESSAGE(m, "'posix.system'");  // the reader names what the pickle asked for
            EXPECT_MESSAGE(m, "restricted reader, which runs nothing in the file");
        }
        // A pickle under a safetensors name goes to the same reader.
        fs::copy_file(kFiles + "/hostile.ckpt", tmp("hostile.safetensors"));
        EXPECT_MESSAGE(errorOf([&] { (void)loadSdModel(tmp("hostile.safetensors")); }), "'posix.system'");
    }

    // ---- separate VAE files

    void vaeFilesLoadTheSameWeights() {
        const VaeConfig modelVae = readVaeConfig(kPipeline);
        const VaeModel reference = VaeModel::load(kFiles + "/vae/diffusers");
        const VaeModel own = VaeModel::load(kPipeline);
        // Other weights than the pipeline's.
        QVERIFY(reference.tensors().at("decoder.conv_out.weight").data !=
                own.tensors().at("decoder.conv_out.weight").data);
        const std::string prefixed = renamed(kFiles + "/vae/ldm.safetensors", "prefixed.safetensors",
                                             [](const std::string& n) { return "first_stage_model." + n; });
        const std::string diffusersFile = kFiles + "/vae/diffusers/diffusion_pytorch_model.safetensors";
        struct Case {
            std::string path;
            VaeNames names;
            std::string prefix;
            bool pickle;
        };
        for (const Case& c : {Case{kFiles + "/vae/ldm.safetensors", VaeNames::Ldm, "", false},
                              Case{kFiles + "/vae/ldm.pt", VaeNames::Ldm, "", true},
                              Case{prefixed, VaeNames::Ldm, "first_stage_model.", false},
                              Case{diffusersFile, VaeNames::Diffusers, "", false},
                              Case{kFiles + "/vae/diffusers", VaeNames::Diffusers, "", false}}) {
            const SingleFileVae vae = loadSingleFileVae(c.path, modelVae, "sd1");
            QVERIFY2(vae.info.names == c.names, c.path.c_str());
            QCOMPARE(vae.info.prefix, c.prefix);
            QCOMPARE(vae.info.pickle(), c.pickle);
            compareTensors(vae.vae->tensors(), reference.tensors(), c.path.c_str());
            QCOMPARE(toJson(vae.vae->config()), toJson(modelVae));  // the model's configuration, its scaling
            QCOMPARE(vae.info.sha256, fileSha256(vae.info.weightsFile));
        }
        // The .pt's training extras: the discriminator and EMA counters, ignored as A1111 drops them.
        const SingleFileVaeInfo pt = inspectSingleFileVae(kFiles + "/vae/ldm.pt", modelVae, "sd1");
        QVERIFY(std::find(pt.ignored.begin(), pt.ignored.end(), "loss.discriminator.main.0.weight") !=
                pt.ignored.end());
        QVERIFY(std::find(pt.ignored.begin(), pt.ignored.end(), "model_ema.decay") != pt.ignored.end());
        EXPECT_MESSAGE(pt.reader, "restricted reader");
        QCOMPARE(pt.weightsFile, pt.path);
        QCOMPARE(inspectSingleFileVae(kFiles + "/vae/diffusers", modelVae, "sd1").weightsFile,
                 (fs::path(kFiles + "/vae/diffusers") / "diffusion_pytorch_model.safetensors").string());
    }

    void vaeReplacesThePipelinesOwn() {
        const SdModel pipeline = loadSdModel(kPipeline);
        SdModel replaced = pipeline;
        replaced.vae = loadSingleFileVae(kFiles + "/vae/ldm.safetensors", pipeline.vae->config(), "sd1").vae;
        // A pipeline folder whose vae/ holds the same weights.
        const fs::path copy = tmp("pipeline-with-vae");
        fs::copy(kPipeline, copy, fs::copy_options::recursive);
        fs::copy_file(kFiles + "/vae/diffusers/diffusion_pytorch_model.safetensors",
                      copy / "vae" / "diffusion_pytorch_model.safetensors", fs::copy_options::overwrite_existing);
        const SdModel folder = loadSdModel(copy.string());
        const ImageTensor own = render(std::make_shared<const SdModel>(pipeline), 64, 64);
        const ImageTensor withVae = render(std::make_shared<const SdModel>(replaced), 64, 64);
        const ImageTensor fromFolder = render(std::make_shared<const SdModel>(folder), 64, 64);
        QVERIFY(!sameBits(own, withVae));
        QVERIFY(sameBits(withVae, fromFolder));
        // The .pt gives the same image as the .safetensors.
        SdModel fromPt = pipeline;
        fromPt.vae = loadSingleFileVae(kFiles + "/vae/ldm.pt", pipeline.vae->config(), "sd1").vae;
        QVERIFY(sameBits(render(std::make_shared<const SdModel>(fromPt), 64, 64), withVae));
    }

    void vaeOfOtherSizesRefusedNamingBoth() {
        const VaeConfig modelVae = readVaeConfig(kPipeline);
        // A diffusers folder of other sizes: its config.json says so first.
        std::string m = errorOf([&] { (void)loadSingleFileVae(kData + "/singlefile/sd1/vae", modelVae, "sd1"); });
        EXPECT_MESSAGE(m, "singlefile/sd1/vae");
        EXPECT_MESSAGE(m, "does not fit the VAE of 'sd1' (block_out_channels [8, 8, 16, 16]");
        EXPECT_MESSAGE(m, "its config.json has block_out_channels [4, 8]");
        // A whole checkpoint's VAE (LDM names under first_stage_model.) of other sizes: the first tensor that differs.
        m = errorOf([&] { (void)inspectSingleFileVae(kData + "/singlefile/sd1.safetensors", modelVae, "sd1"); });
        EXPECT_MESSAGE(m, "sd1.safetensors' does not fit the VAE of 'sd1' (block_out_channels [8, 8, 16, 16]");
        EXPECT_MESSAGE(m, "first_stage_model.");
        EXPECT_MESSAGE(m, "expected");
        // A file with no VAE in it.
        m = errorOf([&] {
            (void)inspectSingleFileVae(kPipeline + "/unet/diffusion_pytorch_model.safetensors", modelVae, "sd1");
        });
        EXPECT_MESSAGE(m, "not a VAE");
        EXPECT_MESSAGE(m, "encoder.down.0.block.0.conv1.weight");
        // A hostile pickle: the reader's words.
        EXPECT_MESSAGE(errorOf([&] { (void)inspectSingleFileVae(kFiles + "/hostile.ckpt", modelVae, "sd1"); }),
                       "'posix.system'");
    }

    // ---- core/run/VaeFile.h

    void vaeNamesAreLookedUp() {
        const fs::path models = tmp("models");
        fs::create_directories(models / "VAE");
        fs::create_directories(models / "vae" / "folder-vae");
        fs::copy_file(kFiles + "/vae/ldm.pt", models / "VAE" / "mine.pt");
        fs::copy_file(kFiles + "/vae/ldm.safetensors", models / "vae" / "comfy.safetensors");
        const std::vector<std::string> folders{models.string()};
        QCOMPARE(findVaeFile("mine", folders).path, (models / "VAE" / "mine.pt").string());
        QCOMPARE(findVaeFile("mine.pt", folders).path, (models / "VAE" / "mine.pt").string());  // A1111's infotext name
        QCOMPARE(findVaeFile("comfy", folders).path, (models / "vae" / "comfy.safetensors").string());
        QCOMPARE(findVaeFile("folder-vae", folders).path, (models / "vae" / "folder-vae").string());
        QVERIFY(findVaeFile("mine", folders).byName);
        const std::string m = errorOf([&] { (void)findVaeFile("nowhere", folders); });
        EXPECT_MESSAGE(m, "[vae] vae: no VAE named 'nowhere' ('nowhere.safetensors', 'nowhere.pt' or 'nowhere.ckpt')");
        EXPECT_MESSAGE(m, "TESSERA_MODELS");
        EXPECT_MESSAGE(errorOf([&] { (void)findVaeFile("x", {}); }), "no models folder is known");
        EXPECT_MESSAGE(errorOf([&] { (void)findVaeFile(tmp("absent.pt"), folders); }), "does not exist");
        QCOMPARE(vaeName("/m/VAE/vae-ft-mse-840000-ema-pruned.safetensors"),
                 std::string("vae-ft-mse-840000-ema-pruned.safetensors"));
        QCOMPARE(vaeName("/m/vae/folder-vae/"), std::string("folder-vae"));
    }
};

QTEST_GUILESS_MAIN(TestSdCkpt)
#include "tst_sdckpt.moc"
