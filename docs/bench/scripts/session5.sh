#!/usr/bin/env bash
# Session 5's first GPU call: CUDA suites of this build, the reference fixtures (diffusers and
# transformers on small random configs: tokenizer, VAE, UNet2DConditionModel, CLIP text), and
# a two-process reproducibility check (same config rendered by two processes, per graph mode
# and lane count). Expects .carry/gpu/all.txz (pack_carry.sh) and .carry/ref/diffusers.txz
# (diffusers' src/). Results under $OUT.
set -u
out="${OUT:-/tmp/session5}"
mkdir -p "$out/fixtures"
log="$out/suites.log"
tar xJf .carry/gpu/all.txz -C /tmp
mkdir -p /tmp/ref && tar xJf .carry/ref/diffusers.txz -C /tmp/ref
cudnn="$(dirname "$(find /usr /opt -name 'libcudnn.so.9*' 2>/dev/null | head -1)")"
cublas="$(dirname "$(find /usr/local/cuda/ /usr /opt -name 'libcublas.so.13*' 2>/dev/null | head -1)")"
export LD_LIBRARY_PATH="/tmp/rtlibs:$cudnn:$cublas:${LD_LIBRARY_PATH:-}"
export TESSERA_TEST_DATA_DIR="$PWD/tests/data" QT_QPA_PLATFORM=offscreen
{
  date -u +"%Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
  for f in tokenizer vae unetcond clip; do
    echo "== fixtures: $f"
    if [ "$f" = tokenizer ]; then
      timeout 120 python3 tools/reference/make_tokenizer_fixtures.py resources/clip/bpe_simple_vocab_16e6.txt.gz \
        "$out/fixtures/clip_ids.json" 2>&1 | tail -8
    else
      timeout 120 env PYTHONPATH=/tmp/ref/src CUDA_VISIBLE_DEVICES= python3 tools/reference/make_${f}_fixtures.py \
        "$out/fixtures/$f" 2>&1 | tail -12
    fi
    echo "rc=${PIPESTATUS[0]}"
  done
  for t in cuda_tst_cudabackend cuda_tst_cudaengine cuda_tst_cudagraphs cuda_tst_backendops; do
    [ -x /tmp/bin/$t ] || { echo "== $t: not built"; continue; }
    echo "== $t"
    timeout "${SUITE_S:-100}" /tmp/bin/$t 2>&1 | grep -vE "^PASS|^QDEBUG|^QINFO" | tail -30
    echo "rc=${PIPESTATUS[0]}"
  done
  echo "== two processes, one config (cifar_like, 512x384, tile 64/16, batch 8, fp16)"
  for mode in "off 1" "off 1" "step 1" "tile 1" "off 2" "step 3"; do
    set -- $mode
    d=$(mktemp -d)
    timeout 60 /tmp/bin/tessera-cli render --backend cuda --model tests/data/models/cifar_like --width 512 --height 384 \
      --tile 64 --overlap 16 --batch 8 --precision fp16 --steps 10 --seed 7 --graphs "$1" --lanes "$2" --out "$d" \
      >/dev/null 2>"$d.err" || { echo "graphs $1 lanes $2: rc=$?"; tail -3 "$d.err"; continue; }
    echo "graphs $1 lanes $2: $(grep -o '"image_sha256": *"[0-9a-f]*"' "$d"/*.json | head -1)"
  done
} 2>&1 | tee "$log"
