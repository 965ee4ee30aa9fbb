#!/bin/sh
# Screenshots of the window with a FLUX.1 model chosen: the settings' prompt group as FLUX.1-dev
# takes it (the prompt and the Guidance box open; the negative prompt, CFG and clip skip disabled,
# each saying why), under Xvfb at 1366x768 and 1920x1080, with the tiny FLUX.1-dev-shaped test
# pipeline (tests/data/flux). No run: that folder holds no text encoders. Run from the repository
# root after building (the window, tessera):
#
#   sh docs/screenshots/take-flux.sh   # writes docs/screenshots/flux-1366x768.png and -1920x1080.png
set -eu
# shellcheck source=docs/screenshots/xvfb.sh
. docs/screenshots/xvfb.sh

home="$work/home"
models="$home/models"
mkdir -p "$models/diffusers"
cp -r tests/data/flux "$models/diffusers/flux1-dev-test-pipeline"

cat > "$work/flux.json" <<JSON
{"label": "FLUX.1-dev, 2048x1536 in 1024 px tiles", "model": "$models/diffusers/flux1-dev-test-pipeline",
 "prompt": "a lighthouse on a cliff at dusk, waves below, detailed", "negative_prompt": "",
 "guidance": 3.5, "width": 2048, "height": 1536, "tile": 1024, "overlap": 128, "seed": 7, "steps": 20,
 "scheduler": "euler", "window": "hann", "batch": "auto", "precision": "bf16", "graphs": "step"}
JSON

for size in 1366x768 1920x1080; do
    xvfb_start :97 "$size"
    DISPLAY=:97 QT_QPA_PLATFORM=xcb HOME="$home" "$bin" --fresh --history "$work/history-$size" --models "$models" \
        --preset "$work/flux.json" --screenshot "$out/flux-$size.png"
    xvfb_stop
    echo "written: $out/flux-$size.png"
done
