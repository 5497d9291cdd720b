#!/usr/bin/env bash
# torchrun's agent store, end to end, run by ctest: PyTorch (Debian 12's python3-torch, 1.13, or
# MINIDL_TORCH_PYTHON) hosts a c10d TCPStore the way torchrun's agent does; two mnist_ddp ranks
# get torchrun's variables by hand, TORCHELASTIC_USE_AGENT_STORE=True included, so every rank is
# a client of that store. Both must finish, rank 0's summary must equal a `mnist_ddp -n 2` run
# (minidl's own store) with the same flags, and both ranks' keys must be in PyTorch's store.
# Exits 77 (skipped) with the reason when no python3 imports torch.
# Usage: torch_agent_store_test.sh MNIST_DDP DATA_DIR
set -uo pipefail
BIN=$1 DATA=$2
WORK=$(mktemp -d /tmp/torch_agent_store_test.XXXXXX)
host=""
cleanup() {
  [ -n "$host" ] && kill "$host" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() {
  for f in "$WORK"/*.out "$WORK"/*.err; do [ -s "$f" ] && { echo "--- $f"; cat "$f"; }; done >&2
  echo "FAIL: $*" >&2
  exit 1
}

# Hosts the store as torchrun's agent does (Debian's 2.6 has no libuv: retry without it), prints
# its port, then, once both ranks have registered, minidl's joined count and world size as a
# c10d client reads them (keys under minidl's prefix). The first interpreter that imports torch.
HOST_SCRIPT='
import socket, sys, time, torch, torch.distributed as d
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
try:
    st = d.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
except RuntimeError as e:
    if "libuv" not in str(e): raise
    st = d.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False, use_libuv=False)
print(port, torch.__version__, flush=True)
st.wait(["minidl/attempt_0/rank/0", "minidl/attempt_0/rank/1"])
print(st.add("minidl/attempt_0/rdzv/joined", 0), st.get("minidl/attempt_0/rdzv/world_size").decode(), flush=True)
time.sleep(300)
'
PORT="" VERSION=""
for PY in ${MINIDL_TORCH_PYTHON:-python3 /usr/bin/python3}; do
  "$PY" -c "$HOST_SCRIPT" >"$WORK/host.out" 2>"$WORK/host.err" &
  host=$!
  while kill -0 "$host" 2>/dev/null && ! [ -s "$WORK/host.out" ]; do sleep 0.1; done
  read -r PORT VERSION <"$WORK/host.out" && break
  host=""
done
[ -n "$PORT" ] || { echo "SKIP: no python3 imports torch (apt-get install python3-torch)"; exit 77; }
echo "PyTorch $VERSION hosts a TCPStore on 127.0.0.1:$PORT"

FLAGS=(--data "$DATA" --threads 1 --workers 1 --epochs 1 --max-steps 4 --test-batch-size 1000
  --quiet --dist-timeout 30)
start=$(date +%s%N)
pids=()
for r in 0 1; do
  env RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
    MASTER_PORT="$PORT" TORCHELASTIC_USE_AGENT_STORE=True TORCHELASTIC_RESTART_COUNT=0 \
    "$BIN" "${FLAGS[@]}" >"$WORK/rank$r.out" 2>"$WORK/rank$r.err" &
  pids+=($!)
done
for r in 0 1; do
  wait "${pids[$r]}" || fail "rank $r exited $?"
done
echo "both ranks finished in $((($(date +%s%N) - start) / 1000000)) ms"
summary=$(grep -o "test accuracy .*, test loss [0-9.]*" "$WORK/rank0.out")
[ -n "$summary" ] || fail "rank 0 printed no summary"
echo "agent store: $summary"

# Both ranks registered in PyTorch's store, as its own client read it.
keys=$(sed -n 2p "$WORK/host.out")
[ "$keys" = "2 2" ] || fail "PyTorch's store holds joined/world_size '$keys', expected '2 2'"

# The same run through minidl's own store: the same model, so the same summary.
"$BIN" "${FLAGS[@]}" -n 2 >"$WORK/ref.out" 2>"$WORK/ref.err" || fail "mnist_ddp -n 2 exited $?"
reference=$(grep -o "test accuracy .*, test loss [0-9.]*" "$WORK/ref.out")
echo "own store:   $reference"
[ "$summary" = "$reference" ] || fail "the agent-store run differs from mnist_ddp -n 2"
echo "PASS: torch agent store ($VERSION)"
