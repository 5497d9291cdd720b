#!/usr/bin/env bash
# End-to-end tests of mnist_ddp's DDP features on 2 self-launched ranks: --sync-bn converts
# resnet-mini's BatchNorm layers (summary line), --zero1 trains exactly like plain DDP, resumes
# bitwise and its checkpoint resumes plain DDP, --comm-hook bf16 halves the bytes per step,
# --comm-hook powersgd reaches 95% in 3 epochs; --fsdp full equals plain DDP and its 2-rank
# checkpoint resumes on 3 ranks; the flags outside DDP are one-line errors.
# Usage: ddp_features_test.sh MNIST_DDP DATA_DIR CASE
set -uo pipefail
BIN=$1 DATA=$2 CASE=$3
WORK=$(mktemp -d /tmp/ddp_features_test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"  # fail, expect_rc, expect_error
summary() { grep 'mnist_ddp: test accuracy' "$WORK/out" | tail -1; }
# The "N.NNN MB per step" of the summary's comm hook part.
mb_per_step() { summary | grep -o 'comm hook [^ ]* ([0-9.]* MB per step)' | grep -o '[0-9.]* MB' | cut -d' ' -f1; }
COMMON=(--data "$DATA" --threads 1 --workers 0 -n 2 --test-batch-size 500)
SHORT=(--epochs 1 --max-steps 10)

case $CASE in
sync_bn)  # resnet-mini's 6 BatchNorm2d -> SyncBatchNorm; the cnn has none (a note, no error)
  expect_rc 0 "${COMMON[@]}" "${SHORT[@]}" --model resnet-mini --sync-bn
  grep -q -- '--sync-bn: 6 BatchNorm layer(s) converted to SyncBatchNorm over 2 rank(s)' \
    "$WORK/out" || { cat "$WORK/out" >&2; fail "no conversion line"; }
  summary | grep -q '; sync-bn (6 layers)' || { summary >&2; fail "no sync-bn in the summary"; }
  expect_rc 0 "${COMMON[@]}" --epochs 1 --max-steps 2 --sync-bn
  grep -q 'the model has no BatchNorm layers; nothing was converted' "$WORK/out" ||
    { cat "$WORK/out" >&2; fail "no 'nothing was converted' note for the cnn"; }
  expect_error 2 'needs DDP' --data "$DATA" --sync-bn --mode single
  ;;
zero1)  # ZeRO-1 steps the same AdamW as plain DDP (same test loss) and resumes bitwise
  expect_rc 0 "${COMMON[@]}" --epochs 2 --max-steps 8 --seed 3 --scheduler step --quiet
  plain=$(summary | grep -o 'test loss [0-9.]*')
  expect_rc 0 "${COMMON[@]}" --epochs 2 --max-steps 8 --seed 3 --scheduler step --quiet --zero1 \
    --checkpoint-dir "$WORK/a"
  zero=$(summary | grep -o 'test loss [0-9.]*')
  summary | grep -q '; zero1 (rank 0 steps [0-9]*/8 parameters, optimizer state [0-9.]* MiB)' ||
    { summary >&2; fail "no zero1 part in the summary"; }
  [ -n "$plain" ] && [ "$plain" = "$zero" ] || fail "--zero1 $zero differs from plain DDP $plain"
  expect_rc 0 "${COMMON[@]}" --epochs 1 --max-steps 8 --seed 3 --scheduler step --quiet --zero1 \
    --checkpoint-dir "$WORK/b"
  expect_rc 0 "${COMMON[@]}" --epochs 2 --max-steps 8 --seed 3 --scheduler step --quiet --zero1 \
    --checkpoint-dir "$WORK/b" --resume "$WORK/b"
  cmp "$WORK/a/checkpoint-epoch-2.safetensors" "$WORK/b/checkpoint-epoch-2.safetensors" ||
    fail "the resumed --zero1 run differs from the uninterrupted one"
  # The consolidated checkpoint holds the plain optimizer's state: plain DDP resumes from it.
  expect_rc 0 "${COMMON[@]}" --epochs 3 --max-steps 8 --seed 3 --scheduler step --quiet \
    --checkpoint-dir "$WORK/a" --resume "$WORK/a"
  summary | grep -q '1 epoch(s)' || { summary >&2; fail "plain DDP did not resume --zero1's"; }
  expect_error 2 'needs DDP' --data "$DATA" --zero1
  ;;
