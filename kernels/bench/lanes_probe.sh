#!/usr/bin/env bash
# One GPU-machine call for the lanes change: the CUDA suites (lanes bit-identity, cache,
# fallback), compute-sanitizer memcheck on a 4-lane render, and a lanes sweep of
# `tessera-cli bench` (1 measured run per row) to choose the auto rule. Expects .carry/gpu/
# as gpu_session.sh. Results under $OUT: probe.log, lanes.csv.
set -u
out="${OUT:-/tmp/lanes-probe}"
mkdir -p "$out"
log="$out/probe.log"
tar xJf .carry/gpu/all.txz -C /tmp
cudnn="$(dirname "$(find /usr /opt -name 'libcudnn.so.9*' 2>/dev/null | head -1)")"
cublas="$(dirname "$(find /usr/local/cuda/ /usr /opt -name 'libcublas.so.13*' 2>/dev/null | head -1)")"
export LD_LIBRARY_PATH="/tmp/rtlibs:$cudnn:$cublas:${LD_LIBRARY_PATH:-}"
export TESSERA_TEST_DATA_DIR="$PWD/tests/data" QT_QPA_PLATFORM=offscreen
cli=/tmp/bin/tessera-cli
deadline=$((SECONDS + ${DEADLINE_S:-570}))
{
  date -u +"%Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  for t in cuda_tst_cudagraphs cuda_tst_cudaengine cuda_tst_cudabackend; do
    echo "== $t"
    timeout 200 "/tmp/bin/$t" 2>&1 | grep -vE "^PASS|^QDEBUG" | grep -vE "^QINFO.*(run [0-9]+ |  step|  [a-z])" | tail -45
  done
  echo "== compute-sanitizer memcheck, 96x64 tile 32 batch 3 (4 batches: auto = 4 lanes), graphs off/step"
  for graphs in off step; do
    timeout 120 compute-sanitizer --tool memcheck --print-limit 20 "$cli" render --backend cuda \
      --model tests/data/models/cifar_like --width 96 --height 64 --tile 32 --overlap 8 --batch 3 --steps 3 \
      --preview-every 0 --out /tmp/san --graphs "$graphs" 2>&1 | grep -E "ERROR SUMMARY|Invalid|lanes|^finished" | head -8
  done
} 2>&1 | tee "$log"
bench() {
  local left=$((deadline - SECONDS))
  if [ "$left" -lt 40 ]; then echo "SKIPPED (${left}s left): $*" | tee -a "$log"; return; fi
  rm -f /tmp/l.csv
  timeout "$left" "$cli" bench --backend cuda --size 1024 --steps 20 --repeats 1 "$@" --csv /tmp/l.csv 2>&1 |
    grep -vE "^bench:" | tee -a "$log"
  [ -s /tmp/l.csv ] || return
  [ -s "$out/lanes.csv" ] || head -1 /tmp/l.csv >"$out/lanes.csv"
  tail -n +2 /tmp/l.csv >>"$out/lanes.csv"
}
bench --shape cifar --tile 64 --overlap 16 --batch 1 --graphs step --lanes 8,4,2
bench --shape church --tile 256 --overlap 32 --batch 1,4 --graphs step --lanes 4,2,1
bench --shape cifar --tile 64 --overlap 16 --batch 8,32 --graphs step --lanes 4,2,1
bench --shape cifar --tile 64 --overlap 16 --batch 1 --graphs tile,off --lanes 4
bench --shape church --tile 256 --overlap 32 --batch 16 --graphs step --lanes 2,1
echo "== done in $SECONDS s" | tee -a "$log"
