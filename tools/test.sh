#!/usr/bin/env bash
# The whole test suite, exactly what CI runs (.ci/run), in the CMake presets of CMakePresets.json:
#   format     clang-format --dry-run --Werror over every C++/CUDA file (.clang-format)
#   dev        everything built with warnings as errors (the CUDA backend too when /usr/local/cuda
#              has the toolkit and cuDNN); every Qt Test suite (GPU suites skip without a device)
#   asan       one clang tree with AddressSanitizer + UBSan + LeakSanitizer: the core and window
#              suites (offscreen: settings, runs, cancel, export) and the libFuzzer target of every
#              parser (tests/fuzz), whose libraries it shares; every committed seed replayed
#   tidy       clang-tidy (.clang-tidy) over core/, app/ and ui/ with the asan tree's compile commands
#   fuzz       each fuzz target fuzzed for TESSERA_FUZZ_SECONDS (tests/fuzz/README.md: longer runs)
# A line "phase NAME: N s" per phase closes the log, also when a phase fails.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc)"

phases=()
current=""
started=$SECONDS
phase_report() {
    local status=$?
    if [ -n "$current" ]; then phases+=("phase $current: $((SECONDS - current_began)) s (failed)"); fi
    for line in "${phases[@]}"; do echo "$line"; done
    echo "phase total: $((SECONDS - started)) s"
    exit "$status"
}
trap phase_report EXIT
# run_phase NAME COMMAND...: runs the command (set -e stops the script where it fails) and
# records how long it took.
run_phase() {
    current="$1"
    current_began=$SECONDS
    shift
    echo "=== phase $current"
    "$@"
    phases+=("phase $current: $((SECONDS - current_began)) s")
    current=""
}

format_check() {
    git ls-files -z '*.h' '*.cpp' '*.cu' '*.cuh' | xargs -0 -n 40 -P "$jobs" clang-format --dry-run --Werror
}
dev() {
    cmake --preset dev
    cmake --build --preset dev --parallel "$jobs"
}
dev_tests() { ctest --preset dev -j "$jobs"; }
asan() {
    cmake --preset asan
    cmake --build --preset asan --parallel "$jobs"
}
asan_tests() { ctest --preset asan -j "$jobs"; }
# clang-tidy straight from xargs (run-clang-tidy prints every command line); CUDA sources and the
# tests are not checked (.clang-tidy says why).
tidy() {
    git ls-files -z 'core/*.cpp' 'app/*.cpp' 'ui/*.cpp' |
        xargs -0 -n 1 -P "$jobs" clang-tidy -p build-asan --quiet 2>&1 |
        { grep -v '^[0-9]* warnings\? generated\.$' || true; }
}
fuzz() { ctest --preset asan-fuzz -j "$jobs"; }

run_phase deps bash tools/install-deps.sh
run_phase format format_check
run_phase dev-build dev
run_phase dev-test dev_tests
run_phase asan-build asan
run_phase asan-test asan_tests
run_phase tidy tidy
run_phase fuzz fuzz
