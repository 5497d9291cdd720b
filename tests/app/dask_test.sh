#!/usr/bin/env bash
# tools/minidl_dask.py on a Dask LocalCluster with two workers: mnist_ddp as 2 DDP ranks (one per
# worker) finishes, both ranks' output and rank 0's JSON metrics stream back to the client; when
# one rank fails the other is stopped and run() raises naming the failed rank. Skips (77) without
# Debian's python3-distributed. Usage: dask_test.sh MNIST_DDP DATA_DIR TOOLS_DIR
set -uo pipefail
BIN=$(realpath "$1") DATA=$(realpath "$2") TOOLS=$(realpath "$3")
HERE=$(dirname "$(realpath "$0")")
PY=/usr/bin/python3
if ! "$PY" -c 'import distributed' 2>/dev/null; then
  echo "SKIP: python3-distributed is not installed (apt-get install python3-distributed)"
  exit 77
fi
WORK=$(mktemp -d /tmp/dask_test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK" || exit 1
timeout 240 "$PY" "$HERE/dask_test.py" "$BIN" "$DATA" "$TOOLS" "$WORK"
