#!/usr/bin/env bash
# Fuzzes minidl's parsers: configures (once) and builds a clang CPU-only build with ASan + UBSan
# and the libFuzzer targets (MINIDL_FUZZ), then runs each target for SECONDS from its seed
# corpus (tests/fuzz/corpus/<target>) and crash regressions (tests/fuzz/regressions/<target>).
# Fails if any target crashes, leaks, hits UB or times out, and prints where libFuzzer saved the
# input (commit it to tests/fuzz/regressions/<target>/ with the fix).
# Usage: tools/fuzz.sh [BUILD_DIR (build-fuzz)] [SECONDS per target (60)]
# Env: JOBS (build jobs, default nproc), FUZZ_TARGETS (default "idx safetensors checkpoint
# store_message image"), FUZZ_SKIP_SETUP=1 (do not install clang / libFuzzer).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build-fuzz}
FUZZ_SECONDS=${2:-60}
JOBS=${JOBS:-$(nproc)}
read -r -a TARGETS <<<"${FUZZ_TARGETS:-idx safetensors checkpoint store_message image}"

# clang 14 and its runtime libraries (libFuzzer, ASan, UBSan: libclang-rt-14-dev on Debian 12).
[ "${FUZZ_SKIP_SETUP:-0}" = 1 ] || bash tools/setup-deps.sh clang libclang-rt-14-dev
SAN="-fsanitize=address,undefined -fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined"
SAN="$SAN -fno-omit-frame-pointer"
LAUNCHER=()
command -v ccache >/dev/null && LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  # -O1 -g1 (line tables: file:line in reports, far less to compile and link than -g) with
  # assertions on; no -Werror (clang's warnings are not gcc's), no CUDA, no oneDNN.
  cmake -S . -B "$BUILD_DIR" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" "-DCMAKE_CXX_FLAGS=$SAN" "${LAUNCHER[@]}" \
    -DMINIDL_CUDA=OFF -DMINIDL_ONEDNN=OFF -DMINIDL_FUZZ=ON -DMINIDL_BUILD_TESTS=OFF \
    -DMINIDL_BUILD_APPS=OFF -DMINIDL_BUILD_BENCH=OFF
else
  cmake "$BUILD_DIR" -DMINIDL_FUZZ=ON >/dev/null  # an existing build: keep its settings
fi
cmake --build "$BUILD_DIR" -j "$JOBS" --target "${TARGETS[@]/#/fuzz_}"

export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # one thread: reproducible, cheap
# The targets write their input to a scratch file: in memory that is ~8x faster than on disk.
[ -d /dev/shm ] && [ -w /dev/shm ] && export TMPDIR=${FUZZ_TMPDIR:-/dev/shm}
# Each target is single-threaded: up to JOBS of them run side by side (CI: 2 cores, 2 at a time).
run_target() {
  local t=$1 bin="$BUILD_DIR/tests/fuzz/fuzz_$1" out="$BUILD_DIR/fuzz-out/$1"
  rm -rf "$out/artifacts" "$out/status"
  mkdir -p "$out/corpus" "$out/artifacts"
  local dirs=("$out/corpus" "tests/fuzz/corpus/$t")  # new inputs go to the first, seeds stay
  [ -d "tests/fuzz/regressions/$t" ] && dirs+=("tests/fuzz/regressions/$t")
  echo "[fuzz] $t: ${FUZZ_SECONDS} s from ${dirs[*]:1}"
  local start rc=0
  start=$(date +%s)
  "$bin" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$out/artifacts/" "${dirs[@]}" >"$out/log" 2>&1 || rc=$?
  echo "$rc $(($(date +%s) - start))" >"$out/status"
}
pids=()
for t in "${TARGETS[@]}"; do
  run_target "$t" &
  pids+=($!)
  if [ ${#pids[@]} -ge "$JOBS" ]; then
    wait "${pids[0]}"
    pids=("${pids[@]:1}")
  fi
done
wait
failed=()
for t in "${TARGETS[@]}"; do
  out="$BUILD_DIR/fuzz-out/$t"
  bin="$BUILD_DIR/tests/fuzz/fuzz_$t"
  read -r rc secs <"$out/status" || { rc=1; secs=?; }
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$out/log" | grep -o '[0-9]*$' || true)
  cov=$(grep -o 'cov: [0-9]*' "$out/log" | tail -1 || true)
  echo "[fuzz] $t: exit $rc after $secs s, ${execs:-?} executions, ${cov:-cov ?}"
  if [ "$rc" -ne 0 ] || [ -n "$(ls -A "$out/artifacts")" ]; then
    tail -n 60 "$out/log"
    for a in "$out"/artifacts/*; do
      [ -e "$a" ] || continue
      echo "[fuzz] $t: crashing input saved at $a (reproduce: $bin $a; commit it to" \
        "tests/fuzz/regressions/$t/ with the fix)"
    done
    failed+=("$t")
  fi
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "[fuzz] FAILED: ${failed[*]} (logs in $BUILD_DIR/fuzz-out/<target>/log)"
  exit 1
fi
echo "[fuzz] all ${#TARGETS[@]} target(s) ran ${FUZZ_SECONDS} s each without a crash"
