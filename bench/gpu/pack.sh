#!/usr/bin/env bash
# Packs what a GPU machine without the project's build dependencies needs from a Release CUDA build
# (the GUI may be off) into one .tar.xz for bench/gpu/run.sh:
#   bin/         tessera-cli and the cuda_tst_* suites, stripped (plus EXTRA_BINS)
#   rtlibs/      every non-system library they load on this machine (Qt Core/Test for the suites, spdlog,
#                fmt, OpenBLAS, libpng, libjpeg, Nettle, ...); CUDA's own libraries (cuDNN, cuBLAS, NVRTC)
#                stay behind: run.sh takes the GPU machine's
#   source-dir   the source tree the build was configured from: the suites and the CLI look for tests/data
#                and resources/ there, and run.sh links it to its own checkout when it is missing
# xz at -9e: the archive travels beside the working tree, whose size is limited.
#
#   bench/gpu/pack.sh BUILD_DIR ARCHIVE.tar.xz
#   SUITES="flashattention cudasd"   only these suites (SUITES=- none; default every cuda_tst_* built)
#   NO_CLI=1                         the suites alone
#   EXTRA_BINS="path/to/text_encode path/to/cpu_pairs"   more programs into bin/ (their libraries too)
set -euo pipefail
build="${1:?usage: pack.sh BUILD_DIR ARCHIVE.tar.xz}"
archive="${2:?usage: pack.sh BUILD_DIR ARCHIVE.tar.xz}"
build=$(realpath "$build")
archive=$(realpath -m "$archive")
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/rtlibs" "$(dirname "$archive")"

bins=()
[[ -z "${NO_CLI:-}" ]] && bins+=("$build/app/tessera-cli")
if [[ "${SUITES:-}" == "-" ]]; then
  :
elif [[ -n "${SUITES:-}" ]]; then
  for s in $SUITES; do bins+=("$build/tests/cuda_tst_$s"); done
else
  for t in "$build"/tests/cuda_tst_*; do [[ -f "$t" && -x "$t" ]] && bins+=("$t"); done
fi
for b in ${EXTRA_BINS:-}; do bins+=("$b"); done
((${#bins[@]})) || { echo "pack.sh: nothing to pack from $build" >&2; exit 2; }
for b in "${bins[@]}"; do
  [[ -x "$b" ]] || { echo "pack.sh: no executable $b" >&2; exit 2; }
  strip -o "$stage/bin/$(basename "$b")" "$b"
done

# The libraries found here that a bare machine lacks: everything but the C/C++ runtime and CUDA's own.
ldd "${bins[@]}" | awk '$3 ~ /^\// {print $3}' | sort -u |
  { grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt)\.so|/usr/local/cuda|libcudnn|libcublas|libcuda\.so|libnvrtc' || true; } |
  while read -r lib; do cp -L "$lib" "$stage/rtlibs/"; done

# The configured source tree, from the build's cache.
sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt" > "$stage/source-dir"

XZ_OPT="-9e -T2" tar cJf "$archive" -C "$stage" bin rtlibs source-dir
echo "$archive: $(du -h "$archive" | cut -f1), $(find "$stage/bin" -type f | wc -l) programs, $(find "$stage/rtlibs" -type f | wc -l) libraries"
