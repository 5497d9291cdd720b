#!/usr/bin/env bash
# The library's floors, checked: tensor -> autograd -> nn -> optim -> data -> parallel -> apps.
# Counts the #include arrows between folders (tests, bench and tools excluded) and fails when one
# runs back up. With a build folder it also checks the link-level picture: no object file under
# tensor/ calls a function defined under a higher floor (e.g. a differentiable op or a Tensor
# method that records autograd history).
# Inside parallel/ and tensor/ the subfolders are ordered too (rooms_parallel, rooms_tensor below).
# Usage: tools/check-layering.sh [--counts] [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
show_counts=0
if [[ ${1:-} == --counts ]]; then
  show_counts=1
  shift
fi
build_dir=${1:-}
floors=(tensor autograd nn optim data parallel apps)

floor_of() {
  local i
  for i in "${!floors[@]}"; do [[ ${floors[$i]} == "$1" ]] && { echo "$i"; return; }; done
  echo -1
}

# Every quoted include of a library file: "from_folder to_folder file".
arrows=$(
  for f in "${floors[@]}"; do
    find "$f" -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \
      -o -name '*.def' \) -print0 |
      xargs -0 grep -HoE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"[a-z_]+/[^"]+"' |
      sed -E 's|^([a-z_]+)/[^:]*:[^"]*"([a-z_]+)/.*$|\1 \2|;t;d' |
      awk -v f="$f" '$1 == f'
  done
)
# Per-file listing of the upward ones (file and included header).
upward_files=$(
  for f in "${floors[@]}"; do
    find "$f" -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \
      -o -name '*.def' \) -print0 |
      xargs -0 grep -HnoE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"[a-z_]+/[^"]+"'
  done | while IFS= read -r line; do
    from=${line%%/*}
    inc=${line#*\"}
    to=${inc%%/*}
    fi=$(floor_of "$from")
    ti=$(floor_of "$to")
    ((ti > fi)) && echo "  ${line%%:#*}  includes ${inc%\"}"
    true
  done
)

status=0
if ((show_counts)); then
  echo "include arrows between floors (from -> to: count; ^ = runs back up):"
  echo "$arrows" | awk 'NF == 2 && $1 != $2' | sort | uniq -c | while read -r n from to; do
    mark=""
    (($(floor_of "$to") > $(floor_of "$from"))) && mark=" ^"
    printf '  %-9s -> %-9s %4d%s\n' "$from" "$to" "$n" "$mark"
  done
fi
if [[ -n $upward_files ]]; then
  echo "check-layering: includes that run back up a floor (order: ${floors[*]}):"
  echo "$upward_files"
  status=1
else
  echo "check-layering: no include runs back up (${floors[*]})"
fi

# Rooms inside a floor: the subfolders of parallel/ and tensor/ in their order, lowest first.
# An include from a file in one of them into a later one runs back up. "." is the folder's own
# root (parallel/distributed.*, parallel/module_wrapper.*); tensor/'s root files (the Tensor,
# dispatch, ops.h and the headers every room uses) are left out: they sit on both sides. In
# tensor/ the op frontends (ops/) reach the kernels only through the dispatch table, never by
# including a cpu/ or cuda/ header; the kernels may use the raw ops of tensor/ops.h.
rooms_parallel=(launch store rendezvous process_group gloo nccl . ddp zero fsdp data_parallel
                sync_batchnorm accelerator)
rooms_tensor=(ops cpu cuda/runtime cuda)
# The room of a path inside floor $1 given the ordered rooms (longest prefix wins); "" if none.
room_of() {
  local floor=$1 path=$2 rest best="" r
  shift 2
  rest=${path#"$floor"/}
  if [[ $rest != */* ]]; then  # a file at the floor's root: its "." room, if it has one
    for r in "$@"; do [[ $r == . ]] && best=.; done
  else
    for r in "$@"; do
      [[ $r != . && $rest == "$r"/* && ${#r} -gt ${#best} ]] && best=$r
    done
  fi
  echo "$best"
}
index_of() {
  local want=$1 i=0 r
  shift
  for r in "$@"; do
    [[ $r == "$want" ]] && { echo $i; return; }
    i=$((i + 1))
  done
  echo -1
}
check_rooms() {
  local floor=$1 line file inc from to fi ti
  shift
  while IFS= read -r line; do
    file=${line%%:*}
    inc=${line#*\"}
    inc=${inc%\"*}
    [[ $inc == "$floor"/* ]] || continue
    from=$(room_of "$floor" "$file" "$@")
    to=$(room_of "$floor" "$inc" "$@")
    [[ -n $from && -n $to && $from != "$to" ]] || continue
    fi=$(index_of "$from" "$@")
    ti=$(index_of "$to" "$@")
    ((ti > fi)) && echo "  $file ($from) includes $inc ($to)"
    true
  done < <(find "$floor" -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) \
    -print0 | xargs -0 grep -HoE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"[a-z_]+/[^"]+"')
}
for floor in parallel tensor; do
  declare -n rooms="rooms_$floor"
  for r in "${rooms[@]}"; do
    [[ $r == . || -d $floor/$r ]] || { echo "check-layering: no folder $floor/$r" >&2; exit 2; }
  done
  up_rooms=$(check_rooms "$floor" "${rooms[@]}")
  if [[ -n $up_rooms ]]; then
    echo "check-layering: includes that run back up inside $floor/ (order: ${rooms[*]}):"
    echo "$up_rooms"
    status=1
  else
    echo "check-layering: no include runs back up inside $floor/ (${rooms[*]})"
  fi
  unset -n rooms
done

# Link level: symbols that tensor/ objects need and autograd/ and higher objects define.
if [[ -n $build_dir ]]; then
  objdir="$build_dir/CMakeFiles/minidl.dir"
  [[ -d $objdir/tensor ]] || { echo "check-layering: no objects under $objdir/tensor" >&2; exit 2; }
  # Objects of sources that still exist (a build folder keeps those of deleted files).
  live_objects() {
    find "$objdir/$1" -name '*.o' | while IFS= read -r o; do
      src=${o#"$objdir"/}
      [[ -f ${src%.o} ]] && echo "$o"
    done
  }
  mapfile -t lower < <(live_objects tensor)
  mapfile -t higher < <(for f in "${floors[@]:1}"; do
    [[ -d $objdir/$f ]] && live_objects "$f"
  done)
  defined_low=$(nm --defined-only -g "${lower[@]}" 2>/dev/null | awk 'NF >= 3 {print $3}' | sort -u)
  needed=$(nm -u "${lower[@]}" 2>/dev/null | awk '$1 == "U" {print $2}' | sort -u |
    comm -23 - <(echo "$defined_low"))
  defined_high=$(nm --defined-only -g "${higher[@]}" 2>/dev/null |
    awk 'NF >= 3 && $2 ~ /[TW]/ {print $3}' | sort -u)
  up=$(comm -12 <(echo "$needed") <(echo "$defined_high"))
  if [[ -n $up ]]; then
    echo "check-layering: tensor/ objects call functions defined above tensor/:"
    echo "$up" | c++filt | sed 's/^/  /'
    status=1
  else
    echo "check-layering: tensor/ objects call nothing defined above tensor/ ($build_dir)"
  fi
fi
exit $status
