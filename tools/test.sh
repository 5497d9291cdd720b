#!/usr/bin/env bash
# The README's test command: installs dependencies, builds minidl (Release, -Werror, CUDA
# auto-detected), fetches the offline MNIST digits (once) and runs every test suite with ctest.
# `cuda*` suites skip without a GPU.
# Env: BUILD_DIR (default build), JOBS (default: nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
bash tools/setup-deps.sh
# CUDA is always compiled where nvcc is (the `cuda*` suites skip without a GPU), also in a
# build that tools/run.sh configured CPU-only on a machine without a GPU.
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DMINIDL_WERROR=ON -DMINIDL_CUDA=ON
cmake --build "$BUILD_DIR" -j "$JOBS"
# The floors: no include runs back up (tensor -> autograd -> nn -> optim -> data -> parallel ->
# apps) and no tensor/ object calls a function defined above tensor/.
bash tools/check-layering.sh --counts "$BUILD_DIR"
# The guide's code blocks are the examples' snippets, which build above and run as example.*.
python3 tools/docs.py check
# The MNIST tests and the end-to-end mnist_ddp runs read the offline digits (data/mnist/).
BUILD_DIR="$BUILD_DIR" bash tools/fetch-mnist.sh data/mnist
# The gpt app's tests read the offline Moby-Dick text (data/moby-dick/).
bash tools/fetch-moby-dick.sh data/moby-dick
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS"
