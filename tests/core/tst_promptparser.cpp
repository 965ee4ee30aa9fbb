// core/PromptParser (A1111 modules/prompt_parser.py, sd_hijack_clip.py): A1111's emphasis
// syntax, BREAK, 75-token chunks with comma backtracking and framing, the emphasis applied to
// encoder output, and hostile prompts. Expected weights are written as the same double products
// parse_prompt_attention makes, in the order it makes them (e.g. house in its docstring's example:
// 1.3, then 1.1 for the second bracket, then 1.1 for the one left open).
#include <QtTest/QtTest>

#include <ctime>
#include <functional>

#include "core/base/UnicodeText.h"
#include "core/run/RunConfig.h"
#include "core/text/ClipTokenizer.h"
#include "core/text/PromptParser.h"

using namespace tessera;
using Ids = std::vector<std::int32_t>;
using Segments = std::vector<PromptSegment>;

Q_DECLARE_METATYPE(Segments)

namespace {

const std::string kGz = TESSERA_SOURCE_DIR "/resources/clip/bpe_simple_vocab_16e6.txt.gz";
constexpr double kUp = 1.1;
constexpr double kDown = 1 / 1.1;

double threadCpuSeconds() {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

std::string errorOf(const std::function<void()>& f) {
    try {
        f();
    } catch (const ValidationError& e) {
        return "[" + e.field() + "] " + e.what();
    } catch (const std::exception& e) {
        return std::string("<wrong exception type> ") + e.what();
    }
    return "<no error>";
}

#define EXPECT_MESSAGE(message, part)                     \
    QVERIFY2((message).find(part) != std::string::npos,   \
             qPrintable(QStringLiteral("'%1' not in: %2") \
                            .arg(QString::fromStdString(std::string(part)), QString::fromStdString(message))))

QString show(const Segments& s) {
    QStringList out;
    for (const auto& p : s)
        out << QStringLiteral("['%1', %2]").arg(QString::fromStdString(p.text)).arg(p.weight, 0, 'g', 17);
    return out.join(", ");
}

std::string repeat(const std::string& s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += s;
    return out;
}

}  // namespace

class TestPromptParser : public QObject {
    Q_OBJECT

    std::optional<ClipTokenizer> sd1_, sd2_;
    std::int32_t cat_ = 0, dog_ = 0, comma_ = 0;

    // The one id of a single-token word.
    std::int32_t idOf(const char* word) const {
        const Ids ids = sd1_->encode(word);
        return ids.size() == 1 ? ids[0] : -1;
    }

private slots:
    void initTestCase() {
        sd1_.emplace(ClipTokenizer::fromMergesGz(kGz));
        ClipTokenizerOptions sd2;
        sd2.padToken = "!";
        sd2_.emplace(ClipTokenizer::fromMergesGz(kGz, sd2));
        cat_ = idOf("cat");
        dog_ = idOf("dog");
        comma_ = idOf(",");
        QCOMPARE(comma_, 267);
        QVERIFY(cat_ > 0 && dog_ > 0);
    }

