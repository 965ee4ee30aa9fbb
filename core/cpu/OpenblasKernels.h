// Which OpenBLAS kernels the CPU backend computes with, and how a front end makes OpenBLAS load
// the right ones for this CPU (core/cpu/CpuBackend.h reports them in its device line). Qt-free.
#pragma once

#include <string>
#include <string_view>

namespace tessera {

// OpenBLAS reads OPENBLAS_CORETYPE only when it loads, and under some hypervisors it takes an
// AVX2 or AVX-512 CPU it does not recognise for an SSE3 one (seen on a GPU machine's 16-core
// "Intel(R) Xeon(R) Processor": Prescott kernels, 2.5x slower). The OPENBLAS_CORETYPE that gives
// such a CPU its own kernels: "SkylakeX" (AVX-512) or "Haswell" (AVX2 and FMA) when `loaded`
// (openblas_get_corename) is a pre-AVX2 core; empty where nothing needs changing.
std::string openblasCoreTypeFor(std::string_view loaded, bool avx2Fma, bool avx512);
// Call first thing in main(), before any thread starts: where openblasCoreTypeFor names a core
// type and neither OPENBLAS_CORETYPE nor kOpenblasRestartVariable is set, sets both and starts
// this program again in place (execv of /proc/self/exe with the same arguments). Returns where
// nothing needs changing or the exec failed. The CPU backend's device line says what was done.
void restartWithOpenblasKernelsForThisCpu(char** argv);
// Set by that restart to the core OpenBLAS had loaded before (and a guard against restarting twice).
inline constexpr const char* kOpenblasRestartVariable = "TESSERA_OPENBLAS_RESTARTED_FROM";
// The OpenBLAS kernels this process runs ("OpenBLAS Haswell"), with a warning when they are older
// than the CPU: for the CPU backend's device line.
std::string openblasKernels();

}  // namespace tessera
