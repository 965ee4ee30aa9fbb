#!/usr/bin/env bash
# The main job: install what is missing, build (CMake preset release, in build/), and render the
# default preset headless into out/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
cmake --preset release
cmake --build --preset release --parallel "$(nproc)"
mkdir -p out
./build/app/tessera-cli render --preset resources/presets/quick-cpu.json --out out/
ls -l out/
