#!/usr/bin/env bash
# Runs the numerics suites (conv, matmul, layers, attention, AMP, training goldens, the CPU-class
# checks) under every CPU class this host can stand in for (MINIDL_CPU_ISA=avx2 always, avx512
# and avx512_bf16 where the CPU has them: an AVX-512 host also proves the AVX2 paths), each with
# MINIDL_CPU_BACKEND=onednn and =eigen forced, so every path passes the same f64 and PyTorch
# references whatever `auto` picks. Usage: tools/test-cpu-backends.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
tests="$BUILD_DIR/tests/minidl_tests"
files='*test_conv_pool.cpp,*test_linalg.cpp,*test_onednn.cpp,*test_layers.cpp'
files+=',*test_autograd_nn_ops.cpp,*test_cpu_memory.cpp,*test_half_kernels.cpp,*test_amp_ops.cpp'
files+=',*test_autocast.cpp,*test_autocast_train.cpp,*test_attention.cpp,*test_sdpa.cpp'
files+=',*test_gpt_ops.cpp,*test_gpt_golden.cpp,*test_train*.cpp,*test_cpu_isa.cpp'
backends=(eigen)
# A build without oneDNN (configure found no libdnnl, or -DMINIDL_ONEDNN=OFF) rejects
# MINIDL_CPU_BACKEND=onednn: it is forced only where the library was compiled with it.
if grep -q 'MINIDL_WITH_ONEDNN=1' "$BUILD_DIR/compile_commands.json"; then
  backends=(onednn eigen)
else
  echo "[cpu-backends] $BUILD_DIR has no oneDNN: the eigen backend only"
fi
# The CPU classes below this host's own (which the plain test run covered) and the host's.
flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
isas=()
[[ $flags == *" avx2"* ]] && isas+=(avx2)
[[ $flags == *" avx512bw"* ]] && isas+=(avx512)
[[ $flags == *" avx512bw"* && $flags == *" avx512_bf16"* ]] && isas+=(avx512_bf16)
echo "[cpu-backends] CPU classes: ${isas[*]}"
for isa in "${isas[@]}"; do
  for backend in "${backends[@]}"; do
    echo "[cpu-backends] MINIDL_CPU_ISA=$isa MINIDL_CPU_BACKEND=$backend"
    start=$(date +%s)
    MINIDL_CPU_ISA=$isa MINIDL_CPU_BACKEND=$backend "$tests" -sf="$files" --no-intro=true
    echo "[cpu-backends] MINIDL_CPU_ISA=$isa MINIDL_CPU_BACKEND=$backend: $(($(date +%s) - start)) s"
  done
done
