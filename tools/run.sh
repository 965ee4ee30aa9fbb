#!/usr/bin/env bash
# The main job: install what is missing, build (Release), and render the default
# preset headless into out/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF
cmake --build build --parallel "$(nproc)"
mkdir -p out
./build/app/tessera-cli render --preset resources/presets/quick-cpu.json --out out/
ls -l out/
