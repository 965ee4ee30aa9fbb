#!/usr/bin/env bash
# One GPU-machine call that proves a build: every CUDA test suite, compute-sanitizer
# (memcheck, racecheck, synccheck) on a small tiled render, the default model rendered from
# noise and from a photograph (image-to-image) on the CUDA backend, and the backend suite
# again on a non-blocking stream. Logs and images go to $OUT (at most 8 files come back).
#
# Expects .carry/gpu/all.txz from kernels/bench/pack_carry.sh: bin/ (tessera-cli, cuda_tst_*,
# Release, stripped) and rtlibs/ (their non-system host libraries). The CUDA libraries
# (cuDNN 9, cuBLAS 13) are the machine's. Tests read tests/data through TESSERA_TEST_DATA_DIR.
set -u
out="${OUT:-/tmp/gpu-session}"
mkdir -p "$out"
log="$out/session.log"
tar xJf .carry/gpu/all.txz -C /tmp
bin=/tmp/bin
cudnn="$(dirname "$(find /usr /opt -name 'libcudnn.so.9*' 2>/dev/null | head -1)")"
cublas="$(dirname "$(find /usr/local/cuda/ /usr /opt -name 'libcublas.so.13*' 2>/dev/null | head -1)")"
export LD_LIBRARY_PATH="/tmp/rtlibs:$cudnn:$cublas:${LD_LIBRARY_PATH:-}"
export TESSERA_TEST_DATA_DIR="$PWD/tests/data" QT_QPA_PLATFORM=offscreen
cli=$bin/tessera-cli
{
  date -u +"%Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  ldd "$cli" $bin/cuda_tst_* | grep "not found"
  for t in $bin/cuda_tst_*; do
    echo "== $t"
    timeout 300 "$t" 2>&1 | grep -vE "^PASS|^QDEBUG|^QINFO" | tail -40
  done
  echo "== non-blocking stream (TESSERA_CUDA_STREAM=nonblocking)"
  TESSERA_CUDA_STREAM=nonblocking timeout 200 $bin/cuda_tst_cudabackend 2>&1 | grep -E "FAIL|Totals" -A2
  small=(render --backend cuda --model tests/data/models/cifar_like --width 96 --height 64 --tile 32 --overlap 8
         --batch 3 --steps 3 --preview-every 0 --out /tmp/san)
  # racecheck needs ~4 minutes here (prepare benchmarks every conv under it): 240 s cut it off
  # before its summary line in sessions 2 and 3.
  for tool in memcheck racecheck synccheck; do
    for graphs in off step; do
      echo "== compute-sanitizer --tool $tool, graphs $graphs"
      timeout 420 compute-sanitizer --tool "$tool" --print-limit 20 "$cli" "${small[@]}" --graphs "$graphs" 2>&1 |
        grep -E "ERROR SUMMARY|RACECHECK SUMMARY|========= (Invalid|Race|Barrier|Error)|^finished|^cancelled" | head -12
    done
  done
  echo "== default model, 1024x1024 from noise, CUDA, graphs step"
  "$cli" render --backend cuda --width 1024 --height 1024 --steps 30 --seed 7 --batch 32 --graphs step \
    --out /tmp/noise 2>&1 | tail -3
  cp /tmp/noise/*.png "$out/default-1024-noise.png"
  for strength in 0.3 0.5; do
    echo "== image-to-image: 128 px JPEG (docs/model/evidence/photo128.jpg) -> 512x512, strength $strength, CUDA"
    rm -rf /tmp/i2i
    "$cli" render --backend cuda --width 512 --height 512 --steps 30 --seed 7 --batch 16 --graphs tile \
      --init docs/model/evidence/photo128.jpg --strength "$strength" --out /tmp/i2i 2>&1 | tail -3
    cp /tmp/i2i/*.png "$out/default-512-img2img-$strength.png"
  done
} 2>&1 | tee "$log"
