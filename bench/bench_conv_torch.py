#!/usr/bin/python3
# PyTorch (1.13, Debian; its CPU conv is oneDNN) side of bench_conv's path table: conv2d forward,
# backward input and backward weight of the MNIST layers in f32 and bf16, ms per op.
# Usage: bench/bench_conv_torch.py [--threads 2] [--batch 64] [--rounds 3]
#   fp32 is fastest with OMP_WAIT_POLICY=PASSIVE OPENBLAS_NUM_THREADS=2, bf16 with the defaults
#   (bench/README.md); bench/conv_paths.sh runs both settings and minidl's bench_conv.
import argparse
import statistics
import time

import torch


def time_op(fn, target_s=0.3, rounds=3):
    fn()  # warm-up (primitive creation)
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-6)
    block = max(2, min(100, int(target_s / one)))
    meds = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(block):
            fn()
        meds.append((time.perf_counter() - t0) / block)
    return statistics.median(meds)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dtypes", default="f32,bf16")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    n = args.batch
    layers = [(f"conv1 x[{n},1,28,28] w[32,1,3,3]", (n, 1, 28, 28), (32, 1, 3, 3)),
              (f"conv2 x[{n},32,26,26] w[64,32,3,3]", (n, 32, 26, 26), (64, 32, 3, 3))]
    dtypes = {"f32": torch.float32, "bf16": torch.bfloat16}
    print(f"### PyTorch {torch.__version__} conv2d, batch {n}, {args.threads} threads, "
          f"mkldnn {torch.backends.mkldnn.is_available()}\n")
    print("| layer | op | dtype | ms |")
    print("|---|---|---|---:|")
    conv_bwd = torch.ops.aten.convolution_backward
    for name, xs, ws in layers:
        for dname in args.dtypes.split(","):
            dt = dtypes[dname]
            x = torch.randn(xs).to(dt)
            w = torch.randn(ws).to(dt)
            y = torch.nn.functional.conv2d(x, w)
            gy = torch.randn(y.shape).to(dt)
            common = ([0], [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
            ops = {
                "forward": lambda: torch.nn.functional.conv2d(x, w),
                "backward input": lambda: conv_bwd(gy, x, w, *common, [True, False, False]),
                "backward weight": lambda: conv_bwd(gy, x, w, *common, [False, True, False]),
            }
            with torch.no_grad():
                for op, fn in ops.items():
                    ms = time_op(fn, rounds=args.rounds) * 1e3
                    print(f"| {name} | {op} | {dname} | {ms:.3f} |", flush=True)


if __name__ == "__main__":
    main()
