// Numbers in messages and in the parameters line: the shortest text that reads back as exactly
// the same value, in plain notation in the everyday range (0.0001 rather than 1e-04) and with an
// exponent outside it (1e+30, 1e-09); "inf", "nan" as they are. Qt-free, header-only.
#pragma once

#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

namespace tessera {

template <typename Real>
std::string formatNumber(Real value) {
    std::array<char, 128> buffer{};
    const Real magnitude = std::abs(value);
    const bool plain = std::isfinite(value) && (magnitude == 0 || (magnitude >= Real(1e-6) && magnitude < Real(1e9)));
    const auto result =
        plain ? std::to_chars(buffer.data(), buffer.data() + buffer.size(), value, std::chars_format::fixed)
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

// "27.4 GiB", "512.0 MiB", "800 bytes".
inline std::string formatBytes(std::uint64_t bytes) {
    char text[64];
    constexpr std::uint64_t kMiB = std::uint64_t{1} << 20, kGiB = std::uint64_t{1} << 30;
    if (bytes >= kGiB)
        std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / static_cast<double>(kGiB));
    else if (bytes >= kMiB)
        std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / static_cast<double>(kMiB));
    else
        std::snprintf(text, sizeof text, "%llu bytes", static_cast<unsigned long long>(bytes));
    return text;
}

}  // namespace tessera
