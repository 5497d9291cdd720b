# Sourced by tools/gpu/verify.sh (same shell, same variables): the library resolution and flag
# checks, and the whole --dry-run (no GPU: resolution with this machine's copies hidden, CPU cases
# from the packed binaries). It exits the script when --dry-run was given.
# ------------------------------------------------------------------ library resolution
# Every NEEDED soname of every packed ELF file must be in the pack (lib/, lib-fallback/) or on the
# GPU image's list; this machine's libraries are never looked at. Prints one line per library.
check_libs() {
  local bad=0 elf soname where
  declare -A seen=()
  local elfs=() entry
  for entry in "${GPU_PACK_TARGETS[@]}"; do elfs+=("$P/build/${entry#*:}"); done
  elfs+=("$P"/lib/* "$P"/lib-fallback/*)
  for elf in "${elfs[@]}"; do
    for soname in $(gpu_needed "$elf"); do
      if [[ -f $P/lib/$soname ]]; then where="pack lib/"
      elif gpu_in_list "$soname" "${GPU_IMAGE_SONAMES[@]}"; then where="GPU image"
      elif [[ -f $P/lib-fallback/$soname ]]; then where="GPU image, else pack lib-fallback/"
      else where="UNRESOLVED" && bad=$((bad + 1))
      fi
      [[ -n ${seen[$soname]:-} && $where != UNRESOLVED ]] && continue
      seen[$soname]=1
      printf '  %-28s %-34s (first needed by %s)\n' "$soname" "$where" "${elf#"$P"/}"
    done
  done
  return $((bad > 0))
}

# 0 when every flag is in BIN's --help text.
check_flags() {
  local bin=$1 help flag bad=0
  shift
  help=$("$bin" --help 2>&1)
  for flag in "$@"; do
    grep -qE -- "(^|[ ,])$flag([ ,=]|$)" <<<"$help" ||
      { echo "  ${bin#"$P"/}: flag $flag not in --help" && bad=1; }
  done
  return $bad
}

# ================================================================== the dry run
if ((DRY_RUN)); then
  failures=0
  fail() { echo "verify.sh --dry-run: FAILED: $*" && failures=$((failures + 1)); }
  echo "== the GPU steps (tools/gpu/verify_steps.sh) define every step of --steps $STEPS"
  for step in ${STEPS//,/ }; do declare -F "step_$step" >/dev/null || fail "no function step_$step"; done
  echo "== NEEDED libraries of the packed binaries and libraries (pack + GPU image list only)"
  check_libs || fail "unresolved libraries above"
  echo "== the bundled libraries load from the pack (ldd with LD_LIBRARY_PATH=pack/lib)"
  for bin in "$TESTS" "$MNIST" "$GPT" "$LOGITS"; do
    while read -r soname _ path _; do
      [[ -f $P/lib/$soname ]] || continue
      [[ $path == "$P/lib/$soname" ]] || fail "${bin#"$P"/}: $soname resolves to $path, not the pack"
    done < <(LD_LIBRARY_PATH=$P/lib ldd "$bin")
  done
  echo "  $(find "$P/lib" -type f | wc -l) bundled libraries checked"
  echo "== symbol versions against the GPU image (Ubuntu 24.04: glibc 2.39, libstdc++ GLIBCXX_3.4.33)"
  newest() { objdump -T "${elfs[@]}" 2>/dev/null | grep -oE "$1_[0-9.]+" | sort -u -V | tail -1; }
  elfs=("$P"/lib/*)
  for entry in "${GPU_PACK_TARGETS[@]}"; do elfs+=("$P/build/${entry#*:}"); done
  glibc=$(newest GLIBC) glibcxx=$(newest GLIBCXX)
  echo "  the pack needs up to $glibc and $glibcxx"
  # glibc cannot be packed; a newer libstdc++ is (lib-fallback/).
  [[ $(printf '%s\n' "$glibc" GLIBC_2.39 | sort -V | tail -1) == GLIBC_2.39 ]] ||
    fail "$glibc is newer than the GPU image's glibc 2.39: build on an older distribution"
  # The CPU runs below hide this machine's copy of every library the pack needs beyond the GPU
  # image's (a mount namespace binds /dev/null over each), so they can only load the pack's.
  hidden=()
  for soname in $(for elf in "${elfs[@]}"; do gpu_needed "$elf"; done | sort -u); do
    gpu_in_list "$soname" "${GPU_IMAGE_SONAMES[@]}" "${GPU_FALLBACK_SONAMES[@]}" && continue
    host=$(ldconfig -p | awk -v s="$soname" '$1 == s && /x86-64/ { print $NF; exit }')
    [[ -n $host ]] && hidden+=("$(realpath "$host")")
  done
  if unshare -m true 2>/dev/null; then
    # shellcheck disable=SC2016  # the inner bash expands its own arguments
    hide() {
      unshare -m bash -c 'n=$1 && shift && for ((i = 0; i < n; i++)); do
        mount --bind /dev/null "$1" || exit 90; shift; done; exec "$@"' _ "${#hidden[@]}" "${hidden[@]}" "$@"
    }
    echo "== CPU runs from the pack, this machine's copies hidden: ${hidden[*]}"
  else
    hide() { "$@"; }
    echo "== CPU runs from the pack (unshare -m refused: this machine's copies not hidden)"
  fi
  cases=$(cat "$P"/build/tests/minidl_tests_tests-*.cmake 2>/dev/null | grep -c '^add_test')
  echo "== ctest's list of the packed test binary: $cases cases"
  ((cases > 0)) || fail "no discovered ctest list (build/tests/minidl_tests_tests-*.cmake) in the pack"
  echo "== the flags the GPU steps pass exist"
  check_flags "$MNIST" "${FLAGS_MNIST[@]}" || fail "mnist_ddp flags"
  check_flags "$GPT" "${FLAGS_GPT[@]}" || fail "gpt flags"
  check_flags "$RUN" "${FLAGS_RUN[@]}" || fail "minidl-run flags"
  check_flags "$COMPARE" "${FLAGS_COMPARE[@]}" || fail "minidl-compare flags"
  check_flags "$CLASSIFY" "${FLAGS_CLASSIFY[@]}" || fail "classify flags"
  echo "  mnist_ddp, gpt, minidl-run and minidl-compare: every flag found"
  export LD_LIBRARY_PATH=$P/lib
  echo "== CPU cases from the packed test binary"
  hide "$TESTS" -tc='*safetensors*,*gloo*,mnist*' >"$WORK/cpu-suite.log" 2>&1 ||
    { tail -30 "$WORK/cpu-suite.log" && fail "CPU cases of the packed minidl_tests"; }
  grep '^\[doctest\] test cases' "$WORK/cpu-suite.log" | sed 's/^/  /'
  echo "== safetensors_logits: export then import on the CPU gives the same logits"
  for model in mnist gpt; do
    if hide "$LOGITS" export --model "$model" --device cpu --out "$WORK/$model.safetensors" >/dev/null &&
      hide "$LOGITS" import --model "$model" --device cpu --in "$WORK/$model.safetensors" \
        --out "$WORK/$model-logits.safetensors" >/dev/null &&
      python3 - "$WORK/$model.safetensors" "$WORK/$model-logits.safetensors" <<EOF; then
import sys
sys.path.insert(0, "$ROOT/tools")
from safetensors_interop import parse
a, b = (parse(open(p, "rb").read())[0]["logits"] for p in sys.argv[1:])
sys.exit(0 if a == b and a[0] == "F32" else f"logits differ: {a[:2]} vs {b[:2]}")
EOF
      echo "  $model: identical logits"
    else
      fail "safetensors_logits round trip of $model"
    fi
  done
  echo "== mnist_ddp from the pack on the CPU, 5 steps"
  hide "$MNIST" --device cpu --data "$DATA/mnist" --epochs 1 --max-steps 5 >"$WORK/mnist.log" 2>&1 ||
    { tail -5 "$WORK/mnist.log" && fail "packed mnist_ddp on the CPU"; }
  grep 'test accuracy' "$WORK/mnist.log" | sed 's/^/  /'
  echo "verify.sh --dry-run: $failures failure(s), $(($(date +%s) - START)) s"
  exit $((failures > 0))
fi
