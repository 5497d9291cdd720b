#!/usr/bin/env bash
# End-to-end tests of the mnist_ddp app, run by ctest: short training clears an accuracy bar,
# resume is bitwise equal to an uninterrupted run (also via --resume auto, which starts fresh
# on an empty or missing directory), Ctrl-C keeps the last checkpoint, bad input
# gives one-line errors, 2-rank DDP (self-launched with -n) checkpoints once, evaluates exactly
# and resumes bitwise, DataParallel trains. Usage: mnist_ddp_test.sh MNIST_DDP DATA_DIR CASE
set -uo pipefail
BIN=$1 DATA=$2 CASE=$3
WORK=$(mktemp -d /tmp/mnist_ddp_test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"  # fail, expect_rc, expect_error
COMMON=(--data "$DATA" --threads 1 --workers 1 --quiet)

case $CASE in
accuracy)  # one epoch on the 8,000 offline digits
  expect_rc 0 "${COMMON[@]}" --epochs 1 --log-json "$WORK/m.jsonl" --plot "$WORK/c.svg"
  cat "$WORK/out"
  acc=$(grep -o '"test_accuracy":[0-9.]*' "$WORK/m.jsonl" | tail -1 | cut -d: -f2)
  awk -v a="$acc" 'BEGIN { exit !(a >= 94.0) }' || fail "test accuracy $acc% < 94% after 1 epoch"
  grep -q '"event":"epoch"' "$WORK/m.jsonl" || fail "no epoch record in the JSON log"
  grep -q '<polyline' "$WORK/c.svg" || fail "the SVG plot has no curve"
  ;;
resume)  # 2 epochs straight vs 1 epoch + resume: bitwise identical checkpoints
  # (--scheduler step: a cosine schedule spans --epochs, which this test changes between runs)
  SHORT=(--max-steps 12 --test-batch-size 500 --seed 7 --scheduler step)
  expect_rc 0 "${COMMON[@]}" "${SHORT[@]}" --epochs 2 --checkpoint-dir "$WORK/a"
  expect_rc 0 "${COMMON[@]}" "${SHORT[@]}" --epochs 1 --checkpoint-dir "$WORK/b"
  [ -f "$WORK/b/checkpoint-epoch-1.safetensors" ] || fail "no epoch-1 checkpoint"
  expect_rc 0 "${COMMON[@]}" "${SHORT[@]}" --epochs 2 --checkpoint-dir "$WORK/b" --resume "$WORK/b"
  [ ! -f "$WORK/b/checkpoint-epoch-1.safetensors" ] || fail "old checkpoint not removed"
  cmp "$WORK/a/checkpoint-epoch-2.safetensors" "$WORK/b/checkpoint-epoch-2.safetensors" ||
    fail "resumed run differs from the uninterrupted one"
  ;;
resume_auto)  # --resume auto / an empty DIR start fresh with one line, then resume bitwise
  SHORT=(--max-steps 12 --test-batch-size 500 --seed 7 --scheduler step)
  expect_rc 0 "${COMMON[@]}" "${SHORT[@]}" --epochs 2 --checkpoint-dir "$WORK/a"
  expect_rc 0 "${COMMON[@]}" "${SHORT[@]}" --epochs 1 --checkpoint-dir "$WORK/b" --resume auto
  grep -qx "mnist_ddp: no checkpoint in $WORK/b yet: starting from scratch" "$WORK/err" ||
    { cat "$WORK/err" >&2; fail "no fresh-start line for --resume auto"; }
  expect_rc 0 "${COMMON[@]}" "${SHORT[@]}" --epochs 2 --checkpoint-dir "$WORK/b" --resume auto
  grep -q "starting from scratch" "$WORK/err" && fail "--resume auto ignored the checkpoint"
  cmp "$WORK/a/checkpoint-epoch-2.safetensors" "$WORK/b/checkpoint-epoch-2.safetensors" ||
    fail "--resume auto run differs from the uninterrupted one"
  mkdir "$WORK/empty"  # an existing empty DIR: also from scratch
  expect_rc 0 "${COMMON[@]}" --max-steps 2 --test-batch-size 500 --epochs 1 --resume "$WORK/empty"
  grep -qx "mnist_ddp: no checkpoint in $WORK/empty yet: starting from scratch" "$WORK/err" ||
    { cat "$WORK/err" >&2; fail "no fresh-start line for an empty --resume DIR"; }
  expect_error 1 "no --checkpoint-dir" "${COMMON[@]}" --epochs 1 --resume auto
  ;;
