// Textual-inversion embeddings as A1111 reads, finds, places and encodes them: the file formats
// (tests/data/embeddings, made by tools/reference/make_embedding_fixtures.py), hostile and unusable
// files, the name lookup on token boundaries (longest match), the 75-token chunks with the vectors
// moved to the next chunk when they do not fit, the "TI hashes" value, and the encoding: an embedding
// whose vectors are copied from the token table for words W gives exactly the conditioning of the
// prompt with W, on the tiny SD 1.x and SDXL pipelines (tests/data/sdpipeline, tests/data/sdxlpipeline),
// through encodeSdPrompts with the embeddings found in a folder.
#include <QtTest/QtTest>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ErrorText.h"
#include "core/base/BoundedInput.h"
#include "core/base/Sha256.h"
#include "core/cpu/CpuBackend.h"
#include "core/formats/Safetensors.h"
#include "core/models/clip/TextualInversionEncoding.h"
#include "core/models/clip/TextualInversionFile.h"
#include "core/models/sd/SdModel.h"
#include "core/models/sd/SdPipeline.h"
#include "core/run/EmbeddingFile.h"
#include "core/run/ModelFileLookup.h"
#include "core/run/RunConfig.h"
#include "core/text/EmbeddingDatabase.h"
#include "core/text/PromptParser.h"

using namespace tessera;
using tessera::testing::errorOf;
namespace fs = std::filesystem;

namespace {

const std::string kData = std::string(TESSERA_TEST_DATA) + "/embeddings";
const std::string kSd1 = std::string(TESSERA_TEST_DATA) + "/sdpipeline/sd1";
const std::string kSdxl = std::string(TESSERA_TEST_DATA) + "/sdxlpipeline/pipeline";
const std::string kVocabulary = std::string(TESSERA_SOURCE_DIR) + "/resources/clip/bpe_simple_vocab_16e6.txt.gz";

nlohmann::json cases() { return readBoundedJson(kData + "/cases.json", "test").at("cases"); }

std::string fileSha256(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return sha256Hex(bytes.data(), bytes.size());
}

// An embedding in memory (no file) of `vectors` rows of `width`.
TextualInversion memoryEmbedding(const std::string& name, int vectors, int width = 8) {
    TextualInversion e;
    e.name = name;
    e.path = "/embeddings/" + name + ".pt";
    e.sha256 = std::string(64, 'a');
    e.vectors = vectors;
    e.byEncoder[""] = EmbeddingVectors{width, std::vector<float>(static_cast<std::size_t>(vectors * width), 0.5f)};
    return e;
}

// Writes {"emb_params": rows} (or clip_l / clip_g) as safetensors.
void writeEmbedding(const std::string& path, const std::map<std::string, std::pair<int, std::vector<float>>>& byKey) {
    std::map<std::string, SafetensorsTensorData> tensors;
    for (const auto& [key, rows] : byKey) {
        const int width = rows.first;
        SafetensorsTensorData t;
        t.shape = {static_cast<std::int64_t>(rows.second.size()) / width, width};
        t.bytes = encodeFloats(SafetensorsDtype::F32, rows.second);
        tensors[key] = std::move(t);
    }
    writeSafetensors(path, tensors);
}

// The token-table rows of `words`' tokens: an embedding that stands for those words exactly.
std::vector<float> tableRows(const ClipTextModel& model, const ClipTokenizer& tokenizer, const std::string& words) {
    const HostTensor& table = model.tensors().at("text_model.embeddings.token_embedding.weight");
    const std::size_t d = static_cast<std::size_t>(model.config().hiddenSize);
    std::vector<float> rows;
    for (const std::int32_t id : tokenizer.encode(words))
        rows.insert(rows.end(), table.data.begin() + static_cast<std::ptrdiff_t>(id * d),
                    table.data.begin() + static_cast<std::ptrdiff_t>((id + 1) * d));
    return rows;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::string words(int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += (i ? " " : "") + std::string("cat");
    return s;
}

}  // namespace

class TestEmbeddings : public QObject {
    Q_OBJECT

