// ClipTokenizer: the CLIP byte-level BPE tokenizer of Stable Diffusion's text encoders (openai CLIP
// clip/simple_tokenizer.py, transformers CLIPTokenizer), loaded from openai's
// bpe_simple_vocab_16e6.txt.gz (bundled in resources/clip/) or from a diffusers `tokenizer/` folder
// (vocab.json + merges.txt). Text goes to ids exactly as transformers' CLIPTokenizer does; which
// transformers is a choice (ClipTextFlavour), because its text normalisation changed between
// versions. Qt-free.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

namespace clip_limits {
// The encoder's context: BOS, 75 content tokens, EOS (openai CLIP clip.py tokenize).
inline constexpr int kContextLength = 77;
inline constexpr int kChunkTokens = kContextLength - 2;
// Longest text encode() accepts, in UTF-8 bytes. Real prompts are a few KiB; 1 MiB of any text
// encodes in under a second of CPU, the worst being one random 1 MiB word (~0.6 s in a release
// build; tests/core/tst_cliptokenizer.cpp measures each shape), so the bound costs no user
// anything and keeps hostile input cheap.
inline constexpr std::size_t kMaxTextBytes = std::size_t{1} << 20;
// Vocabulary files: openai's gz is 1.36 MB (3.19 MB unpacked), a diffusers vocab.json ~1.6 MB,
// merges.txt ~0.5 MB. Four to ten times that is allowed; larger files are refused unread.
inline constexpr std::size_t kGzBytes = std::size_t{8} << 20;
inline constexpr std::size_t kUnpackedBytes = std::size_t{32} << 20;
inline constexpr std::size_t kVocabJsonBytes = std::size_t{16} << 20;
// The number of merges CLIP uses: 49152 - 256 - 2 (SimpleTokenizer.__init__); later lines are
// ignored.
inline constexpr std::size_t kMerges = 48894;
}  // namespace clip_limits

// How text is normalised before pre-tokenization (transformers CLIPTokenizer). Both give the same
// ids for ordinary prompts (ASCII, accented Latin, most punctuation); they differ on CJK runs,
// control characters, U+03A3 at a word's end, and "<|endoftext|>" typed in other than lower case.
enum class ClipTextFlavour {
    // transformers >= 5 (and CLIPTokenizerFast before it): the `tokenizers` library's pipeline:
    // NFC, every run of White_Space -> one space, lowercase code point by code point, the CLIP
    // split regex, then byte-level BPE. This is what `tools/reference/make_tokenizer_fixtures.py`
    // runs under transformers 5 (5.17) and what the fixture test checks.
    Tokenizers,
    // transformers 4.x's Python CLIPTokenizer when ftfy is not installed (the recommended path
    // there): BasicTokenizer (drop NUL, U+FFFD and C* controls, whitespace to spaces, spaces around
    // CJK ideographs, NFC, split on Python whitespace, str.lower with Final_Sigma), then the split
    // regex with IGNORECASE, where a typed special-token literal maps to its id. Checked against
    // cases derived from transformers' source, not against a run of it (no transformers 4 was at
    // hand to run).
    PythonBasic,
};
std::string_view toString(ClipTextFlavour);
// "tokenizers" or "python-basic"; throws ValidationError(field) otherwise.
ClipTextFlavour parseClipTextFlavour(std::string_view name, std::string_view field = "tokenizer");

struct ClipTokenizerOptions {
    ClipTextFlavour flavour = ClipTextFlavour::Tokenizers;
    // The padding token (the pipelines' tokenizer_config.json): "<|endoftext|>" for SD 1.x and SDXL
    // `tokenizer/`, "!" (id 0) for SD 2.x `tokenizer/` and SDXL `tokenizer_2/` (for SD 2.x this
    // rests on transformers#24925, not on its tokenizer_config.json: unverified).
    std::string padToken = "<|endoftext|>";
    // A pad token other than BOS/EOS is an added token in transformers: every occurrence in
    // the text becomes the pad id on its own ("! !!" -> 0 0 0). false gives
    // openai's/open_clip's behaviour, where "!" is ordinary text (A1111 on SD2 and SDXL-G).
    bool splitPadToken = true;
};

class ClipTokenizer {
public:
    // openai's merges file (gzip), ids built as SimpleTokenizer.__init__ builds them. Throws
    // InputFileError("tokenizer") naming the file for anything unreadable, too large, or not a CLIP
    // merges file.
    static ClipTokenizer fromMergesGz(const std::filesystem::path& gzFile, ClipTokenizerOptions options = {});
    // A diffusers/transformers tokenizer folder: vocab.json, merges.txt, and the pad token
    // from special_tokens_map.json (else tokenizer_config.json, else "<|endoftext|>").
    static ClipTokenizer fromDiffusersFolder(const std::filesystem::path& folder,
                                             ClipTextFlavour flavour = ClipTextFlavour::Tokenizers);

    ClipTokenizer(ClipTokenizer&&) noexcept;
    ClipTokenizer& operator=(ClipTokenizer&&) noexcept;
    ~ClipTokenizer();

    // The content ids of `utf8` (no BOS/EOS, no truncation), as transformers'
    // tokenizer(text, add_special_tokens=False). Ill-formed UTF-8 is read as U+FFFD per
    // maximal subpart. Throws ValidationError("prompt") above clip_limits::kMaxTextBytes bytes
    // (code points, for the UTF-32 overload). Thread-safe (the BPE cache is locked).
    std::vector<std::int32_t> encode(std::string_view utf8) const;
    std::vector<std::int32_t> encode(std::u32string_view text) const;

    // diffusers' framing (StableDiffusionPipeline.encode_prompt, padding "max_length"): BOS, the
    // first 75 content ids, EOS, then pad ids.
    std::array<std::int32_t, clip_limits::kContextLength> frame(std::span<const std::int32_t> content) const;

    std::int32_t bosId() const;
    std::int32_t eosId() const;
    std::int32_t padId() const;
    // The id of a vocabulary entry in its byte-level spelling (",</w>" -> 267), if present.
    std::optional<std::int32_t> idOf(std::string_view token) const;
    // The vocabulary entry of `id` in its byte-level spelling ("a</w>"), empty if none.
    std::string tokenString(std::int32_t id) const;
    // The text an id stands for: its bytes, with the end-of-word mark as a trailing space,
    // made valid UTF-8 (a token may hold part of a character) for display.
    std::string tokenText(std::int32_t id) const;
    std::size_t vocabSize() const;
    const ClipTokenizerOptions& options() const;

private:
    struct Vocabulary;
    struct Cache;
    ClipTokenizer(std::shared_ptr<const Vocabulary> vocabulary, ClipTokenizerOptions options);

    void encodeSpan(std::u32string_view span, std::vector<std::int32_t>& out) const;
    void encodePiece(std::u32string_view piece, std::vector<std::int32_t>& out) const;
    void bpe(std::string_view bytes, std::vector<std::int32_t>& out) const;

    std::shared_ptr<const Vocabulary> vocab_;
    ClipTokenizerOptions options_;
    std::int32_t padId_ = 0;
    std::unique_ptr<Cache> cache_;
};

}  // namespace tessera
