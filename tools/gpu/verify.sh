#!/usr/bin/env bash
# The GPU verification run of issue 28, from the repository root with .gpu-pack/ (tools/gpu/pack.sh)
# beside it: every step under its own timeout, going on past failures, then one summary table on
# stdout and in $OUT/summary.md with the logs in $OUT/logs.tar.xz. See tools/gpu/README.md.
#
# Usage: tools/gpu/verify.sh [--steps 1,4,5] [--budget SECONDS]   (on the GPU machine)
#        tools/gpu/verify.sh --dry-run                               (anywhere: CI runs it)
# The dry run unpacks into a scratch folder, checks that every packed binary's NEEDED libraries
# resolve from the pack or the GPU image's list (tools/gpu/common.sh; this machine's copies are
# never consulted), that every flag the GPU steps pass exists, and runs CPU cases from the pack.
set -uo pipefail  # no -e: a failing step is recorded and the run goes on
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=tools/gpu/common.sh
source "$ROOT/tools/gpu/common.sh"

DRY_RUN=0
STEPS=1,5,4,6,7,2,3,8  # the cuda* suites and the GPT-2 step first; the rest after
BUDGET=${VERIFY_BUDGET_S:-480}  # seconds for the whole run (the device call gets 540)
while (($#)); do
  case $1 in
    --dry-run) DRY_RUN=1 ;;
    --steps) STEPS=$2 && shift ;;
    --budget) BUDGET=$2 && shift ;;
    -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' && exit 0 ;;
    *) echo "verify.sh: unknown argument $1 (see --help)" >&2 && exit 2 ;;
  esac
  shift
done
START=$(date +%s)
ARCHIVE=$ROOT/$GPU_PACK_DIRNAME/$GPU_PACK_ARCHIVE
[[ -f $ARCHIVE ]] || { echo "verify.sh: $ARCHIVE not found: run tools/gpu/pack.sh first" >&2 && exit 1; }

# ------------------------------------------------------------------ unpack
if ((DRY_RUN)); then
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/minidl-gpu-dry.XXXXXX")
  trap 'rm -rf "$WORK"' EXIT
else
  WORK=/tmp/minidl-gpu
  rm -rf "$WORK" && mkdir -p "$WORK"
fi
if command -v xz >/dev/null; then
  xz -dc "$ARCHIVE" | tar -x -C "$WORK" || { echo "verify.sh: cannot unpack $ARCHIVE" >&2 && exit 1; }
else  # python's lzma when the image has no xz
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' \
    "$ARCHIVE" "$WORK" || { echo "verify.sh: cannot unpack $ARCHIVE" >&2 && exit 1; }
fi
P=$WORK/$GPU_PACK_TOP
manifest() { sed -n "s/^$1=//p" "$P/MANIFEST"; }
SOURCE_DIR=$(manifest source_dir)
BUILD_DIR=$(manifest build_dir)
TESTS=$P/build/tests/minidl_tests
MNIST=$P/build/apps/mnist_ddp
GPT=$P/build/apps/gpt
RUN=$P/build/apps/minidl-run
COMPARE=$P/build/apps/minidl-compare
CLASSIFY=$P/build/apps/classify
PREPARE=$P/build/apps/mnist_prepare
LOGITS=$P/build/tools/gpu/safetensors_logits
DATA=$P/data
echo "verify.sh: pack of commit $(manifest commit) ($(manifest modified_tracked_files) modified" \
  "files), built $(manifest created) in $BUILD_DIR; unpacked in $WORK ($(($(date +%s) - START)) s)"

# The flags the steps below pass, per binary: the dry run checks each against --help.
FLAGS_MNIST=(--device --data --epochs --seed --amp --cuda-graph --mode --backend -n --dist-timeout
  --max-steps)
FLAGS_GPT=(--device --data --max-iters --eval-interval --eval-iters --amp --preset --batch-size
  --warmup-iters --log-interval --cuda-graph)
FLAGS_RUN=(-n --backend)
FLAGS_COMPARE=(--model --device --modes --devices --steps --warmup --rounds --data)
FLAGS_CLASSIFY=(--device --data --model --epochs --amp --workers)

# ------------------------------------------------------------------ checks and the dry run
# shellcheck source=tools/gpu/verify_checks.sh
source "$ROOT/tools/gpu/verify_checks.sh"

# ================================================================== the GPU run
LOG=$WORK/logs
mkdir -p "$LOG"
OUT_DIR=${OUT:-$WORK/out}
mkdir -p "$OUT_DIR"
NPROC=$(nproc)
SUMMARY_ROWS=()

