# Golden training trajectories for tests/test_training_golden.cpp: an MLP and the classic MNIST CNN
# trained 20 steps (SGD momentum, AdamW) from closed-form initial weights and inputs (re-computed
# identically in C++), in f32 and f64. Run: /usr/bin/python3 tools/golden/gen_trajectories.py
import json
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

STEPS = 20
# Tensors with more than FULL_MAX elements are stored as a strided sample (stride 97, or 997 past
# 100k elements) plus their sum and sum of squares.
FULL_MAX = 4096


def unit(i, k):
    # A Weyl/Knuth multiplicative sequence in [0, 1): exact integer math, identical in C++.
    return ((i * 2654435761 + k * 97531 + 12345) % 4294967296) / 4294967296.0


def init_value(i, k, fan_in):
    # Element i of the k-th parameter (state_dict order): uniform(-1, 1)/sqrt(fan_in) like
    # PyTorch's default init; same formula in the C++ test.
    return (2.0 * unit(i, k) - 1.0) / math.sqrt(fan_in)


def input_value(i, step):
    return unit(i, 1000 + step)  # pixel-like values in [0, 1)


def label(i, step):
    return (step * 7 + i * 3) % 10


def make_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 10)), [16, 20]
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(),
                         nn.Linear(128, 10)), [8, 1, 28, 28]


def init_model(model, dtype):
    meta = []
    fan_in = 1
    with torch.no_grad():
        for k, (pname, p) in enumerate(model.named_parameters()):
            if p.dim() > 1:
                fan_in = p[0].numel()
            v = [init_value(i, k, fan_in) for i in range(p.numel())]
            p.copy_(torch.tensor(v, dtype=torch.float64).to(torch.float32).to(dtype).reshape(p.shape))
            meta.append({"name": pname, "shape": list(p.shape), "fan_in": fan_in})
    return meta


def batch(shape, step, dtype):
    n = math.prod(shape)
    x = torch.tensor([input_value(i, step) for i in range(n)], dtype=torch.float64)
    x = x.to(torch.float32).to(dtype).reshape(shape)
    y = torch.tensor([label(i, step) for i in range(shape[0])], dtype=torch.int64)
    return x, y


def summary(p):
    flat = p.detach().double().reshape(-1)
    if flat.numel() <= FULL_MAX:
        return {"data": flat.tolist(), "shape": list(p.shape)}
    stride = 97 if flat.numel() < 100000 else 997
    return {"sample": flat[::stride].tolist(), "stride": stride, "shape": list(p.shape),
            "sum": flat.sum().item(), "sumsq": (flat * flat).sum().item()}


def run(model_name, opt_name, dtype):
    torch.manual_seed(0)
    model, in_shape = make_model(model_name)
    model.to(dtype)
    meta = init_model(model, dtype)
    if opt_name == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = [batch(in_shape, s, dtype) for s in range(STEPS)]
    losses = []
    for s in range(STEPS):
        x, y = batches[s]
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return meta, {"losses": losses, "params": {n: summary(p) for n, p in model.named_parameters()}}


torch.set_num_threads(1)
out = {"steps": STEPS}
for model_name in ["mlp", "cnn"]:
    entry = {}
    for opt_name in ["sgd", "adamw"]:
        for dt_name, dt in [("f32", torch.float32), ("f64", torch.float64)]:
            meta, res = run(model_name, opt_name, dt)
            entry[opt_name + "_" + dt_name] = res
            print(model_name, opt_name, dt_name, " ".join(f"{v:.4f}" for v in res["losses"][::4]))
    entry["init"] = meta
    out[model_name] = entry

path = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "golden_traj.json")
with open(path, "w") as f:
    json.dump(out, f, separators=(",", ":"))
print("wrote", os.path.normpath(path), os.path.getsize(path), "bytes")
