#!/usr/bin/env bash
# Session 8's GPU calls. Expects .carry/gpu/all.txz (pack_carry.sh of the build named by
# TESSERA_BUILD_ROOT's checkout) and, for the torch modes, .carry/ref/diffusers.txz.
#   OUT=... bash kernels/bench/session8.sh fixtures   the SDXL pipeline fixture from diffusers
#   OUT=... bash kernels/bench/session8.sh suites     the CUDA suites in the carry
#   OUT=... bash kernels/bench/session8.sh cpu        CPU engine scaling, 1..16 threads (cpu_scaling.sh)
#   OUT=... bash kernels/bench/session8.sh sdxl       SDXL: UNet per call and the tiled 2048 job, Tessera
#                                                      then diffusers + PyTorch, in this call
# Every step has its own timeout; its log goes to $OUT/<step>.log, its status to $OUT/steps.tsv.
set -u
out="${OUT:-/tmp/session8}"
mkdir -p "$out"
[ -f .carry/gpu/all.txz ] && tar xJf .carry/gpu/all.txz -C /tmp
for root in /work/main ${TESSERA_BUILD_ROOT:-}; do
  [ -e "$root" ] || { mkdir -p "$(dirname "$root")" && ln -s "$PWD" "$root"; }
done
export TESSERA_TEST_DATA_DIR="$PWD/tests/data"
[ -f .carry/ref/diffusers.txz ] && mkdir -p /tmp/ref && tar xJf .carry/ref/diffusers.txz -C /tmp/ref
export DIFFUSERS_SRC=/tmp/ref/src
cudnn="$(dirname "$(find /usr /opt -name 'libcudnn.so.9*' 2>/dev/null | head -1)")"
cublas="$(dirname "$(find /usr/local/cuda/ /usr /opt -name 'libcublas.so.13*' 2>/dev/null | head -1)")"
export LD_LIBRARY_PATH="/tmp/rtlibs:$cudnn:$cublas:${LD_LIBRARY_PATH:-}"
export QT_QPA_PLATFORM=offscreen PATH="/tmp/bin:$PATH"
printf 'step\trc\tseconds\n' >> "$out/steps.tsv"
# The call's own limit is 600 s and the results are packed at the end: no step may run past
# DEADLINE (seconds of this script, default 550).
deadline=${DEADLINE:-550}
step() {
  local name="$1" limit="$2"
  shift 2
  local left=$((deadline - SECONDS))
  if ((left < 20)); then echo "== $name: skipped, $left s left"; printf '%s\tskipped\t0\n' "$name" >> "$out/steps.tsv"; return; fi
  ((limit > left)) && limit=$left
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" >> "$out/steps.tsv"
  echo "== $name: rc $rc, $((SECONDS - t0)) s"
  grep -E "^(FAIL|Totals)|   Loc:|Actual|Expected|finished:|failed|Error|wall_s|^[a-z_]+,|ms" "$out/$name.log" | head -40
}
stepmem() {
  local name="$1"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$out/$name.mem" 2>/dev/null &
  local smi=$!
  step "$@"
  kill "$smi" 2>/dev/null
  wait "$smi" 2>/dev/null
  echo "   $name peak device memory in use: $(sort -n "$out/$name.mem" | tail -1) MiB (nvidia-smi, 100 ms samples)"
}
records() {
  for j in "$out"/*/*.json; do
    [ -f "$j" ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[1].split('/')[-2], 'prepare_ms', round(r.get('prepare_ms',0)), 'total_ms', round(r.get('total_ms',0)), 'seam', r.get('seam_score'), [m for m in r.get('messages',[]) if m.startswith(('vae','text','precision','sdxl'))])" "$j"
  done
  rm -f "$out"/*/*.png
}
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
(cd "$out" && tar cJf "../results-$(date +%H%M).txz" . && rm -rf ./* && mv ../results-*.txz .)
