// T5Tokenizer over SentencePiece (google/sentencepiece, sentencepiece_processor.h): the library
// normalises (the model's own charsmap, nmt_nfkc for T5), splits and segments each stretch of
// text between the literal special tokens; the framing is transformers' (models/t5/
// tokenization_t5.py, T5TokenizerFast with padding="max_length", truncation=True).
#include "core/text/T5Tokenizer.h"

#include <algorithm>
#include <array>

#include <sentencepiece_processor.h>

#include "core/base/BoundedInput.h"

namespace tessera {

namespace limits = t5_tokenizer_limits;

struct T5Tokenizer::Impl {
    sentencepiece::SentencePieceProcessor processor;
    int pieces = 0;
    // The literal special tokens of transformers' T5 tokenizers: `</s>`, `<pad>`, `<unk>` and the
    // sentinels, matched whole in a prompt and never passed to SentencePiece.
    std::vector<std::pair<std::string, std::int32_t>> specials;
};

namespace {

[[noreturn]] void failModel(const std::string& source, const std::string& why) {
    throw InputFileError("model", source + ": " + why);
}

}  // namespace

T5Tokenizer::T5Tokenizer(const std::filesystem::path& spieceModel) {
    const std::string bytes = readBoundedFile(spieceModel, "model", limits::kMaxModelBytes);
    *this = fromSerializedModel(bytes, shownPath(spieceModel));
}

T5Tokenizer T5Tokenizer::fromSerializedModel(std::string_view bytes, const std::string& source) {
    if (bytes.size() > limits::kMaxModelBytes)
        failModel(source, std::to_string(bytes.size()) + " bytes; a SentencePiece model of at most " +
                              std::to_string(limits::kMaxModelBytes) + " is read (T5's is 792 KiB)");
    T5Tokenizer t;
    t.impl_ = std::make_unique<Impl>();
    const sentencepiece::util::Status status = t.impl_->processor.LoadFromSerializedProto(bytes);
    if (!status.ok()) failModel(source, "not a SentencePiece model (spiece.model): " + excerpt(status.ToString(), 200));
    Impl& m = *t.impl_;
    m.pieces = m.processor.GetPieceSize();
    // T5's spiece.model: <pad> 0, </s> 1, <unk> 2 (transformers' T5Tokenizer takes those ids from it).
    if (m.pieces < 3 || m.processor.pad_id() != kPadId || m.processor.eos_id() != kEosId ||
        m.processor.unk_id() != kUnkId)
        failModel(source, "a SentencePiece model with pad " + std::to_string(m.processor.pad_id()) + ", eos " +
                              std::to_string(m.processor.eos_id()) + ", unk " + std::to_string(m.processor.unk_id()) +
                              "; T5's has pad 0, eos 1, unk 2");
    m.specials = {{"</s>", kEosId}, {"<pad>", kPadId}, {"<unk>", kUnkId}};
    for (int n = 0; n < kExtraIds; ++n)
        m.specials.emplace_back("<extra_id_" + std::to_string(n) + ">", m.pieces + kExtraIds - n - 1);
    return t;
}

T5Tokenizer::~T5Tokenizer() = default;
T5Tokenizer::T5Tokenizer(T5Tokenizer&&) noexcept = default;
T5Tokenizer& T5Tokenizer::operator=(T5Tokenizer&&) noexcept = default;

int T5Tokenizer::pieceCount() const { return impl_->pieces; }

std::vector<std::int32_t> T5Tokenizer::tokenize(std::string_view text) const {
    if (text.size() > limits::kMaxTextBytes)
        throw ValidationError("prompt", "prompt: " + std::to_string(text.size()) + " bytes of text; at most " +
                                            std::to_string(limits::kMaxTextBytes) + " are tokenized");
    std::vector<std::int32_t> ids;
    auto encodeStretch = [&](std::string_view stretch) {
        if (stretch.empty()) return;
        std::vector<int> pieces;
        const sentencepiece::util::Status status = impl_->processor.Encode(stretch, &pieces);
        if (!status.ok())
            throw std::runtime_error("T5 tokenizer: SentencePiece failed: " + excerpt(status.ToString(), 200));
        ids.insert(ids.end(), pieces.begin(), pieces.end());
    };
    std::size_t start = 0, at = 0;
    while ((at = text.find('<', at)) != std::string_view::npos) {
        const auto special = std::find_if(impl_->specials.begin(), impl_->specials.end(), [&](const auto& s) {
            return text.compare(at, s.first.size(), s.first) == 0;
        });
        if (special == impl_->specials.end()) {
            ++at;
            continue;
        }
        encodeStretch(text.substr(start, at - start));
        ids.push_back(special->second);
        at += special->first.size();
        start = at;
    }
    encodeStretch(text.substr(start));
    return ids;
}

std::vector<std::int32_t> T5Tokenizer::encode(std::string_view text, int maxLength) const {
    if (maxLength < 1 || maxLength > limits::kMaxLength)
        throw ValidationError("prompt", "T5 sequence length: " + std::to_string(maxLength) + "; 1 to " +
                                            std::to_string(limits::kMaxLength) + " tokens (FLUX.1 uses 512 or 256)");
    std::vector<std::int32_t> ids = tokenize(text);
    if (ids.size() > static_cast<std::size_t>(maxLength - 1)) ids.resize(static_cast<std::size_t>(maxLength - 1));
    ids.push_back(kEosId);
    ids.resize(static_cast<std::size_t>(maxLength), kPadId);
    return ids;
}

}  // namespace tessera
