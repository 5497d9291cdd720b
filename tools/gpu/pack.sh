#!/usr/bin/env bash
# Packs what tools/gpu/verify.sh needs on a GPU machine into .gpu-pack/ (ignored; the device run
# carries it): the CUDA binaries of a built tree, the shared libraries the GPU image lacks and the
# MNIST / Moby-Dick data, as one xz archive of at most 40 MiB. See tools/gpu/README.md.
# Usage: tools/gpu/pack.sh [--no-build] [BUILD_DIR]   (default $BUILD_DIR, else build: the
# README's test build). The packed targets are first brought up to date there (make: a no-op
# right after tools/test.sh); --no-build packs them as they are. Env: JOBS (default 2).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=tools/gpu/common.sh
source "$ROOT/tools/gpu/common.sh"
cd "$ROOT"
NO_BUILD=0
[[ ${1:-} == --no-build ]] && NO_BUILD=1 && shift
BUILD_DIR=$(realpath "${1:-${BUILD_DIR:-build}}")
JOBS=${JOBS:-2}
start=$(date +%s)
die() {
  echo "pack.sh: error: $*" >&2
  exit 1
}
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD_DIR/CMakeCache.txt"; }
names() { find "$1" -maxdepth 1 -type f -printf '%f\n' | sort | tr '\n' ' '; }

[[ -f $BUILD_DIR/CMakeCache.txt ]] || die "$BUILD_DIR is not a configured build (run tools/test.sh)"
archs=$(cache_value CMAKE_CUDA_ARCHITECTURES)
[[ ";$archs;" == *";90;"* || ";$archs;" == *";90-real;"* ]] ||
  die "$BUILD_DIR builds CUDA for '$archs', not sm_90 (H100/H200): reconfigure with CUDAARCHS=90"
SOURCE_DIR=$(cache_value CMAKE_HOME_DIRECTORY)

# 1. The binaries: make brings stale or missing ones up to date (a no-op after tools/test.sh).
targets=() files=()
for entry in "${GPU_PACK_TARGETS[@]}"; do
  targets+=("${entry%%:*}")
  files+=("${entry#*:}")
done
if ((NO_BUILD)); then
  echo "pack.sh: --no-build: packing ${files[*]} from $BUILD_DIR as they are"
else
  echo "pack.sh: bringing ${targets[*]} up to date in $BUILD_DIR"
  log=$BUILD_DIR/gpu-pack-build.log
  cmake --build "$BUILD_DIR" -j "$JOBS" --target "${targets[@]}" >"$log" 2>&1 ||
    { tail -30 "$log" >&2 && die "the build failed (log: $log)"; }
fi
for f in "${files[@]}"; do [[ -x $BUILD_DIR/$f ]] || die "$BUILD_DIR/$f is missing"; done
# The binaries link the library's CUDA kernels (a .nv_fatbin section; checked on the test binary).
readelf -SW "$BUILD_DIR/tests/minidl_tests" | grep -q '\.nv_fatbin' ||
  die "tests/minidl_tests has no CUDA code: was $BUILD_DIR configured without CUDA (no nvcc)?"
cuobjdump=$(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump 2>/dev/null || true)
if [[ -n $cuobjdump ]]; then
  "$cuobjdump" --list-elf "$BUILD_DIR/tests/minidl_tests" | grep -q 'sm_90' ||
    die "tests/minidl_tests holds no sm_90 code"
fi

# 2. The data: the digits and the text, checked against their pinned sums (tools/test.sh fetched
# them into the source tree the binaries were built from; their tests read them there).
data_dir=$SOURCE_DIR/data
BUILD_DIR="$BUILD_DIR" bash "$ROOT/tools/fetch-mnist.sh" "$data_dir/mnist"
bash "$ROOT/tools/fetch-moby-dick.sh" "$data_dir/moby-dick"

# 3. Stage the pack's tree.
PACK_DIR=$ROOT/$GPU_PACK_DIRNAME
stage=$(mktemp -d "${TMPDIR:-/tmp}/minidl-gpu-pack.XXXXXX")
trap 'rm -rf "$stage"' EXIT
top=$stage/$GPU_PACK_TOP
mkdir -p "$top/build" "$top/lib" "$top/lib-fallback" "$top/data"
for f in "${files[@]}"; do
  mkdir -p "$top/build/$(dirname "$f")"
  # Symbols only matter to a debugger (the image has no gdb); the fatbins stay.
  strip --strip-unneeded -o "$top/build/$f" "$BUILD_DIR/$f"
