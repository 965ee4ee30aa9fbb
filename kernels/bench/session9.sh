#!/usr/bin/env bash
# Session 9's GPU calls. The first carries the relocatable CUDA bundle (packaging/bundle --xz of a CUDA + GUI build,
# as .carry/bundle/tessera.txz) and diffusers' source (.carry/ref/diffusers.txz); later calls carry pack_carry.sh's
# .carry/gpu/all.txz as before.
#   OUT=... bash kernels/bench/session9.sh screens    the window on the GPU: an SD-shaped CUDA run with a prompt
#                                                      (1920x1080 and 1366x768 screens) and the before/after view of
#                                                      an x8 SD upscale (offscreen, the bundle's own Qt and font)
#   OUT=... bash kernels/bench/session9.sh vae        VAE decode 2048: Tessera beside diffusers untiled and tiled,
#                                                      cudnn.benchmark on and off, one process each
#   OUT=... bash kernels/bench/session9.sh sanitizer  compute-sanitizer memcheck and racecheck on SD-shaped tiled runs
#   OUT=... bash kernels/bench/session9.sh cpuinfo    the CPU's cores and threads (issue 18's CPU line)
#   OUT=... bash kernels/bench/session9.sh suites     every cuda_tst_* in the carry; cuda_tst_backendops in SHARDS
#                                                      processes (TESSERA_BACKENDOPS_SHARD=i/N), OPS_PAR at a time
#                                                      (NO_OPS=1: without it; ONLY_OPS=1: it alone)
#   OUT=... bash kernels/bench/session9.sh torchcheck the PyTorch references import (torch_sd_tiled.py takes its
#                                                      shapes from torch_sd_unet.py)
#   OUT=... bash kernels/bench/session9.sh opsperf    cuda_tst_backendops perf mode over the SD graphs' ops
#   OUT=... bash kernels/bench/session9.sh racesmall  racecheck on the SD 1.5 shape at 512x256, two 256-px tiles, 1 step
set -u
export OUT="${OUT:-/tmp/session9}"
# shellcheck source=kernels/bench/gpu_call.sh
source "$(dirname "$0")/gpu_call.sh"
if [ -f .carry/bundle/tessera.txz ]; then
  mkdir -p /tmp/tb && tar xJf .carry/bundle/tessera.txz -C /tmp/tb --strip-components=1
  export PATH="/tmp/tb/bin:$PATH"
fi
export HOME=/tmp/home XDG_CACHE_HOME=/tmp/home/.cache XDG_RUNTIME_DIR=/tmp/home/run
mkdir -p "$HOME" "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
date -u +"%Y-%m-%d %H:%M UTC"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
screen_config() {  # WIDTH HEIGHT -> an offscreen platform config with one screen of that size
  local f="/tmp/offscreen-$1x$2.json"
  printf '{"screens": [{"name": "S", "x": 0, "y": 0, "width": %d, "height": %d, "logicalDpiX": 96, "logicalDpiY": 96}]}\n' \
    "$1" "$2" > "$f"
  echo "$f"
}
for what in "$@"; do
  case "$what" in
  screens)
    cat > /tmp/sd.json <<JSON
{"label": "SD 1.5-shaped on the H100: lighthouse, 1536x1024", "model": "random:sd15",
 "prompt": "a lighthouse on a cliff above a stormy sea, (dramatic light:1.2), golden hour",
 "negative_prompt": "blurry, low quality", "cfg": 7, "scheduler": "dpmpp_2m", "scheduler_options": {"use_karras_sigmas": true}, "steps": 20, "seed": 1234,
 "width": 1536, "height": 1024, "tile": 512, "overlap": 64, "window": "hann", "batch": 2, "precision": "fp16",
 "backend": "cuda", "graphs": "step", "preview_every": 1}
JSON
    cat > /tmp/upscale.json <<JSON
{"label": "photo128 x8 on the H100, SD 1.5-shaped, strength 0.35", "model": "random:sd15",
 "init": "$PWD/docs/model/evidence/photo128.jpg", "upscale": 8, "strength": 0.35, "width": 1024, "height": 1024,
 "prompt": "a detailed photograph", "cfg": 5, "scheduler": "euler", "steps": 20, "seed": 3, "tile": 512,
 "overlap": 64, "window": "hann", "batch": 2, "precision": "fp16", "backend": "cuda", "graphs": "step",
 "preview_every": 5}
