#!/usr/bin/env bash
# The GPT-2 124M training step on the CPU, minidl (bench_gpt_variants, every fused path) against
# its PyTorch twin (bench/gpu/torch_gpt2_step.py --device cpu): same model, bf16 autocast, fused
# AdamW, clipping and seeded uniform tokens (bf16 autocast, or f32 with --amp off). PyTorch's faster OPENBLAS_NUM_THREADS (1 or 2) is
# found first; then the two run in turn, pair by pair. Prints each run's ms/step, the medians
# and the median ratio (PyTorch / minidl: above 1, minidl is faster).
# Usage: bench/gpt2_step_vs_torch.sh [--batch-size 4] [--seq-len 256] [--steps 4] [--warmup 2]
#        [--runs 3] [--amp bf16|off]
# Env: PYTHON (default ../shared/tools/torch2, PyTorch 2.x, where present; else /usr/bin/python3),
#      BUILD_DIR (default build), THREADS (default 2).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD_DIR=${BUILD_DIR:-build}
THREADS=${THREADS:-2}
if [[ -z ${PYTHON:-} ]]; then
  PYTHON=/usr/bin/python3
  [[ -x $ROOT/../shared/tools/torch2 && -d /opt/trixie/usr ]] && PYTHON=$ROOT/../shared/tools/torch2
fi
batch=4 seq=256 steps=4 warmup=2 runs=3 amp=bf16
while [[ $# -gt 0 ]]; do
  case $1 in
    --batch-size) batch=$2; shift 2 ;;
    --seq-len) seq=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --amp) amp=$2; shift 2 ;;
    *) echo "gpt2_step_vs_torch: unknown argument $1" >&2; exit 2 ;;
  esac
done
minidl=("$BUILD_DIR/bench/bench_gpt_variants" --device cpu --batch-size "$batch" --seq-len "$seq"
  --steps "$steps" --warmup "$warmup" --rounds 1 --variants ";" --threads "$THREADS" --amp "$amp")
torch=("$PYTHON" bench/gpu/torch_gpt2_step.py --device cpu --threads "$THREADS" --batch-size "$batch"
  --block-size "$seq" --steps "$steps" --warmup "$warmup" --amp "$amp")
# ms/step from a JSON line of either program ("ms_per_step": N).
ms_of() { sed -n 's/.*"ms_per_step": *\([0-9.]*\).*/\1/p' | tail -1; }
minidl_ms() { "${minidl[@]}" 2>&1 | ms_of; }
torch_ms() { env OPENBLAS_NUM_THREADS="$1" "${torch[@]}" 2>&1 | ms_of; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "gpt2-124m step (amp $amp), batch $batch x $seq tokens, $THREADS threads, $steps steps after $warmup"
echo "host: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; PyTorch: $("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
best_ob=1 best=""
for ob in 1 2; do
  t=$(torch_ms "$ob")
  [[ -n $t ]] || { echo "gpt2_step_vs_torch: the PyTorch twin printed no ms_per_step" >&2; exit 1; }
  echo "PyTorch, OPENBLAS_NUM_THREADS=$ob (sweep): $t ms/step"
  if [[ -z $best ]] || awk -v a="$t" -v b="$best" 'BEGIN { exit !(a < b) }'; then best=$t best_ob=$ob; fi
done
m_all="" t_all="" r_all=""
for ((i = 1; i <= runs; ++i)); do
  m=$(minidl_ms) t=$(torch_ms "$best_ob")
  [[ -n $m && -n $t ]] || { echo "gpt2_step_vs_torch: run $i printed no ms_per_step" >&2; exit 1; }
  r=$(awk -v a="$t" -v b="$m" 'BEGIN { printf "%.3f", a / b }')
  echo "run $i: minidl $m ms/step, PyTorch $t ms/step, ratio $r"
  m_all+="$m"$'\n' t_all+="$t"$'\n' r_all+="$r"$'\n'
done
echo "median: minidl $(printf '%s' "$m_all" | median) ms/step, PyTorch (OPENBLAS_NUM_THREADS=$best_ob)" \
  "$(printf '%s' "$t_all" | median) ms/step, PyTorch/minidl $(printf '%s' "$r_all" | median)"
