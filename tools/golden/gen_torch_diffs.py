#!/usr/bin/python3
"""Golden values for behaviours where minidl differed from PyTorch 1.13: clamp's type promotion
with scalar bounds, binary_cross_entropy_with_logits' gradient at a logit of 0, topk's
gradient, and the gradients of max/min/amax/amin/maximum/minimum with ties and NaN.

Run with Debian's torch:  /usr/bin/python3 tools/golden/gen_torch_diffs.py
Writes tests/data/golden_torch_diffs.json (every tensor is {"shape": [...], "dtype": "...",
"data": [row-major values]}, NaN written as null). Read by tests/test_torch_diffs.cpp.
"""
import json
import math
import os

import torch
import torch.nn.functional as F

torch.manual_seed(4321)
DT = torch.float64
NAN = float("nan")


def enc(t):
    t = t.detach()
    if t.is_floating_point():
        data = [None if math.isnan(v) else float("%.15g" % v) for v in t.reshape(-1).tolist()]
    else:
        data = [int(v) for v in t.reshape(-1).tolist()]
    return {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""), "data": data}


def bound(b):
    if b is None:
        return None
    return {"kind": "float" if isinstance(b, float) else "int", "value": b}


def clamp_cases():
    cases = []
    ints = [-3, 0, 1, 2, 3, 7]
    for dtype in (torch.int64, torch.int32, torch.uint8):
        vals = [abs(v) for v in ints] if dtype == torch.uint8 else ints
        x = torch.tensor(vals, dtype=dtype)
        for lo, hi in ((1.5, 2.5), (1, 2), (1, 2.5), (None, 1.5), (0.5, None), (2, None),
                       (None, 2), (3, 1.5), (-1.5, 300.0)):
            out = torch.clamp(x, lo, hi)
            cases.append({"x": enc(x), "min": bound(lo), "max": bound(hi), "out": enc(out)})
    xb = torch.tensor([True, False])
    for lo, hi in ((0, None), (0.5, None), (None, 0.25)):
        cases.append({"x": enc(xb), "min": bound(lo), "max": bound(hi),
                      "out": enc(torch.clamp(xb, lo, hi))})
    xf = torch.tensor([-2.0, 0.5, 3.0], dtype=torch.float32)
    for lo, hi in ((0, 1), (0.25, 2.5)):
        cases.append({"x": enc(xf), "min": bound(lo), "max": bound(hi),
                      "out": enc(torch.clamp(xf, lo, hi))})
    xd = xf.double()
    cases.append({"x": enc(xd), "min": bound(1), "max": bound(None),
                  "out": enc(torch.clamp(xd, 1))})
    return cases


def bce_cases():
    cases = []
    x0 = torch.tensor([[0.0, 0.0, 2.0, -1.5], [0.0, 3.0, -0.0, 0.7], [-20.0, 20.0, 0.0, -0.3]],
                      dtype=DT)
    y0 = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.3, 0.5, 0.9, 1.0], [0.0, 1.0, 0.25, 0.6]],
                      dtype=DT)
    pw = torch.tensor([2.0, 0.5, 3.0, 1.5], dtype=DT)
    w = torch.rand(3, 4, dtype=DT) + 0.5
    for use_pw in (False, True):
        for use_w in (False, True):
            for red in ("none", "mean", "sum"):
                x = x0.clone().requires_grad_()
                y = y0.clone().requires_grad_()
                out = F.binary_cross_entropy_with_logits(
                    x, y, weight=w if use_w else None, pos_weight=pw if use_pw else None,
                    reduction=red)
                g = torch.randn(out.shape, dtype=DT) if red == "none" else torch.tensor(1.5, dtype=DT)
                out.backward(g)
                cases.append({"x": enc(x), "y": enc(y), "pos_weight": enc(pw) if use_pw else None,
                              "weight": enc(w) if use_w else None, "reduction": red,
                              "grad_out": enc(g), "out": enc(out), "grad_x": enc(x.grad),
                              "grad_y": enc(y.grad)})
    return cases


def topk_cases():
    cases = []
    for shape, k, dim, largest in (([6], 3, 0, True), ([3, 5], 2, 1, True), ([3, 5], 2, 0, False),
                                   ([2, 3, 4], 3, -1, False), ([2, 3, 4], 1, 1, True)):
        x = torch.randperm(math.prod(shape), dtype=DT).reshape(shape) * 0.5 - 3  # no ties
        x.requires_grad_()
        v, i = torch.topk(x, k, dim, largest, True)
        g = torch.randn(v.shape, dtype=DT)
        v.backward(g)
        cases.append({"x": enc(x), "k": k, "dim": dim, "largest": largest, "values": enc(v),
                      "indices": enc(i), "grad_out": enc(g), "grad_x": enc(x.grad)})
    return cases


def reduce_cases():
    cases = []
    inputs = [torch.tensor([1.0, 3.0, 3.0], dtype=DT),
              torch.tensor([[2.0, -1.0, 2.0], [-1.0, 0.5, -1.0]], dtype=DT),
              torch.tensor([1.0, NAN, 3.0, NAN], dtype=DT),
              torch.tensor([[1.0, 3.0, 3.0], [NAN, 2.0, NAN]], dtype=DT),
              torch.tensor([[5.0, 5.0], [5.0, 5.0]], dtype=DT)]
    for x0 in inputs:
        for op in ("max", "min", "amax", "amin"):
            for dim in [None] + list(range(x0.dim())):
                x = x0.clone().requires_grad_()
                f = getattr(torch, op)
                idx = None
                if dim is None:
                    out = f(x)
                elif op in ("max", "min"):
                    out, idx = f(x, dim)
                else:
                    out = f(x, dim)
                g = torch.randn(out.shape, dtype=DT)
                out.backward(g)
                cases.append({"op": op, "dim": dim, "x": enc(x), "grad_out": enc(g),
                              "out": enc(out), "indices": enc(idx) if idx is not None else None,
                              "grad_x": enc(x.grad)})
    return cases


def binary_cases():
    a0 = torch.tensor([2.0, 1.0, 2.0, NAN, 1.0, NAN, -0.0, 0.0], dtype=DT)
    b0 = torch.tensor([1.0, 2.0, 2.0, 1.0, NAN, NAN, 0.0, -0.0], dtype=DT)
    cases = []
    for op in ("maximum", "minimum"):
        a = a0.clone().requires_grad_()
        b = b0.clone().requires_grad_()
        out = getattr(torch, op)(a, b)
        g = torch.randn(out.shape, dtype=DT)
        out.backward(g)
        cases.append({"op": op, "a": enc(a), "b": enc(b), "grad_out": enc(g), "out": enc(out),
                      "grad_a": enc(a.grad), "grad_b": enc(b.grad)})
    return cases


def main():
    data = {"torch_version": torch.__version__, "clamp": clamp_cases(), "bce": bce_cases(),
            "topk": topk_cases(), "reduce": reduce_cases(), "binary": binary_cases()}
    path = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data",
                        "golden_torch_diffs.json")
    with open(path, "w") as f:
        json.dump(data, f, indent=None, separators=(",", ":"), allow_nan=False)
        f.write("\n")


if __name__ == "__main__":
    main()
