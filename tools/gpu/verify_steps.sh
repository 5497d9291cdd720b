# Sourced by tools/gpu/verify.sh (same shell, same variables) before its dry run, so that the dry
# run parses it: the GPU run's steps, step_1 ... step_8, and their helpers. Definitions only; the
# steps run from verify.sh's loop over --steps.
# Runs each cuda* suite as its own process, 8 at a time (a crash loses one suite, not all), until
# a deadline: a suite gets at most SECONDS and never runs past DEADLINE (a suite not started
# before it is recorded as a timeout, rc 124).
# suites_parallel LOGPREFIX SECONDS DEADLINE [WRAPPER...]: writes LOGPREFIX-<suite>.log and .rc.
# shellcheck disable=SC2016  # the inner bash expands its own arguments
suites_parallel() {
  local prefix=$1 seconds=$2 deadline=$3
  shift 3
  "$TESTS" --list-test-suites 2>/dev/null | grep -E '^cuda' |
    OMP_NUM_THREADS=$((NPROC / 8 > 0 ? NPROC / 8 : 1)) xargs -P 8 -I{} bash -c '
      log=$0-$4.log left=$(($2 - $(date +%s)))
      if ((left < 5)); then echo "not started: deadline reached" >"$log" && echo 124 >"$0-$4.rc" && exit; fi
      timeout -k 5 $((left < $1 ? left : $1)) "${@:5}" "$3" -ts="$4" >"$log" 2>&1
      echo $? >"$0-$4.rc"' "$LOG/$prefix" "$seconds" "$deadline" "$TESTS" {} "$@"
}
# suite_results LOGPREFIX: prints "ok/total suites ok" and the others with their status; returns 0
# when every suite passed.
suite_results() {
  local prefix=$1 total=0 ok=0 others=() rc f suite
  for f in "$LOG/$prefix"-*.rc; do
    [[ -f $f ]] || continue
    total=$((total + 1)) rc=$(cat "$f") suite=${f#"$LOG/$prefix"-}
    if [[ $rc == 0 ]]; then ok=$((ok + 1)); else others+=("${suite%.rc}: $(rc_word "$rc")"); fi
  done
  echo "$ok/$total suites ok${others:+; ${others[*]}}"
  ((total > 0 && ok == total))
}

step_1() {  # every cuda* suite
  local t lim
  t=$(now)
  lim=$(step_limit 90)
  ((lim)) || { add_row 1 "cuda* suites" SKIPPED 0 "no time left" && return; }
  suites_parallel 1-cuda 60 "$((t + lim))"
  local counts status res=FAIL
  counts=$(doctest_counts "$LOG"/1-cuda-*.log)
  status=$(suite_results 1-cuda) && res=PASS
  add_row 1 "cuda* suites (one process each)" "$res" $(($(now) - t)) "$counts; $status"
}

step_2() {  # the whole suite: every case, CPU and CUDA
  local t lim rc key
  t=$(now)
  lim=$(step_limit 120)
  ((lim)) || { add_row 2 "whole suite" SKIPPED 0 "no time left" && return; }
  # ctest runs the binary at its build path: only where that path leads to the pack's.
  if [[ -n $CTEST && $(realpath -m "$BUILD_DIR") == $(realpath "$P/build") ]]; then
    OMP_NUM_THREADS=2 run_logged 2-whole-suite "$lim" "$CTEST" --test-dir "$BUILD_DIR/tests" \
      -j "$NPROC" --timeout 100 --output-on-failure
    rc=$?
    key=$(grep -E 'tests passed|tests failed' "$LOG/2-whole-suite.log" | tail -1)
    key="ctest -j $NPROC: ${key:-no ctest summary}; $(grep -c '\*\*\*Skipped\|Not Run' "$LOG/2-whole-suite.log") not run/skipped"
  else
    OMP_NUM_THREADS=$NPROC run_logged 2-whole-suite "$lim" "$TESTS"
    rc=$?
    key="one process (no ctest): $(doctest_counts "$LOG/2-whole-suite.log")"
  fi
  add_row 2 "whole suite" "$(rc_word $rc)" $(($(now) - t)) "$(detail $rc 2-whole-suite "$key")"
}

# The test cases racecheck runs, one process each (in parallel): the kernels with shared memory.
RACECHECK_CASES=(
  'cuda_attention: fused CUDA matches*'
  'cuda reduce kernels match*'
  'cuda softmax kernels match*'
  'cuda autograd parity: layer_norm, batch_norm*'
  'cuda review: topk on rows longer*'
)
step_3() {  # compute-sanitizer: memcheck on every cuda* suite, racecheck on the shared-memory kernels
  local t lim
  t=$(now)
  [[ -n $SANITIZER ]] || { add_row 3 "compute-sanitizer" SKIPPED 0 "compute-sanitizer not found" && return; }
  lim=$(step_limit 130)
  ((lim > 60)) || { add_row 3 "compute-sanitizer" SKIPPED 0 "no time left" && return; }
  # API errors are not reported: minidl raises every failed CUDA call as an exception (the test
  # fails), and NCCL probes kernels with calls that fail by design (cudaFuncGetAttributes ->
  # cudaErrorNoKernelImageForDevice, 16 reports in the 2026-11-27 run).
  suites_parallel 3-memcheck "$((lim - 60))" "$((t + lim - 60))" "$SANITIZER" --tool memcheck \
    --report-api-errors no --error-exitcode 86 --print-limit 20
  local errors status res=FAIL i pids=()
  errors=$(cat "$LOG"/3-memcheck-*.log | awk '/ERROR SUMMARY:/ { n += $4 } END { print n + 0 }')
  status=$(suite_results 3-memcheck) && [[ $errors == 0 ]] && res=PASS
  add_row 3a "memcheck, cuda* suites" "$res" $(($(now) - t)) \
    "$errors memcheck error(s); $status (rc 86: errors found)"
  t=$(now)
  lim=$(step_limit 60)
  ((lim)) || { add_row 3b "racecheck" SKIPPED 0 "no time left" && return; }
  for i in "${!RACECHECK_CASES[@]}"; do
    (
      run_logged "3-racecheck-$i" "$lim" "$SANITIZER" --tool racecheck --error-exitcode 86 \
        --print-limit 20 "$TESTS" -tc="${RACECHECK_CASES[$i]}"
      echo $? >"$LOG/3-racecheck-$i.rc"
    ) &
    pids+=($!)
  done
  wait "${pids[@]}"
  errors=$(cat "$LOG"/3-racecheck-*.log | awk '/RACECHECK SUMMARY:/ { n += $4 } END { print n + 0 }')
  res=FAIL
  status=$(suite_results 3-racecheck) && [[ $errors == 0 ]] && res=PASS
  add_row 3b "racecheck: attention, reductions, softmax, norms, topk" "$res" $(($(now) - t)) \
    "$errors hazard(s); $(doctest_counts "$LOG"/3-racecheck-*.log); $status"
}

# mnist_run ROW NAME CMD...: one training run; its row gives the test accuracy. Bar: 97% after 3
# epochs (the same fp32 run on the CPU: 97.65%, Debian 12 host, 2026-11-27; 2 DDP ranks: 97.7-98%).
mnist_run() {
  local row=$1 name=$2 t lim rc acc res key
  t=$(now)
  shift 2
  lim=$(step_limit 45)
  ((lim)) || { add_row "$row" "mnist_ddp $name" SKIPPED 0 "no time left" && return; }
  run_logged "4-$name" "$lim" "$@"
  rc=$?
  acc=$(grep -o 'test accuracy [0-9.]*' "$LOG/4-$name.log" | tail -1 | awk '{print $3}')
  res=$(rc_word $rc)
  [[ $res == PASS ]] && ! awk -v a="${acc:-0}" 'BEGIN { exit !(a >= 97.0) }' && res="FAIL (accuracy)"
  key="test accuracy ${acc:-n/a}% (bar 97; CPU fp32 97.65)$(grep -o ', [0-9]* train samples/s' "$LOG/4-$name.log" | tail -1)"
  add_row "$row" "mnist_ddp $name" "$res" $(($(now) - t)) "$(detail $rc "4-$name" "$key")"
}
step_4() {  # mnist_ddp on the GPU: precisions, CUDA graph, DDP (nccl, gloo), DataParallel; classify
  local common=(--device cuda --data "$DATA/mnist" --epochs 3 --seed 1)
  mnist_run 4a fp32 "$MNIST" "${common[@]}"
  mnist_run 4b amp-bf16 "$MNIST" "${common[@]}" --amp bf16
  mnist_run 4c amp-fp16 "$MNIST" "${common[@]}" --amp fp16
  mnist_run 4d cuda-graph "$MNIST" "${common[@]}" --cuda-graph
  mnist_run 4e ddp-nccl-1rank "$RUN" -n 1 --backend nccl "$MNIST" "${common[@]}" --backend nccl
  mnist_run 4f ddp-gloo-2ranks "$MNIST" "${common[@]}" -n 2 --backend gloo
  mnist_run 4g dp-1gpu "$MNIST" "${common[@]}" --mode dp
  local t lim rc key
  t=$(now)
  lim=$(step_limit 45)
  ((lim)) || { add_row 4h "minidl-compare" SKIPPED 0 "no time left" && return; }
  run_logged 4-compare "$lim" "$COMPARE" --model mnist-cnn --device cuda --modes single,dp,ddp \
    --devices 1 --steps 20 --warmup 3 --rounds 1 --data "$DATA/mnist"
  rc=$?
  key=$(grep -oE 'Loss check: [^(]*\(tolerance [^)]*\)|do not compute the same thing' "$LOG/4-compare.log" | head -1)
  add_row 4h "minidl-compare single/dp/ddp on cuda" "$(rc_word $rc)" $(($(now) - t)) \
    "$(detail $rc 4-compare "$key")"
  # classify: torchvision's ResNet-18 on the digits written as PNG class folders, one bf16 epoch
  # (the CPU's fp32 run: 93.45% after 1 epoch, 97.30% after 2; bar 90%).
  t=$(now)
  lim=$(step_limit 60)
  ((lim)) || { add_row 4i "classify resnet18" SKIPPED 0 "no time left" && return; }
  "$PREPARE" --idx "$DATA/mnist" --image-folder "$WORK/digits" >"$LOG/4-prepare.log" 2>&1
  run_logged 4-classify "$lim" "$CLASSIFY" --device cuda --data "$WORK/digits" --model resnet18 \
    --epochs 1 --amp bf16 --workers 4
  rc=$?
  local acc res
  acc=$(grep -o 'test accuracy [0-9.]*' "$LOG/4-classify.log" | tail -1 | awk '{print $3}')
  res=$(rc_word $rc)
  [[ $res == PASS ]] && ! awk -v a="${acc:-0}" 'BEGIN { exit !(a >= 90.0) }' && res="FAIL (accuracy)"
  key="test accuracy ${acc:-n/a}% (bar 90; CPU fp32 93.45)$(grep -o ', [0-9]* train images/s' "$LOG/4-classify.log" | tail -1)"
  add_row 4i "classify resnet18 bf16 on an ImageFolder" "$res" $(($(now) - t)) \
    "$(detail $rc 4-classify "$key")"
}

# gpt2_row LOG: "batch B, S ms/step, T tokens/s, MFU M%" from a gpt run's summary line.
gpt2_row() {
  awk '/^gpt: val loss/ {
    for (i = 1; i <= NF; ++i) {
      if ($(i + 1) == "tokens/s,") tok = $i
      if ($i == "step") ms = $(i + 1)
      if ($i == "MFU") mfu = $(i + 1)
    } }
    /^gpt: synthetic/ { match($0, /batch [0-9]+ x [0-9]+/); batch = substr($0, RSTART + 6, RLENGTH - 6) }
    END { if (tok != "") printf "gpt2-124m batch %s: %s ms/step, %s tokens/s, MFU %s", batch, ms, tok, mfu }' "$1"
}

