#!/usr/bin/env python3
# PyTorch reference for bench_cuda_step and bench_cuda_kernels: the same MNIST-CNN training step
# (Net of apps/mnist/model.h, nll_loss on log_softmax, AdamW lr 2e-3) with data on the GPU,
# eager and with torch.cuda.graphs, at batch 64 and 512; with --kernels also bf16 GEMM and the
# memory-bound kernels on the shapes bench_cuda_kernels uses. One JSON line per configuration.
# Usage: python3 bench/gpu/torch_mnist_step.py [--steps 50] [--rounds 7] [--warmup 5] [--kernels]
import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):  # x:[B,1,28,28] -> log-probabilities [B,10]
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        h = F.relu(self.conv1(x))
        h = F.relu(self.conv2(h))
        h = self.dropout1(F.max_pool2d(h, 2)).flatten(1)
        h = F.relu(self.fc1(h))
        return F.log_softmax(self.fc2(self.dropout2(h)), dim=1)


def emit(**kw):
    print(json.dumps(kw), flush=True)


def time_rounds(fn, steps, rounds):
    """Median over rounds of the mean ms per call; rounds bracketed by synchronize."""
    per_round = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
        per_round.append((time.perf_counter() - t0) * 1e3 / steps)
    return statistics.median(per_round)


def bench_step(batch, graph, args, dev):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(1)
    model = Net().to(dev).train()
    # capturable=True keeps step counts and lr on the device, as minidl's fused step does.
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.0, capturable=graph)
    xs = [torch.randn(batch, 1, 28, 28, device=dev) for _ in range(4)]
    ys = [torch.randint(0, 10, (batch,), device=dev) for _ in range(4)]
    loss_sum = torch.zeros((), dtype=torch.float64, device=dev)
    k = [0]

    def eager_step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = F.nll_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    if not graph:
        def one():
            i = k[0] % 4
            loss_sum.add_(eager_step(xs[i], ys[i]).detach().double())
            k[0] += 1
        for _ in range(args.warmup + 2):
            one()
    else:
        static_x, static_y = xs[0].clone(), ys[0].clone()
        side = torch.cuda.Stream()  # warm-up on a side stream, as the torch docs do
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for i in range(args.warmup):
                loss_sum.add_(eager_step(xs[i % 4], ys[i % 4]).detach().double())
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(g):
            static_loss = F.nll_loss(model(static_x), static_y)
            static_loss.backward()
            opt.step()
            loss_sum.add_(static_loss.detach().double())
        k[0] = args.warmup

        def one():
            i = k[0] % 4
            static_x.copy_(xs[i])
            static_y.copy_(ys[i])
            g.replay()
            k[0] += 1
        for _ in range(2):
            one()
    torch.cuda.synchronize()
    ms = time_rounds(one, args.steps, args.rounds)
    emit(bench="mnist_step", impl=f"torch {torch.__version__}",
         mode="cuda_graph" if graph else "eager", batch=batch, ms_per_step=round(ms, 4),
         samples_per_s=round(batch / (ms * 1e-3)), peak_mib=round(
             torch.cuda.max_memory_allocated() / 2**20, 1),
         mean_loss=round(loss_sum.item() / k[0], 4), steps=args.steps, rounds=args.rounds,
         tf32=args.tf32, device=torch.cuda.get_device_name(dev))


def time_events(fn, reps, iters):
    """Median ms per call over reps blocks of iters calls, cudaEvent timing."""
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(iters):
            fn()
        e1.record()
        e1.synchronize()
        out.append(e0.elapsed_time(e1) / iters)
    return statistics.median(out)


