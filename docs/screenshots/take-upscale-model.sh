#!/bin/sh
# Screenshot of a x4 upscale of a photograph through an upscale model, then tiled image-to-image,
# with the before/after split and the Start image group's Upscaler in view, under Xvfb at
# 1366x768, on the CPU engine with the bundled model and a random-weight Real-ESRGAN Compact
# test model (its output is the photograph's pixels enlarged with a faint random texture; the
# bundled model then adds its detail). Run from the repository root after building build/ (the
# window, tessera):
#
#   sh docs/screenshots/take-upscale-model.sh   # writes docs/screenshots/upscale-model-before-after-1366x768.png
#
# The window starts with a throw-away home folder holding a models folder as A1111 keeps one
# (models/ESRGAN/, models/upscale_models/), loads a preset naming the upscale model by name (as a
# run PNG's "SD upscale upscaler" does), runs it, and takes the picture when the run ends.
set -eu
# shellcheck source=docs/screenshots/xvfb.sh
. docs/screenshots/xvfb.sh

home="$work/home"
models="$home/models"
mkdir -p "$models/ESRGAN" "$models/upscale_models" "$home/Pictures"
cp tests/data/upscale/compact_x4/model.safetensors "$models/ESRGAN/4x-realesr-compact-test.safetensors"
cp tests/data/upscale/esrgan_old_x4/model.safetensors "$models/ESRGAN/4x-esrgan-test.safetensors"
cp tests/data/upscale/span_x2_nonorm_noeval/model.safetensors "$models/upscale_models/2x-span-test.safetensors"
cp docs/model/evidence/photo128.jpg "$home/Pictures/dandelion.jpg"

cat > "$work/upscale-model.json" <<EOF
{"label": "dandelion x4: upscale model, then image-to-image", "init": "$home/Pictures/dandelion.jpg",
 "upscale": 4, "upscale_model": "4x-realesr-compact-test", "strength": 0.3, "seed": 3, "steps": 20,
 "scheduler": "ddim", "tile": 64, "overlap": 16, "window": "hann", "batch": 8, "precision": "fp32",
 "backend": "cpu", "preview_every": 5}
EOF

xvfb_start :97 1366x768
DISPLAY=:97 QT_QPA_PLATFORM=xcb HOME="$home" "$bin" --fresh --history "$work/history" --models "$models" \
    --preset "$work/upscale-model.json" --run --show before-after \
    --screenshot "$out/upscale-model-before-after-1366x768.png"
xvfb_stop
echo "written: $out/upscale-model-before-after-1366x768.png"