interrupt)  # SIGINT after the first checkpoint: exit 130, the checkpoint loads and resumes
  "$BIN" "${COMMON[@]}" --epochs 50 --max-steps 10 --test-batch-size 500 \
    --checkpoint-dir "$WORK/c" >"$WORK/out" 2>"$WORK/err" &
  pid=$!
  for _ in $(seq 600); do
    [ -f "$WORK/c/checkpoint-epoch-1.safetensors" ] && break
    sleep 0.1
  done
  kill -INT "$pid"
  wait "$pid"; rc=$?
  [ "$rc" -eq 130 ] || { cat "$WORK/err" >&2; fail "exit $rc after SIGINT, expected 130"; }
  grep -q "last complete checkpoint" "$WORK/err" || fail "no checkpoint note after SIGINT"
  expect_rc 0 "${COMMON[@]}" --epochs 1 --max-steps 10 --test-batch-size 500 --resume "$WORK/c"
  ;;
errors)
  expect_rc 0 --help
  for flag in --data --epochs --batch-size --lr --optimizer --momentum --weight-decay \
    --scheduler --seed --device --threads --checkpoint-dir --resume --log-json --plot --quiet \
    --cuda-graph; do
    grep -q -- "$flag" "$WORK/out" || fail "--help does not document $flag"
  done
  expect_error 2 "epochs" "${COMMON[@]}" --epochs abc
  expect_error 2 "optimizer" "${COMMON[@]}" --optimizer rmsprop
  expect_error 2 "bogus" "${COMMON[@]}" --bogus
  expect_error 1 "epochs must be >= 1" "${COMMON[@]}" --epochs 0
  expect_error 1 "lr must be > 0" "${COMMON[@]}" --lr -1
  expect_error 1 "device" "${COMMON[@]}" --device tpu
  expect_error 1 "fetch-mnist" --data "$WORK/nowhere" --quiet
  expect_error 2 "needs one GPU per rank" "${COMMON[@]}" -n 64 --backend nccl
  # --cuda-graph: refused up front (exit 2) on cpu, with DataParallel and with DDP ranks
  expect_error 2 "cuda-graph needs --device cuda" "${COMMON[@]}" --cuda-graph
  expect_error 2 "cuda-graph does not work with --mode dp" "${COMMON[@]}" --cuda-graph \
    --device cuda --mode dp
  expect_error 2 "DDP at world size 2" "${COMMON[@]}" --cuda-graph --device cuda -n 2
  mkdir -p "$WORK/ck"
  head -c 1000 /dev/urandom >"$WORK/ck/checkpoint-epoch-1.safetensors"
  expect_error 1 "checkpoint-epoch-1.safetensors" "${COMMON[@]}" --resume "$WORK/ck"
  expect_error 1 "does not exist" "${COMMON[@]}" --resume "$WORK/missing.safetensors"
  ;;
