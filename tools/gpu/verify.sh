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

# ------------------------------------------------------------------ the steps (definitions)
# shellcheck source=tools/gpu/verify_steps.sh
source "$ROOT/tools/gpu/verify_steps.sh"

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
