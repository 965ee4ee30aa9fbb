#!/usr/bin/env bash
# How the CPU engine scales with its threads: the 256x256 quick-cpu render
# (resources/presets/quick-cpu.json: 25 tiles of 64 px in batches of 13 and 12, 20 DDIM steps,
# the default model) with --threads 1, 2, 4, 8, 16. Prints CSV on stdout:
#   threads,seconds,tile_evals_per_s,speedup_vs_1,speedup_vs_2,image_sha256,median_seconds,all_seconds
# seconds and tile evaluations/s are the CLI's own (the sampling loop, without model loading),
# the best of REPEATS runs (the speedups compare bests); median_seconds and all_seconds (separated
# by ';') are every run's. ORDER=interleave runs the thread counts in turn REPEATS times instead of
# each REPEATS times in a row, so that a drift of the machine's speed falls on every count alike. Exits 1 when the thread counts did not all make the same image
# (CpuBackend promises the same bits for any thread count). On stderr, for each thread count,
# how the CPU engine ran a tile batch (the run's device line: whole forwards or op by op).
#
# Usage: bench/cpu/cpu_scaling.sh [BUILD_DIR | TESSERA_CLI]   (default: build; BUILD_DIR/app/tessera-cli)
#   THREADS="1 2 4 8 16"  the thread counts        REPEATS=1  runs per thread count (best kept)
#   EXTRA="--batch 8"     more render options (after the preset's)
set -euo pipefail
target=${1:-build}
if [[ -f "$target" ]]; then cli=$(realpath "$target"); else cli=$(realpath -m "$target/app/tessera-cli"); fi
cd "$(dirname "$0")/../.."   # the preset path below is the repository's
[[ -x "$cli" ]] || { echo "cpu_scaling.sh: no $cli (build the tessera-cli target)" >&2; exit 2; }
threads_list=${THREADS:-1 2 4 8 16}
repeats=${REPEATS:-1}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) hardware threads; $(git rev-parse --short HEAD 2>/dev/null || echo unknown)" >&2
echo "threads,seconds,tile_evals_per_s,speedup_vs_1,speedup_vs_2,image_sha256,median_seconds,all_seconds"
declare -A secs
# seconds with $1 threads / $2 seconds, empty when $1 threads did not run
ratio() { if [[ -n "${secs[$1]:-}" ]]; then awk -v a="${secs[$1]}" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; fi; }
first_sha=""
status=0
declare -A best rate all shas
# One render: seconds, tile evals/s and the image hash into the arrays.
render() {
    local t="$1" r="$2" log line s manifest
    # shellcheck disable=SC2086  # EXTRA is a list of options
    log=$("$cli" render --preset resources/presets/quick-cpu.json --threads "$t" ${EXTRA:-} \
          --out "$out/t$t-r$r" 2>&1) || { echo "$log" >&2; exit 1; }
    # "finished: 20 steps in 19.10 s (prepare 0.18 s), 500 tile evaluations, 26.18 tile evals/s"
    line=$(grep -m1 '^finished:' <<<"$log")
    # "run ...: 25 tiles of 64x64, 20 steps on cpu (AMD EPYC (16 threads, ...): tile batch of 13: ...)"
    if ((r == 0)); then echo "# --threads $t: $(grep -m1 '^run ' <<<"$log" | sed -E 's/.* steps on //')" >&2; fi
    s=$(sed -E 's/.* steps in ([0-9.]+) s.*/\1/' <<<"$line")
    manifest=$(grep -m1 '^manifest' <<<"$log" | awk '{print $2}')
    shas[$t]="${shas[$t]:-} $(grep -m1 '"image_sha256"' "$manifest" | sed -E 's/.*"image_sha256": *"([0-9a-f]+)".*/\1/')"
    all[$t]="${all[$t]:+${all[$t]};}$s"
    if [[ -z "${best[$t]:-}" ]] || awk -v a="$s" -v b="${best[$t]}" 'BEGIN { exit !(a < b) }'; then
        best[$t]=$s
        rate[$t]=$(sed -E 's/.*, ([0-9.]+) tile evals\/s.*/\1/' <<<"$line")
    fi
}
if [[ "${ORDER:-}" == interleave ]]; then
    for ((r = 0; r < repeats; ++r)); do for t in $threads_list; do render "$t" "$r"; done; done
else
    for t in $threads_list; do for ((r = 0; r < repeats; ++r)); do render "$t" "$r"; done; done
fi
for t in $threads_list; do
    secs[$t]=${best[$t]}
    median=$(tr ';' '\n' <<<"${all[$t]}" | sort -n | awk '{v[NR] = $1} END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
    sha=""
    for h in ${shas[$t]}; do
        if [[ -z "$first_sha" ]]; then first_sha=$h; fi
        if [[ "$h" != "$first_sha" ]]; then
            echo "cpu_scaling.sh: --threads $t made a different image ($h, not $first_sha)" >&2
            status=1
        fi
        sha=$h
    done
    echo "$t,${best[$t]},${rate[$t]},$(ratio 1 "${best[$t]}"),$(ratio 2 "${best[$t]}"),$sha,$median,${all[$t]}"
done
exit $status
