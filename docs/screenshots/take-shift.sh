#!/bin/sh
# Screenshots of shifted tiles (Tiling: Tile shift "Random (SpotDiffusion)") under Xvfb at 1366x768 and
# 1920x1080, on the CPU engine with the tiny SD 1.x test pipeline. Run from the repository root after
# building build/ (the window, tessera):
#
#   sh docs/screenshots/take-shift.sh   # writes docs/screenshots/tile-shift-{1366x768,1920x1080}.png
#
# A 384x256 run in 128-pixel tiles without overlap (6 tiles a step). The picture is taken when the run
# ends: the tile grid is drawn where the last step's tiles lay, the plan rolled by that step's offset
# (its borders wrap around the image's right and bottom edges), and the Tiling group shows the setting.
set -eu
# shellcheck source=docs/screenshots/xvfb.sh
. docs/screenshots/xvfb.sh

models="$work/models"
mkdir -p "$models/Stable-diffusion"
cp -r tests/data/sdpipeline/sd1 "$models/Stable-diffusion/sd15-test-pipeline"

cat > "$work/shift.json" <<JSON
{"label": "sd1 test pipeline, shifted tiles", "model": "$models/Stable-diffusion/sd15-test-pipeline",
 "prompt": "a lighthouse on a cliff above a stormy sea, dramatic light", "negative_prompt": "blurry", "cfg": 6,
 "width": 384, "height": 256, "tile": 128, "overlap": 0, "tile_shift": "random", "steps": 8, "seed": 11,
 "scheduler": "euler_a", "window": "hann", "batch": "auto", "precision": "fp32", "backend": "cpu",
 "preview_every": 1}
JSON

for size in 1366x768 1920x1080; do
    xvfb_start :95 "$size"
    DISPLAY=:95 QT_QPA_PLATFORM=xcb "$bin" --fresh --history "$work/history-$size" --models "$models" \
        --preset "$work/shift.json" --run --screenshot "$out/tile-shift-$size.png" --show tiling
    xvfb_stop
done
echo "written: $out/tile-shift-1366x768.png $out/tile-shift-1920x1080.png"