# Seconds a step may take: its own limit, cut to what the whole run has left (minus 15 s for the
# summary). Prints 0 when less than 10 s would remain.
step_limit() {
  local left=$((START + BUDGET - 15 - $(date +%s)))
  ((left < 10)) && echo 0 && return
  echo $(($1 < left ? $1 : left))
}
# run_logged LOGNAME SECONDS CMD...: the command's output to $LOG/LOGNAME.log; returns its status
# (124 after a timeout).
run_logged() {
  local name=$1 seconds=$2
  shift 2
  echo "--- $(date +%T) $name (limit ${seconds}s): $*" | tee -a "$LOG/commands.log"
  timeout -k 5 "$seconds" "$@" >"$LOG/$name.log" 2>&1
}
rc_word() { case $1 in 0) echo PASS ;; 124 | 137) echo TIMEOUT ;; *) echo "FAIL (rc $1)" ;; esac; }
# detail RC LOGNAME KEY: KEY, and after a failure (RC != 0) the log's last error line.
detail() {
  if [[ $1 == 0 ]]; then echo "$3"; else echo "${3:+$3; }$(why "$2")"; fi
}
# why LOGNAME: the log's last error line (or last line), for the summary of a failed run.
why() {
  local line
  line=$(grep -E 'error|Error|ERROR|FAIL|not found|Traceback' "$LOG/$1.log" | tail -1)
  [[ -n $line ]] || line=$(grep -v '^\s*$' "$LOG/$1.log" | tail -1)
  echo "${line:0:160}" | tr '|' '/'
}
# add_row STEP WHAT RESULT SECONDS KEY: one summary row, rewritten to disk at once (a run cut off
# by the device's limit still returns the rows so far) with the logs so far.
add_row() {
  SUMMARY_ROWS+=("| $1 | $2 | $3 | $4 | $5 |")
  echo "=== step $1 ($2): $3 in $4 s: $5"
  write_summary >"$OUT_DIR/summary.md"
  tar -C "$WORK" -cJf "$OUT_DIR/logs.tar.xz" logs 2>/dev/null
}
write_summary() {
  echo "# minidl GPU verification ($(date -u '+%Y-%m-%d %H:%M UTC'))"
  echo
  echo "- device: ${GPU_NAME:-unknown}, driver ${GPU_DRIVER:-unknown}; host $(nproc) cores"
  echo "- pack: commit $(manifest commit), built $(manifest created) ($(manifest host))"
  echo "- command: tools/gpu/verify.sh --steps $STEPS --budget $BUDGET; $(($(date +%s) - START)) s so far"
  echo
  echo "| step | what | result | seconds | key numbers |"
  echo "|---|---|---|---|---|"
  printf '%s\n' "${SUMMARY_ROWS[@]}"
}
# The doctest totals of some logs: "P passed (K MINIDL_SKIP), F failed" (doctest counts a case
# that skipped itself at run time as passed; its own "skipped" are the cases the filters left out).
doctest_counts() {
  awk '/^\[doctest\] test cases:/ { gsub(/\|/, " "); p += $5; f += $7 }
       /^\[minidl\] SKIPPED/ { k++ }
       END { printf "%d passed (%d MINIDL_SKIP), %d failed", p, k, f }' "$@"
}
now() { date +%s; }

# ------------------------------------------------------------------ setup (step 0)
t0=$(now)
setup_notes=()
# The test binary reads tests/data, tests/fuzz and data/ under the source folder it was built in,
# ctest runs it from its build folder: make both paths lead here when this copy lives elsewhere.
link_to() {  # link_to PATH TARGET: PATH -> TARGET unless PATH already exists
  if [[ -e $1 || -L $1 ]]; then
    [[ $(realpath "$1") == $(realpath "$2") ]] || setup_notes+=("$1 exists and is not $2")
  else
    mkdir -p "$(dirname "$1")" && ln -s "$2" "$1" && setup_notes+=("linked $1 -> $2")
  fi
}
[[ $(realpath -m "$SOURCE_DIR") == "$ROOT" ]] || link_to "$SOURCE_DIR" "$ROOT"
link_to "$BUILD_DIR" "$P/build"
link_to "$ROOT/data/mnist" "$DATA/mnist"
link_to "$ROOT/data/moby-dick" "$DATA/moby-dick"

