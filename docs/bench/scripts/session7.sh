#!/usr/bin/env bash
# Session 7's GPU calls. Expects .carry/gpu/all.txz (pack_carry.sh of the build named by
# TESSERA_BUILD_ROOT's checkout) and .carry/ref/diffusers.txz.
#   OUT=... bash docs/bench/scripts/session7.sh fixtures   SDXL text + UNet fixtures from diffusers
#   OUT=... bash docs/bench/scripts/session7.sh flash      fused attention: suites, per-op, micro-bench,
#                                                      UNet per call blocked vs fused
#   OUT=... bash docs/bench/scripts/session7.sh suites     every CUDA suite in the carry
#   OUT=... bash docs/bench/scripts/session7.sh jobs       tiled SD/SDXL jobs beside diffusers + PyTorch
# Every step has its own timeout; its log goes to $OUT/<step>.log, its status to $OUT/steps.tsv.
set -u
export OUT="${OUT:-/tmp/session7}"
# shellcheck source=kernels/bench/gpu_call.sh
source kernels/bench/gpu_call.sh  # run from the repository root
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
  tessera)
    # Tessera's side of issue #18's tables (UNet per call, the 2048 job, the VAE at 4096); the PyTorch
    # side is `torch` (the carry cannot hold both the binaries and diffusers at once).
    for t in /tmp/bin/cuda_tst_*; do step "$(basename "$t")" 200 "$t"; done
    step unet_tessera_sd15 240 tessera-cli bench --shape sd15 --cfg 7 --precision fp16 --graphs off,tile \
      --batch 1,8 --repeats 20 --csv "$out/unet_tessera_sd15.csv"
    common=(--prompt "a lighthouse on a cliff above a stormy sea, dramatic light" --negative-prompt "blurry, low quality"
            --cfg 7 --steps 20 --sampler "DPM++ 2M Karras" --precision fp16 --fusion noise --backend cuda
            --tuning-cache "$out/tuning.json" --preview-every 0)
    stepmem render_sd15 240 tessera-cli render --model random:sd15 --width 2048 --height 2048 --tile 512 --overlap 64 \
      --batch 4 --graphs step "${common[@]}" --out "$out/sd15"
    for v in off on; do
      stepmem "render_4096_vae_$v" 200 tessera-cli render --model random:sd15 --width 4096 --height 4096 --tile 512 \
        --overlap 64 --batch 8 --graphs step --steps 1 --cfg 1 --precision fp16 --backend cuda --vae-tiling $v \
        --tuning-cache "$out/tuning.json" --preview-every 0 --out "$out/r4096_$v"
    done
    ;;
  torch)
    step unet_torch_sd15 300 env PYTHONPATH="$DIFFUSERS_SRC" python3 kernels/bench/torch_sd_unet.py --shape sd15 \
      --batch 1,8 --cfg 7 --repeats 20 --modes eager,graph,compile+graph
    ;;
  torchjobs)
    stepmem torch_sd15_eager 200 env PYTHONPATH="$DIFFUSERS_SRC" python3 kernels/bench/torch_sd_tiled.py --shape sd15 \
      --size 2048 --tile 512 --overlap 64 --steps 20 --cfg 7 --batch 4
    stepmem torch_sd15_compile 330 env PYTHONPATH="$DIFFUSERS_SRC" python3 kernels/bench/torch_sd_tiled.py --shape sd15 \
      --size 2048 --tile 512 --overlap 64 --steps 20 --cfg 7 --batch 4 --compile
    stepmem torch_vae_2048 120 env PYTHONPATH="$DIFFUSERS_SRC" python3 kernels/bench/torch_sd_tiled.py --shape sd15 \
      --size 2048 --vae-only --repeats 3
    ;;
  torchvae)
    stepmem torch_vae_4096 200 env PYTHONPATH="$DIFFUSERS_SRC" python3 kernels/bench/torch_sd_tiled.py --shape sd15 \
      --size 4096 --vae-only --repeats 3
    ;;
  suites)
    for t in /tmp/bin/cuda_tst_*; do step "$(basename "$t")" "${SUITE_S:-200}" "$t"; done
    ;;
  esac
done
records
# $OUT returns only a few files: everything in one archive.
pack_results
