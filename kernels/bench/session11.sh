#!/usr/bin/env bash
# Session 11's GPU calls (carry: pack_carry.sh's .carry/gpu/all.txz, .carry/ref/diffusers.txz). Modes as
# session10.sh (flash ops sdsuites suites profile unet torchunet ddpm racelegacy raceflash opsperf cpu), and:
#   info       the machine: CPU (lscpu), GPU, the cuDNN libraries found
#   cudnn      cuda_tst_flashattention's cuDNN tests (cuDNN's fused attention forced against the CPU, the prepared
#              batch only, auto timed and cached, the setting) and cuda_tst_cudabackendparts
#   flashperf  the flash perf mode at batch 16 and 2: fused kernel, blocked path and cuDNN's fused attention per SD
#              attention shape (softmax(Q K^T) V alone, CUDA events at prepare)
#   torchattn  PyTorch's SDPA backends (flash, efficient, cuDNN) at the same shapes (kernels/bench/torch_attention.py)
#   unetsdpa   tessera-cli bench --shape sd15 (B 1, 8) and sdxl (B 4) with TESSERA_CUDA_SDPA=0 (the own kernel only),
#              beside mode unet (auto: cuDNN where it times faster)
#   job        the whole SD 1.5 2048x2048 job (tile 512, overlap 64, CFG 7, 20 steps DPM++ 2M Karras, fp16): a
#              2-step warm-up job (cuDNN timing, tuning cache), then the timed job; tile batch 4 (as PyTorch's) and 8
#   jobbench   the same job through tessera-cli bench --job: one engine, a full warm-up job, 3 timed jobs (tile
#              batch 4 and 8)
#   unet919    mode unet with PyTorch's cuDNN (its wheel's libcudnn) instead of the machine's
#   vaeprep    a 2048x2048 VAE decode with a warm tuning cache under nsys: where its prepare goes
#   torchjob   the same job written with diffusers + torch.compile + CUDA graph (kernels/bench/torch_sd_tiled.py
#              --compile, tile batch 4; its warm-up job compiles and captures)
set -u
export OUT="${OUT:-/tmp/session11}"
# shellcheck source=kernels/bench/gpu_call.sh
source "$(dirname "$0")/gpu_call.sh"
export HOME=/tmp/home XDG_CACHE_HOME=/tmp/home/.cache
mkdir -p "$HOME"
date -u +"%Y-%m-%d %H:%M UTC"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for what in "$@"; do
  case "$what" in
  jobbench)
    # The whole SD 1.5 job on one engine: a full warm-up job, then 3 timed jobs (tessera-cli bench --job).
    stepmem job_bench_sd15 300 tessera-cli bench --shape sd15 --job --batch ${JOB_BATCHES:-4,8} --repeats 3 \
      --tuning-cache "$out/tuning.json" --csv "$out/job_bench_sd15.csv"
    cat "$out/job_bench_sd15.csv"
    ;;
  unet919)
    # Tessera on the cuDNN PyTorch ships (its wheel's libcudnn, 9.19 here) instead of the machine's: the same
    # library both engines' convolutions and fused attention then come from.
    torchcudnn="$(dirname "$(find /opt /usr/local/lib -path '*nvidia*' -name 'libcudnn.so.9*' 2>/dev/null | head -1)")"
    echo "torch's cuDNN: $torchcudnn"; ls "$torchcudnn" | head
    step unet_tessera_sd15_919 200 env LD_LIBRARY_PATH="$torchcudnn:$LD_LIBRARY_PATH" tessera-cli bench --shape sd15 \
      --cfg 7 --precision fp16 --graphs tile --batch 1,8 --repeats 20 --tuning-cache "$out/tuning919.json" \
      --csv "$out/unet_tessera_sd15_919.csv"
    step unet_tessera_sdxl_919 200 env LD_LIBRARY_PATH="$torchcudnn:$LD_LIBRARY_PATH" tessera-cli bench --shape sdxl \
      --cfg 7 --precision fp16 --graphs tile --batch 4 --repeats 10 --tuning-cache "$out/tuning919.json" \
      --csv "$out/unet_tessera_sdxl_919.csv"
    grep -h "cuDNN\|cudnn" "$out"/unet_tessera_*_919.log | head -5
    ;;
  vaeprep)
    # Where a warm decode's prepare goes: a first bench fills the tuning cache, the second runs under nsys
    # (NVTX ranges of CudaBackend prepare and the passes).
    step vae_cold 120 tessera-cli bench --shape vae --size 2048 --tiling off --repeats 3 --tuning-cache "$out/tuning.json"
    nsys="$(command -v nsys || find / -name nsys -type f -perm -u+x 2>/dev/null | head -1)"
    echo "nsys: $nsys"
    step vae_warm_nsys 150 "$nsys" profile -t nvtx,cuda -o "$out/vae_warm" tessera-cli bench --shape vae --size 2048 \
      --tiling off --repeats 3 --tuning-cache "$out/tuning.json"
    step vae_nvtx 60 "$nsys" stats -r nvtx_sum "$out/vae_warm.nsys-rep"
    cat "$out/vae_nvtx.log" | head -40
    rm -f "$out"/*.sqlite
    ;;
  info)
    lscpu | head -30
    lscpu -e | head -20
    nproc
    find / -name 'libcudnn.so.9*' 2>/dev/null | head
    python3 -c "import torch; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version())"
    ;;
  cudnn)
    step cudnn_tests 240 /tmp/bin/cuda_tst_flashattention cudnnMatchesCpu cudnnAtThePreparedBatchOnly \
      cudnnAutoChoiceCached sdpaSetting
    grep -h "cuDNN\|SKIP" "$out/cudnn_tests.log" | head -40
    step cuda_tst_cudabackendparts 120 /tmp/bin/cuda_tst_cudabackendparts
    ;;
  flashperf)
    for b in 16 2; do
      step "flash_perf_b$b" 150 env TESSERA_FLASH_PERF=1 TESSERA_FLASH_PERF_BATCH=$b /tmp/bin/cuda_tst_flashattention perf
      grep -E "^(sd|self|cross|pixel|shape|soft)" "$out/flash_perf_b$b.log" | cut -c1-150 | head -40
    done
    ;;
  torchattn)
    step torch_attention 150 env -u LD_LIBRARY_PATH python3 kernels/bench/torch_attention.py --batch 16 --sdxl-batch 8 --repeats 20
    cat "$out/torch_attention.log"
    ;;
  unetsdpa)
    step unet_tessera_sd15_own 200 env TESSERA_CUDA_SDPA=0 tessera-cli bench --shape sd15 --cfg 7 --precision fp16 \
      --graphs tile --batch 1,8 --repeats 20 --tuning-cache "$out/tuning.json" --csv "$out/unet_tessera_sd15_own.csv"
    step unet_tessera_sdxl_own 200 env TESSERA_CUDA_SDPA=0 tessera-cli bench --shape sdxl --cfg 7 --precision fp16 \
      --graphs tile --batch 4 --repeats 10 --tuning-cache "$out/tuning.json" --csv "$out/unet_tessera_sdxl_own.csv"
    ;;
  job)
    common=(--model random:sd15 --width 2048 --height 2048 --tile 512 --overlap 64
            --prompt "a lighthouse on a cliff above a stormy sea, dramatic light" --negative-prompt "blurry, low quality"
            --cfg 7 --sampler "DPM++ 2M Karras" --precision fp16 --fusion noise --backend cuda --graphs step
            --tuning-cache "$out/tuning.json" --preview-every 0)
    for b in ${JOB_BATCHES:-4 8}; do
      step "job_warm_b$b" 200 tessera-cli render "${common[@]}" --batch "$b" --steps 2 --out "$out/job_warm_b$b"
      stepmem "job_sd15_b$b" 200 tessera-cli render "${common[@]}" --batch "$b" --steps 20 --out "$out/job_sd15_b$b"
    done
    records
    ;;
  torchjob)
    stepmem torch_job_compile 400 env -u LD_LIBRARY_PATH PYTHONPATH="$DIFFUSERS_SRC" python3 kernels/bench/torch_sd_tiled.py --shape sd15 \
      --size 2048 --tile 512 --overlap 64 --steps 20 --cfg 7 --batch "${TORCH_JOB_BATCH:-4}" --compile
    ;;
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
    step unet_torch_sd15_graph 150 env -u LD_LIBRARY_PATH PYTHONPATH="$DIFFUSERS_SRC" python3 kernels/bench/torch_sd_unet.py --shape sd15 \
      --batch 1,8 --cfg 7 --repeats 20 --modes graph
    step unet_torch_sd15_compile 300 env -u LD_LIBRARY_PATH PYTHONPATH="$DIFFUSERS_SRC" python3 kernels/bench/torch_sd_unet.py --shape sd15 \
      --batch 8 --cfg 7 --repeats 20 --modes compile+graph
    step unet_torch_sdxl_graph 150 env -u LD_LIBRARY_PATH PYTHONPATH="$DIFFUSERS_SRC" python3 kernels/bench/torch_sd_unet.py --shape sdxl \
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
