#!/usr/bin/env bash
# End-to-end tests of minidl-run, run by ctest, with small bash programs as ranks: the torchrun
# environment, rank-prefixed output and per-rank logs, fail-fast on SIGKILL / exit code (all
# processes gone, bounded time), SIGINT forwarding, --max-restarts, one-line usage errors.
# Usage: launcher_test.sh MINIDL_RUN CASE
set -uo pipefail
RUN=$1 CASE=$2
WORK=$(mktemp -d /tmp/launcher_test.XXXXXX)
MARKER=$(basename "$WORK")  # unique: every rank process carries it in its command line
cleanup() { pgrep -f "$MARKER" | xargs -r kill -KILL 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
show() { cat "$WORK/out" "$WORK/err" >&2; }
# Writes a rank program to $WORK/NAME.sh (the body is bash; $RANK etc. come from the launcher).
program() { printf '%s\n' "$2" >"$WORK/$1.sh"; echo "$WORK/$1.sh"; }
# Runs minidl-run expecting exit code $1; output in $WORK/out, $WORK/err.
expect_rc() {
  local want=$1; shift
  "$RUN" "$@" >"$WORK/out" 2>"$WORK/err"; local rc=$?
  [ "$rc" -eq "$want" ] || { show; fail "exit $rc, expected $want: $*"; }
}
expect_error() {  # one-line error on stderr matching a pattern, exit 2
  local pattern=$1; shift
  expect_rc 2 "$@"
  [ "$(wc -l <"$WORK/err")" -eq 1 ] || { show; fail "error is not one line: $*"; }
  grep -q -- "$pattern" "$WORK/err" || { show; fail "no '$pattern' in error: $*"; }
}
# No process with the marker may remain (killed ones may take a moment to vanish).
expect_no_leftovers() {
  for _ in $(seq 20); do pgrep -f "$MARKER" >/dev/null || return 0; sleep 0.1; done
  ps -eo pid,pgid,stat,args | grep "$MARKER" | grep -v grep >&2
  fail "rank processes survived the launcher"
}
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

case $CASE in
env)  # the torchrun contract, single node and one node of two
  P=$(program env 'env | grep -E "^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|MINIDL_LAUNCHER|OMP_NUM_THREADS)=" | sort >"$(dirname "$0")/env.$RANK"')
  expect_rc 0 -n 3 --log-dir none bash "$P"
  for r in 0 1 2; do
    f=$WORK/env.$r
    [ -f "$f" ] || fail "rank $r did not run (or RANK is not unique)"
    for kv in "RANK=$r" "LOCAL_RANK=$r" WORLD_SIZE=3 LOCAL_WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 \
      MINIDL_LAUNCHER=1; do
      grep -qx "$kv" "$f" || { cat "$f" >&2; fail "rank $r lacks $kv"; }
    done
    grep -qE '^OMP_NUM_THREADS=[1-9][0-9]*$' "$f" || fail "rank $r has no OMP_NUM_THREADS"
  done
  ports=$(cat "$WORK"/env.* | grep '^MASTER_PORT=' | sort -u)
  [ "$(echo "$ports" | wc -l)" -eq 1 ] || fail "ranks disagree on MASTER_PORT: $ports"
  [ "${ports#MASTER_PORT=}" -gt 0 ] || fail "MASTER_PORT is $ports"
  grep -q "master 127.0.0.1:${ports#MASTER_PORT=}" "$WORK/err" || fail "banner lacks the port"
  grep -q "rank 2 -> " "$WORK/err" || fail "no device mapping printed"
  rm -f "$WORK"/env.[0-9]
  OMP_NUM_THREADS=5 expect_rc 0 -n 2 --nnodes 2 --node-rank 1 --master-addr 10.1.2.3 \
    --master-port 29555 --log-dir none bash "$P"
  for r in 2 3; do
    f=$WORK/env.$r
    [ -f "$f" ] || fail "node 1 should run global rank $r"
    for kv in "LOCAL_RANK=$((r - 2))" WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 MASTER_ADDR=10.1.2.3 \
      MASTER_PORT=29555 OMP_NUM_THREADS=5; do
      grep -qx "$kv" "$f" || { cat "$f" >&2; fail "rank $r lacks $kv"; }
    done
  done
  ;;