    void emphasis_data() {
        QTest::addColumn<std::string>("prompt");
        QTest::addColumn<Segments>("expected");
        QTest::newRow("spec example") << std::string("a (((house:1.3)) [on] a (hill:0.5), sun, (((sky))).")
                                      << Segments{{"a ", 1.0},      {"house", 1.3 * kUp * kUp},
                                                  {" ", kUp},       {"on", kDown * kUp},
                                                  {" a ", kUp},     {"hill", 0.5 * kUp},
                                                  {", sun, ", kUp}, {"sky", kUp * kUp * kUp * kUp},
                                                  {".", kUp}};
        QTest::newRow("explicit weight") << std::string("(a:1.2)") << Segments{{"a", 1.2}};
        QTest::newRow("spaces around weight") << std::string("(a: 1.5 )") << Segments{{"a", 1.5}};
        QTest::newRow("negative weight") << std::string("x (a:-0.5)") << Segments{{"x ", 1.0}, {"a", -0.5}};
        QTest::newRow("arabic-indic digits") << std::string("(a:\xd9\xa1.\xd9\xa5)") << Segments{{"a", 1.5}};
        QTest::newRow("double round") << std::string("((a))") << Segments{{"a", kUp * kUp}};
        QTest::newRow("square") << std::string("[a]") << Segments{{"a", kDown}};
        QTest::newRow("double square") << std::string("[[a]]") << Segments{{"a", kDown * kDown}};
        QTest::newRow("round in square") << std::string("[(a)]") << Segments{{"a", kUp * kDown}};
        QTest::newRow("merged runs") << std::string("(unnecessary)(parens)") << Segments{{"unnecessaryparens", kUp}};
        QTest::newRow("unbalanced open") << std::string("(unbalanced") << Segments{{"unbalanced", kUp}};
        QTest::newRow("unbalanced square open") << std::string("a [b") << Segments{{"a ", 1.0}, {"b", kDown}};
        QTest::newRow("unmatched closers are text") << std::string("a) b] c") << Segments{{"a) b] c", 1.0}};
        QTest::newRow("two open, bottom first") << std::string("(a [b") << Segments{{"a ", kUp}, {"b", kUp * kDown}};
        QTest::newRow("escapes") << std::string("\\(literal\\]") << Segments{{"(literal]", 1.0}};
        QTest::newRow("escaped backslash") << std::string("a\\\\b") << Segments{{"a\\b", 1.0}};
        // A lone backslash is A1111's text[1:] of "\": nothing (parse_prompt_attention's
        // "appended as text" is that empty text).
        QTest::newRow("lone backslash") << std::string("a\\b") << Segments{{"ab", 1.0}};
        QTest::newRow("weight closer without open") << std::string("a:1.2) b") << Segments{{"a:1.2) b", 1.0}};
        QTest::newRow("colon without number") << std::string("(a:b)") << Segments{{"a:b", kUp}};
        QTest::newRow("weight never closed") << std::string("(a:1.2") << Segments{{"a:1.2", kUp}};
        QTest::newRow("empty") << std::string() << Segments{{"", 1.0}};
        QTest::newRow("only brackets") << std::string("(([[") << Segments{{"", 1.0}};
        QTest::newRow("BREAK") << std::string("a BREAK b") << Segments{{"a", 1.0}, {"BREAK", -1.0}, {"b", 1.0}};
        QTest::newRow("BREAK needs word boundaries")
            << std::string("aBREAK BREAKb _BREAK BREAK_") << Segments{{"aBREAK BREAKb _BREAK BREAK_", 1.0}};
        QTest::newRow("BREAK at punctuation")
            << std::string(",BREAK,") << Segments{{",", 1.0}, {"BREAK", -1.0}, {",", 1.0}};
        QTest::newRow("BREAK twice") << std::string("BREAK  BREAK")
                                     << Segments{{"", 1.0}, {"BREAK", -1.0}, {"", 1.0}, {"BREAK", -1.0}, {"", 1.0}};
        QTest::newRow("lower-case break is text") << std::string("a break b") << Segments{{"a break b", 1.0}};
        // A1111's quirk: inside brackets the marker's -1 is multiplied, so it becomes text.
        QTest::newRow("BREAK in brackets")
            << std::string("(a BREAK b)") << Segments{{"a", kUp}, {"BREAK", -1.0 * kUp}, {"b", kUp}};
        QTest::newRow("ill-formed UTF-8") << std::string("a\xff(b)") << Segments{{"a\xef\xbf\xbd", 1.0}, {"b", kUp}};
        QTest::newRow("NUL") << std::string("a\0(b)", 5) << Segments{{std::string("a\0", 2), 1.0}, {"b", kUp}};
    }
    void emphasis() {
        QFETCH(std::string, prompt);
        QFETCH(Segments, expected);
        const Segments got = parsePromptAttention(prompt);
        QVERIFY2(got == expected, qPrintable(QStringLiteral("got %1\nexpected %2").arg(show(got), show(expected))));
    }

