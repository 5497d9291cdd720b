#!/usr/bin/env bash
# minidl's ImageFolder + DataLoader against torchvision's on the same JPEG files (a synthetic
# ImageFolder from bench/make_image_tree.py: 1,000 photo-like 500x375 JPEGs), same recipe
# (RandomResizedCrop 224 + flip + ToTensor + Normalize), batch 64, same worker count; runs the
# two in turn RUNS times and prints each side's images/s per run and the median ratio.
# Appends the table to bench/results/image-loader-<date>.md with the host and the commands.
# Usage: bench/image_loader.sh [WORKERS=2] [RUNS=3]
# Env: BUILD_DIR (build), TREE (/tmp/minidl-image-tree; made once), PYTHON (/usr/bin/python3:
#      Debian 12's torchvision 0.14 + PIL 9.4, the anchor the issue names).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD_DIR=${BUILD_DIR:-build}
TREE=${TREE:-/tmp/minidl-image-tree}
PYTHON=${PYTHON:-/usr/bin/python3}
WORKERS=${1:-2}
RUNS=${2:-3}
[[ -d $TREE/train ]] || "$PYTHON" bench/make_image_tree.py "$TREE" 100 10
cmake --build "$BUILD_DIR" --target bench_image_loader -j "$(nproc)" >/dev/null
mine=() theirs=()
for r in $(seq "$RUNS"); do
  m=$("$BUILD_DIR/bench/bench_image_loader" "$TREE/train" "$WORKERS" 64 12 224 3)
  t=$("$PYTHON" bench/torch_image_loader.py "$TREE/train" "$WORKERS" 64 12 224 3)
  echo "$m"; echo "$t"
  mine+=("$(sed -E 's/.*: ([0-9.]+) images\/s.*/\1/' <<<"$m")")
  theirs+=("$(sed -E 's/.*: ([0-9.]+) images\/s.*/\1/' <<<"$t")")
done
cpu=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)
isa=$(grep -o -w -E 'avx512_bf16|avx512f|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')
summary=$(python3 - "${mine[*]}" "${theirs[*]}" <<'PY'
import statistics, sys
m = [float(v) for v in sys.argv[1].split()]
t = [float(v) for v in sys.argv[2].split()]
r = sorted(a / b for a, b in zip(m, t))
print(f"| {statistics.median(m):.0f} ({min(m):.0f}-{max(m):.0f}) | {statistics.median(t):.0f} "
      f"({min(t):.0f}-{max(t):.0f}) | {statistics.median(r):.2f}x ({r[0]:.2f}-{r[-1]:.2f}) |")
PY
)
out=bench/results/image-loader-$(date +%F).md
{
  echo ""
  echo "## $(date -u '+%F %H:%M UTC'), $cpu ($(nproc) cores; $isa), $WORKERS workers, $RUNS runs"
  echo ""
  echo "Commands: \`$BUILD_DIR/bench/bench_image_loader $TREE/train $WORKERS 64 12 224 3\` and"
  echo "\`$PYTHON bench/torch_image_loader.py $TREE/train $WORKERS 64 12 224 3\` ($(git rev-parse --short HEAD))."
  echo ""
  echo "| minidl images/s, median (min-max) | torchvision 0.14 images/s | minidl / torchvision |"
  echo "|---:|---:|---:|"
  echo "$summary"
} | tee -a "$out"
