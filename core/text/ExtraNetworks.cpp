// ExtraNetworks: A1111 modules/extra_networks.py (re_extra_net, parse_prompt, ExtraNetworkParams,
// lookup_extra_networks) and extensions-builtin/Lora/extra_networks_lora.py (ExtraNetworkLora.activate,
// the "Lora hashes" value).
#include "core/text/ExtraNetworks.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>

#include "core/base/BoundedInput.h"
#include "core/base/UnicodeText.h"
#include "core/base/ValidationError.h"

namespace tessera {

namespace {

// The code point at `at` and its length in bytes; an ill-formed sequence is one U+FFFD byte
// (enough to decide whether it is a word character: it is not).
std::pair<char32_t, std::size_t> codePointAt(std::string_view s, std::size_t at) {
    const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
    const unsigned char b0 = byte(at);
    if (b0 < 0x80) return {b0, 1};
    const std::size_t length = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : b0 >= 0xC0 ? 2 : 0;
    if (length == 0 || at + length > s.size()) return {0xFFFD, 1};
    char32_t cp = b0 & (0x7F >> length);
    for (std::size_t i = 1; i < length; ++i) {
        if ((byte(at + i) & 0xC0) != 0x80) return {0xFFFD, 1};
        cp = (cp << 6) | (byte(at + i) & 0x3F);
    }
    const char32_t minimum = length == 2 ? 0x80 : length == 3 ? 0x800 : 0x10000;
    if (cp < minimum || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {0xFFFD, 1};
    return {cp, length};
}

// Python's float() / int() of a tag's item: surrounding whitespace, a sign, digits with single
// underscores between them (float: a fraction and an exponent). Non-finite values ("inf", "nan",
// overflow) are refused.
std::optional<double> pythonNumber(std::string_view text, bool integer) {
    const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
    const auto digit = [](char c) { return c >= '0' && c <= '9'; };
    while (!text.empty() && space(text.front())) text.remove_prefix(1);
    while (!text.empty() && space(text.back())) text.remove_suffix(1);
    std::string clean;
    std::size_t i = 0;
    const auto sign = [&] {
        if (i < text.size() && (text[i] == '+' || text[i] == '-')) clean += text[i++];
    };
    const auto digits = [&] {
        std::size_t count = 0;
        while (i < text.size()) {
            if (digit(text[i])) {
                clean += text[i++];
                ++count;
            } else if (text[i] == '_' && count > 0 && i + 1 < text.size() && digit(text[i + 1])) {
                ++i;
            } else {
                break;
            }
        }
        return count;
    };
    sign();
    const std::size_t whole = digits();
    std::size_t fraction = 0;
    if (!integer && i < text.size() && text[i] == '.') {
        clean += text[i++];
        fraction = digits();
    }
    if (whole == 0 && fraction == 0) return std::nullopt;
    if (!integer && i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
        clean += text[i++];
        sign();
        if (digits() == 0) return std::nullopt;
    }
    if (i != text.size()) return std::nullopt;
    const std::size_t skip = clean.front() == '+' ? 1 : 0;  // from_chars takes no '+'
    double value = 0;
    const auto [end, ec] = std::from_chars(clean.data() + skip, clean.data() + clean.size(), value);
    if (ec != std::errc() || end != clean.data() + clean.size() || !std::isfinite(value)) return std::nullopt;
    return value;
}

double multiplierOf(const ExtraNetworkTag& tag, const std::string& item) {
    const std::optional<double> v = pythonNumber(item, false);
    if (!v)
        throw ValidationError("prompt", "prompt: <" + tag.kind + ":...>: " + inQuotes(item) +
                                            " is not a number (a multiplier such as 0.8)");
    return *v;
}

std::string tagText(const ExtraNetworkTag& tag) {
    std::string text = "<" + tag.kind;
    for (const std::string& item : tag.items) text += ":" + item;
    return text + ">";
}

}  // namespace

const std::string* ExtraNetworkTag::namedValue(std::string_view name) const {
    for (auto it = named.rbegin(); it != named.rend(); ++it)
        if (it->first == name) return &it->second;
    return nullptr;
}

ExtraNetworkPrompt parseExtraNetworks(std::string_view prompt) {
    ExtraNetworkPrompt out;
    out.prompt.reserve(prompt.size());
    std::size_t pos = 0;
    while (pos < prompt.size()) {
        if (prompt[pos] != '<') {
            out.prompt += prompt[pos++];
            continue;
        }
        // <(\w+):([^>]+)> at pos: \w+ cannot hold ':', so its greedy match is the only one.
        std::size_t j = pos + 1;
        while (j < prompt.size()) {
            const auto [cp, length] = codePointAt(prompt, j);
            if (!unicode::isPythonWordChar(cp)) break;
            j += length;
        }
        const std::size_t close =
            j > pos + 1 && j < prompt.size() && prompt[j] == ':' ? prompt.find('>', j + 1) : std::string_view::npos;
        if (close == std::string_view::npos || close == j + 1) {
            out.prompt += prompt[pos++];
            continue;
        }
        ExtraNetworkTag tag;
        tag.kind = std::string(prompt.substr(pos + 1, j - pos - 1));
        const std::string_view args = prompt.substr(j + 1, close - j - 1);
        for (std::size_t start = 0;;) {
            const std::size_t colon = args.find(':', start);
            tag.items.emplace_back(args.substr(start, colon == std::string_view::npos ? colon : colon - start));
            if (colon == std::string_view::npos) break;
            start = colon + 1;
        }
        for (const std::string& item : tag.items) {
            const std::size_t eq = item.find('=');
            if (eq != std::string::npos && item.find('=', eq + 1) == std::string::npos)
                tag.named.emplace_back(item.substr(0, eq), item.substr(eq + 1));
            else
                tag.positional.push_back(item);
        }
        out.tags.push_back(std::move(tag));
        pos = close + 1;
    }
    return out;
}

std::vector<LoraTag> loraTags(const std::vector<ExtraNetworkTag>& tags) {
    const auto isLora = [](const ExtraNetworkTag& t) { return t.kind == "lora" || t.kind == "lyco"; };
    std::vector<std::string> kinds;  // lora / lyco in first-appearance order
    for (const ExtraNetworkTag& t : tags)
        if (isLora(t) && std::find(kinds.begin(), kinds.end(), t.kind) == kinds.end()) kinds.push_back(t.kind);
    std::vector<LoraTag> out;
    for (const std::string& kind : kinds)
        for (const ExtraNetworkTag& t : tags) {
            if (t.kind != kind) continue;
            if (t.positional.empty() || t.positional[0].empty())
                throw ValidationError("prompt", "prompt: " + inQuotes(tagText(t)) + " names no LoRA");
            LoraTag lora;
            lora.name = t.positional[0];
            lora.teMultiplier = t.positional.size() > 1 ? multiplierOf(t, t.positional[1]) : 1.0;
            if (const std::string* te = t.namedValue("te")) lora.teMultiplier = multiplierOf(t, *te);
            lora.unetMultiplier = t.positional.size() > 2 ? multiplierOf(t, t.positional[2]) : lora.teMultiplier;
            if (const std::string* unet = t.namedValue("unet")) lora.unetMultiplier = multiplierOf(t, *unet);
            const std::string* dyn = t.positional.size() > 3 ? &t.positional[3] : nullptr;
            if (const std::string* named = t.namedValue("dyn")) dyn = named;
            if (dyn != nullptr) {
                const std::optional<double> v = pythonNumber(*dyn, true);
                if (!v || *v < 0 || *v > 1e9)
                    throw ValidationError("prompt", "prompt: " + inQuotes(tagText(t)) + ": dyn " + inQuotes(*dyn) +
                                                        " is not a rank (a whole number)");
                lora.dyn = static_cast<std::int64_t>(*v);
            }
            out.push_back(std::move(lora));
        }
    return out;
}

std::string loraHashesInfotext(const std::vector<std::pair<std::string, std::string>>& nameAndShortHash) {
    std::vector<std::pair<std::string, std::string>> entries;
    for (const auto& [name, hash] : nameAndShortHash) {
        if (name.empty() || hash.empty()) continue;
        std::string key;
        for (const char c : name)
            if (c != ':' && c != ',') key += c;
        const auto it = std::find_if(entries.begin(), entries.end(), [&](const auto& e) { return e.first == key; });
        if (it != entries.end())
            it->second = hash;
        else
            entries.emplace_back(std::move(key), hash);
    }
    std::string text;
    for (const auto& [name, hash] : entries) text += (text.empty() ? "" : ", ") + name + ": " + hash;
    return text;
}

}  // namespace tessera