    void badWeights() {
        std::string m = errorOf([] { parsePromptAttention("(a:1.2.3)"); });
        EXPECT_MESSAGE(m, "[prompt]");
        EXPECT_MESSAGE(m, "the emphasis weight in ':1.2.3)' is not a number");
        EXPECT_MESSAGE(errorOf([] { parsePromptAttention("(a:.)"); }), "is not a number");
        EXPECT_MESSAGE(errorOf([] { parsePromptAttention("(a:" + std::string(400, '9') + ")"); }),
                       "is too large; weights are applied in float32");
        const std::string big = std::string(300, '9');
        EXPECT_MESSAGE(errorOf([&] { parsePromptAttention("((a:" + big + "):" + big + ")"); }),
                       "is too large; weights are applied in float32");
        // Finite as a double, infinite as the float32 the encoder output is scaled by (fuzz
        // findings: a weight of -1.5e39, and 1.1 multiplied by a thousand nested brackets).
        EXPECT_MESSAGE(errorOf([] { parsePromptAttention("(dog:-1544444444444444444444444444444444444444)"); }),
                       "is too large; weights are applied in float32");
        EXPECT_MESSAGE(
            errorOf([] { parsePromptAttention("((a:1" + std::string(30, '0') + "):1" + std::string(30, '0') + ")"); }),
            "emphasis weights multiply to a value too large for float32");
        EXPECT_MESSAGE(errorOf([] { parsePromptAttention(std::string(1000, '(') + "a"); }),
                       "emphasis weights multiply to a value too large for float32");
        QCOMPARE(parsePromptAttention(std::string(900, '(') + "a").front().weight, std::pow(1.1, 900));
    }

    void chunks() {
        PromptChunks r = chunkPrompt(*sd1_, "");
        QCOMPARE(r.chunks.size(), std::size_t{1});
        QCOMPARE(r.tokenCount, 0);
        QCOMPARE(r.chunks[0].ids[0], 49406);
        QVERIFY(std::all_of(r.chunks[0].ids.begin() + 1, r.chunks[0].ids.end(), [](auto id) { return id == 49407; }));
        QVERIFY(std::all_of(r.chunks[0].weights.begin(), r.chunks[0].weights.end(), [](float w) { return w == 1.0f; }));

        r = chunkPrompt(*sd1_, "a photo of a (cat:1.5)");
        QCOMPARE(r.chunks.size(), std::size_t{1});
        QCOMPARE(r.tokenCount, 5);
        const PromptChunk& c = r.chunks[0];
        QCOMPARE(c.contentTokens, 5);
        const Ids content(c.contentIds().begin(), c.contentIds().end());
        QVERIFY(content == (Ids{320, 1125, 539, 320, 2368}));
        QCOMPARE(c.contentWeights()[4], 1.5f);
        QCOMPARE(c.contentWeights()[0], 1.0f);
        QCOMPARE(c.ids[6], 49407);
        QCOMPARE(r.segments.size(), std::size_t{2});

        // 75 tokens fit one chunk; the 76th opens a second.
        r = chunkPrompt(*sd1_, repeat("cat ", 75));
        QCOMPARE(r.chunks.size(), std::size_t{1});
        QCOMPARE(r.tokenCount, 75);
        QCOMPARE(r.chunks[0].ids[75], cat_);
        QCOMPARE(r.chunks[0].ids[76], 49407);
        r = chunkPrompt(*sd1_, repeat("cat ", 80));
        QCOMPARE(r.chunks.size(), std::size_t{2});
        QCOMPARE(r.tokenCount, 80);
        QCOMPARE(r.chunks[1].contentTokens, 5);
        QCOMPARE(r.chunks[1].ids[0], 49406);
        QCOMPARE(r.chunks[1].ids[5], cat_);
        QCOMPARE(r.chunks[1].ids[6], 49407);
    }

