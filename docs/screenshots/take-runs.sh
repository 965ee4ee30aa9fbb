#!/bin/sh
# Screenshots of the before/after view of an upscale and of a run reopened after a restart,
# under Xvfb at 1366x768 and 1920x1080, on the CPU engine with the bundled model. Run from the
# repository root after building build/ (the window, tessera):
#
#   sh docs/screenshots/take-runs.sh            # writes docs/screenshots/{before-after,reopened}-WxH.png
#
# Each size gets a history of its own with three runs, made by three window processes as a
# person would make them: a x4 upscale of docs/model/evidence/photo128.jpg (the before/after
# picture is taken when it ends), a run whose model folder has no weights (it fails, and is
# listed as failed), and a run from noise. A fourth process starts afresh and opens the newest
# run from the history (the reopened picture).
set -eu
# shellcheck source=docs/screenshots/xvfb.sh
. docs/screenshots/xvfb.sh

cat > "$work/upscale.json" <<EOF
{"label": "photo128 x4, strength 0.35", "init": "$PWD/docs/model/evidence/photo128.jpg", "upscale": 4,
 "strength": 0.35, "width": 512, "height": 512, "seed": 3, "steps": 20, "scheduler": "ddim", "tile": 64,
 "overlap": 16, "window": "hann", "batch": 8, "precision": "fp32", "backend": "cpu", "preview_every": 5}
EOF
# The bundled model's configuration without its weights: checked fine, fails when loaded.
mkdir -p "$work/no-weights"
cp resources/models/default/config.json resources/models/default/scheduler_config.json "$work/no-weights/"
cat > "$work/broken.json" <<EOF
{"label": "a model folder without weights", "model": "$work/no-weights", "width": 256, "height": 256, "seed": 5,
 "steps": 20, "tile": 64, "overlap": 16, "batch": 4, "precision": "fp32", "backend": "cpu"}
EOF
cat > "$work/noise.json" <<EOF
{"label": "from noise", "width": 384, "height": 256, "seed": 42, "steps": 20, "scheduler": "ddim", "tile": 64,
 "overlap": 16, "window": "hann", "batch": 4, "precision": "fp32", "backend": "cpu", "preview_every": 5}
EOF

for size in 1366x768 1920x1080; do
    xvfb_start :99 "$size"
    history="$work/history-$size"
    run() { DISPLAY=:99 QT_QPA_PLATFORM=xcb "$bin" --fresh --history "$history" "$@"; }
    run --preset "$work/upscale.json" --run --show before-after --screenshot "$out/before-after-$size.png"
    run --preset "$work/broken.json" --run --screenshot "$work/failed.png"
    run --preset "$work/noise.json" --run --screenshot "$work/noise.png"
    run --show reopened --screenshot "$out/reopened-$size.png"
    xvfb_stop
done
echo "written: $out/before-after-*.png $out/reopened-*.png"
