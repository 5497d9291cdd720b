#!/usr/bin/env bash
# End-to-end tests of mnist_ddp --amp, run by ctest: bf16 and fp16 (O1) reach the accuracy bar,
# an absurd initial loss scale recovers through skipped steps, O2 trains with fp32 masters, O0
# equals the fp32 run bitwise, 2-rank DDP with fp16 resumes bitwise, a checkpoint without AMP
# state resumes with a warning, bad flags are one-line errors.
# Usage: mnist_amp_test.sh MNIST_DDP DATA_DIR CASE
set -uo pipefail
BIN=$1 DATA=$2 CASE=$3
WORK=$(mktemp -d /tmp/mnist_amp_test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"  # fail, expect_rc, expect_error
# The last epoch's test accuracy in the JSON log $1 is at least $2.
expect_acc() {
  local acc
  acc=$(grep -o '"test_accuracy":[0-9.]*' "$1" | tail -1 | cut -d: -f2)
  awk -v a="$acc" -v m="$2" 'BEGIN { exit !(a >= m) }' || { cat "$WORK/out" >&2; fail "test accuracy $acc% < $2%"; }
  echo "test accuracy $acc%"
}
json_field() { grep -o "\"$2\":[0-9.e+-]*" "$1" | tail -1 | cut -d: -f2; }
COMMON=(--data "$DATA" --threads 2 --workers 1 --quiet)

case $CASE in
bf16)  # autocast bf16 (no scaler) reaches 97% in 3 epochs
  expect_rc 0 "${COMMON[@]}" --epochs 3 --amp bf16 --log-json "$WORK/m.jsonl"
  cat "$WORK/out"
  expect_acc "$WORK/m.jsonl" 97.0
  grep -q "amp bf16 O1" "$WORK/out" || fail "the summary does not name amp bf16 O1"
  [ "$(json_field "$WORK/m.jsonl" skipped_steps)" = 0 ] || fail "bf16 skipped steps"
  ;;
fp16_recover)  # fp16 O1 from scale 1e10: the first steps overflow and are skipped, then trains
  expect_rc 0 "${COMMON[@]}" --epochs 3 --amp fp16 --init-scale 1e10 --log-json "$WORK/m.jsonl"
  cat "$WORK/out"
  skipped=$(json_field "$WORK/m.jsonl" skipped_steps)
  scale=$(json_field "$WORK/m.jsonl" loss_scale)
  echo "skipped steps: $skipped, final scale $scale"
  awk -v s="$skipped" 'BEGIN { exit !(s >= 5) }' || fail "expected overflow skips from 1e10, got $skipped"
  awk -v s="$scale" 'BEGIN { exit !(s < 1e10) }' || fail "the scale did not back off: $scale"
  grep -q "skipped" "$WORK/out" || fail "the summary does not report skipped steps"
  expect_acc "$WORK/m.jsonl" 97.0
  ;;
o2)  # half model + fp32 master weights trains to 94% in one epoch; checkpoint holds the masters
  expect_rc 0 "${COMMON[@]}" --epochs 1 --amp fp16 --opt-level O2 --log-json "$WORK/m.jsonl" \
    --checkpoint-dir "$WORK/ck"
  cat "$WORK/out"
  expect_acc "$WORK/m.jsonl" 94.0
  grep -q "amp fp16 O2" "$WORK/out" || fail "the summary does not name O2"
  python3 - "$WORK/ck/checkpoint-epoch-1.safetensors" <<'PY' || fail "checkpoint: masters not fp32 / model not f16"
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
masters = [k for k in h if k.startswith("amp.master.")]
assert masters and all(h[k]["dtype"] == "F32" for k in masters), masters
assert h["model.fc1.weight"]["dtype"] == "F16", h["model.fc1.weight"]
assert "amp.scaler.scale" in h, sorted(h)
PY
  ;;
