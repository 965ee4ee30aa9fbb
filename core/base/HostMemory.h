// What the machine has left for this process: a system query, apart from the estimate of what a
// run needs (core/cpu/HostMemoryEstimate.h), so that the CPU backend can size its buffers by it
// without depending on the estimate. Qt-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tessera {

// What this process may still allocate: the least of MemAvailable from /proc/meminfo, the
// cgroup's memory limit less its usage, and the process's own limits less what it already
// uses: its address space (RLIMIT_AS, `ulimit -v`) less its mapped size (VmSize), its data
// (RLIMIT_DATA, `ulimit -d`) less its data size (VmData). `source` says which, with the
// numbers, for messages.
struct HostMemory {
    std::uint64_t availableBytes = 0;
    std::string source;
    // The source is one of the process's limits: it counts address space mapped, touched or not
    // (kThreadAddressSpaceBytes), where the others count memory in use.
    bool countsAddressSpace = false;
};
// Address space each computing thread maps beyond the data it allocates, which counts against
// RLIMIT_AS (and RLIMIT_DATA) though little of it is ever touched: OpenBLAS's GEMM buffer for
// the thread (BUFFER_SIZE: 128 MiB in x86-64 builds; OpenBLAS retries a failed one without
// end), its stack (8 MiB, RLIMIT_STACK's usual default) and glibc's malloc arena (64 MiB
// reserved per thread arena).
inline constexpr std::uint64_t kThreadAddressSpaceBytes = std::uint64_t{200} << 20;
std::optional<HostMemory> availableHostMemory();
// "MemAvailable:   19555376 kB" in /proc/meminfo text, in bytes; nullopt when absent.
std::optional<std::uint64_t> parseMemAvailable(std::string_view meminfo);
// A "Key:   1234 kB" line of /proc/meminfo or /proc/self/status text (key without the colon:
// "VmSize"), in bytes; nullopt when absent or malformed.
std::optional<std::uint64_t> parseKibLine(std::string_view text, std::string_view key);

// A process limit and what the process already holds of it: what is left, and how messages
// name it ("the process's address-space limit (RLIMIT_AS, ulimit -v) of 1.0 GiB less the
// 212.4 MiB already mapped").
struct ProcessMemoryLimit {
    std::uint64_t limitBytes = 0, usedBytes = 0;
    std::string_view limitName;  // "address-space limit (RLIMIT_AS, ulimit -v)"
    std::string_view usedName;   // "already mapped"
    std::uint64_t leftBytes() const { return limitBytes > usedBytes ? limitBytes - usedBytes : 0; }
    std::string describe() const;
};
// This process's RLIMIT_AS and RLIMIT_DATA soft limits with its VmSize and VmData, where a limit
// is set (not RLIM_INFINITY) and /proc/self/status gives the use; nullopt otherwise.
std::optional<ProcessMemoryLimit> addressSpaceLimit();
std::optional<ProcessMemoryLimit> dataLimit();

}  // namespace tessera
