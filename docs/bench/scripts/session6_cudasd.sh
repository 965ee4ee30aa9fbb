#!/usr/bin/env bash
# Session 6, h/cudasd's share of one GPU call (about 10 minutes): the suites this branch added or
# changed, then the Stable Diffusion UNet benches, Tessera's and PyTorch's. Builds nothing.
#
#   OUT=/tmp/out bash docs/bench/scripts/session6_cudasd.sh BUILD_DIR
#
# BUILD_DIR: a Release build with -DTESSERA_CUDA=ON (tests/cuda_tst_cudasd, tests/cuda_tst_backendops,
# app/tessera-cli). Optional: DIFFUSERS_SRC=/path/to/diffusers/src for kernels/bench/torch_sd_unet.py
# (skipped when torch or diffusers cannot be imported); NO_TORCH=1 skips it; NO_COMPILE=1 leaves out
# torch.compile (a minute or more per batch shape). Every step runs under its own timeout (seconds:
# CUDASD_S, OPS_S, BENCH_S, TORCH_S), writes its log to $OUT/<step>.log and its exit status to
# $OUT/steps.tsv; a failing step never stops the ones after it.
set -u
build="${1:?usage: session6_cudasd.sh BUILD_DIR}"
build="$(cd "$build" && pwd)"
out="${OUT:-/tmp/session6_cudasd}"
mkdir -p "$out"
src="$(cd "$(dirname "$0")/../../.." && pwd)"
cd "$src"
cudnn="$(dirname "$(find /usr /opt -name 'libcudnn.so.9*' 2>/dev/null | head -1)" 2>/dev/null)"
cublas="$(dirname "$(find /usr/local/cuda/ /usr /opt -name 'libcublas.so.1*' 2>/dev/null | head -1)" 2>/dev/null)"
export LD_LIBRARY_PATH="${cudnn:-.}:${cublas:-.}:${LD_LIBRARY_PATH:-}"
export QT_QPA_PLATFORM=offscreen
printf 'step\trc\tseconds\n' > "$out/steps.tsv"

# step NAME TIMEOUT_S COMMAND...: runs it, logs it, records its exit status and duration.
step() {
  local name="$1" limit="$2"
  shift 2
  local t0=$SECONDS
  echo "== $name (timeout ${limit}s): $*"
  timeout --kill-after=10 "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" >> "$out/steps.tsv"
  echo "   rc $rc after $((SECONDS - t0)) s; last lines:"
  tail -n 6 "$out/$name.log" | sed 's/^/   /'
}

{
  date -u +"%Y-%m-%d %H:%M UTC"
  git -C "$src" log --oneline -1 2>/dev/null
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader

  # Attention plans, blocked VAE attention (16,384 and 65,536 pixels), whole CLIP encoders
  # against the CPU, ids refused, the sd15 bench end to end.
  step cudasd "${CUDASD_S:-240}" ctest --test-dir "$build" --output-on-failure -V -R '^cuda\.tst_cudasd$'
  grep -E "(PASS|FAIL!|SKIP|QINFO) +:|Totals" "$out/cudasd.log" | head -60

  # The ops this branch lowers or changed: every attention op of every model (attend() and the
  # AttentionPlan now serve both lowerings), the CLIP embeddings and pooling, the SD VAE's ops.
  step ops_attention "${OPS_S:-150}" env TESSERA_BACKENDOPS_KINDS=attention,token_embedding,eos_pool \
    "$build/tests/cuda_tst_backendops" -maxwarnings 0
  step ops_vae_clip "${OPS_S:-150}" env TESSERA_BACKENDOPS_MODELS=vae-dec,vae-enc,clip-l-text,open-clip-h-text \
    "$build/tests/cuda_tst_backendops" -maxwarnings 0
  for s in ops_attention ops_vae_clip; do
    echo "$s: $(grep -E '^Totals' "$out/$s.log")"
    grep -A3 '^FAIL' "$out/$s.log" | head -30
  done

  # Tessera: the UNet alone, per tile batch, at SD 1.5 (2048 px in 512 tiles, 25 tiles) and
  # SD 2.1 (2048 px in 768 tiles, 9 tiles), guidance on.
  step bench_sd15 "${BENCH_S:-200}" "$build/app/tessera-cli" bench --shape sd15 --cfg 7 --precision fp16 \
    --graphs off,tile --batch 1,2,4 --repeats 20 --tuning-cache "$out/tuning.json" --csv "$out/bench_sd15.csv"
  step bench_sd21 "${BENCH_S:-200}" "$build/app/tessera-cli" bench --shape sd21 --cfg 7 --precision fp16 \
    --graphs tile --batch 1,2 --repeats 20 --tuning-cache "$out/tuning.json" --csv "$out/bench_sd21.csv"
  cat "$out/bench_sd15.csv" "$out/bench_sd21.csv" 2>/dev/null

  # PyTorch, the same shapes: diffusers' UNet2DConditionModel, eager SDPA / CUDA graph /
  # torch.compile + CUDA graph.
  if [ -z "${NO_TORCH:-}" ] && PYTHONPATH="${DIFFUSERS_SRC:-}" python3 -c 'import torch, diffusers' 2>/dev/null; then
    compile=",compile+graph"
    [ -n "${NO_COMPILE:-}" ] && compile=""
    step torch_sd15 "${TORCH_S:-300}" env PYTHONPATH="${DIFFUSERS_SRC:-}" python3 kernels/bench/torch_sd_unet.py \
      --shape sd15 --cfg 7 --batch 1,2,4 --modes "eager,graph" --repeats 20
    [ -n "$compile" ] && step torch_sd15_compile "${TORCH_S:-300}" env PYTHONPATH="${DIFFUSERS_SRC:-}" python3 \
      kernels/bench/torch_sd_unet.py --shape sd15 --cfg 7 --batch 1 --modes "compile+graph" --repeats 20
    step torch_sd21 "${TORCH_S:-300}" env PYTHONPATH="${DIFFUSERS_SRC:-}" python3 kernels/bench/torch_sd_unet.py \
      --shape sd21 --cfg 7 --batch 1,2 --modes "eager,graph" --repeats 20
    for s in torch_sd15 torch_sd15_compile torch_sd21; do
      [ -f "$out/$s.log" ] && grep -E '^(engine|pytorch)' "$out/$s.log" > "$out/$s.csv"
    done
  else
    echo "== torch: skipped (NO_TORCH set, or torch/diffusers not importable with PYTHONPATH=${DIFFUSERS_SRC:-})"
    printf 'torch\tskipped\t0\n' >> "$out/steps.tsv"
  fi

  echo "== steps"
  cat "$out/steps.tsv"
} 2>&1 | tee "$out/session6_cudasd.log"
