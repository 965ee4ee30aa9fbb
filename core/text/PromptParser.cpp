#include "core/text/PromptParser.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <stdexcept>

#include "core/base/BoundedInput.h"
#include "core/base/UnicodeText.h"
#include "core/base/ValidationError.h"
#include "core/text/EmbeddingDatabase.h"

namespace tessera {

namespace {

// Weights reach the text encoder's output as float32: a finite double beyond float's range
// (1e39, or 1.1 multiplied a thousand times) would become infinite there.
bool fitsFloat(double w) {
    return std::isfinite(w) && std::fabs(w) <= static_cast<double>(std::numeric_limits<float>::max());
}

constexpr double kRoundMultiplier = 1.1;
constexpr double kSquareMultiplier = 1 / 1.1;
constexpr std::u32string_view kBreak = U"BREAK";

[[noreturn]] void reject(const std::string& what) { throw ValidationError("prompt", "prompt: " + what); }

struct Segment {
    std::u32string text;
    double weight;
    std::size_t begin = 0;  // where it came from in the prompt (scanPromptSyntax), code points
};

bool isSpecial(char32_t c) { return c == U'\\' || c == U'(' || c == U')' || c == U'[' || c == U']' || c == U':'; }

// The length of A1111's weight closer `:\s*([+-]?[.\d]+)\s*\)` at `i` (0 if none) and its
// number's span.
std::size_t weightCloserAt(std::u32string_view t, std::size_t i, std::size_t& numStart, std::size_t& numEnd) {
    std::size_t j = i + 1;
    while (j < t.size() && unicode::isPythonSpace(t[j])) ++j;
    numStart = j;
    if (j < t.size() && (t[j] == U'+' || t[j] == U'-')) ++j;
    const std::size_t digits = j;
    while (j < t.size() && (t[j] == U'.' || unicode::decimalValue(t[j]) >= 0)) ++j;
    if (j == digits) return 0;
    numEnd = j;
    while (j < t.size() && unicode::isPythonSpace(t[j])) ++j;
    if (j >= t.size() || t[j] != U')') return 0;
    return j + 1 - i;
}

// Python's float() of a [+-]?[.\d]+ string: Unicode decimal digits count, at most one '.', at
// least one digit. Anything else is the ValueError A1111 would raise, reported here.
double parseWeight(std::u32string_view number, std::u32string_view closer) {
    std::string ascii;
    int dots = 0, digits = 0;
    for (char32_t c : number) {
        if (c == U'+' || c == U'-' || c == U'.') {
            dots += c == U'.';
            ascii.push_back(static_cast<char>(c));
        } else {
            ascii.push_back(static_cast<char>('0' + unicode::decimalValue(c)));
            ++digits;
        }
    }
    if (dots > 1 || digits == 0)
        reject("the emphasis weight in " + inQuotes(unicode::encodeUtf8(closer)) +
               " is not a number; write (text:1.2) with one decimal point");
    const double value = std::strtod(ascii.c_str(), nullptr);  // correctly rounded, as Python
    if (!fitsFloat(value))
        reject("the emphasis weight in " + inQuotes(unicode::encodeUtf8(closer)) +
               " is too large; weights are applied in float32, at most 3.4e38 in magnitude");
    return value;
}

// Python re.split(r"\s*\bBREAK\b\s*", text): the parts between matches.
std::vector<std::u32string_view> splitOnBreak(std::u32string_view t) {
    std::vector<std::u32string_view> parts;
    std::size_t partStart = 0, i = 0;
    while (i < t.size()) {
        const std::size_t k = t.find(kBreak, i);
        if (k == std::u32string_view::npos) break;
        const std::size_t end = k + kBreak.size();
        const bool boundaryBefore = k == 0 || !unicode::isPythonWordChar(t[k - 1]);
        const bool boundaryAfter = end == t.size() || !unicode::isPythonWordChar(t[end]);
        if (!boundaryBefore || !boundaryAfter) {
            i = k + 1;
            continue;
        }
        std::size_t start = k;  // the match begins at the whitespace run just before BREAK
        while (start > partStart && unicode::isPythonSpace(t[start - 1])) --start;
        std::size_t stop = end;
        while (stop < t.size() && unicode::isPythonSpace(t[stop])) ++stop;
        parts.push_back(t.substr(partStart, start - partStart));
        partStart = i = stop;
    }
    parts.push_back(t.substr(partStart));
    return parts;
}

class AttentionParser {
public:
    AttentionParser() = default;
    // Syntax mode (scanPromptSyntax): records what each part of the prompt is in *spans and
    // never throws; a weight that is not a number is marked and closes its bracket at 1.
    explicit AttentionParser(std::vector<PromptSyntaxSpan>* spans) : spans_(spans) {}

