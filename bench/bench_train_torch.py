#!/usr/bin/python3
# PyTorch reference for bench_train: the same MNIST-CNN training step (batch 64, SGD momentum)
# and the per-op overhead of torch.add / torch.relu on 1-element tensors (includes Python).
# Usage: /usr/bin/python3 bench/bench_train_torch.py [--threads 2] [--rounds 5] [--steps 20]
import argparse
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--steps", type=int, default=20)
args = ap.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(0)

model = nn.Sequential(
    nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
    nn.Dropout(0.25), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Dropout(0.5),
    nn.Linear(128, 10))
model.train()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(64, 1, 28, 28)
y = torch.randint(0, 10, (64,))


def step():
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


for _ in range(3):  # warm-up
    step()
per_round = []
for _ in range(args.rounds):
    s = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        s.append(time.perf_counter() - t0)
    per_round.append(statistics.median(s))
ms = statistics.median(per_round) * 1e3


def ns_per_call(fn, rounds=7, n=20000):
    for _ in range(1000):
        fn()
    s = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        s.append((time.perf_counter() - t0) / n * 1e9)
    return statistics.median(s)


a, b = torch.ones(1), torch.ones(1)
ag, bg = torch.ones(1, requires_grad=True), torch.ones(1, requires_grad=True)
ns_add = ns_per_call(lambda: torch.add(a, b))
ns_add_grad = ns_per_call(lambda: torch.add(ag, bg))
ns_relu = ns_per_call(lambda: torch.relu(a))
print("| impl | threads | ms/step | add ns (no grad) | add ns (requires_grad) | relu ns |")
print("|---|---|---|---|---|---|")
print(f"| PyTorch {torch.__version__} (from Python) | {args.threads} | {ms:.2f} | {ns_add:.0f} | "
      f"{ns_add_grad:.0f} | {ns_relu:.0f} |")
