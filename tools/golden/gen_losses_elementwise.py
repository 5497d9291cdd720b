#!/usr/bin/python3
"""Golden values for the element-wise losses (F.l1_loss, F.smooth_l1_loss, F.huber_loss,
F.binary_cross_entropy, F.mse_loss) in f64: each reduction, the loss and the input gradient of
sum(loss * gout) (reduction none) or loss (mean/sum); broadcasting targets included.

Run with Debian's torch:  /usr/bin/python3 tools/golden/gen_losses_elementwise.py
Writes tests/data/golden_losses_elementwise.json, read by tests/test_loss_elementwise.cpp.
"""
import json
import os
import warnings

import torch
import torch.nn.functional as F

torch.manual_seed(77)
DT = torch.float64


def enc(t):
    t = t.detach()
    return {"shape": list(t.shape), "data": [float("%.17g" % v) for v in t.reshape(-1).tolist()]}


def case(name, fn, x, y, reduction, **kw):
    x = x.clone().requires_grad_(True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = fn(x, y, reduction=reduction, **kw)
    gout = torch.randn(out.shape, dtype=DT) if reduction == "none" else torch.ones((), dtype=DT)
    (out * gout).sum().backward()
    rec = {"op": name, "reduction": reduction, "x": enc(x), "y": enc(y), "gout": enc(gout),
           "out": enc(out), "grad_x": enc(x.grad)}
    rec.update({k: (enc(v) if torch.is_tensor(v) else v) for k, v in kw.items()})
    return rec


def main():
    x = torch.randn(3, 4, dtype=DT) * 1.5
    y = torch.randn(3, 4, dtype=DT) * 1.5
    x[0, 0] = y[0, 0] + 0.25  # inside every beta/delta below
    res = []
    for red in ["none", "mean", "sum"]:
        res.append(case("mse_loss", F.mse_loss, x, y, red))
        res.append(case("l1_loss", F.l1_loss, x, y, red))
        res.append(case("smooth_l1_loss", F.smooth_l1_loss, x, y, red, beta=0.5))
        res.append(case("huber_loss", F.huber_loss, x, y, red, delta=0.7))
    res.append(case("smooth_l1_loss", F.smooth_l1_loss, x, y, "mean", beta=1.0))
    res.append(case("smooth_l1_loss", F.smooth_l1_loss, x, y, "mean", beta=0.0))
    # broadcasting target (the trap): input [4,1], target [4] -> [4,4]
    xb = torch.randn(4, 1, dtype=DT)
    yb = torch.randn(4, dtype=DT)
    res.append(case("mse_loss", F.mse_loss, xb, yb, "mean"))
    res.append(case("l1_loss", F.l1_loss, xb, yb, "mean"))
    p = torch.sigmoid(torch.randn(3, 4, dtype=DT))
    t = torch.rand(3, 4, dtype=DT)
    w = torch.rand(4, dtype=DT) + 0.5
    for red in ["none", "mean", "sum"]:
        res.append(case("binary_cross_entropy", F.binary_cross_entropy, p, t, red))
    res.append(case("binary_cross_entropy", F.binary_cross_entropy, p, t, "mean", weight=w))
    path = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data",
                        "golden_losses_elementwise.json")
    with open(path, "w") as f:
        json.dump(res, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
