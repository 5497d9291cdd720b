#!/usr/bin/env bash
# The README's run command: installs dependencies, builds minidl (Release) and runs the main
# program. Until mnist_ddp lands this is tensor_demo, a tour of tensors and ops.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
bash tools/setup-deps.sh
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD_DIR" -j "$(nproc)" --target tensor_demo
"$BUILD_DIR"/apps/tensor_demo "$@"