    std::unique_ptr<ClipTokenizer> tokenizer_;
    CpuBackend cpu_{2};

    ClipTokenizer& tokenizer() { return *tokenizer_; }

private slots:
    void initTestCase() {
        qunsetenv(kModelsFolderVariable);
        setBundledClipVocabulary(kVocabulary);
        tokenizer_ = std::make_unique<ClipTokenizer>(ClipTokenizer::fromMergesGz(kVocabulary));
    }

    // Every format A1111 reads: the tensors, vector counts, widths and whole-file hashes the
    // generator wrote.
    void readsEveryFormat() {
        for (const auto& c : cases()) {
            const std::string path = kData + "/" + c.at("file").get<std::string>();
            const TextualInversion e = readTextualInversion(path);
            QCOMPARE(e.name, c.at("name").get<std::string>());
            QCOMPARE(e.path, path);
            QCOMPARE(e.vectors, c.at("vectors").get<int>());
            QCOMPARE(e.sha256, c.at("sha256").get<std::string>());
            QCOMPARE(e.sha256, fileSha256(path));
            QCOMPARE(e.shortHash(), e.sha256.substr(0, 12));
            QCOMPARE(e.byEncoder.size(), c.at("encoders").size());
            for (const auto& [key, want] : c.at("encoders").items()) {
                const EmbeddingVectors* v = e.vectorsFor(key);
                QVERIFY2(v, (path + ": no vectors for '" + key + "'").c_str());
                QCOMPARE(v->width, want.at("width").get<int>());
                QCOMPARE(v->values, want.at("values").get<std::vector<float>>());
            }
        }
    }

    // Files A1111 could not use, and hostile ones: refused naming the file and why; the pickle that
    // would run code is read as data and refused (nothing executed).
    void refusesBadFiles() {
        const std::vector<std::pair<std::string, std::string>> bad{
            {"ti-huge.safetensors", "holds 76 vectors; an embedding has 1 to 75"},
            {"ti-two.safetensors", "2 tensors and neither string_to_param nor clip_l and clip_g"},
            {"ti-nan.safetensors", "NaN or infinite"},
            {"ti-int.safetensors", "(I64) cannot be read as float"},
            {"ti-mismatch.safetensors", "clip_l holds 2 vectors and clip_g 3"},
            {"ti-evil.pt", "system"},
            {"ti-paramdict.pt", "ParameterDict"},
            {"ti-empty.pt", "empty.pt"},
        };
        for (const auto& [file, why] : bad) {
            const std::string path = kData + "/bad/" + file;
            const std::string message = errorOf([&] { readTextualInversion(path); });
            EXPECT_MESSAGE(message, "[embedding]");
            EXPECT_MESSAGE(message, path);
            EXPECT_MESSAGE(message, why);
        }
        QVERIFY(!fs::exists("pwned"));
        // An SD 2.x width is a readable embedding; the encoder it does not fit refuses it.
        QCOMPARE(readTextualInversion(kData + "/bad/ti-wide.safetensors").byEncoder.at("").width, 1024);
        // A file far larger than any embedding is refused unread.
        QTemporaryDir dir;
        const std::string big = dir.filePath("big.safetensors").toStdString();
        { std::ofstream create(big); }
        fs::resize_file(big, embedding_file_limits::kMaxFileBytes + 1);
        EXPECT_MESSAGE(errorOf([&] { readTextualInversion(big); }), "an embedding file is far smaller");
    }

