#!/usr/bin/python3
"""Golden values for scaled_dot_product_attention with PyTorch 2.x semantics (bool mask: true =
attend; float mask added; is_causal top-left aligned: key j <= query i; scale default
1/sqrt(E)). torch 1.13 has no F.scaled_dot_product_attention (it arrived in 2.0), so the
reference is the explicit formula softmax(q k^T * scale + mask) v in f64, with torch's autograd
for the gradients of sum(out * gout).

Run with Debian's torch:  /usr/bin/python3 tools/golden/gen_sdpa.py
Writes tests/data/golden_sdpa.json (every tensor is {"shape": [...], "data": [...]}).
Read by tests/test_sdpa.cpp.
"""
import json
import math
import os

import torch

torch.manual_seed(2468)
DT = torch.float64


def enc(t):
    t = t.detach()
    if t.dtype == torch.bool:
        data = [1 if v else 0 for v in t.reshape(-1).tolist()]
    else:
        data = [float("%.15g" % v) for v in t.reshape(-1).tolist()]
    return {"shape": list(t.shape), "data": data}


def sdpa(q, k, v, mask=None, is_causal=False, scale=None):
    L, S = q.shape[-2], k.shape[-2]
    sc = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ k.transpose(-2, -1) * sc
    if is_causal:
        keep = torch.ones(L, S, dtype=torch.bool).tril()
        s = s.masked_fill(~keep, float("-inf"))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
    return torch.softmax(s, -1) @ v


def case(name, qs, ks, vs, mask=None, is_causal=False, scale=None):
    q = torch.randn(*qs, dtype=DT, requires_grad=True)
    k = torch.randn(*ks, dtype=DT, requires_grad=True)
    v = torch.randn(*vs, dtype=DT, requires_grad=True)
    out = sdpa(q, k, v, mask, is_causal, scale)
    gout = torch.randn_like(out)
    (out * gout).sum().backward()
    c = {"name": name, "q": enc(q), "k": enc(k), "v": enc(v), "out": enc(out),
         "gout": enc(gout), "grad_q": enc(q.grad), "grad_k": enc(k.grad),
         "grad_v": enc(v.grad), "is_causal": is_causal}
    if mask is not None:
        c["mask"] = enc(mask)
    if scale is not None:
        c["scale"] = scale
    return c


def main():
    bmask = torch.rand(5, 7) < 0.6
    bmask[:, 0] = True  # every query attends at least one key
    fmask = torch.randn(2, 1, 5, 7, dtype=DT)
    fmask[0, 0, 1, 3] = -1e30  # a masked-out key (JSON has no -inf)
    cases = [
        case("plain", (2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 6)),
        case("causal", (1, 2, 9, 16), (1, 2, 9, 16), (1, 2, 9, 16), is_causal=True),
        case("causal_l_lt_s", (2, 5, 4), (2, 7, 4), (2, 7, 3), is_causal=True),
        case("bool_mask", (2, 5, 8), (2, 7, 8), (2, 7, 8), mask=bmask),
        case("float_mask", (2, 2, 5, 4), (2, 2, 7, 4), (2, 2, 7, 5), mask=fmask),
        case("scale", (3, 6, 8), (3, 6, 8), (3, 6, 8), is_causal=True, scale=0.3),
    ]
    path = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "golden_sdpa.json")
    with open(path, "w") as f:
        json.dump({"torch": torch.__version__, "cases": cases}, f)
    print("wrote", os.path.normpath(path))


if __name__ == "__main__":
    main()
