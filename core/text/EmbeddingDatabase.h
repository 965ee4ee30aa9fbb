// EmbeddingDatabase: textual-inversion embeddings as A1111 finds them in a prompt
// (modules/textual_inversion/textual_inversion.py EmbeddingDatabase: register_embedding_by_name,
// find_embedding_at_position). Each embedding's name is tokenized without BOS/EOS; at a position of
// a prompt's tokens the longest registered token sequence equal to the tokens there wins. Matching
// is on CLIP token ids, so it is case-insensitive and on whole tokens ("foo" does not match in
// "foobar", whose tokens differ). Qt-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/text/ClipTokenizer.h"

namespace tessera {

namespace embedding_limits {
// A1111 places an embedding's vectors in one 75-token chunk (sd_hijack_clip.py tokenize_line moves
// them to the next chunk when they do not fit); more than 75 vectors never fit one and make its
// encoder fail, so such a file is refused.
inline constexpr int kMaxVectors = clip_limits::kChunkTokens;
// Names longer than this (in tokens) are never typed in a prompt; the bound keeps matching cheap.
inline constexpr std::size_t kMaxNameTokens = 256;
}  // namespace embedding_limits

// One text encoder's vectors of an embedding: [vectors, width] row-major.
struct EmbeddingVectors {
    int width = 0;
    std::vector<float> values;
};

// A textual-inversion embedding as read from its file.
struct TextualInversion {
    std::string name;    // what a prompt names it by: the file's name without folder and extension
    std::string path;    // the file
    std::string sha256;  // of the whole file, lowercase hex
    int vectors = 0;     // token slots it takes in a prompt
    // By the text encoder it is for: "" (a file of one tensor: SD 1.x / 2.x), "clip_l" and
    // "clip_g" (SDXL's two encoders).
    std::map<std::string, EmbeddingVectors> byEncoder;
    // A1111's short hash in "TI hashes" (Embedding.shorthash): the first 12 hex digits of sha256.
    std::string shortHash() const { return sha256.substr(0, 12); }
    // The vectors for the encoder under `key` ("" for SD 1.x / 2.x), nullptr when the file has none.
    const EmbeddingVectors* vectorsFor(const std::string& key) const;
};

// Where a prompt's tokens name an embedding.
struct EmbeddingMatch {
    std::size_t embedding = 0;  // index into EmbeddingDatabase::embeddings()
    std::size_t tokens = 0;     // prompt tokens its name took
};

class EmbeddingDatabase {
public:
    // Registers `embeddings` in order, their names tokenized by `tokenizer` (the text encoder's the
    // prompt is tokenized for). A later embedding of the same name replaces an earlier one (a Python
    // dict); of two names with the same tokens ("Foo" and "foo") the one registered first matches
    // (A1111's lookup list is sorted by token count, stably). Names that tokenize to nothing are
    // kept but never match.
    EmbeddingDatabase(const ClipTokenizer& tokenizer, std::vector<TextualInversion> embeddings);

    const std::vector<TextualInversion>& embeddings() const { return embeddings_; }
    bool empty() const { return embeddings_.empty(); }

    // The embedding whose name's tokens start at tokens[position], the longest first.
    std::optional<EmbeddingMatch> findAt(std::span<const std::int32_t> tokens, std::size_t position) const;

    // Notes about names that cannot all be used: a name given twice (the later file is used), or
    // two names with the same tokens (the first is used).
    const std::vector<std::string>& notes() const { return notes_; }

private:
    struct Entry {
        std::vector<std::int32_t> ids;
        std::size_t embedding = 0;
    };
    std::vector<TextualInversion> embeddings_;
    std::map<std::int32_t, std::vector<Entry>> byFirstId_;  // each list longest first
    std::vector<std::string> notes_;
};

// A1111's "TI hashes" value after one more encoder call (sd_hijack_clip.py forward): the
// embeddings that call used, "name: 0123456789ab, ..." in the order of first use (one entry per
// name), each name with ':' and ',' removed, then `earlier` (the calls before it) after ", ".
// A1111 encodes the negative prompt before the prompt, and SDXL's two encoders each count, so a
// name can appear more than once. `earlier` itself when the call used none.
std::string addTextualInversionHashes(const std::string& earlier, const std::vector<const TextualInversion*>& used);

// The "TI hashes" value read back: (name, hash) pairs, split at ',' and each item at its first ':',
// both sides stripped, items without ':' left out (as the Lora hashes are read back).
std::vector<std::pair<std::string, std::string>> parseTextualInversionHashes(std::string_view value);

}  // namespace tessera