    // A1111's find_embedding_at_position: the longest registered name at a position, on whole
    // tokens, case-insensitively (the tokenizer lower-cases).
    void findsNamesOnTokenBoundaries() {
        std::vector<TextualInversion> list{memoryEmbedding("style", 1), memoryEmbedding("style two", 2),
                                           memoryEmbedding("bad-hands", 3)};
        const EmbeddingDatabase db(tokenizer(), list);
        const auto at = [&](const std::string& text, std::size_t position) {
            const std::vector<std::int32_t> ids = tokenizer().encode(text);
            return db.findAt(ids, position);
        };
        QVERIFY(!at("a photo", 0));
        const auto longest = at("Style Two cats", 0);
        QVERIFY(longest);
        QCOMPARE(db.embeddings()[longest->embedding].name, std::string("style two"));
        QCOMPARE(longest->tokens, tokenizer().encode("style two").size());
        const auto shorter = at("style cats", 0);
        QVERIFY(shorter);
        QCOMPARE(db.embeddings()[shorter->embedding].name, std::string("style"));
        QVERIFY(!at("styles", 0));  // "styles</w>" is another token than "style</w>"
        QVERIFY(at("bad-hands", 0));
        QVERIFY(!at("bad-handsome", 0));
        QVERIFY(at("a bad-hands", 1));
        // A name whose tokens run past the end of the text does not match.
        QVERIFY(!at("a style", 2));
    }

    // Collisions: a later file of the same name replaces the earlier; two names of the same tokens
    // ("Foo" and "foo"): the first registered wins; both said in notes().
    void nameCollisions() {
        TextualInversion first = memoryEmbedding("foo", 1), second = memoryEmbedding("foo", 2),
                         upper = memoryEmbedding("Foo", 3);
        second.path = "/other/foo.safetensors";
        const EmbeddingDatabase db(tokenizer(), {first, upper, second});
        QCOMPARE(db.embeddings().size(), std::size_t(2));
        const std::vector<std::int32_t> ids = tokenizer().encode("foo");
        const auto match = db.findAt(ids, 0);
        QVERIFY(match);
        // "foo" was replaced and registered again after "Foo", so "Foo" is found first.
        QCOMPARE(db.embeddings()[match->embedding].name, std::string("Foo"));
        QCOMPARE(db.notes().size(), std::size_t(2));
        EXPECT_MESSAGE(db.notes()[0], "/other/foo.safetensors replaces /embeddings/foo.pt");
        EXPECT_MESSAGE(db.notes()[1], "never used");
    }

    // tokenize_line: an embedding's n vectors take n slots of id 0 with the text's weight, a fix
    // at their offset; the count is A1111's.
    void placesVectorsInChunks() {
        const EmbeddingDatabase db(tokenizer(), {memoryEmbedding("tinyfox", 3)});
        PromptChunkOptions options;
        options.embeddings = &db;
        const PromptChunks p = chunkPrompt(tokenizer(), "a (tinyfox:1.5) cat", options);
        QCOMPARE(p.chunks.size(), std::size_t(1));
        const PromptChunk& c = p.chunks.front();
        const std::int32_t a = tokenizer().encode("a").front(), cat = tokenizer().encode("cat").front();
        QCOMPARE(std::vector<std::int32_t>(c.contentIds().begin(), c.contentIds().end()),
                 (std::vector<std::int32_t>{a, 0, 0, 0, cat}));
        QCOMPARE(std::vector<float>(c.contentWeights().begin(), c.contentWeights().end()),
                 (std::vector<float>{1.0f, 1.5f, 1.5f, 1.5f, 1.0f}));
        QCOMPARE(c.fixes, (std::vector<PromptChunkFix>{{1, 0}}));
        QCOMPARE(p.tokenCount, 5);
        // Without the database the name is words.
        QVERIFY(chunkPrompt(tokenizer(), "a (tinyfox:1.5) cat").chunks.front().fixes.empty());
    }

