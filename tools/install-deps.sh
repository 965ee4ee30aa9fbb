#!/usr/bin/env bash
# Installs the Debian 12 packages Tessera needs, only those missing.
# Uses sudo only when not already root. The CUDA toolkit and cuDNN are not
# Debian packages: they are expected under /usr/local/cuda (optional).
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config git
  qt6-base-dev qt6-base-dev-tools libqcustomplot-dev
  libspdlog-dev nlohmann-json3-dev libopenblas-dev libpng-dev libjpeg62-turbo-dev zlib1g-dev nettle-dev libsentencepiece-dev
  xvfb xauth fonts-dejavu-core
  patchelf appstream desktop-file-utils xz-utils
  clang libclang-rt-14-dev clang-format clang-tidy
)
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
