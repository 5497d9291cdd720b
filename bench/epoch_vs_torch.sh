#!/usr/bin/env bash
# One MNIST epoch as a whole process, minidl's mnist_ddp against PyTorch (bench/torch_mnist_epoch.py)
# on the same data, model and batch: PyTorch's fastest thread setting is found first (a sweep of
# OPENBLAS_NUM_THREADS and OMP_WAIT_POLICY), then the two run in turn, pair by pair; wall and peak
# RSS medians, the pairwise ratio median (min-max). Appends the table to
# bench/results/epoch-<date>.md with the host and commands.
# Usage: bench/epoch_vs_torch.sh [--isa native|avx2|avx512] [--amp off|bf16] [--ddp] [--runs N]
#   --isa caps both frameworks to a CPU class (MINIDL_CPU_ISA, ONEDNN_MAX_CPU_ISA,
#   ATEN_CPU_CAPABILITY), so an AVX-512 host also measures the AVX2 class.
#   --ddp: 2 processes x 1 thread (mnist_ddp -n 2; torchrun --nproc-per-node 2), else 1 x THREADS.
# Env: PYTHON (default ../shared/tools/torch2, PyTorch 2.x, where present; else /usr/bin/python3),
#      BUILD_DIR (default build), THREADS (default 2), DATA (default data/mnist).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD_DIR=${BUILD_DIR:-build}
THREADS=${THREADS:-2}
DATA=${DATA:-data/mnist}
if [[ -z ${PYTHON:-} ]]; then
  PYTHON=/usr/bin/python3
  [[ -x $ROOT/../shared/tools/torch2 && -d /opt/trixie/usr ]] && PYTHON=$ROOT/../shared/tools/torch2
fi
isa=native amp=off ddp=0 runs=5
while [[ $# -gt 0 ]]; do
  case $1 in
    --isa) isa=$2; shift 2 ;;
    --amp) amp=$2; shift 2 ;;
    --ddp) ddp=1; shift ;;
    --runs) runs=$2; shift 2 ;;
    *) echo "epoch_vs_torch: unknown argument $1" >&2; exit 2 ;;
  esac
done
case $isa in
  native) ;;
  avx2) export MINIDL_CPU_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 ;;
  avx512) export MINIDL_CPU_ISA=avx512 ONEDNN_MAX_CPU_ISA=AVX512_CORE ATEN_CPU_CAPABILITY=avx512 ;;
  *) echo "epoch_vs_torch: --isa must be native, avx2 or avx512" >&2; exit 2 ;;
