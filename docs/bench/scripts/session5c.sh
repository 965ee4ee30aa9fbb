#!/usr/bin/env bash
# Session 5's third GPU call: the fuzz million-execution runs on the machine's cores (background),
# the per-op suite in SHARDS parallel processes (the CPU reference at SD shapes is slow on one
# core), the reproducibility script (tuning cache) and the other CUDA suites.
# Expects .carry/gpu/all.txz and .carry/fuzz/all.txz.
set -u
out="${OUT:-/tmp/session5c}"
mkdir -p "$out/fuzz-artifacts" "$out/ops"
tar xJf .carry/gpu/all.txz -C /tmp
if [ -f .carry/fuzz/all.txz ] && [ -z "${NO_FUZZ:-}" ]; then
  mkdir -p /tmp/fz && tar xJf .carry/fuzz/all.txz -C /tmp/fz
  (LD_LIBRARY_PATH=/tmp/fz/rtlibs PARALLEL=1 KEEP="$out/fuzz-artifacts" RUNS="${RUNS:-1000000}" \
     timeout "${FUZZ_S:-480}" bash tests/fuzz/million.sh /tmp/fz/bin > "$out/fuzz.log" 2>&1; echo "million.sh rc=$?" >> "$out/fuzz.log") &
fi
cudnn="$(dirname "$(find /usr /opt -name 'libcudnn.so.9*' 2>/dev/null | head -1)")"
cublas="$(dirname "$(find /usr/local/cuda/ /usr /opt -name 'libcublas.so.13*' 2>/dev/null | head -1)")"
export LD_LIBRARY_PATH="/tmp/rtlibs:$cudnn:$cublas:${LD_LIBRARY_PATH:-}"
export TESSERA_TEST_DATA_DIR="$PWD/tests/data" QT_QPA_PLATFORM=offscreen
shards="${SHARDS:-6}"
{
  date -u +"%Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  OUT="$out" timeout "${REPRO_S:-150}" bash kernels/bench/repro.sh > "$out/repro.out" 2>&1
  echo "== repro.sh (rc $?)"; tail -40 "$out/repro.out"
  echo "== cuda_tst_backendops in $shards shards"
  for i in $(seq 0 $((shards - 1))); do
    TESSERA_BACKENDOPS_SHARD="$i/$shards" timeout "${OPS_S:-360}" /tmp/bin/cuda_tst_backendops -maxwarnings 0 \
      > "$out/ops/shard$i.txt" 2>&1 &
  done
  wait  # the shards (the fuzz job is waited for below)
  for i in $(seq 0 $((shards - 1))); do
    echo "shard $i: $(grep -E '^Totals' "$out/ops/shard$i.txt") $(grep -c '^FAIL' "$out/ops/shard$i.txt") FAIL lines"
    grep -A3 '^FAIL' "$out/ops/shard$i.txt" | head -20
  done
  grep -h "layers compared" "$out"/ops/shard*.txt
} 2>&1 | tee "$out/suites.log"
wait
cat "$out/fuzz.log" 2>/dev/null
