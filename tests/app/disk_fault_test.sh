#!/usr/bin/env bash
# End-to-end disk faults of mnist_ddp's checkpoints: the epoch-2 write fails over a file size
# limit (fsize: `ulimit -f`, EFBIG) or on a full tmpfs (tmpfs: root only, else exit 77 =
# skipped) with a one-line error naming the file and the errno; no partial or temporary file
# is left; --resume from the intact epoch-1 checkpoint then completes.
# Usage: disk_fault_test.sh MNIST_DDP DATA_DIR fsize|tmpfs
set -uo pipefail
BIN=$1 DATA=$2 CASE=$3
WORK=$(mktemp -d /tmp/disk_fault_test.XXXXXX)
MNT=""
cleanup() {
  [ -n "$MNT" ] && umount "$MNT" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
ARGS=(--data "$DATA" --threads 1 --workers 1 --quiet --max-steps 6 --test-batch-size 500
      --seed 3 --scheduler step)
# Runs mnist_ddp (in a subshell after $1, e.g. a ulimit) expecting exit code $2.
run() {
  local setup=$1 want=$2; shift 2
  (eval "$setup"; exec "$BIN" "${ARGS[@]}" "$@") >"$WORK/out" 2>"$WORK/err"; local rc=$?
  [ "$rc" -eq "$want" ] || { cat "$WORK/out" "$WORK/err" >&2; fail "exit $rc, expected $want: $*"; }
}
# The failed epoch-2 write: one line naming the file and the errno; only epoch 1 is left.
check_failure() {
  local dir=$1 errno=$2
  cat "$WORK/err"
  [ "$(wc -l <"$WORK/err")" -eq 1 ] || fail "the error is not one line"
  grep -q "checkpoint-epoch-2.safetensors'.*$errno" "$WORK/err" ||
    fail "the error does not name checkpoint-epoch-2.safetensors and $errno"
  [ "$(ls -A "$dir")" = "checkpoint-epoch-1.safetensors" ] ||
    { ls -la "$dir" >&2; fail "expected only checkpoint-epoch-1.safetensors in $dir"; }
  cmp "$dir/checkpoint-epoch-1.safetensors" "$WORK/probe/checkpoint-epoch-1.safetensors" ||
    fail "the epoch-1 checkpoint changed"
}

# The epoch-1 checkpoint of these arguments, written without faults (its size sets the limits).
run "" 0 --epochs 1 --checkpoint-dir "$WORK/probe"
size=$(stat -c %s "$WORK/probe/checkpoint-epoch-1.safetensors")

case $CASE in
fsize)  # bash's ulimit -f counts 1024-byte blocks; mnist_ddp itself ignores SIGXFSZ
  run "" 0 --epochs 1 --checkpoint-dir "$WORK/c"
  run "ulimit -f $((size / 2048))" 1 --epochs 2 --checkpoint-dir "$WORK/c" --resume "$WORK/c"
  check_failure "$WORK/c" "EFBIG"
  run "" 0 --epochs 2 --checkpoint-dir "$WORK/c" --resume "$WORK/c"
  [ -f "$WORK/c/checkpoint-epoch-2.safetensors" ] || fail "no epoch-2 checkpoint after resuming"
  ;;
tmpfs)  # room for one checkpoint but not for the temporary file of the next
  MNT="$WORK/mnt"
  mkdir -p "$MNT"
  if ! mount -t tmpfs -o size=$((size + 65536)) tmpfs "$MNT" 2>"$WORK/mount.err"; then
    MNT=""
    echo "SKIPPED: cannot mount a tmpfs (needs root): $(cat "$WORK/mount.err")"
    exit 77
  fi
  run "" 0 --epochs 1 --checkpoint-dir "$MNT"
  run "" 1 --epochs 2 --checkpoint-dir "$MNT" --resume "$MNT"
  check_failure "$MNT" "ENOSPC"
  run "" 0 --epochs 2 --checkpoint-dir "$WORK/e" --resume "$MNT"
  [ -f "$WORK/e/checkpoint-epoch-2.safetensors" ] || fail "no epoch-2 checkpoint after resuming"
  ;;
*) fail "unknown case $CASE" ;;
esac
echo "PASS: disk fault $CASE"
