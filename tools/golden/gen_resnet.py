#!/usr/bin/python3
"""torchvision 0.14's ResNets as goldens for nn/models/resnet.h (tests/test_resnet_models.cpp):
tests/data/golden_resnet.json holds, for resnet18/34/50, every state_dict key with its shape (in
state_dict order), the named_modules (name, class) and the parameter count; and the logits of
resnet18 (eval and train mode) and resnet50 (eval mode) on a fixed input, with weights filled by
a formula that the C++ test reproduces (real weights are 45-100 MB):

  the k-th state_dict key (0-based, state_dict order), element i (0-based, row-major):
    s = 2 * u - 1, u = (h >> 11) * 2^-53 in [0, 1), h = splitmix64-style hash of (i, k) in uint64
    (wrapping): h = (i + 1) * 0x9E3779B97F4A7C15 + k * 0xBF58476D1CE4E5B9; h ^= h >> 31;
    h *= 0x94D049BB133111EB; h ^= h >> 29
    weight with >= 2 dims (conv, fc):  2 * s / sqrt(fan_in)     fan_in = numel / shape[0]
    1-D weight (BatchNorm):            1 + 0.25 * s
    bias (BatchNorm, fc):              0.1 * s
    running_mean:                      0.1 * s
    running_var:                       1 + 0.5 * |s|
    num_batches_tracked:               0
  computed in float64 (s is exact), then cast to float32 (int64 for num_batches_tracked);
  input x:[2,3,64,64], x[i] = sin(0.013 * i) (float64, cast to float32).
  (A hash, not sin(a*i + b*k): sines linear in i make every conv's output channels combinations
  of two filters, and train-mode BatchNorm then amplifies float32 rounding to ~1e-4.)

The train-mode forward of resnet18 (batch statistics) also updates the running statistics: their
values after it are stored for bn1 and layer4.1.bn2.

Run: /usr/bin/python3 tools/golden/gen_resnet.py   (torch 1.13, torchvision 0.14.1, numpy)
"""
import copy
import json
import math
import os

import numpy as np
import torch
import torchvision

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "golden_resnet.json")


def hashed_uniform(k, n):
    """s in [-1, 1) for elements 0..n-1 of the k-th entry (see the header)."""
    with np.errstate(over="ignore"):
        h = np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        h += np.uint64(k) * np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(31)
        h *= np.uint64(0x94D049BB133111EB)
        h ^= h >> np.uint64(29)
    return 2 * ((h >> np.uint64(11)).astype(np.float64) * 2.0**-53) - 1


def formula(k, name, shape):
    n = int(np.prod(shape)) if len(shape) else 1
    if name.endswith("num_batches_tracked"):
        return torch.zeros(shape, dtype=torch.int64)
    s = hashed_uniform(k, n)
    if name.endswith("running_mean"):
        v = 0.1 * s
    elif name.endswith("running_var"):
        v = 1 + 0.5 * np.abs(s)
    elif name.endswith("bias"):
        v = 0.1 * s
    elif len(shape) >= 2:
        v = 2 * s / math.sqrt(n // shape[0])
    else:
        v = 1 + 0.25 * s
    return torch.from_numpy(v.astype(np.float32)).reshape(shape)


def fill(model):
    sd = model.state_dict()
    model.load_state_dict({name: formula(k, name, list(t.shape)) for k, (name, t) in enumerate(sd.items())})


def tensor_json(t):
    return {"shape": list(t.shape), "data": [float(v) for v in t.detach().double().flatten()]}


def check_spread(name, logits):
    """Not degenerate: logits spread across classes, and the two samples differ."""
    std = logits.double().std(dim=1)  # across classes, per sample
    apart = (logits[0] - logits[1]).abs().max() / logits.abs().max()
    print(f"{name}: logits max |.| {logits.abs().max():.4g}, std across classes {std.tolist()}, "
          f"samples apart {apart:.3g}")
    assert torch.isfinite(logits).all() and std.min() > 1e-1 and apart > 1e-1, name


def check_conditioning(name, model, x, y):
    """float32 vs float64 on the same weights: how much rounding the C++ side may see."""
    m64 = copy.deepcopy(model).double()
    rel = ((y.double() - m64(x.double())).abs().max() / y.abs().max()).item()
    print(f"{name}: float32 vs float64 relative {rel:.2e}")
    assert rel < 1e-5, name


def main():
    torch.manual_seed(0)
    x = torch.sin(0.013 * torch.arange(2 * 3 * 64 * 64, dtype=torch.float64)).float().view(2, 3, 64, 64)
    out = {"formula": __doc__.split("\n\n")[1].strip(), "input_shape": [2, 3, 64, 64], "models": {}}
    for arch in ("resnet18", "resnet34", "resnet50"):
        m = getattr(torchvision.models, arch)()
        out["models"][arch] = {
            "state_dict": [[k, list(v.shape)] for k, v in m.state_dict().items()],
            "modules": [[k, type(v).__name__] for k, v in m.named_modules()],
            "num_parameters": sum(p.numel() for p in m.parameters()),
        }
    with torch.no_grad():
        for arch in ("resnet18", "resnet50"):
            m = getattr(torchvision.models, arch)()
            fill(m)
            m.eval()
            y = m(x)
            check_spread(arch + " eval", y)
            check_conditioning(arch + " eval", m, x, y)
            out["models"][arch]["logits_eval"] = tensor_json(y)
        m = torchvision.models.resnet18()
        fill(m)
        m.train()
        m64 = copy.deepcopy(m)  # before the forward updates the running statistics
        y = m(x)
        check_spread("resnet18 train", y)
        check_conditioning("resnet18 train", m64, x, y)
        r = out["models"]["resnet18"]
        r["logits_train"] = tensor_json(y)
        r["after_train"] = {k: tensor_json(m.state_dict()[k]) for k in (
            "bn1.running_mean", "bn1.running_var", "layer4.1.bn2.running_mean", "layer4.1.bn2.running_var")}
    with open(OUT, "w") as f:
        json.dump(out, f, separators=(",", ":"))
    print("wrote", OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
