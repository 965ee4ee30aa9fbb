// T5Tokenizer over SentencePiece (google/sentencepiece, sentencepiece_processor.h): the library
// normalises (the model's own charsmap, nmt_nfkc for T5), splits and segments each stretch of
// text between the literal special tokens; the framing is transformers' (models/t5/
// tokenization_t5.py, T5TokenizerFast with padding="max_length", truncation=True).
//
// The fast tokenizer splits the special tokens out first, then normalises each stretch and gives it
// the word-start mark U+2581 by Metaspace's prepend_scheme: "always" marks every stretch, as
// SentencePiece's add_dummy_prefix does; "first" (ComfyUI's t5_tokenizer/tokenizer.json) only the
// one at the start of the text, or one that begins with a space. For "first", stretches after a
// special token that start with a letter are encoded by a second processor whose model has
// add_dummy_prefix off.
#include "core/text/T5Tokenizer.h"

#include <algorithm>
#include <array>

#include <sentencepiece_processor.h>

#include "core/base/BoundedInput.h"

namespace tessera {

namespace limits = t5_tokenizer_limits;

struct T5Tokenizer::Impl {
    sentencepiece::SentencePieceProcessor processor;
    sentencepiece::SentencePieceProcessor unmarked;  // the same model without add_dummy_prefix
    int pieces = 0;
    // The literal special tokens of transformers' T5 tokenizers: `</s>`, `<pad>`, `<unk>` and the
    // sentinels, matched whole in a prompt and never passed to SentencePiece.
    std::vector<std::pair<std::string, std::int32_t>> specials;
};

namespace {

[[noreturn]] void failModel(const std::string& source, const std::string& why) {
    throw InputFileError("model", source + ": " + why);
}

// The protobuf wire format (protobuf.dev "Encoding"), as much as a serialized ModelProto needs;
// Debian ships SentencePiece without its generated message classes.
bool readVarint(std::string_view data, std::size_t& at, std::uint64_t& value) {
    value = 0;
    for (int shift = 0; shift < 64 && at < data.size(); shift += 7) {
        const auto byte = static_cast<unsigned char>(data[at++]);
        value |= std::uint64_t(byte & 0x7F) << shift;
        if ((byte & 0x80) == 0) return true;
    }
    return false;
}

void writeVarint(std::string& out, std::uint64_t value) {
    do {
        const auto byte = static_cast<unsigned char>(value & 0x7F);
        value >>= 7;
        out.push_back(static_cast<char>(value ? byte | 0x80 : byte));
    } while (value);
}

// Copies `message`'s fields to `out`, each given to `keep` (field number, wire type) first; false
// for bytes that are not a message.
template <class Keep>
bool copyFields(std::string_view message, std::string& out, Keep&& keep) {
    std::size_t at = 0;
    while (at < message.size()) {
        const std::size_t begin = at;
        std::uint64_t key = 0, length = 0;
        if (!readVarint(message, at, key)) return false;
        switch (key & 7) {
            case 0:
                if (!readVarint(message, at, length)) return false;
                break;
            case 1:
                at += 8;
                break;
            case 2:
                if (!readVarint(message, at, length) || length > message.size() - std::min(at, message.size()))
                    return false;
                at += length;
                break;
            case 5:
                at += 4;
                break;
            default:
                return false;
        }
        if (at > message.size()) return false;
        if (keep(key >> 3, key & 7, message.substr(begin, at - begin), out))
            out.append(message.substr(begin, at - begin));
    }
    return true;
}

// `model` (a serialized sentencepiece ModelProto) with normalizer_spec (field 3).add_dummy_prefix
// (field 3, a bool) false; empty when the bytes are not such a message.
std::string withoutDummyPrefix(std::string_view model) {
    std::string out;
    bool found = false;
    const bool ok =
        copyFields(model, out, [&](std::uint64_t field, std::uint64_t wire, std::string_view whole, std::string& dst) {
            if (field != 3 || wire != 2) return true;
            std::size_t at = 0;
            std::uint64_t key = 0, length = 0;
            readVarint(whole, at, key);
            readVarint(whole, at, length);
            std::string spec;
            if (!copyFields(whole.substr(at), spec,
                            [](std::uint64_t f, std::uint64_t w, std::string_view, std::string&) {
                                return !(f == 3 && w == 0);
                            }))
                return true;
            spec += std::string{'\x18', '\x00'};  // field 3, varint: add_dummy_prefix = false
            writeVarint(dst, key);
            writeVarint(dst, spec.size());
            dst += spec;
            found = true;
            return false;
        });
    return ok && found ? out : std::string();
}

// Whether `text` starts with a character the nmt_nfkc normaliser turns into a space (ASCII
// whitespace, no-break and typographic spaces, the ideographic space): the fast tokenizer's
// Metaspace then marks the stretch as a word start whatever its position.
bool startsWithSpace(std::string_view text) {
    if (text.empty()) return false;
    const auto c = static_cast<unsigned char>(text[0]);
    if (c == ' ' || (c >= '\t' && c <= '\r')) return true;
    static constexpr std::array<std::string_view, 6> kSpaces = {"\u00a0", "\u1680", "\u202f",
                                                                "\u205f", "\u3000", "\u2028"};
    for (std::string_view s : kSpaces)
        if (text.substr(0, s.size()) == s) return true;
    // U+2000..U+200A and U+2029: E2 80 80..8A, E2 80 A9.
    return text.size() >= 3 && c == 0xE2 && static_cast<unsigned char>(text[1]) == 0x80 &&
           (static_cast<unsigned char>(text[2]) <= 0x8A || static_cast<unsigned char>(text[2]) == 0xA9);
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
    const std::string unmarked = withoutDummyPrefix(bytes);
    if (unmarked.empty() || !m.unmarked.LoadFromSerializedProto(unmarked).ok())
        failModel(source, "a SentencePiece model without a readable normalizer_spec");
    m.specials = {{"</s>", kEosId}, {"<pad>", kPadId}, {"<unk>", kUnkId}};
    for (int n = 0; n < kExtraIds; ++n)
        m.specials.emplace_back("<extra_id_" + std::to_string(n) + ">", m.pieces + kExtraIds - n - 1);
    return t;
}

T5Tokenizer::~T5Tokenizer() = default;
T5Tokenizer::T5Tokenizer(T5Tokenizer&&) noexcept = default;
T5Tokenizer& T5Tokenizer::operator=(T5Tokenizer&&) noexcept = default;

int T5Tokenizer::pieceCount() const { return impl_->pieces; }

std::vector<std::int32_t> T5Tokenizer::tokenize(std::string_view text, T5WordStart wordStart) const {
    if (text.size() > limits::kMaxTextBytes)
        throw ValidationError("prompt", "prompt: " + std::to_string(text.size()) + " bytes of text; at most " +
                                            std::to_string(limits::kMaxTextBytes) + " are tokenized");
    std::vector<std::int32_t> ids;
    auto encodeStretch = [&](std::string_view stretch, bool atStart) {
        if (stretch.empty()) return;
        std::vector<int> pieces;
        const bool marked = wordStart == T5WordStart::Always || atStart || startsWithSpace(stretch);
        auto& processor = marked ? impl_->processor : impl_->unmarked;
        const sentencepiece::util::Status status = processor.Encode(stretch, &pieces);
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
        encodeStretch(text.substr(start, at - start), start == 0);
        ids.push_back(special->second);
        at += special->first.size();
        start = at;
    }
    encodeStretch(text.substr(start), start == 0);
    return ids;
}

std::vector<std::int32_t> T5Tokenizer::encode(std::string_view text, int maxLength, T5WordStart wordStart) const {
    if (maxLength < 1 || maxLength > limits::kMaxLength)
        throw ValidationError("prompt", "T5 sequence length: " + std::to_string(maxLength) + "; 1 to " +
                                            std::to_string(limits::kMaxLength) + " tokens (FLUX.1 uses 512 or 256)");
    std::vector<std::int32_t> ids = tokenize(text, wordStart);
    if (ids.size() > static_cast<std::size_t>(maxLength - 1)) ids.resize(static_cast<std::size_t>(maxLength - 1));
    ids.push_back(kEosId);
    ids.resize(static_cast<std::size_t>(maxLength), kPadId);
    return ids;
}

}  // namespace tessera
