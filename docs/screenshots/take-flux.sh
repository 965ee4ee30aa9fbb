#!/bin/sh
# Screenshots of the window with a FLUX.1 model chosen: the settings' prompt group as FLUX.1-dev
# takes it (the prompt and the Guidance box open; the negative prompt, CFG and clip skip disabled,
# each saying why; the CLIP-L and T5-XXL rows beside the VAE, LoRAs disabled), under Xvfb at 1366x768 and 1920x1080, with the tiny FLUX.1-dev-shaped test
# pipeline (tests/data/flux). No run: that folder holds no text encoders. Run from the repository
# root after building (the window, tessera):
#
#   sh docs/screenshots/take-flux.sh   # writes docs/screenshots/flux-1366x768.png and -1920x1080.png
set -eu
# shellcheck source=docs/screenshots/xvfb.sh
. docs/screenshots/xvfb.sh

home="$work/home"
models="$home/models"
mkdir -p "$models/diffusers" "$models/text_encoders" "$models/vae"
cp -r tests/data/flux "$models/diffusers/flux1-dev-test-pipeline"
# The tiny test SentencePiece model as its T5 tokenizer, for the prompt's T5 token count.
mkdir -p "$models/diffusers/flux1-dev-test-pipeline/tokenizer_2"
cp tests/data/t5/spiece.model "$models/diffusers/flux1-dev-test-pipeline/tokenizer_2/"
# Files of the names ComfyUI users keep beside a FLUX.1 transformer file, for the text encoder and
# VAE rows to list (the folder model has its own; nothing is read from these).
for f in text_encoders/clip_l text_encoders/t5xxl_fp16 text_encoders/t5xxl_fp8_e4m3fn vae/ae; do
    cp tests/data/flux/vae/diffusion_pytorch_model.safetensors "$models/$f.safetensors"
done

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
