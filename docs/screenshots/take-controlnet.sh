#!/bin/sh
# Screenshots of a ControlNet-tile upscale in the window: a photograph enlarged 3x by image-to-image
# with the tile ControlNet steering every tile (its control image the start image, through
# tile_resample), under Xvfb at 1366x768 and 1920x1080, on the CPU engine with the tiny SD 1.x test
# pipeline and the tiny ControlNet made for it (random weights: the picture shows the window, not
# the models' quality). Run from the repository root after building build/ (the window, tessera):
#
#   sh docs/screenshots/take-controlnet.sh   # writes docs/screenshots/controlnet-1366x768.png and -1920x1080.png
#
# The models folder is laid out as A1111 keeps one: the pipeline in Stable-diffusion/, the ControlNet
# in ControlNet/ (named by the preset as A1111's PNG parameters name it, without a path). The
# pictures are taken when the run ends, with the before/after split on the canvas, the settings
# scrolled to the ControlNet group and the hint the ControlNet saw in the "ControlNet hint" tab.
set -eu
# shellcheck source=docs/screenshots/xvfb.sh
. docs/screenshots/xvfb.sh

home="$work/home"
models="$home/models"
mkdir -p "$models/Stable-diffusion" "$models/ControlNet" "$home/Pictures"
cp -r tests/data/sdpipeline/sd1 "$models/Stable-diffusion/sd15-test-pipeline"
cp -r tests/data/controlnet/pipeline/net0 "$models/ControlNet/control_tile_test"
cp docs/model/evidence/photo128.jpg "$home/Pictures/dandelion.jpg"

cat > "$work/controlnet.json" <<JSON
{"label": "dandelion x3: image-to-image with the tile ControlNet", "model": "$models/Stable-diffusion/sd15-test-pipeline",
 "prompt": "a dandelion seed head in a meadow, soft evening light, detailed", "negative_prompt": "blurry",
 "cfg": 6, "init": "$home/Pictures/dandelion.jpg", "upscale": 3, "strength": 0.3, "seed": 3, "steps": 20,
 "scheduler": "euler_a", "tile": 128, "overlap": 32, "window": "hann", "batch": "auto", "precision": "fp32",
 "backend": "cpu", "preview_every": 2,
 "controlnets": [{"model": "control_tile_test", "weight": 0.8, "start": 0, "end": 0.8, "mode": "balanced",
                  "preprocessor": "tile_resample", "down_sampling": 2}]}
JSON

for size in 1366x768 1920x1080; do
    xvfb_start :97 "$size"
    DISPLAY=:97 QT_QPA_PLATFORM=xcb HOME="$home" "$bin" --fresh --history "$work/history-$size" --models "$models" \
        --preset "$work/controlnet.json" --run --show controlnet --screenshot "$out/controlnet-$size.png"
    xvfb_stop
    echo "written: $out/controlnet-$size.png"
done
