// Numbers in messages and in the parameters line: the shortest text that reads back as exactly
// the same value, in plain notation in the everyday range (0.0001 rather than 1e-04) and with an
// exponent outside it (1e+30, 1e-09); "inf", "nan" as they are. Qt-free, header-only.
#pragma once

#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>

namespace tessera {

template <typename Real>
std::string formatNumber(Real value) {
    std::array<char, 128> buffer{};
    const Real magnitude = std::abs(value);
    const bool plain = std::isfinite(value) && (magnitude == 0 || (magnitude >= Real(1e-6) && magnitude < Real(1e9)));
    const auto result = plain ? std::to_chars(buffer.data(), buffer.data() + buffer.size(), value, std::chars_format::fixed)
                              : std::to_chars(buffer.data(), buffer.data() + buffer.size(), value);
    return std::string(buffer.data(), result.ptr);
}

// 1234567 -> "1,234,567" (parameter counts).
inline std::string withThousands(std::int64_t n) {
    const std::string digits = std::to_string(n);
    std::string out;
    for (std::size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && digits[i - 1] != '-' && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return out;
}

}  // namespace tessera
