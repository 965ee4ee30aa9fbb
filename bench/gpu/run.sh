#!/usr/bin/env bash
# Tessera's GPU measurements, each beside its PyTorch peer in the same call (docs/PERFORMANCE.md).
# Runs on a machine with an NVIDIA GPU, its driver, cuDNN 9 and cuBLAS 13, PyTorch for the peers, and none of
# the project's build dependencies: the build travels as an archive from bench/gpu/pack.sh.
usage() {
  cat <<'EOF'
Usage: bench/gpu/run.sh [options] MODE...
  --tessera PATH    the build to measure (env TESSERA): an archive from bench/gpu/pack.sh, a folder with
                    bin/tessera-cli (an unpacked archive, a relocatable bundle) or a build folder
  --before PATH     the build to compare with (env TESSERA_BEFORE): modes before-after and cpu-scaling
  --diffusers PATH  diffusers' src/ folder, or an archive of it (env DIFFUSERS_SRC), for the Stable
                    Diffusion peers; without it, the diffusers PyTorch's Python has installed
  --spandrel PATH   spandrel's libs/spandrel folder, or an archive holding libs/spandrel (env SPANDREL_SRC),
                    for the upscale peer; without it, the spandrel PyTorch's Python has installed
  --out DIR         the results folder (env OUT): a log per step, CSVs, steps.tsv, run.log
  --deadline S      no step runs past S seconds after the start (env DEADLINE, default 550)
  --archive         the results as one results.tar.xz in the results folder
Modes:
  info          the machine: GPU, driver, CPU, the cuDNN and cuBLAS found, torch and diffusers
  unet          SD 1.5 UNet per call at UNet batch 2 and 16 (CFG 7, tile graphs); PyTorch: diffusers'
                UNet2DConditionModel + CUDA graph (batch 2), torch.compile + CUDA graph (batch 16)
  sdxl          SDXL UNet per call at UNet batch 8; PyTorch + CUDA graph
  flux          FLUX.1-dev's transformer per call (random weights, bf16, one 1024-px tile: 4,096 image + 512 text
                tokens, guidance embedded) at tile batch 1 and 4, tile graphs; PyTorch: diffusers'
                FluxTransformer2DModel + torch.compile + CUDA graph. FLUX_PART=tessera|pytorch runs one half (the
                whole may not fit one call: each half prepares 11.9 G parameters); FLUX_S: each half's limit (400)
  job-controlnet  the 2048x2048 SD 1.5 image-to-image upscale (strength 0.5, tile 512, overlap 64, CFG 7, 20 steps
                DPM++ 2M Karras, fp16) with and without a ControlNet of control_v11f1e_sd15_tile's shape (the start
                image as control image) at tile batches JOB_BATCHES (default auto,8); diffusers ControlNetModel +
                UNet + torch.compile + CUDA graph at TORCH_JOB_BATCHES (default 8)
  job-flux      the whole 2048x2048 FLUX.1-dev job (random weights: tile 1024, overlap 128 = 9 tiles, 20 steps of
                flow matching Euler, guidance 3.5, bf16): tessera-cli render --model random:flux-dev --batch-count
                JOB_FLUX_COUNT (default 3) on one engine, the first job the warm-up (weights drawn and uploaded,
                captures), at tile batches JOB_FLUX_BATCHES (default 1; a process each) with CUDA graphs
                JOB_FLUX_GRAPHS (default tile); the later jobs' records as CSV rows (job_flux_tessera_bB.csv) in the
                peer's columns. PyTorch: bench/pytorch/torch_flux_tiled.py --compile at TORCH_JOB_FLUX_BATCHES
                (default 1,2; one process, a warm-up job per batch). FLUX_PART=tessera|pytorch runs one half;
                JOB_FLUX_S: each step's limit (550). Both halves' rows in job_flux.csv
  job           the whole 2048x2048 job of JOB_SHAPE (default sd15; sd21, sdxl), native tiles overlapping by
                1/8, CFG 7, 20 steps DPM++ 2M Karras, fp16, at tile batches JOB_BATCHES (default auto,8);
                diffusers + torch.compile + CUDA graph at TORCH_JOB_BATCHES (default 13)
  vae           the SD VAE: decode 2048 (auto, tiled), 4096 (auto), encode 2048; diffusers untiled and
                enable_tiling(), cudnn.benchmark off and on
  ddpm          cifar-shaped B 32 (step graphs) and church-shaped B 16 (tile graphs) at 1024x1024;
                PyTorch torch.compile + whole-step CUDA graph
  ddpm-matrix   both DDPM shapes at every batch and graph mode; PyTorch in TORCH_MODES (default
                "graph compile"); DDPM_MATRIX=tessera|pytorch runs one half (the whole takes two calls)
  attention     softmax(Q K^T) V alone at the SD shapes: Tessera's kernel and cuDNN's
                (cuda_tst_flashattention perf), PyTorch's SDPA backends
  profile       one forward's GPU time per op kind: SD 1.5 (UNet batch 16), SDXL (8), cifar, church
  ops-perf      each op of OPS_MODELS' graphs (default sd15) alone, batch 8 (cuda_tst_backendops perf)
  lanes         the DDPM shapes at several lane counts
  repro         one image across processes, graph modes and lanes (tuning cache); prepare cold and warm
  autofit       the auto tile batch of an SD 1.5 2048 job, the GPU to itself and mostly held by PyTorch
  cpu-scaling   the CPU engine's quick-cpu render at CPU_THREADS (default "2 8 16") in turn, CPU_REPEATS
                times (default 3); with --before, both builds at the largest count in turn
  cpu-pairs     single-threaded sgemm per CPU: alone, beside each other CPU, all at once
  text          SD 1.5's text encoder on the CPU engine (TEXT_ENCODE, default bin/text_encode)
  suites        every cuda_tst_* suite; cuda_tst_backendops in SHARDS processes (OPS_MODELS to narrow)
  sanitizer     compute-sanitizer memcheck, racecheck, synccheck on small tiled renders
  renders       the default model at 1024x1024 and image-to-image; an SD 1.5-shaped 4x upscale
  upscale       an ESRGAN of 4x-UltraSharp's shape (64 features, 23 blocks) upscaling UPSCALE_SIZE (default
                1024) x4, fp16: Tessera at tiles UPSCALE_TILES (default 0,512,256; 0 the whole image) with
                CUDA graphs; spandrel + PyTorch (channels_last, cudnn.benchmark, ComfyUI's tiles blended
                on the GPU) at TORCH_UPSCALE_TILES (default 256,384,512,768,0), eager and CUDA graph; the
                CPU engine at 96x96 on 2 and 16 threads (UPSCALE_CPU=0: not)
  window        the window on the GPU (a bundle with bin/tessera): an SD run, before/after, reopened
  window-flux   the window on the GPU running random:flux-dev at 2048x1536 (tile 1024, overlap 128, 20 steps,
                guidance 3.5, bf16, tile graphs), its screenshot when the run ends: window-flux-gpu-1920x1080.png;
                WINDOW_FLUX_S: the step's limit (550)
  before-after  the same bench rows with --before and --tessera in the order before, after, after,
                before; a table of medians and after/before (rows: BEFORE_AFTER_ROWS, ';' between)
EOF
}
set -u

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
pytorch=bench/pytorch

die() {
  echo "run.sh: $*" >&2
  exit 2
}

