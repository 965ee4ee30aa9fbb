// What the machine has left for this process: a system query, apart from the estimate of what a
// run needs (core/cpu/HostMemoryEstimate.h), so that the CPU backend can size its buffers by it
// without depending on the estimate. Qt-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tessera {

// What this process may still allocate: MemAvailable from /proc/meminfo, or the cgroup's
// memory limit less its usage when that is smaller. `source` says which, for messages.
struct HostMemory {
    std::uint64_t availableBytes = 0;
    std::string source;
};
std::optional<HostMemory> availableHostMemory();
// "MemAvailable:   19555376 kB" in /proc/meminfo text, in bytes; nullopt when absent.
std::optional<std::uint64_t> parseMemAvailable(std::string_view meminfo);

}  // namespace tessera