comm_hook_bf16)  # bf16 compression: half of the cnn's 4.8 MB of f32 gradients per step
  expect_rc 0 "${COMMON[@]}" "${SHORT[@]}" --quiet --comm-hook bf16
  mb=$(mb_per_step)
  awk -v m="$mb" 'BEGIN { exit !(m > 2.2 && m < 2.6) }' ||
    { summary >&2; fail "bf16 sends ${mb:-?} MB per step, expected ~2.4"; }
  expect_error 2 "comm hook 'int8'" --data "$DATA" -n 2 --comm-hook int8
  expect_error 2 'needs DDP' --data "$DATA" --comm-hook bf16 --mode dp
  ;;
powersgd)  # rank-4 PowerSGD from step 10: 95% test accuracy in 3 epochs on 2 ranks
  expect_rc 0 "${COMMON[@]}" --epochs 3 --quiet --comm-hook powersgd:4:10
  summary
  acc=$(summary | grep -o 'test accuracy [0-9.]*' | cut -d' ' -f3)
  awk -v a="$acc" 'BEGIN { exit !(a >= 95.0) }' || fail "test accuracy ${acc:-?}% < 95%"
  mb=$(mb_per_step)
  awk -v m="$mb" 'BEGIN { exit !(m > 0 && m < 0.5) }' ||
    fail "PowerSGD sends ${mb:-?} MB per step, expected well under the 4.8 MB of plain DDP"
  ;;
fsdp)  # FULL_SHARD trains like plain DDP; 2 ranks' sharded checkpoint resumes on 3 ranks
  expect_rc 0 "${COMMON[@]}" --epochs 1 --max-steps 8 --seed 3 --quiet
  plain=$(summary | grep -o 'test loss [0-9.]*')
  expect_rc 0 "${COMMON[@]}" --epochs 1 --max-steps 8 --seed 3 --quiet --fsdp full
  sharded=$(summary | grep -o 'test loss [0-9.]*')
  [ -n "$plain" ] && [ "$plain" = "$sharded" ] || fail "--fsdp full $sharded differs from DDP $plain"
  summary | grep -q '; fsdp full (4 units; this rank holds parameters + gradients [0-9.]* MiB' ||
    { summary >&2; fail "no fsdp part in the summary"; }
  summary | grep -q '(fsdp full, 2 rank(s) (gloo), cpu)' || { summary >&2; fail "no fsdp layout"; }
  expect_rc 0 "${COMMON[@]}" --epochs 1 --quiet --fsdp full --checkpoint-dir "$WORK/c"
  [ -d "$WORK/c/checkpoint-epoch-1.safetensors.shards" ] || fail "no shard directory"
  expect_rc 0 --data "$DATA" --threads 1 --workers 0 -n 3 --test-batch-size 500 --epochs 2 \
    --quiet --fsdp full --checkpoint-dir "$WORK/c" --resume auto
  summary
  summary | grep -q '1 epoch(s)' || { summary >&2; fail "3 ranks did not resume epoch 1 of 2"; }
  acc=$(summary | grep -o 'test accuracy [0-9.]*' | cut -d' ' -f3)
  awk -v a="$acc" 'BEGIN { exit !(a >= 96.0) }' || fail "test accuracy ${acc:-?}% < 96%"
  [ -d "$WORK/c/checkpoint-epoch-2.safetensors.shards" ] &&
    [ ! -e "$WORK/c/checkpoint-epoch-1.safetensors.shards" ] ||
    fail "the older checkpoint's shards were not pruned"
  # Plain DDP is told what the file is.
  "$BIN" "${COMMON[@]}" --epochs 3 --quiet --checkpoint-dir "$WORK/c" --resume auto \
    >"$WORK/out" 2>"$WORK/err" && fail "plain DDP resumed an FSDP checkpoint"
  grep -q 'was written by an FSDP run (full' "$WORK/err" ||
    { cat "$WORK/err" >&2; fail "plain DDP's error does not name the FSDP checkpoint"; }
  expect_error 2 '--fsdp full replaces DDP: --zero1' --data "$DATA" -n 2 --fsdp full --zero1
  expect_error 2 'needs DDP (--mode ddp or auto), not --mode single' --data "$DATA" --mode single --fsdp full
  expect_error 2 'FSDP runs AMP as --amp bf16' --data "$DATA" -n 2 --fsdp full --amp fp16
  ;;
*) fail "unknown case $CASE" ;;
esac
echo "PASS $CASE"
