#!/usr/bin/env bash
# Two "hosts" on one machine: network namespaces A and B, each wired by a veth pair to a bridge
# (the switch) in a third namespace, 2 mnist_ddp ranks per host under minidl-run (world 4).
# Cases: equal (bitwise the one-host 4-rank checkpoint), link_cut (the switch goes down
# mid-epoch: both hosts stop within timeout + 5 s naming the lost peers; the last checkpoint
# resumes), netem (20 ms delay still trains; skipped where netem is missing).
# Usage: two_host_test.sh MNIST_DDP MINIDL_RUN DATA_DIR CASE; exit 77 = skipped (no netns).
set -uo pipefail
BIN=$1 RUN=$2 DATA=$3 CASE=$4
TIMEOUT=10  # --dist-timeout of the link_cut case
NS=mdl2h-$$ A=mdl2h-$$-a B=mdl2h-$$-b SW=mdl2h-$$-w
ADDR_A=10.213.7.1 ADDR_B=10.213.7.2 PORT=29500  # private, inside our namespaces only
WORK=$(mktemp -d /tmp/two_host_test.XXXXXX)
fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }
cleanup() {
  for n in $A $B $SW; do
    ip netns pids "$n" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
    ip netns del "$n" 2>/dev/null
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="${2:-$(now)}" 'BEGIN { printf "%.1f", b - a }'; }

command -v ip >/dev/null || skip "iproute2 ('ip') is not installed"
ip netns add "$A" 2>"$WORK/ns.err" ||
  skip "cannot create network namespaces (needs root or CAP_NET_ADMIN): $(head -1 "$WORK/ns.err")"
ip netns add "$B" && ip netns add "$SW" || fail "ip netns add failed after the first worked"
{ ip link add mdl-a type veth peer name port-a netns "$SW" && ip link set mdl-a netns "$A" &&
  ip link add mdl-b type veth peer name port-b netns "$SW" && ip link set mdl-b netns "$B" &&
  ip -n "$SW" link add name sw type bridge && ip -n "$SW" link set port-a master sw &&
  ip -n "$SW" link set port-b master sw && ip -n "$SW" link set sw up &&
  ip -n "$SW" link set port-a up && ip -n "$SW" link set port-b up &&
  ip -n "$A" addr add $ADDR_A/24 dev mdl-a && ip -n "$B" addr add $ADDR_B/24 dev mdl-b &&
  for n in $A $B; do ip -n "$n" link set lo up && ip -n "$n" link set "mdl-${n##*-}" up; done
} 2>"$WORK/wire.err" ||
  skip "cannot wire namespaces with veth pairs and a bridge: $(head -1 "$WORK/wire.err")"

COMMON=(--data "$DATA" --threads 1 --workers 0 --test-batch-size 500 --seed 3 --quiet)
# Starts host $1 (a|b) in the background: minidl-run node $1 with 2 ranks, then mnist args.
# When the launcher exits, $1.rc gets its exit code and $1.end the time.
start_host() {
  local h=$1 rank=0; shift
  [ "$h" = b ] && rank=1
  rm -f "$WORK/$h.rc" "$WORK/$h.end"
  (
    ip netns exec "$NS-$h" "$RUN" --nnodes 2 --node-rank $rank -n 2 --master-addr $ADDR_A \
      --master-port $PORT --log-dir none "$BIN" "$@" >"$WORK/$h.out" 2>"$WORK/$h.err"
    echo $? >"$WORK/$h.rc"
    now >"$WORK/$h.end"
  ) &
  echo $! >"$WORK/$h.pid"
}
# Waits for host $1's launcher; returns its exit code.
wait_host() { wait "$(cat "$WORK/$1.pid")"; return "$(cat "$WORK/$1.rc" 2>/dev/null || echo 99)"; }
running() { kill -0 "$(cat "$WORK/$1.pid")" 2>/dev/null; }
show() { for f in "$@"; do echo "--- $f" >&2; tail -30 "$WORK/$f" >&2; done; }
accuracy() { grep -o 'test accuracy [0-9.]*% ([0-9]*/[0-9]*)' "$WORK/$1" | tail -1; }
# Lists the tensors of two safetensors files that differ (python3 when present, else "?").
diff_tensors() {
  command -v python3 >/dev/null || { echo "?"; return; }
  python3 - "$1" "$2" <<'EOF'
import json, struct, sys
def load(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
            for k, v in h.items() if k != "__metadata__"}
a, b = load(sys.argv[1]), load(sys.argv[2])
print(" ".join(sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))) or "none")
EOF
}

