#!/usr/bin/env bash
# Packs the fuzz targets of a TESSERA_FUZZ build with the non-system libraries they load into
# .carry/fuzz/all.txz, so the million-execution runs can use the GPU machine's 16 cores
# (tests/fuzz/million.sh with PARALLEL=1 there). The sanitizer runtimes are linked statically.
#   bash tests/fuzz/pack_device.sh build-fuzz
set -euo pipefail
build="${1:?usage: pack_device.sh BUILD_DIR}"
rm -rf .carry/fuzz /tmp/pack-fuzz && mkdir -p .carry/fuzz /tmp/pack-fuzz/bin /tmp/pack-fuzz/rtlibs
for t in "$build"/tests/fuzz/fuzz_*; do [ -x "$t" ] && [ -f "$t" ] && strip -o "/tmp/pack-fuzz/bin/$(basename "$t")" "$t"; done
ldd /tmp/pack-fuzz/bin/* | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt)\.so' |
  while read -r lib; do cp -L "$lib" /tmp/pack-fuzz/rtlibs/; done
tar cJf .carry/fuzz/all.txz -C /tmp/pack-fuzz bin rtlibs
du -sh .carry/fuzz