    std::vector<Segment> parse(std::u32string_view t) {
        for (std::size_t i = 0; i < t.size();) i += step(t, i);
        // Still-open brackets, bottom of each stack first (A1111's final loops).
        for (std::size_t start : round_) multiply(start, kRoundMultiplier);
        for (std::size_t start : square_) multiply(start, kSquareMultiplier);
        if (spans_) return std::move(res_);
        if (res_.empty()) res_.push_back({U"", 1.0});
        std::vector<Segment> merged;
        for (Segment& s : res_) {
            if (!fitsFloat(s.weight))
                reject("emphasis weights multiply to a value too large for float32 (above 3.4e38 in magnitude)");
            if (!merged.empty() && merged.back().weight == s.weight) {
                merged.back().text += s.text;
            } else {
                merged.push_back(std::move(s));
            }
        }
        return merged;
    }

private:
    // Consumes one match of A1111's token regex at `i`; returns its length.
    std::size_t step(std::u32string_view t, std::size_t i) {
        const char32_t c = t[i];
        if (c == U'\\') {
            const bool escaped = i + 1 < t.size() && (t[i + 1] == U'(' || t[i + 1] == U')' || t[i + 1] == U'[' ||
                                                      t[i + 1] == U']' || t[i + 1] == U'\\');
            // text[1:]: the escaped character, or "" for a lone backslash.
            res_.push_back({escaped ? std::u32string(1, t[i + 1]) : std::u32string(), 1.0, i + 1});
            mark(i, escaped ? 2 : 1, PromptSyntaxKind::Escape);
            return escaped ? 2 : 1;
        }
        if (c == U'(' || c == U'[') {
            (c == U'(' ? round_ : square_).push_back(res_.size());
            (c == U'(' ? roundAt_ : squareAt_).push_back(i);
            return 1;
        }
        if (c == U':') {
            std::size_t numStart = 0, numEnd = 0;
            const std::size_t len = weightCloserAt(t, i, numStart, numEnd);
            if (len != 0 && !round_.empty()) {
                const std::size_t start = closeBracket(round_, roundAt_, i + len - 1);
                const std::optional<double> w = weight(t.substr(numStart, numEnd - numStart), t.substr(i, len));
                mark(i, len - 1, w ? PromptSyntaxKind::Weight : PromptSyntaxKind::BadWeight);
                if (w) multiply(start, *w);
                return len;
            }
            addText(t, i, len != 0 ? len : 1);
            if (len != 0) mark(i + len - 1, 1, PromptSyntaxKind::Unbalanced);  // "word:1.2)" without its "("
            return len != 0 ? len : 1;
        }
        if (c == U')' && !round_.empty()) {
            multiply(closeBracket(round_, roundAt_, i), kRoundMultiplier);
            return 1;
        }
        if (c == U']' && !square_.empty()) {
            multiply(closeBracket(square_, squareAt_, i), kSquareMultiplier);
            return 1;
        }
        if (c == U')' || c == U']') {
            addText(t, i, 1);
            mark(i, 1, PromptSyntaxKind::Unbalanced);
            return 1;
        }
        std::size_t len = 1;
        while (i + len < t.size() && !isSpecial(t[i + len])) ++len;
        addText(t, i, len);
        return len;
    }

