#include "core/text/ClipTokenizer.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <utility>

#include <zlib.h>

#include "core/base/BoundedInput.h"
#include "core/base/UnicodeText.h"
#include "core/base/ValidationError.h"

namespace tessera {

namespace {

constexpr std::string_view kBos = "<|startoftext|>";
constexpr std::string_view kEos = "<|endoftext|>";
constexpr std::string_view kEndOfWord = "</w>";
constexpr std::string_view kField = "tokenizer";

// Pieces at most this long (bytes) are cached; the cache is emptied when it holds this many.
constexpr std::size_t kCachedPieceBytes = 64;
constexpr std::size_t kCacheEntries = std::size_t{1} << 16;

// bytes_to_unicode (openai CLIP simple_tokenizer.py, transformers tokenization_clip.py): the table
// order of the 256 byte values (kept bytes in their three ranges, then the rest ascending) and the
// code point each byte stands for.
struct ByteTable {
    std::array<unsigned char, 256> order{};
    std::array<char32_t, 256> symbol{};
};

const ByteTable& byteTable() {
    static const ByteTable table = [] {
        ByteTable t;
        const auto kept = [](unsigned b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; };
        std::size_t n = 0;
        for (unsigned b = 0; b < 256; ++b) {
            if (kept(b)) {
                t.order[n++] = static_cast<unsigned char>(b);
                t.symbol[b] = b;
            }
        }
        unsigned extra = 0;
        for (unsigned b = 0; b < 256; ++b) {
            if (!kept(b)) {
                t.order[n++] = static_cast<unsigned char>(b);
                t.symbol[b] = 256 + extra++;
            }
        }
        return t;
    }();
    return table;
}

std::string symbolUtf8(unsigned char byte) {
    std::string s;
    unicode::appendUtf8(s, byteTable().symbol[byte]);
    return s;
}

[[noreturn]] void fail(const std::filesystem::path& file, const std::string& what) {
    throw InputFileError(std::string(kField), "tokenizer file '" + toValidUtf8(file.string()) + "': " + what);
}

std::string gunzip(const std::string& packed, const std::filesystem::path& file) {
    z_stream z{};
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) fail(file, "zlib could not start");
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(packed.data()));
    z.avail_in = static_cast<uInt>(packed.size());
    std::string out;
    int rc = Z_OK;
    while (rc != Z_STREAM_END) {
        if (out.size() >= clip_limits::kUnpackedBytes) {
            inflateEnd(&z);
            fail(file, "unpacks to more than " + std::to_string(clip_limits::kUnpackedBytes) +
                           " bytes; a CLIP merges file is about 3.2 MB");
        }
        const std::size_t at = out.size();
        const std::size_t step = std::min<std::size_t>(1u << 20, clip_limits::kUnpackedBytes - at);
        out.resize(at + step);
        z.next_out = reinterpret_cast<Bytef*>(out.data() + at);
        z.avail_out = static_cast<uInt>(step);
        rc = inflate(&z, Z_NO_FLUSH);
        out.resize(at + step - z.avail_out);
        if (rc != Z_OK && rc != Z_STREAM_END) {
            const std::string why = z.msg != nullptr ? z.msg : "truncated or not gzip";
            inflateEnd(&z);
            fail(file, "is not a readable gzip file (" + why + ")");
        }
    }
    inflateEnd(&z);
    return out;
}

// Python's str.isspace() on one byte (the merges files' symbols never hold non-ASCII spaces:
// bytes_to_unicode maps every whitespace byte elsewhere).
bool isSpaceByte(char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1C && c <= 0x1F); }

// Python's str.split() on one line: the whitespace-separated fields.
std::vector<std::string_view> splitFields(std::string_view line) {
    std::vector<std::string_view> fields;
    std::size_t i = 0;
    const auto space = isSpaceByte;
    while (i < line.size()) {
        while (i < line.size() && space(line[i])) ++i;
        const std::size_t start = i;
        while (i < line.size() && !space(line[i])) ++i;
        if (i > start) fields.push_back(line.substr(start, i - start));
    }
    return fields;
}

