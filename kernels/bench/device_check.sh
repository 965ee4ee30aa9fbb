#!/usr/bin/env bash
# Runs the CUDA backend checks and benchmark on a GPU machine that has the CUDA runtime
# libraries (cuDNN 9, cuBLAS 13) but not the project's build dependencies. Expects the
# stripped executables (cuda_tst_*, tessera-cli) and the host runtime libraries (rtlibs.tgz:
# Qt Core/Test and ICU for the suites, spdlog, fmt, OpenBLAS) in .carry/cuda/. Logs go to $OUT when set.
set -u
out="${OUT:-/tmp}"
tar xzf .carry/cuda/rtlibs.tgz -C /tmp
cudnn="$(dirname "$(find /usr /opt -name 'libcudnn.so.9*' 2>/dev/null | head -1)")"
cublas="$(dirname "$(find /usr/local/cuda/ /usr /opt -name 'libcublas.so.13*' 2>/dev/null | head -1)")"
export LD_LIBRARY_PATH="/tmp/rtlibs:$cudnn:$cublas:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
echo "cudnn: $cudnn"; echo "cublas: $cublas"
ldd .carry/cuda/cuda_tst_cudabackend | grep "not found"
for t in .carry/cuda/cuda_tst_*; do
  [ -x "$t" ] && "$t" 2>&1 | tee "$out/$(basename "$t").log"
done
# Diagnostics: the older beta = 1 accumulation, and a non-blocking stream, on the checks
# that once failed.
if [ "${1:-}" = "--diagnose" ]; then
  for env in TESSERA_CUDA_BETA=1 TESSERA_CUDA_STREAM=nonblocking "TESSERA_CUDA_BETA=1 TESSERA_CUDA_SYNC=op"; do
    echo "== $env"
    env $env .carry/cuda/cuda_tst_cudabackend deterministic batchOneMatchesBatchFour features 2>&1 | grep -E "FAIL|Totals"
  done
fi
# The benchmark (tessera-cli bench, which took in tessera-cuda-bench's cases): per-op profiles
# and forward timings of the google/ddpm shapes, then whole tiled runs with graphs off and tile.
# --quick: 10 timed forwards instead of 30.
[ "${1:-}" = "--no-bench" ] || [ "${1:-}" = "--diagnose" ] || {
  cli=.carry/cuda/tessera-cli
  repeats=30; [ "${1:-}" = "--quick" ] && repeats=10
  profile() { "$cli" bench --profile --repeats "$repeats" "$@"; }
  profile --shape cifar --tile 64 --batch 8 --precision fp16,bf16,fp32
  profile --shape cifar --tile 32 --batch 1,16
  profile --shape cifar --tile 64 --batch 32
  profile --shape cifar --tile 128 --batch 4
  profile --shape church --tile 64 --batch 16
  profile --shape church --tile 128 --batch 4
  profile --shape church --tile 256 --batch 1,4
  profile --shape church --tile 256 --batch 4 --precision bf16
  "$cli" bench --shape cifar --size 512 --tile 64 --overlap 16 --batch 8 --steps 10 --graphs off,tile --seed 2
  "$cli" bench --shape cifar --size 256 --tile 32 --overlap 8 --batch 16 --steps 10 --graphs off,tile --seed 2
  "$cli" bench --shape church --size 1024 --tile 256 --overlap 64 --batch 4 --steps 5 --graphs off,tile --seed 2
} 2>&1 | tee "$out/bench.log"