case $CASE in
equal)  # one epoch (capped) on 2 hosts x 2 ranks == 1 host x 4 ranks, bitwise on CPU
  ARGS=("${COMMON[@]}" --epochs 1 --max-steps 12)
  t0=$(now)
  "$BIN" "${ARGS[@]}" -n 4 --checkpoint-dir "$WORK/one" >"$WORK/one.out" 2>"$WORK/one.err" ||
    { show one.out one.err; fail "the one-host 4-rank run failed"; }
  t1=$(now)
  start_host a "${ARGS[@]}" --checkpoint-dir "$WORK/two"
  start_host b "${ARGS[@]}" --checkpoint-dir "$WORK/two-b"
  wait_host a; rca=$?
  wait_host b; rcb=$?
  [ $rca -eq 0 ] && [ $rcb -eq 0 ] || { show a.out a.err b.err; fail "two-host run: exit $rca/$rcb"; }
  echo "one host: $(accuracy one.out) in $(elapsed "$t0" "$t1") s;" \
    "two hosts: $(accuracy a.out) in $(elapsed "$t1") s"
  [ -n "$(accuracy one.out)" ] && [ "$(accuracy one.out)" = "$(accuracy a.out)" ] ||
    { show one.out a.out; fail "accuracy differs between one and two hosts"; }
  grep -q "ddp, 4 rank(s)" "$WORK/a.out" || { show a.out; fail "host a did not run world size 4"; }
  ck=checkpoint-epoch-1.safetensors
  [ -f "$WORK/one/$ck" ] && [ -f "$WORK/two/$ck" ] || fail "a checkpoint is missing"
  [ ! -e "$WORK/two-b/$ck" ] || fail "host b (no global rank 0) wrote a checkpoint"
  cmp -s "$WORK/one/$ck" "$WORK/two/$ck" ||
    fail "checkpoints differ; tensors: $(diff_tensors "$WORK/one/$ck" "$WORK/two/$ck")"
  echo "checkpoints bitwise equal ($(diff_tensors "$WORK/one/$ck" "$WORK/two/$ck") differ)"
  ;;
link_cut)  # the switch fails mid-epoch: both hosts stop within timeout + 5 s, naming the peer
  ARGS=("${COMMON[@]}" --epochs 1000 --max-steps 6 --dist-timeout $TIMEOUT)
  start_host a "${ARGS[@]}" --checkpoint-dir "$WORK/ck"
  start_host b "${ARGS[@]}" --checkpoint-dir "$WORK/ck-b"
  for _ in $(seq 1200); do
    [ -f "$WORK/ck/checkpoint-epoch-2.safetensors" ] && break
    running a && running b || { show a.err b.err; fail "a host exited before the cut"; }
    sleep 0.1
  done
  [ -f "$WORK/ck/checkpoint-epoch-2.safetensors" ] || { show a.err b.err; fail "no checkpoint"; }
  sleep 0.3  # into epoch 3's steps
  cut=$(now)
  ip -n "$SW" link set sw down || fail "could not cut the link"
  wait_host a; rca=$?
  wait_host b; rcb=$?
  ta=$(elapsed "$cut" "$(cat "$WORK/a.end")") tb=$(elapsed "$cut" "$(cat "$WORK/b.end")")
  echo "link cut with --dist-timeout $TIMEOUT: host a exited $rca after ${ta} s," \
    "host b exited $rcb after ${tb} s"
  for h in a b; do grep -E "heartbeat|error" "$WORK/$h.err" | sed "s/^/  host $h: /" | head -8; done
  limit=$((TIMEOUT + 5))
  [ $rca -ne 0 ] && [ $rcb -ne 0 ] || { show a.err b.err; fail "a host exited 0 after the cut"; }
  awk -v t="$ta" -v l=$limit 'BEGIN { exit !(t < l) }' || { show a.err; fail "host a took ${ta} s"; }
  awk -v t="$tb" -v l=$limit 'BEGIN { exit !(t < l) }' || { show b.err; fail "host b took ${tb} s"; }
  grep -q "rank [23] ($ADDR_B" "$WORK/a.err" || { show a.err; fail "host a did not name rank 2/3 at $ADDR_B"; }
  grep -q "rank 0 ($ADDR_A" "$WORK/b.err" || { show b.err; fail "host b did not name rank 0 at $ADDR_A"; }
  last=$(ls "$WORK/ck" | grep -E '^checkpoint-epoch-[0-9]+\.safetensors$' | sort -t- -k3 -n | tail -1)
  [ -n "$last" ] || fail "no complete checkpoint left after the cut"
  n=$(echo "$last" | grep -o '[0-9]*')
  "$BIN" "${COMMON[@]}" --epochs $((n + 1)) --max-steps 6 --resume "$WORK/ck/$last" \
    >"$WORK/r.out" 2>"$WORK/r.err" || { show r.out r.err; fail "$last does not resume"; }
  echo "$last resumed: $(accuracy r.out)"
  ;;
netem)  # 20 ms each way on the hosts' links still trains; reports the slowdown
  if ! ip netns exec "$A" tc qdisc add dev mdl-a root netem delay 20ms 2>"$WORK/tc.err"; then
    skip "netem is unavailable: tc says '$(head -1 "$WORK/tc.err")' (kernel module sch_netem?)"
  fi
  ip netns exec "$A" tc qdisc del dev mdl-a root
  ARGS=("${COMMON[@]}" --epochs 1 --max-steps 8)
  for delay in 0 20; do
    if [ $delay -gt 0 ]; then
      for h in a b; do ip netns exec "$NS-$h" tc qdisc add dev "mdl-$h" root netem delay 20ms ||
        fail "tc netem on host $h"; done
    fi
    t=$(now)
    start_host a "${ARGS[@]}"
    start_host b "${ARGS[@]}"
    wait_host a; rca=$?
    wait_host b; rcb=$?
    [ $rca -eq 0 ] && [ $rcb -eq 0 ] || { show a.err b.err; fail "delay ${delay} ms: exit $rca/$rcb"; }
    eval "secs_$delay=$(elapsed "$t")"
    echo "delay ${delay} ms: $(accuracy a.out) in $(elapsed "$t") s"
  done
  echo "slowdown with 20 ms: $(awk -v a="$secs_0" -v b="$secs_20" 'BEGIN { printf "%.2fx", b / a }')"
  ;;
*) fail "unknown case $CASE" ;;
esac
echo "PASS: two_host $CASE"
