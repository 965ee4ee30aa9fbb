#!/bin/sh
# Screenshots of the window with the bundled pixel-space model on the CPU engine, under Xvfb at
# 1366x768 and 1920x1080: the default view after a run (window-WxH.png; window.png is the 1920x1080
# one), and at 1920x1080 the seam map, the "Graphs vs eager" tab and the side-by-side comparison of
# a Hann run with a run without blending (seam-map.png, graphs-panel.png, compare.png). Run from the
# repository root after building build/ (the window, tessera):
#
#   sh docs/screenshots/take-window.sh
#
# The SD prompting and picker pictures are take-window-sd.sh's; before/after and reopened runs are
# take-runs.sh's; the GPU pictures (*-h100-*.png) are taken on an H100 by the GPU bench script's
# window mode (bench/gpu/run.sh window).
set -eu
# shellcheck source=docs/screenshots/xvfb.sh
. docs/screenshots/xvfb.sh

cat > "$work/hann.json" <<EOF
{"label": "256x256, Hann", "width": 256, "height": 256, "seed": 42, "steps": 10, "scheduler": "ddim", "tile": 64,
 "overlap": 16, "window": "hann", "batch": 13, "precision": "fp32", "backend": "cpu", "preview_every": 2}
EOF
sed -e 's/"256x256, Hann"/"256x256, no blending"/' -e 's/"hann"/"none"/' "$work/hann.json" > "$work/none.json"

for size in 1366x768 1920x1080; do
    xvfb_start :97 "$size"
    history="$work/history-$size"
    run() { DISPLAY=:97 QT_QPA_PLATFORM=xcb "$bin" --fresh --history "$history" "$@"; }
    if [ "$size" = 1920x1080 ]; then
        run --preset "$work/none.json" --run --screenshot "$work/none.png"
        run --preset "$work/hann.json" --run --screenshot "$out/window-$size.png" --show window \
            --screenshot "$out/seam-map.png" --show seam --screenshot "$out/graphs-panel.png" --show graphs
        run --show compare --screenshot "$out/compare.png"
        cp "$out/window-$size.png" "$out/window.png"
    else
        run --preset "$work/hann.json" --run --screenshot "$out/window-$size.png"
    fi
    xvfb_stop
done
echo "written: $out/window-*.png $out/window.png $out/seam-map.png $out/graphs-panel.png $out/compare.png"