    void addText(std::u32string_view t, std::size_t at, std::size_t len) {
        const std::u32string_view text = t.substr(at, len);
        const auto parts = splitOnBreak(text);
        for (std::size_t k = 0; k < parts.size(); ++k) {
            const auto begin = static_cast<std::size_t>(parts[k].data() - t.data());
            // The marker between the parts: the last BREAK before this part (spaces around it dropped).
            if (k > 0) res_.push_back({std::u32string(kBreak), -1.0, t.substr(0, begin).rfind(kBreak)});
            res_.push_back({std::u32string(parts[k]), 1.0, begin});
        }
    }

    // A weight closer's number, or nullopt in syntax mode where parseWeight would throw.
    std::optional<double> weight(std::u32string_view number, std::u32string_view closer) {
        if (!spans_) return parseWeight(number, closer);
        try {
            return parseWeight(number, closer);
        } catch (const ValidationError&) {
            return std::nullopt;
        }
    }

    void mark(std::size_t begin, std::size_t length, PromptSyntaxKind kind) {
        if (spans_ && length > 0) spans_->push_back({begin, begin + length, kind, 1.0});
    }

    // A bracket closed at `close`: its opener and closer are marked as a pair. Returns where the
    // bracket's text starts in the result (`starts`' last entry, taken off with its opener).
    std::size_t closeBracket(std::vector<std::size_t>& starts, std::vector<std::size_t>& openers, std::size_t close) {
        const std::size_t start = starts.back();
        starts.pop_back();
        const std::size_t open = openers.back();
        openers.pop_back();
        mark(open, 1, PromptSyntaxKind::Open);
        mark(close, 1, PromptSyntaxKind::Close);
        return start;
    }

    void multiply(std::size_t start, double m) {
        work_ += res_.size() - start;
        if (work_ > prompt_limits::kMaxWeightMultiplications && spans_) {
            weightsKnown_ = false;  // syntax mode: the spans go on, the weights stop here
            return;
        }
        if (work_ > prompt_limits::kMaxWeightMultiplications)
            reject("emphasis brackets are nested too deeply for a prompt this long (more than " +
                   std::to_string(prompt_limits::kMaxWeightMultiplications) +
                   " weight multiplications); close brackets or escape them as \\( \\[");
        for (std::size_t p = start; p < res_.size(); ++p) res_[p].weight *= m;
    }

public:
    std::vector<Segment> res_;
    std::vector<std::size_t> round_, square_;
    std::vector<std::size_t> roundAt_, squareAt_;  // where the open brackets are, code points
    std::vector<PromptSyntaxSpan>* spans_ = nullptr;
    bool weightsKnown_ = true;
    std::uint64_t work_ = 0;
};

std::u32string decodePrompt(std::string_view prompt) {
    if (prompt.size() > prompt_limits::kMaxPromptBytes)
        reject(std::to_string(prompt.size()) + " bytes of text; at most " +
               std::to_string(prompt_limits::kMaxPromptBytes) + " are allowed");
    return unicode::decodeUtf8(prompt);
}

std::vector<Segment> parseSegments(std::u32string_view text) { return AttentionParser().parse(text); }

// A1111's chunk filling (tokenize_line's loop and next_chunk).
class ChunkBuilder {
public:
    ChunkBuilder(const ClipTokenizer& tokenizer, int commaBacktrack, const EmbeddingDatabase* embeddings)
        : tok_(tokenizer),
          backtrack_(commaBacktrack),
          comma_(tokenizer.idOf(",</w>").value_or(-1)),
          embeddings_(embeddings) {}