esac
amp_flag=()
[[ $amp == bf16 ]] && amp_flag=(--amp bf16)
if ((ddp)); then
  minidl=("$BUILD_DIR/apps/mnist_ddp" -n 2 --threads 1 --data "$DATA" --quiet --epochs 1 "${amp_flag[@]}")
  # ../shared/tools' torch 2.6 is built without libuv: its torchrun2 wrapper hosts the agent's
  # store without it (plain `-m torch.distributed.run` fails there at the store)
  launcher=("$PYTHON" -m torch.distributed.run)
  [[ $PYTHON == */torch2 && -x ${PYTHON%/*}/torchrun2 ]] && launcher=("${PYTHON%/*}/torchrun2")
  torch=("${launcher[@]}" --standalone --nproc-per-node 2
    bench/torch_mnist_epoch.py --data "$DATA" --threads 1 "${amp_flag[@]}")
  shape="2 processes x 1 thread (DDP, gloo)"
else
  minidl=("$BUILD_DIR/apps/mnist_ddp" --threads "$THREADS" --data "$DATA" --quiet --epochs 1 "${amp_flag[@]}")
  torch=("$PYTHON" bench/torch_mnist_epoch.py --data "$DATA" --threads "$THREADS" "${amp_flag[@]}")
  shape="1 process x $THREADS threads"
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# run ENV... -- CMD...: prints "wall_s peak_kib" of one whole-process run; fails on a failed run.
run() {
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  local t0 t1
  t0=$(date +%s.%N)
  if ! env "${envs[@]}" /usr/bin/time -f '%M' -o "$log.rss" "$@" > "$log" 2>&1; then
    echo "epoch_vs_torch: failed: $*" >&2
    tail -5 "$log" >&2
    exit 1
  fi
  t1=$(date +%s.%N)
  echo "$(echo "$t1 - $t0" | bc) $(tail -1 "$log.rss")"
}
median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

echo "[epoch] PyTorch thread-setting sweep ($($PYTHON -c 'import torch; print(torch.__version__)'))" >&2
best="" best_wall=999999
for blas in 1 2; do
  for wait in PASSIVE ACTIVE; do
    r=$(run OPENBLAS_NUM_THREADS=$blas OMP_WAIT_POLICY=$wait -- "${torch[@]}")
    echo "[epoch]   OPENBLAS_NUM_THREADS=$blas OMP_WAIT_POLICY=$wait: ${r%% *} s" >&2
    if (($(echo "${r%% *} < $best_wall" | bc))); then best_wall=${r%% *} best="OPENBLAS_NUM_THREADS=$blas OMP_WAIT_POLICY=$wait"; fi
  done
done
read -r -a torch_env <<< "$best"
run -- "${minidl[@]}" > /dev/null  # warm-up (page cache, allocator)
a_wall=() b_wall=() a_rss=() b_rss=() ratio=()
for ((i = 0; i < runs; i++)); do
  read -r aw ar < <(run -- "${minidl[@]}")
  read -r bw br < <(run "${torch_env[@]}" -- "${torch[@]}")
  a_wall+=("$aw") b_wall+=("$bw") a_rss+=("$ar") b_rss+=("$br")
  ratio+=("$(echo "scale=4; $aw / $bw" | bc)")
  echo "[epoch]   pair $((i + 1)): minidl $aw s, PyTorch $bw s" >&2
done
ma=$(printf '%s\n' "${a_wall[@]}" | median) mb=$(printf '%s\n' "${b_wall[@]}" | median)
mr=$(printf '%s\n' "${ratio[@]}" | median)
lo=$(printf '%s\n' "${ratio[@]}" | sort -g | head -1) hi=$(printf '%s\n' "${ratio[@]}" | sort -g | tail -1)
pa=$(printf '%s\n' "${a_rss[@]}" | sort -g | tail -1) pb=$(printf '%s\n' "${b_rss[@]}" | sort -g | tail -1)
out="bench/results/epoch-$(date +%Y-%m-%d).md"
mkdir -p bench/results
if [[ ! -f $out ]]; then
  {
    echo "# One MNIST epoch, whole process: minidl vs PyTorch ($(date +%Y-%m-%d))"
    echo
    echo "Written by \`bench/epoch_vs_torch.sh\`; each row: PyTorch in its fastest thread setting"
    echo "(swept first), then minidl and PyTorch in turn, $runs pairs after a warm-up; wall medians,"
    echo "the pairwise wall ratio's median (min-max), the largest peak RSS of a single process."
    echo
    echo "| host CPU, class run | amp | shape | minidl wall | PyTorch wall | ratio | minidl peak | PyTorch peak | PyTorch setting | git |"
    echo "|---|---|---|---:|---:|---:|---:|---:|---|---|"
  } > "$out"
fi
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
f2() { printf '%.2f' "$1"; }
row="| $cpu ($(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)), $isa | $amp | $shape | $(f2 "$ma") s | $(f2 "$mb") s | **$(f2 "$mr")** ($(f2 "$lo")–$(f2 "$hi")) | $((pa / 1024)) MiB | $((pb / 1024)) MiB | $best, torch $($PYTHON -c 'import torch; print(torch.__version__)') | $(git rev-parse --short HEAD)$(git diff --quiet || echo '+') |"
echo "$row" >> "$out"
echo "$row"
echo "[epoch] minidl: ${minidl[*]}" >&2
echo "[epoch] PyTorch: $best ${torch[*]}" >&2
echo "[epoch] appended to $out" >&2