# Libraries: the pack's, then the CUDA libraries of PyTorch's venv (nvidia-* wheels:
# nvidia/cu13/lib, nvidia/cudnn/lib, nvidia/nccl/lib...).
nvidia_libs=$(python3 -c 'import glob, nvidia
print(":".join(sorted(d for p in nvidia.__path__ for d in glob.glob(p + "/*/lib"))))' 2>/dev/null)
[[ -n $nvidia_libs ]] || setup_notes+=("no nvidia-* wheels found by python3")
export LD_LIBRARY_PATH=$P/lib${nvidia_libs:+:$nvidia_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
packed_binaries=()
for entry in "${GPU_PACK_TARGETS[@]}"; do packed_binaries+=("$P/build/${entry#*:}"); done
# ldd -r: also the symbols a library of the image lacks (an older NCCL or cuDNN than the build's).
ldd_missing() {
  for f in "${packed_binaries[@]}"; do ldd -r "$f"; done 2>&1 | grep -E 'not found|undefined symbol' | sort -u
}
missing=$(ldd_missing)
if [[ -n $missing ]]; then
  # The image lacks a GCC runtime library or zlib, or has an older one: only those of lib-fallback/
  # join the path (a whole older libstdc++ folder would also shadow the image's for PyTorch).
  mkdir -p "$WORK/lib-fallback-used"
  for soname in $(echo "$missing" | sed -nE 's/^\s*([^ ]+) => not found.*/\1/p; s/^\s*[^ ]*\/([^/ ]+): version .* not found.*/\1/p' | sort -u); do
    [[ -f $P/lib-fallback/$soname ]] && ln -sf "$P/lib-fallback/$soname" "$WORK/lib-fallback-used/$soname" &&
      setup_notes+=("lib-fallback/$soname used: the image's is missing or too old")
  done
  export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$WORK/lib-fallback-used
  missing=$(ldd_missing)
fi
{
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  for f in "$TESTS" "$P"/build/bench/bench_cuda_kernels; do echo "== ldd $f" && ldd "$f"; done
  echo "== check_libs" && check_libs
  echo "== cuBLAS (opened at run time)"
  python3 -c 'import ctypes; [print(n, ctypes.CDLL(n)._name) for n in ("libcublas.so.13", "libcublasLt.so.13")]'
  echo "== uname, os-release" && uname -a && cat /etc/os-release
  echo "== python3, torch" && python3 -c 'import sys, torch; print(sys.version, torch.__version__, torch.version.cuda)'
  for tool in ctest compute-sanitizer torchrun; do echo "$tool: $(command -v $tool || echo none)"; done
} >"$LOG/0-setup.log" 2>&1
nvidia-smi >"$LOG/0-nvidia-smi.log" 2>&1
cat "$LOG/0-nvidia-smi.log"
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
GPU_DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
CTEST=$(command -v ctest || ls /opt/torch/.venv/bin/ctest 2>/dev/null)
printf '  %s\n' "${setup_notes[@]}"
if [[ -n $missing ]]; then
  add_row 0 "setup: unpack, paths, libraries" "FAIL" $(($(now) - t0)) "unresolved: $(echo "$missing" | tr '\n' ';')"
else
  add_row 0 "setup: unpack, paths, libraries" "PASS" $(($(now) - t0)) \
    "${GPU_NAME:-no GPU seen}; libs resolve; ${#setup_notes[@]} note(s) in 0-setup.log"
fi
printf '%s\n' "${setup_notes[@]}" >>"$LOG/0-setup.log"

# ------------------------------------------------------------------ the steps
# Runs each cuda* suite as its own process, 8 at a time (a crash loses one suite, not all), until
# a deadline: a suite gets at most SECONDS and never runs past DEADLINE (a suite not started
# before it is recorded as a timeout, rc 124).
# suites_parallel LOGPREFIX SECONDS DEADLINE [WRAPPER...]: writes LOGPREFIX-<suite>.log and .rc.
# shellcheck disable=SC2016  # the inner bash expands its own arguments
suites_parallel() {
  local prefix=$1 seconds=$2 deadline=$3
  shift 3
  "$TESTS" --list-test-suites 2>/dev/null | grep -E '^cuda' |
    OMP_NUM_THREADS=$((NPROC / 8 > 0 ? NPROC / 8 : 1)) xargs -P 8 -I{} bash -c '
      log=$0-$4.log left=$(($2 - $(date +%s)))
      if ((left < 5)); then echo "not started: deadline reached" >"$log" && echo 124 >"$0-$4.rc" && exit; fi
      timeout -k 5 $((left < $1 ? left : $1)) "${@:5}" "$3" -ts="$4" >"$log" 2>&1
      echo $? >"$0-$4.rc"' "$LOG/$prefix" "$seconds" "$deadline" "$TESTS" {} "$@"
}
# suite_results LOGPREFIX: prints "ok/total suites ok" and the others with their status; returns 0
# when every suite passed.
suite_results() {
  local prefix=$1 total=0 ok=0 others=() rc f suite
  for f in "$LOG/$prefix"-*.rc; do
    [[ -f $f ]] || continue
    total=$((total + 1)) rc=$(cat "$f") suite=${f#"$LOG/$prefix"-}
    if [[ $rc == 0 ]]; then ok=$((ok + 1)); else others+=("${suite%.rc}: $(rc_word "$rc")"); fi
  done
  echo "$ok/$total suites ok${others:+; ${others[*]}}"
  ((total > 0 && ok == total))
}

step_1() {  # every cuda* suite
  local t lim
  t=$(now)
  lim=$(step_limit 90)
  ((lim)) || { add_row 1 "cuda* suites" SKIPPED 0 "no time left" && return; }
  suites_parallel 1-cuda 60 "$((t + lim))"
  local counts status res=FAIL
  counts=$(doctest_counts "$LOG"/1-cuda-*.log)
  status=$(suite_results 1-cuda) && res=PASS
  add_row 1 "cuda* suites (one process each)" "$res" $(($(now) - t)) "$counts; $status"
}

step_2() {  # the whole suite: every case, CPU and CUDA
  local t lim rc key
  t=$(now)
  lim=$(step_limit 120)
  ((lim)) || { add_row 2 "whole suite" SKIPPED 0 "no time left" && return; }
  # ctest runs the binary at its build path: only where that path leads to the pack's.
  if [[ -n $CTEST && $(realpath -m "$BUILD_DIR") == $(realpath "$P/build") ]]; then
    OMP_NUM_THREADS=2 run_logged 2-whole-suite "$lim" "$CTEST" --test-dir "$BUILD_DIR/tests" \
      -j "$NPROC" --timeout 100 --output-on-failure
    rc=$?
    key=$(grep -E 'tests passed|tests failed' "$LOG/2-whole-suite.log" | tail -1)
    key="ctest -j $NPROC: ${key:-no ctest summary}; $(grep -c '\*\*\*Skipped\|Not Run' "$LOG/2-whole-suite.log") not run/skipped"
  else
    OMP_NUM_THREADS=$NPROC run_logged 2-whole-suite "$lim" "$TESTS"
    rc=$?
    key="one process (no ctest): $(doctest_counts "$LOG/2-whole-suite.log")"
  fi
  add_row 2 "whole suite" "$(rc_word $rc)" $(($(now) - t)) "$(detail $rc 2-whole-suite "$key")"
}

# The test cases racecheck runs, one process each (in parallel): the kernels with shared memory.
RACECHECK_CASES=(
  'cuda_attention: fused CUDA matches*'
  'cuda reduce kernels match*'
  'cuda softmax kernels match*'
  'cuda autograd parity: layer_norm, batch_norm*'
  'cuda review: topk on rows longer*'
)
step_3() {  # compute-sanitizer: memcheck on every cuda* suite, racecheck on the shared-memory kernels
  local t lim
  t=$(now)
  [[ -n $SANITIZER ]] || { add_row 3 "compute-sanitizer" SKIPPED 0 "compute-sanitizer not found" && return; }
  lim=$(step_limit 130)
  ((lim > 60)) || { add_row 3 "compute-sanitizer" SKIPPED 0 "no time left" && return; }
  # API errors are not reported: minidl raises every failed CUDA call as an exception (the test
  # fails), and NCCL probes kernels with calls that fail by design (cudaFuncGetAttributes ->
  # cudaErrorNoKernelImageForDevice, 16 reports in the 2026-11-27 run).
  suites_parallel 3-memcheck "$((lim - 60))" "$((t + lim - 60))" "$SANITIZER" --tool memcheck \
    --report-api-errors no --error-exitcode 86 --print-limit 20
  local errors status res=FAIL i pids=()
  errors=$(cat "$LOG"/3-memcheck-*.log | awk '/ERROR SUMMARY:/ { n += $4 } END { print n + 0 }')
  status=$(suite_results 3-memcheck) && [[ $errors == 0 ]] && res=PASS
  add_row 3a "memcheck, cuda* suites" "$res" $(($(now) - t)) \
    "$errors memcheck error(s); $status (rc 86: errors found)"
  t=$(now)
  lim=$(step_limit 60)
  ((lim)) || { add_row 3b "racecheck" SKIPPED 0 "no time left" && return; }
  for i in "${!RACECHECK_CASES[@]}"; do
    (
      run_logged "3-racecheck-$i" "$lim" "$SANITIZER" --tool racecheck --error-exitcode 86 \
        --print-limit 20 "$TESTS" -tc="${RACECHECK_CASES[$i]}"
      echo $? >"$LOG/3-racecheck-$i.rc"
    ) &
    pids+=($!)
  done
  wait "${pids[@]}"
  errors=$(cat "$LOG"/3-racecheck-*.log | awk '/RACECHECK SUMMARY:/ { n += $4 } END { print n + 0 }')
  res=FAIL
  status=$(suite_results 3-racecheck) && [[ $errors == 0 ]] && res=PASS
  add_row 3b "racecheck: attention, reductions, softmax, norms, topk" "$res" $(($(now) - t)) \
    "$errors hazard(s); $(doctest_counts "$LOG"/3-racecheck-*.log); $status"
}

# mnist_run ROW NAME CMD...: one training run; its row gives the test accuracy. Bar: 97% after 3
# epochs (the same fp32 run on the CPU: 97.65%, Debian 12 host, 2026-11-27; 2 DDP ranks: 97.7-98%).
mnist_run() {
  local row=$1 name=$2 t lim rc acc res key
  t=$(now)
  shift 2
  lim=$(step_limit 45)
  ((lim)) || { add_row "$row" "mnist_ddp $name" SKIPPED 0 "no time left" && return; }
  run_logged "4-$name" "$lim" "$@"
  rc=$?
  acc=$(grep -o 'test accuracy [0-9.]*' "$LOG/4-$name.log" | tail -1 | awk '{print $3}')
  res=$(rc_word $rc)
  [[ $res == PASS ]] && ! awk -v a="${acc:-0}" 'BEGIN { exit !(a >= 97.0) }' && res="FAIL (accuracy)"
  key="test accuracy ${acc:-n/a}% (bar 97; CPU fp32 97.65)$(grep -o ', [0-9]* train samples/s' "$LOG/4-$name.log" | tail -1)"
  add_row "$row" "mnist_ddp $name" "$res" $(($(now) - t)) "$(detail $rc "4-$name" "$key")"
}
step_4() {  # mnist_ddp on the GPU: precisions, CUDA graph, DDP (nccl, gloo), DataParallel; classify
  local common=(--device cuda --data "$DATA/mnist" --epochs 3 --seed 1)
  mnist_run 4a fp32 "$MNIST" "${common[@]}"
  mnist_run 4b amp-bf16 "$MNIST" "${common[@]}" --amp bf16
  mnist_run 4c amp-fp16 "$MNIST" "${common[@]}" --amp fp16
  mnist_run 4d cuda-graph "$MNIST" "${common[@]}" --cuda-graph
  mnist_run 4e ddp-nccl-1rank "$RUN" -n 1 --backend nccl "$MNIST" "${common[@]}" --backend nccl
  mnist_run 4f ddp-gloo-2ranks "$MNIST" "${common[@]}" -n 2 --backend gloo
  mnist_run 4g dp-1gpu "$MNIST" "${common[@]}" --mode dp
  local t lim rc key
  t=$(now)
  lim=$(step_limit 45)
  ((lim)) || { add_row 4h "minidl-compare" SKIPPED 0 "no time left" && return; }
  run_logged 4-compare "$lim" "$COMPARE" --model mnist-cnn --device cuda --modes single,dp,ddp \
    --devices 1 --steps 20 --warmup 3 --rounds 1 --data "$DATA/mnist"
  rc=$?
  key=$(grep -oE 'Loss check: [^(]*\(tolerance [^)]*\)|do not compute the same thing' "$LOG/4-compare.log" | head -1)
  add_row 4h "minidl-compare single/dp/ddp on cuda" "$(rc_word $rc)" $(($(now) - t)) \
    "$(detail $rc 4-compare "$key")"
  # classify: torchvision's ResNet-18 on the digits written as PNG class folders, one bf16 epoch
  # (the CPU's fp32 run: 93.45% after 1 epoch, 97.30% after 2; bar 90%).
  t=$(now)
  lim=$(step_limit 60)
  ((lim)) || { add_row 4i "classify resnet18" SKIPPED 0 "no time left" && return; }
  "$PREPARE" --idx "$DATA/mnist" --image-folder "$WORK/digits" >"$LOG/4-prepare.log" 2>&1
  run_logged 4-classify "$lim" "$CLASSIFY" --device cuda --data "$WORK/digits" --model resnet18 \
    --epochs 1 --amp bf16 --workers 4
  rc=$?
  local acc res
  acc=$(grep -o 'test accuracy [0-9.]*' "$LOG/4-classify.log" | tail -1 | awk '{print $3}')
  res=$(rc_word $rc)
  [[ $res == PASS ]] && ! awk -v a="${acc:-0}" 'BEGIN { exit !(a >= 90.0) }' && res="FAIL (accuracy)"
  key="test accuracy ${acc:-n/a}% (bar 90; CPU fp32 93.45)$(grep -o ', [0-9]* train images/s' "$LOG/4-classify.log" | tail -1)"
  add_row 4i "classify resnet18 bf16 on an ImageFolder" "$res" $(($(now) - t)) \
    "$(detail $rc 4-classify "$key")"
}

# gpt2_row LOG: "batch B, S ms/step, T tokens/s, MFU M%" from a gpt run's summary line.
gpt2_row() {
  awk '/^gpt: val loss/ {
    for (i = 1; i <= NF; ++i) {
      if ($(i + 1) == "tokens/s,") tok = $i
      if ($i == "step") ms = $(i + 1)
      if ($i == "MFU") mfu = $(i + 1)
    } }
    /^gpt: synthetic/ { match($0, /batch [0-9]+ x [0-9]+/); batch = substr($0, RSTART + 6, RLENGTH - 6) }
    END { if (tok != "") printf "gpt2-124m batch %s: %s ms/step, %s tokens/s, MFU %s", batch, ms, tok, mfu }' "$1"
}

# torch_row LOG: the same from bench/gpu/torch_gpt2_step.py's JSON line.
torch_row() {
  python3 - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for r in rows:
    print(f"{r['impl']} {r['mode']} gpt2-124m batch {r['batch']} x {r['seq_len']}: "
          f"{r['ms_per_step']} ms/step, {r['tokens_per_s']} tokens/s, MFU {100 * r['mfu']:.1f}%, "
          f"peak {r['peak_mib']} MiB", end="")
PY
}

step_5() {  # GPT-2 124M (bf16, synthetic tokens) against PyTorch's twin, its profile; small gpt
  local t lim rc
  t=$(now)
  lim=$(step_limit 60)
  ((lim)) || { add_row 5b "gpt2-124m bf16" SKIPPED 0 "no time left" && return; }
  run_logged 5-gpt2-124m-bf16 "$lim" "$GPT" --device cuda --data synthetic --preset gpt2-124m \
    --amp bf16 --batch-size 12 --max-iters 30 --warmup-iters 5 --eval-interval 1000 \
    --eval-iters 1 --log-interval 10
  rc=$?
  add_row 5b "gpt --preset gpt2-124m --data synthetic --amp bf16, 30 iterations" "$(rc_word $rc)" \
    $(($(now) - t)) "$(detail $rc 5-gpt2-124m-bf16 "$(gpt2_row "$LOG/5-gpt2-124m-bf16.log") (goal MFU >= 40%)")"
  # The same step captured whole in one CUDA graph after 3 eager steps (gpt --cuda-graph).
  t=$(now)
  lim=$(step_limit 50)
  if ((lim)); then
    run_logged 5-gpt2-124m-graph "$lim" "$GPT" --device cuda --data synthetic --preset gpt2-124m \
      --amp bf16 --batch-size 12 --max-iters 30 --warmup-iters 5 --eval-interval 1000 \
      --eval-iters 1 --log-interval 10 --cuda-graph
    rc=$?
    add_row 5h "the same with --cuda-graph (the whole step captured and replayed), 30 iterations" \
      "$(rc_word $rc)" $(($(now) - t)) \
      "$(detail $rc 5-gpt2-124m-graph "$(gpt2_row "$LOG/5-gpt2-124m-graph.log")")"
  else
    add_row 5h "gpt2-124m --cuda-graph" SKIPPED 0 "no time left"
  fi
  # Every fused path against its predecessor, one at a time, and all of them off (`all`, the
  # former row 5f), in ONE process (bench/bench_gpt_variants.cpp: MINIDL_UNFUSED per variant,
  # one JSON line each as it ends).
  t=$(now)
  lim=$(step_limit 75)
  if ((lim)); then
    run_logged 5-gpt2-124m-variants "$lim" "$P/build/bench/bench_gpt_variants" --device cuda \
      --amp bf16 --batch-size 12 --seq-len 1024 --steps 8 --warmup 2 --rounds 1 --peak-tflops 989
    rc=$?
    add_row 5g "gpt2-124m bf16 under each MINIDL_UNFUSED variant (bench_gpt_variants), 8 steps each" \
      "$(rc_word $rc)" $(($(now) - t)) "$(detail $rc 5-gpt2-124m-variants "$(sed -n \
        's/.*"unfused":"\([^"]*\)","ms_per_step":\([0-9.]*\),.*"mfu":\([-0-9.]*\),"dispatches":\([0-9-]*\).*/\1=\2ms(mfu \3, \4 disp)/p' \
        "$LOG/5-gpt2-124m-variants.log" | tr '\n' ' ')")"
  else
    add_row 5g "gpt2-124m variants" SKIPPED 0 "no time left"
  fi
  # PyTorch 2.x on the same GPU, the same model and recipe: eager, then torch.compile.
  local mode
  for mode in eager compile; do
    t=$(now)
    lim=$(step_limit 75)
    ((lim)) || { add_row "5e-$mode" "torch gpt2-124m $mode" SKIPPED 0 "no time left" && continue; }
    local flags=(--batch-size 12 --steps 20 --warmup 5)
    [[ $mode == compile ]] && flags+=(--compile)
    run_logged "5-torch-gpt2-$mode" "$lim" python3 "$ROOT/bench/gpu/torch_gpt2_step.py" "${flags[@]}"
    rc=$?
    add_row "5e-$mode" "PyTorch twin (bench/gpu/torch_gpt2_step.py), $mode" "$(rc_word $rc)" \
      $(($(now) - t)) "$(detail $rc "5-torch-gpt2-$mode" "$(torch_row "$LOG/5-torch-gpt2-$mode.log")")"
  done
  # Where the gpt2-124m step goes: the op profiler (MINIDL_PROFILE=1) times every op with CUDA
  # events; its table (ops by device time, host time beside) and the dispatch count end the log.
  t=$(now)
  lim=$(step_limit 40)
  if ((lim)); then
    MINIDL_PROFILE=1 run_logged 5-gpt2-124m-profile "$lim" "$GPT" --device cuda --data synthetic \
      --preset gpt2-124m --amp bf16 --batch-size 12 --max-iters 8 --eval-interval 1000 \
      --eval-iters 1
    rc=$?
    add_row 5d "gpt2-124m bf16, 8 iterations under the op profiler" "$(rc_word $rc)" \
      $(($(now) - t)) "$(detail $rc 5-gpt2-124m-profile "$(grep -o 'kernel dispatches per training step: [0-9]*' \
        "$LOG/5-gpt2-124m-profile.log"); $(grep -o 'host reads per training step: [0-9]*' \
        "$LOG/5-gpt2-124m-profile.log"); top ops by device ms: $(awk '
        /^op profile/ { on = 1; next } on && $1 != "op" && $1 != "total" && NF >= 6 && n < 4 {
          printf "%s%s %s ms", (n ? ", " : ""), $1, $5; n++ }
        /^total/ { printf "; total device %s ms, host %s ms", $4, $3 }' \
        "$LOG/5-gpt2-124m-profile.log")")"
  else
    add_row 5d "gpt2-124m profile" SKIPPED 0 "no time left"
  fi
  t=$(now)
  lim=$(step_limit 45)
  ((lim)) || { add_row 5a "gpt" SKIPPED 0 "no time left" && return; }
  run_logged 5-gpt "$lim" "$GPT" --device cuda --data "$DATA/moby-dick/data.txt" --max-iters 300 \
    --eval-interval 100 --eval-iters 10
  rc=$?
  # The same command on the CPU: val loss 2.4063 (Debian 12 host, 2026-11-27). Bar: 2.50.
  local val res
  val=$(grep -o 'gpt: val loss [0-9.]*' "$LOG/5-gpt.log" | awk '{print $4}')
  res=$(rc_word $rc)
  [[ $res == PASS ]] && ! awk -v v="${val:-9}" 'BEGIN { exit !(v <= 2.50) }' && res="FAIL (val loss)"
  add_row 5a "gpt --device cuda, 300 iterations" "$res" $(($(now) - t)) "$(detail $rc 5-gpt \
    "$(grep -o 'val loss [0-9.]*.*tokens/s[^(]*' "$LOG/5-gpt.log" | tail -1)(CPU: val loss 2.406; bar 2.50)")"
  t=$(now)
  lim=$(step_limit 30)
  ((lim)) || { add_row 5c "fused vs composite attention" SKIPPED 0 "no time left" && return; }
  run_logged 5-attention "$lim" "$TESTS" -ts=cuda_attention
  rc=$?
  add_row 5c "fused CUDA attention vs composite (cuda_attention)" "$(rc_word $rc)" $(($(now) - t)) \
    "$(detail $rc 5-attention "$(doctest_counts "$LOG/5-attention.log")")"
}

step_6() {  # PyTorch's torchrun launching mnist_ddp unchanged, 2 ranks sharing the GPU (gloo)
  local t lim rc args=(--device cuda --data "$DATA/mnist" --epochs 1 --backend gloo --dist-timeout 20)
  t=$(now)
  lim=$(step_limit 45)
  ((lim)) || { add_row 6a "torchrun" SKIPPED 0 "no time left" && return; }
  run_logged 6-torchrun "$lim" python3 -m torch.distributed.run --standalone --nproc-per-node 2 \
    --no-python "$MNIST" "${args[@]}"
  rc=$?
  add_row 6a "torchrun --nproc-per-node 2 mnist_ddp (agent store: fails until issue 30)" \
    "$(rc_word $rc)" $(($(now) - t)) "$(detail $rc 6-torchrun "$(grep -o 'test accuracy [0-9.]*' "$LOG/6-torchrun.log" | tail -1)")"
  t=$(now)
  lim=$(step_limit 45)
  ((lim)) || { add_row 6b "torchrun, shared store off" SKIPPED 0 "no time left" && return; }
  TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 run_logged 6-torchrun-own-store "$lim" python3 -m \
    torch.distributed.run --standalone --nproc-per-node 2 --no-python "$MNIST" "${args[@]}"
  rc=$?
  add_row 6b "the same with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" "$(rc_word $rc)" $(($(now) - t)) \
    "$(detail $rc 6-torchrun-own-store "$(grep -o 'test accuracy [0-9.]*' "$LOG/6-torchrun-own-store.log" | tail -1)")"
}

step_7() {  # safetensors both ways with safetensors.torch
  local t lim rc
  t=$(now)
  lim=$(step_limit 60)
  ((lim)) || { add_row 7 "safetensors" SKIPPED 0 "no time left" && return; }
  run_logged 7-safetensors "$lim" python3 "$ROOT/tools/gpu/safetensors_torch.py" "$LOGITS" \
    --device cuda --workdir "$WORK/safetensors"
  rc=$?
  add_row 7 "safetensors minidl <-> torch (MNIST CNN, GPT), logits" "$(rc_word $rc)" \
    $(($(now) - t)) "$(detail $rc 7-safetensors "$(grep '^safetensors_torch:' "$LOG/7-safetensors.log") (bar 1e-4)")"
}

step_8() {  # the GPU bench table against PyTorch on the same GPU
  local t lim rc mode=()
  t=$(now)
  lim=$(step_limit 150)
  ((lim > 30)) || { add_row 8 "bench/gpu/run_all.sh" SKIPPED 0 "no time left" && return; }
  ((lim < 120)) && mode=(--quick)
  BENCH_BIN=$P/build/bench OUT=$LOG/8-bench run_logged 8-bench "$lim" bash "$ROOT/bench/gpu/run_all.sh" "${mode[@]}"
  rc=$?
  [[ -f $LOG/8-bench/gpu-bench.md ]] && cp "$LOG/8-bench/gpu-bench.md" "$OUT_DIR/gpu-bench.md"
  local met unmet res
  met=$(grep -c '| yes |' "$LOG/8-bench/gpu-bench.md" 2>/dev/null)
  unmet=$(grep -c '| no |' "$LOG/8-bench/gpu-bench.md" 2>/dev/null)
  res=$(rc_word $rc)
  # run_all.sh goes on past a failed bench: a table without a single compared row is a failure.
  [[ $res == PASS ]] && ((${met:-0} + ${unmet:-0} == 0)) && res="FAIL (no numbers)" && rc=1
  add_row 8 "bench/gpu/run_all.sh ${mode[*]}" "$res" $(($(now) - t)) \
    "$(detail $rc 8-bench "targets met: ${met:-0}, not met: ${unmet:-0} (table in gpu-bench.md)")"
}

mkdir -p "$LOG/8-bench"
cd "$WORK" || exit 1  # the runs' own files (torchrun's, --log-dir's) land here
for s in ${STEPS//,/ }; do
  if declare -F "step_$s" >/dev/null; then "step_$s"; else echo "verify.sh: no step $s" >&2; fi
done

write_summary >"$OUT_DIR/summary.md"
tar -C "$WORK" -cJf "$OUT_DIR/logs.tar.xz" logs
echo
cat "$OUT_DIR/summary.md"
echo
echo "verify.sh: $(($(date +%s) - START)) s; wrote $OUT_DIR/summary.md, $OUT_DIR/logs.tar.xz${OUT:+ and gpu-bench.md when step 8 ran}"
