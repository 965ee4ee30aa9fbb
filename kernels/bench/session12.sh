#!/usr/bin/env bash
# Session 12's GPU call (carry: pack_carry.sh's .carry/gpu/all.txz with cpu_pairs beside it). One call: the
# session had under ten minutes of device time. Modes:
#   pairs   the CPU: lscpu, then kernels/bench/cpu_pairs.c (single-threaded OpenBLAS sgemm, one process per CPU,
#           pinned): CPU 0 alone, CPU 0 beside each other CPU, and 1, 2, 4, 8, 12, 16 CPUs at once. Says whether
#           the 16 CPUs the VM shows are 16 cores (session 10/11: a CPU-engine image's forward runs 1.48x slower
#           with 13 at once than with 2) and what sgemm throughput 16 threads have over 2.
#   cpu     the quick-cpu render at 2, 8 and 16 threads (cpu_scaling.sh), and at 16 threads in one tile batch of
#           all 25 tiles (--batch 25)
#   cpu2    (call 2) the quick-cpu render at 2 and 16 threads, in turn, 3 times each, without OPENBLAS_CORETYPE
#   text    (call 2) bench/text_encode.cpp: SD 1.5's text encoder on the CPU engine, two passes against one batch
#   job     tessera-cli bench --shape sd15 --job --batch 8: the whole SD 1.5 2048x2048 job on one engine (the text
#           encoders' prompt and negative prompt now in one batch; text_s per job)
set -u
export OUT="${OUT:-/tmp/session12}"
# shellcheck source=kernels/bench/gpu_call.sh
source "$(dirname "$0")/gpu_call.sh"
export HOME=/tmp/home XDG_CACHE_HOME=/tmp/home/.cache
mkdir -p "$HOME"
date -u +"%Y-%m-%d %H:%M UTC"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for what in "$@"; do
  case "$what" in
  pairs)
    lscpu | grep -E "^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA node|L2|L3|Hypervisor)" > "$out/lscpu.txt"
    cat "$out/lscpu.txt"
    pairs=.carry/gpu/cpu_pairs
    {
      echo "case,cpu,seconds,gflops"
      "$pairs" 0 | sed 's/^/solo,/'
      for j in $(seq 1 15); do "$pairs" 0 "$j" | sed "s/^/pair0-$j,/"; done
      for k in 1 2 4 8 12 16; do "$pairs" $(seq 0 $((k - 1))) | sed "s/^/all$k,/"; done
    } > "$out/cpu_pairs.csv" 2>&1
    # CPU 0's time beside each partner, over its time alone; the all-k rows' total GFLOP/s.
    awk -F, 'NR>1 && $1=="solo" {solo=$3}
             NR>1 && $1 ~ /^pair/ && $2==0 {printf "%s %.2fx  ", $1, $3/solo}
             NR>1 && $1 ~ /^all/ {g[$1]+=$4; n[$1]++}
             END {print ""; for (k in g) printf "%s: %d workers, %.0f GFLOP/s in all\n", k, n[k], g[k]}' \
      "$out/cpu_pairs.csv" | tee "$out/cpu_pairs_summary.txt"
    ;;
  cpu)
    tessera_cli_dir=$(dirname "$(command -v tessera-cli)")
    mkdir -p /tmp/cpubuild/app && ln -sf "$tessera_cli_dir/tessera-cli" /tmp/cpubuild/app/tessera-cli
    step cpu_scaling "${CPU_S:-120}" env OPENBLAS_CORETYPE=SkylakeX THREADS="${THREADS:-2 8 16}" \
      bash kernels/bench/cpu_scaling.sh /tmp/cpubuild
    cat "$out/cpu_scaling.log"
    step cpu_scaling_b25 60 env OPENBLAS_CORETYPE=SkylakeX THREADS="16" EXTRA="--batch 25" \
      bash kernels/bench/cpu_scaling.sh /tmp/cpubuild
    cat "$out/cpu_scaling_b25.log"
    ;;
  cpu2)
    # Call 2: no OPENBLAS_CORETYPE: tessera-cli restarts itself with SkylakeX where OpenBLAS loaded Prescott (the
    # device line says so); 2 and 16 threads in turn, 3 times each.
    tessera_cli_dir=$(dirname "$(command -v tessera-cli)")
    mkdir -p /tmp/cpubuild/app && ln -sf "$tessera_cli_dir/tessera-cli" /tmp/cpubuild/app/tessera-cli
    step cpu_scaling2 "${CPU_S:-150}" env -u OPENBLAS_CORETYPE THREADS="2 16" REPEATS=3 ORDER=interleave \
      bash kernels/bench/cpu_scaling.sh /tmp/cpubuild
    cat "$out/cpu_scaling2.log"
    ;;
  text)
    # Call 2: a prompt and a negative prompt through SD 1.5's text encoder on the CPU engine (bench/text_encode.cpp):
    # two passes (before) against one batch (now) and the row memo; with the kernels OpenBLAS picks (Prescott
    # here) and with SkylakeX.
    step text_encode_prescott 60 env -u OPENBLAS_CORETYPE .carry/gpu/text_encode
    cat "$out/text_encode_prescott.log"
    step text_encode_skylakex 60 env OPENBLAS_CORETYPE=SkylakeX .carry/gpu/text_encode
    cat "$out/text_encode_skylakex.log"
    ;;
  job)
    stepmem job_bench_sd15 "${JOB_S:-150}" tessera-cli bench --shape sd15 --job --batch "${JOB_BATCHES:-8}" \
      --repeats 3 --tuning-cache "$out/tuning.json" --csv "$out/job_bench_sd15.csv"
    cat "$out/job_bench_sd15.csv"
    rm -f "$out/tuning.json"
    ;;
  esac
done
pack_results
