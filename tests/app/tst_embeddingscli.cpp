// Textual-inversion embeddings at tessera-cli's edges: `tokens --embeddings-dir` shows where each
// embedding went and A1111's token count (each vector a token, moved to the next chunk when it does
// not fit); --embeddings-dir is a run setting; --params-from reads "TI hashes" back and names an
// embedding found nowhere, or found with another hash; the infotext writes "TI hashes" as A1111 does.
#include <QtTest/QtTest>

#include <QDir>
#include <QTemporaryDir>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "app/cli/CliOptions.h"
#include "app/cli/PngIO.h"
#include "app/cli/TokensCommand.h"
#include "core/base/Sha256.h"
#include "core/run/Infotext.h"
#include "core/run/ModelFileLookup.h"
#include "core/sampling/ImageOps.h"
#include "core/text/ClipTokenizer.h"
#include "tests/app/CliRun.h"
#include "tests/app/TokensRun.h"

using namespace tessera;
namespace fs = std::filesystem;

namespace {

const std::string kGz = TESSERA_SOURCE_DIR "/resources/clip/bpe_simple_vocab_16e6.txt.gz";
const std::string kData = TESSERA_TEST_DATA "/embeddings";

using Result = testing::TokensRun;
constexpr auto tokens = &testing::runTokens;

std::string show(const Result& r) { return "exit " + std::to_string(r.exitCode) + "\n" + r.out + "\n" + r.err; }

std::string fileHash12(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return sha256Hex(bytes.data(), bytes.size()).substr(0, 12);
}

std::string cats(int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += (i ? " " : "") + std::string("cat");
    return s;
}

}  // namespace

