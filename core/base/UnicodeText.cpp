#include "core/base/UnicodeText.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <unordered_map>

namespace tessera::unicode {
namespace {

#include "core/base/UnicodeTables.inc"

constexpr char32_t kReplacement = 0xFFFD;
constexpr char32_t kMaxCodePoint = 0x10FFFF;

// Hangul syllable arithmetic (Unicode chapter 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// The value of the run containing `c` in a table of (start << shift) | value entries.
template <std::size_t N>
std::uint32_t runValue(const std::uint32_t (&runs)[N], char32_t c, unsigned shift) {
    const std::uint32_t key = (static_cast<std::uint32_t>(c) << shift) | ((1u << shift) - 1);
    const auto* it = std::upper_bound(std::begin(runs), std::end(runs), key);
    return *(it - 1) & ((1u << shift) - 1);  // runs[0] starts at 0, so it > begin
}

unsigned combiningClass(char32_t c) {
    if (c < 0x300) return 0;
    return c > kMaxCodePoint ? 0 : runValue(kCombiningRuns, c, 8);
}

// One-level canonical decomposition of `c` (not Hangul) or nullptr.
const std::uint32_t* decompositionOf(char32_t c) {
    const auto* it = std::lower_bound(std::begin(kDecompositions), std::end(kDecompositions), c,
                                      [](const std::uint32_t(&e)[3], char32_t v) { return e[0] < v; });
    return (it != std::end(kDecompositions) && (*it)[0] == c) ? *it : nullptr;
}

void appendDecomposed(std::u32string& out, char32_t c) {
    if (c >= kSBase && c < kSBase + kSCount) {
        const char32_t s = c - kSBase;
        out.push_back(kLBase + s / kNCount);
        out.push_back(kVBase + (s % kNCount) / kTCount);
        if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
        return;
    }
    if (c < 0xC0) {  // nothing below U+00C0 decomposes
        out.push_back(c);
        return;
    }
    const std::uint32_t* d = decompositionOf(c);
    if (d == nullptr) {
        out.push_back(c);
        return;
    }
    appendDecomposed(out, d[1]);  // recursion depth <= 4 in Unicode's data
    if (d[2] != 0) appendDecomposed(out, d[2]);
}

// The primary composite of (first, second), or 0.
char32_t composePair(char32_t first, char32_t second) {
    if (first >= kLBase && first < kLBase + kLCount && second >= kVBase && second < kVBase + kVCount)
        return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
    if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 && second > kTBase &&
        second < kTBase + kTCount)
        return first + (second - kTBase);
    static const std::unordered_map<std::uint64_t, char32_t> table = [] {
        std::unordered_map<std::uint64_t, char32_t> m;
        m.reserve(std::size(kCompositions));
        for (const auto& e : kCompositions) m.emplace((std::uint64_t{e[0]} << 32) | e[1], e[2]);
        return m;
    }();
    const auto it = table.find((std::uint64_t{first} << 32) | second);
    return it == table.end() ? 0 : it->second;
}

// Final_Sigma class: 1 case-ignorable, 2 cased (and not case-ignorable), 0 neither.
unsigned sigmaClass(char32_t c) { return c > kMaxCodePoint ? 0 : runValue(kSigmaRuns, c, 2); }

}  // namespace

std::string_view dataVersion() { return kUnicodeVersion; }

std::u32string decodeUtf8(std::string_view s) {
    std::u32string out;
    out.reserve(s.size());
    const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
    std::size_t i = 0;
    while (i < s.size()) {
        const unsigned b0 = byte(i);
        if (b0 < 0x80) {
            out.push_back(b0);
            ++i;
            continue;
        }
        int need = 0;
        char32_t c = 0;
        unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte (Unicode table 3-7)
        if (b0 >= 0xC2 && b0 <= 0xDF) {
            need = 1, c = b0 & 0x1F;
        } else if (b0 >= 0xE0 && b0 <= 0xEF) {
            need = 2, c = b0 & 0x0F;
            if (b0 == 0xE0) lo = 0xA0;
            if (b0 == 0xED) hi = 0x9F;
        } else if (b0 >= 0xF0 && b0 <= 0xF4) {
            need = 3, c = b0 & 0x07;
            if (b0 == 0xF0) lo = 0x90;
            if (b0 == 0xF4) hi = 0x8F;
        } else {
            out.push_back(kReplacement);
            ++i;
            continue;
        }
        std::size_t j = i + 1;
        bool ok = true;
        for (int k = 0; k < need; ++k, ++j) {
            const unsigned b = j < s.size() ? byte(j) : 0;
            const unsigned first = k == 0 ? lo : 0x80, last = k == 0 ? hi : 0xBF;
            if (j >= s.size() || b < first || b > last) {
                ok = false;
                break;
            }
            c = (c << 6) | (b & 0x3F);
        }
        out.push_back(ok ? c : kReplacement);
        i = j;  // a maximal subpart is consumed as one replacement
    }
    return out;
}