// Lines [1, 1 + kMerges) of `text` split on '\n' (the first is the "#version" header), each two
// symbols (openai CLIP simple_tokenizer.py SimpleTokenizer.__init__). Lines beyond are ignored, as
// openai's and transformers' tokenizers ignore them.
std::vector<std::pair<std::string, std::string>> parseMerges(std::string_view text, const std::filesystem::path& file) {
    if (!isValidUtf8(text)) fail(file, "is not valid UTF-8");
    std::vector<std::pair<std::string, std::string>> merges;
    std::size_t lineNo = 0, pos = 0;
    while (pos <= text.size() && merges.size() < clip_limits::kMerges) {
        const std::size_t end = std::min(text.find('\n', pos), text.size());
        const std::string_view line = text.substr(pos, end - pos);
        pos = end + 1;
        if (lineNo++ == 0) continue;
        if (end == text.size() && line.empty()) break;  // the file's final newline
        const auto fields = splitFields(line);
        if (fields.size() != 2)
            fail(file,
                 "line " + std::to_string(lineNo) + " is not two symbols separated by a space: " + inQuotes(line));
        merges.emplace_back(std::string(fields[0]), std::string(fields[1]));
    }
    if (merges.empty()) fail(file, "holds no merges after its header line");
    return merges;
}

}  // namespace

struct ClipTokenizer::Vocabulary {
    std::unordered_map<std::string, std::int32_t> ids;  // byte-level spelling -> id
    std::vector<std::string> tokens;                    // id -> spelling ("" where none)
    std::array<std::int32_t, 256> byteId{};             // one byte's symbol
    std::array<std::int32_t, 256> byteEndId{};          // the same followed by "</w>"
    // (left id << 32 | right id) -> (rank << 32 | merged id); a pair listed twice keeps its
    // last rank, as Python's dict(zip(merges, range(n))) does.
    std::unordered_map<std::uint64_t, std::uint64_t> merges;
    std::int32_t bos = 0, eos = 0;

    std::int32_t require(const std::string& token, const std::filesystem::path& file) const {
        const auto it = ids.find(token);
        if (it == ids.end()) fail(file, "the vocabulary has no entry " + inQuotes(token));
        return it->second;
    }

    // Fills everything but `ids`/`tokens` from them and the merge list.
    void link(const std::vector<std::pair<std::string, std::string>>& mergeList, const std::filesystem::path& file) {
        for (unsigned b = 0; b < 256; ++b) {
            const std::string s = symbolUtf8(static_cast<unsigned char>(b));
            byteId[b] = require(s, file);
            byteEndId[b] = require(s + std::string(kEndOfWord), file);
        }
        merges.reserve(mergeList.size());
        for (std::size_t rank = 0; rank < mergeList.size(); ++rank) {
            const auto& [a, b] = mergeList[rank];
            const auto left = static_cast<std::uint32_t>(require(a, file));
            const auto right = static_cast<std::uint32_t>(require(b, file));
            const auto merged = static_cast<std::uint32_t>(require(a + b, file));
            merges[(std::uint64_t{left} << 32) | right] = (std::uint64_t{rank} << 32) | merged;
        }
        bos = require(std::string(kBos), file);
        eos = require(std::string(kEos), file);
    }

    void add(std::string token, std::int32_t id) {
        if (static_cast<std::size_t>(id) >= tokens.size()) tokens.resize(static_cast<std::size_t>(id) + 1);
        tokens[static_cast<std::size_t>(id)] = token;
        ids[std::move(token)] = id;  // a repeated spelling keeps its last id (Python dict)
    }
};

struct ClipTokenizer::Cache {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<std::int32_t>> pieces;
};

std::string_view toString(ClipTextFlavour f) {
    return f == ClipTextFlavour::Tokenizers ? "tokenizers" : "python-basic";
}

ClipTextFlavour parseClipTextFlavour(std::string_view name, std::string_view field) {
    if (name == "tokenizers") return ClipTextFlavour::Tokenizers;
    if (name == "python-basic") return ClipTextFlavour::PythonBasic;
    throw ValidationError(std::string(field),
                          std::string(field) + ": " + inQuotes(name) + " is not one of tokenizers, python-basic");
}

