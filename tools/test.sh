#!/usr/bin/env bash
# The whole test suite: install what is missing, build everything with warnings as
# errors (the CUDA backend too when /usr/local/cuda has the toolkit and cuDNN), run
# every Qt Test suite under CTest, then build the core library and its tests again
# with AddressSanitizer + UndefinedBehaviorSanitizer (LeakSanitizer included) and run
# those, then the same for the window's suites (offscreen: settings, runs, cancel, export),
# then the libFuzzer target of every parser (tests/fuzz, clang): seeds replayed, then fuzzed.
# GPU suites skip (QSKIP) with a message where no CUDA device is present.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
jobs="$(nproc)"

cmake -S . -B build-test -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_WERROR=ON
cmake --build build-test --parallel "$jobs"
(cd build-test && ctest --output-on-failure --timeout 900 -j "$jobs")

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTESSERA_CORE_ONLY=ON \
  -DTESSERA_SANITIZE=ON -DTESSERA_WERROR=ON -DCMAKE_CXX_FLAGS="-O1"
cmake --build build-asan --parallel "$jobs"
(cd build-asan && ctest --output-on-failure --timeout 900 -j "$jobs")

cmake -S . -B build-asan-ui -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTESSERA_CUDA=OFF \
  -DTESSERA_SANITIZE=ON -DTESSERA_WERROR=ON -DCMAKE_CXX_FLAGS="-O1"
ui_suites=$(for f in tests/ui/tst_*.cpp; do n="$(basename "$f" .cpp)"; echo "ui_${n}"; done)
# shellcheck disable=SC2086 # one target per word
cmake --build build-asan-ui --parallel "$jobs" --target $ui_suites
(cd build-asan-ui && QT_QPA_PLATFORM=offscreen ctest --output-on-failure --timeout 900 -R '^ui\.')

# Every parser's libFuzzer target (tests/fuzz/README.md), built with clang: the committed seeds
# replayed once, then each target fuzzed for TESSERA_FUZZ_SECONDS (20 s), "$jobs" at a time.
cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_FUZZ=ON -DTESSERA_WERROR=ON
cmake --build build-fuzz --parallel "$jobs"
(cd build-fuzz && ctest --output-on-failure -L '^fuzz-replay$' && ctest --output-on-failure -j "$jobs" -L '^fuzz-run$')