void appendUtf8(std::string& out, char32_t c) {
    if (c > kMaxCodePoint || (c >= 0xD800 && c < 0xE000)) c = kReplacement;
    if (c < 0x80) {
        out.push_back(static_cast<char>(c));
    } else if (c < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (c >> 6)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (c >> 12)));
        out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (c >> 18)));
        out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
}

std::string encodeUtf8(std::u32string_view text) {
    std::string out;
    out.reserve(text.size());
    for (char32_t c : text) appendUtf8(out, c);
    return out;
}

Category category(char32_t c) {
    if (c > kMaxCodePoint) return Category::Cn;
    return static_cast<Category>(runValue(kCategoryRuns, c, 5));
}

bool isLetter(char32_t c) {
    if (c < 0x80) return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
    return category(c) <= Category::Lo;
}

bool isNumber(char32_t c) {
    if (c < 0x80) return c >= '0' && c <= '9';
    const Category k = category(c);
    return k >= Category::Nd && k <= Category::No;
}

bool isControlLike(char32_t c) { return category(c) >= Category::Cc; }

bool isWhiteSpace(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool isPythonSpace(char32_t c) { return isWhiteSpace(c) || (c >= 0x1C && c <= 0x1F); }

bool isPythonWordChar(char32_t c) { return c == '_' || isLetter(c) || isNumber(c); }

int decimalValue(char32_t c) {
    if (c < 0x80) return (c >= '0' && c <= '9') ? static_cast<int>(c - '0') : -1;
    if (category(c) != Category::Nd) return -1;
    // The start of c's Nd run: digits come in aligned runs of ten.
    const std::uint32_t key = (static_cast<std::uint32_t>(c) << 5) | 31u;
    const auto* it = std::upper_bound(std::begin(kCategoryRuns), std::end(kCategoryRuns), key) - 1;
    return static_cast<int>((c - (*it >> 5)) % 10);
}

void appendLowercase(std::u32string& out, char32_t c) {
    if (c < 0x80) {
        out.push_back((c >= 'A' && c <= 'Z') ? c + 32 : c);
        return;
    }
    if (c == 0x130) {  // LATIN CAPITAL LETTER I WITH DOT ABOVE: SpecialCasing, unconditional
        out.push_back(U'i');
        out.push_back(0x307);
        return;
    }
    const auto* it = std::lower_bound(std::begin(kLowercase), std::end(kLowercase), c,
                                      [](const std::uint32_t(&e)[2], char32_t v) { return e[0] < v; });
    out.push_back((it != std::end(kLowercase) && (*it)[0] == c) ? static_cast<char32_t>((*it)[1]) : c);
}

std::u32string lowercasePython(std::u32string_view text) {
    std::u32string out;
    out.reserve(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] != 0x3A3) {
            appendLowercase(out, text[i]);
            continue;
        }
        // Final_Sigma: cased (case-ignorable)* SIGMA not followed by (case-ignorable)* cased.
        std::size_t j = i;
        while (j > 0 && sigmaClass(text[j - 1]) == 1) --j;
        bool final = j > 0 && sigmaClass(text[j - 1]) == 2;
        if (final) {
            std::size_t k = i + 1;
            while (k < text.size() && sigmaClass(text[k]) == 1) ++k;
            final = k == text.size() || sigmaClass(text[k]) != 2;
        }
        out.push_back(final ? 0x3C2 : 0x3C3);
    }
    return out;
}

std::u32string nfc(std::u32string_view text) {
    // Quick check: nothing below U+0300 decomposes into, or composes with, anything that
    // is not itself NFC.
    if (std::all_of(text.begin(), text.end(), [](char32_t c) { return c < 0x300; })) return std::u32string(text);
    std::u32string d;
    d.reserve(text.size() + text.size() / 4);
    for (char32_t c : text) appendDecomposed(d, c);
    // Canonical ordering: stable sort of each run of non-starters by combining class.
    for (std::size_t i = 0; i < d.size();) {
        if (combiningClass(d[i]) == 0) {
            ++i;
            continue;
        }
        std::size_t j = i;
        while (j < d.size() && combiningClass(d[j]) != 0) ++j;
        std::stable_sort(d.begin() + static_cast<std::ptrdiff_t>(i), d.begin() + static_cast<std::ptrdiff_t>(j),
                         [](char32_t a, char32_t b) { return combiningClass(a) < combiningClass(b); });
        i = j;
    }
    // Canonical composition.
    std::u32string out;
    out.reserve(d.size());
    std::size_t starter = std::u32string::npos;
    for (char32_t c : d) {
        const unsigned cc = combiningClass(c);
        if (starter != std::u32string::npos) {
            const bool adjacent = starter + 1 == out.size();
            const unsigned lastCc = adjacent ? 0 : combiningClass(out.back());
            if (adjacent || (lastCc != 0 && lastCc < cc)) {
                if (const char32_t composite = composePair(out[starter], c)) {
                    out[starter] = composite;
                    continue;
                }
            }
        }
        if (cc == 0) starter = out.size();
        out.push_back(c);
    }
    return out;
}

}  // namespace tessera::unicode