    void breaks() {
        PromptChunks r = chunkPrompt(*sd1_, "cat BREAK dog");
        QCOMPARE(r.chunks.size(), std::size_t{2});
        QCOMPARE(r.tokenCount, 76);  // A1111 counts a closed chunk as 75
        QCOMPARE(r.chunks[0].contentTokens, 1);
        QCOMPARE(r.chunks[0].ids[1], cat_);
        QCOMPARE(r.chunks[0].ids[2], 49407);
        QCOMPARE(r.chunks[1].ids[1], dog_);
        r = chunkPrompt(*sd1_, "BREAK dog");  // a leading BREAK closes an empty chunk
        QCOMPARE(r.chunks.size(), std::size_t{2});
        QCOMPARE(r.chunks[0].contentTokens, 0);
        r = chunkPrompt(*sd1_, "cat BREAK");  // a trailing one adds nothing
        QCOMPARE(r.chunks.size(), std::size_t{1});
        r = chunkPrompt(*sd1_, "(cat BREAK dog)");  // the bracketed marker is the word "break"
        QCOMPARE(r.chunks.size(), std::size_t{1});
        QCOMPARE(r.chunks[0].contentTokens, 3);
        QCOMPARE(r.chunks[0].ids[2], idOf("break"));
        QCOMPARE(r.chunks[0].weights[2], static_cast<float>(-1.0 * kUp));
        QCOMPARE(r.chunks[0].weights[1], static_cast<float>(kUp));
        PromptChunkOptions none;
        none.parseEmphasis = false;  // A1111 emphasis "None": brackets and BREAK are text
        r = chunkPrompt(*sd1_, "(cat) BREAK dog", none);
        QCOMPARE(r.chunks.size(), std::size_t{1});
        const Ids all = sd1_->encode("(cat) BREAK dog");
        QVERIFY(Ids(r.chunks[0].contentIds().begin(), r.chunks[0].contentIds().end()) == all);
        QVERIFY(std::all_of(r.chunks[0].weights.begin(), r.chunks[0].weights.end(), [](float w) { return w == 1.0f; }));
    }

    void commaBacktrack() {
        // 70 cats, a comma at index 70, 10 dogs: when the 76th token comes, the comma is 5 from
        // the end, so the 4 dogs after it move on.
        const std::string prompt = repeat("cat ", 70) + "," + repeat(" dog", 10);
        PromptChunks r = chunkPrompt(*sd1_, prompt);
        QCOMPARE(r.chunks.size(), std::size_t{2});
        QCOMPARE(r.chunks[0].contentTokens, 71);
        QCOMPARE(r.chunks[0].ids[71], comma_);
        QVERIFY(std::all_of(r.chunks[0].ids.begin() + 72, r.chunks[0].ids.end(), [](auto id) { return id == 49407; }));
        QCOMPARE(r.chunks[1].contentTokens, 10);
        QVERIFY(std::all_of(r.chunks[1].ids.begin() + 1, r.chunks[1].ids.begin() + 11,
                            [&](auto id) { return id == dog_; }));
        QCOMPARE(r.tokenCount, 85);
        PromptChunkOptions off;
        off.commaBacktrack = 0;
        r = chunkPrompt(*sd1_, prompt, off);
        QCOMPARE(r.chunks[0].contentTokens, 75);
        QCOMPARE(r.chunks[1].contentTokens, 6);
        // The bound is inclusive: a comma exactly 20 from the end moves the 19 tokens after it.
        r = chunkPrompt(*sd1_, repeat("cat ", 55) + "," + repeat(" dog", 30));
        QCOMPARE(r.chunks[0].contentTokens, 56);
        QCOMPARE(r.chunks[1].contentTokens, 30);
        r = chunkPrompt(*sd1_, repeat("cat ", 54) + "," + repeat(" dog", 30));
        QCOMPARE(r.chunks[0].contentTokens, 75);
        // A comma 25 from the end is beyond the default 20: a plain cut.
        r = chunkPrompt(*sd1_, repeat("cat ", 50) + "," + repeat(" dog", 40));
        QCOMPARE(r.chunks[0].contentTokens, 75);
        QCOMPARE(r.chunks[1].contentTokens, 16);
        // A comma arriving at a full chunk opens the next one and is forgotten there: even with
        // backtracking over the whole chunk, the chunk it opened is cut plainly.
        off.commaBacktrack = 75;
        r = chunkPrompt(*sd1_, repeat("cat ", 75) + "," + repeat(" dog", 75), off);
        QCOMPARE(r.chunks.size(), std::size_t{3});
        QCOMPARE(r.chunks[1].ids[1], comma_);
        QCOMPARE(r.chunks[1].contentTokens, 75);
        QCOMPARE(r.chunks[2].contentTokens, 1);
        // ... whereas a comma that arrived in a chunk with room is remembered.
        r = chunkPrompt(*sd1_, repeat("cat ", 74) + "," + repeat(" dog", 75), off);
        QCOMPARE(r.chunks[0].contentTokens, 75);
        QCOMPARE(r.chunks[1].contentTokens, 75);
        off.commaBacktrack = 76;
        EXPECT_MESSAGE(errorOf([&] { chunkPrompt(*sd1_, "x", off); }), "comma_padding_backtrack: 76 is outside 0..75");
    }

