// T5Tokenizer: T5's SentencePiece unigram tokenizer (FLUX.1's tokenizer_2, google/t5-v1_1-xxl's
// spiece.model) through the SentencePiece library, framing a prompt as transformers'
// T5TokenizerFast does with padding="max_length", truncation=True: the pieces cut to
// maxLength - 1, then EOS (1), then pad (0) up to maxLength (models/t5/tokenization_t5.py
// build_inputs_with_special_tokens: `X </s>`, no BOS). The sentinels `<extra_id_N>` and the
// special tokens `</s>`, `<pad>`, `<unk>` written literally in a prompt are single tokens, as
// transformers' added tokens are. Const methods may run on several threads at once. Qt-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

namespace t5_tokenizer_limits {
// T5 v1.1's spiece.model is 792 KiB (32000 pieces and the normaliser's charsmap); 16 MiB allows
// vocabularies 20x larger.
inline constexpr std::size_t kMaxModelBytes = std::size_t{16} << 20;
// A prompt's text, as the CLIP tokenizer bounds it (clip_limits::kMaxTextBytes).
inline constexpr std::size_t kMaxTextBytes = std::size_t{1} << 20;
// The longest framing: FLUX.1 [dev] uses 512 (T5's positions are relative, but the encoder is
// bounded there too: core/models/t5/T5Graph.h kT5MaxTokens).
inline constexpr int kMaxLength = 512;
}  // namespace t5_tokenizer_limits

// Whether a stretch of text after a literal special token begins a word (gets SentencePiece's
// word-start mark U+2581) when it does not start with a space: the fast tokenizer's Metaspace
// prepend_scheme. Always: "always", what transformers' T5 tokenizers do by default (legacy=True in
// 4.x, and 5.x's T5Tokenizer), so BFL's and diffusers' FLUX pipelines; First: "first" (legacy=False),
// what ComfyUI's comfy/text_encoders/t5_tokenizer/tokenizer.json says. They differ only there:
// "x<extra_id_0>y" ends in "y" alone with First, "▁y" with Always.
enum class T5WordStart { Always, First };

class T5Tokenizer {
public:
    static constexpr std::int32_t kPadId = 0;
    static constexpr std::int32_t kEosId = 1;
    static constexpr std::int32_t kUnkId = 2;
    // transformers' T5Tokenizer(extra_ids=100): `<extra_id_N>` = pieces + 100 - N - 1.
    static constexpr int kExtraIds = 100;

    // Reads `spieceModel` (a regular file of at most kMaxModelBytes) and parses it. Throws
    // InputFileError (field "model") naming the file: missing, too large, not a SentencePiece
    // model, or one whose pad/eos/unk pieces are not 0/1/2 as in T5's.
    explicit T5Tokenizer(const std::filesystem::path& spieceModel);
    // The same from the file's bytes; `source` names them in messages.
    static T5Tokenizer fromSerializedModel(std::string_view bytes, const std::string& source);
    ~T5Tokenizer();
    T5Tokenizer(T5Tokenizer&&) noexcept;
    T5Tokenizer& operator=(T5Tokenizer&&) noexcept;

    // SentencePiece pieces, and the vocabulary with the 100 sentinels (transformers' vocab_size).
    int pieceCount() const;
    int vocabSize() const { return pieceCount() + kExtraIds; }

    // The ids of `text` without EOS or padding (any count).
    std::vector<std::int32_t> tokenize(std::string_view text, T5WordStart wordStart = T5WordStart::Always) const;
    // tokenize(text) cut to maxLength - 1, EOS, then kPadId up to maxLength: maxLength ids.
    // Throws ValidationError("prompt") for text over kMaxTextBytes or maxLength outside
    // 1..kMaxLength (naming what is allowed).
    std::vector<std::int32_t> encode(std::string_view text, int maxLength,
                                     T5WordStart wordStart = T5WordStart::Always) const;

private:
    struct Impl;
    T5Tokenizer() = default;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tessera