    // Vectors never straddle a chunk: 73 tokens then 3 vectors close the chunk at 73 (padded with
    // EOS) and start the next one with the vectors; the count is 75 + 3.
    void movesVectorsToTheNextChunk() {
        const EmbeddingDatabase db(tokenizer(), {memoryEmbedding("tinyfox", 3)});
        PromptChunkOptions options;
        options.embeddings = &db;
        options.commaBacktrack = 0;
        const PromptChunks p = chunkPrompt(tokenizer(), words(73) + " tinyfox", options);
        QCOMPARE(p.chunks.size(), std::size_t(2));
        QCOMPARE(p.chunks[0].contentTokens, 73);
        QVERIFY(p.chunks[0].fixes.empty());
        QCOMPARE(p.chunks[0].ids[74], tokenizer().eosId());
        QCOMPARE(p.chunks[1].contentTokens, 3);
        QCOMPARE(p.chunks[1].fixes, (std::vector<PromptChunkFix>{{0, 0}}));
        QCOMPARE(p.tokenCount, 78);
        // 72 tokens: the 3 vectors fill the chunk exactly.
        const PromptChunks fits = chunkPrompt(tokenizer(), words(72) + " tinyfox", options);
        QCOMPARE(fits.chunks.size(), std::size_t(1));
        QCOMPARE(fits.chunks[0].fixes, (std::vector<PromptChunkFix>{{72, 0}}));
        QCOMPARE(fits.tokenCount, 75);
        // A 75-vector embedding after one token starts the second chunk and fills it.
        const EmbeddingDatabase full(tokenizer(), {memoryEmbedding("wide", 75)});
        options.embeddings = &full;
        const PromptChunks whole = chunkPrompt(tokenizer(), "cat wide", options);
        QCOMPARE(whole.chunks.size(), std::size_t(2));
        QCOMPARE(whole.chunks[1].contentTokens, 75);
        QCOMPARE(whole.tokenCount, 150);
    }

    // A1111's comma backtracking moves the tokens after the last comma to the next chunk but leaves
    // an embedding's fix with the chunk it closes (its vectors then land on that chunk's padding);
    // kept so, for the same conditioning.
    void commaBacktrackKeepsTheFixWhereA1111Does() {
        const EmbeddingDatabase db(tokenizer(), {memoryEmbedding("tinyfox", 2)});
        PromptChunkOptions options;
        options.embeddings = &db;
        // 70 tokens, a comma (71), the 2 vectors (73), 2 more (75), then one more token.
        const PromptChunks p = chunkPrompt(tokenizer(), words(70) + ", tinyfox cat cat cat", options);
        QCOMPARE(p.chunks.size(), std::size_t(2));
        QCOMPARE(p.chunks[0].contentTokens, 71);
        QCOMPARE(p.chunks[0].fixes, (std::vector<PromptChunkFix>{{71, 0}}));
        QCOMPARE(p.chunks[1].contentTokens, 5);
        QCOMPARE(p.chunks[1].ids[1], 0);
        QVERIFY(p.chunks[1].fixes.empty());
    }

    void tiHashes() {
        TextualInversion a = memoryEmbedding("a:b,c", 1), b = memoryEmbedding("neg", 1);
        a.sha256 = "0123456789abcdef";
        b.sha256 = "fedcba9876543210";
        const std::string negative = addTextualInversionHashes("", {&b});
        QCOMPARE(negative, std::string("neg: fedcba987654"));
        QCOMPARE(addTextualInversionHashes(negative, {&a, &a}), std::string("abc: 0123456789ab, neg: fedcba987654"));
        QCOMPARE(addTextualInversionHashes(negative, {}), negative);
        const auto parsed = parseTextualInversionHashes(" abc: 0123456789ab, neg:fedcba987654,junk");
        QCOMPARE(parsed.size(), std::size_t(2));
        QCOMPARE(parsed[1], (std::pair<std::string, std::string>{"neg", "fedcba987654"}));
    }