ddp_eval)  # 2-rank DDP training; rank 0 alone checkpoints; eval identical on 1, 2 and 3 ranks
  SHORT=(--max-steps 8 --test-batch-size 300 --seed 5)
  expect_rc 0 "${COMMON[@]}" "${SHORT[@]}" -n 2 --epochs 1 --checkpoint-dir "$WORK/d" \
    --log-json "$WORK/d.jsonl"
  grep -q '"world_size":2' "$WORK/d.jsonl" || fail "the JSON log does not show world size 2"
  [ "$(ls "$WORK/d" | wc -l)" -eq 1 ] || { ls -la "$WORK/d" >&2; fail "expected one checkpoint file"; }
  for n in 1 2 3; do  # resuming at the last epoch only evaluates
    expect_rc 0 "${COMMON[@]}" "${SHORT[@]}" -n "$n" --epochs 1 --resume "$WORK/d"
    grep -o 'test accuracy [0-9.]*% ([0-9]*/2000), test loss [0-9.]*' "$WORK/out" >"$WORK/eval$n"
    [ -s "$WORK/eval$n" ] || { cat "$WORK/out" >&2; fail "no summary at $n ranks"; }
  done
  cat "$WORK/eval1"
  cmp "$WORK/eval1" "$WORK/eval2" && cmp "$WORK/eval1" "$WORK/eval3" ||
    fail "evaluation differs between 1, 2 and 3 ranks: $(cat "$WORK"/eval*)"
  ;;
ddp_resume)  # 2 ranks: 2 epochs straight vs 1 epoch + resume: bitwise identical checkpoints
  SHORT=(-n 2 --max-steps 6 --test-batch-size 500 --seed 11 --scheduler step)
  expect_rc 0 "${COMMON[@]}" "${SHORT[@]}" --epochs 2 --checkpoint-dir "$WORK/a"
  expect_rc 0 "${COMMON[@]}" "${SHORT[@]}" --epochs 1 --checkpoint-dir "$WORK/b"
  expect_rc 0 "${COMMON[@]}" "${SHORT[@]}" --epochs 2 --checkpoint-dir "$WORK/b" --resume "$WORK/b"
  cmp "$WORK/a/checkpoint-epoch-2.safetensors" "$WORK/b/checkpoint-epoch-2.safetensors" ||
    fail "resumed 2-rank run differs from the uninterrupted one"
  ;;
dp)  # DataParallel over 2 CPU replicas in one process trains
  expect_rc 0 "${COMMON[@]}" --mode dp --dp-devices 2 --epochs 1 --max-steps 30 --test-batch-size 500
  grep -q "dp, 2 replica(s)" "$WORK/out" || { cat "$WORK/out" >&2; fail "no dp layout in summary"; }
  acc=$(grep -o 'test accuracy [0-9.]*' "$WORK/out" | grep -o '[0-9.]*$')
  awk -v a="$acc" 'BEGIN { exit !(a >= 80.0) }' || fail "dp: accuracy $acc% < 80% after 30 steps"
  ;;
mpirun)  # OpenMPI's launcher: ranks from OMPI_COMM_WORLD_*, the store at MASTER_ADDR:PORT
  command -v mpirun >/dev/null || fail "mpirun not found (tools/setup-deps.sh installs openmpi-bin)"
  for attempt in 1 2 3; do  # a random port may be taken: the rendezvous then says so at once
    port=$((20000 + RANDOM % 20000))
    mpirun --allow-run-as-root --oversubscribe -np 2 -x MASTER_ADDR=127.0.0.1 \
      -x MASTER_PORT=$port "$BIN" "${COMMON[@]}" --epochs 1 --max-steps 5 \
      --test-batch-size 500 >"$WORK/out" 2>"$WORK/err" && break
    grep -q "already in use" "$WORK/err" || { cat "$WORK/out" "$WORK/err" >&2; fail "mpirun run failed"; }
  done
  grep -q "ddp, 2 rank(s)" "$WORK/out" || { cat "$WORK/out" "$WORK/err" >&2; fail "no 2-rank summary"; }
  ;;
