#!/usr/bin/env bash
# Packs the fuzz targets of a TESSERA_FUZZ build with the non-system libraries they load into
# one archive, so the million-execution runs can use a larger machine's cores (tests/fuzz/million.sh
# with PARALLEL=1 there). The sanitizer runtimes are linked statically.
#   bash tests/fuzz/pack_device.sh build-fuzz fuzz.txz
set -euo pipefail
build="${1:?usage: pack_device.sh BUILD_DIR ARCHIVE}"
archive="${2:?usage: pack_device.sh BUILD_DIR ARCHIVE}"
rm -rf /tmp/pack-fuzz && mkdir -p /tmp/pack-fuzz/bin /tmp/pack-fuzz/rtlibs
for t in "$build"/tests/fuzz/fuzz_*; do [ -x "$t" ] && [ -f "$t" ] && strip -o "/tmp/pack-fuzz/bin/$(basename "$t")" "$t"; done
ldd /tmp/pack-fuzz/bin/* | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt)\.so' |
  while read -r lib; do cp -L "$lib" /tmp/pack-fuzz/rtlibs/; done
tar cJf "$archive" -C /tmp/pack-fuzz bin rtlibs
du -sh "$archive"