ClipTokenizer::ClipTokenizer(std::shared_ptr<const Vocabulary> vocabulary, ClipTokenizerOptions options)
    : vocab_(std::move(vocabulary)), options_(std::move(options)), cache_(std::make_unique<Cache>()) {
    const auto it = vocab_->ids.find(options_.padToken);
    if (it == vocab_->ids.end())
        throw InputFileError(std::string(kField), "pad token " + inQuotes(options_.padToken) +
                                                      " is not in the vocabulary (SD uses <|endoftext|> or !)");
    padId_ = it->second;
}

ClipTokenizer::ClipTokenizer(ClipTokenizer&&) noexcept = default;
ClipTokenizer& ClipTokenizer::operator=(ClipTokenizer&&) noexcept = default;
ClipTokenizer::~ClipTokenizer() = default;

ClipTokenizer ClipTokenizer::fromMergesGz(const std::filesystem::path& gzFile, ClipTokenizerOptions options) {
    const std::string text = gunzip(readBoundedFile(gzFile, kField, clip_limits::kGzBytes), gzFile);
    const auto mergeList = parseMerges(text, gzFile);
    auto v = std::make_shared<Vocabulary>();
    // As SimpleTokenizer.__init__ builds it: the 256 symbols in table order, the same with "</w>",
    // one entry per merge, then BOS and EOS.
    std::vector<std::string> spellings;
    spellings.reserve(512 + mergeList.size() + 2);
    for (unsigned char b : byteTable().order) spellings.push_back(symbolUtf8(b));
    for (std::size_t i = 0; i < 256; ++i) spellings.push_back(spellings[i] + std::string(kEndOfWord));
    for (const auto& [a, b] : mergeList) spellings.push_back(a + b);
    spellings.emplace_back(kBos);
    spellings.emplace_back(kEos);
    v->ids.reserve(spellings.size());
    for (std::size_t id = 0; id < spellings.size(); ++id)
        v->add(std::move(spellings[id]), static_cast<std::int32_t>(id));
    v->link(mergeList, gzFile);
    return ClipTokenizer(std::move(v), std::move(options));
}

namespace {

// The pad token named by a transformers config file: a string or {"content": ...}.
std::optional<std::string> padTokenIn(const std::filesystem::path& file) {
    std::error_code ec;
    if (!std::filesystem::exists(file, ec)) return std::nullopt;
    const nlohmann::json j = readBoundedJson(file, kField);
    if (!j.is_object() || !j.contains("pad_token")) return std::nullopt;
    const auto& p = j["pad_token"];
    if (p.is_string()) return p.get<std::string>();
    if (p.is_object() && p.contains("content") && p["content"].is_string()) return p["content"].get<std::string>();
    if (p.is_null()) return std::nullopt;
    fail(file, "pad_token is neither a string nor an object with a string 'content'");
}

}  // namespace

ClipTokenizer ClipTokenizer::fromDiffusersFolder(const std::filesystem::path& folder, ClipTextFlavour flavour) {
    const auto vocabFile = folder / "vocab.json";
    const auto mergesFile = folder / "merges.txt";
    const nlohmann::json vocabJson = readBoundedJson(vocabFile, kField, clip_limits::kVocabJsonBytes);
    if (!vocabJson.is_object() || vocabJson.empty()) fail(vocabFile, "is not a JSON object of token -> id");
    auto v = std::make_shared<Vocabulary>();
    v->ids.reserve(vocabJson.size());
    for (const auto& [token, id] : vocabJson.items()) {
        if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() >= (1 << 20))
            fail(vocabFile, "the id of " + inQuotes(token) + " is not an integer in [0, 1048576)");
        v->add(token, static_cast<std::int32_t>(id.get<std::int64_t>()));
    }
    // transformers reads merges.txt as read().strip().split("\n")[1:48895].
    const std::string mergesText = readBoundedFile(mergesFile, kField, clip_limits::kVocabJsonBytes);
    std::string_view stripped = mergesText;
    while (!stripped.empty() && isSpaceByte(stripped.front())) stripped.remove_prefix(1);
    while (!stripped.empty() && isSpaceByte(stripped.back())) stripped.remove_suffix(1);
    v->link(parseMerges(stripped, mergesFile), mergesFile);

    ClipTokenizerOptions options;
    options.flavour = flavour;
    if (auto pad = padTokenIn(folder / "special_tokens_map.json")) {
        options.padToken = *pad;
    } else if (auto pad2 = padTokenIn(folder / "tokenizer_config.json")) {
        options.padToken = *pad2;
    }
    return ClipTokenizer(std::move(v), std::move(options));
}