# torch_row LOG: the same from bench/gpu/torch_gpt2_step.py's JSON line.
torch_row() {
  python3 - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for r in rows:
    print(f"{r['impl']} {r['mode']} gpt2-124m batch {r['batch']} x {r['seq_len']}: "
          f"{r['ms_per_step']} ms/step, {r['tokens_per_s']} tokens/s, MFU {100 * r['mfu']:.1f}%, "
          f"peak {r['peak_mib']} MiB", end="")
PY
}

step_5() {  # GPT-2 124M (bf16, synthetic tokens) against PyTorch's twin, its profile; small gpt
  local t lim rc
  t=$(now)
  lim=$(step_limit 60)
  ((lim)) || { add_row 5b "gpt2-124m bf16" SKIPPED 0 "no time left" && return; }
  run_logged 5-gpt2-124m-bf16 "$lim" "$GPT" --device cuda --data synthetic --preset gpt2-124m \
    --amp bf16 --batch-size 12 --max-iters 30 --warmup-iters 5 --eval-interval 1000 \
    --eval-iters 1 --log-interval 10
  rc=$?
  add_row 5b "gpt --preset gpt2-124m --data synthetic --amp bf16, 30 iterations" "$(rc_word $rc)" \
    $(($(now) - t)) "$(detail $rc 5-gpt2-124m-bf16 "$(gpt2_row "$LOG/5-gpt2-124m-bf16.log") (goal MFU >= 40%)")"
  # The same step captured whole in one CUDA graph after 3 eager steps (gpt --cuda-graph).
  t=$(now)
  lim=$(step_limit 50)
  if ((lim)); then
    run_logged 5-gpt2-124m-graph "$lim" "$GPT" --device cuda --data synthetic --preset gpt2-124m \
      --amp bf16 --batch-size 12 --max-iters 30 --warmup-iters 5 --eval-interval 1000 \
      --eval-iters 1 --log-interval 10 --cuda-graph
    rc=$?
    add_row 5h "the same with --cuda-graph (the whole step captured and replayed), 30 iterations" \
      "$(rc_word $rc)" $(($(now) - t)) \
      "$(detail $rc 5-gpt2-124m-graph "$(gpt2_row "$LOG/5-gpt2-124m-graph.log")")"
  else
    add_row 5h "gpt2-124m --cuda-graph" SKIPPED 0 "no time left"
  fi
  # Every fused path against its predecessor, one at a time, and all of them off (`all`, the
  # former row 5f), in ONE process (bench/bench_gpt_variants.cpp: MINIDL_UNFUSED per variant,
  # one JSON line each as it ends).
  t=$(now)
  lim=$(step_limit 75)
  if ((lim)); then
    run_logged 5-gpt2-124m-variants "$lim" "$P/build/bench/bench_gpt_variants" --device cuda \
      --amp bf16 --batch-size 12 --seq-len 1024 --steps 8 --warmup 2 --rounds 1 --peak-tflops 989
    rc=$?
    add_row 5g "gpt2-124m bf16 under each MINIDL_UNFUSED variant (bench_gpt_variants), 8 steps each" \
      "$(rc_word $rc)" $(($(now) - t)) "$(detail $rc 5-gpt2-124m-variants "$(sed -n \
        's/.*"unfused":"\([^"]*\)","ms_per_step":\([0-9.]*\),.*"mfu":\([-0-9.]*\),"dispatches":\([0-9-]*\).*/\1=\2ms(mfu \3, \4 disp)/p' \
        "$LOG/5-gpt2-124m-variants.log" | tr '\n' ' ')")"
  else
    add_row 5g "gpt2-124m variants" SKIPPED 0 "no time left"
  fi
  # PyTorch 2.x on the same GPU, the same model and recipe: eager, then torch.compile.
  local mode
  for mode in eager compile; do
    t=$(now)
    lim=$(step_limit 75)
    ((lim)) || { add_row "5e-$mode" "torch gpt2-124m $mode" SKIPPED 0 "no time left" && continue; }
    local flags=(--batch-size 12 --steps 20 --warmup 5)
    [[ $mode == compile ]] && flags+=(--compile)
    run_logged "5-torch-gpt2-$mode" "$lim" python3 "$ROOT/bench/gpu/torch_gpt2_step.py" "${flags[@]}"
    rc=$?
    add_row "5e-$mode" "PyTorch twin (bench/gpu/torch_gpt2_step.py), $mode" "$(rc_word $rc)" \
      $(($(now) - t)) "$(detail $rc "5-torch-gpt2-$mode" "$(torch_row "$LOG/5-torch-gpt2-$mode.log")")"
  done
  # Where the gpt2-124m step goes: the op profiler (MINIDL_PROFILE=1) times every op with CUDA
  # events; its table (ops by device time, host time beside) and the dispatch count end the log.
  t=$(now)
  lim=$(step_limit 40)
  if ((lim)); then
    MINIDL_PROFILE=1 run_logged 5-gpt2-124m-profile "$lim" "$GPT" --device cuda --data synthetic \
      --preset gpt2-124m --amp bf16 --batch-size 12 --max-iters 8 --eval-interval 1000 \
      --eval-iters 1
    rc=$?
    add_row 5d "gpt2-124m bf16, 8 iterations under the op profiler" "$(rc_word $rc)" \
      $(($(now) - t)) "$(detail $rc 5-gpt2-124m-profile "$(grep -o 'kernel dispatches per training step: [0-9]*' \
        "$LOG/5-gpt2-124m-profile.log"); $(grep -o 'host reads per training step: [0-9]*' \
        "$LOG/5-gpt2-124m-profile.log"); top ops by device ms: $(awk '
        /^op profile/ { on = 1; next } on && $1 != "op" && $1 != "total" && NF >= 6 && n < 4 {
          printf "%s%s %s ms", (n ? ", " : ""), $1, $5; n++ }
        /^total/ { printf "; total device %s ms, host %s ms", $4, $3 }' \
        "$LOG/5-gpt2-124m-profile.log")")"
  else
    add_row 5d "gpt2-124m profile" SKIPPED 0 "no time left"
  fi
  t=$(now)
  lim=$(step_limit 45)
  ((lim)) || { add_row 5a "gpt" SKIPPED 0 "no time left" && return; }
  run_logged 5-gpt "$lim" "$GPT" --device cuda --data "$DATA/moby-dick/data.txt" --max-iters 300 \
    --eval-interval 100 --eval-iters 10
  rc=$?
  # The same command on the CPU: val loss 2.4063 (Debian 12 host, 2026-11-27). Bar: 2.50.
  local val res
  val=$(grep -o 'gpt: val loss [0-9.]*' "$LOG/5-gpt.log" | awk '{print $4}')
  res=$(rc_word $rc)
  [[ $res == PASS ]] && ! awk -v v="${val:-9}" 'BEGIN { exit !(v <= 2.50) }' && res="FAIL (val loss)"
  add_row 5a "gpt --device cuda, 300 iterations" "$res" $(($(now) - t)) "$(detail $rc 5-gpt \
    "$(grep -o 'val loss [0-9.]*.*tokens/s[^(]*' "$LOG/5-gpt.log" | tail -1)(CPU: val loss 2.406; bar 2.50)")"
  t=$(now)
  lim=$(step_limit 30)
  ((lim)) || { add_row 5c "fused vs composite attention" SKIPPED 0 "no time left" && return; }
  run_logged 5-attention "$lim" "$TESTS" -ts=cuda_attention
  rc=$?
  add_row 5c "fused CUDA attention vs composite (cuda_attention)" "$(rc_word $rc)" $(($(now) - t)) \
    "$(detail $rc 5-attention "$(doctest_counts "$LOG/5-attention.log")")"
}

step_6() {  # PyTorch's torchrun launching mnist_ddp unchanged, 2 ranks sharing the GPU (gloo)
  local t lim rc args=(--device cuda --data "$DATA/mnist" --epochs 1 --backend gloo --dist-timeout 20)
  t=$(now)
  lim=$(step_limit 45)
  ((lim)) || { add_row 6a "torchrun" SKIPPED 0 "no time left" && return; }
  run_logged 6-torchrun "$lim" python3 -m torch.distributed.run --standalone --nproc-per-node 2 \
    --no-python "$MNIST" "${args[@]}"
  rc=$?
  add_row 6a "torchrun --nproc-per-node 2 mnist_ddp (agent store: fails until issue 30)" \
    "$(rc_word $rc)" $(($(now) - t)) "$(detail $rc 6-torchrun "$(grep -o 'test accuracy [0-9.]*' "$LOG/6-torchrun.log" | tail -1)")"
  t=$(now)
  lim=$(step_limit 45)
  ((lim)) || { add_row 6b "torchrun, shared store off" SKIPPED 0 "no time left" && return; }
  TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 run_logged 6-torchrun-own-store "$lim" python3 -m \
    torch.distributed.run --standalone --nproc-per-node 2 --no-python "$MNIST" "${args[@]}"
  rc=$?
  add_row 6b "the same with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" "$(rc_word $rc)" $(($(now) - t)) \
    "$(detail $rc 6-torchrun-own-store "$(grep -o 'test accuracy [0-9.]*' "$LOG/6-torchrun-own-store.log" | tail -1)")"
}

step_7() {  # safetensors both ways with safetensors.torch
  local t lim rc
  t=$(now)
  lim=$(step_limit 60)
  ((lim)) || { add_row 7 "safetensors" SKIPPED 0 "no time left" && return; }
  run_logged 7-safetensors "$lim" python3 "$ROOT/tools/gpu/safetensors_torch.py" "$LOGITS" \
    --device cuda --workdir "$WORK/safetensors"
  rc=$?
  add_row 7 "safetensors minidl <-> torch (MNIST CNN, GPT), logits" "$(rc_word $rc)" \
    $(($(now) - t)) "$(detail $rc 7-safetensors "$(grep '^safetensors_torch:' "$LOG/7-safetensors.log") (bar 1e-4)")"
}

step_8() {  # the GPU bench table against PyTorch on the same GPU
  local t lim rc mode=()
  t=$(now)
  lim=$(step_limit 150)
  ((lim > 30)) || { add_row 8 "bench/gpu/run_all.sh" SKIPPED 0 "no time left" && return; }
  ((lim < 120)) && mode=(--quick)
  BENCH_BIN=$P/build/bench OUT=$LOG/8-bench run_logged 8-bench "$lim" bash "$ROOT/bench/gpu/run_all.sh" "${mode[@]}"
  rc=$?
  [[ -f $LOG/8-bench/gpu-bench.md ]] && cp "$LOG/8-bench/gpu-bench.md" "$OUT_DIR/gpu-bench.md"
  local met unmet res
  met=$(grep -c '| yes |' "$LOG/8-bench/gpu-bench.md" 2>/dev/null)
  unmet=$(grep -c '| no |' "$LOG/8-bench/gpu-bench.md" 2>/dev/null)
  res=$(rc_word $rc)
  # run_all.sh goes on past a failed bench: a table without a single compared row is a failure.
  [[ $res == PASS ]] && ((${met:-0} + ${unmet:-0} == 0)) && res="FAIL (no numbers)" && rc=1
  add_row 8 "bench/gpu/run_all.sh ${mode[*]}" "$res" $(($(now) - t)) \
    "$(detail $rc 8-bench "targets met: ${met:-0}, not met: ${unmet:-0} (table in gpu-bench.md)")"
}
