#!/usr/bin/env bash
# The gpt recipe (4 layers x 128, 4 heads, block 64, batch 12, AdamW, --iters iterations) on the
# Moby-Dick bytes, minidl's `gpt` app against bench/torch_gpt.py (PyTorch 1.13, same bytes, split,
# model, optimizer and schedule), fp32 and bf16 autocast, one after the other on the same
# machine; PyTorch in its best setting here (fp32: OMP_WAIT_POLICY=PASSIVE
# OPENBLAS_NUM_THREADS=N; bf16: default waiting). Writes bench/results/cpu-gpt-<date>.md.
# Usage: bench/gpt_train.sh [--threads N] [--iters N]   (env BUILD_DIR, default build-cpu)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-cpu}"
THREADS=2 ITERS=2000
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) THREADS="$2"; shift 2 ;;
    --iters) ITERS="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
bash "$ROOT/tools/fetch-moby-dick.sh" "$ROOT/data/moby-dick" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)" --target gpt >/dev/null
DATA="$ROOT/data/moby-dick/data.txt"
LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
md32=$("$BUILD_DIR/apps/gpt" --data "$DATA" --threads "$THREADS" --max-iters "$ITERS" --quiet | tail -1)
pt32=$(OMP_WAIT_POLICY=PASSIVE OPENBLAS_NUM_THREADS=$THREADS /usr/bin/python3 "$ROOT/bench/torch_gpt.py" \
  --data "$DATA" --threads "$THREADS" --max-iters "$ITERS" | tail -1)
md16=$("$BUILD_DIR/apps/gpt" --data "$DATA" --threads "$THREADS" --max-iters "$ITERS" --quiet --amp bf16 | tail -1)
pt16=$(/usr/bin/python3 "$ROOT/bench/torch_gpt.py" --data "$DATA" --threads "$THREADS" \
  --max-iters "$ITERS" --amp bf16 | tail -1)
LOAD_AFTER="$(cut -d' ' -f1-3 /proc/loadavg)"
field() { sed -n "s/.*$2 \([0-9.]*\).*/\1/p" <<<"$1"; }  # the number after a label
ms() { sed -n 's/.*step \([0-9.]*\) ms.*/\1/p' <<<"$1"; }
r() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
OUT="$ROOT/bench/results/cpu-gpt-$(date +%Y-%m-%d).md"
mkdir -p "$ROOT/bench/results"
{
  echo "# gpt recipe, minidl vs PyTorch 1.13 (CPU), $(date '+%Y-%m-%d %H:%M %Z')"
  echo
  echo "- CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), nproc $(nproc); load average before: $LOAD_BEFORE; after: $LOAD_AFTER"
  echo "- git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo none)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)'); torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)')"
  echo "- command: \`bench/gpt_train.sh --threads $THREADS --iters $ITERS\`; 4 layers x 128, 4 heads, block 64, batch 12; step time = training steps only"
  echo
  echo "| variant | minidl val loss | PyTorch val loss | minidl ms/step | PyTorch ms/step | minidl/PyTorch |"
  echo "|---|---:|---:|---:|---:|---:|"
  echo "| fp32 | $(field "$md32" 'val loss') | $(field "$pt32" 'val loss') | $(ms "$md32") | $(ms "$pt32") | $(r "$(ms "$md32")" "$(ms "$pt32")") |"
  echo "| bf16 autocast | $(field "$md16" 'val loss') | $(field "$pt16" 'val loss') | $(ms "$md16") | $(ms "$pt16") | $(r "$(ms "$md16")" "$(ms "$pt16")") |"
  echo
  echo "minidl bf16 vs PyTorch fp32 step: $(r "$(ms "$md16")" "$(ms "$pt32")"); minidl bf16 vs own fp32: $(r "$(ms "$md16")" "$(ms "$md32")")"
  echo
  echo "Raw summary lines:"
  echo
  printf '    %s\n' "$md32" "$pt32" "$md16" "$pt16"
} | tee "$OUT"
