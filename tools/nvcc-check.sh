#!/usr/bin/env bash
# Compiles CUDA sources of minidl on their own (no link) with the build's flags, for quick
# checks while writing kernels: bash tools/nvcc-check.sh tensor/cuda/reduce.cu [arch]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
file=$1
arch=${2:-90}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
/usr/local/cuda/bin/nvcc -std=c++20 -O3 --expt-relaxed-constexpr -Xcompiler=-Wall,-Wextra \
  -gencode "arch=compute_${arch},code=sm_${arch}" -DMINIDL_WITH_CUDA=1 -DMINIDL_WITH_CUDNN=1 \
  -DMINIDL_WITH_NCCL=1 -I"$root" -I/usr/include/eigen3 -c "$root/$file" -o "$out/x.o" \
  --resource-usage 2>&1 | grep -v 'ptxas info\|^ptxas\|Function properties\|bytes stack frame\|Compiling entry' || true
test -s "$out/x.o" && echo "ok: $file"
