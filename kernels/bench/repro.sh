#!/usr/bin/env bash
# One GPU-machine call: runs that reproduce across processes (issue 14 item 4) and what the
# tuning cache saves at prepare. Expects .carry/gpu/all.txz (pack_carry.sh; bin/ with
# tessera-cli and, when built, cuda_tst_reproducible). Results and log under $OUT.
#   bash kernels/bench/repro.sh
# 1. render, the session-5 config (cifar_like 512x384, tile 64/16, batch 8, fp16, 10 steps),
#    with a fresh tuning cache: cold (fills it), warm (every choice from it), then graphs
#    off/tile/step x lanes 1/2 warm: one image_sha256 for all, hits/misses and prepare ms each;
#    then twice with --tuning-cache off (the old behaviour: timed in each process).
# 2. bench prepare time, cold vs warm cache (TESSERA_TUNING_CACHE), on the cifar and church
#    shapes at 1024x1024.
# 3. cuda_tst_reproducible.
set -u
out="${OUT:-/tmp/repro}"
mkdir -p "$out"
log="$out/repro.log"
tar xJf .carry/gpu/all.txz -C /tmp
cudnn="$(dirname "$(find /usr /opt -name 'libcudnn.so.9*' 2>/dev/null | head -1)")"
cublas="$(dirname "$(find /usr/local/cuda/ /usr /opt -name 'libcublas.so.13*' 2>/dev/null | head -1)")"
export LD_LIBRARY_PATH="/tmp/rtlibs:$cudnn:$cublas:${LD_LIBRARY_PATH:-}"
export TESSERA_TEST_DATA_DIR="$PWD/tests/data" QT_QPA_PLATFORM=offscreen
unset TESSERA_TUNING_CACHE
cli=/tmp/bin/tessera-cli
work=$(mktemp -d)

# One line per render: what the manifest says about the image, the choices and prepare.
summary() {  # MANIFEST
  python3 - "$1" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
t = m.get("tuning", {})
print("sha %s  tuning hits %s misses %s rejected %s digest %s  prepare %.0f ms  lanes %s graphs %s" % (
    m["image_sha256"][:12], t.get("hits"), t.get("misses"), t.get("rejected"), t.get("digest") or "-",
    m["prepare_ms"], m["graphs"]["lanes"], m["graphs"]["mode"]))
EOF
}

render() {  # LABEL CACHE GRAPHS LANES
  local d="$work/$1"
  mkdir -p "$d"
  timeout 120 "$cli" render --backend cuda --model tests/data/models/cifar_like --width 512 --height 384 \
    --tile 64 --overlap 16 --batch 8 --precision fp16 --steps 10 --seed 7 --graphs "$3" --lanes "$4" \
    --tuning-cache "$2" --out "$d" >"$d.out" 2>"$d.err" || { echo "$1: rc=$?"; tail -3 "$d.err"; return; }
  echo "$1 (graphs $3, lanes $4): $(summary "$d"/*.json)"
  grep -h "tuning" "$d.err" | head -3
}

bench_prepare() {  # LABEL CACHE ARGS...
  local label=$1 cache=$2; shift 2
  rm -f "$work/b.csv"
  TESSERA_TUNING_CACHE="$cache" timeout 200 "$cli" bench --backend cuda --size 1024 --precision fp16 --steps 2 \
    --repeats 1 "$@" --csv "$work/b.csv" >/dev/null 2>"$work/b.err" || { echo "$label: rc=$?"; tail -3 "$work/b.err"; return; }
  python3 - "$work/b.csv" "$label" <<'EOF'
import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    print("%s: %s batch %s graphs %s: prepare %s s, first run %s s, %s s/image" % (
        sys.argv[2], r["shape"], r["batch"], r["graphs"], r["prepare_s"], r["first_run_s"], r["seconds_per_image"]))
EOF
}

{
  date -u +"%Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "== 1. render, one config, a fresh tuning cache ($work/tuning.json)"
  render cold "$work/tuning.json" off 1
  render warm "$work/tuning.json" off 1
  for g in off tile step; do for l in 1 2; do render "warm-$g-$l" "$work/tuning.json" "$g" "$l"; done; done
  render off-1 off off 1
  render off-2 off off 1
  echo "cache file: $(wc -c <"$work/tuning.json") bytes, $(grep -c '"' "$work/tuning.json") quoted lines"
  cp "$work/tuning.json" "$out/tuning.json"

  echo "== 2. bench prepare, cold vs warm cache"
  for shape in "cifar --tile 64 --overlap 16 --batch 8 --graphs step" "church --tile 256 --overlap 32 --batch 4 --graphs tile"; do
    set -- $shape
    rm -f "$work/bench.json"
    bench_prepare "cold" "$work/bench.json" --shape "$@"
    bench_prepare "warm" "$work/bench.json" --shape "$@"
    bench_prepare "warm" "$work/bench.json" --shape "$@"
  done

  echo "== 3. cuda_tst_reproducible"
  if [ -x /tmp/bin/cuda_tst_reproducible ]; then
    timeout 300 /tmp/bin/cuda_tst_reproducible 2>&1 | grep -vE "^QDEBUG" | tail -12
  else
    echo "not built"
  fi
} 2>&1 | tee "$log"
