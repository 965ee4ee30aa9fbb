// `tessera-cli tokens` (app/cli/TokensCommand.h): one line per 75-token chunk with
// start and end ids and no padding, --weights, --model (a pipeline folder's tokenizer/, a
// single file's bundled vocabulary), bad input refused with exit 2 naming it, and — when
// tests/data/tokenizer/clip_ids.json exists — every fixture prompt's ids as transformers made them.
#include <QtTest/QtTest>

#include <QFile>
#include <QTemporaryDir>

#include <algorithm>
#include <sstream>

#include <nlohmann/json.hpp>

#include "app/cli/TokensCommand.h"
#include "core/base/BoundedInput.h"
#include "core/text/ClipTokenizer.h"
#include "core/text/PromptParser.h"
#include "tests/app/CliRun.h"
#include "tests/app/TokensRun.h"

using namespace tessera;
using tessera::testing::CliRun;
using tessera::testing::describe;
using tessera::testing::runCli;

namespace {

const std::string kGz = TESSERA_SOURCE_DIR "/resources/clip/bpe_simple_vocab_16e6.txt.gz";
const std::string kFixture = TESSERA_TEST_DATA "/tokenizer/clip_ids.json";

using Result = testing::TokensRun;
constexpr auto tokens = &testing::runTokens;

std::string show(const Result& r) {
    return "exit " + std::to_string(r.exitCode) + "\nstdout:\n" + excerpt(r.out, 600) + "\nstderr:\n" + r.err;
}

// "chunk N: ids" for BOS + `content` + EOS.
std::string chunkLine(int n, const std::vector<std::int32_t>& content, std::int32_t bos = 49406,
                      std::int32_t eos = 49407) {
    std::string line = "chunk " + std::to_string(n) + ": " + std::to_string(bos);
    for (auto id : content) line += " " + std::to_string(id);
    return line + " " + std::to_string(eos) + "\n";
}

void writeFile(const QString& path, const QByteArray& bytes) {
    QFile file(path);
    QVERIFY(file.open(QIODevice::WriteOnly | QIODevice::Truncate));
    QCOMPARE(file.write(bytes), static_cast<qint64>(bytes.size()));
}

#define EXPECT_OK(result, expected)                                                                              \
    do {                                                                                                         \
        const Result r_ = (result);                                                                              \
        QVERIFY2(r_.exitCode == 0 && r_.err.empty(), show(r_).c_str());                                          \
        QVERIFY2(r_.out == (expected), ("expected:\n" + std::string(expected) + "\ngot:\n" + show(r_)).c_str()); \
    } while (0)

// Exit 2, `part` (the field or file) in the message, nothing on stdout.
#define EXPECT_REFUSED(result, part)                                                                                   \
    do {                                                                                                               \
        const Result r_ = (result);                                                                                    \
        QVERIFY2(r_.exitCode == 2 && r_.out.empty(), show(r_).c_str());                                                \
        QVERIFY2(r_.err.find(part) != std::string::npos, ("'" + std::string(part) + "' not in\n" + show(r_)).c_str()); \
        QVERIFY2(r_.err.size() < 1200, show(r_).c_str());                                                              \
    } while (0)

}  // namespace

class TestTokens : public QObject {
    Q_OBJECT

private slots:
    // Worked examples of CLIP's framing (openai CLIP clip.py tokenize, transformers
    // CLIPTokenizer), as a user runs the program.
    void workedExamplesThroughTheProgram() {
        const CliRun r = runCli({QStringLiteral("tokens"), QStringLiteral("a photo of a cat")}, 60000);
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        QCOMPARE(r.out, QStringLiteral("chunk 1: 49406 320 1125 539 320 2368 49407\n"));
        const CliRun w = runCli({QStringLiteral("tokens"), QStringLiteral("--weights"),
                                 QStringLiteral("masterpiece, (best quality:1.3), [1girl]")},
                                60000);
        QVERIFY2(w.exitCode == 0, qPrintable(describe(w)));
        QCOMPARE(w.out, QStringLiteral("chunk 1: 49406 12066 267 949 3027 267 272 1611 49407\n"
                                       "weights 1: 1 1 1 1.3 1.3 1 0.90909094 0.90909094 1\n"));
        const CliRun help = runCli({QStringLiteral("--help")}, 60000);
        QVERIFY2(help.out.contains(QStringLiteral("tokens ")), qPrintable(describe(help)));
    }

