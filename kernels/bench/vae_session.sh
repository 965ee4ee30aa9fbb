#!/usr/bin/env bash
# The VAE on the GPU (issue #18 item 3): Tessera's decode at 2048² and 4096² (untiled where it
# fits, tiled with device canvases where it does not), the 2048² encode, beside diffusers'
# untiled and enable_tiling() passes, the same way (warm-up, CUDA events, median/min/max).
# Writes one CSV per case under $OUT (columns: `tessera-cli bench --shape vae`'s), the logs beside
# them, and $OUT/vae.csv with every row; $OUT/steps.tsv has each case's exit status and seconds.
#
# Usage: OUT=/tmp/vae BUILD=build-cuda DIFFUSERS_SRC=/path/to/diffusers/src bash kernels/bench/vae_session.sh [cases]
#   cases: tessera torch suites (default: all three)
#   LIMIT=300  seconds per case (timeout)        REPEATS=5  timed passes per case
# Each case runs under `timeout`; a case that fails or times out leaves its log and the next one runs.
set -u
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/vae_session}"
build="${BUILD:-build-cuda}"
limit="${LIMIT:-300}"
repeats="${REPEATS:-5}"
cli="$build/app/tessera-cli"
mkdir -p "$out"
printf 'case\trc\tseconds\n' > "$out/steps.tsv"
case_() {
  local name="$1"
  shift
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" >> "$out/steps.tsv"
  echo "== $name: rc $rc, $((SECONDS - t0)) s"
  tail -4 "$out/$name.log"
}
date -u +"%Y-%m-%d %H:%M UTC"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
# Each process starts with the tuning cache in $out (first pass = cold: cuDNN timed; later cases
# at the same shapes read it), so first_s shows both.
tc="$out/tuning-cache.json"
for what in "${@:-suites tessera torch}"; do
  for w in $what; do
  case "$w" in
  tessera)
    # 2048²: auto (untiled: fits), on (tiled, device canvases); 4096²: auto (tiled: over cuDNN's 2^31).
    for run in 2048:auto 2048:on 4096:auto; do
      size=${run%:*} tiling=${run#*:}
      case_ "tessera_decode_${size}_${tiling}" "$cli" bench --shape vae --size "$size" --tiling "$tiling" \
        --repeats "$repeats" --tuning-cache "$tc" --csv "$out/tessera_decode_${size}_${tiling}.csv"
    done
    case_ tessera_decode_2048_off "$cli" bench --shape vae --size 2048 --tiling off --repeats "$repeats" \
      --tuning-cache "$tc" --csv "$out/tessera_decode_2048_off.csv"
    case_ tessera_encode_2048_auto "$cli" bench --shape vae --size 2048 --encode --repeats "$repeats" \
      --tuning-cache "$tc" --csv "$out/tessera_encode_2048_auto.csv"
    # The auto rule under a small forced budget: 2048² tiled with device canvases.
    case_ tessera_decode_2048_budget2g "$cli" bench --shape vae --size 2048 --budget-mib 2048 --repeats "$repeats" \
      --tuning-cache "$tc" --csv "$out/tessera_decode_2048_budget2g.csv"
    ;;
  torch)
    for size in 2048 4096; do
      for mode in untiled diffusers-tiled; do
        case_ "torch_decode_${size}_${mode}" env PYTHONPATH="${DIFFUSERS_SRC:-}" python3 kernels/bench/torch_sd_tiled.py \
          --vae-only --shape sd15 --size "$size" --repeats "$repeats" --vae-modes "$mode" \
          --csv "$out/torch_decode_${size}_${mode}.csv"
      done
    done
    case_ torch_encode_2048 env PYTHONPATH="${DIFFUSERS_SRC:-}" python3 kernels/bench/torch_sd_tiled.py --vae-only \
      --shape sd15 --size 2048 --encode --repeats "$repeats" --csv "$out/torch_encode_2048.csv"
    ;;
  suites)
    case_ suite_cudatiledvae "$build/tests/cuda_tst_cudatiledvae"
    case_ suite_backendops "$build/tests/cuda_tst_backendops"
    ;;
  *) echo "vae_session.sh: unknown case '$w' (tessera, torch, suites)" >&2; exit 2 ;;
  esac
  done
done
# Every row in one file (one header).
first=1
for f in "$out"/tessera_*.csv "$out"/torch_*.csv; do
  [ -f "$f" ] || continue
  if [ $first = 1 ]; then head -1 "$f" > "$out/vae.csv"; first=0; fi
  tail -n +2 "$f" >> "$out/vae.csv"
done
[ -f "$out/vae.csv" ] && cat "$out/vae.csv"