tessera_src=${TESSERA:-}
before_src=${TESSERA_BEFORE:-}
diffusers_src=${DIFFUSERS_SRC:-}
spandrel_src=${SPANDREL_SRC:-}
out=${OUT:-}
deadline=${DEADLINE:-550}
archive=0
modes=()
while (($#)); do
  case "$1" in
  --tessera) tessera_src=${2:?--tessera PATH}; shift 2 ;;
  --before) before_src=${2:?--before PATH}; shift 2 ;;
  --diffusers) diffusers_src=${2:?--diffusers PATH}; shift 2 ;;
  --spandrel) spandrel_src=${2:?--spandrel PATH}; shift 2 ;;
  --out) out=${2:?--out DIR}; shift 2 ;;
  --deadline) deadline=${2:?--deadline SECONDS}; shift 2 ;;
  --archive) archive=1; shift ;;
  -h | --help) usage; exit 0 ;;
  -*) usage >&2; die "unknown option $1" ;;
  *) modes+=("$1"); shift ;;
  esac
done
((${#modes[@]})) || { usage >&2; die "no mode given"; }
[[ -n "$out" ]] || die "give the results folder: --out DIR or OUT=DIR"
[[ "$deadline" =~ ^[0-9]+$ ]] || die "--deadline takes seconds"
# Paths as the caller gave them, then everything from the repository's root (the scripts and tests/data).
for path in tessera_src before_src diffusers_src spandrel_src out; do
  [[ -n "${!path}" ]] && printf -v "$path" '%s' "$(realpath -m -- "${!path}")"
done
cd "$repo" || exit 2
mkdir -p "$out" || die "cannot create $out"
results=$out
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
((archive)) && results=$work/results && mkdir -p "$results"
printf 'step\trc\tseconds\n' >"$results/steps.tsv"

# ---------------------------------------------------------------- steps

# step NAME LIMIT CMD...: CMD under `timeout` (LIMIT seconds, never past the deadline), its output in
# NAME.log, its exit status and seconds in steps.tsv; the log's result lines echoed.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((deadline - SECONDS))
  if ((left < 20)); then
    echo "== $name: skipped, $left s left before the deadline"
    printf '%s\tskipped\t0\n' "$name" >>"$results/steps.tsv"
    return 0
  fi
  ((limit > left)) && limit=$left
  local t0=$SECONDS rc=0
  timeout --kill-after=10 "$limit" "$@" >"$results/$name.log" 2>&1 || rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" >>"$results/steps.tsv"
  echo "== $name: rc $rc, $((SECONDS - t0)) s"
  grep -E '^(FAIL|Totals)|Loc:|^finished:|failed|rror|SUMMARY|^[a-z0-9+-]+,' "$results/$name.log" | cut -c1-240 | head -40
  return 0
}

# stepmem NAME LIMIT CMD...: step, with the peak device memory in use over it (nvidia-smi, 100 ms samples).
stepmem() {
  local name=$1 smi
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$results/$name.mem" 2>/dev/null &
  smi=$!
  step "$@"
  kill "$smi" 2>/dev/null
  wait "$smi" 2>/dev/null
  echo "   $name: peak device memory in use $(sort -n "$results/$name.mem" | tail -1) MiB (nvidia-smi)"
}

# The CSV lines a PyTorch peer printed (its header and rows) as NAME.csv.
peer_csv() {
  grep -E '^(engine|pytorch)' "$results/$1.log" >"$results/$1.csv" 2>/dev/null || rm -f "$results/$1.csv"
}

# One CSV of FILES... (the first header kept) as TARGET.
join_csv() {
  local target=$1 f first=1
  shift
  for f in "$@"; do
    [[ -s "$f" ]] || continue
    if ((first)); then head -1 "$f" >"$target"; first=0; fi
    tail -n +2 "$f" >>"$target"
  done
}

# What each render's record says (status, batch, prepare, total, seam, the notes on text, VAE and batch).
records() {
  local j
  for j in "$@"; do
    [[ -f "$j" ]] || continue
    python3 - "$j" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
notes = [m for m in r.get("messages", []) if m.startswith(("vae", "text", "batch", "lanes", "precision", "sdxl"))]
print(sys.argv[1].split("/")[-2], r.get("status"), "prepare_ms", round(r.get("prepare_ms", 0)),
      "total_ms", round(r.get("total_ms", 0)), "seam", r.get("seam_score"), notes)
EOF
  done
}

# ---------------------------------------------------------------- builds and libraries

# The folder of the first file named like $1 outside Python's packages (PyTorch ships its own cuDNN), else any.
library_dir() {
  local hits pick
  hits=$(find /usr /opt -name "$1" 2>/dev/null)
  pick=$(grep -vE 'site-packages|dist-packages' <<<"$hits" | head -1)
  [[ -n "$pick" ]] || pick=$(head -1 <<<"$hits")
  [[ -n "$pick" ]] && dirname "$pick"
}

# The suites and the CLI look for tests/data and resources/ in the source tree they were configured from:
# where that tree is missing here, it becomes a link to this checkout.
link_source_dir() {
  local want
  want=$(cat "$1" 2>/dev/null) || return 0
  [[ -n "$want" && ! -e "$want" ]] || return 0
  if mkdir -p "$(dirname "$want")" 2>/dev/null && ln -s "$repo" "$want" 2>/dev/null; then
    echo "the build's source tree $want: linked to $repo"
  else
    echo "note: the build looks for tests/data and resources/ under $want, which is missing here"
  fi
}

declare -A root libpath
# resolve_build WHICH PATH: root[WHICH] holds bin/ (and rtlibs/, lib/), libpath[WHICH] its library path.
resolve_build() {
  local which=$1 src=$2 dir=$work/$1
  mkdir -p "$dir"
  if [[ -f "$src" ]]; then
    tar xf "$src" -C "$dir" || die "cannot unpack $src"
    if [[ ! -d "$dir/bin" ]]; then  # a bundle's archive: one folder
      local inner
      inner=$(find "$dir" -mindepth 2 -maxdepth 2 -name bin -type d | head -1)
      [[ -n "$inner" ]] || die "$src holds no bin/"
      dir=$(dirname "$inner")
    fi
  elif [[ -d "$src/bin" ]]; then
    dir=$(cd "$src" && pwd)
  elif [[ -x "$src/app/tessera-cli" ]]; then  # a build folder
    local b t
    b=$(cd "$src" && pwd)
    mkdir -p "$dir/bin"
    ln -s "$b/app/tessera-cli" "$dir/bin/"
    [[ -x "$b/ui/tessera" ]] && ln -s "$b/ui/tessera" "$dir/bin/"
    for t in "$b"/tests/cuda_tst_*; do [[ -f "$t" && -x "$t" ]] && ln -s "$t" "$dir/bin/"; done
    sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$b/CMakeCache.txt" >"$dir/source-dir"
  else
    die "$src: not an archive from pack.sh, a folder with bin/ or a build folder"
  fi
  link_source_dir "$dir/source-dir"
  root[$which]=$dir
  libpath[$which]="$dir/rtlibs:$dir/lib:$cudnn:$cublas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

cudnn=${CUDNN_LIB_DIR:-$(library_dir 'libcudnn.so.9*')}
cublas=${CUBLAS_LIB_DIR:-$(library_dir 'libcublas.so.13*')}
[[ -n "$tessera_src" ]] && resolve_build after "$tessera_src"
[[ -n "$before_src" ]] && resolve_build before "$before_src"

# Tessera's programs with their libraries; PyTorch with none of them (it loads its own cuDNN).
bin=${root[after]:-$work/none}/bin
tenv=(env "LD_LIBRARY_PATH=${libpath[after]:-}" QT_QPA_PLATFORM=offscreen)
cli=("${tenv[@]}" "$bin/tessera-cli")
tuning=$work/tuning-after.json
export TESSERA_TEST_DATA_DIR="$repo/tests/data"

if [[ -n "$diffusers_src" ]]; then
  if [[ -f "$diffusers_src" ]]; then
    mkdir -p "$work/diffusers"
    tar xf "$diffusers_src" -C "$work/diffusers" || die "cannot unpack $diffusers_src"
    diffusers_src=$work/diffusers
  fi
  [[ -d "$diffusers_src/src/diffusers" ]] && diffusers_src=$diffusers_src/src
  [[ -d "$diffusers_src/diffusers" ]] || die "$diffusers_src: no diffusers package in it"
fi
torchpy=(env -u LD_LIBRARY_PATH "PYTHONPATH=$diffusers_src${PYTHONPATH:+:$PYTHONPATH}" python3)
if [[ -n "$spandrel_src" ]]; then
  if [[ -f "$spandrel_src" ]]; then
    mkdir -p "$work/spandrel"
    tar xf "$spandrel_src" -C "$work/spandrel" || die "cannot unpack $spandrel_src"
    spandrel_src=$work/spandrel
  fi
  [[ -d "$spandrel_src/libs/spandrel" ]] && spandrel_src=$spandrel_src/libs/spandrel
  [[ -d "$spandrel_src/spandrel" ]] || die "$spandrel_src: no spandrel package in it"
fi
spandrelpy=(env -u LD_LIBRARY_PATH "PYTHONPATH=$spandrel_src${PYTHONPATH:+:$PYTHONPATH}" python3)
# PyTorch's caches (inductor, Triton) need a writable home.
[[ -w "${HOME:-/nonexistent}" ]] || export HOME=$work/home XDG_CACHE_HOME=$work/home/.cache
mkdir -p "$HOME" 2>/dev/null

need_tessera() {
  [[ -x "$bin/tessera-cli" ]] || { echo "== $1: skipped, no build (--tessera)"; return 1; }
}

# ---------------------------------------------------------------- modes

mode_info() {
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA node|L2|L3|Hypervisor)'
  echo "cuDNN: ${cudnn:-not found}"
  echo "cuBLAS: ${cublas:-not found}"
  "${torchpy[@]}" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version())'
  "${torchpy[@]}" -c 'import diffusers, transformers; print("diffusers", diffusers.__version__, "transformers", transformers.__version__)'
  local which
  for which in "${!root[@]}"; do
    echo "$which: ${root[$which]}"
    LD_LIBRARY_PATH=${libpath[$which]} ldd "${root[$which]}/bin/tessera-cli" | grep "not found"
  done
}

mode_unet() {
  need_tessera unet || return
  step unet_tessera_sd15 200 "${cli[@]}" bench --shape sd15 --cfg 7 --precision fp16 --graphs tile --batch 1,8 \
    --repeats 20 --tuning-cache "$tuning" --csv "$results/unet_tessera_sd15.csv"
  step unet_torch_sd15_graph 150 "${torchpy[@]}" $pytorch/torch_sd_unet.py --shape sd15 --batch 1 --cfg 7 \
    --repeats 20 --modes graph
  step unet_torch_sd15_compile 250 "${torchpy[@]}" $pytorch/torch_sd_unet.py --shape sd15 --batch 8 --cfg 7 \
    --repeats 20 --modes compile+graph
  peer_csv unet_torch_sd15_graph
  peer_csv unet_torch_sd15_compile
}

mode_sdxl() {
  need_tessera sdxl || return
  step unet_tessera_sdxl 200 "${cli[@]}" bench --shape sdxl --cfg 7 --precision fp16 --graphs tile --batch 4 \
    --repeats 10 --tuning-cache "$tuning" --csv "$results/unet_tessera_sdxl.csv"
  step unet_torch_sdxl_graph 150 "${torchpy[@]}" $pytorch/torch_sd_unet.py --shape sdxl --batch 4 --cfg 7 \
    --repeats 10 --modes graph
  peer_csv unet_torch_sdxl_graph
}

mode_flux() {
  local part=${FLUX_PART:-all}
  if [[ "$part" != pytorch ]] && need_tessera flux; then
    stepmem flux_tessera "${FLUX_S:-400}" "${cli[@]}" bench --shape flux-dev --size 2048 --tile 1024 --overlap 128 \
      --batch 1,4 --precision bf16 --graphs tile --repeats 5 --tuning-cache "$tuning" --csv "$results/flux_tessera.csv"
  fi
  if [[ "$part" != tessera ]]; then
    stepmem flux_torch "${FLUX_S:-400}" "${torchpy[@]}" $pytorch/torch_flux.py --shape flux-dev --size 2048 \
      --tile 1024 --overlap 128 --batch 1,4 --modes compile+graph --repeats 5
    peer_csv flux_torch
  fi
}

# Render records (JSON files) as CSV rows in torch_sd_tiled.py's columns, in TARGET; the first job by start time
# (the warm-up: weights drawn and uploaded, captures) is said apart and left out. sample_s = the steps' wall times
# (as bench --job counts them), decode_s = the VAE decode, total_s = their sum, s_per_step; text_s = CLIP-L and T5
# (the record's text_encode, a part of its prepare, not in total_s; the peer runs no text encoder);
# peak_alloc_mib = the memory plan's total, peak_used_mib = the run's peak device memory in use.
flux_records() {
  local target=$1
  shift
  python3 - "$target" "$@" <<'EOF'
import json, sys
records = []
for path in sys.argv[2:]:
    try:
        with open(path) as f:
            records.append(json.load(f))
    except (OSError, ValueError):
        pass
records.sort(key=lambda r: r.get("started_at", ""))
header = ("engine,shape,size,tile,overlap,steps,cfg,batch,tiles,text_s,encode_s,sample_s,decode_s,total_s,"
          "s_per_step,peak_alloc_mib,peak_used_mib,device")
rows = []
for i, r in enumerate(records):
    c, env = r.get("config", {}), r.get("environment", {})
    steps = r.get("steps", [])
    sample = sum(s.get("wall_ms", 0) for s in steps) / 1000
    decode = r.get("vae_decode", {}).get("ms", 0) / 1000
    text = r.get("text_encode", {}).get("ms", 0) / 1000
    print("%s: %s, batch %s, graphs %s, prepare_s %.1f (text_s %.3f), sample_s %.3f, decode_s %.3f, peak %s MiB" % (
        "warm-up job" if i == 0 else "job %d" % i, r.get("status"), c.get("batch"), r.get("graphs", {}).get("mode"),
        r.get("prepare_ms", 0) / 1000, text, sample, decode, r.get("peak_device_mib")))
    if i == 0 or r.get("status") != "finished" or not steps:
        continue
    device = env.get("device", "")
    rows.append("tessera-%s,flux-dev,%s,%s,%s,%s,1,%s,%s,%.3f,,%.3f,%.3f,%.3f,%.4f,%.0f,%.0f,%s" % (
        env.get("backend", ""), c.get("width"), c.get("tile"), c.get("overlap"), c.get("steps"), c.get("batch"),
        r.get("tile_count"), text, sample, decode, sample + decode, sample / len(steps),
        r.get("memory_plan", {}).get("total_mib", 0), r.get("peak_device_mib", 0),
        '"%s"' % device if "," in device else device))
if rows:
    with open(sys.argv[1], "w") as f:
        f.write("\n".join([header] + rows) + "\n")
    print("\n".join([header] + rows))
EOF
}

mode_job_flux() {
  local part=${FLUX_PART:-all} b dir
  if [[ "$part" != pytorch ]] && need_tessera job-flux; then
    for b in ${JOB_FLUX_BATCHES:-1}; do
      dir=$work/job_flux_b$b
      stepmem "job_flux_tessera_b$b" "${JOB_FLUX_S:-550}" "${cli[@]}" render --model random:flux-dev \
        --prompt "a lighthouse on a cliff above a stormy sea at dusk, dramatic light, detailed" --guidance 3.5 \
        --width 2048 --height 2048 --tile 1024 --overlap 128 --steps 20 --batch "$b" --precision bf16 \
        --backend cuda --graphs "${JOB_FLUX_GRAPHS:-tile}" --preview-every 0 --batch-count "${JOB_FLUX_COUNT:-3}" \
        --tuning-cache "$tuning" --out "$dir"
      mkdir -p "$results/job_flux_tessera_b$b"
      cp "$dir"/*.json "$results/job_flux_tessera_b$b/" 2>/dev/null
      flux_records "$results/job_flux_tessera_b$b.csv" "$dir"/*.json | tee "$results/job_flux_tessera_b$b.txt"
    done
  fi
  if [[ "$part" != tessera ]]; then
    stepmem job_flux_torch "${JOB_FLUX_S:-550}" "${torchpy[@]}" $pytorch/torch_flux_tiled.py --shape flux-dev \
      --size 2048 --tile 1024 --overlap 128 --steps 20 --guidance 3.5 --batch "${TORCH_JOB_FLUX_BATCHES:-1,2}" \
      --compile
    peer_csv job_flux_torch
  fi
  join_csv "$results/job_flux.csv" "$results"/job_flux_tessera_b*.csv "$results/job_flux_torch.csv"
  [[ -f "$results/job_flux.csv" ]] && cat "$results/job_flux.csv"
}

mode_job() {
  need_tessera job || return
  local shape=${JOB_SHAPE:-sd15} tile b
  case "$shape" in
  sd15) tile=512 ;;
  sd21) tile=768 ;;
  sdxl) tile=1024 ;;
  *) echo "== job: JOB_SHAPE is sd15, sd21 or sdxl"; return ;;
  esac
  stepmem "job_tessera_$shape" "${JOB_S:-200}" "${cli[@]}" bench --shape "$shape" --job --size 2048 --tile "$tile" \
    --overlap $((tile / 8)) --batch "${JOB_BATCHES:-auto,8}" --repeats 3 --tuning-cache "$tuning" \
    --csv "$results/job_tessera_$shape.csv"
  for b in ${TORCH_JOB_BATCHES:-13}; do
    stepmem "job_torch_${shape}_b$b" 230 "${torchpy[@]}" $pytorch/torch_sd_tiled.py --shape "$shape" --size 2048 \
      --tile "$tile" --overlap $((tile / 8)) --steps 20 --cfg 7 --batch "$b" --compile
    peer_csv "job_torch_${shape}_b$b"
  done
}

mode_job_controlnet() {
  need_tessera job-controlnet || return
  local b with
  for with in "" "--controlnet"; do
    stepmem "cnjob_tessera${with:+_controlnet}" "${JOB_S:-200}" "${cli[@]}" bench --shape sd15 --job --size 2048 \
      --tile 512 --overlap 64 --batch "${JOB_BATCHES:-auto,8}" --repeats 3 --tuning-cache "$tuning" \
      --strength 0.5 $with --csv "$results/cnjob_tessera${with:+_controlnet}.csv"
  done
  # The peer without its ControlNet (the ControlNet's share on PyTorch's side) when TORCH_CN_PLAIN=1.
  for b in ${TORCH_JOB_BATCHES:-8}; do
    for with in "--controlnet" ${TORCH_CN_PLAIN:+""}; do
      stepmem "cnjob_torch${with:+_controlnet}_b$b" 300 "${torchpy[@]}" $pytorch/torch_sd_tiled.py --shape sd15 \
        --size 2048 --tile 512 --overlap 64 --steps 20 --cfg 7 --batch "$b" --compile --strength 0.5 $with
      peer_csv "cnjob_torch${with:+_controlnet}_b$b"
    done
  done
}

mode_vae() {
  need_tessera vae || return
  local run size tiling bench mode
  for run in 2048:auto 2048:on 4096:auto; do
    size=${run%:*} tiling=${run#*:}
    stepmem "vae_tessera_decode_${size}_$tiling" 150 "${cli[@]}" bench --shape vae --size "$size" --tiling "$tiling" \
      --repeats 5 --tuning-cache "$tuning" --csv "$results/vae_tessera_decode_${size}_$tiling.csv"
  done
  stepmem vae_tessera_encode_2048 150 "${cli[@]}" bench --shape vae --size 2048 --encode --repeats 5 \
    --tuning-cache "$tuning" --csv "$results/vae_tessera_encode_2048.csv"
  # TORCH_CUDNN_BENCHMARK=0: no cuDNN algorithm search per new input shape (diffusers' tiles meet several).
  for bench in 0 1; do
    for mode in untiled diffusers-tiled; do
      stepmem "vae_torch_decode_2048_${mode}_benchmark$bench" 120 env TORCH_CUDNN_BENCHMARK=$bench "${torchpy[@]}" \
        $pytorch/torch_sd_tiled.py --vae-only --shape sd15 --size 2048 --repeats 5 --vae-modes "$mode" \
        --csv "$results/vae_torch_decode_2048_${mode}_benchmark$bench.csv"
    done
  done
  stepmem vae_torch_encode_2048 120 env TORCH_CUDNN_BENCHMARK=0 "${torchpy[@]}" $pytorch/torch_sd_tiled.py --vae-only \
    --shape sd15 --size 2048 --encode --repeats 5 --csv "$results/vae_torch_encode_2048.csv"
  stepmem vae_torch_decode_4096_diffusers-tiled 200 env TORCH_CUDNN_BENCHMARK=0 "${torchpy[@]}" \
    $pytorch/torch_sd_tiled.py --vae-only --shape sd15 --size 4096 --repeats 3 --vae-modes diffusers-tiled \
    --csv "$results/vae_torch_decode_4096_diffusers-tiled.csv"
  join_csv "$results/vae.csv" "$results"/vae_tessera_*.csv "$results"/vae_torch_*.csv
  [[ -f "$results/vae.csv" ]] && cat "$results/vae.csv"
}

cifar=(--shape cifar --size 1024 --tile 64 --overlap 16 --steps 20 --precision fp16)
church=(--shape church --size 1024 --tile 256 --overlap 32 --steps 20 --precision fp16)
torch_cifar=(--shape cifar --size 1024 --tile 64 --overlap 16 --steps 20)
torch_church=(--shape church --size 1024 --tile 256 --overlap 32 --steps 20)

mode_ddpm() {
  need_tessera ddpm || return
  step ddpm_tessera_cifar_b32 120 "${cli[@]}" bench "${cifar[@]}" --batch 32 --graphs step --repeats 3 \
    --tuning-cache "$tuning" --csv "$results/ddpm_tessera_cifar_b32.csv"
  step ddpm_tessera_church_b16 120 "${cli[@]}" bench "${church[@]}" --batch 16 --graphs tile --repeats 3 \
    --tuning-cache "$tuning" --csv "$results/ddpm_tessera_church_b16.csv"
  step ddpm_torch_cifar_b32 200 "${torchpy[@]}" $pytorch/torch_tiled_ddim.py "${torch_cifar[@]}" --batch 32 \
    --modes compile --repeats 3
  step ddpm_torch_church_b16 200 "${torchpy[@]}" $pytorch/torch_tiled_ddim.py "${torch_church[@]}" --batch 16 \
    --modes compile --repeats 3
  peer_csv ddpm_torch_cifar_b32
  peer_csv ddpm_torch_church_b16
}

mode_ddpm_matrix() {
  local part=${DDPM_MATRIX:-all} m
  if [[ "$part" != pytorch ]] && need_tessera ddpm-matrix; then
    step ddpm_matrix_tessera_church 200 "${cli[@]}" bench "${church[@]}" --batch 1,4,16 --graphs off,tile,step \
      --repeats 3 --tuning-cache "$tuning" --csv "$results/ddpm_matrix_tessera_church.csv"
    step ddpm_matrix_tessera_cifar 200 "${cli[@]}" bench "${cifar[@]}" --batch 8,32 --graphs off,tile,step \
      --repeats 3 --tuning-cache "$tuning" --csv "$results/ddpm_matrix_tessera_cifar.csv"
    # one image of 441 single-tile calls takes 5-15 s: one measured run per mode
    step ddpm_matrix_tessera_cifar_b1 150 "${cli[@]}" bench "${cifar[@]}" --batch 1 --graphs tile,step,off \
      --repeats 1 --tuning-cache "$tuning" --csv "$results/ddpm_matrix_tessera_cifar_b1.csv"
    step ddpm_matrix_tessera_one_lane 150 "${cli[@]}" bench "${cifar[@]}" --batch 1 --graphs tile --lanes 1 \
      --repeats 1 --tuning-cache "$tuning" --csv "$results/ddpm_matrix_tessera_one_lane.csv"
  fi
  if [[ "$part" != tessera ]]; then
    for m in ${TORCH_MODES:-graph compile}; do
      step "ddpm_matrix_torch_church_$m" 200 "${torchpy[@]}" $pytorch/torch_tiled_ddim.py "${torch_church[@]}" \
        --batch 1,4,16 --modes "$m" --repeats 3
      step "ddpm_matrix_torch_cifar_$m" 250 "${torchpy[@]}" $pytorch/torch_tiled_ddim.py "${torch_cifar[@]}" \
        --batch 8,32 --modes "$m" --repeats 3
      step "ddpm_matrix_torch_cifar_b1_$m" 200 "${torchpy[@]}" $pytorch/torch_tiled_ddim.py "${torch_cifar[@]}" \
        --batch 1 --modes "$m" --repeats 1 --warmup 1
      peer_csv "ddpm_matrix_torch_church_$m"
      peer_csv "ddpm_matrix_torch_cifar_$m"
      peer_csv "ddpm_matrix_torch_cifar_b1_$m"
    done
  fi
}

mode_attention() {
  need_tessera attention || return
  local batch=${ATTENTION_BATCH:-16}
  step attention_tessera 150 "${tenv[@]}" TESSERA_FLASH_PERF=1 TESSERA_FLASH_PERF_BATCH="$batch" \
    "$bin/cuda_tst_flashattention" perf
  grep -E '^(sd|self|cross|pixel|shape|soft)' "$results/attention_tessera.log" | cut -c1-150 | head -40
  step attention_torch 150 "${torchpy[@]}" $pytorch/torch_attention.py --batch "$batch" --sdxl-batch $((batch / 2)) \
    --repeats 20
  cat "$results/attention_torch.log"
}

mode_profile() {
  need_tessera profile || return
  step profile_sd15 150 "${cli[@]}" bench --profile --shape sd15 --cfg 7 --precision fp16 --batch 8 --repeats 10 \
    --tuning-cache "$tuning"
  step profile_sdxl 200 "${cli[@]}" bench --profile --shape sdxl --cfg 7 --precision fp16 --batch 4 --repeats 5 \
    --tuning-cache "$tuning"
  step profile_cifar 60 "${cli[@]}" bench --profile --shape cifar --tile 64 --batch 32 --tuning-cache "$tuning"
  step profile_church 60 "${cli[@]}" bench --profile --shape church --tile 256 --batch 4 --tuning-cache "$tuning"
}

mode_ops_perf() {
  need_tessera ops-perf || return
  step ops_perf "${OPS_S:-240}" "${tenv[@]}" TESSERA_BACKENDOPS_PERF=1 TESSERA_BACKENDOPS_MODELS="${OPS_MODELS:-sd15}" \
    "$bin/cuda_tst_backendops" perf
  echo "   $(grep -cE ' (fp16|bf16|fp32) ' "$results/ops_perf.log") op rows in ops_perf.log"
}

mode_lanes() {
  need_tessera lanes || return
  local lanes=(--size 1024 --steps 20 --repeats 1 --tuning-cache "$tuning")
  step lanes_cifar_b1 150 "${cli[@]}" bench --shape cifar --tile 64 --overlap 16 --batch 1 --graphs step,tile \
    --lanes 8,4,2,1 "${lanes[@]}" --csv "$results/lanes_cifar_b1.csv"
  step lanes_cifar 150 "${cli[@]}" bench --shape cifar --tile 64 --overlap 16 --batch 8,32 --graphs step \
    --lanes 4,2,1 "${lanes[@]}" --csv "$results/lanes_cifar.csv"
  step lanes_church 150 "${cli[@]}" bench --shape church --tile 256 --overlap 32 --batch 1,4,16 --graphs step \
    --lanes 4,2,1 "${lanes[@]}" --csv "$results/lanes_church.csv"
  join_csv "$results/lanes.csv" "$results"/lanes_*.csv
}

# One render per line: the image's hash, the tuning cache's hits and misses, prepare, lanes and graph mode.
mode_repro() {
  need_tessera repro || return
  local cache=$work/repro-tuning.json dir=$work/repro label g l shape args
  mkdir -p "$dir"
  repro_render() {  # LABEL CACHE GRAPHS LANES
    timeout 120 "${cli[@]}" render --backend cuda --model tests/data/models/cifar_like --width 512 --height 384 \
      --tile 64 --overlap 16 --batch 8 --precision fp16 --steps 10 --seed 7 --graphs "$3" --lanes "$4" \
      --tuning-cache "$2" --out "$dir/$1" >"$dir/$1.log" 2>&1 || { echo "$1: rc $?"; tail -3 "$dir/$1.log"; return; }
    python3 - "$1" "$dir/$1"/*.json <<'EOF'
import json, sys
m = json.load(open(sys.argv[2]))
t = m.get("tuning", {})
print("%s: sha %s  tuning hits %s misses %s  prepare %.0f ms  lanes %s graphs %s" % (sys.argv[1], m["image_sha256"][:12],
      t.get("hits"), t.get("misses"), m["prepare_ms"], m["graphs"]["lanes"], m["graphs"]["mode"]))
EOF
  }
  {
    repro_render cold "$cache" off 1
    repro_render warm "$cache" off 1
    for g in off tile step; do for l in 1 2; do repro_render "warm-$g-$l" "$cache" "$g" "$l"; done; done
    repro_render no-cache-1 off off 1
    repro_render no-cache-2 off off 1
    echo "== bench prepare, cold then warm cache"
    for shape in cifar church; do
      rm -f "$work/prepare-$shape.json"
      for label in cold warm warm; do
        if [[ $shape == cifar ]]; then args=("${cifar[@]}" --batch 8 --graphs step); else args=("${church[@]}" --batch 4 --graphs tile); fi
        timeout 200 "${cli[@]}" bench "${args[@]}" --steps 2 --repeats 1 --tuning-cache "$work/prepare-$shape.json" \
          --csv "$dir/prepare.csv" >/dev/null 2>&1 &&
          python3 -c "import csv,sys; r=next(csv.DictReader(open(sys.argv[1]))); print(sys.argv[2], r['shape'], 'batch', r['batch'], 'prepare', r['prepare_s'], 's')" \
            "$dir/prepare.csv" "$label"
      done
    done
  } 2>&1 | tee "$results/repro.log"
  [[ -x "$bin/cuda_tst_reproducible" ]] && step cuda_tst_reproducible 300 "${tenv[@]}" "$bin/cuda_tst_reproducible"
}

# The auto tile batch under memory pressure: an SD 1.5 2048 job with the GPU to itself, then with PyTorch holding
# all but the plan at 25 tiles less 55 % of its activations (a batch near 11 fits), then an asked-for --batch 25
# under the same pressure (refused at prepare, naming what fits).
mode_autofit() {
  need_tessera autofit || return
  local sd=(render --model random:sd15 --prompt "a lighthouse on a cliff" --negative-prompt "blurry" --cfg 7
    --width 2048 --height 2048 --tile 512 --overlap 64 --steps 3 --sampler "DPM++ 2M Karras" --graphs step
    --precision fp16 --tuning-cache "$tuning")
  step autofit_free 200 "${cli[@]}" "${sd[@]}" --out "$work/autofit_free"
  local leave hog
  leave=$(python3 -c "import json,glob,sys; r=json.load(open(glob.glob(sys.argv[1] + '/*.json')[0])); m=r['memory_plan']; print(int(m['total_mib'] - 0.55 * m['activations_mib'] + 600))" \
    "$work/autofit_free") || { echo "autofit: no record from the free run"; return; }
  echo "autofit: PyTorch leaves $leave MiB"
  "${torchpy[@]}" -c "
import sys, time, torch
free, total = torch.cuda.mem_get_info()
x = torch.empty(free - int(sys.argv[1]) * 2**20, dtype=torch.uint8, device='cuda')
print('held', x.numel() >> 20, 'MiB of', total >> 20, flush=True)
open(sys.argv[2], 'w').close()
time.sleep(400)" "$leave" "$work/hold.ready" >"$results/autofit_hold.log" 2>&1 &
  hog=$!
  for _ in $(seq 60); do [[ -f "$work/hold.ready" ]] && break; sleep 1; done
  cat "$results/autofit_hold.log"
  step autofit_pressed 200 "${cli[@]}" "${sd[@]}" --out "$work/autofit_pressed"
  step autofit_asked25 120 "${cli[@]}" "${sd[@]}" --batch 25 --out "$work/autofit_asked25"
  kill "$hog" 2>/dev/null
  wait "$hog" 2>/dev/null
  records "$work"/autofit_*/*.json | tee "$results/autofit_records.txt"
  tail -5 "$results/autofit_asked25.log"
}

# One quick-cpu render with build WHICH at THREADS: its device line, finished line and image hash.
quick_cpu() {
  local which=$1 threads=$2 dir log
  dir=$(mktemp -d -p "$work")
  log=$(LD_LIBRARY_PATH=${libpath[$which]} "${root[$which]}/bin/tessera-cli" render \
    --preset resources/presets/quick-cpu.json --threads "$threads" --out "$dir" 2>&1)
  echo "$which, $threads threads: $(grep -m1 '^finished:' <<<"$log")"
  grep -m1 '^run ' <<<"$log" | sed -E 's/.* steps on /   /'
  grep -ho '"image_sha256": *"[0-9a-f]*"' "$dir"/*.json | head -1 | sed 's/^/   /'
}

mode_cpu_scaling() {
  need_tessera cpu-scaling || return
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|L2|L3|Hypervisor)' | tee "$results/lscpu.txt"
  local threads=${CPU_THREADS:-2 8 16} repeats=${CPU_REPEATS:-3} r which most
  step cpu_scaling "${CPU_S:-250}" env "LD_LIBRARY_PATH=${libpath[after]}" THREADS="$threads" REPEATS="$repeats" \
    ORDER=interleave bash bench/cpu/cpu_scaling.sh "$bin/tessera-cli"
  grep '^#' "$results/cpu_scaling.log"
  [[ -n "${root[before]:-}" ]] || return 0
  most=${threads##* }
  for ((r = 0; r < repeats; ++r)); do
    for which in before after; do
      ((deadline - SECONDS > 30)) || break 2
      quick_cpu "$which" "$most"
    done
  done 2>&1 | tee "$results/cpu_before_after.log"
}

mode_cpu_pairs() {
  local pairs=${CPU_PAIRS:-$bin/cpu_pairs}
  if [[ ! -x "$pairs" ]]; then
    pairs=$work/cpu_pairs
    cc -O2 -o "$pairs" bench/cpu/cpu_pairs.c -lopenblas 2>"$results/cpu_pairs_build.log" ||
      { echo "== cpu-pairs: skipped, no cpu_pairs (CPU_PAIRS, pack.sh EXTRA_BINS) and no compiler"; return; }
  fi
  local n k j cpus
  n=$(nproc)
  {
    echo "case,cpu,seconds,gflops"
    "${tenv[@]}" "$pairs" 0 | sed 's/^/solo,/'
    for ((j = 1; j < n; ++j)); do "${tenv[@]}" "$pairs" 0 "$j" | sed "s/^/pair0-$j,/"; done
    for k in 1 2 4 8 12 16 32 64; do
      ((k <= n)) || break
      mapfile -t cpus < <(seq 0 $((k - 1)))
      "${tenv[@]}" "$pairs" "${cpus[@]}" | sed "s/^/all$k,/"
    done
  } >"$results/cpu_pairs.csv" 2>&1
  # CPU 0's time beside each partner over its time alone; each all-k row's GFLOP/s in all.
  awk -F, 'NR > 1 && $1 == "solo" {solo = $3}
           NR > 1 && $1 ~ /^pair/ && $2 == 0 {printf "%s %.2fx  ", $1, $3 / solo}
           NR > 1 && $1 ~ /^all/ {g[$1] += $4; w[$1]++}
           END {print ""; for (k in g) printf "%s: %d workers, %.0f GFLOP/s in all\n", k, w[k], g[k]}' \
    "$results/cpu_pairs.csv" | tee "$results/cpu_pairs_summary.txt"
}

mode_text() {
  local program=${TEXT_ENCODE:-$bin/text_encode}
  [[ -x "$program" ]] || { echo "== text: skipped, no text_encode (TEXT_ENCODE, pack.sh EXTRA_BINS)"; return; }
  step text_encode 120 "${tenv[@]}" "$program" ${TEXT_THREADS:+"$TEXT_THREADS"}
  cat "$results/text_encode.log"
}

mode_suites() {
  need_tessera suites || return
  local t shards=${SHARDS:-8} par=${OPS_PAR:-8} i j ops_env=()
  for t in "$bin"/cuda_tst_*; do
    [[ -x "$t" && "$(basename "$t")" != cuda_tst_backendops ]] || continue
    step "$(basename "$t")" "${SUITE_S:-200}" "${tenv[@]}" "$t"
  done
  # The backend's checks again on a stream that does not synchronise with the legacy default stream.
  [[ -x "$bin/cuda_tst_cudabackend" ]] &&
    step cudabackend_nonblocking 200 "${tenv[@]}" TESSERA_CUDA_STREAM=nonblocking "$bin/cuda_tst_cudabackend"
  if [[ -x "$bin/cuda_tst_backendops" ]]; then
    [[ -n "${OPS_MODELS:-}" ]] && ops_env=("TESSERA_BACKENDOPS_MODELS=$OPS_MODELS")
    for ((i = 0; i < shards; i += par)); do
      for ((j = i; j < i + par && j < shards; ++j)); do
        step "cuda_tst_backendops_$j" "${OPS_S:-240}" "${tenv[@]}" "${ops_env[@]}" TESSERA_BACKENDOPS_SHARD="$j/$shards" \
          "$bin/cuda_tst_backendops" &
      done
      wait
    done
  fi
  grep -h "^Totals" "$results"/cuda_tst_*.log "$results"/cudabackend_*.log 2>/dev/null
  grep -h "^FAIL" "$results"/cuda_tst_*.log "$results"/cudabackend_*.log 2>/dev/null | head -20
}

mode_sanitizer() {
  need_tessera sanitizer || return
  local sanitizer tool graphs cache=$work/tuning-sanitizer.json
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  # Each tool after a plain run that fills the tuning cache, so the sanitized runs time nothing at prepare.
  local tiny=(render --model tests/data/sdpipeline/sd1 --width 128 --height 96 --tile 64 --overlap 32 --batch 2
    --steps 2 --prompt "a (red:1.2) cube" --negative-prompt "blurry" --cfg 7 --sampler "DPM++ 2M Karras"
    --precision fp16 --backend cuda --graphs off --tuning-cache "$cache" --preview-every 0)
  local lanes=(render --backend cuda --model tests/data/models/cifar_like --width 96 --height 64 --tile 32 --overlap 8
    --batch 3 --steps 3 --preview-every 0 --tuning-cache "$cache")
  local sd=(render --model random:sd15 --width 768 --height 512 --tile 512 --overlap 64 --batch 2 --steps 1
    --prompt "a lighthouse" --negative-prompt "blurry" --cfg 7 --precision fp16 --backend cuda --graphs off
    --tuning-cache "$cache" --preview-every 0)
  step san_tiny_plain 60 "${cli[@]}" "${tiny[@]}" --out "$work/san_tiny_plain"
  for tool in memcheck racecheck synccheck; do
    step "san_tiny_$tool" 150 "${tenv[@]}" "$sanitizer" --tool "$tool" --error-exitcode 9 "$bin/tessera-cli" \
      "${tiny[@]}" --out "$work/san_tiny_$tool"
  done
  step san_lanes_plain 60 "${cli[@]}" "${lanes[@]}" --out "$work/san_lanes_plain"
  for graphs in off step; do
    step "san_lanes_memcheck_$graphs" 120 "${tenv[@]}" "$sanitizer" --tool memcheck --error-exitcode 9 \
      "$bin/tessera-cli" "${lanes[@]}" --graphs "$graphs" --out "$work/san_lanes_$graphs"
  done
  step san_sd15_plain 120 "${cli[@]}" "${sd[@]}" --out "$work/san_sd15_plain"
  step san_sd15_memcheck 200 "${tenv[@]}" "$sanitizer" --tool memcheck --error-exitcode 9 "$bin/tessera-cli" \
    "${sd[@]}" --out "$work/san_sd15_memcheck"
  grep -h "ERROR SUMMARY\|RACECHECK SUMMARY\|hazard" "$results"/san_*.log | sort | uniq -c
}

mode_renders() {
  need_tessera renders || return
  step render_default_1024 120 "${cli[@]}" render --backend cuda --width 1024 --height 1024 --steps 30 --seed 7 \
    --batch 32 --graphs step --out "$work/noise"
  cp "$work"/noise/*.png "$results/default-1024-noise.png" 2>/dev/null
  local strength
  for strength in 0.3 0.5; do
    step "render_img2img_$strength" 120 "${cli[@]}" render --backend cuda --width 512 --height 512 --steps 30 \
      --seed 7 --batch 16 --graphs tile --init docs/model/evidence/photo128.jpg --strength "$strength" \
      --out "$work/i2i_$strength"
    cp "$work/i2i_$strength"/*.png "$results/default-512-img2img-$strength.png" 2>/dev/null
  done
  python3 $pytorch/make_scene.py "$work/scene512.png"
  stepmem render_sd15_upscale4x 300 "${cli[@]}" render --model random:sd15 --init "$work/scene512.png" --upscale 4 \
    --strength 0.4 --tile 512 --overlap 64 --prompt "a detailed photograph" --negative-prompt "blurry" --cfg 7 \
    --steps 20 --sampler "DPM++ 2M Karras" --precision fp16 --fusion noise --backend cuda --graphs step \
    --tuning-cache "$tuning" --preview-every 0 --out "$work/upscale"
  records "$work"/noise/*.json "$work"/i2i_*/*.json "$work"/upscale/*.json | tee "$results/render_records.txt"
}

# The 4x-UltraSharp-shaped upscale beside spandrel + PyTorch in the same call; both CSVs joined in upscale.csv.
mode_upscale() {
  need_tessera upscale || return
  local size=${UPSCALE_SIZE:-1024} threads
  stepmem upscale_tessera 200 "${cli[@]}" bench --shape upscale --size "$size" --tile "${UPSCALE_TILES:-0,512,256}" \
    --repeats 5 --tuning-cache "$tuning" --csv "$results/upscale_tessera.csv"
  stepmem upscale_torch 240 "${spandrelpy[@]}" $pytorch/upscale_spandrel.py --size "$size" \
    --tiles "${TORCH_UPSCALE_TILES:-256,384,512,768,0}" --modes eager,graph --repeats 3 \
    --csv "$results/upscale_torch.csv"
  if [[ "${UPSCALE_CPU:-1}" != 0 ]]; then
    for threads in 2 16; do
      step "upscale_cpu_$threads" 120 "${cli[@]}" bench --shape upscale --engine cpu --threads "$threads" --size 96 \
        --tile 0 --repeats 2 --csv "$results/upscale_cpu_$threads.csv"
    done
  fi
  join_csv "$results/upscale.csv" "$results/upscale_tessera.csv" "$results/upscale_torch.csv" \
    "$results"/upscale_cpu_*.csv
  [[ -f "$results/upscale.csv" ]] || return 0
  python3 - "$results/upscale.csv" <<'EOF' | tee "$results/upscale_table.txt"
import csv, sys
cols = ["engine", "tile", "batch", "precision", "graphs", "tiles", "seconds_per_image", "min_s", "max_s", "tflops",
        "fraction_of_peak", "peak_mib", "first_s", "forward_share"]
rows = [cols] + [[r.get(c, "") for c in cols] for r in csv.DictReader(open(sys.argv[1]))]
widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
for r in rows:
    print("  ".join(v.rjust(w) for v, w in zip(r, widths)))
EOF
}

# An offscreen screen of WIDTH x HEIGHT for Qt: the config file's path.
screen_config() {
  local f=$work/offscreen-$1x$2.json
  printf '{"screens": [{"name": "S", "x": 0, "y": 0, "width": %d, "height": %d, "logicalDpiX": 96, "logicalDpiY": 96}]}\n' \
    "$1" "$2" >"$f"
  echo "$f"
}

mode_window() {
  [[ -x "$bin/tessera" ]] || { echo "== window: skipped, the build has no bin/tessera (pack a bundle)"; return; }
  local history=$work/history gui=(env "LD_LIBRARY_PATH=${libpath[after]}" "$bin/tessera" --fresh)
  export XDG_RUNTIME_DIR=$work/runtime
  mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
  cat >"$work/sd.json" <<'EOF'
{"label": "SD 1.5-shaped: lighthouse, 1536x1024", "model": "random:sd15",
 "prompt": "a lighthouse on a cliff above a stormy sea, (dramatic light:1.2), golden hour",
 "negative_prompt": "blurry, low quality", "cfg": 7, "sampler": "DPM++ 2M Karras", "steps": 20, "seed": 1234,
 "width": 1536, "height": 1024, "tile": 512, "overlap": 64, "window": "hann", "batch": 2, "precision": "fp16",
 "backend": "cuda", "graphs": "step", "preview_every": 1}
EOF
  cat >"$work/upscale.json" <<EOF
{"label": "photo128 x8, SD 1.5-shaped, strength 0.35", "model": "random:sd15",
 "init": "$repo/docs/model/evidence/photo128.jpg", "upscale": 8, "strength": 0.35, "width": 1024, "height": 1024,
 "prompt": "a detailed photograph", "cfg": 5, "scheduler": "euler", "steps": 20, "seed": 3, "tile": 512,
 "overlap": 64, "window": "hann", "batch": 2, "precision": "fp16", "backend": "cuda", "graphs": "step",
 "preview_every": 5}
EOF
  step window_sd_1920 200 env QT_QPA_PLATFORM="offscreen:configfile=$(screen_config 1920 1080)" "${gui[@]}" \
    --history "$history" --preset "$work/sd.json" --run --screenshot "$results/window-sd-gpu-1920x1080.png"
  step window_upscale_1920 200 env QT_QPA_PLATFORM="offscreen:configfile=$(screen_config 1920 1080)" "${gui[@]}" \
    --history "$history" --preset "$work/upscale.json" --run --show before-after \
    --screenshot "$results/before-after-gpu-1920x1080.png"
  step window_reopened_1366 120 env QT_QPA_PLATFORM="offscreen:configfile=$(screen_config 1366 768)" "${gui[@]}" \
    --history "$history" --show reopened --screenshot "$results/reopened-gpu-1366x768.png"
  records "$history"/*/*.json | tee "$results/window_records.txt"
}

# The window running FLUX.1-dev's shapes with random weights (67 GB drawn on the host at the run's prepare).
mode_window_flux() {
  [[ -x "$bin/tessera" ]] || { echo "== window-flux: skipped, the build has no bin/tessera (pack a bundle)"; return; }
  local history=$work/history-flux gui=(env "LD_LIBRARY_PATH=${libpath[after]}" "$bin/tessera" --fresh)
  export XDG_RUNTIME_DIR=$work/runtime
  mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
  cat >"$work/flux.json" <<'EOF'
{"label": "FLUX.1-dev-shaped: lighthouse at dusk, 2048x1536", "model": "random:flux-dev",
 "prompt": "a lighthouse on a cliff at dusk, waves breaking below, warm light in the lantern room, detailed",
 "negative_prompt": "", "guidance": 3.5, "scheduler": "euler", "steps": 20, "seed": 7, "width": 2048,
 "height": 1536, "tile": 1024, "overlap": 128, "window": "hann", "batch": "auto", "precision": "bf16",
 "backend": "cuda", "graphs": "tile", "preview_every": 1}
EOF
  stepmem window_flux_1920 "${WINDOW_FLUX_S:-550}" \
    env QT_QPA_PLATFORM="offscreen:configfile=$(screen_config 1920 1080)" "${gui[@]}" --history "$history" \
    --preset "$work/flux.json" --run --screenshot "$results/window-flux-gpu-1920x1080.png"
  records "$history"/*/*.json | tee "$results/window_flux_records.txt"
}

# before-after: each row runs with one build, the other, the other again, the first again (ROUNDS times), so
# that a drift of the machine's clocks falls on both alike; each build keeps its own tuning cache.
mode_before_after() {
  need_tessera before-after || return
  [[ -n "${root[before]:-}" ]] || { echo "== before-after: skipped, no --before build"; return; }
  local rows=() row which r n=0 left
  if [[ -n "${BEFORE_AFTER_ROWS:-}" ]]; then
    IFS=';' read -r -a rows <<<"$BEFORE_AFTER_ROWS"
  else
    rows=("--shape sd15 --cfg 7 --precision fp16 --graphs tile --batch 1,8 --repeats 20"
      "--shape sd15 --job --batch auto --repeats 3"
      "--shape cifar --size 1024 --tile 64 --overlap 16 --steps 20 --precision fp16 --batch 32 --graphs step --repeats 3")
  fi
  local runs="$results/before_after.tsv"
  printf 'row\tbuild\trun\tmetric\tvalue\n' >"$runs"
  for row in "${rows[@]}"; do
    for ((r = 0; r < ${ROUNDS:-1}; ++r)); do
      for which in before after after before; do
        left=$((deadline - SECONDS))
        if ((left < 30)); then echo "== before-after: skipped ($which, $left s left): bench $row"; continue; fi
        n=$((n + 1))
        echo "== $n $which: bench $row"
        rm -f "$work/row.csv"
        # shellcheck disable=SC2086  # a row is a list of options
        timeout --kill-after=10 "$left" env "LD_LIBRARY_PATH=${libpath[$which]}" "${root[$which]}/bin/tessera-cli" \
          bench $row --tuning-cache "$work/tuning-$which.json" --csv "$work/row.csv" \
          >"$results/before_after_${n}_$which.log" 2>&1
        tail -4 "$results/before_after_${n}_$which.log"
        [[ -s "$work/row.csv" ]] && python3 bench/gpu/before_after_table.py add "$runs" "$which" "$n" "$work/row.csv"
      done
    done
  done
  python3 bench/gpu/before_after_table.py table "$runs" | tee "$results/before_after.txt"
}

# ---------------------------------------------------------------- the call

{
  date -u +"%Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  echo "modes: ${modes[*]}; deadline $deadline s"
} | tee "$results/run.log"
for mode in "${modes[@]}"; do
  case "$mode" in
  info) mode_info 2>&1 | tee "$results/info.txt" ;;
  unet) mode_unet ;;
  sdxl) mode_sdxl ;;
  flux) mode_flux ;;
  job) mode_job ;;
  job-flux) mode_job_flux ;;
  job-controlnet) mode_job_controlnet ;;
  vae) mode_vae ;;
  ddpm) mode_ddpm ;;
  ddpm-matrix) mode_ddpm_matrix ;;
  attention) mode_attention ;;
  profile) mode_profile ;;
  ops-perf) mode_ops_perf ;;
  lanes) mode_lanes ;;
  repro) mode_repro ;;
  autofit) mode_autofit ;;
  cpu-scaling) mode_cpu_scaling ;;
  cpu-pairs) mode_cpu_pairs ;;
  text) mode_text ;;
  suites) mode_suites ;;
  sanitizer) mode_sanitizer ;;
  renders) mode_renders ;;
  upscale) mode_upscale ;;
  window) mode_window ;;
  window-flux) mode_window_flux ;;
  before-after) mode_before_after ;;
  *)
    echo "run.sh: unknown mode '$mode' (run.sh --help)"
    printf '%s\tunknown mode\t0\n' "$mode" >>"$results/steps.tsv"
    ;;
  esac
done 2>&1 | tee -a "$results/run.log"
failures=$(awk -F'\t' 'NR > 1 && $2 != 0 && $2 != "skipped"' "$results/steps.tsv" | wc -l)
echo "== done in $SECONDS s; $failures step(s) failed" | tee -a "$results/run.log"
if ((archive)); then
  tar cJf "$out/results.tar.xz" -C "$results" . && echo "results: $out/results.tar.xz"
fi
((failures == 0))
