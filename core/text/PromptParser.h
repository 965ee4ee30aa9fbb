// PromptParser: AUTOMATIC1111's prompt conventions (modules/prompt_parser.py, sd_hijack_clip.py):
// emphasis syntax "(word:1.2)", "(word)", "[word]", escapes, BREAK; tokenization of the weighted
// segments; 75-token chunks with comma backtracking, each framed to 77 ids with one weight per id;
// and the emphasis applied to the text encoder's output. Qt-free.
//
// Not covered: prompt editing "[a:b:when]", alternation "[a|b]" and "AND"
// composition, which A1111 resolves with a grammar before this step; here their brackets and
// colons are read as emphasis syntax and text. Textual-inversion embeddings are found when the
// options give an EmbeddingDatabase (core/text/EmbeddingDatabase.h).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/text/ClipTokenizer.h"

namespace tessera {

class EmbeddingDatabase;  // core/text/EmbeddingDatabase.h

namespace prompt_limits {
// Longest prompt accepted, in UTF-8 bytes (the tokenizer's own bound).
inline constexpr std::size_t kMaxPromptBytes = clip_limits::kMaxTextBytes;
// Emphasis brackets multiply every segment they enclose, one multiplication each (A1111's
// multiply_range). Their total is bounded so that hostile nesting ("(a(a(a..." with 300,000
// unclosed brackets needs ~5e10) is refused at once; a 1 MiB prompt with brackets 60 deep
// everywhere stays within it. Real prompts need a few thousand.
inline constexpr std::uint64_t kMaxWeightMultiplications = std::uint64_t{1} << 26;
}  // namespace prompt_limits

// One run of text with its weight. A BREAK marker is {"BREAK", -1.0}, exactly as A1111 keeps it
// (so a marker whose weight a bracket changed is ordinary text, a quirk of A1111's parser).
struct PromptSegment {
    std::string text;  // UTF-8
    double weight = 1.0;
    bool operator==(const PromptSegment&) const = default;
};

// A1111's parse_prompt_attention (modules/prompt_parser.py), exactly: weights are multiplied in the
// same order in double precision, adjacent segments of equal weight merged. Ill-formed UTF-8 is
// read as U+FFFD. Throws ValidationError("prompt") for a prompt over kMaxPromptBytes, a weight that
// is not a number ("(a:1.2.3)", where A1111 raises), a weight that is or becomes infinite, or
// brackets needing more than kMaxWeightMultiplications.
std::vector<PromptSegment> parsePromptAttention(std::string_view prompt);

// What each part of a prompt is to parsePromptAttention, for an editor to highlight.
enum class PromptSyntaxKind {
    Text,        // prompt text; `weight` is the weight A1111 gives it
    Open,        // "(" or "[" that a closer matches
    Close,       // its ")" or "]"
    Weight,      // ":1.2" of a "(text:1.2)" (the ")" is a Close)
    Escape,      // "\(", "\)", "\[", "\]", "\\" or a lone backslash
    Break,       // a BREAK that closes a chunk
    Unbalanced,  // "(" or "[" never closed (A1111 applies it to the end), or ")" / "]" never opened (text)
    BadWeight,   // ":1.2.3" in "(text:1.2.3)": not a number (parsePromptAttention throws)
};
struct PromptSyntaxSpan {
    std::size_t begin = 0, end = 0;  // [begin, end) in code points of the prompt
    PromptSyntaxKind kind = PromptSyntaxKind::Text;
    double weight = 1.0;  // Text only
};

// parsePromptAttention's reading of `prompt`, as spans sorted by begin (Text spans of weight 1
// included; text inside an escape starts after its backslash). Never throws: a bad weight is
// marked and its bracket closes at 1; past kMaxWeightMultiplications no Text spans are given.
std::vector<PromptSyntaxSpan> scanPromptSyntax(std::u32string_view prompt);

// Where a textual-inversion embedding's vectors go in a chunk (A1111's PromptChunkFix): they replace
// the token embeddings of rows offset + 1 .. offset + vectors of the 77 (after BOS), as many as fit
// (sd_hijack.py EmbeddingsWithFixes.forward); the ids there are 0, the weights the text's.
struct PromptChunkFix {
    int offset = 0;             // content position, 0-based
    std::size_t embedding = 0;  // index into EmbeddingDatabase::embeddings()
    bool operator==(const PromptChunkFix&) const = default;
};

// One 77-token chunk as fed to the text encoder: BOS, up to 75 prompt tokens, EOS padding,
// EOS; for a tokenizer whose pad id is not EOS (SD 2.x, SDXL-G), every id after the first EOS
// is the pad id (A1111 sd_hijack_open_clip.py). weights[0] and framing/padding weights are 1.
struct PromptChunk {
    std::array<std::int32_t, clip_limits::kContextLength> ids{};
    std::array<float, clip_limits::kContextLength> weights{};
    int contentTokens = 0;              // ids[1 .. contentTokens] came from the prompt
    std::vector<PromptChunkFix> fixes;  // embeddings placed in this chunk, in prompt order

    // The unpadded view, for display.
    std::span<const std::int32_t> contentIds() const {
        return {ids.data() + 1, static_cast<std::size_t>(contentTokens)};
    }
    std::span<const float> contentWeights() const {
        return {weights.data() + 1, static_cast<std::size_t>(contentTokens)};
    }
};

struct PromptChunkOptions {
    // A1111's comma_padding_backtrack (default 20; 0 turns it off): when a chunk is full and
    // its last ",</w>" is at most this many tokens from the end, the tokens after that comma
    // move to the next chunk.
    int commaBacktrack = 20;
    // false is A1111's emphasis mode "None": the prompt is one segment of weight 1, brackets
    // and BREAK are plain text.
    bool parseEmphasis = true;
    // Textual-inversion embeddings found in the text (not owned; nullptr: none). Each one found
    // takes as many slots as it has vectors, placed as A1111's tokenize_line places them: the
    // chunk is closed first when they do not fit it, so they never straddle two chunks.
    const EmbeddingDatabase* embeddings = nullptr;
};

struct PromptChunks {
    std::vector<PromptChunk> chunks;  // at least one
    // A1111's token count (the "n/75" shown beside the prompt): 75 per closed chunk plus the
    // tokens of the last one.
    int tokenCount = 0;
    std::vector<PromptSegment> segments;  // what the parser made of the prompt
};

// A1111's tokenize_line (modules/sd_hijack_clip.py): parse, tokenize each segment without special
// tokens or truncation, fill chunks of 75 (BREAK closes one; comma backtracking), frame each to 77.
// Throws ValidationError("prompt") as parsePromptAttention does.
PromptChunks chunkPrompt(const ClipTokenizer& tokenizer, std::string_view prompt,
                         const PromptChunkOptions& options = {});

// A1111's emphasis modes (setting `emphasis`, modules/sd_emphasis.py).
enum class EmphasisMode { Original, NoNorm, Ignore };

// Applies the token multipliers to one encoded chunk batch z[batch][tokens][channels]
// (row-major, float), multipliers[batch][tokens]. Original: z *= m, then z *= mean_before /
// mean_after, the means over all of z (accumulated in double; A1111 takes them in the model's
// dtype, so results agree to float rounding). NoNorm: z *= m. Ignore: nothing.
void applyEmphasis(std::span<float> z, std::span<const float> multipliers, int batch, int tokens, int channels,
                   EmphasisMode mode);

}  // namespace tessera
