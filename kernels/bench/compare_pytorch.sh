#!/usr/bin/env bash
# Tessera (`tessera-cli bench`) beside the PyTorch script a user would write
# (bench/torch_tiled_ddim.py: eager, whole-step CUDA graph, torch.compile + graph), on the
# GPU machine, for the cases of docs/PERFORMANCE.md:
#   cifar-shaped (35.7 M parameters) 1024x1024, tile 64, overlap 16 (441 tiles), 20 DDIM steps, B = 1, 8, 32
#   church-shaped (113.7 M)          1024x1024, tile 256, overlap 32 (25 tiles),  20 DDIM steps, B = 1, 4, 16
# fp16 throughout; Tessera with graphs off, tile and step.
#
# The matrix does not fit one 10-minute device call, so it is split:
#   part 1: every Tessera row (lanes auto, and the best mode with 1 lane), PyTorch graph
#   part 2: PyTorch compile + graph (both shapes)
#   part 3: PyTorch eager (both shapes), Tessera with cuDNN's runtime-fused convolutions
# `all` runs every part. Rows that do not fit the time left (DEADLINE_S, default 560 s from the
# start) are skipped and the log says so.
#
# Repeats: 3 measured runs per row (median), except the cifar shape at B = 1 where one run is long (PyTorch eager
# ~120 s per image, Tessera ~20 s): 1 run each. torch.compile takes about a minute of
# compilation per batch size. Set TESSERA_CUDNN_RUNTIME_FUSION=1 in the environment to let
# Tessera's prepare build cuDNN's fused conv+bias+residual engines (NVRTC).
#
# Expects $CARRY/all.txz (default .carry/gpu/, from kernels/bench/pack_carry.sh): bin/ with
# tessera-cli (Release, stripped) and rtlibs/ with its non-system host libraries (Qt Core/Gui,
# ICU, PNG, JPEG, ...); the CUDA libraries cuDNN 9 and cuBLAS 13 are the machine's. Results under $OUT: tessera.csv, pytorch.csv, compare.log.
set -u
part="${1:-all}"
out="${OUT:-/tmp/compare-out}"
mkdir -p "$out" /tmp/compare
log="$out/compare.log"
deadline=$((SECONDS + ${DEADLINE_S:-560}))
export PYTHONUNBUFFERED=1

tar xJf "${CARRY:-.carry/gpu}/all.txz" -C /tmp
carry=/tmp/bin
cudnn="$(dirname "$(find /usr /opt -name 'libcudnn.so.9*' 2>/dev/null | head -1)")"
cublas="$(dirname "$(find /usr/local/cuda/ /usr /opt -name 'libcublas.so.13*' 2>/dev/null | head -1)")"
# Only for tessera-cli: PyTorch must keep the machine's own libstdc++ and CUDA libraries.
cli_path="/tmp/rtlibs:$cudnn:$cublas:${LD_LIBRARY_PATH:-}"

{
  date -u +"%Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
  echo "cudnn: $cudnn"; echo "cublas: $cublas"
  LD_LIBRARY_PATH="$cli_path" ldd "$carry/tessera-cli" | grep "not found"
} 2>&1 | tee -a "$log"


# run_row NAME MIN_SECONDS COMMAND...: runs when at least MIN_SECONDS are left, with a timeout
# at the deadline; CSV rows (stdout of the PyTorch script, --csv of tessera-cli) are appended.
append_csv() {  # FILE TARGET
  [ -s "$1" ] || return
  [ -s "$2" ] || head -1 "$1" >"$2"
  tail -n +2 "$1" >>"$2"
}
tessera() {  # MIN_SECONDS ARGS...
  local need=$1; shift
  local left=$((deadline - SECONDS))
  if [ "$left" -lt "$need" ]; then echo "SKIPPED (only ${left}s left): tessera-cli bench $*" | tee -a "$log"; return; fi
  # FUSED=1: cuDNN's runtime-compiled conv+bias+residual engines (longer prepare), own CSV.
  local target="$out/tessera.csv" fusion=0
  if [ "${FUSED:-0}" = 1 ]; then target="$out/tessera_fused.csv"; fusion=1; fi
  echo "== tessera-cli bench $* (runtime fusion $fusion)" | tee -a "$log"
  rm -f /tmp/compare/t.csv
  timeout "$left" env LD_LIBRARY_PATH="$cli_path" TESSERA_CUDNN_RUNTIME_FUSION="$fusion" "$carry/tessera-cli" bench \
    --backend cuda "$@" --csv /tmp/compare/t.csv 2>&1 | tee -a "$log"
  append_csv /tmp/compare/t.csv "$target"
}
pytorch() {  # MIN_SECONDS ARGS...
  local need=$1; shift
  local left=$((deadline - SECONDS))
  if [ "$left" -lt "$need" ]; then echo "SKIPPED (only ${left}s left): torch_tiled_ddim.py $*" | tee -a "$log"; return; fi
  echo "== python3 bench/torch_tiled_ddim.py $*" | tee -a "$log"
  timeout "$left" python3 bench/torch_tiled_ddim.py "$@" 2>>"$log" | tee /tmp/compare/p.csv | tee -a "$log"
  append_csv /tmp/compare/p.csv "$out/pytorch.csv"
}

