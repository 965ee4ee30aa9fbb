#!/usr/bin/env bash
# Session 5's second GPU call: the fuzz targets' million-execution runs on the machine's cores
# (in the background), the CUDA suites of this build (backend, engine, graphs, per-op incl. the
# Stable Diffusion token ops, reproducibility when built), then the per-op perf table.
# Expects .carry/gpu/all.txz (pack_carry.sh) and .carry/fuzz/all.txz (tests/fuzz/pack_device.sh).
set -u
out="${OUT:-/tmp/session5b}"
mkdir -p "$out/fuzz-artifacts"
tar xJf .carry/gpu/all.txz -C /tmp
if [ -f .carry/fuzz/all.txz ]; then
  mkdir -p /tmp/fz && tar xJf .carry/fuzz/all.txz -C /tmp/fz
  (LD_LIBRARY_PATH=/tmp/fz/rtlibs PARALLEL=1 KEEP="$out/fuzz-artifacts" RUNS="${RUNS:-1000000}" \
     timeout "${FUZZ_S:-520}" bash tests/fuzz/million.sh /tmp/fz/bin > "$out/fuzz.log" 2>&1; echo "million.sh rc=$?" >> "$out/fuzz.log") &
fi
cudnn="$(dirname "$(find /usr /opt -name 'libcudnn.so.9*' 2>/dev/null | head -1)")"
cublas="$(dirname "$(find /usr/local/cuda/ /usr /opt -name 'libcublas.so.13*' 2>/dev/null | head -1)")"
export LD_LIBRARY_PATH="/tmp/rtlibs:$cudnn:$cublas:${LD_LIBRARY_PATH:-}"
export TESSERA_TEST_DATA_DIR="$PWD/tests/data" QT_QPA_PLATFORM=offscreen
{
  date -u +"%Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  for t in ${SUITES:-cuda_tst_backendops cuda_tst_reproducible cuda_tst_cudabackend cuda_tst_cudaengine cuda_tst_cudagraphs}; do
    [ -x /tmp/bin/$t ] || { echo "== $t: not built"; continue; }
    echo "== $t"
    timeout "${SUITE_S:-150}" /tmp/bin/$t 2>&1 | grep -vE "^PASS|^QDEBUG" | tail -40
    echo "rc=${PIPESTATUS[0]}"
  done
  if [ -n "${PERF:-}" ]; then
    echo "== cuda_tst_backendops perf"
    TESSERA_BACKENDOPS_PERF=1 timeout "${PERF_S:-150}" /tmp/bin/cuda_tst_backendops perf > "$out/backendops_perf.txt" 2>&1
    echo "rc=$? ($(wc -l < "$out/backendops_perf.txt") lines in backendops_perf.txt)"
  fi
} 2>&1 | tee "$out/suites.log"
wait
cat "$out/fuzz.log" 2>/dev/null
