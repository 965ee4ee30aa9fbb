#!/usr/bin/env bash
# Session 6's GPU calls. Expects .carry/gpu/all.txz (pack_carry.sh) and .carry/ref/diffusers.txz.
#   OUT=... bash docs/bench/scripts/session6.sh suites   CUDA suites (SD pipeline vs CPU, samplers, SD ops,
#                                                    engine, graphs, reproducibility) and the per-op
#                                                    suite on the attention / VAE / CLIP ops
#   OUT=... bash docs/bench/scripts/session6.sh jobs     2048x2048 SD 1.5 and SD 2.1-768 text-to-image
#                                                    (random weights) and a 4x upscale through img2img,
#                                                    beside diffusers + PyTorch doing the same tiled job
# Every step has its own timeout; its log goes to $OUT/<step>.log, its status to $OUT/steps.tsv.
set -u
what="${1:?suites|jobs}"
out="${OUT:-/tmp/session6}"
mkdir -p "$out"
tar xJf .carry/gpu/all.txz -C /tmp
# The suites' compiled-in paths (tests/data, resources/) name the development checkout: make it this one.
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export TESSERA_TEST_DATA_DIR="$PWD/tests/data"
mkdir -p /tmp/ref && tar xJf .carry/ref/diffusers.txz -C /tmp/ref
cudnn="$(dirname "$(find /usr /opt -name 'libcudnn.so.9*' 2>/dev/null | head -1)")"
cublas="$(dirname "$(find /usr/local/cuda/ /usr /opt -name 'libcublas.so.13*' 2>/dev/null | head -1)")"
export LD_LIBRARY_PATH="/tmp/rtlibs:$cudnn:$cublas:${LD_LIBRARY_PATH:-}"
export QT_QPA_PLATFORM=offscreen PATH="/tmp/bin:$PATH"
printf 'step\trc\tseconds\n' >> "$out/steps.tsv"
step() {
  local name="$1" limit="$2"
  shift 2
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" >> "$out/steps.tsv"
  echo "== $name: rc $rc, $((SECONDS - t0)) s"
  grep -E "^(FAIL|Totals|QINFO)|finished:|failed|error|pytorch-eager|wall_s" "$out/$name.log" | head -40
}
# step with the device's memory in use sampled every 100 ms (nvidia-smi): the peak of the whole
# job, the VAE decode and the text encoder included, for both engines alike.
stepmem() {
  local name="$1"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$out/$name.mem" 2>/dev/null &
  local smi=$!
  step "$@"
  kill "$smi" 2>/dev/null
  wait "$smi" 2>/dev/null
  echo "   $name peak device memory in use: $(sort -n "$out/$name.mem" | tail -1) MiB (nvidia-smi, 100 ms samples)"
}
date -u +"%Y-%m-%d %H:%M UTC"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
# The carry holds at most 64 MiB with the tree, so each call carries the suites it runs: those
# of this build present in /tmp/bin run first, in either mode.
for t in cudasdpipeline cudasamplers cudasd cudaengine cudagraphs cudabackend reproducible; do
  [ -x /tmp/bin/cuda_tst_$t ] && step "tst_$t" "${SUITE_S:-150}" /tmp/bin/cuda_tst_$t
done
if [ "$what" = suites ]; then
  step ops_attention 150 env TESSERA_BACKENDOPS_KINDS=attention,token_embedding,eos_pool /tmp/bin/cuda_tst_backendops
  step ops_vae_clip 200 env TESSERA_BACKENDOPS_MODELS=vae-dec,vae-enc,clip-l-text,open-clip-h-text /tmp/bin/cuda_tst_backendops
else
  step singlefile_fixture 120 env PYTHONPATH=/tmp/ref/src CUDA_VISIBLE_DEVICES= python3 \
    tools/reference/make_singlefile_fixtures.py "$out/singlefile_diffusers"
  common=(--prompt "a lighthouse on a cliff above a stormy sea, dramatic light" --negative-prompt "blurry, low quality"
          --cfg 7 --steps 20 --sampler "DPM++ 2M Karras" --precision fp16 --fusion noise --backend cuda
          --tuning-cache "$out/tuning.json" --preview-every 0)
  stepmem render_sd15 300 tessera-cli render --model random:sd15 --width 2048 --height 2048 --tile 512 --overlap 64 \
    --batch 4 --graphs step "${common[@]}" --out "$out/sd15"
  stepmem torch_sd15 300 env PYTHONPATH=/tmp/ref/src python3 kernels/bench/torch_sd_tiled.py --shape sd15 --size 2048 \
    --tile 512 --overlap 64 --steps 20 --cfg 7 --batch 4
  stepmem render_sd21 300 tessera-cli render --model random:sd21 --width 2048 --height 2048 --tile 768 --overlap 64 \
    --batch 2 --graphs step "${common[@]}" --out "$out/sd21"
  stepmem torch_sd21 300 env PYTHONPATH=/tmp/ref/src python3 kernels/bench/torch_sd_tiled.py --shape sd21 --size 2048 \
    --tile 768 --overlap 64 --steps 20 --cfg 7 --batch 2
  python3 kernels/bench/make_scene.py "$out/scene512.png"
  stepmem upscale4x 300 tessera-cli render --model random:sd15 --init "$out/scene512.png" --upscale 4 --strength 0.4 \
    --tile 512 --overlap 64 --batch 4 --graphs step "${common[@]}" --out "$out/upscale"
  for d in sd15 sd21 upscale; do
    for j in "$out/$d"/*.json; do
      [ -f "$j" ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[1].split('/')[-2], 'prepare_ms', round(r.get('prepare_ms',0)), 'total_ms', round(r.get('total_ms',0)), 'memory_plan', r.get('memory_plan'), 'peak_used_mib', max([m.get('used_mib',0) for m in r.get('memory',[])] or [0]), 'messages', r.get('messages'))" "$j"
    done
    rm -f "$out/$d"/*.png.tmp
  done
fi
cat "$out/steps.tsv"
