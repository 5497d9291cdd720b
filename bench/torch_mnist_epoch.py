#!/usr/bin/python3
# PyTorch reference for one `mnist_ddp --epochs 1` run, as a whole process: the same Net,
# data (the IDX files in data/mnist: 8,000 train / 2,000 test digits), normalisation, batch 64,
# AdamW lr 2e-3, shuffled training epoch, then evaluation at batch 1000. --amp bf16 runs the
# forward under torch.autocast('cpu', torch.bfloat16). Under torchrun (WORLD_SIZE > 1) it is
# DDP over gloo like `mnist_ddp -n N`: each rank takes every N-th sample of the shuffled epoch,
# batch 64 per rank. Prints a one-line summary (rank 0).
# Usage: PYTHON bench/torch_mnist_epoch.py [--data data/mnist] [--amp off|bf16] [--threads 2]
#        PYTHON -m torch.distributed.run --nproc-per-node 2 bench/torch_mnist_epoch.py --threads 1
import argparse
import gzip
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--data", default="data/mnist")
ap.add_argument("--amp", choices=["off", "bf16"], default="off")
ap.add_argument("--threads", type=int, default=2)
args = ap.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(1)
t0 = time.perf_counter()


def idx(name):
    path = os.path.join(args.data, name)
    opener = gzip.open if not os.path.exists(path) else open
    with opener(path if os.path.exists(path) else path + ".gz", "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def images(name):
    x = torch.from_numpy(idx(name).astype(np.float32) / 255.0).unsqueeze(1)
    return (x - 0.1307) / 0.3081


xtr, ytr = images("train-images-idx3-ubyte"), torch.from_numpy(idx("train-labels-idx1-ubyte").astype(np.int64))
xte, yte = images("t10k-images-idx3-ubyte"), torch.from_numpy(idx("t10k-labels-idx1-ubyte").astype(np.int64))


class Net(nn.Module):  # PyTorch's examples/mnist Net = apps/mnist/model.h
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 32, 3, 1), nn.Conv2d(32, 64, 3, 1)
        self.dropout1, self.dropout2 = nn.Dropout(0.25), nn.Dropout(0.5)
        self.fc1, self.fc2 = nn.Linear(9216, 128), nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        x = F.relu(self.fc1(torch.flatten(self.dropout1(x), 1)))
        return F.log_softmax(self.fc2(self.dropout2(x)), dim=1)


world = int(os.environ.get("WORLD_SIZE", "1"))
rank = int(os.environ.get("RANK", "0"))
model = Net()
if world > 1:
    import torch.distributed as dist
    if int(torch.__version__.split(".")[0]) >= 2:
        # torch 2.x: the classic TCPStore client (Debian's torch 2.6 is built without libuv,
        # the 2.x default, also for the client of torchrun's agent store)
        import importlib

        rendezvous = importlib.import_module("torch.distributed.rendezvous")  # the module

        class ClassicStore(rendezvous.TCPStore):
            def __init__(self, *a, **k):
                k.setdefault("use_libuv", False)
                super().__init__(*a, **k)

        rendezvous.TCPStore = ClassicStore
    dist.init_process_group("gloo")
    model = nn.parallel.DistributedDataParallel(model)
opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
bf16 = args.amp == "bf16"
model.train()
perm = torch.randperm(len(xtr))[rank::world]
for i in range(0, len(perm), 64):
    b = perm[i:i + 64]
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = F.nll_loss(model(xtr[b]), ytr[b])
    loss.backward()
    opt.step()
model.eval()
correct, loss_sum = 0, 0.0
with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
    for i in range(0, len(xte), 1000):
        out = model(xte[i:i + 1000]).float()
        loss_sum += F.nll_loss(out, yte[i:i + 1000], reduction="sum").item()
        correct += (out.argmax(1) == yte[i:i + 1000]).sum().item()
if rank == 0:
    print(f"torch {torch.__version__} amp={args.amp} world={world}: test accuracy {100.0 * correct / len(xte):.2f}%, "
          f"test loss {loss_sum / len(xte):.4f}, {time.perf_counter() - t0:.1f} s")
