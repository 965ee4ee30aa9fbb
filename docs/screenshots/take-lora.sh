#!/bin/sh
# A screenshot of the window after a run with a LoRA and a separate VAE, under Xvfb at 1366x768, on
# the CPU engine with the tiny SD 1.x test pipeline, the LoRA made for it and the test VAE. Run from
# the repository root after building build/ (the window, tessera):
#
#   sh docs/screenshots/take-lora.sh   # writes docs/screenshots/lora-1366x768.png
#
# The models folder holds the pipeline (in Stable-diffusion/, so that the prompt tag is found as a run
# finds names: in the folder above the model's), the LoRA in Lora/ (and a second one in LyCORIS/) and the VAE
# in VAE/; the preset names the LoRA twice, as A1111 users do: a prompt tag at 0.6 and the window's
# list at 0.4, with the VAE chosen. The picture is taken when the run ends.
set -eu
# shellcheck source=docs/screenshots/xvfb.sh
. docs/screenshots/xvfb.sh

models="$work/models"
mkdir -p "$models/Lora" "$models/LyCORIS/styles" "$models/VAE"
mkdir -p "$models/Stable-diffusion"
cp -r tests/data/sdpipeline/sd1 "$models/Stable-diffusion/sd15-test-pipeline"
cp tests/data/sdpipeline/lora/sd1_tiny.safetensors "$models/Lora/sd1_tiny.safetensors"
cp tests/data/sdpipeline/lora/sd1_tiny.safetensors "$models/LyCORIS/styles/watercolor.safetensors"
cp tests/data/sdfiles/vae/ldm.safetensors "$models/VAE/ldm.safetensors"

cat > "$work/lora.json" <<JSON
{"label": "sd1 test pipeline with a LoRA", "model": "$models/Stable-diffusion/sd15-test-pipeline",
 "prompt": "a lighthouse on a cliff, (stormy sea:1.2), dramatic light <lora:sd1_tiny:0.6>",
 "negative_prompt": "blurry", "cfg": 6, "width": 256, "height": 192, "tile": 128, "overlap": 32, "steps": 6,
 "seed": 7, "scheduler": "euler_a", "window": "hann", "batch": "auto", "precision": "fp32", "backend": "cpu",
 "preview_every": 1, "vae": "$models/VAE/ldm.safetensors",
 "loras": [{"file": "$models/LyCORIS/styles/watercolor.safetensors", "te": 0.4, "unet": 0.4}]}
JSON

xvfb_start :97 1366x768
DISPLAY=:97 QT_QPA_PLATFORM=xcb "$bin" --fresh --history "$work/history" --models "$models" \
    --preset "$work/lora.json" --run --screenshot "$out/lora-1366x768.png" --show window
xvfb_stop
echo "written: $out/lora-1366x768.png"
