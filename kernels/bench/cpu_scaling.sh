#!/usr/bin/env bash
# How the CPU engine scales with its threads (issue #18): the 256x256 quick-cpu render
# (resources/presets/quick-cpu.json: 25 tiles of 64 px in batches of 13 and 12, 20 DDIM steps,
# the default model) with --threads 1, 2, 4, 8, 16. Prints CSV on stdout:
#   threads,seconds,tile_evals_per_s,speedup_vs_1,speedup_vs_2,image_sha256
# seconds and tile evaluations/s are the CLI's own (the sampling loop, without model loading),
# the best of REPEATS runs. Exits 1 when the thread counts did not all make the same image
# (CpuBackend promises the same bits for any thread count). On stderr, for each thread count,
# how the CPU engine ran a tile batch (the run's device line: whole forwards or op by op).
#
# Usage: kernels/bench/cpu_scaling.sh [BUILD_DIR]        (default build; needs BUILD_DIR/app/tessera-cli)
#   THREADS="1 2 4 8 16"  the thread counts        REPEATS=1  runs per thread count (best kept)
#   EXTRA="--batch 8"     more render options (after the preset's)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
cli="$build/app/tessera-cli"
[[ -x "$cli" ]] || { echo "cpu_scaling.sh: no $cli (build the tessera-cli target)" >&2; exit 2; }
threads_list=${THREADS:-1 2 4 8 16}
repeats=${REPEATS:-1}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) hardware threads; $(git rev-parse --short HEAD 2>/dev/null || echo unknown)" >&2
echo "threads,seconds,tile_evals_per_s,speedup_vs_1,speedup_vs_2,image_sha256"
declare -A secs
# seconds with $1 threads / $2 seconds, empty when $1 threads did not run
ratio() { if [[ -n "${secs[$1]:-}" ]]; then awk -v a="${secs[$1]}" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; fi; }
first_sha=""
status=0
for t in $threads_list; do
    best="" best_rate="" sha=""
    for ((r = 0; r < repeats; ++r)); do
        # shellcheck disable=SC2086  # EXTRA is a list of options
        log=$("$cli" render --preset resources/presets/quick-cpu.json --threads "$t" ${EXTRA:-} \
              --out "$out/t$t-r$r" 2>&1) || { echo "$log" >&2; exit 1; }
        # "finished: 20 steps in 19.10 s (prepare 0.18 s), 500 tile evaluations, 26.18 tile evals/s"
        line=$(grep -m1 '^finished:' <<<"$log")
        # "run ...: 25 tiles of 64x64, 20 steps on cpu (AMD EPYC (16 threads, ...): tile batch of 13: ...)"
        if ((r == 0)); then echo "# --threads $t: $(grep -m1 '^run ' <<<"$log" | sed -E 's/.* steps on //')" >&2; fi
        s=$(sed -E 's/.* steps in ([0-9.]+) s.*/\1/' <<<"$line")
        rate=$(sed -E 's/.*, ([0-9.]+) tile evals\/s.*/\1/' <<<"$line")
        manifest=$(grep -m1 '^manifest' <<<"$log" | awk '{print $2}')
        sha=$(grep -m1 '"image_sha256"' "$manifest" | sed -E 's/.*"image_sha256": *"([0-9a-f]+)".*/\1/')
        if [[ -z "$best" ]] || awk -v a="$s" -v b="$best" 'BEGIN { exit !(a < b) }'; then best=$s best_rate=$rate; fi
    done
    secs[$t]=$best
    echo "$t,$best,$best_rate,$(ratio 1 "$best"),$(ratio 2 "$best"),$sha"
    if [[ -z "$first_sha" ]]; then first_sha=$sha; elif [[ "$sha" != "$first_sha" ]]; then
        echo "cpu_scaling.sh: --threads $t made a different image ($sha, not $first_sha)" >&2
        status=1
    fi
done
exit $status
