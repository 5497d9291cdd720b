#!/usr/bin/env bash
# End-to-end tests of minidl-compare on a short MNIST run: the table, explanations and
# projection print and the JSON has its documented fields (table); the DDP variants on resnet-mini
# (variants); FSDP's rows with the state per rank (fsdp); a deliberately broken mode (MINIDL_COMPARE_BREAK) fails naming it (broken); bad
# flags give one-line errors, exit 2 (errors).
# Usage: compare_test.sh MINIDL_COMPARE DATA_DIR CASE
set -uo pipefail
BIN=$1 DATA=$2 CASE=$3
WORK=$(mktemp -d /tmp/compare_test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -d "$DATA/mnist" ] || fail "$DATA/mnist is missing (tools/fetch-mnist.sh fetches it)"
QUICK=(--model mnist-cnn --data "$DATA/mnist" --devices 2 --global-batch 32 --steps 4 --warmup 1
  --rounds 1)
run() {
  "$BIN" "$@" >"$WORK/out" 2>"$WORK/err"
  echo $?
}
expect_error() {  # rc pattern args...
  local want=$1 pattern=$2; shift 2
  local rc; rc=$(run "$@")
  [ "$rc" -eq "$want" ] || { cat "$WORK/out" "$WORK/err" >&2; fail "exit $rc, expected $want: $*"; }
  [ "$(wc -l <"$WORK/err")" -eq 1 ] || { cat "$WORK/err" >&2; fail "error is not one line: $*"; }
  grep -q -- "$pattern" "$WORK/err" || { cat "$WORK/err" >&2; fail "no '$pattern' in error: $*"; }
}

case $CASE in
table)
  rc=$(run "${QUICK[@]}" --modes single,dp,ddp --rounds 2 --json "$WORK/c.json" --plot "$WORK/c.svg")
  cat "$WORK/out"
  [ "$rc" -eq 0 ] || { cat "$WORK/err" >&2; fail "exit $rc"; }
  grep -q '| mode | devices | threads | samples/s | step ms p50 | p90 | speedup' "$WORK/out" ||
    fail "no table header"
  for label in '| single |' '| dp |' '| ddp |'; do
    grep -qF -- "$label" "$WORK/out" || fail "no row $label"
  done
  grep -q 'hides [0-9]*% of its allreduce' "$WORK/out" || fail "no DDP explanation"
  grep -q 'of its step re-synchronising replicas' "$WORK/out" || fail "no DP explanation"
  grep -q '## Projection' "$WORK/out" || fail "no projection"
  grep -q '^| 64 |' "$WORK/out" || fail "the projection has no N = 64 row"
  grep -q 'the median of 2 rounds' "$WORK/out" || fail "no rounds note"
  grep -q '<rect class=.bar' "$WORK/c.svg" || fail "the SVG has no bars"
  grep -q '<polyline' "$WORK/c.svg" || fail "the SVG has no projection curve"
  python3 - "$WORK/c.json" <<'EOF' || fail "JSON fields"
import json, sys
d = json.load(open(sys.argv[1]))
rows = d["rows"]
modes = [r["mode"] for r in rows]
assert modes[0] == "single" and "dp" in modes and "ddp" in modes, modes
for r in rows:
    for k in ("mode", "label", "devices", "threads", "samples_per_s", "step_ms_p50", "step_ms_p90",
              "speedup", "efficiency", "peak_memory_mib", "losses", "breakdown"):
        assert k in r, (k, r["label"])
    assert r["samples_per_s"] > 0 and r["step_ms_p90"] >= r["step_ms_p50"] > 0, r["label"]
    assert len(r["losses"]) == 5 and len(r["step_ms"]) == 4, r["label"]
    assert len(r["samples_per_s_rounds"]) == 2, r["label"]
    assert r["samples_per_s_rounds"][0] <= r["samples_per_s"] <= r["samples_per_s_rounds"][1]
    for k in ("forward_ms", "backward_ms", "reduce_exposed_ms", "reduce_hidden_ms", "optimizer_ms",
              "data_wait_ms", "dp_replicate_ms", "dp_scatter_ms", "dp_gather_ms", "dp_reduce_ms"):
        assert r["breakdown"][k] >= 0, (k, r["label"])
    assert r["peak_memory_mib"] > 0, r["label"]
ddp = next(r for r in rows if r["mode"] == "ddp")
assert ddp["devices"] == 2 and len(ddp["ddp"]["bucket_bytes"]) >= 1
assert 0 <= ddp["ddp"]["hidden_fraction"] <= 1
dp = next(r for r in rows if r["mode"] == "dp")
assert dp["breakdown"]["dp_replicate_ms"] > 0
assert rows[0]["speedup"] == 1.0
c = d["consistency"]
assert c["ok"] and c["max_rel_diff"] <= c["tolerance"], c
p = d["projection"]
assert sorted({q["devices"] for q in p}) == [1, 2, 4, 8, 16, 32, 64]
assert {"nvlink", "pcie", "ib100", "eth10"} <= {q["link"] for q in p}
m = d["model"]
assert m["measured_devices"] == 2 and m["compute_ms"] > 0 and m["single_ms"] > 0
# The local link is fitted unless other work on the machine scrambled the allreduce timings.
if not m["local_error"]:
    assert "local (fitted)" in {q["link"] for q in p} and m["predicted_step_ms"] > 0
assert d["explanation"]
EOF
  ;;
