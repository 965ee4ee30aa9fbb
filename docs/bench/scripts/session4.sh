#!/usr/bin/env bash
# Session 4's GPU call: the CUDA suites of this build (backend, per-op, engine incl. the
# non-finite watch, graphs), the tokenizer reference fixture (transformers' CLIPTokenizer on
# the bundled vocabulary; no GPU needed but transformers lives there), then the before/after
# bench as the time allows. Expects .carry/gpu/all.txz (this build) and .carry/base/all.txz.
set -u
out="${OUT:-/tmp/session4}"
mkdir -p "$out"
log="$out/suites.log"
tar xJf .carry/gpu/all.txz -C /tmp
cudnn="$(dirname "$(find /usr /opt -name 'libcudnn.so.9*' 2>/dev/null | head -1)")"
cublas="$(dirname "$(find /usr/local/cuda/ /usr /opt -name 'libcublas.so.13*' 2>/dev/null | head -1)")"
export LD_LIBRARY_PATH="/tmp/rtlibs:$cudnn:$cublas:${LD_LIBRARY_PATH:-}"
export TESSERA_TEST_DATA_DIR="$PWD/tests/data" QT_QPA_PLATFORM=offscreen
{
  date -u +"%Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  for t in cuda_tst_cudabackend cuda_tst_cudaengine cuda_tst_cudagraphs cuda_tst_backendops; do
    [ -x /tmp/bin/$t ] || { echo "== $t: not built"; continue; }
    echo "== $t"
    timeout "${SUITE_S:-240}" /tmp/bin/$t 2>&1 | grep -vE "^PASS|^QDEBUG|^QINFO" | tail -40
    echo "rc=${PIPESTATUS[0]}"
  done
  echo "== tokenizer fixture (transformers)"
  timeout 120 python3 tools/reference/make_tokenizer_fixtures.py resources/clip/bpe_simple_vocab_16e6.txt.gz \
    "$out/clip_ids.json" 2>&1 | tail -15
} 2>&1 | tee "$log"