    void padIdAfterFirstEos() {
        PromptChunks r = chunkPrompt(*sd2_, "a photo");
        const auto& ids = r.chunks[0].ids;
        QCOMPARE(ids[0], 49406);
        QCOMPARE(ids[3], 49407);
        QVERIFY(std::all_of(ids.begin() + 4, ids.end(), [](auto id) { return id == 0; }));
        // A typed end-of-text is the first EOS: everything after it becomes padding (A1111
        // sd_hijack_open_clip.py).
        r = chunkPrompt(*sd2_, "cat <|endoftext|> dog");
        QCOMPARE(r.chunks[0].contentTokens, 3);
        QCOMPARE(r.chunks[0].ids[2], 49407);
        QCOMPARE(r.chunks[0].ids[3], 0);  // "dog" overwritten
        QCOMPARE(r.chunks[0].weights[3], 1.0f);
    }

    void applyingWeights() {
        std::vector<float> z = {1, 2, 3, 4};  // batch 1, 2 tokens, 2 channels
        const std::vector<float> m = {1, 2};
        std::vector<float> w = z;
        applyEmphasis(w, m, 1, 2, 2, EmphasisMode::NoNorm);
        QVERIFY(w == (std::vector<float>{1, 2, 6, 8}));
        w = z;
        applyEmphasis(w, m, 1, 2, 2, EmphasisMode::Ignore);
        QVERIFY(w == z);
        w = z;
        applyEmphasis(w, m, 1, 2, 2, EmphasisMode::Original);  // mean 2.5 -> 4.25, rescaled by 2.5/4.25
        const float k = static_cast<float>(2.5 / 4.25);
        QVERIFY(w == (std::vector<float>{1 * k, 2 * k, 6 * k, 8 * k}));
        QVERIFY(qAbs((w[0] + w[1] + w[2] + w[3]) / 4 - 2.5f) < 1e-6f);
        EXPECT_MESSAGE(errorOf([&] { applyEmphasis(w, m, 1, 3, 2, EmphasisMode::Original); }), "batch*tokens*channels");
    }

