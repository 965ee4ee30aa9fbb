#!/usr/bin/env bash
# One GPU-machine call: the same `tessera-cli bench` rows with a BEFORE build and an AFTER build,
# interleaved row by row (before, after, before, after) so clock drift hits both alike.
# Expects .carry/base/all.txz (before) and .carry/gpu/all.txz (after), each from pack_carry.sh.
#   bash kernels/bench/before_after.sh            (rows below; CSVs and log under $OUT)
set -u
out="${OUT:-/tmp/before-after}"
mkdir -p "$out" /tmp/before /tmp/after
log="$out/before_after.log"
deadline=$((SECONDS + ${DEADLINE_S:-540}))
tar xJf .carry/base/all.txz -C /tmp/before
tar xJf .carry/gpu/all.txz -C /tmp/after
cudnn="$(dirname "$(find /usr /opt -name 'libcudnn.so.9*' 2>/dev/null | head -1)")"
cublas="$(dirname "$(find /usr/local/cuda/ /usr /opt -name 'libcublas.so.13*' 2>/dev/null | head -1)")"
{
  date -u +"%Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
} 2>&1 | tee -a "$log"

row() {  # WHICH ARGS...
  local which=$1; shift
  local left=$((deadline - SECONDS))
  if [ "$left" -lt 30 ]; then echo "SKIPPED ($which, ${left}s left): $*" | tee -a "$log"; return; fi
  echo "== $which: bench $*" | tee -a "$log"
  rm -f /tmp/row.csv
  timeout "$left" env LD_LIBRARY_PATH="/tmp/$which/rtlibs:$cudnn:$cublas" "/tmp/$which/bin/tessera-cli" bench \
    --backend cuda "$@" --csv /tmp/row.csv 2>&1 | grep -vE "^\s*$" | tail -4 | tee -a "$log"
  [ -s /tmp/row.csv ] || return
  [ -s "$out/$which.csv" ] || head -1 /tmp/row.csv >"$out/$which.csv"
  tail -n +2 /tmp/row.csv >>"$out/$which.csv"
}
cifar=(--shape cifar --size 1024 --tile 64 --overlap 16 --steps 20 --repeats 3)
church=(--shape church --size 1024 --tile 256 --overlap 32 --steps 20 --repeats 3)
# The best rows of docs/PERFORMANCE.md (session 3), each in the mode that won there. Pass 1 runs
# before then after for every row; pass 2 (as the deadline allows) after then before.
rows=("cifar --batch 8 --graphs step" "cifar --batch 32 --graphs step" "church --batch 1 --graphs step"
      "church --batch 4 --graphs tile" "church --batch 16 --graphs tile" "cifar --batch 1 --graphs tile")
for order in "before after" "after before"; do
  for r in "${rows[@]}"; do
    shape=${r%% *}; args=${r#* }
    for which in $order; do
      # shellcheck disable=SC2086
      if [ "$shape" = cifar ]; then row "$which" "${cifar[@]}" $args; else row "$which" "${church[@]}" $args; fi
    done
  done
done