    void add(const std::vector<std::int32_t>& tokens, float weight) {
        for (std::size_t position = 0; position < tokens.size();) {
            const std::int32_t token = tokens[position];
            const int length = static_cast<int>(ids_.size());
            if (token == comma_) {
                lastComma_ = length;
            } else if (backtrack_ != 0 && length == clip_limits::kChunkTokens && lastComma_ != -1 &&
                       length - lastComma_ <= backtrack_) {
                const auto cut = static_cast<std::ptrdiff_t>(lastComma_ + 1);
                std::vector<std::int32_t> movedIds(ids_.begin() + cut, ids_.end());
                std::vector<float> movedWeights(weights_.begin() + cut, weights_.end());
                ids_.resize(static_cast<std::size_t>(cut));
                weights_.resize(static_cast<std::size_t>(cut));
                // A1111 moves the tokens but not an embedding's fix among them: the fix stays with
                // the chunk closed here (its vectors land on that chunk's padding), and the moved
                // slots keep id 0. Kept so, for the same conditioning.
                close(false);
                ids_ = std::move(movedIds);
                weights_ = std::move(movedWeights);
            }
            if (static_cast<int>(ids_.size()) == clip_limits::kChunkTokens) close(false);
            const std::optional<EmbeddingMatch> match =
                embeddings_ ? embeddings_->findAt(tokens, position) : std::optional<EmbeddingMatch>();
            if (!match) {
                ids_.push_back(token);
                weights_.push_back(weight);
                ++position;
                continue;
            }
            const int vectors = embeddings_->embeddings()[match->embedding].vectors;
            if (static_cast<int>(ids_.size()) + vectors > clip_limits::kChunkTokens) close(false);
            fixes_.push_back({static_cast<int>(ids_.size()), match->embedding});
            ids_.insert(ids_.end(), static_cast<std::size_t>(vectors), 0);
            weights_.insert(weights_.end(), static_cast<std::size_t>(vectors), weight);
            position += match->tokens;
        }
    }

    // next_chunk(is_last): pad to 75 with EOS (weight 1), frame with BOS/EOS.
    void close(bool isLast) {
        out_.tokenCount += isLast ? static_cast<int>(ids_.size()) : clip_limits::kChunkTokens;
        PromptChunk chunk;
        chunk.contentTokens = static_cast<int>(ids_.size());
        chunk.ids.fill(tok_.eosId());
        chunk.weights.fill(1.0f);
        chunk.ids[0] = tok_.bosId();
        std::copy(ids_.begin(), ids_.end(), chunk.ids.begin() + 1);
        std::copy(weights_.begin(), weights_.end(), chunk.weights.begin() + 1);
        if (tok_.padId() != tok_.eosId()) {  // A1111 sd_hijack_open_clip.py: after the first EOS, pad ids
            std::size_t firstEos = 0;
            while (chunk.ids[firstEos] != tok_.eosId()) ++firstEos;
            std::fill(chunk.ids.begin() + static_cast<std::ptrdiff_t>(firstEos) + 1, chunk.ids.end(), tok_.padId());
        }
        chunk.fixes = std::move(fixes_);
        fixes_.clear();
        out_.chunks.push_back(std::move(chunk));
        ids_.clear();
        weights_.clear();
        lastComma_ = -1;
    }

