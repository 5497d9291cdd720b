#!/usr/bin/env bash
# mnist_ddp under a real Slurm: a one-host cluster (slurmctld + two slurmd "nodes" with their own
# ports, auth/none, config in a temp dir via SLURM_CONF) started by this test as root.
# Cases: step (`srun -N2 -n4` with no MASTER_* exported: the master comes from the step's node
# list, the port from the job id; bitwise the checkpoint of a 4-rank minidl-run run), batch (an
# sbatch script that runs the binary without srun: one process, says why, done in seconds),
# requeue (`sbatch --requeue` of `srun ... --resume auto`, `scontrol requeue` in epoch 2 of 3: the
# requeued run starts from epoch 1's checkpoint and finishes).
# Installs nothing: .ci/run installs Debian's slurmctld slurmd slurm-client; exit 77 (skipped)
# with the reason when they are missing or the daemons cannot start.
# Usage: slurm_test.sh MNIST_DDP MINIDL_RUN DATA_DIR CASE
set -uo pipefail
BIN=$1 RUN=$2 DATA=$3 CASE=$4
WORK=$(mktemp -d /tmp/slurm_test.XXXXXX)
fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }
cleanup() {
  [ -f "$WORK/slurm.conf" ] && SLURM_CONF=$WORK/slurm.conf scontrol shutdown >/dev/null 2>&1
  for f in "$WORK"/*.pid; do  # only the daemons this test started
    [ -f "$f" ] || continue
    pid=$(cat "$f" 2>/dev/null) || continue
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

for tool in slurmctld slurmd srun sbatch scontrol sinfo; do
  command -v "$tool" >/dev/null ||
    skip "$tool is not installed (.ci/run installs slurmctld slurmd slurm-client)"
done
[ "$(id -u)" -eq 0 ] || skip "starting slurmctld/slurmd as a test cluster needs root"
H=$(hostname)
# Two node names that resolve: the ranks derive MASTER_ADDR from the step's first node name.
N2=localhost
[ "$H" != localhost ] || skip "the host name is 'localhost': no second resolvable node name"
getent hosts "$H" >/dev/null || skip "the host name '$H' does not resolve"
PORT=$((17000 + RANDOM % 2000))
export SLURM_CONF=$WORK/slurm.conf
cat >"$SLURM_CONF" <<EOF
ClusterName=minidl
SlurmctldHost=$H
SlurmctldPort=$PORT
AuthType=auth/none
CredType=cred/none
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool-%n
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd-%n.pid
SlurmctldLogFile=$WORK/slurmctld.log
SlurmdLogFile=$WORK/slurmd-%n.log
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SlurmdParameters=config_overrides
FirstJobId=$((1 + RANDOM % 19000))
NodeName=$H NodeHostname=$H Port=$((PORT + 1)) CPUs=2 State=UNKNOWN
NodeName=$N2 NodeHostname=$H Port=$((PORT + 2)) CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
mkdir -p "$WORK/state"
t0=$(now)
slurmctld -i >"$WORK/daemons.err" 2>&1 || skip "slurmctld does not start: $(head -1 "$WORK/daemons.err")"
for n in "$H" "$N2"; do
  slurmd -N "$n" >>"$WORK/daemons.err" 2>&1 ||
    skip "slurmd -N $n does not start: $(head -1 "$WORK/daemons.err")"
done
for _ in $(seq 100); do
  [ "$(sinfo -h -N -o %T 2>/dev/null | grep -c idle)" -eq 2 ] && break
  sleep 0.1
done
[ "$(sinfo -h -N -o %T 2>/dev/null | grep -c idle)" -eq 2 ] ||
  skip "the two slurmd nodes are not idle after 10 s: $(sinfo -N 2>&1 | tr '\n' ' ')"
echo "slurm cluster ready after $(elapsed "$t0") s"
COMMON=(--data "$DATA" --threads 1 --workers 1 --quiet --max-steps 6 --test-batch-size 500
  --seed 3 --epochs 1)

case $CASE in
step)  # srun -N2 -n4, no MASTER_*: bitwise the 4-rank minidl-run checkpoint
  t0=$(now)
  env -u MASTER_ADDR -u MASTER_PORT srun -N2 -n4 "$BIN" "${COMMON[@]}" \
    --checkpoint-dir "$WORK/srun" >"$WORK/out" 2>"$WORK/err" ||
    { cat "$WORK/out" "$WORK/err" >&2; fail "srun -N2 -n4 mnist_ddp failed"; }
  echo "srun -N2 -n4 mnist_ddp took $(elapsed "$t0") s"
  grep -q "ddp, 4 rank(s)" "$WORK/out" || { cat "$WORK/out" "$WORK/err" >&2; fail "no 4-rank summary"; }
  "$RUN" -n 4 --log-dir none "$BIN" "${COMMON[@]}" --checkpoint-dir "$WORK/run" \
    >"$WORK/out2" 2>"$WORK/err2" || { cat "$WORK/err2" >&2; fail "minidl-run -n 4 failed"; }
  cmp "$WORK/srun/checkpoint-epoch-1.safetensors" "$WORK/run/checkpoint-epoch-1.safetensors" ||
    fail "the srun run's checkpoint differs from minidl-run's"
  grep "test accuracy" "$WORK/out"
  ;;
batch)  # sbatch -n2 running the binary without srun: one process, one line saying why
  printf '#!/bin/bash\nexec env -u MASTER_ADDR -u MASTER_PORT %q %s\n' "$BIN" \
    "$(printf '%q ' "${COMMON[@]}")" >"$WORK/job.sh"
  t0=$(now)
  job=$(sbatch --parsable -n2 -o "$WORK/job.out" -e "$WORK/job.err" "$WORK/job.sh") ||
    fail "sbatch failed"
  for _ in $(seq 300); do  # 30 s at most; it takes a few
    squeue -h -j "$job" 2>/dev/null | grep -q . || break
    sleep 0.1
  done
  took=$(elapsed "$t0")
  squeue -h -j "$job" 2>/dev/null | grep -q . && { scancel "$job"; fail "batch job still running after 30 s"; }
  echo "batch job $job finished after $took s"
  cat "$WORK/job.err" >&2
  grep -q "SLURM_STEP_ID is not: this is the batch script of job $job" "$WORK/job.err" ||
    fail "no line saying why the batch script runs as one process"
  grep -q "1 process, cpu" "$WORK/job.out" ||
    { cat "$WORK/job.out" >&2; fail "the batch script did not train as one process"; }
  ;;
requeue)  # sbatch --requeue; scontrol requeue in epoch 2 of 3: --resume auto continues from epoch 1
  SHORT=(--data "$DATA" --threads 1 --workers 1 --max-steps 12 --test-batch-size 500 --seed 3
    --scheduler step --epochs 3)
  printf '#!/bin/bash\nexec env -u MASTER_ADDR -u MASTER_PORT srun %q %s --checkpoint-dir %q --resume auto\n' \
    "$BIN" "$(printf '%q ' "${SHORT[@]}")" "$WORK/ck" >"$WORK/job.sh"
  t0=$(now)
  job=$(sbatch --parsable --requeue -N2 -n2 --open-mode=append -o "$WORK/job.out" \
    -e "$WORK/job.err" "$WORK/job.sh") || fail "sbatch failed"
  for _ in $(seq 600); do
    [ -f "$WORK/ck/checkpoint-epoch-1.safetensors" ] && break
    sleep 0.05
  done
  [ -f "$WORK/ck/checkpoint-epoch-1.safetensors" ] || { cat "$WORK"/job.*; fail "no epoch-1 checkpoint"; }
  scontrol requeue "$job" || fail "scontrol requeue $job failed"
  [ ! -f "$WORK/ck/checkpoint-epoch-2.safetensors" ] || fail "epoch 2 ended before the requeue"
  echo "requeued job $job in epoch 2 after $(elapsed "$t0") s"
  # Slurm may give a requeued job a later begin time: make it eligible now (else a no-op).
  for _ in $(seq 100); do
    squeue -h -j "$job" -o %T 2>/dev/null | grep -q PENDING && break
    sleep 0.1
  done
  scontrol update JobId="$job" StartTime=now >/dev/null 2>&1
  for _ in $(seq 600); do  # 60 s at most
    squeue -h -j "$job" 2>/dev/null | grep -q . || break
    sleep 0.1
  done
  squeue -h -j "$job" 2>/dev/null | grep -q . && { scancel "$job"; cat "$WORK"/job.*; fail "job not done after 60 s"; }
  echo "requeued job finished after $(elapsed "$t0") s"
  grep -q "resumed from $WORK/ck/checkpoint-epoch-1.safetensors (epoch 1 done)" "$WORK/job.out" ||
    { cat "$WORK"/job.* >&2; fail "the requeued run did not resume from epoch 1's checkpoint"; }
  [ "$(grep -c "starting from scratch" "$WORK/job.err")" -eq 1 ] ||
    { cat "$WORK/job.err" >&2; fail "expected one fresh start (the first run) in the job's stderr"; }
  # (That a resumed run is bitwise an uninterrupted one: app.mnist_ddp.ddp_resume / elastic.)
  [ -f "$WORK/ck/checkpoint-epoch-3.safetensors" ] || fail "the requeued job did not finish epoch 3"
  grep "test accuracy" "$WORK/job.out"
  ;;
*) fail "unknown case $CASE" ;;
esac
echo "PASS"