    void emptyPromptIsOneChunk() { EXPECT_OK(tokens({""}), chunkLine(1, {})); }

    // 75 tokens per chunk; the 76th starts chunk 2; BREAK closes a chunk; no padding is shown.
    void chunksOf75AndBreak() {
        std::string hundred;
        for (int i = 0; i < 100; ++i) hundred += "a ";
        EXPECT_OK(tokens({hundred}),
                  chunkLine(1, std::vector<std::int32_t>(75, 320)) + chunkLine(2, std::vector<std::int32_t>(25, 320)));
        EXPECT_OK(tokens({"a cat BREAK a"}), chunkLine(1, {320, 2368}) + chunkLine(2, {320}));
        std::string seventyFive;
        for (int i = 0; i < 75; ++i) seventyFive += "a ";
        EXPECT_OK(tokens({seventyFive}), chunkLine(1, std::vector<std::int32_t>(75, 320)));
        // --weights: one weights line after each chunk line, start/end tokens weight 1.
        const Result r = tokens({"--weights", hundred + " (cat)"});
        QCOMPARE(r.exitCode, 0);
        std::istringstream lines(r.out);
        std::vector<std::string> got;
        for (std::string line; std::getline(lines, line);) got.push_back(line);
        QCOMPARE(got.size(), std::size_t{4});
        QVERIFY(got[1].rfind("weights 1: 1 1 ", 0) == 0);
        QVERIFY2(
            got[3] == "weights 2: 1 " +
                          [] {
                              std::string w;
                              for (int i = 0; i < 25; ++i) w += "1 ";
                              return w;
                          }() +
                          "1.1 1",
            got[3].c_str());
        QCOMPARE(got[2], chunkLine(2,
                                   [] {
                                       std::vector<std::int32_t> ids(25, 320);
                                       ids.push_back(2368);
                                       return ids;
                                   }())
                             .substr(0, got[2].size()));
    }

    // The same lines as chunkPrompt's chunks (comma backtracking included), shown unpadded.
    void matchesChunkPrompt() {
        const ClipTokenizer tok = ClipTokenizer::fromMergesGz(kGz);
        std::string prompt;
        for (int i = 0; i < 40; ++i) prompt += "red flower, (tall:1.2) tree, ";
        const PromptChunks chunks = chunkPrompt(tok, prompt);
        QVERIFY(chunks.chunks.size() >= 3);
        std::string expected;
        for (std::size_t n = 0; n < chunks.chunks.size(); ++n) {
            const auto content = chunks.chunks[n].contentIds();
            expected += chunkLine(static_cast<int>(n) + 1, std::vector<std::int32_t>(content.begin(), content.end()));
        }
        EXPECT_OK(tokens({prompt}), expected);
    }

