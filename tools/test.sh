#!/usr/bin/env bash
# The whole test suite, exactly what CI runs (.ci/run), in the CMake presets of CMakePresets.json:
#   format     clang-format --dry-run --Werror over every C++/CUDA file (.clang-format)
#   dev        everything built with warnings as errors (the CUDA backend too when /usr/local/cuda
#              has the toolkit and cuDNN); every Qt Test suite (GPU suites skip without a device)
#   asan       one clang tree with AddressSanitizer + UBSan + LeakSanitizer: the core and window
#              suites (offscreen: settings, runs, cancel, export) and the libFuzzer target of every
#              parser (tests/fuzz), whose libraries it shares; every committed seed replayed
#   tidy       clang-tidy (.clang-tidy) over core/, app/ and ui/ with the asan tree's compile commands
#              (the files changed since .ci/tidy-baseline; TESSERA_TIDY_ALL=1: every file)
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
# The .cpp files clang-tidy checks. .ci/tidy-baseline names a commit at which every file passed;
# from there only the .cpp files changed since (working tree included) and those whose own header
# changed are checked: .clang-tidy reports in the main file only (no HeaderFilterRegex), so an
# unchanged .cpp keeps its result. Every file when the baseline is absent, unknown to this clone
# (a shallow one) or older than a change to .clang-tidy, or with TESSERA_TIDY_ALL=1; move the
# baseline forward only after such a full pass.
tidy_files() {
    local base cpp changed
    base=$(cat .ci/tidy-baseline 2>/dev/null || true)
    if [ -n "${TESSERA_TIDY_ALL:-}" ] || [ -z "$base" ] || ! git cat-file -e "$base^{commit}" 2>/dev/null ||
        ! git diff --quiet "$base" -- .clang-tidy; then
        git ls-files -z 'core/*.cpp' 'app/*.cpp' 'ui/*.cpp'
        return
    fi
    changed=$(git diff --name-only "$base" -- core app ui)
    git ls-files 'core/*.cpp' 'app/*.cpp' 'ui/*.cpp' | while read -r cpp; do
        if grep -qxF -e "$cpp" -e "${cpp%.cpp}.h" <<<"$changed"; then printf '%s\0' "$cpp"; fi
    done
}
# clang-tidy straight from xargs (run-clang-tidy prints every command line); CUDA sources and the
# tests are not checked (.clang-tidy says why).
tidy() {
    local files
    files=$(tidy_files | tr '\0' '\n')
    echo "tidy: $(grep -c . <<<"$files" || true) of $(git ls-files 'core/*.cpp' 'app/*.cpp' 'ui/*.cpp' | wc -l) files"
    [ -n "$files" ] || return 0
    tr '\n' '\0' <<<"$files" | xargs -0 -n 1 -P "$jobs" clang-tidy -p build-asan --quiet 2>&1 |
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
