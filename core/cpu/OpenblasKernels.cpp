#include "core/cpu/OpenblasKernels.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <iterator>

#include <cblas.h>
#include <unistd.h>

namespace tessera {

// OpenBLAS picks its kernels from CPUID when it loads, and under some hypervisors (seen on a GPU
// machine's "Intel(R) Xeon(R) Processor") it does not recognise an AVX2/AVX-512 CPU and falls back
// to its SSE3 kernels, two to three times slower. Only the environment can change the choice
// (OPENBLAS_CORETYPE, read when the library loads): the front ends restart themselves with it
// (restartWithOpenblasKernelsForThisCpu), and the record says what ran and what was done.
std::string openblasKernels() {
    const char* name = openblas_get_corename();
    const std::string core = name ? name : "unknown";
    std::string text = "OpenBLAS " + core;
    if (const char* was = std::getenv(kOpenblasRestartVariable); was && *was)
        text +=
            std::string(" (OPENBLAS_CORETYPE set by Tessera: OpenBLAS had loaded its ") + was + " kernels on this CPU)";
#if defined(__x86_64__) || defined(__i386__)
    const std::string suggest = openblasCoreTypeFor(
        core, __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"), __builtin_cpu_supports("avx512f"));
    if (!suggest.empty())
        text += " kernels on a CPU with AVX2: slower than this CPU allows; set OPENBLAS_CORETYPE=" + suggest +
                " before starting Tessera";
#endif
    return text;
}

std::string openblasCoreTypeFor(std::string_view loaded, bool avx2Fma, bool avx512) {
    static const char* const kPreAvx2[] = {"prescott",    "core2",   "penryn",    "dunnington", "nehalem",
                                           "sandybridge", "atom",    "katmai",    "coppermine", "northwood",
                                           "banias",      "opteron", "barcelona", "bobcat",     "generic"};
    std::string lower(loaded);
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const bool old = std::any_of(std::begin(kPreAvx2), std::end(kPreAvx2), [&](const char* k) { return lower == k; });
    if (!old || !avx2Fma) return {};
    return avx512 ? "SkylakeX" : "Haswell";
}

void restartWithOpenblasKernelsForThisCpu(char** argv) {
#if defined(__linux__) && (defined(__x86_64__) || defined(__i386__))
    const char* set = std::getenv("OPENBLAS_CORETYPE");
    const char* restarted = std::getenv(kOpenblasRestartVariable);
    if ((set && *set) || (restarted && *restarted) || !argv || !argv[0]) return;
    const char* name = openblas_get_corename();
    const std::string loaded = name ? name : "unknown";
    const std::string want = openblasCoreTypeFor(
        loaded, __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"), __builtin_cpu_supports("avx512f"));
    if (want.empty()) return;
    if (setenv("OPENBLAS_CORETYPE", want.c_str(), 1) != 0 || setenv(kOpenblasRestartVariable, loaded.c_str(), 1) != 0)
        return;
    execv("/proc/self/exe", argv);
    // The exec failed: go on with the kernels loaded (the record's device line says so).
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv(kOpenblasRestartVariable);
#else
    (void)argv;
#endif
}

}  // namespace tessera