std::int32_t ClipTokenizer::bosId() const { return vocab_->bos; }
std::int32_t ClipTokenizer::eosId() const { return vocab_->eos; }
std::int32_t ClipTokenizer::padId() const { return padId_; }
std::size_t ClipTokenizer::vocabSize() const { return vocab_->tokens.size(); }
const ClipTokenizerOptions& ClipTokenizer::options() const { return options_; }

std::optional<std::int32_t> ClipTokenizer::idOf(std::string_view token) const {
    const auto it = vocab_->ids.find(std::string(token));
    if (it == vocab_->ids.end()) return std::nullopt;
    return it->second;
}

std::string ClipTokenizer::tokenString(std::int32_t id) const {
    if (id < 0 || static_cast<std::size_t>(id) >= vocab_->tokens.size()) return {};
    return vocab_->tokens[static_cast<std::size_t>(id)];
}

std::string ClipTokenizer::tokenText(std::int32_t id) const {
    std::string spelling = tokenString(id);
    if (id == vocab_->bos || id == vocab_->eos) return spelling;
    bool endOfWord = spelling.size() >= kEndOfWord.size() &&
                     std::string_view(spelling).substr(spelling.size() - kEndOfWord.size()) == kEndOfWord;
    if (endOfWord) spelling.resize(spelling.size() - kEndOfWord.size());
    std::array<int, 512> byteOf{};
    byteOf.fill(-1);
    for (unsigned b = 0; b < 256; ++b) byteOf[byteTable().symbol[b]] = static_cast<int>(b);
    std::string bytes;
    for (char32_t c : unicode::decodeUtf8(spelling)) {
        if (c < byteOf.size() && byteOf[c] >= 0) bytes.push_back(static_cast<char>(byteOf[c]));
    }
    if (endOfWord) bytes.push_back(' ');
    return toValidUtf8(bytes);
}

std::array<std::int32_t, clip_limits::kContextLength> ClipTokenizer::frame(
    std::span<const std::int32_t> content) const {
    std::array<std::int32_t, clip_limits::kContextLength> row{};
    row.fill(padId_);
    row[0] = vocab_->bos;
    const std::size_t n = std::min<std::size_t>(content.size(), clip_limits::kChunkTokens);
    std::copy_n(content.begin(), n, row.begin() + 1);
    row[n + 1] = vocab_->eos;
    return row;
}

std::vector<std::int32_t> ClipTokenizer::encode(std::string_view utf8) const {
    if (utf8.size() > clip_limits::kMaxTextBytes)
        throw ValidationError("prompt", "prompt: " + std::to_string(utf8.size()) + " bytes of text; at most " +
                                            std::to_string(clip_limits::kMaxTextBytes) + " are allowed");
    return encode(unicode::decodeUtf8(utf8));
}