    // The folders: each models folder's embeddings/ and the one beside it, then --embeddings-dir;
    // files listed recursively in path order, other extensions and empty files left out.
    void findsFilesInFolders() {
        QTemporaryDir dir;
        const fs::path root = dir.path().toStdString();
        fs::create_directories(root / "models/Stable-diffusion");
        fs::create_directories(root / "models/embeddings/sub/deeper");
        fs::create_directories(root / "embeddings");
        fs::create_directories(root / "mine");
        const auto touch = [](const fs::path& p, const std::string& bytes) { std::ofstream(p) << bytes; };
        touch(root / "models/embeddings/b.safetensors", "x");
        touch(root / "models/embeddings/sub/deeper/a.PT", "x");
        touch(root / "models/embeddings/sub/notes.txt", "x");
        touch(root / "models/embeddings/empty.bin", "");
        touch(root / "embeddings/c.bin", "x");
        touch(root / "mine/b.pt", "x");
        RunConfig config;
        config.model = (root / "models/Stable-diffusion/m.safetensors").string();
        config.embeddingsDir = (root / "mine").string();
        const std::vector<std::string> folders = embeddingFolders(config, "");
        QCOMPARE(folders, (std::vector<std::string>{(root / "models/embeddings").string(),
                                                    (root / "embeddings").string(), (root / "mine").string()}));
        std::vector<std::string> names;
        for (const EmbeddingFileEntry& f : listEmbeddingFiles(folders)) names.push_back(f.name);
        QCOMPARE(names, (std::vector<std::string>{"b", "a", "c", "b"}));
    }

    // The identity: an embedding copied from the token table for "red fox" encodes exactly as
    // "red fox", in the prompt and the negative prompt, and is named in TI hashes; on either side of
    // a chunk boundary (where the words would straddle it, the embedding moves: BREAK says the same).
    void sd1EncodesLikeTheWords() {
        if (!fs::exists(kSd1 + "/text_encoder/config.json")) QSKIP("tests/data/sdpipeline is not there");
        const SdModel model = loadSdModel(kSd1);
        QTemporaryDir dir;
        const std::string folder = dir.path().toStdString();
        const std::string file = folder + "/tinyfox.safetensors";
        writeEmbedding(file, {{"emb_params", {8, tableRows(*model.textEncoder, *model.tokenizer, "red fox")}}});
        RunConfig with;
        with.model = kSd1;
        with.embeddingsDir = folder;
        with.prompt = "a (tinyfox:1.2) on grass";
        with.negativePrompt = "blurry, tinyfox";
        RunConfig plain = with;
        plain.embeddingsDir.clear();
        plain.prompt = "a (red fox:1.2) on grass";
        plain.negativePrompt = "blurry, red fox";
        const SdConditioning a = encodeSdPrompts(model, cpu_, with), b = encodeSdPrompts(model, cpu_, plain);
        QVERIFY(sameBits(a.cond, b.cond));
        QVERIFY(sameBits(a.uncond, b.uncond));
        const std::string hash = fileSha256(file).substr(0, 12);
        QCOMPARE(a.textualInversionHashes, "tinyfox: " + hash + ", tinyfox: " + hash);
        QVERIFY(b.textualInversionHashes.empty());
        // Different from the prompt without the words.
        plain.prompt = "a on grass";
        QVERIFY(!sameBits(a.cond, encodeSdPrompts(model, cpu_, plain).cond));

        with.prompt = words(74) + " tinyfox";
        plain.prompt = words(74) + " BREAK red fox";
        with.cfgScale = plain.cfgScale = 1.0;
        const SdConditioning moved = encodeSdPrompts(model, cpu_, with);
        QCOMPARE(moved.tokens, 2 * 77);
        QVERIFY(sameBits(moved.cond, encodeSdPrompts(model, cpu_, plain).cond));
        QCOMPARE(moved.textualInversionHashes, "tinyfox: " + hash);

        // Without --embeddings-dir: the models folder's embeddings/ (tests/data holds the pipeline's
        // folder, so tests/data/embeddings is searched, recursively).
        RunConfig models;
        models.model = kSd1;
        models.prompt = "a ti-embparams cat";
        const SdConditioning found = encodeSdPrompts(model, cpu_, models);
        QCOMPARE(found.textualInversionHashes,
                 "ti-embparams: " + fileSha256(kData + "/good/ti-embparams.safetensors").substr(0, 12));
    }