def bench_sdpa(args, dev, B=12, H=12, T=1024, hd=64):
    """Causal SDPA in bf16 at GPT-2's shape, as bench_cuda_kernels' bench_sdpa."""
    q, k, v = (torch.randn(B, H, T, hd, device=dev).bfloat16().requires_grad_()
               for _ in range(3))
    g = torch.randn(B, H, T, hd, device=dev).bfloat16()

    def fwd():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def fwd_bwd():
        (F.scaled_dot_product_attention(q, k, v, is_causal=True) * g).sum().backward()

    iters = max(1, args.iters // 4)
    fwd_ms = time_events(fwd, args.reps, iters)
    fwd_bwd_ms = time_events(fwd_bwd, args.reps, iters)
    fwd_flops = 4.0 * B * H * T * T / 2 * hd
    emit(bench="sdpa", impl=f"torch {torch.__version__}", dtype="bf16", B=B, H=H, T=T, hd=hd,
         causal=True, fwd_ms=round(fwd_ms, 4), fwd_bwd_ms=round(fwd_bwd_ms, 4),
         fwd_tflops=round(fwd_flops / fwd_ms * 1e-9, 1),
         fwd_bwd_tflops=round(3.5 * fwd_flops / fwd_bwd_ms * 1e-9, 1))


def bench_classifier(args, dev, N=8 * 1024, V=50257, Vp=50304):
    """The classifier + loss as bench_cuda_kernels' bench_classifier: bf16 logits [N, Vp], the
    loss over the first V columns in f32 (nanoGPT's path under autocast), forward + backward."""
    logits = torch.randn(N, Vp, device=dev).bfloat16().requires_grad_()
    target = torch.randint(0, V, (N,), device=dev)

    def fwd_bwd():
        logits.grad = None
        F.cross_entropy(logits[:, :V].float(), target).backward()

    ms = time_events(fwd_bwd, args.reps, max(1, args.iters // 4))
    emit(bench="classifier_loss", impl=f"torch {torch.__version__}", dtype="bf16", N=N, V=V,
         Vp=Vp, ms=round(ms, 4))


def bench_gpt2_rows(args, dev):
    """bench_cuda_kernels' bench_gpt2_rows: LayerNorm on the bf16 residual stream [12*1024, 768]
    (under autocast torch runs it in f32), the residual add + LayerNorm step, and one fused
    AdamW step over GPT-2 124M's parameter shapes."""
    R, C = 12 * 1024, 768
    x = torch.randn(R, C, device=dev).bfloat16().requires_grad_()
    w = torch.ones(C, device=dev, requires_grad=True)
    b = torch.zeros(C, device=dev, requires_grad=True)
    g = torch.randn(R, C, device=dev).bfloat16()

    def fwd():
        with torch.no_grad():
            F.layer_norm(x.float(), (C,), w, b)

    def fwd_bwd():
        F.layer_norm(x.float(), (C,), w, b).backward(g.float())

    ln_fwd = time_events(fwd, args.reps, args.iters)
    ln_fwd_bwd = time_events(fwd_bwd, args.reps, args.iters)
    # A block's residual step under autocast: s = x + y (f32 stream, bf16 branch), the bf16
    # rows of layer_norm(s) for the next Linear; forward + backward from s's and the rows' grads.
    xs = torch.randn(R, C, device=dev, requires_grad=True)
    gs = torch.randn(R, C, device=dev)

    def residual_step():
        for t in (x, xs, w, b):
            t.grad = None
        s = xs + x
        n = F.layer_norm(s, (C,), w, b).bfloat16()
        torch.autograd.backward([s, n], [gs, g])

    res_ln = time_events(residual_step, args.reps, args.iters)
    shapes = [(50304, 768), (1024, 768)]
    for _ in range(12):
        shapes += [(768,), (768,), (2304, 768), (2304,), (768, 768), (768,), (768,), (768,),
                   (3072, 768), (3072,), (768, 3072), (768,)]
    shapes += [(768,), (768,)]
    ps = []
    for sh in shapes:
        p = torch.randn(*sh, device=dev, requires_grad=True)
        p.grad = torch.randn(*sh, device=dev)
        ps.append(p)
    opt = torch.optim.AdamW(ps, lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                            fused=True)
    adam = time_events(opt.step, args.reps, max(1, args.iters // 4))
    emit(bench="gpt2_rows", impl=f"torch {torch.__version__}", ln_fwd_ms=round(ln_fwd, 4),
         ln_fwd_bwd_ms=round(ln_fwd_bwd, 4), res_ln_ms=round(res_ln, 4), adamw_params=sum(p.numel() for p in ps),
         adamw_tensors=len(ps), adamw_ms=round(adam, 4))


def bench_kernels(args, dev):
    for m, n, k, iters in [(8192, 8192, 8192, 5), (8192, 3072, 768, args.iters),
                           (8192, 768, 3072, args.iters)]:
        a = torch.randn(m, k, device=dev).bfloat16()
        b = torch.randn(k, n, device=dev).bfloat16()
        ms = time_events(lambda: torch.matmul(a, b), args.reps, iters)
        emit(bench="gemm", impl=f"torch {torch.__version__}", dtype="bf16", M=m, N=n, K=k,
             ms=round(ms, 4), tflops=round(2 * m * n * k / ms * 1e-9, 1))
    n = args.mb * 2**20 // 4
    nbytes = n * 4
    src, other = torch.randn(n, device=dev), torch.randn(n, device=dev)
    dst = torch.empty_like(src)
    copy_ms = time_events(lambda: dst.copy_(src), args.reps, args.iters)
    emit(bench="membw", impl=f"torch {torch.__version__}", kernel="copy_",
         gbps=round(2 * nbytes / (copy_ms * 1e-3) * 1e-9, 1))
    rows = n // 1024
    x = src.view(rows, 1024)
    w, bias = torch.ones(1024, device=dev), torch.zeros(1024, device=dev)
    p = torch.randn(n, device=dev, requires_grad=True)
    p.grad = torch.randn(n, device=dev)
    opt = torch.optim.AdamW([p], lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                            fused=True)
    cases = [("add", 3 * nbytes, lambda: torch.add(src, other)),
             ("layer_norm", 2 * nbytes + rows * 8,
              lambda: F.layer_norm(x, (1024,), w, bias)),
             ("softmax", 2 * nbytes, lambda: torch.softmax(x, -1)),
             ("adamw_step", 7 * nbytes, opt.step)]
    bench_sdpa(args, dev)
    bench_classifier(args, dev)
    bench_gpt2_rows(args, dev)
    with torch.no_grad():
        for name, moved, fn in cases:
            ms = time_events(fn, args.reps, args.iters)
            emit(bench="membw", impl=f"torch {torch.__version__}", kernel=name,
                 ms=round(ms, 4), gbps=round(moved / (ms * 1e-3) * 1e-9, 1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--mb", type=int, default=64)
    ap.add_argument("--tf32", action="store_true")
    ap.add_argument("--kernels", action="store_true", help="also the kernel references")
    args = ap.parse_args()
    dev = torch.device("cuda", 0)
    # minidl's default: no TF32 (torch enables it for cuDNN convolutions by default).
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    # Both sides time cuDNN's algorithms once per shape (bench_cuda_step sets minidl's
    # cuda::set_cudnn_benchmark(true)); the default, heuristics only, may pick others.
    torch.backends.cudnn.benchmark = True
    for batch in (64, 512):
        for graph in (False, True):
            bench_step(batch, graph, args, dev)
    if args.kernels:
        bench_kernels(args, dev)


if __name__ == "__main__":
    main()
