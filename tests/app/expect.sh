# The end-to-end test scripts' shared checks (sourced; the script sets BIN, the program under test,
# and WORK, its scratch folder): fail, expect_rc and expect_error.
fail() { echo "FAIL: $*" >&2; exit 1; }
# Runs $BIN expecting exit code $1; the rest are its arguments. Output in $WORK/out and $WORK/err.
expect_rc() {
  local want=$1; shift
  "$BIN" "$@" >"$WORK/out" 2>"$WORK/err"; local rc=$?
  [ "$rc" -eq "$want" ] || { cat "$WORK/out" "$WORK/err" >&2; fail "exit $rc, expected $want: $*"; }
}
# rc pattern args...: $BIN exits with rc and prints a one-line error on stderr matching pattern.
expect_error() {
  local rc=$1 pattern=$2; shift 2
  expect_rc "$rc" "$@"
  [ "$(wc -l <"$WORK/err")" -eq 1 ] || { cat "$WORK/err" >&2; fail "error is not one line: $*"; }
  grep -q -- "$pattern" "$WORK/err" || { cat "$WORK/err" >&2; fail "no '$pattern' in error: $*"; }
}