cifar=(--shape cifar --size 1024 --tile 64 --overlap 16 --steps 20)
church=(--shape church --size 1024 --tile 256 --overlap 32 --steps 20)

if [ "$part" = 1 ] || [ "$part" = all ]; then
  # Every Tessera row (graphs off, tile, step; lanes auto), the best mode again with one lane,
  # then PyTorch with the whole step captured.
  tessera 60 "${cifar[@]}" --batch 8,32 --graphs off,tile,step --repeats 3
  tessera 60 "${church[@]}" --batch 1,4,16 --graphs off,tile,step --repeats 3
  tessera 90 "${cifar[@]}" --batch 1 --graphs tile,step,off --repeats 3
  tessera 40 "${church[@]}" --batch 1,4,16 --graphs tile,step --lanes 1 --repeats 3
  tessera 40 "${cifar[@]}" --batch 8,32 --graphs step --lanes 1 --repeats 3
  tessera 40 "${cifar[@]}" --batch 1 --graphs tile --lanes 1 --repeats 1
  pytorch 100 "${cifar[@]}" --batch 1,8,32 --modes graph --repeats 3
  pytorch 40 "${church[@]}" --batch 1,4,16 --modes graph --repeats 3
fi
if [ "$part" = 2 ] || [ "$part" = all ]; then
  # torch.compile (about a minute of compilation per batch size).
  pytorch 200 "${cifar[@]}" --batch 1,8,32 --modes compile --repeats 3
  pytorch 200 "${church[@]}" --batch 1,4,16 --modes compile --repeats 3
fi
if [ "$part" = 3 ] || [ "$part" = all ]; then
  # Tessera rows with the auto lanes of the final rule (4 lanes below 16 Ki pixels per
  # forward, else 2) where part 1 ran other counts; PyTorch eager (cifar B = 1: about two
  # minutes per image); per-op profiles (event-record nodes in one captured forward).
  tessera 60 "${cifar[@]}" --batch 1 --graphs tile,step,off --repeats 3
  tessera 40 "${cifar[@]}" --batch 8 --graphs off,tile,step --repeats 3
  tessera 40 "${church[@]}" --batch 1 --graphs off,tile,step --repeats 3
  pytorch 40 "${church[@]}" --batch 1,4,16 --modes eager --repeats 3
  pytorch 60 "${cifar[@]}" --batch 8,32 --modes eager --repeats 3
  pytorch 130 "${cifar[@]}" --batch 1 --modes eager --repeats 1
  for p in "cifar 64 32" "church 256 4"; do  # shape, tile, batch
    [ $((deadline - SECONDS)) -gt 30 ] || break
    set -- $p
    echo "== tessera-cli bench --profile --shape $1 --tile $2 --batch $3" | tee -a "$log"
    timeout 60 env LD_LIBRARY_PATH="$cli_path" "$carry/tessera-cli" bench --profile --shape "$1" --tile "$2" \
      --batch "$3" 2>&1 | tail -45 | tee -a "$log"
  done
fi

echo "== results (part $part, $SECONDS s)" | tee -a "$log"
for f in "$out/tessera.csv" "$out/tessera_fused.csv" "$out/pytorch.csv"; do
  [ -s "$f" ] || continue
  if command -v column >/dev/null; then column -s, -t <"$f" | cut -c1-200; else cut -d, -f1-15 "$f"; fi | tee -a "$log"
done
