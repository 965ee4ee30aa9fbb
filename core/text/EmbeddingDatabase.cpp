#include "core/text/EmbeddingDatabase.h"

#include <algorithm>

namespace tessera {

const EmbeddingVectors* TextualInversion::vectorsFor(const std::string& key) const {
    const auto it = byEncoder.find(key);
    return it == byEncoder.end() ? nullptr : &it->second;
}

EmbeddingDatabase::EmbeddingDatabase(const ClipTokenizer& tokenizer, std::vector<TextualInversion> embeddings) {
    for (TextualInversion& e : embeddings) {
        const auto same = std::find_if(embeddings_.begin(), embeddings_.end(),
                                       [&](const TextualInversion& other) { return other.name == e.name; });
        if (same != embeddings_.end()) {
            // register_embedding_by_name: the old entry leaves the lookup, the new one joins it last.
            notes_.push_back("embedding '" + e.name + "': " + e.path + " replaces " + same->path + " (the same name)");
            embeddings_.erase(same);
        }
        embeddings_.push_back(std::move(e));
    }
    for (std::size_t i = 0; i < embeddings_.size(); ++i) {
        std::vector<std::int32_t> ids = tokenizer.encode(embeddings_[i].name);
        if (ids.empty() || ids.size() > embedding_limits::kMaxNameTokens) continue;
        std::vector<Entry>& list = byFirstId_[ids.front()];
        for (const Entry& other : list)
            if (other.ids == ids)
                notes_.push_back("embedding '" + embeddings_[i].name + "' (" + embeddings_[i].path +
                                 ") is never used: its name is read as the same tokens as '" +
                                 embeddings_[other.embedding].name + "', which is found first");
        list.push_back({std::move(ids), i});
        std::stable_sort(list.begin(), list.end(),
                         [](const Entry& a, const Entry& b) { return a.ids.size() > b.ids.size(); });
    }
}

std::optional<EmbeddingMatch> EmbeddingDatabase::findAt(std::span<const std::int32_t> tokens,
                                                        std::size_t position) const {
    if (position >= tokens.size()) return std::nullopt;
    const auto it = byFirstId_.find(tokens[position]);
    if (it == byFirstId_.end()) return std::nullopt;
    for (const Entry& entry : it->second) {
        if (tokens.size() - position < entry.ids.size()) continue;  // Python's slice is shorter: no match
        if (std::equal(entry.ids.begin(), entry.ids.end(), tokens.begin() + static_cast<std::ptrdiff_t>(position)))
            return EmbeddingMatch{entry.embedding, entry.ids.size()};
    }
    return std::nullopt;
}

std::string addTextualInversionHashes(const std::string& earlier, const std::vector<const TextualInversion*>& used) {
    std::vector<std::string> seen;
    std::string value;
    for (const TextualInversion* e : used) {
        if (std::find(seen.begin(), seen.end(), e->name) != seen.end()) continue;
        seen.push_back(e->name);
        if (e->shortHash().empty()) continue;
        std::string name;
        for (const char c : e->name)
            if (c != ':' && c != ',') name += c;
        value += (value.empty() ? "" : ", ") + name + ": " + e->shortHash();
    }
    if (value.empty()) return earlier;
    return earlier.empty() ? value : value + ", " + earlier;
}

namespace {

std::string_view stripped(std::string_view s) {
    const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
    while (!s.empty() && space(s.front())) s.remove_prefix(1);
    while (!s.empty() && space(s.back())) s.remove_suffix(1);
    return s;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> parseTextualInversionHashes(std::string_view value) {
    std::vector<std::pair<std::string, std::string>> out;
    while (true) {
        const std::size_t comma = value.find(',');
        const std::string_view item = value.substr(0, comma);
        if (const std::size_t colon = item.find(':'); colon != std::string_view::npos)
            out.emplace_back(std::string(stripped(item.substr(0, colon))),
                             std::string(stripped(item.substr(colon + 1))));
        if (comma == std::string_view::npos) break;
        value.remove_prefix(comma + 1);
    }
    return out;
}

}  // namespace tessera
