#!/usr/bin/env bash
# Session 13's GPU calls (carry: pack_carry.sh's .carry/gpu/all.txz; mode cpu also .carry/gpu/old/tessera-cli, the
# CLI built from main before the change it measures; modes unet and job also .carry/ref/diffusers.txz). Modes:
#   cpu     the quick-cpu render (256x256, 25 tiles in calls of 13 and 12, 20 DDIM steps): cpu_scaling.sh at 2, 8
#           and 16 threads in turn, 3 times each; then, in turn 3 times, 16 threads with the CLI before this
#           session's change (lanes without helpers), with the new one, and the new one in one call of 25 tiles
#   ddpm    the DDPM bars of issue #18 in one call: Tessera's cifar-shaped B 32 (step graphs) and church-shaped B 16
#           (tile graphs), then PyTorch's torch.compile + whole-step CUDA graph at the same shapes
#           (bench/torch_tiled_ddim.py)
#   unet    SD 1.5's UNet per call at CFG batch 2 and 16 (tessera-cli bench --shape sd15 --batch 1,8), then
#           diffusers' UNet2DConditionModel with a CUDA graph (batch 2) and torch.compile + graph (batch 16)
#   job     the whole SD 1.5 2048x2048 job (tile 512, overlap 64, CFG 7, 20 steps DPM++ 2M Karras, fp16):
#           tessera-cli bench --job (a warm-up job, 3 timed, tile batch 8), then the same job written with diffusers +
#           torch.compile + CUDA graph (kernels/bench/torch_sd_tiled.py --compile, tile batch 4)
#   cpu2    (call 5, meant for the H100 machine, whose CPU session 12 measured) cpu_scaling.sh at 2 and 16 threads in
#           turn, 3 times each; then the CLI before this session's change and the new one at 16 threads, in turn twice
#   jobbatch (call 4) the same job at other tile batches, both sides: Tessera 8, 13 and 25 (the 25 tiles in 4, 2 and 1
#           UNet calls per step), then PyTorch at 8, 13 and 4 (TORCH_BATCHES), as many as the call's time allows
set -u
export OUT="${OUT:-/tmp/session13}"
# shellcheck source=kernels/bench/gpu_call.sh
source "$(dirname "$0")/gpu_call.sh"
export HOME=/tmp/home XDG_CACHE_HOME=/tmp/home/.cache
mkdir -p "$HOME"
date -u +"%Y-%m-%d %H:%M UTC"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
torchpy=(env -u LD_LIBRARY_PATH PYTHONPATH="$DIFFUSERS_SRC" python3)
# One quick-cpu render with CLI $1 at $2 threads (more options after): its finished line and image hash.
quick() {
  local cli="$1" t="$2"; shift 2
  local dir; dir=$(mktemp -d)
  local log; log=$("$cli" render --preset resources/presets/quick-cpu.json --threads "$t" "$@" --out "$dir" 2>&1)
  echo "$log" | grep -m1 '^run ' | sed -E 's/.* steps on //'
  echo "$log" | grep -m1 '^finished:'
  grep -ho '"image_sha256": *"[0-9a-f]*"' "$dir"/*.json | head -1
  rm -rf "$dir"
}
for what in "$@"; do
  case "$what" in
  cpu)
    lscpu | grep -E "^(Model name|CPU\(s\)|Thread|Core|Socket|L2|L3|Hypervisor)" | tee "$out/lscpu.txt"
    mkdir -p /tmp/oldcli
    tar xJf .carry/gpu/old.txz -C /tmp/oldcli
    tessera_cli_dir=$(dirname "$(command -v tessera-cli)")
    mkdir -p /tmp/cpubuild/app && ln -sf "$tessera_cli_dir/tessera-cli" /tmp/cpubuild/app/tessera-cli
    step cpu_scaling "${CPU_S:-250}" env THREADS="2 8 16" REPEATS=3 ORDER=interleave \
      bash kernels/bench/cpu_scaling.sh /tmp/cpubuild
    cat "$out/cpu_scaling.log"
    for r in 1 2 3; do
      { echo "== round $r old 16"; quick /tmp/oldcli/tessera-cli 16
        echo "== round $r new 16"; quick tessera-cli 16
        echo "== round $r new 16 batch 25"; quick tessera-cli 16 --batch 25; } >> "$out/cpu_before_after.log" 2>&1
    done
    cat "$out/cpu_before_after.log"
    ;;
  cpu2)
    lscpu | grep -E "^(Model name|CPU\(s\)|Thread|Core|Socket|L2|L3|Hypervisor)" | tee "$out/lscpu.txt"
    mkdir -p /tmp/oldcli
    tar xJf .carry/gpu/old.txz -C /tmp/oldcli
    tessera_cli_dir=$(dirname "$(command -v tessera-cli)")
    mkdir -p /tmp/cpubuild/app && ln -sf "$tessera_cli_dir/tessera-cli" /tmp/cpubuild/app/tessera-cli
    step cpu_scaling2 "${CPU_S:-200}" env THREADS="2 16" REPEATS=3 ORDER=interleave \
      bash kernels/bench/cpu_scaling.sh /tmp/cpubuild
    cat "$out/cpu_scaling2.log"
    for r in 1 2; do
      { echo "== round $r old 16"; quick /tmp/oldcli/tessera-cli 16
        echo "== round $r new 16"; quick tessera-cli 16; } >> "$out/cpu_before_after2.log" 2>&1
    done
    cat "$out/cpu_before_after2.log"
    ;;
  ddpm)
    step ddpm_cifar_b32 120 tessera-cli bench --shape cifar --size 1024 --tile 64 --overlap 16 --steps 20 --repeats 3 \
      --batch 32 --graphs step --precision fp16 --tuning-cache "$out/tuning.json" --csv "$out/ddpm_cifar_b32.csv"
    step ddpm_church_b16 120 tessera-cli bench --shape church --size 1024 --tile 256 --overlap 32 --steps 20 \
      --repeats 3 --batch 16 --graphs tile --precision fp16 --tuning-cache "$out/tuning.json" --csv "$out/ddpm_church_b16.csv"
    step torch_ddpm_cifar_b32 200 env -u LD_LIBRARY_PATH python3 bench/torch_tiled_ddim.py --shape cifar --size 1024 \
      --tile 64 --overlap 16 --steps 20 --batch 32 --modes compile --repeats 3
    step torch_ddpm_church_b16 200 env -u LD_LIBRARY_PATH python3 bench/torch_tiled_ddim.py --shape church --size 1024 \
      --tile 256 --overlap 32 --steps 20 --batch 16 --modes compile --repeats 3
    cat "$out"/ddpm_*.csv; cat "$out"/torch_ddpm_*.log | grep -v "^\s*$" | tail -20
    rm -f "$out/tuning.json"
    ;;
  unet)
    step unet_tessera_sd15 150 tessera-cli bench --shape sd15 --cfg 7 --precision fp16 --graphs tile \
      --batch 1,8 --repeats 20 --tuning-cache "$out/tuning.json" --csv "$out/unet_tessera_sd15.csv"
    step unet_torch_sd15_graph 120 "${torchpy[@]}" kernels/bench/torch_sd_unet.py --shape sd15 --batch 1 --cfg 7 --repeats 20 \
      --modes graph
    step unet_torch_sd15_compile 250 "${torchpy[@]}" kernels/bench/torch_sd_unet.py --shape sd15 --batch 8 --cfg 7 --repeats 20 \
      --modes compile+graph
    rm -f "$out/tuning.json"
    ;;
  job)
    stepmem job_bench_sd15 "${JOB_S:-150}" tessera-cli bench --shape sd15 --job --batch 8 --repeats 3 \
      --tuning-cache "$out/tuning.json" --csv "$out/job_bench_sd15.csv"
    cat "$out/job_bench_sd15.csv"
    stepmem torch_job_compile 330 "${torchpy[@]}" kernels/bench/torch_sd_tiled.py --shape sd15 --size 2048 --tile 512 \
      --overlap 64 --steps 20 --cfg 7 --batch 4 --compile
    rm -f "$out/tuning.json"
    ;;
  jobbatch)
    stepmem job_bench_batches "${JOB_S:-200}" tessera-cli bench --shape sd15 --job --batch 8,13,25 --repeats 3 \
      --tuning-cache "$out/tuning.json" --csv "$out/job_bench_batches.csv"
    cat "$out/job_bench_batches.csv"
    for b in ${TORCH_BATCHES:-8 13 4}; do
      stepmem "torch_job_compile_b$b" 200 "${torchpy[@]}" kernels/bench/torch_sd_tiled.py --shape sd15 --size 2048 \
        --tile 512 --overlap 64 --steps 20 --cfg 7 --batch "$b" --compile
    done
    rm -f "$out/tuning.json"
    ;;
  esac
done
pack_results
