#!/usr/bin/python3
# PyTorch reference for bench_amp: the same MNIST CNN step (batch 64, AdamW, log_softmax +
# nll_loss) in fp32 or under torch.autocast('cpu', torch.bfloat16).
# Usage: /usr/bin/python3 bench/bench_amp_torch.py --dtype fp32|bf16 [--threads 2] [--rounds 5] [--steps 20]
import argparse
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--dtype", choices=["fp32", "bf16"], required=True)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--steps", type=int, default=20)
args = ap.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(0)


class Net(nn.Module):  # PyTorch's examples/mnist Net, as apps/mnist/model.h
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 32, 3, 1), nn.Conv2d(32, 64, 3, 1)
        self.dropout1, self.dropout2 = nn.Dropout(0.25), nn.Dropout(0.5)
        self.fc1, self.fc2 = nn.Linear(9216, 128), nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        x = F.relu(self.fc1(torch.flatten(self.dropout1(x), 1)))
        return F.log_softmax(self.fc2(self.dropout2(x)), dim=1)


model = Net().train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))


def step():
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.dtype == "bf16"):
        loss = F.nll_loss(model(x), y)
    loss.backward()
    opt.step()


for _ in range(3):
    step()
per_round = []
for _ in range(args.rounds):
    s = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        s.append(time.perf_counter() - t0)
    per_round.append(statistics.median(s) * 1e3)
print(f"| PyTorch {torch.__version__} | {args.dtype} | {args.threads} | {statistics.median(per_round):.2f} | — |")
