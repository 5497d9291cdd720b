#!/usr/bin/env bash
# Times the MNIST-CNN training step in fp32 and with AMP, minidl (bench_amp: fp32, bf16 O1,
# fp16 O1 in one process) and PyTorch 1.13 (fp32 with OMP_WAIT_POLICY=PASSIVE
# OPENBLAS_NUM_THREADS=N, its best fp32 setting here; bf16 autocast with default active waiting,
# its best bf16 setting), alternating blocks; writes bench/results/cpu-amp-<date>.md.
# Usage: bench/amp_step.sh [--threads N] [--blocks B] [--rounds R] [--steps S]  (env BUILD_DIR, JOBS)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-bench2}"
JOBS="${JOBS:-$(nproc)}"
THREADS=2 BLOCKS=2 ROUNDS=5 STEPS=20
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
cmake --build "$BUILD_DIR" -j"$JOBS" --target bench_amp > /dev/null
FLAGS=(--threads "$THREADS" --rounds "$ROUNDS" --steps "$STEPS")
LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
MD=(); PT32=(); PT16=()
for ((b = 0; b < BLOCKS; ++b)); do
  MD+=("$("$BUILD_DIR/bench/bench_amp" "${FLAGS[@]}" | tail -3)")
  PT32+=("$(OMP_WAIT_POLICY=PASSIVE OPENBLAS_NUM_THREADS=$THREADS /usr/bin/python3 "$ROOT/bench/bench_amp_torch.py" --dtype fp32 "${FLAGS[@]}" | tail -1)")
  PT16+=("$(/usr/bin/python3 "$ROOT/bench/bench_amp_torch.py" --dtype bf16 "${FLAGS[@]}" | tail -1)")
done
LOAD_AFTER="$(cut -d' ' -f1-3 /proc/loadavg)"
ms() { awk -F'|' '{gsub(/ /, "", $5); print $5}'; }  # ms/step column of a row
med() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
m32=$(printf '%s\n' "${MD[@]}" | grep '| fp32 |' | ms | med)
m16=$(printf '%s\n' "${MD[@]}" | grep 'bf16 autocast' | ms | med)
mf16=$(printf '%s\n' "${MD[@]}" | grep 'fp16 autocast' | ms | med)
p32=$(printf '%s\n' "${PT32[@]}" | ms | med)
p16=$(printf '%s\n' "${PT16[@]}" | ms | med)
r() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
mkdir -p "$ROOT/bench/results"
OUT="$ROOT/bench/results/cpu-amp-$(date +%Y-%m-%d).md"
{
  echo "# MNIST-CNN training step with AMP, minidl vs PyTorch (CPU), $(date '+%Y-%m-%d %H:%M %Z')"
  echo
  echo "- CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), nproc $(nproc); load average before: $LOAD_BEFORE; after: $LOAD_AFTER"
  echo "- git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo none)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)'); torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)')"
  echo "- command: \`bench/amp_step.sh --threads $THREADS --blocks $BLOCKS --rounds $ROUNDS --steps $STEPS\`; batch 64, AdamW; medians over blocks"
  echo
  echo "| variant | minidl ms/step | PyTorch ms/step | minidl/PyTorch | minidl vs own fp32 |"
  echo "|---|---|---|---|---|"
  echo "| fp32 | $m32 | $p32 | $(r "$m32" "$p32") | 1.00 |"
  echo "| bf16 autocast (O1) | $m16 | $p16 | $(r "$m16" "$p16") | $(r "$m16" "$m32") |"
  echo "| fp16 autocast + GradScaler (O1) | $mf16 | — (torch 1.13 CPU autocast has no fp16) | — | $(r "$mf16" "$m32") |"
  echo
  echo "Per-block rows:"
  echo
  echo "| impl | variant | threads | ms/step | vs own fp32 |"
  echo "|---|---|---|---|---|"
  for ((b = 0; b < BLOCKS; ++b)); do echo "${MD[$b]}"; echo "${PT32[$b]}"; echo "${PT16[$b]}"; done
} | tee "$OUT"
echo "wrote $OUT" >&2
