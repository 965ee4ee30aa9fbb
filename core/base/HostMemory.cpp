#include "core/base/HostMemory.h"

#include <charconv>
#include <cstdint>
#include <fstream>
#include <sstream>

namespace tessera {

std::optional<std::uint64_t> parseMemAvailable(std::string_view meminfo) {
    constexpr std::string_view key = "MemAvailable:";
    std::size_t at = 0;
    while ((at = meminfo.find(key, at)) != std::string_view::npos) {
        if (at == 0 || meminfo[at - 1] == '\n') break;
        at += key.size();
    }
    if (at == std::string_view::npos) return std::nullopt;
    std::size_t i = at + key.size();
    while (i < meminfo.size() && (meminfo[i] == ' ' || meminfo[i] == '\t')) ++i;
    std::uint64_t kib = 0;
    const auto [ptr, ec] = std::from_chars(meminfo.data() + i, meminfo.data() + meminfo.size(), kib);
    if (ec != std::errc() || ptr == meminfo.data() + i) return std::nullopt;
    const std::string_view rest = meminfo.substr(static_cast<std::size_t>(ptr - meminfo.data()));
    if (rest.rfind(" kB", 0) != 0) return std::nullopt;
    if (kib > UINT64_MAX / 1024) return std::nullopt;
    return kib * 1024;
}

namespace {

std::optional<std::uint64_t> readNumberFile(const char* path) {
    std::ifstream in(path);
    std::string text;
    if (!(in >> text) || text == "max") return std::nullopt;
    std::uint64_t value = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
    return value;
}

}  // namespace

std::optional<HostMemory> availableHostMemory() {
    std::optional<HostMemory> best;
    {
        std::ifstream in("/proc/meminfo");
        std::stringstream text;
        text << in.rdbuf();
        if (const auto bytes = parseMemAvailable(text.str()))
            best = HostMemory{*bytes, "MemAvailable in /proc/meminfo"};
    }
    // cgroup v2 (the process's own group is mounted at /sys/fs/cgroup in a container).
    const auto limit = readNumberFile("/sys/fs/cgroup/memory.max");
    const auto used = readNumberFile("/sys/fs/cgroup/memory.current");
    if (limit && used) {
        const std::uint64_t left = *limit > *used ? *limit - *used : 0;
        if (!best || left < best->availableBytes)
            best = HostMemory{left, "the cgroup's memory.max less memory.current"};
    }
    return best;
}

}  // namespace tessera
