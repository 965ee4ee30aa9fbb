#!/usr/bin/env bash
# Packs what a GPU-machine call needs from a Release CUDA build (GUI off is enough) into
# .carry/gpu/all.txz (xz: the working tree plus carry must stay under 64 MiB): bin/ with the
# stripped tessera-cli (Qt-free: its bench --profile replaced tessera-cuda-bench) and cuda_tst_*
# suites, and rtlibs/ with every non-system library they load here (the GPU machine has no Qt,
# spdlog, OpenBLAS, libpng, libjpeg; only the suites need Qt Core and Test). CUDA's own libraries stay behind: the GPU machine has cuDNN 9 and cuBLAS 13.
#   bash kernels/bench/pack_carry.sh build-bench
set -euo pipefail
build="${1:?usage: pack_carry.sh BUILD_DIR}"
dest=.carry/gpu
rm -rf "$dest" /tmp/pack-carry
mkdir -p "$dest" /tmp/pack-carry/rtlibs /tmp/pack-carry/bin
bins=()
[ -z "${NO_CLI:-}" ] && bins+=("$build/app/tessera-cli")   # NO_CLI=1: the suites alone
# SUITES="flashattention cudasd" packs only those suites (the carry is small), SUITES=- none;
# default: every one.
if [ "${SUITES:-}" = "-" ]; then
  :
elif [ -n "${SUITES:-}" ]; then
  for s in $SUITES; do bins+=("$build/tests/cuda_tst_$s"); done
else
  for t in "$build"/tests/cuda_tst_*; do [ -f "$t" ] && [ -x "$t" ] && bins+=("$t"); done
fi
for b in "${bins[@]}"; do strip -o "/tmp/pack-carry/bin/$(basename "$b")" "$b"; done
ldd "${bins[@]}" | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt)\.so|/usr/local/cuda|libcudnn|libcublas|libcuda\.so|libnvrtc' |
  while read -r lib; do cp -L "$lib" /tmp/pack-carry/rtlibs/; done
XZ_OPT="-9e -T2" tar cJf "$dest/all.txz" -C /tmp/pack-carry bin rtlibs
du -sh "$dest"