variants)  # resnet-mini: ddp-syncbn matches single at 1e-4, ddp (per-rank BN) and the hooks
  # within their own tolerance; the rows show optimizer state and wire bytes; per-variant projection
  rc=$(run --model resnet-mini --data "$DATA/mnist" --devices 2 --global-batch 32 --steps 4 \
    --warmup 3 --rounds 1 --modes single,ddp,ddp-syncbn,ddp-zero1,ddp-bf16,ddp-powersgd \
    --json "$WORK/v.json")
  cat "$WORK/out"
  [ "$rc" -eq 0 ] || { cat "$WORK/err" >&2; fail "exit $rc"; }
  for label in '| ddp-syncbn |' '| ddp-zero1 |' '| ddp-bf16 |' '| ddp-powersgd |'; do
    grep -qF -- "$label" "$WORK/out" || fail "no row $label"
  done
  grep -q '## Projection by DDP variant on eth10' "$WORK/out" || fail "no variant projection"
  grep -q 'own tolerance: ddp 1e-02 (per-replica BatchNorm statistics)' "$WORK/out" ||
    fail "no own-tolerance note"
  python3 - "$WORK/v.json" <<'EOF' || fail "variant JSON fields"
import json, sys
d = json.load(open(sys.argv[1]))
rows = {r["mode"]: r for r in d["rows"]}
assert rows["ddp-syncbn"]["loss_tolerance"] == d["consistency"]["tolerance"], rows["ddp-syncbn"]
assert rows["ddp"]["loss_tolerance"] == 1e-2
g = {m: rows[m]["ddp"]["grad_bytes_per_step"] for m in ("ddp", "ddp-bf16", "ddp-powersgd")}
assert g["ddp-bf16"] * 2 == g["ddp"] and g["ddp-powersgd"] < g["ddp"] / 2, g
z, p = rows["ddp-zero1"], rows["ddp"]
assert 0 < z["optimizer_state_mib"] <= p["optimizer_state_mib"], (z, p)
assert z["ddp"]["zero_broadcasts_per_step"] >= 1 and p["ddp"]["buffer_broadcasts_per_step"] >= 1
assert {v["mode"] for v in d["variant_projection"]} == {"ddp", "ddp-syncbn", "ddp-zero1",
                                                         "ddp-bf16", "ddp-powersgd"}
EOF
  ;;
fsdp)  # FSDP's rows: losses agree with DDP's; a rank holds <= 0.6x DDP's state under FULL_SHARD
  rc=$(run "${QUICK[@]}" --modes ddp,fsdp,fsdp-grad-op --json "$WORK/f.json")
  cat "$WORK/out"
  [ "$rc" -eq 0 ] || { cat "$WORK/err" >&2; fail "exit $rc"; }
  for label in '| ddp |' '| fsdp |' '| fsdp-grad-op |'; do
    grep -qF -- "$label" "$WORK/out" || fail "no row $label"
  done
  grep -q '| state MiB |' "$WORK/out" || fail "no state MiB column"
  grep -q 'fsdp issues [0-9.]* collectives per step' "$WORK/out" || fail "no FSDP explanation"
  python3 - "$WORK/f.json" <<'EOF' || fail "FSDP JSON fields"
import json, sys
d = json.load(open(sys.argv[1]))
rows = {r["mode"]: r for r in d["rows"]}
assert d["consistency"]["ok"] and d["consistency"]["max_rel_diff"] <= 1e-5, d["consistency"]
ddp, full, grad_op = rows["ddp"]["state_mib"], rows["fsdp"]["state_mib"], rows["fsdp-grad-op"]["state_mib"]
assert 0 < full <= 0.6 * ddp and 0 < grad_op <= 0.6 * ddp, (ddp, full, grad_op)
assert rows["fsdp"]["ddp"]["collectives_per_step"] > rows["ddp"]["ddp"]["collectives_per_step"]
# The breakdown: FSDP's exposed communication (its waits) measured, and within the step.
for m in ("fsdp", "fsdp-grad-op"):
    b = rows[m]["breakdown"]
    assert 0 < b["reduce_exposed_ms"] < rows[m]["step_ms_p50"], (m, b, rows[m]["step_ms_p50"])
EOF
  grep -q 'the exposed communication (waits on its all-gathers and reduce-scatters) [0-9.]* ms' \
    "$WORK/out" || fail "no FSDP compute / exposed communication line"
  ;;
broken)  # DP's gradients tripled: the loss check fails at step 1 naming dp
  MINIDL_COMPARE_BREAK=dp expect_error 1 'modes single and dp disagree at step 1' "${QUICK[@]}" \
    --modes single,dp --steps 3 --json "$WORK/b.json"
  python3 -c "import json,sys; c=json.load(open(sys.argv[1]))['consistency']; assert not c['ok'] and 'dp' in c['error']" \
    "$WORK/b.json" || fail "the JSON does not record the failed check"
  MINIDL_COMPARE_BREAK=ddp expect_error 1 'modes single and ddp disagree' "${QUICK[@]}" \
    --modes single,ddp --steps 3
  ;;
errors)
  expect_error 2 'unknown mode' "${QUICK[@]}" --modes single,tpu
  expect_error 2 'not divisible by --devices' "${QUICK[@]}" --global-batch 33
  expect_error 2 'model' "${QUICK[@]}" --model resnet
  expect_error 2 "unknown mode 'ddp-int8'" "${QUICK[@]}" --modes ddp,ddp-int8
  expect_error 2 'has no BatchNorm' "${QUICK[@]}" --modes ddp,ddp-syncbn
  expect_error 2 'unknown link' "${QUICK[@]}" --link tokenring
  expect_error 2 'latency' "${QUICK[@]}" --bandwidth 5
  expect_error 2 'steps' "${QUICK[@]}" --steps 0
  expect_error 1 'no data at' --data "$WORK/nothing" --modes single --steps 2
  ;;
*) fail "unknown case $CASE" ;;
esac
echo "PASS $CASE"
