#!/usr/bin/env bash
# Builds the CPU benchmarks (Release, x86-64-v3) and runs bench_gemm and bench_conv, writing
# bench/results/cpu-<date>.md with machine info, load, the command and the tables.
# Usage: bench/run.sh [--threads N] [--quick]   (env BUILD_DIR, default build-bench; JOBS)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-bench}"
JOBS="${JOBS:-$(nproc)}"
ARGS=("$@")

cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DMINIDL_CUDA=OFF \
  -DMINIDL_BUILD_BENCH=ON -DMINIDL_BUILD_TESTS=OFF -DMINIDL_BUILD_APPS=OFF > /dev/null
cmake --build "$BUILD_DIR" -j"$JOBS" --target bench_gemm bench_conv > /dev/null

mkdir -p "$ROOT/bench/results"
OUT="$ROOT/bench/results/cpu-$(date +%Y-%m-%d).md"
{
  echo "# minidl CPU benchmarks, $(date '+%Y-%m-%d %H:%M %Z')"
  echo
  echo "- CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), nproc $(nproc)"
  echo "- load average before the run: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- compiler: $(${CXX:-c++} --version | head -1), minidl built Release with -march=x86-64-v3"
  echo "- OpenBLAS: $(dpkg-query -W -f='${Package} ${Version}' libopenblas0-pthread 2>/dev/null || echo unknown)"
  echo "- git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo none)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "- command: \`bench/run.sh ${ARGS[*]:-}\` (runs \`bench_gemm ${ARGS[*]:-}\` and \`bench_conv ${ARGS[*]:-}\`)"
  echo
  "$BUILD_DIR/bench/bench_gemm" "${ARGS[@]}"
  echo
  "$BUILD_DIR/bench/bench_conv" "${ARGS[@]}"
  echo
  echo "- load average after the run: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT"
echo "wrote $OUT" >&2
