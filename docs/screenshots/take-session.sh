#!/bin/sh
# Screenshots of a first session with the window on a machine without a GPU, under Xvfb at
# 1366x768 and 1920x1080, on the CPU engine with the tiny test pipelines. Run from the repository
# root after building build/ (the window, tessera; TESSERA=path/to/tessera for another build):
#
#   sh docs/screenshots/take-session.sh   # writes docs/screenshots/session-{picked,run,reopened,parameters}-WxH.png
#
# Per size: the model picker over a models folder (a model picked: its row selected and hashed);
# a run of a Stable Diffusion test pipeline with a prompt (the picture taken when it ends); the
# window restarted on the same history with that run reopened; and an A1111 PNG's parameters
# loaded onto the settings (File > Load parameters from PNG/JPEG…: the status line names what was
# not applied). The window runs in the scratch folder with relative paths, so no path of this
# machine shows in the pictures.
set -eu
# shellcheck source=docs/screenshots/xvfb.sh
. docs/screenshots/xvfb.sh
bin=$(realpath "$bin")
out=$(realpath "$out")

mkdir -p "$work/models/SD 2"
cp -r tests/data/sdpipeline/sd1 "$work/models/sd15-test-pipeline"
cp -r tests/data/sdpipeline/sd2 "$work/models/SD 2/sd21-test-pipeline"
cp -r tests/data/singlefile/sdxl "$work/models/sdxl-test-pipeline"
cp tests/data/singlefile/sd1.safetensors "$work/models/tiny-sd1.safetensors"
cd "$work"

cat > sd.json <<EOF
{"label": "lighthouse", "model": "models/sd15-test-pipeline",
 "prompt": "a lighthouse on a cliff, (stormy sea:1.2), dramatic light",
 "negative_prompt": "blurry, (lowres:1.3)", "cfg": 6, "width": 256, "height": 192, "tile": 128,
 "overlap": 32, "steps": 6, "seed": 7, "scheduler": "euler_a", "window": "hann", "batch": "auto", "precision": "fp32",
 "backend": "cpu", "preview_every": 1}
EOF

# A PNG as A1111 1.10 saves a hires-fix run: its settings in a "parameters" tEXt chunk.
python3 - <<'EOF'
import struct, zlib
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)
text = ("a cat in a wizard hat, (masterpiece:1.2), soft light\n"
        "Negative prompt: blurry, lowres\n"
        "Steps: 28, Sampler: DPM++ 2M, Schedule type: Karras, CFG scale: 6.5, Seed: 1234, Size: 512x768, "
        "Model hash: 6ce0161689, Model: v1-5-pruned-emaonly, Denoising strength: 0.4, Hires upscale: 2, "
        "Hires upscaler: Latent, Version: v1.10.1")
rows = b"".join(b"\0" + bytes([120, 90, 160]) * 8 for _ in range(8))
png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 8, 8, 8, 2, 0, 0, 0))
       + chunk(b"tEXt", b"parameters\0" + text.encode("latin-1"))
       + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
open("a1111.png", "wb").write(png)
EOF

for size in 1366x768 1920x1080; do
    xvfb_start :97 "$size"
    DISPLAY=:97 QT_QPA_PLATFORM=xcb "$bin" --fresh --history "history-$size" --models models \
        --screenshot "$out/session-picked-$size.png" --show models
    DISPLAY=:97 QT_QPA_PLATFORM=xcb "$bin" --fresh --history "history-$size" --models models \
        --preset sd.json --run --screenshot "$out/session-run-$size.png" --show window
    DISPLAY=:97 QT_QPA_PLATFORM=xcb "$bin" --fresh --history "history-$size" \
        --screenshot "$out/session-reopened-$size.png" --show reopened
    DISPLAY=:97 QT_QPA_PLATFORM=xcb "$bin" --fresh --history "history-$size" --preset sd.json \
        --parameters a1111.png --screenshot "$out/session-parameters-$size.png" --show window
    xvfb_stop
done
echo "written: $out/session-*.png"
