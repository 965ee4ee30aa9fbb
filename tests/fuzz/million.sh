#!/usr/bin/env bash
# Runs every fuzz target for RUNS executions (default 1,000,000) from a scratch copy of its
# seeds, one after another, and prints one line per target: executions, seconds, result.
# The counts of a run go into tests/fuzz/README.md ("Million-execution runs").
#   bash tests/fuzz/million.sh build-fuzz [target...]      (BUILD/tests/fuzz/<target>, or BUILD/<target>)
# PARALLEL=1 runs the targets at once (one core each), as on the GPU machine's 16 cores.
set -u
build="${1:?usage: million.sh BUILD_DIR [target...]}"; shift
src="$(cd "$(dirname "$0")/../.." && pwd)"
runs="${RUNS:-1000000}"
export TESSERA_SOURCE_DIR="$src"  # fuzz_prompt reads the bundled vocabulary from there
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_bounded_input fuzz_run_settings fuzz_manifest fuzz_model_config
                                     fuzz_safetensors fuzz_init_image fuzz_png_read fuzz_prompt)
declare -A dict=([fuzz_bounded_input]=bounded_input [fuzz_run_settings]=run_settings [fuzz_manifest]=manifest
                 [fuzz_model_config]=model_config [fuzz_safetensors]=safetensors [fuzz_init_image]=images
                 [fuzz_png_read]=images [fuzz_prompt]=prompt)
one() {
  local t=$1 bin="$build/tests/fuzz/$1"
  [ -x "$bin" ] || bin="$build/$1"
  local work art start rc execs peak slowest
  work="$(mktemp -d)"; art="$(mktemp -d)"
  start=$SECONDS
  "$bin" "$work" "$src/tests/fuzz/corpus/$t" -dict="$src/tests/fuzz/dict/${dict[$t]}.dict" \
    -runs="$runs" -timeout=1 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$art/" \
    >"$art/log" 2>&1
  rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$art/log" | grep -o '[0-9]*$')
  peak=$(grep -o 'stat::peak_rss_mb: *[0-9]*' "$art/log" | grep -o '[0-9]*$')
  slowest=$(grep -o 'stat::slowest_unit_time_sec: *[0-9]*' "$art/log" | grep -o '[0-9]*$')
  echo "$t: rc=$rc executions=${execs:-?} seconds=$((SECONDS - start)) peak_rss_mb=${peak:-?} slowest_unit_s=${slowest:-?} artifacts=$(ls "$art" | grep -vc '^log$')"
  [ "$rc" = 0 ] || { grep -E "ERROR|fuzz check failed|SUMMARY" "$art/log" | head -5; ls "$art"; [ -n "${KEEP:-}" ] && cp -r "$art" "$KEEP/$t"; }
  rm -rf "$work"
}
for t in "${targets[@]}"; do
  if [ -n "${PARALLEL:-}" ]; then one "$t" & else one "$t"; fi  # each prints its line when it ends
done
wait
