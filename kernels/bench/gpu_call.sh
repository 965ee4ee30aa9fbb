# Shared by the sessionN.sh GPU-call scripts (source it; set OUT first): unpacks the carry
# (.carry/gpu/all.txz: bin/ and rtlibs/ from pack_carry.sh; .carry/ref/diffusers.txz), points the
# compiled-in checkout paths at this folder, sets the library path, and defines
#   step NAME LIMIT CMD...     CMD under `timeout`, log in $OUT/NAME.log, status in $OUT/steps.tsv
#   stepmem NAME LIMIT CMD...  step, with nvidia-smi's peak device memory in use over it
#   records                    what each render's record says (prepare, total, seam, VAE/text lines)
#   pack_results               everything under $OUT as one results-HHMM.txz ($OUT returns few files)
# No step runs past DEADLINE seconds of the calling script (default 550: a call's limit is 600 s).
out="${OUT:?set OUT to the results folder}"
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
pack_results() {
  (cd "$out" && tar cJf "../results-$(date +%H%M).txz" . && rm -rf ./* && mv ../results-*.txz .)
}
