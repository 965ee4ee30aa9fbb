// Fuzz target: core/BoundedInput's text helpers, which every other reader trusts.
//   - toValidUtf8 always gives valid UTF-8, leaves valid UTF-8 alone and is idempotent;
//   - excerpt gives valid UTF-8 without control characters, of bounded length;
//   - jsonNestingDepth equals the real depth of every valid JSON text (parsed by nlohmann,
//     whose parser does not recurse), so the depth guard cannot be slipped past;
//   - parseBoundedJson returns a value of the measured depth, within its limit and from text
//     without NUL bytes, or throws InputFileError with a readable message.
#include "tests/fuzz/FuzzSupport.h"

#include <algorithm>

using namespace tessera;

namespace {

int depthOf(const nlohmann::json& value) {
    if (!value.is_structured()) return 0;
    int deepest = 0;
    for (const auto& item : value) deepest = std::max(deepest, depthOf(item));
    return deepest + 1;
}

void checkUtf8(std::string_view text) {
    const std::string valid = toValidUtf8(text);
    if (!isValidUtf8(valid)) fuzz::violation("toValidUtf8 gave invalid UTF-8");
    if (isValidUtf8(text) && valid != text) fuzz::violation("toValidUtf8 changed valid UTF-8");
    if (toValidUtf8(valid) != valid) fuzz::violation("toValidUtf8 is not idempotent");
}

void checkExcerpt(std::string_view text, std::size_t maxChars) {
    const std::string shown = excerpt(text, maxChars);
    if (!isValidUtf8(shown)) fuzz::violation("excerpt gave invalid UTF-8");
    // Each character shown is at most 4 bytes (a UTF-8 sequence or "\xNN"), then "... (N bytes)".
    if (shown.size() > 4 * maxChars + 32)
        fuzz::violation("excerpt of " + std::to_string(maxChars) + " characters is " + std::to_string(shown.size()) +
                        " bytes");
    for (const char c : shown)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) fuzz::violation("excerpt kept a control character");
}

void checkDepth(std::string_view text) {
    constexpr int kLimit = 8;
    const int measured = jsonNestingDepth(text, 1 << 20);
    // nlohmann stops at a NUL byte as at the end of input; parseBoundedJson refuses NULs.
    const bool hasNul = text.find('\0') != std::string_view::npos;
    if (!hasNul) {
        const nlohmann::json parsed = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
        if (!parsed.is_discarded() && depthOf(parsed) != measured)
            fuzz::violation("jsonNestingDepth says " + std::to_string(measured) + " for JSON of depth " +
                            std::to_string(depthOf(parsed)));
    }
    try {
        const nlohmann::json bounded = parseBoundedJson(text, "fuzz", "the fuzz input", kLimit);
        if (hasNul) fuzz::violation("parseBoundedJson accepted text holding a NUL byte");
        if (depthOf(bounded) != measured || measured > kLimit)
            fuzz::violation("parseBoundedJson returned JSON of depth " + std::to_string(depthOf(bounded)) +
                            " (measured " + std::to_string(measured) + ", limit " + std::to_string(kLimit) + ")");
    } catch (const InputFileError& e) {
        fuzz::checkRejection(e);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text = fuzz::asText(data, size);
    checkUtf8(text);
    checkExcerpt(text, size == 0 ? 0 : data[0] % 80);
    checkDepth(text);
    return 0;
}