    // scanPromptSyntax (the prompt editor's highlighting): what each part is, as the parser reads it.
    void syntaxSpans() {
        using K = PromptSyntaxKind;
        const std::u32string prompt = U"a (b:1.5) [c] d) \\( e BREAK (f:1.2.3) (g";
        std::vector<std::pair<std::string, K>> got;
        for (const PromptSyntaxSpan& s : scanPromptSyntax(prompt))
            if (s.kind != K::Text)
                got.emplace_back(unicode::encodeUtf8(prompt.substr(s.begin, s.end - s.begin)), s.kind);
        const std::vector<std::pair<std::string, K>> expected = {
            {"(", K::Open},  {":1.5", K::Weight},      {")", K::Close},    {"[", K::Open},
            {"]", K::Close}, {")", K::Unbalanced},     {"\\(", K::Escape}, {"BREAK", K::Break},
            {"(", K::Open},  {":1.2.3", K::BadWeight}, {")", K::Close},    {"(", K::Unbalanced}};
        QCOMPARE(got.size(), expected.size());
        for (std::size_t i = 0; i < got.size(); ++i) {
            QCOMPARE(QString::fromStdString(got[i].first), QString::fromStdString(expected[i].first));
            QCOMPARE(static_cast<int>(got[i].second), static_cast<int>(expected[i].second));
        }
        // Text spans carry the parser's weights; parsePromptAttention refuses the bad weight.
        for (const PromptSyntaxSpan& s : scanPromptSyntax(prompt)) {
            if (s.kind != K::Text) continue;
            const std::u32string text = prompt.substr(s.begin, s.end - s.begin);
            if (text == U"b") QCOMPARE(s.weight, 1.5);
            if (text == U"c") QCOMPARE(s.weight, 1 / 1.1);
            if (text == U"g") QCOMPARE(s.weight, 1.1);
        }
        QVERIFY_THROWS_EXCEPTION(ValidationError, parsePromptAttention(unicode::encodeUtf8(prompt)));
        // Hostile nesting: spans within bounds, no weights past the multiplication limit, no throw.
        std::u32string nested;
        for (int i = 0; i < 300000; ++i) nested += U"(a";
        QElapsedTimer timer;
        timer.start();
        const auto spans = scanPromptSyntax(nested);
        QCOMPARE(spans.size(), std::size_t{300000});  // every "(" unbalanced, no Text spans
        QVERIFY2(timer.elapsed() < 5000, qPrintable(QString::number(timer.elapsed())));
    }

    // 1 MiB prompts of several shapes: each parsed and chunked, or refused, within bounds.
    void hostilePrompts() {
        const std::size_t n = prompt_limits::kMaxPromptBytes;
        struct Case {
            const char* name;
            std::string text;
            bool refused;
        };
        std::vector<Case> cases = {
            {"ordinary weighted words", repeat("(masterpiece:1.2), best quality, [blurry], ", static_cast<int>(n / 44)),
             false},
            {"open round brackets", std::string(n, '('), false},
            {"close brackets", std::string(n, ')'), false},
            {"escapes", repeat("\\(", static_cast<int>(n / 2)), false},
            {"60 open then escapes", std::string(60, '(') + repeat("\\(a", static_cast<int>(n / 3 - 30)), false},
            {"nested open with text", repeat("(a", static_cast<int>(n / 2)), true},
            {"alternating brackets", repeat("(a[", static_cast<int>(n / 3)), true},
            {"BREAKs", repeat("x BREAK ", static_cast<int>(n / 8)), false},
            {"colons and numbers", repeat(":1.5)", static_cast<int>(n / 5)), false},
        };
        for (const Case& c : cases) {
            QElapsedTimer timer;
            timer.start();
            const double cpu0 = threadCpuSeconds();
            std::string outcome;
            try {
                const PromptChunks r = chunkPrompt(*sd1_, c.text);
                outcome = std::to_string(r.chunks.size()) + " chunks";
                QVERIFY2(!c.refused, c.name);
            } catch (const ValidationError& e) {
                outcome = std::string("refused: ") + e.what();
                QVERIFY2(c.refused, e.what());
                EXPECT_MESSAGE(outcome, "brackets are nested too deeply");
            }
            const double cpu = threadCpuSeconds() - cpu0;
            qInfo("%-24s %7.0f ms CPU (%lld ms wall): %s", c.name, cpu * 1e3, static_cast<long long>(timer.elapsed()),
                  outcome.substr(0, 80).c_str());
            QVERIFY2(cpu < 5.0, c.name);
        }
        const std::string m = errorOf([&] { chunkPrompt(*sd1_, std::string(n + 1, 'a')); });
        EXPECT_MESSAGE(m, "[prompt]");
        EXPECT_MESSAGE(m, "1048577 bytes of text; at most 1048576 are allowed");
    }
};

QTEST_APPLESS_MAIN(TestPromptParser)
#include "tst_promptparser.moc"