elastic)  # minidl-run --max-restarts 1: rank 1 SIGKILLed in epoch 2 of 3, relaunched with
  # --resume auto: the final checkpoint and accuracy equal an uninterrupted run's
  RUN="$(dirname "$BIN")/minidl-run"
  SHORT=(--max-steps 8 --test-batch-size 500 --seed 13 --scheduler step --epochs 3)
  "$RUN" -n 2 --log-dir none "$BIN" "${COMMON[@]}" "${SHORT[@]}" --checkpoint-dir "$WORK/a" \
    >"$WORK/a.out" 2>"$WORK/a.err" || { cat "$WORK/a.err" >&2; fail "uninterrupted run failed"; }
  "$RUN" -n 2 --log-dir none --max-restarts 1 "$BIN" "${COMMON[@]}" "${SHORT[@]}" \
    --checkpoint-dir "$WORK/b" >"$WORK/out" 2>"$WORK/err" &
  launcher=$!
  progress="${TMPDIR:-/tmp}/minidl-run-$launcher.progress"  # written after each checkpoint
  for _ in $(seq 1200); do  # epoch 1's checkpoint is there (and announced): epoch 2 runs
    [ -f "$WORK/b/checkpoint-epoch-1.safetensors" ] && [ -s "$progress" ] && break
    sleep 0.02
  done
  victim=""
  for pid in $(pgrep -P "$launcher"); do
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "RANK=1" && victim=$pid
  done
  [ -n "$victim" ] || { kill -9 "$launcher"; fail "rank 1 not found"; }
  kill -9 "$victim"
  [ ! -f "$WORK/b/checkpoint-epoch-2.safetensors" ] || fail "epoch 2 ended before the kill"
  wait "$launcher"; rc=$?
  [ "$rc" -eq 0 ] || { cat "$WORK/err" >&2; fail "exit $rc after a restart, expected 0"; }
  grep -q "attempt 1 of 2 failed: rank 1 killed by signal 9 (SIGKILL); restarting all 2 rank(s) (restart 1 of 1) with --resume auto" \
    "$WORK/err" || { cat "$WORK/err" >&2; fail "no restart line"; }
  cmp "$WORK/a/checkpoint-epoch-3.safetensors" "$WORK/b/checkpoint-epoch-3.safetensors" ||
    fail "the restarted run's final checkpoint differs from the uninterrupted run's"
  want=$(grep -o 'test accuracy [0-9.]*% ([0-9]*/2000), test loss [0-9.]*' "$WORK/a.out")
  got=$(grep -o 'test accuracy [0-9.]*% ([0-9]*/2000), test loss [0-9.]*' "$WORK/out")
  echo "uninterrupted: $want; restarted: $got"
  [ -n "$want" ] && [ "$want" = "$got" ] || fail "final accuracy differs: '$want' vs '$got'"
  ;;
kill9)  # a rank SIGKILLed mid-training: the launcher stops the other and names it within 10 s
  # Without --quiet: rank 0's progress line "epoch 1/100 20/63" says training runs (with it,
  # nothing is printed before the epoch ends and the wait below ran out its 30 s every time).
  "$BIN" --data "$DATA" --threads 1 --workers 1 -n 2 --epochs 100 --test-batch-size 500 \
    >"$WORK/out" 2>"$WORK/err" &
  launcher=$!
  victim=""
  for _ in $(seq 300); do  # find rank 1 among the launcher's children once training runs
    for pid in $(pgrep -P "$launcher"); do
      tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "RANK=1" && victim=$pid
    done
    [ -n "$victim" ] && grep -q "epoch 1/100" "$WORK/out" && break
    sleep 0.1
  done
  [ -n "$victim" ] || { kill -9 "$launcher"; fail "rank 1 not found"; }
  ranks=$(pgrep -P "$launcher")
  start=$(date +%s%N)
  kill -9 "$victim"
  wait "$launcher"; rc=$?
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  echo "launcher exited $rc, ${ms} ms after SIGKILL of rank 1"
  [ "$rc" -ne 0 ] || fail "launcher exited 0 after a rank was killed"
  [ "$ms" -lt 10000 ] || fail "launcher took ${ms} ms to stop"
  grep -q "rank 1 .*SIGKILL" "$WORK/err" || { cat "$WORK/err" >&2; fail "rank 1 / SIGKILL not named"; }
  for pid in $ranks; do
    ! kill -0 "$pid" 2>/dev/null || fail "rank process $pid still running"
  done
  ;;
*) fail "unknown case $CASE" ;;
esac
echo "PASS: mnist_ddp $CASE"
