#!/usr/bin/env bash
# Runs the CUDA backend checks and benchmark on a GPU machine that has the CUDA runtime
# libraries (cuDNN 9, cuBLAS 13) but not the project's build dependencies. Expects the
# stripped executables and the host runtime libraries (rtlibs.tgz: Qt Core/Test, ICU,
# spdlog, fmt, OpenBLAS) in .carry/cuda/. Logs go to $OUT when set.
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
[ "${1:-}" = "--no-bench" ] || [ "${1:-}" = "--diagnose" ] || .carry/cuda/tessera-cuda-bench "${@}" 2>&1 | tee "$out/bench.log"
