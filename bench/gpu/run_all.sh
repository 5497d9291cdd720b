#!/usr/bin/env bash
# GPU benchmarks in one call: builds minidl (Release, CMAKE_CUDA_ARCHITECTURES=90) with the bench
# targets, runs bench_cuda_step, bench_cuda_kernels and the PyTorch reference
# (torch_mnist_step.py --kernels), and prints ONE markdown table (device, driver, date, commands;
# minidl, reference, ratio, target per metric), also written to $OUT/gpu-bench.md with the raw
# JSON lines when OUT is set. Usage: bench/gpu/run_all.sh [--quick]
# Env: BUILD_DIR (default build-gpu-bench), JOBS, PYTHON (default python3), CUDA_ARCH (90);
# BENCH_BIN: a folder with bench_cuda_step and bench_cuda_kernels already built (no build; the GPU
# pack's tools/gpu/verify.sh passes its own).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-gpu-bench}"
JOBS="${JOBS:-$(nproc)}"
PYTHON="${PYTHON:-python3}"
ARCH="${CUDA_ARCH:-90}"
STEP_ARGS=(--steps 50 --rounds 7)
KERNEL_ARGS=(--reps 7 --iters 20)
if [ "${1:-}" = "--quick" ]; then
  STEP_ARGS=(--steps 10 --rounds 3)
  KERNEL_ARGS=(--reps 3 --iters 5)
fi
RAW="${OUT:+$OUT/raw}"
RAW="${RAW:-$(mktemp -d /tmp/minidl-gpu-bench.XXXXXX)}"
mkdir -p "$RAW"

if [ -n "${BENCH_BIN:-}" ]; then
  echo "using the benches built in $BENCH_BIN" >&2
else
  echo "building in $BUILD_DIR (log: $RAW/build.log)" >&2
  {
    cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DMINIDL_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DMINIDL_BUILD_BENCH=ON -DMINIDL_BUILD_TESTS=OFF \
      -DMINIDL_BUILD_APPS=OFF
    cmake --build "$BUILD_DIR" -j"$JOBS" --target bench_cuda_step bench_cuda_kernels
  } >"$RAW/build.log" 2>&1 || { tail -40 "$RAW/build.log" >&2; echo "run_all: build failed" >&2; exit 1; }
  BENCH_BIN=$BUILD_DIR/bench
fi

CMDS=()
run() {  # run NAME.jsonl COMMAND...: JSON lines to $RAW/NAME.jsonl, a failure is reported
  local out=$1; shift
  CMDS+=("$*")
  echo "running: $*" >&2
  "$@" >"$RAW/$out" 2> >(tee -a "$RAW/stderr.log" >&2) || echo "run_all: '$*' failed" >&2
}
run step.jsonl "$BENCH_BIN/bench_cuda_step" "${STEP_ARGS[@]}"
run kernels.jsonl "$BENCH_BIN/bench_cuda_kernels" "${KERNEL_ARGS[@]}"
run torch.jsonl "$PYTHON" "$ROOT/bench/gpu/torch_mnist_step.py" "${STEP_ARGS[@]}" \
  "${KERNEL_ARGS[@]}" --kernels

SMI="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || true)"
ARGS=(--device "${SMI%%,*}" --driver "$(echo "${SMI#*,}" | tr -d ' ')"
  --date "$(date '+%Y-%m-%d %H:%M %Z')" --command "bench/gpu/run_all.sh ${*:-}")
for c in "${CMDS[@]}"; do ARGS+=(--command "${c//$ROOT\//}"); done
"$PYTHON" "$ROOT/bench/gpu/make_table.py" "${ARGS[@]}" "$RAW/step.jsonl" "$RAW/kernels.jsonl" \
  "$RAW/torch.jsonl" >"$RAW/table.md"
cat "$RAW/table.md"
if [ -n "${OUT:-}" ]; then
  cp "$RAW/table.md" "$OUT/gpu-bench.md"
  echo "wrote $OUT/gpu-bench.md (raw JSON lines in $RAW)" >&2
fi
