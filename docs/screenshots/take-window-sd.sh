#!/bin/sh
# Screenshots of the window's prompting, model picker, live previews and charts, under Xvfb at
# 1366x768 and 1920x1080, on the CPU engine with the tiny test pipelines. Run from the repository
# root after building build/ (the window, tessera):
#
#   sh docs/screenshots/take-window-sd.sh   # writes docs/screenshots/{window-sd,models}-WxH.png
#
# One window process per size: it loads a preset (an SD 1.x test pipeline, a prompt with
# emphasis, BREAK and an unclosed bracket, the negative prompt weighted), runs it (previews every
# step; the picture is taken when the run ends, charts filled), then opens the model picker on a
# models folder of test models and takes it once the first checkpoint is hashed.
set -eu
# shellcheck source=docs/screenshots/xvfb.sh
. docs/screenshots/xvfb.sh

models="$work/models"
mkdir -p "$models/SD 2"
cp -r tests/data/sdpipeline/sd1 "$models/sd15-test-pipeline"
cp -r tests/data/sdpipeline/sd2 "$models/SD 2/sd21-test-pipeline"
cp -r tests/data/singlefile/sdxl "$models/sdxl-test-pipeline"
cp -r resources/models/default "$models/tessera-default"
cp tests/data/singlefile/sd1.safetensors "$models/tiny-sd1.safetensors"

cat > "$work/sd.json" <<EOF
{"label": "sd1 test pipeline", "model": "$models/sd15-test-pipeline",
 "prompt": "a lighthouse on a cliff, (stormy sea:1.2), [fog], dramatic light BREAK (oil painting",
 "negative_prompt": "blurry, (lowres:1.3)", "cfg": 6, "clip_skip": 1, "width": 256, "height": 192, "tile": 128,
 "overlap": 32, "steps": 6, "seed": 7, "scheduler": "euler_a", "window": "hann", "batch": "auto", "precision": "fp32",
 "backend": "cpu", "preview_every": 1}
EOF

for size in 1366x768 1920x1080; do
    xvfb_start :98 "$size"
    DISPLAY=:98 QT_QPA_PLATFORM=xcb "$bin" --fresh --history "$work/history-$size" --models "$models" \
        --preset "$work/sd.json" --run --screenshot "$out/window-sd-$size.png" --show window \
        --screenshot "$out/models-$size.png" --show models
    xvfb_stop
done
echo "written: $out/window-sd-*.png $out/models-*.png"