    // --model: a pipeline folder's tokenizer/ is used (ids from its vocab.json); a single
    // .safetensors file has none and gets the bundled vocabulary; missing files are refused.
    void modelTokenizer() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const ClipTokenizer bundled = ClipTokenizer::fromMergesGz(kGz);
        // A small vocabulary: the 512 byte symbols shifted by 10, two merges, own BOS/EOS ids.
        nlohmann::json vocab = nlohmann::json::object();
        for (std::int32_t id = 0; id < 512; ++id) vocab[bundled.tokenString(id)] = id + 10;
        vocab["ca"] = 700;
        vocab["cat</w>"] = 701;
        vocab["<|startoftext|>"] = 800;
        vocab["<|endoftext|>"] = 801;
        const QString pipeline = dir.path() + "/pipeline";
        QVERIFY(QDir().mkpath(pipeline + "/tokenizer"));
        writeFile(pipeline + "/tokenizer/vocab.json", QByteArray::fromStdString(vocab.dump()));
        writeFile(pipeline + "/tokenizer/merges.txt", "#version: 0.2\nc a\nca t</w>\n");
        const std::int32_t b = *bundled.idOf("b</w>") + 10;
        EXPECT_OK(tokens({"cat cab", "--model", pipeline.toStdString()}), chunkLine(1, {701, 700, b}, 800, 801));
        // The tokenizer folder itself is accepted too.
        EXPECT_OK(tokens({"--model", (pipeline + "/tokenizer").toStdString(), "cat"}), chunkLine(1, {701}, 800, 801));
        // As the program: the same lines.
        const CliRun r =
            runCli({QStringLiteral("tokens"), QStringLiteral("cat cab"), QStringLiteral("--model"), pipeline});
        QVERIFY2(r.exitCode == 0, qPrintable(describe(r)));
        QCOMPARE(r.out.toStdString(), chunkLine(1, {701, 700, b}, 800, 801));

        // A single-file checkpoint: the bundled vocabulary (the file is not read).
        writeFile(dir.path() + "/model.safetensors", "not read");
        EXPECT_OK(tokens({"a cat", "--model", (dir.path() + "/model.safetensors").toStdString()}),
                  chunkLine(1, {320, 2368}));

