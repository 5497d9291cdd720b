#!/usr/bin/env bash
# Runs the numerics suites (conv, matmul, layers, attention, AMP, training goldens) once with
# MINIDL_CPU_BACKEND=onednn and once with =eigen forced, so both CPU math paths pass the same
# f64 and PyTorch references whatever `auto` picks. Usage: tools/test-cpu-backends.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
tests="$BUILD_DIR/tests/minidl_tests"
files='*test_conv_pool.cpp,*test_linalg.cpp,*test_onednn.cpp,*test_layers.cpp'
files+=',*test_autograd_nn_ops.cpp,*test_cpu_memory.cpp,*test_half_kernels.cpp,*test_amp_ops.cpp'
files+=',*test_autocast.cpp,*test_autocast_train.cpp,*test_attention.cpp,*test_gpt_ops.cpp'
files+=',*test_gpt_golden.cpp,*test_train*.cpp'
backends=(eigen)
# A build without oneDNN (configure found no libdnnl, or -DMINIDL_ONEDNN=OFF) rejects
# MINIDL_CPU_BACKEND=onednn: it is forced only where the library was compiled with it.
if grep -q 'MINIDL_WITH_ONEDNN=1' "$BUILD_DIR/compile_commands.json"; then
  backends=(onednn eigen)
else
  echo "[cpu-backends] $BUILD_DIR has no oneDNN: the eigen backend only"
fi
for backend in "${backends[@]}"; do
  echo "[cpu-backends] MINIDL_CPU_BACKEND=$backend"
  MINIDL_CPU_BACKEND=$backend "$tests" -sf="$files" --no-intro=true
done