    PromptChunks finish() {
        if (!ids_.empty() || out_.chunks.empty()) close(true);
        return std::move(out_);
    }

private:
    const ClipTokenizer& tok_;
    int backtrack_;
    std::int32_t comma_;
    std::vector<std::int32_t> ids_;
    std::vector<float> weights_;
    std::vector<PromptChunkFix> fixes_;
    const EmbeddingDatabase* embeddings_;
    int lastComma_ = -1;
    PromptChunks out_;
};

}  // namespace

std::vector<PromptSegment> parsePromptAttention(std::string_view prompt) {
    std::vector<PromptSegment> out;
    for (Segment& s : parseSegments(decodePrompt(prompt))) out.push_back({unicode::encodeUtf8(s.text), s.weight});
    return out;
}

std::vector<PromptSyntaxSpan> scanPromptSyntax(std::u32string_view prompt) {
    std::vector<PromptSyntaxSpan> spans;
    AttentionParser parser(&spans);
    const std::vector<Segment> text = parser.parse(prompt);
    // Brackets never closed: A1111 applies them to the end of the prompt, but the person most
    // likely forgot a closer.
    for (const std::size_t at : parser.roundAt_) spans.push_back({at, at + 1, PromptSyntaxKind::Unbalanced, 1.0});
    for (const std::size_t at : parser.squareAt_) spans.push_back({at, at + 1, PromptSyntaxKind::Unbalanced, 1.0});
    for (const Segment& s : text) {
        // A marker whose weight a bracket changed is ordinary text, as parsePromptAttention keeps it.
        const bool marker = s.weight == -1.0 && s.text == kBreak;
        if (marker)
            spans.push_back({s.begin, s.begin + kBreak.size(), PromptSyntaxKind::Break, 1.0});
        else if (!s.text.empty() && parser.weightsKnown_)
            spans.push_back({s.begin, s.begin + s.text.size(), PromptSyntaxKind::Text, s.weight});
    }
    std::sort(spans.begin(), spans.end(), [](const PromptSyntaxSpan& a, const PromptSyntaxSpan& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.kind < b.kind;
    });
    return spans;
}

PromptChunks chunkPrompt(const ClipTokenizer& tokenizer, std::string_view prompt, const PromptChunkOptions& options) {
    if (options.commaBacktrack < 0 || options.commaBacktrack > clip_limits::kChunkTokens)
        throw ValidationError(
            "comma_padding_backtrack",
            "comma_padding_backtrack: " + std::to_string(options.commaBacktrack) + " is outside 0..75");
    const std::u32string text = decodePrompt(prompt);
    std::vector<Segment> segments;
    if (options.parseEmphasis) {
        segments = parseSegments(text);
    } else {
        segments.push_back({text, 1.0});
    }
    ChunkBuilder builder(tokenizer, options.commaBacktrack, options.embeddings);
    for (const Segment& s : segments) {
        if (s.weight == -1.0 && s.text == kBreak) {
            builder.close(false);
            continue;
        }
        builder.add(tokenizer.encode(std::u32string_view(s.text)), static_cast<float>(s.weight));
    }
    PromptChunks result = builder.finish();
    for (Segment& s : segments) result.segments.push_back({unicode::encodeUtf8(s.text), s.weight});
    return result;
}

void applyEmphasis(std::span<float> z, std::span<const float> multipliers, int batch, int tokens, int channels,
                   EmphasisMode mode) {
    if (batch < 0 || tokens < 0 || channels < 0 ||
        z.size() !=
            static_cast<std::size_t>(batch) * static_cast<std::size_t>(tokens) * static_cast<std::size_t>(channels) ||
        multipliers.size() != static_cast<std::size_t>(batch) * static_cast<std::size_t>(tokens))
        throw std::invalid_argument(
            "applyEmphasis: z must hold batch*tokens*channels and multipliers batch*tokens values");
    if (mode == EmphasisMode::Ignore || z.empty()) return;
    const auto mean = [&] {
        double sum = 0;
        for (float v : z) sum += v;
        return sum / static_cast<double>(z.size());
    };
    const double before = mode == EmphasisMode::Original ? mean() : 0.0;
    for (std::size_t row = 0; row < multipliers.size(); ++row) {
        for (std::size_t c = 0; c < static_cast<std::size_t>(channels); ++c)
            z[row * static_cast<std::size_t>(channels) + c] *= multipliers[row];
    }
    if (mode != EmphasisMode::Original) return;
    const auto ratio = static_cast<float>(before / mean());
    for (float& v : z) v *= ratio;
}

}  // namespace tessera
