# PyTorch's twin of bench_sdpa --shape: F.scaled_dot_product_attention forward + backward
# (causal) on the CPU, median ms per call, f32 and bf16.
# Usage: torch2 bench/torch_sdpa.py --shape 1,12,1024,64 [--threads 2] [--rounds 5]
import argparse
import statistics
import time

import torch
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--shape", default="1,12,1024,64")
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--rounds", type=int, default=5)
a = ap.parse_args()
torch.set_num_threads(a.threads)
B, H, T, E = (int(x) for x in a.shape.split(","))
print(f"torch {torch.__version__} F.scaled_dot_product_attention forward+backward, "
      f"{a.threads} threads (median ms per call)")
for dt in (torch.float32, torch.bfloat16):
    q0, k0, v0, g = (torch.randn(B, H, T, E).to(dt) for _ in range(4))

    def step():
        q, k, v = (t.detach().requires_grad_(True) for t in (q0, k0, v0))
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(g)

    step()
    block, t0 = 1, time.perf_counter()
    step()
    block = max(2, min(200, int(0.3 / max(time.perf_counter() - t0, 1e-6))))
    times = []
    for _ in range(a.rounds):
        t0 = time.perf_counter()
        for _ in range(block):
            step()
        times.append((time.perf_counter() - t0) / block)
    print(f"[{B},{H},{T},{E}] {str(dt).replace('torch.', ''):9s} causal {statistics.median(times) * 1e3:10.3f}")
