#include "core/base/HostMemory.h"

#include <sys/resource.h>

#include <charconv>
#include <cstdint>
#include <fstream>
#include <sstream>

#include "core/base/FormatNumber.h"

namespace tessera {

std::optional<std::uint64_t> parseKibLine(std::string_view text, std::string_view key) {
    std::size_t at = 0;
    while ((at = text.find(key, at)) != std::string_view::npos) {
        const bool lineStart = at == 0 || text[at - 1] == '\n';
        const bool colon = at + key.size() < text.size() && text[at + key.size()] == ':';
        if (lineStart && colon) break;
        at += key.size();
    }
    if (at == std::string_view::npos) return std::nullopt;
    std::size_t i = at + key.size() + 1;
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
    std::uint64_t kib = 0;
    const auto [ptr, ec] = std::from_chars(text.data() + i, text.data() + text.size(), kib);
    if (ec != std::errc() || ptr == text.data() + i) return std::nullopt;
    const std::string_view rest = text.substr(static_cast<std::size_t>(ptr - text.data()));
    if (rest.rfind(" kB", 0) != 0) return std::nullopt;
    if (kib > UINT64_MAX / 1024) return std::nullopt;
    return kib * 1024;
}

std::optional<std::uint64_t> parseMemAvailable(std::string_view meminfo) {
    return parseKibLine(meminfo, "MemAvailable");
}

std::string ProcessMemoryLimit::describe() const {
    return "the process's " + std::string(limitName) + " of " + formatBytes(limitBytes) + " less the " +
           formatBytes(usedBytes) + " " + std::string(usedName);
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

std::string readSmallFile(const char* path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

std::optional<ProcessMemoryLimit> processLimit(int resource, std::string_view statusKey, std::string_view limitName,
                                               std::string_view usedName) {
    rlimit limit{};
    if (::getrlimit(resource, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return std::nullopt;
    const std::optional<std::uint64_t> used = parseKibLine(readSmallFile("/proc/self/status"), statusKey);
    if (!used) return std::nullopt;
    ProcessMemoryLimit process;
    process.limitBytes = static_cast<std::uint64_t>(limit.rlim_cur);
    process.usedBytes = *used;
    process.limitName = limitName;
    process.usedName = usedName;
    return process;
}

}  // namespace

std::optional<ProcessMemoryLimit> addressSpaceLimit() {
    return processLimit(RLIMIT_AS, "VmSize", "address-space limit (RLIMIT_AS, ulimit -v)", "already mapped");
}

std::optional<ProcessMemoryLimit> dataLimit() {
    return processLimit(RLIMIT_DATA, "VmData", "data limit (RLIMIT_DATA, ulimit -d)", "of data it already holds");
}

std::optional<HostMemory> availableHostMemory() {
    std::optional<HostMemory> best;
    const auto consider = [&best](std::uint64_t bytes, std::string source, bool addressSpace = false) {
        if (!best || bytes < best->availableBytes) best = HostMemory{bytes, std::move(source), addressSpace};
    };
    if (const auto bytes = parseMemAvailable(readSmallFile("/proc/meminfo")))
        consider(*bytes, "MemAvailable in /proc/meminfo");
    // cgroup v2 (the process's own group is mounted at /sys/fs/cgroup in a container).
    const auto limit = readNumberFile("/sys/fs/cgroup/memory.max");
    const auto used = readNumberFile("/sys/fs/cgroup/memory.current");
    if (limit && used) consider(*limit > *used ? *limit - *used : 0, "the cgroup's memory.max less memory.current");
    // The process's own limits: an allocation past them fails (std::bad_alloc) whatever the
    // machine has free; they count address space mapped, touched or not.
    for (const std::optional<ProcessMemoryLimit>& process : {addressSpaceLimit(), dataLimit()})
        if (process) consider(process->leftBytes(), process->describe(), true);
    return best;
}

}  // namespace tessera
