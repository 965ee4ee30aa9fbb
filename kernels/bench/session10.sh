#!/usr/bin/env bash
# Session 10's GPU calls (carry: pack_carry.sh's .carry/gpu/all.txz, .carry/ref/diffusers.txz).
#   OUT=... bash kernels/bench/session10.sh flash      cuda_tst_flashattention (every tiling against the CPU) and
#                                                       cuda_tst_cudabackendparts; then the flash perf mode at batch 8
#                                                       (every tiling's time per SD attention shape)
#   OUT=... bash kernels/bench/session10.sh ops        cuda_tst_backendops over the SD graphs (correctness), in
#                                                       SHARDS processes, OPS_PAR at a time
#   OUT=... bash kernels/bench/session10.sh sdsuites   cuda_tst_cudasd, cuda_tst_cudasdxl (end to end against the CPU)
#   OUT=... bash kernels/bench/session10.sh unet       tessera-cli bench --shape sd15 (B 1, 8) and sdxl (B 4), graphs
#                                                       tile, CFG 7: the UNet per call
#   OUT=... bash kernels/bench/session10.sh torchunet  diffusers' UNet in the same call: sd15 B1 graph, B8
#                                                       compile+graph; sdxl B4 graph
#   OUT=... bash kernels/bench/session10.sh opsperf    cuda_tst_backendops perf mode over sd15's ops
#   OUT=... bash kernels/bench/session10.sh suites     every cuda_tst_* but backendops (SUITE_S each)
#                                                       (GEMM, then a bias/residual pass) and with the cuBLASLt epilogue
#   OUT=... bash kernels/bench/session10.sh profile    tessera-cli bench --profile: sd15 B8 and sdxl B4 (CFG 7), GPU time per op
#                                                       kind (SD transformer blocks by part)
#   OUT=... bash kernels/bench/session10.sh ddpm       the DDPM rows of issue 18's no-regression line: cifar B32 (graphs
#                                                       step) and church B16 (graphs tile), 1024x1024, 20 steps, fp16
#   OUT=... bash kernels/bench/session10.sh racelegacy racecheck on Tessera's own kernels (kns=tessera) in a tiled SD 1.5-shaped
#                                                       run (768x512: two 512-px tiles, 1 step, CFG 1, VAE decode) with
#                                                       cuDNN's legacy API and heuristics (session 9's graph-API try ended
#                                                       in a sanitizer hardware exception inside cuDNN)
#   OUT=... bash kernels/bench/session10.sh raceflash  racecheck on the fused attention kernel alone (kns=flashForward) at the SD
#                                                       shapes, each tiling (cuda_tst_flashattention tilingsAgreeOnTheKernelAlone)
#   OUT=... bash kernels/bench/session10.sh cpu        kernels/bench/cpu_scaling.sh (the CPU engine, 1-16 threads)
set -u
export OUT="${OUT:-/tmp/session10}"
# shellcheck source=kernels/bench/gpu_call.sh
source "$(dirname "$0")/gpu_call.sh"
export HOME=/tmp/home XDG_CACHE_HOME=/tmp/home/.cache
mkdir -p "$HOME"
date -u +"%Y-%m-%d %H:%M UTC"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for what in "$@"; do
  case "$what" in
  flash)
    step cuda_tst_flashattention 240 /tmp/bin/cuda_tst_flashattention
    step cuda_tst_cudabackendparts 120 /tmp/bin/cuda_tst_cudabackendparts
    step flash_perf 150 env TESSERA_FLASH_PERF=1 TESSERA_FLASH_PERF_BATCH=8 /tmp/bin/cuda_tst_flashattention perf
    cat "$out/flash_perf.log" | grep -E "^(sd|self|cross|clip|causal|pixel|shape|soft)" | head -60
    ;;
  ops)
    shards=${SHARDS:-8}
    par=${OPS_PAR:-8}
    for ((i = 0; i < shards; i += par)); do
      for ((j = i; j < i + par && j < shards; ++j)); do
        step "backendops_$j" "${OPS_S:-200}" env TESSERA_BACKENDOPS_MODELS="${OPS_MODELS:-sd15,sd21}" \
          TESSERA_BACKENDOPS_SHARD="$j/$shards" /tmp/bin/cuda_tst_backendops &
      done
      wait
    done
    grep -h "^Totals" "$out"/backendops_*.log
    grep -h "^FAIL" "$out"/backendops_*.log | head -20
    ;;
  sdsuites)
    for s in cudasd cudasdxl cudasdpipeline; do
      [ -x "/tmp/bin/cuda_tst_$s" ] && step "cuda_tst_$s" 200 "/tmp/bin/cuda_tst_$s"
    done
    ;;
  suites)
    for t in /tmp/bin/cuda_tst_*; do
      [ "$(basename "$t")" = cuda_tst_backendops ] && continue
      step "$(basename "$t")" "${SUITE_S:-150}" "$t"
    done
    grep -h "^Totals" "$out"/cuda_tst_*.log
    grep -h "^FAIL" "$out"/cuda_tst_*.log | head -20
    ;;
  profile)
    step profile_sd15 150 tessera-cli bench --shape sd15 --cfg 7 --precision fp16 --batch 8 --profile --repeats 10 \
      --tuning-cache "$out/tuning.json"
    step profile_sdxl 200 tessera-cli bench --shape sdxl --cfg 7 --precision fp16 --batch 4 --profile --repeats 5 \
      --tuning-cache "$out/tuning.json"
    grep -h "kind\|forward" "$out"/profile_*.log | head -60
    ;;
  ddpm)
    step ddpm_cifar_b32 120 tessera-cli bench --shape cifar --size 1024 --tile 64 --overlap 16 --steps 20 --repeats 3 \
      --batch 32 --graphs step --precision fp16 --tuning-cache "$out/tuning.json" --csv "$out/ddpm_cifar_b32.csv"
    step ddpm_church_b16 120 tessera-cli bench --shape church --size 1024 --tile 256 --overlap 32 --steps 20 \
      --repeats 3 --batch 16 --graphs tile --precision fp16 --tuning-cache "$out/tuning.json" --csv "$out/ddpm_church_b16.csv"
    ;;
  racelegacy)
    sd=(--model random:sd15 --width 768 --height 512 --tile 512 --overlap 64 --batch 2 --steps 1 --cfg 1
      --prompt "a lighthouse" --precision fp16 --backend cuda --graphs off --tuning-cache "$out/tuning-rl.json"
      --preview-every 0)
    step rl_plain 120 env TESSERA_CUDNN_API=legacy TESSERA_CUDNN_FIND=0 tessera-cli render "${sd[@]}" --out "$out/rl_plain"
    step rl_racecheck "${RACE_S:-240}" env TESSERA_CUDNN_API=legacy TESSERA_CUDNN_FIND=0 compute-sanitizer \
      --tool racecheck --kernel-name kns=tessera --error-exitcode 9 tessera-cli render "${sd[@]}" --out "$out/rl_race"
    grep -h "SUMMARY\|Error\|hazard" "$out"/rl_*.log | head
    ;;
  raceflash)
    # The kernel alone (tilingsAgreeOnTheKernelAlone: no cuBLAS, which racecheck cannot run at these shapes on
    # sm_90: "failed to handle a hardware exception", call 7), every tiling, plain and under racecheck.
    step rf_plain 60 /tmp/bin/cuda_tst_flashattention tilingsAgreeOnTheKernelAlone
    step rf_racecheck "${RACE_S:-240}" compute-sanitizer --tool racecheck --kernel-name kns=flashForward \
      --error-exitcode 9 /tmp/bin/cuda_tst_flashattention tilingsAgreeOnTheKernelAlone
    grep -h "SUMMARY\|Totals\|hazard" "$out"/rf_*.log
    ;;
  unet)
    step unet_tessera_sd15 200 tessera-cli bench --shape sd15 --cfg 7 --precision fp16 --graphs tile \
      --batch 1,8 --repeats 20 --tuning-cache "$out/tuning.json" --csv "$out/unet_tessera_sd15.csv"
    step unet_tessera_sdxl 200 tessera-cli bench --shape sdxl --cfg 7 --precision fp16 --graphs tile \
      --batch 4 --repeats 10 --tuning-cache "$out/tuning.json" --csv "$out/unet_tessera_sdxl.csv"
    grep -h "attn" "$out"/unet_tessera_*.log | head -5
    ;;
  torchunet)
    step unet_torch_sd15_graph 150 env PYTHONPATH="$DIFFUSERS_SRC" python3 kernels/bench/torch_sd_unet.py --shape sd15 \
      --batch 1,8 --cfg 7 --repeats 20 --modes graph
    step unet_torch_sd15_compile 300 env PYTHONPATH="$DIFFUSERS_SRC" python3 kernels/bench/torch_sd_unet.py --shape sd15 \
      --batch 8 --cfg 7 --repeats 20 --modes compile+graph
    step unet_torch_sdxl_graph 150 env PYTHONPATH="$DIFFUSERS_SRC" python3 kernels/bench/torch_sd_unet.py --shape sdxl \
      --batch 4 --cfg 7 --repeats 10 --modes graph
    ;;
  opsperf)
    step opsperf "${OPSPERF_S:-150}" env TESSERA_BACKENDOPS_PERF=1 TESSERA_BACKENDOPS_MODELS="${OPSPERF_MODELS:-sd15}" \
      /tmp/bin/cuda_tst_backendops perf
    grep -E "^sd15 +(attention|geglu)" "$out/opsperf.log" | grep fp16 | head -20
    ;;
  cpu)
    tessera_cli_dir=$(dirname "$(command -v tessera-cli)")
    mkdir -p /tmp/cpubuild/app && ln -sf "$tessera_cli_dir/tessera-cli" /tmp/cpubuild/app/tessera-cli
    step cpu_scaling "${CPU_S:-200}" env OPENBLAS_CORETYPE=SkylakeX THREADS="${THREADS:-2 4 8 16}" \
      bash kernels/bench/cpu_scaling.sh /tmp/cpubuild
    cat "$out/cpu_scaling.log"
    ;;
  esac
done
pack_results
