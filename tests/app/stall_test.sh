#!/usr/bin/env bash
# End-to-end stall inspector test, run by ctest: 2-rank mnist_ddp (self-launched with -n 2) with
# MINIDL_STALL_WARN=2 and --dist-timeout 8; rank 1 is SIGSTOPped mid-training. Rank 0 must print
# a stall report naming rank 1 as stopped with its last completed collective, its timeout error
# must name rank 1, and the job must end (non-zero) in bounded time. With `fsdp` the ranks run
# --fsdp full, and the stalled collective must be one of FSDP's (all-gather or reduce-scatter).
# Usage: stall_test.sh MNIST_DDP DATA_DIR [fsdp]
set -uo pipefail
BIN=$1 DATA=$2 MODE=${3:-ddp}
EXTRA=()
[ "$MODE" = fsdp ] && EXTRA=(--fsdp full)
WORK=$(mktemp -d /tmp/stall_test.XXXXXX)
victim=""
cleanup() {
  [ -n "$victim" ] && kill -9 "$victim" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() {
  cat "$WORK/out" "$WORK/err" >&2 2>/dev/null
  echo "FAIL: $*" >&2
  exit 1
}

MINIDL_STALL_WARN=2 "$BIN" --data "$DATA" --threads 1 --workers 1 -n 2 --epochs 100 \
  --test-batch-size 500 --dist-timeout 8 "${EXTRA[@]}" >"$WORK/out" 2>"$WORK/err" &
launcher=$!
for _ in $(seq 300); do # find rank 1 among the launcher's children once training runs
  for pid in $(pgrep -P "$launcher"); do
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "RANK=1" && victim=$pid
  done
  [ -n "$victim" ] && grep -q "epoch 1/100" "$WORK/out" && break
  sleep 0.1
done
[ -n "$victim" ] || { kill -9 "$launcher"; fail "rank 1 not found"; }
sleep 1 # a few steps into the epoch
start=$(date +%s%N)
kill -STOP "$victim"
wait "$launcher"
rc=$?
ms=$((($(date +%s%N) - start) / 1000000))
echo "launcher exited $rc, ${ms} ms after SIGSTOP of rank 1"
grep "stall inspector\|  rank 1 \|timed out" "$WORK/err" | head -12
[ "$rc" -ne 0 ] || fail "the job exited 0 with a stopped rank"
# timeout 8 s + diagnosis (< 2 s) + the launcher's stop grace (5 s) + slack
[ "$ms" -lt 25000 ] || fail "the job took ${ms} ms to end"
grep -Eq "minidl stall inspector: gloo [a-z_]+ #[0-9]+ \([0-9.]+ [KMi]*B\): waiting [0-9.]+ s for rank 1; in it: rank 0" \
  "$WORK/err" || fail "no stall report naming rank 1 as missing"
grep -Eq "rank 1 last completed #[0-9]+ [0-9.]+ s ago; .*no heartbeat for [0-9.]+ s — stopped or hung" \
  "$WORK/err" || fail "the report does not say rank 1 stopped, with its last collective"
grep -Eq "timed out after 8 s waiting for rank 1: rank 1 last completed #[0-9]+ " "$WORK/err" ||
  fail "the timeout error does not name rank 1"
first=$(grep -m1 -o "waiting [0-9.]* s for rank 1" "$WORK/err" | grep -o "[0-9.]*")
awk -v w="$first" 'BEGIN { exit !(w >= 2.0 && w < 3.5) }' || fail "first report after $first s, expected ~2 s"
if [ "$MODE" = fsdp ]; then
  grep -Eq "minidl stall inspector: gloo (allgather|reduce_scatter) #" "$WORK/err" ||
    fail "the stalled collective is not an FSDP all-gather or reduce-scatter"
fi
echo "PASS: stall ($MODE)"
