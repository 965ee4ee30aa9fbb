#!/bin/sh
# Screenshots of the window's noise settings as A1111 users set them, under Xvfb at 1366x768 and
# 1920x1080, on the CPU engine with the tiny SD 1.x test pipeline. Run from the repository root
# after building build/ (the window, tessera):
#
#   sh docs/screenshots/take-noise.sh   # writes docs/screenshots/noise-{1366x768,1920x1080}.png
#
# The preset picks torch's CPU generator (A1111's "RNG: CPU") with A1111's extra seed settings: a
# variation seed at strength 0.3, the seed resized from 320x256 and ENSD 31337; its prompt names a
# textual-inversion embedding of 3 vectors (the test embedding, in the models folder's embeddings/),
# which the token count under the prompt counts as 3 tokens. The picture is taken when the run ends,
# the settings scrolled so that the seed and the Noise group (opened: its extras are set) end the view.
set -eu
# shellcheck source=docs/screenshots/xvfb.sh
. docs/screenshots/xvfb.sh

models="$work/models"
mkdir -p "$models/Stable-diffusion" "$models/embeddings"
cp -r tests/data/sdpipeline/sd1 "$models/Stable-diffusion/sd15-test-pipeline"
cp tests/data/embeddings/good/ti-a1111.pt "$models/embeddings/painterly.pt"

cat > "$work/noise.json" <<JSON
{"label": "sd1 test pipeline, A1111 CPU noise", "model": "$models/Stable-diffusion/sd15-test-pipeline",
 "prompt": "a lighthouse on a cliff, (stormy sea:1.2), dramatic light, painterly",
 "negative_prompt": "blurry", "cfg": 6, "width": 256, "height": 192, "tile": 128, "overlap": 32, "steps": 6,
 "seed": 7, "scheduler": "euler_a", "window": "hann", "batch": "auto", "precision": "fp32", "backend": "cpu",
 "preview_every": 1, "noise_source": "cpu", "variation_seed": 555, "variation_strength": 0.3,
 "seed_resize_from": "320x256", "eta_noise_seed_delta": 31337}
JSON

for size in 1366x768 1920x1080; do
    xvfb_start :96 "$size"
    DISPLAY=:96 QT_QPA_PLATFORM=xcb "$bin" --fresh --history "$work/history-$size" --models "$models" \
        --preset "$work/noise.json" --run --screenshot "$out/noise-$size.png" --show noise
    xvfb_stop
done
echo "written: $out/noise-1366x768.png $out/noise-1920x1080.png"