        // Folder without tokenizer/, missing merges.txt, damaged vocab.json, a file of another kind.
        const QString empty = dir.path() + "/empty";
        QVERIFY(QDir().mkpath(empty));
        EXPECT_REFUSED(tokens({"cat", "--model", empty.toStdString()}), "model: ");
        EXPECT_REFUSED(tokens({"cat", "--model", empty.toStdString()}), "has no tokenizer/ folder");
        QVERIFY(QFile::remove(pipeline + "/tokenizer/merges.txt"));
        EXPECT_REFUSED(tokens({"cat", "--model", pipeline.toStdString()}), "merges.txt");
        writeFile(pipeline + "/tokenizer/merges.txt", "#version: 0.2\nc a\nca t</w>\n");
        writeFile(pipeline + "/tokenizer/vocab.json", "{\"a\": ");
        EXPECT_REFUSED(tokens({"cat", "--model", pipeline.toStdString()}), "vocab.json");
        writeFile(dir.path() + "/model.ckpt", "x");
        EXPECT_REFUSED(tokens({"cat", "--model", (dir.path() + "/model.ckpt").toStdString()}),
                       "neither a diffusers pipeline folder nor a .safetensors file");
        EXPECT_REFUSED(tokens({"cat", "--model", (dir.path() + "/absent").toStdString()}), "model: ");
        const CliRun bad = runCli({QStringLiteral("tokens"), QStringLiteral("cat"), QStringLiteral("--model"), empty});
        QVERIFY2(bad.exitCode == 2 && bad.err.contains(QStringLiteral("model: ")), qPrintable(describe(bad)));
    }

    void badInput() {
        EXPECT_REFUSED(tokens({"a \xff\xfe cat"}), "prompt: is not valid UTF-8");
        EXPECT_REFUSED(tokens({"a \xed\xa0\x80"}), "prompt: is not valid UTF-8");  // a surrogate
        EXPECT_REFUSED(tokens({}), "prompt: tokens needs a prompt");
        EXPECT_REFUSED(tokens({"a", "b"}), "prompt: tokens takes one prompt");
        EXPECT_REFUSED(tokens({"a", "--colour"}), "unknown option '--colour'");
        // "--" ends the options: a prompt that starts with "--" (else refused as an unknown option).
        EXPECT_REFUSED(tokens({"--a b"}), "unknown option '--a b'");
        EXPECT_OK(tokens({"--", "--a b"}), chunkLine(1, ClipTokenizer::fromMergesGz(kGz).encode("--a b")));
        EXPECT_REFUSED(tokens({"--", "a", "b"}), "prompt: tokens takes one prompt");
        EXPECT_REFUSED(tokens({"a", "--model"}), "--model needs a value");
        EXPECT_REFUSED(tokens({"(a:1.2.3)"}), "prompt");
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        // Through a file: the prompt's bound (1 MiB) and its encoding.
        const QString huge = dir.path() + "/huge.txt";
        writeFile(huge, QByteArray(static_cast<int>(prompt_limits::kMaxPromptBytes) + 1, 'a'));
        EXPECT_REFUSED(tokens({"--prompt-file", huge.toStdString()}), "prompt-file");
        const QString latin1 = dir.path() + "/latin1.txt";
        writeFile(latin1, "caf\xe9");
        EXPECT_REFUSED(tokens({"--prompt-file", latin1.toStdString()}), "prompt: is not valid UTF-8");
        EXPECT_REFUSED(tokens({"a", "--prompt-file", latin1.toStdString()}), "not both");
        const QString good = dir.path() + "/good.txt";
        writeFile(good, "a photo of a cat");
        EXPECT_OK(tokens({"--prompt-file", good.toStdString()}), chunkLine(1, {320, 1125, 539, 320, 2368}));
        const CliRun r = runCli({QStringLiteral("tokens"), QStringLiteral("--prompt-file"), huge});
        QVERIFY2(r.exitCode == 2 && r.err.contains(QStringLiteral("prompt-file")) && r.out.isEmpty(),
                 qPrintable(describe(r)));
    }

    // Every fixture prompt transformers tokenized (tools/reference/make_tokenizer_fixtures.py)
    // whose text holds no A1111 syntax: its ids in chunks of 75 (no comma there to backtrack to).
    // All through printTokenChunks with one tokenizer, every 25th through the whole command.
    void transformersFixture() {
        if (!QFile::exists(QString::fromStdString(kFixture)))
            QSKIP("tests/data/tokenizer/clip_ids.json is not there yet (tools/reference/make_tokenizer_fixtures.py)");
        const nlohmann::json doc = readBoundedJson(kFixture, "fixture");
        if (doc.at("flavour").get<std::string>() != "tokenizers")
            QSKIP("the fixture was made with another tokenizer flavour than the command uses");
        int checked = 0;
        const ClipTokenizer tok = ClipTokenizer::fromMergesGz(kGz);
        for (const auto& c : doc.at("cases")) {
            const std::string text = c.at("text").get<std::string>();
            const auto ids = c.at("sd1_ids").get<std::vector<std::int32_t>>();
            if (text.find_first_of("()[]\\:") != std::string::npos || text.find("BREAK") != std::string::npos ||
                std::find(ids.begin(), ids.end(), 267) != ids.end() || !isValidUtf8(text))
                continue;
            std::string expected;
            for (std::size_t i = 0, n = 1; i < ids.size() || n == 1; i += 75, ++n)
                expected += chunkLine(
                    static_cast<int>(n),
                    std::vector<std::int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(i),
                                              ids.begin() + static_cast<std::ptrdiff_t>(std::min(ids.size(), i + 75))));
            std::ostringstream out;
            printTokenChunks(tok, text, false, out);
            QVERIFY2(out.str() == expected,
                     (inQuotes(text) + "\nexpected:\n" + expected + "\ngot:\n" + out.str()).c_str());
            if (checked++ % 25 == 0) {
                const Result r = tokens({text});
                QVERIFY2(r.exitCode == 0 && r.out == expected, (inQuotes(text) + "\n" + show(r)).c_str());
            }
        }
        qInfo("%d fixture prompts checked", checked);
        QVERIFY(checked > 300);
    }
};

QTEST_GUILESS_MAIN(TestTokens)
#include "tst_tokens.moc"
