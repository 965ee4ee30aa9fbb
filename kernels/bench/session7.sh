#!/usr/bin/env bash
# Session 7's GPU calls. Expects .carry/gpu/all.txz (pack_carry.sh of the build named by
# TESSERA_BUILD_ROOT's checkout) and .carry/ref/diffusers.txz.
#   OUT=... bash kernels/bench/session7.sh fixtures   SDXL text + UNet fixtures from diffusers
#   OUT=... bash kernels/bench/session7.sh flash      fused attention: suites, per-op, micro-bench,
#                                                      UNet per call blocked vs fused
#   OUT=... bash kernels/bench/session7.sh suites     every CUDA suite in the carry
#   OUT=... bash kernels/bench/session7.sh jobs       tiled SD/SDXL jobs beside diffusers + PyTorch
# Every step has its own timeout; its log goes to $OUT/<step>.log, its status to $OUT/steps.tsv.
set -u
out="${OUT:-/tmp/session7}"
mkdir -p "$out"
[ -f .carry/gpu/all.txz ] && tar xJf .carry/gpu/all.txz -C /tmp
# The suites' compiled-in paths (tests/data, resources/) name a development checkout: make it this one.
for root in /work/main ${TESSERA_BUILD_ROOT:-}; do
  [ -e "$root" ] || { mkdir -p "$(dirname "$root")" && ln -s "$PWD" "$root"; }
done
export TESSERA_TEST_DATA_DIR="$PWD/tests/data"
mkdir -p /tmp/ref && tar xJf .carry/ref/diffusers.txz -C /tmp/ref
export DIFFUSERS_SRC=/tmp/ref/src
cudnn="$(dirname "$(find /usr /opt -name 'libcudnn.so.9*' 2>/dev/null | head -1)")"
cublas="$(dirname "$(find /usr/local/cuda/ /usr /opt -name 'libcublas.so.13*' 2>/dev/null | head -1)")"
export LD_LIBRARY_PATH="/tmp/rtlibs:$cudnn:$cublas:${LD_LIBRARY_PATH:-}"
export QT_QPA_PLATFORM=offscreen PATH="/tmp/bin:$PATH"
printf 'step\trc\tseconds\n' >> "$out/steps.tsv"
step() {
  local name="$1" limit="$2"
  shift 2
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" >> "$out/steps.tsv"
  echo "== $name: rc $rc, $((SECONDS - t0)) s"
  grep -E "^(FAIL|Totals)|   Loc:|Actual|Expected|finished:|failed|Error|wall_s" "$out/$name.log" | head -30
}
date -u +"%Y-%m-%d %H:%M UTC"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for what in "$@"; do
  case "$what" in
  fixtures)
    cp .carry/ref/make_sdxl_*_fixtures.py tools/reference/ 2>/dev/null
    for f in sdxltext sdxlunet; do
      step "fixtures_$f" 300 env PYTHONPATH="$DIFFUSERS_SRC" python3 "tools/reference/make_${f%%xl*}xl_${f#sdxl}_fixtures.py" "$out/$f"
    done
    ;;
  flash)
    step flash_suites 400 bash -c 'for t in flashattention cudasd reproducible cudasdpipeline; do [ -x /tmp/bin/cuda_tst_$t ] && /tmp/bin/cuda_tst_$t; done'
    step flash_ops 200 env TESSERA_BACKENDOPS_KINDS=attention /tmp/bin/cuda_tst_backendops opMatchesCpu
    step flash_perf2 200 env TESSERA_FLASH_PERF=1 /tmp/bin/cuda_tst_flashattention perf
    step flash_perf8 200 env TESSERA_FLASH_PERF=1 TESSERA_FLASH_PERF_BATCH=8 /tmp/bin/cuda_tst_flashattention perf
    for f in 0 auto; do
      step "bench_sd21_flash_$f" 200 env TESSERA_CUDA_FLASH=$f tessera-cli bench --shape sd21 --cfg 7 --precision fp16 \
        --graphs tile --batch 1,2 --repeats 20 --csv "$out/sd21_flash_$f.csv"
      step "bench_sd15_flash_$f" 200 env TESSERA_CUDA_FLASH=$f tessera-cli bench --shape sd15 --cfg 7 --precision fp16 \
        --graphs tile --batch 1,2,4 --repeats 20 --csv "$out/sd15_flash_$f.csv"
    done
    ;;
  suites)
    for t in /tmp/bin/cuda_tst_*; do step "$(basename "$t")" "${SUITE_S:-200}" "$t"; done
    ;;
  esac
done
# $OUT returns only a few files: everything in one archive.
(cd "$out" && tar cJf "../results-$(date +%H%M).txz" . && rm -rf ./* && mv ../results-*.txz .)