output)  # prefixes, stream separation, raw per-rank logs, partial lines, '\r', --quiet-ranks
  P=$(program out 'echo "hello from $RANK"; echo "oops $RANK" >&2
if [ "$RANK" = 0 ]; then printf "10%%\r50%%\r100%%\n"; fi
printf "tail-$RANK"')
  expect_rc 0 -n 2 --log-dir "$WORK/logs" bash "$P"
  for r in 0 1; do
    grep -qx "\[rank $r\] hello from $r" "$WORK/out" || { show; fail "no prefixed stdout of $r"; }
    grep -qx "\[rank $r\] oops $r" "$WORK/err" || { show; fail "no prefixed stderr of $r"; }
    grep -qx "\[rank $r\] tail-$r" "$WORK/out" || { show; fail "partial line of $r lost"; }
    grep -q "oops" "$WORK/logs/rank$r.out" && fail "stderr leaked into rank$r.out"
    [ "$(head -1 "$WORK/logs/rank$r.out")" = "hello from $r" ] || fail "rank$r.out not raw"
    [ "$(cat "$WORK/logs/rank$r.err")" = "oops $r" ] || fail "rank$r.err wrong"
    [ "$(tail -c 6 "$WORK/logs/rank$r.out")" = "tail-$r" ] || fail "rank$r.out lacks the tail"
  done
  grep -q "hello from 0" "$WORK/err" && fail "stdout leaked into the launcher's stderr"
  # Progress updates: each '\r' segment keeps its prefix on the console; the log keeps raw bytes.
  grep -q $'\\[rank 0\\] 10%\r\\[rank 0\\] 50%\r\\[rank 0\\] 100%$' "$WORK/out" ||
    { od -c "$WORK/out" >&2; fail "progress line garbled"; }
  grep -q $'^10%\r50%\r100%$' "$WORK/logs/rank0.out" || fail "rank0.out progress not raw"
  grep -q "all 2 ranks finished in" "$WORK/err" || fail "no final summary"
  expect_rc 0 -n 2 --quiet-ranks --log-dir "$WORK/q" bash "$P"
  grep -q "\[rank 1\]" "$WORK/out" && fail "--quiet-ranks printed rank 1's stdout"
  grep -q "\[rank 0\] hello from 0" "$WORK/out" || fail "--quiet-ranks hid rank 0"
  grep -q "hello from 1" "$WORK/q/rank1.out" || fail "--quiet-ranks dropped rank 1's log"
  ;;
kill9)  # rank 1 is SIGKILLed after 1 s; the others (and a grandchild) must be gone in < 10 s
  P=$(program k9 '( exec -a "'"$MARKER"'-grandchild" sleep 60 ) &
if [ "$RANK" = 1 ]; then
  for i in $(seq 1 25); do echo "diag line $i" >&2; done
  sleep 1; kill -9 $$
fi
while :; do sleep 0.2; done')
  start=$(now)
  "$RUN" -n 3 --log-dir "$WORK/logs" bash "$P" >"$WORK/out" 2>"$WORK/err"; rc=$?
  took=$(elapsed "$start")
  [ "$rc" -eq 137 ] || { show; fail "exit $rc after a SIGKILLed rank, expected 137"; }
  awk -v t="$took" 'BEGIN { exit !(t < 11.0) }' || fail "launcher took $took s (kill at 1 s)"
  grep -q "rank 1 (pid [0-9]*) failed first: killed by signal 9 (SIGKILL) after" "$WORK/err" ||
    { show; fail "summary does not name rank 1 and SIGKILL"; }
  grep -q "stopping the other 2 rank(s). Last 20 lines of rank 1's stderr:" "$WORK/err" ||
    { show; fail "summary lacks the stderr tail header"; }
  grep -qx "    diag line 25" "$WORK/err" || { show; fail "last stderr line missing"; }
  grep -qx "    diag line 6" "$WORK/err" || fail "20th-from-last stderr line missing"
  grep -qx "    diag line 5" "$WORK/err" && fail "more than 20 stderr lines in the summary"
  expect_no_leftovers
  echo "kill9: launcher exited $took s after start (rank killed at ~1 s)"
  ;;
exitcode)  # rank 1 exits 3: launcher exits 3 naming it; ranks that all succeed: exit 0
  P=$(program ec 'if [ "$RANK" = 1 ]; then sleep 0.5; echo "bad config" >&2; exit 3; fi
exec -a "'"$MARKER"'-sleeper" sleep 60')
  start=$(now)
  expect_rc 3 -n 2 --log-dir none bash "$P"
  took=$(elapsed "$start")
  awk -v t="$took" 'BEGIN { exit !(t < 10.0) }' || fail "launcher took $took s"
  grep -q "rank 1 (pid [0-9]*) failed first: exited with code 3 after" "$WORK/err" ||
    { show; fail "summary does not name rank 1 and code 3"; }
  grep -qx "    bad config" "$WORK/err" || fail "stderr tail missing"
  expect_no_leftovers
  expect_rc 0 -n 4 --log-dir none bash -c 'exit 0'
  grep -q "all 4 ranks finished in" "$WORK/err" || fail "no success summary"
  echo "exitcode: launcher exited $took s after start (rank exit at ~0.5 s)"
  ;;
sigint)  # SIGINT to the launcher reaches all ranks; one ignores it and is killed after grace
  P=$(program si 'if [ "$RANK" = 2 ]; then trap "" INT TERM; fi
echo started
while :; do sleep 0.1; done # '"$MARKER")
  "$RUN" -n 3 --timeout-stop 1 --log-dir "$WORK/logs" bash "$P" >"$WORK/out" 2>"$WORK/err" &
  pid=$!
  for _ in $(seq 100); do
    [ "$(grep -c '\] started' "$WORK/out" 2>/dev/null)" = 3 ] && break
    sleep 0.1
  done
  start=$(now)
  kill -INT "$pid"
  wait "$pid"; rc=$?
  took=$(elapsed "$start")
  [ "$rc" -eq 130 ] || { show; fail "exit $rc after SIGINT, expected 130"; }
  awk -v t="$took" 'BEGIN { exit !(t < 5.0) }' || fail "stopping took $took s (grace 1 s)"
  grep -q "got SIGINT; forwarding it to all ranks" "$WORK/err" || { show; fail "no SIGINT note"; }
  # the summary times the stop from the signal (rank 2 ignores it: SIGKILL after the 1 s grace)
  said=$(grep -o "stopped all ranks [0-9.]* s after SIGINT" "$WORK/err" | awk '{print $4}')
  awk -v t="$said" 'BEGIN { exit !(t != "" && t >= 0.9 && t < 5.0) }' ||
    { show; fail "the stop summary says '$said' s after SIGINT, expected 1-5 s"; }
  expect_no_leftovers
  echo "sigint: all ranks gone $took s after SIGINT (one ignores it; grace 1 s)"
  ;;
restart)  # --max-restarts: relaunch after a failure (counted in the env), not before progress
  # Rank 1 kills itself in attempt 0 after "a checkpoint"; attempt 1 succeeds.
  P=$(program flaky 'echo "$RANK $MINIDL_RESTART_COUNT $TORCHELASTIC_RESTART_COUNT $*" >>"$(dirname "$0")/runs"
echo done >"$MINIDL_PROGRESS_FILE"
if [ "$RANK" = 1 ] && [ "$MINIDL_RESTART_COUNT" = 0 ]; then
  until grep -q "^0 0 " "$(dirname "$0")/runs"; do sleep 0.01; done  # rank 0 has run too
  kill -KILL $$
fi')
  expect_rc 0 -n 2 --log-dir none --max-restarts 2 bash "$P" --checkpoint-dir x
  [ "$(sort "$WORK/runs" | tr '\n' ' ')" = "0 0 0 --checkpoint-dir x 0 1 1 --checkpoint-dir x 1 0 0 --checkpoint-dir x 1 1 1 --checkpoint-dir x " ] ||
    { cat "$WORK/runs" >&2; fail "expected 2 attempts of 2 ranks with restart counts 0 and 1"; }
  grep -q "attempt 1 of 3 failed: rank 1 killed by signal 9 (SIGKILL); restarting all 2 rank(s) (restart 1 of 2) with the same arguments" "$WORK/err" ||
    { show; fail "no restart line naming the attempt and its cause"; }
  # A failure before any progress is not retried.
  P=$(program broken 'exit 3')
  expect_rc 3 -n 2 --log-dir none --max-restarts 2 bash "$P"
  grep -q "attempt 1 of 3 failed: rank [01] exited with code 3 before any rank completed a checkpoint.*not restarting" "$WORK/err" ||
    { show; fail "a failure before the first checkpoint was retried or not explained"; }
  # Always failing after progress: N restarts, then the failed rank's exit code.
  P=$(program always 'echo x >"$MINIDL_PROGRESS_FILE"; [ "$RANK" = 0 ] || exit 4')
  expect_rc 4 -n 2 --log-dir none --max-restarts 1 bash "$P"
  grep -q "attempt 2 of 2 failed: rank 1 exited with code 4; no restarts left" "$WORK/err" ||
    { show; fail "no 'no restarts left' line"; }
  expect_error "works on one node only" --max-restarts 1 --nnodes 2 --master-port 29555 true
  ;;
errors)
  expect_rc 0 --help
  for flag in --nproc-per-node --nnodes --node-rank --master-addr --master-port --log-dir \
    --device-per-rank --backend --quiet-ranks --timeout-stop --max-restarts; do
    grep -q -- "$flag" "$WORK/out" || fail "--help does not document $flag"
  done
  expect_error "nproc-per-node must be >= 1" --nproc-per-node 0 true
  expect_error "no program given"
  expect_error "no program given" -n 2 --
  expect_error "'no-such-program-$MARKER' not found" no-such-program-"$MARKER"
  expect_error "unknown option --bogus" --bogus true
  expect_error "needs an explicit --master-port" --nnodes 2 true
  expect_error "node-rank 3" --nnodes 2 --node-rank 3 --master-port 29555 true
  CUDA_VISIBLE_DEVICES=0 expect_error "GPU" --backend nccl -n 2 true
  # Options end at the program: its own flags (even -n) pass through untouched.
  expect_rc 0 -n 1 --log-dir none bash -c 'printf "%s|" "$@"; echo' prog -n 5 --nnodes x -- y
  grep -qx "\[rank 0\] -n|5|--nnodes|x|--|y|" "$WORK/out" || { show; fail "program flags altered"; }
  expect_rc 0 --log-dir none -- bash -c 'printf "%s|" "$@"; echo' prog -h
  grep -qx "\[rank 0\] -h|" "$WORK/out" || { show; fail "-h after the program was taken"; }
  ;;
*) fail "unknown case $CASE" ;;
esac
echo "PASS: minidl-run $CASE"