    // An embedding of another width, named in the prompt: refused before any encoding, naming the
    // embedding, its file, its width and the encoder's. Not named: not even read.
    void refusesAnotherWidth() {
        if (!fs::exists(kSd1 + "/text_encoder/config.json")) QSKIP("tests/data/sdpipeline is not there");
        const SdModel model = loadSdModel(kSd1);
        QTemporaryDir dir;
        const std::string folder = dir.path().toStdString();
        fs::copy_file(kData + "/bad/ti-wide.safetensors", folder + "/wide.safetensors");
        fs::copy_file(kData + "/bad/ti-huge.safetensors", folder + "/huge.safetensors");
        fs::copy_file(kData + "/bad/ti-evil.pt", folder + "/evil.pt");
        RunConfig config;
        config.model = kSd1;
        config.embeddingsDir = folder;
        config.prompt = "a cat";
        QVERIFY(!encodeSdPrompts(model, cpu_, config).cond.empty());
        config.prompt = "a wide cat";
        const std::string wide = errorOf([&] { encodeSdPrompts(model, cpu_, config); });
        EXPECT_MESSAGE(wide, "[prompt]");
        EXPECT_MESSAGE(wide, "'wide' (" + folder + "/wide.safetensors) holds vectors of width 1024");
        EXPECT_MESSAGE(wide, "takes 8");
        config.prompt = "a cat";
        config.negativePrompt = "huge";
        EXPECT_MESSAGE(errorOf([&] { encodeSdPrompts(model, cpu_, config); }), "holds 76 vectors");
        config.negativePrompt = "evil";
        EXPECT_MESSAGE(errorOf([&] { encodeSdPrompts(model, cpu_, config); }), folder + "/evil.pt");
        // An SDXL embedding on SD 1.x.
        fs::copy_file(kData + "/good/ti-sdxl.safetensors", folder + "/sdxl.safetensors");
        config.negativePrompt = "sdxl";
        EXPECT_MESSAGE(errorOf([&] { encodeSdPrompts(model, cpu_, config); }), "SDXL's clip_l and clip_g vectors");
    }

    // SDXL: clip_l for the first encoder, clip_g for the second (and its pooled text); TI hashes
    // once per encoder, negative prompt last.
    void sdxlEncodesLikeTheWords() {
        if (!fs::exists(kSdxl + "/model_index.json")) QSKIP("tests/data/sdxlpipeline is not there");
        const SdModel model = loadSdModel(kSdxl);
        QTemporaryDir dir;
        const std::string folder = dir.path().toStdString();
        writeEmbedding(folder + "/tinyfox.safetensors",
                       {{"clip_l", {2, tableRows(*model.textEncoder, *model.tokenizer, "red fox")}},
                        {"clip_g", {4, tableRows(*model.textEncoder2, *model.tokenizer2, "red fox")}}});
        writeEmbedding(folder + "/sd1only.safetensors", {{"emb_params", {768, std::vector<float>(768, 0.0f)}}});
        RunConfig with;
        with.model = kSdxl;
        with.embeddingsDir = folder;
        with.prompt = "tinyfox in snow";
        with.negativePrompt = "ugly";
        RunConfig plain = with;
        plain.embeddingsDir.clear();
        plain.prompt = "red fox in snow";
        const SdConditioning a = encodeSdPrompts(model, cpu_, with), b = encodeSdPrompts(model, cpu_, plain);
        QVERIFY(sameBits(a.cond, b.cond));
        QVERIFY(sameBits(a.pooledCond, b.pooledCond));
        QVERIFY(sameBits(a.uncond, b.uncond));
        const std::string hash = fileSha256(folder + "/tinyfox.safetensors").substr(0, 12);
        QCOMPARE(a.textualInversionHashes, "tinyfox: " + hash + ", tinyfox: " + hash);
        with.prompt = "sd1only";
        EXPECT_MESSAGE(errorOf([&] { encodeSdPrompts(model, cpu_, with); }), "the clip_l text encoder");
    }