o0_bitwise)  # O0 is the fp32 run, bit for bit
  SHORT=(--epochs 1 --max-steps 15 --test-batch-size 500 --seed 3)
  expect_rc 0 "${COMMON[@]}" "${SHORT[@]}" --checkpoint-dir "$WORK/a"
  expect_rc 0 "${COMMON[@]}" "${SHORT[@]}" --checkpoint-dir "$WORK/b" --amp fp16 --opt-level O0
  python3 - "$WORK/a/checkpoint-epoch-1.safetensors" "$WORK/b/checkpoint-epoch-1.safetensors" <<'PY' || fail "O0 differs from fp32"
import json, struct, sys
def load(p):
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n)); d = f.read()
    return {k: d[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}
a, b = load(sys.argv[1]), load(sys.argv[2])
for k in a:
    if k.startswith(("model.", "optimizer.")):
        assert a[k] == b[k], k
print("O0 == fp32 on", sum(k.startswith("model.") for k in a), "model tensors")
PY
  ;;
ddp_fp16_resume)  # 2 ranks, fp16 O1: 2 epochs straight vs 1 + resume, bitwise (scale included)
  SHORT=(-n 2 --max-steps 6 --test-batch-size 500 --seed 11 --scheduler step --amp fp16 --init-scale 1e6)
  expect_rc 0 "${COMMON[@]}" "${SHORT[@]}" --epochs 2 --checkpoint-dir "$WORK/a"
  expect_rc 0 "${COMMON[@]}" "${SHORT[@]}" --epochs 1 --checkpoint-dir "$WORK/b"
  expect_rc 0 "${COMMON[@]}" "${SHORT[@]}" --epochs 2 --checkpoint-dir "$WORK/b" --resume "$WORK/b"
  cmp "$WORK/a/checkpoint-epoch-2.safetensors" "$WORK/b/checkpoint-epoch-2.safetensors" ||
    fail "resumed 2-rank fp16 run differs from the uninterrupted one"
  ;;
resume_without_amp)  # an fp32 checkpoint resumes into an AMP run: fresh scaler, one warning
  SHORT=(--max-steps 6 --test-batch-size 500 --seed 2 --scheduler step)
  expect_rc 0 "${COMMON[@]}" "${SHORT[@]}" --epochs 1 --checkpoint-dir "$WORK/c"
  expect_rc 0 "${COMMON[@]}" "${SHORT[@]}" --epochs 2 --amp fp16 --resume "$WORK/c"
  [ "$(grep -c "has no AMP state" "$WORK/err")" -eq 1 ] || { cat "$WORK/err" >&2; fail "expected one warning"; }
  ;;
dp)  # DataParallel replicas inherit autocast; fp16 O2 through DP trains
  for args in "--amp bf16" "--amp fp16 --opt-level O2"; do
    expect_rc 0 "${COMMON[@]}" --mode dp --dp-devices 2 --epochs 1 --max-steps 40 \
      --test-batch-size 500 $args
    grep -q "dp, 2 replica(s)" "$WORK/out" || { cat "$WORK/out" >&2; fail "no dp layout: $args"; }
    acc=$(grep -o 'test accuracy [0-9.]*' "$WORK/out" | grep -o '[0-9.]*$')
    awk -v a="$acc" 'BEGIN { exit !(a >= 80.0) }' || fail "dp $args: accuracy $acc% < 80% after 40 steps"
    echo "dp $args: $acc%"
  done
  ;;
errors)
  expect_rc 0 --help
  for flag in --amp --opt-level --init-scale; do
    grep -q -- "$flag" "$WORK/out" || fail "--help does not document $flag"
  done
  expect_error 2 "amp" "${COMMON[@]}" --amp fp8
  expect_error 2 "opt-level" "${COMMON[@]}" --amp fp16 --opt-level O4
  expect_error 2 "needs --amp" "${COMMON[@]}" --opt-level O2
  expect_error 2 "init-scale" "${COMMON[@]}" --amp fp16 --init-scale -1
  ;;
*) fail "unknown case $CASE" ;;
esac
echo "PASS: mnist_ddp --amp $CASE"
