#!/usr/bin/python3
"""Golden values for the GPT ops (tril/triu, masked_fill, cumsum, div rounding modes /
floor_divide, cross_entropy with class-probability targets) from PyTorch 1.13.

Run with Debian's torch:  /usr/bin/python3 tools/golden/gen_gpt_ops.py
Writes tests/data/golden_gpt_ops.json, read by tests/test_gpt_ops.cpp. Inputs are fixed here
(the test rebuilds the same ones from the JSON), float64; gradients are of sum(out * g) for the
listed upstream gradient g. multinomial has no golden (minidl's Philox stream is not torch's):
tests/test_gpt_ops.cpp checks its frequencies instead.
"""
import json
import os

import torch
import torch.nn.functional as F

F64 = torch.float64


def t(x):
    x = x.detach()
    if x.dtype == torch.bool:
        x = x.to(torch.int64)
    return {"data": x.flatten().tolist(), "shape": list(x.shape)}


def seq(*shape, scale=0.37, shift=-2.0):
    n = 1
    for s in shape:
        n *= s
    return (torch.arange(n, dtype=F64) * scale + shift).sin().mul(3).reshape(shape)


def grad_of(fn, inputs, g):
    ins = [i.clone().requires_grad_(True) for i in inputs]
    out = fn(*ins)
    out.backward(g)
    return out, [i.grad for i in ins]


cases = {}

# ---- tril / triu on a batch [2, 3, 4] and a 2-D [4, 3]
tri = []
for shape in ([2, 3, 4], [4, 3]):
    x = seq(*shape)
    g = seq(*shape, scale=0.53, shift=0.3)
    for name, fn in (("tril", torch.tril), ("triu", torch.triu)):
        for diag in (0, 1, -1, 5, -5):
            out, (gx,) = grad_of(lambda a: fn(a, diag), [x], g)
            tri.append({"op": name, "diagonal": diag, "x": t(x), "g": t(g), "out": t(out),
                        "grad_x": t(gx)})
cases["tri"] = tri

# ---- masked_fill: mask [3, 4] broadcast to x [2, 3, 4]; scalar and 0-d tensor values
x = seq(2, 3, 4)
g = seq(2, 3, 4, scale=0.41, shift=1.1)
mask = (seq(3, 4, scale=0.77, shift=0.5) > 0)
mf = []
for value in (-1.5, float(-1e9)):
    out, (gx,) = grad_of(lambda a: a.masked_fill(mask, value), [x], g)
    mf.append({"value": value, "x": t(x), "mask": t(mask), "g": t(g), "out": t(out),
               "grad_x": t(gx)})
v = torch.tensor(0.75, dtype=F64)
out, (gx, gv) = grad_of(lambda a, b: a.masked_fill(mask, b), [x, v], g)
mf.append({"value": 0.75, "tensor_value": True, "x": t(x), "mask": t(mask), "g": t(g),
           "out": t(out), "grad_x": t(gx), "grad_value": t(gv)})
cases["masked_fill"] = mf

# ---- cumsum: float dims 0, 1, -1 with gradients; int64 and bool inputs (-> int64)
x = seq(2, 3, 4)
g = seq(2, 3, 4, scale=0.29, shift=-0.7)
cs = []
for dim in (0, 1, 2, -1, -3):
    out, (gx,) = grad_of(lambda a: torch.cumsum(a, dim), [x], g)
    cs.append({"dim": dim, "x": t(x), "g": t(g), "out": t(out), "grad_x": t(gx)})
xi = torch.tensor([[3, -7, 2, 0, 5], [-1, -2, 9, 4, -6]], dtype=torch.int32)
cs_int = {"x": t(xi), "out_dim1": t(torch.cumsum(xi, 1)), "out_dim0": t(torch.cumsum(xi, 0)),
          "out_dtype": str(torch.cumsum(xi, 1).dtype)}
xb = torch.tensor([True, False, True, True, False, True])
cs_bool = {"x": t(xb), "out": t(torch.cumsum(xb, 0)), "out_dtype": str(torch.cumsum(xb, 0).dtype)}
cases["cumsum"] = {"float": cs, "int32": cs_int, "bool": cs_bool}

# ---- div with rounding modes, floor_divide
a = torch.tensor([7.0, -7.0, 7.5, -7.5, 0.3, -0.3, 1e-3, 5.0, -5.0, 0.0, -0.0, 2.5], dtype=F64)
b = torch.tensor([2.0, 2.0, -2.0, -2.0, 0.1, 0.1, 3.0, -0.5, 0.25, 3.0, 3.0, -1.25], dtype=F64)
ai = torch.tensor([7, -7, 7, -7, 0, 9, -9, 1, -1, 100], dtype=torch.int64)
bi = torch.tensor([2, 2, -2, -2, 3, 3, 3, -5, 5, -7], dtype=torch.int64)
dv = {"a": t(a), "b": t(b), "ai": t(ai), "bi": t(bi)}
for mode in ("trunc", "floor"):
    dv["float_" + mode] = t(torch.div(a, b, rounding_mode=mode))
    dv["int_" + mode] = t(torch.div(ai, bi, rounding_mode=mode))
    dv["int_" + mode + "_dtype"] = str(torch.div(ai, bi, rounding_mode=mode).dtype)
    dv["int_scalar_" + mode] = t(torch.div(ai, -3, rounding_mode=mode))
    dv["float_scalar_" + mode] = t(torch.div(a, 0.7, rounding_mode=mode))
dv["floor_divide"] = t(torch.floor_divide(a, b))
ga, gb = grad_of(lambda p, q: torch.div(p, q, rounding_mode="floor"), [a, b],
                 torch.ones(12, dtype=F64))[1]
dv["grad_a_floor"], dv["grad_b_floor"] = t(ga), t(gb)
cases["div"] = dv

# ---- cross_entropy with class-probability targets
ce = []
for shape in ([3, 5], [2, 3, 2, 2], [4]):
    logits = seq(*shape, scale=0.61, shift=0.2)
    cdim = 0 if len(shape) == 1 else 1
    target = torch.softmax(seq(*shape, scale=0.83, shift=-1.3), cdim)
    for reduction in ("none", "mean", "sum"):
        for ls in (0.0, 0.2):
            fn = lambda lo, ta: F.cross_entropy(lo, ta, reduction=reduction, label_smoothing=ls)
            out0 = fn(logits, target)
            g = seq(*out0.shape, scale=0.47, shift=0.9) if out0.dim() > 0 else torch.tensor(
                1.3, dtype=F64)
            out, (gl, gt) = grad_of(fn, [logits, target], g)
            ce.append({"reduction": reduction, "label_smoothing": ls, "logits": t(logits),
                       "target": t(target), "g": t(g), "out": t(out), "grad_logits": t(gl),
                       "grad_target": t(gt)})
cases["cross_entropy_prob"] = ce

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data",
                    "golden_gpt_ops.json")
with open(path, "w") as f:
    json.dump({"torch": torch.__version__, "cases": cases}, f, indent=None, separators=(",", ":"))
print("wrote", os.path.normpath(path))
