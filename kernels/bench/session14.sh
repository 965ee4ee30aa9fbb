#!/usr/bin/env bash
# Session 14's GPU calls (carry: SUITES=- pack_carry.sh's .carry/gpu/all.txz; modes ddpm, unet, sdxl and job
# also .carry/ref/diffusers.txz). Every PyTorch row runs in the
# same call as the Tessera row it is compared with. Modes:
#   autofit the auto tile batch under memory pressure (PyTorch holding the rest of the GPU) on an SD 1.5 job
#   ddpm    issue #18's DDPM bars: Tessera's cifar-shaped B 32 (step graphs) and church-shaped B 16 (tile graphs),
#           then PyTorch's torch.compile + whole-step CUDA graph at the same shapes (bench/torch_tiled_ddim.py)
#   unet    SD 1.5's UNet per call at CFG batch 2 and 16 (tessera-cli bench --shape sd15 --batch 1,8), then
#           diffusers' UNet2DConditionModel with a CUDA graph (batch 2) and torch.compile + graph (batch 16)
#   sdxl    SDXL's UNet per call at CFG batch 8 (tessera-cli bench --shape sdxl --batch 4), then diffusers' with a
#           CUDA graph at the same batch
#   job     the whole SD 1.5 2048x2048 job (tile 512, overlap 64, CFG 7, 20 steps DPM++ 2M Karras, fp16): Tessera
#           at the default tile batch (auto: the 25 tiles in one call) and at 8, a warm-up job and 3 timed each;
#           then diffusers + torch.compile + CUDA graph at tile batch 13 (session 13's best for PyTorch)
set -u
export OUT="${OUT:-/tmp/session14}"
# shellcheck source=kernels/bench/gpu_call.sh
source "$(dirname "$0")/gpu_call.sh"
export HOME=/tmp/home XDG_CACHE_HOME=/tmp/home/.cache
mkdir -p "$HOME"
date -u +"%Y-%m-%d %H:%M UTC"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
torchpy=(env -u LD_LIBRARY_PATH PYTHONPATH="$DIFFUSERS_SRC" python3)
for what in "$@"; do
  case "$what" in
  autofit)
    # The auto tile batch on an SD 1.5 2048x2048 job (25 tiles of 512 px, guidance: UNet batch 50), first with
    # the GPU to itself, then with PyTorch holding all but the plan at 25 less 55 % of its activations (a batch
    # near 11 fits), then an asked-for --batch 25 under the same pressure (refused at prepare, naming what fits).
    sd=(--model random:sd15 --prompt "a lighthouse on a cliff" --negative-prompt "blurry" --cfg 7 --width 2048
        --height 2048 --tile 512 --overlap 64 --steps 3 --sampler "DPM++ 2M Karras" --graphs step --precision fp16)
    step autofit_free 200 tessera-cli render "${sd[@]}" --out "$out/autofit_free"
    leave=$(python3 -c "import json,glob; r=json.load(open(glob.glob('$out/autofit_free/*.json')[0])); m=r['memory_plan']; print(int(m['total_mib'] - 0.55*m['activations_mib'] + 600)); print([x for x in r['messages'] if x.startswith('batch')])" | tee "$out/autofit_leave.txt" | head -1)
    echo "autofit: leave $leave MiB"
    rm -f /tmp/hog.ready
    env -u LD_LIBRARY_PATH python3 -c "
import sys, time, torch
free, total = torch.cuda.mem_get_info()
x = torch.empty(free - int(sys.argv[1]) * 2**20, dtype=torch.uint8, device='cuda')
print('hog', x.numel() >> 20, 'MiB of', total >> 20, flush=True)
open('/tmp/hog.ready', 'w').close()
time.sleep(400)" "$leave" > "$out/autofit_hog.log" 2>&1 &
    hog=$!
    for _ in $(seq 60); do [ -f /tmp/hog.ready ] && break; sleep 1; done
    cat "$out/autofit_hog.log"; nvidia-smi --query-gpu=memory.used,memory.free --format=csv,noheader
    step autofit_pressed 200 tessera-cli render "${sd[@]}" --out "$out/autofit_pressed"
    step autofit_asked25 120 tessera-cli render "${sd[@]}" --batch 25 --out "$out/autofit_asked25"
    kill "$hog"; wait "$hog" 2>/dev/null
    for d in free pressed; do
      python3 -c "import json,glob; r=json.load(open(glob.glob('$out/autofit_$d/*.json')[0])); print('$d', r['status'], r['config']['batch'], r['memory_plan'], [m for m in r['messages'] if m.startswith(('batch','vae','lanes'))])"
    done
    tail -5 "$out/autofit_asked25.log"
    rm -f "$out"/autofit_*/*.png "$out"/autofit_*/*.csv
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
  sdxl)
    step unet_tessera_sdxl 200 tessera-cli bench --shape sdxl --cfg 7 --precision fp16 --graphs tile \
      --batch 4 --repeats 10 --tuning-cache "$out/tuning.json" --csv "$out/unet_tessera_sdxl.csv"
    step unet_torch_sdxl_graph 150 "${torchpy[@]}" kernels/bench/torch_sd_unet.py --shape sdxl --batch 4 --cfg 7 \
      --repeats 10 --modes graph
    rm -f "$out/tuning.json"
    ;;
  job)
    stepmem job_bench_sd15 "${JOB_S:-200}" tessera-cli bench --shape sd15 --job --batch auto,8 --repeats 3 \
      --tuning-cache "$out/tuning.json" --csv "$out/job_bench_sd15.csv"
    cat "$out/job_bench_sd15.csv"
    stepmem torch_job_compile_b13 230 "${torchpy[@]}" kernels/bench/torch_sd_tiled.py --shape sd15 --size 2048 --tile 512 \
      --overlap 64 --steps 20 --cfg 7 --batch 13 --compile
    rm -f "$out/tuning.json"
    ;;
  esac
done
pack_results
