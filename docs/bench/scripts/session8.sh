#!/usr/bin/env bash
# Session 8's GPU calls. Expects .carry/gpu/all.txz (pack_carry.sh of the build named by
# TESSERA_BUILD_ROOT's checkout) and, for the torch modes, .carry/ref/diffusers.txz.
#   OUT=... bash docs/bench/scripts/session8.sh fixtures   the SDXL pipeline fixture from diffusers
#   OUT=... bash docs/bench/scripts/session8.sh suites     the CUDA suites in the carry
#   OUT=... bash docs/bench/scripts/session8.sh cpu        CPU engine scaling, 1..16 threads (cpu_scaling.sh)
#   OUT=... bash docs/bench/scripts/session8.sh sdxl       SDXL: UNet per call and the tiled 2048 job, Tessera
#                                                      then diffusers + PyTorch, in this call
# Every step has its own timeout; its log goes to $OUT/<step>.log, its status to $OUT/steps.tsv.
set -u
export OUT="${OUT:-/tmp/session8}"
# shellcheck source=kernels/bench/gpu_call.sh
source kernels/bench/gpu_call.sh  # run from the repository root
date -u +"%Y-%m-%d %H:%M UTC"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for what in "$@"; do
  case "$what" in
  fixtures)
    cp .carry/ref/make_sdxl_pipeline_fixtures.py tools/reference/
    step fixtures_sdxlpipeline 300 env PYTHONPATH="$DIFFUSERS_SRC" python3 tools/reference/make_sdxl_pipeline_fixtures.py \
      "$out/sdxlpipeline"
    ;;
  suites)
    for t in /tmp/bin/cuda_tst_*; do step "$(basename "$t")" "${SUITE_S:-200}" "$t"; done
    grep -h "PASS\|SKIP" "$out"/cuda_tst_*.log | head -40
    ;;
  cpu)
    # Which OpenBLAS kernels load here: under some hypervisors OpenBLAS does not recognise the CPU
    # and falls back to its SSE3 kernels (the device line of the record says so; see CpuBackend).
    step cpu_probe 120 env OPENBLAS_VERBOSE=2 tessera-cli render --preset resources/presets/quick-cpu.json --steps 1 \
      --threads 2 --out "$out/cpuprobe"
    grep -iE "core|device" "$out/cpu_probe.log" | head -5
    grep -h '"device"' "$out"/cpuprobe/*.json | head -2
    coretype=""
    if grep -q "OPENBLAS_CORETYPE=" "$out"/cpuprobe/*.json 2>/dev/null; then
      coretype=$(grep -ho "OPENBLAS_CORETYPE=[A-Za-z]*" "$out"/cpuprobe/*.json | head -1 | cut -d= -f2)
    fi
    mkdir -p /tmp/cpubuild/app && ln -sf /tmp/bin/tessera-cli /tmp/cpubuild/app/tessera-cli
    step cpu_scaling 300 env ${coretype:+OPENBLAS_CORETYPE=$coretype} THREADS="${CPU_THREADS:-1 2 4 8 16}" \
      REPEATS=${CPU_REPEATS:-1} bash kernels/bench/cpu_scaling.sh /tmp/cpubuild
    echo "OPENBLAS_CORETYPE=${coretype:-unset}"
    cat "$out/cpu_scaling.log"
    ;;
  vae)
    # The VAE decode beside diffusers (untiled and its enable_tiling()), one process per case.
    for run in 2048:auto 4096:auto; do
      size=${run%:*} tiling=${run#*:}
      stepmem "vae_tessera_${size}_${tiling}" "${VAE_S:-150}" tessera-cli bench --shape vae --size "$size" \
        --tiling "$tiling" --repeats 3 --tuning-cache "$out/tuning.json" --csv "$out/vae_tessera_${size}_${tiling}.csv"
    done
    for run in 2048:untiled 2048:diffusers-tiled 4096:diffusers-tiled; do
      size=${run%:*} mode=${run#*:}
      stepmem "vae_torch_${size}_${mode}" "${VAE_S:-150}" env PYTHONPATH="$DIFFUSERS_SRC" python3 \
        kernels/bench/torch_sd_tiled.py --vae-only --shape sd15 --size "$size" --repeats 3 --vae-modes "$mode" \
        --csv "$out/vae_torch_${size}_${mode}.csv"
    done
    cat "$out"/vae_*.csv 2>/dev/null
    ;;
  sdxl)
    step unet_tessera_sdxl 300 tessera-cli bench --shape sdxl --cfg 7 --precision fp16 --graphs off,tile \
      --batch 1,4 --repeats 10 --csv "$out/unet_tessera_sdxl.csv"
    stepmem render_sdxl_2048 300 tessera-cli render --model random:sdxl --width 2048 --height 2048 --tile 1024 \
      --overlap 128 --batch 2 --graphs step --prompt "a lighthouse on a cliff above a stormy sea, dramatic light" \
      --negative-prompt "blurry, low quality" --cfg 7 --steps 20 --sampler "DPM++ 2M Karras" --precision fp16 \
      --fusion noise --backend cuda --tuning-cache "$out/tuning.json" --preview-every 0 --out "$out/sdxl2048"
    step unet_torch_sdxl 300 env PYTHONPATH="$DIFFUSERS_SRC" python3 kernels/bench/torch_sd_unet.py --shape sdxl \
      --batch 1,4 --cfg 7 --repeats 10 --modes eager,graph
    stepmem torch_sdxl_2048 300 env PYTHONPATH="$DIFFUSERS_SRC" python3 kernels/bench/torch_sd_tiled.py --shape sdxl \
      --size 2048 --tile 1024 --overlap 128 --steps 20 --cfg 7 --batch 2
    ;;
  vaetiled)
    # diffusers' tiled decode without cudnn.benchmark's search per tile shape
    stepmem vae_torch_2048_diffusers-tiled_nobench 120 env TORCH_CUDNN_BENCHMARK=0 PYTHONPATH="$DIFFUSERS_SRC" python3 \
      kernels/bench/torch_sd_tiled.py --vae-only --shape sd15 --size 2048 --repeats 3 --vae-modes diffusers-tiled \
      --csv "$out/vae_torch_2048_diffusers-tiled_nobench.csv"
    stepmem vae_torch_2048_untiled_nobench 60 env TORCH_CUDNN_BENCHMARK=0 PYTHONPATH="$DIFFUSERS_SRC" python3 \
      kernels/bench/torch_sd_tiled.py --vae-only --shape sd15 --size 2048 --repeats 3 --vae-modes untiled \
      --csv "$out/vae_torch_2048_untiled_nobench.csv"
    cat "$out"/vae_*.csv 2>/dev/null
    ;;
  sdxl4096)
    stepmem render_sdxl_4096 300 tessera-cli render --model random:sdxl --width 4096 --height 4096 --tile 1024 \
      --overlap 128 --batch 2 --graphs step --prompt "a lighthouse on a cliff above a stormy sea, dramatic light" \
      --negative-prompt "blurry, low quality" --cfg 7 --steps 20 --sampler "DPM++ 2M Karras" --precision fp16 \
      --fusion noise --backend cuda --tuning-cache "$out/tuning.json" --preview-every 0 --out "$out/sdxl4096"
    stepmem torch_sdxl_4096 300 env PYTHONPATH="$DIFFUSERS_SRC" python3 kernels/bench/torch_sd_tiled.py --shape sdxl \
      --size 4096 --tile 1024 --overlap 128 --steps 20 --cfg 7 --batch 2
    ;;
  esac
done
records
pack_results