JSON
    hist=/tmp/home/history
    step gui_sd_1920 200 env QT_QPA_PLATFORM="offscreen:configfile=$(screen_config 1920 1080)" tessera --fresh \
      --history "$hist" --preset /tmp/sd.json --run --screenshot "$out/window-sd-h100-1920x1080.png"
    step gui_upscale_1920 200 env QT_QPA_PLATFORM="offscreen:configfile=$(screen_config 1920 1080)" tessera --fresh \
      --history "$hist" --preset /tmp/upscale.json --run --show before-after \
      --screenshot "$out/before-after-h100-1920x1080.png"
    step gui_reopened_1366 120 env QT_QPA_PLATFORM="offscreen:configfile=$(screen_config 1366 768)" tessera --fresh \
      --history "$hist" --show reopened --screenshot "$out/reopened-h100-1366x768.png"
    for j in "$hist"/*/*.json; do
      python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print({k: r.get(k) for k in ('status','backend','device','precision','prepare_ms','total_ms','seam_score')})" "$j" 2>/dev/null
    done | tee "$out/gui_records.txt"
    ;;
  vae)
    stepmem vae_tessera_2048 150 tessera-cli bench --shape vae --size 2048 --tiling auto --repeats 5 \
      --tuning-cache "$out/tuning.json" --csv "$out/vae_tessera_2048.csv"
    stepmem vae_tessera_2048_tiled 150 tessera-cli bench --shape vae --size 2048 --tiling on --repeats 5 \
      --tuning-cache "$out/tuning.json" --csv "$out/vae_tessera_2048_tiled.csv"
    for bench in 1 0; do
      for mode in untiled diffusers-tiled; do
        stepmem "vae_torch_2048_${mode}_bench$bench" 120 env TORCH_CUDNN_BENCHMARK=$bench PYTHONPATH="$DIFFUSERS_SRC" \
          python3 kernels/bench/torch_sd_tiled.py --vae-only --shape sd15 --size 2048 --repeats 5 --vae-modes "$mode" \
          --csv "$out/vae_torch_2048_${mode}_bench$bench.csv"
      done
    done
    cat "$out"/vae_*.csv 2>/dev/null
    ;;
  sanitizer)
    # The tiny SD 1.x pipeline fixture (every SD op at small shapes), then the SD 1.5 shape itself; each tool after
    # a plain run that fills the tuning cache, so the sanitized runs time nothing at prepare.
    tiny=(--model tests/data/sdpipeline/sd1 --width 128 --height 96 --tile 64 --overlap 32 --batch 2 --steps 2
      --prompt "a (red:1.2) cube" --negative-prompt "blurry" --cfg 7 --sampler "DPM++ 2M Karras" --precision fp16
      --backend cuda --graphs off --tuning-cache "$out/tuning-san.json" --preview-every 0)
    sd=(--model random:sd15 --width 768 --height 512 --tile 512 --overlap 64 --batch 2 --steps 2
      --prompt "a lighthouse, (dramatic light:1.2)" --negative-prompt "blurry" --cfg 7 --sampler "DPM++ 2M Karras"
      --precision fp16 --backend cuda --graphs off --tuning-cache "$out/tuning-san.json" --preview-every 0)
    step san_tiny_plain 60 tessera-cli render "${tiny[@]}" --out "$out/san_tiny_plain"
    for tool in memcheck racecheck synccheck; do
      step "san_tiny_$tool" 90 compute-sanitizer --tool "$tool" --error-exitcode 9 tessera-cli render "${tiny[@]}" \
        --out "$out/san_tiny_$tool"
    done
    step san_sd15_plain 120 tessera-cli render "${sd[@]}" --out "$out/san_sd15_plain"
    for tool in memcheck racecheck; do
      step "san_sd15_$tool" 200 compute-sanitizer --tool "$tool" --error-exitcode 9 tessera-cli render "${sd[@]}" \
        --out "$out/san_sd15_$tool"
    done
    grep -h "ERROR SUMMARY\|RACECHECK SUMMARY\|Error\|hazard" "$out"/san_*.log | sort | uniq -c | head -20
    ;;
  suites)
    for t in /tmp/bin/cuda_tst_*; do
      [ "$(basename "$t")" = cuda_tst_backendops ] && continue
      [ -n "${ONLY_OPS:-}" ] && continue
      step "$(basename "$t")" "${SUITE_S:-200}" "$t"
    done
    if [ -x /tmp/bin/cuda_tst_backendops ] && [ -z "${NO_OPS:-}" ]; then
      shards=${SHARDS:-12}
      par=${OPS_PAR:-4}
      for ((i = 0; i < shards; i += par)); do
        for ((j = i; j < i + par && j < shards; ++j)); do
          step "cuda_tst_backendops_$j" "${OPS_S:-240}" env TESSERA_BACKENDOPS_SHARD="$j/$shards" /tmp/bin/cuda_tst_backendops &
        done
        wait
      done
    fi
    grep -h "^Totals" "$out"/cuda_tst_*.log
    grep -h "^FAIL" "$out"/cuda_tst_*.log | head -20
    ;;
  torchcheck)
    step torchcheck 120 env PYTHONPATH="$DIFFUSERS_SRC" python3 -c "import sys; sys.path.insert(0, 'kernels/bench'); \
import torch_sd_tiled as t; print('torch_sd_tiled: UNETS', sorted(t.UNETS), 'NATIVE_TILE', t.NATIVE_TILE, \
'tiles', t.axis_positions(256, 64, 8))"
    cat "$out/torchcheck.log"
    ;;
  opsperf)
    # The per-op table for the Stable Diffusion graphs (session 5's stopped after the pixel models).
    step opsperf "${OPSPERF_S:-200}" env TESSERA_BACKENDOPS_PERF=1 \
      TESSERA_BACKENDOPS_MODELS="${OPSPERF_MODELS:-sd15,sd21,clip-l-text,open-clip-h-text,vae-dec,vae-enc}" \
      /tmp/bin/cuda_tst_backendops perf
    grep -c "fp16\|bf16\|fp32" "$out/opsperf.log"
    ;;
  racetessera)
    # racecheck on Tessera's own kernels only (the `tessera` namespace: flash attention, GroupNorm, LayerNorm,
    # softmax, GEGLU, gather/scatter, ...); cuDNN's and cuBLAS's are NVIDIA's. SD 1.5 shapes, CFG 7, two 512 tiles.
    sd=(--model random:sd15 --width 768 --height 512 --tile 512 --overlap 64 --batch 2 --steps 1
      --prompt "a lighthouse, (dramatic light:1.2)" --negative-prompt "blurry" --cfg 7 --precision fp16 --backend cuda
      --graphs off --tuning-cache "$out/tuning-rt.json" --preview-every 0)
    step rt_plain 120 tessera-cli render "${sd[@]}" --out "$out/rt_plain"
    step rt_racecheck "${RACE_S:-400}" compute-sanitizer --tool racecheck --kernel-name kns=tessera --error-exitcode 9 \
      tessera-cli render "${sd[@]}" --out "$out/rt_racecheck"
    grep -h "SUMMARY\|Error" "$out"/rt_*.log
    ;;
  racesmall)
    small=(--model random:sd15 --width 512 --height 256 --tile 256 --overlap 0 --batch 2 --steps 1 --cfg 1
      --prompt "a lighthouse" --precision fp16 --backend cuda --graphs off --tuning-cache "$out/tuning-race.json"
      --preview-every 0)
    step race_sd15_small_plain 120 tessera-cli render "${small[@]}" --out "$out/race_plain"
    step race_sd15_small "${RACE_S:-300}" compute-sanitizer --tool racecheck --error-exitcode 9 tessera-cli render "${small[@]}" \
      --out "$out/race_small"
    grep -h "SUMMARY" "$out"/race_*.log
    ;;
  cpuinfo)
    lscpu | tee "$out/lscpu.txt" | grep -E "^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA|L3|Hypervisor|Flags)" | cut -c1-160
    ;;
  esac
done
records
pack_results