done
# ctest's view of the test binary (ctest --test-dir BUILD_DIR/tests), for verify.sh's whole suite.
cp "$BUILD_DIR"/tests/CTestTestfile.cmake "$BUILD_DIR"/tests/minidl_tests_*.cmake "$top/build/tests/"
cp -r "$data_dir/mnist" "$data_dir/moby-dick" "$top/data/"

# 4. Shared libraries: the NEEDED closure that ldd resolves here, minus what the image provides.
declare -A bundled=()
for f in "${files[@]}"; do
  while read -r soname path; do
    [[ -n $path ]] || die "$f: $soname is not found on this machine (ldd)"
    [[ -n ${bundled[$soname]:-} ]] && continue
    gpu_in_list "$soname" "${GPU_IMAGE_SONAMES[@]}" && continue
    if gpu_in_list "$soname" "${GPU_FALLBACK_SONAMES[@]}"; then
      cp -L "$path" "$top/lib-fallback/$soname"
    else
      cp -L "$path" "$top/lib/$soname"
    fi
    bundled[$soname]=$path
  done < <(ldd "$BUILD_DIR/$f" | awk '$2 == "=>" { print $1, ($3 == "not" ? "" : $3) }')
done
# Every fallback library is packed even when no binary needs it directly (libgomp via oneDNN).
for soname in "${GPU_FALLBACK_SONAMES[@]}"; do
  [[ -f $top/lib-fallback/$soname ]] && continue
  path=$(ldconfig -p | awk -v s="$soname" '$1 == s && /x86-64/ { print $NF; exit }')
  [[ -n $path ]] || die "$soname not found on this machine (ldconfig -p)"
  cp -L "$path" "$top/lib-fallback/$soname"
done

# 5. The manifest: where the binaries were built (their compiled-in source paths), what is in it.
commit=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null | wc -l)
{
  echo "created=$(date -u '+%Y-%m-%dT%H:%M:%SZ')"
  echo "commit=$commit"
  echo "modified_tracked_files=$dirty"
  echo "source_dir=$SOURCE_DIR"
  echo "build_dir=$BUILD_DIR"
  echo "cuda_architectures=$archs"
  echo "build_type=$(cache_value CMAKE_BUILD_TYPE)"
  echo "host=$(. /etc/os-release && echo "$PRETTY_NAME"), $(ldd --version | head -1)"
  echo "binaries=${files[*]}"
  echo "lib=$(names "$top/lib")"
  echo "lib_fallback=$(names "$top/lib-fallback")"
  echo "gpu_image_sonames=${GPU_IMAGE_SONAMES[*]}"
} >"$top/MANIFEST"
uncompressed=$(du -sb "$top" | cut -f1)

# 6. Compress: one xz stream with a window larger than the tree, so the binaries' identical
# library code and fatbins are stored about once.
mkdir -p "$PACK_DIR"
rm -f "$PACK_DIR/$GPU_PACK_ARCHIVE"
tar -C "$stage" --sort=name --owner=0 --group=0 -cf - "$GPU_PACK_TOP" |
  xz -T1 --lzma2=preset=1,dict=512MiB >"$PACK_DIR/$GPU_PACK_ARCHIVE.tmp"
mv "$PACK_DIR/$GPU_PACK_ARCHIVE.tmp" "$PACK_DIR/$GPU_PACK_ARCHIVE"
cp "$top/MANIFEST" "$PACK_DIR/MANIFEST"
size=$(stat -c %s "$PACK_DIR/$GPU_PACK_ARCHIVE")

# The pack is never committed: ignore it in this clone (worktrees share the main exclude file).
if exclude=$(git -C "$ROOT" rev-parse --git-path info/exclude 2>/dev/null); then
  [[ $exclude == /* ]] || exclude=$ROOT/$exclude
  mkdir -p "$(dirname "$exclude")"
  grep -qxF "/$GPU_PACK_DIRNAME/" "$exclude" 2>/dev/null || echo "/$GPU_PACK_DIRNAME/" >>"$exclude"
fi

mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
echo "pack.sh: $PACK_DIR/$GPU_PACK_ARCHIVE: $(mib "$size") ($(mib "$uncompressed") unpacked)," \
  "$(($(date +%s) - start)) s; bundled: $(names "$top/lib")"
((size <= GPU_PACK_LIMIT_MIB * 1048576)) ||
  die "the pack is $(mib "$size"), over the ${GPU_PACK_LIMIT_MIB} MiB limit (CUDA archs '$archs':" \
    "build for sm_90 alone, CUDAARCHS=90, as CI does)"
