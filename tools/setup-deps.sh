#!/usr/bin/env bash
# Installs minidl's build dependencies from Debian packages, skipping those already present.
# (ocl-icd-opencl-dev: dnnl-config.cmake requires OpenCL, a recommendation apt skips here;
# iproute2: the two-host test wires network namespaces with `ip`.)
# Usage: tools/setup-deps.sh [extra-package ...]   (needs root or sudo for apt-get)
set -euo pipefail
pkgs=(build-essential cmake pkg-config libeigen3-dev doctest-dev nlohmann-json3-dev
      libopenblas-dev libdnnl-dev ocl-icd-opencl-dev libgloo-dev libcli11-dev zlib1g-dev libjpeg62-turbo-dev libpng-dev openmpi-bin python3 iproute2 "$@")
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "[setup] all build dependencies present"
  exit 0
fi
echo "[setup] installing: ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "[setup] done"
