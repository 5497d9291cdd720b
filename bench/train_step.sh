#!/usr/bin/env bash
# Builds bench_train (Release) and times one MNIST-CNN training step in minidl and PyTorch,
# alternating blocks (minidl, torch, minidl, torch, ...), and writes bench/results/cpu-train-<date>.md.
# Usage: bench/train_step.sh [--threads N] [--blocks B] [--rounds R] [--steps S]  (env BUILD_DIR default build-bench2; JOBS)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-bench2}"
JOBS="${JOBS:-$(nproc)}"
THREADS=2
BLOCKS=2
ROUNDS=5
STEPS=20
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) THREADS="$2"; shift 2 ;;
    --blocks) BLOCKS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DMINIDL_CUDA=OFF \
  -DMINIDL_BUILD_BENCH=ON -DMINIDL_BUILD_TESTS=OFF -DMINIDL_BUILD_APPS=OFF > /dev/null
cmake --build "$BUILD_DIR" -j"$JOBS" --target bench_train > /dev/null

LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
MD=(); PT=()
for ((b = 0; b < BLOCKS; ++b)); do
  MD+=("$("$BUILD_DIR/bench/bench_train" --threads "$THREADS" --rounds "$ROUNDS" --steps "$STEPS" | tail -1)")
  PT+=("$(/usr/bin/python3 "$ROOT/bench/bench_train_torch.py" --threads "$THREADS" --rounds "$ROUNDS" --steps "$STEPS" | tail -1)")
done
BREAKDOWN="$("$BUILD_DIR/bench/bench_train" --threads "$THREADS" --rounds 1 --breakdown | sed -n '4,$p')"
LOAD_AFTER="$(cut -d' ' -f1-3 /proc/loadavg)"

# column k (1-based, after the leading '|') of a markdown row
col() { echo "$1" | awk -F'|' -v k="$2" '{gsub(/ /, "", $(k+1)); print $(k+1)}'; }
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
md_ms=(); pt_ms=(); md_add=(); md_addg=(); md_relu=(); pt_add=(); pt_addg=(); pt_relu=()
for r in "${MD[@]}"; do md_ms+=("$(col "$r" 3)"); md_add+=("$(col "$r" 4)"); md_addg+=("$(col "$r" 5)"); md_relu+=("$(col "$r" 6)"); done
for r in "${PT[@]}"; do pt_ms+=("$(col "$r" 3)"); pt_add+=("$(col "$r" 4)"); pt_addg+=("$(col "$r" 5)"); pt_relu+=("$(col "$r" 6)"); done
M="$(med "${md_ms[@]}")"; P="$(med "${pt_ms[@]}")"
RATIO="$(awk -v m="$M" -v p="$P" 'BEGIN {printf "%.2f", m / p}')"

mkdir -p "$ROOT/bench/results"
OUT="$ROOT/bench/results/cpu-train-$(date +%Y-%m-%d).md"
{
  echo "# MNIST-CNN training step, minidl vs PyTorch (CPU), $(date '+%Y-%m-%d %H:%M %Z')"
  echo
  echo "- CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), nproc $(nproc)"
  echo "- load average before: $LOAD_BEFORE; after: $LOAD_AFTER"
  echo "- compiler: $(${CXX:-c++} --version | head -1), minidl Release -march=x86-64-v3; torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)')"
  echo "- git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo none)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "- command: \`bench/train_step.sh --threads $THREADS --blocks $BLOCKS --rounds $ROUNDS --steps $STEPS\`: $BLOCKS alternating blocks of"
  echo "  \`bench_train\` and \`bench_train_torch.py\` with the same flags (each: 3 warm-up steps,"
  echo "  $ROUNDS rounds × $STEPS steps, median of round medians); the table shows the median over blocks."
  echo
  echo "| threads | minidl ms/step | PyTorch ms/step | ratio minidl/PyTorch | minidl add ns (no grad / requires_grad) | minidl relu ns | torch.add ns from Python (no grad / requires_grad) | torch.relu ns |"
  echo "|---|---|---|---|---|---|---|---|"
  echo "| $THREADS | $M | $P | $RATIO | $(med "${md_add[@]}") / $(med "${md_addg[@]}") | $(med "${md_relu[@]}") | $(med "${pt_add[@]}") / $(med "${pt_addg[@]}") | $(med "${pt_relu[@]}") |"
  echo
  echo "Per-block rows:"
  echo
  echo "| impl | threads | ms/step | add ns (no grad) | add ns (requires_grad) | relu ns |"
  echo "|---|---|---|---|---|---|"
  for ((b = 0; b < BLOCKS; ++b)); do echo "${MD[$b]}"; echo "${PT[$b]}"; done
  echo
  echo "minidl breakdown (one extra run, 1 round):"
  echo "$BREAKDOWN"
} | tee "$OUT"
echo "wrote $OUT" >&2
