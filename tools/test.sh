#!/usr/bin/env bash
# The whole test suite: install what is missing, build everything with warnings as
# errors (the CUDA backend too when /usr/local/cuda has the toolkit and cuDNN), run
# every Qt Test suite under CTest, then build the core library and its tests again
# with AddressSanitizer + UndefinedBehaviorSanitizer (LeakSanitizer included) together with the
# window's suites (offscreen: settings, runs, cancel, export) and run those,
# then the libFuzzer target of every parser (tests/fuzz, clang): seeds replayed, then fuzzed.
# GPU suites skip (QSKIP) with a message where no CUDA device is present.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
jobs="$(nproc)"

# CI needs no debug info in the plain build (the sanitized build below keeps it): -O2 without -g.
cmake -S . -B build-test -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_WERROR=ON \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG" -DCMAKE_CUDA_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG"
cmake --build build-test --parallel "$jobs"
(cd build-test && ctest --output-on-failure --timeout 900 -j "$jobs")

# One sanitized tree for the core suites and the window's (the core library is built once).
# -g1: line tables only (sanitizer reports still name file and line), 10 min instead of 13.5 on a
# 2-core machine.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTESSERA_CUDA=OFF \
  -DTESSERA_SANITIZE=ON -DTESSERA_WERROR=ON -DCMAKE_CXX_FLAGS="-O1" -DCMAKE_CXX_FLAGS_DEBUG="-g1"
asan_suites=$(for f in tests/core/tst_*.cpp tests/ui/tst_*.cpp; do
  l="$(basename "$(dirname "$f")")"; echo "${l}_$(basename "$f" .cpp)"; done)
# shellcheck disable=SC2086 # one target per word
cmake --build build-asan --parallel "$jobs" --target $asan_suites
(cd build-asan && ctest --output-on-failure --timeout 900 -j "$jobs" -L '^core$')
(cd build-asan && QT_QPA_PLATFORM=offscreen ctest --output-on-failure --timeout 900 -L '^ui$')

# Every parser's libFuzzer target (tests/fuzz/README.md), built with clang: the committed seeds
# replayed once, then each target fuzzed for TESSERA_FUZZ_SECONDS (20 s), "$jobs" at a time.
cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_FUZZ=ON -DTESSERA_WERROR=ON
cmake --build build-fuzz --parallel "$jobs"
(cd build-fuzz && ctest --output-on-failure -L '^fuzz-replay$' && ctest --output-on-failure -j "$jobs" -L '^fuzz-run$')