    // Against transformers' CLIPTextModel with the vectors put in by a hook on its token embedding, as
    // A1111's EmbeddingsWithFixes does (tests/data/embeddings/reference, made on a machine with
    // transformers by the reference script beside the fixture generator's output): the chunks, where
    // each embedding went, the token count and the conditioning.
    void matchesTransformers() {
        const std::string dir = kData + "/reference";
        if (!fs::exists(dir + "/reference.json")) QSKIP("tests/data/embeddings/reference is not there");
        if (!fs::exists(kSd1 + "/text_encoder/config.json")) QSKIP("tests/data/sdpipeline is not there");
        const SdModel model = loadSdModel(kSd1);
        // The reference names them by the names their copies there have.
        TextualInversion embparams = readTextualInversion(kData + "/good/ti-embparams.safetensors"),
                         a1111 = readTextualInversion(kData + "/good/ti-a1111.pt");
        embparams.name = "embparams";
        a1111.name = "a1111";
        const EmbeddingDatabase db(*model.tokenizer, {embparams, a1111});
        const SafetensorsFile reference(dir + "/reference.safetensors");
        const nlohmann::json cases = readBoundedJson(dir + "/reference.json", "test");  // outlives the loop
        for (const auto& c : cases.at("cases")) {
            const std::string name = c.at("name");
            PromptConditioningOptions options;
            options.clipSkip = c.at("clip_skip");
            options.chunking.embeddings = &db;
            const PromptChunks chunks =
                chunkPrompt(*model.tokenizer, c.at("prompt").get<std::string>(), options.chunking);
            QCOMPARE(chunks.tokenCount, c.at("token_count").get<int>());
            QCOMPARE(chunks.chunks.size(), c.at("ids").size());
            for (std::size_t i = 0; i < chunks.chunks.size(); ++i) {
                const auto& ids = chunks.chunks[i].ids;
                QCOMPARE(std::vector<std::int32_t>(ids.begin(), ids.end()),
                         c.at("ids")[i].get<std::vector<std::int32_t>>());
                std::vector<std::pair<int, std::string>> fixes;
                for (const PromptChunkFix& f : chunks.chunks[i].fixes)
                    fixes.emplace_back(f.offset, db.embeddings()[f.embedding].name);
                QCOMPARE(fixes, (c.at("fixes")[i].get<std::vector<std::pair<int, std::string>>>()));
            }
            const EmbeddedPromptConditioning got = encodeEachPromptWithEmbeddings(
                *model.textEncoder, cpu_, *model.tokenizer, {c.at("prompt").get<std::string>()}, options, "");
            const std::vector<float> want = reference.readFloat32(name);
            const std::vector<float>& values = got.texts.front().values;
            QCOMPARE(values.size(), want.size());
            double diff = 0, scale = 0;
            for (std::size_t i = 0; i < want.size(); ++i) {
                diff = std::max(diff, std::abs(double(values[i]) - want[i]));
                scale = std::max(scale, std::abs(double(want[i])));
            }
            QVERIFY2(diff <= 1e-5 * scale,
                     (name + ": max |diff| " + std::to_string(diff) + " of " + std::to_string(scale)).c_str());
        }
    }

    // The graph from input embeddings runs the same ops as the encoder's own.
    void graphFromEmbeddings() {
        if (!fs::exists(kSd1 + "/text_encoder/config.json")) QSKIP("tests/data/sdpipeline is not there");
        const SdModel model = loadSdModel(kSd1);
        const ClipTextConfig& config = model.textEncoder->config();
        const ModelGraph own = buildClipTextGraph(config, config.numHiddenLayers);
        const ModelGraph graph = buildClipTextGraphFromEmbeddings(config, config.numHiddenLayers);
        QCOMPARE(graph.inputs().size(), std::size_t(2));
        QCOMPARE(graph.value(graph.inputs()[0]).name, std::string("input_ids"));
        QCOMPARE(graph.value(graph.inputs()[1]).name, std::string("hidden_states.0"));
        QCOMPARE(graph.ops().size(), own.ops().size() - 1);
        QCOMPARE(graph.params().size(), own.params().size() - 2);
        QCOMPARE(graph.outputs().size(), own.outputs().size());
    }
};

QTEST_GUILESS_MAIN(TestEmbeddings)
#include "tst_embeddings.moc"
