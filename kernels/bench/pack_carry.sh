#!/usr/bin/env bash
# Packs what a GPU-machine call needs from a Release CUDA build (GUI off is enough) into
# .carry/gpu/: stripped tessera-cli and cuda_tst_* suites, and rtlibs.txz with every
# non-system library they load here (the GPU machine has no Qt, spdlog, OpenBLAS, libpng,
# libjpeg). CUDA's own libraries stay behind: the GPU machine has cuDNN 9 and cuBLAS 13.
#   bash kernels/bench/pack_carry.sh build-bench
set -euo pipefail
build="${1:?usage: pack_carry.sh BUILD_DIR}"
dest=.carry/gpu
rm -rf "$dest" /tmp/pack-carry
mkdir -p "$dest" /tmp/pack-carry/rtlibs
bins=("$build/app/tessera-cli")
for t in "$build"/tests/cuda_tst_*; do [ -f "$t" ] && [ -x "$t" ] && bins+=("$t"); done
for b in "${bins[@]}"; do strip -o "$dest/$(basename "$b")" "$b"; done
ldd "${bins[@]}" | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt)\.so|/usr/local/cuda|libcudnn|libcublas|libcuda\.so|libnvrtc' |
  while read -r lib; do cp -L "$lib" /tmp/pack-carry/rtlibs/; done
tar cJf "$dest/rtlibs.txz" -C /tmp/pack-carry rtlibs
du -sh "$dest"