std::vector<std::int32_t> ClipTokenizer::encode(std::u32string_view text) const {
    if (text.size() > clip_limits::kMaxTextBytes)
        throw ValidationError("prompt", "prompt: " + std::to_string(text.size()) + " characters of text; at most " +
                                            std::to_string(clip_limits::kMaxTextBytes) + " are allowed");
    // Added tokens are cut out of the raw text first and map straight to their ids: transformers'
    // trie (4.x) and AddedVocabulary (5.x) both match them exactly.
    struct Added {
        std::u32string text;
        std::int32_t id;
    };
    std::vector<Added> added = {{unicode::decodeUtf8(kBos), vocab_->bos}, {unicode::decodeUtf8(kEos), vocab_->eos}};
    if (options_.splitPadToken && padId_ != vocab_->bos && padId_ != vocab_->eos && !options_.padToken.empty())
        added.push_back({unicode::decodeUtf8(options_.padToken), padId_});
    std::sort(added.begin(), added.end(), [](const Added& a, const Added& b) { return a.text.size() > b.text.size(); });

    std::vector<std::int32_t> out;
    std::size_t spanStart = 0;
    for (std::size_t i = 0; i < text.size();) {
        const Added* hit = nullptr;
        for (const Added& a : added) {
            if (text.compare(i, a.text.size(), a.text) == 0) {
                hit = &a;
                break;
            }
        }
        if (hit == nullptr) {
            ++i;
            continue;
        }
        encodeSpan(text.substr(spanStart, i - spanStart), out);
        out.push_back(hit->id);
        i += hit->text.size();
        spanStart = i;
    }
    encodeSpan(text.substr(spanStart), out);
    return out;
}