class TestEmbeddingsCli : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() { qunsetenv(kModelsFolderVariable); }

    // The vectors take id-0 slots; a line names each embedding with its place, vector count and
    // hash; the count is A1111's.
    void tokensShowsEmbeddings() {
        QTemporaryDir dir;
        const std::string folder = dir.path().toStdString();
        fs::create_directories(folder + "/styles");
        fs::copy_file(kData + "/good/ti-a1111.pt", folder + "/styles/a1111.pt");
        const ClipTokenizer tokenizer = ClipTokenizer::fromMergesGz(kGz);
        const std::int32_t a = tokenizer.encode("a").front(), cat = tokenizer.encode("cat").front();
        const Result r = tokens({"a (a1111:1.1) cat", "--weights", "--embeddings-dir", folder});
        QVERIFY2(r.exitCode == 0, show(r).c_str());
        const std::string hash = fileHash12(kData + "/good/ti-a1111.pt");
        const std::string want = "chunk 1: 49406 " + std::to_string(a) + " 0 0 0 " + std::to_string(cat) +
                                 " 49407\nweights 1: 1 1 1.1 1.1 1.1 1 1\nembeddings 1: a1111 at 2 (3 vectors, " +
                                 hash + ")\ntokens: 5 (each embedding vector counts as a token, as in A1111)\n";
        QCOMPARE(r.out, want);
        // Without the folder the name is words, and the output is as before.
        const Result words = tokens({"a (a1111:1.1) cat"});
        QVERIFY(words.out.find("embeddings") == std::string::npos);
        QVERIFY(words.out.find(" 0 0 0 ") == std::string::npos);
    }

    void tokensMovesVectorsToTheNextChunk() {
        QTemporaryDir dir;
        const std::string folder = dir.path().toStdString();
        fs::copy_file(kData + "/good/ti-a1111.pt", folder + "/a1111.pt");
        const Result r = tokens({cats(73) + " a1111", "--embeddings-dir", folder});
        QVERIFY2(r.exitCode == 0, show(r).c_str());
        QVERIFY2(r.out.find("embeddings 2: a1111 at 1 (3 vectors") != std::string::npos, show(r).c_str());
        QVERIFY2(r.out.find("tokens: 78 ") != std::string::npos, show(r).c_str());
    }

    // A hostile or unusable file the prompt names: exit 2 naming it; one it does not name is not read.
    void tokensRefusesBadFiles() {
        QTemporaryDir dir;
        const std::string folder = dir.path().toStdString();
        fs::copy_file(kData + "/bad/ti-evil.pt", folder + "/evil.pt");
        fs::copy_file(kData + "/bad/ti-huge.safetensors", folder + "/huge.safetensors");
        QCOMPARE(tokens({"a cat", "--embeddings-dir", folder}).exitCode, 0);
        const Result evil = tokens({"an evil cat", "--embeddings-dir", folder});
        QCOMPARE(evil.exitCode, 2);
        QVERIFY2(evil.err.find(folder + "/evil.pt") != std::string::npos, show(evil).c_str());
        const Result huge = tokens({"huge", "--embeddings-dir", folder});
        QCOMPARE(huge.exitCode, 2);
        QVERIFY2(huge.err.find("holds 76 vectors") != std::string::npos, show(huge).c_str());
        QVERIFY(!fs::exists("pwned"));
    }

    void embeddingsDirIsARunSetting() {
        const CliOptions o = parseCliOptions({"render", "--embeddings-dir", "/some/folder", "--prompt", "x"});
        QCOMPARE(o.config.embeddingsDir, std::string("/some/folder"));
        QVERIFY(o.fieldsGiven.count("embeddings_dir"));
    }

    // Written as A1111 writes it (after Lora hashes, quoted), read back: every name checked against
    // the folders; one found nowhere and one of another hash named; none listed as unapplied.
    void tiHashesRoundTrip() {
        QTemporaryDir dir;
        const std::string folder = dir.path().toStdString();
        fs::copy_file(kData + "/good/ti-a1111.pt", folder + "/a1111.pt");
        fs::copy_file(kData + "/good/ti-concept.bin", folder + "/concept.bin");
        const std::string hash = fileHash12(folder + "/a1111.pt");
        RunConfig config;
        config.prompt = "a1111 concept cat";
        InfotextExtras extras = infotextExtras(config);
        extras.loraHashes = "detail: 0123456789ab";
        extras.textualInversionHashes = "a1111: " + hash + ", concept: 000000000000, missing: abcdefabcdef";
        const std::string text = infotext(config, extras);
        QVERIFY2(text.find("Lora hashes: \"detail: 0123456789ab\", TI hashes: \"a1111: " + hash) != std::string::npos,
                 text.c_str());
        const std::string png = folder + "/run.png";
        Rgb8Image image;
        image.width = image.height = 2;
        image.pixels.assign(12, 7);
        writePng(png, image, {{"parameters", text, false}});
        const CliOptions o = parseCliOptions({"render", "--params-from", png, "--embeddings-dir", folder});
        std::string notes;
        for (const std::string& n : o.paramsFromNotes) notes += n + "\n";
        QVERIFY2(notes.find("TI hashes name the embedding 'missing' (abcdefabcdef), found in no embeddings folder") !=
                     std::string::npos,
                 notes.c_str());
        QVERIFY2(notes.find("'concept' the hash 000000000000; " + folder + "/concept.bin has " +
                            fileHash12(folder + "/concept.bin")) != std::string::npos,
                 notes.c_str());
        QVERIFY2(notes.find("a1111") == std::string::npos, notes.c_str());
        QVERIFY2(notes.find("'TI hashes") == std::string::npos, notes.c_str());
    }

    // A render whose prompt names an embedding records it as A1111 does: "TI hashes" in the PNG's
    // parameters and ti_hashes in the manifest, with the file's short hash.
    void renderRecordsTiHashes() {
        QTemporaryDir dir;
        const std::string folder = dir.path().toStdString() + "/embeddings";
        fs::create_directories(folder);
        fs::copy_file(kData + "/good/ti-a1111.pt", folder + "/a1111.pt");
        const std::string hash = fileHash12(folder + "/a1111.pt");
        const QString out = dir.filePath("out");
        const testing::CliRun r = testing::runCli({"render",
                                                   "--model",
                                                   TESSERA_TEST_DATA "/sdpipeline/sd1",
                                                   "--backend",
                                                   "cpu",
                                                   "--width",
                                                   "64",
                                                   "--height",
                                                   "64",
                                                   "--tile",
                                                   "64",
                                                   "--steps",
                                                   "2",
                                                   "--seed",
                                                   "3",
                                                   "--prompt",
                                                   "a a1111 cube",
                                                   "--embeddings-dir",
                                                   QString::fromStdString(folder),
                                                   "--out",
                                                   out});
        QVERIFY2(r.exitCode == 0, qPrintable(testing::describe(r)));
        const QStringList pngs = QDir(out).entryList({"*.png"}, QDir::Files);
        QCOMPARE(pngs.size(), 1);
        const PngFile png = readPng(QDir(out).filePath(pngs.front()).toStdString());
        const std::string parameters = png.text("parameters");
        QVERIFY2(parameters.find("TI hashes: \"a1111: " + hash + "\"") != std::string::npos, parameters.c_str());
        QVERIFY2(png.text("tessera-manifest").find("\"ti_hashes\": \"a1111: " + hash + "\"") != std::string::npos,
                 png.text("tessera-manifest").c_str());
    }

    // An embedding the prompt names that no run could use is refused (exit 2, naming the file and
    // what is wrong) before the model's weights are read, and the render writes nothing: a hostile
    // pickle, NaN values, and vectors of another width than the model's text encoder.
    void renderRefusesBadEmbeddingsBeforeLoading() {
        struct Case {
            const char* file;
            const char* name;
            const char* says;  // in the message
        };
        const Case cases[] = {{"ti-evil.pt", "evil", ""},
                              {"ti-nan.safetensors", "nanny", "NaN"},
                              {"ti-wide.safetensors", "wide", "width"}};
        for (const Case& c : cases) {
            QTemporaryDir dir;
            const std::string folder = dir.path().toStdString() + "/embeddings";
            fs::create_directories(folder);
            const std::string file = folder + "/" + c.name + fs::path(c.file).extension().string();
            fs::copy_file(kData + "/bad/" + c.file, file);
            const QString out = dir.filePath("out");
            const testing::CliRun r = testing::runCli(
                {"render", "--model", TESSERA_TEST_DATA "/sdpipeline/sd1", "--backend", "cpu", "--width", "64",
                 "--height", "64", "--tile", "64", "--steps", "2", "--prompt", QStringLiteral("a %1 cube").arg(c.name),
                 "--embeddings-dir", QString::fromStdString(folder), "--out", out});
            const std::string said = testing::describe(r).toStdString();
            QVERIFY2(r.exitCode == 2, said.c_str());
            QVERIFY2(r.err.contains(QString::fromStdString(file)), said.c_str());
            QVERIFY2(r.err.contains(QString::fromLatin1(c.says)), said.c_str());
            QVERIFY2(!r.err.contains(QStringLiteral("loading:")), said.c_str());  // no weights read
            QVERIFY2(!fs::exists(out.toStdString()) || fs::is_empty(out.toStdString()), said.c_str());
            QVERIFY(!fs::exists("pwned"));
        }
    }
};

QTEST_GUILESS_MAIN(TestEmbeddingsCli)
#include "tst_embeddingscli.moc"