namespace {

bool isCjkIdeograph(char32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// The `tokenizers` normaliser of transformers 5 (its CLIPTokenizer sets NFC, Replace(\s+ -> " "),
// Lowercase). Unverified until tests/data/tokenizer/clip_ids.json exists: that Oniguruma's \s is
// the White_Space set used here, and that Lowercase maps code point by code point (no
// Final_Sigma), as Rust's char::to_lowercase does.
std::u32string normaliseTokenizers(std::u32string_view span) {
    const std::u32string composed = unicode::nfc(span);
    std::u32string out;
    out.reserve(composed.size());
    for (std::size_t i = 0; i < composed.size(); ++i) {
        if (unicode::isWhiteSpace(composed[i])) {
            while (i + 1 < composed.size() && unicode::isWhiteSpace(composed[i + 1])) ++i;
            out.push_back(U' ');
        } else {
            unicode::appendLowercase(out, composed[i]);
        }
    }
    return out;
}

// transformers 4's BasicTokenizer(do_lower_case, strip_accents=False, do_split_on_punc=False,
// tokenize_chinese_chars) followed by " ".join(...). "Control" is category C* as in the
// transformers sources read for this (tokenization_utils._is_control); some versions test Cc/Cf
// only: unverified which a given 4.x release has.
std::u32string normalisePythonBasic(std::u32string_view span) {
    std::u32string cleaned;
    cleaned.reserve(span.size());
    for (char32_t c : span) {
        const bool whitespace =
            c == U' ' || c == U'\t' || c == U'\n' || c == U'\r' || unicode::category(c) == unicode::Category::Zs;
        if (c == 0 || c == 0xFFFD || (!whitespace && unicode::isControlLike(c))) continue;  // _clean_text
        if (whitespace) {
            cleaned.push_back(U' ');
        } else if (isCjkIdeograph(c)) {  // _tokenize_chinese_chars
            cleaned.push_back(U' ');
            cleaned.push_back(c);
            cleaned.push_back(U' ');
        } else {
            cleaned.push_back(c);
        }
    }
    const std::u32string composed = unicode::nfc(cleaned);
    // whitespace_tokenize (str.split()) then " ".join: runs of Python whitespace -> one space.
    std::u32string joined;
    joined.reserve(composed.size());
    for (char32_t c : composed) {
        if (unicode::isPythonSpace(c)) {
            if (!joined.empty() && joined.back() != U' ') joined.push_back(U' ');
        } else {
            joined.push_back(c);
        }
    }
    if (!joined.empty() && joined.back() == U' ') joined.pop_back();
    // str.lower() per token; the same as lowering the joined text, since a space is neither
    // cased nor case-ignorable for the Final_Sigma rule.
    return unicode::lowercasePython(joined);
}

// Does `text` at `i` start with ASCII `literal`? With `ignoreCase` (the `regex` module's
// IGNORECASE on the already lowercased text), U+017F LONG S also matches 's' (its simple case
// fold); no other code point folds to a letter used in these patterns.
bool matchesAt(std::u32string_view text, std::size_t i, std::string_view literal, bool ignoreCase) {
    if (text.size() - i < literal.size()) return false;
    for (std::size_t k = 0; k < literal.size(); ++k) {
        const char32_t c = text[i + k];
        const char32_t want = static_cast<unsigned char>(literal[k]);
        if (c == want) continue;
        if (ignoreCase && want == U's' && c == 0x17F) continue;
        if (ignoreCase && want >= U'a' && want <= U'z' && c == want - 32) continue;
        return false;
    }
    return true;
}

// The CLIP split regex (SimpleTokenizer.pat) as find-all: calls emit(piece, isSpecialLiteral) for
// every match, left to right; whitespace between matches is dropped.
template <typename Emit>
void preTokenize(std::u32string_view text, bool ignoreCase, Emit&& emit) {
    static constexpr std::string_view kContractions[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"};
    std::size_t i = 0;
    while (i < text.size()) {
        const char32_t c = text[i];
        std::size_t len = 0;
        bool special = false;
        if (c == U'<') {
            for (std::string_view lit : {kBos, kEos}) {
                if (matchesAt(text, i, lit, ignoreCase)) {
                    len = lit.size();
                    special = true;
                    break;
                }
            }
        } else if (c == U'\'') {
            for (std::string_view con : kContractions) {
                if (matchesAt(text, i, con, ignoreCase)) {
                    len = con.size();
                    break;
                }
            }
        }
        if (len == 0) {
            if (unicode::isLetter(c)) {
                while (i + len < text.size() && unicode::isLetter(text[i + len])) ++len;
            } else if (unicode::isNumber(c)) {
                len = 1;
            } else if (unicode::isWhiteSpace(c)) {
                ++i;
                continue;
            } else {
                while (i + len < text.size() && !unicode::isWhiteSpace(text[i + len]) &&
                       !unicode::isLetter(text[i + len]) && !unicode::isNumber(text[i + len]))
                    ++len;
            }
        }
        emit(text.substr(i, len), special);
        i += len;
    }
}

}  // namespace

void ClipTokenizer::encodeSpan(std::u32string_view span, std::vector<std::int32_t>& out) const {
    if (span.empty()) return;
    if (options_.flavour == ClipTextFlavour::Tokenizers) {
        preTokenize(normaliseTokenizers(span), false, [&](std::u32string_view piece, bool special) {
            if (!special) {
                encodePiece(piece, out);
                return;
            }
            // The ByteLevel pre-tokenizer (use_regex defaults to true) then splits a
            // special-token literal with the GPT-2 regex into "<|", the word, "|>"; every other
            // CLIP piece is a single class of characters, which that regex leaves whole.
            encodePiece(piece.substr(0, 2), out);
            encodePiece(piece.substr(2, piece.size() - 4), out);
            encodePiece(piece.substr(piece.size() - 2), out);
        });
        return;
    }
    preTokenize(normalisePythonBasic(span), true, [&](std::u32string_view piece, bool special) {
        // transformers 4's bpe() cache holds the two literals, so they map to their ids; a
        // case-folded variant ("<|ſtartoftext|>") is not in the cache and goes through BPE.
        if (special && piece == unicode::decodeUtf8(kBos)) {
            out.push_back(vocab_->bos);
        } else if (special && piece == unicode::decodeUtf8(kEos)) {
            out.push_back(vocab_->eos);
        } else {
            encodePiece(piece, out);
        }
    });
}

void ClipTokenizer::encodePiece(std::u32string_view piece, std::vector<std::int32_t>& out) const {
    if (piece.empty()) return;
    const std::string bytes = unicode::encodeUtf8(piece);
    if (bytes.size() <= kCachedPieceBytes) {
        std::lock_guard lock(cache_->mutex);
        const auto it = cache_->pieces.find(bytes);
        if (it != cache_->pieces.end()) {
            out.insert(out.end(), it->second.begin(), it->second.end());
            return;
        }
    }
    const std::size_t first = out.size();
    bpe(bytes, out);
    if (bytes.size() <= kCachedPieceBytes) {
        std::lock_guard lock(cache_->mutex);
        if (cache_->pieces.size() >= kCacheEntries) cache_->pieces.clear();
        cache_->pieces.emplace(bytes,
                               std::vector<std::int32_t>(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()));
    }
}

void ClipTokenizer::bpe(std::string_view bytes, std::vector<std::int32_t>& out) const {
    const auto n = static_cast<std::int32_t>(bytes.size());
    if (n == 1) {
        out.push_back(vocab_->byteEndId[static_cast<unsigned char>(bytes[0])]);
        return;
    }
    // The word as a linked list of symbol ids; "</w>" rides on the last byte (SimpleTokenizer.bpe).
    struct Symbol {
        std::int32_t id, prev, next;
    };
    std::vector<Symbol> word(static_cast<std::size_t>(n));
    for (std::int32_t i = 0; i < n; ++i) {
        const auto b = static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
        word[static_cast<std::size_t>(i)] = {i + 1 == n ? vocab_->byteEndId[b] : vocab_->byteId[b], i - 1,
                                             i + 1 == n ? -1 : i + 1};
    }
    // Python's loop merges, in each round, every non-overlapping occurrence (left to right)
    // of the lowest-ranked pair present, then looks again. Here: a min-heap of (rank,
    // position) holds every adjacent pair that has a rank; one round pops all entries of the
    // lowest rank in position order, skipping stale ones, and pairs formed during the round
    // wait until it ends. Same merges, O(n log n) instead of O(n^2).
    using Entry = std::uint64_t;  // rank << 32 | left position: ordered by rank, then position
    std::vector<Entry> heap, formed;
    const auto rankAt = [&](std::int32_t pos, std::uint32_t& rank, std::int32_t& merged) {
        const Symbol& s = word[static_cast<std::size_t>(pos)];
        if (s.id < 0 || s.next < 0) return false;
        const auto key = (std::uint64_t{static_cast<std::uint32_t>(s.id)} << 32) |
                         static_cast<std::uint32_t>(word[static_cast<std::size_t>(s.next)].id);
        const auto it = vocab_->merges.find(key);
        if (it == vocab_->merges.end()) return false;
        rank = static_cast<std::uint32_t>(it->second >> 32);
        merged = static_cast<std::int32_t>(it->second & 0xFFFFFFFFu);
        return true;
    };
    const auto note = [&](std::vector<Entry>& into, std::int32_t pos) {
        std::uint32_t rank = 0;
        std::int32_t merged = 0;
        if (pos >= 0 && rankAt(pos, rank, merged))
            into.push_back((std::uint64_t{rank} << 32) | static_cast<std::uint32_t>(pos));
    };
    for (std::int32_t i = 0; i + 1 < n; ++i) note(heap, i);
    const auto later = std::greater<Entry>();
    std::make_heap(heap.begin(), heap.end(), later);
    while (!heap.empty()) {
        const std::uint64_t round = heap.front() >> 32;
        while (!heap.empty() && (heap.front() >> 32) == round) {
            std::pop_heap(heap.begin(), heap.end(), later);
            const auto pos = static_cast<std::int32_t>(heap.back() & 0xFFFFFFFFu);
            heap.pop_back();
            std::uint32_t rank = 0;
            std::int32_t merged = 0;
            if (!rankAt(pos, rank, merged) || rank != round) continue;  // stale
            Symbol& left = word[static_cast<std::size_t>(pos)];
            Symbol& right = word[static_cast<std::size_t>(left.next)];
            left.id = merged;
            right.id = -1;
            left.next = right.next;
            if (right.next >= 0) word[static_cast<std::size_t>(right.next)].prev = pos;
            note(formed, left.prev);
            note(formed, pos);
        }
        for (const Entry e : formed) {
            heap.push_back(e);
            std::push_heap(heap.begin(), heap.end(), later);
        }
        formed.clear();
    }
    for (std::int32_t i = 0; i >= 0; i = word[static_cast<std::size_t>(i)].next)
        out.push_back(word[static_cast<std::size_t>(i)].id);
}

}  // namespace tessera
